#include "dfi/common/config.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <thread>

#include "dfi/common/backoff.hpp"
#include "dfi/common/error.hpp"

namespace dfi::config {
namespace {

constexpr std::array kEntries{
    Entry{"transport", "DFI_TRANSPORT", "auto",
          "Fabric transport: shm (UCX sm), tcp (UCX tcp), or auto (UCX chooses; UCX_TLS is honoured)"},
    Entry{"net_devices", "DFI_NET_DEVICES", "",
          "Network devices for the tcp transport (UCX_NET_DEVICES); empty means loopback only"},
    Entry{"op_timeout_ms", "DFI_OP_TIMEOUT_MS", "10000",
          "Upper bound for any single fabric wait (put/get/atomic/flush/AM completion)"},
    Entry{"keepalive_ms", "DFI_KEEPALIVE_MS", "5000",
          "UCX keepalive interval (dead peers are also found through the registry membership)"},
    Entry{"debug_endpoints", "DFI_DEBUG_ENDPOINTS", "0",
          "1: print UCX's lane configuration of every endpoint to stderr when it is created"},
    Entry{"progress_nap_shm_us", "DFI_PROGRESS_NAP_SHM_US", "20000",
          "Longest sleep of a process's progress thread between polls where RMA is native (shm)"},
    Entry{"progress_nap_tcp_us", "DFI_PROGRESS_NAP_TCP_US", "5000",
          "Longest sleep of a process's progress thread where RMA is emulated (tcp). Flows move data "
          "by active messages their consumers receive, so this bounds only background work; its "
          "wake-ups cost the latency tail on small machines (p99 of a 64 B round trip: 45-47 us at "
          "100 us, 22-27 us at 5000 us)"},
    Entry{"segments_shm", "DFI_SEGMENTS_SHM", "32",
          "Default segments per ring of a bandwidth-mode flow where RMA is native (shm, verbs)"},
    Entry{"segment_bytes_shm", "DFI_SEGMENT_BYTES_SHM", "8208",
          "Default segment size (footer included) of a bandwidth-mode flow where RMA is native: "
          "8 KiB of payload, a whole number of tuples of any power-of-two width up to 8 KiB"},
    Entry{"segments_tcp", "DFI_SEGMENTS_TCP", "8",
          "Default segments per ring of a bandwidth-mode flow where segments travel as active messages (tcp)"},
    Entry{"segment_bytes_tcp", "DFI_SEGMENT_BYTES_TCP", "32784",
          "Default segment size (footer included) where segments travel as active messages (tcp): "
          "32 KiB of payload, as many ring bytes as 32 x 8 KiB, a quarter of the system calls"},
    Entry{"flow_memory_limit_bytes", "DFI_FLOW_MEMORY_LIMIT_BYTES", "0",
          "Largest ring region a flow target may allocate (its rings together); a flow needing more "
          "is refused by create_flow and by every open (invalid_argument). 0: a quarter of this "
          "machine's physical memory"},
    Entry{"data_path", "DFI_DATA_PATH", "auto",
          "How flows move segments where UCX emulates RMA (tcp): auto (one active message per segment, "
          "placed by the consumer) or rma (emulated one-sided puts, applied by the progress thread); "
          "the rrj join likewise: auto (staging buffers as word-store active messages) or rma (puts)"},
    Entry{"wait_spin_rounds", "DFI_WAIT_SPIN_ROUNDS", "1024",
          "Every wait (ring space, data, counters): polls that spin before the waiter yields its core"},
    Entry{"wait_yield_rounds", "DFI_WAIT_YIELD_ROUNDS", "4096",
          "Every wait: polls (from its start) after which the waiter sleeps between polls"},
    Entry{"wait_spin_rounds_syscall", "DFI_WAIT_SPIN_ROUNDS_SYSCALL", "32",
          "wait_spin_rounds where each poll is a system call (the active-message path over tcp: a "
          "poll progresses a UCX worker, which calls epoll_wait); 4 ranks on 2 cores spent a "
          "quarter of their time in empty epoll_waits at 1024 (4:4 shuffle over tcp 0.37 -> 0.16 s)"},
    Entry{"wait_yield_rounds_syscall", "DFI_WAIT_YIELD_ROUNDS_SYSCALL", "64",
          "wait_yield_rounds where each poll is a system call; after it the waiter blocks on the "
          "worker's events where it has them"},
    Entry{"word_wait_yield_rounds", "DFI_WORD_WAIT_YIELD_ROUNDS", "1024",
          "wait_yield_rounds_syscall for the waiter of a word operation by message (tcp: an "
          "emulated load, store or compare-and-swap, answered by the peer's CPU within microseconds "
          "unless that CPU waits for a core), and of any request on an endpoint whose one-sided "
          "operations are emulated (a get, a flush); after it the waiter blocks on the worker's events. "
          "Blocking after 64 cost one RSI client thread a quarter of its bank transfers; spinning "
          "without end kept 4 client threads' servers off 2 cores (bench/notes/rsi.md)"},
    Entry{"local_ranks", "DFI_LOCAL_RANKS", "0",
          "Ranks of the cluster on this machine (dfi cluster run sets it; 0: unknown). With at least "
          "twice as many ranks as cores, every wait spins and yields only as long as "
          "wait_spin_rounds_syscall and wait_yield_rounds_syscall unless wait_spin_rounds or "
          "wait_yield_rounds is set: a waiter that spins holds a core that a rank with work needs "
          "(kv, 7 ranks on 2 cores over shm: Multi-Paxos at window 1 58 k -> 228-248 k req/s)"},
    Entry{"wait_sleep_us", "DFI_WAIT_SLEEP_US", "50",
          "Every wait: upper bound of one random sleep between polls, in microseconds"},
    Entry{"flow_timeout_ms", "DFI_FLOW_TIMEOUT_MS", "60000",
          "Longest a push waits for ring space or a consume waits for data (0 = forever)"},
    Entry{"flow_faults", "DFI_FLOW_FAULTS", "",
          "Test fault injection: segments of chosen flow links delayed or dropped at their targets, rules "
          "read when a target opens (e.g. 'flow=kv.v*.accept,to=2,delay=150,every=10'; drops only on ordered "
          "replicate flows; syntax in include/dfi/flow/detail/faults.hpp); empty: none"},
    Entry{"registry", "DFI_REGISTRY", "127.0.0.1:7420",
          "host:port of the registry; rank 0 embeds the server there unless DFI_REGISTRY_EXTERNAL=1. "
          "etcd://host:port[,host:port...]: coordinate through an etcd v3 cluster instead (nothing embedded; "
          "records under the prefix dfi/<DFI_REGISTRY_TOKEN>/)"},
    Entry{"registry_token", "DFI_REGISTRY_TOKEN", "",
          "Shared secret for the registry; required when the server binds a non-loopback address"},
    Entry{"registry_timeout_ms", "DFI_REGISTRY_TIMEOUT_MS", "30000",
          "How long a rank waits for the registry, a record or a barrier before giving up"},
    Entry{"registry_dead_after_ms", "DFI_REGISTRY_DEAD_AFTER_MS", "3000",
          "The embedded registry closes a member's connection that stops answering (TCP keepalive from 1 s "
          "of silence, unacknowledged data) after about this long: a rank cut off from the network (a "
          "partition) is then declared dead like one that died; 0: the kernel's defaults (hours). On etcd: "
          "the TTL of a member's lease (whole seconds, at least 5)"},
    Entry{"registry_external", "DFI_REGISTRY_EXTERNAL", "0",
          "1: do not embed the registry in rank 0; connect to an already running server"},
};

}  // namespace

std::span<const Entry> entries() { return kEntries; }

const Entry& entry(std::string_view name) {
  for (const Entry& e : kEntries) {
    if (e.name == name) return e;
  }
  throw Error(Errc::invalid_argument, "unknown DFI setting '" + std::string(name) + "'");
}

std::string get_string(std::string_view name) {
  const Entry& e = entry(name);
  const char* value = std::getenv(std::string(e.env).c_str());
  if (value != nullptr && *value != '\0') return value;
  return std::string(e.default_value);
}

bool is_set(std::string_view name) {
  const char* value = std::getenv(std::string(entry(name).env).c_str());
  return value != nullptr && *value != '\0';
}

std::int64_t get_int(std::string_view name) {
  const std::string text = get_string(name);
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    throw Error(Errc::invalid_argument, std::string(entry(name).env) + "='" + text +
                                            "' is not a non-negative integer");
  }
  return value;
}

}  // namespace dfi::config

namespace dfi {

bool crowded_host() {
  static const std::int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return config::get_int("local_ranks") >= 2 * cores;
}

BackoffSettings BackoffSettings::from_config(bool polls_are_syscalls) {
  // A crowded host (config: local_ranks) waits as briefly as a system-call poll, unless the
  // plain settings are given.
  const bool crowded = !polls_are_syscalls && crowded_host();
  auto rounds = [&](const char* plain, const char* syscall) {
    const bool brief = polls_are_syscalls || (crowded && !config::is_set(plain));
    return static_cast<std::uint32_t>(config::get_int(brief ? syscall : plain));
  };
  BackoffSettings s;
  s.spin = rounds("wait_spin_rounds", "wait_spin_rounds_syscall");
  s.yield = rounds("wait_yield_rounds", "wait_yield_rounds_syscall");
  s.sleep_us = static_cast<std::uint32_t>(config::get_int("wait_sleep_us"));
  return s;
}

}  // namespace dfi
