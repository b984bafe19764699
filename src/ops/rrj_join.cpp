// ops::Join, JoinAlgorithm::rrj: the RDMA radix join (001 §5.2): radix partitioning straight into
// remote buffers, then a local join of each partition in place.
//
// Partitions: one per join thread of every rank, p = rank * threads + thread, chosen by
// kernels::route over the key (the radix join's routing), a chunk of tuples at a time
// (kernels::route_rows for 8-byte keys). One rank, `threads` partitioning
// threads P0.. and join threads J0.., started by Join's constructor: P_t creates a fabric worker
// and an endpoint to every rank (the open), J_t nothing; both wait for Join::run. Then
//   P_t: histogram pass: counts its build and probe tuples per partition; count down `counted`.
//   P0:  (once every P_t counted) publishes the rank's counts and reads every rank's (registry
//        records, cluster::exchange_records, as grace sizes its Bloom filter); lays out this
//        rank's two receive regions (per relation: partition by partition, inside a partition one
//        slice per source thread of every rank, in rank order) and every source slice this rank
//        writes elsewhere; allocates the two regions exactly (fabric::MemoryRegion), publishes
//        their memory keys and reads every rank's; count down `laid_out`.
//   P_t: attaches to every other rank's regions and scatters its fragments: per partition a
//        staging buffer of whole tuples (at most kRrjStagingBytes), written to the next part of
//        its slice when full, the last one at the end. How a buffer is written is decided per
//        destination at attach time: memcpy (this rank's own region, or a peer's region mapped
//        into this process: shm), Endpoint::put_async (native RMA without a mapping), or
//        Endpoint::post_words (where UCX would emulate the put, tcp: one active message the
//        target's worker applies, answered only if refused, so no round trip per buffer; UCX
//        1.13 aborts a target that applies an emulated put of a peer that just died,
//        src/README.md §4; setting data_path=rma takes the put there too).
//        kStageBuffers buffers per partition: one is filled while the others' writes complete.
//        Then flushes every endpoint; count down `written`.
//   P0:  (once every P_t wrote) a completion exchange (one record per rank): when it returns,
//        every rank's writes into this rank's regions are complete; count down `complete`.
//   J_t: joins its partition of both regions in place (join_partition: the grace join's local
//        phase, cache-sized sub-partitions, kernels::JoinTable).
// A rank that dies makes the exchanges (or a write towards it) fail with peer_failed naming it;
// a failed thread abandons the Countdowns (ThreadGroup::on_failure), so no thread waits forever.
#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dfi/common/config.hpp"
#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/registry/client.hpp"
#include "join_parts.hpp"

namespace dfi::ops::detail {

namespace {

constexpr int kSides = 2;  // 0: the build relation, 1: the probe relation
constexpr const char* kSideName[kSides] = {"build", "probe"};

std::string record_prefix(const JoinSpec& spec, const std::string& what) {
  return "ops/join/" + spec.name + "/rrj/" + what + "/";
}

// Throws the join's error for a failed step: "join '<name>' (rank R): <what>: <message>".
[[noreturn, gnu::noinline]] void fail(const RankJoin& join, Errc code, const std::string& what,
                                      const std::string& message) {
  throw Error(code, "join '" + join.spec.name + "' (rank " + std::to_string(join.node.rank()) + "): " + what + ": " +
                        message);
}

// exchange_records for the join's step `what`, its errors (peer_failed naming a rank that died)
// with the join's name.
std::vector<std::string> exchange(RankJoin& join, int ranks, const std::string& what, const std::string& mine) {
  try {
    return exchange_records(join.node, record_prefix(join.spec, what), ranks, mine);
  } catch (const Error& e) {
    fail(join, e.code(), "exchanging " + what, e.what());
  }
}

// What the rrj threads of one rank share besides RankJoin.
struct RrjRank {
  explicit RrjRank(RankJoin& j)
      : join(j),
        ranks(join_ranks(j.spec, j.node.size())),
        partitions(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(j.spec.threads)),
        counted(j.spec.threads),
        written(j.spec.threads) {
    for (int side = 0; side < kSides; ++side) {
      counts[side].assign(static_cast<std::size_t>(j.spec.threads) * partitions, 0);
      offsets[side].assign(counts[side].size(), 0);
    }
  }
  void abandon() {
    counted.abandon();
    laid_out.abandon();
    written.abandon();
    complete.abandon();
  }
  std::size_t width(int side) const {
    return side == 0 ? join.build_layout.tuple_bytes : join.probe_layout.tuple_bytes;
  }

  RankJoin& join;
  const int ranks;
  const std::size_t partitions;  // ranks x threads
  // counts[side][t * partitions + p]: tuples of `side` that P_t of this rank sends to partition p
  // (P_t writes its row before `counted`).
  std::vector<std::uint64_t> counts[kSides];
  // Written by P0 before `laid_out`, read-only after:
  // offsets[side][t * partitions + p]: the tuple index where P_t's slice of partition p starts in
  // the region of rank p / threads.
  std::vector<std::uint64_t> offsets[kSides];
  // This rank's partitions: join thread j's tuples are [begin[side][j], begin[side][j + 1]).
  std::vector<std::uint64_t> begin[kSides];
  fabric::MemoryRegion region[kSides];  // this rank's receive regions
  std::vector<std::string> descriptors[kSides];  // every rank's regions, serialised
  Countdown counted;        // every P_t counted its tuples
  Countdown laid_out{1};    // P0 exchanged the counts and published the regions
  Countdown written;        // every P_t wrote its tuples
  Countdown complete{1};    // every rank's partitioning threads are done: the regions are complete
};

// The partitions of a chunk of tuples, the radix join's routing (kernels::route of the key):
// out[i] for `count` <= kRouteChunk tuples at `tuples`. An 8-byte key goes through
// kernels::route_rows (no dependence between tuples, eight keys at a time with AVX-512), any other
// width through route() one tuple after the other. Set up once per scatter or count.
constexpr std::size_t kRouteChunk = 256;
class ChunkRouter {
 public:
  ChunkRouter(const kernels::JoinTable::Layout& layout, std::size_t partitions)
      : layout_(layout), partitions_(partitions), route_rows_(kernels::route_rows_kernel()) {}
  void route(const std::byte* tuples, std::size_t count, std::uint32_t* out) const {
    kernels::route_keys(route_rows_, tuples, layout_.tuple_bytes, layout_.key_offset, layout_.key_bytes, count,
                        partitions_, out);
  }

 private:
  const kernels::JoinTable::Layout layout_;
  const std::size_t partitions_;
  const kernels::RouteRows route_rows_;
};

// P_t: its tuples of `fragment` per partition, into `counts` (partitions entries).
void count(const RrjRank& rank, const kernels::JoinTable::Layout& layout, const Fragment& fragment,
           std::uint64_t* counts) {
  const ChunkRouter router(layout, rank.partitions);
  const auto* tuples = static_cast<const std::byte*>(fragment.tuples);
  std::uint32_t parts[kRouteChunk];
  for (std::size_t done = 0; done < fragment.count;) {
    const std::size_t n = std::min(kRouteChunk, fragment.count - done);
    router.route(tuples + done * layout.tuple_bytes, n, parts);
    for (std::size_t i = 0; i < n; ++i) ++counts[parts[i]];
    done += n;
  }
}

// P0: exchanges the counts, lays out the regions, allocates and publishes this rank's.
void lay_out(RrjRank& rank) {
  RankJoin& join = rank.join;
  const int me = join.node.rank();
  const std::size_t threads = static_cast<std::size_t>(join.spec.threads);
  std::ostringstream mine;
  for (int side = 0; side < kSides; ++side) {
    for (std::uint64_t c : rank.counts[side]) mine << c << ' ';
  }
  const std::vector<std::string> records = exchange(join, rank.ranks, "counts", mine.str());
  // all[r][side][t * partitions + p]
  std::vector<std::vector<std::vector<std::uint64_t>>> all(static_cast<std::size_t>(rank.ranks));
  for (int r = 0; r < rank.ranks; ++r) {
    std::istringstream in(records[static_cast<std::size_t>(r)]);
    all[r].resize(kSides);
    for (int side = 0; side < kSides; ++side) {
      all[r][side].resize(threads * rank.partitions);
      for (std::uint64_t& c : all[r][side]) in >> c;
    }
    if (!in) fail(join, Errc::protocol, "exchanging counts", "malformed tuple counts of rank " + std::to_string(r));
  }
  for (int side = 0; side < kSides; ++side) {
    rank.begin[side].assign(threads + 1, 0);
    for (int r = 0; r < rank.ranks; ++r) {
      std::uint64_t at = 0;
      for (std::size_t j = 0; j < threads; ++j) {
        const std::size_t p = static_cast<std::size_t>(r) * threads + j;
        if (r == me) rank.begin[side][j] = at;
        for (int s = 0; s < rank.ranks; ++s) {
          for (std::size_t t = 0; t < threads; ++t) {
            if (s == me) rank.offsets[side][t * rank.partitions + p] = at;
            at += all[s][side][t * rank.partitions + p];
          }
        }
      }
      if (r == me) rank.begin[side][threads] = at;
    }
    // Exactly what this rank receives (a region is never empty: at least one tuple's room).
    const std::size_t bytes = rank.begin[side][threads] * rank.width(side);
    rank.region[side] = fabric::MemoryRegion(join.node.fabric(), bytes > 0 ? bytes : rank.width(side));
  }
  for (int side = 0; side < kSides; ++side) {
    rank.descriptors[side] =
        exchange(join, rank.ranks, std::string(kSideName[side]) + "-region", rank.region[side].descriptor().serialize());
  }
}

// Where P_t writes one partition's tuples: the region's memory (this rank's own region, or a
// peer's mapped into this process), or the peer's region through an endpoint.
struct Destination {
  enum class Path { memory, put, am };
  Path path = Path::memory;
  std::byte* memory = nullptr;
  fabric::Endpoint* endpoint = nullptr;
  const fabric::RemoteMemory* remote = nullptr;
};

// Staging buffers per partition: one fills while the writes of the others complete (a put
// without a mapping completes later; a posted store and a memcpy at once).
constexpr int kStageBuffers = 4;

// One partition's staging: kStageBuffers buffers of whole tuples, used in turn, and where the
// next one goes.
struct Stage {
  std::uint64_t next = 0;  // tuple index in the destination region of the next buffer written
  std::size_t fill = 0;    // tuples in the filling buffer
  int filling = 0;         // 0 .. kStageBuffers-1
  fabric::Request pending[kStageBuffers];
};

// P_t's scatter of one relation: staging buffers per partition, written to their slices.
class Scatter {
 public:
  Scatter(RrjRank& rank, int side, std::vector<Destination> destinations, int thread)
      : rank_(rank),
        side_(side),
        width_(rank.width(side)),
        stage_tuples_(std::max<std::size_t>(1, kRrjStagingBytes / width_)),
        stage_words_((stage_tuples_ * width_ + 7) / 8),
        destinations_(std::move(destinations)),
        stages_(rank.partitions),
        buffers_(rank.partitions * kStageBuffers * stage_words_) {
    const std::size_t row = static_cast<std::size_t>(thread) * rank.partitions;
    for (std::size_t p = 0; p < rank.partitions; ++p) stages_[p].next = rank.offsets[side][row + p];
  }

  // Stages every tuple of `fragment` and writes what remains. Throws the join's error.
  void run(const Fragment& fragment) {
    const kernels::JoinTable::Layout& layout = side_ == 0 ? rank_.join.build_layout : rank_.join.probe_layout;
    const auto* tuples = static_cast<const std::byte*>(fragment.tuples);
    const std::size_t partitions = rank_.partitions;
    // Chunk by chunk: the partitions of the whole chunk first (ChunkRouter), then its tuples into
    // their staging buffers.
    const ChunkRouter router(layout, partitions);
    std::uint32_t parts[kRouteChunk];
    for (std::size_t done = 0; done < fragment.count;) {
      const std::size_t n = std::min(kRouteChunk, fragment.count - done);
      const std::byte* tuple = tuples + done * width_;
      router.route(tuple, n, parts);
      switch (width_) {
        case 8: stage_chunk<8>(tuple, n, parts); break;
        case 16: stage_chunk<16>(tuple, n, parts); break;
        case 32: stage_chunk<32>(tuple, n, parts); break;
        case 64: stage_chunk<64>(tuple, n, parts); break;
        default: stage_chunk<0>(tuple, n, parts); break;
      }
      done += n;
    }
    for (std::size_t p = 0; p < partitions; ++p) {
      if (stages_[p].fill > 0) write(p);
    }
    for (std::size_t p = 0; p < partitions; ++p) {
      for (fabric::Request& request : stages_[p].pending) check(request.wait(), p);
    }
  }

 private:
  // The `count` tuples at `tuples` into the staging buffers of their partitions `parts`; Width:
  // the tuple width where it is a common one (a copy of compile-time width), else 0.
  template <std::size_t Width>
  void stage_chunk(const std::byte* tuples, std::size_t count, const std::uint32_t* parts) {
    const std::size_t width = Width != 0 ? Width : width_;
    for (std::size_t i = 0; i < count; ++i, tuples += width) {
      const std::size_t p = parts[i];
      Stage& stage = stages_[p];
      std::memcpy(buffer(p, stage.filling) + stage.fill * width, tuples, width);
      if (++stage.fill == stage_tuples_) [[unlikely]] write(p);
    }
  }

  std::byte* buffer(std::size_t p, int which) {
    return reinterpret_cast<std::byte*>(buffers_.data() + (p * kStageBuffers + static_cast<std::size_t>(which)) * stage_words_);
  }

  // Writes partition p's filling buffer to its slice, then waits until the next buffer is free.
  [[gnu::noinline]] void write(std::size_t p) {
    Stage& stage = stages_[p];
    const Destination& to = destinations_[p / static_cast<std::size_t>(rank_.join.spec.threads)];
    const std::byte* data = buffer(p, stage.filling);
    const std::size_t bytes = stage.fill * width_;
    const std::size_t offset = stage.next * width_;
    switch (to.path) {
      case Destination::Path::memory: std::memcpy(to.memory + offset, data, bytes); break;
      case Destination::Path::put:
        stage.pending[stage.filling] = to.endpoint->put_async(data, bytes, *to.remote, offset);
        break;
      case Destination::Path::am:  // posted: the buffer is free again at once; the flush confirms it
        check(to.endpoint->post_words(reinterpret_cast<const std::uint64_t*>(data), bytes / 8, *to.remote, offset), p);
        break;
    }
    stage.next += stage.fill;
    stage.fill = 0;
    stage.filling = stage.filling + 1 == kStageBuffers ? 0 : stage.filling + 1;
    check(stage.pending[stage.filling].wait(), p);
  }

  void check(const Status& status, std::size_t p) const {
    if (status) [[likely]] return;
    const int to = static_cast<int>(p / static_cast<std::size_t>(rank_.join.spec.threads));
    fail(rank_.join, status.code(),
         "writing into the " + std::string(kSideName[side_]) + " region of rank " + std::to_string(to),
         status.message());
  }

  RrjRank& rank_;
  const int side_;
  const std::size_t width_;
  const std::size_t stage_tuples_;
  const std::size_t stage_words_;
  const std::vector<Destination> destinations_;  // per rank
  std::vector<Stage> stages_;                    // per partition
  std::vector<std::uint64_t> buffers_;           // per partition kStageBuffers of stage_words_ words
};

void rrj_partition(RrjRank& rank, int thread) {
  RankJoin& join = rank.join;
  const int me = join.node.rank();
  // The open: a worker of this thread's own and an endpoint to every other rank; the join's
  // record must exist (create_join).
  fabric::Worker worker(join.node.fabric(), join.worker_name(thread));
  std::vector<fabric::Endpoint> endpoints(static_cast<std::size_t>(rank.ranks));
  try {
    join.node.wait_for(record_prefix(join.spec, "join") + "spec", join.options.open_timeout);
  } catch (const Error& e) {
    fail(join, e.code(), "opening", std::string("the join was not created (ops::create_join): ") + e.what());
  }
  // connect() completes each endpoint's connection handshake, in the open: a rank that dies
  // later leaves no handshake message pending at the others (fabric::Worker::Handshake).
  for (int r = 0; r < rank.ranks; ++r) {
    if (r == me) continue;
    try {
      endpoints[static_cast<std::size_t>(r)] = join.node.connect(worker, r);
    } catch (const Error& e) {
      fail(join, e.code(), "connecting to rank " + std::to_string(r), e.what());
    }
  }
  if (!join.opened()) return;

  const Fragment* fragments[kSides] = {&join.build[static_cast<std::size_t>(thread)],
                                       &join.probe[static_cast<std::size_t>(thread)]};
  const kernels::JoinTable::Layout* layouts[kSides] = {&join.build_layout, &join.probe_layout};
  for (int side = 0; side < kSides; ++side) {
    count(rank, *layouts[side], *fragments[side],
          rank.counts[side].data() + static_cast<std::size_t>(thread) * rank.partitions);
  }
  rank.counted.count_down();
  if (thread == 0) {
    if (!rank.counted.wait()) return;
    lay_out(rank);
    rank.laid_out.count_down();
  } else if (!rank.laid_out.wait()) {
    return;
  }

  // Setting data_path=rma: emulated puts where the transport has no native RMA (the path flows
  // avoid, for comparison; see the top of this file).
  const bool emulated_puts = config::get_string("data_path") == "rma";
  std::vector<fabric::RemoteMemory> remotes(static_cast<std::size_t>(kSides * rank.ranks));
  for (int side = 0; side < kSides; ++side) {
    std::vector<Destination> destinations(static_cast<std::size_t>(rank.ranks));
    for (int r = 0; r < rank.ranks; ++r) {
      Destination& to = destinations[static_cast<std::size_t>(r)];
      if (r == me) {
        to.memory = static_cast<std::byte*>(rank.region[side].data());
        continue;
      }
      fabric::Endpoint& endpoint = endpoints[static_cast<std::size_t>(r)];
      fabric::RemoteMemory& remote = remotes[static_cast<std::size_t>(side * rank.ranks + r)];
      try {
        remote = endpoint.attach(fabric::RegionDescriptor::parse(rank.descriptors[side][static_cast<std::size_t>(r)]));
      } catch (const Error& e) {
        fail(join, e.code(), "attaching to the " + std::string(kSideName[side]) + " region of rank " + std::to_string(r),
             e.what());
      }
      to.endpoint = &endpoint;
      to.remote = &remote;
      if (remote.mapped() != nullptr) {
        to.memory = static_cast<std::byte*>(remote.mapped());
      } else if (!endpoint.rma_native() && !emulated_puts && rank.width(side) % 8 == 0) {
        to.path = Destination::Path::am;
      } else {
        to.path = Destination::Path::put;
      }
    }
    Scatter(rank, side, std::move(destinations), thread).run(*fragments[side]);
  }
  for (int r = 0; r < rank.ranks; ++r) {
    if (r == me) continue;
    if (Status s = endpoints[static_cast<std::size_t>(r)].flush(); !s) {
      fail(join, s.code(), "completing the writes into the regions of rank " + std::to_string(r), s.message());
    }
  }
  // Stores into mapped regions are visible to their rank once it learns of them through the
  // registry below (a round trip over sockets); the writes of the other paths are complete.
  JoinResult part;
  part.shipped_probe_tuples = fragments[1]->count;
  join.add(part);
  rank.written.count_down();
  if (thread == 0) {
    if (!rank.written.wait()) return;
    exchange(join, rank.ranks, "written", "1");
    rank.complete.count_down();
  }
}

void rrj_join(RrjRank& rank, int thread) {
  RankJoin& join = rank.join;
  if (!join.opened()) return;
  if (!rank.complete.wait()) return;
  // Peers' stores into the regions are complete (the exchange said so); this orders the thread
  // after the progress thread that applied them (tcp), in the memory model's terms too.
  join.node.fabric().acquire_applied_stores();
  JoinResult part;
  part.build_seconds = join.since_start();
  const std::size_t j = static_cast<std::size_t>(thread);
  const std::byte* regions[kSides];
  std::uint64_t counts[kSides];
  for (int side = 0; side < kSides; ++side) {
    regions[side] = static_cast<const std::byte*>(rank.region[side].data()) + rank.begin[side][j] * rank.width(side);
    counts[side] = rank.begin[side][j + 1] - rank.begin[side][j];
  }
  join_partition(join, regions[0], counts[0], regions[1], counts[1], thread, part);
  join.add(part);
}

class RrjThreads : public JoinThreads {
 public:
  explicit RrjThreads(RankJoin& join) : rank_(join) {}
  void start(ThreadGroup& group) override {
    for (int t = 0; t < rank_.join.spec.threads; ++t) group.start([this, t] { rrj_join(rank_, t); });
    for (int t = 0; t < rank_.join.spec.threads; ++t) group.start([this, t] { rrj_partition(rank_, t); });
  }
  void abandon() override { rank_.abandon(); }

 private:
  RrjRank rank_;
};

}  // namespace

std::unique_ptr<JoinThreads> rrj_threads(RankJoin& join) { return std::make_unique<RrjThreads>(join); }

void create_rrj(cluster::Node& node, const JoinSpec& spec) {
  try {
    node.registry().publish(record_prefix(spec, "join") + "spec", std::to_string(join_ranks(spec, node.size())));
  } catch (const Error& e) {
    if (e.code() == Errc::already_exists) {
      throw Error(Errc::already_exists, "join '" + spec.name + "' already exists");
    }
    throw;
  }
}

}  // namespace dfi::ops::detail
