// The workloads' side of run_workload (workload.hpp): what a table holds, one client's
// transaction, and the audit after a run. workload.cpp runs them; bank.cpp and checkout.cpp
// implement them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <vector>

#include "dfi/apps/rsi/client.hpp"
#include "dfi/apps/rsi/workload.hpp"

namespace dfi::apps::rsi::detail {

// One client's side: its buffers and random state, set up once (no allocation per transaction).
class Driver {
 public:
  virtual ~Driver() = default;
  // One transaction: ok (committed), Errc::retry (aborted, try a new one), anything else ends the
  // client with that error (e.g. a torn read, naming the record).
  virtual Status run(Client& client) = 0;
  // Units this client committed (checkout: quantities sold; bank: none).
  std::uint64_t units() const noexcept { return units_; }

 protected:
  std::uint64_t next_random() noexcept {  // xorshift64
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_;
  }
  std::uint64_t rng_ = 1;
  std::uint64_t units_ = 0;
};

class WorkloadImpl {
 public:
  virtual ~WorkloadImpl() = default;
  // Records of the table.
  virtual std::uint64_t records() const = 0;
  // The first version of record `id`.
  virtual void init(std::uint64_t id, std::span<std::byte> payload) const = 0;
  // Client `client`'s driver (on its thread).
  virtual std::unique_ptr<Driver> driver(Client& client, std::size_t index) const = 0;
  // The audit after a run: every record once, then finish() prints the checks on `out`; false
  // when one failed. `units`: the clients' units summed; `commits[c]`: client c's commits.
  virtual void visit(std::uint64_t id, std::span<const std::byte> payload) = 0;
  virtual bool finish(std::uint64_t units, const std::vector<std::uint64_t>& commits, std::ostream& out) = 0;
};

// Validate the options (dfi::Error(invalid_argument) naming the option) and build the workload.
std::unique_ptr<WorkloadImpl> make_bank(const TxnOptions& options, std::size_t clients);
std::unique_ptr<WorkloadImpl> make_checkout(const TxnOptions& options, std::size_t clients);

// Payloads that hold one value in many words: a read mixing two versions shows words that differ.
// Sets words from..end of `payload` to `value`.
void fill_words(std::span<std::byte> payload, std::int64_t value, std::size_t from = 0);
// Word `index` of `payload`.
std::int64_t word_at(std::span<const std::byte> payload, std::size_t index);
// Whether words from..end all hold word_at(payload, from) (or `value`, when given).
bool uniform_words(std::span<const std::byte> payload, std::size_t from = 0);

}  // namespace dfi::apps::rsi::detail
