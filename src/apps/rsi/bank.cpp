// The bank workload (workload.hpp): two accounts per transfer, the total never changes.
#include <cstring>
#include <ostream>
#include <string>

#include "dfi/common/error.hpp"
#include "workloads.hpp"

namespace dfi::apps::rsi::detail {

void fill_words(std::span<std::byte> payload, std::int64_t value, std::size_t from) {
  for (std::size_t at = from * sizeof value; at + sizeof value <= payload.size(); at += sizeof value) {
    std::memcpy(payload.data() + at, &value, sizeof value);
  }
}

std::int64_t word_at(std::span<const std::byte> payload, std::size_t index) {
  std::int64_t word = 0;
  std::memcpy(&word, payload.data() + index * sizeof word, sizeof word);
  return word;
}

bool uniform_words(std::span<const std::byte> payload, std::size_t from) {
  const std::size_t words = payload.size() / sizeof(std::int64_t);
  if (from >= words) return true;
  const std::int64_t first = word_at(payload, from);
  for (std::size_t w = from + 1; w < words; ++w) {
    if (word_at(payload, w) != first) return false;
  }
  return true;
}

namespace {

class BankDriver final : public Driver {
 public:
  BankDriver(const TxnOptions& o, std::size_t index) : o_(o), a_(o.payload_bytes), b_(o.payload_bytes) {
    rng_ = 0x9e3779b97f4a7c15ull * (index + 1);
  }

  Status run(Client& client) override {
    const std::uint64_t from = next_random() % o_.records;
    std::uint64_t to = next_random() % (o_.records - 1);
    if (to >= from) ++to;
    const std::int64_t amount = static_cast<std::int64_t>(1 + next_random() % 10);
    Status s = client.begin();
    const std::uint64_t ids[2] = {from, to};
    void* const out[2] = {a_.data(), b_.data()};
    if (s) s = client.read_many(ids, out);  // both in one round trip
    if (!s) return s;
    if (!uniform_words(a_) || !uniform_words(b_)) {
      return {Errc::protocol, client.name() + ": torn read: the words of account " +
                                  std::to_string(uniform_words(a_) ? to : from) + " come from different versions"};
    }
    fill_words(a_, word_at(a_, 0) - amount);
    fill_words(b_, word_at(b_, 0) + amount);
    s = client.write(from, a_.data());
    if (s) s = client.write(to, b_.data());
    if (s) s = client.commit();
    return s;
  }

 private:
  const TxnOptions& o_;
  std::vector<std::byte> a_, b_;
};

class Bank final : public WorkloadImpl {
 public:
  explicit Bank(const TxnOptions& o) : o_(o) {}
  std::uint64_t records() const override { return o_.records; }
  void init(std::uint64_t, std::span<std::byte> payload) const override { fill_words(payload, o_.initial_balance); }
  std::unique_ptr<Driver> driver(Client&, std::size_t index) const override {
    return std::make_unique<BankDriver>(o_, index);
  }
  void visit(std::uint64_t, std::span<const std::byte> payload) override {
    total_ += word_at(payload, 0);
    if (!uniform_words(payload)) ++torn_;
  }
  bool finish(std::uint64_t, const std::vector<std::uint64_t>&, std::ostream& out) override {
    const std::int64_t expected = static_cast<std::int64_t>(o_.records) * o_.initial_balance;
    bool ok = total_ == expected;
    if (ok) {
      out << "txn: bank invariant holds: total " << total_ << " = " << o_.records << " accounts x " << o_.initial_balance << '\n';
    } else {
      out << "txn: bank invariant VIOLATED: total " << total_ << ", expected " << expected << '\n';
    }
    if (torn_ != 0) {
      out << "txn: " << torn_ << " record(s) hold words of different versions\n";
      ok = false;
    }
    return ok;
  }

 private:
  const TxnOptions& o_;
  std::int64_t total_ = 0;
  std::uint64_t torn_ = 0;
};

}  // namespace

std::unique_ptr<WorkloadImpl> make_bank(const TxnOptions& o, std::size_t) {
  auto bad = [](const std::string& what) { throw Error(Errc::invalid_argument, "bank workload: " + what); };
  if (o.records < 2) bad("needs at least two accounts");
  if (o.payload_bytes < sizeof(std::int64_t)) {
    bad("records of " + std::to_string(o.payload_bytes) + " bytes cannot hold a balance (8)");
  }
  return std::make_unique<Bank>(o);
}

}  // namespace dfi::apps::rsi::detail
