// The two-sided messages of the 2PC baseline (client -> storage server and back). Every message
// is a sequence of 64-bit words, sent with Endpoint::am_send (<= fabric::kMaxAmBytes).
//
//   request  [op][tag][commit id][count] then `count` entries:
//              kRead     [word]                     the record whose header word is `word`
//              kPrepare  [word][expected header]    lock it if its header is `expected`
//              kCommit   [word][payload words...]   install payload, header = commit id, unlock
//              kAbort    [word][expected header]    unlock a record this transaction locked
//   reply    [tag][server][status] and, for kRead, [header][payload words...] per record read
//            (at most max_reads() records in one kRead, so that the reply fits one message)
//
// status: kOk; kConflict (prepare: a header was not the expected one; the server released the
// locks this request took); kBadRequest (malformed: a word outside the block or not a header).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "dfi/fabric/worker.hpp"

namespace dfi::apps::rsi::wire {

inline constexpr std::uint16_t kRequestAm = 0x5200;
inline constexpr std::uint16_t kReplyAm = 0x5201;

enum Op : std::uint64_t { kRead = 1, kPrepare = 2, kCommit = 3, kAbort = 4 };
enum Reply : std::uint64_t { kOk = 0, kConflict = 1, kBadRequest = 2 };

inline constexpr std::size_t kRequestHead = 4;  // op, tag, commit id, count
inline constexpr std::size_t kReplyHead = 3;    // tag, server, status

// Most records one kRead asks for: their replies fit fabric::kMaxAmBytes.
inline std::size_t max_reads(std::size_t payload_words) {
  return std::max<std::size_t>(1, (fabric::kMaxAmBytes / sizeof(std::uint64_t) - kReplyHead) / (1 + payload_words));
}

}  // namespace dfi::apps::rsi::wire
