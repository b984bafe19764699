// What every operator of ops/ shares outside its data path: the checks of its spec's common
// fields, and how its ranks add up their results (each rank publishes one registry record of
// numbers, and every rank reads all of them).
#pragma once

#include <string>
#include <vector>

#include "dfi/cluster/records.hpp"
#include "dfi/common/error.hpp"

namespace dfi::ops::detail {

// Checks an operator's name (its flows are "<name>.<part>"), threads per rank and ranks; throws
// dfi::Error(invalid_argument, "<kind> '<name>': <problem>").
void check_common(const char* kind, const std::string& name, int threads, int ranks, int cluster_size);

// The data-path call check and the rank records: cluster/records.hpp (apps share them).
using cluster::check_call;
using cluster::exchange_records;

}  // namespace dfi::ops::detail
