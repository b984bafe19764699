// OpenMPI baseline for 003 Fig 10: a fixed table sent tuple-at-a-time with MPI_Send/MPI_Recv.
//
//   mpirun -np 2  mpi_p2p --mode single    --tuple-bytes 16 --table-bytes 67108864
//   mpirun -np 2  mpi_p2p --mode threads   --threads 4 ...   (MPI_THREAD_MULTIPLE, tag per thread)
//   mpirun -np 2K mpi_p2p --mode processes ...              (ranks 0..K-1 send to K..2K-1)
//
// Every tuple is one MPI_Send of tuple-bytes bytes, received straight into its slot of the
// receiver's table. The first 8 bytes of each tuple carry its index; the receiver checks them.
// Runtime = the slowest participant from a common barrier to its last tuple.
// Output (rank 0, one line): {"program":"mpi_p2p","mode":..,"ranks":..,"threads":..,
//   "tuple_bytes":..,"table_bytes":..,"tuples":..,"seconds":..,"gbps":..,"mtuples_per_s":..,"ok":..}
#include <algorithm>
#include <thread>
#include <vector>

#include "common.hpp"

namespace {

constexpr const char* kProgram = "mpi_p2p";

struct Share {
  std::uint64_t first = 0;  // first tuple index
  std::uint64_t count = 0;
};

Share share_of(std::uint64_t tuples, int parts, int part) {
  const std::uint64_t base = tuples / parts, extra = tuples % parts;
  Share s;
  s.first = part * base + std::min<std::uint64_t>(part, extra);
  s.count = base + (static_cast<std::uint64_t>(part) < extra ? 1 : 0);
  return s;
}

// Sends or receives one share; returns false if a received tuple carries the wrong index.
// `table` holds the pair's tuples from global index `base` on; `share` is in global indices.
bool transfer(bool sender, int peer, int tag, std::vector<char>& table, std::uint64_t base,
              std::size_t tuple_bytes, Share share) {
  bool ok = true;
  for (std::uint64_t i = share.first; i < share.first + share.count; ++i) {
    char* slot = table.data() + (i - base) * tuple_bytes;
    if (sender) {
      MPI_Send(slot, static_cast<int>(tuple_bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD);
    } else {
      MPI_Recv(slot, static_cast<int>(tuple_bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      std::uint64_t index;
      std::memcpy(&index, slot, sizeof index);
      ok = ok && index == i;
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  std::string mode;
  std::size_t tuple_bytes = 0, table_bytes = 0;
  int threads = 1;
  try {
    dfi_mpi::Args args(argc, argv);
    mode = args.get("mode", "single");
    tuple_bytes = static_cast<std::size_t>(args.get_int("tuple-bytes", 16));
    table_bytes = static_cast<std::size_t>(args.get_int("table-bytes", 64ll << 20));
    threads = static_cast<int>(args.get_int("threads", 1));
  } catch (const std::exception& e) {
    dfi_mpi::fail(kProgram, e.what());
  }
  if (mode != "single" && mode != "threads" && mode != "processes") {
    dfi_mpi::fail(kProgram, "--mode must be single, threads or processes");
  }
  if (tuple_bytes < 8) dfi_mpi::fail(kProgram, "--tuple-bytes must be at least 8");
  if (mode == "single") threads = 1;
  if (mode == "processes") {
    if (size % 2 != 0) dfi_mpi::fail(kProgram, "--mode processes needs an even number of ranks");
    threads = 1;
  } else if (size != 2) {
    dfi_mpi::fail(kProgram, "--mode " + mode + " needs exactly 2 ranks");
  }
  if (mode == "threads" && provided < MPI_THREAD_MULTIPLE) {
    dfi_mpi::fail(kProgram, "this MPI does not provide MPI_THREAD_MULTIPLE");
  }
  if (threads < 1) dfi_mpi::fail(kProgram, "--threads must be >= 1");

  const int pairs = mode == "processes" ? size / 2 : 1;
  const bool sender = rank < pairs;
  const int peer = sender ? rank + pairs : rank - pairs;
  const int pair = sender ? rank : rank - pairs;
  const std::uint64_t tuples = table_bytes / tuple_bytes;
  // Each pair moves its share of the table; a tuple's first 8 bytes are its global index.
  const Share pair_share = share_of(tuples, pairs, pair);
  std::vector<char> table(pair_share.count * tuple_bytes, 0);
  if (sender) {
    for (std::uint64_t i = 0; i < pair_share.count; ++i) {
      const std::uint64_t index = pair_share.first + i;
      std::memcpy(table.data() + i * tuple_bytes, &index, sizeof index);
    }
  }

  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  bool ok = true;
  if (threads == 1) {
    ok = transfer(sender, peer, 0, table, pair_share.first, tuple_bytes, pair_share);
  } else {
    std::vector<std::thread> workers;
    std::vector<char> thread_ok(threads, 1);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        Share s = share_of(pair_share.count, threads, t);
        s.first += pair_share.first;
        thread_ok[t] = transfer(sender, peer, t, table, pair_share.first, tuple_bytes, s) ? 1 : 0;
      });
    }
    for (std::thread& w : workers) w.join();
    ok = std::all_of(thread_ok.begin(), thread_ok.end(), [](char c) { return c != 0; });
  }
  const double mine = MPI_Wtime() - start;

  double seconds = 0;
  MPI_Reduce(&mine, &seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  int ok_int = ok ? 1 : 0, all_ok = 0;
  MPI_Reduce(&ok_int, &all_ok, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double bytes = static_cast<double>(tuples * tuple_bytes);
    std::printf(
        "{\"program\":\"%s\",\"mode\":\"%s\",\"ranks\":%d,\"threads\":%d,\"tuple_bytes\":%zu,"
        "\"table_bytes\":%.0f,\"tuples\":%llu,\"seconds\":%.6f,\"gbps\":%.6f,\"mtuples_per_s\":%."
        "6f,"
        "\"thread_level\":%d,\"ok\":%s}\n",
        kProgram, mode.c_str(), size, threads, tuple_bytes, bytes,
        static_cast<unsigned long long>(tuples), seconds, bytes / seconds / 1e9,
        static_cast<double>(tuples) / seconds / 1e6, provided, all_ok ? "true" : "false");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return all_ok || rank != 0 ? 0 : 1;
}
