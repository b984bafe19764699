#include "perftest.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include "dfi/common/error.hpp"
#include "process.hpp"

namespace dfi::tools::bench {
namespace {

constexpr auto kServerStartBound = std::chrono::seconds(10);
constexpr auto kServerExitBound = std::chrono::seconds(5);

bool parse_number(std::string token, double& value) {
  std::string clean;
  for (char c : token) {
    if (c != ',' && c != '\'') clean += c;
  }
  if (clean.empty()) return false;
  char* end = nullptr;
  value = std::strtod(clean.c_str(), &end);
  return end == clean.c_str() + clean.size();
}

std::string environment_text(const std::vector<std::pair<std::string, std::string>>& env) {
  std::string text;
  for (const auto& [name, value] : env) text += name + "=" + value + " ";
  return text;
}

}  // namespace

std::optional<PerftestFinal> parse_perftest_final(std::string_view output) {
  std::optional<PerftestFinal> last;
  std::istringstream lines{std::string(output)};
  std::string line;
  while (std::getline(lines, line)) {
    const std::size_t at = line.find("Final:");
    if (at == std::string::npos) continue;
    std::istringstream fields(line.substr(at + 6));
    double v[8];
    std::string token;
    int n = 0;
    while (n < 8 && fields >> token) {
      if (!parse_number(token, v[n])) break;
      ++n;
    }
    if (n != 8) continue;
    PerftestFinal f;
    f.iterations = static_cast<long long>(v[0]);
    f.latency_p50_us = v[1];
    f.latency_moment_us = v[2];
    f.latency_total_us = v[3];
    f.bandwidth_moment_mib = v[4];
    f.bandwidth_total_mib = v[5];
    f.msgrate_moment = v[6];
    f.msgrate_total = v[7];
    last = f;
  }
  return last;
}

std::vector<std::string> parse_perftest_tests(std::string_view help) {
  // The list follows "-t <test>": lines of the form "   <name> - <description>".
  std::vector<std::string> tests;
  std::istringstream lines{std::string(help)};
  std::string line;
  bool in_list = false;
  while (std::getline(lines, line)) {
    if (line.find("-t <test>") != std::string::npos) {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    const std::size_t dash = line.find(" - ");
    const std::size_t first = line.find_first_not_of(' ');
    if (dash == std::string::npos || first == std::string::npos || first >= dash ||
        line[first] == '-') {
      if (!tests.empty()) break;  // end of the list
      continue;
    }
    std::string name = line.substr(first, dash - first);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (name.find(' ') != std::string::npos) break;
    tests.push_back(name);
  }
  return tests;
}

std::vector<std::pair<std::string, std::string>> perftest_environment(std::string_view transport) {
  if (transport == "shm") return {{"UCX_TLS", "sm"}};
  if (transport == "tcp") return {{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}};
  throw Error(Errc::invalid_argument, "bench: ucx_perftest transport must be shm or tcp, not '" +
                                          std::string(transport) + "'");
}

std::string find_perftest() {
  std::optional<std::string> path = launch::find_program("ucx_perftest");
  if (!path) {
    throw Error(Errc::not_found,
                "bench: ucx_perftest not found in PATH; it is the UCX baseline of every scenario. "
                "Install the Debian package ucx-utils (scripts/dev bench installs it)");
  }
  return *path;
}

std::string perftest_unavailable() {
  try {
    find_perftest();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

std::string ucx_version() {
  std::optional<std::string> info = launch::find_program("ucx_info");
  if (!info) return "unknown";
  launch::ChildResult r = launch::run_child({{*info, "-v"}, {}}, std::chrono::seconds(10));
  const std::size_t at = r.output.find("# Version ");
  if (at == std::string::npos) return "unknown";
  const std::size_t start = at + 10;
  return r.output.substr(start, r.output.find('\n', start) - start);
}

bool perftest_supports(std::string_view test) {
  static std::once_flag once;
  static std::vector<std::string> tests;
  std::call_once(once, [] {
    launch::ChildResult help =
        launch::run_child({{find_perftest(), "-h"}, {}}, std::chrono::seconds(10));
    tests = parse_perftest_tests(help.output);
  });
  for (const std::string& t : tests) {
    if (t == test) return true;
  }
  return false;
}

PerftestResult run_perftest(const PerftestRun& run) {
  const std::string binary = find_perftest();
  if (!perftest_supports(run.test)) {
    throw Error(Errc::invalid_argument,
                "bench: this ucx_perftest has no test '" + run.test + "' (see ucx_perftest -h)");
  }
  PerftestResult result;
  result.env = perftest_environment(run.transport);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + run.timeout;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  };

  const std::string test_text =
      run.test + " (" + std::to_string(run.message_bytes) + " B, " + run.transport + ")";
  ListeningServer server = start_listening_server(
      [&](int port) {
        result.server_argv = {binary, "-p", std::to_string(port)};
        return launch::ChildSpec{result.server_argv, result.env};
      },
      "ucx_perftest " + test_text,
      std::clamp<std::chrono::milliseconds>(left(), std::chrono::milliseconds(0),
                                            kServerStartBound));
  const std::string port = std::to_string(server.port);
  result.client_argv = {binary, "127.0.0.1",
                        "-p",   port,
                        "-t",   run.test,
                        "-s",   std::to_string(run.message_bytes),
                        "-n",   std::to_string(run.iterations),
                        "-w",   std::to_string(run.warmup)};
  result.client_argv.insert(result.client_argv.end(), run.extra_args.begin(), run.extra_args.end());
  // The record: PORT is a free port picked at run time; the client starts once the server
  // listens.
  std::vector<std::string> server_text = result.server_argv, client_text = result.client_argv;
  server_text[0] = client_text[0] = "ucx_perftest";
  server_text[2] = client_text[3] = "$PORT";
  result.command = environment_text(result.env) + shell_join(server_text) + " & " +
                   environment_text(result.env) + shell_join(client_text);

  launch::ChildProcess client = launch::ChildProcess::start({result.client_argv, result.env});
  launch::ChildResult c = client.wait(std::max(left(), std::chrono::milliseconds(1)));
  launch::ChildResult s = server.process.wait(c.timed_out ? std::chrono::milliseconds(0)
                                                    : std::chrono::milliseconds(kServerExitBound));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (c.timed_out) {
    throw Error(Errc::timeout, "bench: ucx_perftest " + test_text + " killed after " +
                                   std::to_string(run.timeout.count()) + " ms: " + result.command +
                                   "\nclient output:\n" + tail_lines(c.output, 8) +
                                   "\nserver output:\n" + tail_lines(s.output, 8));
  }
  std::optional<PerftestFinal> final = parse_perftest_final(c.output);
  if (c.exit_code != 0 || !final) {
    throw Error(Errc::io,
                "bench: ucx_perftest " + test_text + " " +
                    (c.exit_code != 0 ? "exited with status " + std::to_string(c.exit_code)
                                      : std::string("printed no Final: line")) +
                    ": " + result.command + "\nclient output:\n" + tail_lines(c.output, 8) +
                    "\nserver output:\n" + tail_lines(s.output, 8));
  }
  result.final = *final;
  return result;
}

}  // namespace dfi::tools::bench
