// Internal: the registry wire protocol, version 1. This comment is its specification: it is
// enough to write a client in another language. Server: server.cpp; client: client.cpp; bounds:
// include/dfi/registry/limits.hpp.
//
// ---- Frames -----------------------------------------------------------------------------------
// A client opens one TCP connection and both sides exchange frames on it:
//
//   +-----------------------------+-----------------------------------------------------+
//   | length: 4 bytes, big-endian | body: `length` bytes of UTF-8 text, one JSON object |
//   +-----------------------------+-----------------------------------------------------+
//
// The length counts the body only. JSON is RFC 8259 (the whole body is one object; whitespace
// around it is allowed, anything else after it is not). Key order is free and a key a request
// does not use is ignored, so a newer client may add optional keys. Send each key once.
//   STR   a JSON string
//   INT   a JSON integer (no fraction, no exponent) in the signed 64-bit range
//   BOOL  true or false
//   B64   binary bytes as a string in standard base64 (RFC 4648 section 4: alphabet A-Z a-z 0-9
//         + /, padded with '=' to a multiple of 4 characters, no line breaks, and canonical: the
//         bits under the padding are zero)
//
// ---- Session ----------------------------------------------------------------------------------
// 1. The first frame must be the hello; the server answers it:
//      {"op":"hello","token":STR,"version":1}              -> {"ok":true,"version":1}
//    token is the shared secret (ServerOptions::token; "" when the server has none).
// 2. Then any number of requests. Each gets exactly one reply, in the order sent; a client may
//    send the next request before the last reply arrived (the server reads it once that reply
//    is sent; a held request delays the ones behind it).
// 3. Either side may close. Closing ends the client's memberships and withdraws its barrier
//    arrival; a client that shuts down its sending side while a wait or barrier is held is
//    taken as gone and gets no reply to it.
//
// ---- Requests (every key is required unless marked optional) ----------------------------------
//   {"op":"publish","name":STR,"value":B64,"replace":BOOL}   -> {"ok":true}
//        Stores value under name and answers every held wait for name. replace is optional
//        (default false); without it an existing name is already_exists.
//   {"op":"lookup","name":STR}                               -> {"ok":true,"value":B64}
//   {"op":"wait","name":STR,"timeout_ms":INT}                -> {"ok":true,"value":B64}
//        As lookup, but held until name is published or timeout_ms passes.
//   {"op":"wait_all","names":[STR,...],"publishers":[INT,...],"skip_dead":BOOL,"timeout_ms":INT}
//                                                            -> {"ok":true,"values":[B64|null,...]}
//        As wait, for every name at once (one request for many records): held until each name
//        is published, then answered with the values in the order of names. publishers
//        (optional) holds one rank per name, the member expected to publish it (-1: none); when
//        that rank is no member (at the request or while it is held) and its name is unpublished,
//        the answer is peer_failed ("registry: rank 3 is no member (it left or died) and never
//        published 'x'"), or, with skip_dead (optional, default false), that name's value is
//        null. A timeout answers timeout naming how many are missing and the first.
//        invalid_argument: a bad name, publishers of another length than names.
//   {"op":"remove","name":STR}                               -> {"ok":true}
//   {"op":"join","rank":INT,"info":B64}                      -> {"ok":true}
//        Makes this connection member `rank` (0..2^31-1) until it closes.
//   {"op":"members"}          -> {"ok":true,"version":INT,"members":[{"rank":INT,"info":B64},...]}
//        Every member, ascending rank. version counts membership changes (joins, and members
//        whose connection closed), starting at 1.
//   {"op":"members","since":INT,"timeout_ms":INT}            -> the same reply
//        A watch: answered at once when the membership's version differs from since, else held
//        until it changes (answered then, with the new version) or timeout_ms passes (answered
//        unchanged). A negative timeout_ms is invalid_argument.
//   {"op":"barrier","name":STR,"count":INT,"timeout_ms":INT} -> {"ok":true}
//        Held until `count` connections have arrived at barrier `name` in this round (every
//        participant must give the same count), or timeout_ms passes.
// A reply may carry more keys than listed; clients ignore them.
//
// ---- Limits -----------------------------------------------------------------------------------
//   request body      at most kMaxRequestBytes (1 MiB); the hello at most kMaxHelloBytes (64 KiB)
//   reply body        at most kMaxReplyBytes (64 MiB) is accepted by the client
//   name              1 .. kMaxNameBytes (1024) bytes of UTF-8 (lookup and remove take any
//                     string: a name that cannot exist is simply not_found)
//   value             at most kMaxValueBytes (512 KiB) after base64 decoding
//   info              at most kMaxInfoBytes (4096) after base64 decoding
//   members           at most kMaxMembers (4096); a join beyond is invalid_argument
//   count             1 .. ServerOptions::max_connections
//   timeout_ms        0 .. any; above kMaxWaitTimeout (7 days) it is clamped to that
//   deadlines         hello within ServerOptions::hello_timeout (10 s) of connecting; each frame
//                     complete within ServerOptions::frame_timeout (10 s) of its first byte;
//                     a reply read by the client within 10 s of being sent (else the connection
//                     is dropped without a frame)
//
// ---- Error frames -----------------------------------------------------------------------------
//   {"ok":false,"code":CODE,"error":MESSAGE}
// CODE is the errc_name of a dfi::Errc (include/dfi/common/error.hpp); MESSAGE is readable
// UTF-8 text saying what was wrong ("registry: no record 'x'"). The dfi client throws
// dfi::Error(code, MESSAGE) for it (for an answer to the hello, MESSAGE is prefixed with
// "registry at H:P rejected the connection: "). There are two kinds:
//
// Request errors: the request was well formed but cannot be done. The connection stays open.
//   invalid_argument  a name is empty or too long; a value or info is too large; a timeout is
//                     negative; a rank is negative or above 2^31-1; the membership is full; a
//                     barrier count is out of range or differs from the count of those waiting
//   not_found         lookup or remove of a name that has no record
//   already_exists    publish of an existing name without replace; join of a rank a live
//                     connection holds
//   timeout           a wait or barrier ran out ("registry: barrier 'b' timed out after 50 ms
//                     with 1 of 2 arrived")
//   peer_failed       a wait_all whose publisher is no member (the only request error with this
//                     code: the connection stays open, unlike the connection error below)
//
// Connection errors: the server sends the frame, then shuts down its sending side, discards
// whatever else arrives for up to one second and closes the connection.
//   retry             "registry at H:P: too many connections (limit N)", sent right after
//                     accept when the server already has max_connections open
//   invalid_argument  "registry: bad token" (the hello's token is wrong)
//   peer_failed       "registry at H:P is shutting down" (to held requests when it stops)
//   protocol          the request is malformed; MESSAGE is one of the following, with the
//                     parts in <> filled in:
//     the length prefix is above the limit (kMaxHelloBytes for the first frame)
//       "registry: frame of <n> bytes exceeds the limit of <limit> bytes"
//     the peer shut down its sending side inside a frame (after `got` of its bytes)
//       "registry: connection closed inside a frame (<got> of 4 header bytes)"
//       "registry: connection closed inside a frame (<got> of <n> body bytes)"
//     a frame started but stayed incomplete for frame_timeout
//       "registry: frame incomplete after <ms> ms (<got> of 4 header bytes)"   (or body bytes)
//     no complete hello within hello_timeout of connecting
//       "registry: no hello within <ms> ms"
//     the body is not one JSON object
//       "registry: frame body is empty; expected one JSON object"
//       "registry: frame body is not valid JSON (error at byte <i> of <n>); expected one JSON
//        object"                           (i counts from 1; also for invalid UTF-8 text)
//       "registry: frame body is not valid JSON (it ends early, after <n> bytes); expected one
//        JSON object"
//       "registry: frame body is <kind>; expected one JSON object"
//     the op
//       "registry: request has no field 'op'"
//       "registry: field 'op' of the request is <kind>, expected a string"
//       "registry: expected 'hello' as the first request, got '<op>'"
//       "registry: second 'hello' on one connection"
//       "registry: unknown op '<op>'"
//       "registry: client speaks protocol version <v>, this server speaks 1"
//     a field of op <op> (hello included)
//       "registry: request '<op>' has no field '<key>'"
//       "registry: field '<key>' of request '<op>' is <kind>, expected <a string | an integer |
//        a boolean>"
//       "registry: field '<key>' of request '<op>' is not canonical padded base64"
//   <kind> is one of: null, a boolean, a string, an integer, an integer outside the signed 64-bit
//   range, a floating-point number, an array, an object. Quoted client text (<op>) is cut to 80
//   bytes plus "...". A protocol error always ends the connection, even where the frame
//   boundary is known (a mistyped field): a peer that sends one does not speak this protocol
//   (another version, a bug, or not a registry client), so nothing else it sent or holds
//   (memberships, barrier arrivals) is trusted.
//
// Closes without a frame: a peer that does not read its replies for 10 s, a socket error, a
// connection beyond max_connections + 64 (refused at accept), and, when the server stops,
// every connection not holding a request.
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

// Parses a frame body; nullopt unless it is one JSON object, with `why` (when given) set to
// what it is instead: "is empty", "is not valid JSON (error at byte 3 of 16)", "is not valid
// JSON (it ends early, after 5 bytes)", "is an array".
// Never throws on content.
std::optional<Json> parse_object(std::string_view body, std::string* why = nullptr);

// What a JSON value is, for messages: "null", "a boolean", "a string", "an integer", "an integer
// outside the signed 64-bit range", "a floating-point number", "an array", "an object".
std::string_view kind_of(const Json& value) noexcept;

std::string base64_encode(std::string_view bytes);
// nullopt when `text` is not canonical padded base64.
std::optional<std::string> base64_decode(std::string_view text);

// The Errc whose errc_name() is `name`, or nullopt.
std::optional<Errc> errc_from_name(std::string_view name) noexcept;

Json ok_reply();
Json error_reply(Errc code, const std::string& message);

// Typed field access; nullopt / nullptr when the field is missing or has another type (find_int:
// also when the integer does not fit a signed 64-bit integer).
const std::string* find_string(const Json& object, const char* key);
std::optional<std::int64_t> find_int(const Json& object, const char* key);
std::optional<bool> find_bool(const Json& object, const char* key);

// `text` cut to at most `limit` bytes (with "..." appended when cut), for error messages.
std::string clip(std::string_view text, std::size_t limit = 80);
// 'name', clipped, for error messages ("registry: no record 'x'").
std::string quote_name(std::string_view name);

}  // namespace dfi::registry::protocol
