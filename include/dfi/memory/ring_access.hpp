// memory::LocalRing, memory::RemoteRing — how a segment writer or reader reaches a ring
// (ring.hpp). The access policy is a template argument of SegmentWriter and SegmentReader, chosen
// at compile time:
//  - LocalRing: the ring lies in this process's memory (a flow target's own rings; the buffers
//    of a processing unit in network-driven flows). Plain loads and stores; no fabric call.
//  - RemoteRing: the ring lies in a peer's registered region, reached through an endpoint. How,
//    is decided per connection at run time from what UCX says:
//      mapped          RemoteMemory::mapped() != null (shm): loads and stores through a pointer;
//      put             Endpoint::rma_native() (shm without mapping, InfiniBand, RoCE): puts and
//                      gets, ordered by fences;
//      active_message  emulated RMA (tcp), when the owner runs a SegmentReceiver on the
//                      endpoint's peer worker (allow_am): a writer sends each segment as one
//                      active message; UCX never applies a one-sided write from a failed peer.
//    Without allow_am on an emulated transport the put path is taken (UCX emulates it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "dfi/common/error.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/memory/ring.hpp"

namespace dfi::memory {

// Called by a LocalRing's writer after each segment it published (state and head stored), never
// per tuple: a driven flow's producer rings the data mover's doorbell there (driven/bell.hpp).
// A plain function and its context: one predictable branch per publication when unset.
struct RingPublishHook {
  void (*call)(void* context) = nullptr;
  void* context = nullptr;
};

class LocalRing {
 public:
  static constexpr bool kRemote = false;

  // Whether the parties this ring waits for are alive, asked while a writer waits for a free
  // slot (a driven flow's producer waits for the data mover, which lives in another process).
  using PeerStatus = std::function<Status()>;

  using PublishHook = RingPublishHook;

  // The ring at `base` (layout.bytes() bytes, zeroed before first use). `label` names the ring in
  // errors. `peer_status`, if set, must outlive the ring; status() returns what it says.
  // `on_publish`: see PublishHook (its context must outlive the ring).
  LocalRing(std::byte* base, RingLayout layout, std::string label, const PeerStatus* peer_status = nullptr,
            PublishHook on_publish = {})
      : base_(base), layout_(layout), label_(std::move(label)), peer_status_(peer_status), on_publish_(on_publish) {}

  std::byte* base() const noexcept { return base_; }
  const RingLayout& layout() const noexcept { return layout_; }
  const std::string& label() const noexcept { return label_; }
  Status status() const { return peer_status_ != nullptr ? (*peer_status_)() : Status(); }
  // Runs the PublishHook, if any (SegmentWriter::publish, after the publication).
  void published() const {
    if (on_publish_.call != nullptr) [[unlikely]] on_publish_.call(on_publish_.context);
  }

 private:
  std::byte* base_;
  RingLayout layout_;
  std::string label_;
  const PeerStatus* peer_status_;
  PublishHook on_publish_;
};

struct RemoteRingOptions {
  bool allow_mapped = true;  // use the mapped path when the transport offers it
  bool allow_am = false;     // the owner runs a SegmentReceiver on the endpoint's peer worker
};

class RemoteRing {
 public:
  static constexpr bool kRemote = true;
  enum class Path { mapped, put, active_message };

  // The ring at `ring_offset` of the peer's region `remote`, reached through `endpoint` of
  // `worker` (the caller's thread owns that worker). Throws dfi::Error(invalid_argument) when the
  // ring does not fit in the region. `label` names the ring (flow, writer, reader) in errors.
  RemoteRing(fabric::Worker& worker, fabric::Endpoint& endpoint, const fabric::RemoteMemory& remote,
             std::size_t ring_offset, RingLayout layout, RemoteRingOptions options, std::string label);

  Path path() const noexcept { return path_; }
  // The ring through a mapped pointer, or null.
  std::byte* mapped() const noexcept { return mapped_; }
  fabric::Worker& worker() const noexcept { return *worker_; }
  fabric::Endpoint& endpoint() const noexcept { return *endpoint_; }
  const fabric::RemoteMemory& remote() const noexcept { return *remote_; }
  // Offset of the ring in the peer's region.
  std::size_t offset() const noexcept { return offset_; }
  const RingLayout& layout() const noexcept { return layout_; }
  const std::string& label() const noexcept { return label_; }
  // Ok while the connection is healthy; peer_failed (or timeout) once it is not.
  Status status() const { return endpoint_->status(); }

  // Word and bulk access at an offset inside the ring, for readers and third parties. Mapped: a
  // load or copy through the pointer; otherwise a get (8-byte gets travel as an active message
  // where RMA is emulated) that returns when the data is here. Errors: peer_failed, timeout.
  Status load(std::size_t offset, std::uint64_t& value) const;
  Status read(std::size_t offset, void* destination, std::size_t bytes) const;
  // Stores an 8-byte word with release order after everything this worker wrote to the ring
  // before (mapped: a release store; otherwise a fence, then a put). Returns when it has left.
  Status store(std::size_t offset, std::uint64_t value) const;

 private:
  fabric::Worker* worker_;
  fabric::Endpoint* endpoint_;
  const fabric::RemoteMemory* remote_;
  std::size_t offset_;
  RingLayout layout_;
  std::string label_;
  Path path_ = Path::put;
  std::byte* mapped_ = nullptr;
};

}  // namespace dfi::memory
