// CPU kernels of convolutional networks (cpu/conv_ops.h). Convolutions whose channel counts are
// multiples of 16 run direct AVX2 kernels on a zero-padded copy of each sample (16 channels in
// two ymm lanes, a row of output pixels in registers): forward, the input gradient as the
// forward of dout with the kernel turned, and the weight gradient. Other shapes, and CPUs
// without AVX2, run OpenBLAS SGEMMs over im2col patches of a few samples at a time (the patches
// of a chunk stay in L2, and the GEMM's rows are many: one per output pixel of every sample in
// the chunk). The rest are loops over NHWC rows, channels innermost, that g++ vectorises.
// Owned by the trainer; stateless but for set_conv_impl's switch.
#include "cpu/conv_ops.h"

#include <cblas.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/act_math.h"

namespace sweep::trainer::cpu {
namespace {

// The elementwise and per-channel loops at AVX2's width where the CPU has it (the build targets
// generic x86-64, i.e. SSE2): GCC clones the function and picks one at load time. No FMA, so
// the results are the same bits either way.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SWEEP_CLONES __attribute__((target_clones("avx2", "default")))
#define SWEEP_INLINE __attribute__((always_inline)) inline
#else
#define SWEEP_CLONES
#define SWEEP_INLINE inline
#endif

// Rows per float partial sum in batch norm's statistics (then added up in double).
constexpr int64_t kBlockRows = 64;

// Floats of one chunk's patches: 2 MiB, what an L2 holds beside the weights.
constexpr int64_t kChunkFloats = int64_t{1} << 19;

// Samples per chunk: as many as fit kChunkFloats of patches, at least one.
int ChunkSamples(const ConvShape& s) {
  const int64_t per_sample = int64_t{s.OH()} * s.OW() * s.patch();
  return static_cast<int>(
      std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(per_sample, 1), 1, s.B));
}

// cols [samples x OH x OW, K K C] = the patches of `count` samples of inp.
void Im2col(float* __restrict cols, const float* __restrict inp, int count, const ConvShape& s) {
  const int OH = s.OH(), OW = s.OW(), C = s.C;
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(C);
  for (int b = 0; b < count; ++b) {
    const float* img = inp + int64_t{b} * s.H * s.W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        float* dst = cols + ((int64_t{b} * OH + oh) * OW + ow) * s.patch();
        for (int kh = 0; kh < s.K; ++kh) {
          const int ih = oh * s.stride - s.pad + kh;
          if (ih < 0 || ih >= s.H) {
            std::memset(dst, 0, row_bytes * static_cast<size_t>(s.K));
            dst += int64_t{s.K} * C;
            continue;
          }
          // The window's row: the columns inside the image are one contiguous run.
          const int iw0 = ow * s.stride - s.pad;
          const int lo = std::max(0, -iw0), hi = std::min(s.K, s.W - iw0);
          if (lo > 0) std::memset(dst, 0, row_bytes * static_cast<size_t>(lo));
          if (hi > lo) {
            std::memcpy(dst + int64_t{lo} * C, img + (int64_t{ih} * s.W + iw0 + lo) * C,
                        row_bytes * static_cast<size_t>(hi - lo));
          }
          if (hi < s.K) {
            std::memset(dst + int64_t{std::max(hi, lo)} * C, 0,
                        row_bytes * static_cast<size_t>(s.K - std::max(hi, lo)));
          }
          dst += int64_t{s.K} * C;
        }
      }
    }
  }
}

// dinp[count samples] += the patches' gradients dcols, each back where it was read from.
void Col2imAdd(float* __restrict dinp, const float* __restrict dcols, int count,
               const ConvShape& s) {
  const int OH = s.OH(), OW = s.OW(), C = s.C;
  for (int b = 0; b < count; ++b) {
    float* img = dinp + int64_t{b} * s.H * s.W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        const float* src = dcols + ((int64_t{b} * OH + oh) * OW + ow) * s.patch();
        for (int kh = 0; kh < s.K; ++kh) {
          const int ih = oh * s.stride - s.pad + kh;
          if (ih < 0 || ih >= s.H) {
            src += int64_t{s.K} * C;
            continue;
          }
          const int iw0 = ow * s.stride - s.pad;
          const int lo = std::max(0, -iw0), hi = std::min(s.K, s.W - iw0);
          for (int kw = lo; kw < hi; ++kw) {
            float* __restrict d = img + (int64_t{ih} * s.W + iw0 + kw) * C;
            const float* __restrict g = src + int64_t{kw} * C;
            for (int c = 0; c < C; ++c) d[c] += g[c];
          }
          src += int64_t{s.K} * C;
        }
      }
    }
  }
}

void AddBiasRows(float* __restrict out, const float* __restrict bias, int64_t rows, int C) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict o = out + r * C;
    for (int c = 0; c < C; ++c) o[c] += bias[c];
  }
}

void SumRows(float* __restrict sum, const float* __restrict d, int64_t rows, int C,
             bool accumulate) {
  if (!accumulate) std::memset(sum, 0, sizeof(float) * static_cast<size_t>(C));
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict g = d + r * C;
    for (int c = 0; c < C; ++c) sum[c] += g[c];
  }
}

SWEEP_INLINE float Act(float x, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return x > 0.0f ? x : 0.0f;
    case Activation::kTanh:
      return Tanh(x);
    case Activation::kGelu:
      return Gelu(x);
    case Activation::kNone:
      break;
  }
  return x;
}

// d/dx of act at x whose value is y.
SWEEP_INLINE float ActGrad(float x, float y, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return y > 0.0f ? 1.0f : 0.0f;
    case Activation::kTanh:
      return 1.0f - y * y;
    case Activation::kGelu:
      return GeluGrad(x);
    case Activation::kNone:
      break;
  }
  return 1.0f;
}

template <Activation A>
void ActForwardT(float* __restrict out, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Act(x[i], A);
}

// dx may be d (an in-place backward), so neither is __restrict.
template <Activation A>
void ActBackwardT(float* dx, const float* d, const float* __restrict x, const float* __restrict y,
                  int64_t n, bool accumulate) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) dx[i] += d[i] * ActGrad(x[i], y[i], A);
  } else {
    for (int64_t i = 0; i < n; ++i) dx[i] = d[i] * ActGrad(x[i], y[i], A);
  }
}

// kPre: keep the value before the activation in pre (training; evaluation has no backward).
template <Activation A, bool kPre = true>
SWEEP_INLINE void BatchnormApply(float* __restrict out, float* __restrict pre,
                                 const float* __restrict x, const float* __restrict scale,
                                 const float* __restrict shift, int64_t N, int C) {
  for (int64_t r = 0; r < N; ++r) {
    const float* __restrict xr = x + r * C;
    float* __restrict o = out + r * C;
    if constexpr (A == Activation::kNone || !kPre) {
      (void)pre;
      for (int c = 0; c < C; ++c) o[c] = Act(xr[c] * scale[c] + shift[c], A);
    } else {
      float* __restrict p = pre + r * C;
      for (int c = 0; c < C; ++c) {
        const float v = xr[c] * scale[c] + shift[c];
        p[c] = v;
        o[c] = Act(v, A);
      }
    }
  }
}

// out = x * scale + shift per channel, then the activation (pre keeps the value before it).
SWEEP_INLINE void ScaleShiftAct(float* out, float* pre, const float* x, const float* scale,
                                const float* shift, int64_t N, int C, Activation act) {
  switch (act) {
    case Activation::kNone:
      return BatchnormApply<Activation::kNone>(out, pre, x, scale, shift, N, C);
    case Activation::kRelu:
      return BatchnormApply<Activation::kRelu>(out, pre, x, scale, shift, N, C);
    case Activation::kTanh:
      return BatchnormApply<Activation::kTanh>(out, pre, x, scale, shift, N, C);
    case Activation::kGelu:
      return BatchnormApply<Activation::kGelu>(out, pre, x, scale, shift, N, C);
  }
}

std::atomic<int> g_conv_impl{static_cast<int>(ConvImpl::kAuto)};

// The direct kernels: 16 output channels in two ymm lanes, a row of up to kTile output pixels
// in registers (12 accumulators of the 16), so each broadcast input feeds two FMAs and each
// weight load six. The build targets generic x86-64, hence the target attribute and the runtime
// check; NHWC with channel counts of 16k needs no im2col and no packing by the BLAS.
constexpr int kLanes = 16;
constexpr int kTile = 6;

// The next tile of `left` pixels (or taps): the row split into tiles of near-equal size, since
// a tile of 1-3 has too few accumulators to hide the FMA latency (14 = 5 + 5 + 4, not 6 + 6 + 2).
int TileSize(int left) {
  const int tiles = (left + kTile - 1) / kTile;
  return (left + tiles - 1) / tiles;
}

#if defined(__x86_64__)
#define SWEEP_AVX2 __attribute__((target("avx2,fma")))

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}

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
#else
bool HaveAvx2() { return false; }
#endif

bool UseDirect() {
  return g_conv_impl.load(std::memory_order_relaxed) == static_cast<int>(ConvImpl::kAuto) &&
         HaveAvx2();
}

// The sample's image with `pad` zeros around it: padded [H + 2 pad, W + 2 pad, C]. The border is
// zeroed once by the caller (ZeroPadded) and never written after.
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

// out [B, OH, OW, OC] (+)= conv of inp [B, H, W, C] with wp packed [OC / 16][K][K][C][16].
// scratch: PaddedFloats floats.
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

// dweight [OC, K, K, C] (+)= the correlation of dout with inp, by DweightTile. scratch:
// PaddedFloats + OC * patch floats.
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

// wp [OC / 16][K][K][C][16] = weight [OC, K, K, C], the forward's lanes.
void PackForward(float* __restrict wp, const float* __restrict weight, const ConvShape& s) {
  const int64_t P = s.patch();
  for (int oc = 0; oc < s.OC; ++oc) {
    float* dst = wp + (oc / kLanes) * P * kLanes + oc % kLanes;
    for (int64_t q = 0; q < P; ++q) dst[q * kLanes] = weight[oc * P + q];
  }
}

// The input gradient of a stride-1 convolution is the convolution of dout (padded by K-1-pad)
// with the kernel turned 180 degrees and C, OC swapped: wp [C / 16][K][K][OC][16].
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
}  // namespace

int64_t conv2d_scratch_floats(const ConvShape& s) {
  const int64_t gemm =
      s.pointwise() ? 0 : 2 * int64_t{ChunkSamples(s)} * s.OH() * s.OW() * s.patch();
  return std::max(gemm, DirectScratchFloats(s));
}

void set_conv_impl(ConvImpl impl) {
  g_conv_impl.store(static_cast<int>(impl), std::memory_order_relaxed);
}

ConvImpl conv_impl() { return static_cast<ConvImpl>(g_conv_impl.load(std::memory_order_relaxed)); }

bool conv2d_direct_forward(const ConvShape& s) {
  return UseDirect() && !s.pointwise() && s.OC % kLanes == 0;
}

bool conv2d_direct_backward_data(const ConvShape& s) {
  return UseDirect() && !s.pointwise() && s.stride == 1 && s.pad <= s.K - 1 && s.C % kLanes == 0;
}

bool conv2d_direct_backward_weights(const ConvShape& s) {
  return UseDirect() && !s.pointwise() && s.OC % kLanes == 0;
}

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const ConvShape& s, float* scratch) {
  const int64_t P = s.patch(), pixels = int64_t{s.OH()} * s.OW();
  if (conv2d_direct_forward(s)) {
    float* wp = scratch;
    PackForward(wp, weight, s);
    DirectConv(out, inp, wp, s.B, s.H, s.W, s.C, s.OC, s.K, s.stride, s.pad, scratch + s.OC * P,
               false);
    if (bias != nullptr) AddBiasRows(out, bias, int64_t{s.B} * pixels, s.OC);
    return;
  }
  const int chunk = s.pointwise() ? s.B : ChunkSamples(s);
  for (int b0 = 0; b0 < s.B; b0 += chunk) {
    const int count = std::min(chunk, s.B - b0);
    const float* cols = inp + int64_t{b0} * s.H * s.W * s.C;
    if (!s.pointwise()) {
      Im2col(scratch, cols, count, s);
      cols = scratch;
    }
    const int rows = static_cast<int>(count * pixels);
    float* o = out + int64_t{b0} * pixels * s.OC;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, s.OC, static_cast<int>(P), 1.0f,
                cols, static_cast<int>(P), weight, static_cast<int>(P), 0.0f, o, s.OC);
  }
  if (bias != nullptr) AddBiasRows(out, bias, int64_t{s.B} * pixels, s.OC);
}

void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const ConvShape& s, float* scratch, bool accumulate,
                     bool accumulate_dinp) {
  const int64_t P = s.patch(), pixels = int64_t{s.OH()} * s.OW();
  const int64_t in_floats = int64_t{s.H} * s.W * s.C;
  if (dbias != nullptr) SumRows(dbias, dout, int64_t{s.B} * pixels, s.OC, accumulate);
  const bool direct_dw = conv2d_direct_backward_weights(s);
  const bool direct_dx = dinp != nullptr && conv2d_direct_backward_data(s);
  if (direct_dw) DirectDweight(dweight, dout, inp, s, scratch, accumulate);
  if (direct_dx) {
    float* wp = scratch;
    PackBackwardData(wp, weight, s);
    DirectConv(dinp, dout, wp, s.B, s.OH(), s.OW(), s.OC, s.C, s.K, 1, s.K - 1 - s.pad,
               scratch + s.OC * P, accumulate_dinp);
  }
  if (direct_dw && (direct_dx || dinp == nullptr)) return;
  const int chunk = s.pointwise() ? s.B : ChunkSamples(s);
  float* cols = scratch;
  float* dcols = s.pointwise() ? nullptr : scratch + int64_t{chunk} * pixels * P;
  for (int b0 = 0; b0 < s.B; b0 += chunk) {
    const int count = std::min(chunk, s.B - b0);
    const int rows = static_cast<int>(count * pixels);
    const float* d = dout + int64_t{b0} * pixels * s.OC;
    const float* x = inp + int64_t{b0} * in_floats;
    if (!s.pointwise() && !direct_dw) {  // the input-gradient GEMM does not read the patches
      Im2col(cols, x, count, s);
      x = cols;
    }
    const float beta = accumulate || b0 > 0 ? 1.0f : 0.0f;
    if (!direct_dw) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.OC, static_cast<int>(P), rows, 1.0f, d,
                  s.OC, x, static_cast<int>(P), beta, dweight, static_cast<int>(P));
    }
    if (dinp == nullptr || direct_dx) continue;
    float* di = dinp + int64_t{b0} * in_floats;
    if (s.pointwise()) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, s.C, s.OC, 1.0f, d, s.OC, weight,
                  s.C, accumulate_dinp ? 1.0f : 0.0f, di, s.C);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, static_cast<int>(P), s.OC, 1.0f, d,
                s.OC, weight, static_cast<int>(P), 0.0f, dcols, static_cast<int>(P));
    if (!accumulate_dinp) {
      std::memset(di, 0, sizeof(float) * static_cast<size_t>(count * in_floats));
    }
    Col2imAdd(di, dcols, count, s);
  }
}

SWEEP_CLONES
void batchnorm_forward(float* out, float* pre, float* mean, float* invstd, const float* x,
                       const float* gamma, const float* beta, float* running_mean,
                       float* running_var, int64_t N, int C, float momentum, float eps,
                       Activation act) {
  // One pass over x: sums of x - k and (x - k)^2 with k = the first row (near the mean, so
  // the variance does not cancel), in float over blocks of kBlockRows rows, added up in double.
  // Within ~1e-6 of two passes in double (tests/trainer/conv_ops_test.cc), one read of x fewer.
  constexpr int kMaxC = 4096;
  double sum[kMaxC], sq[kMaxC];
  float part[kMaxC], part_sq[kMaxC];
  for (int c0 = 0; c0 < C; c0 += kMaxC) {
    const int cn = std::min(kMaxC, C - c0);
    const float* __restrict k = x + c0;
    std::fill_n(sum, cn, 0.0);
    std::fill_n(sq, cn, 0.0);
    for (int64_t r0 = 0; r0 < N; r0 += kBlockRows) {
      std::fill_n(part, cn, 0.0f);
      std::fill_n(part_sq, cn, 0.0f);
      for (int64_t r = r0; r < std::min(N, r0 + kBlockRows); ++r) {
        const float* __restrict xr = x + r * C + c0;
        for (int c = 0; c < cn; ++c) {
          const float dv = xr[c] - k[c];
          part[c] += dv;
          part_sq[c] += dv * dv;
        }
      }
      for (int c = 0; c < cn; ++c) {
        sum[c] += part[c];
        sq[c] += part_sq[c];
      }
    }
    for (int c = 0; c < cn; ++c) {
      const double offset = sum[c] / static_cast<double>(N);  // mean - k
      mean[c0 + c] = static_cast<float>(k[c] + offset);
      sq[c] = std::max(0.0, sq[c] - offset * sum[c]);  // the sum of squared deviations
    }
    for (int c = 0; c < cn; ++c) {
      const double var = sq[c] / static_cast<double>(N);
      invstd[c0 + c] = static_cast<float>(1.0 / std::sqrt(var + eps));
      if (running_mean != nullptr) {
        const double unbiased = N > 1 ? sq[c] / static_cast<double>(N - 1) : var;
        running_mean[c0 + c] = (1.0f - momentum) * running_mean[c0 + c] + momentum * mean[c0 + c];
        running_var[c0 + c] =
            (1.0f - momentum) * running_var[c0 + c] + momentum * static_cast<float>(unbiased);
      }
    }
  }
  // y = gamma (x - mean) invstd + beta = x scale + shift.
  float scale[kMaxC], shift[kMaxC];
  for (int c0 = 0; c0 < C; c0 += kMaxC) {
    const int cn = std::min(kMaxC, C - c0);
    for (int c = 0; c < cn; ++c) {
      scale[c] = gamma[c0 + c] * invstd[c0 + c];
      shift[c] = beta[c0 + c] - mean[c0 + c] * scale[c];
    }
    if (cn == C) {
      ScaleShiftAct(out, pre, x, scale, shift, N, C, act);
    } else {
      for (int64_t r = 0; r < N; ++r) {
        ScaleShiftAct(out + r * C + c0, pre == nullptr ? nullptr : pre + r * C + c0, x + r * C + c0,
                      scale, shift, 1, cn, act);
      }
    }
  }
}

SWEEP_CLONES
void batchnorm_eval(float* out, const float* x, const float* gamma, const float* beta,
                    const float* running_mean, const float* running_var, int64_t N, int C,
                    float eps, Activation act) {
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int c = 0; c < C; ++c) {
    const float inv =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps));
    scale[static_cast<size_t>(c)] = gamma[c] * inv;
    shift[static_cast<size_t>(c)] = beta[c] - running_mean[c] * gamma[c] * inv;
  }
  // Evaluation keeps nothing for backward: the value before the activation is not needed.
  if (act == Activation::kNone) {
    ScaleShiftAct(out, nullptr, x, scale.data(), shift.data(), N, C, act);
    return;
  }
  switch (act) {
    case Activation::kNone:
      break;
    case Activation::kRelu:
      return BatchnormApply<Activation::kRelu, false>(out, nullptr, x, scale.data(), shift.data(),
                                                      N, C);
    case Activation::kTanh:
      return BatchnormApply<Activation::kTanh, false>(out, nullptr, x, scale.data(), shift.data(),
                                                      N, C);
    case Activation::kGelu:
      return BatchnormApply<Activation::kGelu, false>(out, nullptr, x, scale.data(), shift.data(),
                                                      N, C);
  }
}

SWEEP_CLONES
void batchnorm_backward(float* dx, float* dgamma, float* dbeta, float* d, const float* x,
                        const float* pre, const float* out, const float* mean, const float* invstd,
                        const float* gamma, int64_t N, int C, Activation act, bool accumulate,
                        bool accumulate_dx) {
  // ReLU's gradient is applied in the pass that sums (one pass over d fewer); the others first.
  const bool relu = act == Activation::kRelu;
  if (act != Activation::kNone && !relu) act_backward(d, d, pre, out, N * C, act, false);
  // dbeta = sum d; dgamma = sum d xhat; dx = gamma invstd / N (N d - dbeta - xhat dgamma).
  constexpr int kMaxC = 4096;
  double sd[kMaxC], sdx[kMaxC];
  float psd[kMaxC], psdx[kMaxC];  // float sums of kBlockRows rows, as in forward
  for (int c0 = 0; c0 < C; c0 += kMaxC) {
    const int cn = std::min(kMaxC, C - c0);
    std::fill_n(sd, cn, 0.0);
    std::fill_n(sdx, cn, 0.0);
    for (int64_t r0 = 0; r0 < N; r0 += kBlockRows) {
      std::fill_n(psd, cn, 0.0f);
      std::fill_n(psdx, cn, 0.0f);
      for (int64_t r = r0; r < std::min(N, r0 + kBlockRows); ++r) {
        float* __restrict g = d + r * C + c0;
        const float* __restrict xr = x + r * C + c0;
        const float* __restrict m = mean + c0;
        if (relu) {
          const float* __restrict y = out + r * C + c0;
          for (int c = 0; c < cn; ++c) g[c] *= y[c] > 0.0f ? 1.0f : 0.0f;  // as act_backward
        }
        for (int c = 0; c < cn; ++c) {
          psd[c] += g[c];
          psdx[c] += g[c] * (xr[c] - m[c]);
        }
      }
      for (int c = 0; c < cn; ++c) {
        sd[c] += psd[c];
        sdx[c] += psdx[c];
      }
    }
    float a[kMaxC], b[kMaxC], k[kMaxC];
    for (int c = 0; c < cn; ++c) {
      const float inv = invstd[c0 + c];
      const float db = static_cast<float>(sd[c]);
      const float dg = static_cast<float>(sdx[c]) * inv;
      dbeta[c0 + c] = accumulate ? dbeta[c0 + c] + db : db;
      dgamma[c0 + c] = accumulate ? dgamma[c0 + c] + dg : dg;
      // dx = k (d - db / N - (x - mean) inv^2 sdx / N), k = gamma inv.
      k[c] = gamma[c0 + c] * inv;
      a[c] = db / static_cast<float>(N);
      b[c] = static_cast<float>(sdx[c] / static_cast<double>(N)) * inv * inv;
    }
    if (dx == nullptr) continue;  // the model's input: no gradient wanted
    for (int64_t r = 0; r < N; ++r) {
      const float* __restrict g = d + r * C + c0;
      const float* __restrict xr = x + r * C + c0;
      const float* __restrict m = mean + c0;
      float* __restrict o = dx + r * C + c0;
      if (accumulate_dx) {
        for (int c = 0; c < cn; ++c) o[c] += k[c] * (g[c] - a[c] - (xr[c] - m[c]) * b[c]);
      } else {
        for (int c = 0; c < cn; ++c) o[c] = k[c] * (g[c] - a[c] - (xr[c] - m[c]) * b[c]);
      }
    }
  }
}

SWEEP_CLONES
void maxpool_forward(float* out, int32_t* argmax, const float* inp, int B, int H, int W, int C,
                     int K, int stride) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
  if (K == 2 && stride == 2) {
    // The CNNs' pool: the window's four pixels in one loop over the channels, in the order of
    // the general loop below (ties keep the first; NaN propagates).
    for (int b = 0; b < B; ++b) {
      const float* img = inp + int64_t{b} * H * W * C;
      for (int oh = 0; oh < OH; ++oh) {
        for (int ow = 0; ow < OW; ++ow) {
          const int64_t at = ((int64_t{b} * OH + oh) * OW + ow) * C;
          float* __restrict o = out + at;
          int32_t* __restrict am = argmax + at;
          const int32_t i0 = (2 * oh * W + 2 * ow) * C, i1 = i0 + C, i2 = i0 + W * C, i3 = i2 + C;
          const float* __restrict x0 = img + i0;
          const float* __restrict x1 = img + i1;
          const float* __restrict x2 = img + i2;
          const float* __restrict x3 = img + i3;
          for (int c = 0; c < C; ++c) {
            float m = x0[c];
            int32_t a = i0 + c;
            const bool t1 = x1[c] > m || x1[c] != x1[c];
            m = t1 ? x1[c] : m;
            a = t1 ? i1 + c : a;
            const bool t2 = x2[c] > m || x2[c] != x2[c];
            m = t2 ? x2[c] : m;
            a = t2 ? i2 + c : a;
            const bool t3 = x3[c] > m || x3[c] != x3[c];
            o[c] = t3 ? x3[c] : m;
            am[c] = t3 ? i3 + c : a;
          }
        }
      }
    }
    return;
  }
  for (int b = 0; b < B; ++b) {
    const float* img = inp + int64_t{b} * H * W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        const int64_t at = ((int64_t{b} * OH + oh) * OW + ow) * C;
        float* __restrict o = out + at;
        int32_t* __restrict am = argmax + at;
        const int32_t first = (oh * stride * W + ow * stride) * C;
        for (int c = 0; c < C; ++c) {
          o[c] = img[first + c];
          am[c] = first + c;
        }
        for (int kh = 0; kh < K; ++kh) {
          for (int kw = 0; kw < K; ++kw) {
            if (kh == 0 && kw == 0) continue;
            const int32_t base = ((oh * stride + kh) * W + ow * stride + kw) * C;
            const float* __restrict x = img + base;
            // Strictly greater: ties keep the first, as PyTorch's (NaN propagates: x != x).
            for (int c = 0; c < C; ++c) {
              const bool take = x[c] > o[c] || x[c] != x[c];
              o[c] = take ? x[c] : o[c];
              am[c] = take ? base + c : am[c];
            }
          }
        }
      }
    }
  }
}

SWEEP_CLONES
void maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, int B, int H, int W,
                      int C, int K, int stride, bool accumulate) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
  const int64_t in_floats = int64_t{H} * W * C, out_floats = int64_t{OH} * OW * C;
  if (!accumulate) std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(B * in_floats));
  for (int b = 0; b < B; ++b) {
    float* di = dinp + b * in_floats;
    const float* d = dout + b * out_floats;
    const int32_t* am = argmax + b * out_floats;
    for (int64_t i = 0; i < out_floats; ++i) di[am[i]] += d[i];
  }
}

void avgpool_forward(float* out, const float* inp, int B, int H, int W, int C, int K, int stride) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
  const float inv = 1.0f / static_cast<float>(K * K);
  for (int b = 0; b < B; ++b) {
    const float* img = inp + int64_t{b} * H * W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        float* __restrict o = out + ((int64_t{b} * OH + oh) * OW + ow) * C;
        std::fill_n(o, C, 0.0f);
        for (int kh = 0; kh < K; ++kh) {
          for (int kw = 0; kw < K; ++kw) {
            const float* __restrict x = img + ((oh * stride + kh) * W + ow * stride + kw) * C;
            for (int c = 0; c < C; ++c) o[c] += x[c];
          }
        }
        for (int c = 0; c < C; ++c) o[c] *= inv;
      }
    }
  }
}

void avgpool_backward(float* dinp, const float* dout, int B, int H, int W, int C, int K, int stride,
                      bool accumulate) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
  const float inv = 1.0f / static_cast<float>(K * K);
  if (!accumulate) {
    std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(int64_t{B} * H * W * C));
  }
  for (int b = 0; b < B; ++b) {
    float* img = dinp + int64_t{b} * H * W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        const float* __restrict d = dout + ((int64_t{b} * OH + oh) * OW + ow) * C;
        for (int kh = 0; kh < K; ++kh) {
          for (int kw = 0; kw < K; ++kw) {
            float* __restrict x = img + ((oh * stride + kh) * W + ow * stride + kw) * C;
            for (int c = 0; c < C; ++c) x[c] += d[c] * inv;
          }
        }
      }
    }
  }
}

void global_avgpool_forward(float* out, const float* inp, int B, int HW, int C) {
  const float inv = 1.0f / static_cast<float>(HW);
  for (int b = 0; b < B; ++b) {
    float* __restrict o = out + int64_t{b} * C;
    std::fill_n(o, C, 0.0f);
    for (int p = 0; p < HW; ++p) {
      const float* __restrict x = inp + (int64_t{b} * HW + p) * C;
      for (int c = 0; c < C; ++c) o[c] += x[c];
    }
    for (int c = 0; c < C; ++c) o[c] *= inv;
  }
}

void global_avgpool_backward(float* dinp, const float* dout, int B, int HW, int C,
                             bool accumulate) {
  const float inv = 1.0f / static_cast<float>(HW);
  for (int b = 0; b < B; ++b) {
    const float* __restrict d = dout + int64_t{b} * C;
    for (int p = 0; p < HW; ++p) {
      float* __restrict x = dinp + (int64_t{b} * HW + p) * C;
      if (accumulate) {
        for (int c = 0; c < C; ++c) x[c] += d[c] * inv;
      } else {
        for (int c = 0; c < C; ++c) x[c] = d[c] * inv;
      }
    }
  }
}

void act_forward(float* out, const float* x, int64_t n, Activation act) {
  switch (act) {
    case Activation::kNone:
      if (out != x) std::memcpy(out, x, sizeof(float) * static_cast<size_t>(n));
      return;
    case Activation::kRelu:
      return ActForwardT<Activation::kRelu>(out, x, n);
    case Activation::kTanh:
      return ActForwardT<Activation::kTanh>(out, x, n);
    case Activation::kGelu:
      return ActForwardT<Activation::kGelu>(out, x, n);
  }
}

void act_backward(float* dx, const float* d, const float* x, const float* out, int64_t n,
                  Activation act, bool accumulate) {
  switch (act) {
    case Activation::kNone:
      return copy_or_add(dx, d, n, accumulate);
    case Activation::kRelu:
      return ActBackwardT<Activation::kRelu>(dx, d, x, out, n, accumulate);
    case Activation::kTanh:
      return ActBackwardT<Activation::kTanh>(dx, d, x, out, n, accumulate);
    case Activation::kGelu:
      return ActBackwardT<Activation::kGelu>(dx, d, x, out, n, accumulate);
  }
}

void add_forward(float* __restrict out, const float* __restrict a, const float* __restrict b,
                 int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void copy_or_add(float* __restrict dst, const float* __restrict src, int64_t n, bool accumulate) {
  if (!accumulate) {
    if (dst != src) std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace sweep::trainer::cpu
