#include "mover.hpp"

#include <charconv>
#include <optional>
#include <utility>
#include <ostream>

#include "dfi/cluster/node.hpp"
#include "dfi/driven/mover.hpp"

namespace dfi::tools {

int run_mover(const MoverCommandOptions& options, std::ostream& out, std::ostream& err) {
  std::optional<std::pair<driven::CrashPoint, std::uint64_t>> crash;
  if (!options.crash_at.empty()) {
    const std::string& text = options.crash_at;
    const std::size_t colon = text.find(':');
    const std::string point = text.substr(0, colon);
    std::uint64_t count = 0;
    const char* first = colon == std::string::npos ? nullptr : text.data() + colon + 1;
    const char* last = text.data() + text.size();
    const bool number = first != nullptr && std::from_chars(first, last, count).ptr == last && count > 0;
    if ((point != "link" && point != "publish") || !number) {
      err << "dfi mover: --crash-at '" << text << "': expected link:N or publish:N with N >= 1\n";
      return 2;
    }
    crash.emplace(point == "link" ? driven::CrashPoint::link : driven::CrashPoint::publish, count);
  }
  cluster::Node node;
  driven::Mover mover(node);
  if (crash) mover.crash_at(crash->first, crash->second);
  for (const std::string& flow : options.flows) {
    mover.add_flow(flow);
    const driven::MoverRecovery& r = mover.recovery(flow);
    if (!r.resumed) continue;
    out << "dfi mover (rank " << node.rank() << "): flow '" << flow << "' resumed: " << r.taken
        << " producer segments taken and " << r.delivered << " delivered before, " << r.completed
        << " half-done transfer(s) completed, " << r.producers_done << " producer(s) and " << r.consumers_done
        << " consumer(s) finished before" << std::endl;
  }
  if (Status s = mover.run(options.timeout); !s) {
    err << "dfi mover: " << s.message() << '\n';
    return 1;
  }
  const driven::MoverCounters& c = mover.counters();
  out << "dfi mover (rank " << node.rank() << "): " << options.flows.size() << " flow(s) ended; moved " << c.segments
      << " segments, " << c.bytes << " bytes\n";
  for (const std::string& flow : options.flows) {
    out << "  flow '" << flow << "': " << mover.counters(flow).bytes << " bytes, share " << mover.share(flow) << '\n';
  }
  node.finish();
  return 0;
}

}  // namespace dfi::tools
