// Size and time bounds of the registry, shared by the server, the client and their callers.
//
// The server enforces every bound on what it receives, so no client can make it allocate or wait
// without limit; the client checks the same bounds before sending, so a caller gets a clear
// invalid_argument error instead of a dropped connection.
#pragma once

#include <chrono>
#include <cstddef>

namespace dfi::registry {

// Largest request frame (JSON body, without the 4-byte length prefix) the server accepts. A
// longer frame is answered with a protocol error and its connection is closed.
inline constexpr std::size_t kMaxRequestBytes = std::size_t{1} << 20;

// Largest first frame (the hello, carrying the token) of a connection. Until a peer has shown
// the token it may make the server buffer this much, not kMaxRequestBytes.
inline constexpr std::size_t kMaxHelloBytes = std::size_t{64} << 10;

// Largest reply frame the client accepts (a members() reply grows with the cluster).
inline constexpr std::size_t kMaxReplyBytes = std::size_t{64} << 20;

// Largest record name, in bytes of UTF-8.
inline constexpr std::size_t kMaxNameBytes = 1024;

// Largest record value. Values travel base64-encoded, so this keeps a publish frame well
// under kMaxRequestBytes.
inline constexpr std::size_t kMaxValueBytes = std::size_t{512} << 10;

// Largest membership info string passed to Client::join().
inline constexpr std::size_t kMaxInfoBytes = 4096;

// Most members the server tracks at once.
inline constexpr std::size_t kMaxMembers = 4096;

// Default bound on simultaneously open client connections of one server.
inline constexpr std::size_t kDefaultMaxConnections = 1024;

// Longest timeout a wait or barrier may ask for; longer requests are clamped to this.
inline constexpr std::chrono::milliseconds kMaxWaitTimeout{7LL * 24 * 3600 * 1000};

}  // namespace dfi::registry
