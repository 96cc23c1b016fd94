// What the CUDA kernel files (ops.cu, cnn_ops.cu, bn_ops.cu, direct_conv.cu) share: the launch
// geometry of their grid-stride loops, the 16-bit conversion, and the activations' forward and
// gradient, so all compute the same bits for the same inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/ops.h"
#include "cuda/fast_div.h"

// A wide access's alignment, checked where the emulator runs the kernels (it defines the macro);
// nothing on a GPU, which faults on a misaligned one by itself.
#ifndef SWEEP_CHECK_ALIGNED
#define SWEEP_CHECK_ALIGNED(p, bytes) ((void)0)
#endif

namespace sweep::trainer::cuda {

using Activation = cpu::Activation;

constexpr int kThreads = 256;         // a power of two: LossSumKernel's tree relies on it
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops cover the rest

inline int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// Calls launch(int{}) where every index below `largest` (the largest tensor the kernel indexes),
// and i + stride past it, fit in an int; else launch(int64_t{}): a 64-bit division or remainder
// costs a few dozen instructions an element on the GPU.
template <typename F>
void ByIndex(int64_t largest, const F& launch) {
  if (largest <= std::numeric_limits<int>::max() - kMaxBlocks * kThreads) {
    launch(int{});
  } else {
    launch(int64_t{});
  }
}

__device__ inline int64_t FirstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t Stride() { return static_cast<int64_t>(blockDim.x) * gridDim.x; }
// FirstIndex and Stride in the kernel's index type (ByIndex).
template <typename Index>
__device__ inline Index FirstOf() {
  return static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
}
template <typename Index>
__device__ inline Index StrideOf() {
  return static_cast<Index>(blockDim.x) * gridDim.x;
}

// Outputs of a pooling window K wide at `stride` over `size` inputs (no padding).
inline int PoolOut(int size, int K, int stride) { return (size - K) / stride + 1; }

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// The 16-bit value nearest x (ties to even; fp16 overflows to inf), as its bits: what
// cast_to_half writes, and what the kernels that also write a 16-bit copy of their output write.
__device__ inline uint16_t HalfBits(float x, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16(x)) : __half_as_ushort(__float2half(x));
}

// The float that 16-bit bits hold: bfloat16 when bf16, else IEEE binary16.
__device__ inline float HalfValue(uint16_t bits, bool bf16) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(bits)) : __half2float(__ushort_as_half(bits));
}

// GELU's tanh approximation: the tanh both its forward and its backward take.
__device__ inline float GeluTanh(float x) {
  return tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
}

__device__ inline float ActForward(float x, Activation act) {
  if (act == Activation::kRelu) return x > 0.0f ? x : 0.0f;
  if (act == Activation::kTanh) return tanhf(x);
  if (act == Activation::kGelu) return 0.5f * x * (1.0f + GeluTanh(x));
  return x;
}

// The gradient w.r.t. pre from g (w.r.t. out) and a: out, or pre when a_is_pre (relu: out > 0
// exactly when pre > 0; tanh: the forward's tanhf(pre) again, the same bits; gelu always reads
// pre).
__device__ inline float ActGrad(float g, float a, Activation act, bool a_is_pre) {
  if (act == Activation::kRelu) return a > 0.0f ? g : 0.0f;
  if (act == Activation::kTanh) {
    const float y = a_is_pre ? tanhf(a) : a;
    return g * (1.0f - y * y);
  }
  if (act == Activation::kGelu) {
    const float t = GeluTanh(a);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * a * a);
    return g * (0.5f * (1.0f + t) + 0.5f * a * (1.0f - t * t) * du);
  }
  return g;
}

}  // namespace sweep::trainer::cuda
