// The one check of a rate share (DrivenOptions::share, set_share, the share record).
#pragma once

#include <cstdint>
#include <string>

namespace dfi::driven {

// Why `share` is not a valid rate share (outside 1..kMaxShare), or empty when it is.
std::string share_problem(std::int64_t share);

}  // namespace dfi::driven
