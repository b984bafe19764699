// The four sides of the hand-written stream baselines (stream_baseline.hpp): `dfi bench-stream
// tcp-reader | tcp-writer | ring-consumer | ring-producer`. Set-up (sockets, the shared mapping)
// happens before the first tuple; the loops below it move tuples and nothing else.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>
#include <ostream>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "dfi/common/unique_fd.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/memory/ring.hpp"
#include "scenario.hpp"
#include "stream_baseline.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const StreamSide& side, const std::string& what) {
  throw Error(Errc::io, "bench-stream " + side.side + ": " + what + ": " + std::strerror(errno));
}

using OwnedFd = UniqueFd;

// The sender's tuples: one block, sent over and over from its start.
std::vector<std::byte> make_block(std::size_t tuple_bytes) {
  std::vector<std::byte> block(block_tuples(tuple_bytes) * tuple_bytes);
  fill_tuple_block(block, tuple_bytes);
  return block;
}

// The receiver's work and clock, as in DFI's shuffle-bw targets: every tuple's key is read and
// summed; the clock starts at the first batch and its tuples are not counted as timed.
class Receiver {
 public:
  explicit Receiver(std::size_t tuple_bytes) : tuple_bytes_(tuple_bytes) {}

  // `count` tuples at `p`, from ring `ring` (its keys count ring + 1 times in the routed sum).
  void batch(const std::byte* p, std::size_t count, std::uint64_t ring = 0) {
    if (tuples_ == 0) {
      first_ = Clock::now();
      first_batch_ = count;
    }
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < count; ++i, p += tuple_bytes_) {
      std::uint64_t key;
      std::memcpy(&key, p, sizeof key);
      sum += key;
    }
    key_sum_ += sum;
    routed_sum_ += sum * (ring + 1);
    tuples_ += count;
  }

  // The end of the stream: prints the result line.
  void report(std::ostream& out, const std::string& side) const {
    const Clock::time_point end = Clock::now();
    const std::uint64_t timed_bytes = (tuples_ - first_batch_) * tuple_bytes_;
    const double seconds = tuples_ > 0 ? seconds_between(first_, end) : 0;
    report_rank_result(
        out, {{"side", side},
              {"tuples", tuples_},
              {"key_sum", key_sum_},
              {"routed_sum", routed_sum_},
              {"timed_bytes", timed_bytes},
              {"seconds", seconds},
              {"gbps", seconds > 0 ? static_cast<double>(timed_bytes) / seconds / 1e9 : 0.0}});
  }

 private:
  std::size_t tuple_bytes_;
  std::uint64_t tuples_ = 0;
  std::uint64_t first_batch_ = 0;
  std::uint64_t key_sum_ = 0;
  std::uint64_t routed_sum_ = 0;
  Clock::time_point first_{};
};

// ---------------------------------------------------------------------------------------------
// TCP socket stream over loopback

sockaddr_in loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  return address;
}

int tcp_reader(const StreamSide& side, std::ostream& out) {
  const std::size_t tb = side.tuple_bytes;
  OwnedFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) fail(side, "socket");
  const sockaddr_in address = loopback(side.port);
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    fail(side, "cannot bind 127.0.0.1:" + std::to_string(side.port));
  if (::listen(listener.get(), 1) != 0) fail(side, "listen");
  pollfd entry{listener.get(), POLLIN, 0};
  const int ready = ::poll(&entry, 1, static_cast<int>(side.wait.count()));
  if (ready == 0) {
    errno = ETIMEDOUT;
    fail(side, "no writer connected");
  }
  if (ready < 0) fail(side, "poll");
  OwnedFd connection(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (connection.get() < 0) fail(side, "accept");

  // Room for one 64 KiB read after a tuple cut by the previous read.
  std::vector<std::byte> buffer(kTupleBlockBytes + tb);
  Receiver receiver(tb);
  std::size_t fill = 0;
  for (;;) {
    const ssize_t n = ::read(connection.get(), buffer.data() + fill, buffer.size() - fill);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(side, "read");
    }
    if (n == 0) break;
    fill += static_cast<std::size_t>(n);
    const std::size_t whole = fill / tb;
    if (whole > 0) receiver.batch(buffer.data(), whole);
    const std::size_t rest = fill - whole * tb;
    if (rest > 0) std::memmove(buffer.data(), buffer.data() + whole * tb, rest);
    fill = rest;
  }
  if (fill != 0) {
    errno = EPROTO;
    fail(side, "the stream ended inside a tuple (" + std::to_string(fill) + " bytes left)");
  }
  receiver.report(out, side.side);
  return 0;
}

int tcp_writer(const StreamSide& side) {
  OwnedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) fail(side, "socket");
  const sockaddr_in address = loopback(side.port);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    fail(side, "cannot connect to 127.0.0.1:" + std::to_string(side.port));

  const std::vector<std::byte> block = make_block(side.tuple_bytes);
  const std::uint64_t per_block = block.size() / side.tuple_bytes;
  std::uint64_t left = side.tuples;
  while (left > 0) {
    // One write per block (64 KiB), from the block's first tuple so that keys cycle as in DFI.
    const std::uint64_t tuples = std::min(left, per_block);
    const std::byte* p = block.data();
    std::size_t bytes = tuples * side.tuple_bytes;
    while (bytes > 0) {
      const ssize_t n = ::write(fd.get(), p, bytes);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(side, "write");
      }
      p += n;
      bytes -= static_cast<std::size_t>(n);
    }
    left -= tuples;
  }
  if (::shutdown(fd.get(), SHUT_WR) != 0) fail(side, "shutdown");
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Single-producer/single-consumer ring in shared memory

// The ring's first page: the producer's and the consumer's counters on cache lines of their own,
// then what the consumer set up. The tuples follow at kRingDataOffset.
struct RingControl {
  alignas(64) std::atomic<std::uint64_t> head;   // tuples published (producer)
  alignas(64) std::atomic<std::uint64_t> tail;   // tuples released (consumer)
  alignas(64) std::atomic<std::uint32_t> ready;  // 1 once the consumer set up the ring
  std::atomic<std::uint32_t> closed;             // 1 once the producer published its last tuple
  std::uint64_t tuple_bytes;
  std::uint64_t capacity;  // tuples
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
constexpr std::size_t kRingDataOffset = 4096;
static_assert(sizeof(RingControl) <= kRingDataOffset);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Waiting for the peer: a short spin, then the core goes to whoever else can run.
class SpinWait {
 public:
  void pause() {
    if (++spins_ < 64) {
      cpu_relax();
      return;
    }
    spins_ = 0;
    std::this_thread::yield();
  }

 private:
  int spins_ = 0;
};

class Mapping {
 public:
  Mapping(const StreamSide& side, int fd, std::size_t bytes) : bytes_(bytes) {
    base_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base_ == MAP_FAILED) fail(side, "mmap of " + side.name);
  }
  ~Mapping() { ::munmap(base_, bytes_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  RingControl& control() const { return *static_cast<RingControl*>(base_); }
  std::byte* data() const { return static_cast<std::byte*>(base_) + kRingDataOffset; }

 private:
  void* base_;
  std::size_t bytes_;
};

// The consumer's side of the mapping: creates the ring's name (removed again on destruction; the
// producer has it open by then), sizes it to `bytes` (zero-filled), maps it and sets up the
// control page with `capacity` (tuples of a stream ring; rings of a partitioned one).
class ConsumerMapping {
 public:
  ConsumerMapping(const StreamSide& side, std::size_t bytes, std::uint64_t capacity)
      : fd_(create(side, bytes)), remove_{side.name}, ring_(side, fd_.get(), bytes) {
    RingControl& control = *new (&ring_.control()) RingControl{};
    control.tuple_bytes = side.tuple_bytes;
    control.capacity = capacity;
    control.ready.store(1, std::memory_order_release);
  }
  const Mapping& ring() const { return ring_; }

 private:
  static int create(const StreamSide& side, std::size_t bytes) {
    OwnedFd fd(::shm_open(side.name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
    if (fd.get() < 0) fail(side, "cannot create " + side.name);
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
      ::shm_unlink(side.name.c_str());
      fail(side, "ftruncate");
    }
    return fd.release();
  }
  struct RemoveName {
    std::string name;
    ~RemoveName() { ::shm_unlink(name.c_str()); }
  };

  OwnedFd fd_;
  RemoveName remove_;
  Mapping ring_;
};

int ring_consumer(const StreamSide& side, std::ostream& out) {
  const std::size_t tb = side.tuple_bytes;
  const std::uint64_t capacity = std::max<std::size_t>(1, side.ring_bytes / tb);
  const std::uint64_t batch = std::max<std::size_t>(1, side.batch_bytes / tb);
  const ConsumerMapping mapping(side, kRingDataOffset + capacity * tb, capacity);
  const Mapping& ring = mapping.ring();
  RingControl& control = ring.control();

  const std::byte* const data = ring.data();
  Receiver receiver(tb);
  SpinWait wait;
  std::uint64_t tail = 0, head = 0, index = 0;
  for (;;) {
    if (tail == head) {
      head = control.head.load(std::memory_order_acquire);
      if (head == tail) {
        if (control.closed.load(std::memory_order_acquire) != 0) {
          head = control.head.load(std::memory_order_acquire);
          if (head == tail) break;
          continue;
        }
        wait.pause();
        continue;
      }
    }
    const std::uint64_t n = std::min({head - tail, capacity - index, batch});
    receiver.batch(data + index * tb, n);
    tail += n;
    index = index + n == capacity ? 0 : index + n;
    control.tail.store(tail, std::memory_order_release);
  }
  receiver.report(out, side.side);
  return 0;
}

// The producer's copies into the ring. Per tuple: one copy of a width the compiler knows (so it
// inlines it whole), tuple after tuple; the barrier keeps the compiler from fusing the loop into
// one memcpy of the run, which is the bulk copy. Bulk: one memcpy of the whole run.
using RunCopy = void (*)(std::byte* to, const std::byte* from, std::uint64_t tuples, std::size_t width);

template <std::size_t Width>
void copy_tuple_at_a_time(std::byte* to, const std::byte* from, std::uint64_t tuples, std::size_t) {
  for (std::uint64_t i = 0; i < tuples; ++i) {
    std::memcpy(to + i * Width, from + i * Width, Width);
    asm volatile("" ::: "memory");
  }
}

void copy_run(std::byte* to, const std::byte* from, std::uint64_t tuples, std::size_t width) {
  std::memcpy(to, from, tuples * width);
}

template <std::size_t... Widths>
RunCopy tuple_copy_of(std::size_t width, std::index_sequence<Widths...>) {
  RunCopy copy = nullptr;
  (void)((width == Widths ? (copy = &copy_tuple_at_a_time<Widths>, true) : false) || ...);
  return copy;
}

// The widths with a compile-time copy: every multiple of 8 up to 64 B, and the powers of two
// from 128 B to 4 KiB (the tuple sizes the bandwidth scenarios run).
RunCopy tuple_copy(std::size_t width) {
  return tuple_copy_of(width, std::index_sequence<8, 16, 24, 32, 40, 48, 56, 64, 128, 256, 512, 1024, 2048,
                                                  4096>{});
}

RunCopy run_copy(const StreamSide& side) {
  if (side.copy == "bulk") return &copy_run;
  if (side.copy != "tuple") {
    throw Error(Errc::invalid_argument,
                "bench-stream " + side.side + ": no copy '" + side.copy + "' (tuple, bulk, partition)");
  }
  if (RunCopy copy = tuple_copy(side.tuple_bytes)) return copy;
  throw Error(Errc::invalid_argument, "bench-stream " + side.side + ": no compile-time copy of " +
                                          std::to_string(side.tuple_bytes) + " B tuples (" +
                                          ring_tuple_widths_text() + ")");
}

// The producer's side of the mapping: waits (bounded by side.wait) until the consumer created,
// sized and set up the ring, maps it and checks its tuple width.
class ProducerMapping {
 public:
  explicit ProducerMapping(const StreamSide& side) : fd_(open(side)), ring_(side, fd_.get(), bytes_) {
    const Deadline deadline(side.wait);
    while (ring_.control().ready.load(std::memory_order_acquire) == 0) {
      if (deadline.expired()) {
        errno = ETIMEDOUT;
        fail(side, "the consumer did not set up " + side.name);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (ring_.control().tuple_bytes != side.tuple_bytes) {
      errno = EPROTO;
      fail(side, side.name + " holds " + std::to_string(ring_.control().tuple_bytes) + " B tuples, not " +
                     std::to_string(side.tuple_bytes));
    }
  }
  const Mapping& ring() const { return ring_; }
  std::size_t bytes() const { return bytes_; }

 private:
  int open(const StreamSide& side) {
    const Deadline deadline(side.wait);
    int raw = -1;
    struct stat info {};
    for (;;) {
      raw = ::shm_open(side.name.c_str(), O_RDWR | O_CLOEXEC, 0);
      if (raw >= 0 && ::fstat(raw, &info) == 0 && info.st_size > 0) break;
      if (raw >= 0) ::close(raw);
      if (raw < 0 && errno != ENOENT) fail(side, "cannot open " + side.name);
      if (deadline.expired()) {
        errno = ETIMEDOUT;
        fail(side, "no consumer created " + side.name);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    bytes_ = static_cast<std::size_t>(info.st_size);
    return raw;
  }

  std::size_t bytes_ = 0;
  OwnedFd fd_;
  Mapping ring_;
};

int ring_producer(const StreamSide& side) {
  const RunCopy copy = run_copy(side);
  const std::size_t tb = side.tuple_bytes;
  const ProducerMapping mapping(side);
  const Mapping& ring = mapping.ring();
  RingControl& control = ring.control();
  const std::uint64_t capacity = control.capacity;
  if (kRingDataOffset + capacity * tb > mapping.bytes()) {
    errno = EPROTO;
    fail(side, side.name + " is smaller than its ring of " + std::to_string(capacity) + " tuples");
  }

  const std::vector<std::byte> block = make_block(tb);
  const std::uint64_t per_block = block.size() / tb;
  const std::uint64_t batch = std::max<std::size_t>(1, side.batch_bytes / tb);
  std::byte* const data = ring.data();
  SpinWait wait;
  std::uint64_t head = 0, tail = 0, index = 0, in_block = 0;
  while (head < side.tuples) {
    if (head - tail == capacity) {
      tail = control.tail.load(std::memory_order_acquire);
      if (head - tail == capacity) wait.pause();
      continue;
    }
    const std::uint64_t n = std::min({capacity - (head - tail), capacity - index, batch,
                                      side.tuples - head, per_block - in_block});
    // Batches published like segments; their tuples copied as `side.copy` says.
    copy(data + index * tb, block.data() + in_block * tb, n, tb);
    head += n;
    index = index + n == capacity ? 0 : index + n;
    in_block = in_block + n == per_block ? 0 : in_block + n;
    control.head.store(head, std::memory_order_release);
  }
  control.closed.store(1, std::memory_order_release);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The hand-written partitioner: one producer, `targets` rings of DFI's layout, one consumer

// The rings' layout: the stream ring's bytes cut into segments of `batch_bytes` of payload, each
// followed by the footer, as a flow's rings (32 x 8 KiB + 16 on shm by default).
memory::RingLayout partition_layout(const StreamSide& side) {
  const std::size_t segments = std::max<std::size_t>(1, side.ring_bytes / side.batch_bytes);
  if (side.targets == 0 || side.targets > 4096 || side.batch_bytes % 8 != 0 ||
      side.batch_bytes < side.tuple_bytes || segments > (1u << 20) || side.batch_bytes > (1u << 30)) {
    throw Error(Errc::invalid_argument, "bench-stream " + side.side + ": a partitioned ring needs 1-4096 targets "
                                        "and segments of a multiple of 8 bytes holding a tuple");
  }
  return memory::RingLayout{static_cast<std::uint32_t>(segments),
                            static_cast<std::uint32_t>(side.batch_bytes + memory::kFooterBytes)};
}

// Bytes from one ring to the next in the mapping: each ring starts on a page of its own, as a
// flow's rings do (each target's region is allocated apart).
std::size_t ring_stride(const memory::RingLayout& layout) { return (layout.bytes() + 4095) / 4096 * 4096; }

int partition_consumer(const StreamSide& side, std::ostream& out) {
  const std::size_t tb = side.tuple_bytes;
  const memory::RingLayout layout = partition_layout(side);
  const std::size_t rings = side.targets;
  const ConsumerMapping mapping(side, kRingDataOffset + rings * ring_stride(layout), rings);
  std::byte* const data = mapping.ring().data();

  Receiver receiver(tb);
  SpinWait wait;
  // Per ring: the sequence it publishes next (0 once it ended) and that sequence's slot, advanced
  // slot by slot (no division per poll).
  struct Next {
    std::uint64_t sequence = 1;
    std::byte* slot = nullptr;
  };
  std::vector<Next> next(rings);
  for (std::size_t t = 0; t < rings; ++t) next[t].slot = data + t * ring_stride(layout);
  const std::size_t capacity = layout.payload_capacity();
  std::size_t open = rings;
  while (open > 0) {
    bool found = false;
    for (std::size_t t = 0; t < rings; ++t) {
      Next& n = next[t];
      if (n.sequence == 0) continue;  // ended
      const std::uint64_t state = memory::load_acquire(n.slot + capacity + 8);
      if (memory::state_sequence(state) != n.sequence) continue;
      found = true;
      if ((memory::state_flags(state) & memory::kEndOfStream) != 0) {
        n.sequence = 0;
        --open;
        continue;
      }
      std::uint64_t fill;
      std::memcpy(&fill, n.slot + capacity, sizeof fill);
      receiver.batch(n.slot, fill / tb, t);
      std::byte* const ring = data + t * ring_stride(layout);
      memory::store_release(ring + layout.tail_offset(), n.sequence);
      ++n.sequence;
      n.slot = n.slot + layout.segment_bytes == ring + layout.head_offset() ? ring : n.slot + layout.segment_bytes;
    }
    if (!found) wait.pause();
  }
  receiver.report(out, side.side);
  return 0;
}

// The producer's rings: per target the segment being filled, published whole when the next line
// does not fit, and the credits (free slots) it knows of.
class PartitionRings {
 public:
  PartitionRings(std::byte* data, const memory::RingLayout& layout, std::size_t targets, std::size_t tuple_bytes)
      : data_(data), layout_(layout), capacity_(layout.payload_capacity() / tuple_bytes * tuple_bytes),
        out_(targets) {
    for (std::size_t t = 0; t < targets; ++t) {
      out_[t].segment = ring(t) + layout_.slot_offset(1);
      out_[t].credits = layout_.segments - 1;
    }
  }

  // Stores `Pieces` rows of `Width` bytes from `from` (a full line, or one row) at the end of
  // target t's segment, row by row, publishing the segment first when they do not fit.
  template <std::size_t Width, std::size_t Pieces>
  [[gnu::always_inline]] void put(std::size_t t, const std::byte* from) {
    Out& o = out_[t];
    if (o.fill + Width * Pieces > capacity_) [[unlikely]] next(t);
    for (std::size_t k = 0; k < Pieces; ++k) std::memcpy(o.segment + o.fill + k * Width, from + k * Width, Width);
    o.fill += static_cast<std::uint32_t>(Width * Pieces);
  }
  void put(std::size_t t, const std::byte* from, std::size_t bytes) {
    Out& o = out_[t];
    if (o.fill + bytes > capacity_) next(t);
    std::memcpy(o.segment + o.fill, from, bytes);
    o.fill += static_cast<std::uint32_t>(bytes);
  }
  // Publishes every partly filled segment, then end-of-stream in every ring.
  void close() {
    for (std::size_t t = 0; t < out_.size(); ++t) {
      if (out_[t].fill > 0) next(t);
      memory::publish_in_place(ring(t), layout_, out_[t].sequence, 0,
                               memory::state_word(out_[t].sequence, memory::kEndOfStream));
    }
  }

 private:
  struct Out {
    std::byte* segment = nullptr;  // payload of sequence `sequence`
    std::uint32_t fill = 0;
    std::uint32_t credits = 0;  // slots free after this one
    std::uint64_t sequence = 1;
  };

  std::byte* ring(std::size_t t) const { return data_ + t * ring_stride(layout_); }

  // Publishes target t's segment and moves to the next slot once the consumer released it.
  [[gnu::noinline]] void next(std::size_t t) {
    Out& o = out_[t];
    std::byte* const r = ring(t);
    memory::publish_in_place(r, layout_, o.sequence, o.fill, memory::state_word(o.sequence, memory::kConsumable));
    ++o.sequence;
    while (o.credits == 0) {
      const std::uint64_t tail = memory::load_acquire(r + layout_.tail_offset());
      o.credits = static_cast<std::uint32_t>(layout_.free_slots(o.sequence - 1, tail));
      if (o.credits == 0) wait_.pause();
    }
    --o.credits;
    o.segment = r + layout_.slot_offset(o.sequence);
    o.fill = 0;
  }

  std::byte* data_;
  memory::RingLayout layout_;
  std::size_t capacity_;  // whole tuples per segment, in bytes
  std::vector<Out> out_;
  SpinWait wait_;
};

constexpr std::size_t kLine = 64;        // a write-combine buffer: one cache line
constexpr std::size_t kRouteChunk = 256;  // rows routed per pass of the hash loop

// One chunk of routed rows of Width bytes. Lines (Width <= kLine / 2, not Direct): each row goes
// into its target's write-combine line, and a full line into the target's segment, copied row by
// row out of the line: each load then matches the store that wrote it, so it is forwarded from
// the store buffer (one 64-byte load of a line written by smaller stores waits until those
// stores, and every store to shared memory before them, have left the store buffer: 80 % of the
// producer's time in perf). Direct, and rows wider than half a line: each row straight into its
// target's segment (the hash still hoisted out of the copy loop).
template <std::size_t Width, bool Direct>
[[gnu::always_inline]] inline void scatter_partition(const std::byte* rows, const std::uint32_t* targets,
                                                     std::size_t count, std::byte* lines, std::uint32_t* fill,
                                                     PartitionRings& out) {
  if constexpr (Direct || Width * 2 > kLine) {
    (void)lines;
    (void)fill;
    for (std::size_t i = 0; i < count; ++i, rows += Width) out.put<Width, 1>(targets[i], rows);
  } else {
    constexpr std::size_t kPerLine = kLine / Width;
    for (std::size_t i = 0; i < count; ++i, rows += Width) {
      const std::size_t t = targets[i];
      std::byte* const line = lines + t * kLine;
      std::memcpy(line + fill[t], rows, Width);
      fill[t] += static_cast<std::uint32_t>(Width);
      if (fill[t] == kPerLine * Width) [[unlikely]] {
        out.put<Width, kPerLine>(t, line);
        fill[t] = 0;
      }
    }
  }
}

// The loop compiled twice: for baseline x86-64 and for AVX-512, where a row of 64 bytes or more
// goes into its segment with one load and one store per 64 bytes (rows wider than half a line are
// copied straight from the caller's block, so there is no store to wait for).
template <std::size_t Width, bool Direct>
void scatter_baseline(const std::byte* rows, const std::uint32_t* targets, std::size_t count, std::byte* lines,
                      std::uint32_t* fill, PartitionRings& out) {
  scatter_partition<Width, Direct>(rows, targets, count, lines, fill, out);
}
template <std::size_t Width, bool Direct>
[[gnu::target("avx512f")]] void scatter_wide(const std::byte* rows, const std::uint32_t* targets, std::size_t count,
                                             std::byte* lines, std::uint32_t* fill, PartitionRings& out) {
  scatter_partition<Width, Direct>(rows, targets, count, lines, fill, out);
}

using ScatterPartition = void (*)(const std::byte*, const std::uint32_t*, std::size_t, std::byte*, std::uint32_t*,
                                  PartitionRings&);

template <bool Direct, std::size_t... Widths>
ScatterPartition scatter_of(std::size_t width, std::index_sequence<Widths...>) {
  const bool wide = kernels::avx512_available();
  ScatterPartition scatter = nullptr;
  (void)((width == Widths ? (scatter = wide && Widths * 2 > kLine ? &scatter_wide<Widths, Direct>
                                                                  : &scatter_baseline<Widths, Direct>,
                             true)
                          : false) ||
         ...);
  return scatter;
}

int partition_producer(const StreamSide& side) {
  const std::size_t tb = side.tuple_bytes;
  // Compile-time widths as for the per-tuple ring; the partition scenario runs 16 and 64 B.
  using Widths = std::index_sequence<8, 16, 24, 32, 40, 48, 56, 64, 128, 256, 512, 1024, 2048, 4096>;
  const ScatterPartition scatter =
      side.copy == "partition-direct" ? scatter_of<true>(tb, Widths{}) : scatter_of<false>(tb, Widths{});
  if (scatter == nullptr) {
    throw Error(Errc::invalid_argument, "bench-stream " + side.side + ": no compile-time scatter of " +
                                            std::to_string(tb) + " B tuples (" + ring_tuple_widths_text() + ")");
  }
  const memory::RingLayout layout = partition_layout(side);
  const std::size_t targets = side.targets;
  const ProducerMapping mapping(side);
  if (mapping.ring().control().capacity != targets ||
      kRingDataOffset + targets * ring_stride(layout) > mapping.bytes()) {
    errno = EPROTO;
    fail(side, side.name + " does not hold " + std::to_string(targets) + " rings of " +
                   std::to_string(layout.segments) + " x " + std::to_string(layout.segment_bytes) + " B");
  }
  PartitionRings out(mapping.ring().data(), layout, targets, tb);
  // The write-combine lines, aligned to a cache line, and their fill in bytes.
  std::vector<std::byte> line_storage((targets + 1) * kLine);
  std::byte* const lines = line_storage.data() +
                           (kLine - reinterpret_cast<std::uintptr_t>(line_storage.data()) % kLine) % kLine;
  std::vector<std::uint32_t> fill(targets, 0);
  std::vector<std::uint32_t> routed(kRouteChunk);
  const kernels::RouteRows route_rows = kernels::route_rows_kernel();

  const std::vector<std::byte> block = make_block(tb);
  const std::uint64_t per_block = block.size() / tb;
  std::uint64_t sent = 0, in_block = 0;
  while (sent < side.tuples) {
    const std::size_t n = static_cast<std::size_t>(std::min({std::uint64_t{kRouteChunk}, side.tuples - sent,
                                                             per_block - in_block}));
    const std::byte* rows = block.data() + in_block * tb;
    route_rows(rows, tb, 0, n, targets, routed.data());
    scatter(rows, routed.data(), n, lines, fill.data(), out);
    sent += n;
    in_block = in_block + n == per_block ? 0 : in_block + n;
  }
  for (std::size_t t = 0; t < targets; ++t) {
    if (fill[t] > 0) out.put(t, lines + t * kLine, fill[t]);
  }
  out.close();
  return 0;
}

}  // namespace

bool ring_copies_width(std::size_t tuple_bytes) { return tuple_copy(tuple_bytes) != nullptr; }

std::string ring_tuple_widths_text() {
  std::string text = "compile-time copies of";
  for (std::size_t w = 8; w <= 4096; w += 8) {
    if (tuple_copy(w) == nullptr) continue;
    text += ' ';
    text += std::to_string(w);
  }
  return text + " B";
}

std::vector<std::string> stream_side_names() {
  return {"tcp-reader", "tcp-writer", "ring-consumer", "ring-producer"};
}

int run_stream_side(const StreamSide& side, std::ostream& out, std::ostream& err) {
  try {
    const bool sender = side.side == "tcp-writer" || side.side == "ring-producer";
    if (side.tuple_bytes < 8 || side.tuple_bytes % 8 != 0 || (sender && side.tuples == 0)) {
      throw Error(Errc::invalid_argument,
                  "bench-stream " + side.side +
                      ": tuples are a multiple of 8 bytes, at least 8, and a sender sends some");
    }
    if (side.side == "tcp-reader") return tcp_reader(side, out);
    if (side.side == "tcp-writer") return tcp_writer(side);
    const bool partition = is_partition_copy(side.copy);
    if (side.side == "ring-consumer") return partition ? partition_consumer(side, out) : ring_consumer(side, out);
    if (side.side == "ring-producer") return partition ? partition_producer(side) : ring_producer(side);
    throw Error(Errc::invalid_argument, "bench-stream: no side '" + side.side + "'");
  } catch (const std::exception& e) {
    err << e.what() << '\n';
    return 1;
  }
}

}  // namespace dfi::tools::bench
