// kv::detail::Fifo — a first-in first-out queue of trivially copyable items in one power-of-two
// ring that doubles when full: the replicas' logs and pending reads. Amortized, it allocates
// nothing per item (std::deque allocates a block every few 100-byte items).
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

namespace dfi::apps::kv::detail {

template <class T>
class Fifo {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  explicit Fifo(std::size_t capacity = 64) {
    std::size_t c = 1;
    while (c < capacity) c <<= 1;
    items_.resize(c);
  }

  void push_back(const T& item) {
    if (size_ == items_.size()) grow();
    items_[(head_ + size_) & (items_.size() - 1)] = item;
    ++size_;
  }
  const T& front() const noexcept { return items_[head_]; }
  // The i-th oldest item (i < size()).
  T& operator[](std::size_t i) noexcept { return items_[(head_ + i) & (items_.size() - 1)]; }
  void pop_front() noexcept {
    head_ = (head_ + 1) & (items_.size() - 1);
    --size_;
  }
  // Drops every item (keeps the capacity).
  void clear() noexcept {
    head_ = 0;
    size_ = 0;
  }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }

 private:
  void grow() {
    std::vector<T> bigger(items_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = items_[(head_ + i) & (items_.size() - 1)];
    items_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> items_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace dfi::apps::kv::detail
