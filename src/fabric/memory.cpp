#include "dfi/fabric/memory.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "internal.hpp"

namespace dfi::fabric {
namespace {

constexpr std::size_t kPageBytes = 4096;  // mmap rounds to pages; 4 KiB is the smallest x86 page

void append_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t read_u64(std::string_view in) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

}  // namespace

std::string RegionDescriptor::serialize() const {
  std::string out;
  out.reserve(16 + packed_key.size());
  append_u64(out, address);
  append_u64(out, size);
  out += packed_key;
  return out;
}

RegionDescriptor RegionDescriptor::parse(std::string_view blob) {
  if (blob.size() <= 16) {
    throw Error(Errc::protocol, "fabric: region descriptor of " + std::to_string(blob.size()) +
                                    " B is too short (expected 16 B header and a key)");
  }
  RegionDescriptor d;
  d.address = read_u64(blob.substr(0, 8));
  d.size = read_u64(blob.substr(8, 8));
  d.packed_key = std::string(blob.substr(16));
  return d;
}

MemoryRegion::MemoryRegion(Context& context, std::size_t bytes) : context_(&context), size_(bytes) {
  if (bytes == 0) throw Error(Errc::invalid_argument, "fabric: cannot allocate a 0-byte region");
  ucp_context_h ctx = context.impl().context;
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = bytes;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  if (context.capabilities().needs_target_progress) {
    // Emulated one-sided operations: our own pages, so that release() can keep the addresses
    // mapped (memory.hpp).
    mapped_bytes_ = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
    void* pages = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) {
      mapped_bytes_ = 0;
      throw Error(Errc::fatal, "fabric: cannot map " + std::to_string(bytes) + " B for a region: " + std::strerror(errno));
    }
    params.address = pages;
    params.flags = 0;
  }
  ucp_mem_h memh = nullptr;
  ucs_status_t status = ucp_mem_map(ctx, &params, &memh);
  if (status != UCS_OK) {
    if (mapped_bytes_ != 0) ::munmap(params.address, mapped_bytes_);
    throw Error(Errc::fatal, "fabric: cannot allocate a registered region of " +
                                 std::to_string(bytes) + " B: " + ucx_error_text(status));
  }
  memh_ = memh;
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  status = ucp_mem_query(memh, &attr);
  void* key = nullptr;
  std::size_t key_size = 0;
  if (status == UCS_OK) status = ucp_rkey_pack(ctx, memh, &key, &key_size);
  if (status != UCS_OK) {
    release();
    throw Error(Errc::fatal, "fabric: cannot describe a registered region: " + ucx_error_text(status));
  }
  data_ = attr.address;
  std::memset(data_, 0, bytes);
  descriptor_.address = reinterpret_cast<std::uint64_t>(data_);
  descriptor_.size = bytes;
  descriptor_.packed_key.assign(static_cast<const char*>(key), key_size);
  ucp_rkey_buffer_release(key);
  std::lock_guard lock(context.impl().regions_mutex);
  context.impl().regions.emplace_back(descriptor_.address, bytes);
}

bool Context::Impl::owns_word(std::uint64_t address) const { return owns_range(address, 8); }

bool Context::Impl::owns_range(std::uint64_t address, std::uint64_t bytes) const {
  std::lock_guard lock(regions_mutex);
  for (const auto& [start, size] : regions) {
    if (address >= start && address - start <= size && bytes <= size - (address - start)) return true;
  }
  return false;
}

MemoryRegion::~MemoryRegion() { release(); }

MemoryRegion::MemoryRegion(MemoryRegion&& other) noexcept { *this = std::move(other); }

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
  if (this != &other) {
    release();
    context_ = std::exchange(other.context_, nullptr);
    memh_ = std::exchange(other.memh_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    descriptor_ = std::move(other.descriptor_);
  }
  return *this;
}

void MemoryRegion::release() noexcept {
  if (memh_ != nullptr) {
    {
      std::lock_guard lock(context_->impl().regions_mutex);
      auto& regions = context_->impl().regions;
      for (auto it = regions.begin(); it != regions.end(); ++it) {
        if (it->first == descriptor_.address) {
          regions.erase(it);
          break;
        }
      }
    }
    ucp_mem_unmap(context_->impl().context, static_cast<ucp_mem_h>(memh_));
    memh_ = nullptr;
    if (mapped_bytes_ != 0 && data_ != nullptr) {
      // Fresh zero pages in place of ours, in one step (no moment unmapped): the memory is freed,
      // a late get reads zeros, a late put lands in a page nobody uses. The addresses go with the
      // context (or back to the system now if that fails: nothing better is left to do).
      void* again = ::mmap(data_, mapped_bytes_, PROT_READ | PROT_WRITE,
                           MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (again == MAP_FAILED) {
        ::munmap(data_, mapped_bytes_);
      } else {
        std::lock_guard lock(context_->impl().regions_mutex);
        context_->impl().retired.emplace_back(data_, mapped_bytes_);
      }
    }
    mapped_bytes_ = 0;
    data_ = nullptr;
  }
}

}  // namespace dfi::fabric
