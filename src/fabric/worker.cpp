#include "dfi/fabric/worker.hpp"

#include <poll.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "dfi/common/config.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "internal.hpp"

namespace dfi::fabric {
namespace {

// Runs the handler installed for one AM id. Data arrives eagerly (DFI sends AMs with the EAGER
// flag); a rendezvous message from a foreign sender is dropped with a log line.
ucs_status_t on_am(void* arg, const void* header, std::size_t header_length, void* data,
                   std::size_t length, const ucp_am_recv_param_t* param) {
  auto* slot = static_cast<Worker::Impl::HandlerSlot*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    std::fprintf(stderr, "dfi fabric: dropped rendezvous active message %u (%zu B > eager limit)\n",
                 unsigned{slot->id}, length);
    return UCS_OK;
  }
  void* reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param->reply_ep : nullptr;
  AmReplier replier(reply_ep, slot->worker);
  AmMessage message{slot->id, {static_cast<const std::byte*>(header), header_length},
                    {static_cast<const std::byte*>(data), length}};
  slot->handler(message, replier);
  return UCS_OK;
}

void on_reply_sent(void* request, ucs_status_t /*status*/, void* user_data) {
  auto* buffer = static_cast<Worker::Impl::ReplyBuffer*>(user_data);
  if (buffer->owner != nullptr) {
    buffer->owner->free_replies.push_back(buffer);
  } else {
    delete buffer;  // taken when every pooled buffer was in flight
  }
  ucp_request_free(request);
}

}  // namespace

Worker::Impl::~Impl() {
  if (worker != nullptr) ucp_worker_destroy(worker);
}

Status AmReplier::reply(std::uint16_t id, std::span<const std::byte> data) {
  if (reply_ep_ == nullptr) {
    return {Errc::invalid_argument, "fabric: active message has no reply endpoint (sender did not ask for replies)"};
  }
  if (data.size() > kMaxAmBytes) {
    return {Errc::invalid_argument, "fabric: reply of " + std::to_string(data.size()) +
                                        " B exceeds the active-message limit of " +
                                        std::to_string(kMaxAmBytes) + " B"};
  }
  // UCX 1.13 needs the buffer until the send completes, which may be after this handler returns.
  auto* impl = static_cast<Worker::Impl*>(worker_);
  if (data.size() > Worker::Impl::kReplyBufferBytes) {
    // A larger reply (load_words, a 2PC read): sent straight from `data` when UCX can complete
    // it at once (it copies it then), so that answering allocates nothing; else copied below.
    ucp_request_param_t now{};
    now.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    now.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    ucs_status_ptr_t sent = ucp_am_send_nbx(static_cast<ucp_ep_h>(reply_ep_), id, nullptr, 0, data.data(), data.size(), &now);
    if (sent == nullptr) return {};
    if (UCS_PTR_IS_ERR(sent) && UCS_PTR_STATUS(sent) != UCS_ERR_NO_RESOURCE) {
      return {Errc::peer_failed, "fabric: reply to active message " + std::to_string(id) +
                                     " failed: " + ucx_error_text(UCS_PTR_STATUS(sent))};
    }
    if (!UCS_PTR_IS_ERR(sent)) ucp_request_free(sent);  // not expected with FORCE_IMM_CMPL
  }
  Worker::Impl::ReplyBuffer* buffer = nullptr;
  std::byte* copy = nullptr;
  if (data.size() <= Worker::Impl::kReplyBufferBytes && !impl->free_replies.empty()) {
    buffer = impl->free_replies.back();
    impl->free_replies.pop_back();
    copy = buffer->data;
  } else if (data.size() <= Worker::Impl::kReplyBufferBytes) {
    buffer = new Worker::Impl::ReplyBuffer();  // every pooled buffer in flight: rare
    copy = buffer->data;
  }
  std::unique_ptr<std::byte[]> large;
  if (buffer == nullptr) {
    large.reset(new std::byte[data.size() + 1]);
    copy = large.get();
  }
  std::memcpy(copy, data.data(), data.size());
  auto give_back = [&] {
    if (buffer != nullptr && buffer->owner != nullptr) impl->free_replies.push_back(buffer);
    else delete buffer;
  };
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  param.cb.send = on_reply_sent;
  if (buffer == nullptr) {  // a large reply: its own block, freed by on_large_reply_sent
    param.cb.send = [](void* request, ucs_status_t, void* user_data) {
      delete[] static_cast<std::byte*>(user_data);
      ucp_request_free(request);
    };
  }
  param.user_data = buffer != nullptr ? static_cast<void*>(buffer) : static_cast<void*>(copy);
  ucs_status_ptr_t request =
      ucp_am_send_nbx(static_cast<ucp_ep_h>(reply_ep_), id, nullptr, 0, copy, data.size(), &param);
  if (request == nullptr) {
    give_back();
    return {};
  }
  if (UCS_PTR_IS_ERR(request)) {
    give_back();
    return {Errc::peer_failed, "fabric: reply to active message " + std::to_string(id) +
                                   " failed: " + ucx_error_text(UCS_PTR_STATUS(request))};
  }
  (void)large.release();  // the callback frees it
  return {};  // the callback gives the buffer back and frees the request
}

Status AmReplier::raise(const std::uint64_t (*pairs)[2], std::size_t count) {
  return reply(kRaiseWordAm, std::as_bytes(std::span(&pairs[0][0], 2 * count)));
}

Worker::Worker(Context& context, std::string name) : impl_(std::make_shared<Impl>()) {
  impl_->context = &context;
  impl_->name = std::move(name);
  impl_->op_timeout = context.options().op_timeout;
  impl_->word_backoff = BackoffSettings::from_config(/*polls_are_syscalls=*/true);
  impl_->word_backoff.yield = static_cast<std::uint32_t>(config::get_int("word_wait_yield_rounds"));
  impl_->wait_blocks = context.capabilities().needs_target_progress;
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  params.events = UCP_WAKEUP_RMA | UCP_WAKEUP_AMO | UCP_WAKEUP_TX | UCP_WAKEUP_RX;
  ucs_status_t status = ucp_worker_create(context.impl().context, &params, &impl_->worker);
  if (status == UCS_OK) status = ucp_worker_get_efd(impl_->worker, &impl_->event_fd);
  if (status != UCS_OK) {
    throw Error(Errc::fatal, "fabric: cannot create worker '" + impl_->name + "': " + ucx_error_text(status));
  }
  for (Impl::ReplyBuffer& buffer : impl_->reply_buffers) {
    buffer.owner = impl_.get();
    impl_->free_replies.push_back(&buffer);
  }
  install_word_ops(*impl_);
}

void install_word_ops(Worker::Impl& impl) {
  Worker::Impl* self = &impl;
  install_am_handler(impl, kWordOpAm, [self](const AmMessage& m, AmReplier& replier) {
    constexpr std::size_t kWords = kMaxAmBytes / sizeof(std::uint64_t);
    const std::size_t n = m.data.size() / sizeof(std::uint64_t);
    auto word_at = [&](std::size_t i) {  // the message's data need not be aligned
      std::uint64_t v = 0;
      std::memcpy(&v, m.data.data() + i * sizeof v, sizeof v);
      return v;
    };
    std::uint64_t reply[kWords];  // {id, status, count, result words} per operation
    std::size_t length = 0;
    bool applied_stores = false;  // then published for Context::acquire_applied_stores
    for (std::size_t at = 0; at + 5 <= n && length + 3 <= kWords;) {
      const std::uint64_t id = word_at(at), address = word_at(at + 1), a = word_at(at + 3), b = word_at(at + 4);
      const auto op = static_cast<WordOp>(word_at(at + 2));
      const bool stores = op == WordOp::store_words || op == WordOp::post_words;
      const bool many = op == WordOp::load_words || stores;
      const std::uint64_t count = many ? a : op == WordOp::fence ? 0 : 1;
      const std::size_t data = stores ? count : 0;
      const std::size_t results = stores ? 0 : count;
      std::uint64_t* out = reply + length;
      out[0] = id;
      out[1] = 0;
      out[2] = 0;
      if (op == WordOp::fence) {  // everything before it was applied: answer it
        length += 3;
        at += 5;
        continue;
      }
      if (count == 0 || count > kMaxWordOpWords || data > n - at - 5 || length + 3 + results > kWords) {
        out[1] = 2;  // malformed: nothing after it can be parsed
        length += 3;
        break;
      }
      if (address % 8 != 0 || !self->context->impl().owns_range(address, count * sizeof(std::uint64_t))) {
        out[1] = 1;
      } else {
        auto* words = reinterpret_cast<std::uint64_t*>(address);
        std::atomic_ref word(words[0]);
        out[2] = results;
        switch (op) {
          case WordOp::add: out[3] = word.fetch_add(a, std::memory_order_acq_rel); break;
          case WordOp::swap: out[3] = word.exchange(a, std::memory_order_acq_rel); break;
          case WordOp::load: out[3] = word.load(std::memory_order_acquire); break;
          case WordOp::compare_swap: {
            std::uint64_t expected = a;
            word.compare_exchange_strong(expected, b, std::memory_order_acq_rel);
            out[3] = expected;  // the old value either way
            break;
          }
          case WordOp::load_words:  // ascending, each an acquire load (Endpoint::load_words)
            for (std::size_t i = 0; i < count; ++i) out[3 + i] = std::atomic_ref(words[i]).load(std::memory_order_acquire);
            break;
          case WordOp::store_words:  // ascending, each a release store (Endpoint::store_words_async)
          case WordOp::post_words:
            for (std::size_t i = 0; i < count; ++i) std::atomic_ref(words[i]).store(word_at(at + 5 + i), std::memory_order_release);
            applied_stores = true;
            break;
          default:
            out[1] = 2;
            out[2] = 0;
        }
      }
      if (op != WordOp::post_words || out[1] != 0) length += 3 + out[2];  // a posted store: answered if refused
      at += 5 + data;
    }
    if (applied_stores) self->context->impl().applied_stores.fetch_add(1, std::memory_order_release);
    if (length == 0) return;  // not even one operation to answer
    (void)replier.reply(kWordReplyAm, std::as_bytes(std::span(reply, length)));  // a dead requester: dropped
  });
  install_am_handler(impl, kWordReplyAm, [self](const AmMessage& m, AmReplier&) {
    const std::size_t n = m.data.size() / sizeof(std::uint64_t);
    auto word_at = [&](std::size_t i) {
      std::uint64_t v = 0;
      std::memcpy(&v, m.data.data() + i * sizeof v, sizeof v);
      return v;
    };
    for (std::size_t at = 0; at + 3 <= n;) {
      const std::uint64_t id = word_at(at), status = word_at(at + 1), results = word_at(at + 2);
      if (results > n - at - 3) return;  // truncated
      if ((id & kPostedOp) != 0) {  // a posted store the peer refused: its endpoint's next flush reports it
        if (status != 0) self->posted_failures.emplace(id & ~kPostedOp, status);
        at += 3 + results;
        continue;
      }
      Worker::Impl::WordWait& wait = self->word_waits[id % Worker::Impl::kWordWaits];
      if (id != 0 && wait.id == id && !wait.arrived) {  // else an answer nobody waits for any more
        if (status == 0 && results != wait.out_words) {
          wait.status = 2;  // a reply that does not fit the request
        } else {
          wait.status = status;
          if (status == 0 && results != 0) std::memcpy(wait.out, m.data.data() + (at + 3) * sizeof(std::uint64_t), results * sizeof(std::uint64_t));
        }
        wait.arrived = true;
      }
      at += 3 + results;
    }
  });
}

Worker::~Worker() = default;

const std::string& Worker::name() const noexcept { return impl_->name; }
Context& Worker::context() noexcept { return *impl_->context; }

std::string Worker::address() const {
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  ucs_status_t status = ucp_worker_get_address(impl_->worker, &address, &length);
  if (status != UCS_OK) {
    throw Error(Errc::fatal, "fabric: cannot get the address of worker '" + impl_->name + "': " +
                                 ucx_error_text(status));
  }
  std::string blob(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(impl_->worker, address);
  return blob;
}

unsigned Worker::progress() { return ucp_worker_progress(impl_->worker); }

namespace {

void on_endpoint_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* state = static_cast<detail::EndpointState*>(arg);
  (void)state->fail(Errc::peer_failed, "connection", ucx_error_text(status));
}

}  // namespace

Endpoint Worker::connect(int peer_rank, std::string_view peer_address, Handshake handshake) {
  auto state = std::make_shared<detail::EndpointState>();
  state->worker = impl_;
  state->peer = peer_rank;
  state->peer_name = "rank " + std::to_string(peer_rank);
  state->serial = ++impl_->endpoint_serials;
  if (peer_address.empty()) {
    throw Error(Errc::invalid_argument, "fabric: worker '" + impl_->name + "' cannot connect to " +
                                            state->peer_name + ": empty address");
  }
  // UCX reads the address blob but takes a non-const pointer; copy it into aligned storage.
  std::string address(peer_address);
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = on_endpoint_error;
  params.err_handler.arg = state.get();
  ucs_status_t status = ucp_ep_create(impl_->worker, &params, &state->ep);
  if (status != UCS_OK) {
    state->ep = nullptr;
    throw Error(Errc::peer_failed, "fabric: worker '" + impl_->name + "' cannot connect to " +
                                       state->peer_name + ": " + ucx_error_text(status));
  }
  if (config::get_int("debug_endpoints") != 0) ucp_ep_print_info(state->ep, stderr);
  Endpoint endpoint(std::move(state));
  // A flush completes only once the peer's wireup reply arrived (until then UCX holds the
  // endpoint's lanes behind its wireup endpoint), so after it no wireup reply of the peer to
  // this worker is pending any more (Handshake::complete, worker.hpp).
  if (handshake == Handshake::complete) {
    if (Status s = endpoint.flush(); !s) {
      throw Error(s.code() == Errc::timeout ? Errc::timeout : Errc::peer_failed,
                  "fabric: worker '" + impl_->name + "' cannot connect to rank " + std::to_string(peer_rank) +
                      ": the connection handshake failed: " + s.message());
    }
  }
  return endpoint;
}

std::vector<Endpoint> Worker::connect_all(const std::vector<std::pair<int, std::string>>& peers) {
  std::vector<Endpoint> endpoints;
  endpoints.reserve(peers.size());
  for (const auto& [rank, address] : peers) endpoints.push_back(connect(rank, address, Handshake::deferred));
  std::vector<Request> flushes;
  flushes.reserve(endpoints.size());
  for (Endpoint& endpoint : endpoints) flushes.push_back(endpoint.flush_async());
  for (std::size_t i = 0; i < flushes.size(); ++i) {
    if (Status s = flushes[i].wait(); !s) {
      throw Error(s.code() == Errc::timeout ? Errc::timeout : Errc::peer_failed,
                  "fabric: worker '" + impl_->name + "' cannot connect to rank " + std::to_string(peers[i].first) +
                      ": the connection handshake failed: " + s.message());
    }
  }
  return endpoints;
}

void Worker::set_am_handler(std::uint16_t id, AmHandler handler) {
  if (id >= kFirstReservedAmId) {
    throw Error(Errc::invalid_argument, "fabric: worker '" + impl_->name + "': active message id " +
                                            std::to_string(id) + " is reserved for the fabric layer");
  }
  install_am_handler(*impl_, id, std::move(handler));
}

namespace {

// The handler of WordRaiser messages: {token, value} pairs; raises each registered word to its value.
void raise_word(Worker::Impl& impl, const AmMessage& message) {
  std::uint64_t m[2];
  for (std::size_t at = 0; at + sizeof m <= message.data.size(); at += sizeof m) {
    std::memcpy(m, message.data.data() + at, sizeof m);
    const std::size_t index = m[0] & 0xffffu;
    if (index >= impl.words.size()) continue;
    const Worker::Impl::WordSlot& slot = impl.words[index];
    if (slot.word == nullptr || slot.generation != static_cast<std::uint16_t>(m[0] >> 16)) continue;  // late
    if (m[1] > *slot.word) *slot.word = m[1];
  }
}

}  // namespace

std::uint32_t Worker::register_word(std::uint64_t* word) {
  Impl& impl = *impl_;
  if (!impl.word_handler_installed) {
    Impl* self = impl_.get();
    install_am_handler(impl, kRaiseWordAm, [self](const AmMessage& m, AmReplier&) { raise_word(*self, m); });
    impl.word_handler_installed = true;
  }
  std::uint16_t index;
  if (!impl.free_words.empty()) {
    index = impl.free_words.back();
    impl.free_words.pop_back();
  } else {
    if (impl.words.size() > 0xffff) {
      throw Error(Errc::invalid_argument, "fabric: worker '" + impl.name + "' has 65536 registered words");
    }
    index = static_cast<std::uint16_t>(impl.words.size());
    impl.words.emplace_back();
  }
  Impl::WordSlot& slot = impl.words[index];
  slot.word = word;
  ++slot.generation;
  return static_cast<std::uint32_t>(slot.generation) << 16 | index;
}

void Worker::unregister_word(std::uint32_t token) noexcept {
  Impl& impl = *impl_;
  const std::size_t index = token & 0xffffu;
  if (index >= impl.words.size() || impl.words[index].word == nullptr ||
      impl.words[index].generation != static_cast<std::uint16_t>(token >> 16)) {
    return;
  }
  impl.words[index].word = nullptr;
  impl.free_words.push_back(static_cast<std::uint16_t>(index));
}

void install_am_handler(Worker::Impl& impl, std::uint16_t id, AmHandler handler) {
  auto slot = std::make_unique<Worker::Impl::HandlerSlot>(Worker::Impl::HandlerSlot{id, std::move(handler), &impl});
  ucp_am_handler_param_t params{};
  params.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG;
  params.id = id;
  params.cb = on_am;
  params.arg = slot.get();
  ucs_status_t status = ucp_worker_set_am_recv_handler(impl.worker, &params);
  if (status != UCS_OK) {
    throw Error(Errc::fatal, "fabric: worker '" + impl.name + "' cannot install handler for active message " +
                                 std::to_string(id) + ": " + ucx_error_text(status));
  }
  impl.handlers[id] = std::move(slot);  // replaces (and frees) any previous handler
}

Status Worker::fence() {
  ucs_status_t status = ucp_worker_fence(impl_->worker);
  if (status != UCS_OK) {
    return {Errc::fatal, "fabric: fence on worker '" + impl_->name + "' failed: " + ucx_error_text(status)};
  }
  return {};
}

bool Worker::wait_for_event(std::chrono::microseconds timeout, bool idle) {
  if (!idle && ucp_worker_progress(impl_->worker) != 0) return true;
  return impl_->wait_for_event(timeout);
}

bool Worker::Impl::wait_for_event(std::chrono::microseconds timeout) {
  ucs_status_t status = ucp_worker_arm(worker);
  if (status == UCS_ERR_BUSY) return true;  // events arrived meanwhile
  pollfd fd{event_fd, POLLIN, 0};
  const timespec wait{static_cast<time_t>(timeout.count() / 1000000),
                      static_cast<long>(timeout.count() % 1000000) * 1000};
  int ready = ::ppoll(&fd, 1, &wait, nullptr);
  return ready > 0;
}

void Worker::signal() { ucp_worker_signal(impl_->worker); }

bool Worker::try_claim() noexcept {
  return !impl_->claimed.load(std::memory_order_relaxed) &&
         !impl_->claimed.exchange(true, std::memory_order_acquire);
}

void Worker::claim() noexcept {
  impl_->owner_claims.fetch_add(1, std::memory_order_relaxed);
  while (!try_claim()) std::this_thread::yield();
}

std::uint64_t Worker::owner_claims() const noexcept { return impl_->owner_claims.load(std::memory_order_relaxed); }

void Worker::unclaim() noexcept { impl_->claimed.store(false, std::memory_order_release); }

namespace owned_workers {
namespace {
struct Owned {
  const Worker* key;
  std::weak_ptr<Worker> worker;
};
// The list is touched only once the thread added a worker: the first use of a thread_local
// with a destructor registers it (a malloc), which a thread that only writes must never pay in
// its loop; a thread_local bool registers nothing.
thread_local bool t_any = false;
thread_local std::vector<Owned> t_owned;
}  // namespace

void add(const std::shared_ptr<Worker>& worker) {
  t_any = true;
  for (const Owned& o : t_owned) {
    if (o.key == worker.get()) return;
  }
  t_owned.push_back({worker.get(), worker});
}

void remove(const Worker* worker) noexcept {
  if (!t_any) return;
  for (std::size_t i = 0; i < t_owned.size(); ++i) {
    if (t_owned[i].key != worker) continue;
    t_owned[i] = std::move(t_owned.back());
    t_owned.pop_back();
    return;
  }
}

unsigned progress(const Worker* except) {
  if (!t_any) return 0;
  unsigned events = 0;
  for (std::size_t i = 0; i < t_owned.size();) {
    std::shared_ptr<Worker> worker = t_owned[i].worker.lock();
    if (!worker) {  // its target is gone
      t_owned[i] = std::move(t_owned.back());
      t_owned.pop_back();
      continue;
    }
    if (worker.get() != except && worker->try_claim()) {
      events += worker->progress();
      worker->unclaim();
    }
    ++i;
  }
  return events;
}
}  // namespace owned_workers

}  // namespace dfi::fabric
