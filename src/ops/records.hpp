// What every operator of ops/ shares outside its data path: the checks of its spec's common
// fields, and how its ranks add up their results (each rank publishes one registry record of
// numbers, and every rank reads all of them).
#pragma once

#include <string>
#include <vector>

#include "dfi/common/error.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::ops::detail {

// Checks an operator's name (its flows are "<name>.<part>"), threads per rank and ranks; throws
// dfi::Error(invalid_argument, "<kind> '<name>': <problem>").
void check_common(const char* kind, const std::string& name, int threads, int ranks, int cluster_size);

// Throws dfi::Error(status's code, "<kind> '<name>' (rank R): <action> flow '<flow>': <message>")
// for a failed data-path call; an ok status costs one test (the message is composed only on
// failure, never per batch).
[[noreturn]] void fail_call(const Status& status, const char* kind, const std::string& name, int rank,
                            const char* action, const std::string& flow);
inline void check_call(const Status& status, const char* kind, const std::string& name, int rank,
                       const char* action, const std::string& flow) {
  if (!status) [[unlikely]] fail_call(status, kind, name, rank, action, flow);
}

// Publishes `mine` (space-separated numbers) as record `<prefix><this rank>` and returns the
// records of ranks 0 .. ranks-1, waiting for each up to the registry timeout. Throws
// dfi::Error(timeout) naming the record that did not appear.
std::vector<std::string> exchange_records(cluster::Node& node, const std::string& prefix, int ranks,
                                          const std::string& mine);

}  // namespace dfi::ops::detail
