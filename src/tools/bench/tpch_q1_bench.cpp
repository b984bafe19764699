// Scenario tpch-q1 (000 Fig 16): TPC-H Q1 over lineitem streamed by 2 producer ranks through a
// driven load-balancing flow to 3 consumers whose per-tuple cost differs 1:2:3, against static
// partitioning of the same tuples (each consumer a fixed third, through a driven shuffle flow
// with explicit targets), in the same cluster run.
//
// Data (not timed, cached under <build>/bench/tpch/sf<SF>/): lineitem.tbl from tpchgen-cli (the
// build's venv, python/requirements-dev.txt), converted once into lineitem-q1.bin, one 40-byte
// tuple per row with Q1's columns in exact integers: l_quantity, l_extendedprice, l_discount and
// l_tax in hundredths, l_shipdate as days since 1970-01-01, l_returnflag, l_linestatus. The
// reference is DuckDB's Q1 over the same lineitem.tbl (bench/tpch/q1_duckdb.py), run every time.
//
// Ranks: 0 and 1 produce (each pushes its half of the rows, loaded before the start), 2 runs the
// three consumer threads, 3 the mover (driven_mover_rank.hpp). Each consumer evaluates Q1 on its
// tuples (filter l_shipdate <= 1998-09-02, derive disc_price and charge, kernels::AggregateTable
// grouped by (returnflag, linestatus)); at the end rank 2 merges the three partial tables and
// finalizes them: the driver checks the result against DuckDB's, group by group, exactly.
//
// The per-tuple cost: consumer c (factor k = 1, 2, 3) spends k * base_ns per tuple in all. It
// does the real Q1 work once per tuple, then waits out the rest of the batch's k * base_ns *
// count (cost_mode sleep: sleep_until; spin: a busy loop on the clock), as an accelerator of
// that speed would; a wake-up that came late is made up in the next batch while the consumer has
// work queued. Sleep is the default: two producers, three consumers and the mover on 2 vCPUs
// would otherwise measure who gets the CPU, not the flow.
//
// Runtime: from the start (all ranks released together) to the last consumer's end-of-stream,
// on rank 2's clock. Ideal: total tuples / total speed, the speeds from each consumer's measured
// per-tuple cost in the balanced run (its time not spent waiting for data over its tuples: the
// consumer's speed while it has work, which the ideal assumes it always has). The static run's
// measured costs are higher: its fast consumers wait for data before nearly every batch (the
// producers go at the slowest consumer's pace), so every batch pays a wake-up that nothing makes
// up; they are reported, not used. A second ideal at the set costs (rows / sum of 1 / (k *
// base_ns)) needs no measurement at all. Targets: balanced <= 0.7x static, <= 1.1x both ideals.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/consumer.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/kernels/aggregate_table.hpp"
#include "dfi/launch/child_process.hpp"
#include "driven_mover_rank.hpp"
#include "paths.hpp"
#include "process.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr const char* kName = "tpch-q1";
constexpr int kProducers = 2;  // ranks 0 and 1
constexpr int kConsumers = 3;  // threads of rank 2
constexpr int kConsumerRank = 2;
constexpr int kRanks = 4;      // rank 3: the mover
constexpr std::array<int, kConsumers> kFactors = {1, 2, 3};
constexpr double kStaticTarget = 0.7;
constexpr double kIdealTarget = 1.1;
// How much lateness of the emulated cost a consumer with work queued makes up (see above).
constexpr auto kCatchUp = std::chrono::milliseconds(2);

// One lineitem row as the producers stream it: Q1's columns (the flow's schema, C layout).
struct Lineitem {
  std::int64_t quantity;       // hundredths
  std::int64_t extendedprice;  // hundredths (cents)
  std::int64_t discount;       // hundredths
  std::int64_t tax;            // hundredths
  std::int32_t shipdate;       // days since 1970-01-01
  char returnflag;
  char linestatus;
};
static_assert(sizeof(Lineitem) == 40);

flow::Schema lineitem_schema() {
  return flow::Schema({{"l_quantity", flow::Type::int64, 1},
                       {"l_extendedprice", flow::Type::int64, 1},
                       {"l_discount", flow::Type::int64, 1},
                       {"l_tax", flow::Type::int64, 1},
                       {"l_shipdate", flow::Type::int32, 1},
                       {"l_returnflag", flow::Type::chars, 1},
                       {"l_linestatus", flow::Type::chars, 1}});
}

// What a consumer aggregates per qualifying tuple: the group key and Q1's inputs, derived.
struct Q1Row {
  char key[8];                 // returnflag, linestatus, zero padding
  std::int64_t quantity;       // 1e-2
  std::int64_t price;          // 1e-2
  std::int64_t disc_price;     // price * (1 - discount): 1e-4
  std::int64_t charge;         // price * (1 - discount) * (1 + tax): 1e-6
  std::int64_t discount;       // 1e-2
};
static_assert(sizeof(Q1Row) == 48);

// Q1's result tuple (AggregateTable::finalize).
struct Q1Result {
  char key[8];
  std::int64_t sum_qty, sum_base_price, sum_disc_price, sum_charge;
  double avg_qty, avg_price, avg_disc;  // in the units of the rows (hundredths)
  std::uint64_t count;
};
static_assert(sizeof(Q1Result) == 72);

kernels::AggregateTable::Layout q1_layout() {
  using kernels::Aggregate;
  using kernels::ValueType;
  kernels::AggregateTable::Layout l;
  l.tuple_bytes = sizeof(Q1Row);
  l.key_offset = 0;
  l.key_bytes = 2;
  l.aggregates = {{Aggregate::sum, ValueType::int64, offsetof(Q1Row, quantity), offsetof(Q1Result, sum_qty)},
                  {Aggregate::sum, ValueType::int64, offsetof(Q1Row, price), offsetof(Q1Result, sum_base_price)},
                  {Aggregate::sum, ValueType::int64, offsetof(Q1Row, disc_price), offsetof(Q1Result, sum_disc_price)},
                  {Aggregate::sum, ValueType::int64, offsetof(Q1Row, charge), offsetof(Q1Result, sum_charge)},
                  {Aggregate::avg, ValueType::int64, offsetof(Q1Row, quantity), offsetof(Q1Result, avg_qty)},
                  {Aggregate::avg, ValueType::int64, offsetof(Q1Row, price), offsetof(Q1Result, avg_price)},
                  {Aggregate::avg, ValueType::int64, offsetof(Q1Row, discount), offsetof(Q1Result, avg_disc)},
                  {Aggregate::count, ValueType::int64, 0, offsetof(Q1Result, count)}};
  l.result_bytes = sizeof(Q1Result);
  return l;
}

// Days from 1970-01-01 to the civil date y-m-d (proleptic Gregorian; H. Hinnant's algorithm).
std::int32_t days_from_civil(int y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int>(doe) - 719468;
}

// DATE '1998-12-01' - INTERVAL 90 DAY.
const std::int32_t kShipdateCutoff = days_from_civil(1998, 12, 1) - 90;

// Evaluates Q1 over `count` lineitem tuples at `data`: the qualifying ones, derived, into `rows`
// (room for `count`), then into `table`.
void q1_add(const std::byte* data, std::size_t count, Q1Row* rows, kernels::AggregateTable& table) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < count; ++i, data += sizeof(Lineitem)) {
    Lineitem t;
    std::memcpy(&t, data, sizeof t);
    if (t.shipdate > kShipdateCutoff) continue;
    Q1Row& r = rows[n++];
    std::memset(r.key, 0, sizeof r.key);
    r.key[0] = t.returnflag;
    r.key[1] = t.linestatus;
    r.quantity = t.quantity;
    r.price = t.extendedprice;
    r.disc_price = t.extendedprice * (100 - t.discount);
    r.charge = r.disc_price * (100 + t.tax);
    r.discount = t.discount;
  }
  table.add(reinterpret_cast<const std::byte*>(rows), n);
}

// ---------------------------------------------------------------------------------------------
// Data: tpchgen-cli's lineitem.tbl, its Q1 tuples, DuckDB's Q1.

std::string tpchgen_binary() {
  const std::string venv = python_venv();
  return venv.empty() ? std::string() : venv + "/bin/tpchgen-cli";
}
std::string venv_python() {
  const std::string venv = python_venv();
  return venv.empty() ? std::string() : venv + "/bin/python";
}
std::string duckdb_script() { return bench_source_dir() + "/tpch/q1_duckdb.py"; }

// "0.1", "1": the scale factor as tpchgen-cli and the cache folder name it.
std::string sf_text(double sf) {
  std::ostringstream s;
  s << sf;
  return s.str();
}

// Parses a decimal with at most two fraction digits ("17", "24386.67", "0.1") into hundredths.
bool parse_hundredths(std::string_view text, std::int64_t& out) {
  std::int64_t whole = 0, frac = 0;
  std::size_t i = 0;
  bool negative = !text.empty() && text[0] == '-';
  if (negative) ++i;
  if (i == text.size()) return false;
  for (; i < text.size() && text[i] != '.'; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    whole = whole * 10 + (text[i] - '0');
  }
  int digits = 0;
  if (i < text.size()) {
    for (++i; i < text.size(); ++i, ++digits) {
      if (digits == 2 || text[i] < '0' || text[i] > '9') return false;
      frac = frac * 10 + (text[i] - '0');
    }
  }
  for (; digits < 2; ++digits) frac *= 10;
  out = (whole * 100 + frac) * (negative ? -1 : 1);
  return true;
}

bool parse_date(std::string_view text, std::int32_t& out) {
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') return false;
  auto num = [&](std::size_t at, std::size_t n, int& v) {
    v = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      v = v * 10 + (text[i] - '0');
    }
    return true;
  };
  int y = 0, m = 0, d = 0;
  if (!num(0, 4, y) || !num(5, 2, m) || !num(8, 2, d) || m < 1 || m > 12 || d < 1 || d > 31) return false;
  out = days_from_civil(y, static_cast<unsigned>(m), static_cast<unsigned>(d));
  return true;
}

// Converts lineitem.tbl into Q1 tuples at `bin`; returns the rows. Throws dfi::Error(io) naming
// the file and line for a row that is not lineitem.
std::uint64_t convert_tbl(const fs::path& tbl, const fs::path& bin) {
  std::ifstream in(tbl);
  if (!in) throw Error(Errc::io, "bench tpch-q1: cannot read " + tbl.string());
  std::ofstream out(bin, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(Errc::io, "bench tpch-q1: cannot write " + bin.string());
  std::string line;
  std::uint64_t rows = 0;
  std::vector<std::string_view> fields;
  while (std::getline(in, line)) {
    fields.clear();
    std::string_view rest(line);
    for (std::size_t bar; (bar = rest.find('|')) != std::string_view::npos;) {
      fields.push_back(rest.substr(0, bar));
      rest.remove_prefix(bar + 1);
    }
    Lineitem t{};
    const bool ok = fields.size() >= 11 && parse_hundredths(fields[4], t.quantity) &&
                    parse_hundredths(fields[5], t.extendedprice) && parse_hundredths(fields[6], t.discount) &&
                    parse_hundredths(fields[7], t.tax) && fields[8].size() == 1 && fields[9].size() == 1 &&
                    parse_date(fields[10], t.shipdate);
    if (!ok) {
      throw Error(Errc::io, "bench tpch-q1: " + tbl.string() + " line " + std::to_string(rows + 1) +
                                " is not a lineitem row: " + line.substr(0, 120));
    }
    t.returnflag = fields[8][0];
    t.linestatus = fields[9][0];
    out.write(reinterpret_cast<const char*>(&t), sizeof t);
    ++rows;
  }
  out.close();
  if (!out) throw Error(Errc::io, "bench tpch-q1: writing " + bin.string() + " failed");
  return rows;
}

// A file of `dir` made by `make(tmp)` into a temporary name first and renamed into place, so
// runs that share the cache (two tests at once) never read half a file.
void make_once(const fs::path& file, const std::function<void(const fs::path&)>& make) {
  if (fs::exists(file)) return;
  fs::path tmp = file;
  tmp += ".tmp-" + std::to_string(::getpid());
  make(tmp);
  fs::rename(tmp, file);
}

struct Data {
  fs::path tbl, bin;
  std::uint64_t rows = 0;
  json reference;  // q1_duckdb.py's output
};

Data prepare_data(const RunContext& context, double sf, std::chrono::seconds timeout) {
  const fs::path dir = fs::path(bench_build_dir()) / "tpch" / ("sf" + sf_text(sf));
  fs::create_directories(dir);
  Data d{dir / "lineitem.tbl", dir / "lineitem-q1.bin", 0, {}};
  make_once(d.tbl, [&](const fs::path& tmp) {
    // tpchgen-cli names its file itself: generate into a folder of our own, then move it.
    const fs::path gen = tmp.string() + ".d";
    fs::create_directories(gen);
    context.say("generating lineitem at scale factor " + sf_text(sf) + " with tpchgen-cli into " + dir.string() +
                " (cached; not timed)");
    const std::vector<std::string> argv = {tpchgen_binary(), "tbl", "-s", sf_text(sf), "--tables", "lineitem",
                                           "-o", gen.string()};
    const launch::ChildResult r = launch::run_child({argv, {}}, timeout);
    if (r.exit_code != 0 || !fs::exists(gen / "lineitem.tbl")) {
      throw Error(Errc::io, "bench tpch-q1: `" + shell_join(argv) + "` failed (exit " + std::to_string(r.exit_code) +
                                (r.timed_out ? ", timed out" : "") + "): " + tail_lines(r.output, 5));
    }
    fs::rename(gen / "lineitem.tbl", tmp);
    fs::remove_all(gen);
  });
  make_once(d.bin, [&](const fs::path& tmp) {
    context.say("converting " + d.tbl.string() + " into Q1 tuples (cached; not timed)");
    convert_tbl(d.tbl, tmp);
  });
  d.rows = fs::file_size(d.bin) / sizeof(Lineitem);
  context.say("DuckDB's Q1 over " + d.tbl.string() + " (the reference; not timed)");
  const std::vector<std::string> argv = {venv_python(), duckdb_script(), d.tbl.string()};
  const launch::ChildResult r = launch::run_child({argv, {}}, timeout);
  const std::string last = tail_lines(r.output, 1);
  if (r.exit_code == 0) d.reference = json::parse(last, nullptr, false);
  if (r.exit_code != 0 || d.reference.is_discarded() || !d.reference.contains("groups")) {
    throw Error(Errc::io, "bench tpch-q1: `" + shell_join(argv) + "` failed (exit " + std::to_string(r.exit_code) +
                              "): " + tail_lines(r.output, 5));
  }
  if (d.reference.at("rows").get<std::uint64_t>() != d.rows) {
    throw Error(Errc::protocol, "bench tpch-q1: DuckDB reads " + d.reference.at("rows").dump() + " rows from " +
                                    d.tbl.string() + " but " + d.bin.string() + " has " + std::to_string(d.rows) +
                                    " (remove the cache folder " + dir.string() + ")");
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// Rank program

// One flow of a cluster run: its name and whether it partitions statically (a shuffle flow,
// producer tuple g to consumer g mod 3) or balances (a balance flow).
struct Run {
  std::string flow;
  bool balanced = false;
};

void create_q1_flow(cluster::Node& node, const json& params, const Run& run, std::chrono::milliseconds timeout) {
  flow::FlowSpec spec;
  spec.name = run.flow;
  spec.type = driven::kDriven;
  for (int p = 0; p < kProducers; ++p) spec.sources.push_back({p, 0});
  for (int c = 0; c < kConsumers; ++c) spec.targets.push_back({kConsumerRank, c});
  spec.schema = lineitem_schema();
  spec.options.segments = params.at("segments").get<std::uint32_t>();
  spec.options.segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
  spec.options.stall_timeout = timeout;
  if (!run.balanced) spec.routing = flow::Routing::explicit_target;
  spec.type_options = driven::DrivenOptions{.pattern = run.balanced ? driven::Pattern::balance : driven::Pattern::shuffle};
  flow::create_flow(node, spec);
}

// Producer rank p: rows [p * rows / 2, (p + 1) * rows / 2) of the tuple file, loaded before the start.
std::vector<Lineitem> load_half(const json& params, int p) {
  const std::uint64_t rows = params.at("rows");
  const std::uint64_t first = rows * static_cast<std::uint64_t>(p) / kProducers;
  const std::uint64_t last = rows * static_cast<std::uint64_t>(p + 1) / kProducers;
  std::vector<Lineitem> tuples(last - first);
  const std::string path = params.at("data");
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(first * sizeof(Lineitem)));
  in.read(reinterpret_cast<char*>(tuples.data()), static_cast<std::streamsize>(tuples.size() * sizeof(Lineitem)));
  if (!in) throw Error(Errc::io, std::string("bench ") + kName + ": cannot read rows " + std::to_string(first) + ".." +
                                     std::to_string(last) + " of " + path);
  return tuples;
}

json run_producer(cluster::Node& node, const Run& run, const std::vector<Lineitem>& tuples, std::uint64_t first,
                  const std::string& start) {
  double seconds = 0;
  RankThreads threads(std::string("bench ") + kName + ": rank " + std::to_string(node.rank()));
  threads.start("producer", [&](RankThreads::Gate& gate) {
    driven::Producer out(node, run.flow, 0);
    gate.ready_and_wait();
    const Clock::time_point begin = Clock::now();
    std::uint64_t g = first;  // the row's number in the whole table: static partitioning by it
    for (const Lineitem& t : tuples) {
      Status s = run.balanced ? out.push(&t, sizeof t) : out.push_to(g % kConsumers, &t, sizeof t);
      if (!s) [[unlikely]] throw Error(s.code(), s.message());
      ++g;
    }
    if (Status s = out.close(); !s) throw Error(s.code(), s.message());
    seconds = seconds_between(begin, Clock::now());
  });
  threads.release([&] { node.barrier(start); });
  threads.join();
  return {{"pushed", tuples.size()}, {"seconds", seconds}};
}

// Rank 2: the three consumers, each evaluating Q1 at its emulated per-tuple cost; their partial
// tables merged at the end.
json run_consumers(cluster::Node& node, const json& params, const Run& run, const std::string& start) {
  const double base_ns = params.at("base_ns");
  const bool spin = params.at("cost_mode") == "spin";
  const double bin_seconds = params.at("bin_seconds");
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  const std::size_t max_batch = params.at("segment_bytes").get<std::size_t>() / sizeof(Lineitem) + 1;
  const auto bins = static_cast<std::size_t>(std::ceil(std::chrono::duration<double>(timeout).count() / bin_seconds)) + 2;
  const kernels::AggregateTable::Layout layout = q1_layout();

  std::vector<std::unique_ptr<kernels::AggregateTable>> tables;
  std::vector<std::vector<std::uint64_t>> timeline(kConsumers, std::vector<std::uint64_t>(bins, 0));
  std::vector<std::uint64_t> tuples(kConsumers, 0);
  std::vector<double> waited(kConsumers, 0);
  std::vector<Clock::time_point> begins(kConsumers), ends(kConsumers);
  for (int c = 0; c < kConsumers; ++c) tables.push_back(std::make_unique<kernels::AggregateTable>(layout));
  RankThreads threads(std::string("bench ") + kName + ": rank 2");
  for (int c = 0; c < kConsumers; ++c) {
    threads.start("consumer " + std::to_string(c), [&, c](RankThreads::Gate& gate) {
      driven::Consumer in(node, run.flow, c);
      std::vector<Q1Row> rows(max_batch);
      kernels::AggregateTable& table = *tables[c];
      std::vector<std::uint64_t>& bin = timeline[c];
      const auto per_tuple = std::chrono::duration<double, std::nano>(base_ns * kFactors[c]);
      gate.ready_and_wait();
      const Clock::time_point begin = Clock::now();
      Clock::time_point ready = begin;  // when this consumer is done with what it got
      Clock::duration wait{0};
      std::uint64_t n = 0;
      flow::TupleBatch batch;
      for (;;) {
        Status s = in.try_consume(batch);
        bool idle = false;
        if (s.code() == Errc::retry) {
          const Clock::time_point w = Clock::now();
          s = in.consume(batch, timeout);
          wait += Clock::now() - w;
          idle = true;
        }
        if (!s) throw Error(s.code(), s.message());
        if (batch.empty()) break;
        const Clock::time_point got = Clock::now();
        if (batch.count > max_batch) [[unlikely]] throw Error(Errc::protocol, "a batch larger than a segment");
        q1_add(batch.data, batch.count, rows.data(), table);
        n += batch.count;
        // The emulated cost: this batch occupies the consumer for count * factor * base_ns in all
        // (the real work included); lateness is made up while work was queued (not idle).
        const Clock::time_point from = idle ? got : std::max(ready, got - kCatchUp);
        ready = from + std::chrono::duration_cast<Clock::duration>(per_tuple * static_cast<double>(batch.count));
        if (spin) {
          while (Clock::now() < ready) {
          }
        } else {
          std::this_thread::sleep_until(ready);
        }
        const std::size_t b = static_cast<std::size_t>(seconds_between(begin, Clock::now()) / bin_seconds);
        bin[std::min(b, bins - 1)] = n;
      }
      ends[c] = Clock::now();
      begins[c] = begin;
      tuples[c] = n;
      waited[c] = std::chrono::duration<double>(wait).count();
    });
  }
  threads.release([&] { node.barrier(start); });
  threads.join();
  const Clock::time_point origin = *std::min_element(begins.begin(), begins.end());  // the start
  std::vector<double> begun(kConsumers), finished(kConsumers);
  for (int c = 0; c < kConsumers; ++c) {
    begun[c] = seconds_between(origin, begins[c]);
    finished[c] = seconds_between(origin, ends[c]);
  }

  // Merge the partial results, finalize.
  kernels::AggregateTable total(layout);
  for (const auto& t : tables) total.merge(t->rows(), t->size());
  std::vector<Q1Result> results(total.size());
  total.finalize(reinterpret_cast<std::byte*>(results.data()));
  json groups = json::array();
  for (const Q1Result& r : results) {
    groups.push_back({{"returnflag", std::string(1, r.key[0])},
                      {"linestatus", std::string(1, r.key[1])},
                      {"sum_qty", r.sum_qty},
                      {"sum_base_price", r.sum_base_price},
                      {"sum_disc_price", r.sum_disc_price},
                      {"sum_charge", r.sum_charge},
                      {"avg_qty", r.avg_qty / 100},
                      {"avg_price", r.avg_price / 100},
                      {"avg_disc", r.avg_disc / 100},
                      {"count", r.count}});
  }
  // Each consumer's cumulative tuples per bin, up to its end.
  json consumers = json::array();
  for (int c = 0; c < kConsumers; ++c) {
    const std::size_t last = std::min(bins - 1, static_cast<std::size_t>(finished[c] / bin_seconds));
    std::vector<std::uint64_t> cumulative(timeline[c].begin(), timeline[c].begin() + static_cast<std::ptrdiff_t>(last) + 1);
    for (std::size_t b = 1; b < cumulative.size(); ++b) cumulative[b] = std::max(cumulative[b], cumulative[b - 1]);
    cumulative.back() = tuples[c];
    consumers.push_back({{"tuples", tuples[c]},
                         {"waited", waited[c]},
                         {"begun", begun[c]},
                         {"finished", finished[c]},
                         {"timeline", cumulative}});
  }
  return {{"consumers", consumers}, {"groups", groups}};
}

int run_rank_program(const json& params, std::ostream& out) {
  cluster::Node node;
  if (node.size() != kRanks) {
    throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": needs 4 ranks, got " + std::to_string(node.size()));
  }
  const int me = node.rank();
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  std::vector<Lineitem> tuples;
  std::uint64_t first = 0;
  if (me < kProducers) {
    tuples = load_half(params, me);
    first = params.at("rows").get<std::uint64_t>() * static_cast<std::uint64_t>(me) / kProducers;
  }
  json reports = json::array();
  std::size_t index = 0;
  for (const json& j : params.at("runs")) {
    const Run run{j.at("flow"), j.at("balanced")};
    const std::string start = std::string("bench/") + kName + "/" + std::to_string(index) + "/start";
    if (me == 0) create_q1_flow(node, params, run, timeout);
    json report;
    if (me < kProducers) {
      report = run_producer(node, run, tuples, first, start);
    } else if (me == kConsumerRank) {
      report = run_consumers(node, params, run, start);
    } else {
      report = run_mover_point(node, run.flow, start, timeout, 0);
    }
    reports.push_back(report);
    node.barrier(std::string("bench/") + kName + "/" + std::to_string(index) + "/done");
    ++index;
  }
  report_rank_result(out, {{"rank", me}, {"runs", reports}});
  node.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

// "c1" .. "c3" (appended: GCC 12's -Wrestrict misfires on "c" + std::to_string).
std::string consumer_id(int c) {
  std::string id = "c";
  id += std::to_string(c + 1);
  return id;
}
std::string series_id(bool balanced, int c) {
  std::string id = balanced ? "balanced-" : "static-";
  id += consumer_id(c);
  return id;
}

// Compares the merged Q1 result with DuckDB's, group by group: sums and counts exactly, averages
// to 1e-9 relative. Returns "" when they agree, else what differs.
std::string compare_q1(const json& got, const json& reference) {
  const json& want = reference.at("groups");
  if (got.size() != want.size()) {
    return std::to_string(got.size()) + " groups, DuckDB " + std::to_string(want.size());
  }
  std::map<std::string, const json*> by_key;
  for (const json& g : got) by_key[g.at("returnflag").get<std::string>() + g.at("linestatus").get<std::string>()] = &g;
  for (const json& w : want) {
    const std::string key = w.at("returnflag").get<std::string>() + w.at("linestatus").get<std::string>();
    if (!by_key.count(key)) return "no group " + key;
    const json& g = *by_key.at(key);
    for (const char* sum : {"sum_qty", "sum_base_price", "sum_disc_price", "sum_charge"}) {
      if (std::to_string(g.at(sum).get<std::int64_t>()) != w.at(sum).get<std::string>()) {
        return "group " + key + ": " + sum + " " + g.at(sum).dump() + ", DuckDB " + w.at(sum).get<std::string>();
      }
    }
    if (g.at("count") != w.at("count")) return "group " + key + ": count " + g.at("count").dump() + ", DuckDB " + w.at("count").dump();
    for (const char* avg : {"avg_qty", "avg_price", "avg_disc"}) {
      const double a = g.at(avg), b = w.at(avg);
      if (std::abs(a - b) > 1e-9 * std::abs(b)) {
        return "group " + key + ": " + avg + " " + g.at(avg).dump() + ", DuckDB " + w.at(avg).dump();
      }
    }
  }
  return {};
}

class TpchQ1 final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "TPC-H Q1 on 3 consumers of speed 1 : 1/2 : 1/3: load-balancing driven flow vs static partitioning";
  }
  std::string description() const override {
    return "lineitem from tpchgen-cli (scale_factor; cached, not timed), Q1's columns as 40-byte tuples streamed by 2 "
           "producer ranks (half the rows each) to 3 consumer threads (rank 2) through the mover (rank 3). Each "
           "consumer evaluates Q1 (filter l_shipdate <= 1998-09-02, group by returnflag, linestatus: 4 sums, 3 "
           "averages, count) in a kernels::AggregateTable; the partial tables are merged at the end and checked "
           "exactly against DuckDB's Q1 over the same file. Per-tuple cost 1:2:3: consumer k spends k * base_ns per "
           "tuple in all, the real Q1 work once plus a wait (cost_mode sleep, or spin) for the rest. Balanced: a driven "
           "balance flow (each consumer served at its own pace). Static (baseline, same cluster run, order alternating "
           "per repetition): a driven shuffle flow with explicit targets, producer row g to consumer g mod 3. Runtime "
           "from the start to the last consumer's end-of-stream; ideal = rows / sum of the consumers' speeds, each "
           "from its per-tuple cost measured in the balanced run (time not waiting for data over its tuples), and "
           "ideal_set the same at the set costs. Targets: balanced <= 0.7x static, <= 1.1x either ideal.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"scale_factor", 0.1, 1, "TPC-H scale factor of lineitem (SF 1: 6 M rows)"},
        {"base_ns", json{{"shm", 1500}, {"tcp", 4000}}, json{{"shm", 1000}, {"tcp", 3000}},
         "per-tuple cost of the fastest consumer, ns (the others 2x and 3x; over tcp the mover moves ~60 MB/s in all)"},
        {"cost_mode", "sleep", "sleep", "how the rest of the per-tuple cost is spent: sleep or spin (a busy loop)"},
        {"segments", json{{"shm", 4}, {"tcp", 16}}, json{{"shm", 4}, {"tcp", 16}},
         "segments per ring (a consumer's queue: what keeps it busy while the mover serves the others, and its "
         "share of the tail at the end)"},
        {"segment_bytes", json{{"shm", 16384}, {"tcp", 32768}}, json{{"shm", 16384}, {"tcp", 32768}}, "segment size"},
        {"bin_ms", 50, 100, "time bin of the per-consumer timeline"},
        {"timeout_s", 120, 600, "bound of data generation, each cluster run and every wait inside it"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"static", "the same producers, tuples, consumers (same costs) and mover; a driven shuffle flow with explicit "
                       "targets: producer row g to consumer g mod 3, a fixed third each"},
            {"ideal", "rows / (sum over the consumers of 1 / per-tuple cost measured in the balanced run): every "
                      "consumer busy to the end"},
            {"ideal_set", "rows / (sum over the consumers of 1 / (factor x base_ns)): the same at the set costs"}};
  }

  std::string unavailable(const RunContext& context) const override {
    (void)context;
    if (python_venv().empty()) {
      return "no Python environment: the build was configured without DFI_PYTHON_VENV (scripts/dev makes build/venv "
             "with python/requirements-dev.txt: tpchgen-cli, duckdb)";
    }
    if (::access(tpchgen_binary().c_str(), X_OK) != 0) return "no " + tpchgen_binary() + " (pip install -r python/requirements-dev.txt)";
    if (::access(duckdb_script().c_str(), R_OK) != 0) return "no " + duckdb_script() + " (set DFI_BENCH_DIR to the bench/ folder)";
    const launch::ChildResult r = launch::run_child({{venv_python(), "-c", "import duckdb"}, {}}, std::chrono::seconds(60));
    if (r.exit_code != 0) return venv_python() + " cannot import duckdb (pip install -r python/requirements-dev.txt)";
    return {};
  }

  void run(RunContext& context, Result& result) override {
    const double sf = context.param("scale_factor");
    const double base_ns = context.param("base_ns");
    const std::string cost_mode = context.param("cost_mode");
    const double bin = context.param("bin_ms").get<double>() / 1000;
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    if (!(sf > 0) || sf > 10 || !(base_ns > 0) || (cost_mode != "sleep" && cost_mode != "spin") || !(bin > 0) ||
        context.param("segment_bytes").get<std::size_t>() < sizeof(Lineitem)) {
      throw Error(Errc::invalid_argument, "bench tpch-q1: need 0 < scale_factor <= 10 (Q1's sums stay in 64 bits), "
                                          "base_ns > 0, cost_mode sleep or spin, bin_ms > 0, segment_bytes >= 40");
    }
    result.set_parameters(context.resolved_parameters());
    for (const BaselineInfo& b : baselines()) result.add_baseline(b.name, b.description);

    const Data data = prepare_data(context, sf, timeout);
    context.say("lineitem: " + std::to_string(data.rows) + " rows; DuckDB's Q1: " +
                std::to_string(data.reference.at("groups").size()) + " groups");

    const Axis seconds_axis{"runtime", "s", "linear"};
    Panel& runtime = result.panel("runtime", "Q1 runtime (start to the last consumer's end-of-stream)",
                                  {"query", "", "category"}, seconds_axis, Better::lower);
    runtime.series("balanced", Role::dfi, "driven balance flow");
    runtime.series("static", Role::baseline, "static partitioning (driven shuffle flow, a third each)");
    runtime.series("ideal", Role::baseline, "ideal: rows / total measured speed");
    runtime.series("ideal_set", Role::baseline, "ideal at the set costs");
    runtime.compare("balanced", "static", kStaticTarget);
    runtime.compare("balanced", "ideal", kIdealTarget);
    runtime.compare("balanced", "ideal_set", kIdealTarget);
    Panel& timeline = result.panel("timeline", "Tuples consumed over time per consumer (repetition 1)",
                                   {"time", "s", "linear"}, {"tuples consumed", "", "linear"}, Better::higher);
    Panel& cost = result.panel("cost", "Measured per-tuple cost per consumer (set: 1, 2, 3 x base_ns)",
                               {"consumer", "", "category"}, {"cost", "us", "linear"}, Better::lower);
    Panel& share = result.panel("share", "Share of the tuples per consumer",
                                {"consumer", "", "category"}, {"share", "%", "linear"}, Better::higher);
    for (bool balanced : {true, false}) {
      const Role role = balanced ? Role::dfi : Role::baseline;
      const std::string mode = balanced ? "balanced" : "static";
      for (int c = 0; c < kConsumers; ++c) {
        timeline.series(series_id(balanced, c), role, mode + ": consumer " + std::to_string(c + 1) + " (cost " +
                                                          std::to_string(kFactors[c]) + "x)");
      }
      cost.series(mode, role, mode);
      share.series(mode, role, mode);
    }
    result.add_note("Per-tuple cost emulated: each consumer does the real Q1 work once per tuple, then " +
                    std::string(cost_mode == "spin" ? "spins on the clock" : "sleeps") + " until its batch has taken " +
                    "factor x base_ns per tuple (" + format_fixed(base_ns, 0) + " ns; factors 1, 2, 3).");

    const std::string tag = "bench-tpch-q1";
    RankJob job;
    job.nodes = kRanks;
    job.scenario = name();
    job.timeout = timeout * 3;
    const json common = {{"data", data.bin.string()},
                         {"rows", data.rows},
                         {"base_ns", base_ns},
                         {"cost_mode", cost_mode},
                         {"segments", context.param("segments")},
                         {"segment_bytes", context.param("segment_bytes")},
                         {"bin_seconds", bin},
                         {"timeout_ms", std::chrono::milliseconds(timeout).count()}};
    for (int rep = 1; rep <= context.repeat; ++rep) {
      // Alternate which mode goes first (run_alternating's order: DFI first on odd repetitions).
      std::vector<Run> runs;
      run_alternating(rep, [&] { runs.push_back({tag + "-balanced", true}); }, [&] { runs.push_back({tag + "-static", false}); });
      json planned = json::array();
      for (const Run& r : runs) planned.push_back({{"flow", r.flow}, {"balanced", r.balanced}});
      job.params = common;
      job.params["runs"] = planned;
      const std::string command = rank_job_command(job, context);
      context.say("repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ": " +
                  (runs[0].balanced ? "balanced, then static" : "static, then balanced") + ", over " +
                  (context.netns ? "netns tcp" : context.transport));
      const std::map<int, json> reports = run_rank_job(job, context);
      for (int r = 0; r < kRanks; ++r) {
        if (!reports.count(r)) throw Error(Errc::protocol, std::string("bench ") + kName + ": rank " + std::to_string(r) + " reported nothing");
      }
      // Per run: runtime, measured costs; the balanced run's for the ideal.
      std::array<double, kConsumers> busy{}, handled{};
      std::map<bool, double> runtimes;
      for (std::size_t i = 0; i < runs.size(); ++i) {
        const Run& run = runs[i];
        const std::string mode = run.balanced ? "balanced" : "static";
        const json& got = reports.at(kConsumerRank).at("runs").at(i);
        std::uint64_t pushed = 0, consumed = 0;
        for (int p = 0; p < kProducers; ++p) pushed += reports.at(p).at("runs").at(i).at("pushed").get<std::uint64_t>();
        double end = 0;
        std::ostringstream said;
        said << "  " << mode << ':';
        for (int c = 0; c < kConsumers; ++c) {
          const json& k = got.at("consumers").at(c);
          const std::uint64_t n = k.at("tuples");
          const double finished = k.at("finished"), active = finished - k.at("begun").get<double>() - k.at("waited").get<double>();
          consumed += n;
          end = std::max(end, finished);
          if (run.balanced) {
            busy[c] = active;
            handled[c] = static_cast<double>(n);
          }
          if (n > 0) cost.add(mode, consumer_id(c), active / static_cast<double>(n) * 1e6);
          share.add(mode, consumer_id(c), 100.0 * static_cast<double>(n) / static_cast<double>(data.rows));
          said << " c" << c + 1 << ' ' << n << " tuples in " << format_fixed(finished, 3) << " s (waited "
               << format_fixed(k.at("waited").get<double>(), 3) << " s)";
          if (rep == 1) {
            const std::string id = series_id(run.balanced, c);
            const std::vector<std::uint64_t> cumulative = k.at("timeline");
            timeline.add(id, 0.0, 0);
            for (std::size_t b = 0; b < cumulative.size(); ++b) {
              timeline.add(id, std::min((static_cast<double>(b) + 1) * bin, finished), static_cast<double>(cumulative[b]));
            }
            timeline.add_command(id, command);
          }
        }
        if (pushed != data.rows || consumed != data.rows) {
          throw Error(Errc::protocol, std::string("bench ") + kName + ": " + run.flow + ": the producers pushed " +
                                          std::to_string(pushed) + " tuples, the consumers got " + std::to_string(consumed) +
                                          ", lineitem has " + std::to_string(data.rows));
        }
        const std::string differs = compare_q1(got.at("groups"), data.reference);
        if (!differs.empty()) {
          context.say("  " + mode + ": Q1 result DIFFERS from DuckDB's: " + differs);
          throw Error(Errc::protocol, std::string("bench ") + kName + ": " + run.flow + ": Q1 differs from DuckDB's: " + differs);
        }
        said << "; runtime " << format_fixed(end, 3) << " s; Q1 equals DuckDB's (" << got.at("groups").size() << " groups)";
        context.say(said.str());
        runtime.add(mode, "Q1", end);
        runtime.add_command(mode, command);
        runtimes[run.balanced] = end;
      }
      double speed = 0;  // tuples per second, all consumers together
      for (int c = 0; c < kConsumers; ++c) speed += handled[c] / busy[c];
      const double ideal = static_cast<double>(data.rows) / speed;
      double set_speed = 0;
      for (int factor : kFactors) set_speed += 1e9 / (base_ns * factor);
      const double ideal_set = static_cast<double>(data.rows) / set_speed;
      runtime.add("ideal", "Q1", ideal);
      runtime.add("ideal_set", "Q1", ideal_set);
      runtime.add_command("ideal", command);
      context.say("  ideal " + format_fixed(ideal, 3) + " s (at the set costs " + format_fixed(ideal_set, 3) +
                  " s, balanced / that " + format_fixed(runtimes[true] / ideal_set, 3) + "); balanced / static " + format_fixed(runtimes[true] / runtimes[false], 3) +
                  ", balanced / ideal " + format_fixed(runtimes[true] / ideal, 3));
    }
    // (a run whose result differs threw above)
    result.add_note("Q1 agreed with DuckDB's (" + data.tbl.filename().string() + ", SF " + sf_text(sf) + ", " +
                    std::to_string(data.rows) + " rows) in every run of both modes: sums and counts exactly, averages "
                    "to 1e-9 relative.");
  }

  // Errors propagate: BenchCli::run reports them, naming the scenario.
  int run_rank(const json& params, std::ostream& out, std::ostream& /*err*/) override {
    return run_rank_program(params, out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_tpch_q1_scenario() { return std::make_unique<TpchQ1>(); }

}  // namespace dfi::tools::bench
