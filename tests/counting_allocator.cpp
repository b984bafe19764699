// Replaces the global operator new/delete and (outside sanitizer builds) malloc, calloc, realloc,
// free and the aligned forms, counting each allocation per thread and per process. The malloc
// family forwards to glibc's own implementation (__libc_malloc & co.), so the heap is glibc's as
// usual and a pointer from either side may be freed by the other.
#include "counting_allocator.hpp"

#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DFI_COUNT_MALLOC 0  // the sanitizer runtime owns malloc
#else
#define DFI_COUNT_MALLOC 1
#endif

namespace {

// Constant-initialised thread_local in the executable: static TLS, no allocation to reach it.
thread_local std::uint64_t t_news = 0;
thread_local std::uint64_t t_mallocs = 0;
thread_local int t_trace_left = 0;
thread_local bool t_in_hook = false;
std::atomic<int> g_trace_left{0};  // any thread
std::atomic<std::uint64_t> g_news{0};
std::atomic<std::uint64_t> g_mallocs{0};

constexpr int kMaxTraces = 32;
constexpr int kTraceDepth = 24;
struct Trace {
  const char* kind;
  std::size_t bytes;
  int depth;
  std::array<void*, kTraceDepth> frames;
};
std::array<Trace, kMaxTraces> g_traces;
std::atomic<int> g_trace_count{0};

void record(const char* kind, std::size_t bytes) noexcept {
  if (t_in_hook) return;
  if (t_trace_left > 0) {
    --t_trace_left;
  } else if (g_trace_left.load(std::memory_order_relaxed) <= 0 ||
             g_trace_left.fetch_sub(1, std::memory_order_relaxed) <= 0) {
    return;
  }
  t_in_hook = true;  // backtrace() may allocate the first time
  const int slot = g_trace_count.fetch_add(1, std::memory_order_relaxed);
  if (slot < kMaxTraces) {
    Trace& t = g_traces[static_cast<std::size_t>(slot)];
    t.kind = kind;
    t.bytes = bytes;
    t.depth = backtrace(t.frames.data(), kTraceDepth);
  }
  t_in_hook = false;
}

void count_new(std::size_t bytes) noexcept {
  ++t_news;
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (DFI_COUNT_MALLOC == 0) record("operator new", bytes);  // else the malloc below records it
}

[[maybe_unused]] void count_malloc(std::size_t bytes) noexcept {
  ++t_mallocs;
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  record("malloc", bytes);
}

void* allocate(std::size_t bytes) noexcept {
  count_new(bytes);
  return std::malloc(bytes == 0 ? 1 : bytes);
}

void* allocate_aligned(std::size_t bytes, std::align_val_t align) noexcept {
  count_new(bytes);
  const auto a = static_cast<std::size_t>(align);
  const std::size_t rounded = (bytes + a - 1) / a * a;
  return std::aligned_alloc(a, rounded == 0 ? a : rounded);
}

void* or_throw(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// operator new / delete

void* operator new(std::size_t n) { return or_throw(allocate(n)); }
void* operator new[](std::size_t n) { return or_throw(allocate(n)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) { return or_throw(allocate_aligned(n, a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return or_throw(allocate_aligned(n, a)); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, a);
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

// ---------------------------------------------------------------------------------------------
// malloc and friends

#if DFI_COUNT_MALLOC
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) noexcept {
  count_malloc(n);
  return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) noexcept {
  count_malloc(count * n);
  return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) noexcept {
  count_malloc(n);
  return __libc_realloc(p, n);
}
void free(void* p) noexcept { __libc_free(p); }
void* memalign(std::size_t align, std::size_t n) noexcept {
  count_malloc(n);
  return __libc_memalign(align, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) noexcept {
  count_malloc(n);
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) noexcept {
  if (align % sizeof(void*) != 0 || (align & (align - 1)) != 0) return EINVAL;
  count_malloc(n);
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"
#endif

// ---------------------------------------------------------------------------------------------

namespace dfi::testing {

AllocCounts thread_allocations() noexcept { return {t_news, t_mallocs}; }

AllocCounts process_allocations() noexcept {
  return {g_news.load(std::memory_order_relaxed), g_mallocs.load(std::memory_order_relaxed)};
}

bool counts_malloc() noexcept { return DFI_COUNT_MALLOC != 0; }

std::string counting_problem() {
  const AllocCounts before = thread_allocations();
  delete new int(1);
  char* copy = strdup("probe");  // glibc mallocs through its PLT, like any library
  std::free(copy);
  const AllocCounts seen = thread_allocations() - before;
  if (seen.news != 1) return "operator new is not counted (saw " + std::to_string(seen.news) + ")";
  if (counts_malloc() && seen.mallocs < 2) {
    return "malloc from a library is not counted (saw " + std::to_string(seen.mallocs) +
           " of 2: something redirected malloc after start-up)";
  }
  return {};
}

void trace_next_allocations(int count, bool any_thread) noexcept {
  void* warm[1];
  t_in_hook = true;
  (void)backtrace(warm, 1);  // loads the unwinder now, not inside a counting window
  t_in_hook = false;
  t_trace_left = any_thread ? 0 : count;
  g_trace_left.store(any_thread ? count : 0, std::memory_order_relaxed);
}

void print_traced_allocations() {
  const int n = std::min(g_trace_count.load(), kMaxTraces);
  for (int i = 0; i < n; ++i) {
    const Trace& t = g_traces[static_cast<std::size_t>(i)];
    char line[128];
    const int len =
        std::snprintf(line, sizeof line, "allocation %d: %s of %zu B\n", i, t.kind, t.bytes);
    if (len > 0) (void)!write(2, line, static_cast<std::size_t>(len));
    backtrace_symbols_fd(t.frames.data(), t.depth, 2);
  }
}

}  // namespace dfi::testing
