// Small, stable hash functions for deterministic draws (samplers, curves, trial seeds).
// Their outputs are part of what makes a sweep repeatable across runs and resumes: changing
// them changes every sampled value. Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace sweep {

// FNV-1a, 64-bit: a string (a parameter name) to a number.
constexpr uint64_t Fnv1a64(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// splitmix64's finalizer: every input bit affects every output bit, which FNV alone does not
// give for short names or consecutive indices.
constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The top 53 bits of a hash as a double in [0, 1).
constexpr double UnitInterval(uint64_t hash) { return static_cast<double>(hash >> 11) * 0x1.0p-53; }

}  // namespace sweep
