// What operators (ops/) and applications (apps/) share outside their data path: the error of a
// failed data-path call, composed only when it failed, and how ranks add up their results (each
// rank publishes one registry record, and every rank reads all of them).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "dfi/common/error.hpp"

namespace dfi::cluster {

class Node;

// Throws dfi::Error(status's code, "<kind> '<name>' (rank R): <action> flow '<flow>': <message>")
// for a failed data-path call; an ok status costs one test (the message is composed only on
// failure, never per batch).
[[noreturn]] void fail_call(const Status& status, const char* kind, const std::string& name, int rank,
                            const char* action, const std::string& flow);
inline void check_call(const Status& status, const char* kind, const std::string& name, int rank,
                       const char* action, const std::string& flow) {
  if (!status) [[unlikely]] fail_call(status, kind, name, rank, action, flow);
}

// Publishes `mine` as record `<prefix><this rank>` and returns the records of ranks
// 0 .. ranks-1, waiting for each up to the registry timeout. Throws dfi::Error: peer_failed
// naming a rank that died before it published, timeout naming the record that did not appear.
std::vector<std::string> exchange_records(Node& node, const std::string& prefix, int ranks,
                                          const std::string& mine);

// The records `<prefix>0` .. `<prefix><ranks-1>` of the ranks that published one, waiting for each
// rank until it published or was declared dead; a rank that died before it published gives
// nullopt. Every caller that waits long enough gets the same answer (a record outlives its rank;
// a dead rank publishes nothing more). Publishes nothing. Throws dfi::Error: timeout (`timeout`
// passed with a live rank still silent, naming it and the record).
std::vector<std::optional<std::string>> survivors_records(Node& node, const std::string& prefix, int ranks,
                                                          std::chrono::milliseconds timeout);

}  // namespace dfi::cluster
