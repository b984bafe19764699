#include "dfi/common/error.hpp"

namespace dfi {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::retry: return "retry";
    case Errc::timeout: return "timeout";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::not_found: return "not_found";
    case Errc::already_exists: return "already_exists";
    case Errc::protocol: return "protocol";
    case Errc::io: return "io";
    case Errc::peer_failed: return "peer_failed";
    case Errc::flow_failed: return "flow_failed";
    case Errc::fatal: return "fatal";
  }
  return "unknown";
}

}  // namespace dfi
