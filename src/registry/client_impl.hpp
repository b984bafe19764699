// Internal: what a registry::Client delegates to. One implementation per kind of registry:
// ProtocolClient (client.cpp) speaks DFI's own registry protocol (protocol.hpp); EtcdClient
// (etcd_client.cpp) keeps the same records, membership and barriers in an etcd v3 cluster.
// registry::Client validates arguments (names, sizes, timeouts clamped to kMaxWaitTimeout) before
// it calls them; each has the contract of the Client call of the same name (client.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/registry/client.hpp"

namespace dfi::registry {

class Client::Impl {
 public:
  explicit Impl(std::string address) : address_(std::move(address)) {}
  virtual ~Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  virtual void publish(const std::string& name, std::string_view value, bool replace) = 0;
  virtual std::optional<std::string> try_lookup(const std::string& name) = 0;
  virtual std::string wait_for(const std::string& name, std::chrono::milliseconds timeout) = 0;
  virtual std::vector<std::optional<std::string>> wait_all(const std::vector<std::string>& names,
                                                           const std::vector<int>& publishers,
                                                           std::chrono::milliseconds timeout, bool skip_dead) = 0;
  virtual void remove(const std::string& name) = 0;
  virtual void join(int rank, std::string_view info) = 0;
  virtual std::map<int, std::string> members() = 0;
  virtual std::map<int, std::string> members_after(std::uint64_t& version, std::chrono::milliseconds timeout) = 0;
  virtual void barrier(const std::string& name, int count, std::chrono::milliseconds timeout) = 0;
  virtual void interrupt() noexcept = 0;
  virtual bool usable() = 0;

  const std::string address_;
  // Client::stats(): each implementation counts what it exchanges.
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> connections_{0};
  std::atomic<std::uint64_t> bytes_sent_{0};
  std::atomic<std::uint64_t> bytes_received_{0};
};

// An etcd-backed client for `address` ("etcd://host:port[,host:port...]"); records, members and
// barriers live under the key prefix "dfi/<token or 'default'>/". Throws as Client's constructor.
std::unique_ptr<Client::Impl> make_etcd_client(std::string address, std::string token,
                                               std::chrono::milliseconds connect_timeout);

}  // namespace dfi::registry
