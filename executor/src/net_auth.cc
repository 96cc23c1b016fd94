// Token files, nonces and HMAC proofs on OpenSSL's libcrypto (HMAC, RAND_bytes, CRYPTO_memcmp).
#include "executor/net_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "executor/net_protocol.h"

namespace sweep::executor::net {

namespace {

constexpr size_t kMaxTokenBytes = 4096;

std::string Hex(const unsigned char* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

std::string Proof(std::string_view label, std::string_view token, std::string_view agent_nonce,
                  std::string_view coordinator_nonce, std::string_view transcript = {}) {
  std::string message;
  message.reserve(label.size() + agent_nonce.size() + coordinator_nonce.size() + transcript.size() +
                  3);
  message += label;
  message += '\n';
  message += agent_nonce;
  message += '\n';
  message += coordinator_nonce;
  if (!transcript.empty()) {
    message += '\n';
    message += transcript;
  }
  return HmacSha256Hex(token, message);
}

}  // namespace

Result<std::string> ReadTokenFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    std::string msg = "cannot read token file " + path + ": " + std::strerror(err);
    if (err == ENOENT) return Status::NotFound(msg);
    return Status::IoError(msg);
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("token file " + path + " is not a regular file");
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument("token file " + path +
                                   " is accessible by group or others (mode " + mode +
                                   "); run: chmod 600 " + path);
  }
  if (static_cast<size_t>(st.st_size) > kMaxTokenBytes) {
    return Status::InvalidArgument("token file " + path + " is larger than 4 KiB");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::IoError("cannot read token file " + path + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  const char* space = " \t\r\n";
  size_t begin = token.find_first_not_of(space);
  if (begin == std::string::npos) {
    return Status::InvalidArgument("token file " + path + " is empty");
  }
  size_t end = token.find_last_not_of(space);
  return token.substr(begin, end - begin + 1);
}

Result<std::string> NewNonce() {
  unsigned char bytes[kNonceBytes];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return Status::Internal("the random generator (RAND_bytes) failed");
  }
  return Hex(bytes, sizeof bytes);
}

std::string HmacSha256Hex(std::string_view key, std::string_view message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // An empty key is legal for HMAC; OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const void* key_data = key.empty() ? &kEmpty : static_cast<const void*>(key.data());
  HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return Hex(digest, length);
}

std::string HandshakeDigest(std::string_view text) {
  return HmacSha256Hex("sweep handshake digest v1", text);
}

std::string AgentProof(std::string_view token, std::string_view agent_nonce,
                       std::string_view coordinator_nonce, std::string_view transcript) {
  return Proof("sweep agent proof v2", token, agent_nonce, coordinator_nonce, transcript);
}

std::string CoordinatorProof(std::string_view token, std::string_view agent_nonce,
                             std::string_view coordinator_nonce, std::string_view transcript) {
  return Proof("sweep coordinator proof v2", token, agent_nonce, coordinator_nonce, transcript);
}

std::string SessionKey(std::string_view token, std::string_view agent_nonce,
                       std::string_view coordinator_nonce) {
  return Proof("sweep session key v1", token, agent_nonce, coordinator_nonce);
}

bool ProofsEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool IsLoopback(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost" || host == "::1") return true;
  if (!host.starts_with("127.")) return false;
  // 127.a.b.c, each a number: "127.example.com" is not loopback.
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

Status ValidateListen(std::string_view host, bool has_token) {
  if (host.empty()) return Status::InvalidArgument("--listen: the host is empty");
  if (!has_token && !IsLoopback(host)) {
    return Status::InvalidArgument(
        "--listen " + std::string(host) +
        ": listening on a non-loopback address needs --token-file (agents authenticate with "
        "the shared token); without one, listen on 127.0.0.1");
  }
  return Status::Ok();
}

std::string FormatHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<std::pair<std::string, int>> ParseHostPort(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("'" + std::string(text) + "': " + std::string(why) +
                                   " (expected HOST:PORT)");
  };
  std::string host;
  std::string_view port;
  if (text.starts_with('[')) {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("an IPv6 address needs the form [ADDRESS]:PORT");
    }
    host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad("write an IPv6 address in brackets");
  }
  if (host.empty()) return bad("no host");
  if (port.empty() || port.size() > 5) return bad("the port must be a number in 0..65535");
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return bad("the port must be a number in 0..65535");
    value = value * 10 + (c - '0');
  }
  if (value > 65535) return bad("the port must be a number in 0..65535");
  return std::make_pair(host, value);
}

Result<std::pair<std::string, int>> ParseConnectAddress(std::string_view text) {
  SWEEP_ASSIGN_OR_RETURN(auto host_port, ParseHostPort(text));
  if (host_port.second == 0) {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "': port 0 is a listener's \"any free port\"; give the port "
                                   "the coordinator listens on, as `sweep run --listen` prints it");
  }
  return host_port;
}

}  // namespace sweep::executor::net
