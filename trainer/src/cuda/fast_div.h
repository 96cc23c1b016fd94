// FastDiv: division by a divisor fixed when a kernel is launched, for the CUDA kernels and
// their host-side tests alike.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweep::trainer::cuda {

// n / d and n % d for a divisor fixed when a kernel is launched, by a multiply-high, an add and
// a shift (the round-up method of Granlund and Montgomery, 1994): a 32-bit division by a value
// the compiler cannot see costs about twenty instructions on a GPU. Exact for 0 <= n < 2^31.
struct FastDiv {
  uint32_t d = 1, m = 1, s = 0;
  FastDiv() = default;
  explicit FastDiv(int divisor) : d(static_cast<uint32_t>(divisor)) {
    while ((uint64_t{1} << s) < d) ++s;
    m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
  }
  __host__ __device__ uint32_t Div(uint32_t n) const { return (MulHi(n, m) + n) >> s; }
  __host__ __device__ uint32_t Mod(uint32_t n) const { return n - Div(n) * d; }
  static __host__ __device__ uint32_t MulHi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((uint64_t{a} * b) >> 32);
#endif
  }
};

}  // namespace sweep::trainer::cuda
