// SHA-256 (FIPS 180-4), private to sweep_store: hashes a sweep's config text for config_hash.
// Our own small implementation so the store needs no crypto library; not for secrets.
// Pure functions of their input: safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace sweep::store::internal {

// The 32-byte digest of `data`.
std::array<uint8_t, 32> Sha256(std::string_view data);

// The digest as 64 lowercase hex characters.
std::string Sha256Hex(std::string_view data);

}  // namespace sweep::store::internal
