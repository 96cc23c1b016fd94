// Deterministic random numbers for the trainer: splitmix64 seeding, xoshiro256** streams,
// Fisher-Yates shuffles and Box-Muller normals. Written out by hand (not <random>'s
// distributions, whose outputs differ between standard libraries) so a seed means the same
// initial weights and batch order on every build and, later, every backend. Not thread-safe:
// one Rng per thread or per purpose.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

// The mixing functions are also device code: the CUDA backend's dropout derives a layer's key
// from the step's on the device.
#include "host_device.h"

namespace sweep::trainer {

SWEEP_HOST_DEVICE inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Mixes several words into one seed, so (trial seed, purpose, epoch) streams don't overlap.
SWEEP_HOST_DEVICE inline uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t s = a;
  uint64_t h = SplitMix64(&s);
  s = h ^ b;
  h = SplitMix64(&s);
  s = h ^ c;
  return SplitMix64(&s);
}

// A 32-bit integer hash with good avalanche (Wellons' lowbias32): plain multiply/shift/xor on
// uint32, so the CPU's dropout loop vectorises under AVX2.
SWEEP_HOST_DEVICE inline uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// Dropout's factor for element `index` of a step's activations under its 64-bit key: 0 (dropped)
// or `scale`. One definition for both backends, so their masks match bit for bit.
SWEEP_HOST_DEVICE inline float DropoutFactor(uint32_t index, uint32_t key_lo, uint32_t key_hi,
                                             uint32_t threshold, float scale) {
  return Mix32(Mix32(index + key_lo) ^ key_hi) >= threshold ? scale : 0.0f;
}

// __extension__: 128-bit products are a GCC/Clang extension that -Wpedantic would flag.
__extension__ typedef unsigned __int128 Uint128;

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t s = seed;
    for (uint64_t& w : s_) w = SplitMix64(&s);
  }

  uint64_t NextU64() {  // xoshiro256**
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, bound), unbiased (Lemire's multiply-and-reject).
  uint64_t Below(uint64_t bound) {
    Uint128 m = static_cast<Uint128>(NextU64()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<Uint128>(NextU64()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Standard normal (Box-Muller; the second value of each pair is dropped for simplicity).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]: log stays finite
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  template <typename T>
  void Shuffle(T* data, int64_t n) {
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(Below(static_cast<uint64_t>(i) + 1));
      std::swap(data[i], data[j]);
    }
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace sweep::trainer
