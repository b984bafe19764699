// Private to the fabric layer: the UCX handles behind the public fabric types.
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/worker.hpp"

namespace dfi::fabric {

struct Context::Impl {
  ucp_context_h context = nullptr;
  // Registered regions [address, address + size): the words peers may operate on by active
  // message (word_op) where UCX only emulates atomics. Guarded by regions_mutex.
  mutable std::mutex regions_mutex;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> regions;
  // Address ranges of released regions kept mapped (MemoryRegion::release, emulated one-sided
  // transports): unmapped by ~Context, after UCX is gone. Guarded by regions_mutex.
  std::vector<std::pair<void*, std::size_t>> retired;
  bool owns_word(std::uint64_t address) const;
  // Whether [address, address + bytes) lies inside one registered region.
  bool owns_range(std::uint64_t address, std::uint64_t bytes) const;
  mutable std::mutex failures_mutex;
  std::unordered_map<int, std::string> failures;  // rank -> reason, guarded by failures_mutex
  // Bumped (release) by the word-op handler after each message whose stores it applied;
  // Context::acquire_applied_stores() loads it (acquire).
  std::atomic<std::uint64_t> applied_stores{0};
};

struct Worker::Impl {
  struct HandlerSlot {
    std::uint16_t id;
    AmHandler handler;
    Impl* worker;
  };
  // Buffers for small replies (AmReplier::reply): UCX reads a reply's data until its send
  // completes, which may be after the handler returned. A reply takes one and its completion
  // gives it back, so answering allocates nothing while fewer than kReplyBuffers are in flight.
  static constexpr std::size_t kReplyBuffers = 64;
  static constexpr std::size_t kReplyBufferBytes = 64;
  struct ReplyBuffer {
    Impl* owner = nullptr;
    alignas(8) std::byte data[kReplyBufferBytes];
  };
  std::vector<ReplyBuffer> reply_buffers = std::vector<ReplyBuffer>(kReplyBuffers);
  std::vector<ReplyBuffer*> free_replies;

  Context* context = nullptr;
  ucp_worker_h worker = nullptr;
  std::atomic<bool> claimed{false};  // Worker::try_claim
  std::atomic<std::uint64_t> owner_claims{0};  // Worker::claim, i.e. by its owner
  std::string name;
  int event_fd = -1;
  std::chrono::milliseconds op_timeout{0};
  std::unordered_map<std::uint16_t, std::unique_ptr<HandlerSlot>> handlers;
  // Words peers may raise (register_word): slot index = token & 0xffff, generation = token >> 16.
  struct WordSlot {
    std::uint64_t* word = nullptr;
    std::uint16_t generation = 0;
  };
  std::vector<WordSlot> words;
  std::vector<std::uint16_t> free_words;
  bool word_handler_installed = false;
  // Word operations in flight from this worker (EndpointState::issue_word_op), slot id %
  // kWordWaits. A slot is taken when the operation is issued and given back when its reply
  // arrived (or the endpoint failed); a reply whose id no slot holds any more (its waiter gave
  // up) is dropped.
  struct WordWait {
    std::uint64_t id = 0;                 // 0: free
    std::uint64_t* out = nullptr;         // receives the reply's result words
    std::size_t out_words = 0;
    std::uint64_t status = 0;             // the reply's status (0: ok)
    bool arrived = false;
  };
  static constexpr std::size_t kWordWaits = 64;
  std::array<WordWait, kWordWaits> word_waits{};
  std::uint64_t next_op = 0;
  // Posted word stores (Endpoint::post_words) the peer refused, by the sending endpoint's serial:
  // the first refusal's status, reported by that endpoint's next flush(). Empty but for errors.
  std::unordered_map<std::uint64_t, std::uint64_t> posted_failures;
  std::uint64_t endpoint_serials = 0;  // the last serial given to an endpoint of this worker
  // How a word operation's waiter waits (EndpointState::wait_word_op), and the waiter of a UCX
  // request on an endpoint whose one-sided operations are emulated (EndpointState::wait):
  // resolved once, when the worker is created. Word operations travel as messages only where the
  // transport emulates one-sided operations (tcp), where every poll is a system call: the syscall
  // settings, with word_wait_yield_rounds for the yielding phase (a reply is microseconds away
  // once the peer's thread runs; a blocked waiter pays a wake-up per operation).
  BackoffSettings word_backoff;
  // Whether a waiter of a UCX request (EndpointState::progress_or_pause) backs off with
  // word_backoff: where the transport emulates one-sided operations (tcp; resolved with the
  // worker), whose completions may need the peer's CPU; elsewhere (shm, verbs) it spins.
  bool wait_blocks = false;

  // Blocks until the worker's event fd signals or `timeout` passed (Worker::wait_for_event with
  // idle = true); true when something arrived.
  bool wait_for_event(std::chrono::microseconds timeout);

  ~Impl();
};

// The fabric's own active message: WordRaiser -> Worker::register_word.
inline constexpr std::uint16_t kRaiseWordAm = kFirstReservedAmId;

// Word operations on a peer's registered memory by active message (fetch-add, compare-and-swap,
// swap, load, and the ordered multi-word load_words / store_words), where UCX only emulates
// atomics and gets. One message carries one or more operations back to back (several when the
// sender held them: Endpoint::hold_word_ops), each {id, address, op, a, b} followed, for
// store_words, by its `a` words; the reply carries {id, status, n, n result words} per operation
// (one result word for the atomics and load, `a` words for load_words, none for store_words).
// The handler runs on the peer's worker thread and applies the operations in the order they were
// issued on one endpoint (messages arrive in the order sent), and replies through AmReplier,
// which fails cleanly towards a dead requester (UCX 1.13 aborts a process whose emulated atomic
// reply hits a failed endpoint).
inline constexpr std::uint16_t kWordOpAm = kFirstReservedAmId + 1;
inline constexpr std::uint16_t kWordReplyAm = kFirstReservedAmId + 2;
// post_words: store_words that is answered only when it fails (Endpoint::post_words); its id is
// kPostedOp | the sender's endpoint serial. fence: touches no memory, answered when every
// operation before it on the endpoint was applied.
enum class WordOp : std::uint64_t {
  add = 1, compare_swap = 2, swap = 3, load = 4, load_words = 5, store_words = 6, post_words = 7, fence = 8
};
inline constexpr std::uint64_t kPostedOp = std::uint64_t{1} << 63;
// Installs the word-op handlers on a new worker.
void install_word_ops(Worker::Impl& impl);

// Installs `handler` for `id` on the worker, reserved ids included.
void install_am_handler(Worker::Impl& impl, std::uint16_t id, AmHandler handler);

// "ucs status text" for messages.
std::string ucx_error_text(ucs_status_t status);

namespace detail {

// One UCX endpoint and its failure state. Shared by the Endpoint and every RemoteMemory attached
// to it, so that remote keys are always destroyed before the endpoint is closed.
struct EndpointState {
  std::shared_ptr<Worker::Impl> worker;
  ucp_ep_h ep = nullptr;
  int peer = -1;
  std::string peer_name;
  Status failure;                  // ok while healthy
  std::uint64_t seen_epoch = 0;    // Context::failure_epoch() when last checked
  std::uint64_t serial = 0;        // unique among the worker's endpoints (names posted stores)
  bool posted = false;             // post_words sent by message since the last flush()
  std::vector<void*> pending;      // requests from put_nbi, completed by flush()

  ~EndpointState();

  // Waits for `request` from an operation described by `what`; bounded by the op timeout.
  Status wait(ucs_status_ptr_t request, std::string_view what);
  // Progresses the worker once for a waiter of one of its requests; then, where a completion may
  // need the peer's CPU (Worker::Impl::wait_blocks), pauses with `backoff` on the worker's events
  // when the poll found nothing, so that a waiter does not spin the core the peer may need.
  void progress_or_pause(Backoff& backoff);
  // Picks up a failure declared through Context::mark_peer_failed; returns the endpoint's status.
  // One atomic load when nothing changed.
  const Status& check_peer();
  // Records the first failure of this endpoint and returns it.
  Status fail(Errc code, std::string_view what, std::string_view reason);
  // Completes every request from put_nbi.
  Status wait_pending(std::string_view what);
  bool close_without_flush = false;  // Endpoint::close_now
  // -1 until asked, then 0 or 1: whether a lane has native RMA (Endpoint::rma_native).
  int rma_native = -1;
  bool native_rma();  // asks UCX once
  // A word operation on the peer's memory by active message; `result` gets the old value.
  Status word_op(WordOp op, std::uint64_t address, std::uint64_t a, std::uint64_t b, std::uint64_t* result,
                 std::string_view what);
  // Word operations issued but not sent yet (one message's data), and the words their replies
  // will take. Sent at once unless held (Endpoint::hold_word_ops); UCX may read the buffer
  // until `ops_send` completed.
  std::vector<std::uint64_t> ops;
  std::size_t ops_reply_words = 0;
  bool ops_held = false;
  void* ops_send = nullptr;
  // Sends the operations in `ops` as one message.
  Status send_ops(std::string_view what);
  // Makes room in `ops` for an operation of `request_words` whose reply takes `reply_words`:
  // sends a message that would overflow, and waits until UCX no longer reads `ops`.
  Status make_room(std::size_t request_words, std::size_t reply_words, std::string_view what);
  // Appends one operation's request (and its data words) to `ops`.
  void append_op(std::uint64_t id, std::uint64_t address, WordOp op, std::uint64_t a, std::uint64_t b,
                 const void* data, std::size_t data_words, std::size_t reply_words);
  // Waits until UCX no longer reads `ops` (the last message's send completed).
  Status reclaim_ops(std::string_view what);
  // Issues word operation `op` (`data`: the words store_words writes, copied) and takes a slot
  // of the worker for its reply, whose result words go to `out` (`out_words` of them; it must
  // stay valid until the operation is finished). `id` receives the operation's id, 0 when it
  // failed before it was issued (the Status says why).
  Status issue_word_op(WordOp op, std::uint64_t address, std::uint64_t a, std::uint64_t b, const void* data,
                       std::size_t data_bytes, std::uint64_t* out, std::size_t out_words, std::uint64_t& id,
                       std::string_view what);
  // Appends posted word store of `count` words from `data` at `address` (WordOp::post_words) and
  // sends it unless held; no slot, no reply unless the peer refuses it.
  Status post_words(std::uint64_t address, const std::uint64_t* data, std::size_t count, std::string_view what);
  // Sends a fence and waits for its reply: every posted store before it was applied, and the
  // first one the peer refused, if any, is the returned error. Clears `posted`.
  Status confirm_posted(std::string_view what);
  // Word operation `id` (from issue_word_op): progresses once; true when it finished, with its
  // outcome in `status` (its slot is then free again). `deadline` (may be null) bounds it.
  bool poll_word_op(std::uint64_t id, Status& status, std::string_view what, const Deadline* deadline);
  // Waits for word operation `id`, bounded by the op timeout.
  Status wait_word_op(std::uint64_t id, std::string_view what);
  void close() noexcept;
};

}  // namespace detail
}  // namespace dfi::fabric
