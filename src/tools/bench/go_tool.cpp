#include "go_tool.hpp"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/launch/child_process.hpp"
#include "process.hpp"

namespace dfi::tools::bench {

namespace fs = std::filesystem;

std::optional<std::string> go_binary() {
  if (auto go = launch::find_program("go")) return go;
  if (fs::exists("/usr/local/go/bin/go")) return std::string("/usr/local/go/bin/go");
  return std::nullopt;
}

std::string build_go_tool(const std::string& source, const std::string& binary, const std::string& what,
                          const std::string& install_hint) {
  const std::optional<std::string> go = go_binary();
  if (!go) throw Error(Errc::not_found, "bench: no Go for " + what + ": " + install_hint);
  std::error_code ec;
  if (fs::exists(binary, ec)) {
    fs::file_time_type newest{};
    for (const char* f : {"main.go", "go.mod", "go.sum"}) newest = std::max(newest, fs::last_write_time(fs::path(source) / f));
    if (fs::last_write_time(binary, ec) >= newest) return binary;
  }
  fs::create_directories(fs::path(binary).parent_path(), ec);
  const std::vector<std::string> argv = {*go, "-C", source, "build", "-buildvcs=false", "-o", binary, "."};
  launch::ChildResult r = launch::run_child({argv, {}}, std::chrono::minutes(5));
  if (r.exit_code != 0 || r.timed_out) {
    throw Error(Errc::io, "bench: building " + what + " failed: " + shell_join(argv) + "\n" + tail_lines(r.output, 20));
  }
  return binary;
}

}  // namespace dfi::tools::bench
