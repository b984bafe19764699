// The PU side of a driven flow's doorbell (bell.hpp).
#include "bell.hpp"

#include <optional>

#include "dfi/cluster/node.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::driven::detail {

Doorbell::Doorbell(cluster::Node& node, std::string flow, std::size_t word, std::uint64_t* armed, std::string label)
    : node_(node), flow_(std::move(flow)), word_(word), armed_(armed), label_(std::move(label)) {}

Doorbell::~Doorbell() {
  if (!worker_) return;
  node_.abandon_progress(*worker_);  // the progress thread lets go of it: this thread owns it again
  (void)in_flight_.wait();
  bells_ = fabric::RemoteMemory();
  endpoint_.close_now();  // a bell to a mover that is gone need not arrive
}

bool Doorbell::attach() {
  std::optional<std::string> record;
  try {
    record = node_.registry().try_lookup(bell_record(flow_));
  } catch (const std::exception&) {
    return false;  // the registry is gone: the PU's own waits report it
  }
  if (!record) return false;
  // "<generation> <rank> <descriptor>" (the descriptor is binary: everything after the second space)
  const std::size_t first = record->find(' ');
  const std::size_t second = first == std::string::npos ? first : record->find(' ', first + 1);
  if (second == std::string::npos) return false;
  try {
    const std::uint64_t generation = std::stoull(record->substr(0, first));
    const int rank = std::stoi(record->substr(first + 1, second - first - 1));
    const fabric::RegionDescriptor descriptor = fabric::RegionDescriptor::parse(std::string_view(*record).substr(second + 1));
    if (!worker_) {
      worker_ = std::make_unique<fabric::Worker>(node_.fabric(), label_ + " doorbell");
      node_.adopt_progress(*worker_);  // completes the bells' sends while this thread pushes
    }
    worker_->claim();
    try {
      (void)in_flight_.wait();
      bells_ = fabric::RemoteMemory();
      endpoint_ = node_.connect(*worker_, rank);
      bells_ = endpoint_.attach(descriptor);
    } catch (...) {
      worker_->unclaim();
      throw;
    }
    worker_->unclaim();
    mapped_ = bells_.mapped() != nullptr ? static_cast<std::uint64_t*>(bells_.mapped()) + word_ : nullptr;
    generation_ = generation;
    return (word_ + 1) * sizeof(std::uint64_t) <= bells_.size();
  } catch (const std::exception&) {
    generation_ = 0;  // a mover that went away between the record and the attach: try again next time
    return false;
  }
}

void Doorbell::ring_armed() noexcept {
  const std::uint64_t generation = std::atomic_ref(*armed_).exchange(0, std::memory_order_acq_rel);
  if (generation == 0) return;
  ++rings_;
  if (muted_) return;
  if (generation != generation_ && !attach()) return;
  if (mapped_ != nullptr) {
    std::atomic_ref(*mapped_).store(1, std::memory_order_release);
    return;
  }
  worker_->claim();
  (void)in_flight_.wait();  // the previous bell (long done: the mover armed this PU since)
  in_flight_ = endpoint_.store_words_async(&one_, 1, bells_, word_ * sizeof(std::uint64_t));
  (void)in_flight_.done();  // on its way now; the progress thread completes it
  worker_->unclaim();
}

}  // namespace dfi::driven::detail
