#include "dfi/launch/etcd_cluster.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "dfi/common/error.hpp"

namespace dfi::launch {
namespace {

namespace fs = std::filesystem;

constexpr const char* kInstallHint = "install Debian's etcd-server and etcd-client";

// The last `lines` lines of `text`, for error messages.
std::string tail(const std::string& text, int lines) {
  std::size_t start = text.size();
  for (int seen = 0; start > 0 && seen <= lines; --start) {
    if (text[start - 1] == '\n') ++seen;
  }
  return text.substr(start);
}

// The parts streamed into one string (not "literal" + std::to_string(): GCC 12 warns falsely
// about that, -Wrestrict).
template <class... Parts>
std::string text(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

}  // namespace

std::string etcd_unavailable() {
  for (const char* program : {"etcd", "etcdctl"}) {
    if (!find_program(program)) return std::string(program) + " not found in PATH: " + kInstallHint;
  }
  return {};
}

EtcdCluster::EtcdCluster(int members, const std::string& data_root, std::chrono::milliseconds bound) {
  if (std::string why = etcd_unavailable(); !why.empty()) throw Error(Errc::not_found, "etcd cluster: " + why);
  if (members < 1) throw Error(Errc::invalid_argument, "etcd cluster: needs at least one member");
  static std::atomic<int> clusters{0};
  data_dir_ = (fs::path(data_root) / text("dfi-etcd-", ::getpid(), '-', clusters++)).string();
  std::error_code ec;
  fs::remove_all(data_dir_, ec);
  fs::create_directories(data_dir_, ec);
  if (ec) throw Error(Errc::io, "etcd cluster: cannot create " + data_dir_ + ": " + ec.message());
  std::vector<int> client(static_cast<std::size_t>(members)), peer(static_cast<std::size_t>(members));
  std::ostringstream initial, endpoints;
  // Free ports, each once: pick_free_port() releases what it found, so it may find it again.
  std::set<int> taken;
  auto unique_port = [&taken] {
    for (;;) {
      if (const int port = pick_free_port(); taken.insert(port).second) return port;
    }
  };
  for (std::size_t i = 0; i < client.size(); ++i) {
    client[i] = unique_port();
    peer[i] = unique_port();
    initial << (i ? "," : "") << 'm' << i << "=http://127.0.0.1:" << peer[i];
    endpoints << (i ? "," : "") << "127.0.0.1:" << client[i];
    client_addresses_.push_back(text("127.0.0.1:", client[i]));
  }
  endpoints_ = endpoints.str();
  for (std::size_t i = 0; i < client.size(); ++i) {
    const std::string c = "http://" + client_addresses_[i];
    const std::string p = text("http://127.0.0.1:", peer[i]);
    std::vector<std::string> argv = {"etcd",
                                     "--name", text('m', i),
                                     "--data-dir", text(data_dir_, "/m", i),
                                     "--listen-client-urls", c, "--advertise-client-urls", c,
                                     "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                                     "--initial-cluster", initial.str(), "--initial-cluster-state", "new",
                                     "--log-level", "error"};
    if (i == 0) {
      for (const std::string& arg : argv) command_ += (command_.empty() ? "" : " ") + arg;
    }
    members_.push_back(ChildProcess::start({argv, {}}));
  }
  const auto limit = std::chrono::steady_clock::now() + bound;
  for (;;) {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (!members_[i].running()) {
        throw Error(Errc::io, text("etcd cluster: member ", i, " exited: ", command_, "\n", tail(members_[i].output(), 20)));
      }
    }
    ChildResult health = run_child({{"etcdctl", "--endpoints", endpoints_, "endpoint", "health"}, {{"ETCDCTL_API", "3"}}},
                                   std::chrono::seconds(10));
    if (health.exit_code == 0) return;
    if (std::chrono::steady_clock::now() > limit) {
      throw Error(Errc::io, "etcd cluster (" + endpoints_ + ") did not become healthy:\n" + tail(health.output, 10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

EtcdCluster::~EtcdCluster() {
  members_.clear();  // a ChildProcess kills its group when it goes away
  std::error_code ec;
  fs::remove_all(data_dir_, ec);
}

bool EtcdCluster::running(int index) { return members_.at(static_cast<std::size_t>(index)).running(); }

void EtcdCluster::kill(int index) {
  ChildProcess& member = members_.at(static_cast<std::size_t>(index));
  if (member.running()) ::kill(member.pid(), SIGKILL);
  (void)member.wait(std::chrono::milliseconds(0));
}

int EtcdCluster::leader(std::chrono::milliseconds bound) {
  const auto limit = std::chrono::steady_clock::now() + bound;
  for (;;) {
    std::string alive;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (members_[i].running()) alive += (alive.empty() ? "" : ",") + client_addresses_[i];
    }
    if (alive.empty()) return -1;
    ChildResult status = run_child(
        {{"etcdctl", "--endpoints", alive, "endpoint", "status", "--write-out", "json"}, {{"ETCDCTL_API", "3"}}},
        std::chrono::seconds(5));
    // [{"Endpoint":"127.0.0.1:p","Status":{"header":{"member_id":M,...},"leader":L,...}},...]
    const std::size_t start = status.output.find('[');
    nlohmann::json list = start == std::string::npos ? nlohmann::json()
                                                     : nlohmann::json::parse(status.output.substr(start), nullptr, false);
    if (list.is_array()) {
      for (const nlohmann::json& entry : list) {
        const nlohmann::json& s = entry.value("Status", nlohmann::json::object());
        if (!s.contains("header") || !s.contains("leader")) continue;
        if (s["header"].value("member_id", std::uint64_t{0}) != s["leader"].get<std::uint64_t>()) continue;
        const std::string endpoint = entry.value("Endpoint", std::string());
        for (std::size_t i = 0; i < client_addresses_.size(); ++i) {
          if (endpoint.find(client_addresses_[i]) != std::string::npos) return static_cast<int>(i);
        }
      }
    }
    if (std::chrono::steady_clock::now() > limit) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace dfi::launch
