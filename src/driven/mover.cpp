#include "dfi/driven/mover.hpp"

#include <algorithm>
#include <optional>
#include <thread>
#include <unordered_map>

#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/flow/detail/rings.hpp"
#include "dfi/memory/segment_reader.hpp"
#include "dfi/memory/segment_writer.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"

namespace dfi::driven {

using Reader = memory::SegmentReader<memory::RemoteRing>;
using Writer = memory::SegmentWriter<memory::RemoteRing>;

// One flow as the mover sees it: for every consumer c, the writer of its ring and the readers of
// the producers' rings for c (producer p's ring c).
struct Mover::Flow {
  flow::FlowSpec spec;
  DrivenOptions options;
  std::string label;
  std::unordered_map<int, std::unique_ptr<fabric::Endpoint>> endpoints;  // by rank
  std::vector<std::unique_ptr<fabric::RemoteMemory>> regions;
  std::vector<std::unique_ptr<Writer>> writers;               // [consumer]
  std::vector<std::vector<std::unique_ptr<Reader>>> readers;  // [consumer][producer]
  std::vector<std::vector<bool>> ended;                       // [consumer][producer]: end-of-stream taken
  std::vector<std::size_t> open;                              // [consumer]: producers not ended
  std::vector<std::size_t> cursor;                            // [consumer]: round robin start
  std::size_t consumers_open = 0;
};

Mover::Mover(cluster::Node& node) : node_(node), worker_(node.fabric(), "mover") {}

Mover::~Mover() = default;

void Mover::add_flow(std::string_view name, std::chrono::milliseconds timeout) {
  for (const auto& f : flows_) {
    if (f->spec.name == name) throw Error(Errc::invalid_argument, "mover: flow '" + std::string(name) + "' added twice");
  }
  const Deadline deadline = flow::detail::open_deadline(timeout);
  auto f = std::make_unique<Flow>();
  f->spec = flow::detail::open_spec(node_, name, kDriven, std::nullopt, deadline);
  f->options = f->spec.type_options.get<DrivenOptions>();
  f->label = "driven flow '" + f->spec.name + "' mover (rank " + std::to_string(node_.rank()) + ")";
  const memory::RingLayout layout = f->spec.layout();
  const std::size_t producers = f->spec.sources.size();
  const std::size_t consumers = f->spec.targets.size();

  auto endpoint = [&](int rank) -> fabric::Endpoint& {
    std::unique_ptr<fabric::Endpoint>& ep = f->endpoints[rank];
    if (!ep) ep = std::make_unique<fabric::Endpoint>(node_.connect(worker_, rank));
    return *ep;
  };
  auto attach = [&](const std::string& record, int rank, const std::string& who) -> fabric::RemoteMemory& {
    std::string descriptor;
    try {
      descriptor = node_.wait_for(record, flow::detail::time_left(deadline));
    } catch (const Error& e) {
      throw Error(e.code(), f->label + ": " + who + " did not open the flow: " + e.what());
    }
    f->regions.push_back(
        std::make_unique<fabric::RemoteMemory>(endpoint(rank).attach(fabric::RegionDescriptor::parse(descriptor))));
    return *f->regions.back();
  };

  memory::SegmentWriterOptions writer_options;
  writer_options.stall_timeout = flow::detail::stall_timeout(f->spec);
  memory::RemoteRingOptions access;  // mapped where UCX maps the PU's memory, else puts and gets
  std::vector<fabric::RemoteMemory*> producer_regions;
  for (std::size_t p = 0; p < producers; ++p) {
    const flow::SourceRef s = f->spec.sources[p];
    producer_regions.push_back(&attach(detail::producer_record(f->spec.name, p), s.rank,
                                       "producer (rank " + std::to_string(s.rank) + ", thread " +
                                           std::to_string(s.thread) + ")"));
  }
  for (std::size_t c = 0; c < consumers; ++c) {
    const flow::TargetRef t = f->spec.targets[c];
    const std::string consumer = "consumer (rank " + std::to_string(t.rank) + ", id " + std::to_string(t.id) + ")";
    fabric::RemoteMemory& region = attach(detail::consumer_record(f->spec.name, c), t.rank, consumer);
    f->writers.push_back(std::make_unique<Writer>(writer_options, worker_, endpoint(t.rank), region, 0, layout,
                                                  access, f->label + " -> " + consumer));
    f->readers.emplace_back();
    for (std::size_t p = 0; p < producers; ++p) {
      const flow::SourceRef s = f->spec.sources[p];
      f->readers.back().push_back(std::make_unique<Reader>(
          worker_, endpoint(s.rank), *producer_regions[p], c * layout.bytes(), layout, access,
          f->label + " <- producer (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) +
              ") for " + consumer));
    }
  }
  try {
    node_.registry().publish(detail::mover_record(f->spec.name), std::to_string(node_.rank()));
  } catch (const Error& e) {
    if (e.code() != Errc::already_exists) throw;
    throw Error(Errc::already_exists, f->label + ": the flow has a mover already (rank " +
                                          node_.registry().lookup(detail::mover_record(f->spec.name)) + ")");
  }
  f->ended.assign(consumers, std::vector<bool>(producers, false));
  f->open.assign(consumers, producers);
  f->cursor.assign(consumers, 0);
  f->consumers_open = consumers;
  flows_.push_back(std::move(f));
}

bool Mover::done() const noexcept {
  return std::all_of(flows_.begin(), flows_.end(), [](const auto& f) { return f->consumers_open == 0; });
}

Status Mover::step(std::uint64_t& moved) {
  moved = 0;
  for (auto& owned : flows_) {
    Flow& f = *owned;
    if (f.consumers_open == 0) continue;
    const std::size_t producers = f.spec.sources.size();
    for (std::size_t c = 0; c < f.writers.size(); ++c) {
      Writer& writer = *f.writers[c];
      if (writer.closed()) continue;
      std::uint64_t free = 0;
      if (Status s = writer.free_slots(free); !s) return s;
      // Round robin over the producers, one segment each per round, while the consumer has room
      // and the batch is not full: every producer gets its share of the consumer.
      std::uint64_t budget = f.options.batch_bytes;
      bool published = false;
      for (bool any = true; any && free > 0 && budget > 0;) {
        any = false;
        for (std::size_t k = 0; k < producers && free > 0 && budget > 0; ++k) {
          const std::size_t p = (f.cursor[c] + k) % producers;
          if (f.ended[c][p]) continue;
          Reader& reader = *f.readers[c][p];
          std::optional<memory::SegmentView> segment;
          if (Status s = reader.peek(segment); !s) return s;
          if (!segment) continue;
          if (segment->end_of_stream) {
            if (Status s = reader.release(); !s) return s;
            f.ended[c][p] = true;
            --f.open[c];
            continue;
          }
          // The segment is copied out of the producer's ring (into the consumer's mapped ring,
          // or into a staging segment that the put sends) before the producer gets it back.
          if (Status s = writer.publish_from(segment->data, segment->bytes); !s) return s;
          if (Status s = reader.release(); !s) return s;
          --free;
          budget -= std::min<std::uint64_t>(budget, segment->bytes);
          moved += segment->bytes;
          ++counters_.segments;
          counters_.bytes += segment->bytes;
          published = true;
          any = true;
        }
      }
      f.cursor[c] = (f.cursor[c] + 1) % producers;
      if (f.open[c] == 0) {
        if (Status s = writer.close(); !s) return s;  // waits until everything reached the consumer
        --f.consumers_open;
      } else if (published) {
        if (Status s = writer.drain(); !s) return s;  // on its way before the mover looks elsewhere
      }
    }
  }
  if (moved == 0) ++counters_.idle_steps;
  return {};
}

Status Mover::run(std::chrono::milliseconds timeout) {
  Deadline deadline(timeout);
  std::chrono::microseconds interval = std::chrono::microseconds::max();
  for (const auto& f : flows_) interval = std::min(interval, f->options.poll_interval);
  Backoff backoff(BackoffSettings::from_config(), reinterpret_cast<std::uintptr_t>(this));
  while (!done()) {
    std::uint64_t moved = 0;
    if (Status s = step(moved); !s) return s;
    if (moved > 0) {
      backoff.reset();
      continue;
    }
    if (deadline.expired()) {
      std::string open;
      for (const auto& f : flows_) {
        if (f->consumers_open > 0) open += (open.empty() ? "'" : ", '") + f->spec.name + "'";
      }
      return {Errc::timeout, "mover (rank " + std::to_string(node_.rank()) + "): flows " + open +
                                 " still open after " + std::to_string(timeout.count()) + " ms"};
    }
    worker_.progress();  // keepalive and connection upkeep while nothing moves
    if (interval.count() > 0 && interval != std::chrono::microseconds::max()) {
      std::this_thread::sleep_for(interval);
    } else {
      backoff.pause();
    }
  }
  return {};
}

}  // namespace dfi::driven
