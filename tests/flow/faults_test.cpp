// The flow_faults rules (include/dfi/flow/detail/faults.hpp): parsing, which links a rule
// matches, and which segments it delays or drops.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "dfi/common/error.hpp"
#include "dfi/flow/detail/faults.hpp"

namespace dfi::flow::detail {
namespace {

FlowSpec two_sources(const std::string& name, bool replicate) {
  FlowSpec spec;
  spec.name = name;
  spec.type = replicate ? FlowType::replicate : FlowType::shuffle;
  spec.sources = {{1, 0}, {2, 0}};
  spec.targets = {{0, 0}, {3, 0}};
  return spec;
}

memory::SegmentView segment(std::uint64_t sequence) {
  memory::SegmentView v;
  v.bytes = 16;
  v.sequence = sequence;
  return v;
}

std::string error_of(const std::string& text) {
  try {
    (void)parse_fault_rules(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    return e.what();
  }
  return "no error";
}

TEST(FlowFaults, ParsesRules) {
  const auto rules = parse_fault_rules(" flow=kv.v*.accept, to=2, delay=150, every=10 ;flow=x,from=3,drop,first=5,count=2;");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].flow, "kv.v*.accept");
  EXPECT_EQ(rules[0].to, 2);
  EXPECT_EQ(rules[0].from, -1);
  EXPECT_FALSE(rules[0].drop);
  EXPECT_EQ(rules[0].delay, std::chrono::milliseconds(150));
  EXPECT_EQ(rules[0].every, 10u);
  EXPECT_EQ(rules[0].first, 1u);
  EXPECT_TRUE(rules[1].drop);
  EXPECT_EQ(rules[1].from, 3);
  EXPECT_EQ(rules[1].first, 5u);
  EXPECT_EQ(rules[1].count, 2u);
  EXPECT_TRUE(parse_fault_rules("").empty());
}

TEST(FlowFaults, BadRulesAreNamed) {
  EXPECT_NE(error_of("to=1,drop").find("rule 'to=1,drop': flow=PATTERN is required"), std::string::npos);
  EXPECT_NE(error_of("flow=a").find("exactly one of drop and delay"), std::string::npos);
  EXPECT_NE(error_of("flow=a,drop,delay=5").find("exactly one of drop and delay"), std::string::npos);
  EXPECT_NE(error_of("flow=a,delay=x").find("delay='x' is not a non-negative integer"), std::string::npos);
  EXPECT_NE(error_of("flow=a,delay=0").find("at least 1 ms"), std::string::npos);
  EXPECT_NE(error_of("flow=a,drop,every=0").find("every= must be at least 1"), std::string::npos);
  EXPECT_NE(error_of("flow=a,drop,lose").find("'lose' is neither key=value nor drop"), std::string::npos);
  EXPECT_NE(error_of("flow=a,drop,often=3").find("unknown key 'often'"), std::string::npos);
}

TEST(FlowFaults, ResolvesOnlyMatchingLinks) {
  const FlowSpec spec = two_sources("kv.v1.requests", true);
  EXPECT_EQ(RingFaults::resolve(parse_fault_rules("flow=kv.v1.accept,drop"), spec, 0, true), nullptr);
  EXPECT_EQ(RingFaults::resolve(parse_fault_rules("flow=kv.v*.requests,to=3,drop"), spec, 0, true), nullptr);
  EXPECT_EQ(RingFaults::resolve(parse_fault_rules("flow=kv.v*,from=7,drop"), spec, 0, true), nullptr);
  auto faults = RingFaults::resolve(parse_fault_rules("flow=kv.v*.requests,from=2,to=3,drop"), spec, 1, true);
  ASSERT_NE(faults, nullptr);
  EXPECT_EQ(faults->judge(0, segment(1)), RingFaults::Verdict::deliver);  // rank 1's ring: no rule
  EXPECT_EQ(faults->judge(1, segment(1)), RingFaults::Verdict::drop);
}

TEST(FlowFaults, DropOnAReliableFlowIsRefused) {
  const FlowSpec spec = two_sources("s", false);
  try {
    (void)RingFaults::resolve(parse_fault_rules("flow=s,drop"), spec, 0, false);
    FAIL() << "a drop on a shuffle flow was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("drop matches flow 's' (shuffle), which never loses a segment"), std::string::npos)
        << e.what();
  }
  EXPECT_NE(RingFaults::resolve(parse_fault_rules("flow=s,delay=5"), spec, 0, false), nullptr);
}

TEST(FlowFaults, DropsTheChosenSegmentsOfEachLink) {
  auto faults = RingFaults::resolve(parse_fault_rules("flow=f,drop,first=2,every=3,count=2"), two_sources("f", true), 0, true);
  ASSERT_NE(faults, nullptr);
  std::vector<std::uint64_t> dropped;
  for (std::uint64_t seq = 1; seq <= 12; ++seq) {
    if (faults->judge(0, segment(seq)) == RingFaults::Verdict::drop) dropped.push_back(seq);
  }
  EXPECT_EQ(dropped, (std::vector<std::uint64_t>{2, 5}));  // 2, 5, then count reached
  EXPECT_EQ(faults->judge(1, segment(1)), RingFaults::Verdict::deliver);
  EXPECT_EQ(faults->judge(1, segment(2)), RingFaults::Verdict::drop);  // counted per link
  memory::SegmentView end = segment(3);
  end.end_of_stream = true;
  EXPECT_EQ(faults->judge(1, end), RingFaults::Verdict::deliver);
  EXPECT_EQ(faults->dropped(), 3u);
}

TEST(FlowFaults, DelayHoldsTheLinkUntilDue) {
  auto faults = RingFaults::resolve(parse_fault_rules("flow=f,from=1,delay=40,first=2,count=1"), two_sources("f", false), 0, false);
  ASSERT_NE(faults, nullptr);
  EXPECT_EQ(faults->judge(0, segment(1)), RingFaults::Verdict::deliver);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(faults->judge(0, segment(2)), RingFaults::Verdict::hold);
  EXPECT_EQ(faults->judge(0, segment(2)), RingFaults::Verdict::hold);  // judged again: still held
  while (faults->judge(0, segment(2)) == RingFaults::Verdict::hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(40));
  EXPECT_EQ(faults->judge(0, segment(3)), RingFaults::Verdict::deliver);
  EXPECT_EQ(faults->delayed(), 1u);
}

}  // namespace
}  // namespace dfi::flow::detail
