// flow::Schema — the fixed-width tuple type of a flow (003 §4.1).
//
// Columns use the LP64 C types. Offsets follow C struct layout (each column aligned to its own
// size, the tuple padded to its largest alignment), so a plain C++ struct with the same members
// in the same order has the same layout. Offsets are computed once, at construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dfi::flow {

enum class Type { int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64, chars };

// Size in bytes of one value of `type` (1 per character for chars).
std::size_t type_size(Type type);
std::string_view type_name(Type type);
// Parses a type name as written by type_name() (or float32 / float64 for float / double);
// throws dfi::Error(invalid_argument).
Type parse_type(std::string_view name);

struct Column {
  std::string name;
  Type type = Type::int64;
  std::uint32_t length = 1;  // characters, for Type::chars; 1 otherwise
};

class Schema {
 public:
  Schema() = default;
  // Throws dfi::Error(invalid_argument) for no columns, an empty or duplicate name, or a chars
  // column of length 0.
  explicit Schema(std::vector<Column> columns);

  std::size_t tuple_bytes() const noexcept { return tuple_bytes_; }
  std::size_t column_count() const noexcept { return columns_.size(); }
  const Column& column(std::size_t index) const { return columns_.at(index); }
  std::size_t offset(std::size_t index) const { return offsets_.at(index); }
  std::size_t column_bytes(std::size_t index) const;
  // Index of the column called `name`; throws dfi::Error(not_found) naming it.
  std::size_t index_of(std::string_view name) const;

  // "key:int64,value:double,tag:chars[8]" — also the wire form; parse() reads it back. Type
  // names: int8..int64, uint8..uint64, float, double, chars[n]; parse() also accepts float32 and
  // float64 for float and double. parse() throws dfi::Error(invalid_argument) naming what is
  // wrong.
  std::string describe() const;
  static Schema parse(std::string_view text);

  bool operator==(const Schema& other) const { return describe() == other.describe(); }

 private:
  std::vector<Column> columns_;
  std::vector<std::size_t> offsets_;
  std::size_t tuple_bytes_ = 0;
};

}  // namespace dfi::flow
