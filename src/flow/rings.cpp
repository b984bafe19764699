#include "dfi/flow/detail/rings.hpp"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/config.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"

namespace dfi::flow::detail {

Deadline open_deadline(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) throw Error(Errc::invalid_argument, "open timeout of " + std::to_string(timeout.count()) + " ms");
  if (timeout.count() == 0) timeout = std::chrono::milliseconds(config::get_int("registry_timeout_ms"));
  return Deadline(timeout);
}

std::chrono::milliseconds time_left(const Deadline& deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline.time_point() - Deadline::Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

FlowSpec open_spec(cluster::Node& node, std::string_view name, FlowType expected,
                   const std::optional<Schema>& expected_schema, const Deadline& deadline) {
  register_flow_type(expected);  // so that its record parses in this process
  const std::string flow(name);
  const auto waited = time_left(deadline);
  std::string record;
  try {
    // Every opener of this process shares one fetch of the spec (it never changes).
    record = *node.wait_all_shared({spec_record(flow)}, {-1}, waited).front();
  } catch (const Error& e) {
    if (e.code() == Errc::timeout) {
      throw Error(Errc::not_found, "flow '" + flow + "' does not exist (not created within " +
                                       std::to_string(waited.count()) + " ms)");
    }
    throw;
  }
  FlowSpec spec = FlowSpec::from_json(record);
  if (spec.type != expected) {
    throw Error(Errc::invalid_argument, "flow '" + flow + "' is a " + std::string(spec.type.name()) +
                                            " flow, not a " + std::string(expected.name()) + " flow");
  }
  if (expected_schema && !(*expected_schema == spec.schema)) {
    throw Error(Errc::invalid_argument, "flow '" + flow + "' has schema {" + spec.schema.describe() +
                                            "} but the opener expects {" + expected_schema->describe() + "}");
  }
  return spec;
}

std::size_t source_index(const FlowSpec& spec, int rank, int thread) {
  for (std::size_t i = 0; i < spec.sources.size(); ++i) {
    if (spec.sources[i] == SourceRef{rank, thread}) return i;
  }
  throw Error(Errc::invalid_argument, "flow '" + spec.name + "' has no source (rank " + std::to_string(rank) +
                                          ", thread " + std::to_string(thread) + ")");
}

std::size_t target_index(const FlowSpec& spec, int rank, int id) {
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    if (spec.targets[i] == TargetRef{rank, id}) return i;
  }
  throw Error(Errc::invalid_argument, "flow '" + spec.name + "' has no target (rank " + std::to_string(rank) +
                                          ", id " + std::to_string(id) + ")");
}

std::vector<std::size_t> source_rings(const FlowSpec& spec) {
  std::vector<std::size_t> rings(spec.sources.size());
  if (spec.options.rings == RingSharing::per_thread) {
    for (std::size_t i = 0; i < rings.size(); ++i) rings[i] = i;
    return rings;
  }
  std::map<int, std::size_t> of_rank;
  for (std::size_t i = 0; i < rings.size(); ++i) {
    rings[i] = of_rank.try_emplace(spec.sources[i].rank, of_rank.size()).first->second;
  }
  return rings;
}

std::size_t checked_ring_bytes(const FlowSpec& spec) {
  const memory::RingLayout layout = spec.layout();
  const std::vector<std::size_t> rings = source_rings(spec);
  const std::size_t count = rings.empty() ? 0 : *std::max_element(rings.begin(), rings.end()) + 1;
  std::uint64_t bytes = 0;  // checked: a ring shape can overflow 64 bits
  const bool overflow = __builtin_mul_overflow(std::uint64_t{layout.segments}, std::uint64_t{layout.segment_bytes}, &bytes) ||
                        __builtin_add_overflow(bytes, std::uint64_t{2 * memory::kWordLine}, &bytes) ||
                        __builtin_mul_overflow(bytes, std::uint64_t{count}, &bytes);
  std::uint64_t limit = static_cast<std::uint64_t>(config::get_int("flow_memory_limit_bytes"));
  if (limit == 0) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    limit = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 4 : 0;
  }
  if (overflow || (limit != 0 && bytes > limit) || bytes > std::numeric_limits<std::size_t>::max()) {
    std::ostringstream what;
    what << "flow '" << spec.name << "': a target's rings need ";
    if (overflow) {
      what << "more than 2^64";
    } else {
      what << bytes;
    }
    what << " B (" << count << " ring(s) of options.segments " << layout.segments << " x options.segment_bytes "
         << layout.segment_bytes << " B), more than the limit of " << limit
         << " B (setting flow_memory_limit_bytes; 0 is a quarter of this machine's memory)";
    throw Error(Errc::invalid_argument, what.str());
  }
  return static_cast<std::size_t>(bytes);
}

std::chrono::milliseconds stall_timeout(const FlowSpec& spec) {
  if (spec.options.stall_timeout.count() > 0) return spec.options.stall_timeout;
  return std::chrono::milliseconds(config::get_int("flow_timeout_ms"));
}

// ---------------------------------------------------------------------------------------------

namespace {

// The RingShares of the per-rank rings this process writes, one per (flow, target), kept by the
// node (Node::attachment) from the first of the rank's source threads that opens until the last
// has closed: a thread opening after another closed continues the ring's sequence. Touched when
// flows open and close.
std::string share_key(const FlowSpec& spec, std::size_t target) {
  return "flow/" + spec.name + "/ring-share/" + std::to_string(target);
}

std::shared_ptr<memory::RingShare> ring_share(cluster::Node& node, const FlowSpec& spec, std::size_t target,
                                              std::uint32_t writers) {
  return std::static_pointer_cast<memory::RingShare>(
      node.attachment(share_key(spec, target), [writers] { return std::make_shared<memory::RingShare>(writers); }));
}

// Forgets the shares of `spec` at `node` whose writers have all closed.
void forget_closed_shares(cluster::Node& node, const FlowSpec& spec,
                          const std::vector<std::shared_ptr<memory::RingShare>>& mine) {
  for (std::size_t t = 0; t < mine.size(); ++t) {
    if (mine[t]->open.load() == 0) node.detach(share_key(spec, t), mine[t].get());
  }
}

}  // namespace

SourceRings::SourceRings(cluster::Node& node, fabric::Worker& worker, FlowSpec spec, std::size_t index,
                         const Deadline& deadline)
    : spec_(std::move(spec)) {
  const SourceRef me = spec_.sources.at(index);
  label_ = "flow '" + spec_.name + "' source (rank " + std::to_string(me.rank) + ", thread " +
           std::to_string(me.thread) + ")";
  const std::size_t ring = source_rings(spec_)[index];
  std::vector<Link> links;
  for (std::size_t t = 0; t < spec_.targets.size(); ++t) {
    const TargetRef target = spec_.targets[t];
    links.push_back({t, ring, label_ + " -> target (rank " + std::to_string(target.rank) + ", id " +
                                  std::to_string(target.id) + ")"});
  }
  if (spec_.options.rings == RingSharing::per_rank) {
    const auto writers = static_cast<std::uint32_t>(
        std::count_if(spec_.sources.begin(), spec_.sources.end(), [&](const SourceRef& s) { return s.rank == me.rank; }));
    share_node_ = &node;
    for (std::size_t t = 0; t < spec_.targets.size(); ++t) shares_.push_back(ring_share(node, spec_, t, writers));
  }
  per_rank_records_ = true;
  connect(node, worker, links, deadline);
}

SourceRings::SourceRings(cluster::Node& node, fabric::Worker& worker, FlowSpec spec, std::string label,
                         const std::vector<Link>& links, const Deadline& deadline)
    : spec_(std::move(spec)), label_(std::move(label)) {
  connect(node, worker, links, deadline);
}

namespace {

// What a source needs to reach a target's rings: the path ('a': segments as active messages to a
// worker of the target's own; 'r': one-sided operations through the rank's service worker), the
// address of the worker to connect to, and the region descriptor of the rings.
struct TargetRecord {
  bool active_message = false;
  std::string address;
  fabric::RegionDescriptor region;
};

// The records, little-endian, each count and length 4 bytes:
//   per target (RingRecords::per_target):  path byte, address length, address, region descriptor
//   per rank   (RingRecords::per_rank):    'R', address count, (length, address)..., target
//                                          count, (target index, path byte, address index,
//                                          region length, region descriptor)...
// A rank's targets mostly share one address (the service worker's, over shm): it is written once.
void put_u32(std::string& out, std::size_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// Reads a record, throwing protocol naming `who` on anything it cannot read.
class RecordReader {
 public:
  RecordReader(std::string_view record, const std::string& who) : record_(record), who_(who) {}
  std::string_view bytes(std::size_t n) {
    if (record_.size() - at_ < n) fail();
    const std::string_view out = record_.substr(at_, n);
    at_ += n;
    return out;
  }
  std::size_t u32() {
    const std::string_view b = bytes(4);
    std::size_t value = 0;
    for (int i = 0; i < 4; ++i) value |= std::size_t{static_cast<unsigned char>(b[i])} << (8 * i);
    return value;
  }
  char byte() { return bytes(1)[0]; }
  std::string_view rest() { return bytes(record_.size() - at_); }
  [[noreturn]] void fail() const {
    throw Error(Errc::protocol, who_ + ": its ring record (" + std::to_string(record_.size()) +
                                    " B) is not one this build reads (a target of another DFI version?)");
  }

 private:
  std::string_view record_;
  std::string who_;
  std::size_t at_ = 0;
};

char path_byte(bool active_message) { return active_message ? 'a' : 'r'; }
bool active_message_path(RecordReader& in) {
  const char path = in.byte();
  if (path != 'a' && path != 'r') in.fail();
  return path == 'a';
}

std::string encode_target_record(bool active_message, const std::string& address, const std::string& region) {
  std::string out;
  out += path_byte(active_message);
  put_u32(out, address.size());
  out += address;
  out += region;
  return out;
}

TargetRecord decode_target_record(std::string_view record, const std::string& who) {
  RecordReader in(record, who);
  TargetRecord out;
  out.active_message = active_message_path(in);
  out.address = std::string(in.bytes(in.u32()));
  out.region = fabric::RegionDescriptor::parse(in.rest());
  return out;
}

// A target's entry in its rank's record (its region descriptor serialized).
struct RankEntry {
  bool active_message = false;
  std::string address;
  std::string region;
};

std::string encode_rank_record(const std::map<std::size_t, RankEntry>& entries) {
  std::vector<std::string> addresses;
  std::unordered_map<std::string, std::size_t> address_index;
  for (const auto& [target, entry] : entries) {
    if (address_index.try_emplace(entry.address, addresses.size()).second) addresses.push_back(entry.address);
  }
  std::string out(1, 'R');
  put_u32(out, addresses.size());
  for (const std::string& address : addresses) {
    put_u32(out, address.size());
    out += address;
  }
  put_u32(out, entries.size());
  for (const auto& [target, entry] : entries) {
    put_u32(out, target);
    out += path_byte(entry.active_message);
    put_u32(out, address_index.at(entry.address));
    put_u32(out, entry.region.size());
    out += entry.region;
  }
  return out;
}

// Adds the targets in rank record `record` to `out` (target index -> record).
void decode_rank_record(std::string_view record, const std::string& who,
                        std::unordered_map<std::size_t, TargetRecord>& out) {
  RecordReader in(record, who);
  if (in.byte() != 'R') in.fail();
  std::vector<std::string> addresses(in.u32());
  for (std::string& address : addresses) address = std::string(in.bytes(in.u32()));
  for (std::size_t n = in.u32(); n > 0; --n) {
    const std::size_t target = in.u32();
    TargetRecord entry;
    entry.active_message = active_message_path(in);
    const std::size_t address = in.u32();
    if (address >= addresses.size()) in.fail();
    entry.address = addresses[address];
    entry.region = fabric::RegionDescriptor::parse(in.bytes(in.u32()));
    out.emplace(target, std::move(entry));
  }
}

std::string target_name(const TargetRef& target) {
  return "target (rank " + std::to_string(target.rank) + ", id " + std::to_string(target.id) + ")";
}

// The targets of `rank` in the spec, named: "target (rank 3, id 0)", "targets (rank 3, ids 0, 1)".
std::string targets_of_rank(const FlowSpec& spec, int rank) {
  std::vector<int> ids;
  for (const TargetRef& t : spec.targets) {
    if (t.rank == rank) ids.push_back(t.id);
  }
  if (ids.size() == 1) return target_name({rank, ids.front()});
  std::string out = "targets (rank " + std::to_string(rank) + ", ids";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    out += i == 0 ? " " : ", ";
    out += std::to_string(ids[i]);
  }
  return out + ")";
}

// The targets of one flow on this rank while they open (RingRecords::per_rank), kept by the node
// (Node::attachment): the last to open publishes the rank's record.
struct RankTargets {
  std::mutex mutex;
  std::map<std::size_t, RankEntry> entries;  // by target index; cleared once published
  bool published = false;
};

std::string rank_targets_key(const std::string& flow) { return "flow/" + flow + "/rank-targets"; }

// Adds target `index`'s entry to its rank's record of the flow; the rank's last target to open
// publishes the record. Returns what the target withdraws from if it goes before that.
std::shared_ptr<RankTargets> offer_to_rank(cluster::Node& node, const FlowSpec& spec, std::size_t index,
                                           RankEntry entry, const std::string& label) {
  const int rank = spec.targets.at(index).rank;
  const auto expected = static_cast<std::size_t>(
      std::count_if(spec.targets.begin(), spec.targets.end(), [rank](const TargetRef& t) { return t.rank == rank; }));
  auto rank_targets = std::static_pointer_cast<RankTargets>(
      node.attachment(rank_targets_key(spec.name), [] { return std::make_shared<RankTargets>(); }));
  const std::lock_guard lock(rank_targets->mutex);
  if (rank_targets->published || !rank_targets->entries.try_emplace(index, std::move(entry)).second) {
    throw Error(Errc::already_exists, label + " is already open");
  }
  if (rank_targets->entries.size() < expected) return rank_targets;
  try {
    node.registry().publish(rank_record(spec.name, rank), encode_rank_record(rank_targets->entries));
  } catch (const Error& e) {
    rank_targets->entries.erase(index);
    if (e.code() == Errc::already_exists) {
      throw Error(Errc::already_exists, label + " is already open (rank " + std::to_string(rank) +
                                            " published its targets of the flow before)");
    }
    throw;
  }
  rank_targets->published = true;
  rank_targets->entries.clear();
  return rank_targets;
}

// Rethrows `e`, a failed wait for records `names` published by `publishers`, naming what did not
// open: on peer_failed or timeout, the first whose publisher is known dead, else the first missing
// (a look-up per record, on this error path only).
[[noreturn]] void throw_not_opened(cluster::Node& node, const std::string& label, const Error& e,
                                   const std::vector<std::string>& names, const std::vector<int>& publishers,
                                   const std::function<std::string(std::size_t)>& what) {
  if (e.code() == Errc::peer_failed || e.code() == Errc::timeout) {
    std::optional<std::size_t> missing;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (node.registry().try_lookup(names[i])) continue;
      const bool dead = !node.fabric().peer_failure(publishers[i]).empty();
      if (!missing || dead) missing = i;
      if (dead) break;
    }
    if (missing) throw Error(e.code(), label + ": " + what(*missing) + " did not open the flow: " + e.what());
  }
  throw Error(e.code(), label + ": " + e.what());
}

// Every target's record in one held registry request (RingRecords::per_target).
std::vector<TargetRecord> fetch_target_records(cluster::Node& node, const FlowSpec& spec, const std::string& label,
                                               const std::vector<SourceRings::Link>& links, const Deadline& deadline) {
  std::vector<std::string> names;
  std::vector<int> publishers;
  for (const SourceRings::Link& link : links) {
    names.push_back(target_record(spec.name, link.target));
    publishers.push_back(spec.targets.at(link.target).rank);
  }
  std::vector<std::optional<std::string>> found;
  try {
    found = node.wait_all(names, publishers, time_left(deadline));
  } catch (const Error& e) {
    throw_not_opened(node, label, e, names, publishers, [&](std::size_t i) { return target_name(spec.targets.at(links[i].target)); });
  }
  std::vector<TargetRecord> records;
  for (std::size_t i = 0; i < links.size(); ++i) {
    records.push_back(decode_target_record(*found[i], label + ": " + target_name(spec.targets.at(links[i].target))));
  }
  return records;
}

// The records of the links' target ranks, one each, in one held registry request that this
// process's source threads opening the flow share (RingRecords::per_rank).
std::vector<TargetRecord> fetch_rank_records(cluster::Node& node, const FlowSpec& spec, const std::string& label,
                                             const std::vector<SourceRings::Link>& links, const Deadline& deadline) {
  std::vector<std::string> names;
  std::vector<int> ranks;
  for (const SourceRings::Link& link : links) {
    const int rank = spec.targets.at(link.target).rank;
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
  }
  std::sort(ranks.begin(), ranks.end());  // the same names for every thread: one shared request
  for (const int rank : ranks) names.push_back(rank_record(spec.name, rank));
  std::vector<std::optional<std::string>> found;
  try {
    found = node.wait_all_shared(names, ranks, time_left(deadline));
  } catch (const Error& e) {
    throw_not_opened(node, label, e, names, ranks, [&](std::size_t i) { return targets_of_rank(spec, ranks[i]); });
  }
  std::unordered_map<std::size_t, TargetRecord> of_target;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    decode_rank_record(*found[i], label + ": " + targets_of_rank(spec, ranks[i]), of_target);
  }
  std::vector<TargetRecord> records;
  for (const SourceRings::Link& link : links) {
    const auto it = of_target.find(link.target);
    if (it == of_target.end()) {
      const TargetRef target = spec.targets.at(link.target);
      throw Error(Errc::protocol, label + ": the record of rank " + std::to_string(target.rank) + " lacks its " +
                                      target_name(target) + " (a rank of another DFI version, or another spec?)");
    }
    records.push_back(it->second);
  }
  return records;
}

}  // namespace

void SourceRings::connect(cluster::Node& node, fabric::Worker& worker, const std::vector<Link>& links,
                          const Deadline& deadline) {
  const memory::RingLayout layout = spec_.layout();
  memory::SegmentWriterOptions options;
  options.stall_timeout = stall_timeout(spec_);
  memory::RemoteRingOptions access;
  access.allow_mapped = spec_.options.direct_write;

  const std::vector<TargetRecord> records = per_rank_records_ ? fetch_rank_records(node, spec_, label_, links, deadline)
                                                               : fetch_target_records(node, spec_, label_, links, deadline);

  // One endpoint per worker to reach: a rank's service worker (one-sided operations), or a
  // target's own worker (segments as active messages); all handshakes at once.
  std::unordered_map<std::string, std::size_t> endpoint_of;  // worker address -> index in endpoints_
  std::vector<std::pair<int, std::string>> peers;
  for (std::size_t i = 0; i < links.size(); ++i) {
    if (endpoint_of.try_emplace(records[i].address, peers.size()).second) {
      peers.emplace_back(spec_.targets.at(links[i].target).rank, records[i].address);
    }
  }
  const std::size_t first_endpoint = endpoints_.size();
  try {
    for (fabric::Endpoint& ep : worker.connect_all(peers)) endpoints_.push_back(std::make_unique<fabric::Endpoint>(std::move(ep)));
  } catch (const Error& e) {
    throw Error(e.code(), label_ + ": " + e.what());
  }

  for (std::size_t i = 0; i < links.size(); ++i) {
    const Link& link = links[i];
    const TargetRef target = spec_.targets.at(link.target);
    fabric::Endpoint* ep = endpoints_[first_endpoint + endpoint_of.at(records[i].address)].get();
    options.share = shares_.empty() ? nullptr : shares_[i].get();
    access.allow_am = records[i].active_message;
    try {
      // Over shm, attaching to a target whose process died fails (its segment is gone).
      remotes_.push_back(std::make_unique<fabric::RemoteMemory>(ep->attach(records[i].region)));
    } catch (const Error& e) {
      const bool gone = e.code() == Errc::peer_failed || node.process_gone(target.rank);
      throw Error(gone ? Errc::peer_failed : e.code(),
                  label_ + ": " + target_name(target) +
                      (gone ? " died before this source attached to its ring: " : ": ") + e.what());
    }
    writers_.push_back(std::make_unique<RingWriter>(spec_.options.mode, options, worker, *ep, *remotes_.back(),
                                                    link.ring * layout.bytes(), layout, access, link.label));
    link_endpoints_.push_back(ep);
    memory_bytes_ += writers_.back()->memory_bytes();
  }
  account_memory(spec_.name, static_cast<std::ptrdiff_t>(memory_bytes_));
}

Status SourceRings::wait_visible(std::size_t index) {
  switch (writers_[index]->segments().access().path()) {
    case memory::RemoteRing::Path::mapped: return link_endpoints_[index]->status();
    case memory::RemoteRing::Path::active_message: return writers_[index]->drain();
    case memory::RemoteRing::Path::put: break;
  }
  return link_endpoints_[index]->flush();
}

Status SourceRings::free_slots(std::size_t index, std::uint64_t& free) { return writers_[index]->free_slots(free); }

SourceRings::~SourceRings() {
  account_memory(spec_.name, -static_cast<std::ptrdiff_t>(memory_bytes_));
  // A source that never closed keeps its rank's shares (its ring never ends either).
  if (!shares_.empty()) forget_closed_shares(*share_node_, spec_, shares_);
}

Status SourceRings::close() {
  Status first;
  for (auto& writer : writers_) {
    Status s = writer->close();
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  closed_ = true;
  return first;
}

void SourceRings::abandon() noexcept {
  for (auto& writer : writers_) writer->abandon();
  closed_ = true;
}

memory::RingCounters SourceRings::counters() const {
  memory::RingCounters sum;
  for (const auto& writer : writers_) {
    sum.segments += writer->counters().segments;
    sum.bytes += writer->counters().bytes;
    sum.stalls += writer->counters().stalls;
  }
  return sum;
}

// ---------------------------------------------------------------------------------------------

TargetRings::TargetRings(cluster::Node& node, FlowSpec spec, std::size_t index, bool lossy, RingRecords records)
    : node_(node), spec_(std::move(spec)), failures_(node.fabric()), index_(index) {
  faults_ = RingFaults::from_setting(spec_, index, lossy);
  backoff_ = BackoffSettings::from_config();
  const TargetRef me = spec_.targets.at(index);
  label_ = "flow '" + spec_.name + "' target (rank " + std::to_string(me.rank) + ", id " + std::to_string(me.id) + ")";
  const memory::RingLayout layout = spec_.layout();
  const std::vector<std::size_t> rings = source_rings(spec_);
  for (std::size_t s = 0; s < rings.size(); ++s) {
    if (rings[s] == ring_source_.size()) ring_source_.push_back(s);
  }
  const std::size_t count = ring_source_.size();
  const std::size_t bytes = checked_ring_bytes(spec_);  // before anything is allocated
  try {
    region_ = fabric::MemoryRegion(node.fabric(), bytes);
  } catch (const Error& e) {
    throw Error(Errc::io, label_ + ": cannot allocate its rings (" + std::to_string(bytes) + " B): " + e.what());
  }
  auto* base = static_cast<std::byte*>(region_.data());
  for (std::size_t r = 0; r < count; ++r) readers_.emplace_back(base + r * layout.bytes(), layout);
  if (!node.fabric().capabilities().native_one_sided && config::get_string("data_path") != "rma") {
    worker_ = std::make_shared<fabric::Worker>(node.fabric(), label_);
    backoff_ = BackoffSettings::from_config(/*polls_are_syscalls=*/true);
    receiver_ = std::make_unique<memory::SegmentReceiver>(*worker_, base, count, layout, label_);
    node.adopt_progress(*worker_);
  }
  ended_.assign(count, false);
  dying_.assign(count, false);
  open_sources_ = count;
  account_memory(spec_.name, static_cast<std::ptrdiff_t>(region_.size()));
  RankEntry entry{worker_ != nullptr, worker_ ? worker_->address() : node.service_address(),
                  region_.descriptor().serialize()};
  try {
    if (records == RingRecords::per_rank) {
      rank_targets_ = offer_to_rank(node, spec_, index, std::move(entry), label_);
    } else {
      node.registry().publish(target_record(spec_.name, index),
                              encode_target_record(entry.active_message, entry.address, entry.region));
    }
  } catch (const Error& e) {
    if (worker_) node.abandon_progress(*worker_);
    account_memory(spec_.name, -static_cast<std::ptrdiff_t>(region_.size()));
    if (e.code() == Errc::already_exists) throw Error(Errc::already_exists, label_ + " is already open");
    throw;
  }
}

TargetRings::~TargetRings() {
  if (rank_targets_) {  // gone before its rank's record was published: not in it
    auto& rank = *std::static_pointer_cast<RankTargets>(rank_targets_);
    const std::lock_guard lock(rank.mutex);
    if (!rank.published) rank.entries.erase(index_);
  }
  if (worker_) {
    node_.abandon_progress(*worker_);
    fabric::owned_workers::remove(worker_.get());
    // A consumer progressing it from another flow's wait (owned_workers) finishes first; then
    // late messages find the receiver's no-op handlers.
    worker_->claim();
    receiver_.reset();
    worker_->unclaim();
  }
  account_memory(spec_.name, -static_cast<std::ptrdiff_t>(region_.size()));
}

bool TargetRings::poll(memory::SegmentView& view, std::size_t& source) {
  const std::size_t n = readers_.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = cursor_ + k < n ? cursor_ + k : cursor_ + k - n;
    if (ended_[i]) continue;
    bool held = false;
    std::optional<memory::SegmentView> segment = peek(i, held);
    if (held) [[unlikely]] continue;
    if (!segment) {
      if (dying_[i]) [[unlikely]] {  // a dead source's ring read to its end: its stream ends
        ended_[i] = true;
        --open_sources_;
        dead_.push_back(ring_source_[i]);
      }
      continue;
    }
    if (segment->end_of_stream) {
      readers_[i].release();
      ended_[i] = true;
      --open_sources_;
      continue;
    }
    if (segment->bytes == 0) {  // nothing in it (cannot happen from our writers, but harmless)
      readers_[i].release();
      continue;
    }
    view = *segment;
    source = ring_source_[i];
    held_ = i;
    cursor_ = i + 1 == n ? 0 : i + 1;
    return true;
  }
  return false;
}

std::optional<memory::SegmentView> TargetRings::peek_faulty(std::size_t ring,
                                                           std::optional<memory::SegmentView> segment, bool& held) {
  for (;;) {
    switch (faults_->judge(ring, *segment)) {
      case RingFaults::Verdict::deliver:
        return segment;
      case RingFaults::Verdict::hold:
        held = true;
        return std::nullopt;
      case RingFaults::Verdict::drop:
        readers_[ring].release();
        segment = readers_[ring].peek();
        if (!segment) return segment;
        break;
    }
  }
}

Status TargetRings::check_sources_alive() {
  if (!failures_.changed()) return {};
  for (std::size_t i = 0; i < ring_source_.size(); ++i) {
    if (ended_[i]) continue;
    const SourceRef s = spec_.sources[ring_source_[i]];
    std::string reason = failures_.reason(s.rank);
    if (!reason.empty() && end_dead_) {
      dying_[i] = true;  // poll() ends its stream once its ring is empty
      continue;
    }
    if (!reason.empty()) {
      std::string message = label_;
      if (spec_.options.rings == RingSharing::per_rank) {
        message += ": the sources of rank " + std::to_string(s.rank);
      } else {
        message += ": source (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ")";
      }
      return {Errc::peer_failed, message + " failed before closing the flow: " + reason};
    }
  }
  return {};
}

Status TargetRings::try_next(memory::SegmentView& view, std::size_t& source) {
  if (failure_.failed()) [[unlikely]] return failure_.again(label_);
  if (held_) {
    readers_[*held_].release();
    held_.reset();
  }
  view = {};
  // Segments the last progress() placed come first; the worker is progressed (over tcp a system
  // call) only when the rings hold nothing, so a busy consumer pays one per burst of arrivals.
  if (poll(view, source)) return {};
  progress();
  if (poll(view, source) || finished()) return {};
  if (Status s = check_sources_alive(); !s) return failure_.latch(std::move(s));
  return Status(Errc::retry);
}

Status TargetRings::next(memory::SegmentView& view, std::size_t& source, std::chrono::milliseconds timeout) {
  Status s = try_next(view, source);
  if (s.code() != Errc::retry) return s;
  Deadline deadline(timeout.count() > 0 ? std::chrono::nanoseconds(timeout) : std::chrono::hours(24 * 365));
  Backoff backoff(backoff_, reinterpret_cast<std::uintptr_t>(this));
  for (std::uint64_t round = 1;; ++round) {
    if (progress() != 0) backoff.reset();  // a fabric event: data is likely close behind
    if (poll(view, source) || finished()) return {};
    if ((round & 63) == 0) {
      if (Status alive = check_sources_alive(); !alive) return failure_.latch(std::move(alive));
      if (deadline.expired()) {
        return {Errc::timeout, label_ + ": no data within " + std::to_string(timeout.count()) + " ms (" +
                                   std::to_string(open_sources_) + " of " + std::to_string(readers_.size()) +
                                   " sources still open)"};
      }
    }
    pause(backoff);
  }
}

void TargetRings::pause(Backoff& backoff) {
  backoff.pause([this](std::chrono::microseconds pause) {
    if (!worker_) return std::this_thread::sleep_for(pause);
    // This thread's other targets first: their writers may be what ours waits for.
    if (fabric::owned_workers::progress(worker_.get()) != 0) return;
    worker_->claim();
    worker_->wait_for_event(pause, idle_);  // wakes at once when a segment arrives
    worker_->unclaim();
    idle_ = false;
  });
}

}  // namespace dfi::flow::detail
