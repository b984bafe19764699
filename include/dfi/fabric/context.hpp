// fabric::Context — one per process: the UCX context, the transport choice and its capabilities.
//
// The fabric layer is the only code in DFI that includes UCX headers. Everything above it sees
// Context, Worker, Endpoint, MemoryRegion and RemoteMemory, never a UCX type.
//
// Typical process setup (cluster::Node does this for you):
//   fabric::Context ctx(fabric::context_options_from_config());
//   fabric::Worker service(ctx, "service");          // target of all incoming traffic
//   fabric::ProgressThread progress(service);        // progresses it when the transport needs it
//   fabric::Worker mine(ctx, "thread-0");            // one per communicating thread
//   fabric::Endpoint ep = mine.connect(peer_rank, peer_service_address);
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace dfi::fabric {

// Which UCX transports a context may use.
enum class Transport {
  automatic,  // UCX chooses (UCX_TLS from the environment is honoured)
  shm,        // shared memory only (UCX "sm"): truly one-sided put/get/atomics
  tcp,        // TCP only: RMA and atomics are emulated and need target-side progress
};

// Parses "auto", "shm" or "tcp"; throws dfi::Error(invalid_argument) otherwise.
Transport parse_transport(std::string_view text);
std::string_view transport_name(Transport transport) noexcept;

// The UCX library this process runs on, which may differ from the headers DFI was built with:
// "UCX 1.22.0 (/usr/lib/libucp.so.0.0.0)", the version ucp_get_version reports and the file the
// dynamic loader took libucp from (links resolved) (UCX loads its transport modules from that file's directory).
// `dfi --version` prints it.
std::string ucx_runtime();

// What the chosen transport can do; flows pick their strategy from this once, at creation.
struct Capabilities {
  bool native_one_sided = false;       // put/get/atomics complete without the target's CPU
  bool needs_target_progress = true;   // a progress thread must serve incoming operations
  bool can_map_remote = false;         // RemoteMemory::mapped() may return a direct pointer
};

struct ContextOptions {
  Transport transport = Transport::automatic;
  // UCX keepalive interval. Short intervals declare busy-but-alive peers dead on a loaded
  // machine; cluster::Node detects dead processes through the registry instead.
  std::chrono::milliseconds keepalive{5000};
  // Upper bound for any single wait on a fabric operation. When it passes, the endpoint is
  // declared failed (an unresponsive peer is treated like a dead one) and the call returns an error.
  std::chrono::milliseconds op_timeout{10000};
  // Network devices for TCP (UCX_NET_DEVICES); empty = "lo" unless UCX_NET_DEVICES is set.
  std::string net_devices;
};

// Options from the settings table (DFI_TRANSPORT, DFI_KEEPALIVE_MS, DFI_OP_TIMEOUT_MS,
// DFI_NET_DEVICES). Throws dfi::Error(invalid_argument) for malformed values.
ContextOptions context_options_from_config();

class Context {
 public:
  // Creates the UCX context with RMA, 64-bit atomics, active messages and wakeup, for several
  // workers used from different threads. Throws dfi::Error(fatal) if UCX cannot be initialised.
  explicit Context(ContextOptions options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const ContextOptions& options() const noexcept { return options_; }
  Capabilities capabilities() const noexcept { return capabilities_; }
  // One line describing transport and capabilities, for logs and `dfi fabric check`.
  std::string describe() const;

  // Declares `rank` dead (e.g. its cluster membership vanished). Every endpoint to that rank
  // fails its current and later operations with Errc::peer_failed and `reason`. Thread-safe;
  // the first reason for a rank is kept.
  void mark_peer_failed(int rank, const std::string& reason);
  // The reason `rank` was declared dead, or an empty string. Thread-safe.
  std::string peer_failure(int rank) const;
  // Changes whenever a peer is declared dead; endpoints compare it to skip the lookup.
  std::uint64_t failure_epoch() const noexcept { return failure_epoch_.load(std::memory_order_acquire); }

  // Orders the calling thread after every word store (Endpoint::store_words_async, post_words)
  // that peers' active messages applied to this process's regions so far (where RMA is
  // emulated, a worker thread of this process applies them). A thread that learned by other
  // means that peers' stores are complete — a registry exchange, a message — calls it before it
  // reads what they stored: that exchange orders them in fact, but through other processes and
  // sockets, which the language's memory model (and TSan) cannot see. One atomic load.
  void acquire_applied_stores() const noexcept;

  struct Impl;  // defined in src/fabric; opaque above the fabric layer
  Impl& impl() noexcept { return *impl_; }

 private:
  std::atomic<std::uint64_t> failure_epoch_{0};
  ContextOptions options_;
  Capabilities capabilities_;
  std::unique_ptr<Impl> impl_;
};

// The one way a wait loop learns that a peer died: one atomic load while nobody was declared
// dead since the last look; the caller looks up the ranks it cares about only when someone was.
//
//   FailureWatch watch(node.fabric());
//   ... every 64 rounds of a wait:
//   if (auto dead = watch.failed(ranks)) return {Errc::peer_failed, "... rank " + ... + dead->reason};
//
// Owned by one thread (the Context it reads is thread-safe).
class FailureWatch {
 public:
  struct Failure {
    int rank = -1;
    std::string reason;
  };
  explicit FailureWatch(const Context& context) noexcept : context_(&context), seen_(context.failure_epoch()) {}

  // True once after each time some peer was declared dead (since construction or the last true).
  bool changed() noexcept {
    const std::uint64_t epoch = context_->failure_epoch();
    if (epoch == seen_) return false;
    seen_ = epoch;
    return true;
  }
  // After changed(): the first of `ranks` (any range of int) declared dead, with the reason.
  // Reported once: callers latch it (the flow has failed).
  template <class Ranks>
  std::optional<Failure> failed(const Ranks& ranks) {
    if (!changed()) return std::nullopt;
    for (int rank : ranks) {
      std::string reason = context_->peer_failure(rank);
      if (!reason.empty()) return Failure{rank, std::move(reason)};
    }
    return std::nullopt;
  }
  // The reason `rank` was declared dead, or an empty string.
  std::string reason(int rank) const { return context_->peer_failure(rank); }

 private:
  const Context* context_;
  std::uint64_t seen_;
};

}  // namespace dfi::fabric
