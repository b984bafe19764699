#include "dfi/fabric/context.hpp"

#include <dlfcn.h>
#include <sys/mman.h>

#include <cstdlib>

#include "dfi/common/config.hpp"
#include "internal.hpp"

namespace dfi::fabric {

std::string ucx_error_text(ucs_status_t status) { return ucs_status_string(status); }

Transport parse_transport(std::string_view text) {
  if (text == "auto") return Transport::automatic;
  if (text == "shm") return Transport::shm;
  if (text == "tcp") return Transport::tcp;
  throw Error(Errc::invalid_argument,
              "unknown transport '" + std::string(text) + "' (expected shm, tcp or auto)");
}

std::string_view transport_name(Transport transport) noexcept {
  switch (transport) {
    case Transport::automatic: return "auto";
    case Transport::shm: return "shm";
    case Transport::tcp: return "tcp";
  }
  return "unknown";
}

std::string ucx_runtime() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  std::string text = "UCX " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
  Dl_info library{};
  if (::dladdr(reinterpret_cast<void*>(&ucp_get_version), &library) != 0 && library.dli_fname != nullptr) {
    // The file itself, not the link the loader followed (/lib/... -> /usr/lib/...so.0.0.0).
    char* real = ::realpath(library.dli_fname, nullptr);
    text += " (" + std::string(real != nullptr ? real : library.dli_fname) + ")";
    std::free(real);
  }
  return text;
}

ContextOptions context_options_from_config() {
  ContextOptions options;
  options.transport = parse_transport(config::get_string("transport"));
  options.keepalive = std::chrono::milliseconds(config::get_int("keepalive_ms"));
  options.op_timeout = std::chrono::milliseconds(config::get_int("op_timeout_ms"));
  options.net_devices = config::get_string("net_devices");
  return options;
}

namespace {

Capabilities capabilities_of(Transport transport) {
  switch (transport) {
    case Transport::shm: return {.native_one_sided = true, .needs_target_progress = false, .can_map_remote = true};
    case Transport::tcp: return {.native_one_sided = false, .needs_target_progress = true, .can_map_remote = false};
    case Transport::automatic: break;
  }
  // Unknown mix of transports: assume the weakest so flows stay correct.
  return {.native_one_sided = false, .needs_target_progress = true, .can_map_remote = false};
}

void modify(ucp_config_t* config, const char* name, const std::string& value) {
  ucs_status_t status = ucp_config_modify(config, name, value.c_str());
  if (status != UCS_OK) {
    ucp_config_release(config);
    throw Error(Errc::fatal, "fabric: cannot set UCX_" + std::string(name) + "=" + value + ": " +
                                 ucx_error_text(status));
  }
}

}  // namespace

Context::Context(ContextOptions options)
    : options_(std::move(options)), capabilities_(capabilities_of(options_.transport)),
      impl_(std::make_unique<Impl>()) {
  // Peer failure detection turns shm off unless the mm transports allow error handling
  // (UCX-NOTES.md). These are transport settings ucp_config_modify cannot reach, so they go
  // through the environment, without overriding a user's explicit choice.
  if (options_.transport != Transport::tcp) {  // tcp loads no mm transport: UCX would warn
    ::setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
    ::setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
  }

  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) {
    throw Error(Errc::fatal, "fabric: cannot read UCX configuration: " + ucx_error_text(status));
  }
  // Not "sm": that adds cma, whose key entry follows sysv's in a packed memory key. UCX 1.13
  // crashes when an unpack fails before the last entry (ucp_rkey_destroy releases entries it
  // never unpacked; openucx/ucx#10380), and over shm an unpack fails when the key's owner has
  // exited (its sysv segment is gone). With sysv last, that unpack returns an error instead,
  // which Endpoint::attach reports as the peer's failure. Nothing here uses cma: shm flows
  // write into mapped segments, and every region is allocated by UCX (sysv or posix).
  if (options_.transport == Transport::shm) modify(config, "TLS", "sysv,posix,self");
  if (options_.transport == Transport::tcp) {
    modify(config, "TLS", "tcp,self");
    // Keep TCP traffic on loopback unless told otherwise (netns clusters name their veth).
    std::string devices = options_.net_devices;
    if (devices.empty() && std::getenv("UCX_NET_DEVICES") == nullptr) devices = "lo";
    if (!devices.empty()) modify(config, "NET_DEVICES", devices);
  }
  modify(config, "KEEPALIVE_INTERVAL", std::to_string(options_.keepalive.count()) + "ms");
  // An endpoint sends its wireup request when it is created, not at its first operation that
  // needs the peer's endpoint id (an attach over tcp, an active message): Worker::connect then
  // completes the handshake before it returns (Worker::Handshake::complete).
  modify(config, "RESOLVE_REMOTE_EP_ID", "y");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  status = ucp_init(&params, config, &impl_->context);
  ucp_config_release(config);
  if (status != UCS_OK) {
    throw Error(Errc::fatal, "fabric: cannot initialise UCX (transport " +
                                 std::string(transport_name(options_.transport)) + "): " +
                                 ucx_error_text(status));
  }
}

Context::~Context() {
  if (!impl_) return;
  if (impl_->context != nullptr) ucp_cleanup(impl_->context);
  for (const auto& [address, bytes] : impl_->retired) ::munmap(address, bytes);
}

void Context::mark_peer_failed(int rank, const std::string& reason) {
  {
    std::lock_guard lock(impl_->failures_mutex);
    if (!impl_->failures.emplace(rank, reason).second) return;
  }
  failure_epoch_.fetch_add(1, std::memory_order_acq_rel);
}

void Context::acquire_applied_stores() const noexcept {
  (void)impl_->applied_stores.load(std::memory_order_acquire);
}

std::string Context::peer_failure(int rank) const {
  std::lock_guard lock(impl_->failures_mutex);
  auto it = impl_->failures.find(rank);
  return it == impl_->failures.end() ? std::string() : it->second;
}

std::string Context::describe() const {
  std::string text = "transport=" + std::string(transport_name(options_.transport));
  text += capabilities_.native_one_sided ? " one-sided=native" : " one-sided=emulated";
  text += capabilities_.needs_target_progress ? " target-progress=needed" : " target-progress=none";
  text += capabilities_.can_map_remote ? " map-remote=yes" : " map-remote=no";
  return text;
}

}  // namespace dfi::fabric
