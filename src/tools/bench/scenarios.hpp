// Factories of every scenario; make_scenarios() in scenarios.cpp lists them.
#pragma once

#include <memory>
#include <vector>

#include "scenario.hpp"

namespace dfi::tools::bench {

std::unique_ptr<Scenario> make_fabric_bw_scenario();    // fabric_bw.cpp
std::unique_ptr<Scenario> make_shuffle_bw_scenario();   // shuffle_bw.cpp
std::unique_ptr<Scenario> make_shuffle_lat_scenario();  // shuffle_lat.cpp
std::unique_ptr<Scenario> make_shuffle_nm_scenario();   // shuffle_nm.cpp
std::unique_ptr<Scenario> make_partition_scenario();    // partition_bench.cpp
std::unique_ptr<Scenario> make_memory_scenario();       // memory_use.cpp
std::unique_ptr<Scenario> make_replicate_scenario();    // replicate_bench.cpp
std::unique_ptr<Scenario> make_combiner_scenario();     // combiner_bench.cpp
std::unique_ptr<Scenario> make_mpi_p2p_scenario();       // mpi_p2p_bench.cpp
std::unique_ptr<Scenario> make_mpi_alltoall_scenario();  // mpi_alltoall_bench.cpp
std::unique_ptr<Scenario> make_join_scenario();          // join_bench.cpp
std::unique_ptr<Scenario> make_join_fr_scenario();       // join_bench.cpp
std::unique_ptr<Scenario> make_ghj_scenario();           // join_bench.cpp
std::unique_ptr<Scenario> make_agg_scenario();           // agg_bench.cpp
std::unique_ptr<Scenario> make_kv_scenario();            // kv_bench.cpp
std::unique_ptr<Scenario> make_kv_etcd_scenario();       // kv_bench.cpp
std::unique_ptr<Scenario> make_kv_failover_scenario();   // kv_bench.cpp
std::unique_ptr<Scenario> make_kv_jepsen_scenario();     // kv_bench.cpp
std::unique_ptr<Scenario> make_rsi_scenario();           // rsi_bench.cpp
std::unique_ptr<Scenario> make_python_scenario();        // python_bench.cpp
std::unique_ptr<Scenario> make_scale_scenario();         // scale_bench.cpp
std::unique_ptr<Scenario> make_commtier_scenario();      // commtier_bench.cpp
std::unique_ptr<Scenario> make_driven_lat_scenario();    // driven_lat_bench.cpp
std::unique_ptr<Scenario> make_driven_restart_scenario();  // driven_restart_bench.cpp
std::unique_ptr<Scenario> make_driven_qos_scenario();    // driven_qos_bench.cpp
std::unique_ptr<Scenario> make_driven_shuffle_scenario();  // driven_shuffle_bench.cpp
std::unique_ptr<Scenario> make_driven_replicate_scenario();  // driven_replicate_bench.cpp
std::unique_ptr<Scenario> make_driven_fairness_scenario();   // driven_replicate_bench.cpp
std::unique_ptr<Scenario> make_driven_elastic_scenario();    // driven_elastic_bench.cpp
std::unique_ptr<Scenario> make_tpch_q1_scenario();           // tpch_q1_bench.cpp

// A fresh instance of every scenario, in listing order.
std::vector<std::unique_ptr<Scenario>> make_scenarios();

}  // namespace dfi::tools::bench
