// Rank program for the multi-process RSI tests, started by launch::run_cluster on 3 ranks: ranks
// 0 and 1 are storage servers (rank 0 also hosts the timestamp service), rank 2 runs two clients
// on two workers of one thread and interleaves their transactions by hand.
//
//   rsi_node conflict rsi|2pc
//     - a writer whose record changed after its read aborts at commit, and the record it had
//       locked on the other server is unlocked again, unchanged (no lock left behind);
//     - the first committer's versions are installed with its commit id;
//     - a read of a version newer than the snapshot aborts the transaction, unless a later
//       snapshot covers it and nothing read before changed;
//     - a locked record is not read (no dirty read): the reader aborts;
//     - user errors (write before read, record out of range, begin twice) are refused clearly.
//
//   rsi_node crash locked|logged|installing|late   (4 ranks)
//     the bank workload (rsi, 2 storage servers, 2 clients on each of ranks 2 and 3, 16
//     accounts); client 0 kills its whole rank (SIGKILL) at the given point of its 3rd commit,
//     so rank 2's two clients die, possibly holding locks; rank 3's clients recover them and
//     finish. "late": at the logged point, but only after the run's end (rank 3's clients
//     recover the records as they leave). Rank 0 prints the summary and the audit (the test checks them).
//
//   rsi_node txn bank|checkout rsi|2pc   (4 ranks)
//     the workload as `dfi txn` runs it (2 storage servers, 2 clients on each of ranks 2 and 3,
//     few records, 2 s): for sanitizer builds, which need not build the whole dfi binary.
//
// Exit status 0 means the scenario held; every failure prints why.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "dfi/apps/rsi/client.hpp"
#include "dfi/apps/rsi/commit_log.hpp"
#include "dfi/apps/rsi/storage.hpp"
#include "dfi/apps/rsi/table.hpp"
#include "dfi/apps/rsi/timestamps.hpp"
#include "dfi/apps/rsi/workload.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/cluster/shared_words.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"
#include "node_checks.hpp"

namespace {

using namespace dfi;
using namespace dfi::apps::rsi;
using namespace std::chrono_literals;
using testing::fail;
using testing::failures;

constexpr const char* kTable = "conflict";

void expect(const Status& s, Errc code, const std::string& what) {
  if (s.code() != code) {
    fail(what + ": expected " + std::string(errc_name(code)) + ", got " + std::string(errc_name(s.code())) + " (" +
         s.message() + ")");
  }
}

void expect_message(const Status& s, const std::string& part, const std::string& what) {
  if (s.message().find(part) == std::string::npos) fail(what + ": message '" + s.message() + "' lacks '" + part + "'");
}

std::int64_t value(const std::uint64_t* payload) {
  std::int64_t v = 0;
  std::memcpy(&v, payload, sizeof v);
  return v;
}

void run_clients(cluster::Node& node, Protocol protocol) {
  const Table table = Table::open(node, kTable, 30s);
  fabric::Worker w0(node.fabric(), "client 0"), w1(node.fabric(), "client 1");
  ClientOptions o;
  o.clients = 2;
  o.client = 0;
  auto c0 = Client::open(protocol, node, w0, table, o);
  o.client = 1;
  auto c1 = Client::open(protocol, node, w1, table, o);
  std::uint64_t v[2] = {0, 0};

  // T2 (client 1) reads record 2 (server 0) and record 1 (server 1) and will write both.
  expect(c1->begin(), Errc::ok, "T2 begin");
  expect(c1->read(2, v), Errc::ok, "T2 read 2");
  expect(c1->read(1, v), Errc::ok, "T2 read 1");
  // T1 (client 0) writes record 1 and commits first.
  expect(c0->begin(), Errc::ok, "T1 begin");
  expect(c0->read(1, v), Errc::ok, "T1 read 1");
  if (value(v) != 101) fail("T1 read record 1 as " + std::to_string(value(v)) + ", expected 101");
  v[0] = 1001;
  expect(c0->write(1, v), Errc::ok, "T1 write 1");
  expect(c0->commit(), Errc::ok, "T1 commit");
  // T2: record 2 locks (its header did not change), record 1 does not: abort, record 2 unlocked.
  v[0] = 2002;
  expect(c1->write(2, v), Errc::ok, "T2 write 2");
  v[0] = 2001;
  expect(c1->write(1, v), Errc::ok, "T2 write 1");
  expect(c1->commit(), Errc::retry, "T2 commit after T1 changed record 1");
  if (c1->counters().conflicts != 1) fail("T2's abort not counted as a conflict");

  // A version newer than the snapshot: T3 (client 0) reads record 5; T4 (client 1) writes records
  // 3 and 5 and commits; T3's read of record 3 cannot move to a later snapshot (record 5 changed
  // since T3 read it): aborted.
  expect(c0->begin(), Errc::ok, "T3 begin");
  expect(c0->read(5, v), Errc::ok, "T3 read 5");
  expect(c1->begin(), Errc::ok, "T4 begin");
  expect(c1->read(3, v), Errc::ok, "T4 read 3");
  v[0] = 4003;
  expect(c1->write(3, v), Errc::ok, "T4 write 3");
  expect(c1->read(5, v), Errc::ok, "T4 read 5");
  v[0] = 4005;
  expect(c1->write(5, v), Errc::ok, "T4 write 5");
  expect(c1->commit(), Errc::ok, "T4 commit");
  expect(c0->read(3, v), Errc::retry, "T3 read of record 3, newer than its snapshot, record 5 changed too");
  if (c0->counters().snapshots != 1) fail("T3's abort not counted as a snapshot abort");

  // ... but when nothing read so far changed, the transaction moves to a later snapshot: T6
  // (client 0) begins, T7 (client 1) commits record 6, T6 reads it.
  expect(c0->begin(), Errc::ok, "T6 begin");
  expect(c1->begin(), Errc::ok, "T7 begin");
  expect(c1->read(6, v), Errc::ok, "T7 read 6");
  v[0] = 6006;
  expect(c1->write(6, v), Errc::ok, "T7 write 6");
  expect(c1->commit(), Errc::ok, "T7 commit");
  expect(c0->read(6, v), Errc::ok, "T6 read of record 6, committed after T6 began");
  if (value(v) != 6006) fail("T6 read record 6 as " + std::to_string(value(v)) + ", expected 6006");
  expect(c0->commit(), Errc::ok, "T6 (read-only) commit");

  // No dirty read: a record whose lock bit a writer set (here set by hand, as a commit between
  // its compare-and-swap and its install would leave it) is not read; the reader aborts.
  {
    cluster::SharedWords block;
    block.attach(node, w0, Table::block_record(kTable, table.locate(7).server), table.spec().servers[table.locate(7).server], 30s);
    std::uint64_t old = 1;
    expect(block.compare_swap(table.locate(7).word, 0, kLockBit, &old), Errc::ok, "locking record 7 by hand");
    if (old != 0) fail("record 7's header was " + std::to_string(old) + " before locking it by hand");
    expect(c0->begin(), Errc::ok, "T8 begin");
    expect(c0->read(7, v), Errc::retry, "T8 read of the locked record 7");
    expect(block.compare_swap(table.locate(7).word, kLockBit, 0, &old), Errc::ok, "unlocking record 7 by hand");
    expect(c0->begin(), Errc::ok, "T9 begin");
    expect(c0->read(7, v), Errc::ok, "T9 read of record 7, unlocked again");
    if (value(v) != 107) fail("T9 read record 7 as " + std::to_string(value(v)) + ", expected 107");
    expect(c0->commit(), Errc::ok, "T9 (read-only) commit");
  }

  // User errors.
  expect(c0->begin(), Errc::ok, "T5 begin");
  expect(c0->begin(), Errc::invalid_argument, "begin twice");
  Status s = c0->write(5, v);
  expect(s, Errc::invalid_argument, "write before read");
  expect_message(s, "did not read", "write before read");
  s = c0->read(99, v);
  expect(s, Errc::invalid_argument, "read out of range");
  expect_message(s, "record 99 outside the table's 8", "read out of range");
  expect(c0->abort(), Errc::ok, "T5 abort");
  expect(c0->leave(), Errc::ok, "client 0 leave");
  expect(c1->leave(), Errc::ok, "client 1 leave");

  // Every header unlocked; record 1 carries T1's commit id (client 0's first timestamp: 1),
  // record 2 its first version, records 3 and 5 T4's (client 1's second: 4), record 6 T7's
  // (client 1's third: 6).
  fabric::Worker audit(node.fabric(), "audit");
  std::map<std::uint64_t, std::pair<std::uint64_t, std::int64_t>> seen;
  scan_table(node, audit, table, 30s, [&](std::uint64_t id, std::uint64_t header, std::span<const std::byte> payload) {
    std::int64_t x = 0;
    std::memcpy(&x, payload.data(), sizeof x);
    seen[id] = {header, x};
  });
  for (const auto& [id, hv] : seen) {
    if (locked(hv.first)) fail("record " + std::to_string(id) + " left locked");
  }
  auto check = [&](std::uint64_t id, std::uint64_t cid, std::int64_t x) {
    if (seen[id].first != cid || seen[id].second != x) {
      fail("record " + std::to_string(id) + ": header " + std::to_string(seen[id].first) + " value " +
           std::to_string(seen[id].second) + ", expected commit id " + std::to_string(cid) + " value " + std::to_string(x));
    }
  };
  check(1, 1, 1001);
  check(2, 0, 102);
  check(3, 4, 4003);
  check(5, 4, 4005);
  check(6, 6, 6006);
  if (seen.size() != 8) fail("scanned " + std::to_string(seen.size()) + " records, expected 8");
  if (failures == 0) {
    std::printf("rsi conflict (%s): conflicting writer aborted, no lock left behind, snapshot rule held, no dirty read\n",
                std::string(protocol_name(protocol)).c_str());
  }
}

CommitStage crash_stage = CommitStage::locked;
std::atomic<int> crash_countdown{3};

// ClientOptions::at_commit_stage of the crash scenario: client 0 kills its process.
bool crash_late = false;  // "late": hold the locks past the end of the run, then die

void crash_at(CommitStage stage, std::size_t client) {
  if (client != 0 || stage != crash_stage || crash_countdown.fetch_sub(1) != 1) return;
  if (crash_late) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  std::raise(SIGKILL);
}

int run_crash(const std::string& stage) {
  if (stage == "locked") {
    crash_stage = CommitStage::locked;
  } else if (stage == "logged") {
    crash_stage = CommitStage::logged;
  } else if (stage == "installing") {
    crash_stage = CommitStage::installing;
  } else if (stage == "late") {
    crash_stage = CommitStage::logged;
    crash_late = true;
  } else {
    std::fprintf(stderr, "rsi_node crash: unknown stage '%s' (locked, logged, installing, late)\n", stage.c_str());
    return 2;
  }
  cluster::Node node;
  if (node.size() != 4) {
    std::fprintf(stderr, "rsi_node crash: needs 4 ranks, got %d\n", node.size());
    return 2;
  }
  TxnOptions o;
  o.servers = 2;
  o.threads = 2;
  o.records = 16;
  o.seconds = 2;
  o.progress = false;
  o.at_commit_stage = crash_at;
  const int code = run_workload(node, o, std::cout, std::cerr).code;
  // Rank 0 fails the run for the dead rank; what counts is its audit, which the test reads.
  return node.rank() == 0 || code == 0 ? 0 : code;
}

int run_txn(const std::string& workload, const std::string& protocol) {
  cluster::Node node;
  TxnOptions o;
  o.workload = parse_workload(workload);
  o.protocol = parse_protocol(protocol);
  o.servers = 2;
  o.threads = 2;
  o.records = 16;
  o.order_slots = 16;
  if (o.workload == Workload::checkout) o.payload_bytes = 1024;
  o.seconds = 2;
  o.progress = false;
  return run_workload(node, o, std::cout, std::cerr).code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "txn") == 0) {
    try {
      return run_txn(argv[2], argv[3]);
    } catch (const Error& e) {
      fail(std::string("rsi_node: ") + e.what());
      return 1;
    }
  }
  if (argc == 3 && std::strcmp(argv[1], "crash") == 0) {
    try {
      return run_crash(argv[2]);
    } catch (const Error& e) {
      fail(std::string("rsi_node: ") + e.what());
      return 1;
    }
  }
  if (argc != 3 || std::strcmp(argv[1], "conflict") != 0) {
    std::fprintf(stderr, "usage: rsi_node conflict rsi|2pc | rsi_node crash locked|logged|installing | rsi_node txn bank|checkout rsi|2pc\n");
    return 2;
  }
  try {
    const Protocol protocol = parse_protocol(argv[2]);
    cluster::Node node;
    if (node.size() != 3) {
      std::fprintf(stderr, "rsi_node: needs 3 ranks, got %d\n", node.size());
      return 2;
    }
    auto init = [](std::uint64_t id, std::span<std::byte> payload) {
      const std::int64_t x = 100 + static_cast<std::int64_t>(id);
      std::memcpy(payload.data(), &x, sizeof x);
    };
    if (node.rank() == 2) {
      run_clients(node, protocol);
      node.registry().publish("rsi-test/done", "1");
    } else {
      std::optional<TimestampService> service;
      cluster::SharedWords log;
      Table table;
      if (node.rank() == 0) {
        table = Table::create(node, {kTable, 8, 8, {0, 1}});
        service = TimestampService::host(node, kTable, 2, 1024);
        log = CommitLog::host(node, kTable, 2, 8);
      } else {
        table = Table::open(node, kTable, 30s);
      }
      StorageServer server(node, table, init, protocol == Protocol::two_pc);
      (void)node.wait_for("rsi-test/done", 60s);
    }
    node.finish();
  } catch (const Error& e) {
    fail(std::string("rsi_node: ") + e.what());
  }
  return failures == 0 ? 0 : 1;
}
