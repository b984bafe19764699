#include "paths.hpp"

#include <unistd.h>

#include <cstdlib>

#include "dfi/launch/child_process.hpp"

#ifndef DFI_SOURCE_DIR
#error "DFI_SOURCE_DIR must be defined by the build"
#endif
#ifndef DFI_BINARY_DIR
#error "DFI_BINARY_DIR must be defined by the build"
#endif
#ifndef DFI_PYTHON_VENV
#error "DFI_PYTHON_VENV must be defined by the build (empty when the build has no venv)"
#endif

namespace dfi::tools::bench {
namespace {

std::string from_env(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

}  // namespace

std::string bench_source_dir() {
  return from_env("DFI_BENCH_DIR", std::string(DFI_SOURCE_DIR) + "/bench");
}

std::string bench_build_dir() {
  return from_env("DFI_BENCH_BUILD_DIR", std::string(DFI_BINARY_DIR) + "/bench");
}

std::string python_venv() { return from_env("DFI_BENCH_VENV", DFI_PYTHON_VENV); }

std::string default_output_dir() { return bench_source_dir() + "/out"; }

std::string python_interpreter() {
  const char* chosen = std::getenv("DFI_PYTHON");
  if (chosen != nullptr && *chosen != '\0') return chosen;
  if (::access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return launch::find_program("python3").value_or("python3");
}

}  // namespace dfi::tools::bench
