// The PU side of a driven flow's doorbell, and the bell record (bell.hpp).
#include "bell.hpp"

#include <charconv>
#include <optional>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::driven::detail {

std::string bell_record_text(const BellRecord& record) {
  std::string text = std::to_string(record.generation) + ' ' + std::to_string(record.rank) + ' ' +
                     std::to_string(record.tokens.size());
  for (std::uint32_t token : record.tokens) {
    text += ' ';
    text += std::to_string(token);
  }
  text += ' ';
  text += record.address;  // binary: everything after the last number's space
  return text;
}

BellRecord parse_bell_record(const std::string& text) {
  BellRecord record;
  std::size_t at = 0;
  auto number = [&](auto& value) {
    const std::size_t space = text.find(' ', at);
    if (space == std::string::npos) throw Error(Errc::protocol, "bell record: truncated");
    const auto [end, ec] = std::from_chars(text.data() + at, text.data() + space, value);
    if (ec != std::errc() || end != text.data() + space) throw Error(Errc::protocol, "bell record: not a number");
    at = space + 1;
  };
  std::size_t count = 0;
  number(record.generation);
  number(record.rank);
  number(count);
  if (count > 65536) throw Error(Errc::protocol, "bell record: " + std::to_string(count) + " words");
  record.tokens.resize(count);
  for (std::uint32_t& token : record.tokens) number(token);
  record.address = text.substr(at);
  return record;
}

Doorbell::Doorbell(cluster::Node& node, std::string flow, std::size_t word, std::uint64_t* armed, std::string label)
    : node_(node), flow_(std::move(flow)), word_(word), armed_(armed), label_(std::move(label)) {}

Doorbell::~Doorbell() {
  if (!worker_) return;
  node_.abandon_progress(*worker_);  // the progress thread lets go of it: this thread owns it again
  if (raiser_) raiser_->endpoint().close_now();  // a bell to a mover that is gone need not arrive
  raiser_.reset();
}

bool Doorbell::attach() {
  std::optional<std::string> text;
  try {
    text = node_.registry().try_lookup(bell_record(flow_));
  } catch (const std::exception&) {
    return false;  // the registry is gone: the PU's own waits report it
  }
  if (!text) return false;
  try {
    const BellRecord record = parse_bell_record(*text);
    if (word_ >= record.tokens.size()) return false;
    if (!worker_) {
      worker_ = std::make_unique<fabric::Worker>(node_.fabric(), label_ + " doorbell");
      node_.adopt_progress(*worker_);  // completes the bells' sends while this thread pushes
    }
    worker_->claim();
    try {
      raiser_.reset();
      raiser_ = std::make_unique<fabric::WordRaiser>(worker_->connect(record.rank, record.address),
                                                     record.tokens[word_]);
    } catch (...) {
      worker_->unclaim();
      throw;
    }
    worker_->unclaim();
    generation_ = record.generation;
    return true;
  } catch (const std::exception&) {
    generation_ = 0;  // a mover that went away between the record and the connection: next time
    return false;
  }
}

void Doorbell::ring_armed() noexcept {
  const std::uint64_t generation = std::atomic_ref(*armed_).exchange(0, std::memory_order_acq_rel);
  if (generation == 0) return;
  ++rings_;
  if (muted_) return;
  if ((generation != generation_ || !raiser_) && !attach()) return;
  worker_->claim();
  (void)raiser_->raise(rings_);  // the number of bells so far: the mover sees it grow
  // A message still in flight keeps the new value back (WordRaiser): send it now, a few passes at
  // most (the previous bell left long ago: the mover armed this PU since).
  for (int pass = 0; pass < 64 && !raiser_->idle(); ++pass) {
    worker_->progress();
    (void)raiser_->poll();
  }
  worker_->unclaim();
}

}  // namespace dfi::driven::detail
