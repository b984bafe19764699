// apps::kv::Client — one client thread of the replicated key-value store (service.hpp).
//
// Owns the thread's source in <name>.v<view>.requests and its own replies flow of the view,
// <name>.v<view>.replies.<index> (it creates it as it joins a view, service.hpp). Requests may be
// pipelined: submit() up to ServiceOptions::window of them, then take their completions with
// poll(); the synchronous calls do both for one request.
//
//   kv::Client client(node, worker, options, thread);
//   client.put(42, "hello").throw_if_error();     // padded with zeros to options.value_bytes
//   std::string out; bool found = false;
//   client.get(42, out, found).throw_if_error();  // out: options.value_bytes bytes
//
// Values are ServiceOptions::value_bytes wide, the service's width (the client checks that its
// options say the same as the service's creator when it opens: invalid_argument otherwise). A put
// takes a value of at most that many bytes and stores it padded with zero bytes; a get returns
// the whole width.
//   client.close().throw_if_error();          // when done: lets the service end
//
// Multi-Paxos: when a replica dies, the client follows the service into its next view (it learns
// the view from the registry, see service.hpp) and sends every request not yet answered again;
// the calls that noticed return normally. A client that was idle meanwhile follows when it next
// submits or closes (the service never waits for it). NOPaxos: a request whose copy the leader did not
// answer within ServiceOptions::retry_timeout is sent again with the same number as a new copy
// (its slot may have become a NO-OP in gap agreement; a copy the leader answered is never made
// one). It completes with the leader's reply and replicas/2 followers' to one copy; answers to
// older copies are ignored, the replicas apply a write once, and a result only ever comes from
// the leader's reply to a copy it executed (never from a NO-OP slot). Request s is submitted
// only once request s - window left its place.
// Errors of every call name the service, the flow and the
// peer: peer_failed (fewer than a majority of the replicas left; NOPaxos and unreplicated: a
// replica died), timeout (no reply within ServiceOptions::timeout: the message names that wait,
// the flow and the view), invalid_argument (window
// full, bad op, a value wider than the service's), protocol (a reply to no outstanding request).
// Nothing on the request path allocates (get() into a std::string: once it has the capacity); a
// view change does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/apps/kv/service.hpp"
#include "dfi/common/error.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::apps::kv {

// A finished request.
struct Completion {
  std::uint64_t seq = 0;  // what submit() returned
  Op op = Op::get;
  std::uint64_t key = 0;
  bool found = false;     // get: the key had a value; delete: the key existed
  // get: the value read (value_bytes bytes; zeros when not found). Points into the client: valid
  // until the next call on it.
  std::string_view value;
};

class Client {
 public:
  // Opens client `thread` of this rank (its index follows client_threads()). `worker` must be the
  // calling thread's own. Throws dfi::Error: invalid_argument (this rank is a replica, no such
  // thread), and what opening the flows throws (not_found, timeout, peer_failed).
  Client(cluster::Node& node, fabric::Worker& worker, const ServiceOptions& options, int thread);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request (value: for put, at most value_bytes() bytes, padded with zeros; else
  // ignored) and returns its number in `seq`. Buffered until flush() or poll().
  // invalid_argument when window requests are outstanding or the value is too wide. Waits
  // (taking replies) while request seq - window still holds its place.
  Status submit(Op op, std::uint64_t key, std::string_view value, std::uint64_t& seq);
  // Sends what submit() buffered.
  Status flush();
  // Flushes, then waits for one completion (up to the service timeout).
  Status poll(Completion& done);
  // One request, synchronously. get: `value` becomes the value (value_bytes() bytes) when found.
  Status get(std::uint64_t key, std::string& value, bool& found);
  // put: `value` at most value_bytes() bytes, stored padded with zeros.
  Status put(std::uint64_t key, std::string_view value);
  // del: `found` tells whether the key existed.
  Status del(std::uint64_t key, bool& found);

  std::size_t outstanding() const noexcept;
  // Completions taken from the replies already: poll() hands each out without waiting, and
  // without flushing unless submit() buffered something since. A caller that drains these before
  // it submits again sends its next requests together, in one segment (kv bench does).
  std::size_t ready() const noexcept;
  std::size_t index() const noexcept;  // this client's index
  std::size_t value_bytes() const noexcept;  // the service's value width
  // NOPaxos: requests sent again because the leader did not answer within retry_timeout (their
  // slot may have become a NO-OP), and the leader's replies to older copies that were ignored.
  std::uint64_t resent() const noexcept;
  std::uint64_t stale_replies() const noexcept;
  // Waits for every outstanding reply, closes the request source, then drains the replies flow to
  // its end (the leader closes it once every client closed). Idempotent.
  Status close();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace dfi::apps::kv
