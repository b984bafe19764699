#include "join_command.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <ostream>
#include <random>
#include <span>
#include <sstream>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/kernels/reference_join.hpp"
#include "dfi/ops/join.hpp"

namespace dfi::tools {

namespace {

flow::Schema join_schema(std::size_t tuple_bytes) {
  std::vector<flow::Column> columns{{"key", flow::Type::uint64, 1}, {"payload", flow::Type::uint64, 1}};
  if (tuple_bytes > 16) columns.push_back({"pad", flow::Type::chars, static_cast<std::uint32_t>(tuple_bytes - 16)});
  return flow::Schema(columns);
}

// The generated input: slice `slice` of `slices` of a relation of `total` tuples is the global
// tuple range [total * slice / slices, total * (slice + 1) / slices). Tuple g: key, payload g,
// padding zero. Build keys: g / duplicates + 1 (each key `duplicates` times). Probe keys: uniform
// over 1 .. domain from a generator seeded per slice, where domain = distinct build keys /
// selectivity, so a probe key has a partner with probability `selectivity`.
class Generator {
 public:
  explicit Generator(const JoinCommandOptions& options) : options_(options) {
    const std::uint64_t distinct = (options.build_tuples + options.duplicates - 1) / options.duplicates;
    domain_ = std::max<std::uint64_t>(
        1, static_cast<std::uint64_t>(std::llround(static_cast<double>(distinct) / options.selectivity)));
  }

  std::vector<std::byte> build(std::uint64_t slice, std::uint64_t slices) const {
    auto [first, last] = range(options_.build_tuples, slice, slices);
    std::vector<std::byte> out((last - first) * options_.tuple_bytes);
    for (std::uint64_t g = first; g < last; ++g) {
      write(out.data() + (g - first) * options_.tuple_bytes, g / options_.duplicates + 1, g);
    }
    return out;
  }

  std::vector<std::byte> probe(std::uint64_t slice, std::uint64_t slices) const {
    auto [first, last] = range(options_.probe_tuples, slice, slices);
    std::vector<std::byte> out((last - first) * options_.tuple_bytes);
    std::mt19937_64 random(kernels::mix64(options_.seed * 0x9e3779b97f4a7c15ull + slice + 1));
    std::uniform_int_distribution<std::uint64_t> keys(1, domain_);
    for (std::uint64_t g = first; g < last; ++g) {
      write(out.data() + (g - first) * options_.tuple_bytes, keys(random), g);
    }
    return out;
  }

  // The whole probe relation: every slice in turn (each slice has its own random stream).
  std::vector<std::byte> probe_all(std::uint64_t slices) const {
    std::vector<std::byte> out;
    out.reserve(options_.probe_tuples * options_.tuple_bytes);
    for (std::uint64_t s = 0; s < slices; ++s) {
      std::vector<std::byte> slice = probe(s, slices);
      out.insert(out.end(), slice.begin(), slice.end());
    }
    return out;
  }

 private:
  static std::pair<std::uint64_t, std::uint64_t> range(std::uint64_t total, std::uint64_t slice,
                                                       std::uint64_t slices) {
    __extension__ using Wide = unsigned __int128;  // total * slice may exceed 64 bits
    auto at = [&](std::uint64_t s) {
      return static_cast<std::uint64_t>((static_cast<Wide>(total) * s) / slices);
    };
    return {at(slice), at(slice + 1)};
  }
  void write(std::byte* tuple, std::uint64_t key, std::uint64_t payload) const {
    std::memcpy(tuple, &key, 8);
    std::memcpy(tuple + 8, &payload, 8);
  }

  const JoinCommandOptions& options_;
  std::uint64_t domain_ = 1;
};

std::string check_options(const JoinCommandOptions& o) {
  if (o.tuple_bytes < 16 || o.tuple_bytes % 8 != 0) return "--tuple-bytes must be a multiple of 8 and at least 16";
  if (!(o.selectivity > 0 && o.selectivity <= 1)) return "--selectivity must be in (0, 1]";
  if (o.duplicates < 1) return "--duplicates must be at least 1";
  if (o.threads < 1) return "--threads must be at least 1";
  if (o.verify != "yes" && o.verify != "no" && o.verify != "auto") return "--verify must be yes, no or auto";
  return {};
}

std::string hex(std::uint64_t value) {
  std::ostringstream s;
  s << "0x" << std::hex << std::setw(16) << std::setfill('0') << value;
  return s.str();
}

}  // namespace

int run_join_command(const JoinCommandOptions& options, std::ostream& out, std::ostream& err) {
  if (std::string bad = check_options(options); !bad.empty()) {
    err << "dfi join: " << bad << '\n';
    return 1;
  }
  cluster::Node node;
  const bool leader = node.rank() == 0;
  const flow::Schema schema = join_schema(options.tuple_bytes);
  ops::JoinSpec spec;
  spec.name = options.name;
  spec.algorithm = ops::parse_join_algorithm(options.algorithm);
  spec.build = {schema, "key"};
  spec.probe = {schema, "key"};
  spec.threads = options.threads;
  spec.validate(node.size());
  if (leader) ops::create_join(node, spec);

  const std::uint64_t slices = static_cast<std::uint64_t>(node.size()) * options.threads;
  const Generator generator(options);
  std::vector<std::vector<std::byte>> build_data, probe_data;
  std::vector<ops::Fragment> build, probe;
  for (int t = 0; t < options.threads; ++t) {
    const std::uint64_t slice = static_cast<std::uint64_t>(node.rank()) * options.threads + t;
    build_data.push_back(generator.build(slice, slices));
    probe_data.push_back(generator.probe(slice, slices));
  }
  for (int t = 0; t < options.threads; ++t) {
    build.push_back({build_data[t].data(), build_data[t].size() / options.tuple_bytes});
    probe.push_back({probe_data[t].data(), probe_data[t].size() / options.tuple_bytes});
  }
  if (leader && !options.json) {
    out << "dfi join: " << ops::join_algorithm_name(spec.algorithm) << ", " << node.size() << " ranks x "
        << options.threads << " threads, build " << options.build_tuples << " x probe " << options.probe_tuples
        << " tuples of " << options.tuple_bytes << " B; data generated, joining" << std::endl;
  }

  node.barrier("ops/join/" + options.name + "/start");
  const ops::JoinResult mine = ops::run_join(node, spec, build, probe);
  const ops::JoinResult all = ops::gather_join_results(node, spec, mine);

  int code = 0;
  std::string verdict = "not verified";
  const bool verify = options.verify == "yes" ||
                      (options.verify == "auto" && options.build_tuples <= 16'000'000 &&
                       options.probe_tuples <= 16'000'000);
  if (leader && verify) {
    if (!options.json) out << "dfi join: checking against the single-node reference join" << std::endl;
    const std::vector<std::byte> whole_build = generator.build(0, 1);
    const std::vector<std::byte> whole_probe = generator.probe_all(slices);
    const kernels::JoinTable::Layout layout{options.tuple_bytes, 0, 8};
    const kernels::ReferenceJoinResult expected =
        kernels::reference_join(whole_build.data(), options.build_tuples, layout, whole_probe.data(),
                                options.probe_tuples, layout);
    if (expected.matches == all.matches && expected.checksum == all.checksum &&
        all.probe_tuples == options.probe_tuples &&
        (spec.algorithm != ops::JoinAlgorithm::radix || all.build_tuples == options.build_tuples)) {
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
      out << "{\"algorithm\": \"" << ops::join_algorithm_name(spec.algorithm) << "\", \"ranks\": " << node.size()
          << ", \"threads\": " << options.threads << ", \"build_tuples\": " << options.build_tuples
          << ", \"probe_tuples\": " << options.probe_tuples << ", \"tuple_bytes\": " << options.tuple_bytes
          << ", \"matches\": " << all.matches << ", \"checksum\": \"" << hex(all.checksum)
          << "\", \"seconds\": " << all.seconds << ", \"build_seconds\": " << all.build_seconds
          << ", \"tuples_per_second\": " << rate << ", \"cores\": " << cores
          << ", \"verified\": " << (verify ? (code == 0 ? "true" : "false") : "null") << "}" << std::endl;
    } else {
      out << std::fixed << std::setprecision(3) << "dfi join: " << all.matches << " matches, checksum "
          << hex(all.checksum) << ", " << all.seconds << " s (tables built after " << all.build_seconds
          << " s); " << std::setprecision(2) << rate / 1e6 << " M input tuples/s, " << rate / 1e6 / cores
          << " M per core (" << cores << " cores; Barthels et al.'s MPI radix join: 11.9 M per core); " << verdict
          << std::endl;
    }
    if (code != 0) err << "dfi join: the result " << verdict << '\n';
  }
  node.finish();
  return code;
}

}  // namespace dfi::tools
