// ops::run_aggregation: RDMA and hierarchical aggregation on a combiner flow (see aggregate.hpp).
#include "dfi/ops/aggregate.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <sstream>

#include "dfi/cluster/node.hpp"
#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/kernels/hash.hpp"
#include "records.hpp"

namespace dfi::ops {

namespace {

using Clock = std::chrono::steady_clock;

std::string partials_flow(const AggregationSpec& spec) { return spec.name + ".partials"; }

int aggregation_ranks(const AggregationSpec& spec, int cluster_size) {
  return spec.ranks == 0 ? cluster_size : spec.ranks;
}

flow::FlowSpec flow_spec(const AggregationSpec& spec, int cluster_size) {
  flow::FlowSpec f;
  f.name = partials_flow(spec);
  f.type = flow::FlowType::combiner;
  f.schema = spec.schema;
  f.key_column = spec.key;
  f.options = spec.flow_options;
  f.type_options = flow::CombinerOptions{.aggregates = spec.aggregates};
  const int ranks = aggregation_ranks(spec, cluster_size);
  for (int r = 0; r < ranks; ++r) {
    for (int t = 0; t < spec.threads; ++t) {
      f.sources.push_back({r, t});
      if (spec.algorithm == AggregateAlgorithm::rdma) f.targets.push_back({r, t});
    }
  }
  if (spec.algorithm == AggregateAlgorithm::hierarchical) f.targets.push_back({0, 0});
  return f;
}

void check(const AggregationSpec& spec, int rank, const Status& status, const char* action,
           const std::string& flow) {
  detail::check_call(status, "aggregation", spec.name, rank, action, flow);
}

}  // namespace

std::string_view aggregate_algorithm_name(AggregateAlgorithm algorithm) {
  return algorithm == AggregateAlgorithm::rdma ? "rdma" : "hierarchical";
}

AggregateAlgorithm parse_aggregate_algorithm(std::string_view text) {
  if (text == "rdma") return AggregateAlgorithm::rdma;
  if (text == "hierarchical") return AggregateAlgorithm::hierarchical;
  throw Error(Errc::invalid_argument, "aggregation algorithm '" + std::string(text) +
                                          "': expected rdma or hierarchical");
}

AggregationResult& AggregationResult::operator+=(const AggregationResult& other) {
  input_tuples += other.input_tuples;
  groups += other.groups;
  checksum += other.checksum;
  shipped_rows += other.shipped_rows;
  seconds = std::max(seconds, other.seconds);
  return *this;
}

void AggregationSpec::validate(int cluster_size) const {
  auto bad = [&](const std::string& what) {
    return Error(Errc::invalid_argument, "aggregation '" + name + "': " + what);
  };
  detail::check_common("aggregation", name, threads, ranks, cluster_size);
  if (cache_groups < 1) throw bad("cache_groups must be at least 1");
  if (schema.column_count() == 0) throw bad("no input schema");
  // The flow's own validation names the rest (key column, aggregates, ring shape).
  try {
    flow_spec(*this, cluster_size).validate(cluster_size);
  } catch (const Error& e) {
    throw bad(e.what());
  }
}

flow::Schema AggregationSpec::result_schema() const {
  return flow::combiner_result_schema(flow_spec(*this, std::max(1, ranks)));
}

void create_aggregation(cluster::Node& node, const AggregationSpec& spec) {
  spec.validate(node.size());
  flow::create_flow(node, flow_spec(spec, node.size()));
}

AggregationResult run_aggregation(cluster::Node& node, const AggregationSpec& spec,
                                  std::span<const Fragment> input,
                                  const AggregationRunOptions& options) {
  spec.validate(node.size());
  const Clock::time_point start = Clock::now();
  if (input.size() != static_cast<std::size_t>(spec.threads)) {
    throw Error(Errc::invalid_argument, "aggregation '" + spec.name + "': " + std::to_string(input.size()) +
                                            " fragments for " + std::to_string(spec.threads) +
                                            " threads (one per thread)");
  }
  if (node.rank() >= aggregation_ranks(spec, node.size())) {
    throw Error(Errc::invalid_argument, "aggregation '" + spec.name + "': rank " +
                                            std::to_string(node.rank()) + " does not take part");
  }
  const std::string name = partials_flow(spec);
  const std::size_t row_width = spec.result_schema().tuple_bytes();
  std::mutex mutex;
  AggregationResult result;  // guarded by mutex
  auto add = [&](const AggregationResult& part) {
    std::lock_guard lock(mutex);
    result += part;
  };
  ThreadGroup threads;
  // Post-aggregation: rdma on every thread of every rank, hierarchical on rank 0's thread 0.
  for (int t = 0; t < spec.threads; ++t) {
    const bool target = spec.algorithm == AggregateAlgorithm::rdma || (node.rank() == 0 && t == 0);
    if (!target) continue;
    threads.start([&, t] {
      flow::CombinerTarget in(node, name, t, spec.schema, options.open_timeout);
      AggregationResult part;
      flow::TupleBatch batch;
      for (;;) {
        check(spec, node.rank(), in.consume(batch), "consuming", name);
        if (batch.empty()) break;
        for (std::size_t i = 0; i < batch.count; ++i) {
          part.checksum += kernels::fold_tuple(batch.tuple(i), row_width);
        }
        part.groups += batch.count;
        if (options.sink) options.sink(t, batch);
      }
      add(part);
    });
  }
  // Local aggregation: every thread of every rank.
  for (int t = 0; t < spec.threads; ++t) {
    threads.start([&, t] {
      fabric::Worker worker(node.fabric(), spec.name + " aggregate " + std::to_string(t));
      flow::CombinerSourceOptions source_options;
      source_options.expected_schema = spec.schema;
      source_options.open_timeout = options.open_timeout;
      source_options.ship_tuples = 0;  // ship when the table is full (and at close)
      source_options.local_groups = spec.algorithm == AggregateAlgorithm::rdma
                                        ? spec.cache_groups
                                        : std::numeric_limits<std::size_t>::max();
      flow::CombinerSource out(node, worker, name, t, source_options);
      check(spec, node.rank(), out.push_bulk(input[t].tuples, input[t].count), "pushing into", name);
      check(spec, node.rank(), out.close(), "closing", name);
      AggregationResult part;
      part.input_tuples = out.counters().tuples;
      part.shipped_rows = out.counters().rows;
      add(part);
    });
  }
  threads.join();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

AggregationResult gather_aggregation_results(cluster::Node& node, const AggregationSpec& spec,
                                             const AggregationResult& mine) {
  std::ostringstream record;
  record.precision(17);
  record << mine.input_tuples << ' ' << mine.groups << ' ' << mine.checksum << ' ' << mine.shipped_rows
         << ' ' << mine.seconds;
  const int ranks = aggregation_ranks(spec, node.size());
  const std::vector<std::string> records =
      detail::exchange_records(node, "ops/aggregate/" + spec.name + "/result/", ranks, record.str());
  AggregationResult all;
  for (int r = 0; r < ranks; ++r) {
    std::istringstream in(records[r]);
    AggregationResult part;
    in >> part.input_tuples >> part.groups >> part.checksum >> part.shipped_rows >> part.seconds;
    if (!in) {
      throw Error(Errc::protocol, "aggregation '" + spec.name + "': malformed result record of rank " +
                                      std::to_string(r));
    }
    all += part;
  }
  return all;
}

}  // namespace dfi::ops
