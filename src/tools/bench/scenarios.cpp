#include "scenarios.hpp"

#include <ostream>

#include "dfi/common/error.hpp"

namespace dfi::tools::bench {

// The registry: one line per scenario.
std::vector<std::unique_ptr<Scenario>> make_scenarios() {
  std::vector<std::unique_ptr<Scenario>> all;
  all.push_back(make_fabric_bw_scenario());
  all.push_back(make_shuffle_bw_scenario());
  all.push_back(make_shuffle_lat_scenario());
  all.push_back(make_shuffle_nm_scenario());
  all.push_back(make_partition_scenario());
  all.push_back(make_memory_scenario());
  all.push_back(make_replicate_scenario());
  all.push_back(make_combiner_scenario());
  all.push_back(make_mpi_p2p_scenario());
  all.push_back(make_mpi_alltoall_scenario());
  all.push_back(make_scale_scenario());
  all.push_back(make_join_scenario());
  all.push_back(make_join_fr_scenario());
  all.push_back(make_ghj_scenario());
  all.push_back(make_agg_scenario());
  all.push_back(make_kv_scenario());
  all.push_back(make_kv_etcd_scenario());
  all.push_back(make_kv_failover_scenario());
  all.push_back(make_kv_jepsen_scenario());
  all.push_back(make_rsi_scenario());
  all.push_back(make_commtier_scenario());
  all.push_back(make_driven_qos_scenario());
  all.push_back(make_driven_shuffle_scenario());
  all.push_back(make_driven_lat_scenario());
  all.push_back(make_driven_restart_scenario());
  all.push_back(make_driven_replicate_scenario());
  all.push_back(make_driven_elastic_scenario());
  all.push_back(make_driven_fairness_scenario());
  all.push_back(make_tpch_q1_scenario());
  all.push_back(make_python_scenario());
  return all;
}

const std::vector<std::unique_ptr<Scenario>>& scenarios() {
  static const std::vector<std::unique_ptr<Scenario>> all = make_scenarios();
  return all;
}

Scenario* find_scenario(const std::string& name) {
  for (const auto& s : scenarios()) {
    if (s->name() == name) return s.get();
  }
  return nullptr;
}

int Scenario::run_rank(const nlohmann::json& params, std::ostream& out, std::ostream& err) {
  (void)params;
  (void)out;
  err << "bench: scenario '" << name() << "' has no rank program\n";
  return 2;
}

nlohmann::json RunContext::param(const std::string& name) const {
  if (scenario == nullptr)
    throw Error(Errc::invalid_argument, "bench: no scenario in the run context");
  for (const Parameter& p : scenario->parameters()) {
    if (p.name != name) continue;
    nlohmann::json value = overrides.contains(name) ? overrides[name] : (quick ? p.quick : p.full);
    if (value.is_object() && value.contains(transport)) value = value[transport];
    return value;
  }
  throw Error(Errc::invalid_argument,
              "bench: scenario '" + scenario->name() + "' has no parameter '" + name + "'");
}

nlohmann::json RunContext::resolved_parameters() const {
  nlohmann::json all = nlohmann::json::object();
  if (scenario == nullptr) return all;
  for (const Parameter& p : scenario->parameters()) all[p.name] = param(p.name);
  return all;
}

void RunContext::say(const std::string& text) const {
  if (progress == nullptr) return;
  *progress << "bench " << (scenario != nullptr ? scenario->name() : std::string("?")) << ": "
            << text << std::endl;
}

}  // namespace dfi::tools::bench
