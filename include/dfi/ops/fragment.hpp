// ops::Fragment — a thread's local share of an operator's input.
#pragma once

#include <cstddef>

namespace dfi::ops {

// `count` contiguous tuples of the input's schema at `tuples`. The memory must stay valid until
// the operator's run call returns.
struct Fragment {
  const void* tuples = nullptr;
  std::size_t count = 0;
};

}  // namespace dfi::ops
