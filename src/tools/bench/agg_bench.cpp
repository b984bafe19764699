// Scenario agg (001 Fig 8b): RDMA aggregation vs hierarchical aggregation (ops::run_aggregation),
// 4 ranks, GROUP BY key with sum, count, min, max and avg of a value, on generated data
// (src/tools/agg_data.hpp): `tuples` tuples of 16 B, keys uniform over 1 .. tens of millions of
// groups, and Zipf-distributed. Both algorithms run on the same data, alternating, one fresh
// cluster per run; their group counts and checksums must equal the single-node reference
// (reference_aggregation of agg_command.hpp, computed once per data set; a difference fails the
// run). Runtime: from a cluster barrier after data generation and the aggregation's open
// (ops::Aggregation: threads started, every source connected to every target) to the slowest
// rank's last result row. The open is measured too (slowest rank) and reported in panel "open".
#include <algorithm>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "../agg_command.hpp"
#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;

constexpr int kRanks = 4;

class AggScenario : public Scenario {
 public:
  std::string name() const override { return "agg"; }
  std::string title() const override {
    return "RDMA aggregation vs hierarchical aggregation over group counts and skew, 4 ranks";
  }
  std::string description() const override {
    return "GROUP BY key computing sum, count, min, max and avg of a value over `tuples` generated 16 B "
           "tuples on 4 ranks (one aggregation thread per rank). rdma: each thread pre-aggregates in a "
           "cache-sized table (cache_groups groups) and ships it, when full, as partial rows routed by "
           "key to the thread that owns the key's partition (adaptively: a table that filled with a hit rate "
           "below pass_through_below starts a window in which tuples are shipped unaggregated) (a combiner flow with one target per "
           "thread of every rank); all ranks post-aggregate their partitions in parallel. "
           "hierarchical: each thread aggregates its whole fragment, then ships it once to rank 0, "
           "which unions and post-aggregates every group alone (a combiner flow with one target). "
           "Same data for both; group counts and checksums must equal a single-node reference. The "
           "aggregation's flow is opened (ops::Aggregation) before the start barrier and timed separately.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuples", 1 << 22, 1 << 25, "input tuples, all ranks together"},
        {"few_groups", json::array({1, 1000}), json::array({1, 1000}),
         "uniform keys, few groups (target: rdma no slower)"},
        {"many_groups", json::array({1 << 20}), json::array({1 << 22, 1 << 24}),
         "uniform keys, many groups (target: rdma >= 2x faster)"},
        {"zipf_groups", json::array({1 << 20}), json::array({1 << 24}),
         "Zipf keys over this many groups (target: rdma >= 2x faster)"},
        {"zipf", 1.0, 1.0, "Zipf exponent of the skewed runs"},
        {"cache_groups", 16384, 16384, "rdma: groups of a thread's pre-aggregation table"},
        {"pass_through_below", 0.25, 0.25,
         "rdma: hit rate of a full pre-aggregation table below which tuples pass through unaggregated for a while"},
        {"timeout_s", 300, 1800, "bound of each DFI cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"hierarchical",
             "DFI's hierarchical aggregation (ops::run_aggregation, hierarchical): full local "
             "aggregation per thread, union and post-aggregation at rank 0; same data"}};
  }

  void run(RunContext& context, Result& result) override {
    const std::uint64_t tuples = context.param("tuples");
    const std::vector<std::uint64_t> few = context.param("few_groups");
    const std::vector<std::uint64_t> many = context.param("many_groups");
    const std::vector<std::uint64_t> zipf_groups = context.param("zipf_groups");
    const double zipf = context.param("zipf");
    const std::size_t cache_groups = context.param("cache_groups");
    const double pass_through_below = context.param("pass_through_below");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("hierarchical", baselines()[0].description);
    result.add_note("Both algorithms are DFI's own, on the same combiner flow machinery: the comparison "
                    "is between the algorithms (001 Fig 8b), not against another system.");
    result.add_note("Every run's group count and checksum equal the single-node reference (an "
                    "std::unordered_map aggregation of the same generated data).");
    result.add_note("Runtimes start after the flow is open (ops::Aggregation, then a barrier); panel "
                    "\"open\" shows the open (rdma: a target per thread of every rank; hierarchical: one).");
    struct Set {
      std::string panel;
      std::string title;
      std::vector<std::uint64_t> groups;
      double zipf;
      double target;
    };
    const std::vector<Set> sets = {
        {"few_groups", "Few groups, uniform keys (rdma no slower)", few, 0, 1.0},
        {"many_groups", "Many groups, uniform keys (rdma >= 2x faster)", many, 0, 0.5},
        {"zipf", "Zipf keys (exponent " + std::to_string(zipf).substr(0, 4) + ", rdma >= 2x faster)",
         zipf_groups, zipf, 0.5},
    };
    for (const Set& set : sets) {
      if (set.groups.empty()) continue;
      Panel& p = result.panel(set.panel, set.title, {"groups", "", "log10"}, {"runtime", "s"}, Better::lower);
      p.series("rdma", Role::dfi, "RDMA aggregation (cache-sized pre-aggregation, partitioned post-aggregation)");
      p.series("hierarchical", Role::baseline, "hierarchical aggregation (local, then union at rank 0)");
      p.compare("rdma", "hierarchical", set.target);
    }
    Panel& open = result.panel("open", "Opening the aggregation's flow, before the timed run (slowest rank)",
                               {"groups", "", "log10"}, {"open time", "s"}, Better::lower);
    open.series("rdma", Role::dfi, "RDMA aggregation: one target per thread of every rank");
    open.series("hierarchical", Role::baseline, "hierarchical aggregation: one target at rank 0");
    open.compare("rdma", "hierarchical");
    // The single-node reference of each data set, computed on its first run.
    std::map<std::pair<std::uint64_t, double>, ReferenceAggregation> references;
    auto reference = [&](std::uint64_t groups, double skew) -> const ReferenceAggregation& {
      const auto key = std::make_pair(groups, skew);
      if (!references.count(key)) {
        context.say("single-node reference: " + std::to_string(groups) + " groups" +
                    (skew > 0 ? ", zipf" : ""));
        AggCommandOptions options;
        options.tuples = tuples;
        options.groups = groups;
        options.zipf = skew;
        references[key] = reference_aggregation(options, kRanks);
      }
      return references.at(key);
    };
    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (const Set& set : sets) {
        for (std::uint64_t groups : set.groups) {
          const ReferenceAggregation& expected = reference(groups, set.zipf);
          auto one = [&](const std::string& algorithm) {
            const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) +
                                      ", " + set.panel + ", " + std::to_string(groups) + " groups, " + algorithm;
            context.say(round);
            RankJob job;
            job.nodes = kRanks;
            job.scenario = name();
            job.timeout = timeout;
            job.params = {{"algorithm", algorithm},
                          {"tuples", tuples},
                          {"groups", groups},
                          {"zipf", set.zipf},
                          {"cache_groups", cache_groups},
                          {"pass_through_below", pass_through_below}};
            const std::string command = rank_job_command(job, context);
            std::map<int, json> reports = run_rank_job(job, context);
            if (!reports.count(0)) throw Error(Errc::protocol, "bench agg: rank 0 reported no result");
            const json& r = reports.at(0);
            if (r.at("checksum").get<std::uint64_t>() != expected.checksum ||
                r.at("groups").get<std::uint64_t>() != expected.groups) {
              throw Error(Errc::protocol, "bench agg: " + algorithm + " differs from the single-node reference at " +
                                              std::to_string(groups) + " groups (" + set.panel + "): " +
                                              r.at("groups").dump() + " groups, checksum " + r.at("checksum").dump() +
                                              "; expected " + std::to_string(expected.groups) + ", " +
                                              std::to_string(expected.checksum));
            }
            if (r.at("input_tuples").get<std::uint64_t>() != tuples) {
              throw Error(Errc::protocol, "bench agg: " + algorithm + " aggregated " + r.at("input_tuples").dump() +
                                              " tuples, not " + std::to_string(tuples));
            }
            const double seconds = r.at("seconds");
            const double open_seconds = r.at("open_seconds");
            context.say(round + ": " + std::to_string(seconds) + " s (flow opened before, in " +
                        std::to_string(open_seconds) + " s); " + r.at("shipped_rows").dump() + " partial rows shipped, " +
                        r.at("passed_tuples").dump() + " tuples passed through");
            Panel& p = result.panel(set.panel);
            p.add(algorithm, groups, seconds);
            p.add_command(algorithm, command);
            open.add(algorithm, groups, open_seconds);
            open.add_command(algorithm, command);
          };
          run_alternating(rep, [&] { one("rdma"); }, [&] { one("hierarchical"); });
        }
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    AggCommandOptions options;
    options.algorithm = params.at("algorithm").get<std::string>();
    options.tuples = params.at("tuples");
    options.groups = params.at("groups");
    options.zipf = params.at("zipf");
    options.cache_groups = params.at("cache_groups");
    options.pass_through_below = params.at("pass_through_below");
    try {
      cluster::Node node;
      const ops::AggregationResult all = run_generated_aggregation(node, options);
      if (node.rank() == 0) {
        report_rank_result(out, {{"seconds", all.seconds},
                                 {"open_seconds", all.open_seconds},
                                 {"groups", all.groups},
                                 {"checksum", all.checksum},
                                 {"input_tuples", all.input_tuples},
                                 {"shipped_rows", all.shipped_rows},
                                 {"passed_tuples", all.passed_tuples}});
      }
      node.finish();
    } catch (const Error& e) {
      err << "bench agg rank: " << e.what() << '\n';
      return 1;
    }
    return 0;
  }
};

}  // namespace

std::unique_ptr<Scenario> make_agg_scenario() { return std::make_unique<AggScenario>(); }

}  // namespace dfi::tools::bench
