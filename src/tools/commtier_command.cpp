#include "commtier_command.hpp"

#include <cctype>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"

namespace dfi::tools {

std::uint64_t parse_bytes(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit(text.substr(digits));
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K" || unit == "KB" || unit == "KIB") shift = 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") shift = 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") shift = 30;
  if (digits == 0 || digits > 12 || shift < 0) {
    throw Error(Errc::invalid_argument, "'" + std::string(text) + "' is not a size (e.g. 64, 8KiB, 1MiB, 1GiB)");
  }
  return std::stoull(std::string(text.substr(0, digits))) << shift;
}

int run_commtier(const apps::commtier::TestOptions& options, bool json, std::ostream& out, std::ostream& err) {
  try {
    cluster::Node node;
    const apps::commtier::TestResult result = apps::commtier::run_test(node, options, out);
    if (node.rank() == options.su_rank) {
      out << "commtier: " << apps::commtier::test_name(options.test) << " test via "
          << apps::commtier::via_name(options.via) << ", " << options.lanes << " lane(s)";
      if (options.via == apps::commtier::Via::tier) {
        out << ", " << options.buffers.count << " receive buffer(s) of " << options.buffers.bytes << " B per lane"
            << (result.direct ? " (written in place)" : " (staged)");
      }
      out << '\n' << std::setw(14) << "bytes" << std::setw(11) << "transfers" << std::setw(12) << "MiB/s"
          << std::setw(12) << "messages" << std::setw(10) << "buffers" << '\n';
      nlohmann::json sizes = nlohmann::json::array();
      for (const apps::commtier::SizeResult& r : result.sizes) {
        out << std::setw(14) << r.bytes << std::setw(11) << r.transfers << std::setw(12) << std::fixed
            << std::setprecision(1) << r.mib_per_s << std::setw(12) << r.messages << std::setw(10) << r.buffers << '\n';
        sizes.push_back({{"bytes", r.bytes},
                         {"transfers", r.transfers},
                         {"seconds", r.seconds},
                         {"mib_per_s", r.mib_per_s},
                         {"messages", r.messages},
                         {"buffers", r.buffers}});
      }
      if (json) out << "commtier-json: " << nlohmann::json{{"direct", result.direct}, {"sizes", sizes}}.dump() << '\n';
    }
    node.finish();
    return 0;
  } catch (const Error& e) {
    err << "dfi commtier: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace dfi::tools
