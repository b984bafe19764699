// Doorbells of driven flows (DrivenOptions::doorbell): a processing unit tells the data mover
// that it published new tuples (a producer) or freed space (a consumer), so that the mover need
// not poll the flow's heads and tails while nothing happens (000 §4: "or by doorbells").
//
// Two words per PU, and a protocol that makes a doorbell coalescing — like a NIC's interrupt
// mitigation, it rings only when the mover asked for it:
//
//   armed word    in the PU's own region, after its rings (producer) or its link words
//                 (consumer). The mover stores its bell generation (> 0) there when the flow goes
//                 idle ("wake me"); the PU clears it when it rings. While it is 0 a publication
//                 costs the PU one fence and one load of a word in its own memory.
//   bell word     one per PU (producers first, then consumers), a word the mover registered with
//                 its own worker (Worker::register_word), published as `driven/<flow>/bell` =
//                 "<generation> <rank> <count> <token>... <worker address>". A PU rings by raising
//                 its word to the number of bells it rang so far with a fabric::WordRaiser: one
//                 small active message from a worker of the PU's own (created at the first bell
//                 and progressed by the rank's progress thread while the PU does not hold it) to
//                 the mover's worker. The message wakes a mover that sleeps on its worker's events
//                 (Mover::run in doorbell mode), on shm as over tcp; the mover compares its words
//                 with what it saw last, with plain loads of its own memory.
//
// Why nothing is lost: the PU publishes (release stores of state and head), then a sequentially
// consistent fence, then loads its armed word; the mover stores the armed word, waits until the
// store is done at the PU, fences, and only then reads the flow's heads and tails once more before
// it sleeps. Either the PU sees the armed word (and rings) or the mover sees the publication. A
// bell that is lost all the same — a PU that never rings, a bell to a mover that died, the one
// reordering of tcp's emulation (a progress thread's store and a later load of another word in one
// message, not fenced against each other) — is covered by the mover's safety poll
// (DrivenOptions::safety_poll), which also re-arms every PU of a flow in which it found work.
//
// A new mover of the flow (a restart, a retry) hosts new bell words under a higher generation; a PU
// that finds an armed word naming another generation than the bell it holds looks the record up
// again (a registry lookup: once per mover change, never per publication).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dfi/fabric/endpoint.hpp"
#include "dfi/memory/ring.hpp"

#include <vector>

namespace dfi::cluster {
class Node;
}
namespace dfi::fabric {
class Worker;
}

namespace dfi::driven::detail {

// The mover's bell words of flow `flow`: "<generation> <rank> <count> <token>... <worker address>".
inline std::string bell_record(const std::string& flow) { return "driven/" + flow + "/bell"; }

// A producer's region: its rings (`rings` of them), then the armed word on a line of its own.
inline std::size_t producer_armed_offset(const memory::RingLayout& layout, std::size_t rings) {
  return rings * layout.bytes();
}
inline std::size_t producer_region_bytes(const memory::RingLayout& layout, std::size_t rings) {
  return producer_armed_offset(layout, rings) + memory::kWordLine;
}

// The PU side of a doorbell (above). Owned by the PU's thread; ring() is called after each
// publication (a producer's rings' PublishHook) or release (a consumer), never per tuple.
class Doorbell {
 public:
  // PU `word` (producers 0..N-1, then consumers N..) of flow `flow`, whose armed word is `armed`
  // (in the PU's region, zeroed). Nothing is attached until the mover first arms it.
  Doorbell(cluster::Node& node, std::string flow, std::size_t word, std::uint64_t* armed, std::string label);
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // After a publication or a release: rings the mover if it armed this PU. While not armed: a
  // fence and a load of the PU's own armed word. When armed: the word is cleared and the bell's
  // active message sent (the PU's worker claimed for it: a fabric call on the PU's thread).
  void ring() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the publication before the armed word
    if (std::atomic_ref(*armed_).load(std::memory_order_relaxed) == 0) [[likely]] return;
    ring_armed();
  }
  // For LocalRing::PublishHook.
  static void ring_hook(void* bell) noexcept { static_cast<Doorbell*>(bell)->ring(); }

  // Test seam: from now on the PU clears its armed word as if it rang, but no bell reaches the
  // mover (a lost doorbell); the mover's safety poll must carry the flow.
  void mute() noexcept { muted_ = true; }
  // How often the PU rang (muted: would have rung).
  std::uint64_t rings() const noexcept { return rings_; }

 private:
  // Clears the armed word and raises the PU's bell word at the mover (connecting to the mover's
  // worker first when the armed word names a new generation). Errors are dropped: the safety poll
  // covers a bell that did not arrive.
  [[gnu::noinline]] void ring_armed() noexcept;
  // Connects to the bell words the record names; false when that failed.
  bool attach();

  cluster::Node& node_;
  std::string flow_;
  std::size_t word_;
  std::uint64_t* armed_;
  std::string label_;
  bool muted_ = false;
  std::uint64_t rings_ = 0;
  std::uint64_t generation_ = 0;  // of the bell words attached (0: none)
  std::unique_ptr<fabric::Worker> worker_;  // created at the first bell; adopted by the progress thread
  std::unique_ptr<fabric::WordRaiser> raiser_;  // of this PU's bell word at the mover's worker
};

// What a bell record says (parse_bell_record).
struct BellRecord {
  std::uint64_t generation = 0;
  int rank = -1;
  std::vector<std::uint32_t> tokens;  // [PU]
  std::string address;                // the mover's worker
};
std::string bell_record_text(const BellRecord& record);
// Throws dfi::Error(protocol) for a malformed record.
BellRecord parse_bell_record(const std::string& text);

}  // namespace dfi::driven::detail
