#include "demo.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}

void keep_max(std::atomic<std::size_t>& peak, std::size_t value) {
  std::size_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

struct Totals {
  std::atomic<std::uint64_t> tuples{0};
  std::atomic<std::uint64_t> checksum{0};
};

}  // namespace

int run_demo(const DemoOptions& options, std::ostream& out, std::ostream& err) {
  if (options.tuple_bytes < 16 || options.tuple_bytes % 8 != 0) {
    err << "dfi demo: --tuple-bytes must be a multiple of 8 and at least 16\n";
    return 2;
  }
  cluster::Node node;
  const int ranks = node.size();
  flow::FlowSpec spec;
  spec.name = "demo";
  for (int r = 0; r < ranks; ++r) {
    for (int t = 0; t < options.sources_per_rank; ++t) spec.sources.push_back({r, t});
    for (int t = 0; t < options.targets_per_rank; ++t) spec.targets.push_back({r, t});
  }
  std::vector<flow::Column> columns{{"key", flow::Type::uint64}, {"value", flow::Type::uint64}};
  if (options.tuple_bytes > 16) {
    columns.push_back({"payload", flow::Type::chars, static_cast<std::uint32_t>(options.tuple_bytes - 16)});
  }
  spec.schema = flow::Schema(columns);
  spec.key_column = "key";
  if (node.rank() == 0) {
    flow::create_flow(node, spec);
    out << "dfi demo: shuffling " << spec.sources.size() * options.tuples_per_source << " tuples of "
        << options.tuple_bytes << " B from " << spec.sources.size() << " sources to " << spec.targets.size()
        << " targets on " << ranks << " ranks (" << node.fabric().describe() << ")\n";
    out.flush();
  }

  Totals sent, received;
  std::atomic<std::size_t> peak_memory{0};  // flow buffers of this process while the flow runs
  std::mutex error_mutex;
  std::string first_error;
  auto record_error = [&](const std::string& what) {
    std::lock_guard lock(error_mutex);
    if (first_error.empty()) first_error = what;
  };
  node.barrier("demo/start");
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < options.targets_per_rank; ++t) {
    threads.emplace_back([&, t] {
      try {
        flow::ShuffleTarget target(node, "demo", t);
        flow::TupleBatch batch;
        std::uint64_t tuples = 0, checksum = 0;
        Status s;
        while ((s = target.consume(batch)) && !batch.empty()) {
          for (std::size_t i = 0; i < batch.count; ++i) {
            std::uint64_t kv[2];
            std::memcpy(kv, batch.tuple(i), sizeof kv);
            checksum += mix(kv[0]) ^ kv[1];
          }
          tuples += batch.count;
        }
        if (!s) record_error(s.message());
        keep_max(peak_memory, flow::memory_bytes("demo"));
        received.tuples += tuples;
        received.checksum += checksum;
      } catch (const std::exception& e) {
        record_error(e.what());
      }
    });
  }
  for (int t = 0; t < options.sources_per_rank; ++t) {
    threads.emplace_back([&, t] {
      try {
        fabric::Worker worker(node.fabric(), "demo source " + std::to_string(t));
        flow::ShuffleSource source(node, worker, "demo", t);
        std::vector<std::byte> tuple(options.tuple_bytes, std::byte{0x2a});
        const std::uint64_t first = (std::uint64_t(node.rank()) * options.sources_per_rank + t) * options.tuples_per_source;
        std::uint64_t checksum = 0;
        for (std::uint64_t i = 0; i < options.tuples_per_source; ++i) {
          const std::uint64_t kv[2] = {first + i, mix(first + i)};
          std::memcpy(tuple.data(), kv, sizeof kv);
          if (Status s = source.push(tuple.data(), tuple.size()); !s) return record_error(s.message());
          checksum += mix(kv[0]) ^ kv[1];
        }
        keep_max(peak_memory, flow::memory_bytes("demo"));
        if (Status s = source.close(); !s) return record_error(s.message());
        sent.tuples += options.tuples_per_source;
        sent.checksum += checksum;
      } catch (const std::exception& e) {
        record_error(e.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!first_error.empty()) {
    err << "dfi demo: rank " << node.rank() << ": " << first_error << '\n';
    return 1;
  }

  const double bytes_in = static_cast<double>(received.tuples.load() * options.tuple_bytes);
  char line[256];
  std::snprintf(line, sizeof line,
                "rank %d: sent %llu, received %llu tuples in %.2f s: %.2f M tuples/s, %.3f GB/s in, "
                "flow buffers %.1f MiB\n",
                node.rank(), static_cast<unsigned long long>(sent.tuples.load()),
                static_cast<unsigned long long>(received.tuples.load()), seconds,
                received.tuples.load() / seconds / 1e6, bytes_in / seconds / 1e9,
                peak_memory.load() / 1048576.0);
  out << line;
  out.flush();

  std::ostringstream mine;
  mine << sent.tuples.load() << ' ' << sent.checksum.load() << ' ' << received.tuples.load() << ' '
       << received.checksum.load() << ' ' << seconds;
  node.registry().publish("demo/result/" + std::to_string(node.rank()), mine.str());
  node.barrier("demo/done");
  int status = 0;
  if (node.rank() == 0) {
    std::uint64_t sent_tuples = 0, sent_sum = 0, got_tuples = 0, got_sum = 0;
    double slowest = 0;
    for (int r = 0; r < ranks; ++r) {
      std::istringstream in(node.registry().lookup("demo/result/" + std::to_string(r)));
      std::uint64_t a, b, c, d;
      double s;
      in >> a >> b >> c >> d >> s;
      sent_tuples += a;
      sent_sum += b;
      got_tuples += c;
      got_sum += d;
      slowest = std::max(slowest, s);
    }
    const bool ok = sent_tuples == got_tuples && sent_sum == got_sum;
    std::snprintf(line, sizeof line,
                  "cluster: %llu tuples sent, %llu received, checksums %s: %s; %.2f M tuples/s, %.3f GB/s aggregate\n",
                  static_cast<unsigned long long>(sent_tuples), static_cast<unsigned long long>(got_tuples),
                  sent_sum == got_sum ? "match" : "DIFFER", ok ? "every tuple arrived exactly once" : "VERIFICATION FAILED",
                  got_tuples / slowest / 1e6, got_tuples * double(options.tuple_bytes) / slowest / 1e9);
    out << line;
    status = ok ? 0 : 1;
  }
  node.finish();
  return status;
}

}  // namespace dfi::tools
