// The driver of the stream baselines: starts the receiver and the sender (stream_sides.cpp) as
// two processes, waits for both, checks what arrived.
#include "stream_baseline.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "cluster_job.hpp"
#include "dfi/common/error.hpp"
#include "process.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

constexpr auto kReceiverStartBound = std::chrono::seconds(10);

bool is_tcp(const std::string& transport) {
  stream_baseline_name(transport);  // throws for anything but tcp and shm
  return transport == "tcp";
}

// A fresh shm_open name per run; removed when the run ends, also when the consumer did not.
class RingName {
 public:
  RingName() {
    static std::atomic<int> runs{0};
    name_ = "/dfi-bench-ring-" + std::to_string(::getpid()) + "-" + std::to_string(++runs);
  }
  ~RingName() { ::shm_unlink(name_.c_str()); }
  RingName(const RingName&) = delete;
  RingName& operator=(const RingName&) = delete;
  const std::string& get() const { return name_; }

 private:
  std::string name_;
};

// Waits for both sides, at most `timeout` each. A side that failed leaves its peer waiting for
// nothing (a reader for a writer, a producer for ring space): the peer is stopped at once.
std::pair<launch::ChildResult, launch::ChildResult> wait_both(launch::ChildProcess& receiver,
                                                              launch::ChildProcess& sender,
                                                              std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (receiver.running() && sender.running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const std::chrono::milliseconds now(0);
  if (!sender.running()) {
    launch::ChildResult s = sender.wait(timeout);
    launch::ChildResult r = receiver.wait(s.exit_code == 0 ? timeout : now);
    return {std::move(r), std::move(s)};
  }
  launch::ChildResult r = receiver.wait(timeout);
  launch::ChildResult s = sender.wait(r.exit_code == 0 ? timeout : now);
  return {std::move(r), std::move(s)};
}

// The receiver's result line (report_rank_result), or null.
nlohmann::json result_line(const std::string& output) {
  nlohmann::json result;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(kRankResultMarker, 0) != 0) continue;
    result =
        nlohmann::json::parse(line.substr(std::string(kRankResultMarker).size()), nullptr, false);
  }
  return result.is_discarded() ? nlohmann::json() : result;
}

}  // namespace

bool is_partition_copy(const std::string& copy) { return copy == "partition" || copy == "partition-direct"; }

std::vector<std::string> stream_side_argv(const std::string& binary, const StreamSide& side) {
  std::vector<std::string> argv = {binary, "bench-stream", side.side, "--tuple-bytes",
                                   std::to_string(side.tuple_bytes)};
  if (side.side == "tcp-writer" || side.side == "ring-producer")
    argv.insert(argv.end(), {"--tuples", std::to_string(side.tuples)});
  if (side.side.starts_with("tcp")) {
    argv.insert(argv.end(), {"--port", std::to_string(side.port)});
  } else {
    argv.insert(argv.end(), {"--name", side.name, "--ring-bytes", std::to_string(side.ring_bytes),
                             "--batch-bytes", std::to_string(side.batch_bytes)});
    const bool partition = is_partition_copy(side.copy);
    if (side.side == "ring-producer" || partition) argv.insert(argv.end(), {"--copy", side.copy});
    if (partition) argv.insert(argv.end(), {"--targets", std::to_string(side.targets)});
  }
  argv.insert(argv.end(), {"--wait-ms", std::to_string(side.wait.count())});
  return argv;
}

std::string stream_baseline_name(const std::string& transport, const std::string& copy) {
  if (transport == "tcp") return "TCP socket stream";
  if (transport == "shm") {
    if (copy == "partition") return "hand-written partitioner into shared-memory rings, write-combine lines";
    if (copy == "partition-direct") return "hand-written partitioner into shared-memory rings, rows straight";
    return copy == "bulk" ? "shared-memory ring, memcpy of whole runs"
                          : "shared-memory ring, compile-time-width copy per tuple";
  }
  throw Error(Errc::invalid_argument,
              "bench: the stream baseline runs over tcp or shm, not '" + transport + "'");
}

StreamResult run_stream_baseline(const StreamRun& run) {
  const bool tcp = is_tcp(run.transport);
  const std::string what = stream_baseline_name(run.transport, run.copy) + " (" +
                           std::to_string(run.tuple_bytes) + " B tuples)";
  if (run.dfi_binary.empty())
    throw Error(Errc::invalid_argument, "bench: the path of the dfi binary is unknown");
  if (run.tuple_bytes < 8 || run.tuple_bytes % 8 != 0 || run.tuples == 0) {
    throw Error(Errc::invalid_argument,
                "bench: " + what + ": tuples are a multiple of 8 bytes, at least 8, and some");
  }
  if (!tcp && run.copy != "tuple" && run.copy != "bulk" && !is_partition_copy(run.copy)) {
    throw Error(Errc::invalid_argument,
                "bench: " + what + ": no copy '" + run.copy + "' (tuple, bulk, partition, partition-direct)");
  }
  if (run.targets == 0 || (run.targets > 1 && (tcp || !is_partition_copy(run.copy)))) {
    throw Error(Errc::invalid_argument, "bench: " + what + ": " + std::to_string(run.targets) +
                                            " targets (only the shm partitioner has more than one)");
  }
  if (!tcp && run.copy == "tuple" && !ring_copies_width(run.tuple_bytes)) {
    throw Error(Errc::invalid_argument, "bench: " + what + ": no compile-time copy of " +
                                            std::to_string(run.tuple_bytes) + " B tuples (" +
                                            ring_tuple_widths_text() + ")");
  }
  StreamSide receiver;
  receiver.side = tcp ? "tcp-reader" : "ring-consumer";
  receiver.tuple_bytes = run.tuple_bytes;
  receiver.ring_bytes = run.ring_bytes;
  receiver.batch_bytes = run.batch_bytes;
  receiver.copy = run.copy;
  receiver.targets = run.targets;
  receiver.wait = run.timeout;
  std::optional<RingName> ring;
  if (!tcp) {
    ring.emplace();
    receiver.name = ring->get();
  }
  StreamSide sender = receiver;
  sender.side = tcp ? "tcp-writer" : "ring-producer";
  sender.tuples = run.tuples;

  // tcp: the reader listens before the writer connects; shm: the producer waits for the ring.
  launch::ChildProcess receiver_process =
      tcp ? start_listening_server(
                [&](int port) {
                  receiver.port = sender.port = port;
                  return launch::ChildSpec{stream_side_argv(run.dfi_binary, receiver), {}};
                },
                what, kReceiverStartBound)
                .process
          : launch::ChildProcess::start({stream_side_argv(run.dfi_binary, receiver), {}});
  launch::ChildProcess sender_process =
      launch::ChildProcess::start({stream_side_argv(run.dfi_binary, sender), {}});
  auto [r, s] = wait_both(receiver_process, sender_process, run.timeout);

  StreamResult result;
  std::vector<std::string> receiver_text = stream_side_argv("dfi", receiver);
  std::vector<std::string> sender_text = stream_side_argv("dfi", sender);
  for (std::vector<std::string>* text : {&receiver_text, &sender_text}) {
    auto port = std::find(text->begin(), text->end(), "--port");
    if (port != text->end()) *(port + 1) = "$PORT";
  }
  result.command = shell_join(receiver_text) + " & " + shell_join(sender_text);
  const std::string outputs = ": " + result.command + "\nreceiver output:\n" +
                              tail_lines(r.output, 8) + "\nsender output:\n" +
                              tail_lines(s.output, 8);
  if (r.timed_out || s.timed_out) {
    throw Error(Errc::timeout, "bench: " + what + " killed after " +
                                   std::to_string(run.timeout.count()) + " ms" + outputs);
  }
  const nlohmann::json data = result_line(r.output);
  if (r.exit_code != 0 || s.exit_code != 0 || !data.is_object()) {
    throw Error(Errc::io, "bench: " + what + ": receiver exited with status " +
                              std::to_string(r.exit_code) + ", sender with status " +
                              std::to_string(s.exit_code) +
                              (data.is_object() ? "" : ", no result line") + outputs);
  }
  result.gbps = data.at("gbps").get<double>();
  result.tuples = data.at("tuples").get<std::uint64_t>();
  result.key_sum = data.at("key_sum").get<std::uint64_t>();
  result.routed_sum = data.at("routed_sum").get<std::uint64_t>();
  result.seconds = data.at("seconds").get<double>();
  const std::uint64_t block = block_tuples(run.tuple_bytes);
  const std::uint64_t expected = expected_key_sum(run.tuples, block);
  // One ring (or a tcp stream): every key counts once in the routed sum too.
  const std::uint64_t routed = run.targets == 1 ? expected : expected_routed_sum(run.tuples, block, run.targets);
  if (result.tuples != run.tuples || result.key_sum != expected || result.routed_sum != routed) {
    std::ostringstream text;
    text << "bench: " << what << ": sent " << run.tuples << " tuples with key sum " << expected
         << " (routed " << routed << "), received " << result.tuples << " with " << result.key_sum
         << " (routed " << result.routed_sum << ")" << outputs;
    throw Error(Errc::protocol, text.str());
  }
  return result;
}

}  // namespace dfi::tools::bench
