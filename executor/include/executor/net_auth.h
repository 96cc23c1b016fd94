// Authentication of agents: the shared token, nonces and HMAC-SHA256 proofs, and the start-up
// checks the CLI runs (ValidateListen, ParseHostPort). The token never crosses the wire: each
// side proves it holds the token by an HMAC over both sides' fresh nonces (docs/agent-protocol.md,
// "Handshake and authentication"). Every function is safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace sweep::executor::net {

// Reads a token file: its content with surrounding whitespace (a trailing newline) removed.
//   NotFound / IoError naming the file when it cannot be read;
//   InvalidArgument when it is empty, larger than 4 KiB, or readable by group or others (like
//   ssh with a private key: the fix, `chmod 600 FILE`, is in the message).
Result<std::string> ReadTokenFile(const std::string& path);

// kNonceBytes fresh random bytes (OpenSSL RAND_bytes) as lowercase hex.
// Internal when the random generator fails (never silently weak).
Result<std::string> NewNonce();

// HMAC-SHA256 of `message` under `key`, as 64 lowercase hex digits.
std::string HmacSha256Hex(std::string_view key, std::string_view message);

// The proofs of the handshake. Both cover the two nonces in a fixed order, and `transcript`:
// what the handshake's messages said (HandshakeDigest of the hello's JSON text; for the
// coordinator's, that and the welcome's own fields), so that a machine on the path cannot
// change a hello's slots or a welcome's heartbeat. The different labels keep one side's proof
// from being reflected back as the other's.
std::string AgentProof(std::string_view token, std::string_view agent_nonce,
                       std::string_view coordinator_nonce, std::string_view transcript = {});
std::string CoordinatorProof(std::string_view token, std::string_view agent_nonce,
                             std::string_view coordinator_nonce, std::string_view transcript = {});
// A digest of a handshake message's JSON text, for the proofs' transcript.
std::string HandshakeDigest(std::string_view text);

// The key that authenticates a session's frames once the handshake is done (docs/agent-protocol.md,
// "Frames after the handshake"): HMAC of both nonces under the token, with its own label.
std::string SessionKey(std::string_view token, std::string_view agent_nonce,
                       std::string_view coordinator_nonce);

// Constant-time comparison (CRYPTO_memcmp) of two proofs; false when the lengths differ.
bool ProofsEqual(std::string_view a, std::string_view b);

// True for "localhost", 127.0.0.0/8 and ::1 (with or without brackets).
bool IsLoopback(std::string_view host);

// The CLI's check before listening: a non-loopback address without a token is refused
// (InvalidArgument naming the address), as is an empty host.
Status ValidateListen(std::string_view host, bool has_token);

// "HOST:PORT" or "[IPV6]:PORT" -> (host, port). InvalidArgument naming the text when the port
// is missing, not a number, or outside 0..65535 (0 lets the listener pick one).
Result<std::pair<std::string, int>> ParseHostPort(std::string_view text);
// An address to connect to: as ParseHostPort, and port 0 (a listener's "any free port") refused.
Result<std::pair<std::string, int>> ParseConnectAddress(std::string_view text);
// The other way: "HOST:PORT", an IPv6 address in brackets, as --listen and --connect take it.
std::string FormatHostPort(const std::string& host, int port);

}  // namespace sweep::executor::net
