#include "dfi/apps/kv/client.hpp"

#include <string>

#include "dfi/cluster/node.hpp"
#include "dfi/flow/shuffle.hpp"
#include "names.hpp"

namespace dfi::apps::kv {

namespace {
constexpr const char* kKind = "kv client";
}

struct Client::State {
  struct Entry {
    std::uint64_t seq = 0;
    std::uint64_t key = 0;
    Op op = Op::get;
    bool used = false;
  };

  State(cluster::Node& n, fabric::Worker& worker, const ServiceOptions& options, int thread, std::size_t i)
      : node(n),
        o(options),
        names(options.name),
        index(i),
        requests(n, worker, names.requests, thread, [&] {
          flow::SourceOptions s;
          s.expected_schema = request_schema();
          s.open_timeout = options.timeout;
          return s;
        }()),
        replies(n, names.replies, thread, reply_schema(), options.timeout),
        entries(options.window) {}

  cluster::Node& node;
  ServiceOptions o;
  Names names;
  std::size_t index;
  flow::ShuffleSource requests;
  flow::ShuffleTarget replies;
  std::vector<Entry> entries;  // the window: outstanding requests
  std::size_t outstanding = 0;
  std::uint64_t next_seq = 1;
  bool unflushed = false;
  bool closed = false;
  flow::TupleBatch batch;   // replies consumed, handed out one per poll()
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
    (void)state_->requests.close();
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
    return Status(Errc::invalid_argument,
                  std::string(kKind) + " " + std::to_string(s.index) + " of service '" + s.o.name + "': " + why);
  }
  Request r{.client = s.index, .seq = s.next_seq++, .key = key, .op = static_cast<std::uint32_t>(op)};
  if (op == Op::put && value != nullptr) r.value = *value;
  for (State::Entry& e : s.entries) {
    if (e.used) continue;
    e = {.seq = r.seq, .key = key, .op = op, .used = true};
    break;
  }
  Status pushed = s.requests.push_to(0, &r, sizeof r);
  if (!pushed) return pushed;
  ++s.outstanding;
  s.unflushed = true;
  seq = r.seq;
  return {};
}

Status Client::flush() {
  State& s = *state_;
  if (!s.unflushed) return {};
  s.unflushed = false;
  return s.requests.flush();
}

Status Client::poll(Completion& done) {
  State& s = *state_;
  if (s.outstanding == 0) {
    return Status(Errc::invalid_argument, std::string(kKind) + " " + std::to_string(s.index) + " of service '" +
                                              s.o.name + "': poll with no request outstanding");
  }
  if (Status f = flush(); !f) return f;
  if (s.next_reply == s.batch.count) {
    s.next_reply = 0;
    s.batch = {};
    Status c = s.replies.consume(s.batch, s.o.timeout);
    if (!c) return c;
    if (s.batch.empty()) {
      return Status(Errc::protocol, std::string(kKind) + " " + std::to_string(s.index) + " of service '" + s.o.name +
                                        "': flow '" + s.names.replies + "' ended (the leader, rank 0, stopped) with " +
                                        std::to_string(s.outstanding) + " request(s) unanswered");
    }
  }
  const Reply& reply = s.batch.as<Reply>()[s.next_reply++];
  for (State::Entry& e : s.entries) {
    if (!e.used || e.seq != reply.seq) continue;
    e.used = false;
    --s.outstanding;
    done.seq = reply.seq;
    done.op = e.op;
    done.key = e.key;
    done.found = reply.status == static_cast<std::uint32_t>(ReplyStatus::ok);
    done.value = reply.value;
    if (e.op == Op::put) done.found = true;
    return {};
  }
  return Status(Errc::protocol, std::string(kKind) + " " + std::to_string(s.index) + " of service '" + s.o.name +
                                    "': reply to request " + std::to_string(reply.seq) +
                                    ", which is not outstanding, on flow '" + s.names.replies + "'");
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
  s.closed = true;
  if (Status c = s.requests.close(); !c) return c;
  for (;;) {
    flow::TupleBatch rest;
    Status c = s.replies.consume(rest, s.o.timeout);
    if (!c) return c;
    if (rest.empty()) return {};
    return Status(Errc::protocol, std::string(kKind) + " " + std::to_string(s.index) + " of service '" + s.o.name +
                                      "': a reply after the last request on flow '" + s.names.replies + "'");
  }
}

}  // namespace dfi::apps::kv
