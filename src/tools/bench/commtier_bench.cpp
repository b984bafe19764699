// Scenario commtier (002 Fig 4-6): the CU<->SU communication tier's throughput and consuming
// tests (apps::commtier::run_test) over transfer sizes, multi-buffer vs single-buffer, next to
// the same transfers through DFI shuffle flows and the transport's physical limit; a sweep of
// receive-buffer count and size; 1 and 2 lanes (sending/receiving threads).
//
// Each configuration is one 2-rank cluster run (`dfi bench-rank commtier`): rank 0 is the SU (it
// sends), rank 1 the CU (it receives). The configurations of a panel alternate their order from
// repetition to repetition. The physical limit is the hand-written stream between two processes
// (stream_baseline.hpp: a shared-memory ring over shm, a TCP socket over tcp) moving
// `bytes_per_size` bytes as 64 B tuples, measured once per repetition and drawn at every size.
#include <algorithm>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/apps/commtier/test.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "scenarios.hpp"
#include "stream_baseline.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
namespace ct = apps::commtier;

// One configuration of the test, as the rank program gets it.
struct Config {
  std::string id;  // series id
  ct::TestKind test = ct::TestKind::consuming;
  ct::Via via = ct::Via::tier;
  std::uint32_t buffers = 4;
  std::uint32_t buffer_bytes = 256 << 10;
  std::uint32_t lanes = 1;
  std::vector<std::uint64_t> sizes;
};

class CommtierScenario final : public Scenario {
 public:
  std::string name() const override { return "commtier"; }
  std::string title() const override {
    return "CU<->SU communication tier: multi- vs single-buffer throughput and consuming tests vs DFI flows and the link";
  }
  std::string description() const override {
    return "002 Fig 4-6 on two ranks (rank 0 the SU sends, rank 1 the CU receives), apps::commtier::run_test. "
           "Per transfer size S, `transfers` = bytes_per_size / S (at most max_transfers) transfers of S after a "
           "few untimed ones; MiB/s = S x transfers / time at the SU from the CU's ready signal to its done "
           "signal. consuming: the CU copies every transfer out of the receive buffers (RBs) into its own "
           "memory before it gives them back; throughput: the CU gives every RB back unread. Series: multi "
           "(`multi_buffers` RBs of `buffer_bytes` per lane), single (1 RB of `buffer_bytes`: 002's single "
           "buffer), flow (the same transfers through a 1:1 DFI shuffle flow of 64 B tuples whose ring has "
           "the multi series' shape, push_bulk + flush per transfer, the CU consuming batches), limit (the hand-written "
           "stream of stream_baseline.hpp moving bytes_per_size as 64 B tuples: shared-memory ring over shm, "
           "TCP socket over tcp). Sweep: the consuming test at `sweep_size` for RB counts x RB sizes. Lanes: "
           "multi-buffer consuming with 1 and 2 lanes (an SU and a CU thread each, each sending its share "
           "of S). Every transfer's size and number, and the last one's content, are checked.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"sizes", json::array({8, 1024, 65536, 1 << 20, 16 << 20}),
         json::array({8, 64, 1024, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}),
         "transfer sizes (bytes)"},
        {"buffer_bytes", 256 << 10, 256 << 10, "RB size of the multi- and single-buffer series (002's sweet spot)"},
        {"multi_buffers", 4, 4, "RBs per lane of the multi-buffer series"},
        {"sweep_counts", json::array({1, 4}), json::array({1, 2, 4, 7}), "RB counts of the sweep"},
        {"sweep_bytes", json::array({4096, 262144}), json::array({1024, 16384, 262144, 4 << 20, 64 << 20}),
         "RB sizes of the sweep"},
        {"sweep_size", 4 << 20, 64 << 20, "transfer size of the sweep"},
        {"bytes_per_size", 16 << 20, 256 << 20, "data moved per transfer size"},
        {"max_transfers", 2000, 20000, "most transfers per size"},
        {"timeout_s", 120, 600, "bound of each cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"single", "002's single-buffer mode: the same tier with 1 receive buffer per lane"},
            {"flow", "the same transfers through a 1:1 DFI shuffle flow per lane (64 B tuples, a ring of the multi series' shape)"},
            {"limit", "hand-written stream between two processes (shm: shared-memory ring; tcp: TCP socket), 64 B tuples"}};
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::uint64_t> sizes = context.param("sizes");
    const std::uint32_t buffer_bytes = context.param("buffer_bytes");
    const std::uint32_t multi = context.param("multi_buffers");
    const std::vector<std::uint32_t> sweep_counts = context.param("sweep_counts");
    const std::vector<std::uint32_t> sweep_bytes = context.param("sweep_bytes");
    const std::uint64_t sweep_size = context.param("sweep_size");
    const std::uint64_t bytes_per_size = context.param("bytes_per_size");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    for (const BaselineInfo& b : baselines()) result.add_baseline(b.name, b.description);
    result.add_note("2 vCPUs: the SU and CU threads of a lane, both processes' progress threads and, with 2 lanes, "
                    "two pairs of them share two cores (002 ran each unit on a machine of its own, over 100 Gbit/s "
                    "InfiniBand).");

    const std::string rb = std::to_string(multi) + " x " + std::to_string(buffer_bytes >> 10) + " KiB";
    for (const ct::TestKind test : {ct::TestKind::consuming, ct::TestKind::throughput}) {
      const std::string t(ct::test_name(test));
      Panel& p = result.panel(t, t + " test: multi- vs single-buffer, DFI flow, link limit",
                              {"transfer size", "B", "log2"}, {"bandwidth", "MiB/s", "log10"}, Better::higher);
      p.series("multi", Role::dfi, "tier, " + rb + " RBs");
      p.series("single", Role::baseline, "tier, 1 x " + std::to_string(buffer_bytes >> 10) + " KiB RB (single buffer)");
      p.series("flow", Role::baseline, "DFI shuffle flow, 64 B tuples, ring of " + rb + " segments");
      p.series("limit", Role::baseline, stream_baseline_name(context.transport) + ", long stream");
      p.compare("multi", "single", test == ct::TestKind::consuming ? std::optional<double>(1.5) : std::nullopt);
      p.compare("multi", "flow", test == ct::TestKind::consuming ? std::optional<double>(0.8) : std::nullopt);
      p.compare("multi", "limit");
    }
    Panel& sweep = result.panel("sweep", "consuming test at " + std::to_string(sweep_size >> 10) +
                                             " KiB transfers: receive-buffer count and size",
                                {"receive buffer size", "B", "log2"}, {"bandwidth", "MiB/s"}, Better::higher);
    for (std::uint32_t n : sweep_counts) {
      sweep.series("rb" + std::to_string(n), n == 1 ? Role::baseline : Role::dfi,
                   std::to_string(n) + " RB" + (n == 1 ? " (single buffer)" : "s"));
    }
    for (std::uint32_t n : sweep_counts) {
      if (n != 1 && std::count(sweep_counts.begin(), sweep_counts.end(), 1u) != 0) {
        sweep.compare("rb" + std::to_string(n), "rb1");
      }
    }
    Panel& lanes = result.panel("lanes", "consuming test, " + rb + " RBs per lane: 1 and 2 lanes (threads)",
                                {"transfer size", "B", "log2"}, {"bandwidth", "MiB/s", "log10"}, Better::higher);
    lanes.series("lanes2", Role::dfi, "2 lanes");
    lanes.series("lanes1", Role::baseline, "1 lane");
    lanes.compare("lanes2", "lanes1");

    // The configurations, by panel; each is one cluster run.
    std::vector<std::vector<Config>> groups;
    for (const ct::TestKind test : {ct::TestKind::consuming, ct::TestKind::throughput}) {
      groups.push_back({{"multi", test, ct::Via::tier, multi, buffer_bytes, 1, sizes},
                        {"single", test, ct::Via::tier, 1, buffer_bytes, 1, sizes},
                        {"flow", test, ct::Via::flow, multi, buffer_bytes, 1, sizes}});
    }
    std::vector<Config> sweep_configs;
    for (std::uint32_t n : sweep_counts) {
      for (std::uint32_t b : sweep_bytes) {
        sweep_configs.push_back({"rb" + std::to_string(n), ct::TestKind::consuming, ct::Via::tier, n, b, 1, {sweep_size}});
      }
    }
    groups.push_back(sweep_configs);
    groups.push_back({{"lanes2", ct::TestKind::consuming, ct::Via::tier, multi, buffer_bytes, 2, sizes}});

    StreamRun stream;
    stream.transport = context.transport;
    stream.tuple_bytes = 64;
    stream.tuples = bytes_per_size / 64;
    stream.ring_bytes = std::size_t{multi} * buffer_bytes;
    stream.batch_bytes = buffer_bytes;
    stream.dfi_binary = context.dfi_binary;
    stream.timeout = timeout;

    int run_number = 0;
    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      for (std::size_t g = 0; g < groups.size(); ++g) {
        std::vector<Config> order = groups[g];
        std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>((rep - 1) % order.size()), order.end());
        for (const Config& c : order) {
          const std::string what = std::string(ct::test_name(c.test)) + " via " + std::string(ct::via_name(c.via)) +
                                   ", " + std::to_string(c.buffers) + " x " + std::to_string(c.buffer_bytes) +
                                   " B RBs, " + std::to_string(c.lanes) + " lane(s)";
          context.say(round + ": " + what);
          RankJob job;
          job.nodes = 2;
          job.scenario = name();
          job.timeout = timeout;
          job.params = {{"name", "ct" + std::to_string(++run_number)},
                        {"test", ct::test_name(c.test)},
                        {"via", ct::via_name(c.via)},
                        {"buffers", c.buffers},
                        {"buffer_bytes", c.buffer_bytes},
                        {"lanes", c.lanes},
                        {"sizes", c.sizes},
                        {"bytes_per_size", bytes_per_size},
                        {"max_transfers", context.param("max_transfers")},
                        {"timeout_ms", timeout.count() * 1000}};
          std::map<int, json> reports = run_rank_job(job, context);
          if (!reports.count(0)) throw Error(Errc::protocol, "bench commtier: the SU reported no result (" + what + ")");
          const json& points = reports.at(0).at("sizes");
          const std::string command = rank_job_command(job, context);
          for (const json& point : points) {
            const double mib = point.at("mib_per_s");
            const std::uint64_t size = point.at("bytes");
            if (g < 2) {
              Panel& p = result.panel(g == 0 ? "consuming" : "throughput");
              p.add(c.id, size, mib);
              p.add_command(c.id, command);
              if (g == 0 && c.id == "multi") {
                lanes.add("lanes1", size, mib);
                lanes.add_command("lanes1", command);
              }
            } else if (c.id.rfind("rb", 0) == 0) {
              sweep.add(c.id, c.buffer_bytes, mib);
              sweep.add_command(c.id, command);
            } else {
              lanes.add(c.id, size, mib);
              lanes.add_command(c.id, command);
            }
          }
          std::ostringstream line;
          line << round << ": " << what << ":";
          for (const json& point : points) line << ' ' << point.at("bytes") << " B " << point.at("mib_per_s").get<double>();
          context.say(line.str() + " MiB/s");
        }
        if (g == 0) {  // the link's limit, once per repetition, next to the consuming test
          const StreamResult sr = run_stream_baseline(stream);
          const double mib = sr.gbps * 1e9 / (1 << 20);
          context.say(round + ": " + stream_baseline_name(context.transport) + ": " + std::to_string(mib) + " MiB/s");
          for (const char* panel : {"consuming", "throughput"}) {
            for (std::uint64_t size : sizes) result.panel(panel).add("limit", size, mib);
            result.panel(panel).add_command("limit", sr.command);
          }
        }
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    ct::TestOptions o;
    o.name = params.at("name").get<std::string>();
    o.test = ct::parse_test(params.at("test").get<std::string>());
    o.via = ct::parse_via(params.at("via").get<std::string>());
    o.buffers = {params.at("buffers").get<std::uint32_t>(), params.at("buffer_bytes").get<std::uint32_t>()};
    o.lanes = params.at("lanes");
    o.sizes = params.at("sizes").get<std::vector<std::uint64_t>>();
    o.bytes_per_size = params.at("bytes_per_size");
    o.max_transfers = params.at("max_transfers");
    o.timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
    o.progress = false;
    try {
      cluster::Node node;
      const ct::TestResult r = ct::run_test(node, o, err);
      if (node.rank() == o.su_rank) {
        json sizes = json::array();
        for (const ct::SizeResult& s : r.sizes) {
          sizes.push_back({{"bytes", s.bytes}, {"transfers", s.transfers}, {"seconds", s.seconds},
                           {"mib_per_s", s.mib_per_s}, {"messages", s.messages}, {"buffers", s.buffers}});
        }
        report_rank_result(out, {{"direct", r.direct}, {"sizes", sizes}});
      }
      node.finish();
      return 0;
    } catch (const Error& e) {
      err << "bench commtier rank: " << e.what() << '\n';
      return 1;
    }
  }
};

}  // namespace

std::unique_ptr<Scenario> make_commtier_scenario() { return std::make_unique<CommtierScenario>(); }

}  // namespace dfi::tools::bench
