#include "dfi/driven/mover.hpp"

#include <algorithm>
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

namespace dfi::driven {

using Reader = memory::SegmentReader<memory::RemoteRing>;
using Writer = memory::SegmentWriter<memory::RemoteRing>;

namespace {

// How often the mover of a balance flow looks for consumers that joined or asked to leave.
constexpr std::chrono::milliseconds kMemberPoll{20};

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
  std::chrono::steady_clock::time_point next_poll{};  // of the registry, for joins and leaves
  bool final_poll = false;  // made after every producer ended

  // True once the flow ended: every producer's end-of-stream taken and every consumer attached
  // closed (balance), every consumer closed (the others).
  bool ended_all() const {
    return consumers_open == 0 && (options.pattern != Pattern::balance || (open[0] == 0 && final_poll));
  }

  // One pass of the flow's pattern; `moved` grows by the payload bytes written into consumers.
  Status step_shuffle(MoverCounters& counters, std::uint64_t& moved);
  Status step_balance(MoverCounters& counters, std::uint64_t& moved);
  Status step_replicate(MoverCounters& counters, std::uint64_t& moved);

  // Producer p's next segment from row `row` of readers, if one is there; takes an end-of-stream
  // segment itself (the producer ended) and leaves `segment` empty then.
  Status take(std::size_t row, std::size_t p, std::optional<memory::SegmentView>& segment);
  // Copies `segment` (peeked from `reader`) into the writer's ring and gives it back.
  static Status transfer(Reader& reader, Writer& writer, const memory::SegmentView& segment,
                         MoverCounters& counters, std::uint64_t& moved);
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

Status Mover::poll_members(Flow& f, bool now_or_never) {
  const auto now = std::chrono::steady_clock::now();
  if (now < f.next_poll && !now_or_never) return {};
  f.next_poll = now + kMemberPoll;
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

bool Mover::done() const noexcept {
  return std::all_of(flows_.begin(), flows_.end(), [](const auto& f) { return f->ended_all(); });
}

Status Mover::step(std::uint64_t& moved) {
  moved = 0;
  for (auto& owned : flows_) {
    Flow& f = *owned;
    if (f.ended_all()) continue;
    Status s;
    switch (f.options.pattern) {
      case Pattern::shuffle: s = f.step_shuffle(counters_, moved); break;
      case Pattern::balance:
        // Once every producer ended, one last look for consumers that joined since the last one
        // (each must get its end-of-stream) before the flow may end.
        if (const bool last_look = f.open[0] == 0 && !f.final_poll; (s = poll_members(f, last_look))) {
          f.final_poll = last_look || f.final_poll;
          s = f.step_balance(counters_, moved);
        }
        break;
      case Pattern::replicate: s = f.step_replicate(counters_, moved); break;
    }
    if (!s) return s;
  }
  if (moved == 0) ++counters_.idle_steps;
  return {};
}

Status Mover::Flow::transfer(Reader& reader, Writer& writer, const memory::SegmentView& segment,
                             MoverCounters& counters, std::uint64_t& moved) {
  // The segment is copied out of the producer's ring (into the consumer's mapped ring, or into a
  // staging segment that the put sends) before the producer gets it back.
  if (Status s = writer.publish_from(segment.data, segment.bytes); !s) return s;
  if (Status s = reader.release(); !s) return s;
  moved += segment.bytes;
  ++counters.segments;
  counters.bytes += segment.bytes;
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
  for (std::size_t c = 0; c < writers.size(); ++c) {
    Writer& writer = *writers[c];
    if (writer.closed()) continue;
    std::uint64_t room = 0;
    if (Status s = writer.free_slots(room); !s) return s;
    // Round robin over the producers, one segment each per round, while the consumer has room
    // and the batch is not full: every producer gets its share of the consumer.
    std::uint64_t left = options.batch_bytes;
    bool published = false;
    for (bool any = true; any && room > 0 && left > 0;) {
      any = false;
      for (std::size_t k = 0; k < producers && room > 0 && left > 0; ++k) {
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
  for (bool any = true; any && open[0] > 0;) {
    any = false;
    for (std::size_t k = 0; k < consumers; ++k) {
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
  while (open[0] > 0 && room > 0 && left > 0) {
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
    counters.segments += copies;
    counters.bytes += copies * segment->bytes;
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
  while (!done()) {
    std::uint64_t moved = 0;
    if (Status s = step(moved); !s) return s;
    if (moved > 0) {
      backoff.reset();
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
