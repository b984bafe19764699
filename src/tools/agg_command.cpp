#include "agg_command.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agg_data.hpp"
#include "dump.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/kernels/hash.hpp"

namespace dfi::tools {

namespace {

constexpr const char* kAggregates = "sum(value),count(*),min(value),max(value),avg(value)";

AggDataShape data_shape(const AggCommandOptions& o) { return {o.tuples, o.groups, o.zipf, o.seed}; }

ops::AggregationSpec aggregation_spec(const AggCommandOptions& options) {
  ops::AggregationSpec spec;
  spec.name = options.name;
  spec.algorithm = ops::parse_aggregate_algorithm(options.algorithm);
  spec.schema = flow::Schema({{"key", flow::Type::uint64, 1}, {"value", flow::Type::int64, 1}});
  spec.key = "key";
  spec.aggregates = flow::parse_aggregates(kAggregates);
  spec.threads = options.threads;
  spec.cache_groups = options.cache_groups;
  spec.pass_through_below = options.pass_through_below;
  return spec;
}

std::string hex(std::uint64_t value) {
  std::ostringstream s;
  s << "0x" << std::hex << std::setw(16) << std::setfill('0') << value;
  return s.str();
}

// --dump: the result rows this rank produced (key, sum, count, min, max, avg: 6 x 8 B), as CSV
// lines; the sink runs on several threads, a batch at a time.
class GroupDump {
 public:
  ops::AggregationRunOptions run_options() {
    ops::AggregationRunOptions run;
    run.sink = [this](int, const flow::TupleBatch& rows) {
      std::ostringstream lines;
      lines.precision(17);
      for (std::size_t i = 0; i < rows.count; ++i) {
        std::uint64_t key, count;
        std::int64_t sum, min, max;
        double avg;
        const std::byte* row = rows.tuple(i);
        std::memcpy(&key, row, 8);
        std::memcpy(&sum, row + 8, 8);
        std::memcpy(&count, row + 16, 8);
        std::memcpy(&min, row + 24, 8);
        std::memcpy(&max, row + 32, 8);
        std::memcpy(&avg, row + 40, 8);
        lines << key << ',' << sum << ',' << count << ',' << min << ',' << max << ',' << avg << '\n';
      }
      std::lock_guard lock(mutex_);
      text_ += lines.str();
    };
    return run;
  }
  void write(const std::filesystem::path& file) const {
    open_dump(file, "key,sum_value,count,min_value,max_value,avg_value") << text_;
  }

 private:
  std::mutex mutex_;
  std::string text_;  // guarded by mutex_ while the sink runs
};

}  // namespace

std::string check_agg_options(const AggCommandOptions& o) {
  if (o.groups < 1) return "--groups must be at least 1";
  if (o.zipf < 0) return "--zipf must be 0 (uniform) or positive";
  if (o.threads < 1) return "--threads must be at least 1";
  if (o.cache_groups < 1) return "--cache-groups must be at least 1";
  if (!(o.pass_through_below >= 0 && o.pass_through_below <= 1)) return "--pass-through-below must be in [0, 1]";
  if (o.verify != "yes" && o.verify != "no" && o.verify != "auto") return "--verify must be yes, no or auto";
  return {};
}

ops::AggregationResult run_generated_aggregation(cluster::Node& node, const AggCommandOptions& options,
                                                 const std::function<void()>& ready,
                                                 const ops::AggregationRunOptions& run) {
  if (std::string bad = check_agg_options(options); !bad.empty()) {
    throw Error(Errc::invalid_argument, "dfi agg: " + bad);
  }
  const ops::AggregationSpec spec = aggregation_spec(options);
  spec.validate(node.size());
  if (node.rank() == 0) ops::create_aggregation(node, spec);
  const std::uint64_t slices = static_cast<std::uint64_t>(node.size()) * options.threads;
  std::vector<std::vector<AggTuple>> data;
  std::vector<ops::Fragment> fragments;
  for (int t = 0; t < options.threads; ++t) {
    data.push_back(agg_slice(data_shape(options), static_cast<std::uint64_t>(node.rank()) * options.threads + t, slices));
  }
  for (const auto& d : data) fragments.push_back({d.data(), d.size()});
  // Every rank's data is generated before the open starts, so that open_seconds is the open's
  // (its sources wait for every rank's targets) and not the slowest rank's data generation.
  node.barrier("ops/aggregate/" + options.name + "/generated");
  ops::Aggregation aggregation(node, spec, run);
  if (ready) ready();
  node.barrier("ops/aggregate/" + options.name + "/start");
  const ops::AggregationResult mine = aggregation.run(fragments);
  return ops::gather_aggregation_results(node, spec, mine);
}

ReferenceAggregation reference_aggregation(const AggCommandOptions& options, int ranks) {
  struct State {
    std::uint64_t sum = 0;  // wraps, as the combiner's SUM
    std::uint64_t count = 0;
    std::int64_t min = 0, max = 0;
  };
  std::unordered_map<std::uint64_t, State> groups;
  const std::uint64_t slices = static_cast<std::uint64_t>(ranks) * options.threads;
  for (std::uint64_t s = 0; s < slices; ++s) {
    for (const AggTuple& t : agg_slice(data_shape(options), s, slices)) {
      State& g = groups[t.key];
      if (g.count == 0 || t.value < g.min) g.min = t.value;
      if (g.count == 0 || t.value > g.max) g.max = t.value;
      g.sum += static_cast<std::uint64_t>(t.value);
      ++g.count;
    }
  }
  // Rows as flow::combiner_result_schema lays them out: key, sum, count, min, max, avg (6 x 8 B).
  ReferenceAggregation out;
  out.groups = groups.size();
  for (const auto& [key, g] : groups) {
    std::byte row[48];
    const auto sum = static_cast<std::int64_t>(g.sum);
    const double avg = static_cast<double>(static_cast<long double>(sum) / static_cast<long double>(g.count));
    std::memcpy(row, &key, 8);
    std::memcpy(row + 8, &sum, 8);
    std::memcpy(row + 16, &g.count, 8);
    std::memcpy(row + 24, &g.min, 8);
    std::memcpy(row + 32, &g.max, 8);
    std::memcpy(row + 40, &avg, 8);
    out.checksum += kernels::fold_tuple(row, sizeof row);
  }
  return out;
}

int run_agg_command(const AggCommandOptions& options, std::ostream& out, std::ostream& err) {
  if (std::string bad = check_agg_options(options); !bad.empty()) {
    err << "dfi agg: " << bad << '\n';
    return 1;
  }
  cluster::Node node;
  const bool leader = node.rank() == 0;
  std::optional<GroupDump> dump;
  if (!options.dump.empty()) dump.emplace();
  const ops::AggregationResult all = run_generated_aggregation(node, options, [&] {
    if (leader && !options.json) {
      out << "dfi agg: " << options.algorithm << ", " << node.size() << " ranks x " << options.threads
          << " threads, " << options.tuples << " tuples, " << options.groups << " groups ("
          << (options.zipf > 0 ? "zipf " + std::to_string(options.zipf) : std::string("uniform"))
          << "); data generated, flow open, aggregating" << std::endl;
    }
  }, dump ? dump->run_options() : ops::AggregationRunOptions{});
  if (dump) {
    const std::filesystem::path dir(options.dump);
    dump->write(dir / ("groups-" + std::to_string(node.rank()) + ".csv"));
    if (leader) {
      std::ofstream input = open_dump(dir / "input.csv", "key,value");
      const std::uint64_t slices = static_cast<std::uint64_t>(node.size()) * options.threads;
      for (std::uint64_t s = 0; s < slices; ++s) {
        for (const AggTuple& t : agg_slice(data_shape(options), s, slices)) input << t.key << ',' << t.value << '\n';
      }
      open_dump(dir / "result.csv", "algorithm,groups,checksum,input_tuples")
          << options.algorithm << ',' << all.groups << ',' << all.checksum << ',' << all.input_tuples << '\n';
    }
    node.barrier("ops/aggregate/" + options.name + "/dumped");
  }
  int code = 0;
  std::string verdict = "not verified";
  const bool verify = options.verify == "yes" || (options.verify == "auto" && options.tuples <= 16'000'000);
  if (leader && verify) {
    if (!options.json) out << "dfi agg: checking against the single-node reference" << std::endl;
    const ReferenceAggregation expected = reference_aggregation(options, node.size());
    if (expected.groups == all.groups && expected.checksum == all.checksum && all.input_tuples == options.tuples) {
      verdict = "matches the reference";
    } else {
      verdict = "DIFFERS from the reference (" + std::to_string(expected.groups) + " groups, checksum " +
                hex(expected.checksum) + ")";
      code = 1;
    }
  }
  if (leader) {
    const unsigned cores = std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()),
                                              static_cast<unsigned>(node.size() * options.threads * 2));
    const double rate = all.seconds > 0 ? static_cast<double>(options.tuples) / all.seconds : 0;
    if (options.json) {
      out << "{\"algorithm\": \"" << options.algorithm << "\", \"ranks\": " << node.size()
          << ", \"threads\": " << options.threads << ", \"tuples\": " << options.tuples
          << ", \"groups\": " << all.groups << ", \"checksum\": \"" << hex(all.checksum)
          << "\", \"shipped_rows\": " << all.shipped_rows << ", \"passed_tuples\": " << all.passed_tuples
          << ", \"seconds\": " << all.seconds
          << ", \"open_seconds\": " << all.open_seconds
          << ", \"tuples_per_second\": " << rate << ", \"cores\": " << cores
          << ", \"verified\": " << (verify ? (code == 0 ? "true" : "false") : "null") << "}" << std::endl;
    } else {
      out << std::fixed << std::setprecision(3) << "dfi agg: " << all.groups << " groups, checksum "
          << hex(all.checksum) << ", " << all.shipped_rows << " partial rows shipped (" << all.passed_tuples
          << " tuples passed through), " << all.seconds
          << " s (flow opened before, in " << all.open_seconds << " s); "
          << std::setprecision(2) << rate / 1e6 << " M tuples/s, " << rate / 1e6 / cores << " M per core ("
          << cores << " cores); " << verdict << std::endl;
    }
    if (code != 0) err << "dfi agg: the result " << verdict << '\n';
  }
  node.finish();
  return code;
}

}  // namespace dfi::tools
