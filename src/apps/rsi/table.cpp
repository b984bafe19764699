#include "dfi/apps/rsi/table.hpp"

#include <nlohmann/json.hpp>

#include <set>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::apps::rsi {
namespace {

void validate(const cluster::Node& node, const TableSpec& spec) {
  const std::string label = "rsi table '" + spec.name + "'";
  auto bad = [&](const std::string& what) { throw Error(Errc::invalid_argument, label + ": " + what); };
  if (spec.name.empty()) throw Error(Errc::invalid_argument, "rsi table: needs a name");
  if (spec.records == 0) bad("needs at least one record");
  if (spec.payload_bytes == 0 || spec.payload_bytes > kMaxPayloadBytes) {
    bad("payload of " + std::to_string(spec.payload_bytes) + " bytes, expected 1 .. " +
        std::to_string(kMaxPayloadBytes));
  }
  if (spec.servers.empty()) bad("needs at least one storage server");
  std::set<int> seen;
  for (int rank : spec.servers) {
    if (rank < 0 || rank >= node.size()) {
      bad("storage server rank " + std::to_string(rank) + " outside the cluster of " + std::to_string(node.size()));
    }
    if (!seen.insert(rank).second) bad("storage server rank " + std::to_string(rank) + " listed twice");
  }
}

}  // namespace

Table::Table(TableSpec spec) : spec_(std::move(spec)), slot_words_(2 + (spec_.payload_bytes + 7) / 8) {}

Table Table::create(cluster::Node& node, TableSpec spec) {
  validate(node, spec);
  const nlohmann::json j = {{"records", spec.records}, {"payload_bytes", spec.payload_bytes}, {"servers", spec.servers}};
  try {
    node.registry().publish(spec_record(spec.name), j.dump());
  } catch (const Error& e) {
    if (e.code() == Errc::already_exists) throw Error(Errc::already_exists, "rsi table '" + spec.name + "' already exists");
    throw;
  }
  return Table(std::move(spec));
}

Table Table::open(cluster::Node& node, const std::string& name, std::chrono::milliseconds timeout) {
  std::string record;
  try {
    record = node.wait_for(spec_record(name), timeout);
  } catch (const Error& e) {
    if (e.code() == Errc::timeout) {
      throw Error(Errc::not_found, "rsi table '" + name + "' was not created within " + std::to_string(timeout.count()) + " ms");
    }
    throw;
  }
  TableSpec spec;
  spec.name = name;
  try {
    const nlohmann::json j = nlohmann::json::parse(record);
    spec.records = j.at("records").get<std::uint64_t>();
    spec.payload_bytes = j.at("payload_bytes").get<std::size_t>();
    spec.servers = j.at("servers").get<std::vector<int>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::protocol, "rsi table '" + name + "': malformed record: " + e.what());
  }
  try {
    validate(node, spec);
  } catch (const Error& e) {
    throw Error(Errc::protocol, std::string(e.what()) + " (in the published record)");
  }
  return Table(std::move(spec));
}

std::size_t Table::block_words(std::size_t server) const noexcept {
  const std::uint64_t n = spec_.servers.size();
  const std::uint64_t slots = spec_.records / n + (server < spec_.records % n ? 1 : 0);
  return static_cast<std::size_t>(slots) * slot_words_;
}

int Table::server_index(int rank) const noexcept {
  for (std::size_t i = 0; i < spec_.servers.size(); ++i) {
    if (spec_.servers[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

std::string Table::spec_record(const std::string& table) { return "rsi/" + table + "/spec"; }

std::string Table::block_record(const std::string& table, std::size_t server) {
  return "rsi/" + table + "/block/" + std::to_string(server);
}

}  // namespace dfi::apps::rsi
