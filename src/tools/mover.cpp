#include "mover.hpp"

#include <ostream>

#include "dfi/cluster/node.hpp"
#include "dfi/driven/mover.hpp"

namespace dfi::tools {

int run_mover(const std::vector<std::string>& flows, std::chrono::milliseconds timeout, std::ostream& out,
              std::ostream& err) {
  cluster::Node node;
  driven::Mover mover(node);
  for (const std::string& flow : flows) mover.add_flow(flow);
  if (Status s = mover.run(timeout); !s) {
    err << "dfi mover: " << s.message() << '\n';
    return 1;
  }
  const driven::MoverCounters& c = mover.counters();
  out << "dfi mover (rank " << node.rank() << "): " << flows.size() << " flow(s) ended; moved " << c.segments
      << " segments, " << c.bytes << " bytes\n";
  for (const std::string& flow : flows) {
    out << "  flow '" << flow << "': " << mover.counters(flow).bytes << " bytes, share " << mover.share(flow) << '\n';
  }
  node.finish();
  return 0;
}

}  // namespace dfi::tools
