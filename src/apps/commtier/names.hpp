// The registry records of apps/commtier.
#pragma once

#include <string>
#include <string_view>

namespace dfi::apps::commtier {

// The tier's spec (JSON), published by create_tier after its flows.
inline std::string tier_record(std::string_view tier) { return "commtier/" + std::string(tier); }

}  // namespace dfi::apps::commtier
