#include "dfi/common/error.hpp"

#include <array>
#include <utility>

namespace dfi {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::retry: return "retry";
    case Errc::gap: return "gap";
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

Status::Status(Errc code, std::string message) {
  if (code == Errc::ok) return;
  if (message.empty()) {
    bits_ = bare(code);
    return;
  }
  bits_ = reinterpret_cast<std::uintptr_t>(new Block{code, std::move(message)});
}

void Status::delete_block() noexcept { delete block(); }

std::uintptr_t Status::clone() const {
  return reinterpret_cast<std::uintptr_t>(new Block(*block()));
}

const std::string& Status::message() const noexcept {
  if (has_block()) return block()->message;
  // "" for ok, the code's name otherwise; built on the first call, later calls allocate nothing.
  // Errc::fatal is the last code.
  static const std::array<std::string, static_cast<std::size_t>(Errc::fatal) + 1> kNames = [] {
    std::array<std::string, static_cast<std::size_t>(Errc::fatal) + 1> names;
    for (std::size_t i = 1; i < names.size(); ++i) names[i] = errc_name(static_cast<Errc>(i));
    return names;
  }();
  const auto index = static_cast<std::size_t>(code());
  static const std::string kUnknown = "unknown";
  return index < kNames.size() ? kNames[index] : kUnknown;
}

void Status::throw_error() const { throw Error(code(), message()); }

}  // namespace dfi
