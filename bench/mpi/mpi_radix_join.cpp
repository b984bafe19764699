// The MPI baseline of the join scenario: a distributed radix hash join as Barthels et al.
// ("Distributed join algorithms on thousands of cores", VLDB 2017) build it, one process per
// slice of the input, on the same generated data as `dfi join` (src/tools/join_data.hpp).
//
//   mpirun -np 4 mpi_radix_join --build-tuples N --probe-tuples M [--tuple-bytes 16]
//       [--selectivity 1] [--duplicates 1] [--seed 1] [--exchange put|alltoallv]
//
// Per relation (build, then probe), timed from a barrier after data generation:
//   1. histogram: tuples per destination process (the partition of a tuple is
//      dfi::kernels::route(key, processes), the same function a DFI key-hash flow routes by, so
//      both joins give every process the same partition);
//   2. MPI_Alltoall of the counts: every process learns what it will receive and from whom;
//   3. network partitioning:
//      put (Barthels): every process exposes a window for exactly what it receives (MPI_Win_allocate
//        sized from the histogram) and hands each sender its exclusive offset in it (MPI_Alltoall of
//        the prefix sums); senders scatter tuples into a 64 KiB write-combine buffer per destination
//        and MPI_Put full buffers (passive target, MPI_Win_lock_all; MPI_Win_flush_local before a
//        buffer is refilled); MPI_Win_unlock_all and an MPI_Barrier end the phase;
//      alltoallv: scatter into one send buffer ordered by destination, one MPI_Alltoallv;
//   4. build a bucket-chained hash table over the received build tuples (heads + next arrays,
//      as Balkesen's and Barthels' code), then probe with every received probe tuple.
// The local join is one table per process, as each DFI join thread builds one table.
// Rank 0 prints one JSON line: seconds (slowest process), matches and checksum (summed; the
// checksum is the one of dfi/kernels/hash.hpp), phase times.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/tools/join_data.hpp"
#include "common.hpp"

namespace {

using dfi::kernels::fold_tuple;
using dfi::kernels::load_key;
using dfi::kernels::mix64;
using dfi::kernels::pair_checksum;
using dfi::kernels::route;

constexpr std::size_t kCombineBytes = 64 * 1024;  // write-combine buffer per destination

struct Options {
  dfi::tools::JoinDataShape shape;
  std::string exchange = "put";
};

// Partitions `tuples` by destination and moves them; returns what this process received.
std::vector<std::byte> exchange(const std::vector<std::byte>& tuples, std::size_t width, int processes,
                                const std::string& mode) {
  const std::size_t n = tuples.size() / width;
  std::vector<int> dest(n);
  std::vector<std::uint64_t> send_counts(processes, 0), recv_counts(processes, 0);
  for (std::size_t i = 0; i < n; ++i) {
    dest[i] = static_cast<int>(route(load_key(tuples.data() + i * width, 8), processes));
    ++send_counts[dest[i]];
  }
  MPI_Alltoall(send_counts.data(), 1, MPI_UINT64_T, recv_counts.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  std::uint64_t total = 0;
  std::vector<std::uint64_t> recv_offsets(processes);
  for (int p = 0; p < processes; ++p) {
    recv_offsets[p] = total;
    total += recv_counts[p];
  }
  std::vector<std::byte> received;
  if (mode == "alltoallv") {
    std::vector<std::byte> send(tuples.size());
    std::vector<std::uint64_t> fill(processes, 0);
    std::uint64_t at = 0;
    for (int p = 0; p < processes; ++p) {
      fill[p] = at;
      at += send_counts[p];
    }
    std::vector<int> scount(processes), sdispl(processes), rcount(processes), rdispl(processes);
    for (int p = 0; p < processes; ++p) {
      scount[p] = static_cast<int>(send_counts[p] * width);
      sdispl[p] = static_cast<int>(fill[p] * width);
      rcount[p] = static_cast<int>(recv_counts[p] * width);
      rdispl[p] = static_cast<int>(recv_offsets[p] * width);
    }
    for (std::size_t i = 0; i < n; ++i) {
      std::memcpy(send.data() + fill[dest[i]]++ * width, tuples.data() + i * width, width);
    }
    received.resize(total * width);
    MPI_Alltoallv(send.data(), scount.data(), sdispl.data(), MPI_BYTE, received.data(), rcount.data(),
                  rdispl.data(), MPI_BYTE, MPI_COMM_WORLD);
    return received;
  }
  // put: the window holds exactly what this process receives; each sender learns its offset.
  std::vector<std::uint64_t> my_offsets(processes);
  MPI_Alltoall(recv_offsets.data(), 1, MPI_UINT64_T, my_offsets.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  std::byte* base = nullptr;
  MPI_Win window;
  MPI_Win_allocate(static_cast<MPI_Aint>(std::max<std::uint64_t>(total * width, 1)), 1, MPI_INFO_NULL,
                   MPI_COMM_WORLD, &base, &window);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, window);
  const std::size_t per_buffer = std::max<std::size_t>(1, kCombineBytes / width);
  std::vector<std::byte> combine(static_cast<std::size_t>(processes) * per_buffer * width);
  std::vector<std::size_t> filled(processes, 0);
  std::vector<std::uint64_t> written(processes, 0);  // tuples already put to each destination
  auto put = [&](int p) {
    if (filled[p] == 0) return;
    MPI_Put(combine.data() + static_cast<std::size_t>(p) * per_buffer * width, static_cast<int>(filled[p] * width),
            MPI_BYTE, p, static_cast<MPI_Aint>((my_offsets[p] + written[p]) * width),
            static_cast<int>(filled[p] * width), MPI_BYTE, window);
    MPI_Win_flush_local(p, window);  // the buffer may be refilled
    written[p] += filled[p];
    filled[p] = 0;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const int p = dest[i];
    std::memcpy(combine.data() + (static_cast<std::size_t>(p) * per_buffer + filled[p]) * width,
                tuples.data() + i * width, width);
    if (++filled[p] == per_buffer) put(p);
  }
  for (int p = 0; p < processes; ++p) put(p);
  MPI_Win_unlock_all(window);
  MPI_Barrier(MPI_COMM_WORLD);  // every process's partition is complete
  received.assign(base, base + total * width);
  MPI_Win_free(&window);
  return received;
}

struct Joined {
  std::uint64_t matches = 0;
  std::uint64_t checksum = 0;
};

// Bucket-chained hash table over `build`, probed with every tuple of `probe`.
Joined local_join(const std::vector<std::byte>& build, const std::vector<std::byte>& probe, std::size_t width) {
  const std::size_t n = build.size() / width;
  std::size_t buckets = 1;
  while (buckets < n) buckets <<= 1;
  const std::uint64_t mask = buckets - 1;
  std::vector<std::uint32_t> heads(buckets, 0), next(n + 1, 0);  // 1-based tuple indices, 0 = end
  std::vector<std::uint64_t> keys(n + 1), folds(n + 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::byte* t = build.data() + i * width;
    keys[i + 1] = load_key(t, 8);
    folds[i + 1] = fold_tuple(t, width);
    const std::size_t b = mix64(keys[i + 1]) & mask;
    next[i + 1] = heads[b];
    heads[b] = static_cast<std::uint32_t>(i + 1);
  }
  Joined out;
  const std::size_t m = probe.size() / width;
  for (std::size_t i = 0; i < m; ++i) {
    const std::byte* t = probe.data() + i * width;
    const std::uint64_t key = load_key(t, 8);
    std::uint64_t probe_fold = 0;
    bool folded = false;
    for (std::uint32_t at = heads[mix64(key) & mask]; at != 0; at = next[at]) {
      if (keys[at] != key) continue;
      if (!folded) {
        probe_fold = fold_tuple(t, width);
        folded = true;
      }
      ++out.matches;
      out.checksum += pair_checksum(folds[at], probe_fold);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, processes = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  const std::string program = "mpi_radix_join";
  Options o;
  try {
    dfi_mpi::Args args(argc, argv);
    o.shape.build_tuples = static_cast<std::uint64_t>(args.get_int("build-tuples", 1000000));
    o.shape.probe_tuples = static_cast<std::uint64_t>(args.get_int("probe-tuples", 1000000));
    o.shape.tuple_bytes = static_cast<std::size_t>(args.get_int("tuple-bytes", 16));
    o.shape.selectivity = args.get_double("selectivity", 1.0);
    o.shape.duplicates = static_cast<std::uint64_t>(args.get_int("duplicates", 1));
    o.shape.seed = static_cast<std::uint64_t>(args.get_int("seed", 1));
    o.exchange = args.get("exchange", "put");
    if (o.exchange != "put" && o.exchange != "alltoallv") throw std::invalid_argument("--exchange must be put or alltoallv");
    if (o.shape.tuple_bytes < 16 || o.shape.tuple_bytes % 8 != 0) throw std::invalid_argument("--tuple-bytes: multiple of 8, >= 16");
    if (!(o.shape.selectivity > 0 && o.shape.selectivity <= 1)) throw std::invalid_argument("--selectivity must be in (0, 1]");
    if (o.shape.duplicates < 1) throw std::invalid_argument("--duplicates must be >= 1");
  } catch (const std::exception& e) {
    dfi_mpi::fail(program, e.what());
  }
  const std::size_t width = o.shape.tuple_bytes;
  const dfi::tools::JoinData data(o.shape);
  const std::vector<std::byte> build = data.build(rank, processes);
  const std::vector<std::byte> probe = data.probe(rank, processes);

  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  const std::vector<std::byte> my_build = exchange(build, width, processes, o.exchange);
  const std::vector<std::byte> my_probe = exchange(probe, width, processes, o.exchange);
  const double partitioned = MPI_Wtime();
  const Joined joined = local_join(my_build, my_probe, width);
  const double end = MPI_Wtime();

  double seconds = end - start, partition_seconds = partitioned - start;
  double max_seconds = 0, max_partition = 0;
  std::uint64_t local[3] = {joined.matches, joined.checksum, my_build.size() / width};
  std::uint64_t sums[3] = {0, 0, 0};
  MPI_Reduce(&seconds, &max_seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&partition_seconds, &max_partition, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(local, sums, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf(
        "{\"program\": \"mpi_radix_join\", \"processes\": %d, \"exchange\": \"%s\", \"build_tuples\": %llu, "
        "\"probe_tuples\": %llu, \"tuple_bytes\": %zu, \"seconds\": %.6f, \"partition_seconds\": %.6f, "
        "\"matches\": %llu, \"checksum\": \"0x%016llx\", \"received_build_tuples\": %llu}\n",
        processes, o.exchange.c_str(), static_cast<unsigned long long>(o.shape.build_tuples),
        static_cast<unsigned long long>(o.shape.probe_tuples), width, max_seconds, max_partition,
        static_cast<unsigned long long>(sums[0]), static_cast<unsigned long long>(sums[1]),
        static_cast<unsigned long long>(sums[2]));
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
