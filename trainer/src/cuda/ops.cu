// CUDA kernels for cuda/ops.h: cuBLAS for the GEMMs, and plain grid-stride loops (one thread
// per element, or per row or column where a row or column is the unit) for the rest. Simple on
// purpose: no shared-memory tiling except in the one-block loss sum, no warp shuffles, no
// vector loads. Owned by the trainer; stateless.
#include <algorithm>
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/ops.h"

namespace sweep::trainer::cuda {
namespace {

constexpr int kThreads = 256;         // a power of two: LossSumKernel's tree relies on it
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops cover the rest

int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ int64_t FirstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t Stride() { return static_cast<int64_t>(blockDim.x) * gridDim.x; }

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// ---- bias + activation ----

__global__ void BiasActForwardKernel(float* out, float* pre, const float* bias, int64_t n, int C,
                                     Activation act) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float x = pre[i] + bias[i % C];
    pre[i] = x;
    float y = x;
    if (act == Activation::kRelu) {
      y = x > 0.0f ? x : 0.0f;
    } else if (act == Activation::kTanh) {
      y = tanhf(x);
    } else if (act == Activation::kGelu) {
      y = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
    }
    out[i] = y;
  }
}

__global__ void ActBackwardKernel(float* d, const float* pre, const float* out, int64_t n,
                                  Activation act) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float g = d[i];
    if (act == Activation::kRelu) {
      d[i] = out[i] > 0.0f ? g : 0.0f;
    } else if (act == Activation::kTanh) {
      d[i] = g * (1.0f - out[i] * out[i]);
    } else if (act == Activation::kGelu) {
      const float x = pre[i];
      const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
      const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
      d[i] = g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
  }
}

// One thread per column, summing down the rows in order: neighbouring threads read neighbouring
// addresses, and the result does not depend on scheduling.
__global__ void ColumnSumKernel(float* dbias, const float* d, int B, int C, bool accumulate) {
  for (int64_t c = FirstIndex(); c < C; c += Stride()) {
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += d[static_cast<int64_t>(b) * C + c];
    dbias[c] = accumulate ? dbias[c] + s : s;
  }
}

// ---- loss ----

// One thread per row (V is the class count: small).
__global__ void SoftmaxXentKernel(float* dlogits, float* losses, const float* logits,
                                  const int32_t* labels, int B, int V, float dloss_scale) {
  for (int64_t b = FirstIndex(); b < B; b += Stride()) {
    const float* row = logits + b * V;
    const int y = labels[b];
    if (y < 0 || y >= V) {  // never read outside the row: a bad label shows as a NaN loss
      losses[b] = nanf("");
      continue;
    }
    float mx = row[0];
    for (int v = 1; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
    float sum = 0.0f;
    for (int v = 0; v < V; ++v) sum += expf(row[v] - mx);
    const float lse = mx + logf(sum);
    losses[b] = lse - row[y];
    if (dlogits != nullptr) {
      float* g = dlogits + b * V;
      for (int v = 0; v < V; ++v) g[v] = expf(row[v] - lse) * dloss_scale;
      g[y] -= dloss_scale;
    }
  }
}

// ---- optimizers ----

__global__ void SgdKernel(float* p, float* vel, const float* g, int64_t n, float lr, float momentum,
                          float weight_decay, bool nesterov) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float gi = g[i] + weight_decay * p[i];
    const float vi = momentum * vel[i] + gi;
    vel[i] = vi;
    p[i] -= lr * (nesterov ? gi + momentum * vi : vi);
  }
}

__global__ void AdamwKernel(float* p, float* m, float* v, const float* g, int64_t n, float decay,
                            float beta1, float beta2, float step_size, float inv_sqrt_bc2,
                            float eps) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

// ---- dropout ----

// cpu/ops.cc's Mix32 (Wellons' lowbias32), unchanged: the masks match the CPU's bit for bit.
__device__ uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

__global__ void DropoutForwardKernel(float* out, float* mask, const float* x, int64_t n, int C,
                                     int64_t first_row, uint32_t key_lo, uint32_t key_hi,
                                     uint32_t threshold, float scale) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const int64_t b = i / C;
    const int64_t c = i % C;
    const uint32_t base = static_cast<uint32_t>((first_row + b) * static_cast<int64_t>(C));
    const uint32_t h = Mix32(Mix32(base + static_cast<uint32_t>(c) + key_lo) ^ key_hi);
    const float f = h >= threshold ? scale : 0.0f;
    mask[i] = f;
    out[i] = x[i] * f;
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

Status bias_act_forward(float* out, float* pre, const float* bias, int B, int C, Activation act,
                        cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(B) * C;
  if (n == 0) return Status::Ok();
  BiasActForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(out, pre, bias, n, C, act);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status bias_act_backward(float* d, float* dbias, const float* pre, const float* out, int B, int C,
                         Activation act, cudaStream_t stream, bool accumulate) {
  const int64_t n = static_cast<int64_t>(B) * C;
  if (C == 0) return Status::Ok();
  if (n > 0 && act != Activation::kNone) {
    ActBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(d, pre, out, n, act);
    CUDA_CHECK(cudaGetLastError());
  }
  ColumnSumKernel<<<Blocks(C), kThreads, 0, stream>>>(dbias, d, B, C, accumulate);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                     const int32_t* labels, int B, int V, float dloss_scale,
                                     cudaStream_t stream) {
  if (B == 0) return Status::Ok();
  SoftmaxXentKernel<<<Blocks(B), kThreads, 0, stream>>>(dlogits, losses, logits, labels, B, V,
                                                        dloss_scale);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status sgd_update(float* params, float* velocity, const float* grads, int64_t n, float lr,
                  float momentum, float weight_decay, bool nesterov, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(params, velocity, grads, n, lr, momentum,
                                                weight_decay, nesterov);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status adamw_update(float* params, float* m, float* v, const float* grads, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int64_t t,
                    cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  // The scalars exactly as cpu::adamw_update computes them (bias corrections in double).
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  AdamwKernel<<<Blocks(n), kThreads, 0, stream>>>(params, m, v, grads, n, 1.0f - lr * weight_decay,
                                                  beta1, beta2, static_cast<float>(lr / bc1),
                                                  static_cast<float>(1.0 / std::sqrt(bc2)), eps);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status dropout_forward(float* out, float* mask, const float* x, int B, int C, float p, uint64_t key,
                       int64_t first_row, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(B) * C;
  if (n == 0) return Status::Ok();
  const uint32_t threshold = static_cast<uint32_t>(std::ldexp(static_cast<double>(p), 32));
  const float scale = 1.0f / (1.0f - p);
  DropoutForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(
      out, mask, x, n, C, first_row, static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32),
      threshold, scale);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status dropout_backward(float* d, const float* mask, int64_t n, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  MulIntoKernel<<<Blocks(n), kThreads, 0, stream>>>(d, mask, n);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status loss_sum(double* out, const float* losses, int B, cudaStream_t stream, bool accumulate) {
  LossSumKernel<<<1, kThreads, 0, stream>>>(out, losses, B, accumulate);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status accuracy(unsigned long long* correct, const float* logits, const int32_t* labels, int B,
                int V, cudaStream_t stream) {
  if (B == 0) return Status::Ok();
  AccuracyKernel<<<Blocks(B), kThreads, 0, stream>>>(correct, logits, labels, B, V);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace sweep::trainer::cuda
