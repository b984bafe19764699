// Scenario python (issues 14, 28): the Python bindings against the same shuffle from C++ and from
// mpi4py, in the same run.
//
// Every side shuffles the same rows on N ranks (N = 2 and 4): ROWS 16-byte rows per rank (uint64
// key, float64 value; rank r's keys r*ROWS .. (r+1)*ROWS - 1, value = key), each row to the rank
// its key hashes to, every rank a sender and a receiver.
//   python: bench/python/shuffle_rank.py under the launcher: one N:N key-hash bandwidth-mode
//           shuffle flow; a source thread pushes the NumPy structured array with one
//           dfi.ShuffleSource.push (push_batch, no copy: hashed and scattered in C++) and closes;
//           the main thread collects into a preallocated NumPy array with consume_into.
//   cpp:    `dfi bench-rank python`: the same flow and rows, ShuffleSource::push_batch of a vector
//           from a source thread, ShuffleTarget::consume_into a preallocated vector.
//   mpi4py: bench/python/alltoallv_rank.py under mpirun (OpenMPI, pml ucx on the same transport):
//           the NumPy user's shuffle — hash the key column, group the rows by target (stable
//           argsort of uint8 targets + np.take into a preallocated array), Alltoall of the counts,
//           one Alltoallv of the rows into a preallocated array.
// A rank's time: from a barrier all ranks pass with everything open and allocated, to when its
// receiving side has every row (DFI: its target saw the end of the stream and its source closed;
// MPI: its Alltoallv returned). Rows/s = N * ROWS / the slowest rank's time. Counts and key sums
// are checked after the clocks stopped; a mismatch fails the run. The three sides take turns in
// every repetition, in a rotating order. Ratios: python / cpp (issue 28's target: >= 0.9 at 4
// ranks) and python / mpi4py (>= 2).
//
// The Python interpreter is the virtual environment the build was configured with
// (DFI_PYTHON_VENV, scripts/dev: build/venv) and the module is the build's (<build>/python);
// $DFI_BENCH_PYTHON and $DFI_BENCH_PYTHONPATH override them. mpi4py comes from
// python/requirements-bench.txt (scripts/dev bench installs it); without it, or without OpenMPI,
// the mpi4py series is left out and the result says why.
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "mpi_baseline.hpp"
#include "paths.hpp"
#include "process.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Row {
  std::uint64_t key;
  double value;
};
static_assert(sizeof(Row) == 16);

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

std::string python_binary() {
  const std::string venv = python_venv();
  return env_or("DFI_BENCH_PYTHON", venv.empty() ? std::string() : venv + "/bin/python");
}
std::string python_path() { return env_or("DFI_BENCH_PYTHONPATH", std::string(DFI_BINARY_DIR) + "/python"); }
std::string python_rank_script() { return bench_source_dir() + "/python/shuffle_rank.py"; }
std::string mpi4py_rank_script() { return bench_source_dir() + "/python/alltoallv_rank.py"; }

// Room for the rows a rank receives: key hashing spreads them evenly (~rows per rank).
std::size_t receive_capacity(std::size_t rows) { return rows + rows / 4 + 4096; }

// Why the mpi4py peer cannot run here, or empty.
std::string mpi4py_unavailable(const std::string& python) {
  if (std::string why = mpi_unavailable(); !why.empty()) return why;
  launch::ChildResult r =
      launch::run_child({{python, "-c", "from mpi4py import MPI"}, {}}, std::chrono::seconds(30));
  if (r.exit_code != 0 || r.timed_out) {
    return "mpi4py is not installed in " + python +
           " (scripts/dev bench installs python/requirements-bench.txt: mpi4py built against "
           "Debian's OpenMPI): " + tail_lines(r.output, 2);
  }
  return {};
}

// The C++ rank program: the same shuffle as shuffle_rank.py, with push_batch and consume_into.
int run_cpp_rank(const json& params, std::ostream& out, std::ostream& err) {
  (void)err;
  cluster::Node node;
  const std::string name = params.at("flow").get<std::string>();
  const std::size_t rows = params.at("rows").get<std::size_t>();
  const auto timeout = std::chrono::milliseconds(params.at("consume_timeout_ms").get<long>());
  if (node.rank() == 0) {
    flow::FlowSpec spec;
    spec.name = name;
    for (int r = 0; r < node.size(); ++r) {
      spec.sources.push_back({r, 0});
      spec.targets.push_back({r, 0});
    }
    spec.schema = flow::Schema({{"key", flow::Type::uint64}, {"value", flow::Type::float64}});
    spec.key_column = "key";
    flow::create_flow(node, spec);
  }
  const std::uint64_t first = static_cast<std::uint64_t>(node.rank()) * rows;
  std::vector<Row> data(rows);
  std::uint64_t sent_key_sum = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    data[i] = {first + i, static_cast<double>(first + i)};
    sent_key_sum += first + i;
  }
  std::vector<Row> received(receive_capacity(rows), Row{0, 0});  // touched before the clock

  // The source thread: opens its source (it owns its worker), waits for the start, pushes, closes.
  std::mutex mutex;
  std::condition_variable changed;
  bool ready = false;
  bool go = false;
  Clock::time_point source_end;
  std::exception_ptr source_error;
  std::thread sender([&] {
    try {
      fabric::Worker worker(node.fabric(), "bench python source");
      flow::ShuffleSource source(node, worker, name, 0);
      {
        std::unique_lock lock(mutex);
        ready = true;
        changed.notify_all();
        changed.wait(lock, [&] { return go; });
      }
      source.push_batch(data.data(), rows * sizeof(Row)).throw_if_error();
      source.close().throw_if_error();
      source_end = Clock::now();
    } catch (...) {
      source_error = std::current_exception();
      std::lock_guard lock(mutex);
      ready = true;
      changed.notify_all();
    }
  });
  flow::ShuffleTarget target(node, name, 0);
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return ready; });
  }
  node.barrier(name + "/start");
  const Clock::time_point start = Clock::now();
  {
    std::lock_guard lock(mutex);
    go = true;
    changed.notify_all();
  }
  std::size_t at = 0;
  for (;;) {
    std::size_t bytes = 0;
    const std::size_t room = (received.size() - at) * sizeof(Row);
    if (room == 0) break;
    target.consume_into(received.data() + at, room, bytes, timeout).throw_if_error();
    if (bytes == 0) break;
    at += bytes / sizeof(Row);
  }
  if (!target.end()) throw Error(Errc::protocol, "bench python: more rows arrived than this rank has room for");
  const Clock::time_point target_end = Clock::now();
  sender.join();
  if (source_error) std::rethrow_exception(source_error);
  std::uint64_t received_key_sum = 0;
  for (std::size_t i = 0; i < at; ++i) received_key_sum += received[i].key;
  report_rank_result(out, {{"rank", node.rank()},
                           {"sent_tuples", rows},
                           {"sent_key_sum", sent_key_sum},
                           {"received_tuples", at},
                           {"received_key_sum", received_key_sum},
                           {"seconds", seconds_between(start, std::max(target_end, source_end))}});
  node.finish();
  return 0;
}

// "<n> ranks": the x category of a rank count.
std::string ranks_label(int ranks) {
  std::ostringstream label;
  label << ranks << " ranks";
  return label.str();
}

class PythonBench final : public Scenario {
 public:
  std::string name() const override { return "python"; }
  std::string title() const override {
    return "Python bindings: N:N shuffle of NumPy rows (push, consume_into) vs C++ push_batch and "
           "mpi4py Alltoallv";
  }
  std::string description() const override {
    return "2 and 4 ranks shuffle `rows` 16-byte rows each (uint64 key, float64 value) by key, every "
           "rank a sender and a receiver. Python (bench/python/shuffle_rank.py): a source thread "
           "pushes the NumPy structured array with one dfi.ShuffleSource.push (push_batch, no copy: "
           "hashed and scattered in C++), the main thread collects with consume_into into a "
           "preallocated NumPy array. C++ (`dfi bench-rank python`): the same flow with push_batch "
           "and consume_into. mpi4py (bench/python/alltoallv_rank.py under mpirun, pml ucx on the "
           "same transport): hash the key column in NumPy, group by target (stable argsort of "
           "uint8 targets, np.take into a preallocated array), Alltoall of counts, one Alltoallv. "
           "Rows/s = all rows / the slowest rank's time from a common barrier to having every row; "
           "counts and key sums checked. The three take turns in every repetition.";
  }
  std::vector<Parameter> parameters() const override {
    return {{"rows", 200000, 8000000, "rows per rank"},
            {"ranks", json::array({2, 4}), json::array({2, 4}), "rank counts"},
            {"timeout_s", 60, 300, "bound of each run"}};
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"C++ push_batch",
             "the same flow, rows and timing from C++: ShuffleSource::push_batch of a vector from a "
             "source thread, ShuffleTarget::consume_into a preallocated vector (`dfi bench-rank python`)"},
            {"mpi4py Alltoallv",
             "the same NumPy rows shuffled with mpi4py (built against Debian's OpenMPI): NumPy "
             "hash + stable argsort + np.take, Alltoall of counts, one Alltoallv of bytes"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    const std::string python = python_binary();
    if (python.empty())
      return "no Python environment: the build was configured without DFI_PYTHON_VENV and "
             "DFI_BENCH_PYTHON is not set (scripts/dev configures build/venv)";
    if (::access(python.c_str(), X_OK) != 0) return python + " is not an executable";
    if (::access(python_rank_script().c_str(), R_OK) != 0)
      return "no " + python_rank_script() + " (set DFI_BENCH_DIR to the bench/ folder)";
    if (::access((python_path() + "/dfi/__init__.py").c_str(), R_OK) != 0)
      return "no dfi Python package in " + python_path() +
             " (build the _dfi target, or set DFI_BENCH_PYTHONPATH)";
    return {};
  }

  void run(RunContext& context, Result& result) override {
    const std::size_t rows = context.param("rows");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    const std::vector<int> rank_counts = context.param("ranks").get<std::vector<int>>();
    if (rows < 1) throw Error(Errc::invalid_argument, "bench python: rows must be at least 1");
    result.set_parameters(context.resolved_parameters());
    const std::string no_mpi4py = mpi4py_unavailable(python_binary());
    result.add_baseline("C++ push_batch", baselines()[0].description);
    if (no_mpi4py.empty()) {
      result.add_baseline("mpi4py Alltoallv", baselines()[1].description + "; " + mpi_version());
    } else {
      result.add_note("mpi4py series left out: " + no_mpi4py);
      context.say("mpi4py series left out: " + no_mpi4py);
    }
    Panel& panel = result.panel("rows_per_s", "N:N key shuffle of 16 B rows: Python vs C++ vs mpi4py",
                                {"ranks", "", "category"}, {"rows per second", "M rows/s"}, Better::higher);
    panel.series("python", Role::dfi, "Python: push(NumPy array), consume_into(NumPy array)");
    panel.series("cpp", Role::baseline, "C++: push_batch, consume_into", "the same shuffle without Python");
    panel.compare("python", "cpp", 0.9);
    if (no_mpi4py.empty()) {
      panel.series("mpi4py", Role::baseline, "mpi4py: NumPy partition + Alltoallv",
                   "the same rows shuffled the MPI way from Python");
      panel.compare("python", "mpi4py", 2.0);
    }

    int transfer = 0;
    std::map<int, std::vector<double>> partition_share;  // mpi4py: partitioning / its whole time
    // One shuffle on `ranks` ranks by `series`; adds its rows/s to the panel.
    auto measure = [&](const std::string& series, int ranks, const std::string& round) {
      const std::string x = ranks_label(ranks);
      double seconds = 0;
      if (series == "mpi4py") {
        MpiRun run;
        run.executable = python_binary();
        run.ranks = ranks;
        run.transport = context.transport;
        run.timeout = timeout;
        run.args = {mpi4py_rank_script(), json{{"rows", rows}}.dump()};
        const MpiResult r = run_mpi(run);
        const json& d = r.data;
        if (d.at("sent_tuples") != d.at("received_tuples") || d.at("sent_key_sum") != d.at("received_key_sum"))
          throw Error(Errc::protocol, "bench python: mpi4py sent and received differ: " + d.dump());
        seconds = d.at("seconds").get<double>();
        partition_share[ranks].push_back(d.at("partition_seconds").get<double>() / seconds);
        panel.add_command(series, r.command);
      } else {
        RankJob job;
        job.nodes = ranks;
        job.scenario = name();
        job.timeout = timeout;
        job.params = {{"flow", "bench-python-" + std::to_string(++transfer)},
                      {"rows", rows},
                      {"consume_timeout_ms", timeout.count() * 1000}};
        if (series == "python") {
          job.program = {python_binary(), python_rank_script(), job.params.dump()};
          job.env = {{"PYTHONPATH", python_path()}};
        }
        const std::map<int, json> reports = run_rank_job(job, context);
        std::uint64_t sent = 0, sent_sum = 0, got = 0, got_sum = 0;
        for (int r = 0; r < ranks; ++r) {
          if (!reports.count(r)) {
            std::ostringstream message;
            message << "bench python: rank " << r << " reported no result (" << series << ")";
            throw Error(Errc::protocol, message.str());
          }
          const json& report = reports.at(r);
          sent += report.at("sent_tuples").get<std::uint64_t>();
          sent_sum += report.at("sent_key_sum").get<std::uint64_t>();
          got += report.at("received_tuples").get<std::uint64_t>();
          got_sum += report.at("received_key_sum").get<std::uint64_t>();
          seconds = std::max(seconds, report.at("seconds").get<double>());
        }
        if (sent != got || sent_sum != got_sum) {
          std::ostringstream message;
          message << "bench python: " << series << " on " << ranks << " ranks sent " << sent << " rows (key sum "
                  << sent_sum << ") but received " << got << " (key sum " << got_sum << ")";
          throw Error(Errc::protocol, message.str());
        }
        panel.add_command(series, rank_job_command(job, context));
      }
      const double mrows = static_cast<double>(rows) * ranks / seconds / 1e6;
      context.say(round + ": " + series + " on " + x + ": " + format_fixed(mrows, 2) + " M rows/s");
      panel.add(series, x, mrows);
    };
    std::vector<std::string> sides = {"python", "cpp"};
    if (no_mpi4py.empty()) sides.push_back("mpi4py");
    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      for (int ranks : rank_counts) {
        // Every side in turn, the first one rotating from repetition to repetition.
        for (std::size_t i = 0; i < sides.size(); ++i)
          measure(sides[(i + static_cast<std::size_t>(rep - 1)) % sides.size()], ranks, round);
      }
    }
    for (auto& [ranks, shares] : partition_share) {
      std::sort(shares.begin(), shares.end());
      std::ostringstream note;
      note << "mpi4py on " << ranks << " ranks: the NumPy partitioning (hash, argsort, take) took "
           << format_fixed(100 * shares[shares.size() / 2], 0) << "% of its time (median; the slowest rank's "
           << "partitioning over the slowest rank's time), the rest is Alltoall + Alltoallv";
      result.add_note(note.str());
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_cpp_rank(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_python_scenario() { return std::make_unique<PythonBench>(); }

}  // namespace dfi::tools::bench
