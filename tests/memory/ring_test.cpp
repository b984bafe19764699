// Segment rings inside one process, over shm (mapped and put paths) and TCP (put and
// active-message paths): a TupleWriter<RemoteRing> into a SegmentReader<LocalRing> (every flow),
// and a SegmentWriter<LocalRing> read by a SegmentReader<RemoteRing> (a third party such as the
// data mover). Every tuple arrives once and in order, with a reader slower than the writer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "dfi/fabric/context.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/fabric/progress_thread.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/memory/segment_reader.hpp"
#include "dfi/memory/segment_receiver.hpp"
#include "dfi/memory/segment_writer.hpp"
#include "dfi/memory/tuple_writer.hpp"

namespace dfi::memory {
namespace {

using fabric::Transport;

struct Case {
  Transport transport;
  bool mapped;
  RingMode mode;
  bool am = false;  // segments as active messages to a SegmentReceiver (tcp)
};

std::string case_name(const ::testing::TestParamInfo<Case>& param_info) {
  const Case& c = param_info.param;
  return std::string(fabric::transport_name(c.transport)) + (c.am ? "_am" : c.mapped ? "_mapped" : "_put") +
         (c.mode == RingMode::bandwidth ? "_bandwidth" : "_latency");
}

class Ring : public ::testing::TestWithParam<Case> {};

TEST_P(Ring, EveryTupleArrivesOnceInOrderThroughATinyRing) {
  const Case c = GetParam();
  fabric::ContextOptions options;
  options.transport = c.transport;
  fabric::Context context(options);
  const RingLayout layout = c.mode == RingMode::bandwidth ? RingLayout::make(2, 16 + 64) : RingLayout::make(2, 16 + 24);
  fabric::MemoryRegion region(context, 64 + layout.bytes());
  fabric::Worker service(context, "service");
  fabric::ProgressThread progress(service);
  // The active-message path: the reader's own worker, progressed by the reader thread below.
  const std::size_t ring_at = c.am ? 0 : 64;
  fabric::Worker target(context, "target");
  SegmentReceiver receiver(target, static_cast<std::byte*>(region.data()), 1, layout, "test target");

  constexpr std::uint64_t kTuples = 3000;
  std::atomic<bool> producer_failed{false}, producer_done{false};
  RingCounters counters;
  std::thread producer([&] {
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag = true; }
    } done{producer_done};  // set after the writer and the endpoint below are gone
    fabric::Worker worker(context, "producer");
    fabric::Endpoint ep = worker.connect(1, c.am ? target.address() : service.address());
    fabric::RemoteMemory remote = ep.attach(region.descriptor());
    RemoteRingOptions access;
    access.allow_mapped = c.mapped;
    access.allow_am = c.am;
    TupleWriter<RemoteRing> writer(c.mode, SegmentWriterOptions{}, worker, ep, remote, ring_at, layout, access,
                                   "test ring");
    const RemoteRing::Path path = writer.segments().access().path();
    EXPECT_EQ(path == RemoteRing::Path::active_message, c.am);
    if (c.mapped && c.transport == Transport::shm) {
      EXPECT_EQ(path, RemoteRing::Path::mapped);
    }
    if (!c.mapped) {
      EXPECT_NE(path, RemoteRing::Path::mapped);
    }
    for (std::uint64_t i = 1; i <= kTuples; ++i) {
      std::uint64_t tuple[3] = {i, i * 3, ~i};
      if (!writer.append(tuple, sizeof tuple)) producer_failed = true;
    }
    if (!writer.close()) producer_failed = true;
    counters = writer.counters();
  });

  SegmentReader<LocalRing> reader(static_cast<std::byte*>(region.data()) + ring_at, layout);
  std::uint64_t expected = 1;
  bool ended = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    if (c.am) receiver.progress();
    std::optional<SegmentView> view = reader.peek();
    if (!view) continue;
    ended = view->end_of_stream;
    ASSERT_EQ(view->bytes % 24, 0u);
    for (std::size_t off = 0; off < view->bytes; off += 24) {
      std::uint64_t tuple[3];
      std::memcpy(tuple, view->data + off, 24);
      ASSERT_EQ(tuple[0], expected);
      ASSERT_EQ(tuple[1], expected * 3);
      ASSERT_EQ(tuple[2], ~expected);
      ++expected;
    }
    if (expected % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // slow consumer
    reader.release();
  }
  while (c.am && !producer_done) receiver.progress();  // the producer's closing flush needs it
  producer.join();
  EXPECT_TRUE(ended);
  EXPECT_FALSE(producer_failed);
  EXPECT_EQ(expected, kTuples + 1);
  EXPECT_GT(counters.stalls, 0u) << "a 2-segment ring with a slow consumer must have stalled";
  EXPECT_EQ(reader.published(), counters.segments) << "the head word names the last segment published";
  EXPECT_EQ(load_acquire(static_cast<std::byte*>(region.data()) + ring_at + layout.tail_offset()), counters.segments)
      << "the tail word counts the segments released";
}

INSTANTIATE_TEST_SUITE_P(
    Paths, Ring,
    ::testing::Values(Case{Transport::shm, true, RingMode::bandwidth}, Case{Transport::shm, false, RingMode::bandwidth},
                      Case{Transport::shm, true, RingMode::latency}, Case{Transport::shm, false, RingMode::latency},
                      Case{Transport::tcp, false, RingMode::bandwidth}, Case{Transport::tcp, false, RingMode::latency},
                      Case{Transport::tcp, false, RingMode::bandwidth, true},
                      Case{Transport::tcp, false, RingMode::latency, true}),
    case_name);

TEST(RingLayoutTest, BadLayoutsAreRejected) {
  EXPECT_THROW((void)RingLayout::make(0, 64), Error);
  EXPECT_THROW((void)RingLayout::make(4, 16), Error);
  EXPECT_THROW((void)RingLayout::make(4, 60), Error);
  RingLayout l = RingLayout::make(4, 64);
  EXPECT_EQ(l.payload_capacity(), 48u);
  EXPECT_EQ(l.slot_offset(5), 0u);
  EXPECT_EQ(l.bytes(), 4u * 64 + 2 * kWordLine);
  EXPECT_EQ(l.tail_offset(), l.head_offset() + kWordLine);
  EXPECT_EQ(l.free_slots(0, 0), 4u);
  EXPECT_EQ(l.free_slots(4, 0), 0u);
  EXPECT_EQ(l.free_slots(6, 3), 1u);
}

// A processing unit's ring in its own memory, written with plain stores (SegmentWriter<LocalRing>:
// acquire, fill in place, publish; publish_from), and read from another worker through the fabric
// (SegmentReader<RemoteRing>) the way the data mover reads it: head word, then the segment, then
// the tail raised. Segments of every size from empty to full arrive once and in order.
class RemoteReader : public ::testing::TestWithParam<Case> {};

TEST_P(RemoteReader, ReadsEverySegmentOfALocalWriterOnceInOrder) {
  const Case c = GetParam();
  fabric::ContextOptions options;
  options.transport = c.transport;
  fabric::Context context(options);
  const RingLayout layout = RingLayout::make(3, 16 + 80);
  fabric::MemoryRegion region(context, layout.bytes());
  fabric::Worker owner(context, "owner");
  fabric::ProgressThread progress(owner);  // serves the reader's gets where RMA is emulated

  constexpr std::uint64_t kSegments = 500;
  std::atomic<bool> writer_failed{false};
  RingCounters counters;
  std::thread writer_thread([&] {
    SegmentWriterOptions wo;
    wo.stall_timeout = std::chrono::milliseconds(30000);
    SegmentWriter<LocalRing> writer(wo, static_cast<std::byte*>(region.data()), layout, "test pu ring");
    EXPECT_TRUE(writer.in_place());
    for (std::uint64_t n = 1; n <= kSegments; ++n) {
      const std::size_t words = n % 11;  // 0 .. 10 words: empty to full
      if (n % 2 == 0) {
        std::span<std::byte> payload;
        if (!writer.acquire(payload)) writer_failed = true;
        if (payload.size() != 80) writer_failed = true;
        for (std::size_t w = 0; w < words; ++w) std::memcpy(payload.data() + 8 * w, &n, 8);
        if (!writer.publish(8 * words)) writer_failed = true;
      } else {
        std::uint64_t data[10];
        std::fill(data, data + words, n);
        if (!writer.publish_from(data, 8 * words)) writer_failed = true;
      }
    }
    if (!writer.close()) writer_failed = true;
    counters = writer.counters();
  });

  fabric::Worker worker(context, "mover");
  fabric::Endpoint ep = worker.connect(1, owner.address());
  fabric::RemoteMemory remote = ep.attach(region.descriptor());
  RemoteRingOptions access;
  access.allow_mapped = c.mapped;
  SegmentReader<RemoteRing> reader(worker, ep, remote, 0, layout, access, "test mover");
  EXPECT_EQ(reader.access().path() == RemoteRing::Path::mapped, c.mapped && c.transport == Transport::shm);
  std::uint64_t expected = 1;
  bool ended = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    std::optional<SegmentView> view;
    ASSERT_TRUE(reader.peek(view));
    if (!view) {
      worker.progress();
      continue;
    }
    ASSERT_EQ(view->sequence, expected);
    ended = view->end_of_stream;
    if (!ended) {
      ASSERT_EQ(view->bytes, 8 * (expected % 11)) << "segment " << expected;
      for (std::size_t off = 0; off < view->bytes; off += 8) {
        std::uint64_t word;
        std::memcpy(&word, view->data + off, 8);
        ASSERT_EQ(word, expected);
      }
    }
    ++expected;
    ASSERT_TRUE(reader.release());
  }
  writer_thread.join();
  EXPECT_TRUE(ended);
  EXPECT_FALSE(writer_failed);
  EXPECT_EQ(expected, kSegments + 2);  // and the end-of-stream segment
  std::uint64_t head = 0;
  ASSERT_TRUE(reader.published(head));
  EXPECT_EQ(head, kSegments + 1);
  EXPECT_GT(counters.stalls, 0u) << "a 3-segment ring read through the fabric must have stalled";
}

INSTANTIATE_TEST_SUITE_P(Paths, RemoteReader,
                         ::testing::Values(Case{Transport::shm, true, RingMode::bandwidth},
                                           Case{Transport::shm, false, RingMode::bandwidth},
                                           Case{Transport::tcp, false, RingMode::bandwidth}),
                         case_name);

// Misuse of the segment interface is refused with a message naming the ring.
TEST(SegmentWriterTest, MisuseIsAnErrorNamingTheRing) {
  const RingLayout layout = RingLayout::make(2, 16 + 32);
  std::vector<std::byte> memory(layout.bytes());
  SegmentWriterOptions wo;
  wo.stall_timeout = std::chrono::milliseconds(50);
  SegmentWriter<LocalRing> writer(wo, memory.data(), layout, "ring X");
  Status s = writer.publish(8);
  EXPECT_EQ(s.code(), Errc::invalid_argument);
  EXPECT_NE(s.message().find("ring X"), std::string::npos) << s.message();
  std::byte big[40]{};
  EXPECT_EQ(writer.publish_from(big, sizeof big).code(), Errc::invalid_argument);
  std::span<std::byte> payload;
  ASSERT_TRUE(writer.acquire(payload));
  EXPECT_EQ(writer.publish(33).code(), Errc::invalid_argument);
  ASSERT_TRUE(writer.publish(32));
  ASSERT_TRUE(writer.publish_from(big, 8));
  s = writer.publish_from(big, 8);  // nobody reads: the ring is full
  EXPECT_EQ(s.code(), Errc::timeout);
  EXPECT_NE(s.message().find("ring X"), std::string::npos) << s.message();
  SegmentReader<LocalRing> reader(memory.data(), layout);
  ASSERT_TRUE(reader.peek().has_value());
  reader.release();
  ASSERT_TRUE(writer.close());
  EXPECT_EQ(writer.publish_from(big, 8).code(), Errc::flow_failed);
  EXPECT_EQ(reader.published(), 3u);
}

// Two-phase publication (the mover's ordered replication): a written segment stays invisible to
// the reader until it is published, with the fill it was written with.
TEST(SegmentWriterTest, AWrittenSegmentIsShownOnlyWhenPublished) {
  const RingLayout layout = RingLayout::make(2, 16 + 32);
  std::vector<std::byte> memory(layout.bytes());
  SegmentWriter<LocalRing> writer(SegmentWriterOptions{}, memory.data(), layout, "ring Y");
  SegmentReader<LocalRing> reader(memory.data(), layout);
  EXPECT_EQ(writer.write(8).code(), Errc::invalid_argument);  // nothing acquired
  std::span<std::byte> payload;
  ASSERT_TRUE(writer.acquire(payload));
  payload[0] = std::byte{42};
  ASSERT_TRUE(writer.write(8));
  EXPECT_FALSE(reader.peek().has_value()) << "written, not published";
  Status twice = writer.write(8);
  EXPECT_EQ(twice.code(), Errc::invalid_argument);
  EXPECT_NE(twice.message().find("ring Y"), std::string::npos) << twice.message();
  EXPECT_EQ(writer.publish(16).code(), Errc::invalid_argument);  // not the fill written
  ASSERT_TRUE(writer.publish(8));
  std::optional<SegmentView> view = reader.peek();
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->bytes, 8u);
  EXPECT_EQ(view->data[0], std::byte{42});
  reader.release();
  ASSERT_TRUE(writer.publish_from(payload.data(), 4));  // the next segment: one phase again
  ASSERT_TRUE(reader.peek().has_value());
}

}  // namespace
}  // namespace dfi::memory
