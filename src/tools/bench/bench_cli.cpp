#include "bench_cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cluster_job.hpp"
#include "dfi/common/error.hpp"
#include "mpi_baseline.hpp"
#include "paths.hpp"
#include "perftest.hpp"
#include "process.hpp"
#include "scenario.hpp"

namespace dfi::tools::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr auto kPlotBound = std::chrono::minutes(2);

std::string self_executable() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

// NAME=JSON pairs; a value that is not JSON is taken as a string.
json parse_overrides(const std::vector<std::string>& pairs) {
  json overrides = json::object();
  for (const std::string& pair : pairs) {
    const std::size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error(Errc::invalid_argument, "bench: --set expects NAME=VALUE, got '" + pair + "'");
    }
    const std::string value = pair.substr(eq + 1);
    json parsed = json::parse(value, nullptr, false);
    overrides[pair.substr(0, eq)] = parsed.is_discarded() ? json(value) : parsed;
  }
  return overrides;
}

std::string format_value(double v) {
  char text[32];
  std::snprintf(text, sizeof text, v >= 100 ? "%.0f" : (v >= 1 ? "%.2f" : "%.3g"), v);
  return text;
}

std::string x_text(const json& x, const json& axis) {
  if (x.is_string()) return x.get<std::string>();
  std::string unit = axis.value("unit", "");
  if (unit == "B" && x.is_number_integer()) {
    const long long b = x.get<long long>();
    if (b >= (1 << 20) && b % (1 << 20) == 0) return std::to_string(b >> 20) + " MiB";
    if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
    return std::to_string(b) + " B";
  }
  return x.dump() + (unit.empty() ? "" : " " + unit);
}

// One line per ratio, for the terminal.
void print_summary(std::ostream& out, const json& result) {
  out << result["scenario"].get<std::string>() << " (" << result["transport"].get<std::string>()
      << (result["netns"].get<bool>() ? ", netns" : "")
      << (result["quick"].get<bool>() ? ", quick" : "") << ", median of " << result["repeat"]
      << "):\n";
  for (const json& panel : result["panels"]) {
    const std::string unit = panel["y"]["unit"];
    for (const json& r : panel["ratios"]) {
      // Name the DFI series unless its id is the generic "dfi".
      const std::string dfi = r["dfi"].get<std::string>();
      out << "  " << panel["title"].get<std::string>() << ", " << x_text(r["x"], panel["x"])
          << ": DFI " << (dfi == "dfi" ? "" : dfi + " ") << format_value(r["dfi_value"]) << " "
          << unit << ", " << r["baseline"].get<std::string>() << " "
          << format_value(r["baseline_value"]) << " " << unit << ", ratio "
          << format_value(r["ratio"]) << " (" << panel["better"].get<std::string>()
          << " is better)\n";
    }
  }
}

std::string command_line(int argc, char** argv) {
  std::vector<std::string> args = {"dfi"};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return shell_join(args);
}

void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path partial = path.string() + ".partial";
  {
    std::ofstream file(partial);
    file << text;
    if (!file) throw Error(Errc::io, "bench: cannot write " + partial.string());
  }
  std::error_code ec;
  fs::rename(partial, path, ec);
  if (ec) throw Error(Errc::io, "bench: cannot rename " + partial.string() + ": " + ec.message());
}

// Returns an empty string on success, else what went wrong.
std::string plot(const fs::path& json_file, const fs::path& png_file) {
  const std::string script = bench_source_dir() + "/plot.py";
  std::vector<std::string> argv = {python_interpreter(), script, json_file.string(),
                                   png_file.string()};
  launch::ChildResult r;
  try {
    r = launch::run_child({argv, {}}, kPlotBound);
  } catch (const Error& e) {
    return e.what();  // the interpreter cannot be started: names the command and why
  }
  if (r.exit_code == 0 && !r.timed_out) return {};
  std::string why =
      shell_join(argv) +
      (r.timed_out ? " timed out" : " exited with status " + std::to_string(r.exit_code)) + ":\n" +
      tail_lines(r.output, 6);
  if (r.output.find("No module named 'matplotlib'") != std::string::npos) {
    why +=
        "\n(install python3-matplotlib: scripts/dev bench does; or set DFI_PYTHON to a python with "
        "matplotlib)";
  }
  return why;
}

}  // namespace

BenchCli::BenchCli(CLI::App& app) {
  bench_ =
      app.add_subcommand("bench", "Benchmarks: DFI and its baselines in the same run (JSON + PNG)");
  bench_->add_option("scenario", options_.names, "Scenario name(s), 'list' or 'all'")->required();
  bench_->add_flag("--quick", options_.quick, "Small sizes and counts (CI, smoke runs)");
  bench_->add_option("--transport", options_.transport, "shm or tcp")
      ->check(CLI::IsMember({"shm", "tcp"}));
  bench_->add_flag("--netns", options_.netns, "DFI ranks in network namespaces over TCP (root)");
  bench_->add_option("--out", options_.out,
                     "Output folder (default: bench/out of the source tree)");
  bench_
      ->add_option("--repeat", options_.repeat,
                   "Repetitions; values are medians (default 1 quick, 3 full)")
      ->check(CLI::Range(1, 100));
  bench_->add_option("--set", options_.set,
                     "NAME=JSON: override a scenario parameter (see 'dfi bench list')");
  bench_->add_flag("--no-plot", options_.no_plot, "Write the JSON only");

  rank_ = app.add_subcommand("bench-rank", "A scenario's rank program (started by dfi bench)");
  rank_->group("");  // hidden
  rank_->add_option("scenario", rank_scenario_)->required();
  rank_->add_option("params", rank_params_, "JSON")->required();

  stream_side_ = app.add_subcommand(
      "bench-stream", "One side of a hand-written stream baseline (started by dfi bench)");
  stream_side_->group("");  // hidden
  StreamSide& side = stream_side_options_;
  stream_side_->add_option("side", side.side)
      ->required()
      ->check(CLI::IsMember(stream_side_names()));
  stream_side_->add_option("--tuple-bytes", side.tuple_bytes, "Tuple size in bytes");
  stream_side_->add_option("--tuples", side.tuples, "Tuples the sender sends");
  stream_side_->add_option("--port", side.port, "tcp: the reader's port on 127.0.0.1");
  stream_side_->add_option("--name", side.name, "shm: the ring's shm_open name");
  stream_side_->add_option("--ring-bytes", side.ring_bytes, "shm: ring capacity");
  stream_side_->add_option("--batch-bytes", side.batch_bytes, "shm: bytes per publish/release");
  stream_side_->add_option("--copy", side.copy,
                           "shm: tuple (compile-time width), bulk, partition or partition-direct (rings of "
                           "the flow layout)")
      ->check(CLI::IsMember({"tuple", "bulk", "partition", "partition-direct"}));
  stream_side_->add_option("--targets", side.targets, "shm, the partition copies: targets (rings)")
      ->check(CLI::Range(1, 4096));
  stream_side_->add_option("--wait-ms", stream_wait_ms_, "Longest wait for the peer");

  auto* baseline =
      app.add_subcommand("bench-baseline", "Run one baseline by hand and print its JSON");
  baseline->require_subcommand(1);
  perftest_ = baseline->add_subcommand("perftest", "ucx_perftest server + client over loopback");
  perftest_->add_option("--test", perftest_options_.test,
                        "ucx_perftest test (ucp_put_bw, ucp_put_lat, ...)");
  perftest_->add_option("--size", perftest_options_.size, "Message size in bytes");
  perftest_->add_option("--iterations", perftest_options_.iterations, "Iterations (-n)");
  perftest_->add_option("--warmup", perftest_options_.warmup, "Warm-up iterations (-w)");
  perftest_->add_option("--transport", perftest_options_.transport, "shm or tcp")
      ->check(CLI::IsMember({"shm", "tcp"}));
  mpi_ = baseline->add_subcommand("mpi", "An OpenMPI baseline program of bench/mpi under mpirun");
  mpi_->add_option("--program", mpi_options_.program, "mpi_p2p or mpi_alltoall");
  mpi_->add_option("--np", mpi_options_.ranks, "Number of MPI ranks")->check(CLI::Range(1, 64));
  mpi_->add_option("--transport", mpi_options_.transport, "shm or tcp")
      ->check(CLI::IsMember({"shm", "tcp"}));
  mpi_->add_option("args", mpi_options_.args, "Program arguments (after --)");
  stream_ = baseline->add_subcommand(
      "stream", "Tuples over a TCP socket (tcp) or a shared-memory ring (shm), 2 processes");
  stream_->add_option("--transport", stream_options_.transport, "tcp or shm")
      ->check(CLI::IsMember({"shm", "tcp"}));
  stream_->add_option("--tuple-bytes", stream_options_.tuple_bytes, "Tuple size in bytes");
  stream_->add_option("--tuples", stream_options_.tuples, "Tuples to send")->required();
  stream_->add_option("--ring-bytes", stream_options_.ring_bytes, "shm: ring capacity");
  stream_->add_option("--batch-bytes", stream_options_.batch_bytes,
                      "shm: bytes per publish/release");
  stream_->add_option("--copy", stream_options_.copy,
                      "shm producer: tuple (compile-time-width copy per tuple), bulk (memcpy of runs) "
                      "partition (the hand-written partitioner over --targets rings, write-combine "
                      "lines) or partition-direct (the same, rows straight into the segments)")
      ->check(CLI::IsMember({"tuple", "bulk", "partition", "partition-direct"}));
  stream_->add_option("--targets", stream_options_.targets, "shm, the partition copies: targets (rings)")
      ->check(CLI::Range(1, 4096));
}

std::optional<int> BenchCli::run(int argc, char** argv) {
  if (*rank_) {
    Scenario* scenario = find_scenario(rank_scenario_);
    if (scenario == nullptr) {
      std::cerr << "dfi bench-rank: no scenario '" << rank_scenario_ << "'\n";
      return 2;
    }
    json params = json::parse(rank_params_, nullptr, false);
    if (params.is_discarded()) {
      std::cerr << "dfi bench-rank: parameters are not JSON: " << rank_params_ << '\n';
      return 2;
    }
    try {
      return scenario->run_rank(params, std::cout, std::cerr);
    } catch (const std::exception& e) {
      std::cerr << "dfi bench-rank " << rank_scenario_ << ": " << e.what() << '\n';
      return 1;
    }
  }
  if (*stream_side_) {
    stream_side_options_.wait = std::chrono::milliseconds(stream_wait_ms_);
    return run_stream_side(stream_side_options_, std::cout, std::cerr);
  }
  if (*stream_) {
    StreamRun run = stream_options_;
    run.dfi_binary = self_executable();
    StreamResult r = run_stream_baseline(run);
    std::cout << json{{"transport", run.transport}, {"tuple_bytes", run.tuple_bytes},
                      {"copy", run.copy},           {"targets", run.targets},
                      {"tuples", r.tuples},         {"key_sum", r.key_sum},
                      {"routed_sum", r.routed_sum}, {"seconds", r.seconds},
                      {"gbps", r.gbps},
                      {"command", r.command}}
                     .dump()
              << '\n';
    return 0;
  }
  if (*perftest_) {
    PerftestRun run;
    run.test = perftest_options_.test;
    run.message_bytes = perftest_options_.size;
    run.iterations = perftest_options_.iterations;
    run.warmup = perftest_options_.warmup;
    run.transport = perftest_options_.transport;
    PerftestResult r = run_perftest(run);
    std::cout << json{{"test", run.test},
                      {"transport", run.transport},
                      {"size", run.message_bytes},
                      {"iterations", r.final.iterations},
                      {"latency_p50_us", r.final.latency_p50_us},
                      {"latency_total_us", r.final.latency_total_us},
                      {"bandwidth_mib_s", r.final.bandwidth_total_mib},
                      {"bandwidth_gbps", r.final.bandwidth_gbps()},
                      {"msgrate", r.final.msgrate_total},
                      {"command", r.command}}
                     .dump()
              << '\n';
    return 0;
  }
  if (*mpi_) {
    MpiRun run;
    run.program = mpi_options_.program;
    run.ranks = mpi_options_.ranks;
    run.transport = mpi_options_.transport;
    run.args = mpi_options_.args;
    MpiResult r = run_mpi(run);
    json out = r.data;
    out["command"] = r.command;
    std::cout << out.dump() << '\n';
    return 0;
  }
  if (!*bench_) return std::nullopt;

  if (options_.names.size() == 1 && options_.names[0] == "list") {
    for (const auto& s : scenarios()) {
      std::cout << s->name() << " — " << s->title() << '\n';
      for (const BaselineInfo& b : s->baselines())
        std::cout << "    baseline " << b.name << ": " << b.description << '\n';
      for (const Parameter& p : s->parameters()) {
        std::cout << "    --set " << p.name << "=...  " << p.help << " (quick " << p.quick.dump()
                  << ", full " << p.full.dump() << ")\n";
      }
    }
    return 0;
  }

  std::vector<Scenario*> chosen;
  const bool all = options_.names.size() == 1 && options_.names[0] == "all";
  if (all) {
    for (const auto& s : scenarios()) chosen.push_back(s.get());
  } else {
    for (const std::string& name : options_.names) {
      Scenario* s = find_scenario(name);
      if (s == nullptr) {
        std::cerr << "dfi bench: no scenario '" << name << "' (dfi bench list shows them)\n";
        return 2;
      }
      chosen.push_back(s);
    }
  }
  const json overrides = parse_overrides(options_.set);
  for (const auto& [name, value] : overrides.items()) {
    bool declared = false;
    for (Scenario* s : chosen) {
      for (const Parameter& p : s->parameters()) declared = declared || p.name == name;
    }
    if (!declared) {
      std::cerr << "dfi bench: no chosen scenario has a parameter '" << name << "'\n";
      return 2;
    }
  }
  if (options_.netns) options_.transport = "tcp";
  const fs::path out_dir =
      options_.out.empty() ? fs::path(default_output_dir()) : fs::path(options_.out);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(Errc::io, "bench: cannot create " + out_dir.string() + ": " + ec.message());

  const json machine = machine_info();
  if (machine["loadavg"][0].get<double>() > 0.5 * machine["nproc"].get<double>()) {
    std::cerr << "bench: warning: load average " << machine["loadavg"][0] << " on "
              << machine["nproc"]
              << " CPUs before starting: other work will skew the numbers (each result records the "
                 "load)\n";
  }
  bool failed = false;  // a scenario failed or could not run
  bool plot_failed = false;
  std::vector<std::string> outcome;
  for (Scenario* scenario : chosen) {
    RunContext context;
    context.transport = options_.transport;
    context.netns = options_.netns;
    context.quick = options_.quick;
    context.repeat = options_.repeat > 0 ? options_.repeat : (options_.quick ? 1 : 3);
    context.dfi_binary = self_executable();
    context.progress = &std::cerr;
    context.scenario = scenario;
    for (const auto& [name, value] : overrides.items()) {
      for (const Parameter& p : scenario->parameters()) {
        if (p.name == name) context.overrides[name] = value;
      }
    }
    const std::string name = scenario->name();
    if (std::string why = scenario->unavailable(context); !why.empty()) {
      std::cerr << "bench " << name << ": cannot run: " << why << '\n';
      outcome.push_back(name + ": NOT RUN (" + why + ")");
      failed = true;
      continue;
    }
    context.say(std::string("starting (") + (context.quick ? "quick, " : "") + context.transport +
                (context.netns ? " in network namespaces" : "") + ", " +
                std::to_string(context.repeat) + " repetition(s))");
    const auto start = std::chrono::steady_clock::now();
    Result result(name, scenario->title(), scenario->description());
    try {
      scenario->run(context, result);
    } catch (const Interrupted& e) {
      std::cerr << "bench " << name << ": " << e.what() << "; stopping\n";
      return 130;
    } catch (const std::exception& e) {
      std::cerr << "bench " << name << ": FAILED: " << e.what() << '\n';
      outcome.push_back(name + ": FAILED");
      failed = true;
      continue;
    }
    RunInfo info;
    info.command = command_line(argc, argv);
    info.transport = context.transport;
    info.netns = context.netns;
    info.quick = context.quick;
    info.repeat = context.repeat;
    info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const json data = result.to_json(info);
    for (const std::string& problem : validate_result(data)) {
      std::cerr << "bench " << name << ": result does not match the schema: " << problem << '\n';
      failed = true;
    }
    const std::string stem = name + "-" + context.transport + (context.netns ? "-netns" : "") +
                             (context.quick ? "-quick" : "");
    const fs::path json_file = out_dir / (stem + ".json");
    const fs::path png_file = out_dir / (stem + ".png");
    write_atomically(json_file, data.dump(1) + "\n");
    context.say("wrote " + json_file.string());
    print_summary(std::cout, data);
    std::string status = name + ": ok, " + json_file.string();
    if (!options_.no_plot) {
      if (std::string why = plot(json_file, png_file); why.empty()) {
        context.say("wrote " + png_file.string());
        status += ", " + png_file.string();
      } else {
        std::cerr << "bench " << name << ": PLOT FAILED: " << why << '\n';
        status += ", no PNG (plot failed)";
        plot_failed = true;
      }
    }
    outcome.push_back(status);
  }
  if (chosen.size() > 1) {
    std::cerr << "bench: summary\n";
    for (const std::string& line : outcome) std::cerr << "  " << line << '\n';
  }
  return failed ? 1 : (plot_failed ? 3 : 0);
}

}  // namespace dfi::tools::bench
