#include "registry_command.hpp"

#include <chrono>
#include <ctime>
#include <memory>
#include <random>
#include <algorithm>
#include <ostream>

#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"
#include "dfi/registry/client.hpp"
#include "dfi/registry/server.hpp"
#include "stop_signals.hpp"

namespace dfi::tools {

RegistryApart::RegistryApart() {
  std::random_device random;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token_ += kHex[random() & 0xf];
  registry::ServerOptions options;
  options.bind_host = "127.0.0.1";
  options.port = 0;
  options.token = token_;
  server_ = std::make_unique<registry::Server>(options);
}

RegistryApart::~RegistryApart() = default;

std::vector<std::pair<std::string, std::string>> RegistryApart::environment() const {
  return {{"DFI_REGISTRY", server_->address()}, {"DFI_REGISTRY_TOKEN", token_}, {"DFI_REGISTRY_EXTERNAL", "1"}};
}

int run_registry_serve(const RegistryServeOptions& options, std::ostream& out, std::ostream& err) {
  try {
    const std::string address = options.address.empty() ? config::get_string("registry") : options.address;
    const std::string token = options.token.empty() ? config::get_string("registry_token") : options.token;
    if (options.ranks < 0) throw Error(Errc::invalid_argument, "--ranks must not be negative");
    // SIGINT and SIGTERM end the loop below instead of the process, so the server stops cleanly.
    StopSignals stop;
    registry::Server server(registry::server_options_at(address, token));
    out << "dfi registry: serving at " << server.address() << '\n' << std::flush;
    std::unique_ptr<registry::Client> watch;
    if (options.ranks > 0) {
      watch = std::make_unique<registry::Client>(server.address(), token, std::chrono::seconds(10));
    }
    const auto start = std::chrono::steady_clock::now();
    std::size_t most = 0;
    for (;;) {
      if (stop.wait(std::chrono::milliseconds(100)) != 0) return 0;
      if (!watch) continue;
      const std::size_t members = watch->members().size();
      most = std::max(most, members);
      if (most >= static_cast<std::size_t>(options.ranks) && members == 0) {
        out << "dfi registry: all " << options.ranks << " ranks have left\n";
        return 0;
      }
      if (most < static_cast<std::size_t>(options.ranks) && options.timeout_seconds > 0 &&
          std::chrono::steady_clock::now() - start > std::chrono::duration<double>(options.timeout_seconds)) {
        err << "dfi registry: only " << most << " of " << options.ranks << " ranks joined within "
            << options.timeout_seconds << " s\n";
        return 1;
      }
    }
  } catch (const Error& e) {
    err << "dfi registry: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace dfi::tools
