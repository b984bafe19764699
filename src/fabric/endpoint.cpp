#include "dfi/fabric/endpoint.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <utility>

#include "dfi/common/deadline.hpp"
#include "dfi/fabric/memory.hpp"
#include "internal.hpp"

namespace dfi::fabric {
namespace detail {

Status EndpointState::fail(Errc code, std::string_view what, std::string_view reason) {
  if (failure.is_ok()) {
    failure = Status(code, "fabric: " + std::string(what) + " to " + peer_name + " (worker '" +
                               worker->name + "') failed: " + std::string(reason));
  }
  return failure;
}

const Status& EndpointState::check_peer() {
  Context& context = *worker->context;
  const std::uint64_t epoch = context.failure_epoch();
  if (epoch != seen_epoch) {
    seen_epoch = epoch;
    std::string reason = context.peer_failure(peer);
    if (!reason.empty()) {
      (void)fail(Errc::peer_failed, "operation", reason);
      close();  // completes anything still outstanding towards the dead peer
    }
  }
  return failure;
}

Status EndpointState::wait(ucs_status_ptr_t request, std::string_view what) {
  if (request == nullptr) return {};
  if (UCS_PTR_IS_ERR(request)) {
    return fail(Errc::peer_failed, what, ucx_error_text(UCS_PTR_STATUS(request)));
  }
  Deadline deadline(worker->op_timeout);
  bool forced = false;
  unsigned spins = 0;
  ucs_status_t status;
  // Where UCX emulates one-sided operations (tcp), a get, a put's flush or a rendezvous completes
  // only once the peer's CPU served it: progress_or_pause polls a few times, then yields, then
  // blocks on the worker's event fd, as a word operation's waiter does (wait_word_op), so that on
  // few cores the peer's progress thread gets a core at once rather than after this waiter's time
  // slice. A driven mover spinning here took 0.5-13 ms per emulated operation with two vCPUs
  // (bench/notes/driven-lat.md); sources of an aggregation that finished early spun 4-10 ms in
  // their flush-closes on the cores of ranks still aggregating (bench/notes/agg.md). Where they
  // are native (shm, verbs) they complete within microseconds: it spins, as before.
  const unsigned check_every = worker->wait_blocks ? 63u : 1023u;  // a check costs a clock read
  Backoff backoff(worker->word_backoff, reinterpret_cast<std::uintptr_t>(request));
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    if (forced) {
      ucp_worker_progress(worker->worker);  // a forced close completes the request at once
      continue;
    }
    progress_or_pause(backoff);
    if ((++spins & check_every) != 0) continue;
    if (!check_peer().is_ok()) {
      forced = true;  // check_peer closed the endpoint; the request completes with an error
    } else if (deadline.expired()) {
      // The peer did not answer within op_timeout: treat it as dead. Force-closing the endpoint
      // completes every outstanding request (with an error), so the loop ends.
      (void)fail(Errc::timeout, what,
                 "no completion within " + std::to_string(worker->op_timeout.count()) + " ms");
      forced = true;
      close();
    }
  }
  ucp_request_free(request);
  if (status != UCS_OK) return fail(Errc::peer_failed, what, ucx_error_text(status));
  return {};
}

void EndpointState::progress_or_pause(Backoff& backoff) {
  const unsigned progressed = ucp_worker_progress(worker->worker);
  if (!worker->wait_blocks) return;
  // The completion may need the peer's CPU (tcp: the reply to an emulated put, a flush, a
  // close): after a few empty polls, block on the worker's events, woken by the completion.
  if (progressed != 0) {
    backoff.reset();
  } else {
    backoff.pause([this](std::chrono::microseconds d) { (void)worker->wait_for_event(d); });
  }
}

bool EndpointState::native_rma() {
  if (rma_native >= 0 || ep == nullptr) return rma_native > 0;
  // UCX 1.13 has no query for an endpoint's transports; its endpoint report lists every lane
  // with its roles. A lane chosen for RMA or atomics ("rma#", "rma_bw#", "amo#": InfiniBand,
  // RoCE, and shm, whose puts to UCX-allocated memory go through the mapped segment) works
  // without the peer's CPU; where UCX emulates them (tcp) no lane has those roles.
  char* text = nullptr;
  std::size_t length = 0;
  FILE* stream = ::open_memstream(&text, &length);
  if (stream == nullptr) return false;
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  const std::string_view report(text, length);
  const bool native = report.find("rma#") != std::string_view::npos ||
                      report.find("rma_bw#") != std::string_view::npos ||
                      report.find("amo#") != std::string_view::npos;
  std::free(text);
  rma_native = native ? 1 : 0;
  return native;
}

// Words of one message, and of one operation's request and reply at most.
constexpr std::size_t kMessageWords = kMaxAmBytes / sizeof(std::uint64_t);
constexpr std::size_t kOpRequestWords = 5;  // {id, address, op, a, b}
constexpr std::size_t kOpReplyWords = 3;    // {id, status, n}
static_assert(kOpRequestWords + kMaxWordOpWords <= kMessageWords, "a store_words request is one message");
static_assert(kOpReplyWords + kMaxWordOpWords <= kMessageWords, "a load_words reply is one message");

Status EndpointState::reclaim_ops(std::string_view what) {
  if (ops_send == nullptr) return {};
  void* sending = ops_send;
  ops_send = nullptr;
  return wait(static_cast<ucs_status_ptr_t>(sending), what);
}

Status EndpointState::send_ops(std::string_view what) {
  if (ops.empty()) return {};
  if (ep == nullptr || !check_peer().is_ok()) {
    ops.clear();
    ops_reply_words = 0;
    return failure.is_ok() ? fail(Errc::peer_failed, what, "the endpoint is closed") : failure;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  ucs_status_ptr_t sent = ucp_am_send_nbx(ep, kWordOpAm, nullptr, 0, ops.data(), ops.size() * sizeof(std::uint64_t), &param);
  ops.clear();  // not reused before reclaim_ops()
  ops_reply_words = 0;
  if (UCS_PTR_IS_ERR(sent)) return fail(Errc::peer_failed, what, ucx_error_text(UCS_PTR_STATUS(sent)));
  ops_send = sent;
  return {};
}

Status EndpointState::make_room(std::size_t request_words, std::size_t reply_words, std::string_view what) {
  if (!ops.empty() && (ops.size() + request_words > kMessageWords || ops_reply_words + reply_words > kMessageWords)) {
    if (Status s = send_ops(what); !s) return s;  // a full message: send it, start the next
  }
  if (ops.empty()) {
    if (Status s = reclaim_ops(what); !s) return s;
    if (ops.capacity() < kMessageWords) ops.reserve(kMessageWords);  // once per endpoint
  }
  return {};
}

void EndpointState::append_op(std::uint64_t id, std::uint64_t address, WordOp op, std::uint64_t a, std::uint64_t b,
                              const void* data, std::size_t data_words, std::size_t reply_words) {
  const std::uint64_t request[kOpRequestWords] = {id, address, static_cast<std::uint64_t>(op), a, b};
  ops.insert(ops.end(), request, request + kOpRequestWords);
  if (data_words != 0) {
    const std::size_t at = ops.size();
    ops.resize(at + data_words);
    std::memcpy(ops.data() + at, data, data_words * sizeof(std::uint64_t));
  }
  ops_reply_words += reply_words;
}

Status EndpointState::issue_word_op(WordOp op, std::uint64_t address, std::uint64_t a, std::uint64_t b,
                                    const void* data, std::size_t data_bytes, std::uint64_t* out,
                                    std::size_t out_words, std::uint64_t& id, std::string_view what) {
  id = 0;
  if (!check_peer().is_ok()) return failure;
  Worker::Impl& w = *worker;
  const std::uint64_t next = w.next_op + 1;
  Worker::Impl::WordWait& slot = w.word_waits[next % Worker::Impl::kWordWaits];
  if (slot.id != 0) {
    return {Errc::invalid_argument, "fabric: " + std::string(what) + " to " + peer_name + ": more than " +
                                        std::to_string(Worker::Impl::kWordWaits) + " word operations in flight on worker '" +
                                        w.name + "'"};
  }
  const std::size_t data_words = data_bytes / sizeof(std::uint64_t);
  if (Status s = make_room(kOpRequestWords + data_words, kOpReplyWords + out_words, what); !s) return s;
  w.next_op = next;
  slot.id = next;
  slot.out = out;
  slot.out_words = out_words;
  slot.status = 0;
  slot.arrived = false;
  append_op(next, address, op, a, b, data, data_words, kOpReplyWords + out_words);
  id = next;
  if (ops_held) return {};
  if (Status s = send_ops(what); !s) {
    slot.id = 0;
    id = 0;
    return s;
  }
  return {};
}

Status EndpointState::post_words(std::uint64_t address, const std::uint64_t* data, std::size_t count,
                                 std::string_view what) {
  if (!check_peer().is_ok()) return failure;
  // The reply words are the refusal's, should the peer refuse it.
  if (Status s = make_room(kOpRequestWords + count, kOpReplyWords, what); !s) return s;
  append_op(kPostedOp | serial, address, WordOp::post_words, count, 0, data, count, kOpReplyWords);
  posted = true;
  if (ops_held) return {};
  return send_ops(what);
}

Status EndpointState::confirm_posted(std::string_view what) {
  posted = false;
  std::uint64_t id = 0;
  if (Status s = issue_word_op(WordOp::fence, 0, 0, 0, nullptr, 0, nullptr, 0, id, what); !s) return s;
  if (Status s = wait_word_op(id, what); !s) return s;
  std::unordered_map<std::uint64_t, std::uint64_t>& refused = worker->posted_failures;
  if (refused.empty()) return {};  // the common case: one load
  auto it = refused.find(serial);
  if (it == refused.end()) return {};
  refused.erase(it);
  return {Errc::invalid_argument, "fabric: " + std::string(what) + " to " + peer_name +
                                      ": a posted word store was refused: the range is not 8-byte words of a region "
                                      "the peer registered"};
}

bool EndpointState::poll_word_op(std::uint64_t id, Status& status, std::string_view what, const Deadline* deadline) {
  Worker::Impl& w = *worker;
  Worker::Impl::WordWait& slot = w.word_waits[id % Worker::Impl::kWordWaits];
  if (!ops.empty()) (void)send_ops(what);  // held operations: a waiter sends them (its own may be among them)
  ucp_worker_progress(w.worker);
  if (slot.arrived) {
    status = slot.status == 0 ? Status()
                              : Status(Errc::invalid_argument, "fabric: " + std::string(what) + " to " + peer_name +
                                                                   ": the range is not 8-byte words of a region the peer registered");
    slot.id = 0;
    return true;
  }
  if (!check_peer().is_ok() || !failure.is_ok() || (deadline != nullptr && deadline->expired())) {
    if (failure.is_ok()) {
      (void)fail(Errc::timeout, what, "no answer within " + std::to_string(w.op_timeout.count()) + " ms");
    }
    close();  // completes a send still in progress (forced: the endpoint failed)
    status = failure;
    slot.id = 0;  // a late reply finds no waiter
    return true;
  }
  return false;
}

Status EndpointState::wait_word_op(std::uint64_t id, std::string_view what) {
  Deadline deadline(worker->op_timeout);
  Status status;
  // A word operation's reply needs the peer's CPU (tcp): after a few polls the waiter blocks on
  // the worker's event fd rather than spin, so that on few cores the peer's thread that serves
  // the operation gets the core at once instead of after the spinning waiter's time slice.
  Backoff backoff(worker->word_backoff, id);
  for (unsigned spins = 1;; ++spins) {
    // The failure and time checks cost a clock read: every 64th round (each round costs a
    // system call or a blocking wait anyway).
    if (poll_word_op(id, status, what, (spins & 63u) == 0 ? &deadline : nullptr)) return status;
    backoff.pause([this](std::chrono::microseconds d) { (void)worker->wait_for_event(d); });
  }
}

Status EndpointState::word_op(WordOp op, std::uint64_t address, std::uint64_t a, std::uint64_t b,
                              std::uint64_t* result, std::string_view what) {
  std::uint64_t value = 0;
  std::uint64_t id = 0;
  if (Status s = issue_word_op(op, address, a, b, nullptr, 0, &value, 1, id, what); !s) return s;
  if (Status s = wait_word_op(id, what); !s) return s;
  if (result != nullptr) *result = value;
  return {};
}

Status EndpointState::wait_pending(std::string_view what) {
  Status result;
  for (void* request : pending) {
    Status s = wait(request, what);
    if (result.is_ok() && !s.is_ok()) result = s;
  }
  pending.clear();
  return result;
}

void EndpointState::close() noexcept {
  if (ep == nullptr) return;
  ucp_ep_h closing = ep;
  ep = nullptr;
  // A peer the failure detector declared dead gets a forced close too: it may be alive but cut
  // off (a partition), and a flush towards it would wait out op_timeout twice.
  const bool peer_dead = peer >= 0 && !worker->context->peer_failure(peer).empty();
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = failure.is_ok() && !close_without_flush && !peer_dead ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t request = ucp_ep_close_nbx(closing, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  Deadline deadline(worker->op_timeout);
  Backoff backoff(worker->word_backoff, serial);
  while (ucp_request_check_status(request) == UCS_INPROGRESS && !deadline.expired()) progress_or_pause(backoff);
  if (ucp_request_check_status(request) == UCS_INPROGRESS) {
    // A flush-close that cannot finish (peer gone silent): force it, which never waits on the peer.
    ucp_request_cancel(worker->worker, request);
    Deadline cancelled(worker->op_timeout);
    backoff.reset();
    while (ucp_request_check_status(request) == UCS_INPROGRESS && !cancelled.expired()) progress_or_pause(backoff);
    if (ucp_request_check_status(request) == UCS_INPROGRESS) {
      std::fprintf(stderr, "dfi fabric: closing the endpoint to %s (worker '%s') did not finish; left to UCX\n",
                   peer_name.c_str(), worker->name.c_str());
    }
  }
  ucp_request_free(request);
}

EndpointState::~EndpointState() {
  // Towards a peer declared dead (killed, or cut off by a partition: then nothing it owes us ever
  // arrives), check_peer closes at once instead of flushing what is outstanding.
  if (ep != nullptr) (void)check_peer();
  if (ep != nullptr) {
    (void)send_ops("close");
    (void)reclaim_ops("close");
    (void)wait_pending("close");
    close();
  }
  if (ops_send != nullptr && ucp_request_check_status(static_cast<ucs_status_ptr_t>(ops_send)) != UCS_INPROGRESS) {
    ucp_request_free(ops_send);  // completed by a forced close
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// RemoteMemory

RemoteMemory::~RemoteMemory() { release(); }

RemoteMemory::RemoteMemory(RemoteMemory&& other) noexcept { *this = std::move(other); }

RemoteMemory& RemoteMemory::operator=(RemoteMemory&& other) noexcept {
  if (this != &other) {
    release();
    endpoint_ = std::move(other.endpoint_);
    rkey_ = std::exchange(other.rkey_, nullptr);
    address_ = std::exchange(other.address_, 0);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, nullptr);
  }
  return *this;
}

void RemoteMemory::release() noexcept {
  if (rkey_ != nullptr) {
    ucp_rkey_destroy(static_cast<ucp_rkey_h>(rkey_));
    rkey_ = nullptr;
    mapped_ = nullptr;
  }
  endpoint_.reset();  // may close the endpoint if this was the last user
}

// ---------------------------------------------------------------------------------------------
// Request

Request Request::completed(Status status) {
  Request request;
  request.status_ = std::move(status);
  return request;
}

Request::~Request() {
  if (request_ != nullptr || word_op_ != 0) (void)wait();
}

Request::Request(Request&& other) noexcept { *this = std::move(other); }

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (request_ != nullptr || word_op_ != 0) (void)wait();
    endpoint_ = std::move(other.endpoint_);
    request_ = std::exchange(other.request_, nullptr);
    word_op_ = std::exchange(other.word_op_, 0);
    status_ = std::move(other.status_);
    what_ = other.what_;
  }
  return *this;
}

bool Request::done() {
  if (word_op_ != 0) {
    if (!endpoint_->poll_word_op(word_op_, status_, what_, nullptr)) return false;
    word_op_ = 0;
    endpoint_.reset();
    return true;
  }
  if (request_ == nullptr) return true;
  ucp_worker_progress(endpoint_->worker->worker);
  (void)endpoint_->check_peer();  // a dead peer force-closes the endpoint, completing the request
  ucs_status_t status = ucp_request_check_status(request_);
  if (status == UCS_INPROGRESS) return false;
  ucp_request_free(request_);
  request_ = nullptr;
  if (status != UCS_OK) status_ = endpoint_->fail(Errc::peer_failed, what_, ucx_error_text(status));
  endpoint_.reset();
  return true;
}

Status Request::wait() {
  if (word_op_ != 0) {
    status_ = endpoint_->wait_word_op(word_op_, what_);
    word_op_ = 0;
    endpoint_.reset();
  }
  if (request_ != nullptr) {
    status_ = endpoint_->wait(request_, what_);
    request_ = nullptr;
    endpoint_.reset();
  }
  return status_;
}

// ---------------------------------------------------------------------------------------------
// Endpoint

namespace {

std::string range_text(std::size_t bytes, std::size_t offset) {
  return std::to_string(bytes) + " B at offset " + std::to_string(offset);
}

}  // namespace

detail::EndpointState& Endpoint::state() const {
  if (!state_) throw Error(Errc::invalid_argument, "fabric: use of an empty or closed endpoint");
  return *state_;
}

int Endpoint::peer() const noexcept { return state_ ? state_->peer : -1; }

const std::string& Endpoint::peer_name() const noexcept {
  static const std::string kNone = "no peer";
  return state_ ? state_->peer_name : kNone;
}

Status Endpoint::status() const { return state().check_peer(); }

RemoteMemory Endpoint::attach(const RegionDescriptor& descriptor) {
  detail::EndpointState& s = state();
  if (s.ep == nullptr) s.failure.throw_if_error();
  // Over shm a key is unpacked by attaching the owner's segment, which is gone once the owner's
  // process exited: a peer already known dead is refused here, one that died unnoticed makes the
  // unpack fail (UCS_ERR_SHMEM_SEGMENT), and both are the peer's failure. (UCX 1.13 crashed on
  // such a failure until Context chose the shm transports that avoid openucx/ucx#10380.)
  if (Status peer = s.check_peer(); !peer) throw Error(peer.code(), peer.message());
  ucp_rkey_h rkey = nullptr;
  ucs_status_t status = ucp_ep_rkey_unpack(s.ep, descriptor.packed_key.data(), &rkey);
  if (status == UCS_ERR_SHMEM_SEGMENT) {
    const Status failed = s.fail(Errc::peer_failed, "attach",
                                 "its shared-memory segment is gone (the region was freed or its process exited)");
    throw Error(failed.code(), failed.message());
  }
  if (status != UCS_OK) {
    throw Error(Errc::protocol, "fabric: cannot unpack the memory key of " + s.peer_name + " (" +
                                    std::to_string(descriptor.packed_key.size()) + " B): " +
                                    ucx_error_text(status));
  }
  RemoteMemory remote;
  remote.endpoint_ = state_;
  remote.rkey_ = rkey;
  remote.address_ = descriptor.address;
  remote.size_ = descriptor.size;
  void* mapped = nullptr;
  if (ucp_rkey_ptr(rkey, descriptor.address, &mapped) == UCS_OK) remote.mapped_ = mapped;
  return remote;
}

namespace {

// Common checks before an operation: healthy endpoint, attached key, range inside the region.
Status check(detail::EndpointState& s, const RemoteMemory& remote, std::size_t bytes,
             std::size_t offset, std::string_view what) {
  if (!s.check_peer().is_ok()) return s.failure;
  if (!remote.valid()) {
    return {Errc::invalid_argument, "fabric: " + std::string(what) + " to " + s.peer_name +
                                        ": remote memory is not attached"};
  }
  if (offset > remote.size() || bytes > remote.size() - offset) {
    return {Errc::invalid_argument, "fabric: " + std::string(what) + " of " +
                                        range_text(bytes, offset) + " is outside the " +
                                        std::to_string(remote.size()) + " B region of " +
                                        s.peer_name};
  }
  return {};
}

}  // namespace

Status Endpoint::put(const void* source, std::size_t bytes, const RemoteMemory& remote,
                     std::size_t offset) {
  detail::EndpointState& s = state();
  if (Status c = check(s, remote, bytes, offset, "put"); !c) return c;
  ucp_request_param_t param{};
  return s.wait(ucp_put_nbx(s.ep, source, bytes, remote.address() + offset,
                            static_cast<ucp_rkey_h>(remote.rkey_), &param),
                "put");
}

Status Endpoint::put_nbi(const void* source, std::size_t bytes, const RemoteMemory& remote,
                         std::size_t offset) {
  detail::EndpointState& s = state();
  if (Status c = check(s, remote, bytes, offset, "put"); !c) return c;
  ucp_request_param_t param{};
  ucs_status_ptr_t request = ucp_put_nbx(s.ep, source, bytes, remote.address() + offset,
                                         static_cast<ucp_rkey_h>(remote.rkey_), &param);
  if (UCS_PTR_IS_ERR(request)) return s.fail(Errc::peer_failed, "put", ucx_error_text(UCS_PTR_STATUS(request)));
  if (request != nullptr) s.pending.push_back(request);
  return {};
}

Request Endpoint::put_async(const void* source, std::size_t bytes, const RemoteMemory& remote,
                            std::size_t offset) {
  return rma_async(/*put=*/true, const_cast<void*>(source), bytes, remote, offset);
}

Request Endpoint::get_async(void* destination, std::size_t bytes, const RemoteMemory& remote,
                            std::size_t offset) {
  return rma_async(/*put=*/false, destination, bytes, remote, offset);
}

Request Endpoint::rma_async(bool put, void* buffer, std::size_t bytes, const RemoteMemory& remote,
                            std::size_t offset) {
  detail::EndpointState& s = state();
  Request request;
  request.what_ = put ? "put" : "get";
  if (Status c = check(s, remote, bytes, offset, request.what_); !c) {
    request.status_ = c;
    return request;
  }
  ucp_request_param_t param{};
  const std::uint64_t address = remote.address() + offset;
  auto* rkey = static_cast<ucp_rkey_h>(remote.rkey_);
  track(request, put ? ucp_put_nbx(s.ep, buffer, bytes, address, rkey, &param)
                     : ucp_get_nbx(s.ep, buffer, bytes, address, rkey, &param));
  return request;
}

void Endpoint::track_word_op(Request& request, Status issued, const std::uint64_t& id) {
  request.status_ = std::move(issued);
  if (id != 0) {
    request.endpoint_ = state_;
    request.word_op_ = id;
  }
}

void Endpoint::track(Request& request, void* issued) {
  auto r = static_cast<ucs_status_ptr_t>(issued);
  if (UCS_PTR_IS_ERR(r)) {
    request.status_ = state_->fail(Errc::peer_failed, request.what_, ucx_error_text(UCS_PTR_STATUS(r)));
  } else if (r != nullptr) {
    request.endpoint_ = state_;
    request.request_ = r;
  }
}

Status Endpoint::load_word(const RemoteMemory& remote, std::size_t offset, std::uint64_t& value) {
  if (void* mapped = remote.mapped(); mapped != nullptr) {
    detail::EndpointState& s = state();
    if (Status c = check(s, remote, sizeof value, offset, "load"); !c) return c;  // and the peer
    value = std::atomic_ref(*reinterpret_cast<std::uint64_t*>(static_cast<std::byte*>(mapped) + offset))
                .load(std::memory_order_acquire);
    return {};
  }
  return get(&value, sizeof value, remote, offset);
}

Status Endpoint::get(void* destination, std::size_t bytes, const RemoteMemory& remote,
                     std::size_t offset) {
  detail::EndpointState& s = state();
  if (Status c = check(s, remote, bytes, offset, "get"); !c) return c;
  if (bytes == sizeof(std::uint64_t) && (remote.address() + offset) % 8 == 0 && !rma_native()) {
    // A word: read by active message where UCX would emulate the get (see atomic()).
    std::uint64_t value = 0;
    Status st = s.word_op(WordOp::load, remote.address() + offset, 0, 0, &value, "get");
    if (st) std::memcpy(destination, &value, sizeof value);
    return st;
  }
  ucp_request_param_t param{};
  return s.wait(ucp_get_nbx(s.ep, destination, bytes, remote.address() + offset,
                            static_cast<ucp_rkey_h>(remote.rkey_), &param),
                "get");
}

namespace {

Status check_word(detail::EndpointState& s, const RemoteMemory& remote, std::size_t bytes, std::size_t offset,
                  std::string_view what) {
  if (Status c = check(s, remote, bytes, offset, what); !c) return c;
  if ((remote.address() + offset) % sizeof(std::uint64_t) != 0) {
    return {Errc::invalid_argument, "fabric: " + std::string(what) + " to " + s.peer_name +
                                        ": offset " + std::to_string(offset) + " is not 8-byte aligned"};
  }
  return {};
}

// A ucp_atomic_op_nbx on a mapped word: ADD and SWAP return the old value in `reply` (when
// given); CSWAP compares with `operand`, stores `*reply` on a match and returns the old value there.
void cpu_atomic(void* address, ucp_atomic_op_t op, std::uint64_t operand, std::uint64_t* reply) {
  std::atomic_ref word(*static_cast<std::uint64_t*>(address));
  std::uint64_t old = 0;
  if (op == UCP_ATOMIC_OP_ADD) {
    old = word.fetch_add(operand, std::memory_order_acq_rel);
  } else if (op == UCP_ATOMIC_OP_SWAP) {
    old = word.exchange(operand, std::memory_order_acq_rel);
  } else {
    old = operand;
    (void)word.compare_exchange_strong(old, *reply, std::memory_order_acq_rel, std::memory_order_acquire);
  }
  if (reply != nullptr) *reply = old;
}

// The mapping of `remote` where atomics on it are CPU atomics, else nullptr: only where every
// transport of the context is shared memory. Where a NIC's device atomics may touch the same
// word (a context with RDMA transports), CPU atomics are not coherent with them (UCX-NOTES:
// UCX_ATOMIC_MODE), so UCX keeps them.
void* cpu_atomic_target(const detail::EndpointState& s, const RemoteMemory& remote) {
  if (s.worker == nullptr || s.worker->context == nullptr || !s.worker->context->capabilities().can_map_remote) {
    return nullptr;
  }
  return remote.mapped();
}

Status atomic(detail::EndpointState& s, const RemoteMemory& remote, void* rkey, std::size_t offset,
              ucp_atomic_op_t op, const std::uint64_t* operand, std::uint64_t* reply,
              std::string_view what) {
  if (Status c = check_word(s, remote, sizeof(std::uint64_t), offset, what); !c) return c;
  if (void* base = cpu_atomic_target(s, remote); base != nullptr) {
    // The peer's region is mapped here (shm): a CPU atomic on the mapping, which is what UCX's
    // shared-memory transports do for ucp_atomic_op_nbx. Current UCX (1.22) selects no atomic
    // lane over sysv/posix and fails the operation ("cannot find remote protocol") and the
    // endpoint with it; 1.13 did the same CPU atomic inside UCX.
    if (!s.check_peer().is_ok()) return s.failure;
    cpu_atomic(static_cast<std::byte*>(base) + offset, op, *operand, reply);
    return {};
  }
  if (s.ep != nullptr && !s.native_rma()) {
    // UCX would emulate the atomic; its reply towards a requester that just died aborts the
    // peer in 1.13. The same operation as an active message cannot.
    const WordOp word = op == UCP_ATOMIC_OP_ADD ? WordOp::add : op == UCP_ATOMIC_OP_SWAP ? WordOp::swap : WordOp::compare_swap;
    const std::uint64_t second = reply != nullptr ? *reply : 0;  // CSWAP: the new value
    return s.word_op(word, remote.address() + offset, *operand, second, reply, what);
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  param.datatype = ucp_dt_make_contig(sizeof(std::uint64_t));
  if (reply != nullptr) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    param.reply_buffer = reply;
  }
  return s.wait(ucp_atomic_op_nbx(s.ep, op, operand, 1, remote.address() + offset,
                                  static_cast<ucp_rkey_h>(rkey), &param),
                what);
}

}  // namespace

Status Endpoint::fetch_add(const RemoteMemory& remote, std::size_t offset, std::uint64_t value,
                           std::uint64_t* old) {
  return atomic(state(), remote, remote.rkey_, offset, UCP_ATOMIC_OP_ADD, &value, old, "fetch-add");
}

Status Endpoint::compare_swap(const RemoteMemory& remote, std::size_t offset,
                              std::uint64_t expected, std::uint64_t desired, std::uint64_t* old) {
  // UCX CSWAP: buffer = compare value; reply buffer = new value in, old value out.
  std::uint64_t swap_value = desired;
  Status status = atomic(state(), remote, remote.rkey_, offset, UCP_ATOMIC_OP_CSWAP, &expected, &swap_value,
                         "compare-and-swap");
  if (status && old != nullptr) *old = swap_value;
  return status;
}

Status Endpoint::swap(const RemoteMemory& remote, std::size_t offset, std::uint64_t value,
                      std::uint64_t* old) {
  std::uint64_t previous = 0;
  Status status = atomic(state(), remote, remote.rkey_, offset, UCP_ATOMIC_OP_SWAP, &value, &previous, "swap");
  if (status && old != nullptr) *old = previous;
  return status;
}

Request Endpoint::compare_swap_async(const RemoteMemory& remote, std::size_t offset, std::uint64_t expected,
                                     std::uint64_t desired, std::uint64_t* old) {
  detail::EndpointState& s = state();
  Request request;
  request.what_ = "compare-and-swap";
  if (old == nullptr) {
    request.status_ = Status(Errc::invalid_argument, "fabric: compare-and-swap to " + s.peer_name + ": no place for the old value");
    return request;
  }
  if (Status c = check_word(s, remote, sizeof(std::uint64_t), offset, request.what_); !c) {
    request.status_ = c;
    return request;
  }
  if (void* base = cpu_atomic_target(s, remote); base != nullptr) {  // a CPU atomic, as atomic() does
    if (!s.check_peer().is_ok()) {
      request.status_ = s.failure;
      return request;
    }
    *old = desired;
    cpu_atomic(static_cast<std::byte*>(base) + offset, UCP_ATOMIC_OP_CSWAP, expected, old);
    return request;
  }
  if (s.ep != nullptr && !s.native_rma()) {  // by active message, as atomic() does
    std::uint64_t id = 0;
    track_word_op(request, s.issue_word_op(WordOp::compare_swap, remote.address() + offset, expected, desired, nullptr, 0,
                                      old, 1, id, request.what_), id);
    return request;
  }
  // UCX CSWAP: the operand (read at once) is the compare value; the reply buffer holds the new
  // value and receives the old one.
  *old = desired;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  param.datatype = ucp_dt_make_contig(sizeof(std::uint64_t));
  param.reply_buffer = old;
  track(request, ucp_atomic_op_nbx(s.ep, UCP_ATOMIC_OP_CSWAP, &expected, 1, remote.address() + offset,
                                   static_cast<ucp_rkey_h>(remote.rkey_), &param));
  return request;
}

namespace {

// Checks a range of `count` words for load_words / store_words; `mapped` receives the words'
// address where the region maps, else null.
Status check_words(detail::EndpointState& s, const RemoteMemory& remote, std::size_t offset, std::size_t count,
                   std::string_view what, std::uint64_t*& mapped) {
  mapped = nullptr;
  if (count == 0 || count > kMaxWordOpWords) {
    return {Errc::invalid_argument, "fabric: " + std::string(what) + " of " + std::to_string(count) + " words at " +
                                        s.peer_name + " (1 .. " + std::to_string(kMaxWordOpWords) + ")"};
  }
  if (Status c = check_word(s, remote, count * sizeof(std::uint64_t), offset, what); !c) return c;
  if (void* base = remote.mapped(); base != nullptr) {
    mapped = reinterpret_cast<std::uint64_t*>(static_cast<std::byte*>(base) + offset);
  }
  return {};
}

}  // namespace

Status Endpoint::load_words(const RemoteMemory& remote, std::size_t offset, std::uint64_t* values, std::size_t count) {
  return load_words_async(remote, offset, values, count).wait();
}

Request Endpoint::load_words_async(const RemoteMemory& remote, std::size_t offset, std::uint64_t* values,
                                   std::size_t count) {
  detail::EndpointState& s = state();
  Request request;
  request.what_ = "load";
  std::uint64_t* words = nullptr;
  if (Status c = check_words(s, remote, offset, count, request.what_, words); !c) {
    request.status_ = c;
    return request;
  }
  if (words != nullptr) {
    for (std::size_t i = 0; i < count; ++i) values[i] = std::atomic_ref(words[i]).load(std::memory_order_acquire);
    return request;
  }
  if (s.ep != nullptr && !s.native_rma()) {
    std::uint64_t id = 0;
    track_word_op(request, s.issue_word_op(WordOp::load_words, remote.address() + offset, count, 0, nullptr, 0, values,
                                      count, id, request.what_), id);
    return request;
  }
  // Native RMA, no mapping: a get has no order among its bytes, so the first and the last word
  // are gets of their own, completed before and after the one for the words between.
  Status st = get(values, sizeof(std::uint64_t), remote, offset);
  if (st && count > 2) st = get(values + 1, (count - 2) * sizeof(std::uint64_t), remote, offset + sizeof(std::uint64_t));
  if (st && count > 1) {
    st = get(values + count - 1, sizeof(std::uint64_t), remote, offset + (count - 1) * sizeof(std::uint64_t));
  }
  request.status_ = st;
  return request;
}

Request Endpoint::store_words_async(const std::uint64_t* values, std::size_t count, const RemoteMemory& remote,
                                    std::size_t offset) {
  detail::EndpointState& s = state();
  Request request;
  request.what_ = "store";
  std::uint64_t* words = nullptr;
  if (Status c = check_words(s, remote, offset, count, request.what_, words); !c) {
    request.status_ = c;
    return request;
  }
  if (words != nullptr) {
    for (std::size_t i = 0; i < count; ++i) std::atomic_ref(words[i]).store(values[i], std::memory_order_release);
    return request;
  }
  if (s.ep != nullptr && !s.native_rma()) {
    std::uint64_t id = 0;
    track_word_op(request, s.issue_word_op(WordOp::store_words, remote.address() + offset, count, 0, values,
                                      count * sizeof(std::uint64_t), nullptr, 0, id, request.what_), id);
    return request;
  }
  // Native RMA, no mapping: one word per put, each ordered after the one before by a fence.
  Status st;
  for (std::size_t i = 0; i < count && st; ++i) {
    if (i != 0) {
      const ucs_status_t fenced = ucp_worker_fence(s.worker->worker);
      if (fenced != UCS_OK) st = s.fail(Errc::peer_failed, "fence", ucx_error_text(fenced));
    }
    if (st) st = put_nbi(values + i, sizeof(std::uint64_t), remote, offset + i * sizeof(std::uint64_t));
  }
  if (st) st = flush();
  request.status_ = st;
  return request;
}

Status Endpoint::post_words(const std::uint64_t* values, std::size_t count, const RemoteMemory& remote,
                            std::size_t offset) {
  detail::EndpointState& s = state();
  std::uint64_t* words = nullptr;
  if (Status c = check_words(s, remote, offset, count, "posted store", words); !c) return c;
  if (words == nullptr && s.ep != nullptr && !s.native_rma()) {
    return s.post_words(remote.address() + offset, values, count, "posted store");
  }
  return store_words_async(values, count, remote, offset).wait();  // mapped or native: done on return
}

void Endpoint::hold_word_ops() { state().ops_held = true; }

Status Endpoint::release_word_ops() {
  detail::EndpointState& s = state();
  s.ops_held = false;
  return s.send_ops("word operations");
}

Status Endpoint::flush() {
  detail::EndpointState& s = state();
  if (Status p = s.wait_pending("put"); !p) return p;
  if (!s.check_peer().is_ok()) return s.failure;
  if (s.posted) {
    if (Status c = s.confirm_posted("flush"); !c) return c;
  }
  ucp_request_param_t param{};
  return s.wait(ucp_ep_flush_nbx(s.ep, &param), "flush");
}

Request Endpoint::flush_async() {
  detail::EndpointState& s = state();
  Request request;
  request.what_ = "flush";
  if (s.posted || !s.check_peer().is_ok()) {
    request.status_ = flush();  // issued stores to confirm, or a known failure: at once
    return request;
  }
  ucp_request_param_t param{};
  track(request, ucp_ep_flush_nbx(s.ep, &param));
  return request;
}

Status Endpoint::am_send(std::uint16_t id, std::span<const std::byte> data) {
  detail::EndpointState& s = state();
  if (!s.check_peer().is_ok()) return s.failure;
  if (data.size() > kMaxAmBytes) {
    return {Errc::invalid_argument, "fabric: active message " + std::to_string(id) + " to " +
                                        s.peer_name + " of " + std::to_string(data.size()) +
                                        " B exceeds the limit of " + std::to_string(kMaxAmBytes) + " B"};
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  return s.wait(ucp_am_send_nbx(s.ep, id, nullptr, 0, data.data(), data.size(), &param),
                "active message");
}

Request Endpoint::am_send_async(std::uint16_t id, std::span<const std::byte> header,
                                std::span<const std::byte> data, bool reply) {
  detail::EndpointState& s = state();
  Request request;
  request.what_ = "active message";
  if (!s.check_peer().is_ok()) {
    request.status_ = s.failure;
    return request;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER | (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
  track(request, ucp_am_send_nbx(s.ep, id, header.data(), header.size(), data.data(), data.size(), &param));
  return request;
}

bool Endpoint::rma_native() const { return state().native_rma(); }

// ---------------------------------------------------------------------------------------------
// WordRaiser

Status WordRaiser::raise(std::uint64_t value) {
  if (value > pending_) pending_ = value;
  return poll();
}

Status WordRaiser::poll() {
  if (pending_ <= sent_) return {};
  if (!in_flight_.done()) return {};
  if (Status s = in_flight_.wait(); !s) return s;
  message_[0] = token_;
  message_[1] = pending_;
  sent_ = pending_;
  in_flight_ = endpoint_.am_send_async(kRaiseWordAm, {},
                                       std::as_bytes(std::span(message_)));
  if (in_flight_.done()) return in_flight_.wait();
  return {};
}

void Endpoint::close_now() {
  if (!state_) return;
  state_->close_without_flush = true;
  state_.reset();
}

void Endpoint::close() {
  if (!state_) return;
  state_.reset();  // the state closes the UCX endpoint once no RemoteMemory uses it
}

}  // namespace dfi::fabric
