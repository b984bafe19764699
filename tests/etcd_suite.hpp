// The etcd cluster of a test suite that runs against etcd (tests/registry, tests/cluster): three
// members on loopback ports, started once per suite and killed after it. Where etcd is missing the
// tests skip, saying why.
//
//   static void SetUpTestSuite() { testing::EtcdSuite::start(); }
//   static void TearDownTestSuite() { testing::EtcdSuite::stop(); }
//   void SetUp() override { if (auto why = testing::EtcdSuite::missing(); !why.empty()) GTEST_SKIP() << why; }
#pragma once

#include <string>

#include "dfi/launch/etcd_cluster.hpp"

namespace dfi::testing {

class EtcdSuite {
 public:
  static void start() {
    if (launch::etcd_unavailable().empty()) cluster() = new launch::EtcdCluster(3, "/dev/shm");
  }
  static void stop() {
    delete cluster();
    cluster() = nullptr;
  }
  // Why the suite's tests cannot run (etcd is missing), or empty.
  static std::string missing() {
    if (std::string why = launch::etcd_unavailable(); !why.empty()) return "etcd is missing: " + why;
    return cluster() == nullptr ? "the suite's etcd cluster did not start" : "";
  }
  static launch::EtcdCluster*& cluster() {
    static launch::EtcdCluster* running = nullptr;
    return running;
  }
};

}  // namespace dfi::testing
