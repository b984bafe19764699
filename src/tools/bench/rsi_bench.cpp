// Scenario rsi (001 Fig 6): distributed transactions per second vs client threads, RSI (one-sided,
// storage servers spend no CPU) vs traditional SI with two-phase commit over messages, on the
// bank and the checkout workload (apps::rsi::run_workload). 2 storage servers (ranks 0 and 1);
// the client threads are split over 2 client ranks (1 thread: one rank). Both protocols run the
// same workload on the same cluster shape, alternating, one fresh cluster per run; every run's
// checks (bank total, checkout units and orders, no lock left) must hold or the run fails.
#include <map>
#include <sstream>
#include <ostream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/apps/rsi/workload.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;

constexpr int kServers = 2;
constexpr int kClientRanks = 2;

class RsiScenario : public Scenario {
 public:
  std::string name() const override { return "rsi"; }
  std::string title() const override {
    return "RSI (one-sided) vs 2PC-SI transactions/s over client threads, bank and checkout";
  }
  std::string description() const override {
    return "Snapshot-isolation transactions on 2 storage servers (ranks 0 and 1) with the client threads "
           "split over 2 client ranks. rsi: reads are one-sided gets, commit is a compare-and-swap per "
           "written record, a commit record put, payload puts and a compare-and-swap per record that "
           "unlocks (the servers' CPUs do nothing). 2pc: every read is a request, commit is prepare + "
           "commit messages that the servers' CPUs validate, lock and install. Same timestamp service, "
           "same records, same workload. bank: transfers between `accounts` 8 B accounts (uniform). "
           "checkout: read 3 products, insert an order and 3 order lines, update 3 stock records, "
           "`products` products, `record_bytes` records. Commits/s and aborts/s from the start barrier "
           "until every client left; every run's invariant checks must hold.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"client_threads", json::array({1, 4}), json::array({1, 2, 4, 8}), "client threads in all"},
        {"workloads", json::array({"bank", "checkout"}), json::array({"bank", "checkout"}), "bank and/or checkout"},
        {"seconds", 1, 5, "run length of one measurement"},
        {"accounts", 100000, 100000, "bank: accounts"},
        {"products", 1000, 10000, "checkout: products (and stock records)"},
        {"record_bytes", 1024, 1024, "checkout: payload bytes of every record"},
        {"order_slots", 256, 2048, "checkout: orders in each client's insert ring"},
        {"timeout_s", 120, 300, "bound of each cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"2pc",
             "traditional SI with two-phase commit over two-sided messages (apps::rsi Protocol::two_pc): "
             "storage servers' CPUs serve reads, prepares and commits; same timestamps, data and workload"}};
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::size_t> threads = context.param("client_threads");
    const std::vector<std::string> workloads = context.param("workloads");
    const double seconds = context.param("seconds");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("2pc", baselines()[0].description);
    result.add_note("2 vCPUs shared by every rank: the storage servers' 2PC threads and the clients compete for "
                    "the same cores, as do the client threads beyond 2 (the paper ran 1-70 threads on many machines).");
    for (const std::string& w : workloads) {
      (void)apps::rsi::parse_workload(w);
      Panel& p = result.panel(w, w + ": commits/s (target: rsi >= 5x 2pc at its best point)", {"client threads", "", "log2"},
                              {"commits", "1/s", "log10"}, Better::higher);
      p.series("rsi", Role::dfi, "RSI (one-sided compare-and-swap)");
      p.series("2pc", Role::baseline, "2PC-SI (messages)");
      p.compare("rsi", "2pc", 5.0);
      Panel& a = result.panel(w + "_aborts", w + ": aborts/s", {"client threads", "", "log2"}, {"aborts", "1/s"},
                              Better::lower);
      a.series("rsi", Role::dfi, "RSI aborts");
      a.series("2pc", Role::baseline, "2PC-SI aborts");
      a.compare("rsi", "2pc");
    }
    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (const std::string& w : workloads) {
        for (std::size_t n : threads) {
          auto one = [&](const std::string& protocol) {
            const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ", " +
                                      w + ", " + std::to_string(n) + " client thread(s), " + protocol;
            context.say(round);
            const std::size_t ranks = n < kClientRanks ? 1 : kClientRanks;
            if (n % ranks != 0) throw Error(Errc::invalid_argument, "bench rsi: client_threads must be 1 or even");
            RankJob job;
            job.nodes = static_cast<int>(kServers + ranks);
            job.scenario = name();
            job.timeout = timeout;
            job.params = {{"workload", w},
                          {"protocol", protocol},
                          {"threads", n / ranks},
                          {"seconds", seconds},
                          {"accounts", context.param("accounts")},
                          {"products", context.param("products")},
                          {"record_bytes", context.param("record_bytes")},
                          {"order_slots", context.param("order_slots")}};
            const std::string command = rank_job_command(job, context);
            std::map<int, json> reports = run_rank_job(job, context);
            if (!reports.count(0)) throw Error(Errc::protocol, "bench rsi: rank 0 reported no result (" + round + ")");
            const json& r = reports.at(0);
            const double s = r.at("seconds");
            const double commits = r.at("commits").get<double>() / s, aborts = r.at("aborts").get<double>() / s;
            context.say(round + ": " + std::to_string(commits) + " commits/s, " + std::to_string(aborts) + " aborts/s");
            result.panel(w).add(protocol, n, commits);
            result.panel(w).add_command(protocol, command);
            result.panel(w + "_aborts").add(protocol, n, aborts);
          };
          run_alternating(rep, [&] { one("rsi"); }, [&] { one("2pc"); });
        }
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    apps::rsi::TxnOptions o;
    o.workload = apps::rsi::parse_workload(params.at("workload").get<std::string>());
    o.protocol = apps::rsi::parse_protocol(params.at("protocol").get<std::string>());
    o.servers = kServers;
    o.threads = params.at("threads");
    o.seconds = params.at("seconds");
    o.progress = false;
    if (o.workload == apps::rsi::Workload::bank) {
      o.records = params.at("accounts");
    } else {
      o.records = params.at("products");
      o.payload_bytes = params.at("record_bytes");
      o.order_slots = params.at("order_slots");
    }
    try {
      cluster::Node node;
      std::ostringstream summary;  // the run's summary and checks, on stderr (stdout carries the result)
      const apps::rsi::TxnResult r = apps::rsi::run_workload(node, o, summary, err);
      if (node.rank() == 0) {
        err << summary.str();
        if (r.code != 0) {
          err << "bench rsi rank: the run's checks failed\n";
          return 1;
        }
        report_rank_result(out, {{"seconds", r.seconds}, {"commits", r.commits}, {"aborts", r.aborts}, {"clients", r.clients}});
      }
      return r.code;
    } catch (const Error& e) {
      err << "bench rsi rank: " << e.what() << '\n';
      return 1;
    }
  }
};

}  // namespace

std::unique_ptr<Scenario> make_rsi_scenario() { return std::make_unique<RsiScenario>(); }

}  // namespace dfi::tools::bench
