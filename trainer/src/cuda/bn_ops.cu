// Batch normalization's kernels for cuda/cnn_ops.h: each channel's sums over row ranges in
// double (BnPartialKernel, which finishes the statistics in its last block), then the apply
// passes, grid-stride loops over the elements, four channels a thread where they can. A max pool
// and a residual add after batch norm run inside its passes (BnPool, BnSide).
#include "cuda/cnn_ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/device_util.h"
#include "cuda/launch.h"

namespace sweep::trainer::cuda {
namespace {

// Row ranges of a channel's sums: a block of kBnCols channels x kBnGroups row groups per range,
// thread (c, g) taking rows begin + g, begin + g + kBnGroups, ...; the groups' sums are added in
// order, then the ranges' in SumRanges. The number of ranges depends on N alone. About 32 rows
// a thread: with 8 groups and at most 64 ranges, a 256-image batch's first layer (200,704 rows
// of 32 channels) ran 64 blocks of 392 rows a thread, on a GPU of 132 multiprocessors.
constexpr int kBnCols = 32;
constexpr int kBnGroups = 32;
constexpr int64_t kBnRowsPerRange = 1024;
constexpr int kBnMaxRanges = 1024;
// Rows a thread of BnPartialKernel loads before adding them: 4 of one channel, 2 of four.
template <int V>
constexpr int kBnBatch = V == 1 ? 4 : 2;
// BnPartialKernel's counters of finished blocks, one per group of kBnCols channels, at the start
// of batch norm's scratch: 131,072 channels at most.
constexpr int64_t kBnCounterBytes = 16384;

int BnRanges(int64_t N) {
  return static_cast<int>(
      std::clamp<int64_t>((N + kBnRowsPerRange - 1) / kBnRowsPerRange, 1, kBnMaxRanges));
}

// x[i], or the value of xh[i] where the 16-bit copy is given (BnHalf).
template <typename Index>
__device__ inline float Elem(const float* x, const uint16_t* xh, Index i, bool bf16) {
  return xh != nullptr ? HalfValue(xh[i], bf16) : x[i];
}

// The apply passes take kBnVec neighbouring channels a thread where C is a multiple of it and
// their arrays are aligned to a quad of their elements (BnVec): one access for four values (8
// bytes of 16-bit ones, 16 of 32-bit ones) instead of four with gaps between the lanes, and
// the index arithmetic once for the four. Each element's arithmetic is the one-channel pass's:
// the same bits.
constexpr int kBnVec = 4;

// One access of a whole vector type at p, which the caller has aligned to it (checked in the
// emulator). Under nvcc a cast, as CUDA's vector types are meant to be used; in the emulator,
// compiled as C++, a memcpy, which strict aliasing allows.
template <typename Wide, typename T>
__device__ inline Wide LoadWide(const T* p) {
  SWEEP_CHECK_ALIGNED(p, sizeof(Wide));
#if defined(__CUDACC__)
  return *reinterpret_cast<const Wide*>(p);
#else
  Wide w;
  std::memcpy(&w, p, sizeof w);
  return w;
#endif
}
template <typename Wide, typename T>
__device__ inline void StoreWide(T* p, const Wide& w) {
  SWEEP_CHECK_ALIGNED(p, sizeof(Wide));
#if defined(__CUDACC__)
  *reinterpret_cast<Wide*>(p) = w;
#else
  std::memcpy(p, &w, sizeof w);
#endif
}

// Four 32-bit values as one vector type: fp32 values, or int32 argmax indices.
template <typename T>
using Quad = std::conditional_t<std::is_same_v<T, float>, float4, int4>;

// p[i .. i + V) (V == 4: one 16-byte load).
template <int V, typename T, typename Index>
__device__ inline void Words(const T* p, Index i, T* v) {
  if constexpr (V == 4) {
    const Quad<T> w = LoadWide<Quad<T>>(p + i);
    v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
  } else {
#pragma unroll
    for (int q = 0; q < V; ++q) v[q] = p[i + q];
  }
}
template <int V, typename T, typename Index>
__device__ inline void StoreWords(T* p, Index i, const T* v) {
  if constexpr (V == 4) {
    StoreWide(p + i, Quad<T>{v[0], v[1], v[2], v[3]});
  } else {
#pragma unroll
    for (int q = 0; q < V; ++q) p[i + q] = v[q];
  }
}

// The values of 16-bit p[i .. i + V) (V == 4: one 8-byte load).
template <int V, typename Index>
__device__ inline void Halves(const uint16_t* p, Index i, bool bf16, float* v) {
  if constexpr (V == 4) {
    const uint2 w = LoadWide<uint2>(p + i);
    const uint32_t bits[2] = {w.x, w.y};
#pragma unroll
    for (int q = 0; q < V; ++q) {
      v[q] = HalfValue(static_cast<uint16_t>(bits[q / 2] >> (16 * (q % 2))), bf16);
    }
  } else {
#pragma unroll
    for (int q = 0; q < V; ++q) v[q] = HalfValue(p[i + q], bf16);
  }
}

// Elements i .. i + V - 1 of x, or of xh where given.
template <int V, typename Index>
__device__ inline void Elems(const float* x, const uint16_t* xh, Index i, bool bf16, float* v) {
  if (xh == nullptr) {
    Words<V>(x, i, v);
  } else {
    Halves<V>(xh, i, bf16, v);
  }
}

// v[0 .. V) as 16-bit values at p[i .. i + V) (V == 4: one 8-byte store).
template <int V, typename Index>
__device__ inline void StoreHalves(uint16_t* p, Index i, const float* v, bool bf16) {
  if constexpr (V == 4) {
    uint32_t bits[2] = {0, 0};
#pragma unroll
    for (int q = 0; q < V; ++q) bits[q / 2] |= uint32_t{HalfBits(v[q], bf16)} << (16 * (q % 2));
    StoreWide(p + i, uint2{bits[0], bits[1]});
  } else {
#pragma unroll
    for (int q = 0; q < V; ++q) p[i + q] = HalfBits(v[q], bf16);
  }
}

// A max pool's output gradient at o: fp32 d, or 16-bit d16 (bf16 or fp16) masked by a ReLU's
// output where mask is given, as widen_half and then act_backward give it.
struct PoolDout {
  const float* d = nullptr;
  const uint16_t* d16 = nullptr;
  const float* mask = nullptr;
  bool bf16 = true;
  template <typename Index>
  __device__ float operator()(Index o) const {
    if (d16 == nullptr) return d[o];
    return mask != nullptr && !(mask[o] > 0.0f) ? 0.0f : HalfValue(d16[o], bf16);
  }
};

// A max pool fused with batch norm (BnPool), for the kernels: its output gradient and argmax
// (argmax null: no pool), its input's height and width, its windows (K wide at stride K, so an
// input lies in one window at most) and output size, and dividers for the index arithmetic.
struct PoolGeom {
  PoolDout dout;
  const int32_t* argmax = nullptr;
  int H = 0, W = 0, K = 0, OH = 0, OW = 0;
  FastDiv by_hw, by_w, by_k, by_ow, by_oh;
};

// Where row r (= (b H + h) W + w) of batch norm's output lies in the fused pool: its window's
// output o and its own index within the image, both at channel 0; not inside where no window
// covers its row or column. Ints, as BnPool requires.
struct PoolRow {
  bool inside = false;
  int o = 0, within = 0;
};
__device__ inline PoolRow PoolRowOf(const PoolGeom& p, int64_t r, int C) {
  const uint32_t row = static_cast<uint32_t>(r);
  const uint32_t b = p.by_hw.Div(row), rem = row - b * p.by_hw.d;
  const uint32_t h = p.by_w.Div(rem), w = rem - h * p.by_w.d;
  const int oh = static_cast<int>(p.by_k.Div(h)), ow = static_cast<int>(p.by_k.Div(w));
  PoolRow at;
  if (oh >= p.OH || ow >= p.OW) return at;
  at.inside = true;
  at.o = ((static_cast<int>(b) * p.OH + oh) * p.OW + ow) * C;
  at.within = (static_cast<int>(h) * p.W + static_cast<int>(w)) * C;
  return at;
}

// Batch norm's output gradient at that row, channels c .. c + V - 1, where the pool's backward
// would give it: 0.0f plus its window's gradient where it was the window's maximum, as
// MaxPoolBackwardKernel adds it; 0 in a row or column no window covers. The argmax, gradient
// and mask read whole.
template <int V>
__device__ inline void PoolGradsAt(const PoolGeom& p, const PoolRow& at, int c, float* di) {
  if (!at.inside) {
#pragma unroll
    for (int q = 0; q < V; ++q) di[q] = 0.0f;
    return;
  }
  const int o = at.o + c;
  int32_t arg[V];
  float grad[V];
  Words<V>(p.argmax, o, arg);
  if (p.dout.d16 == nullptr) {
    Words<V>(p.dout.d, o, grad);
  } else {
    Halves<V>(p.dout.d16, o, p.dout.bf16, grad);
    if (p.dout.mask != nullptr) {
      float mask[V];
      Words<V>(p.dout.mask, o, mask);
#pragma unroll
      for (int q = 0; q < V; ++q) grad[q] = !(mask[q] > 0.0f) ? 0.0f : grad[q];
    }
  }
#pragma unroll
  for (int q = 0; q < V; ++q) di[q] = arg[q] == at.within + c + q ? 0.0f + grad[q] : 0.0f;
}

// One channel's, for the partial sums: the gradient read only where it is the window's
// maximum (one in four of a 2x2 pool's inputs), where PoolGradsAt reads a quad whole.
__device__ inline float PoolGradOfRow(const PoolGeom& p, int64_t r, int c, int C) {
  const PoolRow at = PoolRowOf(p, r, C);
  if (!at.inside) return 0.0f;
  return p.argmax[at.o + c] == at.within + c ? 0.0f + p.dout(at.o + c) : 0.0f;
}

// Element i's row and channel in an [rows, C] array: by the divider where indices are 32-bit.
template <typename Index>
__device__ inline void RowChannel(Index i, int C, const FastDiv& by_c, Index* row, int* c) {
  if constexpr (sizeof(Index) == sizeof(uint32_t)) {
    const uint32_t r = by_c.Div(static_cast<uint32_t>(i));
    *row = static_cast<Index>(r);
    *c = static_cast<int>(static_cast<uint32_t>(i) - r * by_c.d);
  } else {
    *row = i / C;
    *c = static_cast<int>(i % C);
  }
}

// Training's normalisation of x with scale = gamma invstd and shift = beta - mean scale, in one
// place: backward computes ReLU's mask again from it, so it must be the forward's bits.
__device__ inline float BnShift(float beta, float mean, float scale) {
  return fmaf(-mean, scale, beta);
}
__device__ inline float BnNormalize(float x, float scale, float shift) {
  return fmaf(x, scale, shift);
}

// Channel c's scale = gamma invstd and shift = beta - mean scale: training's, or where invstd is
// null evaluation's (mean the running mean, the inverse deviation from running_var; the shift
// as beta - (mean gamma) inv). Explicit fused multiply-adds, so that every kernel calling it
// gives the same bits whatever the compiler contracts.
__device__ inline void BnScaleShift(int c, const float* gamma, const float* beta, const float* mean,
                                    const float* invstd, const float* running_var, float eps,
                                    float* scale, float* shift) {
  const float inv = invstd != nullptr
                        ? invstd[c]
                        : static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  *scale = gamma[c] * inv;
  *shift = invstd != nullptr ? BnShift(beta[c], mean[c], *scale)
                             : BnShift(beta[c], mean[c] * gamma[c], inv);
}

// Adds a (kBnCols / V, kBnGroups) block's lanes of its V channels c .. c + V - 1 in lane order:
// true for lane 0 of channels below C, whose a[] and b[] then hold the sums. Every thread of the
// block must call it: it synchronises them.
template <int V>
__device__ bool SumLanes(int c, int C, double* a, double* b) {
  __shared__ double s0[kBnGroups][kBnCols];
  __shared__ double s1[kBnGroups][kBnCols];
  const int lane = static_cast<int>(threadIdx.y);
  const int col = static_cast<int>(threadIdx.x) * V;
#pragma unroll
  for (int q = 0; q < V; ++q) {
    s0[lane][col + q] = a[q];
    s1[lane][col + q] = b[q];
  }
  __syncthreads();
  if (lane != 0 || c >= C) return false;
  for (int i = 1; i < kBnGroups; ++i) {
#pragma unroll
    for (int q = 0; q < V; ++q) {
      a[q] += s0[i][col + q];
      b[q] += s1[i][col + q];
    }
  }
  return true;
}

// The first of the V channels a thread of a (kBnCols / V, kBnGroups) block takes.
template <int V>
__device__ inline int BnFirstChannel() {
  return static_cast<int>(blockIdx.x) * kBnCols + static_cast<int>(threadIdx.x) * V;
}

// The ranges' two sums for the thread's V channels (BnFirstChannel), in a fixed order: lane
// threadIdx.y takes ranges y, y + kBnGroups, ..., then the lanes' sums are added in lane order.
// True for lane 0 of channels below C, which then holds the sums. Every thread of the block
// must call it: it synchronises them. One thread a channel took the ranges one after the other:
// up to 1,024 dependent additions. The partials are read past the L1 cache (volatile): other
// blocks of the same launch wrote them.
template <int V>
__device__ bool SumRanges(const volatile double* partials, int ranges, int C, double* sum0,
                          double* sum1) {
  const int c = BnFirstChannel<V>();
  const int lane = static_cast<int>(threadIdx.y);
#pragma unroll
  for (int q = 0; q < V; ++q) sum0[q] = sum1[q] = 0.0;
  if (c < C) {
    for (int r = lane; r < ranges; r += kBnGroups) {
#pragma unroll
      for (int q = 0; q < V; ++q) {
        sum0[q] += partials[(int64_t{r} * 2) * C + c + q];
        sum1[q] += partials[(int64_t{r} * 2 + 1) * C + c + q];
      }
    }
  }
  return SumLanes<V>(c, C, sum0, sum1);
}

// What the last of BnPartialKernel's blocks for a group of channels computes from every
// range's sums: the forward's mean, invstd and running statistics, or backward's dgamma, dbeta
// and dx's coefficients. One kernel fewer a pass than a kernel of its own after the sums.
struct BnFinish {
  unsigned int* done = nullptr;  // per group of kBnCols channels: blocks done (0 between calls)
  // Forward.
  float* mean = nullptr;
  float* invstd = nullptr;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float momentum = 0, eps = 0;
  // Backward (with the statistics' invstd, and gamma).
  float* dgamma = nullptr;
  float* dbeta = nullptr;
  float* coef = nullptr;
  bool accumulate = false;
};

// Channel c's mean, invstd and running statistics from its sums of x - k and (x - k)^2 (k: its
// first row), as cpu::batchnorm_forward computes them from the same sums.
__device__ void FinishStats(const BnFinish& f, int c, double sum, double sq, const float* x,
                            const uint16_t* xh, int64_t N, bool bf16) {
  const double offset = sum / static_cast<double>(N);
  const float m = static_cast<float>(Elem(x, xh, c, bf16) + offset);
  f.mean[c] = m;
  sq = sq - offset * sum > 0.0 ? sq - offset * sum : 0.0;  // the squared deviations
  const double var = sq / static_cast<double>(N);
  f.invstd[c] = static_cast<float>(1.0 / sqrt(var + f.eps));
  if (f.running_mean != nullptr) {
    const double unbiased = N > 1 ? sq / static_cast<double>(N - 1) : var;
    f.running_mean[c] = (1.0f - f.momentum) * f.running_mean[c] + f.momentum * m;
    f.running_var[c] =
        (1.0f - f.momentum) * f.running_var[c] + f.momentum * static_cast<float>(unbiased);
  }
}

// Channel c's dbeta, dgamma (+)=, and dx's coefficients k, a, b (coef[0 .. 2][C]) for
// dx = k (d - a - (x - mean) b), from its sums of d and d (x - mean), as
// cpu::batchnorm_backward.
__device__ void FinishGradStats(const BnFinish& f, int c, double sd, double sdx,
                                const float* invstd, const float* gamma, int64_t N, int C) {
  const float inv = invstd[c];
  const float db = static_cast<float>(sd);
  const float dg = static_cast<float>(sdx) * inv;
  f.dbeta[c] = f.accumulate ? f.dbeta[c] + db : db;
  f.dgamma[c] = f.accumulate ? f.dgamma[c] + dg : dg;
  f.coef[c] = gamma[c] * inv;
  f.coef[C + c] = db / static_cast<float>(N);
  f.coef[2 * C + c] = static_cast<float>(sdx / static_cast<double>(N)) * inv * inv;
}

// Sums over range blockIdx.y of rows, per channel: of a = x - k (k: the first row, near the
// mean, so the variance does not cancel) and a^2 (statistics), or of g and g * (x - mean)
// (backward: g = d, or the fused pool's gradient; ReLU's mask applied and written back when
// `relu`: the mask reads mask_out, or where that is null recomputes the forward's output from
// gamma, beta, mean and invstd).
// x, d read from xh, dh where those are given. Writes partials[(range * 2 + 0) * C + c] and
// [(range * 2 + 1) * C + c]; the last block to finish for its channels then adds every range's
// (SumRanges) and finishes them (BnFinish).
// V channels a thread (BnFirstChannel): with V = kBnVec one access loads four 16-bit values, where
// a warp of one channel a thread moved 64 bytes a load. Blocks of 256 threads, three an SM (80
// registers, two rows a thread in flight): 12 KB of an SM's loads in flight where 1,024 threads of
// one channel had 8 KB, and the 392 blocks of a 64-channel layer at batch 256 in one wave of an
// H100. Each channel's rows are added in the same order: the one-channel kernel's bits.
template <int V>
__global__ void __launch_bounds__(kBnCols / V * kBnGroups, V == 1 ? 1 : 3)
    BnPartialKernel(double* partials, float* d, uint16_t* dh, const float* x, const uint16_t* xh,
                    const float* mean, const float* mask_out, const float* gamma, const float* beta,
                    const float* invstd, PoolGeom pool, int64_t N, int C, int64_t rows_per_range,
                    bool backward, bool relu, bool bf16, BnFinish fin) {
  const int c = BnFirstChannel<V>();
  const int g = static_cast<int>(threadIdx.y);
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_range;
  const int64_t end = begin + rows_per_range < N ? begin + rows_per_range : N;
  double a[V], b[V];
#pragma unroll
  for (int q = 0; q < V; ++q) a[q] = b[q] = 0.0;
  if (c < C) {
    float k[V];
#pragma unroll
    for (int q = 0; q < V; ++q) k[q] = backward ? mean[c + q] : Elem(x, xh, c + q, bf16);
    const bool recompute = backward && relu && mask_out == nullptr;
    float scale[V] = {}, shift[V] = {};
    if (recompute) {
#pragma unroll
      for (int q = 0; q < V; ++q) {
        BnScaleShift(c + q, gamma, beta, mean, invstd, nullptr, 0.0f, &scale[q], &shift[q]);
      }
    }
    // kBnBatch rows loaded first, then added in row order: the same sums as one row at a time,
    // with that many loads in flight a thread instead of one.
    for (int64_t r0 = begin + g; r0 < end; r0 += int64_t{kBnBatch<V>} * kBnGroups) {
      float xs[kBnBatch<V>][V], gs[kBnBatch<V>][V];
#pragma unroll
      for (int j = 0; j < kBnBatch<V>; ++j) {
        const int64_t r = r0 + int64_t{j} * kBnGroups;
#pragma unroll
        for (int q = 0; q < V; ++q) xs[j][q] = gs[j][q] = 0.0f;
        if (r >= end) continue;
        const int64_t i = r * C + c;
        Elems<V>(x, xh, i, bf16, xs[j]);
        if (!backward) continue;
        if (pool.argmax == nullptr) {
          Elems<V>(d, dh, i, bf16, gs[j]);
        } else if constexpr (V == 1) {
          gs[j][0] = PoolGradOfRow(pool, r, c, C);
        } else {
          PoolGradsAt<V>(pool, PoolRowOf(pool, r, C), c, gs[j]);
        }
        if (!relu) continue;
        float mask[V];
        if (mask_out != nullptr) Words<V>(mask_out, i, mask);
        bool off = false;
#pragma unroll
        for (int q = 0; q < V; ++q) {
          const float y = mask_out != nullptr ? mask[q] : BnNormalize(xs[j][q], scale[q], shift[q]);
          if (!(y > 0.0f)) {
            gs[j][q] = 0.0f;
            off = true;
          }
        }
        // Written back for the apply pass where the mask is read; where it is computed again,
        // that pass computes it too (no scattered writes).
        if (off && mask_out != nullptr) {
          if (dh != nullptr) {
            StoreHalves<V>(dh, i, gs[j], bf16);
          } else {
            StoreWords<V>(d, i, gs[j]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kBnBatch<V>; ++j) {
        if (r0 + int64_t{j} * kBnGroups >= end) break;
#pragma unroll
        for (int q = 0; q < V; ++q) {
          const float dv = xs[j][q] - k[q];
          if (backward) {
            a[q] += gs[j][q];
            b[q] += static_cast<double>(gs[j][q]) * dv;
          } else {
            a[q] += dv;
            b[q] += static_cast<double>(dv) * dv;
          }
        }
      }
    }
  }
  if (SumLanes<V>(c, C, a, b)) {
#pragma unroll
    for (int q = 0; q < V; ++q) {
      partials[(static_cast<int64_t>(blockIdx.y) * 2) * C + c + q] = a[q];
      partials[(static_cast<int64_t>(blockIdx.y) * 2 + 1) * C + c + q] = b[q];
    }
  }
  // As a grid barrier does: the block's writes above, then one thread's fence (cumulative
  // over what the barrier ordered before it) and count; the block that counts the last range
  // fences again before its threads read every range's sums, and leaves its counter at 0.
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    __threadfence();
    last = atomicAdd(fin.done + blockIdx.x, 1u) == gridDim.y - 1;
    if (last) {
      __threadfence();
      fin.done[blockIdx.x] = 0;
    }
  }
  __syncthreads();
  if (!last) return;
  double s0[V], s1[V];
  if (!SumRanges<V>(partials, static_cast<int>(gridDim.y), C, s0, s1)) return;
#pragma unroll
  for (int q = 0; q < V; ++q) {
    if (backward) {
      FinishGradStats(fin, c + q, s0[q], s1[q], invstd, gamma, N, C);
    } else {
      FinishStats(fin, c + q, s0[q], s1[q], x, xh, N, bf16);
    }
  }
}

// The running statistics from a batch's mean and invstd (cuDNN's batch norm gives those):
// the variance is 1 / invstd^2 - eps, made unbiased, as FinishStats moves them.
__global__ void BnRunningKernel(float* running_mean, float* running_var, const float* mean,
                                const float* invstd, int64_t N, int C, float momentum, float eps) {
  for (int64_t i = FirstIndex(); i < C; i += Stride()) {
    const int c = static_cast<int>(i);
    const double inv = invstd[c];
    const double var = fmax(1.0 / (inv * inv) - static_cast<double>(eps), 0.0);
    const double unbiased = N > 1 ? var * static_cast<double>(N) / static_cast<double>(N - 1) : var;
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * static_cast<float>(unbiased);
  }
}

// out = act(x scale + shift) with scale = gamma invstd and shift = beta - mean scale (training)
// or the running statistics' (evaluation: invstd == nullptr); pre keeps the value before act.
// x read from xh where given; out (where not null) and its 16-bit copy outh (where not null).
// V channels a thread (kBnVec), over the n / V groups.
template <typename Index, int V>
__global__ void BnApplyKernel(float* out, float* pre, uint16_t* outh, const float* x,
                              const uint16_t* xh, const float* gamma, const float* beta,
                              const float* mean, const float* invstd, const float* running_var,
                              Index groups, int C, FastDiv by_c, float eps, Activation act,
                              bool bf16) {
  for (Index j = FirstOf<Index>(); j < groups; j += StrideOf<Index>()) {
    const Index i = j * V;
    Index row;
    int c;
    RowChannel(i, C, by_c, &row, &c);
    float v[V], y[V];
    Elems<V>(x, xh, i, bf16, v);
#pragma unroll
    for (int q = 0; q < V; ++q) {
      float scale, shift;
      BnScaleShift(c + q, gamma, beta, mean, invstd, running_var, eps, &scale, &shift);
      y[q] = BnNormalize(v[q], scale, shift);
      v[q] = ActForward(y[q], act);
    }
    if (pre != nullptr) StoreWords<V>(pre, i, y);
    if (out != nullptr) StoreWords<V>(out, i, v);
    if (outh != nullptr) StoreHalves<V>(outh, i, v, bf16);
  }
}

// Batch norm's apply pass fused with the max pool reading it (BnPool): per pooled output i,
// the window's normalised values (or the sums a + b of two sides' where b.gamma is given, as
// add_forward adds them), their maximum and its index as MaxPoolForwardKernel takes them, then
// the ReLU when relu; out and its 16-bit copy outh (where given), argmax. Statistics as
// BnApplyKernel's; V channels a thread.
template <typename Index, int V>
__global__ void BnPoolApplyKernel(float* out, uint16_t* outh, int32_t* argmax, BnSide a, BnSide b,
                                  PoolGeom g, Index groups, int C, FastDiv by_c, bool relu,
                                  bool bf16) {
  const bool two = b.gamma != nullptr;
  const int H = g.H, W = g.W, K = g.K;
  for (Index j = FirstOf<Index>(); j < groups; j += StrideOf<Index>()) {
    const Index i = j * V;
    Index pix;
    int c;
    RowChannel(i, C, by_c, &pix, &c);
    const uint32_t rest = g.by_ow.Div(static_cast<uint32_t>(pix));
    const int ow = static_cast<int>(static_cast<uint32_t>(pix) - rest * g.by_ow.d);
    const uint32_t bi = g.by_oh.Div(rest);
    const int oh = static_cast<int>(rest - bi * g.by_oh.d);
    const Index image = static_cast<Index>(bi) * H * W * C;
    float sa[V], ha[V], sb[V], hb[V];
#pragma unroll
    for (int q = 0; q < V; ++q) {
      BnScaleShift(c + q, a.gamma, a.beta, a.mean, a.invstd, a.running_var, a.eps, &sa[q], &ha[q]);
      sb[q] = hb[q] = 0.0f;
      if (two) {
        BnScaleShift(c + q, b.gamma, b.beta, b.mean, b.invstd, b.running_var, b.eps, &sb[q],
                     &hb[q]);
      }
    }
    // The window's values at `at` (channel c), normalised, the two sides added.
    auto values = [&](int32_t at, float* v) {
      Elems<V>(a.x, a.x16, image + at, bf16, v);
#pragma unroll
      for (int q = 0; q < V; ++q) v[q] = BnNormalize(v[q], sa[q], ha[q]);
      if (!two) return;
      float vb[V];
      Elems<V>(b.x, b.x16, image + at, bf16, vb);
#pragma unroll
      for (int q = 0; q < V; ++q) v[q] += BnNormalize(vb[q], sb[q], hb[q]);
    };
    const int32_t first = (oh * K * W + ow * K) * C + c;
    float m[V];
    int32_t best[V];
    values(first, m);
#pragma unroll
    for (int q = 0; q < V; ++q) best[q] = first + q;
    for (int kh = 0; kh < K; ++kh) {
      for (int kw = 0; kw < K; ++kw) {
        const int32_t at = ((oh * K + kh) * W + ow * K + kw) * C + c;
        float v[V];
        values(at, v);
#pragma unroll
        for (int q = 0; q < V; ++q) {
          if (v[q] > m[q] || v[q] != v[q]) {  // as MaxPoolForwardKernel: ties keep the first,
            m[q] = v[q];                      // NaN propagates
            best[q] = at + q;
          }
        }
      }
    }
    if (relu) {
#pragma unroll
      for (int q = 0; q < V; ++q) m[q] = ActForward(m[q], Activation::kRelu);
    }
    StoreWords<V>(out, i, m);
    StoreWords<V>(argmax, i, best);
    if (outh != nullptr) StoreHalves<V>(outh, i, m, bf16);
  }
}

// dx, or its 16-bit copy dxh where given; d and x read from dh and xh where given, d from the
// fused pool's gradient where that is; ReLU's mask applied where relu_again (the partial pass
// left d unmasked). V channels a thread.
template <typename Index, int V>
__global__ void BnGradApplyKernel(float* dx, uint16_t* dxh, const float* d, const uint16_t* dh,
                                  const float* x, const uint16_t* xh, const float* mean,
                                  const float* coef, const float* gamma, const float* beta,
                                  const float* invstd, bool relu_again, PoolGeom pool, Index groups,
                                  int C, FastDiv by_c, bool accumulate, bool bf16) {
  for (Index j = FirstOf<Index>(); j < groups; j += StrideOf<Index>()) {
    const Index i = j * V;
    Index row;
    int c;
    RowChannel(i, C, by_c, &row, &c);
    float di[V], xv[V];
    if (pool.argmax != nullptr) {
      PoolGradsAt<V>(pool, PoolRowOf(pool, row, C), c, di);
    } else {
      Elems<V>(d, dh, i, bf16, di);
    }
    Elems<V>(x, xh, i, bf16, xv);
    float g[V];
#pragma unroll
    for (int q = 0; q < V; ++q) {
      const int k = c + q;
      if (relu_again) {  // ReLU's mask from the forward's output, computed again
        float scale, shift;
        BnScaleShift(k, gamma, beta, mean, invstd, nullptr, 0.0f, &scale, &shift);
        if (!(BnNormalize(xv[q], scale, shift) > 0.0f)) di[q] = 0.0f;
      }
      g[q] = coef[k] * (di[q] - coef[C + k] - (xv[q] - mean[k]) * coef[2 * C + k]);
    }
    if (dxh != nullptr) {
      StoreHalves<V>(dxh, i, g, bf16);
    } else {
      if (accumulate) {
        float before[V];
        Words<V>(dx, i, before);
#pragma unroll
        for (int q = 0; q < V; ++q) g[q] = before[q] + g[q];
      }
      StoreWords<V>(dx, i, g);
    }
  }
}

// Whether the apply passes may take kBnVec channels a thread: C a multiple of it, each 16-bit
// array they access 8-byte aligned and each 32-bit one 16-byte aligned (null: not accessed).
bool BnVec(int64_t C, std::initializer_list<const void*> halves,
           std::initializer_list<const void*> words) {
  if (C % kBnVec != 0) return false;
  for (const void* p : halves) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % (2 * kBnVec) != 0) return false;
  }
  for (const void* p : words) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % (4 * kBnVec) != 0) return false;
  }
  return true;
}

// Calls launch(std::integral_constant<int, V>{}): V = kBnVec channels a thread where vec, else 1.
template <typename F>
void ByVec(bool vec, const F& launch) {
  if (vec) {
    launch(std::integral_constant<int, kBnVec>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

}  // namespace

int64_t batchnorm_scratch_bytes(int64_t N, int C) {
  // The blocks' counters (at the start, where every layer's calls find them at 0), the ranges'
  // two sums per channel, then backward's three coefficients per channel; a whole number of
  // 16-byte blocks, so that the sums are aligned wherever an allocator aligns the buffer's end
  // (the emulator, which ends buffers at an unmapped page) as well as its start (cudaMalloc).
  const int64_t bytes = kBnCounterBytes +
                        int64_t{BnRanges(N)} * 2 * C * static_cast<int64_t>(sizeof(double)) +
                        int64_t{3} * C * static_cast<int64_t>(sizeof(float));
  return (bytes + 15) / 16 * 16;
}

namespace {

// The partial sums' place in batch norm's scratch (after the counters), and the coefficients'.
double* BnPartialsOf(void* scratch) {
  return reinterpret_cast<double*>(static_cast<char*>(scratch) + kBnCounterBytes);
}
float* BnCoefOf(void* scratch, int64_t N, int C) {
  return reinterpret_cast<float*>(BnPartialsOf(scratch) + int64_t{BnRanges(N)} * 2 * C);
}

Status BnPartials(void* scratch, float* d, uint16_t* dh, const float* x, const uint16_t* xh,
                  const float* mean, const float* mask_out, const float* gamma, const float* beta,
                  const float* invstd, const PoolGeom& pool, int64_t N, int C, bool backward,
                  bool relu, bool bf16, BnFinish fin, cudaStream_t stream) {
  const int groups = (C + kBnCols - 1) / kBnCols;
  if (int64_t{groups} * static_cast<int64_t>(sizeof(unsigned int)) > kBnCounterBytes) {
    return Status::InvalidArgument("cuda: batch norm over " + std::to_string(C) +
                                   " channels; at most " +
                                   std::to_string(kBnCounterBytes / 4 * kBnCols) + " are taken");
  }
  const int ranges = BnRanges(N);
  const int64_t rows = (N + ranges - 1) / ranges;
  const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(ranges));
  fin.done = static_cast<unsigned int*>(scratch);
  // The arrays the kernel reads or writes whole: d where there is no pool, else the pool's.
  const bool pooled = pool.argmax != nullptr;
  const bool vec =
      BnVec(C, {xh, pooled ? nullptr : dh, pool.dout.d16},
            {xh == nullptr ? x : nullptr, pooled || dh != nullptr ? nullptr : d, mask_out,
             pool.argmax, pool.dout.d16 == nullptr ? pool.dout.d : nullptr, pool.dout.mask});
  ByVec(vec, [&](auto v) {
    constexpr int V = decltype(v)::value;
    Launch(BnPartialKernel<V>, grid, dim3(kBnCols / V, kBnGroups), stream, BnPartialsOf(scratch), d,
           dh, x, xh, mean, mask_out, gamma, beta, invstd, pool, N, C, rows, backward, relu, bf16,
           fin);
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

// The fused pool's geometry (BnPool), with its output gradient for backward; refused where
// batch norm's activation is not kNone, the windows overlap or leave gaps, the shapes disagree
// or an index would not fit an int.
Status PoolGeomOf(const BnPool& p, int64_t N, int C, cpu::Activation act, bool bf16, PoolGeom* g) {
  if (act != cpu::Activation::kNone || p.K < 1 || p.stride != p.K || p.H < p.K || p.W < p.K ||
      int64_t{p.B} * p.H * p.W != N ||
      N * C > std::numeric_limits<int>::max() - kMaxBlocks * kThreads) {
    return Status::Internal("cuda: a max pool batch norm cannot run in its passes");
  }
  g->dout.d = p.dout;
  g->dout.d16 = p.dout16;
  g->dout.mask = p.dout16 != nullptr && p.relu ? p.out : nullptr;
  g->dout.bf16 = bf16;
  g->argmax = p.argmax;
  g->H = p.H;
  g->W = p.W;
  g->K = p.K;
  g->OH = PoolOut(p.H, p.K, p.stride);
  g->OW = PoolOut(p.W, p.K, p.stride);
  g->by_hw = FastDiv(p.H * p.W);
  g->by_w = FastDiv(p.W);
  g->by_k = FastDiv(p.K);
  g->by_ow = FastDiv(g->OW);
  g->by_oh = FastDiv(g->OH);
  return Status::Ok();
}

// The pool-fused apply pass over one batch norm's side a, or the sum of two (b.gamma given).
Status PoolApply(const BnSide& a, const BnSide& b, const PoolGeom& g, int C, const BnPool& pool,
                 bool bf16, cudaStream_t stream) {
  const int n = pool.B * g.OH * g.OW * C;
  if (n == 0) return Status::Ok();
  const bool x32 = a.x16 == nullptr, y32 = b.gamma != nullptr && b.x16 == nullptr;
  ByVec(BnVec(C, {a.x16, b.x16, pool.out16},
              {x32 ? a.x : nullptr, y32 ? b.x : nullptr, pool.out, pool.argmax}),
        [&](auto v) {
          constexpr int V = decltype(v)::value;
          Launch(BnPoolApplyKernel<int, V>, Blocks(n / V), kThreads, stream, pool.out, pool.out16,
                 pool.argmax, a, b, g, n / V, C, FastDiv(C), pool.relu, bf16);
        });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

// Batch norm's apply pass: its own output, or the fused pool's (BnPool); none where there is
// nothing to write (statistics only). Evaluation where invstd is null (mean then the running
// mean).
Status BnApply(float* out, float* pre, const float* x, const float* gamma, const float* beta,
               const float* mean, const float* invstd, const float* running_var, int64_t N, int C,
               float eps, cpu::Activation act, const BnHalf& half, const BnPool* pool,
               cudaStream_t stream) {
  const bool bf16 = half.type == cpu::HalfType::kBf16;
  if (pool != nullptr) {
    PoolGeom g;
    if (Status s = PoolGeomOf(*pool, N, C, act, bf16, &g); !s.ok()) return s;
    const BnSide side{x, half.x, gamma, beta, mean, invstd, running_var, eps};
    return PoolApply(side, BnSide{}, g, C, *pool, bf16, stream);
  }
  if (out == nullptr && pre == nullptr && half.out == nullptr) return Status::Ok();
  const bool vec = BnVec(C, {half.x, half.out}, {half.x == nullptr ? x : nullptr, out, pre});
  ByIndex(N * C, [&](auto index) {
    using Index = decltype(index);
    ByVec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      Launch(BnApplyKernel<Index, V>, Blocks(N * C / V), kThreads, stream, out, pre, half.out, x,
             half.x, gamma, beta, mean, invstd, running_var, static_cast<Index>(N * C / V), C,
             FastDiv(C), eps, act, bf16);
    });
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace

Status batchnorm_forward(float* out, float* pre, float* mean, float* invstd, const float* x,
                         const float* gamma, const float* beta, float* running_mean,
                         float* running_var, int64_t N, int C, float momentum, float eps,
                         cpu::Activation act, void* scratch, cudaStream_t stream,
                         const BnHalf& half, const BnPool* pool) {
  if (N == 0 || C == 0) return Status::Ok();
  const bool bf16 = half.type == cpu::HalfType::kBf16;
  BnFinish fin;
  fin.mean = mean;
  fin.invstd = invstd;
  fin.running_mean = running_mean;
  fin.running_var = running_var;
  fin.momentum = momentum;
  fin.eps = eps;
  if (Status s = BnPartials(scratch, nullptr, nullptr, x, half.x, nullptr, nullptr, nullptr,
                            nullptr, nullptr, PoolGeom{}, N, C, false, false, bf16, fin, stream);
      !s.ok()) {
    return s;
  }
  return BnApply(out, act == cpu::Activation::kNone ? nullptr : pre, x, gamma, beta, mean, invstd,
                 nullptr, N, C, eps, act, half, pool, stream);
}

Status batchnorm_running_update(float* running_mean, float* running_var, const float* mean,
                                const float* invstd, int64_t N, int C, float momentum, float eps,
                                cudaStream_t stream) {
  if (N == 0 || C == 0) return Status::Ok();
  Launch(BnRunningKernel, Blocks(C), kThreads, stream, running_mean, running_var, mean, invstd, N,
         C, momentum, eps);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status batchnorm_eval(float* out, const float* x, const float* gamma, const float* beta,
                      const float* running_mean, const float* running_var, int64_t N, int C,
                      float eps, cpu::Activation act, cudaStream_t stream, const BnHalf& half,
                      const BnPool* pool) {
  if (N == 0 || C == 0) return Status::Ok();
  return BnApply(out, nullptr, x, gamma, beta, running_mean, nullptr, running_var, N, C, eps, act,
                 half, pool, stream);
}

Status batchnorm_add_pool(const BnSide& a, const BnSide& b, int64_t N, int C, const BnPool& pool,
                          cpu::HalfType type, cudaStream_t stream) {
  if (N == 0 || C == 0) return Status::Ok();
  const bool bf16 = type == cpu::HalfType::kBf16;
  PoolGeom g;
  if (Status s = PoolGeomOf(pool, N, C, cpu::Activation::kNone, bf16, &g); !s.ok()) return s;
  if (a.gamma == nullptr || b.gamma == nullptr) {
    return Status::Internal("cuda: batchnorm_add_pool takes two batch norms");
  }
  return PoolApply(a, b, g, C, pool, bf16, stream);
}

Status batchnorm_backward(float* dx, float* dgamma, float* dbeta, float* d, const float* x,
                          const float* pre, const float* out, const float* mean,
                          const float* invstd, const float* gamma, int64_t N, int C,
                          cpu::Activation act, bool accumulate, bool accumulate_dx, void* scratch,
                          cudaStream_t stream, const BnHalf& half, const float* beta,
                          const BnPool* pool) {
  if (N == 0 || C == 0) return Status::Ok();
  const bool bf16 = half.type == cpu::HalfType::kBf16;
  PoolGeom g;
  if (pool != nullptr) {
    if (Status s = PoolGeomOf(*pool, N, C, act, bf16, &g); !s.ok()) return s;
  }
  // ReLU's gradient is applied in the pass that sums; the others' first, in place.
  const bool relu = act == cpu::Activation::kRelu;
  if (act != cpu::Activation::kNone && !relu) {
    if (half.d != nullptr || half.x != nullptr) {
      return Status::Internal("cuda: batch norm's 16-bit backward takes ReLU or no activation");
    }
    if (Status s = act_backward(d, d, pre, out, N * C, act, false, stream); !s.ok()) return s;
  }
  if (relu && out == nullptr && beta == nullptr) {
    return Status::Internal("cuda: batch norm's backward needs ReLU's output or beta");
  }
  float* coef = BnCoefOf(scratch, N, C);
  BnFinish fin;
  fin.dgamma = dgamma;
  fin.dbeta = dbeta;
  fin.coef = coef;
  fin.accumulate = accumulate;
  if (Status s = BnPartials(scratch, d, half.d, x, half.x, mean, relu ? out : nullptr, gamma, beta,
                            invstd, g, N, C, true, relu, bf16, fin, stream);
      !s.ok()) {
    return s;
  }
  if (dx == nullptr && half.dx == nullptr) return Status::Ok();  // the model's input: none wanted
  // The arrays the kernel reads whole: g's pool gradient (argmax null without a pool) or d.
  const bool pooled = g.argmax != nullptr;
  const bool vec = BnVec(C, {pooled ? nullptr : half.d, half.x, half.dx, g.dout.d16},
                         {pooled || half.d != nullptr ? nullptr : d,
                          half.x == nullptr ? x : nullptr, half.dx == nullptr ? dx : nullptr,
                          g.argmax, g.dout.d16 == nullptr ? g.dout.d : nullptr, g.dout.mask});
  ByIndex(N * C, [&](auto index) {
    using Index = decltype(index);
    ByVec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      Launch(BnGradApplyKernel<Index, V>, Blocks(N * C / V), kThreads, stream, dx, half.dx,
             static_cast<const float*>(d), static_cast<const uint16_t*>(half.d), x, half.x, mean,
             static_cast<const float*>(coef), gamma, beta, invstd, relu && out == nullptr, g,
             static_cast<Index>(N * C / V), C, FastDiv(C), accumulate_dx, bf16);
    });
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace sweep::trainer::cuda
