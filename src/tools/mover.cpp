#include "mover.hpp"

#include <chrono>
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
  using Clock = std::chrono::steady_clock;
  auto ns = [](Clock::time_point t) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  };
  const Clock::time_point started = Clock::now();
  cluster::Node node;
  const Clock::time_point joined = Clock::now();
  driven::Mover mover(node);
  if (crash) mover.crash_at(crash->first, crash->second);
  for (const std::string& flow : options.flows) {
    mover.add_flow(flow);
    const driven::MoverRecovery& r = mover.recovery(flow);
    if (!r.resumed) continue;
    out << "dfi mover (rank " << node.rank() << "): flow '" << flow << "' resumed: " << r.taken
        << " producer segments taken and " << r.delivered << " delivered before, " << r.completed
        << " half-done transfer(s) completed, " << r.forgotten << " announced transfer(s) forgotten, "
        << r.producers_done << " producer(s) and " << r.consumers_done
        << " consumer(s) finished before" << std::endl;
  }
  bool resumed = false;
  for (const std::string& flow : options.flows) resumed = resumed || mover.recovery(flow).resumed;
  if (resumed) {
    // The restart pause's parts (steady_clock ns, one clock for the machine's processes): process
    // start, cluster joined, per flow buffers attached and recovered; the first move follows (after
    // run(), or in the crash_at seam's line).
    out << "dfi mover (rank " << node.rank() << "): restart timings: started " << ns(started) << " joined "
        << ns(joined);
    for (const std::string& flow : options.flows) {
      const driven::MoverRecovery& r = mover.recovery(flow);
      out << " flow '" << flow << "' attach_started " << ns(r.started) << " attached " << ns(r.attached) << " recovered "
          << ns(r.recovered);
    }
    out << std::endl;
  }
  const Status ran = mover.run(options.timeout);
  if (resumed) out << "dfi mover (rank " << node.rank() << "): first move at " << ns(mover.first_move()) << " ns" << std::endl;
  if (Status s = ran; !s) {
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
