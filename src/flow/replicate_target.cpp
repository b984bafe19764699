// ReplicateTarget: reads one ring per source, forwards what it relays, and hands segments out in
// arrival order (round robin) or in global sequence order with gap detection.
//
// Every ring has at most one "head": the oldest segment not yet released. A head is released once
// the application gave it back (or it is never to be handed out: a late segment, a failure
// marker) and every child of this target in that source's relay tree has a copy. Each source's
// ring is in sequence order, so in ordered mode the heads are the receive list and the head
// holding the next number is the one to hand out; nothing is copied. Target 0 of a stamped flow
// is the sequencer: it numbers each head as it loads it, in its own ring memory, before forwarding.
#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>

#include "dfi/cluster/node.hpp"
#include "dfi/cluster/shared_words.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/registry/client.hpp"
#include "replicate_detail.hpp"

namespace dfi::flow {

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

detail::TargetRings open_target(cluster::Node& node, std::string_view name, int id,
                                const std::optional<Schema>& expected_schema, std::chrono::milliseconds timeout) {
  FlowSpec spec = detail::open_spec(node, name, FlowType::replicate, expected_schema, detail::open_deadline(timeout));
  const std::size_t index = detail::target_index(spec, node.rank(), id);
  // An ordered flow reports a lost segment as a gap: injected drops may apply to it.
  const bool lossy = spec.type_options.get<ReplicateOptions>().ordered;
  return detail::TargetRings(node, std::move(spec), index, lossy, detail::RingRecords::per_target);
}
}  // namespace

struct ReplicateTarget::State {
  enum class Head : std::uint8_t { none, data, end, abort };

  struct Ring {
    Head head = Head::none;
    memory::SegmentView view;
    std::uint64_t header = 0;
    bool handed_out = false;          // the application holds the head
    bool done_with = false;           // given back, or never to be handed out
    bool forwarding = false;          // some child still lacks the head
    bool announced = true;            // false: a head this target numbered, not yet in the counter word
    std::vector<std::size_t> links;   // indices into `children` feeding this ring's subtree
    std::vector<std::uint8_t> steps;  // per link: forwarding steps done for the head
    bool ended = false;
    int writer_rank = 0;
    std::string writer_name;        // who writes this ring
    std::string writer_failure;     // non-empty once the writer's rank is dead
    std::uint64_t failed_rank = 0;  // Head::abort: the rank named in the marker we send down
  };

  State(cluster::Node& n, std::string_view name, int id, ReplicateTargetOptions options);
  ~State();

  Status step(ReplicateBatch& batch, bool& got);
  void give_back();
  Status connect();
  Status connect_sequencer();
  fabric::Worker& own_or_given_worker();
  void check_writers();
  void advance(std::size_t s);
  void announce(Ring& r);
  void load_head(std::size_t s, const memory::SegmentView& view);
  void ring_failed(std::size_t s);
  void end_ring(std::size_t s);
  bool forward(std::size_t s);
  bool forward_link(std::size_t s, std::size_t i);
  void link_failed(std::size_t link, const Status& status);
  bool deliver_any(ReplicateBatch& batch);
  bool deliver_ordered(ReplicateBatch& batch);
  void hand_out(std::size_t s, ReplicateBatch& batch);
  void gap_event(std::uint64_t last, ReplicateBatch& batch);
  Status read_counter(std::uint64_t& value);
  void poll_counter();
  void depart();
  std::string gap_text(const ReplicateBatch& batch) const;

  cluster::Node& node;
  detail::TargetRings rings;
  const FlowSpec& spec;
  std::size_t index;
  std::string label;
  std::size_t tuple_bytes;
  bool ordered;
  std::chrono::milliseconds gap_timeout;
  std::chrono::milliseconds stall;
  BackoffSettings backoff = rings.backoff_settings();
  std::vector<Ring> ring;
  std::size_t open_rings;
  std::size_t cursor = 0;
  std::optional<std::size_t> held;
  bool finished = false;
  std::deque<Status> pending;  // errors to report, one per call
  std::uint64_t seen_epoch = 0;
  ReplicateCounters counters;

  // Forwarding (relay) and the sequencer connection, set up by the consuming thread.
  fabric::Worker* worker = nullptr;
  std::unique_ptr<fabric::Worker> own_worker;
  bool connected = false;
  std::unique_ptr<detail::SourceRings> children;
  std::vector<std::uint64_t> link_free;
  std::vector<std::uint8_t> link_dead;
  std::vector<std::string> link_labels;

  // Ordered flows.
  cluster::SharedWords sequencer;  // target 0 hosts it, the others attach
  bool stamps = false;             // target 0 of a stamped flow: numbers the segments itself
  std::uint64_t stamped = 0;       // stamps: the last number given
  std::uint64_t announced_max = 0; // stamps: the counter word (the highest number every child has)
  bool departed = false;
  bool counter_failed = false;
  std::uint64_t expected = 1;  // next sequence number to hand out
  std::uint64_t issued = 0;    // highest number known to be taken by a source
  bool gap_timing = false;
  Clock::time_point gap_since;
  // Polls that found `expected` missing since it last arrived: the clock and the sequencer are
  // looked at once every kGapCheckEvery of them, not per poll (a target waiting for the next
  // number polls in a tight loop; two clock reads per poll were 15 % of a NOPaxos replica's CPU).
  std::uint32_t missing_polls = 0;
  std::uint64_t gap_evidence = 0;  // `issued` when the gap timer started
  Clock::time_point next_counter_poll;
  std::chrono::milliseconds counter_poll_interval{1};
  bool final_checked = false;
};

ReplicateTarget::State::State(cluster::Node& n, std::string_view name, int id,
                              ReplicateTargetOptions options)
    : node(n),
      rings(open_target(n, name, id, options.expected_schema, options.open_timeout)),
      spec(rings.spec()),
      index(detail::target_index(spec, n.rank(), id)),
      label("flow '" + spec.name + "' " + detail::target_name(spec, index)),
      tuple_bytes(spec.schema.tuple_bytes()),
      ordered(spec.type_options.get<ReplicateOptions>().ordered),
      gap_timeout(spec.type_options.get<ReplicateOptions>().gap_timeout),
      stall(detail::stall_timeout(spec)),
      ring(spec.sources.size()),
      open_rings(spec.sources.size()),
      worker(options.worker) {
  for (std::size_t s = 0; s < ring.size(); ++s) {
    const std::optional<std::size_t> parent = relay_parent(spec, s, index);
    if (parent) {
      ring[s].writer_rank = spec.targets[*parent].rank;
      ring[s].writer_name = detail::target_name(spec, *parent) + ", which relays " +
                            detail::source_name(spec, s) + ",";
    } else {
      ring[s].writer_rank = spec.sources[s].rank;
      ring[s].writer_name = detail::source_name(spec, s);
    }
  }
  seen_epoch = ~node.fabric().failure_epoch();  // differs: the first step looks at every writer
  counter_poll_interval =
      std::clamp(gap_timeout / 4, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
  if (ordered && index == 0) {
    sequencer.host(node, detail::sequencer_record(spec.name), spec.targets.size());
    stamps = spec.type_options.get<ReplicateOptions>().sequencer == Sequencer::stamp;
  }
}

ReplicateTarget::State::~State() {
  if (!ordered) return;
  if (index != 0) {
    depart();
    return;
  }
  // Target 0 hosts the sequencer: keep it until the other targets are done with it (or dead).
  std::vector<int> others;
  for (std::size_t t = 1; t < spec.targets.size(); ++t) others.push_back(spec.targets[t].rank);
  sequencer.wait_for_departures(node, 1, others, Deadline(stall), backoff);
}

void ReplicateTarget::State::depart() {
  if (departed || index == 0) return;
  departed = true;
  if (!sequencer.attached() && !connect_sequencer()) return;  // target 0 stops waiting at its deadline
  (void)sequencer.fetch_add(index, 1);  // its departure word, applied when it returns
}

fabric::Worker& ReplicateTarget::State::own_or_given_worker() {
  if (worker == nullptr) {
    own_worker = std::make_unique<fabric::Worker>(node.fabric(), label);
    worker = own_worker.get();
  }
  return *worker;
}

Status ReplicateTarget::State::connect_sequencer() {
  try {
    sequencer.attach(node, own_or_given_worker(), detail::sequencer_record(spec.name), spec.targets[0].rank,
                     std::chrono::milliseconds(0));
  } catch (const Error& e) {
    return {e.code(), label + ": cannot reach the sequencer at " + detail::target_name(spec, 0) +
                          ": " + e.what()};
  }
  return {};
}

// Runs in the consuming thread on the first consume: connects to the children this target relays
// to and (ordered, not target 0) to the sequencer.
Status ReplicateTarget::State::connect() {
  if (!children) {
    std::vector<detail::SourceRings::Link> links;
    std::vector<std::vector<std::size_t>> ring_links(ring.size());
    for (std::size_t s = 0; s < ring.size(); ++s) {
      for (std::size_t child : relay_children(spec, s, index)) {
        ring_links[s].push_back(links.size());
        links.push_back({child, s,
                         label + " relaying " + detail::source_name(spec, s) + " -> " +
                             detail::target_name(spec, child)});
      }
    }
    if (!links.empty()) {
      try {
        children =
            std::make_unique<detail::SourceRings>(node, own_or_given_worker(), spec, label, links,
                                                  detail::open_deadline(std::chrono::milliseconds(0)));
      } catch (const Error& e) {
        return {e.code(), label + ": " + e.what()};
      }
      for (std::size_t s = 0; s < ring.size(); ++s) ring[s].links = std::move(ring_links[s]);
      for (const auto& link : links) link_labels.push_back(link.label);
      link_free.assign(links.size(), 0);
      link_dead.assign(links.size(), 0);
    }
  }
  if (ordered && index != 0 && !sequencer.attached()) {
    if (Status st = connect_sequencer(); !st) return st;
  }
  connected = true;
  return {};
}

void ReplicateTarget::State::give_back() {
  if (!held) return;
  ring[*held].handed_out = false;
  ring[*held].done_with = true;
  held.reset();
}

void ReplicateTarget::State::check_writers() {
  const std::uint64_t epoch = node.fabric().failure_epoch();
  if (epoch == seen_epoch) return;
  seen_epoch = epoch;
  for (Ring& r : ring) {
    if (r.ended || !r.writer_failure.empty()) continue;
    r.writer_failure = node.fabric().peer_failure(r.writer_rank);
  }
}

void ReplicateTarget::State::end_ring(std::size_t s) {
  ring[s].ended = true;
  ring[s].head = Head::none;
  --open_rings;
}

// The writer died and its ring holds nothing more: report it, and pass a failure marker and
// end-of-stream down the subtree so that the targets below do not wait for a writer that is alive.
void ReplicateTarget::State::ring_failed(std::size_t s) {
  Ring& r = ring[s];
  pending.push_back(
      {Errc::peer_failed,
       label + ": " + r.writer_name + " failed before closing the flow: " + r.writer_failure});
  if (r.links.empty()) return end_ring(s);
  r.head = Head::abort;
  r.failed_rank = static_cast<std::uint64_t>(r.writer_rank);
  r.done_with = true;
  r.steps.assign(r.links.size(), 0);
  r.forwarding = true;
}

void ReplicateTarget::State::load_head(std::size_t s, const memory::SegmentView& view) {
  Ring& r = ring[s];
  r.view = view;
  r.handed_out = false;
  r.done_with = false;
  r.steps.assign(r.links.size(), 0);
  r.forwarding = !r.links.empty();
  r.announced = true;  // nothing to announce unless this target numbers it (below)
  if (view.end_of_stream) {
    r.head = Head::end;
    return;
  }
  r.head = Head::data;
  if (view.bytes < kReplicateHeaderBytes) {
    r.done_with = true;
    pending.push_back({Errc::protocol, label + ": a segment of " + std::to_string(view.bytes) +
                                           " B from " + r.writer_name + " has no header"});
    return;
  }
  std::memcpy(&r.header, view.data, sizeof r.header);
  if (r.header == kReplicateAbortHeader) {
    r.done_with = true;
    std::uint64_t rank = 0;
    if (view.bytes >= 2 * sizeof rank) std::memcpy(&rank, view.data + sizeof rank, sizeof rank);
    pending.push_back({Errc::peer_failed, label + ": the stream of " +
                                              detail::source_name(spec, s) + " ended early: rank " +
                                              std::to_string(rank) +
                                              " upstream in its relay tree failed"});
    return;
  }
  if ((view.bytes - kReplicateHeaderBytes) % tuple_bytes != 0) {
    r.done_with = true;
    pending.push_back({Errc::protocol, label + ": a segment of " + std::to_string(view.bytes) +
                                           " B from " + r.writer_name +
                                           " is not a whole number of tuples"});
    return;
  }
  if (stamps) {
    if (r.header != 0) {
      r.done_with = true;
      r.forwarding = false;  // never to the others: they would take its foreign number for one of ours
      pending.push_back({Errc::protocol, label + ": a segment from " + r.writer_name + " carries sequence number " +
                                             std::to_string(r.header) + " in a flow the stamp sequencer numbers"});
      return;
    }
    // The segment is ours until released: its header word becomes its number, so the copies
    // forwarded from the slot carry it. The counter word announces it once every child has it
    // (advance), so that a child sees a number as missing only when its copy went astray.
    r.header = ++stamped;
    std::memcpy(const_cast<std::byte*>(view.data), &r.header, sizeof r.header);
    r.announced = false;
  }
  if (ordered) {
    if (r.header < expected) {  // its gap was reported already
      r.done_with = true;
      ++counters.late;
    } else {
      issued = std::max(issued, r.header);
    }
  }
}

void ReplicateTarget::State::link_failed(std::size_t link, const Status& status) {
  link_dead[link] = 1;
  pending.push_back(status);
}

// Forwards the head of ring s to link i of that ring; true when the link is done (or dead).
// Never waits for ring space: a child without a free slot is retried on a later call.
bool ReplicateTarget::State::forward_link(std::size_t s, std::size_t i) {
  Ring& r = ring[s];
  const std::size_t link = r.links[i];
  const std::uint8_t steps = r.head == Head::abort ? 2 : 1;
  while (r.steps[i] < steps) {
    if (link_free[link] == 0) {
      std::uint64_t free = 0;
      if (Status st = children->free_slots(link, free); !st) {
        link_failed(link, {st.code(), link_labels[link] + ": " + st.message()});
        return true;
      }
      link_free[link] = free;
      if (free == 0) return false;
    }
    detail::RingWriter& writer = children->writer(link);
    Status st;
    if (r.head == Head::data) {
      st = writer.publish_from(r.view.data, r.view.bytes);
      if (st) ++counters.forwarded;
    } else if (r.head == Head::abort && r.steps[i] == 0) {
      const std::uint64_t marker[2] = {kReplicateAbortHeader, r.failed_rank};
      st = writer.publish_from(marker, sizeof marker);
    } else {
      st = writer.close();
    }
    if (!st) {
      link_failed(link, st);
      return true;
    }
    --link_free[link];
    ++r.steps[i];
  }
  return true;
}

bool ReplicateTarget::State::forward(std::size_t s) {
  Ring& r = ring[s];
  const std::uint8_t steps = r.head == Head::abort ? 2 : 1;
  bool all = true;
  for (std::size_t i = 0; i < r.links.size(); ++i) {
    if (link_dead[r.links[i]] != 0 || r.steps[i] >= steps) continue;
    if (!forward_link(s, i)) all = false;
  }
  r.forwarding = !all;
  return all;
}

// Stamps: raises the counter word to the head's number once every live child has its copy (the
// other targets' gap detection reads it). Heads finish forwarding out of number order when one
// child's ring is full, so the word keeps the highest announced.
void ReplicateTarget::State::announce(Ring& r) {
  r.announced = true;
  if (r.header <= announced_max) return;
  announced_max = r.header;
  std::atomic_ref(sequencer.local()[detail::kSequencerCounter]).store(announced_max, std::memory_order_release);
}

void ReplicateTarget::State::advance(std::size_t s) {
  Ring& r = ring[s];
  for (;;) {
    if (r.ended) return;
    if (r.head == Head::none) {
      bool delayed = false;
      std::optional<memory::SegmentView> view = rings.peek(s, delayed);
      if (delayed) [[unlikely]] return;  // a delayed segment: the ring is not empty
      if (!view) {
        if (r.writer_failure.empty()) return;
        ring_failed(s);
        if (r.ended) return;
      } else {
        load_head(s, *view);
      }
    }
    if (r.forwarding && !forward(s)) return;
    if (!r.announced) announce(r);
    switch (r.head) {
      case Head::end:
        rings.reader(s).release();
        return end_ring(s);
      case Head::abort:
        return end_ring(s);
      case Head::data:
        if (!r.done_with) return;
        rings.reader(s).release();
        r.head = Head::none;
        break;
      case Head::none:
        return;
    }
  }
}

void ReplicateTarget::State::hand_out(std::size_t s, ReplicateBatch& batch) {
  Ring& r = ring[s];
  r.handed_out = true;
  held = s;
  batch.data = r.view.data + kReplicateHeaderBytes;
  batch.count = (r.view.bytes - kReplicateHeaderBytes) / tuple_bytes;
  batch.source = s;
  batch.sequence = r.header;
  counters.tuples += batch.count;
  counters.bytes += batch.count * tuple_bytes;
  ++counters.segments;
}

bool ReplicateTarget::State::deliver_any(ReplicateBatch& batch) {
  const std::size_t n = ring.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = cursor + k < n ? cursor + k : cursor + k - n;
    const Ring& r = ring[i];
    if (r.head != Head::data || r.handed_out || r.done_with) continue;
    hand_out(i, batch);
    cursor = i + 1 == n ? 0 : i + 1;
    return true;
  }
  return false;
}

void ReplicateTarget::State::gap_event(std::uint64_t last, ReplicateBatch& batch) {
  batch.sequence = expected;
  batch.gap_count = last - expected + 1;
  ++counters.gaps;
  counters.missing += batch.gap_count;
  expected = last + 1;
  gap_timing = false;
}

bool ReplicateTarget::State::deliver_ordered(ReplicateBatch& batch) {
  std::uint64_t lowest = kNone;  // lowest waiting head: all above `expected`
  for (std::size_t s = 0; s < ring.size(); ++s) {
    const Ring& r = ring[s];
    if (r.head != Head::data || r.handed_out || r.done_with) continue;
    if (r.header == expected) {
      hand_out(s, batch);
      ++expected;
      gap_timing = false;
      missing_polls = 0;
      return true;
    }
    lowest = std::min(lowest, r.header);
  }
  constexpr std::uint32_t kGapCheckEvery = 64;
  if (++missing_polls % kGapCheckEvery != 1) return false;
  // `expected` is not here. It is a gap once it is known to exist (a later number arrived, or the
  // counter passed it) and stays missing for gap_timeout.
  if (issued < expected) {
    poll_counter();
    if (issued < expected) return false;
  }
  const Clock::time_point now = Clock::now();
  if (!gap_timing) {
    gap_timing = true;
    gap_since = now;
    gap_evidence = issued;
    return false;
  }
  if (now - gap_since < gap_timeout) return false;
  // Every number up to gap_evidence existed when the timer started; those below the lowest
  // waiting head are all still missing.
  gap_event(lowest == kNone ? gap_evidence : std::min(gap_evidence, lowest - 1), batch);
  return true;
}

Status ReplicateTarget::State::read_counter(std::uint64_t& value) {
  const Status st = sequencer.load(detail::kSequencerCounter, value);
  if (!st)
    return {st.code(), label + ": reading the sequencer at " + detail::target_name(spec, 0) + ": " +
                           st.message()};
  return {};
}

void ReplicateTarget::State::poll_counter() {
  if (counter_failed) return;
  const Clock::time_point now = Clock::now();
  if (now < next_counter_poll) return;
  next_counter_poll = now + counter_poll_interval;
  std::uint64_t value = 0;
  if (Status st = read_counter(value); !st) {
    counter_failed = true;
    pending.push_back(std::move(st));
    return;
  }
  issued = std::max(issued, value);
}

Status ReplicateTarget::State::step(ReplicateBatch& batch, bool& got) {
  got = false;
  if (finished) {
    batch.end = true;
    got = true;
    return {};
  }
  if (!connected) {
    if (Status st = connect(); !st) return st;
  }
  check_writers();
  rings.progress();  // segments that arrive as active messages (tcp)
  for (std::size_t s = 0; s < ring.size(); ++s) advance(s);
  if (!pending.empty()) {
    Status st = std::move(pending.front());
    pending.pop_front();
    return st;
  }
  if (ordered ? deliver_ordered(batch) : deliver_any(batch)) {
    got = true;
    return {};
  }
  if (!pending.empty()) {  // the counter could not be read
    Status st = std::move(pending.front());
    pending.pop_front();
    return st;
  }
  if (open_rings > 0) return {};
  if (ordered && !final_checked) {
    // Every stream ended: numbers the counter issued that no segment carried will never come.
    final_checked = true;
    std::uint64_t last = 0;
    Status st = counter_failed ? Status() : read_counter(last);
    depart();
    if (!st) return st;
    if (last >= expected) {
      gap_event(last, batch);
      got = true;
      return {};
    }
  }
  finished = true;
  batch.end = true;
  got = true;
  return {};
}

std::string ReplicateTarget::State::gap_text(const ReplicateBatch& batch) const {
  return label + ": gap: sequence numbers " + std::to_string(batch.sequence) + ".." +
         std::to_string(batch.sequence + batch.gap_count - 1) +
         " are missing (not arrived within " + std::to_string(gap_timeout.count()) +
         " ms, or never written)";
}

// ---------------------------------------------------------------------------------------------

ReplicateTarget::ReplicateTarget(cluster::Node& node, std::string_view name, int id,
                                 ReplicateTargetOptions options)
    : state_(std::make_unique<State>(node, name, id, std::move(options))) {}

ReplicateTarget::~ReplicateTarget() = default;

bool ReplicateTarget::end() const noexcept { return state_->finished; }
std::size_t ReplicateTarget::memory_bytes() const noexcept {
  return state_->rings.memory_bytes() + (state_->children ? state_->children->memory_bytes() : 0);
}
const ReplicateCounters& ReplicateTarget::counters() const noexcept { return state_->counters; }

Status ReplicateTarget::try_consume(ReplicateBatch& batch) {
  State& st = *state_;
  st.give_back();
  batch = ReplicateBatch{};
  batch.tuple_bytes = st.tuple_bytes;
  bool got = false;
  Status status = st.step(batch, got);
  if (!status || got) return status;
  return Status(Errc::retry);
}

Status ReplicateTarget::consume(ReplicateBatch& batch, std::chrono::milliseconds timeout) {
  State& st = *state_;
  st.give_back();
  batch = ReplicateBatch{};
  batch.tuple_bytes = st.tuple_bytes;
  bool got = false;
  if (Status status = st.step(batch, got); !status || got) return status;
  if (timeout.count() == 0) timeout = st.stall;
  Deadline deadline(timeout.count() > 0 ? std::chrono::nanoseconds(timeout)
                                        : std::chrono::hours(24 * 365));
  Backoff backoff(st.backoff, reinterpret_cast<std::uintptr_t>(this));
  for (std::uint64_t round = 1;; ++round) {
    if (st.children) st.worker->progress();
    if (Status status = st.step(batch, got); !status || got) return status;
    if ((round & 63) == 0 && deadline.expired()) {
      return {
          Errc::timeout,
          st.label + ": nothing to consume within " + std::to_string(timeout.count()) + " ms (" +
              std::to_string(st.open_rings) + " of " + std::to_string(st.ring.size()) +
              " source streams still open" +
              (st.ordered ? ", waiting for sequence number " + std::to_string(st.expected) : "") +
              ")"};
    }
    st.rings.pause(backoff);
  }
}

Status ReplicateTarget::consume(TupleBatch& batch, std::chrono::milliseconds timeout) {
  ReplicateBatch full;
  Status status = consume(full, timeout);
  batch = full;
  if (status && full.gap()) {
    batch = TupleBatch{};
    batch.tuple_bytes = full.tuple_bytes;
    return {Errc::gap, state_->gap_text(full)};
  }
  return status;
}

}  // namespace dfi::flow
