// fabric::MemoryRegion — memory that peers may access one-sidedly.
//
// Regions are allocated by UCX (ucp_mem_map with ALLOCATE): only such memory is truly one-sided
// over shared memory (see ../shared/UCX-NOTES.md). A RegionDescriptor (address, size, packed
// remote key) travels through the registry; a peer turns it into RemoteMemory with
// Endpoint::attach().
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
  RegionDescriptor descriptor_;
};

}  // namespace dfi::fabric
