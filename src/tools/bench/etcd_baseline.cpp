#include "etcd_baseline.hpp"

#include <filesystem>
#include <sstream>
#include <thread>

#include "dfi/common/error.hpp"
#include "go_tool.hpp"
#include "paths.hpp"
#include "process.hpp"

namespace dfi::tools::bench {
namespace {

namespace fs = std::filesystem;

constexpr const char* kInstallHint =
    "install Debian's etcd-server and etcd-client (scripts/dev bench installs them) and Go (>= the "
    "version in bench/etcd/ycsb/go.mod)";

// Builds bench/etcd/ycsb unless the binary is newer than its sources; returns its path.
std::string build_ycsb() {
  return build_go_tool((fs::path(bench_source_dir()) / "etcd" / "ycsb").string(),
                       (fs::path(bench_build_dir()) / "etcd" / "ycsb").string(), "the etcd load generator", kInstallHint);
}

}  // namespace

std::string etcd_unavailable() {
  if (std::string why = launch::etcd_unavailable(); !why.empty()) return why + " (and Go: " + kInstallHint + ")";
  if (!go_binary()) return std::string("go not found: ") + kInstallHint;
  return {};
}

std::string etcd_data_root(EtcdData data) {
  return data == EtcdData::tmpfs ? std::string("/dev/shm") : bench_build_dir();
}

nlohmann::json run_etcd_ycsb(const launch::EtcdCluster& cluster, const EtcdLoad& load, std::string* command) {
  const std::string binary = build_ycsb();
  std::ostringstream reads, seconds;
  reads << load.reads;
  seconds << load.seconds;
  const std::vector<std::string> argv = {binary,         "-endpoints", cluster.endpoints(),
                                         "-clients",     std::to_string(load.clients),
                                         "-window",      std::to_string(load.window),
                                         "-keys",        std::to_string(load.keys),
                                         "-reads",       reads.str(),
                                         "-value-bytes", std::to_string(load.value_bytes),
                                         "-seconds",     seconds.str()};
  if (command != nullptr) *command = shell_join(argv);
  launch::ChildResult r = launch::run_child({argv, {}}, std::chrono::seconds(static_cast<long>(load.seconds) + 120));
  std::istringstream lines(r.output);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.front() == '{') last = line;
  }
  if (r.exit_code != 0 || r.timed_out || last.empty()) {
    throw Error(Errc::io, "bench: the etcd load generator failed: " + shell_join(argv) + "\n" + tail_lines(r.output, 20));
  }
  return nlohmann::json::parse(last);
}

}  // namespace dfi::tools::bench
