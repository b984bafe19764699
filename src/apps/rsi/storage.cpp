#include "dfi/apps/rsi/storage.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"
#include "two_pc_wire.hpp"

namespace dfi::apps::rsi {
namespace {

constexpr std::size_t kScanChunkBytes = std::size_t{1} << 20;

std::uint64_t load(std::uint64_t* word) { return std::atomic_ref(*word).load(std::memory_order_acquire); }
void store(std::uint64_t* word, std::uint64_t value) { std::atomic_ref(*word).store(value, std::memory_order_release); }

}  // namespace

// The 2PC side of a server: its worker (progressed only by the server's thread) and the buffer
// replies are built in (reused: no allocation per message).
struct StorageServer::TwoPc {
  std::unique_ptr<fabric::Worker> worker;
  std::vector<std::uint64_t> reply;
};

StorageServer::StorageServer(cluster::Node& node, const Table& table, const RecordInit& init, bool serve_two_pc)
    : table_(table) {
  const int index = table.server_index(node.rank());
  if (index < 0) {
    throw Error(Errc::invalid_argument, "rsi table '" + table.name() + "': rank " + std::to_string(node.rank()) +
                                            " is not one of its storage servers");
  }
  server_ = static_cast<std::size_t>(index);
  const std::size_t slot = table.slot_words();
  const std::size_t words = std::max<std::size_t>(table.block_words(server_), 1);
  block_.host(node, Table::block_record(table.name(), server_), words, [&](std::uint64_t* block) {
    const std::size_t payload = table.spec().payload_bytes;
    for (std::size_t w = 0; w + slot <= table.block_words(server_); w += slot) {
      const std::uint64_t id = (w / slot) * table.servers() + server_;
      block[w] = 0;              // commit id 0, unlocked
      block[w + slot - 1] = 0;   // trailer: the payload's commit id
      if (init) init(id, std::span(reinterpret_cast<std::byte*>(block + w + 1), payload));
    }
  });
  if (!serve_two_pc) return;

  two_pc_ = std::make_unique<TwoPc>();
  two_pc_->worker = std::make_unique<fabric::Worker>(node.fabric(), "rsi table '" + table.name() +
                                                                        "' 2pc server " + std::to_string(server_));
  two_pc_->reply.resize(wire::kReplyHead + wire::max_reads(table.payload_words()) * (1 + table.payload_words()));
  two_pc_->worker->set_am_handler(wire::kRequestAm, [this](const fabric::AmMessage& message, fabric::AmReplier& replier) {
    requests_.fetch_add(1, std::memory_order_relaxed);  // a statistic
    std::uint64_t* block = block_.local();
    const std::size_t block_words = table_.block_words(server_);
    const std::size_t slot_words = table_.slot_words();
    const std::size_t n = message.data.size() / sizeof(std::uint64_t);
    std::vector<std::uint64_t>& reply = two_pc_->reply;
    std::size_t reply_words = wire::kReplyHead;
    auto send = [&](std::uint64_t status) {
      reply[2] = status;
      (void)replier.reply(wire::kReplyAm, std::as_bytes(std::span(reply.data(), reply_words)));
    };
    // The message's words, copied out (its data need not be aligned).
    auto word_at = [&](std::size_t i) {
      std::uint64_t w = 0;
      std::memcpy(&w, message.data.data() + i * sizeof w, sizeof w);
      return w;
    };
    if (n < wire::kRequestHead) return;  // not even a tag to answer to
    const std::uint64_t op = word_at(0);
    reply[0] = word_at(1);
    reply[1] = server_;
    const std::uint64_t cid = word_at(2);
    const std::uint64_t count = word_at(3);
    const std::size_t payload_words = table_.payload_words();
    const std::size_t entry = op == wire::kRead ? 1 : op == wire::kCommit ? 1 + payload_words : 2;
    if (count > (n - wire::kRequestHead) / entry || n != wire::kRequestHead + count * entry) return send(wire::kBadRequest);
    auto header_of = [&](std::size_t e) -> std::uint64_t* {
      const std::uint64_t w = word_at(wire::kRequestHead + e * entry);
      if (w % slot_words != 0 || w + slot_words > block_words) return nullptr;
      return block + w;
    };
    for (std::size_t e = 0; e < count; ++e) {
      if (header_of(e) == nullptr) return send(wire::kBadRequest);
    }
    switch (op) {
      case wire::kRead: {
        if (count == 0 || count > wire::max_reads(payload_words)) return send(wire::kBadRequest);
        for (std::size_t e = 0; e < count; ++e) {
          std::uint64_t* header = header_of(e);
          reply[reply_words] = load(header);
          std::memcpy(&reply[reply_words + 1], header + 1, payload_words * sizeof(std::uint64_t));
          reply_words += 1 + payload_words;
        }
        return send(wire::kOk);
      }
      case wire::kPrepare:
        for (std::size_t e = 0; e < count; ++e) {
          std::uint64_t* header = header_of(e);
          const std::uint64_t expected = word_at(wire::kRequestHead + e * 2 + 1);
          if (locked(expected) || load(header) != expected) {
            for (std::size_t u = 0; u < e; ++u) store(header_of(u), word_at(wire::kRequestHead + u * 2 + 1));
            return send(wire::kConflict);
          }
          store(header, kLockBit | commit_id(expected));
        }
        return send(wire::kOk);
      case wire::kCommit:
        for (std::size_t e = 0; e < count; ++e) {
          if (!locked(load(header_of(e)))) return send(wire::kBadRequest);  // not prepared
        }
        for (std::size_t e = 0; e < count; ++e) {
          std::uint64_t* header = header_of(e);
          // The slot's layout (table.hpp): trailer first, then the payload, then the header.
          store(header + slot_words - 1, commit_id(cid));
          std::memcpy(header + 1, message.data.data() + (wire::kRequestHead + e * entry + 1) * sizeof(std::uint64_t),
                      payload_words * sizeof(std::uint64_t));
          store(header, commit_id(cid));
        }
        return send(wire::kOk);
      case wire::kAbort:
        for (std::size_t e = 0; e < count; ++e) {
          std::uint64_t* header = header_of(e);
          const std::uint64_t expected = word_at(wire::kRequestHead + e * 2 + 1);
          if (load(header) == (kLockBit | commit_id(expected))) store(header, expected);
        }
        return send(wire::kOk);
      default:
        return send(wire::kBadRequest);
    }
  });
  node.registry().publish(two_pc_record(table.name(), server_), two_pc_->worker->address());
  thread_ = std::thread([this] { serve(); });
}

StorageServer::~StorageServer() {
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_release);
    two_pc_->worker->signal();
    thread_.join();
  }
}

void StorageServer::serve() {
  fabric::Worker& worker = *two_pc_->worker;
  const bool syscalls = !worker.context().capabilities().native_one_sided;
  Backoff backoff(BackoffSettings::from_config(syscalls), server_ + 1);
  while (!stop_.load(std::memory_order_acquire)) {
    if (worker.progress() != 0) {
      backoff.reset();
      continue;
    }
    backoff.pause([&worker](std::chrono::microseconds d) { worker.wait_for_event(d, /*idle=*/true); });
  }
}

std::string StorageServer::two_pc_record(const std::string& table, std::size_t server) {
  return "rsi/" + table + "/2pc/" + std::to_string(server);
}

void scan_table(cluster::Node& node, fabric::Worker& worker, const Table& table, std::chrono::milliseconds timeout,
                const std::function<void(std::uint64_t, std::uint64_t, std::span<const std::byte>)>& visit) {
  const std::size_t slot = table.slot_words();
  const std::size_t slots_per_chunk = std::max<std::size_t>(1, kScanChunkBytes / (slot * sizeof(std::uint64_t)));
  std::vector<std::uint64_t> chunk(slots_per_chunk * slot);
  for (std::size_t server = 0; server < table.servers(); ++server) {
    const int rank = table.spec().servers[server];
    auto fail = [&](const std::string& what) {
      throw Error(Errc::peer_failed, "rsi table '" + table.name() + "': storage server " + std::to_string(server) +
                                         " (rank " + std::to_string(rank) + "): " + what);
    };
    cluster::SharedWords block;
    try {
      block.attach(node, worker, Table::block_record(table.name(), server), rank, timeout);
    } catch (const Error& e) {
      fail(e.what());
    }
    const std::size_t words = table.block_words(server);
    for (std::size_t first = 0; first < words; first += chunk.size()) {
      const std::size_t count = std::min(chunk.size(), words - first);
      if (Status s = block.read(first, chunk.data(), count * sizeof(std::uint64_t)); !s) fail(s.message());
      for (std::size_t w = 0; w + slot <= count; w += slot) {
        const std::uint64_t id = ((first + w) / slot) * table.servers() + server;
        visit(id, chunk[w], std::as_bytes(std::span(chunk.data() + w + 1, slot - 1)).first(table.spec().payload_bytes));
      }
    }
  }
}

}  // namespace dfi::apps::rsi
