// OpenMPI baseline for 003 Fig 11-12: an N:N shuffle of each rank's table by key.
//
//   mpirun -np 4 mpi_alltoall --mode pipelined --tuple-bytes 64 --tuples-per-rank 200000
//   mpirun -np 4 mpi_alltoall --mode batched   --tuple-bytes 64 --tuples-per-rank 200000
//                             --straggler 3 --slowdown 0.5
//
// Each rank owns tuples-per-rank tuples; the first 8 bytes are a random key, the target rank is
// (key >> 32) % ranks.
//  - pipelined (Fig 11): the rank scans its table and fills one slot of slot-tuples tuples per
//    target; as soon as a slot is full (or the table is done) every rank calls MPI_Alltoall with
//    a fixed block per target (8-byte header: tuple count and a done flag, then the slot). With
//    slot-tuples = 1 that is the paper's mini-batch of about one tuple per target. Rounds
//    continue until every rank is done.
//  - batched (Fig 12): the rank partitions its whole table by target (histogram + scatter), then
//    exchanges counts with MPI_Alltoall and the data with one MPI_Alltoallv.
// --straggler R --slowdown s: rank R computes at s times the speed (every compute phase is
// stretched to 1/s of its time by spinning, see common.hpp); -1 = nobody straggles.
// Receivers check that every tuple belongs to them and that the key sums match globally.
// Runtime = the slowest rank from a common barrier until it has received all its tuples.
// Output (rank 0, one line): {"program":"mpi_alltoall","mode":..,"ranks":..,"tuple_bytes":..,
//   "tuples_per_rank":..,"slot_tuples":..,"rounds":..,"straggler":..,"slowdown":..,
//   "seconds":..,"gbps":..,"ok":..}
#include <algorithm>
#include <numeric>
#include <vector>

#include "common.hpp"

namespace {

constexpr const char* kProgram = "mpi_alltoall";
constexpr std::uint64_t kDoneFlag = 1ull << 63;

struct Table {
  std::size_t tuple_bytes = 0;
  std::size_t tuples = 0;
  std::vector<char> data;
  const char* tuple(std::size_t i) const { return data.data() + i * tuple_bytes; }
};

std::uint64_t key_of(const char* tuple) {
  std::uint64_t key;
  std::memcpy(&key, tuple, sizeof key);
  return key;
}

int target_of(std::uint64_t key, int ranks) {
  return static_cast<int>((key >> 32) % static_cast<std::uint64_t>(ranks));
}

Table make_table(int rank, std::size_t tuples, std::size_t tuple_bytes, std::uint64_t seed) {
  Table t{tuple_bytes, tuples, std::vector<char>(tuples * tuple_bytes)};
  for (std::size_t i = 0; i < tuples; ++i) {
    const std::uint64_t key =
        dfi_mpi::splitmix64(seed ^ (static_cast<std::uint64_t>(rank) << 40) ^ i);
    char* p = t.data.data() + i * tuple_bytes;
    std::memset(p, static_cast<int>(key & 0xff), tuple_bytes);
    std::memcpy(p, &key, sizeof key);
  }
  return t;
}

struct Received {
  std::uint64_t tuples = 0;
  std::uint64_t key_sum = 0;
  std::uint64_t misrouted = 0;
  std::vector<char> data;  // the receiving side's partition, as a consumer would read it
};

void consume(Received& r, const char* tuples, std::size_t count, std::size_t tuple_bytes, int me,
             int ranks) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t key = key_of(tuples + i * tuple_bytes);
    r.key_sum += key;
    if (target_of(key, ranks) != me) ++r.misrouted;
  }
  r.data.insert(r.data.end(), tuples, tuples + count * tuple_bytes);
  r.tuples += count;
}

// Mini-batches through MPI_Alltoall; returns the number of rounds.
std::uint64_t pipelined(const Table& table, std::size_t slot_tuples, int me, int ranks,
                        dfi_mpi::Straggle& straggle, Received& received) {
  const std::size_t block = 8 + slot_tuples * table.tuple_bytes;
  std::vector<char> send(block * ranks), recv(block * ranks);
  std::vector<std::size_t> fill(ranks);
  std::vector<char> source_done(ranks, 0);
  std::size_t cursor = 0;
  std::uint64_t rounds = 0;
  for (;;) {
    straggle.begin();
    std::fill(fill.begin(), fill.end(), 0);
    while (cursor < table.tuples) {
      const char* tuple = table.tuple(cursor);
      const int target = target_of(key_of(tuple), ranks);
      if (fill[target] == slot_tuples) break;  // slot full: ship this round
      std::memcpy(send.data() + target * block + 8 + fill[target] * table.tuple_bytes, tuple,
                  table.tuple_bytes);
      ++fill[target];
      ++cursor;
    }
    const bool done = cursor == table.tuples;
    for (int t = 0; t < ranks; ++t) {
      const std::uint64_t header = fill[t] | (done ? kDoneFlag : 0);
      std::memcpy(send.data() + t * block, &header, sizeof header);
    }
    straggle.end();
    MPI_Alltoall(send.data(), static_cast<int>(block), MPI_BYTE, recv.data(),
                 static_cast<int>(block), MPI_BYTE, MPI_COMM_WORLD);
    ++rounds;
    straggle.begin();
    bool all_done = true;
    for (int s = 0; s < ranks; ++s) {
      std::uint64_t header;
      std::memcpy(&header, recv.data() + s * block, sizeof header);
      consume(received, recv.data() + s * block + 8, header & ~kDoneFlag, table.tuple_bytes, me,
              ranks);
      all_done = all_done && (header & kDoneFlag) != 0;
    }
    straggle.end();
    if (all_done) return rounds;
  }
}

// Partition everything, then one MPI_Alltoallv.
void batched(const Table& table, int me, int ranks, dfi_mpi::Straggle& straggle,
             Received& received) {
  straggle.begin();
  std::vector<int> send_counts(ranks, 0), recv_counts(ranks), send_displs(ranks),
      recv_displs(ranks);
  for (std::size_t i = 0; i < table.tuples; ++i)
    ++send_counts[target_of(key_of(table.tuple(i)), ranks)];
  std::exclusive_scan(send_counts.begin(), send_counts.end(), send_displs.begin(), 0);
  std::vector<char> partitioned(table.data.size());
  std::vector<int> next = send_displs;
  for (std::size_t i = 0; i < table.tuples; ++i) {
    const char* tuple = table.tuple(i);
    const int target = target_of(key_of(tuple), ranks);
    std::memcpy(partitioned.data() + static_cast<std::size_t>(next[target]++) * table.tuple_bytes,
                tuple, table.tuple_bytes);
  }
  straggle.end();
  MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::exclusive_scan(recv_counts.begin(), recv_counts.end(), recv_displs.begin(), 0);
  const int total = std::accumulate(recv_counts.begin(), recv_counts.end(), 0);
  MPI_Datatype tuple_type;
  MPI_Type_contiguous(static_cast<int>(table.tuple_bytes), MPI_BYTE, &tuple_type);
  MPI_Type_commit(&tuple_type);
  std::vector<char> incoming(static_cast<std::size_t>(total) * table.tuple_bytes);
  MPI_Alltoallv(partitioned.data(), send_counts.data(), send_displs.data(), tuple_type,
                incoming.data(), recv_counts.data(), recv_displs.data(), tuple_type,
                MPI_COMM_WORLD);
  MPI_Type_free(&tuple_type);
  straggle.begin();
  consume(received, incoming.data(), static_cast<std::size_t>(total), table.tuple_bytes, me, ranks);
  straggle.end();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  std::string mode;
  std::size_t tuple_bytes = 0, tuples = 0, slot_tuples = 1;
  int straggler = -1;
  double slowdown = 1.0;
  std::uint64_t seed = 0;
  try {
    dfi_mpi::Args args(argc, argv);
    mode = args.get("mode", "pipelined");
    tuple_bytes = static_cast<std::size_t>(args.get_int("tuple-bytes", 64));
    tuples = static_cast<std::size_t>(args.get_int("tuples-per-rank", 100000));
    slot_tuples = static_cast<std::size_t>(args.get_int("slot-tuples", 1));
    straggler = static_cast<int>(args.get_int("straggler", -1));
    slowdown = args.get_double("slowdown", 1.0);
    seed = static_cast<std::uint64_t>(args.get_int("seed", 42));
  } catch (const std::exception& e) {
    dfi_mpi::fail(kProgram, e.what());
  }
  if (mode != "pipelined" && mode != "batched")
    dfi_mpi::fail(kProgram, "--mode must be pipelined or batched");
  if (tuple_bytes < 8) dfi_mpi::fail(kProgram, "--tuple-bytes must be at least 8");
  if (slot_tuples < 1) dfi_mpi::fail(kProgram, "--slot-tuples must be >= 1");
  if (slowdown <= 0 || slowdown > 1) dfi_mpi::fail(kProgram, "--slowdown must be in (0, 1]");
  if (straggler >= ranks) dfi_mpi::fail(kProgram, "--straggler must be a rank or -1");
  if (mode == "batched" && tuples > static_cast<std::size_t>(INT32_MAX)) {
    dfi_mpi::fail(kProgram, "--tuples-per-rank too large for MPI_Alltoallv counts");
  }

  const Table table = make_table(rank, tuples, tuple_bytes, seed);
  std::uint64_t sent_key_sum = 0;
  for (std::size_t i = 0; i < tuples; ++i) sent_key_sum += key_of(table.tuple(i));
  Received received;
  received.data.reserve(tuples * tuple_bytes + tuples * tuple_bytes / 4);
  dfi_mpi::Straggle straggle(rank == straggler, slowdown);

  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  std::uint64_t rounds = 1;
  if (mode == "pipelined") {
    rounds = pipelined(table, slot_tuples, rank, ranks, straggle, received);
  } else {
    batched(table, rank, ranks, straggle, received);
  }
  const double mine = MPI_Wtime() - start;

  double seconds = 0;
  MPI_Reduce(&mine, &seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  std::uint64_t local[4] = {tuples, sent_key_sum, received.tuples, received.key_sum};
  std::uint64_t global[4] = {0, 0, 0, 0};
  MPI_Reduce(local, global, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  std::uint64_t misrouted = 0;
  MPI_Reduce(&received.misrouted, &misrouted, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  bool ok = true;
  if (rank == 0) {
    ok = global[0] == global[2] && global[1] == global[3] && misrouted == 0;
    const double bytes = static_cast<double>(global[0]) * static_cast<double>(tuple_bytes);
    std::printf(
        "{\"program\":\"%s\",\"mode\":\"%s\",\"ranks\":%d,\"tuple_bytes\":%zu,\"tuples_per_rank\":%"
        "zu,"
        "\"slot_tuples\":%zu,\"rounds\":%llu,\"straggler\":%d,\"slowdown\":%.3f,\"seconds\":%.6f,"
        "\"gbps\":%.6f,\"ok\":%s}\n",
        kProgram, mode.c_str(), ranks, tuple_bytes, tuples, slot_tuples,
        static_cast<unsigned long long>(rounds), straggler, slowdown, seconds,
        bytes / seconds / 1e9, ok ? "true" : "false");
    std::fflush(stdout);
    if (!ok) {
      std::fprintf(stderr, "%s: check failed: sent %llu tuples, received %llu, misrouted %llu\n",
                   kProgram, static_cast<unsigned long long>(global[0]),
                   static_cast<unsigned long long>(global[2]),
                   static_cast<unsigned long long>(misrouted));
    }
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
