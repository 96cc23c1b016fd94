// Helpers for the CUDA backend's tests (real device or emulator): the normalised error that
// every comparison reports, 16-bit conversions done on the host as references, and copies to
// and from device buffers. Test-only.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/ops.h"
#include "cuda/device_buffer.h"
#include "gtest/gtest.h"

namespace sweep::trainer::cuda::test {

using HalfType = cpu::HalfType;

// n as a container's size.
inline size_t Count(int64_t n) { return static_cast<size_t>(n); }

// |gpu - cpu|_2 / |cpu|_2.
inline double NormErr(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    diff += (double{gpu[i]} - cpu[i]) * (double{gpu[i]} - cpu[i]);
    ref += double{cpu[i]} * cpu[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

// Prints what is compared, then checks it: the GPU run's log then shows every margin.
inline void ExpectErr(const char* what, double err, double bound) {
  std::printf("  %-44s normalised error %.3g (bound %.3g)\n", what, err, bound);
  EXPECT_LT(err, bound) << what;
}

// The bf16 nearest to x, ties to even (finite x), as its bits: the reference for the cast.
inline uint16_t HostBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// The fp16 nearest to x, ties to even, as its bits (the compiler's IEEE binary16).
inline uint16_t HostFp16(float x) {
  __extension__ const _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

inline float FromBf16(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

inline float FromFp16(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(frac), -24);
  } else if (exp == 31) {
    v = frac == 0 ? std::numeric_limits<float>::infinity()
                  : std::numeric_limits<float>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<float>(frac + 1024), exp - 25);
  }
  return sign ? -v : v;
}

inline std::vector<uint16_t> HostBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out;
  for (float v : x) out.push_back(HostBf16(v));
  return out;
}

// The fp32 values a 16-bit array holds.
inline std::vector<float> Widen(const std::vector<uint16_t>& h, HalfType type) {
  std::vector<float> out;
  for (uint16_t v : h) out.push_back(type == HalfType::kBf16 ? FromBf16(v) : FromFp16(v));
  return out;
}

template <typename T>
inline DeviceBuffer<T> Up(const std::vector<T>& h) {
  DeviceBuffer<T> d;
  EXPECT_TRUE(DeviceBuffer<T>::Make(static_cast<int64_t>(h.size()), &d).ok());
  EXPECT_EQ(cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return d;
}

template <typename T>
inline std::vector<T> Down(const DeviceBuffer<T>& d) {
  std::vector<T> h(static_cast<size_t>(d.size()));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), d.data(), h.size() * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return h;
}

}  // namespace sweep::trainer::cuda::test
