#include "dfi/memory/ring_access.hpp"

#include <cstring>

namespace dfi::memory {

RingLayout RingLayout::make(std::uint32_t segments, std::uint32_t segment_bytes) {
  if (segments == 0) throw Error(Errc::invalid_argument, "ring: segment count must be at least 1");
  if (segment_bytes <= kFooterBytes || segment_bytes % 8 != 0) {
    throw Error(Errc::invalid_argument, "ring: segment size " + std::to_string(segment_bytes) +
                                            " B must be a multiple of 8 and larger than the " +
                                            std::to_string(kFooterBytes) + " B footer");
  }
  return RingLayout{segments, segment_bytes};
}

RemoteRing::RemoteRing(fabric::Worker& worker, fabric::Endpoint& endpoint, const fabric::RemoteMemory& remote,
                       std::size_t ring_offset, RingLayout layout, RemoteRingOptions options, std::string label)
    : worker_(&worker), endpoint_(&endpoint), remote_(&remote), offset_(ring_offset), layout_(layout),
      label_(std::move(label)) {
  if (ring_offset + layout.bytes() > remote.size()) {
    throw Error(Errc::invalid_argument, label_ + ": ring of " + std::to_string(layout.bytes()) +
                                            " B at offset " + std::to_string(ring_offset) +
                                            " exceeds the peer's region of " + std::to_string(remote.size()) + " B");
  }
  if (options.allow_mapped && remote.mapped() != nullptr) {
    path_ = Path::mapped;
    mapped_ = static_cast<std::byte*>(remote.mapped()) + ring_offset;
    return;
  }
  path_ = options.allow_am && !endpoint.rma_native() ? Path::active_message : Path::put;
}

Status RemoteRing::load(std::size_t offset, std::uint64_t& value) const {
  // Through the mapping only where this ring may use it (allow_mapped); else a get.
  if (mapped_ != nullptr) return endpoint_->load_word(*remote_, offset_ + offset, value);
  return endpoint_->get(&value, sizeof value, *remote_, offset_ + offset);
}

Status RemoteRing::read(std::size_t offset, void* destination, std::size_t bytes) const {
  if (mapped_ != nullptr) {
    std::memcpy(destination, mapped_ + offset, bytes);
    return endpoint_->status();
  }
  return endpoint_->get(destination, bytes, *remote_, offset_ + offset);
}

Status RemoteRing::store(std::size_t offset, std::uint64_t value) const {
  if (mapped_ != nullptr) {
    store_release(mapped_ + offset, value);
    return endpoint_->status();
  }
  if (Status s = worker_->fence(); !s) return s;
  return endpoint_->put(&value, sizeof value, *remote_, offset_ + offset);
}

}  // namespace dfi::memory
