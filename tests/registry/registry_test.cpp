// Registry server and client through the Client API: records, waits, membership, barriers,
// security, connection limits and server failures. Everything runs in-process over loopback
// TCP. The wire format and malformed requests are tested in registry_wire_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/registry/client.hpp"
#include "dfi/registry/server.hpp"
#include "registry/registry_test_util.hpp"

namespace dfi::registry {
namespace {

using namespace std::chrono_literals;
using namespace testing;  // dfi::registry::testing

constexpr auto kLongWait = 5s;

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Polls `condition` until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds timeout = 2000ms) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

std::string all_bytes() {
  std::string value;
  for (int i = 0; i < 256; ++i) value.push_back(static_cast<char>(i));
  return value;
}

// ---- records ----------------------------------------------------------------------------------

TEST(Registry, AddressNamesLoopbackAndPort) {
  Server server(ServerOptions{});
  EXPECT_NE(server.port(), 0);
  EXPECT_EQ(server.address(), "127.0.0.1:" + std::to_string(server.port()));
}

TEST(Registry, PublishLookupRoundtripsBinaryValues) {
  Server server(ServerOptions{});
  auto writer = connect_to(server);
  auto reader = connect_to(server);
  writer->publish("bytes", all_bytes());
  writer->publish("empty", "");
  EXPECT_EQ(reader->lookup("bytes"), all_bytes());
  EXPECT_EQ(reader->lookup("empty"), "");
  EXPECT_EQ(reader->try_lookup("bytes"), std::optional<std::string>(all_bytes()));
}

TEST(Registry, LargestValueRoundtripsAndLargerIsRejected) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  std::string big(kMaxValueBytes, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  client->publish("big", big);
  EXPECT_EQ(client->lookup("big"), big);
  const Error e = capture_error([&] { client->publish("bigger", big + "x"); });
  EXPECT_EQ(e.code(), Errc::invalid_argument);
  EXPECT_TRUE(contains(e.what(), "'bigger'")) << e.what();
  EXPECT_EQ(client->lookup("big"), big);  // the connection is still usable
}

TEST(Registry, LookupOfUnknownNameIsNotFound) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  const Error e = capture_error([&] { (void)client->lookup("nope"); });
  EXPECT_EQ(e.code(), Errc::not_found);
  EXPECT_STREQ(e.what(), "registry: no record 'nope'");
  EXPECT_EQ(client->try_lookup("nope"), std::nullopt);
}

TEST(Registry, DuplicatePublishIsAlreadyExistsAndKeepsTheValue) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  client->publish("dup", "first");
  const Error e = capture_error([&] { client->publish("dup", "second"); });
  EXPECT_EQ(e.code(), Errc::already_exists);
  EXPECT_STREQ(e.what(), "registry: record 'dup' already exists");
  EXPECT_EQ(client->lookup("dup"), "first");
}

TEST(Registry, ReplaceOverwrites) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  client->publish("r", "one");
  client->publish("r", "two", /*replace=*/true);
  EXPECT_EQ(client->lookup("r"), "two");
  client->publish("fresh", "x", /*replace=*/true);  // replace of a missing record creates it
  EXPECT_EQ(client->lookup("fresh"), "x");
}

TEST(Registry, RemoveDeletesAndRemovingTwiceIsNotFound) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  client->publish("gone", "v");
  client->remove("gone");
  EXPECT_EQ(client->try_lookup("gone"), std::nullopt);
  const Error e = capture_error([&] { client->remove("gone"); });
  EXPECT_EQ(e.code(), Errc::not_found);
  EXPECT_STREQ(e.what(), "registry: no record 'gone'");
}

TEST(Registry, InvalidNamesAreRejectedBeforeSending) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  EXPECT_EQ(capture_error([&] { client->publish("", "v"); }).code(), Errc::invalid_argument);
  EXPECT_EQ(
      capture_error([&] { client->publish(std::string(kMaxNameBytes + 1, 'n'), "v"); }).code(),
      Errc::invalid_argument);
  EXPECT_EQ(capture_error([&] { client->publish("bad\xff utf8", "v"); }).code(),
            Errc::invalid_argument);
  EXPECT_EQ(capture_error([&] { client->barrier("b", 0, 10ms); }).code(), Errc::invalid_argument);
  EXPECT_EQ(capture_error([&] { (void)client->wait_for("w", -1ms); }).code(),
            Errc::invalid_argument);
  client->publish("ok", "v");  // none of the above broke the connection
  EXPECT_EQ(client->lookup("ok"), "v");
}

TEST(Registry, OneClientIsSafeToShareBetweenThreads) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  constexpr int kThreads = 4;
  constexpr int kEach = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kEach; ++i) {
          std::string name = "t";
          name += std::to_string(t);
          name += '/';
          name += std::to_string(i);
          client->publish(name, name);
          if (client->lookup(name) != name) ++failures;
        }
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(client->lookup("t3/49"), "t3/49");
}

// ---- waits ------------------------------------------------------------------------------------

TEST(Registry, WaitForIsSatisfiedByALaterPublishFromAnotherClient) {
  Server server(ServerOptions{});
  auto waiter = connect_to(server);
  auto publisher = connect_to(server);
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    publisher->publish("late", all_bytes());
  });
  const auto start = Clock::now();
  EXPECT_EQ(waiter->wait_for("late", kLongWait), all_bytes());
  EXPECT_LT(ms_since(start), 3000);
  later.join();
  // A record that already exists is returned at once.
  EXPECT_EQ(waiter->wait_for("late", 0ms), all_bytes());
}

TEST(Registry, WaitForTimesOutWithinBound) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  const auto start = Clock::now();
  const Error e = capture_error([&] { (void)client->wait_for("never", 200ms); });
  const long long elapsed = ms_since(start);
  EXPECT_EQ(e.code(), Errc::timeout);
  EXPECT_STREQ(e.what(), "registry: record 'never' not published within 200 ms");
  EXPECT_GE(elapsed, 190);
  EXPECT_LT(elapsed, 1500);
  client->publish("after", "v");  // the connection survives a timed-out wait
  EXPECT_EQ(client->lookup("after"), "v");
}

TEST(Registry, WaitAllAnswersOnceEveryNameIsPublishedInOneRequest) {
  Server server(ServerOptions{});
  auto waiter = connect_to(server);
  auto publisher = connect_to(server);
  publisher->publish("a", "1");
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    publisher->publish("c", all_bytes());
    std::this_thread::sleep_for(50ms);
    publisher->publish("b", "");
  });
  const Client::Stats before = waiter->stats();
  const auto values = waiter->wait_all({"a", "b", "c", "a"}, {}, kLongWait);
  later.join();
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0], "1");
  EXPECT_EQ(values[1], "");
  EXPECT_EQ(values[2], all_bytes());
  EXPECT_EQ(values[3], "1");
  const Client::Stats after = waiter->stats();
  EXPECT_EQ(after.requests - before.requests, 1u);  // one request, however many names
  EXPECT_GT(after.bytes_sent, before.bytes_sent);
  EXPECT_GT(after.bytes_received - before.bytes_received, all_bytes().size());
  EXPECT_EQ(after.connections, 1u);
  EXPECT_TRUE(waiter->wait_all({}, {}, 0ms).empty());
}

TEST(Registry, WaitAllTimeoutNamesWhatIsMissingAndKeepsTheConnection) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  client->publish("here", "v");
  const auto start = Clock::now();
  const Error e = capture_error([&] { (void)client->wait_all({"here", "gone-1", "gone-2"}, {}, 200ms); });
  EXPECT_EQ(e.code(), Errc::timeout);
  EXPECT_STREQ(e.what(), "registry: 2 of 3 records not published within 200 ms (the first: 'gone-1')");
  EXPECT_GE(ms_since(start), 190);
  const Error at_once = capture_error([&] { (void)client->wait_all({"gone-2"}, {}, 0ms); });
  EXPECT_EQ(at_once.code(), Errc::timeout);
  // A later publish of an awaited name finds no stale waiter, and the connection still serves.
  client->publish("gone-1", "x");
  EXPECT_EQ(client->wait_all({"gone-1", "here"}, {}, 0ms), (std::vector<std::optional<std::string>>{"x", "v"}));
}

TEST(Registry, WaitAllEndsWhenAPublisherLeavesWithoutPublishing) {
  Server server(ServerOptions{});
  auto waiter = connect_to(server);
  auto member = connect_to(server);
  auto other = connect_to(server);
  member->join(3, "m");
  other->join(4, "o");
  other->publish("from-4", "four");
  std::thread leave([&] {
    std::this_thread::sleep_for(100ms);
    member.reset();  // rank 3 dies: its connection closes
  });
  const auto start = Clock::now();
  const Error e = capture_error([&] { (void)waiter->wait_all({"from-4", "from-3"}, {4, 3}, kLongWait); });
  leave.join();
  EXPECT_EQ(e.code(), Errc::peer_failed);
  EXPECT_TRUE(contains(e.what(), "rank 3 is no member (it left or died) and never published 'from-3'")) << e.what();
  EXPECT_LT(ms_since(start), 3000);
  // A request error: the connection serves on. A publisher already gone fails at once, unless
  // its record is there.
  EXPECT_TRUE(waiter->usable());
  EXPECT_EQ(capture_error([&] { (void)waiter->wait_all({"from-3"}, {3}, kLongWait); }).code(), Errc::peer_failed);
  other->publish("late-3", "published before it left");
  EXPECT_EQ(waiter->wait_all({"late-3"}, {3}, kLongWait).front(), "published before it left");
  // With skip_dead the dead publisher's record is null and the others are awaited.
  std::thread publish([&] {
    std::this_thread::sleep_for(50ms);
    other->publish("later-4", "L");
  });
  const auto values = waiter->wait_all({"from-3", "later-4"}, {3, 4}, kLongWait, /*skip_dead=*/true);
  publish.join();
  EXPECT_EQ(values, (std::vector<std::optional<std::string>>{std::nullopt, "L"}));
}

TEST(Registry, WaitAllWaitsAgainForARecordRemovedAfterItWasPublished) {
  Server server(ServerOptions{});
  auto waiter = connect_to(server);
  auto other = connect_to(server);
  std::thread changes([&] {
    std::this_thread::sleep_for(50ms);
    other->publish("a", "1");
    other->remove("a");  // settled, then gone: awaited again
    other->publish("b", "2");
    std::this_thread::sleep_for(50ms);
    other->publish("a", "3");
  });
  const auto values = waiter->wait_all({"a", "b"}, {}, kLongWait);
  changes.join();
  EXPECT_EQ(values, (std::vector<std::optional<std::string>>{"3", "2"}));
  EXPECT_TRUE(other->usable());  // the publisher's requests were answered, not failed
  other->publish("c", "4");
  // A wait that timed out with a removed name leaves the server serving.
  other->remove("c");
  EXPECT_EQ(capture_error([&] { (void)waiter->wait_all({"c"}, {}, 100ms); }).code(), Errc::timeout);
}

TEST(Registry, WaitAllRejectsBadArgumentsBeforeSending) {
  Server server(ServerOptions{});
  auto client = connect_to(server);
  EXPECT_EQ(capture_error([&] { (void)client->wait_all({"a", ""}, {}, 10ms); }).code(), Errc::invalid_argument);
  EXPECT_EQ(capture_error([&] { (void)client->wait_all({"a", "b"}, {1}, 10ms); }).code(), Errc::invalid_argument);
  EXPECT_EQ(capture_error([&] { (void)client->wait_all({"a"}, {}, -1ms); }).code(), Errc::invalid_argument);
  EXPECT_EQ(client->stats().requests, 0u);
}

// ---- barriers ---------------------------------------------------------------------------------

TEST(Registry, BarrierReleasesFourThreadsTogetherAndIsReusable) {
  Server server(ServerOptions{});
  constexpr int kThreads = 4;
  std::vector<std::unique_ptr<Client>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(connect_to(server));
  std::atomic<int> arrived[2] = {0, 0};
  int seen[2][kThreads] = {};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int round = 0; round < 2; ++round) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20 * t));  // stagger arrivals
          ++arrived[round];
          clients[t]->barrier("phase", kThreads, kLongWait);
          seen[round][t] = arrived[round].load();
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
        ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  for (int round = 0; round < 2; ++round) {
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(seen[round][t], kThreads)
          << "round " << round << " thread " << t << " left the barrier before everyone arrived";
    }
  }
}

TEST(Registry, BarrierTimeoutCountsArrivals) {
  Server server(ServerOptions{});
  auto first = connect_to(server);
  auto second = connect_to(server);
  std::optional<Error> first_error;
  std::thread early(
      [&] { first_error = capture_error([&] { first->barrier("slow", 4, 300ms); }); });
  std::this_thread::sleep_for(100ms);
  const auto start = Clock::now();
  const Error second_error = capture_error([&] { second->barrier("slow", 4, 300ms); });
  EXPECT_LT(ms_since(start), 1500);
  early.join();
  ASSERT_TRUE(first_error.has_value());
  EXPECT_EQ(first_error->code(), Errc::timeout);
  EXPECT_EQ(second_error.code(), Errc::timeout);
  // Whoever arrived first saw two arrivals at its timeout; the other was then alone.
  const std::string messages = std::string(first_error->what()) + "|" + second_error.what();
  EXPECT_TRUE(contains(messages,
                       "registry: barrier 'slow' timed out after 300 ms with 2 of 4 "
                       "arrived"))
      << messages;
  EXPECT_TRUE(contains(messages, "with 1 of 4 arrived")) << messages;

  // Timed-out arrivals were withdrawn: a fresh round with another count works.
  std::thread partner([&] { first->barrier("slow", 2, kLongWait); });
  second->barrier("slow", 2, kLongWait);
  partner.join();
}

TEST(Registry, BarrierCountMismatchIsInvalidArgument) {
  Server server(ServerOptions{});
  auto waiting = connect_to(server);
  auto other = connect_to(server);
  std::thread t([&] { (void)capture_error([&] { waiting->barrier("m", 3, 300ms); }); });
  std::this_thread::sleep_for(100ms);
  const Error e = capture_error([&] { other->barrier("m", 2, 300ms); });
  EXPECT_EQ(e.code(), Errc::invalid_argument);
  EXPECT_TRUE(contains(e.what(), "count 2")) << e.what();
  t.join();
}

TEST(Registry, BarrierArrivalIsWithdrawnWhenItsConnectionDrops) {
  Server server(ServerOptions{});
  {
    RawConnection quitter(server.port());
    quitter.send_frame(kHello);
    ASSERT_TRUE(quitter.read_frame().has_value());
    quitter.send_frame(R"({"op":"barrier","name":"w","count":2,"timeout_ms":10000})");
    std::this_thread::sleep_for(100ms);  // let the server register the arrival
  }                                      // closes: the arrival must be withdrawn
  std::this_thread::sleep_for(100ms);
  auto client = connect_to(server);
  const Error e = capture_error([&] { client->barrier("w", 2, 300ms); });
  EXPECT_EQ(e.code(), Errc::timeout);
  EXPECT_TRUE(contains(e.what(), "with 1 of 2 arrived")) << e.what();
}

// ---- membership -------------------------------------------------------------------------------

TEST(Registry, MembershipEndsWhenTheConnectionCloses) {
  Server server(ServerOptions{});
  auto a = connect_to(server);
  auto b = connect_to(server);
  const std::string binary_info("\0\xff\x01", 3);
  a->join(0, "host-a");
  b->join(1, binary_info);
  EXPECT_EQ(a->members(), (std::map<int, std::string>{{0, "host-a"}, {1, binary_info}}));

  const Error e = capture_error([&] { b->join(0, "impostor"); });
  EXPECT_EQ(e.code(), Errc::already_exists);
  EXPECT_TRUE(contains(e.what(), "rank 0")) << e.what();

  b.reset();  // disconnect: rank 1 leaves
  EXPECT_TRUE(eventually([&] { return a->members().size() == 1; }));
  EXPECT_EQ(a->members(), (std::map<int, std::string>{{0, "host-a"}}));

  auto c = connect_to(server);
  c->join(1, "host-c");  // the rank is free again
  EXPECT_EQ(c->members(), (std::map<int, std::string>{{0, "host-a"}, {1, "host-c"}}));
}

// ---- security ---------------------------------------------------------------------------------

TEST(Registry, NonLoopbackBindRequiresAToken) {
  const Error e = capture_error([] { Server exposed(ServerOptions{.bind_host = "0.0.0.0"}); });
  EXPECT_EQ(e.code(), Errc::invalid_argument);
  EXPECT_TRUE(contains(e.what(), "token")) << e.what();
  EXPECT_TRUE(contains(e.what(), "0.0.0.0")) << e.what();

  Server with_token(ServerOptions{.bind_host = "0.0.0.0", .token = "s3cret"});
  Client client("127.0.0.1:" + std::to_string(with_token.port()), "s3cret", kConnectTimeout);
  client.publish("x", "y");
  EXPECT_EQ(client.lookup("x"), "y");

  Server local(ServerOptions{.bind_host = "localhost"});  // loopback by name: no token needed
  EXPECT_NE(local.port(), 0);
}

TEST(Registry, BadTokenIsRejected) {
  Server server(ServerOptions{.token = "right"});
  for (const std::string token : {"wrong", "", "righ", "right "}) {
    const Error e = capture_error([&] { Client client(server.address(), token, kConnectTimeout); });
    EXPECT_EQ(e.code(), Errc::invalid_argument) << token;
    EXPECT_TRUE(contains(e.what(), "registry: bad token")) << e.what();
    EXPECT_TRUE(contains(e.what(), server.address())) << e.what();
  }
  auto client = connect_to(server, "right");
  client->publish("x", "y");
  EXPECT_EQ(client->lookup("x"), "y");
}

TEST(Registry, BindFailureNamesTheAddress) {
  Server first(ServerOptions{});
  const Error e = capture_error([&] { Server second(ServerOptions{.port = first.port()}); });
  EXPECT_EQ(e.code(), Errc::io);
  EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(first.port()))) << e.what();
  EXPECT_TRUE(contains(e.what(), "in use")) << e.what();
}

TEST(Registry, ConnectionsBeyondTheLimitAreRefused) {
  Server server(ServerOptions{.max_connections = 2});
  auto a = connect_to(server);
  auto b = connect_to(server);
  const Error e = capture_error([&] { connect_to(server); });
  EXPECT_EQ(e.code(), Errc::retry);
  EXPECT_TRUE(contains(e.what(), "too many connections")) << e.what();
  a->publish("still", "served");
  a.reset();
  std::unique_ptr<Client> c;
  EXPECT_TRUE(eventually([&] {
    try {
      c = connect_to(server);
      return true;
    } catch (const Error&) {
      return false;
    }
  }));
  EXPECT_EQ(b->lookup("still"), "served");
}

// ---- failures of the server -------------------------------------------------------------------

TEST(Registry, UnreachableServerFailsWithinTheConnectTimeout) {
  std::uint16_t port = 0;
  {
    Server probe(ServerOptions{});
    port = probe.port();
  }  // now nothing listens there
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const auto start = Clock::now();
  const Error e = capture_error([&] { Client client(address, "", 300ms); });
  const long long elapsed = ms_since(start);
  EXPECT_EQ(e.code(), Errc::timeout);
  EXPECT_EQ(std::string(e.what()),
            "registry at " + address + " unreachable after 300 ms: Connection refused");
  EXPECT_GE(elapsed, 290);
  EXPECT_LT(elapsed, 1500);

  EXPECT_EQ(capture_error([] { Client client("no-port-here", "", 100ms); }).code(),
            Errc::invalid_argument);
}

TEST(Registry, StopWhileClientsWaitFailsThemQuickly) {
  auto server = std::make_unique<Server>(ServerOptions{});
  const std::string address = server->address();
  auto waiter = connect_to(*server);
  auto barrier_waiter = connect_to(*server);
  auto idle = connect_to(*server);
  std::optional<Error> wait_error;
  std::optional<Error> barrier_error;
  Clock::time_point wait_failed_at;
  Clock::time_point barrier_failed_at;
  std::thread t1([&] {
    wait_error = capture_error([&] { (void)waiter->wait_for("never", 10s); });
    wait_failed_at = Clock::now();
  });
  std::thread t2([&] {
    barrier_error = capture_error([&] { barrier_waiter->barrier("never", 3, 10s); });
    barrier_failed_at = Clock::now();
  });
  std::this_thread::sleep_for(150ms);
  const auto stop_at = Clock::now();
  server->stop();
  EXPECT_LT(ms_since(stop_at), 1000) << "stop() did not return promptly";
  t1.join();
  t2.join();
  for (const auto& [error, at] :
       {std::pair{wait_error, wait_failed_at}, std::pair{barrier_error, barrier_failed_at}}) {
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code(), Errc::peer_failed) << error->what();
    EXPECT_TRUE(contains(error->what(), address)) << error->what();
    EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(at - stop_at).count(), 1000);
  }
  // An idle client learns on its next request, naming the registry; later calls fail fast too.
  const Error idle_error = capture_error([&] { (void)idle->lookup("x"); });
  EXPECT_EQ(idle_error.code(), Errc::peer_failed);
  EXPECT_TRUE(contains(idle_error.what(), address)) << idle_error.what();
  const Error again = capture_error([&] { (void)waiter->lookup("x"); });
  EXPECT_EQ(again.code(), Errc::peer_failed);
  EXPECT_TRUE(contains(again.what(), address)) << again.what();
  server.reset();  // stop() already ran; destruction is a no-op
}

}  // namespace
}  // namespace dfi::registry
