#include "dfi/apps/commtier/tier.hpp"

#include "dfi/apps/commtier/channel.hpp"

#include <nlohmann/json.hpp>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/memory/ring.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"

namespace dfi::apps::commtier {
namespace {

void validate_lane_flow(const flow::FlowSpec& spec) {
  if (spec.sources.size() != 1 || spec.targets.size() != 1) {
    throw spec.invalid("a commtier lane has exactly one source and one target");
  }
  if (spec.options.mode != flow::Mode::bandwidth) throw spec.invalid("a commtier lane runs in bandwidth mode");
}

}  // namespace

// A lane carries messages in 8-byte words; the type has no options of its own.
constinit const flow::FlowTypeTraits kCommtierTraits{.name = "commtier", .validate = validate_lane_flow};

std::string_view side_name(Side side) noexcept { return side == Side::cu ? "cu" : "su"; }

Side parse_side(std::string_view text) {
  if (text == "cu") return Side::cu;
  if (text == "su") return Side::su;
  throw Error(Errc::invalid_argument, "commtier: side '" + std::string(text) + "' is neither cu nor su");
}

std::string lane_flow(std::string_view tier, Side to, std::uint32_t lane) {
  return std::string(tier) + ".to_" + std::string(side_name(to)) + "." + std::to_string(lane);
}

void TierSpec::validate(int cluster_size) const {
  const std::string tier = "commtier '" + name + "': ";
  if (name.empty()) throw Error(Errc::invalid_argument, "commtier: a tier needs a name");
  for (Side side : {Side::cu, Side::su}) {
    const int r = rank(side);
    if (r < 0 || r >= cluster_size) {
      throw Error(Errc::invalid_argument, tier + std::string(side_name(side)) + " rank " + std::to_string(r) +
                                              " is not in the cluster of " + std::to_string(cluster_size));
    }
    const Buffers& b = receive_buffers(side);
    const std::string which = std::string(side_name(side)) + " receive buffers: ";
    if (b.count < 1 || b.count > kMaxBuffers) {
      throw Error(Errc::invalid_argument, tier + which + std::to_string(b.count) + " buffers (1 to " +
                                              std::to_string(kMaxBuffers) + ")");
    }
    if (b.bytes < 64 || b.bytes % 8 != 0 || b.bytes > kMaxBufferBytes) {
      throw Error(Errc::invalid_argument, tier + which + "a buffer of " + std::to_string(b.bytes) +
                                              " B (a multiple of 8 from 64 B to " +
                                              std::to_string(kMaxBufferBytes) + " B)");
    }
  }
  if (cu_rank == su_rank) {
    throw Error(Errc::invalid_argument, tier + "the CU and the SU are both rank " + std::to_string(cu_rank));
  }
  if (lanes < 1 || lanes > kMaxLanes) {
    throw Error(Errc::invalid_argument, tier + std::to_string(lanes) + " lanes (1 to " +
                                            std::to_string(kMaxLanes) + ")");
  }
  if (stall_timeout.count() < 0) throw Error(Errc::invalid_argument, tier + "a negative stall timeout");
}

namespace {

flow::FlowSpec lane_spec(const TierSpec& tier, Side to, std::uint32_t lane) {
  const Buffers& buffers = tier.receive_buffers(to);
  flow::FlowSpec spec;
  spec.name = lane_flow(tier.name, to, lane);
  spec.type = kCommtier;
  spec.sources = {{tier.rank(other_side(to)), static_cast<int>(lane)}};
  spec.targets = {{tier.rank(to), static_cast<int>(lane)}};
  spec.schema = flow::Schema({{"word", flow::Type::uint64}});
  spec.routing = flow::Routing::explicit_target;
  spec.options.segments = buffers.count;
  // An RB carries a message of `bytes` payload whole: its header and the ring's footer come on top.
  spec.options.segment_bytes = buffers.bytes + static_cast<std::uint32_t>(kMessageHeaderBytes + memory::kFooterBytes);
  spec.options.stall_timeout = tier.stall_timeout;
  return spec;
}

std::string to_record(const TierSpec& spec) {
  nlohmann::json j = {{"name", spec.name},
                      {"cu_rank", spec.cu_rank},
                      {"su_rank", spec.su_rank},
                      {"lanes", spec.lanes},
                      {"cu_buffers", spec.cu.count},
                      {"cu_buffer_bytes", spec.cu.bytes},
                      {"su_buffers", spec.su.count},
                      {"su_buffer_bytes", spec.su.bytes},
                      {"stall_timeout_ms", spec.stall_timeout.count()}};
  return j.dump();
}

TierSpec from_record(std::string_view name, const std::string& record) {
  try {
    const nlohmann::json j = nlohmann::json::parse(record);
    TierSpec spec;
    spec.name = j.at("name").get<std::string>();
    spec.cu_rank = j.at("cu_rank").get<int>();
    spec.su_rank = j.at("su_rank").get<int>();
    spec.lanes = j.at("lanes").get<std::uint32_t>();
    spec.cu = {j.at("cu_buffers").get<std::uint32_t>(), j.at("cu_buffer_bytes").get<std::uint32_t>()};
    spec.su = {j.at("su_buffers").get<std::uint32_t>(), j.at("su_buffer_bytes").get<std::uint32_t>()};
    spec.stall_timeout = std::chrono::milliseconds(j.at("stall_timeout_ms").get<std::int64_t>());
    return spec;
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::protocol, "commtier '" + std::string(name) + "': malformed tier record: " + e.what());
  }
}

}  // namespace

void create_tier(cluster::Node& node, const TierSpec& spec) {
  spec.validate(node.size());
  // The flows first: an opener that finds the tier record finds its flows too.
  for (std::uint32_t lane = 0; lane < spec.lanes; ++lane) {
    for (Side to : {Side::su, Side::cu}) flow::create_flow(node, lane_spec(spec, to, lane));
  }
  try {
    node.registry().publish(tier_record(spec.name), to_record(spec));
  } catch (const Error& e) {
    if (e.code() == Errc::already_exists) {
      throw Error(Errc::already_exists, "commtier '" + spec.name + "' exists already");
    }
    throw;
  }
}

TierSpec open_tier(cluster::Node& node, std::string_view name, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) timeout = std::chrono::milliseconds(config::get_int("registry_timeout_ms"));
  std::string record;
  try {
    record = node.wait_for(tier_record(name), timeout);
  } catch (const Error& e) {
    if (e.code() != Errc::timeout) throw;
    throw Error(Errc::not_found, "commtier '" + std::string(name) + "' does not exist (not created within " +
                                     std::to_string(timeout.count()) + " ms)");
  }
  return from_record(name, record);
}

}  // namespace dfi::apps::commtier
