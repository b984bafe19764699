#include "protocol.hpp"

#include <algorithm>
#include <array>
#include <iterator>
#include <limits>

namespace dfi::registry::protocol {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<std::int8_t, 256> make_decode_table() {
  std::array<std::int8_t, 256> table{};
  for (auto& entry : table) entry = -1;
  for (std::size_t i = 0; i < kAlphabet.size(); ++i) {
    table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
  }
  return table;
}

constexpr std::size_t kQuoteLimit = 200;  // longest name quoted in full in a message

constexpr std::array<std::int8_t, 256> kDecode = make_decode_table();

constexpr Errc kAllCodes[] = {
    Errc::ok,          Errc::retry,          Errc::gap,      Errc::timeout, Errc::invalid_argument,
    Errc::not_found,   Errc::already_exists, Errc::protocol, Errc::io,      Errc::peer_failed,
    Errc::flow_failed, Errc::fatal};
static_assert(std::size(kAllCodes) == static_cast<std::size_t>(Errc::fatal) + 1,
              "kAllCodes lists every Errc");

std::string with_header(const std::string& body) {
  std::string frame(kHeaderBytes, '\0');
  put_length(static_cast<std::uint32_t>(body.size()), frame.data());
  frame += body;
  return frame;
}

}  // namespace

void put_length(std::uint32_t length, char* out) noexcept {
  out[0] = static_cast<char>((length >> 24) & 0xff);
  out[1] = static_cast<char>((length >> 16) & 0xff);
  out[2] = static_cast<char>((length >> 8) & 0xff);
  out[3] = static_cast<char>(length & 0xff);
}

std::uint32_t get_length(const char* in) noexcept {
  auto byte = [&](int i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(in[i])); };
  return (byte(0) << 24) | (byte(1) << 16) | (byte(2) << 8) | byte(3);
}

std::string encode_frame(const Json& message, std::size_t max_body) {
  std::string body;
  try {
    body = message.dump();
  } catch (const nlohmann::json::exception&) {
    throw Error(Errc::invalid_argument, "registry: a name or field is not valid UTF-8 text");
  }
  if (body.size() > max_body || body.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw Error(Errc::invalid_argument, "registry: request of " + std::to_string(body.size()) +
                                            " bytes exceeds the limit of " +
                                            std::to_string(max_body) + " bytes");
  }
  return with_header(body);
}

std::string encode_reply(const Json& message) {
  return with_header(message.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::optional<Json> parse_object(std::string_view body, std::string* why) {
  auto fail = [&](std::string text) -> std::optional<Json> {
    if (why != nullptr) *why = std::move(text);
    return std::nullopt;
  };
  if (body.empty()) return fail("is empty");
  Json parsed;
  try {
    parsed = Json::parse(body.begin(), body.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1; one past the end means the text stopped where more was required.
    if (e.byte > body.size()) {
      return fail("is not valid JSON (it ends early, after " + std::to_string(body.size()) +
                  " bytes)");
    }
    return fail("is not valid JSON (error at byte " + std::to_string(e.byte) + " of " +
                std::to_string(body.size()) + ")");
  } catch (const nlohmann::json::exception&) {
    return fail("is not valid JSON");
  }
  if (!parsed.is_object()) return fail("is " + std::string(kind_of(parsed)));
  return parsed;
}

std::string_view kind_of(const Json& value) noexcept {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::number_integer:
      return "an integer";
    case Json::value_t::number_unsigned:
      return value.get<std::uint64_t>() >
                     static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                 ? "an integer outside the signed 64-bit range"
                 : "an integer";
    case Json::value_t::number_float:
      return "a floating-point number";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::binary:
      return "binary data";
    case Json::value_t::discarded:
      return "discarded";
  }
  return "unknown";
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto at = [&](std::size_t k) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[k]));
  };
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest == 1) {
    const std::uint32_t v = at(i) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    const std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    if (last && text[i + 3] == '=') pad = text[i + 2] == '=' ? 2 : 1;
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      std::int8_t d = 0;
      if (k >= 4 - static_cast<std::size_t>(pad)) {
        if (c != '=') return std::nullopt;
      } else {
        d = kDecode[static_cast<unsigned char>(c)];
        if (d < 0) return std::nullopt;
      }
      v = (v << 6) | static_cast<std::uint32_t>(d);
    }
    // Canonical form: the bits under the padding are zero.
    if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0)) return std::nullopt;
    out += static_cast<char>((v >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

std::optional<Errc> errc_from_name(std::string_view name) noexcept {
  for (Errc code : kAllCodes) {
    if (errc_name(code) == name) return code;
  }
  return std::nullopt;
}

Json ok_reply() { return Json{{"ok", true}}; }

Json error_reply(Errc code, const std::string& message) {
  return Json{{"ok", false}, {"code", std::string(errc_name(code))}, {"error", message}};
}

const std::string* find_string(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return nullptr;
  return it->get_ptr<const std::string*>();
}

std::optional<std::int64_t> find_int(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const auto value = it->get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<std::int64_t>(value);
  }
  if (it->is_number_integer()) return it->get<std::int64_t>();
  return std::nullopt;
}

std::optional<bool> find_bool(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

std::string clip(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return std::string(text);
  return std::string(text.substr(0, limit)) + "...";
}

std::string quote_name(std::string_view name) {
  // Appended piecewise: "'" + std::string + "'" trips a false -Wrestrict in GCC 12 at -O3.
  std::string out;
  out.reserve(std::min<std::size_t>(name.size(), kQuoteLimit) + 5);
  out += '\'';
  out += clip(name, kQuoteLimit);
  out += '\'';
  return out;
}

}  // namespace dfi::registry::protocol
