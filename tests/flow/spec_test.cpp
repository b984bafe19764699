// Unit tests of the generic flow spec and its flow types: a type defined here, outside the flow
// layer, brings its own options, validation, layout and record fields; records of the built-in
// types keep their format.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "dfi/common/error.hpp"
#include "dfi/flow/combiner.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/spec.hpp"

namespace dfi::flow {
namespace {

// A test-only flow type, as an upper layer would define one: a window of segments and a label.
struct WindowOptions {
  std::uint32_t window = 4;
  std::string label;
};

void validate_window(const FlowSpec& spec) {
  const WindowOptions& options = spec.type_options.get<WindowOptions>();
  if (options.window == 0) throw spec.invalid("a window of 0 segments holds nothing");
}
void write_window(const FlowSpec& spec, SpecFields& record) {
  const WindowOptions& options = spec.type_options.get<WindowOptions>();
  record.set_int("window", options.window);
  record.set_string("label", options.label);
}
void read_window(const SpecFields& record, FlowSpec& spec) {
  WindowOptions& options = spec.type_options.get<WindowOptions>();
  options.window = static_cast<std::uint32_t>(record.get_int("window"));
  options.label = record.get_string("label");
}

constexpr FlowTypeTraits kWindowTraits{.name = "test-window",
                                       .header_bytes = 16,
                                       .key_column = KeyColumn::required,
                                       .options = &typeid(WindowOptions),
                                       .validate = validate_window,
                                       .write = write_window,
                                       .read = read_window};
constexpr FlowType kWindow{kWindowTraits};

FlowSpec window_spec() {
  FlowSpec spec;
  spec.name = "w";
  spec.type = kWindow;
  spec.sources = {{0, 0}};
  spec.targets = {{1, 0}};
  spec.schema = Schema({{"key", Type::uint64}, {"value", Type::uint64}});
  spec.key_column = "key";
  spec.type_options = WindowOptions{.window = 7, .label = "seven"};
  return spec;
}

std::string validation_error(const FlowSpec& spec) {
  try {
    spec.validate(2);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument) << e.what();
    return e.what();
  }
  return "no error";
}

TEST(FlowType, ARecordOfAnUnregisteredTypeNamesFlowAndType) {
  constexpr FlowTypeTraits kNever{.name = "test-never-registered"};
  FlowSpec spec = window_spec();
  spec.name = "lost";
  spec.type = FlowType(kNever);
  spec.type_options.reset();
  const std::string record = spec.to_json();
  try {
    (void)FlowSpec::from_json(record);
    FAIL() << "parsed a record of an unregistered type";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::protocol);
    const std::string what = e.what();
    EXPECT_NE(what.find("flow 'lost'"), std::string::npos) << what;
    EXPECT_NE(what.find("'test-never-registered' is not registered in this process"), std::string::npos) << what;
  }
}

TEST(FlowType, ATypeFromOutsideTheFlowLayerRoundTripsItsOptions) {
  register_flow_type(kWindow);
  register_flow_type(kWindow);  // idempotent
  ASSERT_TRUE(find_flow_type("test-window").has_value());
  EXPECT_EQ(*find_flow_type("test-window"), kWindow);
  const FlowSpec spec = window_spec();
  spec.validate(2);
  const std::string record = spec.to_json();
  EXPECT_NE(record.find("\"window\":7"), std::string::npos) << record;
  const FlowSpec back = FlowSpec::from_json(record);
  EXPECT_EQ(back.type, kWindow);
  EXPECT_EQ(back.type.name(), "test-window");
  const WindowOptions& options = back.type_options.get<WindowOptions>();
  EXPECT_EQ(options.window, 7u);
  EXPECT_EQ(options.label, "seven");
  EXPECT_EQ(back.key_column, "key");
}

TEST(FlowType, ATypeBringsItsOwnValidationKeyAndHeader) {
  FlowSpec spec = window_spec();
  spec.type_options.get<WindowOptions>().window = 0;
  EXPECT_EQ(validation_error(spec), "flow 'w': a window of 0 segments holds nothing");

  spec = window_spec();
  spec.key_column.clear();  // KeyColumn::required: the generic check, whatever the routing
  spec.routing = Routing::explicit_target;
  EXPECT_NE(validation_error(spec).find("flow 'w': needs a key column"), std::string::npos);

  spec = window_spec();
  spec.options.mode = Mode::latency;  // a segment makes room for the 16 B header
  EXPECT_EQ(spec.layout().payload_capacity(), 16u + 16u);
  spec.options.mode = Mode::bandwidth;
  spec.options.segment_bytes = 16 + 24;  // 24 B payload: 8 B after the header, for a 16 B tuple
  EXPECT_NE(validation_error(spec).find("after the 16 B segment header"), std::string::npos);

  spec = window_spec();
  spec.type_options = ReplicateOptions{};  // options of another type
  EXPECT_EQ(validation_error(spec), "flow 'w': its type options are not those of a test-window flow");
  spec.type = FlowType::shuffle;  // a type without options
  EXPECT_EQ(validation_error(spec), "flow 'w': its type options are not those of a shuffle flow");
}

TEST(FlowType, MalformedFieldsOfATypeAreProtocolErrorsNamingTheField) {
  register_flow_type(kWindow);
  std::string record = window_spec().to_json();
  record.replace(record.find("\"window\":7"), 10, "\"window\":\"x\"");
  try {
    (void)FlowSpec::from_json(record);
    FAIL() << "parsed " << record;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::protocol);
    EXPECT_EQ(std::string(e.what()), "flow 'w': spec record: field 'window' is not an integer");
  }
}

void write_clash(const FlowSpec&, SpecFields& record) { record.set_int("segments", 1); }

TEST(FlowType, RegistrationAndFieldNamesDoNotClash) {
  constexpr FlowTypeTraits kFakeReplicate{.name = "replicate"};
  try {
    register_flow_type(FlowType(kFakeReplicate));
    FAIL() << "registered a second 'replicate'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::already_exists);
  }
  constexpr FlowTypeTraits kNameless{};
  EXPECT_THROW(register_flow_type(FlowType(kNameless)), Error);

  constexpr FlowTypeTraits kClash{.name = "test-clash", .write = write_clash};
  FlowSpec spec = window_spec();
  spec.type = FlowType(kClash);
  spec.type_options.reset();
  try {
    (void)spec.to_json();
    FAIL() << "a type overwrote a generic field";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("field 'segments' written twice"), std::string::npos) << e.what();
  }
}

TEST(FlowType, OptionsOfAnotherTypeAreRefused) {
  FlowSpec spec;
  spec.type_options = CombinerOptions{};
  try {
    (void)spec.type_options.get<ReplicateOptions>();
    FAIL() << "combiner options read as replicate options";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_EQ(std::string(e.what()),
              "flow type options: asked for dfi::flow::ReplicateOptions but holding dfi::flow::CombinerOptions");
  }
  const FlowSpec& view = spec;
  EXPECT_THROW((void)view.type_options.get<ReplicateOptions>(), Error);
  spec.type_options.reset();
  EXPECT_EQ(view.type_options.get<ReplicateOptions>().fanout, 2u);  // none held: the defaults
  EXPECT_FALSE(view.type_options.has_value());
}

// The records of the built-in types are what they were before types registered their options:
// the same fields, byte for byte (other ranks may run an older build).
TEST(FlowType, BuiltInRecordsKeepTheirFormat) {
  FlowSpec replicate;
  replicate.name = "r";
  replicate.type = FlowType::replicate;
  replicate.sources = {{0, 0}};
  replicate.targets = {{1, 0}, {2, 0}};
  replicate.schema = Schema({{"key", Type::uint64}});
  replicate.type_options = ReplicateOptions{
      .replication = Replication::relay, .fanout = 3, .ordered = true, .gap_timeout = std::chrono::milliseconds(250)};
  const std::string replicate_record =
      R"x({"direct_write":true,"fanout":3,"gap_timeout_ms":250,"key":"","mode":"bandwidth","name":"r","ordered":true,)x"
      R"x("replication":"relay","routing":"key_hash","schema":"key:uint64","segment_bytes":0,"segments":0,)x"
      R"x("sources":[[0,0]],"stall_timeout_ms":0,"targets":[[1,0],[2,0]],"type":"replicate"})x";
  EXPECT_EQ(replicate.to_json(), replicate_record);
  EXPECT_EQ(FlowSpec::from_json(replicate_record).type_options.get<ReplicateOptions>().fanout, 3u);

  FlowSpec combiner;
  combiner.name = "c";
  combiner.type = FlowType::combiner;
  combiner.sources = {{0, 0}};
  combiner.targets = {{1, 0}};
  combiner.schema = Schema({{"key", Type::uint64}, {"v", Type::int64}});
  combiner.key_column = "key";
  combiner.type_options = CombinerOptions{.aggregates = parse_aggregates("sum(v),count(*)")};
  const std::string combiner_record =
      R"x({"aggregates":"sum(v),count(*)","direct_write":true,"key":"key","mode":"bandwidth","name":"c",)x"
      R"x("routing":"key_hash","schema":"key:uint64,v:int64","segment_bytes":0,"segments":0,)x"
      R"x("sources":[[0,0]],"stall_timeout_ms":0,"targets":[[1,0]],"type":"combiner"})x";
  EXPECT_EQ(combiner.to_json(), combiner_record);
  EXPECT_EQ(describe_aggregates(FlowSpec::from_json(combiner_record).type_options.get<CombinerOptions>().aggregates),
            "sum(v),count(*)");
}

TEST(FlowSpecRings, PerRankRingsSurviveTheRecordAndArePerThreadWhereNotSaid) {
  FlowSpec spec;
  spec.name = "s";
  spec.sources = {{0, 0}, {0, 1}, {1, 0}};
  spec.targets = {{1, 0}};
  spec.schema = Schema({{"key", Type::uint64}});
  spec.key_column = "key";
  EXPECT_EQ(spec.to_json().find("rings"), std::string::npos);  // per-thread records keep their format
  spec.options.rings = RingSharing::per_rank;
  spec.validate(2);
  const FlowSpec read = FlowSpec::from_json(spec.to_json());
  EXPECT_EQ(read.options.rings, RingSharing::per_rank);

  std::string record = spec.to_json();
  record.replace(record.find("per_rank"), 8, "per_node");
  try {
    (void)FlowSpec::from_json(record);
    ADD_FAILURE() << "an unknown ring sharing was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::protocol);
    EXPECT_NE(std::string(e.what()).find("per_node"), std::string::npos) << e.what();
  }
}

TEST(FlowSpecRings, PerRankRingsAreRefusedForFlowsOtherThanShuffle) {
  FlowSpec spec;
  spec.name = "r";
  spec.type = FlowType::replicate;
  spec.sources = {{0, 0}, {0, 1}};
  spec.targets = {{1, 0}};
  spec.schema = Schema({{"key", Type::uint64}});
  spec.options.rings = RingSharing::per_rank;
  const std::string error = validation_error(spec);
  EXPECT_NE(error.find("flow 'r'"), std::string::npos) << error;
  EXPECT_NE(error.find("per-rank rings"), std::string::npos) << error;
  EXPECT_NE(error.find("replicate"), std::string::npos) << error;
}

TEST(FlowSpecRings, RingsBeyondTheMemoryLimitAreRefusedNamingFlowOptionsAndBytes) {
  FlowSpec spec;
  spec.name = "huge";
  spec.sources = {{0, 0}, {1, 0}};
  spec.targets = {{1, 0}};
  spec.schema = Schema({{"key", Type::uint64}});
  spec.key_column = "key";
  spec.options.segments = 1u << 30;  // 8 KiB segments: 8 TiB per ring
  spec.options.segment_bytes = 8208;
  std::string error = validation_error(spec);
  EXPECT_NE(error.find("flow 'huge'"), std::string::npos) << error;
  EXPECT_NE(error.find("options.segments 1073741824"), std::string::npos) << error;
  EXPECT_NE(error.find("flow_memory_limit_bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("17626545783040 B"), std::string::npos) << error;  // 2 rings

  // The largest shape whose product overflows 64 bits is refused too, not wrapped around.
  spec.options.segments = 0xffffffffu;
  spec.options.segment_bytes = 0xfffffff8u;
  error = validation_error(spec);
  EXPECT_NE(error.find("more than 2^64"), std::string::npos) << error;

  // The setting decides: 2 rings of 4 x 4 KiB (+ their words) fit 40000 B, not 30000.
  spec.options.segments = 4;
  spec.options.segment_bytes = 4096;
  ::setenv("DFI_FLOW_MEMORY_LIMIT_BYTES", "40000", 1);
  EXPECT_NO_THROW(spec.validate(2));
  ::setenv("DFI_FLOW_MEMORY_LIMIT_BYTES", "30000", 1);
  error = validation_error(spec);
  EXPECT_NE(error.find("33024 B"), std::string::npos) << error;
  ::unsetenv("DFI_FLOW_MEMORY_LIMIT_BYTES");
}

}  // namespace
}  // namespace dfi::flow
