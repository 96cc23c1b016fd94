// The direct convolution's kernels for cuda/cnn_ops.h: a convolution over few input channels
// (a network's first layer), forward and weight gradient, where cuDNN's generic kernels and
// layout transforms cost more than the work.
#include "cuda/cnn_ops.h"

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/device_util.h"
#include "cuda/launch.h"

namespace sweep::trainer::cuda {

namespace {

constexpr int kDirectMaxTaps = 32;       // K K C: one output's inputs, a thread's sums
constexpr int kDirectMaxWeights = 8192;  // OC K K C: the forward holds them in shared memory
constexpr int kDirectCols = 32;          // output channels a weight-gradient block takes
constexpr int kDirectGroups = 8;         // pixel groups of a weight-gradient block
// Ranges of the weight gradient's pixels: short where a thread's sums are few (up to 9 taps, 80
// registers, three blocks an SM), so that a batch of 256 28x28 images takes 784 blocks, about
// six an SM of an H100 over the grid, where ranges of 1,024 gave fewer than two; longer where
// the sums take most of the registers (one block an SM) and each range ends in a barrier a
// tap.
constexpr int64_t kDirectShortRange = 256;
constexpr int64_t kDirectLongRange = 1024;
constexpr int kDirectMaxRanges = 2048;
constexpr int kDirectSumRows = 8;  // entries of the weight gradient a sum block adds

int DirectRanges(int64_t pixels, int64_t taps) {
  const int64_t per = taps <= 9 ? kDirectShortRange : kDirectLongRange;
  return static_cast<int>(std::clamp<int64_t>((pixels + per - 1) / per, 1, kDirectMaxRanges));
}

__device__ inline float LoadAs(const float* p, uint32_t i, bool) { return p[i]; }
__device__ inline float LoadAs(const uint16_t* p, uint32_t i, bool bf16) {
  return HalfValue(p[i], bf16);
}
// The model's input, fp32, as the 16-bit copy cast_to_half would make holds it where half.
__device__ inline float LoadInput(const float* x, uint32_t i, bool half, bool bf16) {
  return half ? HalfValue(HalfBits(x[i], bf16), bf16) : x[i];
}
__device__ inline void StoreAs(float* p, uint32_t i, float v, bool) { p[i] = v; }
__device__ inline void StoreAs(uint16_t* p, uint32_t i, float v, bool bf16) {
  p[i] = HalfBits(v, bf16);
}

// The shape as the kernels take it: dividers for the output's indices, and each tap's row,
// column and channel offsets (tap t = (kh K + kw) C + c, the weights' order).
struct DirectGeom {
  int H = 0, W = 0, C = 0, OC = 0, OH = 0, OW = 0, stride = 1, pad = 0, taps = 0;
  FastDiv by_oc, by_ow, by_oh;
  int8_t kh[kDirectMaxTaps] = {}, kw[kDirectMaxTaps] = {}, c[kDirectMaxTaps] = {};
};

DirectGeom DirectGeomOf(const cpu::ConvShape& s) {
  DirectGeom g;
  g.H = s.H;
  g.W = s.W;
  g.C = s.C;
  g.OC = s.OC;
  g.OH = s.OH();
  g.OW = s.OW();
  g.stride = s.stride;
  g.pad = s.pad;
  g.taps = static_cast<int>(s.patch());
  g.by_oc = FastDiv(s.OC);
  g.by_ow = FastDiv(g.OW);
  g.by_oh = FastDiv(g.OH);
  for (int t = 0; t < g.taps; ++t) {
    g.c[t] = static_cast<int8_t>(t % s.C);
    g.kw[t] = static_cast<int8_t>(t / s.C % s.K);
    g.kh[t] = static_cast<int8_t>(t / s.C / s.K);
  }
  return g;
}

// One thread an output element (b, oh, ow, oc): neighbouring threads take neighbouring output
// channels of one pixel, so the input's loads are shared and the stores coalesce. The taps are
// added in the weights' order; a tap in the padding adds nothing.
template <typename T>
__global__ void DirectConvForwardKernel(T* y, const float* x, const T* w, DirectGeom g, uint32_t n,
                                        bool half, bool bf16) {
  // Each output channel's weights at an odd stride: neighbouring threads read other banks.
  __shared__ float sw[kDirectMaxWeights];
  const int stride = g.taps | 1, nw = g.OC * g.taps;
  for (int i = static_cast<int>(threadIdx.x); i < nw; i += static_cast<int>(blockDim.x)) {
    sw[i / g.taps * stride + i % g.taps] = LoadAs(w, static_cast<uint32_t>(i), bf16);
  }
  __syncthreads();
  const uint32_t step = blockDim.x * gridDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint32_t pix = g.by_oc.Div(i);
    const int oc = static_cast<int>(i - pix * g.by_oc.d);
    const uint32_t rows = g.by_ow.Div(pix);
    const int ow = static_cast<int>(pix - rows * g.by_ow.d);
    const uint32_t b = g.by_oh.Div(rows);
    const int oh = static_cast<int>(rows - b * g.by_oh.d);
    const float* wk = sw + oc * stride;
    const int h0 = oh * g.stride - g.pad, w0 = ow * g.stride - g.pad;
    float acc = 0.0f;
    for (int t = 0; t < g.taps; ++t) {
      const int ih = h0 + g.kh[t], iw = w0 + g.kw[t];
      if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
      const uint32_t at = ((b * g.H + static_cast<uint32_t>(ih)) * g.W + iw) * g.C + g.c[t];
      acc = fmaf(LoadInput(x, at, half, bf16), wk[t], acc);
    }
    StoreAs(y, i, acc, bf16);
  }
}

// The weight gradient's sums over pixel range blockIdx.y for output channels blockIdx.x
// kDirectCols + threadIdx.x: thread (c, g) takes pixels begin + g, begin + g + kDirectGroups,
// ..., a float sum per tap; the groups' sums are added in order, in double, into
// partials[(range taps + t) OC + oc]. kTaps >= g.taps bounds the unrolled loops: at 32 for a
// 3x3 filter over one channel, the tap tables and sums took 237 registers a thread.
template <typename T, int kTaps>
__global__ void __launch_bounds__(kDirectCols* kDirectGroups, kTaps <= 9 ? 3 : 1)
    DirectConvFilterPartialKernel(double* partials, const float* x, const T* dy, DirectGeom g,
                                  uint32_t pixels, uint32_t per_range, bool half, bool bf16) {
  __shared__ double s[kDirectGroups][kDirectCols];
  const int oc = static_cast<int>(blockIdx.x) * kDirectCols + static_cast<int>(threadIdx.x);
  const uint32_t begin = blockIdx.y * per_range;
  const uint32_t end = begin + per_range < pixels ? begin + per_range : pixels;
  float acc[kTaps];
#pragma unroll
  for (int t = 0; t < kTaps; ++t) acc[t] = 0.0f;
  if (oc < g.OC) {
    for (uint32_t p = begin + threadIdx.y; p < end; p += kDirectGroups) {
      const float d = LoadAs(dy, p * static_cast<uint32_t>(g.OC) + static_cast<uint32_t>(oc), bf16);
      const uint32_t rows = g.by_ow.Div(p);
      const int ow = static_cast<int>(p - rows * g.by_ow.d);
      const uint32_t b = g.by_oh.Div(rows);
      const int oh = static_cast<int>(rows - b * g.by_oh.d);
      const int h0 = oh * g.stride - g.pad, w0 = ow * g.stride - g.pad;
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        if (t >= g.taps) break;
        const int ih = h0 + g.kh[t], iw = w0 + g.kw[t];
        if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
        const uint32_t at = ((b * g.H + static_cast<uint32_t>(ih)) * g.W + iw) * g.C + g.c[t];
        acc[t] = fmaf(LoadInput(x, at, half, bf16), d, acc[t]);
      }
    }
  }
  const int lane = static_cast<int>(threadIdx.x), group = static_cast<int>(threadIdx.y);
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
    if (t >= g.taps) break;
    s[group][lane] = acc[t];
    __syncthreads();
    if (group == 0 && oc < g.OC) {
      double sum = s[0][lane];
      for (int k = 1; k < kDirectGroups; ++k) sum += s[k][lane];
      partials[(int64_t{blockIdx.y} * g.taps + t) * g.OC + oc] = sum;
    }
    __syncthreads();
  }
}

// dw[oc, t] (+)= the ranges' sums, rounded through the 16 bits of the storage where half (the
// bits of a 16-bit weight gradient widened). A warp an entry: lane l adds ranges l, l + 32, ...
// in order, then lane 0 adds the lanes' sums in order: the same bits every run.
__global__ void DirectConvFilterSumKernel(float* dw, const double* partials, int ranges, int OC,
                                          int taps, bool accumulate, bool half, bool bf16) {
  __shared__ double s[kDirectSumRows][32];
  const int n = OC * taps, lane = static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(threadIdx.y);
  // The loop's bounds are the block's, not the entry's: every thread reaches each barrier.
  for (int base = static_cast<int>(blockIdx.x) * kDirectSumRows; base < n;
       base += static_cast<int>(gridDim.x) * kDirectSumRows) {
    const int i = base + row;
    double sum = 0.0;
    if (i < n) {
      const int oc = i / taps, t = i % taps;
      for (int r = lane; r < ranges; r += 32) sum += partials[(int64_t{r} * taps + t) * OC + oc];
    }
    s[row][lane] = sum;
    __syncthreads();
    if (lane == 0 && i < n) {
      double total = s[row][0];
      for (int k = 1; k < 32; ++k) total += s[row][k];
      float v = static_cast<float>(total);
      if (half) v = HalfValue(HalfBits(v, bf16), bf16);
      dw[i] = accumulate ? dw[i] + v : v;
    }
    __syncthreads();
  }
}

}  // namespace

bool direct_conv_supported(const cpu::ConvShape& s) {
  const int64_t in = int64_t{s.B} * s.H * s.W * s.C;
  const int64_t out = int64_t{s.B} * s.OH() * s.OW() * s.OC;
  return s.patch() <= kDirectMaxTaps && s.OC * (s.patch() | 1) <= kDirectMaxWeights && s.OH() > 0 &&
         s.OW() > 0 && in < (int64_t{1} << 31) && out < (int64_t{1} << 31);
}

int64_t direct_conv_scratch_bytes(const cpu::ConvShape& s) {
  return int64_t{DirectRanges(int64_t{s.B} * s.OH() * s.OW(), s.patch())} * s.patch() * s.OC *
         static_cast<int64_t>(sizeof(double));
}

Status direct_conv_forward(void* y, const float* x, const void* w, const cpu::ConvShape& s,
                           bool half, cpu::HalfType type, cudaStream_t stream) {
  if (!direct_conv_supported(s)) {
    return Status::Internal("cuda: a direct convolution of a shape it does not take");
  }
  const int64_t n = int64_t{s.B} * s.OH() * s.OW() * s.OC;
  if (n == 0) return Status::Ok();
  const DirectGeom g = DirectGeomOf(s);
  const bool bf16 = type == cpu::HalfType::kBf16;
  if (half) {
    Launch(DirectConvForwardKernel<uint16_t>, Blocks(n), kThreads, stream,
           static_cast<uint16_t*>(y), x, static_cast<const uint16_t*>(w), g,
           static_cast<uint32_t>(n), true, bf16);
  } else {
    Launch(DirectConvForwardKernel<float>, Blocks(n), kThreads, stream, static_cast<float*>(y), x,
           static_cast<const float*>(w), g, static_cast<uint32_t>(n), false, bf16);
  }
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status direct_conv_backward_filter(float* dw, const float* x, const void* dy,
                                   const cpu::ConvShape& s, bool half, cpu::HalfType type,
                                   bool accumulate, void* scratch, cudaStream_t stream) {
  if (!direct_conv_supported(s)) {
    return Status::Internal("cuda: a direct convolution of a shape it does not take");
  }
  const int64_t pixels = int64_t{s.B} * s.OH() * s.OW();
  const int ranges = DirectRanges(pixels, s.patch());
  const uint32_t per_range = static_cast<uint32_t>((pixels + ranges - 1) / ranges);
  const DirectGeom g = DirectGeomOf(s);
  const bool bf16 = type == cpu::HalfType::kBf16;
  double* partials = static_cast<double*>(scratch);
  const dim3 grid((s.OC + kDirectCols - 1) / kDirectCols, ranges),
      block(kDirectCols, kDirectGroups);
  // The tap counts of a 3x3 filter over one and three channels, or any up to 32.
  auto launch = [&](auto taps) {
    constexpr int kTaps = decltype(taps)::value;
    if (half) {
      Launch(DirectConvFilterPartialKernel<uint16_t, kTaps>, grid, block, stream, partials, x,
             static_cast<const uint16_t*>(dy), g, static_cast<uint32_t>(pixels), per_range, true,
             bf16);
    } else {
      Launch(DirectConvFilterPartialKernel<float, kTaps>, grid, block, stream, partials, x,
             static_cast<const float*>(dy), g, static_cast<uint32_t>(pixels), per_range, false,
             bf16);
    }
  };
  if (g.taps <= 9) {
    launch(std::integral_constant<int, 9>{});
  } else if (g.taps <= 27) {
    launch(std::integral_constant<int, 27>{});
  } else {
    launch(std::integral_constant<int, kDirectMaxTaps>{});
  }
  CUDA_CHECK(cudaGetLastError());
  const int n = s.OC * g.taps;
  Launch(DirectConvFilterSumKernel, dim3((n + kDirectSumRows - 1) / kDirectSumRows),
         dim3(32, kDirectSumRows), stream, dw, static_cast<const double*>(partials), ranges, s.OC,
         g.taps, accumulate, half, bf16);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace sweep::trainer::cuda
