#include "dfi/cluster/node.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/progress_thread.hpp"
#include "dfi/launch/environment.hpp"
#include "dfi/registry/client.hpp"
#include "dfi/registry/server.hpp"
#include "dfi/cluster/records.hpp"

namespace dfi::cluster {
namespace {

std::string address_record(int rank) { return "dfi/node/" + std::to_string(rank) + "/address"; }
// How long one registry request of a wait is held (Node::wait_all).
constexpr std::chrono::milliseconds kWaitSlice{1000};
// Published by a process that took the place of a dead one of its rank (Node::rejoined()).
const std::string kRejoinedRecord = "dfi/node/rejoined";

// "<host> <pid>" of this process.
std::string this_process() {
  char host[256] = {};
  (void)::gethostname(host, sizeof host - 1);
  return std::string(host) + ' ' + std::to_string(::getpid());
}

}  // namespace

NodeOptions node_options_from_environment() {
  NodeOptions options;
  launch::LaunchInfo info = launch::discover_launch();
  options.rank = info.rank;
  options.size = info.size;
  options.registry = config::get_string("registry");
  options.token = config::get_string("registry_token");
  options.embed_registry = config::get_int("registry_external") == 0;
  options.registry_timeout = std::chrono::milliseconds(config::get_int("registry_timeout_ms"));
  options.fabric = fabric::context_options_from_config();
  return options;
}

Node::Node(NodeOptions options) : rank_(options.rank), size_(options.size) {
  if (rank_ < 0 || size_ <= 0 || rank_ >= size_) {
    throw Error(Errc::invalid_argument, "cluster: rank " + std::to_string(rank_) + " of size " +
                                            std::to_string(size_) + " is not a valid position");
  }
  if (options.registry.empty()) options.registry = config::get_string("registry");
  if (options.token.empty()) options.token = config::get_string("registry_token");
  registry_timeout_ = options.registry_timeout.count() > 0
                          ? options.registry_timeout
                          : std::chrono::milliseconds(config::get_int("registry_timeout_ms"));

  // An etcd cluster (etcd://...) is never embedded: it is the coordination service itself.
  if (options.registry.rfind("etcd://", 0) == 0) options.embed_registry = false;
  registry_in_rank0_ = options.embed_registry;
  if (rank_ == 0 && options.embed_registry) {
    server_ = std::make_unique<registry::Server>(registry::server_options_at(options.registry, options.token));
  }
  registry_address_ = options.registry;
  registry_token_ = options.token;
  client_ = std::make_unique<registry::Client>(options.registry, options.token, registry_timeout_);

  context_ = std::make_unique<fabric::Context>(options.fabric);
  service_ = std::make_unique<fabric::Worker>(*context_, "rank " + std::to_string(rank_) + " service");
  if (options.setup_service) options.setup_service(*service_);
  // A process record of this rank already there: an earlier process of the rank died and this
  // one takes its place (a restarted data mover); the cluster is up already.
  rejoined_ = client_->try_lookup(process_record(rank_)).has_value();
  client_->publish(process_record(rank_), this_process(), /*replace=*/true);
  client_->publish(address_record(rank_), service_->address(), /*replace=*/true);
  progress_ = std::make_unique<fabric::ProgressThread>(*service_);
  join();
  barrier_client_ = std::make_unique<registry::Client>(options.registry, options.token, registry_timeout_);
  if (!rejoined_) barrier("dfi/node/up");
  watch_client_ = std::make_unique<registry::Client>(options.registry, options.token, registry_timeout_);
  watcher_ = std::thread([this, interval = options.liveness_interval] { watch(interval); });
}

void Node::join() {
  if (!rejoined_) {
    client_->join(rank_, context_->describe());
    return;
  }
  // The earlier process's membership ends when the registry sees its connection close.
  const auto deadline = std::chrono::steady_clock::now() + registry_timeout_;
  for (;;) {
    try {
      client_->join(rank_, context_->describe());
      break;
    } catch (const Error& e) {
      if (e.code() != Errc::already_exists || std::chrono::steady_clock::now() >= deadline) {
        throw Error(e.code(), "cluster: rank " + std::to_string(rank_) + " rejoining after its earlier process: " +
                                  e.what());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Ranks that meet at the final barrier would wait for the earlier process: finish() meets
  // through records instead once this is there.
  client_->publish(kRejoinedRecord, std::to_string(rank_), /*replace=*/true);
}

Node::~Node() {
  stop_watcher();
  progress_.reset();  // the service worker is ours again before it is destroyed
}

void Node::watch(std::chrono::milliseconds hold) {
  std::unique_lock lock(watcher_mutex_);
  std::uint64_t version = 0;  // the first answer comes at once
  while (!watcher_stop_) {
    lock.unlock();
    std::map<int, std::string> members;
    bool registry_lost = false;
    std::string registry_error;
    try {
      // Held by the registry until the membership changes (pushed at once) or `hold` passes.
      members = watch_client_->members_after(version, hold);
    } catch (const std::exception& e) {
      registry_lost = true;
      registry_error = e.what();
    }
    lock.lock();
    if (watcher_stop_) break;
    if (!registry_lost && !registry_in_rank0_ && members.find(rank_) == members.end()) {
      // This rank's own membership ended while its connection lives (an etcd lease that expired
      // while etcd was out of reach): the others count it as dead, as when the connection is lost.
      registry_lost = true;
      registry_error = "its membership ended (its lease expired: the registry was out of reach for longer than "
                       "registry_dead_after_ms?)";
    }
    if (registry_lost) {
      if (registry_in_rank0_) {
        // The embedded registry lives in rank 0: losing it means rank 0 is gone.
        context_->mark_peer_failed(0, "rank 0 (registry host) is unreachable: " + registry_error);
        break;
      }
      // An external registry: it closed this rank's connection (it counts the rank as dead) or
      // is gone; either way nobody takes this rank for a member any more.
      cut_off_ = "rank " + std::to_string(rank_) + " lost the registry: " + registry_error;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        context_->mark_peer_failed(r, "this rank (" + std::to_string(rank_) + ") lost the registry, so the cluster counts it as dead and rank " +
                                          std::to_string(r) + " is out of its reach (cut off?): " + registry_error);
      }
      break;
    }
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && members.find(r) == members.end()) {
        context_->mark_peer_failed(r, "rank " + std::to_string(r) +
                                          " left the cluster (its registry connection closed: process died?)");
      }
    }
  }
}

void Node::stop_watcher() {
  {
    std::lock_guard lock(watcher_mutex_);
    watcher_stop_ = true;
  }
  if (watch_client_) watch_client_->interrupt();  // ends the held watch at once
  if (watcher_.joinable()) watcher_.join();
}

std::string Node::cut_off() const {
  std::lock_guard lock(watcher_mutex_);
  return cut_off_;
}

std::vector<int> Node::failed_ranks() const {
  std::vector<int> failed;
  for (int r = 0; r < size_; ++r) {
    if (!context_->peer_failure(r).empty()) failed.push_back(r);
  }
  return failed;
}

std::string Node::process_record(int rank) { return "dfi/node/" + std::to_string(rank) + "/process"; }

bool Node::process_gone(int rank) {
  if (rank < 0 || rank >= size_ || rank == rank_) return false;
  std::optional<std::string> record = client_->try_lookup(process_record(rank));
  if (!record) return false;
  const std::size_t space = record->rfind(' ');
  if (space == std::string::npos || record->substr(0, space) != this_process().substr(0, this_process().rfind(' '))) {
    return false;  // another host: nothing to ask the kernel
  }
  // Gone: no /proc entry, a zombie (killed, not reaped yet), a process already exiting
  // (PF_EXITING: its memory, shm segments included, is released before it turns zombie) or one
  // with SIGKILL pending. Fields after the name: state, then flags 7th, pending signals 29th.
  std::ifstream stat("/proc/" + record->substr(space + 1) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const std::size_t name_end = line.rfind(") ");
  if (name_end == std::string::npos || name_end + 2 >= line.size()) return false;
  std::istringstream in(line.substr(name_end + 2));
  std::vector<std::string> fields;
  for (std::string field; in >> field;) fields.push_back(field);
  if (fields.size() < 29) return false;
  const char state = fields[0][0];
  const std::uint64_t flags = std::stoull(fields[6]);
  const std::uint64_t pending = std::stoull(fields[28]);
  constexpr std::uint64_t kExiting = 0x4;               // PF_EXITING
  constexpr std::uint64_t kKillPending = 1u << (9 - 1);  // SIGKILL is signal 9
  return state == 'Z' || state == 'X' || (flags & kExiting) != 0 || (pending & kKillPending) != 0;
}

std::string Node::peer_address(int rank) {
  if (rank < 0 || rank >= size_) {
    throw Error(Errc::invalid_argument, "cluster: rank " + std::to_string(rank) +
                                            " is outside the cluster of " + std::to_string(size_));
  }
  {
    std::lock_guard lock(addresses_mutex_);
    auto it = addresses_.find(rank);
    if (it != addresses_.end()) return it->second;
  }
  std::string address = wait_for(address_record(rank));
  std::lock_guard lock(addresses_mutex_);
  addresses_.emplace(rank, address);
  return address;
}

std::string Node::service_address() const { return service_->address(); }

fabric::Endpoint Node::connect(fabric::Worker& worker, int rank) {
  return worker.connect(rank, peer_address(rank));
}

void Node::barrier(const std::string& name) { barrier_client_->barrier(name, size_, registry_timeout_); }

std::string Node::wait_for(const std::string& name, std::chrono::milliseconds timeout) {
  return wait_for_from(name, -1, timeout);
}

std::string Node::wait_for_from(const std::string& name, int publisher, std::chrono::milliseconds timeout) {
  return *wait_all({name}, {publisher}, timeout).front();
}

std::unique_ptr<registry::Client> Node::take_waiter() {
  {
    std::lock_guard lock(waiters_mutex_);
    if (!idle_waiters_.empty()) {
      std::unique_ptr<registry::Client> waiter = std::move(idle_waiters_.back());
      idle_waiters_.pop_back();
      return waiter;
    }
  }
  auto waiter = std::make_unique<registry::Client>(registry_address_, registry_token_, registry_timeout_);
  std::lock_guard lock(waiters_mutex_);
  all_waiters_.push_back(waiter.get());
  return waiter;
}

void Node::return_waiter(std::unique_ptr<registry::Client> waiter, bool healthy) {
  std::lock_guard lock(waiters_mutex_);
  if (healthy) {
    idle_waiters_.push_back(std::move(waiter));
    return;
  }
  const registry::Client::Stats s = waiter->stats();
  retired_.requests += s.requests;
  retired_.connections += s.connections;
  retired_.bytes_sent += s.bytes_sent;
  retired_.bytes_received += s.bytes_received;
  std::erase(all_waiters_, waiter.get());
}

std::vector<std::optional<std::string>> Node::wait_all(const std::vector<std::string>& names,
                                                       const std::vector<int>& publishers,
                                                       std::chrono::milliseconds timeout, bool skip_dead) {
  if (timeout.count() == 0) timeout = registry_timeout_;
  if (!publishers.empty() && publishers.size() != names.size()) {
    throw Error(Errc::invalid_argument, "cluster: wait for " + std::to_string(names.size()) + " records with " +
                                            std::to_string(publishers.size()) + " publishers");
  }
  std::vector<std::optional<std::string>> values(names.size());
  std::vector<std::string> asked_names;
  std::vector<int> asked_publishers;
  std::vector<std::size_t> asked;  // indices of what the held request waits for
  for (std::size_t i = 0; i < names.size(); ++i) {
    const int r = publishers.empty() ? -1 : publishers[i];
    if (r >= 0 && r != rank_ && r < size_ && !context_->peer_failure(r).empty()) {
      // Declared dead here (this rank's view may be ahead of the registry's): what it published
      // is there now, else it never will be.
      values[i] = client_->try_lookup(names[i]);
      if (!values[i] && !skip_dead) {
        throw Error(Errc::peer_failed, "rank " + std::to_string(r) + " died before it published '" + names[i] +
                                           "': " + context_->peer_failure(r));
      }
      continue;
    }
    asked.push_back(i);
    asked_names.push_back(names[i]);
    asked_publishers.push_back(r);
  }
  if (asked.empty()) return values;
  // The registry holds the wait and answers at once when a publisher's membership ends; this
  // rank may learn of a death first (the fabric's own detection, while an etcd lease has not yet
  // expired). So the hold is sliced: between slices a publisher declared dead here ends the wait
  // as above. A wait answered within its first slice costs one request.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_ptr<registry::Client> waiter = take_waiter();
  std::vector<std::optional<std::string>> got;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const auto slice = std::clamp(left, std::chrono::milliseconds(0), kWaitSlice);
    try {
      got = waiter->wait_all(asked_names, asked_publishers, slice, skip_dead);
      break;
    } catch (const Error& e) {
      const bool usable = waiter->usable();  // the registry's answers leave it usable
      if (e.code() == Errc::timeout && usable && slice < left) {
        const bool newly_dead = std::any_of(asked_publishers.begin(), asked_publishers.end(), [this](int r) {
          return r >= 0 && r != rank_ && r < size_ && !context_->peer_failure(r).empty();
        });
        if (!newly_dead) continue;
        return_waiter(std::move(waiter), true);
        return wait_all(names, publishers, std::max(left - slice, std::chrono::milliseconds(1)), skip_dead);
      }
      return_waiter(std::move(waiter), usable);
      if (e.code() != Errc::timeout) throw;
      // The last slice's message names its own bound: name the whole wait's instead.
      std::string message = e.what();
      const std::string part = "within " + std::to_string(slice.count()) + " ms";
      if (const std::size_t at = message.find(part); at != std::string::npos) {
        message.replace(at, part.size(), "within " + std::to_string(timeout.count()) + " ms");
      }
      throw Error(Errc::timeout, message);
    } catch (...) {
      return_waiter(std::move(waiter), false);
      throw;
    }
  }
  return_waiter(std::move(waiter), true);
  for (std::size_t k = 0; k < asked.size(); ++k) values[asked[k]] = std::move(got[k]);
  return values;
}

struct Node::SharedAnswer {
  std::condition_variable answered;
  bool done = false;
  // The asking call's error, rethrown in each waiting thread as an Error of its own (one
  // exception object is not thrown in several threads at once).
  std::optional<std::pair<Errc, std::string>> error;
  std::exception_ptr other_error;  // an exception that is not an Error
  std::vector<std::optional<std::string>> values;
  std::size_t bytes = 0;
};

std::vector<std::optional<std::string>> Node::wait_all_shared(const std::vector<std::string>& names,
                                                              const std::vector<int>& publishers,
                                                              std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) timeout = registry_timeout_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string key;
  for (const std::string& name : names) (key += name) += '\n';
  std::shared_ptr<SharedAnswer> answer;
  bool asks = false;
  {
    std::unique_lock lock(shared_mutex_);
    std::shared_ptr<SharedAnswer>& slot = shared_[key];
    if (!slot) {
      slot = std::make_shared<SharedAnswer>();
      asks = true;
    }
    answer = slot;
    if (!asks) {
      if (!answer->answered.wait_until(lock, deadline, [&] { return answer->done; })) {
        throw Error(Errc::timeout, "cluster: " + std::to_string(names.size()) +
                                       " record(s) another thread of this process waits for not published within " +
                                       std::to_string(timeout.count()) + " ms (the first: '" + names.front() + "')");
      }
      if (answer->error) throw Error(answer->error->first, answer->error->second);
      if (answer->other_error) std::rethrow_exception(answer->other_error);
      return answer->values;
    }
  }
  std::vector<std::optional<std::string>> values;
  try {
    values = wait_all(names, publishers, timeout);
  } catch (...) {
    const std::lock_guard lock(shared_mutex_);
    try {
      throw;
    } catch (const Error& e) {
      answer->error.emplace(e.code(), std::string(e.what()));
    } catch (...) {
      answer->other_error = std::current_exception();
    }
    answer->done = true;
    if (const auto it = shared_.find(key); it != shared_.end() && it->second == answer) shared_.erase(it);
    answer->answered.notify_all();
    throw;
  }
  const std::lock_guard lock(shared_mutex_);
  answer->values = values;
  answer->done = true;
  answer->bytes = key.size();
  for (const auto& value : values) answer->bytes += value ? value->size() : 0;
  answer->answered.notify_all();
  // Keep the newest answers, up to kSharedAnswerBytes in all (the newest always).
  shared_order_.push_back(key);
  shared_bytes_ += answer->bytes;
  while (shared_bytes_ > kSharedAnswerBytes && shared_order_.size() > 1) {
    if (const auto it = shared_.find(shared_order_.front()); it != shared_.end()) {
      shared_bytes_ -= it->second->bytes;
      shared_.erase(it);
    }
    shared_order_.pop_front();
  }
  return values;
}

std::shared_ptr<void> Node::attachment(const std::string& key, const std::function<std::shared_ptr<void>()>& make) {
  const std::lock_guard lock(shared_mutex_);
  std::shared_ptr<void>& slot = attachments_[key];
  if (!slot) slot = make();
  return slot;
}

void Node::detach(const std::string& key, const void* only) {
  const std::lock_guard lock(shared_mutex_);
  const auto it = attachments_.find(key);
  if (it != attachments_.end() && (only == nullptr || it->second.get() == only)) attachments_.erase(it);
}

RegistryStats Node::registry_stats() {
  RegistryStats sum;
  auto add = [&sum](const registry::Client::Stats& s) {
    sum.requests += s.requests;
    sum.connections += s.connections;
    sum.bytes_sent += s.bytes_sent;
    sum.bytes_received += s.bytes_received;
  };
  add(client_->stats());
  if (barrier_client_) add(barrier_client_->stats());
  std::lock_guard lock(waiters_mutex_);
  for (const registry::Client* waiter : all_waiters_) add(waiter->stats());
  sum.requests += retired_.requests;
  sum.connections += retired_.connections;
  sum.bytes_sent += retired_.bytes_sent;
  sum.bytes_received += retired_.bytes_received;
  return sum;
}

void Node::adopt_progress(fabric::Worker& worker) { progress_->adopt(worker); }
void Node::abandon_progress(fabric::Worker& worker) { progress_->abandon(worker); }

void Node::finish() {
  if (failed_ranks().empty() && !rejoined_ && !client_->try_lookup(kRejoinedRecord)) {
    barrier("dfi/node/finish");
    stop_watcher();
    return;
  }
  // A rank died, so a barrier of all ranks would never fill: the survivors meet through records
  // instead (a dead rank counts as arrived), and the registry's host stays until the others left.
  client_->publish("dfi/node/finished/" + std::to_string(rank_), "1", /*replace=*/true);
  (void)survivors_records(*this, "dfi/node/finished/", size_, registry_timeout_);
  stop_watcher();
  if (!server_) return;
  const auto deadline = std::chrono::steady_clock::now() + registry_timeout_;
  while (client_->members().size() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace dfi::cluster
