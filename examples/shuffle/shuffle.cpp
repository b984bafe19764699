// A two-rank key shuffle, built against an installed DFI (see README.md here):
//   dfi cluster run --nodes 2 --transport shm -- ./shuffle
// Each rank runs one source thread (pushes kTuples tuples) and one target (counts what its keys
// bring); rank 0 checks that every tuple arrived exactly once and prints the result.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "dfi/cluster/node.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/registry/client.hpp"
#include "dfi/version.hpp"

struct Tuple {
  std::uint64_t key, value;
};
constexpr std::uint64_t kTuples = 100000;  // per source

int main() try {
  dfi::cluster::Node node;  // rank, size and registry from `dfi cluster run`
  if (node.size() != 2) {
    throw std::runtime_error("runs on exactly 2 ranks (dfi cluster run --nodes 2 -- ./shuffle), "
                             "not " + std::to_string(node.size()));
  }
  const std::string rank = std::to_string(node.rank());
  dfi::flow::FlowSpec spec;
  spec.name = "example";
  spec.sources = {{0, 0}, {1, 0}};  // (rank, thread)
  spec.targets = {{0, 0}, {1, 0}};  // (rank, target id)
  using dfi::flow::Type;
  spec.schema = dfi::flow::Schema({{"key", Type::uint64}, {"value", Type::uint64}});
  spec.key_column = "key";          // routed by key hash
  if (node.rank() == 0) dfi::flow::create_flow(node, spec);

  dfi::flow::ShuffleTarget in(node, "example", 0);  // opened first: the source waits for it
  std::string source_error;
  std::thread source([&] {
    try {
      dfi::fabric::Worker worker(node.fabric(), "example source");  // one per thread
      dfi::flow::ShuffleSource out(node, worker, "example", 0);
      for (std::uint64_t i = 0; i < kTuples; ++i) {
        const std::uint64_t key = static_cast<std::uint64_t>(node.rank()) * kTuples + i;
        if (dfi::Status s = out.push(Tuple{key, key * 2}); !s) {
          source_error = s.message();  // peer_failed, timeout, ...
          return;
        }
      }
      if (dfi::Status s = out.close(); !s) source_error = s.message();
    } catch (const std::exception& e) {
      source_error = e.what();
    }
  });
  std::uint64_t count = 0, key_sum = 0, corrupted = 0;
  dfi::flow::TupleBatch batch;
  dfi::Status s;
  while ((s = in.consume(batch)) && !batch.empty()) {  // empty batch: every source closed
    for (const Tuple& t : batch.as<Tuple>()) {
      key_sum += t.key;
      if (t.value != t.key * 2) ++corrupted;
    }
    count += batch.count;
  }
  source.join();
  if (!s) throw std::runtime_error(s.message());
  if (!source_error.empty()) throw std::runtime_error("source: " + source_error);
  if (corrupted != 0) throw std::runtime_error(std::to_string(corrupted) + " tuples corrupted");
  std::printf("rank %s: received %llu tuples\n", rank.c_str(),
              static_cast<unsigned long long>(count));

  node.registry().publish("example/" + rank, std::to_string(count) + " " + std::to_string(key_sum));
  node.barrier("example/done");
  int status = 0;
  if (node.rank() == 0) {
    std::uint64_t total = 0, sum = 0;
    for (int r = 0; r < 2; ++r) {
      const std::string result = node.registry().lookup("example/" + std::to_string(r));
      std::size_t end = 0;
      total += std::stoull(result, &end);
      sum += std::stoull(result.substr(end));
    }
    const std::uint64_t n = 2 * kTuples;
    const bool ok = total == n && sum == n * (n - 1) / 2;
    std::printf("DFI %s shuffle: %llu of %llu tuples, each exactly once: %s\n", DFI_VERSION_STRING,
                static_cast<unsigned long long>(total), static_cast<unsigned long long>(n),
                ok ? "yes" : "NO");
    status = ok ? 0 : 1;
  }
  node.finish();
  return status;
} catch (const std::exception& e) {
  std::fprintf(stderr, "shuffle: %s\n", e.what());
  return 1;
}
