// The registry and flow names of one kv service.
#pragma once

#include <string>

namespace dfi::apps::kv {

struct Names {
  explicit Names(const std::string& service)
      : requests(service + ".requests"),
        replies(service + ".replies"),
        accept(service + ".accept"),
        accepted(service + ".accepted"),
        reports("kv/" + service + "/report/") {}

  std::string requests;
  std::string replies;
  std::string accept;
  std::string accepted;
  std::string reports;  // + rank: what a rank reports after the run (cluster::exchange_records)
};

}  // namespace dfi::apps::kv
