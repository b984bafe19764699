// The ucx_perftest baseline: the transport limit that DFI is measured against.
//
//   bench::PerftestRun run;
//   run.test = "ucp_put_bw"; run.message_bytes = 65536; run.iterations = 20000;
//   run.transport = "shm";
//   bench::PerftestResult r = bench::run_perftest(run);
//   double gbps = r.final.bandwidth_gbps();
//
// Server and client are two local processes: the server starts first on a free port (-p), the
// client connects to 127.0.0.1 once the server listens. UCX_TLS is set per transport (shm: "sm";
// tcp: "tcp" with UCX_NET_DEVICES=lo). Both are killed when the bound passes.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dfi::tools::bench {

// The numbers of ucx_perftest's "Final:" line. "moment" columns cover the last report interval,
// "total" columns the whole timed run (warm-up excluded). Its "MB/s" are MiB/s (bytes / 2^20);
// latency tests are ping-pongs and report half the round trip.
struct PerftestFinal {
  long long iterations = 0;
  double latency_p50_us = 0;        // "50.0%ile" (the percentile chosen by -R)
  double latency_moment_us = 0;     // "average"
  double latency_total_us = 0;      // "overall"
  double bandwidth_moment_mib = 0;  // MiB/s
  double bandwidth_total_mib = 0;
  double msgrate_moment = 0;  // messages/s
  double msgrate_total = 0;

  // Overall bandwidth in GB/s (10^9 bytes per second), the unit DFI results use.
  double bandwidth_gbps() const { return bandwidth_total_mib * 1048576.0 / 1e9; }
};

// Finds the last "Final:" line in ucx_perftest's output and parses its eight numbers; nullopt if
// there is none or it is malformed. Accepts thousands separators (-N).
std::optional<PerftestFinal> parse_perftest_final(std::string_view output);

// The test names listed by `ucx_perftest -h` (e.g. "ucp_put_bw", "ucp_am_lat"); parses `help`.
std::vector<std::string> parse_perftest_tests(std::string_view help);

struct PerftestRun {
  std::string test = "ucp_put_bw";           // any test of `ucx_perftest -h`
  std::size_t message_bytes = 8;             // -s
  std::size_t iterations = 10000;            // -n
  std::size_t warmup = 1000;                 // -w
  std::string transport = "shm";             // "shm" or "tcp"
  std::chrono::milliseconds timeout{60000};  // for the whole run, server start included
  std::vector<std::string> extra_args;       // appended to the client's arguments
};

struct PerftestResult {
  PerftestFinal final;
  std::vector<std::string> server_argv;  // as run (port included)
  std::vector<std::string> client_argv;
  std::vector<std::pair<std::string, std::string>> env;  // UCX_TLS, UCX_NET_DEVICES
  // "UCX_TLS=sm ucx_perftest -p '$PORT' & UCX_TLS=sm ucx_perftest 127.0.0.1 -p '$PORT' ...": the
  // record of the run; PORT was a free port picked at run time.
  std::string command;
  double seconds = 0;
};

// The UCX environment for `transport`: shm -> UCX_TLS=sm; tcp -> UCX_TLS=tcp, UCX_NET_DEVICES=lo.
// Throws dfi::Error(invalid_argument) for anything else.
std::vector<std::pair<std::string, std::string>> perftest_environment(std::string_view transport);

// The path of ucx_perftest; throws dfi::Error(not_found) with how to install it.
std::string find_perftest();
// For a scenario's unavailable(): why ucx_perftest cannot run (find_perftest's message), or empty.
std::string perftest_unavailable();

// The UCX version from `ucx_info -v` ("1.13.1"), or "unknown".
std::string ucx_version();

// True if the installed ucx_perftest knows `test` (from `ucx_perftest -h`, cached).
bool perftest_supports(std::string_view test);

// Runs one measurement. Retries with another port when the server cannot bind (up to 4 times).
// Throws dfi::Error: not_found (ucx_perftest missing), invalid_argument (unknown test or
// transport), timeout (killed after run.timeout; message quotes the output), io (a side failed or
// printed no result; message quotes its output).
PerftestResult run_perftest(const PerftestRun& run);

}  // namespace dfi::tools::bench
