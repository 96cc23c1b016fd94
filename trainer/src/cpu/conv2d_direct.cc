// The direct convolution kernels of conv2d_direct.h: a row of up to kTile output pixels in
// registers times 16 output channels, fed from a zero-padded copy of each sample.
#include "cpu/conv2d_direct.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

namespace sweep::trainer::cpu {
namespace {

// 16 output channels in two ymm lanes, a row of up to kTile output pixels in registers (12
// accumulators of the 16), so each broadcast input feeds two FMAs and each weight load six. The
// build targets generic x86-64, hence the target attribute and the runtime check; NHWC with
// channel counts of 16k needs no im2col and no packing by the BLAS.
constexpr int kTile = 6;

// The next tile of `left` pixels (or taps): the row split into tiles of near-equal size, since
// a tile of 1-3 has too few accumulators to hide the FMA latency (14 = 5 + 5 + 4, not 6 + 6 + 2).
int TileSize(int left) {
  const int tiles = (left + kTile - 1) / kTile;
  return (left + tiles - 1) / tiles;
}

#if defined(__x86_64__)
#define SWEEP_AVX2 __attribute__((target("avx2,fma")))

// out[p][0..16) (+)= sum over (kh, kw, c) of x[p * xstep + kh * row + kw * C + c] * w[..][lane],
// w packed [K][K][C][16].
template <int PB>
SWEEP_AVX2 void DirectTile(float* out, int out_stride, const float* x, int64_t xstep, int64_t row,
                           int K, int C, const float* w, bool accumulate) {
  __m256 acc[PB][2];
#pragma GCC unroll 8
  for (int p = 0; p < PB; ++p) acc[p][0] = acc[p][1] = _mm256_setzero_ps();
  for (int kh = 0; kh < K; ++kh) {
    for (int kw = 0; kw < K; ++kw) {
      const float* xr = x + kh * row + int64_t{kw} * C;
      for (int c = 0; c < C; ++c, w += kLanes) {
        const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
#pragma GCC unroll 8
        for (int p = 0; p < PB; ++p) {
          const __m256 b = _mm256_broadcast_ss(xr + p * xstep + c);
          acc[p][0] = _mm256_fmadd_ps(w0, b, acc[p][0]);
          acc[p][1] = _mm256_fmadd_ps(w1, b, acc[p][1]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < PB; ++p) {
    float* o = out + int64_t{p} * out_stride;
    if (accumulate) {
      acc[p][0] = _mm256_add_ps(acc[p][0], _mm256_loadu_ps(o));
      acc[p][1] = _mm256_add_ps(acc[p][1], _mm256_loadu_ps(o + 8));
    }
    _mm256_storeu_ps(o, acc[p][0]);
    _mm256_storeu_ps(o + 8, acc[p][1]);
  }
}

using TileFn = void (*)(float*, int, const float*, int64_t, int64_t, int, int, const float*, bool);
constexpr TileFn kTiles[kTile + 1] = {nullptr,       DirectTile<1>, DirectTile<2>, DirectTile<3>,
                                      DirectTile<4>, DirectTile<5>, DirectTile<6>};

// acc[q][0..16) += sum over the sample's output pixels of d[pixel][lane] * x[pixel's window +
// offs[q]], for Q taps (kh, kw, c) of the weight gradient.
template <int Q>
SWEEP_AVX2 void DweightTile(float* acc_out, const float* d, int OC, const float* x,
                            const int64_t* offs, int OH, int OW, int64_t row_step,
                            int64_t col_step) {
  __m256 acc[Q][2];
  int64_t off[Q];
#pragma GCC unroll 8
  for (int q = 0; q < Q; ++q) {
    acc[q][0] = acc[q][1] = _mm256_setzero_ps();
    off[q] = offs[q];
  }
  for (int oh = 0; oh < OH; ++oh) {
    const float* xr = x + oh * row_step;
    const float* dr = d + int64_t{oh} * OW * OC;
    for (int ow = 0; ow < OW; ++ow) {
      const __m256 d0 = _mm256_loadu_ps(dr + int64_t{ow} * OC);
      const __m256 d1 = _mm256_loadu_ps(dr + int64_t{ow} * OC + 8);
      const float* xo = xr + ow * col_step;
#pragma GCC unroll 8
      for (int q = 0; q < Q; ++q) {
        const __m256 b = _mm256_broadcast_ss(xo + off[q]);
        acc[q][0] = _mm256_fmadd_ps(d0, b, acc[q][0]);
        acc[q][1] = _mm256_fmadd_ps(d1, b, acc[q][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int q = 0; q < Q; ++q) {
    float* o = acc_out + int64_t{q} * kLanes;
    _mm256_storeu_ps(o, _mm256_add_ps(acc[q][0], _mm256_loadu_ps(o)));
    _mm256_storeu_ps(o + 8, _mm256_add_ps(acc[q][1], _mm256_loadu_ps(o + 8)));
  }
}

using DwFn = void (*)(float*, const float*, int, const float*, const int64_t*, int, int, int64_t,
                      int64_t);
constexpr DwFn kDwTiles[kTile + 1] = {nullptr,        DweightTile<1>, DweightTile<2>,
                                      DweightTile<3>, DweightTile<4>, DweightTile<5>,
                                      DweightTile<6>};
#endif

// The sample's image with `pad` zeros around it: padded [H + 2 pad, W + 2 pad, C]. The border is
// zeroed once by the caller (DirectConv, DirectDweight) and never written after.
void PadImage(float* __restrict padded, const float* __restrict img, int H, int W, int C, int pad) {
  const int64_t Wp = W + 2 * pad;
  for (int h = 0; h < H; ++h) {
    std::memcpy(padded + ((h + pad) * Wp + pad) * C, img + int64_t{h} * W * C,
                sizeof(float) * static_cast<size_t>(int64_t{W} * C));
  }
}

int64_t PaddedFloats(int H, int W, int C, int pad) {
  return int64_t{H + 2 * pad} * (W + 2 * pad) * C;
}

}  // namespace

bool HaveAvx2() {
#if defined(__x86_64__)
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
#else
  return false;
#endif
}

void DirectConv(float* out, const float* inp, const float* wp, int B, int H, int W, int C, int OC,
                int K, int stride, int pad, float* scratch, bool accumulate) {
#if defined(__x86_64__)
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t Wp = W + 2 * pad, row = Wp * C, xstep = int64_t{stride} * C;
  const int64_t block_w = int64_t{K} * K * C * kLanes;
  std::memset(scratch, 0, sizeof(float) * static_cast<size_t>(PaddedFloats(H, W, C, pad)));
  for (int b = 0; b < B; ++b) {
    PadImage(scratch, inp + int64_t{b} * H * W * C, H, W, C, pad);
    for (int oh = 0; oh < OH; ++oh) {
      const float* xrow = scratch + oh * stride * row;
      float* orow = out + (int64_t{b} * OH + oh) * OW * OC;
      for (int ow = 0; ow < OW;) {
        const int n = TileSize(OW - ow);
        for (int ob = 0; ob < OC; ob += kLanes) {
          kTiles[n](orow + int64_t{ow} * OC + ob, OC, xrow + ow * xstep, xstep, row, K, C,
                    wp + (ob / kLanes) * block_w, accumulate);
        }
        ow += n;
      }
    }
  }
#else
  (void)out, (void)inp, (void)wp, (void)B, (void)H, (void)W, (void)C, (void)OC, (void)K;
  (void)stride, (void)pad, (void)scratch, (void)accumulate;
#endif
}

// By DweightTile, into an accumulator [OC / 16][patch][16] after the padded sample.
void DirectDweight(float* dweight, const float* dout, const float* inp, const ConvShape& s,
                   float* scratch, bool accumulate) {
#if defined(__x86_64__)
  const int OH = s.OH(), OW = s.OW(), C = s.C, OC = s.OC;
  const int64_t P = s.patch(), Wp = s.W + 2 * s.pad;
  float* padded = scratch;
  float* acc = scratch + PaddedFloats(s.H, s.W, C, s.pad);  // [OC / 16][P][16]
  std::memset(padded, 0, sizeof(float) * static_cast<size_t>(PaddedFloats(s.H, s.W, C, s.pad)));
  std::memset(acc, 0, sizeof(float) * static_cast<size_t>(OC * P));
  const int64_t pixels = int64_t{OH} * OW;
  for (int b = 0; b < s.B; ++b) {
    PadImage(padded, inp + int64_t{b} * s.H * s.W * C, s.H, s.W, C, s.pad);
    const float* d = dout + b * pixels * OC;
    for (int ob = 0; ob < OC; ob += kLanes) {
      float* a = acc + (ob / kLanes) * P * kLanes;
      for (int64_t q = 0; q < P;) {
        const int n = TileSize(static_cast<int>(std::min<int64_t>(P - q, 1 << 20)));
        int64_t offs[kTile];  // where each tap (kh, kw, c) reads, from the window's corner
        for (int t = 0; t < n; ++t) {
          const int64_t tap = q + t, c = tap % C, kw = tap / C % s.K, kh = tap / C / s.K;
          offs[t] = (kh * Wp + kw) * C + c;
        }
        kDwTiles[n](a + q * kLanes, d + ob, OC, padded, offs, OH, OW, int64_t{s.stride} * Wp * C,
                    int64_t{s.stride} * C);
        q += n;
      }
    }
  }
  for (int oc = 0; oc < OC; ++oc) {
    const float* a = acc + (oc / kLanes) * P * kLanes + oc % kLanes;
    float* __restrict dw = dweight + oc * P;
    for (int64_t q = 0; q < P; ++q) dw[q] = (accumulate ? dw[q] : 0.0f) + a[q * kLanes];
  }
#else
  (void)dweight, (void)dout, (void)inp, (void)s, (void)scratch, (void)accumulate;
#endif
}

void PackForward(float* __restrict wp, const float* __restrict weight, const ConvShape& s) {
  const int64_t P = s.patch();
  for (int oc = 0; oc < s.OC; ++oc) {
    float* dst = wp + (oc / kLanes) * P * kLanes + oc % kLanes;
    for (int64_t q = 0; q < P; ++q) dst[q * kLanes] = weight[oc * P + q];
  }
}

void PackBackwardData(float* __restrict wp, const float* __restrict weight, const ConvShape& s) {
  const int K = s.K, C = s.C, OC = s.OC;
  const int64_t block = int64_t{K} * K * OC * kLanes;
  for (int oc = 0; oc < OC; ++oc) {
    for (int kh = 0; kh < K; ++kh) {
      for (int kw = 0; kw < K; ++kw) {
        const float* src = weight + ((int64_t{oc} * K + kh) * K + kw) * C;
        const int64_t tap = ((int64_t{K - 1 - kh} * K + (K - 1 - kw)) * OC + oc) * kLanes;
        for (int c = 0; c < C; ++c) wp[(c / kLanes) * block + tap + c % kLanes] = src[c];
      }
    }
  }
}

int64_t DirectScratchFloats(const ConvShape& s) {
  const int64_t fwd = PaddedFloats(s.H, s.W, s.C, s.pad) + s.OC * s.patch();
  if (s.pad > s.K - 1) return fwd;  // no direct backward-data
  const int64_t bwd = PaddedFloats(s.OH(), s.OW(), s.OC, s.K - 1 - s.pad) + s.OC * s.patch();
  return std::max(fwd, bwd);
}

}  // namespace sweep::trainer::cpu
