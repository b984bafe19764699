// kv::detail records — a header struct (Request, Reply, Accept, ...) followed by a value of the
// service's width, in memory laid out as the flows' tuples are (service.hpp: value_of): a strided
// view of a batch of them, one of them in a buffer of its own (to build a tuple to push), and a
// first-in first-out queue of them (the replicas' logs, the client's completions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "dfi/flow/shuffle.hpp"

namespace dfi::apps::kv::detail {

// Storage of records: 8-byte words, so that every header is aligned.
inline std::size_t words_for(std::size_t bytes) noexcept { return (bytes + 7) / 8; }

// `count` records of `stride` bytes, the header of each at its start.
template <class T>
class Records {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  class iterator {
   public:
    iterator(const std::byte* at, std::size_t stride) : at_(at), stride_(stride) {}
    const T& operator*() const noexcept { return *reinterpret_cast<const T*>(at_); }
    iterator& operator++() noexcept {
      at_ += stride_;
      return *this;
    }
    bool operator!=(const iterator& other) const noexcept { return at_ != other.at_; }

   private:
    const std::byte* at_;
    std::size_t stride_;
  };

  Records() = default;
  Records(const std::byte* data, std::size_t count, std::size_t stride) : data_(data), count_(count), stride_(stride) {}

  const T& operator[](std::size_t i) const noexcept { return *reinterpret_cast<const T*>(data_ + i * stride_); }
  const T& front() const noexcept { return (*this)[0]; }
  const T& back() const noexcept { return (*this)[count_ - 1]; }
  std::size_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  iterator begin() const noexcept { return {data_, stride_}; }
  iterator end() const noexcept { return {data_ + count_ * stride_, stride_}; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t count_ = 0;
  std::size_t stride_ = sizeof(T);
};

// Throws dfi::Error(protocol): a batch of `tuple_bytes`-wide tuples where `expected` were due.
[[noreturn]] void throw_record_width(std::size_t tuple_bytes, std::size_t expected);

// The tuples of `batch` as records with header T. Throws dfi::Error(protocol) unless the batch's
// tuples are sizeof(T) + value_bytes wide (a flow opened with another schema).
template <class T>
Records<T> records(const flow::TupleBatch& batch, std::size_t value_bytes) {
  if (batch.tuple_bytes != sizeof(T) + value_bytes && batch.count > 0) [[unlikely]] {
    throw_record_width(batch.tuple_bytes, sizeof(T) + value_bytes);
  }
  return {batch.data, batch.count, sizeof(T) + value_bytes};
}

// One record in a buffer of its own: a tuple being built.
template <class T>
class Record {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  explicit Record(std::size_t value_bytes)
      : value_bytes_(value_bytes), words_(words_for(sizeof(T) + value_bytes), 0) {}

  T& head() noexcept { return *reinterpret_cast<T*>(words_.data()); }
  const T& head() const noexcept { return *reinterpret_cast<const T*>(words_.data()); }
  char* value() noexcept { return reinterpret_cast<char*>(words_.data()) + sizeof(T); }
  // Sets the header and the value (null: zeros).
  void set(const T& header, const char* value) noexcept {
    head() = header;
    if (value != nullptr) {
      std::memcpy(this->value(), value, value_bytes_);
    } else {
      std::memset(this->value(), 0, value_bytes_);
    }
  }
  const void* data() const noexcept { return words_.data(); }
  std::size_t bytes() const noexcept { return sizeof(T) + value_bytes_; }

 private:
  std::size_t value_bytes_;
  std::vector<std::uint64_t> words_;
};

// A first-in first-out queue of records in one power-of-two ring that doubles when full: the
// replicas' logs and pending reads, the client's completions. Amortized, it allocates nothing per
// record (std::deque allocates a block every few 100-byte items). value_bytes 0: plain items.
template <class T>
class RecordFifo {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  RecordFifo(std::size_t value_bytes, std::size_t capacity)
      : value_bytes_(value_bytes), stride_words_(words_for(sizeof(T) + value_bytes)) {
    std::size_t c = 1;
    while (c < capacity) c <<= 1;
    capacity_ = c;
    words_.resize(capacity_ * stride_words_);
  }

  // Appends header `head` with `value` (null: zeros).
  void push_back(const T& head, const char* value) {
    if (size_ == capacity_) grow();
    std::uint64_t* at = slot((head_ + size_) & (capacity_ - 1));
    std::memcpy(at, &head, sizeof(T));
    char* v = reinterpret_cast<char*>(at) + sizeof(T);
    if (value != nullptr) {
      std::memcpy(v, value, value_bytes_);
    } else {
      std::memset(v, 0, value_bytes_);
    }
    ++size_;
  }
  // Appends an item without a value (a queue of value_bytes 0).
  void push_back(const T& head) { push_back(head, nullptr); }
  const T& front() const noexcept { return (*this)[0]; }
  T& front() noexcept { return (*this)[0]; }
  T& back() noexcept { return (*this)[size_ - 1]; }
  // The i-th oldest record (i < size()).
  T& operator[](std::size_t i) noexcept { return *reinterpret_cast<T*>(slot((head_ + i) & (capacity_ - 1))); }
  const T& operator[](std::size_t i) const noexcept {
    return *reinterpret_cast<const T*>(words_.data() + ((head_ + i) & (capacity_ - 1)) * stride_words_);
  }
  // Drops the oldest record; its bytes stay readable until the next push_back.
  void pop_front() noexcept {
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
  }
  void clear() noexcept {
    head_ = 0;
    size_ = 0;
  }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  // The records, oldest first, as one strided run: only for a queue that was never popped since
  // it was last cleared (it never wrapped).
  Records<T> records() const noexcept {
    return {reinterpret_cast<const std::byte*>(words_.data() + head_ * stride_words_), size_, stride_words_ * 8};
  }

 private:
  std::uint64_t* slot(std::size_t i) noexcept { return words_.data() + i * stride_words_; }

  void grow() {
    std::vector<std::uint64_t> bigger(capacity_ * 2 * stride_words_);
    for (std::size_t i = 0; i < size_; ++i) {
      std::memcpy(bigger.data() + i * stride_words_, slot((head_ + i) & (capacity_ - 1)), stride_words_ * 8);
    }
    words_.swap(bigger);
    capacity_ *= 2;
    head_ = 0;
  }

  std::size_t value_bytes_;
  std::size_t stride_words_;
  std::size_t capacity_ = 0;
  std::vector<std::uint64_t> words_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace dfi::apps::kv::detail
