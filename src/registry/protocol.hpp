// Internal: the registry wire protocol.
//
// A frame is a 4-byte big-endian length followed by that many bytes of one JSON object. Binary
// values (record values, member info) travel base64-encoded inside the JSON.
//
// The first request on a connection must be
//   {"op":"hello","token":"...","version":1}
// after which a client sends one request at a time and reads its reply:
//   {"op":"publish","name":N,"value":B64,"replace":bool}   -> {"ok":true}
//   {"op":"lookup","name":N}                               -> {"ok":true,"value":B64}
//   {"op":"wait","name":N,"timeout_ms":int}                -> {"ok":true,"value":B64} (held)
//   {"op":"remove","name":N}                               -> {"ok":true}
//   {"op":"join","rank":int,"info":B64}                    -> {"ok":true}
//   {"op":"members"}                   -> {"ok":true,"members":[{"rank":int,"info":B64},...]}
//   {"op":"barrier","name":N,"count":int,"timeout_ms":int} -> {"ok":true} (held)
// Every failure is {"ok":false,"code":"<errc_name>","error":"message"}. A malformed request
// (bad frame, invalid JSON, unknown op, missing or mistyped field) is answered with code
// "protocol" and the server closes that connection; other errors leave it open.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "dfi/common/error.hpp"

namespace dfi::registry::protocol {

using Json = nlohmann::json;

inline constexpr int kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 4;

// Writes `length` big-endian into out[0..3].
void put_length(std::uint32_t length, char* out) noexcept;
// Reads a big-endian length from in[0..3].
std::uint32_t get_length(const char* in) noexcept;

// Length prefix + compact JSON. Throws dfi::Error(invalid_argument) when a string in `message`
// is not valid UTF-8 (the client's names), or when the body exceeds `max_body` bytes.
std::string encode_frame(const Json& message, std::size_t max_body);
// As encode_frame, but replaces invalid UTF-8 and never throws on content (server replies).
std::string encode_reply(const Json& message);

// Parses a frame body; nullopt unless it is a JSON object. Never throws on content.
std::optional<Json> parse_object(std::string_view body);

std::string base64_encode(std::string_view bytes);
// nullopt when `text` is not canonical padded base64.
std::optional<std::string> base64_decode(std::string_view text);

// The Errc whose errc_name() is `name`, or nullopt.
std::optional<Errc> errc_from_name(std::string_view name) noexcept;

Json ok_reply();
Json error_reply(Errc code, const std::string& message);

// Typed field access; nullopt / nullptr when the field is missing or has another type.
const std::string* find_string(const Json& object, const char* key);
std::optional<std::int64_t> find_int(const Json& object, const char* key);
std::optional<bool> find_bool(const Json& object, const char* key);

// `text` cut to at most `limit` bytes (with "..." appended when cut), for error messages.
std::string clip(std::string_view text, std::size_t limit = 80);
// 'name', clipped, for error messages ("registry: no record 'x'").
std::string quote_name(std::string_view name);

}  // namespace dfi::registry::protocol
