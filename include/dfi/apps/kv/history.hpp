// apps::kv histories — what each client invoked and what it got back, with times, for a
// linearizability checker (Porcupine: tests/porcupine/kvcheck).
//
// A history file holds one line per operation:
//
//   <client> <op> <key> <input> <output> <call ns> <return ns>
//
// op is get, put or del; input is the id of the value a put writes (0 otherwise); output is the
// id of the value a get read (0: not found) or 1/0 for whether a delete found its key (0 for a
// put); times are CLOCK_MONOTONIC nanoseconds (one clock for every process of the machine). An
// operation whose outcome is unknown (its client failed before the reply) has return time -1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dfi/apps/kv/service.hpp"

namespace dfi::apps::kv {

struct HistoryEntry {
  std::uint64_t client = 0;
  Op op = Op::get;
  std::uint64_t key = 0;
  std::uint64_t input = 0;
  std::uint64_t output = 0;
  std::int64_t call_ns = 0;
  std::int64_t return_ns = -1;
};

// Writes `entries` to `path` in the format above. Throws dfi::Error(io) naming the file.
void write_history(const std::string& path, const std::vector<HistoryEntry>& entries);

// The value a put with id `id` writes: the id in the first 8 bytes, then a pattern derived from it.
Value value_of(std::uint64_t id);
// The id of `value` if it is one value_of made, else 0 (a torn or foreign value).
std::uint64_t id_of(const Value& value);

}  // namespace dfi::apps::kv
