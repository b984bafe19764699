// `dfi kv`: the replicated key-value store (apps/kv) as a command.
//
// `dfi kv bench` runs it under a YCSB-style load, as every rank of a cluster (under dfi cluster
// run). Rank 0 prints throughput, latency percentiles and whether the replicas agree; --history
// DIR records every client's history for tests/porcupine/kvcheck.
//
//   dfi cluster run --nodes 6 --transport shm -- dfi kv bench --protocol paxos --replicas 3 --threads 2
//
// `dfi kv serve` runs it as a long-lived service, as every rank of a cluster: ranks 0 ..
// replicas-1 are the replicas, every other rank is a gateway whose client threads (the service's
// clients, apps/kv/client.hpp) each listen on a Unix socket, <socket-dir>/kv-<rank>-<thread>.sock,
// and run the requests that `dfi kv put/get/delete` processes send there, one connection at a
// time, one request at a time. SIGINT or SIGTERM to any rank (`dfi cluster run` passes its own on
// to every rank), or `dfi kv stop` to any gateway, stops the service cleanly: the rank publishes a stop record, every gateway
// finishes the request it runs, closes its client and removes its socket, the replicas end once
// every client closed, and every rank leaves the cluster with status 0.
//
//   dfi cluster run --nodes 4 --transport tcp -- dfi kv serve --replicas 3 --socket-dir /tmp/kv
//   dfi kv put --socket /tmp/kv/kv-3-0.sock 42 hello
//   dfi kv get --socket /tmp/kv/kv-3-0.sock 42          # prints hello
//   dfi kv delete --socket /tmp/kv/kv-3-0.sock 42
//
// Why gateways: a process that is not a rank of the cluster cannot be a client on today's flows.
// A cluster's ranks are fixed when it starts (a process may only take over the rank of one that
// died), a flow's sources and targets are fixed when it is created (a source that closes ends its
// stream for good), and the replicas' client table has one row per client of the flows. So the
// external commands talk to a client rank over a local socket instead.
//
// The gateway protocol, one line each way (values are text: no newline or NUL byte):
//   put <key> <value>   ->  ok
//   get <key>           ->  ok <value, its trailing zero bytes removed>  |  not_found
//   delete <key>        ->  ok  |  not_found
//   stop                ->  ok  (and the service stops, as on a signal)
//   anything else, or a failed request  ->  error <message>
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "dfi/apps/kv/bench.hpp"
#include "dfi/apps/kv/service.hpp"

namespace dfi::tools {

// Joins the cluster, runs apps::kv::run_bench with `options`, leaves. Returns its exit status.
int run_kv_bench(const apps::kv::BenchOptions& options, std::ostream& out, std::ostream& err);

struct KvServeOptions {
  apps::kv::ServiceOptions service;  // client_threads: gateway sockets per client rank
  std::string socket_dir;            // where the gateways listen (must exist)
};

// `dfi kv serve` (above): joins the cluster and serves until a stop signal or record. Prints one
// line per gateway when it listens ("kv serve: rank R thread T serves at PATH") and one per rank
// when it stopped. Returns 0 after a clean stop, 1 (the reason on `err`, naming the rank) when a
// replica or gateway failed.
int run_kv_serve(const KvServeOptions& options, std::ostream& out, std::ostream& err);

struct KvRequestOptions {
  std::string socket;  // a gateway's socket
  std::string op;      // put, get, delete or stop
  std::uint64_t key = 0;
  std::string value;   // put
  double timeout_seconds = 30;  // for the gateway's answer
};

// `dfi kv put/get/delete/stop`: one request through a gateway of `dfi kv serve` (stop: the whole
// service stops, every rank with status 0). Prints the value of a get that found its key. Returns 0 (done, found), 2 (get or delete: the key was not there), 1
// (the error on `err`: no gateway at the socket, a value with a newline or NUL byte, the
// gateway's error — e.g. a value wider than the service's).
int run_kv_request(const KvRequestOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
