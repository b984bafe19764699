// apps::commtier::run_test — 002's throughput test (§4.1) and consuming test (§4.2) on a cluster:
// the SU sends transfers of each size to the CU, through a tier (tier.hpp) or, for comparison,
// through DFI shuffle flows.
//
//   dfi cluster run --nodes 2 -- dfi commtier --test consuming --buffers 4 --buffer-bytes 1MiB
//
// Per transfer size S (002's "requested data size"), each of `lanes` SU threads sends its share
// of S (S / lanes, the last lane the rest) to its CU thread, a few untimed warm-up times, then
// `transfers` times:
//   consuming   the CU thread copies every transfer out of the receive buffers into memory of its
//               own (not an RB) and gives the RBs back; the sender waits for free RBs
//               (002 §4.2).
//   throughput  the CU thread gives every RB back as soon as it sees it, without reading the
//               payload (002 §4.1 writes without waiting for the consumer at all; a ring cannot
//               overwrite unreleased RBs, so this is the closest a receiver can come).
// Timing, at the SU: each lane starts its clock when its CU thread says it is ready (a 0-byte
// transfer back) and stops it when the CU thread has received the last transfer (another); the
// size's time is from the first lane's start to the last lane's stop. MiB/s = S x transfers /
// time (002 reports effective bandwidth the same way: requested data over wall time).
// Checks: every transfer has the expected size and opcode; consuming: the first word of every
// transfer is its number (no transfer lost, repeated or reordered), and after the clock stopped
// the whole of the last transfer equals what was sent.
//
// Via::flow: the same transfers through two 1:1 shuffle flows per lane (bandwidth mode): data as
// `flow_tuple_bytes` tuples (a transfer rounded up to whole tuples) pushed with push_bulk + flush,
// in a ring of the tier's shape (`buffers`: as many segments as RBs, each of an RB's size), the
// ready/done signals as 8-byte tuples (flow defaults). The CU thread consumes batches and copies
// (consuming) or skips (throughput) them.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "dfi/apps/commtier/tier.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::apps::commtier {

enum class TestKind { throughput, consuming };
enum class Via { tier, flow };
std::string_view test_name(TestKind kind) noexcept;  // "throughput" / "consuming"
TestKind parse_test(std::string_view text);          // throws dfi::Error(invalid_argument)
std::string_view via_name(Via via) noexcept;          // "tier" / "flow"
Via parse_via(std::string_view text);                 // throws dfi::Error(invalid_argument)

struct TestOptions {
  std::string name = "commtier";  // tier (or flow name prefix); unique per run in one cluster
  TestKind test = TestKind::consuming;
  Via via = Via::tier;
  int su_rank = 0;
  int cu_rank = 1;
  std::uint32_t lanes = 1;                 // SU and CU threads (one lane each)
  Buffers buffers;                         // the CU's receive buffers per lane (data goes SU -> CU)
  std::vector<std::uint64_t> sizes = {8, 1024, 64 << 10, 1 << 20, 16 << 20};  // transfer sizes, bytes
  std::uint64_t bytes_per_size = 64ull << 20;  // data moved per size: transfers = this / size,
  std::uint64_t max_transfers = 20000;         // at most this many, at least 1
  std::uint64_t warmup_transfers = 1000;       // untimed transfers before each size's timed ones
                                               // (at most a quarter of them)
  std::size_t flow_tuple_bytes = 64;       // Via::flow: the data flow's tuple width (>= 8, multiple of 8)
  bool progress = true;                    // a line per size on the progress stream (SU)
  std::chrono::milliseconds timeout{60000};  // stall timeout of every wait
};

struct SizeResult {
  std::uint64_t bytes = 0;      // transfer size
  std::uint64_t transfers = 0;
  double seconds = 0;
  double mib_per_s = 0;         // bytes x transfers / seconds / 2^20
  std::uint64_t messages = 0;   // tier: messages the SU's lanes sent for this size
  std::uint64_t buffers = 0;    // tier: RBs they filled
};

struct TestResult {
  std::vector<SizeResult> sizes;  // at the SU; empty on other ranks
  bool direct = false;            // tier: messages were written straight into mapped RBs (shm)
};

// Transfers of `size` bytes the test times (bytes_per_size / size, within [1, max_transfers]).
std::uint64_t transfers_for(const TestOptions& options, std::uint64_t size);
// Untimed transfers sent first (min(warmup_transfers, transfers_for / 4)).
std::uint64_t warmup_for(const TestOptions& options, std::uint64_t size);

// Runs the test on this rank (every rank of the cluster calls it; ranks that are neither the SU
// nor the CU return at once). The SU creates the tier or flows. Throws dfi::Error: invalid_argument
// (bad options, naming them), peer_failed (the other side died), timeout, protocol (a check
// failed, naming the lane, the size and what differed).
TestResult run_test(cluster::Node& node, const TestOptions& options, std::ostream& progress);

}  // namespace dfi::apps::commtier
