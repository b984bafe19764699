// apps::kv histories — what each client invoked and what it got back, with times, for a
// linearizability checker (Porcupine: tests/porcupine/kvcheck).
//
// Every client thread of a bench run records into its own journal, a memory-mapped file, so that
// the history of a client killed mid-run (kill -9) is still on disk: a record is written before
// its request is sent and completed when the reply arrives, with plain stores into the mapping
// (no system call per operation; the file grows by doubling). The checker reads journals as
// they are; nothing converts them after the run, so a dead client's journal needs no survivor.
//
// A journal file (`<dir>/kv-<rank>-<thread>.journal`): a 64-byte header — the 8 bytes
// "DFIKVJ01", then the record size (uint32, 56) — and records of 56 bytes, little-endian:
//
//   client  uint64   the client's index (Client::index)
//   op      uint32   1 get, 2 put, 3 del (Op)
//   state   uint32   0 unused (the end of the journal), 1 invoked, 2 returned
//   key     uint64
//   input   uint64   the id of the value a put writes (value_of), 0 otherwise
//   output  uint64   the id of the value a get read (0: not found), 1/0 whether a delete found
//                    its key, 0 for a put
//   call    int64    CLOCK_MONOTONIC ns (one clock for every process of the machine)
//   return  int64    likewise; meaningful in state 2 only
//
// A record in state 1 is an operation whose outcome is unknown (its client failed or was killed
// before the reply): it may have taken effect at any time after its call. The state word is
// stored last (release), so a client killed while writing a record leaves it unused.
//
// The checker also reads a text form, one operation per line, for hand-written histories
// (tests/porcupine/testdata):
//
//   <client> <op> <key> <input> <output> <call ns> <return ns>     (return -1: unknown)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "dfi/apps/kv/service.hpp"

namespace dfi::apps::kv {

// One client thread's journal (see above). Not thread-safe: one writer.
class HistoryJournal {
 public:
  // Creates `path` (replacing a file of that name). Throws dfi::Error(io) naming the file.
  explicit HistoryJournal(const std::string& path);
  ~HistoryJournal();
  HistoryJournal(const HistoryJournal&) = delete;
  HistoryJournal& operator=(const HistoryJournal&) = delete;

  // Records an operation about to be sent; returns its index for returned(). Throws
  // dfi::Error(io) when the file cannot grow.
  std::size_t invoked(std::uint64_t client, Op op, std::uint64_t key, std::uint64_t input, std::int64_t call_ns);
  // Records the outcome of operation `index`.
  void returned(std::size_t index, std::uint64_t output, std::int64_t return_ns);

  // The journal's file name for a client thread of a rank.
  static std::string path(const std::string& dir, int rank, int thread);

 private:
  void grow();

  std::string path_;
  int fd_ = -1;
  std::byte* map_ = nullptr;
  std::size_t capacity_ = 0;  // records
  std::size_t size_ = 0;      // records used
};

// The value a put with id `id` writes, over all of `value` (the service's width, at least 8 bytes):
// the id in the first 8 bytes, then a pattern derived from it. Throws dfi::Error(invalid_argument)
// for a value narrower than 8 bytes.
void value_of(std::uint64_t id, std::span<char> value);
// The id of `value` if it is one value_of made (at any width), else 0 (a torn or foreign value).
std::uint64_t id_of(std::string_view value);

}  // namespace dfi::apps::kv
