// fabric::Endpoint and fabric::RemoteMemory — one-sided operations towards one peer.
//
// Completion semantics (as in UCX):
//  - put(): returns when the source buffer may be reused; the data is visible at the peer only
//    after flush() (or after a fenced later write that the peer observes).
//  - put_nbi(): returns at once; the source buffer must stay untouched until flush().
//  - get()/atomics: return when the result is in the caller's memory.
//  - flush(): every operation issued before it on this endpoint is complete at the peer.
// Every call waits at most the context's op_timeout; when it passes, or when the peer dies, the
// call returns a Status naming the peer, and every later call on this endpoint fails the same way.
//
// An Endpoint and its RemoteMemory belong to the thread that owns their Worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "dfi/common/error.hpp"

namespace dfi::fabric {

struct RegionDescriptor;

namespace detail {
struct EndpointState;
}

// A peer's memory region, attached to one endpoint (a UCX remote key).
class RemoteMemory {
 public:
  RemoteMemory() = default;
  ~RemoteMemory();
  RemoteMemory(RemoteMemory&& other) noexcept;
  RemoteMemory& operator=(RemoteMemory&& other) noexcept;
  RemoteMemory(const RemoteMemory&) = delete;
  RemoteMemory& operator=(const RemoteMemory&) = delete;

  bool valid() const noexcept { return rkey_ != nullptr; }
  std::uint64_t address() const noexcept { return address_; }
  std::size_t size() const noexcept { return size_; }
  // A direct pointer to the peer's region when the transport maps it (shm), else nullptr.
  // Plain stores through it reach the peer with no fabric call; publish with a release store.
  void* mapped() const noexcept { return mapped_; }

 private:
  friend class Endpoint;
  void release() noexcept;

  std::shared_ptr<detail::EndpointState> endpoint_;  // keeps the endpoint open while attached
  void* rkey_ = nullptr;                             // ucp_rkey_h
  std::uint64_t address_ = 0;
  std::size_t size_ = 0;
  void* mapped_ = nullptr;
};

// Most words one Endpoint::load_words / store_words moves (one active message where emulated).
inline constexpr std::size_t kMaxWordOpWords = 1019;

// An operation in flight, from Endpoint::put_async / get_async and the other *_async calls. The
// buffers it uses must stay untouched until it is done. Destroying a pending Request waits for it
// (bounded by op_timeout).
class Request {
 public:
  Request() = default;  // an already completed request
  // An already completed request whose outcome is `status` (an error found before issuing).
  static Request completed(Status status);
  ~Request();
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // True once the operation completed (successfully or not); progresses the worker once when
  // still pending. Cheap enough to call in a polling loop.
  bool done();
  // Waits until completion; the operation's outcome.
  Status wait();

 private:
  friend class Endpoint;
  std::shared_ptr<detail::EndpointState> endpoint_;
  void* request_ = nullptr;  // UCX request, or null when complete
  std::uint64_t word_op_ = 0;  // a word operation by active message in flight (0: none)
  Status status_;
  const char* what_ = "";
};

class Endpoint {
 public:
  Endpoint() = default;
  explicit Endpoint(std::shared_ptr<detail::EndpointState> state) : state_(std::move(state)) {}
  // Closing flushes outstanding operations (bounded by op_timeout), or force-closes a failed one.
  ~Endpoint() = default;
  Endpoint(Endpoint&&) noexcept = default;
  Endpoint& operator=(Endpoint&&) noexcept = default;

  int peer() const noexcept;
  // "rank 3", used in every message about this endpoint.
  const std::string& peer_name() const noexcept;
  // Ok while the endpoint is healthy; the failure (peer_failed / timeout) once it is not.
  Status status() const;

  // Unpacks a peer's region key for use on this endpoint. Throws dfi::Error(protocol) if the key
  // is malformed, dfi::Error(peer_failed) if the peer is known dead or its shared-memory segment
  // is gone (its process exited; the endpoint is failed from then on).
  RemoteMemory attach(const RegionDescriptor& descriptor);

  // One-sided operations; `offset` is relative to the start of `remote`. A range outside the
  // region returns Errc::invalid_argument and does nothing.
  Status put(const void* source, std::size_t bytes, const RemoteMemory& remote, std::size_t offset);
  Status put_nbi(const void* source, std::size_t bytes, const RemoteMemory& remote,
                 std::size_t offset);
  Status get(void* destination, std::size_t bytes, const RemoteMemory& remote, std::size_t offset);
  // Reads the 8-byte word at `offset` of `remote` (8-byte aligned) with acquire order: a load
  // through the mapped pointer where the region maps (after checking that the peer is alive),
  // else a get (by active message where RMA is emulated). The one way DFI reads a counter or
  // state word that a peer writes. Errors: peer_failed, invalid_argument (outside the region).
  Status load_word(const RemoteMemory& remote, std::size_t offset, std::uint64_t& value);
  // Non-blocking forms: return at once; the Request says when the buffer may be reused (put) or
  // holds the data (get). Errors found before issuing are in the returned Request's wait().
  Request put_async(const void* source, std::size_t bytes, const RemoteMemory& remote,
                    std::size_t offset);
  Request get_async(void* destination, std::size_t bytes, const RemoteMemory& remote,
                    std::size_t offset);
  // 64-bit atomics on an 8-byte aligned word; `old` (may be null for fetch_add) receives the
  // previous value.
  Status fetch_add(const RemoteMemory& remote, std::size_t offset, std::uint64_t value,
                   std::uint64_t* old = nullptr);
  Status compare_swap(const RemoteMemory& remote, std::size_t offset, std::uint64_t expected,
                      std::uint64_t desired, std::uint64_t* old);
  Status swap(const RemoteMemory& remote, std::size_t offset, std::uint64_t value,
              std::uint64_t* old);
  // Non-blocking compare-and-swap: issued at once; when the Request is done, `*old` (required,
  // untouched until then) holds the value before (== expected when it swapped). Several in flight
  // towards one or many peers complete in one round trip. Errors (in the Request): as
  // compare_swap().
  Request compare_swap_async(const RemoteMemory& remote, std::size_t offset, std::uint64_t expected,
                             std::uint64_t desired, std::uint64_t* old);
  // Reads `count` (1 .. kMaxWordOpWords) 8-byte words at `offset` (8-byte aligned) into `values`,
  // ordered: the first word is read before every other and the last word after every other, each
  // with acquire order (where the region maps and where RMA is emulated: all of them in ascending
  // address order) — so a word the writer sets before and another it sets after the words between
  // (a seqlock's two version words) bracket a consistent read. Where the region maps: loads; where
  // RMA is emulated (tcp): one active message the peer's worker answers; native RMA without a
  // mapping (InfiniBand): three gets one after the other. Errors: peer_failed, invalid_argument
  // (outside the region, count out of range).
  Status load_words(const RemoteMemory& remote, std::size_t offset, std::uint64_t* values, std::size_t count);
  // Non-blocking load_words: `values` holds the words once the Request is done (where the region
  // maps, and for native RMA without a mapping, it is done on return).
  Request load_words_async(const RemoteMemory& remote, std::size_t offset, std::uint64_t* values,
                           std::size_t count);
  // Writes `count` (1 .. kMaxWordOpWords) words from `values` at `offset` (8-byte aligned), in
  // ascending address order, each a release store (a peer that sees word i+1 new sees word i new);
  // word operations issued later on this endpoint (atomics, load_words, store_words) are applied
  // after them. Done when the words are visible at the peer (`values` untouched until then).
  // Where the region maps: stores, done on return; where RMA is emulated: one active message;
  // native RMA without a mapping: one-word puts ordered by fences, then a flush, done on return.
  // Errors: as load_words().
  Request store_words_async(const std::uint64_t* values, std::size_t count, const RemoteMemory& remote,
                            std::size_t offset);
  // Writes `count` (1 .. kMaxWordOpWords) words from `values` at `offset` like store_words_async
  // (ascending, in issue order with this endpoint's other word operations) but does not wait for
  // the peer: returns once `values` may be reused. Where RMA is emulated (tcp) the words travel as
  // one active message that the peer's worker applies and answers only if it refuses them, so a
  // stream of posted stores costs no round trip per store; flush() confirms them (when it
  // returns ok, every store posted before it on this endpoint was applied at the peer; a refused
  // one makes it return invalid_argument). Where the region maps and with native RMA: as
  // store_words_async, done on return. Errors: as store_words_async.
  Status post_words(const std::uint64_t* values, std::size_t count, const RemoteMemory& remote, std::size_t offset);
  // Completes every operation issued before it on this endpoint at the peer: puts (put_nbi,
  // put_async), and where RMA is emulated, the stores of post_words. Errors: peer_failed,
  // timeout, invalid_argument (a posted store the peer refused).
  Status flush();
  // Starts a flush of a fresh endpoint (nothing issued on it yet) and returns at once: the
  // Request completes when flush() would have returned, so flushes of many endpoints overlap
  // (Worker::connect_all). Errors as flush(), from the Request.
  Request flush_async();
  // Where RMA is emulated, word operations (atomics, load_words, store_words and their async
  // forms) are active messages the peer's worker applies. From hold_word_ops() until
  // release_word_ops(), those issued on this endpoint are kept and sent together as one message
  // (or as few as fit kMaxAmBytes), answered by one reply: many operations towards one peer then
  // cost one message each way instead of one per operation. They are applied in issue order as
  // always. Waiting for one of them sends what is held. No effect where they are native.
  void hold_word_ops();
  // Sends the held word operations and stops holding. Errors: peer_failed.
  Status release_word_ops();

  // Sends active message `id` with `data` (<= kMaxAmBytes, copied). Returns when the data left
  // the caller's buffer. The receiver's handler may reply through its AmReplier.
  Status am_send(std::uint16_t id, std::span<const std::byte> data);
  // Sends active message `id` with a small `header` and `data` of any size, without copying
  // either: both must stay untouched until the Request is done. Always eager (the data travels
  // without waiting for the receiver; UCX splits it into fragments and the receiver's handler
  // sees the whole message), so completion never depends on the receiver's progress. Messages on
  // one endpoint arrive in the order they were sent. Errors (in the Request): peer_failed.
  // `reply`: the receiver's handler gets an AmReplier that can answer.
  Request am_send_async(std::uint16_t id, std::span<const std::byte> header,
                        std::span<const std::byte> data, bool reply = false);

  // True when UCX moves this endpoint's puts and gets without the peer's CPU (a lane with native
  // RMA: shm, InfiniBand, RoCE); false where it emulates them with active messages the peer must
  // progress (tcp). Asked of UCX once per endpoint, from the lanes it chose.
  bool rma_native() const;

  // Flushes (or force-closes a failed endpoint) and releases it; also done by the destructor
  // once the last RemoteMemory attached to it is gone.
  void close();
  // Releases the endpoint without flushing: what is still queued in UCX may be dropped. For
  // endpoints whose last messages do not matter (credits to a writer that is done), so that
  // closing never waits for a peer that is not progressing.
  void close_now();

 private:
  detail::EndpointState& state() const;
  // put_async / get_async: `buffer` is read (put) or written (get).
  Request rma_async(bool put, void* buffer, std::size_t bytes, const RemoteMemory& remote,
                    std::size_t offset);
  // Makes `request` follow what a UCX call returned (`issued`: a ucs_status_ptr_t).
  void track(Request& request, void* issued);
  // Makes `request` follow word operation `id` (0: not issued, `issued` says why).
  void track_word_op(Request& request, Status issued, const std::uint64_t& id);
  std::shared_ptr<detail::EndpointState> state_;
};

// Raises a word that a peer registered with Worker::register_word, by active message. Never
// blocks: at most one message is in flight; a value raised meanwhile is kept and sent by a later
// raise() or poll() once the previous message left (values only grow, so the latest one is all
// the peer needs). Owned by the thread owning the endpoint's worker.
class WordRaiser {
 public:
  WordRaiser() = default;
  WordRaiser(Endpoint endpoint, std::uint32_t token) : endpoint_(std::move(endpoint)), token_(token) {}
  WordRaiser(const WordRaiser&) = delete;  // UCX may be reading message_
  WordRaiser& operator=(const WordRaiser&) = delete;

  // Sends `value` now, or keeps it until the message in flight completed. Errors: peer_failed
  // (the endpoint failed; later calls return the same).
  Status raise(std::uint64_t value);
  // Sends a kept value if the message in flight completed. Cheap when nothing is kept.
  Status poll();
  // True when no value waits to be sent.
  bool idle() const noexcept { return pending_ <= sent_; }
  Endpoint& endpoint() noexcept { return endpoint_; }

 private:
  Endpoint endpoint_;
  std::uint32_t token_ = 0;
  std::uint64_t message_[2] = {0, 0};  // {token, value}: UCX reads it until the send completes
  Request in_flight_;
  std::uint64_t pending_ = 0;  // highest value asked for
  std::uint64_t sent_ = 0;     // highest value handed to UCX
};

}  // namespace dfi::fabric
