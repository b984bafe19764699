// The hand-written physical limits of a 1:1 tuple stream between two processes on this machine,
// measured next to DFI's shuffle flows (scenario shuffle-bw):
//
//   tcp  a plain TCP socket over loopback. The writer sends the tuples in writes of one 64 KiB
//        block (tuple_block.hpp); the reader reads into a 64 KiB buffer and sums every tuple's
//        key (a tuple cut by a read boundary is carried over to the next read).
//   shm  a single-producer/single-consumer ring in shared memory (shm_open + mmap): head and tail
//        counters on cache lines of their own; the producer copies up to `batch_bytes` of tuples
//        at a time into the ring and publishes them with one store, the consumer sums every key
//        in place and releases what it read with one store. Two producers (`copy`): "tuple"
//        copies tuple after tuple with a copy of compile-time width (the limit of a per-tuple
//        push), "bulk" copies each batch with one memcpy of the whole run (the limit of a batch
//        push).
//        A third, "partition", is the limit of a partitioned push_batch: `targets` rings of DFI's
//        own layout (memory::RingLayout: `ring_bytes / batch_bytes` segments of `batch_bytes`
//        of payload plus the footer, published and released as a flow's are), one per target;
//        the producer routes each chunk of 256 tuples with the flow's key hash
//        (kernels::route_rows_kernel: eight keys at a time with AVX-512), scatters them into
//        software write-combine buffers of a cache line per target and stores each full line
//        whole into its target's segment (Balkesen et al., "Main-memory hash joins on multi-core
//        CPUs", Schuh et al., "An experimental comparison of thirteen relational equi-joins");
//        a full segment is published at once. "partition-direct" is the same partitioner without
//        the lines: each row goes straight into its target's segment (the hash still hoisted out
//        of the copy loop); on this machine neither is always the faster, so both are limits.
//        One consumer polls the rings round robin and sums every key in place, weighted by its
//        ring (routed_sum: the driver checks every tuple reached the target its key routes to).
//
//   bench::StreamRun run;
//   run.transport = "tcp"; run.tuple_bytes = 64; run.tuples = 1 << 20;
//   run.dfi_binary = context.dfi_binary;
//   bench::StreamResult r = bench::run_stream_baseline(run);   // r.gbps at the receiver
//
// Each side is `dfi bench-stream <side> ...` (hidden), started as a separate process with the
// launch layer's ChildProcess; the receiver is started first (tcp: it listens on a free port,
// shm: it creates the ring), the sender once the receiver is ready. Neither side allocates or
// makes a system call per tuple: the socket side makes one write/read per 64 KiB, the ring
// sides touch the shared counters once per batch and yield only while they wait for each other.
// GB/s are measured at the receiver as DFI's targets measure them: tuple bytes that arrived
// after the first batch (first read / first ring batch) over the time from that batch to the end
// of the stream. The driver checks the receiver's tuple count and key sum.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace dfi::tools::bench {

// One side of a stream baseline: what `dfi bench-stream` parses.
struct StreamSide {
  std::string side;              // "tcp-reader", "tcp-writer", "ring-consumer" or "ring-producer"
  std::size_t tuple_bytes = 64;  // >= 8, a multiple of 8
  std::uint64_t tuples = 0;      // tuples the sender sends
  int port = 0;                  // tcp: the reader's port on 127.0.0.1
  std::string name;              // shm: the ring's shm_open name ("/dfi-...")
  std::size_t ring_bytes = 32 * 8192;     // shm: ring capacity (rounded down to whole tuples)
  std::size_t batch_bytes = 8192;         // shm: most bytes moved per publish / release
  std::string copy = "tuple";  // shm: "tuple" (compile-time width), "bulk", "partition", "partition-direct"
  std::size_t targets = 1;     // shm, the partition copies: rings, one per target
  std::chrono::milliseconds wait{30000};  // longest a side waits for its peer to appear
};

// Whether the shm ring's "tuple" producer has a compile-time copy of `tuple_bytes`-byte tuples,
// and the list of those widths (for error messages).
bool ring_copies_width(std::size_t tuple_bytes);
std::string ring_tuple_widths_text();

// Whether `copy` is one of the partitioners ("partition", "partition-direct"): targets rings of
// the flow layout instead of one stream ring.
bool is_partition_copy(const std::string& copy);

// The names of the four sides, for the command line.
std::vector<std::string> stream_side_names();

// Runs one side; the receiver prints one result line (kRankResultMarker + JSON: tuples,
// key_sum, routed_sum, timed_bytes, seconds, gbps) on `out`. Returns the exit code (0, or 1 with the reason
// on `err`).
int run_stream_side(const StreamSide& side, std::ostream& out, std::ostream& err);

// `binary bench-stream <side> --tuple-bytes ...`: the argv that starts `side`.
std::vector<std::string> stream_side_argv(const std::string& binary, const StreamSide& side);

struct StreamRun {
  std::string transport = "tcp";  // "tcp" (socket over loopback) or "shm" (shared-memory ring)
  std::size_t tuple_bytes = 64;
  std::uint64_t tuples = 0;
  std::size_t ring_bytes = 32 * 8192;  // shm
  std::size_t batch_bytes = 8192;      // shm
  std::string copy = "tuple";  // shm: the producer's copy, "tuple", "bulk", "partition", "partition-direct"
  std::size_t targets = 1;     // shm, the partition copies: targets (rings) to partition over
  std::string dfi_binary;              // the dfi executable whose bench-stream sides run
  std::chrono::milliseconds timeout{60000};
};

struct StreamResult {
  double gbps = 0;  // tuple bytes after the first batch / time from it to the end, at the receiver
  std::uint64_t tuples = 0;   // received (checked against StreamRun::tuples)
  std::uint64_t key_sum = 0;  // received (checked against expected_key_sum)
  // Per ring, its key sum times (ring index + 1), summed (checked against expected_routed_sum;
  // key_sum for one ring).
  std::uint64_t routed_sum = 0;
  double seconds = 0;         // the receiver's timed interval
  // "dfi bench-stream tcp-reader --port $PORT ... & dfi bench-stream tcp-writer ...": the record
  // of the run; PORT was a free port picked at run time.
  std::string command;
};

// What `run.transport`'s baseline is called in results ("TCP socket stream", "shared-memory
// ring", with the shm producer's `copy`: "hand-written partitioner" for the partition copies). Throws dfi::Error(invalid_argument) for a transport
// other than tcp or shm.
std::string stream_baseline_name(const std::string& transport, const std::string& copy = "tuple");

// Runs the receiver and the sender of `run.transport` as two processes and returns what the
// receiver measured. Throws dfi::Error: invalid_argument (bad transport, sizes, copy or target
// count; a width the per-tuple ring has no compile-time copy of), timeout (a
// side was killed after run.timeout), io (a side failed; the message quotes its output),
// protocol (the receiver's count, key sum or routed sum differs from what was sent).
StreamResult run_stream_baseline(const StreamRun& run);

}  // namespace dfi::tools::bench
