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
  for (const char* program : {"etcd", "etcdctl"}) {
    if (!launch::find_program(program)) return std::string(program) + " not found in PATH: " + kInstallHint;
  }
  if (!go_binary()) return std::string("go not found: ") + kInstallHint;
  return {};
}

EtcdCluster::EtcdCluster(int members, EtcdData data, std::chrono::milliseconds bound) {
  const fs::path root = data == EtcdData::tmpfs ? fs::path("/dev/shm") : fs::path(bench_build_dir());
  data_dir_ = (root / ("dfi-etcd-" + std::to_string(::getpid()))).string();
  // (Streams, not "literal" + std::to_string(): GCC 12 warns falsely about that, -Wrestrict.)
  auto text = [](auto... parts) {
    std::ostringstream s;
    (s << ... << parts);
    return s.str();
  };
  std::error_code ec;
  fs::remove_all(data_dir_, ec);
  fs::create_directories(data_dir_, ec);
  if (ec) throw Error(Errc::io, "bench: cannot create " + data_dir_ + ": " + ec.message());
  std::vector<int> client(static_cast<std::size_t>(members)), peer(static_cast<std::size_t>(members));
  std::ostringstream initial, endpoints;
  for (std::size_t i = 0; i < client.size(); ++i) {
    client[i] = launch::pick_free_port();
    peer[i] = launch::pick_free_port();
    initial << (i ? "," : "") << 'm' << i << "=http://127.0.0.1:" << peer[i];
    endpoints << (i ? "," : "") << "127.0.0.1:" << client[i];
  }
  endpoints_ = endpoints.str();
  for (std::size_t i = 0; i < client.size(); ++i) {
    const std::string c = text("http://127.0.0.1:", client[i]);
    const std::string p = text("http://127.0.0.1:", peer[i]);
    std::vector<std::string> argv = {"etcd",
                                     "--name", text('m', i),
                                     "--data-dir", text(data_dir_, "/m", i),
                                     "--listen-client-urls", c, "--advertise-client-urls", c,
                                     "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                                     "--initial-cluster", initial.str(), "--initial-cluster-state", "new",
                                     "--log-level", "error"};
    if (i == 0) command_ = shell_join(argv);
    members_.push_back(launch::ChildProcess::start({argv, {}}));
  }
  const auto limit = std::chrono::steady_clock::now() + bound;
  for (;;) {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (!members_[i].running()) {
        throw Error(Errc::io, text("bench: etcd member ", i, " exited: ", command_, "\n", tail_lines(members_[i].output(), 20)));
      }
    }
    launch::ChildResult health = launch::run_child(
        {{"etcdctl", "--endpoints", endpoints_, "endpoint", "health"}, {{"ETCDCTL_API", "3"}}}, std::chrono::seconds(10));
    if (health.exit_code == 0) return;
    if (std::chrono::steady_clock::now() > limit) {
      throw Error(Errc::io, "bench: the etcd cluster (" + endpoints_ + ") did not become healthy:\n" +
                                tail_lines(health.output, 10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

EtcdCluster::~EtcdCluster() {
  members_.clear();  // a ChildProcess kills its group when it goes away
  std::error_code ec;
  fs::remove_all(data_dir_, ec);
}

nlohmann::json run_etcd_ycsb(const EtcdCluster& cluster, const EtcdLoad& load, std::string* command) {
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
