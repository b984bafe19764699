// 002's throughput and consuming tests (test.hpp): one SU thread and one CU thread per lane.
#include "dfi/apps/commtier/test.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <memory>
#include <mutex>
#include <ostream>
#include <sstream>

#include "dfi/apps/commtier/channel.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/memory/ring.hpp"

namespace dfi::apps::commtier {

std::string_view test_name(TestKind kind) noexcept { return kind == TestKind::consuming ? "consuming" : "throughput"; }

TestKind parse_test(std::string_view text) {
  if (text == "consuming") return TestKind::consuming;
  if (text == "throughput") return TestKind::throughput;
  throw Error(Errc::invalid_argument, "commtier: test '" + std::string(text) + "' is neither consuming nor throughput");
}

std::string_view via_name(Via via) noexcept { return via == Via::tier ? "tier" : "flow"; }

Via parse_via(std::string_view text) {
  if (text == "tier") return Via::tier;
  if (text == "flow") return Via::flow;
  throw Error(Errc::invalid_argument, "commtier: via '" + std::string(text) + "' is neither tier nor flow");
}

std::uint64_t transfers_for(const TestOptions& options, std::uint64_t size) {
  const std::uint64_t n = size == 0 ? options.max_transfers : options.bytes_per_size / size;
  return std::clamp<std::uint64_t>(n, 1, std::max<std::uint64_t>(options.max_transfers, 1));
}

std::uint64_t warmup_for(const TestOptions& options, std::uint64_t size) {
  return std::min(options.warmup_transfers, transfers_for(options, size) / 4);
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kSignal = 0xffffffffu;  // the CU's ready/done transfers (0 bytes)

std::uint64_t mix(std::uint64_t x) {  // splitmix64: the content of every data word but the first
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// What lane `lane` sends: word j = mix(j, lane) for j >= 1; word 0 is set to the transfer number.
void fill_pattern(std::vector<std::uint64_t>& words, std::uint32_t lane) {
  for (std::size_t j = 0; j < words.size(); ++j) words[j] = mix(j ^ (std::uint64_t{lane} << 48));
}

// Lane `lane`'s share of a transfer of `size` bytes.
std::uint64_t share(std::uint64_t size, std::uint32_t lanes, std::uint32_t lane) {
  const std::uint64_t base = size / lanes;
  return lane + 1 == lanes ? size - base * (lanes - 1) : base;
}

std::string lane_name(const TestOptions& o, const char* side, std::uint32_t lane) {
  return "commtier test '" + o.name + "': " + side + " lane " + std::to_string(lane);
}

// ---------------------------------------------------------------------------------------------
// The two ends of one lane, through a tier or through flows.

class SuEnd {
 public:
  virtual ~SuEnd() = default;
  virtual void wait_signal() = 0;  // the CU's next ready/done
  virtual void send(std::uint32_t opcode, const std::byte* data, std::size_t bytes) = 0;
  virtual void finish() = 0;  // close, then wait for the CU's end of stream
  virtual std::uint64_t messages() const { return 0; }
  virtual std::uint64_t buffers() const { return 0; }
  virtual bool direct() const { return false; }
};

class CuEnd {
 public:
  virtual ~CuEnd() = default;
  virtual void signal() = 0;
  // One transfer of `bytes` (its opcode checked where the path carries one), copied into `into`
  // or dropped.
  virtual void receive(std::uint32_t opcode, std::byte* into, std::size_t bytes, bool copy) = 0;
  virtual void finish() = 0;
};

class TierSu final : public SuEnd {
 public:
  TierSu(cluster::Node& node, fabric::Worker& worker, const TestOptions& o, std::uint32_t lane)
      : what_(lane_name(o, "SU", lane)),
        signals_(node, o.name, Side::su, lane),  // the receiver first: the CU's sender waits for it
        data_(node, worker, o.name, Side::su, lane) {}

  void wait_signal() override {
    Message m;
    signals_.receive(m).throw_if_error();
    if (m.end_of_stream || m.opcode != kSignal || m.total_bytes != 0) {
      throw Error(Errc::protocol, what_ + ": expected a signal from the CU, got " +
                                      (m.end_of_stream ? std::string("the end of its stream")
                                                       : "opcode " + std::to_string(m.opcode)));
    }
  }
  void send(std::uint32_t opcode, const std::byte* data, std::size_t bytes) override {
    data_.send(opcode, data, bytes).throw_if_error();
  }
  void finish() override {
    data_.close().throw_if_error();
    Message m;
    signals_.receive(m).throw_if_error();
    if (!m.end_of_stream) throw Error(Errc::protocol, what_ + ": the CU sent more than the test asked for");
  }
  std::uint64_t messages() const override { return data_.counters().messages; }
  std::uint64_t buffers() const override { return data_.counters().buffers; }
  bool direct() const override { return data_.direct(); }

 private:
  std::string what_;
  Receiver signals_;
  Sender data_;
};

class TierCu final : public CuEnd {
 public:
  TierCu(cluster::Node& node, fabric::Worker& worker, const TestOptions& o, std::uint32_t lane)
      : what_(lane_name(o, "CU", lane)),
        data_(node, o.name, Side::cu, lane),
        signals_(node, worker, o.name, Side::cu, lane) {}

  void signal() override { signals_.send(kSignal, nullptr, 0).throw_if_error(); }
  void receive(std::uint32_t opcode, std::byte* into, std::size_t bytes, bool copy) override {
    Transfer t;
    if (copy) {
      data_.receive_transfer(std::span<std::byte>(into, bytes), t).throw_if_error();
    } else {
      data_.discard_transfer(t).throw_if_error();
    }
    if (t.end_of_stream || t.opcode != opcode || t.bytes != bytes) {
      throw Error(Errc::protocol, what_ + ": expected a transfer of " + std::to_string(bytes) + " B with opcode " +
                                      std::to_string(opcode) + ", got " +
                                      (t.end_of_stream ? std::string("the end of the stream")
                                                       : std::to_string(t.bytes) + " B with opcode " +
                                                             std::to_string(t.opcode)));
    }
  }
  void finish() override {
    signals_.close().throw_if_error();
    Message m;
    data_.receive(m).throw_if_error();
    if (!m.end_of_stream) throw Error(Errc::protocol, what_ + ": the SU sent more than the test asked for");
  }

 private:
  std::string what_;
  Receiver data_;
  Sender signals_;
};

std::string data_flow(const TestOptions& o, std::uint32_t lane) { return o.name + ".data." + std::to_string(lane); }
std::string signal_flow(const TestOptions& o, std::uint32_t lane) {
  return o.name + ".signal." + std::to_string(lane);
}

class FlowSu final : public SuEnd {
 public:
  FlowSu(cluster::Node& node, fabric::Worker& worker, const TestOptions& o, std::uint32_t lane)
      : what_(lane_name(o, "SU", lane)),
        tuple_(o.flow_tuple_bytes),
        timeout_(o.timeout),
        signals_(node, signal_flow(o, lane), 0),
        data_(node, worker, data_flow(o, lane), 0) {}

  void wait_signal() override {
    if (pending_ == 0) {
      flow::TupleBatch batch;
      signals_.consume(batch, timeout_).throw_if_error();
      if (batch.empty()) throw Error(Errc::protocol, what_ + ": the CU's signals ended early");
      pending_ = batch.count;
    }
    --pending_;
  }
  void send(std::uint32_t, const std::byte* data, std::size_t bytes) override {
    data_.push_bulk(data, (bytes + tuple_ - 1) / tuple_).throw_if_error();
    data_.flush().throw_if_error();
  }
  void finish() override {
    data_.close().throw_if_error();
    flow::TupleBatch batch;
    signals_.consume(batch, timeout_).throw_if_error();
    if (!batch.empty() || pending_ != 0) throw Error(Errc::protocol, what_ + ": the CU sent more signals than asked for");
  }

 private:
  std::string what_;
  std::size_t tuple_;
  std::chrono::milliseconds timeout_;
  std::size_t pending_ = 0;
  flow::ShuffleTarget signals_;
  flow::ShuffleSource data_;
};

class FlowCu final : public CuEnd {
 public:
  FlowCu(cluster::Node& node, fabric::Worker& worker, const TestOptions& o, std::uint32_t lane)
      : what_(lane_name(o, "CU", lane)),
        tuple_(o.flow_tuple_bytes),
        timeout_(o.timeout),
        data_(node, data_flow(o, lane), 0),
        signals_(node, worker, signal_flow(o, lane), 0) {}

  void signal() override {
    const std::uint64_t word = 1;
    signals_.push(word).throw_if_error();
    signals_.flush().throw_if_error();
  }
  void receive(std::uint32_t, std::byte* into, std::size_t bytes, bool copy) override {
    std::size_t tuples = (bytes + tuple_ - 1) / tuple_;
    std::size_t at = 0;
    while (tuples > 0) {
      if (left_ == 0 && copy) {
        // No batch held: the ring's tuples straight into `into` (it has whole tuples), up to the
        // transfer's end; what is left of a segment stays in the target for the next call.
        std::size_t got = 0;
        data_.consume_into(into + at, tuples * tuple_, got, timeout_).throw_if_error();
        if (got == 0) throw Error(Errc::protocol, what_ + ": the stream ended in the middle of a transfer");
        at += got;
        tuples -= got / tuple_;
        continue;
      }
      if (left_ == 0) {
        data_.consume(batch_, timeout_).throw_if_error();
        if (batch_.empty()) throw Error(Errc::protocol, what_ + ": the stream ended in the middle of a transfer");
        next_ = 0;
        left_ = batch_.count;
      }
      const std::size_t n = std::min(left_, tuples);
      if (copy) std::memcpy(into + at, batch_.tuple(next_), n * tuple_);  // `into` has whole tuples
      at += n * tuple_;
      next_ += n;
      left_ -= n;
      tuples -= n;
    }
  }
  void finish() override {
    signals_.close().throw_if_error();
    if (left_ != 0) throw Error(Errc::protocol, what_ + ": the SU sent more than the test asked for");
    data_.consume(batch_, timeout_).throw_if_error();
    if (!batch_.empty()) throw Error(Errc::protocol, what_ + ": the SU sent more than the test asked for");
  }

 private:
  std::string what_;
  std::size_t tuple_;
  std::chrono::milliseconds timeout_;
  flow::ShuffleTarget data_;
  flow::ShuffleSource signals_;
  flow::TupleBatch batch_;
  std::size_t next_ = 0;  // first unused tuple of batch_
  std::size_t left_ = 0;  // unused tuples of batch_
};

// ---------------------------------------------------------------------------------------------

// The tier a test runs on: the CU receives the data into o.buffers, the SU the CU's signals.
TierSpec tier_of(const TestOptions& o) {
  TierSpec tier;
  tier.name = o.name;
  tier.cu_rank = o.cu_rank;
  tier.su_rank = o.su_rank;
  tier.lanes = o.lanes;
  tier.cu = o.buffers;
  tier.su = {4, 64};  // the CU's signals: empty transfers
  tier.stall_timeout = o.timeout;
  return tier;
}

void check_options(const TestOptions& o, int cluster_size) {
  const std::string what = "commtier test '" + o.name + "': ";
  if (o.sizes.empty()) throw Error(Errc::invalid_argument, what + "no transfer sizes");
  if (std::find(o.sizes.begin(), o.sizes.end(), 0) != o.sizes.end()) {
    throw Error(Errc::invalid_argument, what + "a transfer size of 0 B (at least 1)");
  }
  if (o.max_transfers == 0) throw Error(Errc::invalid_argument, what + "max_transfers must be at least 1");
  if (o.via == Via::flow && (o.flow_tuple_bytes < 8 || o.flow_tuple_bytes % 8 != 0)) {
    throw Error(Errc::invalid_argument, what + "a flow tuple of " + std::to_string(o.flow_tuple_bytes) +
                                            " B (a multiple of 8, at least 8)");
  }
  tier_of(o).validate(cluster_size);  // ranks, lanes and buffers, named
}

void create(cluster::Node& node, const TestOptions& o) {
  if (o.via == Via::tier) {
    create_tier(node, tier_of(o));
    return;
  }
  for (std::uint32_t lane = 0; lane < o.lanes; ++lane) {
    flow::FlowSpec data;
    data.name = data_flow(o, lane);
    data.sources = {{o.su_rank, 0}};  // a flow per lane
    data.targets = {{o.cu_rank, 0}};
    std::vector<flow::Column> columns = {{"word", flow::Type::uint64}};
    if (o.flow_tuple_bytes > 8) {
      columns.push_back({"rest", flow::Type::chars, static_cast<std::uint32_t>(o.flow_tuple_bytes - 8)});
    }
    data.schema = flow::Schema(std::move(columns));
    data.key_column = "word";
    // The ring the tier's lane would have: o.buffers (segments of an RB's size plus footer).
    data.options.segments = o.buffers.count;
    data.options.segment_bytes = o.buffers.bytes + static_cast<std::uint32_t>(memory::kFooterBytes);
    data.options.stall_timeout = o.timeout;
    flow::create_flow(node, data);
    flow::FlowSpec signal;
    signal.name = signal_flow(o, lane);
    signal.sources = {{o.cu_rank, 0}};
    signal.targets = {{o.su_rank, 0}};
    signal.schema = flow::Schema({{"word", flow::Type::uint64}});
    signal.key_column = "word";
    signal.options.stall_timeout = o.timeout;
    flow::create_flow(node, signal);
  }
}

std::string human_bytes(std::uint64_t b) {
  std::ostringstream s;
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) s << (b >> 30) << " GiB";
  else if (b >= (1ull << 20) && b % (1ull << 20) == 0) s << (b >> 20) << " MiB";
  else if (b >= 1024 && b % 1024 == 0) s << (b >> 10) << " KiB";
  else s << b << " B";
  return s.str();
}

}  // namespace

TestResult run_test(cluster::Node& node, const TestOptions& o, std::ostream& progress) {
  check_options(o, node.size());
  const bool su = node.rank() == o.su_rank;
  const bool cu = node.rank() == o.cu_rank;
  TestResult result;
  if (!su && !cu) return result;
  if (su) create(node, o);

  const std::uint64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  // Room for a lane's largest share in whole words and whole flow tuples.
  const std::size_t tuple = o.via == Via::flow ? o.flow_tuple_bytes : 8;
  const std::size_t room = ((largest / o.lanes + largest % o.lanes + tuple - 1) / tuple) * tuple;
  const std::size_t sizes = o.sizes.size();
  // SU: per lane and size, when the lane started and stopped, and what its sender counted.
  std::vector<std::vector<Clock::time_point>> started(o.lanes, std::vector<Clock::time_point>(sizes));
  std::vector<std::vector<Clock::time_point>> stopped(o.lanes, std::vector<Clock::time_point>(sizes));
  std::vector<std::vector<std::uint64_t>> messages(o.lanes, std::vector<std::uint64_t>(sizes));
  std::vector<std::vector<std::uint64_t>> buffers(o.lanes, std::vector<std::uint64_t>(sizes));
  std::vector<char> direct(o.lanes, 0);
  std::mutex progress_mutex;

  ThreadGroup threads;
  for (std::uint32_t lane = 0; lane < o.lanes; ++lane) {
    threads.start([&, lane] {
      fabric::Worker worker(node.fabric(), lane_name(o, su ? "SU" : "CU", lane));
      std::vector<std::uint64_t> words(room / 8);
      fill_pattern(words, lane);
      auto* data = reinterpret_cast<std::byte*>(words.data());
      if (su) {
        std::unique_ptr<SuEnd> end;
        if (o.via == Via::tier) end = std::make_unique<TierSu>(node, worker, o, lane);
        else end = std::make_unique<FlowSu>(node, worker, o, lane);
        direct[lane] = end->direct();
        for (std::size_t k = 0; k < sizes; ++k) {
          const std::uint64_t bytes = share(o.sizes[k], o.lanes, lane);
          const std::uint64_t transfers = transfers_for(o, o.sizes[k]);
          const auto opcode = static_cast<std::uint32_t>(k);
          const std::uint64_t warmup = warmup_for(o, o.sizes[k]);
          for (std::uint64_t i = 0; i < warmup; ++i) {
            words[0] = i;
            end->send(opcode, data, bytes);
          }
          const std::uint64_t messages_before = end->messages(), buffers_before = end->buffers();
          end->wait_signal();  // the CU is ready
          started[lane][k] = Clock::now();
          for (std::uint64_t i = 0; i < transfers; ++i) {
            words[0] = i;  // the transfer's number, checked by the CU
            end->send(opcode, data, bytes);
          }
          end->wait_signal();  // the CU has everything
          stopped[lane][k] = Clock::now();
          messages[lane][k] = end->messages() - messages_before;
          buffers[lane][k] = end->buffers() - buffers_before;
          if (o.progress && lane == 0) {
            const double s = std::chrono::duration<double>(stopped[lane][k] - started[lane][k]).count();
            std::lock_guard lock(progress_mutex);
            progress << "commtier: " << test_name(o.test) << " via " << via_name(o.via) << ", "
                     << human_bytes(o.sizes[k]) << " x " << transfers << ": lane 0 "
                     << std::fixed << std::setprecision(1)
                     << static_cast<double>(bytes * transfers) / s / (1 << 20) << " MiB/s" << std::endl;
          }
        }
        end->finish();
      } else {
        std::unique_ptr<CuEnd> end;
        if (o.via == Via::tier) end = std::make_unique<TierCu>(node, worker, o, lane);
        else end = std::make_unique<FlowCu>(node, worker, o, lane);
        std::vector<std::uint64_t> into_words(room / 8);
        auto* into = reinterpret_cast<std::byte*>(into_words.data());
        const bool copy = o.test == TestKind::consuming;
        for (std::size_t k = 0; k < sizes; ++k) {
          const std::uint64_t bytes = share(o.sizes[k], o.lanes, lane);
          const std::uint64_t transfers = transfers_for(o, o.sizes[k]);
          const std::string where = lane_name(o, "CU", lane) + ", transfers of " + std::to_string(bytes) + " B";
          const std::uint64_t warmup = warmup_for(o, o.sizes[k]);
          for (std::uint64_t i = 0; i < warmup; ++i) {
            end->receive(static_cast<std::uint32_t>(k), into, bytes, copy);
          }
          end->signal();  // ready
          for (std::uint64_t i = 0; i < transfers; ++i) {
            end->receive(static_cast<std::uint32_t>(k), into, bytes, copy);
            if (copy && bytes >= 8 && into_words[0] != i) {
              throw Error(Errc::protocol, where + ": transfer " + std::to_string(i) + " arrived as number " +
                                              std::to_string(into_words[0]));
            }
          }
          end->signal();  // done: the SU stops its clock
          if (copy && bytes > 8 && std::memcmp(into + 8, data + 8, bytes - 8) != 0) {
            std::size_t at = 8;
            while (into[at] == data[at]) ++at;
            throw Error(Errc::protocol, where + ": the last transfer differs from what was sent at byte " +
                                            std::to_string(at));
          }
        }
        end->finish();
      }
    });
  }
  threads.join();
  if (!su) return result;

  result.direct = std::all_of(direct.begin(), direct.end(), [](char d) { return d != 0; });
  for (std::size_t k = 0; k < sizes; ++k) {
    SizeResult r;
    r.bytes = o.sizes[k];
    r.transfers = transfers_for(o, r.bytes);
    Clock::time_point first = started[0][k], last = stopped[0][k];
    for (std::uint32_t lane = 0; lane < o.lanes; ++lane) {
      first = std::min(first, started[lane][k]);
      last = std::max(last, stopped[lane][k]);
      r.messages += messages[lane][k];
      r.buffers += buffers[lane][k];
    }
    r.seconds = std::chrono::duration<double>(last - first).count();
    r.mib_per_s = static_cast<double>(r.bytes * r.transfers) / r.seconds / (1 << 20);
    result.sizes.push_back(r);
  }
  return result;
}

}  // namespace dfi::apps::commtier
