#include "dfi/flow/schema.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include "dfi/common/error.hpp"

namespace dfi::flow {
namespace {

struct TypeInfo {
  Type type;
  std::string_view name;
  std::size_t size;
};

constexpr std::array kTypes{
    TypeInfo{Type::int8, "int8", 1},       TypeInfo{Type::int16, "int16", 2},
    TypeInfo{Type::int32, "int32", 4},     TypeInfo{Type::int64, "int64", 8},
    TypeInfo{Type::uint8, "uint8", 1},     TypeInfo{Type::uint16, "uint16", 2},
    TypeInfo{Type::uint32, "uint32", 4},   TypeInfo{Type::uint64, "uint64", 8},
    TypeInfo{Type::float32, "float", 4},   TypeInfo{Type::float64, "double", 8},
    TypeInfo{Type::chars, "chars", 1},
};

const TypeInfo& info(Type type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return t;
  }
  throw Error(Errc::invalid_argument, "schema: unknown column type");
}

}  // namespace

std::size_t type_size(Type type) { return info(type).size; }
std::string_view type_name(Type type) { return info(type).name; }

Type parse_type(std::string_view name) {
  for (const TypeInfo& t : kTypes) {
    if (t.name == name) return t.type;
  }
  if (name == "float32") return Type::float32;  // the enum's names, accepted as aliases
  if (name == "float64") return Type::float64;
  throw Error(Errc::invalid_argument, "schema: unknown column type '" + std::string(name) + "'");
}

Schema::Schema(std::vector<Column> columns) : columns_(std::move(columns)) {
  if (columns_.empty()) throw Error(Errc::invalid_argument, "schema: a schema needs at least one column");
  std::size_t offset = 0;
  std::size_t max_align = 1;
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    const Column& c = columns_[i];
    if (c.name.empty()) throw Error(Errc::invalid_argument, "schema: column " + std::to_string(i) + " has no name");
    if (c.name.find_first_of(":,[]") != std::string::npos) {
      throw Error(Errc::invalid_argument, "schema: column name '" + c.name + "' contains one of : , [ ]");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (columns_[j].name == c.name) throw Error(Errc::invalid_argument, "schema: duplicate column '" + c.name + "'");
    }
    if (c.type == Type::chars && c.length == 0) {
      throw Error(Errc::invalid_argument, "schema: chars column '" + c.name + "' has length 0");
    }
    if (c.type != Type::chars && c.length != 1) {
      throw Error(Errc::invalid_argument, "schema: column '" + c.name + "' of type " +
                                              std::string(type_name(c.type)) + " cannot have a length");
    }
    const std::size_t align = type_size(c.type);
    max_align = std::max(max_align, align);
    offset = (offset + align - 1) / align * align;
    offsets_.push_back(offset);
    offset += column_bytes(i);
  }
  tuple_bytes_ = (offset + max_align - 1) / max_align * max_align;
}

std::size_t Schema::column_bytes(std::size_t index) const {
  const Column& c = columns_.at(index);
  return type_size(c.type) * c.length;
}

std::size_t Schema::index_of(std::string_view name) const {
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].name == name) return i;
  }
  throw Error(Errc::not_found, "schema: no column '" + std::string(name) + "' in " + describe());
}

std::string Schema::describe() const {
  std::string text;
  for (const Column& c : columns_) {
    if (!text.empty()) text += ',';
    text += c.name + ':' + std::string(type_name(c.type));
    if (c.type == Type::chars) text += '[' + std::to_string(c.length) + ']';
  }
  return text;
}

Schema Schema::parse(std::string_view text) {
  std::vector<Column> columns;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      throw Error(Errc::invalid_argument, "schema: column '" + std::string(item) + "' is not name:type");
    }
    Column c;
    c.name = std::string(item.substr(0, colon));
    std::string_view type = item.substr(colon + 1);
    if (std::size_t bracket = type.find('['); bracket != std::string_view::npos) {
      std::string_view digits = type.substr(bracket + 1);
      if (digits.empty() || digits.back() != ']') {
        throw Error(Errc::invalid_argument, "schema: bad length in '" + std::string(item) + "'");
      }
      digits.remove_suffix(1);
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), c.length);
      if (ec != std::errc() || end != digits.data() + digits.size()) {
        throw Error(Errc::invalid_argument, "schema: bad length in '" + std::string(item) + "'");
      }
      type = type.substr(0, bracket);
    }
    c.type = parse_type(type);
    columns.push_back(std::move(c));
  }
  return Schema(std::move(columns));
}

}  // namespace dfi::flow
