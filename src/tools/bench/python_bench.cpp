// Scenario python (issue 14): the Python bindings against the same transfer from C++.
//
// Both sides run one 1:1 bandwidth-mode shuffle flow on two ranks: ROWS 16-byte rows (uint64
// key, float64 value; key i, value i), rank 0 -> rank 1, default ring shape.
//   python: bench/python/shuffle_rank.py under the same launcher: rank 0 pushes a NumPy structured
//           array with one dfi.ShuffleSource.push (the array is handed to push_bulk without a
//           copy) and closes; rank 1 collects the rows into a preallocated NumPy array with
//           dfi.ShuffleTarget.consume_into (every batch already there per call, copied in C++).
//   C++:    `dfi bench-rank python`: rank 0 push_bulk()s the same rows from a vector and closes;
//           rank 1 consume()s and memcpy()s each batch into a preallocated vector.
// Rows/s = ROWS / (time at rank 1 from a barrier both ranks pass once their side is open, to
// the end of the stream). Count and key sum are checked after the clock stopped; a mismatch
// fails the run. The two alternate in every repetition (run_alternating). Ratio python / C++
// (issue 14's goal: >= 0.8).
//
// The Python interpreter is the virtual environment the build was configured with
// (DFI_PYTHON_VENV, scripts/dev: build/venv) and the module is the build's (<build>/python);
// $DFI_BENCH_PYTHON and $DFI_BENCH_PYTHONPATH override them.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "paths.hpp"
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

// The C++ rank program: the same transfer as shuffle_rank.py, with push_bulk and memcpy.
int run_cpp_rank(const json& params, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  if (node.size() != 2) {
    err << "bench python: needs exactly 2 ranks, got " << node.size() << '\n';
    return 2;
  }
  const std::string name = params.at("flow").get<std::string>();
  const std::size_t rows = params.at("rows").get<std::size_t>();
  json result;
  if (node.rank() == 0) {
    flow::FlowSpec spec;
    spec.name = name;
    spec.sources = {{0, 0}};
    spec.targets = {{1, 0}};
    spec.schema = flow::Schema({{"key", flow::Type::uint64}, {"value", flow::Type::float64}});
    spec.key_column = "key";
    flow::create_flow(node, spec);
    std::vector<Row> data(rows);
    for (std::size_t i = 0; i < rows; ++i) data[i] = {i, static_cast<double>(i)};
    fabric::Worker worker(node.fabric(), "bench python source");
    flow::ShuffleSource source(node, worker, name, 0);
    node.barrier(name + "/start");
    const Clock::time_point start = Clock::now();
    source.push_bulk(data.data(), rows).throw_if_error();
    source.close().throw_if_error();
    const std::uint64_t n = rows;
    result = {{"rank", 0},
              {"sent_tuples", rows},
              {"sent_key_sum", n * (n - 1) / 2},
              {"source_seconds", seconds_between(start, Clock::now())}};
  } else {
    flow::ShuffleTarget target(node, name, 0);
    std::vector<Row> received(rows);
    const auto timeout = std::chrono::milliseconds(params.at("consume_timeout_ms").get<long>());
    node.barrier(name + "/start");
    const Clock::time_point start = Clock::now();
    flow::TupleBatch batch;
    std::size_t at = 0;
    for (;;) {
      target.consume(batch, timeout).throw_if_error();
      if (batch.empty()) break;
      if (at + batch.count > rows)
        throw Error(Errc::protocol, "bench python: more rows arrived than were pushed");
      std::memcpy(received.data() + at, batch.data, batch.count * sizeof(Row));
      at += batch.count;
    }
    const double seconds = seconds_between(start, Clock::now());
    std::uint64_t key_sum = 0;
    for (std::size_t i = 0; i < at; ++i) key_sum += received[i].key;
    result = {{"rank", 1}, {"received_tuples", at}, {"received_key_sum", key_sum}, {"seconds", seconds}};
  }
  report_rank_result(out, result);
  node.finish();
  return 0;
}

class PythonBench final : public Scenario {
 public:
  std::string name() const override { return "python"; }
  std::string title() const override {
    return "Python bindings: push a 1 M-row NumPy array and consume into NumPy vs the same "
           "transfer from C++ push_bulk";
  }
  std::string description() const override {
    return "Two ranks, one 1:1 bandwidth-mode shuffle flow of `rows` 16-byte rows (uint64 key, "
           "float64 value). Python (bench/python/shuffle_rank.py): rank 0 pushes a NumPy "
           "structured array with one dfi.ShuffleSource.push (no copy: handed to push_bulk) and "
           "closes; rank 1 collects the rows into a preallocated NumPy array with consume_into "
           "(the batches already there per call, copied in C++). Rows/s = rows / time at rank 1 from a common barrier (both sides open) "
           "to the end of the stream; count and key sum checked. Baseline, interleaved: the same "
           "transfer in C++ (push_bulk from a vector; consume + memcpy into a vector).";
  }
  std::vector<Parameter> parameters() const override {
    return {{"rows", 1000000, 1000000, "rows pushed per transfer"},
            {"timeout_s", 60, 300, "bound of each cluster run"}};
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"C++ push_bulk",
             "the same flow, rows and timing from C++: ShuffleSource::push_bulk of a vector of "
             "the rows, ShuffleTarget::consume + memcpy into a preallocated vector (`dfi "
             "bench-rank python`)"}};
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
    if (rows < 1) throw Error(Errc::invalid_argument, "bench python: rows must be at least 1");
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("C++ push_bulk", baselines()[0].description);
    Panel& panel = result.panel("rows_per_s", "1:1 shuffle of 16 B rows, Python vs C++",
                                {"transfer", "", "category"}, {"rows per second", "M rows/s"},
                                Better::higher);
    const std::string x = std::to_string(rows) + " rows";
    panel.series("python", Role::dfi, "Python: push(NumPy array), consume_into(NumPy array)");
    panel.series("cpp", Role::baseline, "C++: push_bulk, consume -> memcpy",
                 "the same transfer without Python");
    panel.compare("python", "cpp", 0.8);

    RankJob job;
    job.nodes = 2;
    job.scenario = name();
    job.timeout = timeout;
    int transfer = 0;
    // One transfer (a fresh flow) as Python or C++; adds its rows/s to the panel.
    auto measure = [&](const std::string& series, const std::string& round) {
      const json params = {{"flow", "bench-python-" + std::to_string(++transfer)},
                           {"rows", rows},
                           {"consume_timeout_ms", timeout.count() * 1000}};
      job.params = params;
      job.program.clear();
      job.env.clear();
      if (series == "python") {
        job.program = {python_binary(), python_rank_script(), params.dump()};
        job.env = {{"PYTHONPATH", python_path()}};
      }
      std::map<int, json> reports = run_rank_job(job, context);
      if (!reports.count(0) || !reports.count(1))
        throw Error(Errc::protocol, "bench python: a rank reported no result (" + series + ")");
      const json& sent = reports.at(0);
      const json& got = reports.at(1);
      if (sent.at("sent_tuples") != got.at("received_tuples") ||
          sent.at("sent_key_sum") != got.at("received_key_sum")) {
        throw Error(Errc::protocol, "bench python: " + series + " sent " + sent.dump() +
                                        " but received " + got.dump());
      }
      const double mrows = static_cast<double>(rows) / got.at("seconds").get<double>() / 1e6;
      context.say(round + ": " + series + " " + std::to_string(mrows) + " M rows/s");
      panel.add(series, x, mrows);
      panel.add_command(series, rank_job_command(job, context));
    };
    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      run_alternating(rep, [&] { measure("python", round); }, [&] { measure("cpp", round); });
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_cpp_rank(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_python_scenario() { return std::make_unique<PythonBench>(); }

}  // namespace dfi::tools::bench
