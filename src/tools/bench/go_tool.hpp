// Go programs that scenarios build on first use with `go build` (like the MPI baselines): the etcd
// load generator (bench/etcd/ycsb) and the Porcupine checker of the kv store's histories
// (tests/porcupine/kvcheck). Go comes from the README set-up; without it the scenarios that need
// one say why they cannot run.
#pragma once

#include <optional>
#include <string>

namespace dfi::tools::bench {

// The go command: `go` in PATH, else /usr/local/go/bin/go; nullopt when there is neither.
std::optional<std::string> go_binary();

// Builds the Go module in `source` (main.go, go.mod, go.sum) into `binary` unless `binary` is newer
// than those files; returns `binary`. `what` names the program in errors. Throws dfi::Error:
// not_found (no Go, with `install_hint`), io (the build failed: the command and its last output).
std::string build_go_tool(const std::string& source, const std::string& binary, const std::string& what,
                          const std::string& install_hint);

}  // namespace dfi::tools::bench
