#include "dfi/apps/kv/client.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "names.hpp"
#include "records.hpp"
#include "views.hpp"

namespace dfi::apps::kv {

namespace {
constexpr const char* kKind = "kv client";
// How long one wait for replies lasts before the client looks whether its view broke.
constexpr std::chrono::milliseconds kReplySlice{20};
// How long the client waits for the failure detector to confirm that a failed flow call was a
// view member's death (as the replicas do).
constexpr std::chrono::milliseconds kVerdictWait{3000};
}

struct Client::State {
  // A request of the window, at place seq % window: request s + window is sent only once s's
  // place is free, so a replica's client table can keep one place per request (service.cpp).
  // Multi-Paxos and unreplicated: one reply completes and frees it. NOPaxos: it completes with
  // the leader's reply and replicas/2 followers' to the same copy (epoch); its place in the window
  // is held until every replica answered that copy, so that no replica's rings can hold more than
  // `window` of this client's requests or replies (a slow follower slows the client instead of
  // filling a ring that the client, blocked on it, would never drain). A request without its
  // majority retry_timeout after it was sent is sent again as a new copy (its slot may have
  // become a NO-OP in gap agreement, which no replica tells the client); answers to older copies
  // are stale and ignored.
  struct Entry {
    std::uint64_t seq = 0;
    std::uint64_t key = 0;
    Op op = Op::get;
    bool used = false;
    bool completed = false;   // the replies that complete it arrived
    bool leader = false;      // the leader's reply arrived (its result is in `reply`)
    std::size_t answers = 0;  // replies to the current copy so far
    std::uint32_t epoch = 0;  // NOPaxos: the current copy (Request::pad)
    std::chrono::steady_clock::time_point sent{};  // NOPaxos: when the current copy was flushed
    Reply reply{};            // the leader's (its value: reply_value)
    Request request{};        // sent again in a new view until answered (its value: request_value)
  };

  // A completion waiting to be handed out; its value follows it (records.hpp).
  struct Done {
    std::uint64_t seq = 0;
    std::uint64_t key = 0;
    Op op = Op::get;
    std::uint32_t found = 0;
  };

  State(cluster::Node& n, fabric::Worker& w, const ServiceOptions& options, int t, std::size_t i)
      : node(n),
        worker(w),
        o(options),
        thread(t),
        names(options.name),
        index(i),
        nopaxos(options.protocol == Protocol::nopaxos),
        answers_needed(nopaxos ? static_cast<std::size_t>(options.replicas / 2 + 1) : 1),
        answers_all(nopaxos ? static_cast<std::size_t>(options.replicas) : 1),
        view(detail::first_view(options)),
        entries(options.window),
        request_values(options.window * options.value_bytes),
        reply_values(options.window * options.value_bytes),
        ready(options.value_bytes, options.window),
        out(options.value_bytes) {
    overdue.reserve(options.window);
    try {
      open_flows();
    } catch (const Error& e) {
      // View 0 broke before this client joined it: on to the next view.
      const Status failure(e.code(), e.what());
      if (Status v = recover(failure); !v) throw Error(v.code(), v.message());
    }
  }

  // Opens this client's ends of the current view's flows (closing the previous view's).
  void open_flows() {
    batch = {};
    next_reply = 0;
    // A view left: no end of stream on its flow (the leader would take it for our close).
    if (requests) requests->abandon();
    requests.reset();
    multicast.reset();
    replies.reset();
    names = Names(o.name, view.number);
    replies_name = names.replies_to(index);
    requests_closed = false;
    // This client's replies flow of the view first, and its target: a replica opens its source
    // when it first answers us, which is only after we sent (views.hpp: create_reply_flow).
    detail::create_reply_flow(node, o, view, {node.rank(), thread}, index);
    replies.emplace(node, replies_name, thread, reply_schema(o.value_bytes), o.timeout);
    if (nopaxos) {
      flow::ReplicateSourceOptions s;
      s.expected_schema = request_schema(o.value_bytes);
      s.open_timeout = o.timeout;
      s.on_sequence = o.on_sequence;
      multicast.emplace(node, worker, names.requests, thread, s);
    } else {
      flow::SourceOptions s;
      s.expected_schema = request_schema(o.value_bytes);
      s.open_timeout = o.timeout;
      requests.emplace(node, worker, names.requests, thread, s);
    }
  }

  // Before this client sends (or closes): when a member of its view was declared dead since it
  // last looked (one atomic load while nobody was), it moves to the next view first. So a client
  // that was idle through a view change joins the new view as it sends again, without a first
  // try in the old one; the replicas never wait for it meanwhile (views.hpp).
  Status follow_view() {
    if (!watch.changed() || !detail::view_broken(node, view)) [[likely]] return {};
    return change_view();
  }

  // After a flow call failed with `failure`: when a member of the view died, moves to the next
  // view that opens, sends every unanswered request again there and returns ok; otherwise
  // returns `failure`.
  Status recover(const Status& failure) {
    if (!detail::view_breaks_within(node, view, kVerdictWait)) return failure;
    return change_view();
  }

  Status change_view() {
    try {
      for (;;) {
        for (std::uint64_t number = view.number + 1;; ++number) {
          detail::View next = detail::decide_view(node, o, number);
          if (detail::wait_view_open(node, o, next)) {
            view = std::move(next);
            break;
          }
        }
        ++views_changed;
        const bool closing = closed;
        try {
          open_flows();
        } catch (const Error& e) {
          // The new view's leader died while this client joined it: on to the one after it.
          if (detail::view_breaks_within(node, view, kVerdictWait)) continue;
          throw;
        }
        if (resend() && (!closing || close_requests_here())) return {};
        // The new view broke as well: on to the one after it.
        if (!detail::view_breaks_within(node, view, kVerdictWait)) {
          return error(Errc::peer_failed, "cannot send to " + detail::describe(view));
        }
      }
    } catch (const Error& e) {
      return error(e.code(), e.what());
    }
  }

  // Sends every unanswered request of the window again, oldest first; false if a call failed.
  // NOPaxos: as a new copy (the answers to the old view's copies never come: its flows are gone),
  // in runs of consecutive numbers (a follower acknowledges a segment as a range); a completed
  // request that still held its place for the old view's slower members frees it, and a request
  // now needs an answer from every member of the new view to free its place.
  bool resend() {
    if (nopaxos) {
      answers_all = view.members.size();
      ++epoch;
      const auto now = std::chrono::steady_clock::now();
      for (Entry& e : entries) {
        if (!e.used) continue;
        if (e.completed) {
          e.used = false;
          --held;
          continue;
        }
        e.epoch = epoch;
        e.request.pad = epoch;
        e.answers = 0;
        e.leader = false;
        e.sent = now;
      }
      unflushed = false;
      flushed_seq = next_seq;
    }
    std::uint64_t sent = 0;
    for (;;) {
      const Entry* next = nullptr;
      for (const Entry& e : entries) {
        if (e.used && !e.completed && e.seq > sent && (next == nullptr || e.seq < next->seq)) next = &e;
      }
      if (next == nullptr) break;
      if (nopaxos && sent != 0 && next->seq != sent + 1 && !flush_requests()) return false;
      if (!push(*next)) return false;
      sent = next->seq;
    }
    return static_cast<bool>(flush_requests());
  }

  bool close_requests_here() {
    if (!close_requests()) return false;
    requests_closed = true;
    return true;
  }

  // The value storage of entry `e`'s request and of the leader's reply to it.
  char* request_value(const Entry& e) { return request_values.data() + place_of(e) * o.value_bytes; }
  char* reply_value(const Entry& e) { return reply_values.data() + place_of(e) * o.value_bytes; }
  std::size_t place_of(const Entry& e) const { return static_cast<std::size_t>(&e - entries.data()); }

  // Pushes entry `e`'s request (the current copy) with its value.
  Status push(const Entry& e) {
    out.set(e.request, request_value(e));
    return nopaxos ? multicast->push(out.data(), out.bytes()) : requests->push_to(0, out.data(), out.bytes());
  }
  Status flush_requests() { return nopaxos ? multicast->flush() : requests->flush(); }
  Status close_requests() { return nopaxos ? multicast->close() : requests->close(); }

  Status error(Errc code, const std::string& what) const {
    return Status(code, std::string(kKind) + " " + std::to_string(index) + " of service '" + o.name + "': " + what);
  }

  // Consumes the next batch of replies into `batch`, following the service into new views: a
  // failed call or a quiet spell in a view that a member's death broke.
  Status consume_replies() {
    const Deadline deadline(o.timeout);
    for (;;) {
      Status c = replies->consume(batch, kReplySlice);
      if (nopaxos) {
        // Once per batch (or quiet slice): the copies that got no majority in time go again. A
        // copy that cannot go out (the sequencer's host or another member was declared dead
        // while the client waited for its answer) is the view breaking, as for any other call:
        // the replies consumed with it belong to the old view, and the next view gets every
        // unanswered request again.
        if (Status r = resend_overdue(); !r) {
          batch = {};
          if (Status v = recover(r); !v) return v;
          if (Status n = nothing_awaited(); !n) return n;
          continue;
        }
      }
      if (c) return c;
      if (c.code() == Errc::timeout) {
        // Quiet: the replicas may have moved to a new view without us (a member died).
        if (detail::view_broken(node, view)) {
          if (Status v = change_view(); !v) return v;
          if (Status n = nothing_awaited(); !n) return n;
          continue;
        }
        if (!deadline.expired()) continue;
        // The whole wait, not its last slice.
        return error(Errc::timeout, "no reply on flow '" + replies_name + "' within " +
                                        std::to_string(o.timeout.count()) + " ms (" + detail::describe(view) + ", " +
                                        std::to_string(outstanding) + " request(s) outstanding)");
      }
      if (Status v = recover(c); !v) return v;
      if (Status n = nothing_awaited(); !n) return n;
    }
  }

  // After a view change: retry when no place of the window awaits an answer any more (NOPaxos:
  // the completed requests that only waited for the old view's slower members were freed), so
  // the caller looks again instead of waiting for a reply that will not come. Not while closing:
  // close() waits for the end of the replies flow.
  Status nothing_awaited() const { return held == 0 && !closed ? Status(Errc::retry) : Status(); }

  // Takes the next reply (consuming a batch when the last one is used up) and books it; an entry
  // it completes joins `ready`.
  Status take_reply() {
    if (next_reply == batch.count) {
      next_reply = 0;
      batch = {};
      if (Status c = consume_replies(); !c) return c.code() == Errc::retry ? Status() : c;
      if (batch.empty()) {
        // The leader's end of the flow: it stopped (an error, or its process exited) with
        // requests of ours unanswered: a new view when a member died.
        const Status ended = error(Errc::protocol, "flow '" + replies_name + "' ended (the replicas stopped) with " +
                                                       std::to_string(outstanding) + " request(s) unanswered");
        if (Status v = recover(ended); !v) return v;
        return {};  // the next call takes the next view's replies
      }
    }
    const Reply& reply = detail::records<Reply>(batch, o.value_bytes)[next_reply++];
    if (reply.status == static_cast<std::uint32_t>(ReplyStatus::ack)) return take_ack(reply);
    Entry& e = entries[reply.seq % entries.size()];
    if (!e.used || e.seq != reply.seq || e.epoch != reply.epoch) [[unlikely]] {
      if (nopaxos && e.used && e.seq == reply.seq) {  // to an older copy: the newer one is answered too
        ++stale;
        return {};
      }
      return error(Errc::protocol, "reply to request " + std::to_string(reply.seq) + " (copy " +
                                       std::to_string(reply.epoch) + "), which is not outstanding, on flow '" +
                                       replies_name + "'");
    }
    ++e.answers;
    if (batch.source == 0) {  // the leader (rank 0) is source 0 of the replies flow
      e.leader = true;
      e.reply = reply;
      std::memcpy(reply_value(e), value_of(reply), o.value_bytes);
    }
    booked(e);
    return {};
  }

  // A NOPaxos follower's acknowledgement of requests seq-pad+1 .. seq (one segment of ours).
  // Acknowledgements of an older copy are stale: the follower answers the newer one too.
  Status take_ack(const Reply& ack) {
    const std::uint64_t first = ack.seq + 1 - ack.count;
    if (ack.count == 0 || ack.count > entries.size() || batch.source == 0 || !nopaxos) [[unlikely]] {
      return error(Errc::protocol, "acknowledgement of requests " + std::to_string(first) + " .. " +
                                       std::to_string(ack.seq) + " from replica " + std::to_string(batch.source) +
                                       " on flow '" + replies_name + "'");
    }
    for (std::uint64_t seq = first; seq <= ack.seq; ++seq) {
      Entry& e = entries[seq % entries.size()];
      if (!e.used || e.seq != seq || e.epoch != ack.epoch) continue;
      ++e.answers;
      booked(e);
    }
    return {};
  }

  // NOPaxos: stamps the requests flushed now (seqs flushed_seq .. next_seq-1) with the time.
  void stamp_flushed() {
    const auto now = std::chrono::steady_clock::now();
    for (; flushed_seq < next_seq; ++flushed_seq) {
      Entry& e = entries[flushed_seq % entries.size()];
      if (e.used && e.seq == flushed_seq) e.sent = now;
    }
  }

  // NOPaxos: sends every request whose last copy the leader did not answer within retry_timeout
  // again, as a new copy (epoch), in runs of consecutive numbers (a follower acknowledges a
  // segment as a range). Looks at most four times per retry_timeout.
  Status resend_overdue() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_scan < o.retry_timeout / 4) return {};
    last_scan = now;
    overdue.clear();
    for (const Entry& e : entries) {
      // The leader answers only a copy it holds, which is never made a NO-OP: the followers
      // will answer that copy too.
      if (e.used && !e.leader && e.seq < flushed_seq && now - e.sent >= o.retry_timeout) overdue.push_back(e.seq);
    }
    if (overdue.empty()) return {};
    std::sort(overdue.begin(), overdue.end());
    // What submit() buffered goes out first, as the copies it is.
    if (unflushed) {
      unflushed = false;
      if (Status f = flush_requests(); !f) return f;
      stamp_flushed();
    }
    ++epoch;
    for (std::size_t i = 0; i < overdue.size(); ++i) {
      Entry& e = entries[overdue[i] % entries.size()];
      e.epoch = epoch;
      e.request.pad = epoch;
      e.answers = 0;
      e.leader = false;
      e.sent = now;
      if (Status p = push(e); !p) return p;
      ++resent;
      if (i + 1 == overdue.size() || overdue[i + 1] != overdue[i] + 1) {
        if (Status f = flush_requests(); !f) return f;
      }
    }
    return {};
  }

  // After an answer to `e`: completes it once the leader and enough replicas answered (its
  // completion joins `ready`), frees its place once every replica answered (Multi-Paxos and
  // unreplicated: at once). A completion waits in `ready` without holding a place, so a submit
  // that waits for its place always waits for an answer still to come.
  void booked(Entry& e) {
    if (!e.completed && e.leader && e.answers >= answers_needed) {
      e.completed = true;
      const bool found = e.op == Op::put || e.reply.status == static_cast<std::uint32_t>(ReplyStatus::ok);
      ready.push_back({.seq = e.seq, .key = e.key, .op = e.op, .found = found ? 1u : 0u}, reply_value(e));
    }
    if (e.completed && e.answers == answers_all) {
      e.used = false;
      --held;
    }
  }

  cluster::Node& node;
  fabric::Worker& worker;
  ServiceOptions o;
  int thread;
  Names names;  // of the current view
  std::string replies_name;  // this client's replies flow in the current view
  fabric::FailureWatch watch{node.fabric()};  // deaths since follow_view last looked
  std::size_t index;
  bool nopaxos;
  std::size_t answers_needed;  // replies that complete a request
  std::size_t answers_all;     // replies that free its place in the window
  detail::View view;
  std::uint64_t views_changed = 0;
  bool requests_closed = false;  // in the current view
  std::optional<flow::ShuffleSource> requests;      // unreplicated, Multi-Paxos
  std::optional<flow::ReplicateSource> multicast;   // NOPaxos
  std::optional<flow::ShuffleTarget> replies;
  std::vector<Entry> entries;  // the window
  std::vector<char> request_values;  // the window's request values, value_bytes per place
  std::vector<char> reply_values;    // the leader's reply values, value_bytes per place
  detail::RecordFifo<Done> ready;    // completions not handed out yet, oldest first, with their values
  detail::Record<Request> out;       // the request tuple being pushed
  std::size_t outstanding = 0;  // submitted, not handed out
  std::size_t held = 0;         // places of the window in use
  std::uint64_t next_seq = 1;
  std::uint64_t flushed_seq = 1;  // NOPaxos: the first request not flushed yet
  std::uint32_t epoch = 0;        // NOPaxos: copies sent again so far
  std::uint64_t resent = 0;       // NOPaxos: requests sent again
  std::uint64_t stale = 0;        // NOPaxos: leader replies to older copies, ignored
  std::chrono::steady_clock::time_point last_scan{};
  std::vector<std::uint64_t> overdue;  // resend_overdue's list (capacity: the window)
  bool unflushed = false;
  bool closed = false;
  flow::TupleBatch batch;   // replies consumed, booked one at a time
  std::size_t next_reply = 0;
};

Client::Client(cluster::Node& node, fabric::Worker& worker, const ServiceOptions& options, int thread) {
  check_options(options, node.size());
  if (node.rank() < options.replicas || thread < 0 || thread >= options.client_threads) {
    throw Error(Errc::invalid_argument, std::string(kKind) + " of service '" + options.name + "': rank " +
                                            std::to_string(node.rank()) + " thread " + std::to_string(thread) +
                                            " is not a client (replicas are ranks 0.." +
                                            std::to_string(options.replicas - 1) + ", " +
                                            std::to_string(options.client_threads) + " client threads per rank)");
  }
  check_value_bytes(node, options);
  const std::size_t index = static_cast<std::size_t>(node.rank() - options.replicas) *
                                static_cast<std::size_t>(options.client_threads) +
                            static_cast<std::size_t>(thread);
  state_ = std::make_unique<State>(node, worker, options, thread, index);
}

Client::~Client() {
  if (state_ && !state_->closed) {
    // Closing ends this client's part of the service; errors were reported by the calls that
    // saw them.
    (void)state_->close_requests();
  }
}

std::size_t Client::outstanding() const noexcept { return state_->outstanding; }
std::size_t Client::ready() const noexcept { return state_->ready.size(); }
std::uint64_t Client::resent() const noexcept { return state_->resent; }
std::uint64_t Client::stale_replies() const noexcept { return state_->stale; }
std::size_t Client::index() const noexcept { return state_->index; }
std::size_t Client::value_bytes() const noexcept { return state_->o.value_bytes; }

Status Client::submit(Op op, std::uint64_t key, std::string_view value, std::uint64_t& seq) {
  State& s = *state_;
  if (s.closed || s.outstanding == s.entries.size() || op < Op::get || op > Op::del || value.size() > s.o.value_bytes)
      [[unlikely]] {
    std::string why = "bad op " + std::to_string(static_cast<std::uint32_t>(op));
    if (value.size() > s.o.value_bytes) {
      why = "a value of " + std::to_string(value.size()) + " bytes for a service of " + std::to_string(s.o.value_bytes) +
            "-byte values";
    }
    if (s.closed) why = "closed";
    if (s.outstanding == s.entries.size()) why = "window of " + std::to_string(s.entries.size()) + " requests full";
    return s.error(Errc::invalid_argument, why);
  }
  // Request s takes place s % window once request s - window has left it (NOPaxos: a
  // handed-out request holds its place until the last replica answered).
  State::Entry& e = s.entries[s.next_seq % s.entries.size()];
  while (e.used) {
    if (Status f = flush(); !f) return f;
    if (Status t = s.take_reply(); !t) return t;
  }
  if (Status v = s.follow_view(); !v) return v;
  Request r{.client = s.index, .seq = s.next_seq++, .key = key, .op = static_cast<std::uint32_t>(op), .pad = s.epoch};
  e = {};
  e.seq = r.seq;
  e.key = key;
  e.op = op;
  e.used = true;
  e.epoch = s.epoch;
  e.request = r;
  // The value, padded with zeros to the service's width (a get or delete sends zeros).
  char* v = s.request_value(e);
  const std::size_t n = op == Op::put ? value.size() : 0;
  if (n > 0) std::memcpy(v, value.data(), n);
  std::memset(v + n, 0, s.o.value_bytes - n);
  ++s.outstanding;
  ++s.held;
  s.unflushed = true;
  seq = r.seq;
  // A view that broke: recover() sends every unanswered request, this one too, in the next.
  if (Status pushed = s.push(e); !pushed) return s.recover(pushed);
  return {};
}

Status Client::flush() {
  State& s = *state_;
  if (!s.unflushed) return {};
  s.unflushed = false;
  if (Status f = s.flush_requests(); !f) return s.recover(f);
  if (s.nopaxos) s.stamp_flushed();
  return {};
}

Status Client::poll(Completion& done) {
  State& s = *state_;
  if (s.outstanding == 0) return s.error(Errc::invalid_argument, "poll with no request outstanding");
  if (Status f = flush(); !f) return f;
  while (s.ready.empty()) {
    if (Status t = s.take_reply(); !t) return t;
  }
  const State::Done& front = s.ready.front();
  done.seq = front.seq;
  done.op = front.op;
  done.key = front.key;
  done.found = front.found != 0;
  done.value = std::string_view(value_of(front), s.o.value_bytes);  // readable until the next push_back
  s.ready.pop_front();
  --s.outstanding;
  return {};
}

Status Client::get(std::uint64_t key, std::string& value, bool& found) {
  std::uint64_t seq = 0;
  if (Status s = submit(Op::get, key, {}, seq); !s) return s;
  Completion done;
  if (Status s = poll(done); !s) return s;
  value.assign(done.value);  // reuses value's capacity: no allocation once it held one
  found = done.found;
  return {};
}

Status Client::put(std::uint64_t key, std::string_view value) {
  std::uint64_t seq = 0;
  if (Status s = submit(Op::put, key, value, seq); !s) return s;
  Completion done;
  return poll(done);
}

Status Client::del(std::uint64_t key, bool& found) {
  std::uint64_t seq = 0;
  if (Status s = submit(Op::del, key, {}, seq); !s) return s;
  Completion done;
  if (Status s = poll(done); !s) return s;
  found = done.found;
  return {};
}

Status Client::close() {
  State& s = *state_;
  if (s.closed) return {};
  Completion done;
  while (s.outstanding > 0) {
    if (Status p = poll(done); !p) return p;
  }
  // NOPaxos: the followers' last acknowledgements.
  while (s.held > 0) {
    if (Status t = s.take_reply(); !t) return t;
  }
  if (Status v = s.follow_view(); !v) return v;
  s.batch = {};
  s.next_reply = 0;
  s.closed = true;
  if (Status c = s.close_requests(); !c) {
    if (Status v = s.recover(c); !v) return v;  // closes them in the next view
  } else {
    s.requests_closed = true;
  }
  if (Status c = s.consume_replies(); !c) return c;
  if (!s.batch.empty()) return s.error(Errc::protocol, "a reply after the last request on flow '" + s.replies_name + "'");
  return {};
}

}  // namespace dfi::apps::kv
