// RingWriter -> RingReader inside one process, over shm (mapped and put paths) and TCP: every
// tuple arrives once and in order, for both modes, with a consumer slower than the producer.
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
#include "dfi/memory/ring_reader.hpp"
#include "dfi/memory/ring_writer.hpp"
#include "dfi/memory/segment_receiver.hpp"

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
    RingWriterOptions wo;
    wo.mode = c.mode;
    wo.allow_mapped = c.mapped;
    wo.allow_am = c.am;
    RingWriter writer(worker, ep, remote, ring_at, layout, wo, "test ring");
    EXPECT_EQ(writer.path() == RingWriter::Path::active_message, c.am);
    if (c.mapped && c.transport == Transport::shm) {
      EXPECT_TRUE(writer.mapped());
    }
    if (!c.mapped) {
      EXPECT_FALSE(writer.mapped());
    }
    for (std::uint64_t i = 1; i <= kTuples; ++i) {
      std::uint64_t tuple[3] = {i, i * 3, ~i};
      if (!writer.append(tuple, sizeof tuple)) producer_failed = true;
    }
    if (!writer.close()) producer_failed = true;
    counters = writer.counters();
  });

  RingReader reader(static_cast<std::byte*>(region.data()) + ring_at, layout);
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
  EXPECT_EQ(l.free_state_for(3), 0u);
  EXPECT_EQ(l.free_state_for(6), state_word(2, 0));
}

}  // namespace
}  // namespace dfi::memory
