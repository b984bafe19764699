#include "dfi/flow/detail/rings.hpp"

#include <unistd.h>

#include <algorithm>
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
    record = node.wait_for(spec_record(flow), waited);
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

// The RingShares of the per-rank rings this process writes, one per (node, flow, target), kept
// from the first of the rank's source threads that opens until the last has closed: a thread
// opening after another closed continues the ring's sequence. Touched when flows open and close.
using ShareKey = std::tuple<const cluster::Node*, std::string, std::size_t>;
std::mutex shares_mutex;
std::map<ShareKey, std::shared_ptr<memory::RingShare>>& shares() {
  static std::map<ShareKey, std::shared_ptr<memory::RingShare>> map;
  return map;
}

std::shared_ptr<memory::RingShare> ring_share(const cluster::Node& node, const FlowSpec& spec, std::size_t target,
                                              std::uint32_t writers) {
  const std::lock_guard lock(shares_mutex);
  auto& share = shares()[ShareKey{&node, spec.name, target}];
  if (!share) share = std::make_shared<memory::RingShare>(writers);
  return share;
}

// Forgets the shares of `spec` at `node` whose writers have all closed.
void forget_closed_shares(const cluster::Node& node, const FlowSpec& spec,
                          const std::vector<std::shared_ptr<memory::RingShare>>& mine) {
  const std::lock_guard lock(shares_mutex);
  for (std::size_t t = 0; t < mine.size(); ++t) {
    const auto it = shares().find(ShareKey{&node, spec.name, t});
    if (it != shares().end() && it->second == mine[t] && mine[t]->open.load() == 0) shares().erase(it);
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
  connect(node, worker, links, deadline);
}

SourceRings::SourceRings(cluster::Node& node, fabric::Worker& worker, FlowSpec spec, std::string label,
                         const std::vector<Link>& links, const Deadline& deadline)
    : spec_(std::move(spec)), label_(std::move(label)) {
  connect(node, worker, links, deadline);
}

namespace {

// A target's record: everything a source needs to reach its rings, in one registry value (one
// request fetches the records of every target):
//   path byte: 'a' (segments as active messages to a worker of the target's own) or 'r' (one-sided
//              operations through the rank's service worker)
//   4 bytes, little-endian: the length of the worker address that follows
//   the address of the worker to connect to
//   the region descriptor of the rings (fabric::RegionDescriptor::serialize)
struct TargetRecord {
  bool active_message = false;
  std::string address;
  fabric::RegionDescriptor region;
};

std::string encode_target_record(bool active_message, const std::string& address, const std::string& region) {
  std::string out;
  out.reserve(5 + address.size() + region.size());
  out += active_message ? 'a' : 'r';
  for (int i = 0; i < 4; ++i) out += static_cast<char>((address.size() >> (8 * i)) & 0xff);
  out += address;
  out += region;
  return out;
}

TargetRecord decode_target_record(std::string_view record, const std::string& who) {
  std::size_t length = 0;
  if (record.size() >= 5) {
    for (int i = 0; i < 4; ++i) length |= std::size_t{static_cast<unsigned char>(record[1 + i])} << (8 * i);
  }
  if (record.size() < 5 || (record[0] != 'a' && record[0] != 'r') || record.size() - 5 < length) {
    throw Error(Errc::protocol, who + ": its ring record (" + std::to_string(record.size()) +
                                    " B) is not one this build reads (a target of another DFI version?)");
  }
  TargetRecord out;
  out.active_message = record[0] == 'a';
  out.address = std::string(record.substr(5, length));
  out.region = fabric::RegionDescriptor::parse(record.substr(5 + length));
  return out;
}

std::string target_name(const TargetRef& target) {
  return "target (rank " + std::to_string(target.rank) + ", id " + std::to_string(target.id) + ")";
}

}  // namespace

void SourceRings::connect(cluster::Node& node, fabric::Worker& worker, const std::vector<Link>& links,
                          const Deadline& deadline) {
  const memory::RingLayout layout = spec_.layout();
  memory::SegmentWriterOptions options;
  options.stall_timeout = stall_timeout(spec_);
  memory::RemoteRingOptions access;
  access.allow_mapped = spec_.options.direct_write;

  // Every target's record in one held registry request.
  std::vector<std::string> names;
  std::vector<int> publishers;
  for (const Link& link : links) {
    names.push_back(target_record(spec_.name, link.target));
    publishers.push_back(spec_.targets.at(link.target).rank);
  }
  std::vector<std::optional<std::string>> found;
  try {
    found = node.wait_all(names, publishers, time_left(deadline));
  } catch (const Error& e) {
    if (e.code() == Errc::peer_failed || e.code() == Errc::timeout) {
      // Name the target missing (a look per target, on this error path only): one on a rank
      // known dead first, else the first.
      std::optional<std::size_t> missing;
      for (std::size_t i = 0; i < links.size(); ++i) {
        if (node.registry().try_lookup(names[i])) continue;
        const bool dead = !node.fabric().peer_failure(publishers[i]).empty();
        if (!missing || dead) missing = i;
        if (dead) break;
      }
      if (missing) {
        throw Error(e.code(), label_ + ": " + target_name(spec_.targets.at(links[*missing].target)) +
                                  " did not open the flow: " + e.what());
      }
    }
    throw Error(e.code(), label_ + ": " + e.what());
  }
  std::vector<TargetRecord> records;
  records.reserve(links.size());
  for (std::size_t i = 0; i < links.size(); ++i) {
    records.push_back(decode_target_record(*found[i], label_ + ": " + target_name(spec_.targets.at(links[i].target))));
  }

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

TargetRings::TargetRings(cluster::Node& node, FlowSpec spec, std::size_t index, bool lossy)
    : node_(node), spec_(std::move(spec)), failures_(node.fabric()) {
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
  try {
    node.registry().publish(target_record(spec_.name, index),
                            encode_target_record(worker_ != nullptr, worker_ ? worker_->address() : node.service_address(),
                                                 region_.descriptor().serialize()));
  } catch (const Error& e) {
    if (worker_) node.abandon_progress(*worker_);
    account_memory(spec_.name, -static_cast<std::ptrdiff_t>(region_.size()));
    if (e.code() == Errc::already_exists) throw Error(Errc::already_exists, label_ + " is already open");
    throw;
  }
}

TargetRings::~TargetRings() {
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
