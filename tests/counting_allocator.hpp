// Counts heap allocations in a test executable: link counting_allocator.cpp into it (it replaces
// the global operator new and, outside sanitizer builds, malloc itself).
//
//   news     calls of any operator new (DFI's and the standard library's C++ allocations)
//   mallocs  calls of malloc, calloc, realloc and the aligned forms, from any code (UCX is C and
//            allocates with malloc); includes the mallocs behind operator new. Always 0 where
//            counts_malloc() is false.
//
// Counted per thread (the loop under test) and per process (every thread: progress threads too).
// A counting window takes a snapshot before and subtracts it after.
#pragma once

#include <cstdint>
#include <string>

namespace dfi::testing {

struct AllocCounts {
  std::uint64_t news = 0;
  std::uint64_t mallocs = 0;

  AllocCounts operator-(const AllocCounts& earlier) const {
    return {news - earlier.news, mallocs - earlier.mallocs};
  }
};

// Why counting cannot work in this build, or null: TSan's runtime replaces operator new itself,
// so a test built with it says so and skips (the release and ASan builds count).
inline const char* counting_unavailable() noexcept {
#if defined(__SANITIZE_THREAD__)
  return "the TSan runtime replaces operator new; allocations are counted in the release and ASan builds";
#else
  return nullptr;
#endif
}

// Allocations of the calling thread since it started.
AllocCounts thread_allocations() noexcept;
// Allocations of every thread since the process started.
AllocCounts process_allocations() noexcept;
// False in sanitizer builds, whose runtime owns malloc: there only operator new is counted.
bool counts_malloc() noexcept;
// Allocates through operator new and through a libc function that mallocs (strdup), and checks
// that both were counted: empty when counting works, else why not (e.g. something redirected
// malloc after start-up). Call it inside the process under test, after the fabric started.
std::string counting_problem();

// Records the call stacks of the next `count` allocations (new or malloc) of the calling thread,
// or of any thread when `any_thread`; print them with print_traced_allocations(). For finding
// where an allocation comes from.
void trace_next_allocations(int count, bool any_thread = false) noexcept;
// Writes the recorded call stacks to stderr (symbolised as far as backtrace_symbols_fd can).
void print_traced_allocations();

}  // namespace dfi::testing
