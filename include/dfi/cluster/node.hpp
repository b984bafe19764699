// cluster::Node — what one process of a DFI cluster needs to talk to the others.
//
// Construction discovers rank and size from the launcher (dfi cluster run, mpirun, srun),
// starts the embedded registry in rank 0 (unless DFI_REGISTRY_EXTERNAL=1), connects to it,
// creates the fabric context and a service worker that is the target of every peer's
// one-sided operations and active messages, served by a progress thread, publishes that
// worker's address, and waits until every rank has done the same.
//
// Liveness: a rank's registry connection closes when its process dies. A watcher thread watches
// the membership (the registry pushes every change to it: a held "members" request, see
// src/registry/protocol.hpp) and declares vanished ranks failed in the fabric context, so every
// operation towards them returns Errc::peer_failed naming the rank, on every transport, within
// milliseconds of the registry seeing the connection close (UCX's own detection still applies
// where the transport has it). A rank that loses its own registry connection (the registry
// closes a silent member's connection: a partition, netns hosts) is no member any more: with
// the registry embedded in rank 0 that is rank 0's failure; with an external registry
// (DFI_REGISTRY_EXTERNAL=1) the others count this rank as dead, so it declares every peer
// failed, naming the cut, and its waits end with errors instead of waiting out their deadlines
// for peers that went on without it.
//
//   dfi::cluster::Node node;                       // blocks until all ranks are up
//   dfi::fabric::Worker worker(node.fabric(), "t0");
//   dfi::fabric::Endpoint ep = node.connect(worker, (node.rank() + 1) % node.size());
//   ...
//   node.finish();                                 // last barrier; rank 0 keeps the registry up
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dfi/common/backoff.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/worker.hpp"

namespace dfi::registry {
class Client;
class Server;
}  // namespace dfi::registry

namespace dfi::fabric {
class ProgressThread;
}

namespace dfi::cluster {

struct NodeOptions {
  int rank = -1;                          // -1: discover from the launcher's environment
  int size = -1;
  std::string registry;                   // host:port; empty: DFI_REGISTRY
  std::string token;                      // empty: DFI_REGISTRY_TOKEN
  bool embed_registry = true;             // rank 0 runs the server (DFI_REGISTRY_EXTERNAL=1 turns off)
  std::chrono::milliseconds registry_timeout{0};  // 0: DFI_REGISTRY_TIMEOUT_MS
  fabric::ContextOptions fabric;          // defaults from the settings table
  std::chrono::milliseconds liveness_interval{5000};  // longest hold of one membership watch
                                                      // (changes are pushed at once)
  // Installs active-message handlers on the service worker before its progress thread starts.
  std::function<void(fabric::Worker&)> setup_service;
};

// Options from the settings table and the launcher's environment.
NodeOptions node_options_from_environment();

// Requests and bytes a node's registry clients exchanged (Node::registry_stats).
struct RegistryStats {
  std::uint64_t requests = 0;     // requests answered (each a round trip), hellos excluded
  std::uint64_t connections = 0;  // registry connections opened (each with a hello round trip)
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

class Node {
 public:
  // Joins the cluster. Throws dfi::Error: invalid_argument (no rank/size found, bad settings),
  // timeout (registry or peers did not appear within registry_timeout), io.
  //
  // A process started for a rank whose earlier process died (a data mover restarted after a
  // SIGKILL, driven/mover.hpp) rejoins: it finds the earlier process's record, takes over the
  // rank's records, joins the membership once the registry has seen the earlier one's connection
  // close, and does not wait for the others (they are up). The others keep the rank declared
  // failed (what they knew of the earlier process stays true: endpoints towards it are dead),
  // and finish() meets through records once any rank rejoined. rejoined() says which case it was.
  explicit Node(NodeOptions options = node_options_from_environment());
  // Stops the progress thread and leaves; does not wait for peers (call finish() for that).
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  int rank() const noexcept { return rank_; }
  // True when this process took the place of an earlier process of its rank (see the
  // constructor).
  bool rejoined() const noexcept { return rejoined_; }
  int size() const noexcept { return size_; }
  fabric::Context& fabric() noexcept { return *context_; }
  registry::Client& registry() noexcept { return *client_; }
  // How a loop that polls this node's fabric waits between empty polls: where one-sided
  // operations are not native (tcp), every poll is a system call, so it spins and yields far less
  // before it sleeps (BackoffSettings::from_config(polls_are_syscalls)). Reads the settings.
  BackoffSettings poll_backoff() { return BackoffSettings::from_config(!fabric().capabilities().native_one_sided); }

  // This rank's service worker address (what peer_address gives the others). Thread-safe.
  std::string service_address() const;
  // The service worker address of `rank` (cached after the first lookup). Thread-safe.
  std::string peer_address(int rank);
  // An endpoint from `worker` to the service worker of `rank`. Throws dfi::Error(invalid_argument)
  // for a rank outside [0, size). Thread-safe (the worker must be the caller's own).
  fabric::Endpoint connect(fabric::Worker& worker, int rank);

  // Waits until every rank called barrier with the same name. Throws dfi::Error(timeout) naming
  // how many arrived. Thread-safe; uses its own registry connection, so other threads of this
  // process can publish and look up meanwhile.
  void barrier(const std::string& name);

  // Waits for registry record `name` (registry timeout when `timeout` is 0). Unlike
  // registry().wait_for(), it polls and never holds the shared registry connection while it
  // waits, so threads of one process can wait for each other's records. Throws
  // dfi::Error(timeout) naming the record.
  std::string wait_for(const std::string& name, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // As wait_for, for a record that rank `publisher` publishes: gives up at once, with
  // dfi::Error(peer_failed) naming the rank and the record, when that rank is declared dead
  // without having published it (a flow opening towards a rank that died).
  std::string wait_for_from(const std::string& name, int publisher,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // The records `names`, in that order, in one registry request held until all are published
  // (registry timeout when `timeout` is 0). `publishers` is empty or names, per record, the rank
  // that publishes it (-1: none): a record whose publisher is declared dead without having
  // published it ends the wait with dfi::Error(peer_failed) naming the rank and the record, or,
  // with `skip_dead`, is nullopt. Like wait_for, it never holds the shared registry connection
  // (a waiting thread takes a connection of its own from a pool), so threads of one process can
  // wait for each other's records. Throws dfi::Error(timeout) naming how many are missing.
  std::vector<std::optional<std::string>> wait_all(const std::vector<std::string>& names,
                                                   const std::vector<int>& publishers,
                                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                                                   bool skip_dead = false);
  // As wait_all (skip_dead off), for records that never change once published (a flow's spec, its
  // targets' rings) and that several threads of this process ask for: calls for the same names
  // share one registry request (a call while it is held waits for its answer, within its own
  // `timeout`), and the answer is kept for later calls (the most recent answers, up to
  // kSharedAnswerBytes in all). An error reaches every call waiting for that answer and is not
  // kept. Thread-safe.
  std::vector<std::optional<std::string>> wait_all_shared(const std::vector<std::string>& names,
                                                          const std::vector<int>& publishers,
                                                          std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  static constexpr std::size_t kSharedAnswerBytes = std::size_t{8} << 20;

  // State a layer above keeps per node (one per process and cluster) under `key`, e.g. a flow's
  // targets of this rank while they open: the object there, or the one `make` returns when there
  // is none. It lives until detach(key) or the Node's end. Thread-safe; `make` runs under the
  // node's lock, so it must not call back into the node.
  std::shared_ptr<void> attachment(const std::string& key, const std::function<std::shared_ptr<void>()>& make);
  // Drops the object under `key` (when `only` is given, only if it is that object).
  void detach(const std::string& key, const void* only = nullptr);

  // What this process's registry clients exchanged so far (the membership watcher's held watch
  // excluded): requests, bytes sent and received, summed. Thread-safe.
  RegistryStats registry_stats();
  // Final barrier: after it no peer touches this process's memory any more. Rank 0 hosts the
  // registry, so it must not leave before the others are done with it. Stops the liveness
  // watcher, since ranks now leave on purpose. When ranks died (failed_ranks() not empty), the
  // survivors meet through records instead, a dead rank counting as arrived, and the registry's
  // host then waits (up to the registry timeout) until every other rank left.
  void finish();

  // Lets this process's progress thread progress `worker` whenever its owner has not claimed it
  // (fabric::ProgressThread::adopt); abandon before the worker goes away. Thread-safe.
  void adopt_progress(fabric::Worker& worker);
  void abandon_progress(fabric::Worker& worker);

  // True when rank `rank` runs on this host and its process no longer exists, is exiting or has
  // SIGKILL pending (asks the kernel, not the failure detector: no delay). False when it lives,
  // runs on another host, or its process record is unknown. One registry lookup and a /proc
  // read: for set-up paths, such as attaching to a peer's memory (over shm the peer's segments
  // go with its process; see fabric::Endpoint::attach).
  bool process_gone(int rank);
  // The registry record where rank `rank` publishes its process ("host pid") as its Node starts,
  // just before the start-up barrier.
  static std::string process_record(int rank);

  // Ranks declared failed so far (empty while all are alive). Thread-safe.
  std::vector<int> failed_ranks() const;
  // Why this rank is no member any more (it lost an external registry, which counts it as dead:
  // see Liveness above), or an empty string while it is one. Thread-safe.
  std::string cut_off() const;

 private:
  int rank_ = -1;
  int size_ = 0;
  bool rejoined_ = false;
  std::chrono::milliseconds registry_timeout_{0};
  std::unique_ptr<registry::Server> server_;
  std::unique_ptr<registry::Client> client_;
  std::unique_ptr<fabric::Context> context_;
  std::unique_ptr<fabric::Worker> service_;
  std::unique_ptr<fabric::ProgressThread> progress_;
  std::unique_ptr<registry::Client> watch_client_;
  std::unique_ptr<registry::Client> barrier_client_;
  std::string registry_address_;
  std::string registry_token_;
  // Connections for held waits (wait_for, wait_all): a waiting thread takes one, and gives it
  // back after; created when none is free. Guarded by waiters_mutex_.
  std::mutex waiters_mutex_;
  std::vector<std::unique_ptr<registry::Client>> idle_waiters_;
  std::vector<const registry::Client*> all_waiters_;  // idle or lent, for registry_stats()
  RegistryStats retired_;  // of waiters dropped after an error
  // A waiter from the pool (a new connection when none is idle).
  std::unique_ptr<registry::Client> take_waiter();
  // Back to the pool, or dropped (counted in retired_) when its call failed.
  void return_waiter(std::unique_ptr<registry::Client> waiter, bool healthy);
  bool registry_in_rank0_ = true;  // the embedded registry: losing it means rank 0 is gone
  std::thread watcher_;
  mutable std::mutex watcher_mutex_;
  bool watcher_stop_ = false;  // guarded by watcher_mutex_
  std::string cut_off_;        // guarded by watcher_mutex_
  struct SharedAnswer;  // a wait_all_shared request and its answer
  std::mutex shared_mutex_;  // guards shared_, shared_order_, shared_bytes_, attachments_
  std::map<std::string, std::shared_ptr<SharedAnswer>> shared_;  // by the names, joined
  std::deque<std::string> shared_order_;  // answered keys, oldest first
  std::size_t shared_bytes_ = 0;          // of the answers kept
  std::map<std::string, std::shared_ptr<void>> attachments_;
  std::mutex addresses_mutex_;
  std::unordered_map<int, std::string> addresses_;  // guarded by addresses_mutex_

  void watch(std::chrono::milliseconds interval);
  // The membership join (retried while the rank's earlier process is still a member).
  void join();
  void stop_watcher();
};

}  // namespace dfi::cluster
