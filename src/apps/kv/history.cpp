#include "dfi/apps/kv/history.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "dfi/common/error.hpp"

namespace dfi::apps::kv {

namespace {
constexpr char kMagic[8] = {'D', 'F', 'I', 'K', 'V', 'J', '0', '1'};
constexpr std::size_t kHeaderBytes = 64;
constexpr std::size_t kFirstCapacity = 1 << 14;  // records; doubled when full

char pattern(std::uint64_t id, std::size_t at) { return static_cast<char>((id * 0x9E3779B97F4A7C15ull >> (at % 57)) + at); }

// One operation (history.hpp documents the layout).
struct Record {
  std::uint64_t client;
  std::uint32_t op;
  std::uint32_t state;  // 0 unused, 1 invoked, 2 returned (stored last)
  std::uint64_t key;
  std::uint64_t input;
  std::uint64_t output;
  std::int64_t call_ns;
  std::int64_t return_ns;
};
static_assert(sizeof(Record) == 56, "history.hpp documents 56-byte records");

Error io_error(const std::string& path, const char* what) {
  std::string message = "kv history: cannot ";
  message.append(what).append(" '").append(path).append("': ").append(std::strerror(errno));
  return Error(Errc::io, message);
}
}  // namespace

HistoryJournal::HistoryJournal(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw io_error(path_, "create");
  const std::size_t bytes = kHeaderBytes + kFirstCapacity * sizeof(Record);
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
    const Error e = io_error(path_, "size");
    ::close(fd_);
    throw e;
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) {
    const Error e = io_error(path_, "map");
    ::close(fd_);
    throw e;
  }
  map_ = static_cast<std::byte*>(map);
  capacity_ = kFirstCapacity;
  std::memcpy(map_, kMagic, sizeof kMagic);
  const std::uint32_t record_bytes = sizeof(Record);
  std::memcpy(map_ + sizeof kMagic, &record_bytes, sizeof record_bytes);
}

HistoryJournal::~HistoryJournal() {
  if (map_ != nullptr) ::munmap(map_, kHeaderBytes + capacity_ * sizeof(Record));
  if (fd_ >= 0) ::close(fd_);
}

std::string HistoryJournal::path(const std::string& dir, int rank, int thread) {
  return dir + "/kv-" + std::to_string(rank) + "-" + std::to_string(thread) + ".journal";
}

// Doubles the file and its mapping (amortised: a system call per doubling, not per operation).
void HistoryJournal::grow() {
  const std::size_t old_bytes = kHeaderBytes + capacity_ * sizeof(Record);
  const std::size_t new_bytes = kHeaderBytes + 2 * capacity_ * sizeof(Record);
  if (::ftruncate(fd_, static_cast<off_t>(new_bytes)) != 0) throw io_error(path_, "grow");
  void* map = ::mremap(map_, old_bytes, new_bytes, MREMAP_MAYMOVE);
  if (map == MAP_FAILED) throw io_error(path_, "map more of");
  map_ = static_cast<std::byte*>(map);
  capacity_ *= 2;
}

std::size_t HistoryJournal::invoked(std::uint64_t client, Op op, std::uint64_t key, std::uint64_t input,
                                    std::int64_t call_ns) {
  if (size_ == capacity_) [[unlikely]] grow();
  auto* r = reinterpret_cast<Record*>(map_ + kHeaderBytes) + size_;
  r->client = client;
  r->op = static_cast<std::uint32_t>(op);
  r->key = key;
  r->input = input;
  r->output = 0;
  r->call_ns = call_ns;
  r->return_ns = -1;
  std::atomic_ref<std::uint32_t>(r->state).store(1, std::memory_order_release);
  return size_++;
}

void HistoryJournal::returned(std::size_t index, std::uint64_t output, std::int64_t return_ns) {
  auto* r = reinterpret_cast<Record*>(map_ + kHeaderBytes) + index;
  r->output = output;
  r->return_ns = return_ns;
  std::atomic_ref<std::uint32_t>(r->state).store(2, std::memory_order_release);
}

void value_of(std::uint64_t id, std::span<char> value) {
  if (value.size() < sizeof id) {
    throw Error(Errc::invalid_argument, "kv history: a value of " + std::to_string(value.size()) +
                                            " bytes cannot hold an 8-byte id");
  }
  std::memcpy(value.data(), &id, sizeof id);
  for (std::size_t at = sizeof id; at < value.size(); ++at) value[at] = pattern(id, at);
}

std::uint64_t id_of(std::string_view value) {
  if (value.size() < sizeof(std::uint64_t)) return 0;
  std::uint64_t id = 0;
  std::memcpy(&id, value.data(), sizeof id);
  for (std::size_t at = sizeof id; at < value.size(); ++at) {
    if (value[at] != pattern(id, at)) return 0;
  }
  return id;
}

}  // namespace dfi::apps::kv
