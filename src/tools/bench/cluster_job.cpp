#include "cluster_job.hpp"

#include <iostream>
#include <optional>
#include <ostream>
#include <streambuf>

#include "dfi/common/error.hpp"
#include "dfi/launch/local_cluster.hpp"
#include "process.hpp"
#include "registry_command.hpp"
#include "scenario.hpp"

namespace dfi::tools::bench {
namespace {

// Receives the launcher's "[rank k] line" output: keeps result lines, forwards the rest.
class RankOutput : public std::streambuf {
 public:
  explicit RankOutput(std::ostream* forward) : forward_(forward) {}

  std::map<int, std::string> results;  // rank -> JSON text
  std::string recent;                  // last lines, for error messages

  void finish() {
    if (!line_.empty()) take(line_);
    line_.clear();
  }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    put(static_cast<char>(c));
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    for (std::streamsize i = 0; i < n; ++i) put(s[i]);
    return n;
  }

 private:
  void put(char c) {
    if (c != '\n') {
      line_ += c;
      return;
    }
    take(line_);
    line_.clear();
  }
  void take(const std::string& line) {
    const std::size_t marker = line.find(kRankResultMarker);
    if (line.rfind("[rank ", 0) == 0 && marker != std::string::npos) {
      const int rank = std::atoi(line.c_str() + 6);
      results[rank] = line.substr(marker + std::string(kRankResultMarker).size());
      return;
    }
    recent += line + "\n";
    if (recent.size() > 8192) recent.erase(0, recent.size() - 8192);
    if (forward_ != nullptr) *forward_ << line << '\n' << std::flush;
  }

  std::ostream* forward_;
  std::string line_;
};

std::vector<std::string> rank_argv(const RankJob& job, const std::string& binary) {
  if (!job.program.empty()) return job.program;
  return {binary, "bench-rank", job.scenario, job.params.dump()};
}

}  // namespace

void report_rank_result(std::ostream& out, const nlohmann::json& result) {
  out << kRankResultMarker << result.dump() << std::endl;
}

std::string rank_job_command(const RankJob& job, const RunContext& context) {
  std::vector<std::string> argv = {"dfi", "cluster", "run", "--nodes", std::to_string(job.nodes)};
  if (context.netns) {
    argv.push_back("--netns");
  } else {
    argv.insert(argv.end(), {"--transport", context.transport});
  }
  if (job.registry_apart) argv.push_back("--registry-apart");
  argv.push_back("--");
  for (const std::string& a : rank_argv(job, "dfi")) argv.push_back(a);
  std::string env;
  for (const auto& [name, value] : job.env) env += name + "=" + value + " ";
  return env + shell_join(argv);
}

std::map<int, nlohmann::json> run_rank_job(const RankJob& job, const RunContext& context) {
  if (context.dfi_binary.empty()) {
    throw Error(Errc::invalid_argument, "bench: the path of the dfi binary is unknown");
  }
  launch::ClusterOptions options;
  options.nodes = job.nodes;
  options.transport = context.netns ? "tcp" : context.transport;
  options.netns = context.netns;
  options.argv = rank_argv(job, context.dfi_binary);
  options.timeout = job.timeout;
  options.grace = std::chrono::seconds(3);
  options.extra_env = job.env;
  std::optional<RegistryApart> apart;
  if (job.registry_apart) {
    if (context.netns) {
      throw Error(Errc::invalid_argument, "bench " + job.scenario + ": a registry apart from rank 0 is not reachable from "
                                          "network namespaces");
    }
    apart.emplace();
    for (auto& setting : apart->environment()) options.extra_env.insert(options.extra_env.begin(), setting);
  }

  RankOutput capture(context.progress);
  std::ostream out(&capture);
  std::ostream& err = context.progress != nullptr ? *context.progress : std::cerr;
  const int code = launch::run_cluster(options, out, err);
  capture.finish();
  if (code > launch::kExitSignalBase) {
    throw Interrupted("bench: interrupted by signal " +
                      std::to_string(code - launch::kExitSignalBase));
  }
  if (code != 0) {
    throw Error(Errc::io,
                "bench: " + rank_job_command(job, context) + " failed (exit code " +
                    std::to_string(code) +
                    (code == launch::kExitTimeout
                         ? ", timed out after " + std::to_string(job.timeout.count()) + " ms"
                         : std::string()) +
                    "); last output:\n" + tail_lines(capture.recent, 10));
  }
  std::map<int, nlohmann::json> results;
  for (const auto& [rank, text] : capture.results) {
    try {
      results[rank] = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(Errc::protocol, "bench: rank " + std::to_string(rank) +
                                      " reported a result that is not JSON (" + e.what() +
                                      "): " + text);
    }
  }
  return results;
}

}  // namespace dfi::tools::bench
