// What a node shares among the threads of its process: records that never change, fetched with
// one registry request however many threads ask (Node::wait_all_shared), and the state layers
// above keep per node (Node::attachment). One rank, its registry embedded, in this process.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/launch/child_process.hpp"
#include "dfi/registry/client.hpp"

namespace dfi {
namespace {

cluster::NodeOptions one_rank() {
  cluster::NodeOptions options;
  options.rank = 0;
  options.size = 1;
  options.registry = "127.0.0.1:" + std::to_string(launch::pick_free_port());
  options.token = "node-shared-test";
  options.registry_timeout = std::chrono::milliseconds(5000);
  return options;
}

// Runs `ask` on `threads` threads at once and returns what each got (or its error's message).
std::vector<std::string> on_threads(int threads, const std::function<std::string()>& ask) {
  std::vector<std::string> got(threads);
  std::vector<std::thread> group;
  for (int t = 0; t < threads; ++t) {
    group.emplace_back([&, t] {
      try {
        got[t] = ask();
      } catch (const Error& e) {
        got[t] = std::string("error: ") + e.what();
      }
    });
  }
  for (std::thread& thread : group) thread.join();
  return got;
}

TEST(NodeShared, ThreadsWaitingForTheSameRecordsShareOneRequestAndLaterCallsNone) {
  cluster::Node node(one_rank());
  const cluster::RegistryStats before = node.registry_stats();
  std::thread publisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    node.registry().publish("shared/a", "1");
    node.registry().publish("shared/b", "2");
  });
  const auto got = on_threads(4, [&] {
    const auto values = node.wait_all_shared({"shared/a", "shared/b"}, {0, 0});
    return *values[0] + *values[1];
  });
  publisher.join();
  for (const std::string& g : got) EXPECT_EQ(g, "12");
  // Two publishes and one wait (held well within its first slice): not one wait per thread.
  EXPECT_EQ(node.registry_stats().requests - before.requests, 3u);
  const std::uint64_t now = node.registry_stats().requests;
  EXPECT_EQ(*node.wait_all_shared({"shared/a", "shared/b"}, {0, 0})[1], "2");
  EXPECT_EQ(node.registry_stats().requests, now) << "a later call for the same records asked the registry again";
  // Other names are another request.
  EXPECT_EQ(*node.wait_all_shared({"shared/a"}, {0})[0], "1");
  EXPECT_EQ(node.registry_stats().requests, now + 1);
  node.finish();
}

TEST(NodeShared, AnErrorReachesEveryWaitingThreadAndIsNotKept) {
  cluster::Node node(one_rank());
  const auto got = on_threads(3, [&] {
    return *node.wait_all_shared({"shared/never"}, {-1}, std::chrono::milliseconds(300))[0];
  });
  for (const std::string& g : got) {
    EXPECT_NE(g.find("error: "), std::string::npos) << g;
    EXPECT_NE(g.find("shared/never"), std::string::npos) << g;
  }
  node.registry().publish("shared/never", "late");
  EXPECT_EQ(*node.wait_all_shared({"shared/never"}, {-1}, std::chrono::milliseconds(300))[0], "late");
  node.finish();
}

TEST(NodeShared, AnAttachmentIsOnePerKeyUntilDetached) {
  cluster::Node node(one_rank());
  std::atomic<int> made{0};
  auto make = [&] {
    ++made;
    return std::static_pointer_cast<void>(std::make_shared<int>(7));
  };
  const auto got = on_threads(4, [&] { return std::to_string(reinterpret_cast<std::uintptr_t>(node.attachment("k", make).get())); });
  for (const std::string& g : got) EXPECT_EQ(g, got.front());
  EXPECT_EQ(made.load(), 1);
  const std::shared_ptr<void> first = node.attachment("k", make);
  node.detach("k", &made);  // not the object there: stays
  EXPECT_EQ(node.attachment("k", make), first);
  node.detach("k", first.get());
  EXPECT_NE(node.attachment("k", make), first);
  EXPECT_EQ(made.load(), 2);
  node.finish();
}

}  // namespace
}  // namespace dfi
