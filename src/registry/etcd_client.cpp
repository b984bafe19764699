// The registry kept in an etcd v3 cluster (DFI_REGISTRY=etcd://host:port[,host:port...]): the
// same records, membership and barriers as DFI's own registry, through etcd's JSON gateway
// (HTTP/1.1 + JSON, served by every etcd member at /v3/...) with libcurl.
//
// Why the JSON gateway and not gRPC: etcd documents it as a stable API of every v3 server; libcurl
// and nlohmann-json are small, maintained Debian packages, while gRPC C++ needs protobuf code
// generated from etcd's .proto files (and their gogoproto and google.api imports) at build time.
//
// Keys, under the cluster's prefix P = "dfi/<token>/" ("dfi/default/" without a token):
//   P r/<name>    a record
//   P m/<rank>    a member, attached to its client's lease (TTL: registry_dead_after_ms, at least
//                 5 s; kept alive every third of it from a thread of its own): a rank whose process dies or loses
//                 etcd leaves when its lease expires
//   P b/<name>/<id>  an arrival at a barrier (its place among the arrivals: the count of keys
//                 under P b/<name>/ in the transaction that put it)
// Barrier arrivals are withdrawn by their own timeout only (not when the waiting process dies, as
// the embedded registry does): a barrier that a dead rank arrived at may release one short.
// Waits are watches: a range read of what is awaited, then a watch of P from the next revision
// that applies the events it sees, until everything is there (or a publisher's member key is
// deleted, or the deadline passes). A request that fails at one endpoint (refused, reset, no
// leader during an election) is tried at the next until its deadline, so killing etcd's leader
// costs a wait no more than the election.
#include <curl/curl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "client_impl.hpp"
#include "dfi/common/config.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "protocol.hpp"

namespace dfi::registry {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kRequestTimeout{10'000};
constexpr milliseconds kFirstRetryPause{10};
constexpr milliseconds kMaxRetryPause{200};
constexpr milliseconds kFirstAttempt{1000};
constexpr long long kMinLeaseSeconds = 5;
// A wait for more names than this reads them with one range over their common prefix.
constexpr std::size_t kFewNames = 16;

std::string b64(std::string_view bytes) { return protocol::base64_encode(bytes); }

std::string unb64(const json& value) {
  if (!value.is_string()) return {};
  std::optional<std::string> out = protocol::base64_decode(value.get<std::string>());
  return out ? *out : std::string();
}

std::int64_t int_field(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return 0;
  if (it->is_string()) return std::strtoll(it->get<std::string>().c_str(), nullptr, 10);
  if (it->is_number_integer()) return it->get<std::int64_t>();
  return 0;
}

// The smallest key above every key that starts with `prefix` (etcd's range_end of a prefix).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

// 16 random hex digits.
std::string random_id() {
  std::random_device random;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 16; ++i) id += kHex[random() & 0xf];
  return id;
}

// The longest prefix every key of `keys` starts with.
std::string common_prefix(const std::map<std::string, std::size_t>& keys) {
  if (keys.empty()) return {};
  const std::string& first = keys.begin()->first;
  const std::string& last = keys.rbegin()->first;  // sorted: the first and last differ earliest
  std::size_t n = 0;
  while (n < first.size() && n < last.size() && first[n] == last[n]) ++n;
  return first.substr(0, n);
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One libcurl handle: POSTs of JSON bodies to one of the endpoints, a reply or a stream of
// replies (newline-delimited JSON objects) back. Used by one thread at a time.
class Http {
 public:
  Http() : curl_(curl_easy_init()) {
    if (curl_ == nullptr) throw Error(Errc::io, "registry: cannot create a libcurl handle");
  }
  ~Http() { curl_easy_cleanup(curl_); }
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;

  // What one POST brought back: the transport error (empty when none), the HTTP status, and
  // every JSON object received (one for a plain call; the stream's so far for a watch).
  struct Reply {
    std::string error;
    long status = 0;
    std::string body;
  };

  // POSTs `body` to `url`; `on_chunk` (when given) sees the body as it arrives and returns false
  // to end the transfer (not an error then). `abort` ends it with an error.
  Reply post(const std::string& url, const std::string& body, milliseconds timeout,
             const std::function<bool(std::string&)>& on_chunk, const std::atomic<bool>& abort) {
    Reply reply;
    Transfer transfer{&reply.body, &on_chunk, &abort, false};
    curl_easy_reset(curl_);
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_POST, 1L);
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<long long>(timeout.count(), 1)));
    curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::clamp<long long>(timeout.count(), 1, 1000)));
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl_, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &Http::on_write);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(curl_, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl_, CURLOPT_XFERINFOFUNCTION, &Http::on_progress);
    curl_easy_setopt(curl_, CURLOPT_XFERINFODATA, &transfer);
    curl_easy_setopt(curl_, CURLOPT_SOCKOPTFUNCTION, &Http::on_socket);
    curl_easy_setopt(curl_, CURLOPT_SOCKOPTDATA, this);
    curl_easy_setopt(curl_, CURLOPT_CLOSESOCKETFUNCTION, &Http::on_close);
    curl_easy_setopt(curl_, CURLOPT_CLOSESOCKETDATA, this);
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    // A member without a leader (cut off, or the leader just died) refuses or cancels the request
    // instead of holding it, so the client moves on to another member.
    headers = curl_slist_append(headers, "Grpc-Metadata-hasleader: true");
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    const CURLcode rc = curl_easy_perform(curl_);
    curl_slist_free_all(headers);
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &reply.status);
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && transfer.done)) {
      reply.error = abort.load() ? std::string("interrupted") : curl_easy_strerror(rc);
    }
    return reply;
  }

 private:
  struct Transfer {
    std::string* body;
    const std::function<bool(std::string&)>* on_chunk;
    const std::atomic<bool>* abort;
    bool done;  // on_chunk asked to end
  };
  static std::size_t on_write(char* data, std::size_t size, std::size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    try {  // nothing may unwind through libcurl
      t->body->append(data, size * count);
      if (*t->on_chunk && !(*t->on_chunk)(*t->body)) {
        t->done = true;
        return 0;  // ends the transfer (CURLE_WRITE_ERROR, which post() takes for success)
      }
    } catch (...) {
      return 0;  // CURLE_WRITE_ERROR without `done`: the transfer failed
    }
    return size * count;
  }
  static int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<Transfer*>(user)->abort->load() ? 1 : 0;
  }
  static int on_socket(void* user, curl_socket_t fd, curlsocktype) {
    auto* http = static_cast<Http*>(user);
    std::lock_guard lock(http->socket_mutex_);
    http->socket_ = fd;
    return CURL_SOCKOPT_OK;
  }
  static int on_close(void* user, curl_socket_t fd) {
    auto* http = static_cast<Http*>(user);
    std::lock_guard lock(http->socket_mutex_);
    if (http->socket_ == fd) http->socket_ = -1;
    return ::close(fd);
  }
  CURL* curl_;
  std::mutex socket_mutex_;  // cut() against libcurl opening and closing connections
  int socket_ = -1;          // the open connection made last (a transfer uses one endpoint at a time)

 public:
  // Ends the transfer in progress at once, from any thread (libcurl looks at the abort flag only
  // about once a second while a watch waits): its connection is shut down under it.
  void cut() noexcept {
    std::lock_guard lock(socket_mutex_);
    if (socket_ >= 0) ::shutdown(socket_, SHUT_RDWR);
  }
};

class EtcdClient final : public Client::Impl {
 public:
  EtcdClient(std::string address, std::string token, milliseconds connect_timeout)
      : Impl(std::move(address)) {
    global_init();
    const std::string list = address_.substr(std::string_view("etcd://").size());
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t comma = std::min(list.find(',', at), list.size());
      const std::string endpoint = list.substr(at, comma - at);
      if (endpoint.empty() || endpoint.find(':') == std::string::npos || endpoint.find('/') != std::string::npos) {
        throw Error(Errc::invalid_argument, "registry address '" + address_ + "': '" + endpoint +
                                                "' is not host:port (expected etcd://host:port[,host:port...])");
      }
      endpoints_.push_back("http://" + endpoint);
      at = comma + 1;
    }
    prefix_ = "dfi/" + (token.empty() ? std::string("default") : token) + "/";
    // A lease shorter than kMinLeaseSeconds lapses on a loaded host (64 ranks and etcd on 2 cores
    // missed 3 s of keep-alives and cut live ranks off).
    ttl_seconds_ = std::max<long long>(kMinLeaseSeconds, (config::get_int("registry_dead_after_ms") + 999) / 1000);
    // Reachable at all? (Errors name every endpoint tried.)
    (void)call("/v3/maintenance/status", json::object(), "the status check", connect_timeout);
    connections_.fetch_add(1, std::memory_order_relaxed);
  }

  ~EtcdClient() override {
    {
      std::lock_guard lock(lease_mutex_);
      stop_keepalive_ = true;
    }
    lease_wake_.notify_all();
    if (keepalive_.joinable()) keepalive_.join();
    if (lease_ != 0 && !interrupted_.load()) {
      // Leaving on purpose: the memberships end now, not at the lease's expiry.
      try {
        (void)call("/v3/lease/revoke", json{{"ID", std::to_string(lease_)}}, "the lease revoke", milliseconds(2000));
      } catch (const Error&) {
      }
    }
  }

  void publish(const std::string& name, std::string_view value, bool replace) override {
    const std::string key = record_key(name);
    if (replace) {
      (void)call("/v3/kv/put", json{{"key", b64(key)}, {"value", b64(value)}}, "publish of " + protocol::quote_name(name));
      return;
    }
    const json reply = call("/v3/kv/txn", create_txn(key, value, 0), "publish of " + protocol::quote_name(name));
    if (!created(reply, value, 0)) {
      throw Error(Errc::already_exists, "registry: record " + protocol::quote_name(name) + " already exists");
    }
  }

  std::optional<std::string> try_lookup(const std::string& name) override {
    const json reply = call("/v3/kv/range", json{{"key", b64(record_key(name))}}, "lookup of " + protocol::quote_name(name));
    auto kvs = reply.find("kvs");
    if (kvs == reply.end() || !kvs->is_array() || kvs->empty()) return std::nullopt;
    return unb64((*kvs)[0].value("value", json("")));
  }

  std::string wait_for(const std::string& name, milliseconds timeout) override {
    return *wait_all({name}, {}, timeout, false).front();
  }

  std::vector<std::optional<std::string>> wait_all(const std::vector<std::string>& names,
                                                   const std::vector<int>& publishers, milliseconds timeout,
                                                   bool skip_dead) override {
    if (names.empty()) return {};
    const Deadline deadline(timeout);
    const std::string what = names.size() == 1 ? "wait for " + protocol::quote_name(names[0])
                                               : "wait for " + std::to_string(names.size()) + " records";
    std::vector<std::optional<std::string>> values(names.size());
    std::vector<char> dead_skipped(names.size(), 0);
    // Record key -> the first of the names that is it; a repeated name reads its first's value.
    std::map<std::string, std::size_t> by_key;
    std::vector<std::size_t> first(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) first[i] = by_key.emplace(record_key(names[i]), i).first->second;
    auto repeated = [&first](std::vector<std::optional<std::string>>& v) -> std::vector<std::optional<std::string>>& {
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = v[first[i]];
      return v;
    };
    for (;;) {
      // What is there now, in one read of at most kMaxTxnOps ranges (etcd's --max-txn-ops is 128
      // by default): a few names one range each, many names one range over their common prefix
      // (a flow's target records share "flow/<name>/target/"), filtered here; and the members.
      json ops = json::array();
      if (names.size() <= kFewNames) {
        for (const auto& [key, index] : by_key) ops.push_back({{"request_range", {{"key", b64(key)}}}});
      } else {
        const std::string common = common_prefix(by_key);
        ops.push_back({{"request_range", {{"key", b64(common)}, {"range_end", b64(prefix_end(common))}}}});
      }
      const bool watch_members = std::any_of(publishers.begin(), publishers.end(), [](int r) { return r >= 0; });
      const std::string members_from = prefix_ + "m/";
      if (watch_members) {
        ops.push_back({{"request_range", {{"key", b64(members_from)}, {"range_end", b64(prefix_end(members_from))},
                                          {"keys_only", true}}}});
      }
      const json reply = call("/v3/kv/txn", json{{"success", ops}}, what, read_bound(deadline));
      std::set<int> members;
      for (const json& response : reply.at("responses")) {
        const json& range = response.at("response_range");
        auto kvs = range.find("kvs");
        if (kvs == range.end() || !kvs->is_array()) continue;
        for (const json& kv : *kvs) {
          const std::string key = unb64(kv.value("key", json("")));
          if (auto it = by_key.find(key); it != by_key.end()) {
            values[it->second] = unb64(kv.value("value", json("")));
          } else if (key.compare(0, members_from.size(), members_from) == 0) {
            members.insert(std::atoi(key.c_str() + members_from.size()));
          }
        }
      }
      const std::int64_t revision = int_field(reply.at("header"), "revision");

      // Settles what it can; true when everything is, or a publisher left (then `left` says
      // which; never throws: it also runs inside libcurl's callback).
      std::optional<std::size_t> left;
      auto settled = [&]() {
        std::size_t open = 0;
        for (std::size_t i = 0; i < names.size(); ++i) {
          if (values[first[i]] || dead_skipped[i]) continue;
          const int r = publishers.empty() ? -1 : publishers[i];
          if (r >= 0 && !members.contains(r)) {
            if (!skip_dead) {
              left = i;
              return true;
            }
            dead_skipped[i] = 1;
            continue;
          }
          ++open;
        }
        return open == 0;
      };
      auto answer = [&]() {
        if (left) {
          throw Error(Errc::peer_failed, "registry: rank " + std::to_string(publishers[*left]) +
                                             " is no member (it left or died) and never published " +
                                             protocol::quote_name(names[*left]));
        }
        return repeated(values);
      };
      if (settled()) return answer();
      if (deadline.expired()) throw wait_timeout(names, repeated(values), dead_skipped, timeout);

      // Watch everything under the prefix from the next revision; apply what concerns us.
      bool done = false;
      watch(prefix_, revision + 1, deadline, what, [&](const json& event) {
        const json kv = event.value("kv", json::object());
        const std::string key = unb64(kv.value("key", json("")));
        const bool deleted = event.value("type", std::string()) == "DELETE";
        if (auto it = by_key.find(key); it != by_key.end()) {
          if (deleted) {
            values[it->second].reset();
          } else {
            values[it->second] = unb64(kv.value("value", json("")));
          }
        } else if (key.compare(0, prefix_.size() + 2, prefix_ + "m/") == 0) {
          const int r = std::atoi(key.c_str() + prefix_.size() + 2);
          if (deleted) {
            members.erase(r);
          } else {
            members.insert(r);
          }
        }
        done = settled();
        return !done;
      });
      if (done) return answer();
      if (deadline.expired()) throw wait_timeout(names, repeated(values), dead_skipped, timeout);
      // The watch ended early (its endpoint went away, or history was compacted): read again.
    }
  }

  void remove(const std::string& name) override {
    const json reply = call("/v3/kv/deleterange", json{{"key", b64(record_key(name))}}, "remove of " + protocol::quote_name(name));
    if (int_field(reply, "deleted") == 0) {
      throw Error(Errc::not_found, "registry: no record " + protocol::quote_name(name));
    }
  }

  void join(int rank, std::string_view info) override {
    const std::int64_t lease = ensure_lease();
    const json reply = call("/v3/kv/txn", create_txn(member_key(rank), info, lease), "join of rank " + std::to_string(rank));
    if (!created(reply, info, lease)) {
      throw Error(Errc::already_exists, "registry: rank " + std::to_string(rank) + " is already a member (under " +
                                            address_ + ", prefix '" + prefix_ +
                                            "': a live cluster holds it if no process of this cluster does)");
    }
  }

  std::map<int, std::string> members() override {
    std::int64_t revision = 0;
    return read_members(revision);
  }

  std::map<int, std::string> members_after(std::uint64_t& version, milliseconds timeout) override {
    if (version != 0) {
      // Any change to the membership since `version` ends the watch at once (etcd replays it).
      const Deadline deadline(timeout);
      bool changed = false;
      while (!changed && !deadline.expired()) {
        // A compacted `version` is reported as a change: the answer carries a current one.
        changed = watch(prefix_ + "m/", static_cast<std::int64_t>(version) + 1, deadline, "members watch",
                        [&](const json&) {
                          changed = true;
                          return false;
                        }) ||
                  changed;
      }
      if (!changed) {
        std::int64_t ignored = 0;
        return read_members(ignored);  // unchanged: the same version
      }
    }
    std::int64_t revision = 0;
    std::map<int, std::string> out = read_members(revision);
    version = static_cast<std::uint64_t>(revision);
    return out;
  }

  void barrier(const std::string& name, int count, milliseconds timeout) override {
    const Deadline deadline(timeout);
    const std::string dir = prefix_ + "b/" + name + "/";
    const std::string what = "barrier " + protocol::quote_name(name);
    // Arrive: a key of this arrival's own (no contention between arrivals) and, in the same
    // transaction, the number of arrivals so far, this one included: its place k (1-based) among
    // every arrival ever. Arrivals (r-1)*count+1 .. r*count form round r.
    const std::string mine = dir + arrival_id();
    const json range{{"key", b64(dir)}, {"range_end", b64(prefix_end(dir))}, {"count_only", true}};
    const json arrive = call("/v3/kv/txn",
                             json{{"success", json::array({{{"request_put", {{"key", b64(mine)}, {"value", b64(std::to_string(count))}}}},
                                                           {{"request_range", range}}})}},
                             what, read_bound(deadline));
    std::int64_t arrived = int_field(arrive.at("responses").at(1).at("response_range"), "count");
    std::int64_t revision = int_field(arrive.at("header"), "revision");
    const std::int64_t round_end = (arrived + count - 1) / count * count;
    while (arrived < round_end) {
      if (deadline.expired()) {
        // Withdraw, unless the round filled meanwhile: the arrivals after it take its place.
        const json now = call("/v3/kv/range", range, what, read_bound(deadline));
        arrived = int_field(now, "count");
        if (arrived >= round_end) return;
        (void)call("/v3/kv/deleterange", json{{"key", b64(mine)}}, what, read_bound(deadline));
        throw Error(Errc::timeout, "registry: barrier " + protocol::quote_name(name) + " timed out after " +
                                       std::to_string(timeout.count()) + " ms with " +
                                       std::to_string(arrived - (round_end - count)) + " of " + std::to_string(count) +
                                       " arrived");
      }
      // Count the arrivals (and withdrawals) after the last read until the round is full.
      bool ended_early = true;
      watch(dir, revision + 1, deadline, what, [&](const json& event) {
        arrived += event.value("type", std::string()) == "DELETE" ? -1 : 1;
        if (arrived < round_end) return true;
        ended_early = false;
        return false;
      });
      if (ended_early && arrived < round_end && !deadline.expired()) {
        // The watch ended before the round filled (its endpoint failed): count afresh.
        const json now = call("/v3/kv/range", range, what, read_bound(deadline));
        arrived = int_field(now, "count");
        revision = int_field(now.at("header"), "revision");
      }
    }
  }

  void interrupt() noexcept override {
    interrupted_.store(true);
    http_.cut();
  }

  bool usable() override { return !interrupted_.load(); }

 private:
  std::string record_key(const std::string& name) const { return prefix_ + "r/" + name; }
  // A name no other arrival at any barrier of any client has: this client's random id and a
  // count.
  std::string arrival_id() { return id_ + "-" + std::to_string(arrivals_.fetch_add(1)); }
  std::string member_key(int rank) const { return prefix_ + "m/" + std::to_string(rank); }

  static json create_txn(const std::string& key, std::string_view value, std::int64_t lease) {
    json put{{"key", b64(key)}, {"value", b64(value)}};
    if (lease != 0) put["lease"] = std::to_string(lease);
    return json{{"compare", json::array({{{"key", b64(key)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}})},
                {"success", json::array({{{"request_put", put}}})},
                {"failure", json::array({{{"request_range", {{"key", b64(key)}}}}})}};
  }

  // Whether a create transaction took effect: it succeeded, or (a retried attempt, the first one
  // having been applied though its answer was lost) the key holds exactly what it would have put.
  static bool created(const json& reply, std::string_view value, std::int64_t lease) {
    if (reply.value("succeeded", false)) return true;
    auto responses = reply.find("responses");
    if (responses == reply.end() || !responses->is_array() || responses->empty()) return false;
    const json range = (*responses)[0].value("response_range", json::object());
    auto kvs = range.find("kvs");
    if (kvs == range.end() || !kvs->is_array() || kvs->empty()) return false;
    const json& kv = (*kvs)[0];
    return unb64(kv.value("value", json(""))) == value && int_field(kv, "lease") == lease;
  }

  // The bound of one read inside a wait: what is left of it, but at least a second, so that a
  // wait at its deadline still gets its final answer.
  static milliseconds read_bound(const Deadline& deadline) {
    return std::clamp(milliseconds(deadline.remaining_ms()), milliseconds(1000), kRequestTimeout);
  }

  static milliseconds remaining(const Deadline& deadline) {
    return milliseconds(std::max<long long>(deadline.remaining_ms(), 1));
  }

  Error wait_timeout(const std::vector<std::string>& names, const std::vector<std::optional<std::string>>& values,
                     const std::vector<char>& skipped, milliseconds timeout) const {
    std::size_t missing = 0, first = names.size();
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (values[i] || skipped[i]) continue;
      ++missing;
      first = std::min(first, i);
    }
    if (names.size() == 1) {
      return Error(Errc::timeout, "registry: record " + protocol::quote_name(names[0]) + " not published within " +
                                      std::to_string(timeout.count()) + " ms");
    }
    return Error(Errc::timeout, "registry: " + std::to_string(missing) + " of " + std::to_string(names.size()) +
                                    " records not published within " + std::to_string(timeout.count()) +
                                    " ms (the first: " + protocol::quote_name(names[first]) + ")");
  }

  std::map<int, std::string> read_members(std::int64_t& revision) {
    const std::string from = prefix_ + "m/";
    const json reply = call("/v3/kv/range", json{{"key", b64(from)}, {"range_end", b64(prefix_end(from))}}, "members");
    revision = int_field(reply.at("header"), "revision");
    std::map<int, std::string> out;
    if (auto kvs = reply.find("kvs"); kvs != reply.end() && kvs->is_array()) {
      for (const json& kv : *kvs) {
        const std::string key = unb64(kv.value("key", json("")));
        out.emplace(std::atoi(key.c_str() + from.size()), unb64(kv.value("value", json(""))));
      }
    }
    return out;
  }

  // The lease this client's memberships hang on, granted at the first join and kept alive from a
  // thread of its own (a held watch on the request handle must not delay it).
  std::int64_t ensure_lease() {
    std::lock_guard lock(lease_mutex_);
    if (lease_ != 0) return lease_;
    const json reply = call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_seconds_)}}, "the lease grant");
    lease_ = int_field(reply, "ID");
    if (lease_ == 0) throw Error(Errc::protocol, "registry " + address_ + ": the lease grant answered no ID: " + reply.dump());
    keepalive_ = std::thread([this] { keep_alive(); });
    return lease_;
  }

  void keep_alive() {
    Http http;
    std::unique_lock lock(lease_mutex_);
    const auto period = milliseconds(ttl_seconds_ * 1000 / 3);
    std::size_t endpoint = 0;
    while (!lease_wake_.wait_for(lock, period, [this] { return stop_keepalive_; })) {
      const std::string body = json{{"ID", std::to_string(lease_)}}.dump();
      lock.unlock();
      // Every endpoint once, until one answers; the lease outlives a missed beat by 2 periods.
      for (std::size_t tried = 0; tried < endpoints_.size() && !interrupted_.load(); ++tried) {
        const Http::Reply r = http.post(endpoints_[endpoint] + "/v3/lease/keepalive", body, period, {}, interrupted_);
        requests_.fetch_add(1, std::memory_order_relaxed);
        if (r.error.empty() && r.status == 200) break;
        endpoint = (endpoint + 1) % endpoints_.size();
      }
      lock.lock();
    }
  }

  // POSTs `body` to `path` at the current endpoint, moving on to the next while they fail, until
  // `timeout`. Returns the reply object; throws what the registry decided or why none answered.
  json call(const std::string& path, const json& body, const std::string& what, milliseconds timeout = kRequestTimeout) {
    std::lock_guard lock(mutex_);
    const Deadline deadline(timeout);
    const std::string text = body.dump();
    std::string failures;
    milliseconds pause = kFirstRetryPause;
    // One attempt's bound, doubling each round: a member cut from its leader holds a request
    // until etcd's own request timeout (5 s + 2 election timeouts), long after a new leader is
    // elected; another attempt at another member is answered as soon as there is one.
    milliseconds attempt = kFirstAttempt;
    for (;;) {
      for (std::size_t tried = 0; tried < endpoints_.size(); ++tried) {
        check_interrupted(what);
        const std::string& endpoint = endpoints_[current_];
        const Http::Reply r =
            http_.post(endpoint + path, text, std::min(attempt, remaining(deadline)), {}, interrupted_);
        count(text.size(), r.body.size());
        std::optional<json> reply = parse(r);
        if (r.error.empty() && r.status == 200 && reply) return std::move(*reply);
        if (r.error.empty() && r.status >= 400 && r.status < 500) {
          // etcd decided (a request it refuses, such as a transaction over --max-txn-ops): any
          // member would answer the same, so this is the answer.
          throw Error(r.status == 400 ? Errc::invalid_argument : Errc::protocol,
                      "registry " + address_ + ": etcd refused " + what + ": " + failure_text(r, reply));
        }
        failures = endpoint.substr(7) + ": " + failure_text(r, reply);
        current_ = (current_ + 1) % endpoints_.size();
        if (deadline.expired()) break;
      }
      check_interrupted(what);
      if (deadline.expired()) {
        throw Error(Errc::timeout, "registry " + address_ + ": no etcd endpoint answered " + what + " within " +
                                       std::to_string(timeout.count()) + " ms (the last: " + failures + ")");
      }
      std::this_thread::sleep_for(std::min(pause, milliseconds(std::max<long long>(deadline.remaining_ms(), 0))));
      pause = std::min(pause * 2, kMaxRetryPause);
      attempt *= 2;
    }
  }

  // Watches keys from `key` (a prefix when it ends in '/', else that key alone) from `revision`,
  // handing every event to `on_event` until it returns false, the deadline passes, or the stream
  // ends (its endpoint failed: the caller reads again). Moves to the next endpoint on failure.
  // True when etcd canceled the watch because `revision` was compacted away (the caller must read
  // afresh and watch from the new revision).
  bool watch(const std::string& key, std::int64_t revision, const Deadline& deadline, const std::string& what,
             const std::function<bool(const json&)>& on_event) {
    std::lock_guard lock(mutex_);
    json create{{"key", b64(key)}, {"start_revision", std::to_string(revision)}};
    if (!key.empty() && key.back() == '/') create["range_end"] = b64(prefix_end(key));
    const std::string text = json{{"create_request", create}}.dump();
    std::size_t parsed = 0;
    bool stop = false;
    bool compacted = false;
    auto on_chunk = [&](std::string& body) {
      for (std::size_t end; !stop && (end = body.find('\n', parsed)) != std::string::npos; parsed = end + 1) {
        json message = json::parse(body.begin() + static_cast<std::ptrdiff_t>(parsed),
                                   body.begin() + static_cast<std::ptrdiff_t>(end), nullptr, false);
        if (message.is_discarded()) continue;
        const json& result = message.contains("result") ? message["result"] : message;
        if (result.value("canceled", false)) {
          compacted = true;  // the caller reads again
          return false;
        }
        if (auto events = result.find("events"); events != result.end() && events->is_array()) {
          for (const json& event : *events) {
            if (!on_event(event)) {
              stop = true;
              break;
            }
          }
        }
      }
      return !stop;
    };
    check_interrupted(what);
    const Http::Reply r = http_.post(endpoints_[current_] + "/v3/watch", text, remaining(deadline), on_chunk, interrupted_);
    count(text.size(), r.body.size());
    check_interrupted(what);
    if (!stop && !deadline.expired() && (!r.error.empty() || r.status != 200)) {
      // This endpoint failed: the next try uses the next one (after a short pause, so that an
      // election in progress is not hammered).
      current_ = (current_ + 1) % endpoints_.size();
      std::this_thread::sleep_for(std::min(kFirstRetryPause, milliseconds(std::max<long long>(deadline.remaining_ms(), 0))));
    }
    return compacted;
  }

  void count(std::size_t sent, std::size_t received) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(sent, std::memory_order_relaxed);
    bytes_received_.fetch_add(received, std::memory_order_relaxed);
  }

  void check_interrupted(const std::string& what) const {
    if (interrupted_.load()) {
      throw Error(Errc::peer_failed, "registry " + address_ + ": " + what + " was interrupted (the client was stopped)");
    }
  }

  static std::optional<json> parse(const Http::Reply& r) {
    if (!r.error.empty()) return std::nullopt;
    json reply = json::parse(r.body, nullptr, false);
    if (reply.is_discarded() || !reply.is_object()) return std::nullopt;
    return reply;
  }

  static std::string failure_text(const Http::Reply& r, const std::optional<json>& reply) {
    if (!r.error.empty()) return r.error;
    if (reply && reply->contains("error")) return "HTTP " + std::to_string(r.status) + ": " + (*reply)["error"].dump();
    if (reply && reply->contains("message")) return "HTTP " + std::to_string(r.status) + ": " + (*reply)["message"].dump();
    return "HTTP " + std::to_string(r.status) + ": " + protocol::clip(r.body, 200);
  }

  std::vector<std::string> endpoints_;  // "http://host:port"
  std::string id_ = random_id();
  std::atomic<std::uint64_t> arrivals_{0};
  std::string prefix_;
  long long ttl_seconds_ = 3;
  std::atomic<bool> interrupted_{false};
  std::mutex mutex_;  // one request at a time on http_
  Http http_;
  std::size_t current_ = 0;  // guarded by mutex_: the endpoint that answered last

  std::mutex lease_mutex_;
  std::condition_variable lease_wake_;
  bool stop_keepalive_ = false;  // guarded by lease_mutex_
  std::int64_t lease_ = 0;       // guarded by lease_mutex_ (set once)
  std::thread keepalive_;
};

}  // namespace

std::unique_ptr<Client::Impl> make_etcd_client(std::string address, std::string token, milliseconds connect_timeout) {
  return std::make_unique<EtcdClient>(std::move(address), std::move(token), connect_timeout);
}

}  // namespace dfi::registry
