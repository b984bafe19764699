// `dfi registry serve`: the registry as a process of its own, so that every rank of a cluster —
// rank 0 included — may die without taking the cluster's records and membership with it (rank 0
// otherwise embeds the server). The ranks then run with DFI_REGISTRY_EXTERNAL=1.
//
//   # rank 0's command under dfi cluster run: a registry daemon beside a killable kv replica
//   dfi registry serve --ranks 4 & DFI_REGISTRY_EXTERNAL=1 dfi kv bench ...
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dfi::registry {
class Server;
}

namespace dfi::tools {

// A registry served by this process for a local cluster it launches (`dfi cluster run
// --registry-apart`, bench jobs whose ranks may die): the ranks get its address and token and
// DFI_REGISTRY_EXTERNAL=1 through environment(), so rank 0 embeds none and any rank may die.
// Listens on 127.0.0.1 (any free port) with a fresh random token until destroyed. Throws
// dfi::Error(io) when it cannot listen.
class RegistryApart {
 public:
  RegistryApart();
  ~RegistryApart();
  RegistryApart(const RegistryApart&) = delete;
  RegistryApart& operator=(const RegistryApart&) = delete;

  // DFI_REGISTRY, DFI_REGISTRY_TOKEN and DFI_REGISTRY_EXTERNAL=1, for ClusterOptions::extra_env.
  std::vector<std::pair<std::string, std::string>> environment() const;

 private:
  std::string token_;
  std::unique_ptr<registry::Server> server_;
};

struct RegistryServeOptions {
  std::string address;  // host:port to listen on; empty: DFI_REGISTRY
  std::string token;    // empty: DFI_REGISTRY_TOKEN
  // > 0: exit (status 0) once this many ranks have joined and every one of them has left or died;
  // 0: serve until SIGINT or SIGTERM.
  int ranks = 0;
  double timeout_seconds = 0;  // > 0: give up (status 1) if the ranks have not all joined by then
};

// Serves the registry until the end `options` sets. Returns the exit status; errors (bad address,
// port in use) go to `err` as "dfi registry: ...".
int run_registry_serve(const RegistryServeOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
