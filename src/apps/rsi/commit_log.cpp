#include "dfi/apps/rsi/commit_log.hpp"

#include <cstring>
#include <functional>
#include <string_view>

#include "dfi/apps/rsi/client.hpp"
#include "dfi/cluster/node.hpp"

namespace dfi::apps::rsi {
namespace {

std::string log_record(const std::string& table) { return "rsi/" + table + "/log"; }

std::size_t payload_words(std::size_t payload_bytes) { return (payload_bytes + 7) / 8; }
std::size_t entry_words(std::size_t payload_bytes) { return 2 + payload_words(payload_bytes); }
std::size_t slot_words(std::size_t payload_bytes) { return 3 + kMaxRecordsPerTxn * entry_words(payload_bytes); }

// The checksum of a record's words after the first (the commit id on), salted with its client so
// that a record can never pass for another client's.
std::uint64_t checksum(const std::uint64_t* words, std::size_t length, std::size_t client) {
  const std::string_view bytes(reinterpret_cast<const char*>(words + 1), (length - 1) * sizeof(std::uint64_t));
  return std::hash<std::string_view>{}(bytes) ^ (0x9e3779b97f4a7c15ull * (client + 1));
}

}  // namespace

cluster::SharedWords CommitLog::host(cluster::Node& node, const std::string& table, std::size_t clients,
                                     std::size_t payload_bytes) {
  if (clients == 0 || clients > kMaxClients) {
    throw Error(Errc::invalid_argument, "rsi table '" + table + "': the commit log takes 1 .. " +
                                            std::to_string(kMaxClients) + " clients, not " + std::to_string(clients));
  }
  cluster::SharedWords words;
  words.host(node, log_record(table), clients + clients * slot_words(payload_bytes));
  return words;
}

CommitLog::CommitLog(cluster::Node& node, fabric::Worker& worker, const std::string& table, int host_rank,
                     std::size_t client, std::size_t clients, std::size_t payload_bytes,
                     std::chrono::milliseconds timeout)
    : client_(client), clients_(clients), entry_words_(entry_words(payload_bytes)), record_(slot_words(payload_bytes)) {
  if (client >= clients) {
    throw Error(Errc::invalid_argument, "rsi table '" + table + "': commit log of client " + std::to_string(client) +
                                            " of only " + std::to_string(clients) + " clients");
  }
  words_.attach(node, worker, log_record(table), host_rank, timeout);
  if (words_.size() != clients + clients * record_.size()) {
    throw Error(Errc::protocol, "rsi table '" + table + "': the commit log has " + std::to_string(words_.size()) +
                                    " words, not the " + std::to_string(clients + clients * record_.size()) + " of " +
                                    std::to_string(clients) + " clients");
  }
  const std::uint64_t rank = static_cast<std::uint64_t>(node.rank()) + 1;
  Status s = words_.write(client, &rank, sizeof rank);
  if (s) s = words_.flush();
  if (!s) throw Error(s.code(), "rsi table '" + table + "': commit log: " + s.message());
}

void CommitLog::start(std::uint64_t cid) noexcept {
  record_[1] = cid;
  record_[2] = 0;
  length_ = 3;
}

void CommitLog::add(std::uint64_t id, std::uint64_t old_header, const void* payload) noexcept {
  record_[length_] = id;
  record_[length_ + 1] = old_header;
  std::memcpy(&record_[length_ + 2], payload, (entry_words_ - 2) * sizeof(std::uint64_t));
  length_ += entry_words_;
  ++record_[2];
}

Status CommitLog::publish() {
  record_[0] = checksum(record_.data(), length_, client_);
  const std::size_t at = clients_ + client_ * record_.size();
  // One ordered store where it fits one (a round trip where RMA is emulated, stores where the
  // log maps), else a put and a flush; a torn record fails its checksum either way.
  if (length_ <= fabric::kMaxWordOpWords) return words_.store_words_async(at, record_.data(), length_).wait();
  if (Status s = words_.write(at, record_.data(), length_ * sizeof(std::uint64_t)); !s) return s;
  return words_.flush();
}

Status CommitLog::ranks(std::vector<int>& ranks) {
  std::vector<std::uint64_t> words(clients_);
  if (Status s = words_.read(0, words.data(), words.size() * sizeof(std::uint64_t)); !s) return s;
  ranks.resize(clients_);
  for (std::size_t i = 0; i < clients_; ++i) ranks[i] = static_cast<int>(words[i]) - 1;
  return {};
}

Status CommitLog::read(std::size_t client, Record& record) {
  record.words.resize(record_.size());
  record.entry_words = entry_words_;
  record.valid = false;
  if (Status s = words_.read(clients_ + client * record_.size(), record.words.data(), record.words.size() * sizeof(std::uint64_t));
      !s) {
    return s;
  }
  record.cid = record.words[1];
  record.count = static_cast<std::size_t>(record.words[2]);
  if (record.count == 0 || record.count > kMaxRecordsPerTxn) return {};
  const std::size_t length = 3 + record.count * entry_words_;
  record.valid = record.words[0] == checksum(record.words.data(), length, client);
  return {};
}

}  // namespace dfi::apps::rsi
