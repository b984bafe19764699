#include "dfi/apps/kv/client.hpp"

#include <optional>
#include <string>

#include "dfi/cluster/node.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "fifo.hpp"
#include "names.hpp"

namespace dfi::apps::kv {

namespace {
constexpr const char* kKind = "kv client";
}

struct Client::State {
  // A request of the window. Multi-Paxos and unreplicated: one reply completes and frees it.
  // NOPaxos: it completes with the leader's reply and replicas/2 followers'; its place in the
  // window is held until every replica answered, so that no replica's rings can hold more than
  // `window` of this client's requests or replies (a slow follower slows the client instead of
  // filling a ring that the client, blocked on it, would never drain).
  struct Entry {
    std::uint64_t seq = 0;
    std::uint64_t key = 0;
    Op op = Op::get;
    bool used = false;
    bool completed = false;   // the replies that complete it arrived
    bool handed_out = false;  // poll() returned it
    bool leader = false;      // the leader's reply arrived (its result is in `reply`)
    std::size_t answers = 0;  // replies so far
    Reply reply{};
  };

  State(cluster::Node& n, fabric::Worker& worker, const ServiceOptions& options, int thread, std::size_t i)
      : node(n),
        o(options),
        names(options.name),
        index(i),
        nopaxos(options.protocol == Protocol::nopaxos),
        answers_needed(nopaxos ? static_cast<std::size_t>(options.replicas / 2 + 1) : 1),
        answers_all(nopaxos ? static_cast<std::size_t>(options.replicas) : 1),
        replies(n, names.replies, thread, reply_schema(), options.timeout),
        entries(options.window),
        ready(options.window) {
    if (nopaxos) {
      flow::ReplicateSourceOptions s;
      s.expected_schema = request_schema();
      s.open_timeout = options.timeout;
      multicast.emplace(n, worker, names.requests, thread, s);
    } else {
      flow::SourceOptions s;
      s.expected_schema = request_schema();
      s.open_timeout = options.timeout;
      requests.emplace(n, worker, names.requests, thread, s);
    }
  }

  Status push(const Request& r) { return nopaxos ? multicast->push(&r, sizeof r) : requests->push_to(0, &r, sizeof r); }
  Status flush_requests() { return nopaxos ? multicast->flush() : requests->flush(); }
  Status close_requests() { return nopaxos ? multicast->close() : requests->close(); }

  Status error(Errc code, const std::string& what) const {
    return Status(code, std::string(kKind) + " " + std::to_string(index) + " of service '" + o.name + "': " + what);
  }

  // Takes the next reply (consuming a batch when the last one is used up) and books it; an entry
  // it completes joins `ready`.
  Status take_reply() {
    if (next_reply == batch.count) {
      next_reply = 0;
      batch = {};
      if (Status c = replies.consume(batch, o.timeout); !c) return c;
      if (batch.empty()) {
        return error(Errc::protocol, "flow '" + names.replies + "' ended (the replicas stopped) with " +
                                         std::to_string(outstanding) + " request(s) unanswered");
      }
    }
    const Reply& reply = batch.as<Reply>()[next_reply++];
    if (reply.status == static_cast<std::uint32_t>(ReplyStatus::ack)) return take_ack(reply);
    for (Entry& e : entries) {
      if (!e.used || e.seq != reply.seq) continue;
      ++e.answers;
      if (batch.source == 0) {  // the leader (rank 0) is source 0 of the replies flow
        e.leader = true;
        e.reply = reply;
      }
      booked(e);
      return {};
    }
    return error(Errc::protocol, "reply to request " + std::to_string(reply.seq) + ", which is not outstanding, on flow '" +
                                     names.replies + "'");
  }

  // A NOPaxos follower's acknowledgement of requests seq-pad+1 .. seq (one segment of ours).
  Status take_ack(const Reply& ack) {
    const std::uint64_t first = ack.seq + 1 - ack.pad;
    std::size_t found = 0;
    for (Entry& e : entries) {
      if (!e.used || e.seq < first || e.seq > ack.seq) continue;
      ++found;
      ++e.answers;
      booked(e);
    }
    if (found != ack.pad || batch.source == 0) {
      return error(Errc::protocol, "acknowledgement of requests " + std::to_string(first) + " .. " +
                                       std::to_string(ack.seq) + " from replica " + std::to_string(batch.source) +
                                       " of which " + std::to_string(found) + " are outstanding, on flow '" +
                                       names.replies + "'");
    }
    return {};
  }

  // After an answer to `e`: completes it (to `ready`) once the leader and enough replicas
  // answered, frees its place once it was handed out and every replica answered.
  void booked(Entry& e) {
    if (!e.completed && e.leader && e.answers >= answers_needed) {
      e.completed = true;
      ready.push_back(static_cast<std::size_t>(&e - entries.data()));
    }
    release_if_done(e);
  }

  // Frees the entry's place once it was handed out and every replica answered.
  void release_if_done(Entry& e) {
    if (e.handed_out && e.answers == answers_all) {
      e.used = false;
      --held;
    }
  }

  cluster::Node& node;
  ServiceOptions o;
  Names names;
  std::size_t index;
  bool nopaxos;
  std::size_t answers_needed;  // replies that complete a request
  std::size_t answers_all;     // replies that free its place in the window
  std::optional<flow::ShuffleSource> requests;      // unreplicated, Multi-Paxos
  std::optional<flow::ReplicateSource> multicast;   // NOPaxos
  flow::ShuffleTarget replies;
  std::vector<Entry> entries;  // the window
  detail::Fifo<std::size_t> ready;  // completed entries not handed out yet, oldest first
  std::size_t outstanding = 0;  // submitted, not handed out
  std::size_t held = 0;         // places of the window in use
  std::uint64_t next_seq = 1;
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
std::size_t Client::index() const noexcept { return state_->index; }

Status Client::submit(Op op, std::uint64_t key, const Value* value, std::uint64_t& seq) {
  State& s = *state_;
  if (s.closed || s.outstanding == s.entries.size() || op < Op::get || op > Op::del) [[unlikely]] {
    std::string why = "bad op " + std::to_string(static_cast<std::uint32_t>(op));
    if (s.closed) why = "closed";
    if (s.outstanding == s.entries.size()) why = "window of " + std::to_string(s.entries.size()) + " requests full";
    return s.error(Errc::invalid_argument, why);
  }
  // NOPaxos: a handed-out request holds its place until the last replica answered.
  while (s.held == s.entries.size()) {
    if (Status f = flush(); !f) return f;
    if (Status t = s.take_reply(); !t) return t;
  }
  Request r{.client = s.index, .seq = s.next_seq++, .key = key, .op = static_cast<std::uint32_t>(op)};
  if (op == Op::put && value != nullptr) r.value = *value;
  for (State::Entry& e : s.entries) {
    if (e.used) continue;
    e = {};
    e.seq = r.seq;
    e.key = key;
    e.op = op;
    e.used = true;
    break;
  }
  if (Status pushed = s.push(r); !pushed) return pushed;
  ++s.outstanding;
  ++s.held;
  s.unflushed = true;
  seq = r.seq;
  return {};
}

Status Client::flush() {
  State& s = *state_;
  if (!s.unflushed) return {};
  s.unflushed = false;
  return s.flush_requests();
}

Status Client::poll(Completion& done) {
  State& s = *state_;
  if (s.outstanding == 0) return s.error(Errc::invalid_argument, "poll with no request outstanding");
  if (Status f = flush(); !f) return f;
  while (s.ready.empty()) {
    if (Status t = s.take_reply(); !t) return t;
  }
  State::Entry& e = s.entries[s.ready.front()];
  s.ready.pop_front();
  done.seq = e.seq;
  done.op = e.op;
  done.key = e.key;
  done.found = e.op == Op::put || e.reply.status == static_cast<std::uint32_t>(ReplyStatus::ok);
  done.value = e.reply.value;
  e.handed_out = true;
  --s.outstanding;
  s.release_if_done(e);
  return {};
}

Status Client::get(std::uint64_t key, Value& value, bool& found) {
  std::uint64_t seq = 0;
  if (Status s = submit(Op::get, key, nullptr, seq); !s) return s;
  Completion done;
  if (Status s = poll(done); !s) return s;
  value = done.value;
  found = done.found;
  return {};
}

Status Client::put(std::uint64_t key, const Value& value) {
  std::uint64_t seq = 0;
  if (Status s = submit(Op::put, key, &value, seq); !s) return s;
  Completion done;
  return poll(done);
}

Status Client::del(std::uint64_t key, bool& found) {
  std::uint64_t seq = 0;
  if (Status s = submit(Op::del, key, nullptr, seq); !s) return s;
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
  s.batch = {};
  s.next_reply = 0;
  s.closed = true;
  if (Status c = s.close_requests(); !c) return c;
  flow::TupleBatch rest;
  if (Status c = s.replies.consume(rest, s.o.timeout); !c) return c;
  if (!rest.empty()) return s.error(Errc::protocol, "a reply after the last request on flow '" + s.names.replies + "'");
  return {};
}

}  // namespace dfi::apps::kv
