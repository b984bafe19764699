#include "dfi/driven/mover.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>

#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/flow/detail/rings.hpp"
#include "dfi/memory/segment_reader.hpp"
#include "dfi/memory/segment_writer.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"
#include "share.hpp"

namespace dfi::driven {

using Reader = memory::SegmentReader<memory::RemoteRing>;
using Writer = memory::SegmentWriter<memory::RemoteRing>;

namespace {

// limit_rate(): how far behind the rate a mover may fall and catch up (a late wake-up from the
// pacing sleep on a loaded machine, a slow pass) before the time counts as idle.
constexpr std::chrono::milliseconds kPaceCredit{5};

std::string consumer_name(const flow::TargetRef& t) {
  return "consumer (rank " + std::to_string(t.rank) + ", id " + std::to_string(t.id) + ")";
}

}  // namespace

// One flow as the mover sees it: the writer of every consumer's ring and readers of the
// producers' rings. Shuffle: readers[c][p] is producer p's ring for consumer c. Balance and
// replicate: one row, readers[0][p] is producer p's one ring, which every consumer's turn reads.
struct Mover::Flow {
  flow::FlowSpec spec;
  DrivenOptions options;
  std::string label;
  std::unordered_map<int, std::unique_ptr<fabric::Endpoint>> endpoints;  // by rank
  std::vector<std::unique_ptr<fabric::RemoteMemory>> regions;
  std::vector<std::unique_ptr<Writer>> writers;               // [consumer]
  std::vector<std::vector<std::unique_ptr<Reader>>> readers;  // [consumer or 0][producer]
  std::vector<std::vector<bool>> ended;                       // like readers: end-of-stream taken
  std::vector<std::size_t> open;                              // per row of readers: producers not ended
  std::vector<std::size_t> cursor;                            // per row: round robin start
  std::size_t first_consumer = 0;                             // balance: whose turn comes first
  // Per step, sized once (no allocation per step): free slots and batch budget per consumer.
  std::vector<std::uint64_t> free;
  std::vector<std::uint64_t> budget;
  // Replicate: the endpoints of consumers whose rings are written with puts, flushed before any
  // consumer's ring shows a segment.
  std::vector<fabric::Endpoint*> put_endpoints;
  std::size_t consumers_open = 0;     // consumers attached and not closed
  memory::RingLayout layout;
  memory::SegmentWriterOptions writer_options;
  // Balance: writers[c] is null until consumer c opened; leaving[c] once it asked to leave.
  std::vector<bool> leaving;
  std::vector<std::string> join_records, leave_records;  // [consumer]: built once
  std::string share_record;
  std::chrono::steady_clock::time_point next_poll{};  // of the registry: share, joins and leaves
  bool final_poll = false;  // balance: made after every producer ended
  // QoS (Mover::step: deficit round robin over the mover's flows, in payload bytes): the share
  // the mover applies, the bytes the flow may move per round, the bytes it may still move (may
  // be negative after a segment overshot it), and this pass's limit for the pattern's loop.
  std::int64_t share = 1;
  std::int64_t quantum = 0;
  std::int64_t deficit = 0;
  std::uint64_t allowance = std::numeric_limits<std::uint64_t>::max();
  MoverCounters tally;  // this flow's counters

  // True once the flow ended: every producer's end-of-stream taken and every consumer attached
  // closed (balance), every consumer closed (the others).
  bool ended_all() const {
    return consumers_open == 0 && (options.pattern != Pattern::balance || (open[0] == 0 && final_poll));
  }

  // One pass of the flow's pattern; `moved` grows by the payload bytes written into consumers,
  // and stops growing once it reached `allowance` (the last segment may go beyond it).
  Status step_shuffle(MoverCounters& counters, std::uint64_t& moved);
  Status step_balance(MoverCounters& counters, std::uint64_t& moved);
  Status step_replicate(MoverCounters& counters, std::uint64_t& moved);

  // Producer p's next segment from row `row` of readers, if one is there; takes an end-of-stream
  // segment itself (the producer ended) and leaves `segment` empty then.
  Status take(std::size_t row, std::size_t p, std::optional<memory::SegmentView>& segment);
  // Copies `segment` (peeked from `reader`) into the writer's ring and gives it back.
  Status transfer(Reader& reader, Writer& writer, const memory::SegmentView& segment, MoverCounters& total,
                  std::uint64_t& moved);
  // free and budget of every consumer, from its ring's released tail.
  Status refresh_free();
  // Balance and replicate, after a pass: sends what was published; once every producer ended,
  // closes each consumer that has room for its end-of-stream segment.
  Status finish_consumers();
};

Mover::Mover(cluster::Node& node) : node_(node), worker_(node.fabric(), "mover") {}

Mover::~Mover() = default;

void Mover::add_flow(std::string_view name, std::chrono::milliseconds timeout) {
  for (const auto& f : flows_) {
    if (f->spec.name == name) throw Error(Errc::invalid_argument, "mover: flow '" + std::string(name) + "' added twice");
  }
  const Deadline deadline = flow::detail::open_deadline(timeout);
  auto f = std::make_unique<Flow>();
  f->spec = flow::detail::open_spec(node_, name, kDriven, std::nullopt, deadline);
  f->options = f->spec.type_options.get<DrivenOptions>();
  f->label = "driven flow '" + f->spec.name + "' mover (rank " + std::to_string(node_.rank()) + ")";
  f->share = f->options.share;
  f->share_record = detail::share_record(f->spec.name);
  const std::size_t producers = f->spec.sources.size();
  const std::size_t consumers = f->spec.targets.size();

  auto attach = [&](const std::string& record, int rank, const std::string& who) -> fabric::RemoteMemory& {
    try {
      return this->attach(*f, rank, node_.wait_for(record, flow::detail::time_left(deadline)));
    } catch (const Error& e) {
      throw Error(e.code(), f->label + ": " + who + " did not open the flow: " + e.what());
    }
  };

  f->layout = f->spec.layout();
  f->writer_options.stall_timeout = flow::detail::stall_timeout(f->spec);
  std::vector<fabric::RemoteMemory*> producer_regions;
  for (std::size_t p = 0; p < producers; ++p) {
    const flow::SourceRef s = f->spec.sources[p];
    producer_regions.push_back(&attach(detail::producer_record(f->spec.name, p), s.rank,
                                       "producer (rank " + std::to_string(s.rank) + ", thread " +
                                           std::to_string(s.thread) + ")"));
  }
  const bool shuffle = f->options.pattern == Pattern::shuffle;
  // A balance flow's consumers come and go while it runs (poll_members): none is waited for.
  const bool elastic = f->options.pattern == Pattern::balance;
  const std::size_t rows = shuffle ? consumers : 1;
  f->writers.resize(consumers);
  f->leaving.assign(consumers, false);
  for (std::size_t c = 0; c < consumers; ++c) {
    f->join_records.push_back(detail::consumer_record(f->spec.name, c));
    f->leave_records.push_back(detail::leave_record(f->spec.name, c));
  }
  for (std::size_t c = 0; c < consumers && !elastic; ++c) {
    const flow::TargetRef t = f->spec.targets[c];
    attach_consumer(*f, c, attach(f->join_records[c], t.rank, consumer_name(t)));
  }
  for (std::size_t row = 0; row < rows; ++row) {
    f->readers.emplace_back();
    for (std::size_t p = 0; p < producers; ++p) {
      const flow::SourceRef s = f->spec.sources[p];
      f->readers.back().push_back(std::make_unique<Reader>(
          worker_, endpoint(*f, s.rank), *producer_regions[p], row * f->layout.bytes(), f->layout,
          memory::RemoteRingOptions{},
          f->label + " <- producer (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ")" +
              (shuffle ? " for " + consumer_name(f->spec.targets[row]) : std::string())));
    }
  }
  try {
    node_.registry().publish(detail::mover_record(f->spec.name), std::to_string(node_.rank()));
  } catch (const Error& e) {
    if (e.code() != Errc::already_exists) throw;
    throw Error(Errc::already_exists, f->label + ": the flow has a mover already (rank " +
                                          node_.registry().lookup(detail::mover_record(f->spec.name)) + ")");
  }
  f->ended.assign(rows, std::vector<bool>(producers, false));
  f->open.assign(rows, producers);
  f->cursor.assign(rows, 0);
  f->free.assign(consumers, 0);
  f->budget.assign(consumers, 0);
  flows_.push_back(std::move(f));
  quanta_stale_ = true;
}

fabric::Endpoint& Mover::endpoint(Flow& f, int rank) {
  std::unique_ptr<fabric::Endpoint>& ep = f.endpoints[rank];
  if (!ep) ep = std::make_unique<fabric::Endpoint>(node_.connect(worker_, rank));
  return *ep;
}

fabric::RemoteMemory& Mover::attach(Flow& f, int rank, const std::string& descriptor) {
  f.regions.push_back(
      std::make_unique<fabric::RemoteMemory>(endpoint(f, rank).attach(fabric::RegionDescriptor::parse(descriptor))));
  return *f.regions.back();
}

void Mover::attach_consumer(Flow& f, std::size_t c, fabric::RemoteMemory& region) {
  const flow::TargetRef t = f.spec.targets[c];
  fabric::Endpoint& ep = endpoint(f, t.rank);
  // mapped where UCX maps the PU's memory, else puts and gets
  f.writers[c] = std::make_unique<Writer>(f.writer_options, worker_, ep, region, 0, f.layout,
                                          memory::RemoteRingOptions{}, f.label + " -> " + consumer_name(t));
  if (!f.writers[c]->in_place() && std::find(f.put_endpoints.begin(), f.put_endpoints.end(), &ep) == f.put_endpoints.end()) {
    f.put_endpoints.push_back(&ep);
  }
  ++f.consumers_open;
}

Status Mover::poll_registry(Flow& f, std::chrono::steady_clock::time_point now, bool now_or_never) {
  if (now < f.next_poll && !now_or_never) return {};
  f.next_poll = now + kShareRefresh;
  std::optional<std::string> text;
  try {
    text = node_.registry().try_lookup(f.share_record);
  } catch (const Error& e) {
    return {e.code(), f.label + ": share record: " + e.what()};
  }
  if (text) {
    std::int64_t share = 0;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), share);
    std::string problem = ec != std::errc() || end != text->data() + text->size() ? "not a number" : share_problem(share);
    if (!problem.empty()) return {Errc::protocol, f.label + ": share record '" + *text + "': " + problem};
    if (share != f.share) {
      f.share = share;
      quanta_stale_ = true;
    }
  }
  if (f.options.pattern != Pattern::balance) return {};
  for (std::size_t c = 0; c < f.writers.size(); ++c) {
    try {
      if (!f.writers[c]) {
        if (auto descriptor = node_.registry().try_lookup(f.join_records[c])) {
          attach_consumer(f, c, attach(f, f.spec.targets[c].rank, *descriptor));
        }
      } else if (!f.leaving[c] && !f.writers[c]->closed()) {
        f.leaving[c] = node_.registry().try_lookup(f.leave_records[c]).has_value();
      }
    } catch (const Error& e) {
      return {e.code(), f.label + ": " + consumer_name(f.spec.targets[c]) + ": " + e.what()};
    }
  }
  return {};
}

void Mover::limit_rate(double bytes_per_second) {
  if (!(bytes_per_second >= 0) || !std::isfinite(bytes_per_second)) {
    throw Error(Errc::invalid_argument, "mover (rank " + std::to_string(node_.rank()) + "): rate limit " +
                                            std::to_string(bytes_per_second) + " B/s is not a rate");
  }
  rate_ = bytes_per_second;
}

bool Mover::done() const noexcept {
  return std::all_of(flows_.begin(), flows_.end(), [](const auto& f) { return f->ended_all(); });
}

// QoS by deficit round robin over the flows, in payload bytes (000 §5.2): each pass (round)
// gives every flow its quantum — proportional to its share, the largest share's quantum being
// half a ring (or batch_bytes if smaller), so that a backlogged flow can fill its part in one
// round — and a flow moves while its deficit is positive (the last segment may overshoot; the
// overshoot is paid back in the next round). Decided per segment, never per tuple. A flow that
// stops with credit left had nothing more to move: it keeps at most one quantum, so an idle flow
// does not hoard, and the others' rounds come faster (work-conserving). A mover with one flow
// does not ration it.
void Mover::set_quanta() {
  std::int64_t round = std::numeric_limits<std::int64_t>::max();
  std::int64_t max_share = 1;
  for (const auto& f : flows_) {
    const std::uint64_t half_ring = std::max<std::uint64_t>(f->layout.bytes() / 2, 1);
    round = std::min(round, static_cast<std::int64_t>(std::min(f->options.batch_bytes, half_ring)));
    max_share = std::max(max_share, f->share);
  }
  for (auto& f : flows_) f->quantum = std::max<std::int64_t>(round * f->share / max_share, 1);  // <= 2^22 * 10^6
  quanta_stale_ = false;
}

Status Mover::step(std::uint64_t& moved) {
  moved = 0;
  const auto now = std::chrono::steady_clock::now();  // once per pass: the registry looks
  for (auto& owned : flows_) {
    Flow& f = *owned;
    if (f.ended_all()) continue;
    // Once every producer of a balance flow ended, one last look for consumers that joined since
    // the last one (each must get its end-of-stream) before the flow may end.
    const bool last_look = f.options.pattern == Pattern::balance && f.open[0] == 0 && !f.final_poll;
    if (Status s = poll_registry(f, now, last_look); !s) return s;
    f.final_poll = f.final_poll || last_look;
  }
  if (quanta_stale_) set_quanta();
  const bool rationed = flows_.size() > 1;
  for (bool again = true; again;) {
    bool held = false;  // a flow that used up its deficit (it may have more to move)
    for (auto& owned : flows_) {
      Flow& f = *owned;
      if (f.ended_all()) continue;
      if (rationed) {
        f.deficit += f.quantum;
        f.allowance = f.deficit > 0 ? static_cast<std::uint64_t>(f.deficit) : 0;
      }
      std::uint64_t flow_moved = 0;
      Status s;
      switch (f.options.pattern) {
        case Pattern::shuffle: s = f.step_shuffle(counters_, flow_moved); break;
        case Pattern::balance: s = f.step_balance(counters_, flow_moved); break;
        case Pattern::replicate: s = f.step_replicate(counters_, flow_moved); break;
      }
      if (!s) return s;
      moved += flow_moved;
      if (flow_moved == 0) ++f.tally.idle_steps;
      if (!rationed) continue;
      f.deficit -= static_cast<std::int64_t>(flow_moved);
      if (f.deficit <= 0) {
        held = true;
      } else {
        f.deficit = std::min(f.deficit, f.quantum);  // it ran out of work: no hoarding
      }
    }
    // Nothing moved although a flow was held back by its deficit (a small share after an
    // overshoot while the others have nothing): skip the rounds until the first one may move.
    again = moved == 0 && held;
    if (again) fast_forward();
  }
  if (moved == 0) ++counters_.idle_steps;
  return {};
}

void Mover::fast_forward() {
  std::int64_t rounds = std::numeric_limits<std::int64_t>::max();
  for (const auto& f : flows_) {
    if (!f->ended_all() && f->deficit <= 0) rounds = std::min(rounds, (f->quantum - f->deficit) / f->quantum);
  }
  // The next pass adds one quantum more: the first held flow then has a positive deficit.
  for (auto& f : flows_) {
    if (!f->ended_all() && f->deficit <= 0) f->deficit += (rounds - 1) * f->quantum;
  }
}

const Mover::Flow& Mover::find(std::string_view flow) const {
  for (const auto& f : flows_) {
    if (f->spec.name == flow) return *f;
  }
  throw Error(Errc::not_found, "mover (rank " + std::to_string(node_.rank()) + "): no flow '" + std::string(flow) + "'");
}

const MoverCounters& Mover::counters(std::string_view flow) const { return find(flow).tally; }

std::int64_t Mover::share(std::string_view flow) const { return find(flow).share; }

Status Mover::Flow::transfer(Reader& reader, Writer& writer, const memory::SegmentView& segment, MoverCounters& total,
                             std::uint64_t& moved) {
  // The segment is copied out of the producer's ring (into the consumer's mapped ring, or into a
  // staging segment that the put sends) before the producer gets it back.
  if (Status s = writer.publish_from(segment.data, segment.bytes); !s) return s;
  if (Status s = reader.release(); !s) return s;
  moved += segment.bytes;
  for (MoverCounters* c : {&total, &tally}) {
    ++c->segments;
    c->bytes += segment.bytes;
  }
  return {};
}

Status Mover::Flow::take(std::size_t row, std::size_t p, std::optional<memory::SegmentView>& segment) {
  segment.reset();
  if (ended[row][p]) return {};
  Reader& reader = *readers[row][p];
  if (Status s = reader.peek(segment); !s) return s;
  if (segment && segment->end_of_stream) {
    segment.reset();
    if (Status s = reader.release(); !s) return s;
    ended[row][p] = true;
    --open[row];
  }
  return {};
}

Status Mover::Flow::refresh_free() {
  for (std::size_t c = 0; c < writers.size(); ++c) {
    free[c] = 0;
    budget[c] = options.batch_bytes;
    if (!writers[c] || writers[c]->closed()) continue;
    if (Status s = writers[c]->free_slots(free[c]); !s) return s;
  }
  return {};
}

Status Mover::Flow::finish_consumers() {
  for (std::size_t c = 0; c < writers.size(); ++c) {
    if (!writers[c] || writers[c]->closed()) continue;
    Writer& writer = *writers[c];
    if ((open[0] > 0 && !leaving[c]) || free[c] == 0) {
      if (Status s = writer.drain(); !s) return s;  // on its way before the mover looks elsewhere
      continue;
    }
    // Every producer ended (or the consumer leaves) and the consumer has room for end-of-stream:
    // close it without waiting for a full ring (a slow consumer does not hold up the others). A
    // leaving consumer drains what it was given, then sees end-of-stream.
    if (Status s = writer.close(); !s) return s;  // waits until everything reached the consumer
    --consumers_open;
  }
  return {};
}

Status Mover::Flow::step_shuffle(MoverCounters& counters, std::uint64_t& moved) {
  const std::size_t producers = spec.sources.size();
  // The first consumer rotates: when the allowance ends the pass early, the next pass starts
  // with the next consumer.
  for (std::size_t i = 0; i < writers.size(); ++i) {
    const std::size_t c = (first_consumer + i) % writers.size();
    Writer& writer = *writers[c];
    if (writer.closed()) continue;
    std::uint64_t room = 0;
    if (moved < allowance) {
      if (Status s = writer.free_slots(room); !s) return s;
    }
    // Round robin over the producers, one segment each per round, while the consumer has room
    // and the batch is not full: every producer gets its share of the consumer.
    std::uint64_t left = options.batch_bytes;
    bool published = false;
    for (bool any = true; any && room > 0 && left > 0 && moved < allowance;) {
      any = false;
      for (std::size_t k = 0; k < producers && room > 0 && left > 0 && moved < allowance; ++k) {
        const std::size_t p = (cursor[c] + k) % producers;
        std::optional<memory::SegmentView> segment;
        if (Status s = take(c, p, segment); !s) return s;
        if (!segment) continue;
        if (Status s = transfer(*readers[c][p], writer, *segment, counters, moved); !s) return s;
        --room;
        left -= std::min<std::uint64_t>(left, segment->bytes);
        published = true;
        any = true;
      }
    }
    cursor[c] = (cursor[c] + 1) % producers;
    if (open[c] == 0) {
      if (Status s = writer.close(); !s) return s;  // waits until everything reached the consumer
      --consumers_open;
    } else if (published) {
      if (Status s = writer.drain(); !s) return s;  // on its way before the mover looks elsewhere
    }
  }
  first_consumer = (first_consumer + 1) % writers.size();
  return {};
}

// Load balancing (000 §5.2, §6.1): in rounds, every consumer that has room and budget left takes
// one segment, from the next producer that has one (round robin over the producers with one
// cursor for the flow, so the producers share the consumers fairly). A consumer without room is
// skipped, so each is served at its own pace; the first consumer rotates per step.
//
// The per-producer lock of 000 §6.1 (two consumers never take the same items) is the mover's
// ownership of the producer's one reader: one thread runs every consumer's turn, and a transfer
// (peek, copy into the consumer's ring, raise the producer's tail) ends within the turn, so no
// two transfers from one producer overlap and each segment is taken once. Several movers sharing
// a flow need more, and do not exist yet (add_flow refuses a second mover of a flow): a lock word
// next to each producer ring's head and tail, taken with Endpoint::compare_swap before a
// transfer, with the reader's next sequence re-read from the ring's released tail after taking
// it (another mover may have raised it) — and a lease, so that a mover dying with the lock does
// not stop the producer, which belongs with restarting a killed mover (issue 10).
Status Mover::Flow::step_balance(MoverCounters& counters, std::uint64_t& moved) {
  const std::size_t producers = spec.sources.size();
  const std::size_t consumers = writers.size();
  if (Status s = refresh_free(); !s) return s;
  for (bool any = true; any && open[0] > 0 && moved < allowance;) {
    any = false;
    for (std::size_t k = 0; k < consumers && moved < allowance; ++k) {
      const std::size_t c = (first_consumer + k) % consumers;
      if (free[c] == 0 || budget[c] == 0 || leaving[c] || writers[c]->closed()) continue;
      for (std::size_t j = 0; j < producers; ++j) {
        const std::size_t p = (cursor[0] + j) % producers;
        std::optional<memory::SegmentView> segment;
        if (Status s = take(0, p, segment); !s) return s;
        if (!segment) continue;
        if (Status s = transfer(*readers[0][p], *writers[c], *segment, counters, moved); !s) return s;
        --free[c];
        budget[c] -= std::min<std::uint64_t>(budget[c], segment->bytes);
        cursor[0] = (p + 1) % producers;  // the next consumer starts after this producer
        any = true;
        break;
      }
    }
  }
  first_consumer = (first_consumer + 1) % consumers;
  return finish_consumers();
}

// Ordered replication (000 §5.2, §6.1): the mover picks the next segment round robin over the
// producers — that choice is the one global order — and moves it only when every open consumer
// has room. Two phases make the head advance all-or-nothing: the payload is written into every
// consumer's ring (mapped: copied; put path: put, then each such consumer's endpoint flushed, so
// it is there), and only then is the segment published (state and head) at every consumer, and
// the producer's tail raised. A consumer that fails in the first phase fails the flow before any
// consumer shows the segment.
Status Mover::Flow::step_replicate(MoverCounters& counters, std::uint64_t& moved) {
  const std::size_t producers = spec.sources.size();
  if (Status s = refresh_free(); !s) return s;
  std::uint64_t room = std::numeric_limits<std::uint64_t>::max();
  for (std::size_t c = 0; c < writers.size(); ++c) {
    if (!writers[c]->closed()) room = std::min(room, free[c]);
  }
  std::uint64_t left = options.batch_bytes;
  while (open[0] > 0 && room > 0 && left > 0 && moved < allowance) {
    std::optional<memory::SegmentView> segment;
    std::size_t p = cursor[0];
    for (std::size_t j = 0; j < producers && !segment; ++j) {
      p = (cursor[0] + j) % producers;
      if (Status s = take(0, p, segment); !s) return s;
    }
    if (!segment) break;
    for (auto& writer : writers) {  // phase 1: the payload into every ring, not shown yet
      std::span<std::byte> payload;
      if (Status s = writer->acquire(payload); !s) return s;
      if (segment->bytes > 0) std::memcpy(payload.data(), segment->data, segment->bytes);
      if (Status s = writer->write(segment->bytes); !s) return s;
    }
    for (fabric::Endpoint* endpoint : put_endpoints) {
      if (Status s = endpoint->flush(); !s) return {s.code(), label + ": " + s.message()};
    }
    for (auto& writer : writers) {  // phase 2: shown at every consumer
      if (Status s = writer->publish(segment->bytes); !s) return s;
    }
    if (Status s = readers[0][p]->release(); !s) return s;
    const std::uint64_t copies = writers.size();
    moved += copies * segment->bytes;
    for (MoverCounters* c : {&counters, &tally}) {
      c->segments += copies;
      c->bytes += copies * segment->bytes;
    }
    left -= std::min<std::uint64_t>(left, segment->bytes);
    --room;
    for (std::uint64_t& slots : free) slots -= slots > 0 ? 1 : 0;
    cursor[0] = (p + 1) % producers;
  }
  return finish_consumers();
}

Status Mover::run(std::chrono::milliseconds timeout) {
  Deadline deadline(timeout);
  std::chrono::microseconds interval = std::chrono::microseconds::max();
  for (const auto& f : flows_) interval = std::min(interval, f->options.poll_interval);
  Backoff backoff(BackoffSettings::from_config(), reinterpret_cast<std::uintptr_t>(this));
  std::chrono::steady_clock::time_point paced{};  // when what was moved fits limit_rate()
  while (!done()) {
    std::uint64_t moved = 0;
    if (Status s = step(moved); !s) return s;
    if (moved > 0) {
      backoff.reset();
      if (rate_ > 0) {  // once per pass: a clock read, and a sleep when ahead of the rate
        const auto now = std::chrono::steady_clock::now();
        paced = std::max(paced, now - kPaceCredit) + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                           std::chrono::duration<double>(static_cast<double>(moved) / rate_));
        if (paced > now) std::this_thread::sleep_until(paced);
      }
      continue;
    }
    if (deadline.expired()) {
      std::string open;
      for (const auto& f : flows_) {
        if (!f->ended_all()) open += (open.empty() ? "'" : ", '") + f->spec.name + "'";
      }
      return {Errc::timeout, "mover (rank " + std::to_string(node_.rank()) + "): flows " + open +
                                 " still open after " + std::to_string(timeout.count()) + " ms"};
    }
    worker_.progress();  // keepalive and connection upkeep while nothing moves
    if (interval.count() > 0 && interval != std::chrono::microseconds::max()) {
      std::this_thread::sleep_for(interval);
    } else {
      backoff.pause();
    }
  }
  return {};
}

}  // namespace dfi::driven
