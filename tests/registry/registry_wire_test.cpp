// The registry wire protocol as src/registry/protocol.hpp documents it, spoken over raw sockets:
// the replies of a well-formed session, the error frame of every kind of malformed request (and
// that the server then closes only that connection and keeps serving), the deadlines for silent
// peers, a seeded fuzzer, and the client's reading of error frames from a scripted server.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/registry/client.hpp"
#include "dfi/registry/limits.hpp"
#include "dfi/registry/server.hpp"
#include "registry/registry_test_util.hpp"

namespace dfi::registry {
namespace {

using namespace std::chrono_literals;
using namespace testing;  // dfi::registry::testing
using Json = nlohmann::json;

// A 4-byte big-endian length prefix alone.
std::string header(std::uint32_t length) {
  return {static_cast<char>(length >> 24), static_cast<char>((length >> 16) & 0xff),
          static_cast<char>((length >> 8) & 0xff), static_cast<char>(length & 0xff)};
}

// Expects `body` to be exactly the documented error frame {"ok":false,"code":C,"error":M}.
void expect_error_frame(const std::optional<std::string>& body, Errc code,
                        const std::string& message) {
  ASSERT_TRUE(body.has_value()) << "no reply frame";
  const Json reply = Json::parse(*body, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(reply.is_object()) << *body;
  EXPECT_EQ(reply,
            (Json{{"ok", false}, {"code", std::string(errc_name(code))}, {"error", message}}))
      << *body;
}

// Expects `body` to be the JSON object `expected` (key order free).
void expect_reply(const std::optional<std::string>& body, std::string_view expected) {
  ASSERT_TRUE(body.has_value()) << "no reply frame";
  EXPECT_EQ(Json::parse(*body, nullptr, false), Json::parse(expected)) << *body;
}

// ---- well-formed requests ---------------------------------------------------------------------

// Every request and reply of protocol.hpp, byte for byte as a third-party client would see them.
// A held members watch is answered as soon as the membership changes: a member joining, and
// the connection of a member closing.
TEST(RegistryWire, MembersWatchIsAnsweredWhenTheMembershipChanges) {
  Server server(ServerOptions{});
  RawConnection watcher(server.port());
  watcher.send_frame(kHello);
  expect_reply(watcher.read_frame(), R"({"ok":true,"version":1})");
  watcher.send_frame(R"({"op":"members","since":1,"timeout_ms":30000})");
  {
    RawConnection member(server.port());
    member.send_frame(kHello);
    expect_reply(member.read_frame(), R"({"ok":true,"version":1})");
    member.send_frame(R"({"op":"join","rank":3,"info":""})");
    expect_reply(member.read_frame(), R"({"ok":true})");
    expect_reply(watcher.read_frame(5s), R"({"ok":true,"version":2,"members":[{"rank":3,"info":""}]})");
    watcher.send_frame(R"({"op":"members","since":2,"timeout_ms":30000})");
  }  // the member's connection closes
  expect_reply(watcher.read_frame(5s), R"({"ok":true,"version":3,"members":[]})");
}

TEST(RegistryWire, WellFormedSessionGetsTheDocumentedReplies) {
  Server server(ServerOptions{});
  RawConnection raw(server.port());
  raw.send_frame(kHello);
  expect_reply(raw.read_frame(), R"({"ok":true,"version":1})");

  raw.send_frame(R"({"op":"publish","name":"k","value":"AAEC"})");  // replace is optional
  expect_reply(raw.read_frame(), R"({"ok":true})");
  // Request errors keep the connection open.
  raw.send_frame(R"({"op":"publish","name":"k","value":"AAMD","replace":false})");
  expect_error_frame(raw.read_frame(), Errc::already_exists, "registry: record 'k' already exists");
  raw.send_frame(R"({"op":"publish","name":"","value":""})");
  expect_error_frame(raw.read_frame(), Errc::invalid_argument, "registry: name is empty");
  raw.send_frame(R"({"op":"lookup","name":"k"})");
  expect_reply(raw.read_frame(), R"({"ok":true,"value":"AAEC"})");
  // Keys a request does not use are ignored; key order is free.
  raw.send_frame(R"({"name":"k","future":[1,{"x":null}],"op":"lookup"})");
  expect_reply(raw.read_frame(), R"({"ok":true,"value":"AAEC"})");
  raw.send_frame(R"({"op":"lookup","name":"missing"})");
  expect_error_frame(raw.read_frame(), Errc::not_found, "registry: no record 'missing'");
  raw.send_frame(R"({"op":"wait","name":"k","timeout_ms":0})");
  expect_reply(raw.read_frame(), R"({"ok":true,"value":"AAEC"})");
  raw.send_frame(R"({"op":"wait","name":"missing","timeout_ms":0})");
  expect_error_frame(raw.read_frame(), Errc::timeout,
                     "registry: record 'missing' not published within 0 ms");
  raw.send_frame(R"({"op":"wait","name":"missing","timeout_ms":-1})");
  expect_error_frame(raw.read_frame(), Errc::invalid_argument,
                     "registry: wait for 'missing' with negative timeout");
  raw.send_frame(R"({"op":"join","rank":5,"info":"aGk="})");
  expect_reply(raw.read_frame(), R"({"ok":true})");
  raw.send_frame(R"({"op":"join","rank":-1,"info":""})");
  expect_error_frame(raw.read_frame(), Errc::invalid_argument, "registry: rank -1 is out of range");
  raw.send_frame(R"({"op":"members"})");
  expect_reply(raw.read_frame(), R"({"ok":true,"version":2,"members":[{"rank":5,"info":"aGk="}]})");
  // A watch of another version answers at once; one of the current version waits out its
  // timeout and answers unchanged; a negative timeout is refused.
  raw.send_frame(R"({"op":"members","since":1,"timeout_ms":10000})");
  expect_reply(raw.read_frame(), R"({"ok":true,"version":2,"members":[{"rank":5,"info":"aGk="}]})");
  raw.send_frame(R"({"op":"members","since":2,"timeout_ms":50})");
  expect_reply(raw.read_frame(), R"({"ok":true,"version":2,"members":[{"rank":5,"info":"aGk="}]})");
  raw.send_frame(R"({"op":"members","since":2,"timeout_ms":-1})");
  expect_error_frame(raw.read_frame(), Errc::invalid_argument, "registry: members watch with negative timeout");
  raw.send_frame(R"({"op":"barrier","name":"b","count":1,"timeout_ms":1000})");
  expect_reply(raw.read_frame(), R"({"ok":true})");
  raw.send_frame(R"({"op":"barrier","name":"b","count":0,"timeout_ms":1000})");
  expect_error_frame(
      raw.read_frame(), Errc::invalid_argument,
      "registry: barrier 'b' count 0 must be 1.." + std::to_string(kDefaultMaxConnections));
  raw.send_frame(R"({"op":"remove","name":"k"})");
  expect_reply(raw.read_frame(), R"({"ok":true})");
  raw.send_frame(R"({"op":"remove","name":"k"})");
  expect_error_frame(raw.read_frame(), Errc::not_found, "registry: no record 'k'");

  // Pipelined: three requests in one write, three replies in order.
  raw.send_bytes(frame(R"({"op":"publish","name":"p","value":"eA=="})") +
                 frame(R"({"op":"lookup","name":"p"})") + frame(R"({"op":"remove","name":"p"})"));
  expect_reply(raw.read_frame(), R"({"ok":true})");
  expect_reply(raw.read_frame(), R"({"ok":true,"value":"eA=="})");
  expect_reply(raw.read_frame(), R"({"ok":true})");

  // A wait held by one connection is answered by another's publish.
  RawConnection waiter(server.port());
  waiter.send_frame(kHello);
  expect_reply(waiter.read_frame(), R"({"ok":true,"version":1})");
  waiter.send_frame(R"({"op":"wait","name":"later","timeout_ms":5000})");
  raw.send_frame(R"({"op":"publish","name":"later","value":"AA=="})");
  expect_reply(raw.read_frame(), R"({"ok":true})");
  expect_reply(waiter.read_frame(), R"({"ok":true,"value":"AA=="})");

  // A clean close after complete requests gets no error frame.
  raw.shutdown_sending();
  EXPECT_EQ(raw.read_frame(), std::nullopt);
  EXPECT_TRUE(raw.closed_by_peer());
}

// ---- malformed requests -----------------------------------------------------------------------

struct Malformed {
  std::string what;     // the case, for failure messages
  bool hello_first;     // send a valid hello (and read its reply) first
  std::string bytes;    // then this
  bool half_close;      // then shut down our sending side
  std::string message;  // the protocol error message the server must answer with
};

std::vector<Malformed> malformed_cases() {
  const std::string lookup = frame(R"({"op":"lookup","name":"before"})");  // 4 + 31 bytes
  const std::string deep_open(200000, '[');
  const std::string nested = std::string(100000, '[') + std::string(100000, ']');
  const std::string long_op(200, 'o');
  return {
      // Framing.
      {"hello over its limit", false, header(kMaxHelloBytes + 1), false,
       "registry: frame of 65537 bytes exceeds the limit of 65536 bytes"},
      {"4 GiB length", false, std::string(4, '\xff'), false,
       "registry: frame of 4294967295 bytes exceeds the limit of 65536 bytes"},
      {"request over its limit", true, header(kMaxRequestBytes + 1), false,
       "registry: frame of 1048577 bytes exceeds the limit of 1048576 bytes"},
      {"closed inside a header", true, std::string("\0\0", 2), true,
       "registry: connection closed inside a frame (2 of 4 header bytes)"},
      {"closed inside a body", true, lookup.substr(0, 12), true,
       "registry: connection closed inside a frame (8 of 31 body bytes)"},
      {"closed inside the hello", false, frame(kHello).substr(0, 10), true,
       "registry: connection closed inside a frame (6 of 37 body bytes)"},
      {"length shorter than the body", true, header(5) + R"({"op":"members"})", false,
       "registry: frame body is not valid JSON (it ends early, after 5 bytes); expected one JSON "
       "object"},
      // Body.
      {"empty body", false, frame(""), false,
       "registry: frame body is empty; expected one JSON object"},
      {"not JSON", false, frame("this is not json"), false,
       "registry: frame body is not valid JSON (error at byte 2 of 16); expected one JSON object"},
      {"text after the object", false, frame(R"({"op":"hello"} x)"), false,
       "registry: frame body is not valid JSON (error at byte 16 of 16); expected one JSON "
       "object"},
      {"invalid UTF-8", false, frame("{\"op\":\"\xff\xfe\"}"), false,
       "registry: frame body is not valid JSON (error at byte 8 of 11); expected one JSON object"},
      {"array", false, frame("[1,2,3]"), false,
       "registry: frame body is an array; expected one JSON object"},
      {"string", false, frame(R"("hello")"), false,
       "registry: frame body is a string; expected one JSON object"},
      {"unterminated nesting", true, frame(deep_open), false,
       "registry: frame body is not valid JSON (it ends early, after 200000 bytes); expected "
       "one JSON object"},
      // The op and the hello.
      {"no op", false, frame(R"({"token":""})"), false, "registry: request has no field 'op'"},
      {"op null", false, frame(R"({"op":null})"), false,
       "registry: field 'op' of the request is null, expected a string"},
      {"op number", true, frame(R"({"op":42})"), false,
       "registry: field 'op' of the request is an integer, expected a string"},
      {"request before hello", false, lookup, false,
       "registry: expected 'hello' as the first request, got 'lookup'"},
      {"hello without version", false, frame(R"({"op":"hello","token":""})"), false,
       "registry: request 'hello' has no field 'version'"},
      {"hello version text", false, frame(R"({"op":"hello","token":"","version":"1"})"), false,
       "registry: field 'version' of request 'hello' is a string, expected an integer"},
      {"hello of another version", false, frame(R"({"op":"hello","token":"","version":99})"), false,
       "registry: client speaks protocol version 99, this server speaks 1"},
      {"hello without token", false, frame(R"({"op":"hello","version":1})"), false,
       "registry: request 'hello' has no field 'token'"},
      {"hello token number", false, frame(R"({"op":"hello","token":7,"version":1})"), false,
       "registry: field 'token' of request 'hello' is an integer, expected a string"},
      {"second hello", true, frame(kHello), false, "registry: second 'hello' on one connection"},
      {"unknown op", true, frame(R"({"op":"frobnicate"})"), false,
       "registry: unknown op 'frobnicate'"},
      {"long unknown op", true, frame(R"({"op":")" + long_op + R"("})"), false,
       "registry: unknown op '" + long_op.substr(0, 80) + "...'"},
      // Fields.
      {"publish without name", true, frame(R"({"op":"publish","value":""})"), false,
       "registry: request 'publish' has no field 'name'"},
      {"publish name number", true, frame(R"({"op":"publish","name":1,"value":""})"), false,
       "registry: field 'name' of request 'publish' is an integer, expected a string"},
      {"publish without value", true, frame(R"({"op":"publish","name":"x"})"), false,
       "registry: request 'publish' has no field 'value'"},
      {"publish value not base64", true, frame(R"({"op":"publish","name":"x","value":"!!"})"),
       false, "registry: field 'value' of request 'publish' is not canonical padded base64"},
      {"publish value not canonical", true, frame(R"({"op":"publish","name":"x","value":"AB=="})"),
       false, "registry: field 'value' of request 'publish' is not canonical padded base64"},
      {"publish replace text", true,
       frame(R"({"op":"publish","name":"x","value":"AA==","replace":"yes"})"), false,
       "registry: field 'replace' of request 'publish' is a string, expected a boolean"},
      {"lookup without name", true, frame(R"({"op":"lookup"})"), false,
       "registry: request 'lookup' has no field 'name'"},
      {"lookup name nested deep", true, frame(R"({"op":"lookup","name":)" + nested + "}"), false,
       "registry: field 'name' of request 'lookup' is an array, expected a string"},
      {"wait without timeout", true, frame(R"({"op":"wait","name":"x"})"), false,
       "registry: request 'wait' has no field 'timeout_ms'"},
      {"wait timeout fraction", true, frame(R"({"op":"wait","name":"x","timeout_ms":1.5})"), false,
       "registry: field 'timeout_ms' of request 'wait' is a floating-point number, expected an "
       "integer"},
      {"wait_all without names", true, frame(R"({"op":"wait_all","timeout_ms":1})"), false,
       "registry: request 'wait_all' has no field 'names'"},
      {"wait_all names string", true, frame(R"({"op":"wait_all","names":"x","timeout_ms":1})"), false,
       "registry: field 'names' of request 'wait_all' is a string, expected an array"},
      {"wait_all name number", true, frame(R"({"op":"wait_all","names":["x",2],"timeout_ms":1})"), false,
       "registry: an entry of field 'names' of request 'wait_all' is an integer, expected a string"},
      {"wait_all publisher text", true,
       frame(R"({"op":"wait_all","names":["x"],"publishers":["0"],"timeout_ms":1})"), false,
       "registry: an entry of field 'publishers' of request 'wait_all' is a string, expected a rank (an "
       "integer >= -1)"},
      {"wait_all without timeout", true, frame(R"({"op":"wait_all","names":["x"]})"), false,
       "registry: request 'wait_all' has no field 'timeout_ms'"},
      {"remove name boolean", true, frame(R"({"op":"remove","name":true})"), false,
       "registry: field 'name' of request 'remove' is a boolean, expected a string"},
      {"join rank fraction", true, frame(R"({"op":"join","rank":1.5,"info":""})"), false,
       "registry: field 'rank' of request 'join' is a floating-point number, expected an "
       "integer"},
      {"join without info", true, frame(R"({"op":"join","rank":1})"), false,
       "registry: request 'join' has no field 'info'"},
      {"join info object", true, frame(R"({"op":"join","rank":1,"info":{}})"), false,
       "registry: field 'info' of request 'join' is an object, expected a string"},
      {"barrier count beyond 64 bits", true,
       frame(R"({"op":"barrier","name":"b","count":18446744073709551615,"timeout_ms":1})"), false,
       "registry: field 'count' of request 'barrier' is an integer outside the signed 64-bit "
       "range, expected an integer"},
      {"barrier without timeout", true, frame(R"({"op":"barrier","name":"b","count":1})"), false,
       "registry: request 'barrier' has no field 'timeout_ms'"},
  };
}

// Sends one malformed case on its own connection; expects its error frame, then a close.
void expect_rejected(std::uint16_t port, const Malformed& c) {
  SCOPED_TRACE(c.what);
  RawConnection raw(port);
  if (c.hello_first) {
    raw.send_frame(kHello);
    expect_reply(raw.read_frame(), R"({"ok":true,"version":1})");
  }
  raw.send_bytes(c.bytes);
  if (c.half_close) raw.shutdown_sending();
  expect_error_frame(raw.read_frame(), Errc::protocol, c.message);
  EXPECT_TRUE(raw.closed_by_peer()) << "the server kept a broken connection open";
}

TEST(RegistryWire, EveryMalformedRequestGetsItsErrorFrameAndOnlyItsConnectionCloses) {
  Server server(ServerOptions{});
  auto bystander = connect_to(server);  // connected throughout: must be unaffected
  bystander->publish("before", "1");
  bystander->join(7, "bystander");

  for (const Malformed& c : malformed_cases()) expect_rejected(server.port(), c);

  {  // random bytes, then hang up without reading: nothing to assert but survival
    std::mt19937 rng(42);
    std::string noise(4096, '\0');
    for (char& ch : noise) ch = static_cast<char>(rng() & 0xff);
    RawConnection raw(server.port());
    raw.send_bytes(noise);
  }
  {  // half a frame, then a full close: the error frame goes nowhere, the server goes on
    RawConnection raw(server.port());
    raw.send_frame(kHello);
    ASSERT_TRUE(raw.read_frame().has_value());
    raw.send_bytes(frame(R"({"op":"lookup","name":"before"})").substr(0, 12));
  }

  EXPECT_EQ(bystander->lookup("before"), "1");
  EXPECT_EQ(bystander->members(), (std::map<int, std::string>{{7, "bystander"}}));
  auto fresh = connect_to(server);
  fresh->publish("after", "2");
  EXPECT_EQ(fresh->lookup("after"), "2");
  EXPECT_EQ(fresh->lookup("before"), "1");
}

// A malformed request ends the connection's registry presence like a close does.
TEST(RegistryWire, MalformedRequestEndsTheMembershipsOfItsConnection) {
  Server server(ServerOptions{});
  RawConnection raw(server.port());
  raw.send_frame(kHello);
  ASSERT_TRUE(raw.read_frame().has_value());
  raw.send_frame(R"({"op":"join","rank":3,"info":""})");
  expect_reply(raw.read_frame(), R"({"ok":true})");
  raw.send_frame(R"({"op":"join","rank":"4","info":""})");
  expect_error_frame(raw.read_frame(), Errc::protocol,
                     "registry: field 'rank' of request 'join' is a string, expected an integer");
  // The membership ends in the loop pass that sent the error frame, so a request made after the
  // frame arrived sees it gone.
  auto observer = connect_to(server);
  EXPECT_EQ(observer->members(), (std::map<int, std::string>{}));
  EXPECT_TRUE(raw.closed_by_peer());
}

// Peers that go silent get their error frame at the deadline, not earlier and not never.
TEST(RegistryWire, SilentPeersAreAnsweredAtTheirDeadline) {
  constexpr auto kShort = 200ms;
  {
    Server server(ServerOptions{.hello_timeout = kShort, .frame_timeout = 10s});
    for (const std::string& sent : {std::string(), frame(kHello).substr(0, 10)}) {
      SCOPED_TRACE("sent " + std::to_string(sent.size()) + " bytes");
      const auto start = Clock::now();  // before connecting: the deadline runs from the accept
      RawConnection raw(server.port());
      raw.send_bytes(sent);
      expect_error_frame(raw.read_frame(3s), Errc::protocol, "registry: no hello within 200 ms");
      EXPECT_GE(Clock::now() - start, kShort);
      EXPECT_TRUE(raw.closed_by_peer());
    }
  }
  Server server(ServerOptions{.hello_timeout = 10s, .frame_timeout = kShort});
  const std::string lookup = frame(R"({"op":"lookup","name":"x"})");  // 4 + 26 bytes
  const std::string members = frame(R"({"op":"members"})");
  struct Case {
    std::string sent;
    bool complete_first;  // `sent` begins with a complete members request
    std::string message;
  };
  const std::vector<Case> cases = {
      {lookup.substr(0, 2), false, "registry: frame incomplete after 200 ms (2 of 4 header bytes)"},
      {lookup.substr(0, 10), false, "registry: frame incomplete after 200 ms (6 of 26 body bytes)"},
      // The deadline belongs to the incomplete frame, not to the connection.
      {members + lookup.substr(0, 5), true,
       "registry: frame incomplete after 200 ms (1 of 26 body bytes)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    RawConnection raw(server.port());
    raw.send_frame(kHello);
    expect_reply(raw.read_frame(), R"({"ok":true,"version":1})");
    const auto start = Clock::now();
    raw.send_bytes(c.sent);
    if (c.complete_first) expect_reply(raw.read_frame(), R"({"ok":true,"version":1,"members":[]})");
    expect_error_frame(raw.read_frame(3s), Errc::protocol, c.message);
    EXPECT_GE(Clock::now() - start, kShort);
    EXPECT_TRUE(raw.closed_by_peer());
  }
  auto client = connect_to(server);  // still serving
  client->publish("x", "y");
  EXPECT_EQ(client->lookup("x"), "y");
}

TEST(RegistryWire, ServerOptionsRejectNonPositiveDeadlines) {
  for (const ServerOptions& options :
       {ServerOptions{.hello_timeout = 0ms}, ServerOptions{.frame_timeout = -1ms}}) {
    const Error e = capture_error([&] { Server server(options); });
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_TRUE(contains(e.what(), "must be positive")) << e.what();
  }
}

// A small, seeded protocol fuzzer: mutated requests after a valid hello. Every frame the server
// sends must be a documented reply; once the peer half-closes the server must close the
// connection, and it must keep serving others.
TEST(RegistryWire, MutatedRequestsGetDocumentedRepliesAndNeverBreakTheServer) {
  Server server(ServerOptions{});
  auto bystander = connect_to(server);
  bystander->publish("kept", "safe");
  const std::vector<std::string> seeds = {
      R"({"op":"publish","name":"f","value":"AAEC","replace":true})",
      R"({"op":"lookup","name":"kept"})",
      R"({"op":"wait","name":"f","timeout_ms":50})",
      R"({"op":"remove","name":"f"})",
      R"({"op":"join","rank":3,"info":"aGk="})",
      R"({"op":"members"})",
      R"({"op":"barrier","name":"fz","count":2,"timeout_ms":50})",
  };
  std::mt19937 rng(1234);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  constexpr int kCases = 1000;
  int protocol_errors = 0;
  for (int i = 0; i < kCases; ++i) {
    std::string body = seeds[pick(seeds.size())];
    switch (pick(4)) {
      case 0:  // overwrite a few bytes
        for (std::size_t k = 0, n = 1 + pick(3); k < n; ++k) {
          body[pick(body.size())] = static_cast<char>(rng() & 0xff);
        }
        break;
      case 1:
        body.resize(pick(body.size()));
        break;  // truncate
      case 2:
        body.insert(pick(body.size()), body.substr(pick(body.size())));
        break;
      case 3:
        body.insert(pick(body.size()), 1, "{}[]\",:0-e\\"[pick(11)]);
        break;
    }
    std::string bytes = frame(body);
    if (pick(8) == 0) bytes[3] = static_cast<char>(rng() & 0xff);  // lie about the length
    SCOPED_TRACE("case " + std::to_string(i) + ": " + body);
    RawConnection raw(server.port());
    raw.send_frame(kHello);
    raw.send_bytes(bytes);
    raw.shutdown_sending();
    expect_reply(raw.read_frame(), R"({"ok":true,"version":1})");
    while (std::optional<std::string> reply = raw.read_frame()) {
      const Json json = Json::parse(*reply, nullptr, false);
      ASSERT_TRUE(json.is_object()) << *reply;
      ASSERT_TRUE(json.contains("ok") && json["ok"].is_boolean()) << *reply;
      if (json["ok"].get<bool>()) continue;
      ASSERT_TRUE(json.contains("code") && json["code"].is_string()) << *reply;
      ASSERT_TRUE(json.contains("error") && json["error"].is_string()) << *reply;
      EXPECT_EQ(json.size(), 3u) << *reply;
      const std::string code = json["code"];
      EXPECT_TRUE(code == "protocol" || code == "invalid_argument" || code == "not_found" ||
                  code == "already_exists" || code == "timeout")
          << *reply;
      EXPECT_EQ(json["error"].get<std::string>().rfind("registry: ", 0), 0u) << *reply;
      if (code == "protocol") ++protocol_errors;
    }
    ASSERT_TRUE(raw.closed_by_peer()) << "server kept a finished connection open";
  }
  EXPECT_GT(protocol_errors, kCases / 4) << "the mutations hardly produced malformed requests";
  EXPECT_EQ(bystander->lookup("kept"), "safe");
  auto fresh = connect_to(server);
  fresh->publish("still", "serving");
  EXPECT_EQ(fresh->lookup("still"), "serving");
}

// ---- the client's side ------------------------------------------------------------------------

// A registry stand-in on 127.0.0.1 that accepts one connection and answers the frames it
// receives with `replies`, in order, recording the requests; then it closes.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<std::string> replies)
      : listen_fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sockaddr generic{};
    std::memcpy(&generic, &address, sizeof(address));
    EXPECT_EQ(::bind(listen_fd_, &generic, sizeof(address)), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(listen_fd_, 1), 0) << std::strerror(errno);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::getsockname(listen_fd_, &generic, &length), 0);
    std::memcpy(&address, &generic, sizeof(address));
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this, replies = std::move(replies)] { serve(replies); });
  }
  ~ScriptedServer() {
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The request bodies received; waits until the script ends or the client hung up.
  const std::vector<std::string>& requests() {
    if (thread_.joinable()) thread_.join();
    return requests_;
  }

 private:
  void serve(const std::vector<std::string>& replies) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) {
      ADD_FAILURE() << "no client connected to the scripted server";
      return;
    }
    RawConnection peer =
        RawConnection::adopt(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    for (const std::string& reply : replies) {
      std::optional<std::string> request = peer.read_frame(5s);
      if (!request) return;  // the client hung up
      requests_.push_back(std::move(*request));
      peer.send_frame(reply);
    }
  }

  int listen_fd_;
  std::uint16_t port_ = 0;
  std::vector<std::string> requests_;  // written by the thread until it ends
  std::thread thread_;
};

constexpr std::string_view kHelloOk = R"({"ok":true,"version":1})";

TEST(RegistryWire, ClientTurnsErrorFramesIntoErrorsWithTheSameCodeAndMessage) {
  ScriptedServer server(
      {std::string(kHelloOk),
       R"({"ok":false,"code":"invalid_argument","error":"registry: name is empty"})",
       R"({"ok":false,"code":"protocol","error":"registry: unknown op 'lookup'"})"});
  {
    Client client(server.address(), "t0k", kConnectTimeout);
    const Error request_error = capture_error([&] { (void)client.lookup("a"); });
    EXPECT_EQ(request_error.code(), Errc::invalid_argument);
    EXPECT_STREQ(request_error.what(), "registry: name is empty");
    // A request error leaves the connection usable; a protocol error ends it, and later calls
    // say why without sending anything.
    const Error protocol_error = capture_error([&] { (void)client.lookup("b"); });
    EXPECT_EQ(protocol_error.code(), Errc::protocol);
    EXPECT_STREQ(protocol_error.what(), "registry: unknown op 'lookup'");
    const Error later = capture_error([&] { client.publish("c", "v"); });
    EXPECT_EQ(later.code(), Errc::peer_failed);
    EXPECT_EQ(std::string(later.what()),
              "registry at " + server.address() +
                  ": cannot send publish of 'c', the connection failed earlier: registry: unknown "
                  "op 'lookup'");
  }
  // What the client sent is what protocol.hpp documents.
  ASSERT_EQ(server.requests().size(), 3u);
  EXPECT_EQ(Json::parse(server.requests()[0]),
            Json::parse(R"({"op":"hello","token":"t0k","version":1})"));
  EXPECT_EQ(Json::parse(server.requests()[1]), Json::parse(R"({"op":"lookup","name":"a"})"));
  EXPECT_EQ(Json::parse(server.requests()[2]), Json::parse(R"({"op":"lookup","name":"b"})"));
}

TEST(RegistryWire, ClientReportsARejectedHelloWithTheServersCodeAndMessage) {
  ScriptedServer server(
      {R"({"ok":false,"code":"protocol",)"
       R"("error":"registry: client speaks protocol version 1, this server speaks 2"})"});
  const Error e = capture_error([&] { Client client(server.address(), "", kConnectTimeout); });
  EXPECT_EQ(e.code(), Errc::protocol);
  EXPECT_EQ(std::string(e.what()), "registry at " + server.address() +
                                       " rejected the connection: registry: client speaks "
                                       "protocol version 1, this server speaks 2");
}

TEST(RegistryWire, ClientRejectsErrorFramesOutsideTheProtocol) {
  ScriptedServer server({std::string(kHelloOk), R"({"ok":false,"code":"bogus","error":"huh"})"});
  {
    Client client(server.address(), "", kConnectTimeout);
    const Error e = capture_error([&] { client.remove("x"); });
    EXPECT_EQ(e.code(), Errc::protocol);
    EXPECT_EQ(std::string(e.what()), "registry at " + server.address() +
                                         " sent a malformed reply to remove of 'x': unknown "
                                         "error code 'bogus': huh");
  }
}

TEST(RegistryWire, ClientRefusesATokenThatMakesTheHelloTooLong) {
  Server server(ServerOptions{});
  const Error e = capture_error(
      [&] { Client client(server.address(), std::string(kMaxHelloBytes, 't'), kConnectTimeout); });
  EXPECT_EQ(e.code(), Errc::invalid_argument);
  EXPECT_TRUE(contains(e.what(), "exceed 65536 bytes")) << e.what();
}

}  // namespace
}  // namespace dfi::registry
