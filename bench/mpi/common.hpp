// Shared helpers of the OpenMPI baseline programs (bench/mpi/*.cpp).
//
// These programs are baselines only: they are compiled with mpicxx by `dfi bench` (or by hand,
// see bench/README.md) and are never part of the DFI library or its test suite.
// Each prints exactly one JSON line (rank 0) with the measured numbers; errors go to stderr with
// a non-zero exit code.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

namespace dfi_mpi {

// --name value pairs; every option must have a value.
class Args {
 public:
  Args(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string key = argv[i];
      if (key.rfind("--", 0) != 0 || i + 1 >= argc) {
        throw std::invalid_argument("expected --name value, got '" + key + "'");
      }
      values_[key.substr(2)] = argv[++i];
    }
  }
  std::string get(const std::string& name, const std::string& fallback) const {
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  long long get_int(const std::string& name, long long fallback) const {
    auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    char* end = nullptr;
    long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (end == it->second.c_str() || *end != '\0') {
      throw std::invalid_argument("--" + name + " must be an integer, not '" + it->second + "'");
    }
    return v;
  }
  double get_double(const std::string& name, double fallback) const {
    auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0') {
      throw std::invalid_argument("--" + name + " must be a number, not '" + it->second + "'");
    }
    return v;
  }

 private:
  std::map<std::string, std::string> values_;
};

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A slower CPU, simulated: after a compute phase that took `seconds`, spin for
// seconds * (1/s - 1), so the phase takes 1/s as long (s = 0.5: twice as long). Spinning keeps
// the core busy, as a slower clock would.
class Straggle {
 public:
  Straggle(bool active, double slowdown)
      : active_(active && slowdown > 0 && slowdown < 1), factor_(1.0 / slowdown - 1.0) {}
  using Clock = std::chrono::steady_clock;
  void begin() {
    if (active_) start_ = Clock::now();
  }
  void end() {
    if (!active_) return;
    const auto spent = Clock::now() - start_;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(spent * factor_);
    while (Clock::now() < until) {
    }
    stretched_ += std::chrono::duration<double>(spent * factor_).count();
  }
  double stretched_seconds() const { return stretched_; }

 private:
  bool active_;
  double factor_;
  Clock::time_point start_{};
  double stretched_ = 0;
};

inline void fail(const std::string& program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
}

}  // namespace dfi_mpi
