// fabric::MemoryRegion — memory that peers may access one-sidedly.
//
// Regions are allocated by UCX (ucp_mem_map with ALLOCATE): only such memory is truly one-sided
// over shared memory (see ../shared/UCX-NOTES.md). A RegionDescriptor (address, size, packed
// remote key) travels through the registry; a peer turns it into RemoteMemory with
// Endpoint::attach().
//
// Where one-sided operations are emulated (tcp: Capabilities::needs_target_progress), this
// process's UCX applies a peer's get or put at the address the peer names, unchecked. A peer
// that has not yet heard that a region is gone (a flow torn down after a failure) would make it
// read or write unmapped memory and crash this process. There the region is mapped by DFI, and
// released regions keep their addresses: fresh zero pages replace the memory (freed at once), and
// the address range is unmapped only when the Context goes. Address space, not memory, grows
// with the regions released while the Context lives. Over shm a peer's mapping keeps the memory
// alive; native RDMA refuses a deregistered key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dfi::fabric {

class Context;

// Everything a peer needs to access a region: serialisable, so it can go through the registry.
struct RegionDescriptor {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::string packed_key;  // opaque bytes from UCX

  // Binary form: 8 B address, 8 B size, then the key, all little-endian.
  std::string serialize() const;
  // Throws dfi::Error(protocol) for a truncated or malformed blob.
  static RegionDescriptor parse(std::string_view blob);
};

class MemoryRegion {
 public:
  // An empty region (no memory); assign a real one to use it.
  MemoryRegion() = default;
  // Allocates and registers `bytes` (> 0) of zeroed memory. Throws dfi::Error(invalid_argument)
  // for 0 bytes and dfi::Error(fatal) when UCX cannot allocate.
  MemoryRegion(Context& context, std::size_t bytes);
  ~MemoryRegion();
  MemoryRegion(MemoryRegion&& other) noexcept;
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  const RegionDescriptor& descriptor() const noexcept { return descriptor_; }

 private:
  void release() noexcept;

  Context* context_ = nullptr;
  void* memh_ = nullptr;  // ucp_mem_h
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_bytes_ = 0;  // mapped by DFI (emulated one-sided); 0: allocated by UCX
  RegionDescriptor descriptor_;
};

}  // namespace dfi::fabric
