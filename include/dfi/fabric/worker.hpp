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

#include "dfi/common/error.hpp"

namespace dfi::fabric {

class Context;
class Endpoint;

// Largest active message DFI sends. Control traffic only: bulk data moves with RMA.
inline constexpr std::size_t kMaxAmBytes = 8192;

// An active message as seen by a handler. `data` is valid only during the handler call.
struct AmMessage {
  std::uint16_t id = 0;
  std::span<const std::byte> data;
};

// Lets a handler answer the sender of the message it is handling.
class AmReplier {
 public:
  explicit AmReplier(void* reply_ep) : reply_ep_(reply_ep) {}
  // Sends `data` (<= kMaxAmBytes) back to the sender as message `id`. The data is copied; the
  // call does not wait for completion. Errors: invalid_argument (too large), peer_failed.
  Status reply(std::uint16_t id, std::span<const std::byte> data);

 private:
  void* reply_ep_;  // ucp_ep_h of the sender, valid during the handler
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

  // Creates an endpoint to the worker whose address is `peer_address`. `peer_rank` is used in
  // messages. Peer failure detection is on: operations towards a dead peer complete with
  // Errc::peer_failed. Throws dfi::Error(peer_failed or invalid_argument) if the address is bad.
  Endpoint connect(int peer_rank, std::string_view peer_address);

  // Installs the handler for AM `id` (replacing any previous one). Call before peers send it.
  void set_am_handler(std::uint16_t id, AmHandler handler);

  // Orders all RMA/atomic operations issued by this worker before the fence ahead of those
  // issued after it (per endpoint lane; see UCX-NOTES.md). Cheap on shm.
  Status fence();

  // Sleeps until an event arrives or `timeout` passes; returns false on timeout. Progresses
  // first, so no event is lost between the last progress() and the sleep.
  bool wait_for_event(std::chrono::microseconds timeout);

  // Wakes a thread blocked in wait_for_event(). The only method that any thread may call.
  void signal();

  struct Impl;  // defined in src/fabric; opaque above the fabric layer
  Impl& impl() noexcept { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace dfi::fabric
