// Rank program for the multi-process combiner tests, started by launch::run_cluster.
//
//   combiner_node property SEED COUNT     COUNT random flows: results equal a single-node
//                                         reference aggregation of the same data
//   combiner_node overflow                SUM wraps modulo 2^64, AVG is exact, MIN/MAX extremes
//   combiner_node partial                 streaming reads see what the sources flushed
//   combiner_node first-write             before_first_write runs once, before the first write
//   combiner_node errors                  every bad spec and user error gives a clear error
//   combiner_node kill-source             a dead source fails consume naming it
//   combiner_node bench TUPLES GROUPS     ranks 0..: one source each, target on rank 0: SUM
//                                         through the combiner vs the same data through a
//                                         shuffle flow aggregated at the target
//
// Exit status 0 means the scenario held; every failure prints why.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/combiner.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/registry/client.hpp"

namespace {

using namespace dfi;
using namespace dfi::flow;

__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

std::atomic<int> failures{0};
std::mutex print_mutex;

void fail(const std::string& what) {
  std::lock_guard lock(print_mutex);
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  ++failures;
}

void say(const std::string& what) {
  std::lock_guard lock(print_mutex);
  std::printf("%s\n", what.c_str());
  std::fflush(stdout);
}

bool tcp() { return config::get_string("transport") == "tcp"; }

// ---------------------------------------------------------------------------------------------
// Property test: random schemas, aggregates and data; reference computed independently.

struct Config {
  std::string name;
  FlowSpec spec;
  std::vector<std::uint64_t> tuples;  // per source
  std::uint64_t seed = 0;
  std::uint64_t groups = 1;
  int value_style = 0;  // 0: small, 1: full range (wraps), 2: mixed
  std::size_t local_groups = 0;
  std::size_t ship_tuples = 0;
  double pass_through_below = 0;  // adaptive pre-aggregation (0: off)
  std::size_t pass_through_tuples = 0;
};

const std::vector<Type> kKeyTypes{Type::int32, Type::int64, Type::uint16, Type::chars};
const std::vector<Type> kValueTypes{Type::int8,   Type::int16,   Type::int32,
                                    Type::int64,  Type::uint8,   Type::uint32,
                                    Type::uint64, Type::float32, Type::float64};

std::string value_name(int v) {
  std::string name = std::to_string(v);
  name.insert(name.begin(), 'v');  // (not "v" + ...: GCC 12 warns falsely about that, -Wrestrict)
  return name;
}

Config make_config(std::uint64_t seed, int index, int ranks) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(index));
  auto pick = [&](std::uint64_t lo, std::uint64_t hi) { return lo + rng() % (hi - lo + 1); };
  Config c;
  c.name = "comb-" + std::to_string(seed) + "-" + std::to_string(index);
  c.seed = rng();
  FlowSpec& spec = c.spec;
  spec.name = c.name;
  spec.type = FlowType::combiner;
  const int sources = static_cast<int>(pick(1, 4));
  for (int s = 0; s < sources; ++s)
    spec.sources.push_back({static_cast<int>(pick(0, ranks - 1)), s});
  spec.targets.push_back({static_cast<int>(pick(0, ranks - 1)), 0});
  std::vector<Column> columns;
  const Type key_type = kKeyTypes[pick(0, kKeyTypes.size() - 1)];
  const int values = static_cast<int>(pick(1, 3));
  // Columns in random order, the key somewhere among them.
  const int key_at = static_cast<int>(pick(0, values));
  for (int i = 0, v = 0; i <= values; ++i) {
    if (i == key_at) {
      columns.push_back(
          {"k", key_type, key_type == Type::chars ? static_cast<std::uint32_t>(pick(9, 14)) : 1u});
    } else {
      columns.push_back({value_name(v++), kValueTypes[pick(0, kValueTypes.size() - 1)], 1});
    }
  }
  spec.schema = Schema(columns);
  spec.key_column =
      std::string("k");  // (a temporary: GCC 12 warns falsely on assigning "k", -Wrestrict)
  std::vector<AggregateSpec>& aggregates = spec.type_options.get<CombinerOptions>().aggregates;
  const Aggregate all[] = {Aggregate::sum, Aggregate::count, Aggregate::min, Aggregate::max,
                           Aggregate::avg};
  for (int v = 0; v < values; ++v) {
    for (Aggregate a : all) {
      if (a == Aggregate::count || pick(0, 2) == 0) continue;
      aggregates.push_back({a, value_name(v)});
    }
  }
  if (aggregates.empty() || pick(0, 1) == 0) aggregates.push_back({Aggregate::count, ""});
  std::shuffle(aggregates.begin(), aggregates.end(), rng);
  spec.options.segments = static_cast<std::uint32_t>(pick(2, 16));
  const std::size_t row = combiner_row_bytes(spec);
  spec.options.segment_bytes = static_cast<std::uint32_t>(
      8 * pick((row + 16 + 7) / 8, std::max<std::uint64_t>((row + 16 + 7) / 8, 1024)));
  spec.options.direct_write = pick(0, 3) != 0;
  spec.options.stall_timeout = std::chrono::seconds(60);
  c.groups = pick(0, 3) == 0 ? pick(1, 5) : pick(1, 2000);
  c.value_style = static_cast<int>(pick(0, 2));
  const std::uint64_t most = tcp() ? 3000 : 8000;
  for (int s = 0; s < sources; ++s) c.tuples.push_back(pick(0, 5) == 0 ? 0 : pick(1, most));
  c.local_groups = pick(0, 1) == 0 ? pick(1, 64) : 65536;
  c.ship_tuples = pick(0, 2) == 0 ? pick(1, 500) : 0;
  if (pick(0, 2) == 0) {  // a full table with any misses starts a pass-through window
    c.pass_through_below = 1.0;
    c.pass_through_tuples = pick(1, 300);
  }
  return c;
}

// The tuple number `i` of source `s`, deterministic, so the reference can recompute it.
void make_tuple(const Config& c, std::size_t s, std::uint64_t i, std::vector<std::byte>& t) {
  std::mt19937_64 rng(c.seed ^ (std::uint64_t{s} << 48) ^ (i * 0x9e3779b97f4a7c15ull));
  const Schema& schema = c.spec.schema;
  std::fill(t.begin(), t.end(), std::byte{0});
  for (std::size_t col = 0; col < schema.column_count(); ++col) {
    std::byte* p = t.data() + schema.offset(col);
    const Column& column = schema.column(col);
    if (column.name == "k") {
      // Sparse keys: only every third key of the domain occurs, so most keys have no group.
      const std::uint64_t k = (rng() % c.groups) * 3;
      switch (column.type) {
        case Type::int32: {
          const std::int32_t v = static_cast<std::int32_t>(k) - 3000;
          std::memcpy(p, &v, 4);
          break;
        }
        case Type::int64: {
          const std::int64_t v = static_cast<std::int64_t>(k * 0x100000001ull) - 123456789;
          std::memcpy(p, &v, 8);
          break;
        }
        case Type::uint16: {
          const std::uint16_t v = static_cast<std::uint16_t>(k);
          std::memcpy(p, &v, 2);
          break;
        }
        default: {
          const std::string text = "key-" + std::to_string(k);
          std::memcpy(p, text.data(), std::min<std::size_t>(text.size(), column.length));
        }
      }
      continue;
    }
    const std::uint64_t r = rng();
    const bool wide = c.value_style == 1 || (c.value_style == 2 && (r & 0x10) != 0);
    const std::int64_t small = static_cast<std::int64_t>(r % 2001) - 1000;  // negatives included
    switch (column.type) {
      case Type::int8: {
        const std::int8_t v = static_cast<std::int8_t>(wide ? r : small % 128);
        std::memcpy(p, &v, 1);
        break;
      }
      case Type::int16: {
        const std::int16_t v = static_cast<std::int16_t>(wide ? r : small);
        std::memcpy(p, &v, 2);
        break;
      }
      case Type::int32: {
        const std::int32_t v = static_cast<std::int32_t>(wide ? r : small);
        std::memcpy(p, &v, 4);
        break;
      }
      case Type::int64: {
        const std::int64_t v = wide ? static_cast<std::int64_t>(r) : small;
        std::memcpy(p, &v, 8);
        break;
      }
      case Type::uint8: {
        const std::uint8_t v = static_cast<std::uint8_t>(r);
        std::memcpy(p, &v, 1);
        break;
      }
      case Type::uint32: {
        const std::uint32_t v = static_cast<std::uint32_t>(wide ? r : r % 1000);
        std::memcpy(p, &v, 4);
        break;
      }
      case Type::uint64: {
        const std::uint64_t v = wide ? r : r % 1000;
        std::memcpy(p, &v, 8);
        break;
      }
      case Type::float32: {
        const float v = static_cast<float>(small) / 8.0f;
        std::memcpy(p, &v, 4);
        break;
      }
      default: {
        const double v = wide ? static_cast<double>(static_cast<std::int64_t>(r)) / 1e3
                              : static_cast<double>(small) / 16.0;
        std::memcpy(p, &v, 8);
      }
    }
  }
}

// Reference: a plain single-node aggregation of every source's tuples.
struct RefAgg {
  std::uint64_t count = 0;
  std::vector<long double> fsum, fmin, fmax;
  std::vector<Int128> isum;
  std::vector<UInt128> usum;
  std::vector<std::int64_t> imin, imax;
  std::vector<std::uint64_t> umin, umax;
};

int kind(Type t) {  // 0 signed, 1 unsigned, 2 float
  switch (t) {
    case Type::int8:
    case Type::int16:
    case Type::int32:
    case Type::int64:
      return 0;
    case Type::uint8:
    case Type::uint16:
    case Type::uint32:
    case Type::uint64:
      return 1;
    default:
      return 2;
  }
}

std::int64_t read_signed(const std::byte* p, Type t) {
  switch (t) {
    case Type::int8: {
      std::int8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case Type::int16: {
      std::int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case Type::int32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}
std::uint64_t read_unsigned(const std::byte* p, Type t) {
  switch (t) {
    case Type::uint8: {
      std::uint8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case Type::uint16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case Type::uint32: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}
long double read_float(const std::byte* p, Type t) {
  if (t == Type::float32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  double v;
  std::memcpy(&v, p, 8);
  return v;
}

std::map<std::string, RefAgg> reference(const Config& c) {
  const Schema& schema = c.spec.schema;
  const std::size_t key = schema.index_of("k");
  const std::size_t cols = schema.column_count();
  std::map<std::string, RefAgg> groups;
  std::vector<std::byte> t(schema.tuple_bytes());
  for (std::size_t s = 0; s < c.tuples.size(); ++s) {
    for (std::uint64_t i = 0; i < c.tuples[s]; ++i) {
      make_tuple(c, s, i, t);
      std::string k(reinterpret_cast<const char*>(t.data() + schema.offset(key)),
                    schema.column_bytes(key));
      RefAgg& g = groups[k];
      if (g.count == 0) {
        g.fsum.assign(cols, 0);
        g.fmin.assign(cols, 0);
        g.fmax.assign(cols, 0);
        g.isum.assign(cols, 0);
        g.usum.assign(cols, 0);
        g.imin.assign(cols, 0);
        g.imax.assign(cols, 0);
        g.umin.assign(cols, 0);
        g.umax.assign(cols, 0);
      }
      for (std::size_t col = 0; col < cols; ++col) {
        if (col == key) continue;
        const Type type = schema.column(col).type;
        const std::byte* p = t.data() + schema.offset(col);
        if (kind(type) == 0) {
          const std::int64_t v = read_signed(p, type);
          g.isum[col] += v;
          g.imin[col] = g.count == 0 ? v : std::min(g.imin[col], v);
          g.imax[col] = g.count == 0 ? v : std::max(g.imax[col], v);
        } else if (kind(type) == 1) {
          const std::uint64_t v = read_unsigned(p, type);
          g.usum[col] += v;
          g.umin[col] = g.count == 0 ? v : std::min(g.umin[col], v);
          g.umax[col] = g.count == 0 ? v : std::max(g.umax[col], v);
        } else {
          const long double v = read_float(p, type);
          g.fsum[col] += v;
          g.fmin[col] = g.count == 0 ? v : std::min(g.fmin[col], v);
          g.fmax[col] = g.count == 0 ? v : std::max(g.fmax[col], v);
        }
      }
      ++g.count;
    }
  }
  return groups;
}

// Compares the target's results with the reference; returns how many rows were checked.
std::size_t check_results(const Config& c, const std::vector<std::byte>& results) {
  const Schema& schema = c.spec.schema;
  const Schema out = combiner_result_schema(c.spec);
  const std::size_t key = schema.index_of("k");
  const std::size_t key_bytes = schema.column_bytes(key);
  const std::map<std::string, RefAgg> want = reference(c);
  const std::size_t width = out.tuple_bytes();
  const std::size_t rows = results.size() / width;
  if (rows != want.size()) {
    fail(c.name + ": " + std::to_string(rows) + " result rows, the reference has " +
         std::to_string(want.size()) + " groups {" + c.spec.to_json() + "}");
    return 0;
  }
  std::map<std::string, const std::byte*> got;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::byte* row = results.data() + r * width;
    if (!got.emplace(std::string(reinterpret_cast<const char*>(row + out.offset(0)), key_bytes),
                     row)
             .second) {
      fail(c.name + ": a key appears twice in the results");
    }
  }
  for (const auto& [k, g] : want) {
    auto it = got.find(k);
    if (it == got.end()) {
      fail(c.name + ": a group of the reference is missing {" + c.spec.to_json() + "}");
      continue;
    }
    const auto& aggregates = c.spec.type_options.get<CombinerOptions>().aggregates;
    for (std::size_t a = 0; a < aggregates.size(); ++a) {
      const AggregateSpec& spec = aggregates[a];
      const std::byte* p = it->second + out.offset(a + 1);
      const std::string what =
          c.name + ": " + std::string(aggregate_name(spec.function)) + "(" + spec.column + ")";
      if (spec.function == Aggregate::count) {
        if (read_unsigned(p, Type::uint64) != g.count) fail(what + ": wrong count");
        continue;
      }
      const std::size_t col = schema.index_of(spec.column);
      const Type type = schema.column(col).type;
      const int kd = kind(type);
      switch (spec.function) {
        case Aggregate::sum:
          if (kd == 0 && read_signed(p, Type::int64) !=
                             static_cast<std::int64_t>(static_cast<std::uint64_t>(g.isum[col])))
            fail(what + ": wrong sum (wrapped)");
          if (kd == 1 && read_unsigned(p, Type::uint64) != static_cast<std::uint64_t>(g.usum[col]))
            fail(what + ": wrong sum (wrapped)");
          if (kd == 2) {
            const long double v = read_float(p, Type::float64);
            if (std::fabs(static_cast<double>(v - g.fsum[col])) >
                1e-9 * (1 + std::fabs(static_cast<double>(g.fsum[col]))) + 1e-6)
              fail(what + ": wrong sum");
          }
          break;
        case Aggregate::min:
        case Aggregate::max: {
          const bool is_min = spec.function == Aggregate::min;
          if (kd == 0 && read_signed(p, type) != (is_min ? g.imin[col] : g.imax[col]))
            fail(what + ": wrong value");
          if (kd == 1 && read_unsigned(p, type) != (is_min ? g.umin[col] : g.umax[col]))
            fail(what + ": wrong value");
          if (kd == 2 && read_float(p, type) != (is_min ? g.fmin[col] : g.fmax[col]))
            fail(what + ": wrong value");
          break;
        }
        case Aggregate::avg: {
          const double v = static_cast<double>(read_float(p, Type::float64));
          double want_avg = 0;
          if (kd == 0)
            want_avg = static_cast<double>(static_cast<long double>(g.isum[col]) /
                                           static_cast<long double>(g.count));
          if (kd == 1)
            want_avg = static_cast<double>(static_cast<long double>(g.usum[col]) /
                                           static_cast<long double>(g.count));
          if (kd == 2) {
            want_avg = static_cast<double>(g.fsum[col] / static_cast<long double>(g.count));
            if (std::fabs(v - want_avg) > 1e-9 * (1 + std::fabs(want_avg)) + 1e-6)
              fail(what + ": wrong average");
          } else if (v != want_avg) {
            fail(what + ": average " + std::to_string(v) + " is not the exact " +
                 std::to_string(want_avg));
          }
          break;
        }
        case Aggregate::count:
          break;
      }
    }
  }
  return rows;
}

void run_source(cluster::Node& node, const Config& c, std::size_t index) {
  fabric::Worker worker(node.fabric(), c.name + " source " + std::to_string(index));
  CombinerSourceOptions options;
  options.expected_schema = c.spec.schema;
  options.local_groups = c.local_groups;
  options.ship_tuples = c.ship_tuples;
  options.pass_through_below = c.pass_through_below;
  options.pass_through_tuples = c.pass_through_tuples;
  CombinerSource source(node, worker, c.name, c.spec.sources[index].thread, options);
  std::vector<std::byte> t(c.spec.schema.tuple_bytes());
  for (std::uint64_t i = 0; i < c.tuples[index]; ++i) {
    make_tuple(c, index, i, t);
    if (Status s = source.push(t.data(), t.size()); !s)
      return fail(c.name + ": push: " + s.message());
  }
  if (Status s = source.close(); !s) fail(c.name + ": close: " + s.message());
  if (source.counters().tuples != c.tuples[index])
    fail(c.name + ": source counted the wrong number of tuples");
  if (c.pass_through_below == 0 && source.counters().passed != 0)
    fail(c.name + ": tuples passed through although pass-through is off");
}

void run_target(cluster::Node& node, const Config& c, std::size_t& rows,
                std::uint64_t& partial_reads) {
  CombinerTarget target(node, c.name, 0, c.spec.schema);
  // Streaming reads while the sources run: counts never shrink and never exceed the total.
  std::uint64_t total = 0, seen = 0;
  for (std::uint64_t n : c.tuples) total += n;
  const std::size_t count_at = [&] {
    const auto& aggregates = c.spec.type_options.get<CombinerOptions>().aggregates;
    for (std::size_t a = 0; a < aggregates.size(); ++a) {
      if (aggregates[a].function == Aggregate::count) return a + 1;
    }
    return std::size_t{0};
  }();
  TupleBatch batch;
  while (!target.sources_closed()) {
    if (Status s = target.read_partial(batch); !s)
      return fail(c.name + ": read_partial: " + s.message());
    ++partial_reads;
    if (count_at != 0) {
      std::uint64_t sum = 0;
      for (std::size_t r = 0; r < batch.count; ++r) {
        std::uint64_t n;
        std::memcpy(&n, batch.tuple(r) + target.result_schema().offset(count_at), 8);
        sum += n;
      }
      if (sum < seen || sum > total)
        return fail(c.name + ": partial counts went from " + std::to_string(seen) + " to " +
                    std::to_string(sum));
      seen = sum;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<std::byte> results;
  for (;;) {
    Status s = target.consume(batch, std::chrono::seconds(60));
    if (!s) return fail(c.name + ": consume: " + s.message());
    if (batch.empty()) break;
    if (batch.tuple_bytes != target.result_schema().tuple_bytes())
      return fail(c.name + ": wrong result width");
    results.insert(results.end(), batch.data, batch.data + batch.count * batch.tuple_bytes);
  }
  if (!target.end()) fail(c.name + ": no end after the last batch");
  if (target.counters().tuples != total)
    fail(c.name + ": the merged rows stand for " + std::to_string(target.counters().tuples) +
         " tuples, not " + std::to_string(total));
  rows = check_results(c, results);
}

int property(cluster::Node& node, std::uint64_t seed, int count) {
  std::uint64_t total_tuples = 0, total_rows = 0, reads = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count && failures == 0; ++i) {
    const Config c = make_config(seed, i, node.size());
    if (node.rank() == 0) create_flow(node, c.spec);
    std::vector<std::thread> threads;
    std::size_t rows = 0;
    std::uint64_t partial_reads = 0;
    if (c.spec.targets[0].rank == node.rank()) {
      threads.emplace_back([&] {
        try {
          run_target(node, c, rows, partial_reads);
        } catch (const std::exception& e) {
          fail(c.name + ": target: " + e.what());
        }
      });
    }
    for (std::size_t s = 0; s < c.spec.sources.size(); ++s) {
      if (c.spec.sources[s].rank == node.rank())
        threads.emplace_back([&, s] {
          try {
            run_source(node, c, s);
          } catch (const std::exception& e) {
            fail(c.name + ": source: " + e.what());
          }
        });
    }
    for (auto& thread : threads) thread.join();
    if (c.spec.targets[0].rank == node.rank()) {
      node.registry().publish(c.name + "/rows",
                              std::to_string(rows) + " " + std::to_string(partial_reads));
    }
    node.barrier("comb/" + c.name);
    if (node.rank() == 0) {
      std::istringstream in(node.registry().lookup(c.name + "/rows"));
      std::uint64_t r = 0, p = 0;
      in >> r >> p;
      total_rows += r;
      reads += p;
      for (std::uint64_t n : c.tuples) total_tuples += n;
    }
  }
  if (node.rank() == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "combiner property: %d configurations, %llu tuples, %llu result rows, %llu streaming "
        "reads, %s in %.1f s\n",
        count, static_cast<unsigned long long>(total_tuples),
        static_cast<unsigned long long>(total_rows), static_cast<unsigned long long>(reads),
        failures == 0 ? "all equal to the reference" : "FAILURES", seconds);
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------

struct Row {
  std::int64_t key;
  std::int64_t v;
  std::uint64_t u;
};

FlowSpec overflow_spec(int ranks) {
  FlowSpec spec;
  spec.name = "comb-overflow";
  spec.type = FlowType::combiner;
  for (int r = 0; r < ranks; ++r) spec.sources.push_back({r, 0});
  spec.targets = {{0, 0}};
  spec.schema = Schema({{"key", Type::int64}, {"v", Type::int64}, {"u", Type::uint64}});
  spec.key_column = "key";
  spec.type_options = CombinerOptions{
      .aggregates = parse_aggregates("sum(v),avg(v),min(v),max(v),sum(u),avg(u),count(*)")};
  return spec;
}

int overflow(cluster::Node& node) {
  const FlowSpec spec = overflow_spec(node.size());
  if (node.rank() == 0) create_flow(node, spec);
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  constexpr std::uint64_t kUMax = std::numeric_limits<std::uint64_t>::max();
  std::thread target_thread;
  std::vector<std::byte> results;
  std::size_t width = 0;
  if (node.rank() == 0) {
    target_thread = std::thread([&] {
      CombinerTarget target(node, spec.name);
      width = target.result_schema().tuple_bytes();
      say("result schema: " + target.result_schema().describe());
      TupleBatch batch;
      while (target.consume(batch) && !batch.empty())
        results.insert(results.end(), batch.data, batch.data + batch.count * width);
    });
  }
  {
    fabric::Worker worker(node.fabric(), "source");
    CombinerSource source(node, worker, spec.name, 0);
    // Key 1: every rank adds INT64_MAX; key 2: INT64_MIN; key 3: -1 and +1 (sum 0) and UINT64_MAX.
    if (Status s = source.push(Row{1, kMax, kUMax}); !s) fail(s.message());
    if (Status s = source.push(Row{2, kMin, 1}); !s) fail(s.message());
    if (Status s = source.flush(); !s) fail(s.message());  // partials cross the wire separately
    if (Status s = source.push(Row{3, -1, kUMax}); !s) fail(s.message());
    if (Status s = source.push(Row{3, 1, 2}); !s) fail(s.message());
    if (Status s = source.close(); !s) fail(s.message());
  }
  if (node.rank() == 0) {
    target_thread.join();
    const std::int64_t n = node.size();
    struct Out {
      std::int64_t key, sum_v;
      double avg_v;
      std::int64_t min_v, max_v;
      std::uint64_t sum_u;
      double avg_u;
      std::uint64_t count;
    };
    if (width != sizeof(Out)) return fail("unexpected result width"), 1;
    std::map<std::int64_t, Out> got;
    for (std::size_t i = 0; i < results.size() / width; ++i) {
      Out o;
      std::memcpy(&o, results.data() + i * width, width);
      got[o.key] = o;
    }
    auto wrap = [](std::int64_t a, std::int64_t times) {
      return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) *
                                       static_cast<std::uint64_t>(times));
    };
    const Out& a = got[1];
    const Out& b = got[2];
    const Out& c = got[3];
    std::printf(
        "overflow: sum(v) of %lld x INT64_MAX = %lld (wrapped), avg(v) = %.17g; sum(v) of %lld x "
        "INT64_MIN = %lld; "
        "sum(u) of %lld x UINT64_MAX = %llu, avg(u) = %.17g\n",
        static_cast<long long>(n), static_cast<long long>(a.sum_v), a.avg_v,
        static_cast<long long>(n), static_cast<long long>(b.sum_v), static_cast<long long>(n),
        static_cast<unsigned long long>(a.sum_u), a.avg_u);
    if (got.size() != 3) fail("expected 3 groups, got " + std::to_string(got.size()));
    if (a.sum_v != wrap(kMax, n) || b.sum_v != wrap(kMin, n))
      fail("sum(v) did not wrap modulo 2^64");
    if (a.avg_v != static_cast<double>(kMax) || b.avg_v != static_cast<double>(kMin))
      fail("avg(v) is not exact");
    if (a.min_v != kMax || a.max_v != kMax || b.min_v != kMin || b.max_v != kMin)
      fail("min/max of extremes");
    if (c.sum_v != 0 || c.min_v != -1 || c.max_v != 1 || c.avg_v != 0.0) fail("key 3: -1 and 1");
    if (a.sum_u != static_cast<std::uint64_t>(0) - static_cast<std::uint64_t>(n) ||
        a.avg_u != static_cast<double>(kUMax))
      fail("sum(u)/avg(u) of UINT64_MAX");
    if (c.sum_u != static_cast<std::uint64_t>(n))
      fail("key 3: sum(u) of UINT64_MAX + 2 wraps to 1 per rank");
    if (a.count != static_cast<std::uint64_t>(n) || c.count != 2 * static_cast<std::uint64_t>(n))
      fail("count");
    if (failures == 0)
      std::printf("overflow: wrapping sums, exact averages and extremes as documented\n");
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

// One source pushes in phases and flushes; the target's streaming read sees each phase.
int partial(cluster::Node& node) {
  FlowSpec spec;
  spec.name = "comb-partial";
  spec.type = FlowType::combiner;
  spec.sources = {{1, 0}};
  spec.targets = {{0, 0}};
  spec.schema = Schema({{"key", Type::int64}, {"v", Type::int64}, {"u", Type::uint64}});
  spec.key_column = "key";
  spec.type_options = CombinerOptions{.aggregates = parse_aggregates("sum(v),count(*)")};
  constexpr int kPhases = 4;
  constexpr std::int64_t kPerPhase = 1000;
  if (node.rank() == 0) {
    create_flow(node, spec);
    CombinerTarget target(node, spec.name);
    TupleBatch batch;
    for (int phase = 1; phase <= kPhases; ++phase) {
      (void)node.wait_for("partial/flushed/" + std::to_string(phase), std::chrono::seconds(20));
      std::uint64_t count = 0;
      for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
           std::chrono::steady_clock::now() < deadline;) {
        if (Status s = target.read_partial(batch); !s)
          return fail("read_partial: " + s.message()), 1;
        count = 0;
        for (std::size_t r = 0; r < batch.count; ++r) {
          std::uint64_t n;
          std::memcpy(&n, batch.tuple(r) + 16, 8);
          count += n;
        }
        if (count == static_cast<std::uint64_t>(phase * kPerPhase)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      say("partial: after phase " + std::to_string(phase) + " the streaming read counts " +
          std::to_string(count) + " tuples in " + std::to_string(batch.count) + " groups");
      if (count != static_cast<std::uint64_t>(phase * kPerPhase))
        fail("partial read missed flushed tuples");
      if (target.sources_closed() != (phase == kPhases)) {
        // the source closes only after the last phase was read
        if (phase != kPhases) fail("sources_closed() too early");
      }
      node.registry().publish("partial/read/" + std::to_string(phase), "yes");
    }
    std::uint64_t rows = 0;
    while (target.consume(batch) && !batch.empty()) rows += batch.count;
    if (rows != 10) fail("expected 10 groups, got " + std::to_string(rows));
    say("partial: final results have " + std::to_string(rows) + " groups");
  } else if (node.rank() == 1) {
    fabric::Worker worker(node.fabric(), "source");
    CombinerSourceOptions options;
    options.ship_tuples = 0;  // ship only when asked
    CombinerSource source(node, worker, spec.name, 0, options);
    for (int phase = 1; phase <= kPhases; ++phase) {
      for (std::int64_t i = 0; i < kPerPhase; ++i) (void)source.push(Row{i % 10, i, 0});
      if (Status s = source.flush(); !s) fail("flush: " + s.message());
      node.registry().publish("partial/flushed/" + std::to_string(phase), "yes");
      (void)node.wait_for("partial/read/" + std::to_string(phase), std::chrono::seconds(20));
    }
    if (Status s = source.close(); !s) fail("close: " + s.message());
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

// CombinerSourceOptions::before_first_write runs exactly once, on the pushing thread, before
// anything of the source reached a target, whatever its first write is: a full table shipped
// (to one target, or routed to two), flush(), close(), the close on destruction. Rank 0 owns
// the source and its targets (so the callback can look at the targets); the others only finish.
// Also CombinerTarget::streaming(): false while a target merged nothing, true once it merged
// flushed rows of a source still open.
int first_write(cluster::Node& node) {
  if (node.rank() != 0) {
    node.finish();
    return 0;
  }
  enum class First { full_table, flush, close, destructor };
  struct Case {
    const char* name;
    First first;
    int targets;
    double pass_through_below;
  };
  const Case cases[] = {{"full table", First::full_table, 1, 0},
                        {"full table routed to 2 targets", First::full_table, 2, 0},
                        {"full table starting a pass-through window", First::full_table, 1, 1.0},
                        {"flush", First::flush, 2, 0},
                        {"close", First::close, 1, 0},
                        {"close on destruction", First::destructor, 2, 0}};
  constexpr std::int64_t kGroups = 4;  // local_groups: the 4th distinct key fills the table
  fabric::Worker worker(node.fabric(), "source");
  int index = 0;
  for (const Case& c : cases) {
    FlowSpec spec = overflow_spec(1);
    spec.name = "comb-first-write-" + std::to_string(index++);
    spec.targets.clear();
    for (int t = 0; t < c.targets; ++t) spec.targets.push_back({0, t});
    spec.type_options = CombinerOptions{.aggregates = parse_aggregates("sum(v),count(*)")};
    create_flow(node, spec);
    std::vector<std::unique_ptr<CombinerTarget>> targets;
    for (int t = 0; t < c.targets; ++t) targets.push_back(std::make_unique<CombinerTarget>(node, spec.name, t));
    auto merged_rows = [&] {
      std::uint64_t rows = 0;
      for (auto& target : targets) {
        if (Status s = target->merge_arrived(); !s) fail(std::string(c.name) + ": merge_arrived: " + s.message());
        rows += target->counters().rows;
      }
      return rows;
    };
    int calls = 0;
    std::uint64_t rows_at_call = 0;
    std::uint64_t shipped_at_call = 0;
    const std::thread::id pusher = std::this_thread::get_id();
    std::optional<CombinerSource> source;
    const CombinerSource* self = nullptr;  // (source->: not while reset() destroys it)
    CombinerSourceOptions options;
    options.local_groups = kGroups;
    options.ship_tuples = 0;
    options.pass_through_below = c.pass_through_below;
    options.pass_through_tuples = 8;
    options.before_first_write = [&] {
      ++calls;
      if (std::this_thread::get_id() != pusher) fail(std::string(c.name) + ": called on another thread");
      shipped_at_call = self->counters().rows + self->counters().segments;
      rows_at_call = merged_rows();
      for (auto& target : targets) {
        if (target->streaming()) fail(std::string(c.name) + ": a target that merged nothing is streaming()");
      }
    };
    source.emplace(node, worker, spec.name, 0, options);
    self = &*source;
    auto push = [&](std::int64_t key) {
      if (Status s = source->push(Row{key, key, 0}); !s) fail(std::string(c.name) + ": push: " + s.message());
    };
    std::int64_t pushed = 0;
    for (; pushed < kGroups - 1; ++pushed) push(pushed);
    if (calls != 0) fail(std::string(c.name) + ": called before the source wrote anything");
    switch (c.first) {
      case First::full_table:
        push(pushed++);  // fills the table: it is shipped
        break;
      case First::flush:
        if (Status s = source->flush(); !s) fail(std::string(c.name) + ": flush: " + s.message());
        break;
      case First::close:
        if (Status s = source->close(); !s) fail(std::string(c.name) + ": close: " + s.message());
        break;
      case First::destructor:
        source.reset();
        break;
    }
    const bool first_was_the_end = c.first == First::close || c.first == First::destructor;
    if (calls != 1) fail(std::string(c.name) + ": called " + std::to_string(calls) + " times by the first write");
    if (shipped_at_call != 0 || rows_at_call != 0) fail(std::string(c.name) + ": called after the first write");
    if (!first_was_the_end) {
      for (int i = 0; i < 12; ++i) push(pushed++);  // more shipments (or a pass-through window)
      if (Status s = source->flush(); !s) fail(std::string(c.name) + ": flush: " + s.message());
      // The flushed rows are visible and their source is still open: whoever merged them sees a
      // stream (CombinerTarget::streaming, which ops::Aggregation's lazy targets wait for).
      merged_rows();
      std::size_t streaming = 0;
      for (auto& target : targets) {
        if (target->streaming()) ++streaming;
        else if (target->counters().rows > 0) fail(std::string(c.name) + ": rows of an open source merged, not streaming()");
      }
      if (streaming == 0) fail(std::string(c.name) + ": no target is streaming() after a flush of an open source");
      if (Status s = source->close(); !s) fail(std::string(c.name) + ": close: " + s.message());
      if (calls != 1) fail(std::string(c.name) + ": called again by a later write");
      if (c.pass_through_below > 0 && source->counters().passed == 0) fail(std::string(c.name) + ": nothing passed through");
    }
    // The targets see every tuple once: one group per key.
    std::uint64_t groups = 0;
    for (auto& target : targets) {
      TupleBatch batch;
      for (;;) {
        if (Status s = target->consume(batch); !s) {
          fail(std::string(c.name) + ": consume: " + s.message());
          break;
        }
        if (batch.empty()) break;
        groups += batch.count;
      }
    }
    if (groups != static_cast<std::uint64_t>(pushed))
      fail(std::string(c.name) + ": " + std::to_string(groups) + " groups for " + std::to_string(pushed) + " keys");
    say("first-write: " + std::string(c.name) + ": before_first_write ran once, before the first write");
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

template <class F>
void expect_error(const std::string& what, Errc code, const std::string& part, F&& f) {
  try {
    Status s = f();
    if (s.is_ok()) return fail(what + ": no error");
    if (s.code() != code || s.message().find(part) == std::string::npos) {
      return fail(what + ": got " + std::string(errc_name(s.code())) + ": " + s.message());
    }
    say("error ok: " + what + " -> " + s.message());
  } catch (const Error& e) {
    if (e.code() != code || std::string(e.what()).find(part) == std::string::npos) {
      return fail(what + ": got " + std::string(errc_name(e.code())) + ": " + e.what());
    }
    say("error ok: " + what + " -> " + e.what());
  }
}

int errors(cluster::Node& node) {
  FlowSpec good = overflow_spec(1);
  good.name = "comb-good";
  good.sources = {{0, 0}};
  good.targets = {{1, 0}};
  if (node.rank() == 1) {
    CombinerTarget target(node, good.name);
    TupleBatch batch;
    while (target.consume(batch) && !batch.empty()) {
    }
    node.finish();
    return failures == 0 ? 0 : 1;
  }
  create_flow(node, good);
  FlowSpec replicate = good;
  replicate.name = "comb-a-replicate";
  replicate.type = FlowType::replicate;
  replicate.type_options.reset();
  create_flow(node, replicate);
  auto bad_spec = [&](const std::string& name, auto change) {
    FlowSpec spec = good;
    spec.name = name;
    change(spec);
    create_flow(node, spec);
    return Status();
  };
  expect_error("no aggregates", Errc::invalid_argument, "needs at least one aggregate",
               [&] { return bad_spec("c1", [](FlowSpec& s) { s.type_options = CombinerOptions{}; }); });
  expect_error("unknown column", Errc::invalid_argument, "has no column 'price'", [&] {
    return bad_spec("c2", [](FlowSpec& s) {
      s.type_options = CombinerOptions{.aggregates = parse_aggregates("sum(price)")};
    });
  });
  expect_error("non-numeric column", Errc::invalid_argument, "is not numeric", [&] {
    return bad_spec("c3", [](FlowSpec& s) {
      s.schema = Schema({{"key", Type::int64}, {"name", Type::chars, 8}});
      s.type_options = CombinerOptions{.aggregates = parse_aggregates("max(name)")};
    });
  });
  expect_error("no target", Errc::invalid_argument, "needs at least one target", [&] {
    return bad_spec("c4", [](FlowSpec& s) { s.targets.clear(); });
  });
  expect_error("latency mode", Errc::invalid_argument, "runs in bandwidth mode",
               [&] { return bad_spec("c5", [](FlowSpec& s) { s.options.mode = Mode::latency; }); });
  expect_error("duplicate aggregate", Errc::invalid_argument, "sum(v) is listed twice", [&] {
    return bad_spec("c6", [](FlowSpec& s) {
      s.type_options = CombinerOptions{.aggregates = parse_aggregates("sum(v),sum(v)")};
    });
  });
  expect_error("no key column", Errc::invalid_argument, "needs a key column",
               [&] { return bad_spec("c7", [](FlowSpec& s) { s.key_column.clear(); }); });
  expect_error("result names clash", Errc::invalid_argument, "result columns clash", [&] {
    return bad_spec("c8", [](FlowSpec& s) {
      s.schema = Schema({{"count", Type::int64}, {"v", Type::int64}});
      s.key_column = "count";
      s.type_options = CombinerOptions{.aggregates = parse_aggregates("count(*)")};
    });
  });
  expect_error("unknown aggregate function", Errc::invalid_argument, "unknown function 'median'",
               [&] {
                 parse_aggregates("median(v)");
                 return Status();
               });
  expect_error("sum without a column", Errc::invalid_argument, "sum(*) needs a value column", [&] {
    return bad_spec("c9", [](FlowSpec& s) {
      s.type_options = CombinerOptions{.aggregates = parse_aggregates("sum(*)")};
    });
  });
  expect_error("wrong flow type", Errc::invalid_argument,
               "is a replicate flow, not a combiner flow", [&] {
                 CombinerTarget t(node, "comb-a-replicate");
                 return Status();
               });
  expect_error("unknown flow", Errc::not_found, "'nope' does not exist", [&] {
    CombinerTarget t(node, "nope");
    return Status();
  });
  expect_error("source not in the flow", Errc::invalid_argument, "has no source (rank 0, thread 4)",
               [&] {
                 fabric::Worker w(node.fabric(), "w");
                 CombinerSource s(node, w, good.name, 4);
                 return Status();
               });
  fabric::Worker worker(node.fabric(), "errors");
  CombinerSource source(node, worker, good.name, 0);
  std::uint64_t two[2] = {1, 2};
  expect_error("wrong tuple width", Errc::invalid_argument,
               "tuple of 16 B does not match the schema's 24 B",
               [&] { return source.push(two, sizeof two); });
  if (Status s = source.push(Row{1, 1, 1}); !s) fail("good push: " + s.message());
  if (Status s = source.close(); !s) fail("close: " + s.message());
  expect_error("push after close", Errc::flow_failed, "after close", [&] {
    return source.push(Row{2, 2, 2});
  });
  node.finish();
  return failures == 0 ? 0 : 1;
}

int kill_source(cluster::Node& node) {
  FlowSpec spec = overflow_spec(node.size());
  spec.name = "comb-victim";
  spec.sources = {{1, 0}, {2, 0}};
  if (node.rank() == 0) create_flow(node, spec);
  if (node.rank() != 0) {
    fabric::Worker worker(node.fabric(), "pusher");
    CombinerSourceOptions options;
    options.local_groups = 16;
    CombinerSource source(node, worker, spec.name, 0, options);
    for (std::int64_t i = 0;; ++i) {
      if (node.rank() == 1 && i == 5000) {
        // Nothing in flight when it dies: see die_quietly in replicate_node.cpp (a UCX 1.13 abort).
        (void)source.flush();
        for (int k = 0; k < 50; ++k) {
          worker.progress();
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ::raise(SIGKILL);
      }
      if (!source.push(Row{i, i, 0})) break;
      if (node.rank() == 2 && i == 5000) {
        (void)source.close();
        return 0;
      }
    }
    return 0;
  }
  CombinerTarget target(node, spec.name);
  TupleBatch batch;
  Status s = target.consume(batch, std::chrono::seconds(20));
  if (s.is_ok()) return fail("consume handed out results although a source died"), 1;
  say("target saw: " + s.message());
  if (s.code() != Errc::peer_failed || s.message().find("rank 1") == std::string::npos)
    fail("wrong error");
  std::_Exit(failures == 0 ? 0 : 1);
}

// ---------------------------------------------------------------------------------------------

struct Pair {
  std::int64_t key, value;
};

// Every rank runs one source; rank 0 also the target. Same data through a combiner flow (SUM) and
// through a shuffle flow whose target aggregates the raw tuples itself.
int bench(cluster::Node& node, std::uint64_t tuples, std::uint64_t groups, int repeat) {
  const Schema schema({{"key", Type::int64}, {"value", Type::int64}});
  std::vector<Pair> data(1 << 16);
  std::mt19937_64 rng(static_cast<std::uint64_t>(node.rank()) + 1);
  for (Pair& p : data)
    p = {static_cast<std::int64_t>(rng() % groups), static_cast<std::int64_t>(rng() % 2001) - 1000};
  for (int round = 0; round < repeat; ++round) {
    for (const bool combiner : {true, false}) {
      FlowSpec spec;
      spec.name = std::string(combiner ? "bench-comb-" : "bench-shuf-") + std::to_string(round);
      spec.type = combiner ? FlowType::combiner : FlowType::shuffle;
      for (int r = 0; r < node.size(); ++r) spec.sources.push_back({r, 0});
      spec.targets = {{0, 0}};
      spec.schema = schema;
      spec.key_column = "key";
      if (combiner) spec.type_options = CombinerOptions{.aggregates = parse_aggregates("sum(value)")};
      if (node.rank() == 0) create_flow(node, spec);
      std::thread target_thread;
      std::atomic<bool> started{node.rank() != 0};
      double seconds = 0;
      std::uint64_t result_groups = 0;
      std::int64_t checksum = 0;
      if (node.rank() == 0) {
        target_thread = std::thread([&, combiner] {
          try {
            if (combiner) {
              CombinerTarget target(node, spec.name);
              node.barrier("bench/" + spec.name);
              started = true;
              const auto start = std::chrono::steady_clock::now();
              TupleBatch batch;
              while (target.consume(batch) && !batch.empty()) {
                for (const Pair& p : batch.as<Pair>()) checksum += p.value;
                result_groups += batch.count;
              }
              seconds =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            } else {
              ShuffleTarget target(node, spec.name, 0);
              node.barrier("bench/" + spec.name);
              started = true;
              const auto start = std::chrono::steady_clock::now();
              std::unordered_map<std::int64_t, std::int64_t> sums;
              TupleBatch batch;
              while (target.consume(batch) && !batch.empty()) {
                for (const Pair& p : batch.as<Pair>()) sums[p.key] += p.value;
              }
              for (const auto& [k, v] : sums) checksum += v;
              result_groups = sums.size();
              seconds =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            }
          } catch (const std::exception& e) {
            fail(e.what());
          }
        });
      }
      {
        fabric::Worker worker(node.fabric(), "bench source");
        std::unique_ptr<CombinerSource> comb;
        std::unique_ptr<ShuffleSource> shuf;
        if (combiner)
          comb = std::make_unique<CombinerSource>(node, worker, spec.name, 0);
        else
          shuf = std::make_unique<ShuffleSource>(node, worker, spec.name, 0);
        if (node.rank() != 0) node.barrier("bench/" + spec.name);
        while (!started) std::this_thread::sleep_for(std::chrono::microseconds(50));
        for (std::uint64_t sent = 0; sent < tuples; sent += data.size()) {
          const std::size_t n =
              static_cast<std::size_t>(std::min<std::uint64_t>(data.size(), tuples - sent));
          Status s = combiner ? comb->push_bulk(data.data(), n) : shuf->push_bulk(data.data(), n);
          if (!s) return fail("push: " + s.message()), 1;
        }
        Status s = combiner ? comb->close() : shuf->close();
        if (!s) return fail("close: " + s.message()), 1;
      }
      if (node.rank() == 0) {
        target_thread.join();
        const double total = static_cast<double>(tuples) * node.size();
        std::printf(
            "bench %s: %d sources x %llu tuples (16 B, %llu keys) -> 1 target in %.3f s: %.1f M "
            "tuples/s (%llu groups, checksum %lld)\n",
            combiner ? "combiner SUM      " : "shuffle+target SUM", node.size(),
            static_cast<unsigned long long>(tuples), static_cast<unsigned long long>(groups),
            seconds, total / seconds / 1e6, static_cast<unsigned long long>(result_groups),
            static_cast<long long>(checksum));
        std::fflush(stdout);
      }
      node.barrier("bench/done/" + spec.name);
    }
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: combiner_node property SEED COUNT | overflow | partial | first-write | errors | "
                 "kill-source | bench TUPLES GROUPS [REPEAT]\n");
    return 2;
  }
  try {
    cluster::Node node;
    const std::string scenario = argv[1];
    if (scenario == "property" && argc == 4)
      return property(node, std::stoull(argv[2]), std::stoi(argv[3]));
    if (scenario == "overflow") return overflow(node);
    if (scenario == "partial") return partial(node);
    if (scenario == "first-write") return first_write(node);
    if (scenario == "errors") return errors(node);
    if (scenario == "kill-source") return kill_source(node);
    if (scenario == "bench" && argc >= 4)
      return bench(node, std::stoull(argv[2]), std::stoull(argv[3]),
                   argc > 4 ? std::stoi(argv[4]) : 1);
    fail("unknown scenario " + scenario);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  return 1;
}
