// How an operator's ranks add up their results: each rank publishes one registry record of
// numbers, and every rank reads all of them (not on any data path).
#pragma once

#include <string>
#include <vector>

namespace dfi::cluster {
class Node;
}

namespace dfi::ops::detail {

// Publishes `mine` (space-separated numbers) as record `<prefix><this rank>` and returns the
// records of ranks 0 .. ranks-1, waiting for each up to the registry timeout. Throws
// dfi::Error(timeout) naming the record that did not appear.
std::vector<std::string> exchange_records(cluster::Node& node, const std::string& prefix, int ranks,
                                          const std::string& mine);

}  // namespace dfi::ops::detail
