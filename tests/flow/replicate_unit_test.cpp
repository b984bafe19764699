// Unit tests of what every member of a replicate flow derives from the spec alone: the relay
// trees, and the spec's replicate options on the wire.
#include <gtest/gtest.h>

#include <set>

#include "dfi/common/error.hpp"
#include "dfi/flow/replicate.hpp"

namespace dfi::flow {
namespace {

FlowSpec spec_with(std::size_t sources, std::size_t targets, Replication replication,
                   std::uint32_t fanout) {
  FlowSpec spec;
  spec.name = "tree";
  spec.type = FlowType::replicate;
  for (std::size_t s = 0; s < sources; ++s)
    spec.sources.push_back({static_cast<int>(s % 3), static_cast<int>(s)});
  for (std::size_t t = 0; t < targets; ++t)
    spec.targets.push_back({static_cast<int>(t % 3), static_cast<int>(t)});
  spec.schema = Schema({{"key", Type::uint64}});
  spec.type_options = ReplicateOptions{.replication = replication, .fanout = fanout};
  return spec;
}

// Every target is reached exactly once, from its parent, and the children lists agree with the
// parents; no node has more than `fanout` children.
void check_tree(const FlowSpec& spec, std::size_t source) {
  const std::size_t m = spec.targets.size();
  const ReplicateOptions& options = spec.type_options.get<ReplicateOptions>();
  const std::size_t f = options.replication == Replication::naive ? m : options.fanout;
  std::vector<int> reached(m, 0);
  std::vector<std::optional<std::size_t>> frontier{std::nullopt};
  std::size_t depth = 0;
  while (!frontier.empty()) {
    std::vector<std::optional<std::size_t>> next;
    for (const auto& node : frontier) {
      const std::vector<std::size_t> children = relay_children(spec, source, node);
      EXPECT_LE(children.size(), f);
      for (std::size_t child : children) {
        ASSERT_LT(child, m);
        ++reached[child];
        EXPECT_EQ(relay_parent(spec, source, child), node)
            << "source " << source << " target " << child;
        next.push_back(child);
      }
    }
    frontier = std::move(next);
    ++depth;
  }
  for (std::size_t t = 0; t < m; ++t)
    EXPECT_EQ(reached[t], 1) << "source " << source << " target " << t;
  // A tree of fan-out f over m targets is ceil(log_f) deep, a chain m deep.
  std::size_t want = 0;
  for (std::size_t level = 1, covered = 0; covered < m; level *= f, ++want) covered += level * f;
  if (f == 1) want = m;
  EXPECT_EQ(depth - 1, want) << "m " << m << " f " << f;
}

TEST(ReplicateTopology, EveryTreeReachesEveryTargetOnce) {
  for (std::size_t m = 1; m <= 17; ++m) {
    for (std::uint32_t f = 1; f <= 5; ++f) {
      const FlowSpec spec = spec_with(4, m, Replication::relay, f);
      for (std::size_t s = 0; s < 4; ++s) check_tree(spec, s);
    }
    const FlowSpec naive = spec_with(2, m, Replication::naive, 2);
    for (std::size_t s = 0; s < 2; ++s) check_tree(naive, s);
  }
}

TEST(ReplicateTopology, NaiveSourcesWriteEveryTargetAndTargetsForwardNothing) {
  const FlowSpec spec = spec_with(3, 5, Replication::naive, 1);
  for (std::size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(relay_children(spec, s, std::nullopt).size(), 5u);
    for (std::size_t t = 0; t < 5; ++t) {
      EXPECT_TRUE(relay_children(spec, s, t).empty());
      EXPECT_FALSE(relay_parent(spec, s, t).has_value());
    }
  }
}

TEST(ReplicateTopology, SourcesGetRotatedTreesSoRootsDiffer) {
  const FlowSpec chain = spec_with(3, 3, Replication::relay, 1);
  std::set<std::size_t> roots;
  for (std::size_t s = 0; s < 3; ++s) {
    const auto first = relay_children(chain, s, std::nullopt);
    ASSERT_EQ(first.size(), 1u);
    roots.insert(first[0]);
  }
  EXPECT_EQ(roots.size(), 3u);
  // Chain of source 1 over 3 targets: source -> target 1 -> target 2 -> target 0.
  EXPECT_EQ(relay_children(chain, 1, std::nullopt), std::vector<std::size_t>{1});
  EXPECT_EQ(relay_children(chain, 1, 1), std::vector<std::size_t>{2});
  EXPECT_EQ(relay_children(chain, 1, 2), std::vector<std::size_t>{0});
  EXPECT_TRUE(relay_children(chain, 1, 0).empty());
}

// Stamped flows: every source reaches target 0 alone, which forwards to every other target.
TEST(ReplicateTree, StampedFlowsAreRootedAtTargetZero) {
  FlowSpec spec = spec_with(3, 4, Replication::naive, 2);
  spec.type_options.get<ReplicateOptions>().ordered = true;
  spec.type_options.get<ReplicateOptions>().sequencer = Sequencer::stamp;
  for (std::size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(relay_children(spec, s, std::nullopt), std::vector<std::size_t>{0});
    EXPECT_EQ(relay_children(spec, s, 0), (std::vector<std::size_t>{1, 2, 3}));
    EXPECT_TRUE(relay_children(spec, s, 2).empty());
    EXPECT_EQ(relay_parent(spec, s, 0), std::nullopt);
    EXPECT_EQ(relay_parent(spec, s, 3), std::optional<std::size_t>(0));
  }
}

TEST(ReplicateSpec, OptionsSurviveTheRegistryRecord) {
  FlowSpec spec = spec_with(2, 3, Replication::relay, 3);
  spec.type_options.get<ReplicateOptions>().ordered = true;
  spec.type_options.get<ReplicateOptions>().gap_timeout = std::chrono::milliseconds(250);
  spec.validate(3);
  const FlowSpec back = FlowSpec::from_json(spec.to_json());
  const ReplicateOptions& options = back.type_options.get<ReplicateOptions>();
  EXPECT_EQ(options.replication, Replication::relay);
  EXPECT_EQ(options.fanout, 3u);
  EXPECT_TRUE(options.ordered);
  EXPECT_EQ(options.gap_timeout.count(), 250);
  EXPECT_EQ(options.sequencer, Sequencer::counter);

  FlowSpec stamped = spec_with(2, 3, Replication::naive, 2);
  stamped.type_options.get<ReplicateOptions>().ordered = true;
  stamped.type_options.get<ReplicateOptions>().sequencer = Sequencer::stamp;
  stamped.validate(3);
  EXPECT_EQ(FlowSpec::from_json(stamped.to_json()).type_options.get<ReplicateOptions>().sequencer, Sequencer::stamp);
}

// A record written before the sequencer was a choice means the counter; an unknown name is an
// error naming it.
TEST(ReplicateSpec, SequencerNamesAreParsedAndCheckedInRecords) {
  EXPECT_EQ(parse_sequencer("counter"), Sequencer::counter);
  EXPECT_EQ(parse_sequencer("stamp"), Sequencer::stamp);
  try {
    (void)parse_sequencer("switch");
    ADD_FAILURE() << "no error for an unknown sequencer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("unknown sequencer 'switch' (counter or stamp)"), std::string::npos) << e.what();
  }
  // A counter flow's record has no sequencer field (as before there was a choice), and reads
  // back as the counter; a stamped one names it.
  FlowSpec spec = spec_with(2, 3, Replication::naive, 2);
  spec.type_options.get<ReplicateOptions>().ordered = true;
  const std::string counter_record = spec.to_json();
  EXPECT_EQ(counter_record.find("sequencer"), std::string::npos) << counter_record;
  EXPECT_EQ(FlowSpec::from_json(counter_record).type_options.get<ReplicateOptions>().sequencer, Sequencer::counter);
  spec.type_options.get<ReplicateOptions>().sequencer = Sequencer::stamp;
  std::string bad = spec.to_json();
  const std::string field = "\"sequencer\":\"stamp\"";
  const std::size_t at = bad.find(field);
  ASSERT_NE(at, std::string::npos) << bad;
  bad.replace(at, field.size(), "\"sequencer\":\"switch\"");
  try {
    (void)FlowSpec::from_json(bad);
    ADD_FAILURE() << "no error for a record with an unknown sequencer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::protocol);
    EXPECT_NE(std::string(e.what()).find("unknown sequencer 'switch'"), std::string::npos) << e.what();
  }
}

TEST(ReplicateSpec, LatencySegmentsMakeRoomForTheHeader) {
  FlowSpec spec = spec_with(1, 1, Replication::naive, 1);
  spec.schema = Schema({{"key", Type::uint64}, {"blob", Type::chars, 20}});  // 28 B -> 32 B
  spec.options.mode = Mode::latency;
  EXPECT_EQ(spec.layout().payload_capacity(), 32u + kReplicateHeaderBytes);
  spec.validate(3);
  spec.options.mode = Mode::bandwidth;
  spec.options.segment_bytes = 16 + 32;  // room for a header and 24 B: a 28 B tuple does not fit
  EXPECT_THROW(spec.validate(3), Error);
}

TEST(ReplicateSpec, ShuffleRecordsWithoutReplicateFieldsStillParse) {
  FlowSpec spec;
  spec.name = "old";
  spec.sources = {{0, 0}};
  spec.targets = {{0, 0}};
  spec.schema = Schema({{"key", Type::uint64}});
  spec.key_column = "key";
  const std::string json = spec.to_json();
  EXPECT_EQ(json.find("replication"), std::string::npos);
  const FlowSpec back = FlowSpec::from_json(json);
  EXPECT_FALSE(back.type_options.has_value());  // a shuffle flow has no options of its own
}

}  // namespace
}  // namespace dfi::flow
