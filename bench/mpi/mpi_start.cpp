// The start-up baseline of the `scale` scenario: MPI_Init, then a first MPI_Alltoall of
// `--tuples-per-target` tuples of `--tuple-bytes` B to every rank (what a DFI N:N flow's open and
// first push do), checked. Rank 0 prints one JSON line: the slowest rank's init and all-to-all
// times. The driver times the whole mpirun (process start, init, all-to-all, finalize) as well.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "common.hpp"

namespace {
constexpr const char* kProgram = "mpi_start";
}

int main(int argc, char** argv) {
  const double before_init = MPI_Wtime();  // MPI_Wtime may be called before MPI_Init
  MPI_Init(&argc, &argv);
  const double init = MPI_Wtime() - before_init;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  std::size_t tuple_bytes = 16, tuples = 64;
  try {
    dfi_mpi::Args args(argc, argv);
    tuple_bytes = static_cast<std::size_t>(args.get_int("tuple-bytes", 16));
    tuples = static_cast<std::size_t>(args.get_int("tuples-per-target", 64));
  } catch (const std::exception& e) {
    dfi_mpi::fail(kProgram, e.what());
  }
  if (tuple_bytes < 8) dfi_mpi::fail(kProgram, "--tuple-bytes must be at least 8");

  // Tuple i to rank t carries key (rank << 40 | t << 20 | i) in its first 8 bytes.
  const std::size_t block = tuples * tuple_bytes;
  std::vector<unsigned char> out(block * static_cast<std::size_t>(ranks)), in(out.size());
  for (int t = 0; t < ranks; ++t) {
    for (std::size_t i = 0; i < tuples; ++i) {
      const std::uint64_t key = (std::uint64_t(rank) << 40) | (std::uint64_t(t) << 20) | i;
      std::memcpy(out.data() + t * block + i * tuple_bytes, &key, sizeof key);
    }
  }
  const double before_alltoall = MPI_Wtime();
  MPI_Alltoall(out.data(), static_cast<int>(block), MPI_BYTE, in.data(), static_cast<int>(block), MPI_BYTE,
               MPI_COMM_WORLD);
  const double alltoall = MPI_Wtime() - before_alltoall;
  std::uint64_t wrong = 0;
  for (int s = 0; s < ranks; ++s) {
    for (std::size_t i = 0; i < tuples; ++i) {
      std::uint64_t key = 0;
      std::memcpy(&key, in.data() + s * block + i * tuple_bytes, sizeof key);
      if (key != ((std::uint64_t(s) << 40) | (std::uint64_t(rank) << 20) | i)) ++wrong;
    }
  }
  double mine[2] = {init, alltoall}, slowest[2] = {0, 0};
  MPI_Reduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  std::uint64_t wrong_total = 0;
  MPI_Reduce(&wrong, &wrong_total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("{\"program\":\"%s\",\"ranks\":%d,\"tuple_bytes\":%zu,\"tuples_per_target\":%zu,"
                "\"init_seconds\":%.6f,\"alltoall_seconds\":%.6f,\"ok\":%s}\n",
                kProgram, ranks, tuple_bytes, tuples, slowest[0], slowest[1], wrong_total == 0 ? "true" : "false");
    std::fflush(stdout);
    if (wrong_total != 0) std::fprintf(stderr, "%s: %llu tuples arrived wrong\n", kProgram, (unsigned long long)wrong_total);
  }
  MPI_Finalize();
  return wrong_total == 0 || rank != 0 ? 0 : 1;
}
