// ops::Join, JoinAlgorithm::grace: the grace hash join on flows with an optional Bloom-filter
// semi-join reduction (001 §5; the algorithm is described in join.hpp).
//
// One rank, `threads` partitioning threads P0.. and join threads J0.., started by Join's
// constructor: each opens its flows (P_t the build and probe sources [bloom, P0: and the bloom
// source], J_t the build and probe targets [bloom, J0: and the bloom target]) and waits for
// Join::run [bloom: which first sizes the filters from the ranks' build counts]; then
////   P_t: [bloom: insert build keys into filter t; P0 ORs the rank's filters, pushes the blocks
//        into "<name>.bloom" and closes] push build fragment, close; wait until every J of the
//        rank received its build side [bloom: and J0 merged every rank's filter]; push the probe
//        fragment [bloom: only tuples whose key may be in the filter], close.
//   J_t: [J0, bloom: consume "<name>.bloom", OR every block into the combined filter] consume the
//        build flow to its end (materialised), count down; consume the probe flow to its end;
//        hash-partition both sides into sub-partitions, and per sub-partition build a
//        kernels::JoinTable and probe it.
// No cycle of waits: the filters depend only on local keys, the build side only on the
// partitioning threads' build pushes, which wait for nothing. A failed thread abandons the
// Countdowns (ThreadGroup::on_failure), so its rank's other threads do not wait forever.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/kernels/bloom.hpp"
#include "join_parts.hpp"

namespace dfi::ops::detail {

namespace {

// A tuple of the Bloom flow: a block's index (uint64), then the block's 64 bytes.
constexpr std::size_t kBloomTupleBytes = 8 + sizeof(kernels::BloomFilter::Block);

const flow::Schema& bloom_schema() {
  static const flow::Schema schema(
      {{"block", flow::Type::uint64, 1}, {"bits", flow::Type::chars, sizeof(kernels::BloomFilter::Block)}});
  return schema;
}

// What the grace threads of one rank share besides RankJoin.
struct GraceRank {
  explicit GraceRank(RankJoin& j) : join(j), keys_inserted(j.spec.threads), build_received(j.spec.threads) {}
  void abandon() {
    keys_inserted.abandon();
    build_received.abandon();
    filter_merged.abandon();
  }

  RankJoin& join;
  Countdown keys_inserted;  // bloom: every partitioning thread inserted its build keys
  Countdown build_received;  // every join thread received its whole build side
  Countdown filter_merged{1};  // bloom: J0 merged every rank's filter into `combined`
  // bloom: sized by size_filters() in Join::run before the threads are released.
  std::vector<kernels::BloomFilter> thread_filters;  // P_t's build keys
  kernels::BloomFilter combined{1};                   // every rank's build keys (J0 writes)
};

// Bloom: the filter's size must be the same on every rank: it follows the build side's total,
// which the ranks exchange.
void size_filters(GraceRank& rank) {
  RankJoin& join = rank.join;
  std::uint64_t mine = 0;
  for (const Fragment& f : join.build) mine += f.count;
  const int ranks = join_ranks(join.spec, join.node.size());
  const std::vector<std::string> counts = exchange_records(
      join.node, "ops/join/" + join.spec.name + "/build-count/", ranks, std::to_string(mine));
  std::uint64_t total = 0;
  for (const std::string& count : counts) total += std::stoull(count);
  rank.combined = kernels::BloomFilter(kernels::BloomFilter::blocks_for(total, join.spec.bloom_bits_per_key));
  rank.thread_filters.assign(static_cast<std::size_t>(join.spec.threads), rank.combined);
}

// P0 with bloom: the rank's filter (its threads' filters ORed) to every rank.
void ship_filter(GraceRank& rank, flow::ReplicateSource& source) {
  RankJoin& join = rank.join;
  kernels::BloomFilter& mine = rank.thread_filters[0];
  for (std::size_t t = 1; t < rank.thread_filters.size(); ++t) mine.merge(rank.thread_filters[t]);
  const std::string name = bloom_flow(join.spec);
  // The blocks as tuples, kShipBlocks at a time, each batch pushed whole.
  constexpr std::size_t kShipBlocks = 256;
  std::vector<std::byte> tuples(kShipBlocks * kBloomTupleBytes);
  const auto blocks = mine.blocks();
  for (std::uint64_t first = 0; first < blocks.size();) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kShipBlocks, blocks.size() - first));
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t b = first + i;
      std::byte* tuple = tuples.data() + i * kBloomTupleBytes;
      std::memcpy(tuple, &b, 8);
      std::memcpy(tuple + 8, &blocks[b], sizeof blocks[b]);
    }
    join.check(source.push_bulk(tuples.data(), n), "pushing into", name);
    first += n;
  }
  join.check(source.close(), "closing", name);
}

// J0 with bloom: every rank's filter, ORed into rank.combined.
void merge_filters(GraceRank& rank, flow::ReplicateTarget& in) {
  RankJoin& join = rank.join;
  const std::string name = bloom_flow(join.spec);
  flow::TupleBatch batch;
  kernels::BloomFilter::Block block;
  for (;;) {
    join.check(in.consume(batch), "consuming", name);
    if (batch.empty()) break;
    for (std::size_t i = 0; i < batch.count; ++i) {
      std::uint64_t index;
      std::memcpy(&index, batch.tuple(i), 8);
      if (index >= rank.combined.block_count()) {
        join.check(Status(Errc::protocol, "filter block " + std::to_string(index) + " of " +
                                              std::to_string(rank.combined.block_count())),
                   "consuming", name);
      }
      std::memcpy(&block, batch.tuple(i) + 8, sizeof block);
      rank.combined.merge_block(index, block);
    }
  }
  rank.filter_merged.count_down();
}

// Bytes of the batch push_filtered gathers the passing probe tuples into (about L1's size).
constexpr std::size_t kFilteredBatchBytes = 32 * 1024;

// Pushes the probe tuples of `fragment` whose key may be in `filter`; returns how many. The
// tuples that pass are gathered into a batch of kFilteredBatchBytes, pushed whole (push_batch:
// the batch's keys hashed in one loop, its rows scattered into their targets' segments).
std::uint64_t push_filtered(const RankJoin& join, flow::ShuffleSource& source, const std::string& name,
                            const Fragment& fragment, const kernels::BloomFilter& filter) {
  const kernels::JoinTable::Layout& layout = join.probe_layout;
  const std::size_t width = layout.tuple_bytes;
  const std::size_t batch_tuples = std::max<std::size_t>(1, kFilteredBatchBytes / width);
  std::vector<std::byte> batch(batch_tuples * width);
  const auto* tuples = static_cast<const std::byte*>(fragment.tuples);
  std::uint64_t shipped = 0;
  std::size_t fill = 0;  // tuples in `batch`
  for (std::size_t i = 0; i < fragment.count; ++i) {
    const std::byte* tuple = tuples + i * width;
    if (!filter.may_contain(kernels::load_key(tuple + layout.key_offset, layout.key_bytes))) continue;
    std::memcpy(batch.data() + fill * width, tuple, width);
    if (++fill == batch_tuples) [[unlikely]] {
      join.check(source.push_bulk(batch.data(), fill), "pushing into", name);
      shipped += fill;
      fill = 0;
    }
  }
  join.check(source.push_bulk(batch.data(), fill), "pushing into", name);
  return shipped + fill;
}

void grace_partition(GraceRank& rank, int thread) {
  RankJoin& join = rank.join;
  ShuffleSources out(join, thread);
  std::optional<flow::ReplicateSource> filter_out;
  if (join.spec.bloom && thread == 0) {
    filter_out.emplace(join.node, out.worker, bloom_flow(join.spec), 0,
                       join.open_options<flow::ReplicateSourceOptions>(bloom_schema()));
  }
  if (!join.opened()) return;
  const Fragment& build = join.build[static_cast<std::size_t>(thread)];
  const Fragment& probe = join.probe[static_cast<std::size_t>(thread)];
  if (join.spec.bloom) {
    kernels::BloomFilter& filter = rank.thread_filters[static_cast<std::size_t>(thread)];
    const kernels::JoinTable::Layout& layout = join.build_layout;
    const auto* keys = static_cast<const std::byte*>(build.tuples) + layout.key_offset;
    for (std::size_t i = 0; i < build.count; ++i) {
      filter.insert(kernels::load_key(keys + i * layout.tuple_bytes, layout.key_bytes));
    }
    rank.keys_inserted.count_down();
    if (thread == 0) {
      if (!rank.keys_inserted.wait()) return;
      ship_filter(rank, *filter_out);
    }
  }
  join.check(out.build.push_bulk(build.tuples, build.count), "pushing into", out.build_name);
  join.check(out.build.close(), "closing", out.build_name);
  // The probe side starts once this rank's build side is in (and the filter complete).
  if (!rank.build_received.wait()) return;
  if (join.spec.bloom && !rank.filter_merged.wait()) return;
  JoinResult part;
  if (join.spec.bloom) {
    part.shipped_probe_tuples = push_filtered(join, out.probe, out.probe_name, probe, rank.combined);
  } else {
    join.check(out.probe.push_bulk(probe.tuples, probe.count), "pushing into", out.probe_name);
    part.shipped_probe_tuples = probe.count;
  }
  join.check(out.probe.close(), "closing", out.probe_name);
  join.add(part);
}

// Consumes `target` to its end, appending every tuple to `rows`.
void materialise(const RankJoin& join, flow::ShuffleTarget& target, const std::string& name,
                 std::vector<std::byte>& rows) {
  flow::TupleBatch batch;
  for (;;) {
    join.check(target.consume(batch), "consuming", name);
    if (batch.empty()) return;
    rows.insert(rows.end(), batch.data, batch.data + batch.count * batch.tuple_bytes);
  }
}

void grace_join(GraceRank& rank, int thread) {
  RankJoin& join = rank.join;
  ShuffleTargets in(join, thread);
  std::optional<flow::ReplicateTarget> filter_in;
  if (join.spec.bloom && thread == 0) {
    filter_in.emplace(join.node, bloom_flow(join.spec), 0,
                      join.open_options<flow::ReplicateTargetOptions>(bloom_schema()));
  }
  if (!join.opened()) return;
  if (filter_in) merge_filters(rank, *filter_in);
  std::vector<std::byte> build_rows, probe_rows;
  materialise(join, in.build, in.build_name, build_rows);
  rank.build_received.count_down();
  JoinResult part;
  part.build_seconds = join.since_start();
  materialise(join, in.probe, in.probe_name, probe_rows);

  // Local phase: both sides cut into the same sub-partitions, joined one at a time.
  join_partition(join, build_rows.data(), build_rows.size() / join.build_layout.tuple_bytes, probe_rows.data(),
                 probe_rows.size() / join.probe_layout.tuple_bytes, thread, part);
  join.add(part);
}

class GraceThreads : public JoinThreads {
 public:
  explicit GraceThreads(RankJoin& join) : rank_(join) {}
  void start(ThreadGroup& group) override {
    for (int t = 0; t < rank_.join.spec.threads; ++t) group.start([this, t] { grace_join(rank_, t); });
    for (int t = 0; t < rank_.join.spec.threads; ++t) group.start([this, t] { grace_partition(rank_, t); });
  }
  void before_run() override {
    if (rank_.join.spec.bloom) size_filters(rank_);
  }
  void abandon() override { rank_.abandon(); }

 private:
  GraceRank rank_;
};

}  // namespace

std::unique_ptr<JoinThreads> grace_threads(RankJoin& join) { return std::make_unique<GraceThreads>(join); }

void create_grace_flows(cluster::Node& node, const JoinSpec& spec) {
  if (!spec.bloom) return;
  flow::FlowSpec bloom;
  bloom.name = bloom_flow(spec);
  bloom.type = flow::FlowType::replicate;
  bloom.schema = bloom_schema();
  bloom.options = spec.flow_options;
  for (int r = 0; r < join_ranks(spec, node.size()); ++r) {
    bloom.sources.push_back({r, 0});
    bloom.targets.push_back({r, 0});
  }
  flow::create_flow(node, bloom);
}

}  // namespace dfi::ops::detail
