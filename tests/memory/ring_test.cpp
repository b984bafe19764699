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

namespace dfi::memory {
namespace {

using fabric::Transport;

struct Case {
  Transport transport;
  bool mapped;
  RingMode mode;
};

std::string case_name(const ::testing::TestParamInfo<Case>& param_info) {
  const Case& c = param_info.param;
  return std::string(fabric::transport_name(c.transport)) + (c.mapped ? "_mapped" : "_put") +
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

  constexpr std::uint64_t kTuples = 3000;
  std::atomic<bool> producer_failed{false};
  RingCounters counters;
  std::thread producer([&] {
    fabric::Worker worker(context, "producer");
    fabric::Endpoint ep = worker.connect(1, service.address());
    fabric::RemoteMemory remote = ep.attach(region.descriptor());
    RingWriterOptions wo;
    wo.mode = c.mode;
    wo.allow_mapped = c.mapped;
    RingWriter writer(worker, ep, remote, 64, layout, wo, "test ring");
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

  RingReader reader(static_cast<std::byte*>(region.data()) + 64, layout);
  std::uint64_t expected = 1;
  bool ended = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!ended && std::chrono::steady_clock::now() < deadline) {
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
                      Case{Transport::tcp, false, RingMode::bandwidth}, Case{Transport::tcp, false, RingMode::latency}),
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
