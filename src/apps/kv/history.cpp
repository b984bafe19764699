#include "dfi/apps/kv/history.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "dfi/common/error.hpp"

namespace dfi::apps::kv {

namespace {
const char* op_name(Op op) {
  switch (op) {
    case Op::get: return "get";
    case Op::put: return "put";
    case Op::del: return "del";
  }
  return "?";
}

char pattern(std::uint64_t id, std::size_t at) { return static_cast<char>((id * 0x9E3779B97F4A7C15ull >> (at % 57)) + at); }
}  // namespace

void write_history(const std::string& path, const std::vector<HistoryEntry>& entries) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!file) throw Error(Errc::io, "kv history: cannot create '" + path + "': " + std::strerror(errno));
  for (const HistoryEntry& e : entries) {
    std::fprintf(file.get(), "%llu %s %llu %llu %llu %lld %lld\n", static_cast<unsigned long long>(e.client),
                 op_name(e.op), static_cast<unsigned long long>(e.key), static_cast<unsigned long long>(e.input),
                 static_cast<unsigned long long>(e.output), static_cast<long long>(e.call_ns),
                 static_cast<long long>(e.return_ns));
  }
  if (std::fflush(file.get()) != 0) throw Error(Errc::io, "kv history: cannot write '" + path + "': " + std::strerror(errno));
}

Value value_of(std::uint64_t id) {
  Value v{};
  std::memcpy(v.data(), &id, sizeof id);
  for (std::size_t at = sizeof id; at < v.size(); ++at) v[at] = pattern(id, at);
  return v;
}

std::uint64_t id_of(const Value& value) {
  std::uint64_t id = 0;
  std::memcpy(&id, value.data(), sizeof id);
  for (std::size_t at = sizeof id; at < value.size(); ++at) {
    if (value[at] != pattern(id, at)) return 0;
  }
  return id;
}

}  // namespace dfi::apps::kv
