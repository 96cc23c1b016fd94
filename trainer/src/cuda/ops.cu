// CUDA kernels for cuda/ops.h: cuBLAS for the GEMMs, and plain grid-stride loops (one thread
// per element, or per row or column where a row or column is the unit) for the rest. Simple on
// purpose: no shared-memory tiling except in the one-block loss sum and the column sums, no warp
// shuffles, no vector loads. Owned by the trainer; stateless.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/device_util.h"
#include "cuda/launch.h"
#include "cuda/ops.h"
#include "rng.h"

namespace sweep::trainer::cuda {
namespace {

// ---- bias + activation ----

// Index: int where n fits (the column is i % C, and a 64-bit remainder costs a few dozen
// instructions per element on the GPU), else int64_t. out may be null (the 16-bit path keeps no
// fp32 activation: the backward reads pre instead), and keep_pre false leaves pre without its
// bias (the backward adds it again).
template <typename Index>
__global__ void BiasActForwardKernel(float* out, float* pre, const float* bias, Index n, int C,
                                     Activation act, uint16_t* out16, bool bf16, bool keep_pre) {
  const Index stride = static_cast<Index>(blockDim.x) * gridDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = pre[i] + bias[i % C];
    if (keep_pre) pre[i] = x;
    const float y = ActForward(x, act);
    if (out != nullptr) out[i] = y;
    if (out16 != nullptr) out16[i] = HalfBits(y, bf16);
  }
}

// The activation's backward and the bias gradient in one pass over d: a block of 32 columns x
// kSumRows row groups over one range of rows (blockIdx.y: one of `splits` ranges), thread (c, g)
// taking rows begin + g, begin + g + kSumRows, ... of column c, kSumLanes rows a turn (all their
// loads issued before any store: independent loads in flight). Each row's result goes to d
// (keep_d, and only when the activation changed it) and d16 (when not null), and into the
// thread's running sum for that lane; the lanes are added in order, then the kSumRows partial
// sums in group order. With one range the block writes dbias; with several it writes its range's
// sums to partials[range][C] and SumRangesKernel adds the ranges in order. Neighbouring threads
// touch neighbouring addresses, and the sums depend only on (B, C), never on scheduling or the
// GPU. a: pre or out, as ActGrad takes it (unused for kNone); a_bias (not null only when a is a
// pre kept without its bias) is added to a.
constexpr int kSumCols = 32;
constexpr int kSumRows = 32;
constexpr int kSumLanes = 4;

__global__ void __launch_bounds__(kSumCols* kSumRows)
    BiasActBackwardKernel(float* __restrict__ d, float* __restrict__ dbias,
                          float* __restrict__ partials, const float* __restrict__ a,
                          const float* __restrict__ a_bias, int B, int C, int rows_per_range,
                          Activation act, bool a_is_pre, bool accumulate, bool keep_d,
                          uint16_t* __restrict__ d16, bool bf16) {
  __shared__ float partial[kSumRows][kSumCols];
  const int c = static_cast<int>(blockIdx.x) * kSumCols + static_cast<int>(threadIdx.x);
  const bool write_d = keep_d && act != Activation::kNone;
  float s = 0.0f;
  if (c < C) {
    // pre left without its bias by the forward (keep_pre false): add it back, the same sum.
    const float shift = a_bias != nullptr ? a_bias[c] : 0.0f;
    float lane[kSumLanes] = {};
    // One turn: rows b, b + kSumRows, ... (k < count), loads first.
    auto turn = [&](int b, int count) {
      float g[kSumLanes] = {}, x[kSumLanes] = {};
#pragma unroll
      for (int k = 0; k < kSumLanes; ++k) {
        if (k < count) {
          const int64_t i = static_cast<int64_t>(b + k * kSumRows) * C + c;
          g[k] = d[i];
          x[k] = act == Activation::kNone ? 0.0f : a_bias != nullptr ? a[i] + shift : a[i];
        }
      }
#pragma unroll
      for (int k = 0; k < kSumLanes; ++k) {
        if (k < count) {
          const int64_t i = static_cast<int64_t>(b + k * kSumRows) * C + c;
          const float r = ActGrad(g[k], x[k], act, a_is_pre);
          if (write_d) d[i] = r;
          if (d16 != nullptr) d16[i] = HalfBits(r, bf16);
          lane[k] += r;
        }
      }
    };
    const int begin = static_cast<int>(blockIdx.y) * rows_per_range;
    const int end = min(B, begin + rows_per_range);
    int b = begin + static_cast<int>(threadIdx.y);
    for (; b + (kSumLanes - 1) * kSumRows < end; b += kSumLanes * kSumRows) turn(b, kSumLanes);
    if (b < end) turn(b, (end - b + kSumRows - 1) / kSumRows);  // the rows left: < kSumLanes
#pragma unroll
    for (int k = 0; k < kSumLanes; ++k) s += lane[k];
  }
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int g = 0; g < kSumRows; ++g) total += partial[g][threadIdx.x];
    if (gridDim.y > 1) {
      partials[static_cast<int64_t>(blockIdx.y) * C + c] = total;
    } else {
      dbias[c] = accumulate ? dbias[c] + total : total;
    }
  }
}

// dbias[c] (+)= partials[0][c] + partials[1][c] + ..., in range order.
__global__ void SumRangesKernel(float* dbias, const float* partials, int ranges, int C,
                                bool accumulate) {
  for (int64_t c = FirstIndex(); c < C; c += Stride()) {
    float total = 0.0f;
    for (int r = 0; r < ranges; ++r) total += partials[r * static_cast<int64_t>(C) + c];
    dbias[c] = accumulate ? dbias[c] + total : total;
  }
}

// How many row ranges bias_act_backward splits B rows of C columns into: about kTargetBlocks
// blocks, two waves of one 1024-thread block per SM on a 132-SM GPU (a constant, so that the sums
// never depend on the GPU they ran on), at least one turn of rows (kSumRows x kSumLanes) per
// range, and at most kMaxRanges.
constexpr int kTargetBlocks = 264;
constexpr int kMaxRanges = 64;

int RowRanges(int B, int C) {
  const int col_blocks = (C + kSumCols - 1) / kSumCols;
  if (col_blocks == 0) return 1;
  const int want = (kTargetBlocks + col_blocks - 1) / col_blocks;
  const int by_rows = std::max(1, B / (kSumRows * kSumLanes));
  return std::max(1, std::min({want, by_rows, kMaxRanges}));
}

// ---- loss ----

// One thread per row (V is the class count: small).
__global__ void SoftmaxXentKernel(float* dlogits, float* losses, const float* logits,
                                  const int32_t* labels, int B, int V, float dloss_scale,
                                  float smoothing) {
  for (int64_t b = FirstIndex(); b < B; b += Stride()) {
    const float* row = logits + b * V;
    const int y = labels[b];
    if (y < 0 || y >= V) {  // never read outside the row: a bad label shows as a NaN loss
      losses[b] = nanf("");
      // And as NaN gradients, so that this step cannot apply the last batch's stale ones.
      if (dlogits != nullptr) {
        for (int v = 0; v < V; ++v) dlogits[b * V + v] = nanf("");
      }
      continue;
    }
    float mx = row[0];
    for (int v = 1; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
    float sum = 0.0f;
    for (int v = 0; v < V; ++v) sum += expf(row[v] - mx);
    const float lse = mx + logf(sum);
    if (smoothing == 0.0f) {
      losses[b] = lse - row[y];
      if (dlogits != nullptr) {
        float* g = dlogits + b * V;
        for (int v = 0; v < V; ++v) g[v] = expf(row[v] - lse) * dloss_scale;
        g[y] -= dloss_scale;
      }
      continue;
    }
    // Against (1 - e) onehot + e / V, as cpu::softmax_xent_forward_backward.
    const float spread = smoothing / static_cast<float>(V);
    float sum_logits = 0.0f;
    for (int v = 0; v < V; ++v) sum_logits += row[v];
    losses[b] = (1.0f - smoothing) * (lse - row[y]) +
                smoothing * (lse - sum_logits / static_cast<float>(V));
    if (dlogits != nullptr) {
      float* g = dlogits + b * V;
      for (int v = 0; v < V; ++v) g[v] = (expf(row[v] - lse) - spread) * dloss_scale;
      g[y] -= (1.0f - smoothing) * dloss_scale;
    }
  }
}

// ---- optimizers ----

__global__ void SgdKernel(float* p, float* vel, const float* g, int64_t n, float lr, float momentum,
                          float weight_decay, bool nesterov, const int* skip, uint16_t* p16,
                          bool bf16, const StepScalars* step) {
  if (skip != nullptr && *skip != 0) return;
  if (step != nullptr) lr = step->lr;
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float gi = g[i] + weight_decay * p[i];
    const float vi = momentum * vel[i] + gi;
    vel[i] = vi;
    const float pi = p[i] - lr * (nesterov ? gi + momentum * vi : vi);
    p[i] = pi;
    if (p16 != nullptr) p16[i] = HalfBits(pi, bf16);
  }
}

// s: the step's scalars, computed on the host (given, or step->adamw); with loss_scale (fp16),
// by each block from t (or step->t) minus the steps skipped so far, which only the device knows
// without waiting.
__global__ void AdamwKernel(float* p, float* m, float* v, const float* g, int64_t n, float beta1,
                            float beta2, float eps, AdamwScalars s, float lr, float weight_decay,
                            int64_t t, const int* skip, const LossScaleState* loss_scale,
                            uint16_t* p16, bool bf16, const StepScalars* step) {
  if (skip != nullptr && *skip != 0) return;
  if (step != nullptr && loss_scale == nullptr) s = step->adamw;
  if (loss_scale != nullptr) {
    __shared__ AdamwScalars block_s;
    if (threadIdx.x == 0) {
      if (step != nullptr) {
        lr = step->lr;
        t = step->t;
      }
      block_s = MakeAdamwScalars(lr, beta1, beta2, weight_decay,
                                 t - static_cast<int64_t>(loss_scale->skipped));
    }
    __syncthreads();
    s = block_s;
  }
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * s.decay - s.step_size * mi / (sqrtf(vi) * s.inv_sqrt_bc2 + eps);
    p[i] = pi;
    if (p16 != nullptr) p16[i] = HalfBits(pi, bf16);
  }
}

// ---- 16-bit casts and loss scaling ----

__global__ void CastKernel(uint16_t* out, const float* in, int64_t n, bool bf16) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) out[i] = HalfBits(in[i], bf16);
}

__global__ void ScaleByKernel(float* x, int64_t n, const float* scale) {
  const float s = *scale;
  for (int64_t i = FirstIndex(); i < n; i += Stride()) x[i] *= s;
}

__global__ void UnscaleCheckKernel(float* g, int64_t n, const float* scale, int* found_inf) {
  const float inv = 1.0f / *scale;
  bool bad = false;
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float v = g[i] * inv;
    g[i] = v;
    bad = bad || !isfinite(v);
  }
  if (bad) *found_inf = 1;  // every writer writes the same value: no atomic needed
}

__global__ void UpdateLossScaleKernel(LossScaleState* state, int* found_inf, int window) {
  AdvanceLossScale(state, *found_inf != 0, window);
  *found_inf = 0;
}

// ---- input ----

// A block per row (grid-stride over rows), its threads across the features: coalesced reads of
// one dataset row and writes of one batch row, no division by dim.
__global__ void GatherRowsKernel(float* x, int32_t* y, const int32_t* idx, int rows,
                                 const uint8_t* u8, const float* f32, const int32_t* labels,
                                 int64_t dim) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = idx != nullptr ? idx[r] : r;
    float* dst = x + static_cast<int64_t>(r) * dim;
    if (u8 != nullptr) {
      const uint8_t* src = u8 + row * dim;
      // Division, not a multiply by 1/255, as Dataset::Gather: the same bits on both backends.
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        dst[j] = static_cast<float>(src[j]) / 255.0f;
      }
    } else {
      const float* src = f32 + row * dim;
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dst[j] = src[j];
    }
    if (threadIdx.x == 0 && labels != nullptr) y[r] = labels[row];
  }
}

// ---- dropout ----

__global__ void DropoutForwardKernel(float* out, float* mask, const float* x, int64_t n, int C,
                                     int64_t first_row, uint32_t key_lo, uint32_t key_hi,
                                     uint32_t threshold, float scale, uint16_t* out16, bool bf16,
                                     const StepScalars* step, uint64_t salt) {
  if (step != nullptr) {
    const uint64_t key = MixSeed(step->dropout_key, salt);
    key_lo = static_cast<uint32_t>(key);
    key_hi = static_cast<uint32_t>(key >> 32);
  }
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const int64_t b = i / C;
    const int64_t c = i % C;
    const uint32_t base = static_cast<uint32_t>((first_row + b) * static_cast<int64_t>(C));
    const float f =
        DropoutFactor(base + static_cast<uint32_t>(c), key_lo, key_hi, threshold, scale);
    mask[i] = f;
    const float y = x[i] * f;
    out[i] = y;
    if (out16 != nullptr) out16[i] = HalfBits(y, bf16);
  }
}

__global__ void MulIntoKernel(float* d, const float* m, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) d[i] *= m[i];
}

// ---- metrics ----

// One block of kThreads: each thread sums a strided slice in order, then a tree over shared
// memory with a barrier between levels. The same inputs give the same bits.
__global__ void LossSumKernel(double* out, const float* losses, int B, bool accumulate) {
  __shared__ double partial[kThreads];
  double s = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < B; i += kThreads) s += losses[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = accumulate ? *out + partial[0] : partial[0];
}

__global__ void AccuracyKernel(unsigned long long* correct, const float* logits,
                               const int32_t* labels, int B, int V) {
  for (int64_t b = FirstIndex(); b < B; b += Stride()) {
    const float* row = logits + b * V;
    int best = 0;
    for (int v = 1; v < V; ++v) best = row[v] > row[best] ? v : best;
    if (best == labels[b]) atomicAdd(correct, 1ull);
  }
}

}  // namespace

// ---- host entry points ----

Status CreateBlasHandle(cudaStream_t stream, bool tf32, cublasHandle_t* handle) {
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  cublasStatus_t s = cublasSetStream(h, stream);
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    return CublasStatus(s, "cublasSetStream/cublasSetMathMode", __FILE__, __LINE__);
  }
  *handle = h;
  return Status::Ok();
}

// cuBLAS is column-major: a row-major [r, c] array is its column-major [c, r] transpose, so each
// product below is the transpose of the row-major one in ops.h (llm.c's calls).
Status matmul_forward(cublasHandle_t handle, float* out, const float* inp, const float* weight,
                      int B, int C, int OC) {
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, B, C, &one, weight, C, inp, C,
                           &zero, out, OC));
  return Status::Ok();
}

Status matmul_backward(cublasHandle_t handle, float* dinp, float* dweight, const float* dout,
                       const float* inp, const float* weight, int B, int C, int OC,
                       bool accumulate) {
  const float one = 1.0f, zero = 0.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, B, &one, inp, C, dout, OC,
                           &beta, dweight, C));
  if (dinp != nullptr) {
    CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, C, B, OC, &one, weight, C, dout, OC,
                             &zero, dinp, C));
  }
  return Status::Ok();
}

namespace {

cudaDataType_t DataType(HalfType type) {
  return type == HalfType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
}

}  // namespace

// The same products as matmul_forward / matmul_backward, with 16-bit A and B, fp32 C, and fp32
// compute (CUBLAS_COMPUTE_32F: the scalars are floats).
Status matmul_forward_half(cublasHandle_t handle, float* out, const uint16_t* inp,
                           const uint16_t* weight, int B, int C, int OC, HalfType type) {
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t t = DataType(type);
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, B, C, &one, weight, t, C, inp, t,
                            C, &zero, out, CUDA_R_32F, OC, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

Status matmul_backward_half(cublasHandle_t handle, float* dinp, float* dweight,
                            const uint16_t* dout, const uint16_t* inp, const uint16_t* weight,
                            int B, int C, int OC, HalfType type, bool accumulate) {
  const float one = 1.0f, zero = 0.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  const cudaDataType_t t = DataType(type);
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, B, &one, inp, t, C, dout, t,
                            OC, &beta, dweight, CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
  if (dinp != nullptr) {
    CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, C, B, OC, &one, weight, t, C, dout,
                              t, OC, &zero, dinp, CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  }
  return Status::Ok();
}

Status cast_to_half(uint16_t* out, const float* in, int64_t n, HalfType type, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(CastKernel, Blocks(n), kThreads, stream, out, in, n, type == HalfType::kBf16);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status scale_by(float* x, int64_t n, const float* scale, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(ScaleByKernel, Blocks(n), kThreads, stream, x, n, scale);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status unscale_check(float* grads, int64_t n, const float* scale, int* found_inf,
                     cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(UnscaleCheckKernel, Blocks(n), kThreads, stream, grads, n, scale, found_inf);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status update_loss_scale(LossScaleState* state, int* found_inf, int window, cudaStream_t stream) {
  Launch(UpdateLossScaleKernel, 1, 1, stream, state, found_inf, window);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status bias_act_forward(float* out, float* pre, const float* bias, int B, int C, Activation act,
                        cudaStream_t stream, uint16_t* out16, HalfType type, bool keep_pre) {
  if (!keep_pre && ((out == nullptr && out16 == nullptr) || out == pre)) {
    return Status::InvalidArgument(
        "bias_act_forward: keep_pre = false needs out or out16, and out apart from pre");
  }
  const int64_t n = static_cast<int64_t>(B) * C;
  if (n == 0) return Status::Ok();
  const bool bf16 = type == HalfType::kBf16;
  ByIndex(n, [&](auto index) {
    using Index = decltype(index);
    Launch(BiasActForwardKernel<Index>, Blocks(n), kThreads, stream, out, pre, bias,
           static_cast<Index>(n), C, act, out16, bf16, keep_pre);
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

int64_t BiasGradScratchFloats(int B, int C) {
  const int ranges = RowRanges(B, C);
  return ranges > 1 ? int64_t{ranges} * C : 0;
}

Status bias_act_backward(float* d, float* dbias, const float* pre, const float* out, int B, int C,
                         Activation act, cudaStream_t stream, bool accumulate, uint16_t* d16,
                         HalfType type, bool keep_d, float* scratch, const float* pre_bias) {
  if (C == 0) return Status::Ok();
  if (!keep_d && d16 == nullptr && B > 0) {
    return Status::InvalidArgument("bias_act_backward: keep_d = false needs d16");
  }
  // gelu reads pre; relu and tanh read out where the caller kept it.
  const bool a_is_pre = act == Activation::kGelu || out == nullptr;
  const float* a = a_is_pre ? pre : out;
  const float* a_bias = a_is_pre && act != Activation::kNone ? pre_bias : nullptr;
  const int ranges = scratch != nullptr ? RowRanges(B, C) : 1;
  const int rows_per_range = (B + ranges - 1) / ranges;
  const dim3 grid((C + kSumCols - 1) / kSumCols, ranges);
  const dim3 block(kSumCols, kSumRows);
  Launch(BiasActBackwardKernel, grid, block, stream, d, dbias, scratch, a, a_bias, B, C,
         rows_per_range, act, a_is_pre, accumulate, keep_d, d16, type == HalfType::kBf16);
  CUDA_CHECK(cudaGetLastError());
  if (ranges > 1) {
    Launch(SumRangesKernel, Blocks(C), kThreads, stream, dbias, scratch, ranges, C, accumulate);
    CUDA_CHECK(cudaGetLastError());
  }
  return Status::Ok();
}

Status softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                     const int32_t* labels, int B, int V, float dloss_scale,
                                     cudaStream_t stream, float label_smoothing) {
  if (B == 0) return Status::Ok();
  Launch(SoftmaxXentKernel, Blocks(B), kThreads, stream, dlogits, losses, logits, labels, B, V,
         dloss_scale, label_smoothing);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status sgd_update(float* params, float* velocity, const float* grads, int64_t n, float lr,
                  float momentum, float weight_decay, bool nesterov, cudaStream_t stream,
                  const int* skip, uint16_t* params16, HalfType type, const StepScalars* step) {
  if (n == 0) return Status::Ok();
  Launch(SgdKernel, Blocks(n), kThreads, stream, params, velocity, grads, n, lr, momentum,
         weight_decay, nesterov, skip, params16, type == HalfType::kBf16, step);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status adamw_update(float* params, float* m, float* v, const float* grads, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int64_t t,
                    cudaStream_t stream, const int* skip, const LossScaleState* loss_scale,
                    uint16_t* params16, HalfType type, const StepScalars* step) {
  if (n == 0) return Status::Ok();
  // The scalars as cpu::adamw_update computes them (step_math.h, bias corrections in double).
  const AdamwScalars s = MakeAdamwScalars(lr, beta1, beta2, weight_decay, t);
  Launch(AdamwKernel, Blocks(n), kThreads, stream, params, m, v, grads, n, beta1, beta2, eps, s, lr,
         weight_decay, t, skip, loss_scale, params16, type == HalfType::kBf16, step);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status dropout_forward(float* out, float* mask, const float* x, int B, int C, float p, uint64_t key,
                       int64_t first_row, cudaStream_t stream, uint16_t* out16, HalfType type,
                       const StepScalars* step, uint64_t salt) {
  const int64_t n = static_cast<int64_t>(B) * C;
  if (n == 0) return Status::Ok();
  const uint32_t threshold = static_cast<uint32_t>(std::ldexp(static_cast<double>(p), 32));
  const float scale = 1.0f / (1.0f - p);
  Launch(DropoutForwardKernel, Blocks(n), kThreads, stream, out, mask, x, n, C, first_row,
         static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32), threshold, scale, out16,
         type == HalfType::kBf16, step, salt);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status gather_rows(float* x, int32_t* y, const int32_t* idx, int rows, const uint8_t* u8,
                   const float* f32, const int32_t* labels, int64_t dim, cudaStream_t stream) {
  if (rows <= 0) return Status::Ok();
  const int blocks = static_cast<int>(std::min<int64_t>(rows, kMaxBlocks));
  Launch(GatherRowsKernel, blocks, kThreads, stream, x, y, idx, rows, u8, f32, labels, dim);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status dropout_backward(float* d, const float* mask, int64_t n, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(MulIntoKernel, Blocks(n), kThreads, stream, d, mask, n);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status loss_sum(double* out, const float* losses, int B, cudaStream_t stream, bool accumulate) {
  Launch(LossSumKernel, 1, kThreads, stream, out, losses, B, accumulate);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status accuracy(unsigned long long* correct, const float* logits, const int32_t* labels, int B,
                int V, cudaStream_t stream) {
  if (B == 0) return Status::Ok();
  Launch(AccuracyKernel, Blocks(B), kThreads, stream, correct, logits, labels, B, V);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace sweep::trainer::cuda
