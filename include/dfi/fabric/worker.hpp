// fabric::Worker — one UCX worker, owned by one thread at a time.
//
// Every thread that communicates has its own Worker (no shared worker on the hot path). A
// Worker creates Endpoints to peers, runs active-message handlers inside progress(), and can
// block until something arrives (wait_for_event). All methods except signal() must be called by
// the owning thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dfi/common/error.hpp"

namespace dfi::fabric {

class Context;
class Endpoint;

// Largest active message am_send() and AmReplier::reply() copy. Segments of the active-message
// data path go through Endpoint::am_send_async instead, which takes any size without copying.
inline constexpr std::size_t kMaxAmBytes = 8192;

// Active-message ids from here up belong to the fabric layer itself (Worker::register_word);
// set_am_handler() rejects them.
inline constexpr std::uint16_t kFirstReservedAmId = 0xff00;

// An active message as seen by a handler. `header` and `data` are valid only during the call.
struct AmMessage {
  std::uint16_t id = 0;
  std::span<const std::byte> header;  // empty unless the sender used am_send_async with a header
  std::span<const std::byte> data;
};

// Lets a handler answer the sender of the message it is handling.
class AmReplier {
 public:
  AmReplier(void* reply_ep, void* worker) : reply_ep_(reply_ep), worker_(worker) {}
  // Sends `data` (<= kMaxAmBytes) back to the sender as message `id`. The data is copied; the
  // call does not wait for completion. Errors: invalid_argument (too large), peer_failed.
  Status reply(std::uint16_t id, std::span<const std::byte> data);
  // Raises words that the sender registered with Worker::register_word (as a WordRaiser would),
  // `count` (1 or 2) {token, value} pairs in one message. Errors: as reply().
  Status raise(const std::uint64_t (*pairs)[2], std::size_t count);

 private:
  void* reply_ep_;  // ucp_ep_h of the sender, valid during the handler
  void* worker_;    // Worker::Impl of the receiving worker (its reply buffers)
};

// Runs inside Worker::progress() on the owning thread; must not block.
using AmHandler = std::function<void(const AmMessage&, AmReplier&)>;

class Worker {
 public:
  // Creates a worker for single-thread use. `name` appears in every error message.
  // Throws dfi::Error(fatal) if UCX refuses.
  Worker(Context& context, std::string name);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const std::string& name() const noexcept;
  Context& context() noexcept;

  // This worker's address blob; peers pass it to connect(). Publish it through the registry.
  std::string address() const;

  // Makes progress on all communication of this worker and runs AM handlers; returns the
  // number of events processed (0 = nothing happened).
  unsigned progress();

  // How connect() treats UCX's connection handshake with the peer.
  enum class Handshake {
    // Complete it before connect() returns (the default): the endpoint sends its wireup request
    // at once (the context sets UCX_RESOLVE_REMOTE_EP_ID=y) and this worker is progressed until
    // the peer's reply arrived, so the peer holds no wireup reply for us any more. Over tcp,
    // UCX 1.13 aborts a process that must discard a pending wireup reply to a peer that died
    // (the assertion of ucp_request_send_state_ff that openucx/ucx#8175 removed): a peer that
    // dies after this connect() returned can no longer cause that abort (one that dies during
    // it still can: the reply is pending at the peer for a round trip). The peer's worker must
    // be progressed meanwhile (a node's service worker and flow targets' workers are).
    complete,
    // Leave it to the first operations (for a peer worker that the calling thread itself
    // progresses only later, as in single-process tests).
    deferred,
  };

  // Creates an endpoint to the worker whose address is `peer_address`. `peer_rank` is used in
  // messages. Peer failure detection is on: operations towards a dead peer complete with
  // Errc::peer_failed. Throws dfi::Error: invalid_argument if the address is empty;
  // peer_failed if UCX refuses it or the peer died during the handshake; timeout if the peer
  // did not answer the handshake within op_timeout_ms.
  Endpoint connect(int peer_rank, std::string_view peer_address, Handshake handshake = Handshake::complete);

  // One endpoint per (rank, address) of `peers`, in that order, with every handshake completed
  // (Handshake::complete) in parallel: the handshakes overlap, so connecting to N peers takes
  // about one round trip, not N. Errors as connect(), naming the first peer that failed.
  std::vector<Endpoint> connect_all(const std::vector<std::pair<int, std::string>>& peers);

  // Installs the handler for AM `id` (replacing any previous one). Call before peers send it.
  // Throws dfi::Error(invalid_argument) for ids >= kFirstReservedAmId.
  void set_am_handler(std::uint16_t id, AmHandler handler);

  // Registers `word` (owned by this worker's thread, valid until unregister_word) so that peers
  // can raise it with a WordRaiser: the message's handler, run inside progress() on this
  // worker's thread, stores max(*word, value). Returns the token peers name the word by; a token
  // is never valid again after unregister_word, so a late message for it is ignored.
  std::uint32_t register_word(std::uint64_t* word);
  void unregister_word(std::uint32_t token) noexcept;

  // Orders all RMA/atomic operations issued by this worker before the fence ahead of those
  // issued after it (per endpoint lane; see UCX-NOTES.md). Cheap on shm.
  Status fence();

  // Sleeps until an event arrives or `timeout` passes; returns false on timeout. Progresses
  // first, so no event is lost between the last progress() and the sleep; a caller whose own
  // progress() returned 0 just before passes `idle` = true and saves that pass (over tcp, a
  // system call): UCX's arm then reports whatever arrived since.
  bool wait_for_event(std::chrono::microseconds timeout, bool idle = false);

  // Wakes a thread blocked in wait_for_event(). Any thread may call it.
  void signal();

  // Sharing a worker between its owner and a ProgressThread that adopted it: whoever wants to
  // call the worker first claims it (acquire), and unclaims it when done (release). The owner
  // calls claim(), which spins until it gets it (the progress thread holds it for one
  // progress() pass at most); the progress thread calls try_claim(), which returns false while
  // the owner holds it. Any thread may call these.
  bool try_claim() noexcept;
  void claim() noexcept;
  void unclaim() noexcept;
  // How often the owner called claim(): a progress thread leaves the worker alone while this
  // moves (the owner is progressing it itself).
  std::uint64_t owner_claims() const noexcept;

  struct Impl;  // defined in src/fabric; opaque above the fabric layer
  Impl& impl() noexcept { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// The receive workers of the flow targets the calling thread consumes from, so that a thread
// waiting in one flow keeps its others moving. Two threads that are each other's source and
// target (a server and its clients) would otherwise wait for each other: over active messages a
// writer learns of freed ring slots from a question its target's worker answers, and a thread
// blocked as a writer on one flow does not progress the worker of a target it reads on another.
// Only its process's progress thread would, once per nap (ProgressThread::adopt).
// Each thread has its own list, which holds the workers weakly: a worker whose target was
// destroyed drops out. An owned worker is progressed under try_claim(), never against its
// progress thread or a thread that claimed it.
namespace owned_workers {
// Adds `worker` to the calling thread's list (idempotent).
void add(const std::shared_ptr<Worker>& worker);
// Removes `worker` from the calling thread's list, if it is there.
void remove(const Worker* worker) noexcept;
// Progresses once every worker of the calling thread's list but `except` (null: all) that no one
// else holds; returns the number of events. A wait loop calls it before it sleeps.
unsigned progress(const Worker* except);
}  // namespace owned_workers

}  // namespace dfi::fabric
