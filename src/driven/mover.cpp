#include "dfi/driven/mover.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
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
#include "bell.hpp"
#include "links.hpp"
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
// crash_at(): kills the process at the count-th time a transfer reaches the point. Every
// operation the mover issued is first completed at its target (staging sends drained, every
// endpoint of the flow flushed), so that the consumer holds what was published — and because
// UCX 1.13 aborts a tcp PU that still serves an emulated operation of a peer that died
// (ucp_request.inl:346; tests/driven kills at random times over shm only).
// fail_at(): instead of the kill, the transfer fails there (disarming the seam), as a failed
// remote operation would, and the mover's retry (Mover::retry) takes over.
struct Mover::Crash {
  bool armed = false;
  bool kill = true;  // crash_at; false: fail_at
  CrashPoint point = CrashPoint::link;
  std::uint64_t left = 0;

  template <class Flow>
  [[gnu::noinline, gnu::cold]] Status reach(CrashPoint at, Flow& f) {
    if (at != point || --left > 0) return {};
    for (auto& writer : f.writers) {
      if (writer) (void)writer->drain();
    }
    for (auto& [rank, endpoint] : f.endpoints) (void)endpoint->flush();
    if (!kill) {
      armed = false;
      return {Errc::io, f.label + ": a transfer failed at the test seam (fail_at " +
                            (at == CrashPoint::link ? std::string("link") : std::string("publish")) + ")"};
    }
    // The moment of the kill, for the restart pause (dfi mover's restart timings): steady_clock,
    // one clock for every process of this machine.
    auto ns = [](std::chrono::steady_clock::time_point t) {
      return static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    };
    std::printf("dfi mover: crash_at fired at %lld ns, first move at %lld ns\n", ns(std::chrono::steady_clock::now()),
                ns(*f.first_move));
    std::fflush(nullptr);
    ::raise(SIGKILL);
    return {};
  }
};

struct Mover::Flow {
  cluster::Node* node = nullptr;  // the registry: done records (slow path)
  Crash* crash = nullptr;         // the mover's crash_at() seam
  std::chrono::steady_clock::time_point* first_move = nullptr;  // the mover's (Mover::first_move)
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
  // Recovery (mover.hpp): PUs an earlier mover let go of (never attached), and what add_flow
  // found in the buffers.
  std::vector<bool> producer_done;  // [producer]
  std::vector<bool> consumer_done;  // [consumer]
  MoverRecovery recovery;

  // Doorbell mode (mover.hpp, bell.hpp): the bell words this mover registered with its worker
  // (producers, then consumers; raised by the PUs' messages inside worker progress) and the
  // values seen last, their generation, and per PU where its armed word is and whether the mover
  // must arm it before the flow sleeps (it rang, or was never armed by this mover).
  enum class BellState { active, checking, sleeping };
  BellState bell_state = BellState::active;
  fabric::Worker* worker = nullptr;         // the mover's: the bell words are registered with it
  std::vector<std::uint64_t> bell_words;    // sized once: the worker holds their addresses
  std::vector<std::uint64_t> bells_seen;
  std::vector<std::uint32_t> bell_tokens;
  std::uint64_t bell_generation = 0;
  std::vector<fabric::RemoteMemory*> pu_regions;  // [producers, then consumers]; null: not attached
  std::vector<fabric::Endpoint*> pu_endpoints;
  std::vector<std::size_t> armed_offsets;
  std::vector<bool> disarmed;
  std::vector<fabric::Request> arming;  // reused: the armed-word stores of one arm()
  std::chrono::steady_clock::time_point next_safety{};
  bool due = true;          // served in this pass (Mover::step)
  bool safety_pass = false;  // this pass is the safety poll's
  std::uint64_t step_moved = 0;  // payload bytes moved in this step

  ~Flow() {
    for (std::uint32_t token : bell_tokens) worker->unregister_word(token);  // a late bell is ignored
  }

  // Doorbell mode: true when a PU rang since the last look (its bell word grew; it is marked
  // for arming).
  bool rung(MoverCounters& total);
  // Doorbell mode: stores the generation into the armed word of every PU marked, waits until
  // the stores are done at the PUs, then fences (bell.hpp: before the flow's words are read
  // again). Errors: as the stores' (the flow is retried or given up).
  Status arm(MoverCounters& total);
  // Whether the mover still serves PU i (producers, then consumers): attached, not ended.
  bool pu_open(std::size_t i) const;

  // Set when a pass of the flow failed (Mover::give_up): the mover never touches it again.
  Status failure;
  bool failed = false;
  int retries_in_a_row = 0;  // Mover::retry without a pass that moved data since

  // True once the flow ended: every producer's end-of-stream taken and every consumer attached
  // closed (balance), every consumer closed (the others).
  bool ended_all() const {
    return consumers_open == 0 && (options.pattern != Pattern::balance || (open[0] == 0 && final_poll));
  }
  // Nothing more to do for the flow: it ended, or it failed.
  bool stopped() const { return failed || ended_all(); }

  // One pass of the flow's pattern; `moved` grows by the payload bytes written into consumers,
  // and stops growing once it reached `allowance` (the last segment may go beyond it).
  Status step_shuffle(MoverCounters& counters, std::uint64_t& moved);
  Status step_balance(MoverCounters& counters, std::uint64_t& moved);
  Status step_replicate(MoverCounters& counters, std::uint64_t& moved);

  // Producer p's next segment from row `row` of readers, if one is there; takes an end-of-stream
  // segment itself (the producer ended) and leaves `segment` empty then.
  Status take(std::size_t row, std::size_t p, std::optional<memory::SegmentView>& segment);
  // Copies `segment` (peeked from `reader`, producer p's) into consumer c's ring (`writer`) and
  // gives it back.
  Status transfer(std::size_t c, std::size_t p, Reader& reader, Writer& writer, const memory::SegmentView& segment,
                  MoverCounters& total, std::uint64_t& moved);
  // free and budget of every consumer, from its ring's released tail.
  Status refresh_free();
  // Balance and replicate, after a pass: sends what was published; once every producer ended,
  // closes each consumer that has room for its end-of-stream segment.
  Status finish_consumers();
  // Publishes end-of-stream at consumer c, then its done record.
  Status close_consumer(std::size_t c);
  // Records in consumer c's link word of producer p that the reader's next segment goes out as
  // the writer's next one (links.hpp); before the publication.
  Status note_link(std::size_t c, std::size_t p, const Reader& reader, const Writer& writer);
  // Publishes a done record (names.hpp); replaces: a restarted mover may publish it again.
  Status publish_done(const std::string& record);
  // Recovery (mover.hpp): rebuilds the readers' and writers' positions from the rings' words and
  // finishes the transfer an earlier mover left half done. Errors: peer_failed, timeout, protocol
  // (the words contradict the protocol).
  Status recover();
  Status recover_pending();
};

Mover::Mover(cluster::Node& node)
    : node_(node),
      worker_(node.fabric(), "mover"),
      watch_(node.fabric()),
      crash_(std::make_unique<Crash>()) {}

void Mover::crash_at(CrashPoint point, std::uint64_t count) {
  if (count == 0) throw Error(Errc::invalid_argument, "mover: crash_at counts transfers from 1");
  crash_->armed = true;
  crash_->kill = true;
  crash_->point = point;
  crash_->left = count;
}

void Mover::fail_at(CrashPoint point, std::uint64_t count) {
  if (count == 0) throw Error(Errc::invalid_argument, "mover: fail_at counts transfers from 1");
  crash_->armed = true;
  crash_->kill = false;
  crash_->point = point;
  crash_->left = count;
}

Mover::~Mover() = default;

void Mover::add_flow(std::string_view name, std::chrono::milliseconds timeout) {
  for (const auto& f : flows_) {
    if (f->spec.name == name) throw Error(Errc::invalid_argument, "mover: flow '" + std::string(name) + "' added twice");
  }
  flows_.push_back(open_flow(name, flow::detail::open_deadline(timeout), /*again=*/false));
  quanta_stale_ = true;
}

std::unique_ptr<Mover::Flow> Mover::open_flow(std::string_view name, const Deadline& deadline, bool again) {
  auto f = std::make_unique<Flow>();
  f->recovery.started = std::chrono::steady_clock::now();
  f->node = &node_;
  f->crash = crash_.get();
  f->first_move = &first_move_;
  f->spec = flow::detail::open_spec(node_, name, kDriven, std::nullopt, deadline);
  f->options = f->spec.type_options.get<DrivenOptions>();
  f->label = "driven flow '" + f->spec.name + "' mover (rank " + std::to_string(node_.rank()) + ")";
  f->share = f->options.share;
  f->share_record = detail::share_record(f->spec.name);
  const std::size_t producers = f->spec.sources.size();
  const std::size_t consumers = f->spec.targets.size();
  if (!again) claim(*f);  // a retry: this mover holds the flow already

  auto attach = [&](const std::string& record, int rank, const std::string& who) -> fabric::RemoteMemory& {
    try {
      return this->attach(*f, rank, node_.wait_for(record, flow::detail::time_left(deadline)));
    } catch (const Error& e) {
      throw Error(e.code(), f->label + ": " + who + " did not open the flow: " + e.what());
    }
  };
  // Recovery (mover.hpp): a PU whose done record exists was let go of by an earlier mover of the
  // flow and may have freed its buffers: it is never attached again.
  auto done = [&](const std::string& record) {
    try {
      return node_.registry().try_lookup(record).has_value();
    } catch (const Error& e) {
      throw Error(e.code(), f->label + ": " + e.what());
    }
  };

  f->layout = f->spec.layout();
  f->writer_options.stall_timeout = flow::detail::stall_timeout(f->spec);
  const bool shuffle = f->options.pattern == Pattern::shuffle;
  // A balance flow's consumers come and go while it runs (poll_members): none is waited for.
  const bool elastic = f->options.pattern == Pattern::balance;
  const std::size_t rows = shuffle ? consumers : 1;
  f->ended.assign(rows, std::vector<bool>(producers, false));
  f->open.assign(rows, producers);
  f->cursor.assign(rows, 0);
  f->free.assign(consumers, 0);
  f->budget.assign(consumers, 0);
  f->producer_done.assign(producers, false);
  f->consumer_done.assign(consumers, false);
  std::vector<fabric::RemoteMemory*> producer_regions(producers, nullptr);
  for (std::size_t p = 0; p < producers; ++p) {
    const flow::SourceRef s = f->spec.sources[p];
    if (done(detail::producer_done_record(f->spec.name, p))) {
      f->producer_done[p] = true;
      ++f->recovery.producers_done;
      for (std::size_t row = 0; row < rows; ++row) f->ended[row][p] = true;
      for (std::size_t& open : f->open) --open;
      continue;
    }
    producer_regions[p] = &attach(detail::producer_record(f->spec.name, p), s.rank,
                                  "producer (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ")");
  }
  if (f->options.doorbell) {
    f->pu_regions.assign(producers + consumers, nullptr);
    f->pu_endpoints.assign(producers + consumers, nullptr);
    f->armed_offsets.assign(producers + consumers, 0);
    f->disarmed.assign(producers + consumers, true);  // nothing armed by this mover yet
    f->arming.reserve(producers + consumers);
    for (std::size_t p = 0; p < producers; ++p) {
      if (producer_regions[p] == nullptr) continue;
      f->pu_regions[p] = producer_regions[p];
      f->pu_endpoints[p] = &endpoint(*f, f->spec.sources[p].rank);
      f->armed_offsets[p] = detail::producer_armed_offset(f->layout, rows);
    }
  }
  f->writers.resize(consumers);
  f->leaving.assign(consumers, false);
  for (std::size_t c = 0; c < consumers; ++c) {
    f->join_records.push_back(detail::consumer_record(f->spec.name, c));
    f->leave_records.push_back(detail::leave_record(f->spec.name, c));
  }
  for (std::size_t c = 0; c < consumers; ++c) {
    if (done(detail::consumer_done_record(f->spec.name, c))) {
      f->consumer_done[c] = true;
      ++f->recovery.consumers_done;
      continue;
    }
    const flow::TargetRef t = f->spec.targets[c];
    if (!elastic) {
      attach_consumer(*f, c, attach(f->join_records[c], t.rank, consumer_name(t)));
    } else if (std::optional<std::string> descriptor = node_.registry().try_lookup(f->join_records[c])) {
      attach_consumer(*f, c, this->attach(*f, t.rank, *descriptor));  // opened before this mover started
    }
  }
  for (std::size_t row = 0; row < rows; ++row) {
    f->readers.emplace_back();
    for (std::size_t p = 0; p < producers; ++p) {
      const flow::SourceRef s = f->spec.sources[p];
      if (f->producer_done[p]) {
        f->readers.back().push_back(nullptr);
        continue;
      }
      f->readers.back().push_back(std::make_unique<Reader>(
          worker_, endpoint(*f, s.rank), *producer_regions[p], row * f->layout.bytes(), f->layout,
          memory::RemoteRingOptions{},
          f->label + " <- producer (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ")" +
              (shuffle ? " for " + consumer_name(f->spec.targets[row]) : std::string())));
    }
  }
  f->recovery.attached = std::chrono::steady_clock::now();
  if (Status s = f->recover(); !s) throw Error(s.code(), s.message());
  f->recovery.recovered = std::chrono::steady_clock::now();
  try {
    node_.registry().publish(detail::mover_record(f->spec.name), identity(), /*replace=*/true);
    if (f->options.doorbell) {
      // Bell words of a new generation (bell.hpp): PUs armed by an earlier mover of the flow
      // find the new record when this one arms them.
      const std::string bell_name = detail::bell_record(f->spec.name);
      detail::BellRecord record;
      record.generation = 1;
      if (std::optional<std::string> old = node_.registry().try_lookup(bell_name)) {
        std::uint64_t previous = 0;
        std::from_chars(old->data(), old->data() + old->size(), previous);
        record.generation = previous + 1;
      }
      record.rank = node_.rank();
      record.address = worker_.address();
      const std::size_t words = producers + consumers;
      f->worker = &worker_;
      f->bell_words.assign(words, 0);
      f->bells_seen.assign(words, 0);
      for (std::uint64_t& word : f->bell_words) f->bell_tokens.push_back(worker_.register_word(&word));
      record.tokens = f->bell_tokens;
      f->bell_generation = record.generation;
      node_.registry().publish(bell_name, detail::bell_record_text(record), /*replace=*/true);
    }
  } catch (const Error& e) {
    throw Error(e.code(), f->label + ": " + e.what());
  }
  return f;
}

// A transfer that failed while every PU of the flow is alive (a remote operation that timed out
// or whose connection broke, the fail_at seam) is retried the way a restarted mover would
// continue (mover.hpp, Recovery): the flow's endpoints and attachments are dropped, opened again,
// and the rings' words say where it stands — a half-done transfer is completed or moved again,
// nothing lost or moved twice. At most kMaxRetries in a row without a pass that moves data in
// between; then, or when a PU died, the flow is given up. Like a restart, it relies on the old
// endpoints' operations having landed or been dropped once they are closed (a flush-close waits
// for them; a forced one, over tcp, leaves at most what the PU's progress thread applies within
// microseconds, long before the flow's rings are read again).
bool Mover::retry(std::size_t index, const Status& failure) {
  Flow& f = *flows_[index];
  if (failure.code() == Errc::protocol || f.retries_in_a_row >= kMaxRetries) return false;
  for (const flow::SourceRef& s : f.spec.sources) {
    if (!watch_.reason(s.rank).empty()) return false;
  }
  for (const flow::TargetRef& t : f.spec.targets) {
    if (!watch_.reason(t.rank).empty()) return false;
  }
  std::unique_ptr<Flow> again;
  try {
    again = open_flow(f.spec.name, Deadline(flow::detail::stall_timeout(f.spec)), /*again=*/true);
  } catch (const Error&) {
    return false;  // the failure stands (give_up names it)
  }
  again->tally = f.tally;
  ++again->tally.retries;
  ++counters_.retries;
  again->retries_in_a_row = f.retries_in_a_row + 1;
  again->share = f.share;
  again->quantum = f.quantum;
  again->deficit = f.deficit;
  again->next_poll = f.next_poll;
  flows_[index] = std::move(again);
  return true;
}

void Mover::claim(const Flow& f) {
  std::optional<std::string> holder;
  try {
    holder = node_.registry().try_lookup(detail::mover_record(f.spec.name));
  } catch (const Error& e) {
    throw Error(e.code(), f.label + ": " + e.what());
  }
  if (!holder) return;
  // "<rank> <pid>": an earlier process of this rank (a restarted mover) or a rank declared dead
  // is taken over; a live mover elsewhere, or one in this process, keeps the flow.
  int rank = -1;
  long long pid = -1;
  std::istringstream(*holder) >> rank >> pid;
  const bool this_process = rank == node_.rank() && pid == static_cast<long long>(::getpid());
  const bool dead = rank == node_.rank() ? !this_process : !node_.fabric().peer_failure(rank).empty();
  if (!dead) {
    throw Error(Errc::already_exists, f.label + ": the flow has a mover already (rank " + std::to_string(rank) + ")");
  }
}

namespace {

// How many segments the words of consumer ring `ring` say were published into it, and whether
// the last of them was end-of-stream. The head word is a hint at most one behind or, for
// end-of-stream (written before the state), one ahead; the state words are the truth.
Status published_count(const memory::RemoteRing& ring, std::uint64_t& published, bool& ended) {
  const memory::RingLayout& layout = ring.layout();
  std::uint64_t head = 0;
  if (Status s = ring.load(layout.head_offset(), head); !s) return s;
  published = 0;
  ended = false;
  for (std::uint64_t n = head + 1; n >= 1 && n + 1 >= head; --n) {
    std::uint64_t state = 0;
    if (Status s = ring.load(layout.state_offset(n), state); !s) return s;
    if (memory::state_sequence(state) == n && (memory::state_flags(state) & memory::kConsumable) != 0) {
      published = n;
      ended = (memory::state_flags(state) & memory::kEndOfStream) != 0;
      return {};
    }
  }
  if (head > 1) {
    return {Errc::protocol, ring.label() + ": head " + std::to_string(head) +
                                " but no segment around it is published (the ring's words were overwritten?)"};
  }
  return {};
}

}  // namespace

std::string Mover::identity() const {
  return std::to_string(node_.rank()) + ' ' + std::to_string(static_cast<long long>(::getpid()));
}

Status Mover::Flow::recover() {
  // Producers: the reader continues after the released tail; a tail on an end-of-stream segment
  // means the producer's ring ended (its state word stays: the producer writes nothing after it).
  for (std::size_t row = 0; row < readers.size(); ++row) {
    for (std::size_t p = 0; p < readers[row].size(); ++p) {
      if (!readers[row][p]) continue;
      Reader& reader = *readers[row][p];
      std::uint64_t tail = 0;
      if (Status s = reader.access().load(layout.tail_offset(), tail); !s) return s;
      reader.resume(tail);
      recovery.taken += tail;
      if (tail == 0) continue;
      std::uint64_t state = 0;
      if (Status s = reader.access().load(layout.state_offset(tail), state); !s) return s;
      if (state == memory::state_word(tail, memory::kConsumable | memory::kEndOfStream)) {
        ended[row][p] = true;
        --open[row];
        --recovery.taken;  // not a segment of tuples
      }
    }
  }
  // Consumers: the writer continues after the last published segment; one that got end-of-stream
  // is closed, and let go of (its done record, which the earlier mover may not have written).
  for (std::size_t c = 0; c < writers.size(); ++c) {
    if (!writers[c]) continue;
    Writer& writer = *writers[c];
    std::uint64_t published = 0;
    bool closed = false;
    if (Status s = published_count(writer.access(), published, closed); !s) return s;
    writer.resume(published, closed);
    recovery.delivered += published - (closed ? 1 : 0);
    if (closed) {
      --consumers_open;
      if (Status s = publish_done(detail::consumer_done_record(spec.name, c)); !s) return s;
    }
  }
  if (Status s = recover_pending(); !s) return s;
  for (std::size_t p = 0; p < producer_done.size(); ++p) {
    bool all = !producer_done[p];
    for (const auto& row : ended) all = all && row[p];
    if (all) {
      if (Status s = publish_done(detail::producer_done_record(spec.name, p)); !s) return s;
    }
  }
  recovery.resumed = recovery.taken > 0 || recovery.delivered > 0 || recovery.producers_done > 0 ||
                     recovery.consumers_done > 0 || recovery.completed > 0;
  return {};
}

// The half-done transfer (mover.hpp, Recovery): producer p's next segment s (its ring released up
// to s - 1) that a consumer's link word names as its last published segment was delivered there
// and only its release is missing. Shuffle and balance: at most one consumer holds it; raise the
// tail. Replicate: the consumers that hold it show it as their last segment, the others are one
// behind; it goes to those first (the global order continues from there), then the tail.
// First, every announced transfer is forgotten: a link word naming s as the consumer's *next*
// segment records a transfer killed before its publication. Left there, it would name s as
// delivered as soon as that consumer's next segment is published — with another producer's
// segment — and a later restart would release s undelivered (the loss of seed 1808865591).
Status Mover::Flow::recover_pending() {
  const std::size_t producers = spec.sources.size();
  const bool shuffle = options.pattern == Pattern::shuffle;
  auto open_reader = [&](std::size_t c, std::size_t p) -> Reader* {
    const std::size_t row = shuffle ? c : 0;
    if (producer_done[p] || ended[row][p] || !writers[c] || writers[c]->closed()) return nullptr;
    return readers[row][p].get();
  };
  // links[c * producers + p]: consumer c's link word of producer p (0: not read, or forgotten).
  std::vector<std::uint64_t> links(writers.size() * producers, 0);
  for (std::size_t c = 0; c < writers.size(); ++c) {
    for (std::size_t p = 0; p < producers; ++p) {
      const Reader* reader = open_reader(c, p);
      if (reader == nullptr) continue;
      std::uint64_t& word = links[c * producers + p];
      const std::size_t offset = detail::link_offset(layout, p);
      if (Status s = writers[c]->access().load(offset, word); !s) return s;
      if (!detail::link_names(word, reader->next_sequence(), writers[c]->next_sequence())) continue;
      if (Status s = writers[c]->access().store(offset, 0); !s) return s;
      word = 0;
      ++recovery.forgotten;
    }
  }
  // Whether consumer c holds producer p's next segment as its last published one.
  auto holds = [&](std::size_t c, std::size_t p) {
    const Reader* reader = open_reader(c, p);
    return reader != nullptr &&
           detail::link_names(links[c * producers + p], reader->next_sequence(), writers[c]->next_sequence() - 1);
  };
  for (std::size_t p = 0; p < producers; ++p) {
    if (producer_done[p]) continue;
    if (options.pattern == Pattern::shuffle) {
      for (std::size_t c = 0; c < writers.size(); ++c) {
        if (!holds(c, p)) continue;
        if (Status s = readers[c][p]->release(); !s) return s;
        ++recovery.completed;
      }
      continue;
    }
    if (ended[0][p]) continue;
    Reader& reader = *readers[0][p];
    std::vector<bool> held(writers.size(), false);
    std::size_t holders = 0;
    std::uint64_t position = 0;  // replicate: the consumers' published count with the segment
    for (std::size_t c = 0; c < writers.size(); ++c) {
      held[c] = holds(c, p);
      if (held[c]) {
        ++holders;
        position = writers[c]->next_sequence() - 1;
      }
    }
    if (holders == 0) continue;
    if (options.pattern == Pattern::balance) {
      if (holders > 1) {
        return {Errc::protocol, label + ": producer " + std::to_string(p) + "'s segment " +
                                    std::to_string(reader.next_sequence()) + " was delivered to " +
                                    std::to_string(holders) + " consumers"};
      }
      if (Status s = reader.release(); !s) return s;
      ++recovery.completed;
      continue;
    }
    // Replicate: roll the segment forward to the consumers that do not hold it yet.
    std::optional<memory::SegmentView> segment;
    if (Status s = reader.peek(segment); !s) return s;
    if (!segment || segment->end_of_stream) {
      return {Errc::protocol, label + ": producer " + std::to_string(p) + "'s segment " +
                                  std::to_string(reader.next_sequence()) + " is delivered but not in its ring"};
    }
    for (std::size_t c = 0; c < writers.size(); ++c) {
      if (held[c]) continue;
      if (!writers[c] || writers[c]->closed() || writers[c]->next_sequence() != position) {
        return {Errc::protocol, label + ": " + consumer_name(spec.targets[c]) + " is not one segment behind the "
                                    "consumers that hold producer " + std::to_string(p) + "'s segment " +
                                    std::to_string(reader.next_sequence())};
      }
      if (Status s = note_link(c, p, reader, *writers[c]); !s) return s;
      if (Status s = writers[c]->publish_from(segment->data, segment->bytes); !s) return s;
      if (Status s = writers[c]->drain(); !s) return s;
    }
    if (Status s = reader.release(); !s) return s;
    ++recovery.completed;
  }
  return {};
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
  if (f.options.doorbell) {
    const std::size_t i = f.spec.sources.size() + c;
    f.pu_regions[i] = &region;
    f.pu_endpoints[i] = &ep;
    f.armed_offsets[i] = detail::consumer_armed_offset(f.layout, f.spec.sources.size());
    f.disarmed[i] = true;
    f.bell_state = Flow::BellState::active;  // a consumer joined: serve it now
  }
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
        if (f.consumer_done[c]) continue;  // let go of by an earlier mover of the flow
        if (auto descriptor = node_.registry().try_lookup(f.join_records[c])) {
          attach_consumer(f, c, attach(f, f.spec.targets[c].rank, *descriptor));
          // Continue where the words say (a ring written by an earlier mover of the flow).
          std::uint64_t published = 0;
          bool closed = false;
          if (Status s = published_count(f.writers[c]->access(), published, closed); !s) return s;
          f.writers[c]->resume(published, closed);
          if (closed) --f.consumers_open;
        }
      } else if (!f.leaving[c] && !f.writers[c]->closed()) {
        f.leaving[c] = node_.registry().try_lookup(f.leave_records[c]).has_value();
        if (f.leaving[c]) f.bell_state = Flow::BellState::active;  // it gets its end-of-stream now
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
  return std::all_of(flows_.begin(), flows_.end(), [](const auto& f) { return f->stopped(); });
}

// A flow whose pass failed — a PU died (peer_failed), a remote operation timed out, its words
// broke the protocol — is given up on its own: its PUs learn of a dead PU from the failure
// detector (peers.hpp) and of anything else from the failure record; the other flows go on.
void Mover::give_up(Flow& f, const Status& failure) {
  f.failed = true;
  // A PU of the flow declared dead is the cause: a transfer error may be only its consequence
  // (the other PUs abandon the flow and release their buffers, so the mover's next access to them
  // is refused).
  const Status dead = failure.code() == Errc::peer_failed ? Status() : dead_pu(f, /*unfinished_only=*/false);
  if (!dead) {
    f.failure = dead;
  } else {
    // Named after the flow (a fabric error of a shared endpoint names only the rank).
    f.failure = failure.message().starts_with(f.label) ? failure
                                                        : Status(failure.code(), f.label + ": " + failure.message());
  }
  try {
    node_.registry().publish(detail::failed_record(f.spec.name), f.failure.message(), /*replace=*/true);
  } catch (const Error&) {
    // The registry is gone too: the PUs' own failure detection and stall timeouts remain.
  }
}

Status Mover::failure(std::string_view flow) const { return find(flow).failure; }

// A PU that died before the mover let go of it (its rings not all ended, its ring not closed)
// fails its flow. On shm the mover would not notice otherwise: a dead producer's mapped ring
// just stops filling, a dead consumer's stops draining. Runs when the failure detector declared
// someone dead (one atomic load per pass otherwise).
Status Mover::check_pus() {
  Status first;
  for (auto& owned : flows_) {
    Flow& f = *owned;
    if (f.stopped()) continue;
    const Status failure = dead_pu(f, /*unfinished_only=*/true);
    if (failure) continue;
    give_up(f, failure);
    if (first) first = failure;
  }
  return first;
}

// The first PU of `f` declared dead (with `unfinished_only`, only one the mover has not let go
// of yet), as the flow's failure; ok when none is. Slow path (builds strings).
Status Mover::dead_pu(const Flow& f, bool unfinished_only) const {
  std::string who, reason;
  for (std::size_t p = 0; p < f.spec.sources.size() && who.empty(); ++p) {
    bool ended = true;
    for (const auto& row : f.ended) ended = ended && row[p];
    const flow::SourceRef& s = f.spec.sources[p];
    if ((unfinished_only && ended) || (reason = watch_.reason(s.rank)).empty()) continue;
    who = "producer (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ")";
  }
  for (std::size_t c = 0; c < f.spec.targets.size() && who.empty(); ++c) {
    const bool let_go = c >= f.writers.size() || !f.writers[c] || f.writers[c]->closed();
    if ((unfinished_only && let_go) || (reason = watch_.reason(f.spec.targets[c].rank)).empty()) continue;
    who = consumer_name(f.spec.targets[c]);
  }
  if (who.empty()) return {};
  return {Errc::peer_failed, f.label + ": " + who + " failed: " + reason};
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
  Status first_failure;  // of this pass
  // A failed pass: the flow is retried (it continues next pass) or given up.
  auto fail = [&](std::size_t index, const Status& s) {
    if (retry(index, s)) return;
    Flow& f = *flows_[index];
    give_up(f, s);
    if (first_failure) first_failure = f.failure;
  };
  if (watch_.changed()) first_failure = check_pus();
  for (std::size_t index = 0; index < flows_.size(); ++index) {
    Flow& f = *flows_[index];
    if (f.stopped()) continue;
    // Once every producer of a balance flow ended, one last look for consumers that joined since
    // the last one (each must get its end-of-stream) before the flow may end.
    const bool last_look = f.options.pattern == Pattern::balance && f.open[0] == 0 && !f.final_poll;
    if (Status s = poll_registry(f, now, last_look); !s) {
      fail(index, s);
      continue;
    }
    f.final_poll = f.final_poll || last_look;
    if (last_look) f.bell_state = Flow::BellState::active;
  }
  // Doorbell mode: which flows this pass serves (mover.hpp): the awake ones, those whose PUs rang
  // (local loads of the bell words), and sleeping ones whose safety poll is due.
  for (auto& owned : flows_) {
    Flow& f = *owned;
    f.step_moved = 0;
    f.safety_pass = false;
    f.due = true;
    if (!f.options.doorbell || f.stopped()) continue;
    if (f.rung(counters_)) f.bell_state = Flow::BellState::active;
    if (f.bell_state != Flow::BellState::sleeping) continue;
    f.due = now >= f.next_safety;
    if (f.due) {
      f.safety_pass = true;
      ++counters_.safety_polls;
      ++f.tally.safety_polls;
    }
  }
  if (quanta_stale_) set_quanta();
  const bool rationed = flows_.size() > 1;
  for (bool again = true; again;) {
    bool held = false;  // a flow that used up its deficit (it may have more to move)
    for (std::size_t index = 0; index < flows_.size(); ++index) {
      Flow& f = *flows_[index];
      if (f.stopped() || !f.due) continue;
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
      if (!s) {
        fail(index, s);  // `f` may be gone (retried): not used below
        continue;
      }
      if (flow_moved > 0) f.retries_in_a_row = 0;
      f.step_moved += flow_moved;
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
  // Doorbell mode: a flow that moved stays awake; one that found nothing arms its PUs and gets
  // one more look; one that found nothing after that sleeps until a bell or the safety poll.
  for (std::size_t index = 0; index < flows_.size(); ++index) {
    Flow& f = *flows_[index];
    if (!f.options.doorbell || !f.due || f.stopped()) continue;
    if (f.step_moved > 0 || (rationed && f.deficit <= 0)) {  // work, or held back by its share
      if (f.safety_pass && f.step_moved > 0) {
        // The safety poll found work no bell announced: a bell may have been lost with its PU
        // disarmed, so every PU is armed again before the flow sleeps.
        std::fill(f.disarmed.begin(), f.disarmed.end(), true);
        ++counters_.safety_finds;
        ++f.tally.safety_finds;
      }
      f.bell_state = Flow::BellState::active;
    } else if (f.bell_state == Flow::BellState::active) {
      if (Status s = f.arm(counters_); !s) {
        fail(index, s);
        continue;
      }
      f.bell_state = Flow::BellState::checking;
    } else {
      f.bell_state = Flow::BellState::sleeping;
      f.next_safety = now + f.options.safety_poll;
    }
  }
  if (moved == 0) ++counters_.idle_steps;
  return first_failure;
}

bool Mover::Flow::rung(MoverCounters& total) {
  bool any = false;
  for (std::size_t i = 0; i < bell_words.size(); ++i) {
    // Raised inside this thread's worker progress (the message came after the PU's publication).
    if (bell_words[i] <= bells_seen[i]) continue;
    bells_seen[i] = bell_words[i];
    disarmed[i] = true;
    any = true;
    ++total.bells;
    ++tally.bells;
  }
  return any;
}

bool Mover::Flow::pu_open(std::size_t i) const {
  if (pu_regions[i] == nullptr) return false;
  const std::size_t producers = spec.sources.size();
  if (i >= producers) return writers[i - producers] && !writers[i - producers]->closed();
  if (producer_done[i]) return false;
  for (const auto& row : ended) {
    if (!row[i]) return true;
  }
  return false;  // every ring of it ended: it may have freed them
}

Status Mover::Flow::arm(MoverCounters& total) {
  for (std::size_t i = 0; i < disarmed.size(); ++i) {
    if (!disarmed[i]) continue;
    disarmed[i] = false;
    if (!pu_open(i)) continue;
    arming.push_back(pu_endpoints[i]->store_words_async(&bell_generation, 1, *pu_regions[i], armed_offsets[i]));
    ++total.arms;
    ++tally.arms;
  }
  Status first;
  for (fabric::Request& request : arming) {
    if (Status s = request.wait(); !s && first) first = Status(s.code(), label + ": arming a doorbell: " + s.message());
  }
  arming.clear();  // keeps its capacity: no allocation per arm
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the armed words before the next look (bell.hpp)
  return first;
}

void Mover::fast_forward() {
  std::int64_t rounds = std::numeric_limits<std::int64_t>::max();
  for (const auto& f : flows_) {
    if (!f->stopped() && f->due && f->deficit <= 0) rounds = std::min(rounds, (f->quantum - f->deficit) / f->quantum);
  }
  // The next pass adds one quantum more: the first held flow then has a positive deficit.
  for (auto& f : flows_) {
    if (!f->stopped() && f->due && f->deficit <= 0) f->deficit += (rounds - 1) * f->quantum;
  }
}

const Mover::Flow& Mover::find(std::string_view flow) const {
  for (const auto& f : flows_) {
    if (f->spec.name == flow) return *f;
  }
  throw Error(Errc::not_found, "mover (rank " + std::to_string(node_.rank()) + "): no flow '" + std::string(flow) + "'");
}

const MoverCounters& Mover::counters(std::string_view flow) const { return find(flow).tally; }

const MoverRecovery& Mover::recovery(std::string_view flow) const { return find(flow).recovery; }

std::int64_t Mover::share(std::string_view flow) const { return find(flow).share; }

Status Mover::Flow::transfer(std::size_t c, std::size_t p, Reader& reader, Writer& writer,
                             const memory::SegmentView& segment, MoverCounters& total, std::uint64_t& moved) {
  // The link word first (links.hpp), then the segment is copied out of the producer's ring (into
  // the consumer's mapped ring, or into a staging segment that the put sends) and published, and
  // only then does the producer get it back: a mover killed anywhere in between leaves words
  // that tell a restarted one whether the consumer holds it (mover.hpp, Recovery).
  if (Status s = note_link(c, p, reader, writer); !s) return s;
  if (crash->armed) [[unlikely]] {
    if (Status s = crash->reach(CrashPoint::link, *this); !s) return s;
  }
  if (Status s = writer.publish_from(segment.data, segment.bytes); !s) return s;
  if (first_move->time_since_epoch().count() == 0) [[unlikely]] *first_move = std::chrono::steady_clock::now();
  if (crash->armed) [[unlikely]] {
    if (Status s = crash->reach(CrashPoint::publish, *this); !s) return s;
  }
  if (Status s = reader.release(); !s) return s;
  moved += segment.bytes;
  for (MoverCounters* counter : {&total, &tally}) {
    ++counter->segments;
    counter->bytes += segment.bytes;
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
    // Every ring of the producer ended: it may free them once it knows we will not read again.
    bool all = true;
    for (const auto& r : ended) all = all && r[p];
    if (all) return publish_done(detail::producer_done_record(spec.name, p));
  }
  return {};
}

Status Mover::Flow::publish_done(const std::string& record) {
  try {
    node->registry().publish(record, "", /*replace=*/true);
  } catch (const Error& e) {
    return {e.code(), label + ": " + record + ": " + e.what()};
  }
  return {};
}

Status Mover::Flow::close_consumer(std::size_t c) {
  if (Status s = writers[c]->close(); !s) return s;  // waits until everything reached the consumer
  --consumers_open;
  return publish_done(detail::consumer_done_record(spec.name, c));
}

Status Mover::Flow::note_link(std::size_t c, std::size_t p, const Reader& reader, const Writer& writer) {
  return writers[c]->access().store(detail::link_offset(layout, p),
                                    detail::link_word(reader.next_sequence(), writer.next_sequence()));
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
    if (Status s = close_consumer(c); !s) return s;
  }
  return {};
}

Status Mover::Flow::step_shuffle(MoverCounters& counters, std::uint64_t& moved) {
  const std::size_t producers = spec.sources.size();
  // The first consumer rotates: when the allowance ends the pass early, the next pass starts
  // with the next consumer.
  for (std::size_t i = 0; i < writers.size(); ++i) {
    const std::size_t c = (first_consumer + i) % writers.size();
    if (!writers[c] || writers[c]->closed()) continue;  // null: let go of by an earlier mover
    Writer& writer = *writers[c];
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
        if (Status s = transfer(c, p, *readers[c][p], writer, *segment, counters, moved); !s) return s;
        --room;
        left -= std::min<std::uint64_t>(left, segment->bytes);
        published = true;
        any = true;
      }
    }
    cursor[c] = (cursor[c] + 1) % producers;
    if (open[c] == 0) {
      if (Status s = close_consumer(c); !s) return s;
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
      if (free[c] == 0 || budget[c] == 0 || leaving[c] || !writers[c] || writers[c]->closed()) continue;
      for (std::size_t j = 0; j < producers; ++j) {
        const std::size_t p = (cursor[0] + j) % producers;
        std::optional<memory::SegmentView> segment;
        if (Status s = take(0, p, segment); !s) return s;
        if (!segment) continue;
        if (Status s = transfer(c, p, *readers[0][p], *writers[c], *segment, counters, moved); !s) return s;
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
    if (writers[c] && !writers[c]->closed()) room = std::min(room, free[c]);
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
    // While a producer is open no consumer is closed or let go of (replicate closes consumers
    // only after every producer ended), so every writer is there.
    for (std::size_t c = 0; c < writers.size(); ++c) {  // phase 1: the payload into every ring, not shown yet
      Writer* writer = writers[c].get();
      std::span<std::byte> payload;
      if (Status s = writer->acquire(payload); !s) return s;
      if (Status s = note_link(c, p, *readers[0][p], *writer); !s) return s;
      if (segment->bytes > 0) std::memcpy(payload.data(), segment->data, segment->bytes);
      if (Status s = writer->write(segment->bytes); !s) return s;
    }
    for (fabric::Endpoint* endpoint : put_endpoints) {
      if (Status s = endpoint->flush(); !s) return {s.code(), label + ": " + s.message()};
    }
    if (crash->armed) [[unlikely]] {
      if (Status s = crash->reach(CrashPoint::link, *this); !s) return s;
    }
    if (first_move->time_since_epoch().count() == 0) [[unlikely]] *first_move = std::chrono::steady_clock::now();
    for (auto& writer : writers) {  // phase 2: shown at every consumer
      if (Status s = writer->publish(segment->bytes); !s) return s;
      if (crash->armed) [[unlikely]] {  // shown at some consumers
        if (Status s = crash->reach(CrashPoint::publish, *this); !s) return s;
      }
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
  // Doorbell mode (every flow): a bell is a message to this worker, so the waits block on the
  // worker's events — a bell wakes the mover at once — for up to the shortest safety poll (and
  // kShareRefresh: the registry looks), after a short spin (each poll progresses the worker).
  bool doorbells = !flows_.empty();
  std::chrono::microseconds longest = kShareRefresh;
  for (const auto& f : flows_) {
    doorbells = doorbells && f->options.doorbell;
    longest = std::min(longest, f->options.safety_poll);
  }
  BackoffSettings settings = BackoffSettings::from_config(/*polls_are_syscalls=*/doorbells);
  if (doorbells) settings.sleep_us = static_cast<std::uint32_t>(std::max<std::int64_t>(longest.count(), 1));
  Backoff backoff(settings, reinterpret_cast<std::uintptr_t>(this));
  std::chrono::steady_clock::time_point paced{};  // when what was moved fits limit_rate()
  while (!done()) {
    std::uint64_t moved = 0;
    (void)step(moved);  // a flow that failed is given up (give_up); the others go on
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
        if (!f->stopped()) open += (open.empty() ? "'" : ", '") + f->spec.name + "'";
      }
      return {Errc::timeout, "mover (rank " + std::to_string(node_.rank()) + "): flows " + open +
                                 " still open after " + std::to_string(timeout.count()) + " ms"};
    }
    // Keepalive and connection upkeep while nothing moves. In doorbell mode a pass that handled
    // something may have raised a bell word: look at it before blocking (the wait would not wake
    // for an event already handled).
    if (worker_.progress() > 0 && doorbells) continue;
    if (interval.count() > 0 && interval != std::chrono::microseconds::max()) {
      std::this_thread::sleep_for(interval);
    } else if (doorbells) {
      // What woke the wait (a bell's message) raises its word only inside progress: progress
      // before the next pass looks at the bells. Otherwise a mover that got its core back after
      // the safety poll's time (a loaded machine) takes the flow for a safety poll although the
      // bell had arrived (MoverCounters::safety_finds would count it as late).
      backoff.pause([this](std::chrono::microseconds d) {
        if (worker_.wait_for_event(d, /*idle=*/true)) (void)worker_.progress();
      });
    } else {
      backoff.pause();
    }
  }
  // Every flow ended or was given up: the first failure, with the other flows given up named.
  Status first;
  std::string others;
  for (const auto& f : flows_) {
    if (!f->failed) continue;
    if (first) {
      first = f->failure;
    } else {
      others += (others.empty() ? "'" : ", '") + f->spec.name + "'";
    }
  }
  if (first.is_ok() || others.empty()) return first;
  return {first.code(), first.message() + " (flows " + others + " failed too)"};
}

}  // namespace dfi::driven
