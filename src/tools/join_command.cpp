#include "join_command.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <iomanip>
#include <functional>
#include <ostream>
#include <span>
#include <sstream>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/kernels/reference_join.hpp"
#include "dfi/ops/join.hpp"
#include "dump.hpp"
#include "join_data.hpp"

namespace dfi::tools {

namespace {

flow::Schema join_schema(std::size_t tuple_bytes) {
  std::vector<flow::Column> columns{{"key", flow::Type::uint64, 1}, {"payload", flow::Type::uint64, 1}};
  if (tuple_bytes > 16) columns.push_back({"pad", flow::Type::chars, static_cast<std::uint32_t>(tuple_bytes - 16)});
  return flow::Schema(columns);
}

std::string hex(std::uint64_t value) {
  std::ostringstream s;
  s << "0x" << std::hex << std::setw(16) << std::setfill('0') << value;
  return s.str();
}

JoinDataShape data_shape(const JoinCommandOptions& o) {
  return {o.build_tuples, o.probe_tuples, o.tuple_bytes, o.selectivity, o.duplicates, o.seed};
}

ops::JoinSpec join_spec(const JoinCommandOptions& options) {
  ops::JoinSpec spec;
  spec.name = options.name;
  spec.algorithm = ops::parse_join_algorithm(options.algorithm);
  const flow::Schema schema = join_schema(options.tuple_bytes);
  spec.build = {schema, "key"};
  spec.probe = {schema, "key"};
  spec.threads = options.threads;
  spec.bloom = options.bloom;
  spec.grace_partitions = options.partitions;
  return spec;
}

// --dump: the pairs of this rank's join threads, one buffer per thread (the sink runs on all of
// them at once), written once the join is done.
class PairDump {
 public:
  explicit PairDump(int threads) : pairs_(static_cast<std::size_t>(threads)) {}
  ops::JoinRunOptions run_options() {
    ops::JoinRunOptions run;
    run.sink = [this](int thread, std::span<const ops::Match> matches) {
      for (const ops::Match& m : matches) {
        std::uint64_t b, p;
        std::memcpy(&b, m.build + 8, 8);
        std::memcpy(&p, m.probe + 8, 8);
        pairs_[static_cast<std::size_t>(thread)].emplace_back(b, p);
      }
    };
    return run;
  }
  void write(const std::filesystem::path& file) const {
    std::ofstream out = open_dump(file, "build_payload,probe_payload");
    for (const auto& thread : pairs_) {
      for (const auto& [b, p] : thread) out << b << ',' << p << '\n';
    }
  }

 private:
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> pairs_;
};

// --dump, rank 0: a generated relation as key,payload.
void dump_relation(const std::filesystem::path& file, const std::vector<std::byte>& tuples, std::size_t width) {
  std::ofstream out = open_dump(file, "key,payload");
  for (std::size_t at = 0; at + width <= tuples.size(); at += width) {
    std::uint64_t key, payload;
    std::memcpy(&key, tuples.data() + at, 8);
    std::memcpy(&payload, tuples.data() + at + 8, 8);
    out << key << ',' << payload << '\n';
  }
}

}  // namespace

std::string check_join_options(const JoinCommandOptions& o) {
  if (o.tuple_bytes < 16 || o.tuple_bytes % 8 != 0) return "--tuple-bytes must be a multiple of 8 and at least 16";
  if (!(o.selectivity > 0 && o.selectivity <= 1)) return "--selectivity must be in (0, 1]";
  if (o.duplicates < 1) return "--duplicates must be at least 1";
  if (o.threads < 1) return "--threads must be at least 1";
  if (o.bloom && o.algorithm != "grace") return "--bloom needs --algorithm grace";
  if (o.partitions < 0) return "--partitions must not be negative";
  if (o.verify != "yes" && o.verify != "no" && o.verify != "auto") return "--verify must be yes, no or auto";
  return {};
}

ops::JoinResult run_generated_join(cluster::Node& node, const JoinCommandOptions& options,
                                   const std::function<void()>& ready, const ops::JoinRunOptions& run) {
  if (std::string bad = check_join_options(options); !bad.empty()) {
    throw Error(Errc::invalid_argument, "dfi join: " + bad);
  }
  const ops::JoinSpec spec = join_spec(options);
  spec.validate(node.size());
  if (node.rank() == 0) ops::create_join(node, spec);
  const std::uint64_t slices = static_cast<std::uint64_t>(node.size()) * options.threads;
  const JoinData data(data_shape(options));
  std::vector<std::vector<std::byte>> build_data, probe_data;
  std::vector<ops::Fragment> build, probe;
  for (int t = 0; t < options.threads; ++t) {
    const std::uint64_t slice = static_cast<std::uint64_t>(node.rank()) * options.threads + t;
    build_data.push_back(data.build(slice, slices));
    probe_data.push_back(data.probe(slice, slices));
  }
  for (int t = 0; t < options.threads; ++t) {
    build.push_back({build_data[t].data(), build_data[t].size() / options.tuple_bytes});
    probe.push_back({probe_data[t].data(), probe_data[t].size() / options.tuple_bytes});
  }
  // Every rank's data is generated before the open starts, so that open_seconds is the open's
  // (its sources wait for every rank's targets) and not the slowest rank's data generation.
  node.barrier("ops/join/" + options.name + "/generated");
  ops::Join join(node, spec, run);
  if (ready) ready();
  node.barrier("ops/join/" + options.name + "/start");
  const ops::JoinResult mine = join.run(build, probe);
  return ops::gather_join_results(node, spec, mine);
}

kernels::ReferenceJoinResult reference_join_result(const JoinCommandOptions& options, int ranks) {
  const JoinData data(data_shape(options));
  const std::vector<std::byte> build = data.build(0, 1);
  const std::vector<std::byte> probe = data.probe_all(static_cast<std::uint64_t>(ranks) * options.threads);
  const kernels::JoinTable::Layout layout{options.tuple_bytes, 0, 8};
  return kernels::reference_join(build.data(), options.build_tuples, layout, probe.data(),
                                 options.probe_tuples, layout);
}

int run_join_command(const JoinCommandOptions& options, std::ostream& out, std::ostream& err) {
  if (std::string bad = check_join_options(options); !bad.empty()) {
    err << "dfi join: " << bad << '\n';
    return 1;
  }
  cluster::Node node;
  const bool leader = node.rank() == 0;
  const ops::JoinSpec spec = join_spec(options);
  std::optional<PairDump> dump;
  if (!options.dump.empty()) dump.emplace(options.threads);
  const ops::JoinResult all = run_generated_join(node, options, [&] {
    if (leader && !options.json) {
      out << "dfi join: " << ops::join_algorithm_name(spec.algorithm) << (spec.bloom ? " with Bloom filter" : "") << ", " << node.size() << " ranks x "
          << options.threads << " threads, build " << options.build_tuples << " x probe "
          << options.probe_tuples << " tuples of " << options.tuple_bytes << " B; data generated, flows open, joining"
          << std::endl;
    }
  }, dump ? dump->run_options() : ops::JoinRunOptions{});
  if (dump) {
    const std::filesystem::path dir(options.dump);
    dump->write(dir / ("pairs-" + std::to_string(node.rank()) + ".csv"));
    if (leader) {
      const JoinData data(data_shape(options));
      dump_relation(dir / "build.csv", data.build(0, 1), options.tuple_bytes);
      dump_relation(dir / "probe.csv", data.probe_all(static_cast<std::uint64_t>(node.size()) * options.threads),
                    options.tuple_bytes);
      std::ofstream result = open_dump(dir / "result.csv", "algorithm,bloom,matches,checksum,probe_tuples,shipped_probe_tuples");
      result << ops::join_algorithm_name(spec.algorithm) << ',' << (spec.bloom ? 1 : 0) << ',' << all.matches << ','
          << all.checksum << ',' << all.probe_tuples << ',' << all.shipped_probe_tuples << '\n';
    }
    node.barrier("ops/join/" + options.name + "/dumped");
  }

  int code = 0;
  std::string verdict = "not verified";
  const bool verify = options.verify == "yes" ||
                      (options.verify == "auto" && options.build_tuples <= 16'000'000 &&
                       options.probe_tuples <= 16'000'000);
  if (leader && verify) {
    if (!options.json) out << "dfi join: checking against the single-node reference join" << std::endl;
    const kernels::ReferenceJoinResult expected = reference_join_result(options, node.size());
    // Every probe tuple is probed (with a Bloom filter: every one shipped, at most all of them);
    // radix and grace hold every build tuple in some rank's tables.
    const bool probes_ok = spec.bloom ? all.probe_tuples == all.shipped_probe_tuples &&
                                            all.shipped_probe_tuples <= options.probe_tuples
                                      : all.probe_tuples == options.probe_tuples;
    if (expected.matches == all.matches && expected.checksum == all.checksum && probes_ok &&
        (spec.algorithm == ops::JoinAlgorithm::fragment_replicate || all.build_tuples == options.build_tuples)) {
      verdict = "matches the reference";
    } else {
      verdict = "DIFFERS from the reference (" + std::to_string(expected.matches) + " matches, checksum " +
                hex(expected.checksum) + ")";
      code = 1;
    }
  }
  if (leader) {
    const double input = static_cast<double>(options.build_tuples + options.probe_tuples);
    const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
    const unsigned cores = std::min<unsigned>(hardware, static_cast<unsigned>(node.size() * options.threads * 2));
    const double rate = all.seconds > 0 ? input / all.seconds : 0;
    if (options.json) {
      out << "{\"algorithm\": \"" << ops::join_algorithm_name(spec.algorithm) << "\", \"bloom\": "
          << (spec.bloom ? "true" : "false") << ", \"ranks\": " << node.size()
          << ", \"threads\": " << options.threads << ", \"build_tuples\": " << options.build_tuples
          << ", \"probe_tuples\": " << options.probe_tuples << ", \"tuple_bytes\": " << options.tuple_bytes
          << ", \"shipped_probe_tuples\": " << all.shipped_probe_tuples << ", \"matches\": " << all.matches << ", \"checksum\": \"" << hex(all.checksum)
          << "\", \"seconds\": " << all.seconds << ", \"build_seconds\": " << all.build_seconds
          << ", \"open_seconds\": " << all.open_seconds
          << ", \"tuples_per_second\": " << rate << ", \"cores\": " << cores
          << ", \"verified\": " << (verify ? (code == 0 ? "true" : "false") : "null") << "}" << std::endl;
    } else {
      out << std::fixed << std::setprecision(3) << "dfi join: " << all.matches << " matches, checksum "
          << hex(all.checksum) << ", " << all.seconds << " s (tables built after " << all.build_seconds
          << " s; flows opened before, in " << all.open_seconds << " s); " << std::setprecision(2) << rate / 1e6 << " M input tuples/s, " << rate / 1e6 / cores
          << " M per core (" << cores << " cores; Barthels et al.'s MPI radix join: 11.9 M per core); "
          << all.shipped_probe_tuples << " probe tuples shipped; " << verdict << std::endl;
    }
    if (code != 0) err << "dfi join: the result " << verdict << '\n';
  }
  node.finish();
  return code;
}

}  // namespace dfi::tools
