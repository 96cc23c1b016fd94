// Kernels for cuda/cnn_ops.h other than batch norm's (bn_ops.cu) and the direct convolution's
// (direct_conv.cu): grid-stride loops with one thread per output element (pooling forward,
// elementwise) or per input element (pooling backward, which gathers the windows that cover it).
// NHWC, so neighbouring threads take neighbouring channels: coalesced accesses. Kernels that
// split an index into (row, h, w, c) take its type as Index: int where the tensors fit (ByIndex),
// as a 64-bit division costs a few dozen instructions an element on the GPU.
#include "cuda/cnn_ops.h"

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/device_util.h"
#include "cuda/launch.h"

namespace sweep::trainer::cuda {
namespace {

// The pooling windows that cover input row (or column) i: outputs first..last (empty when
// first > last). An output o covers inputs o * stride .. o * stride + K - 1.
__device__ inline void Covering(int i, int K, int stride, int out, int* first, int* last) {
  *first = i < K ? 0 : (i - K) / stride + 1;
  *last = min(i / stride, out - 1);
}

template <typename Index>
__global__ void MaxPoolForwardKernel(float* out, int32_t* argmax, const float* inp, Index n, int H,
                                     int W, int C, int K, int stride, int OH, int OW) {
  for (Index i = FirstOf<Index>(); i < n; i += StrideOf<Index>()) {
    const int c = static_cast<int>(i % C);
    const Index pix = i / C;
    const int ow = static_cast<int>(pix % OW), oh = static_cast<int>(pix / OW % OH);
    const Index b = pix / (static_cast<Index>(OW) * OH);
    const float* img = inp + b * H * W * C;
    int32_t best = (oh * stride * W + ow * stride) * C + c;
    float m = img[best];
    for (int kh = 0; kh < K; ++kh) {
      for (int kw = 0; kw < K; ++kw) {
        const int32_t at = ((oh * stride + kh) * W + ow * stride + kw) * C + c;
        const float x = img[at];
        // Strictly greater: ties keep the first; x != x: NaN propagates.
        if (x > m || x != x) {
          m = x;
          best = at;
        }
      }
    }
    out[i] = m;
    argmax[i] = best;
  }
}

// dinp at (b, h, w, c) = the sum of dout over the windows covering it whose maximum it was.
template <typename Index>
__global__ void MaxPoolBackwardKernel(float* dinp, const float* dout, const int32_t* argmax,
                                      Index n, int H, int W, int C, int K, int stride, int OH,
                                      int OW, bool accumulate) {
  const Index image = static_cast<Index>(H) * W * C;
  for (Index i = FirstOf<Index>(); i < n; i += StrideOf<Index>()) {
    const int32_t within = static_cast<int32_t>(i % image);
    const Index b = i / image;
    const int c = within % C, w = within / C % W, h = within / C / W;
    int oh0, oh1, ow0, ow1;
    Covering(h, K, stride, OH, &oh0, &oh1);
    Covering(w, K, stride, OW, &ow0, &ow1);
    float sum = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh) {
      for (int ow = ow0; ow <= ow1; ++ow) {
        const Index o = ((b * OH + oh) * OW + ow) * C + c;
        if (argmax[o] == within) sum += dout[o];
      }
    }
    dinp[i] = accumulate ? dinp[i] + sum : sum;
  }
}

template <typename Index>
__global__ void AvgPoolForwardKernel(float* out, const float* inp, Index n, int H, int W, int C,
                                     int K, int stride, int OH, int OW, float inv) {
  for (Index i = FirstOf<Index>(); i < n; i += StrideOf<Index>()) {
    const int c = static_cast<int>(i % C);
    const Index pix = i / C;
    const int ow = static_cast<int>(pix % OW), oh = static_cast<int>(pix / OW % OH);
    const float* img = inp + pix / (static_cast<Index>(OW) * OH) * H * W * C;
    float sum = 0.0f;
    for (int kh = 0; kh < K; ++kh) {
      for (int kw = 0; kw < K; ++kw)
        sum += img[((oh * stride + kh) * W + ow * stride + kw) * C + c];
    }
    out[i] = sum * inv;
  }
}

template <typename Index>
__global__ void AvgPoolBackwardKernel(float* dinp, const float* dout, Index n, int H, int W, int C,
                                      int K, int stride, int OH, int OW, float inv,
                                      bool accumulate) {
  const Index image = static_cast<Index>(H) * W * C;
  for (Index i = FirstOf<Index>(); i < n; i += StrideOf<Index>()) {
    const Index within = i % image, b = i / image;
    const int c = static_cast<int>(within % C), w = static_cast<int>(within / C % W);
    const int h = static_cast<int>(within / C / W);
    int oh0, oh1, ow0, ow1;
    Covering(h, K, stride, OH, &oh0, &oh1);
    Covering(w, K, stride, OW, &ow0, &ow1);
    float sum = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh) {
      for (int ow = ow0; ow <= ow1; ++ow) sum += dout[((b * OH + oh) * OW + ow) * C + c] * inv;
    }
    dinp[i] = accumulate ? dinp[i] + sum : sum;
  }
}

template <typename Index>
__global__ void GlobalAvgForwardKernel(float* out, const float* inp, Index n, int HW, int C,
                                       float inv) {
  for (Index i = FirstOf<Index>(); i < n; i += StrideOf<Index>()) {
    const Index b = i / C;
    const float* x = inp + b * HW * C + i % C;
    float sum = 0.0f;
    for (int p = 0; p < HW; ++p) sum += x[static_cast<Index>(p) * C];
    out[i] = sum * inv;
  }
}

template <typename Index>
__global__ void GlobalAvgBackwardKernel(float* dinp, const float* dout, Index n, int HW, int C,
                                        float inv, bool accumulate) {
  const Index image = static_cast<Index>(HW) * C;
  for (Index i = FirstOf<Index>(); i < n; i += StrideOf<Index>()) {
    const float g = dout[i / image * C + i % C] * inv;
    dinp[i] = accumulate ? dinp[i] + g : g;
  }
}

__global__ void ActForwardKernel(float* out, const float* x, int64_t n, Activation act,
                                 uint16_t* out16, bool bf16) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float y = ActForward(x[i], act);
    out[i] = y;
    if (out16 != nullptr) out16[i] = HalfBits(y, bf16);
  }
}

__global__ void ActBackwardKernel(float* dx, const float* d, const float* x, const float* out,
                                  int64_t n, Activation act, bool accumulate, const uint16_t* d16,
                                  bool bf16) {
  const bool gelu = act == Activation::kGelu;
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float di = d16 != nullptr ? HalfValue(d16[i], bf16) : d[i];
    const float g = ActGrad(di, gelu ? x[i] : out[i], act, gelu);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

__global__ void WidenHalfKernel(float* out, const uint16_t* in, int64_t n, bool bf16,
                                bool accumulate) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float v = HalfValue(in[i], bf16);
    out[i] = accumulate ? out[i] + v : v;
  }
}

template <typename Index>
__global__ void TransformRowsKernel(float* out, const float* in, const int32_t* draws,
                                    const float* norm, Index n, int H, int W, int C) {
  const Index row_size = static_cast<Index>(H) * W * C;
  for (Index i = FirstOf<Index>(); i < n; i += StrideOf<Index>()) {
    const Index r = i / row_size, within = i % row_size;
    const int c = static_cast<int>(within % C), w = static_cast<int>(within / C % W);
    const int h = static_cast<int>(within / C / W);
    const int32_t* d = draws != nullptr ? draws + r * kDrawInts : nullptr;
    float v;
    if (d == nullptr) {
      v = in[i];
    } else {
      const int sh = h + d[0], sw = (d[2] != 0 ? W - 1 - w : w) + d[1];
      v = sh < 0 || sh >= H || sw < 0 || sw >= W
              ? 0.0f
              : in[r * row_size + (static_cast<Index>(sh) * W + sw) * C + c];
    }
    if (norm != nullptr) v = (v - norm[c]) * norm[C + c];
    if (d != nullptr && h >= d[3] && h < d[3] + d[5] && w >= d[4] && w < d[4] + d[6]) v = 0.0f;
    out[i] = v;
  }
}

__global__ void AddKernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) out[i] = a[i] + b[i];
}

__global__ void CopyOrAddKernel(float* dst, const float* src, int64_t n, bool accumulate) {
  for (int64_t i = FirstIndex(); i < n; i += Stride())
    dst[i] = accumulate ? dst[i] + src[i] : src[i];
}

}  // namespace

Status maxpool_forward(float* out, int32_t* argmax, const float* inp, int B, int H, int W, int C,
                       int K, int stride, cudaStream_t stream) {
  const int OH = PoolOut(H, K, stride), OW = PoolOut(W, K, stride);
  const int64_t n = int64_t{B} * OH * OW * C;
  if (n == 0) return Status::Ok();
  ByIndex(int64_t{B} * H * W * C, [&](auto index) {
    using Index = decltype(index);
    Launch(MaxPoolForwardKernel<Index>, Blocks(n), kThreads, stream, out, argmax, inp,
           static_cast<Index>(n), H, W, C, K, stride, OH, OW);
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, int B, int H, int W,
                        int C, int K, int stride, bool accumulate, cudaStream_t stream) {
  const int64_t n = int64_t{B} * H * W * C;
  if (n == 0) return Status::Ok();
  ByIndex(n, [&](auto index) {
    using Index = decltype(index);
    Launch(MaxPoolBackwardKernel<Index>, Blocks(n), kThreads, stream, dinp, dout, argmax,
           static_cast<Index>(n), H, W, C, K, stride, PoolOut(H, K, stride), PoolOut(W, K, stride),
           accumulate);
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status avgpool_forward(float* out, const float* inp, int B, int H, int W, int C, int K, int stride,
                       cudaStream_t stream) {
  const int OH = PoolOut(H, K, stride), OW = PoolOut(W, K, stride);
  const int64_t n = int64_t{B} * OH * OW * C;
  if (n == 0) return Status::Ok();
  ByIndex(int64_t{B} * H * W * C, [&](auto index) {
    using Index = decltype(index);
    Launch(AvgPoolForwardKernel<Index>, Blocks(n), kThreads, stream, out, inp,
           static_cast<Index>(n), H, W, C, K, stride, OH, OW, 1.0f / static_cast<float>(K * K));
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status avgpool_backward(float* dinp, const float* dout, int B, int H, int W, int C, int K,
                        int stride, bool accumulate, cudaStream_t stream) {
  const int64_t n = int64_t{B} * H * W * C;
  if (n == 0) return Status::Ok();
  ByIndex(n, [&](auto index) {
    using Index = decltype(index);
    Launch(AvgPoolBackwardKernel<Index>, Blocks(n), kThreads, stream, dinp, dout,
           static_cast<Index>(n), H, W, C, K, stride, PoolOut(H, K, stride), PoolOut(W, K, stride),
           1.0f / static_cast<float>(K * K), accumulate);
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status global_avgpool_forward(float* out, const float* inp, int B, int HW, int C,
                              cudaStream_t stream) {
  const int64_t n = int64_t{B} * C;
  if (n == 0) return Status::Ok();
  ByIndex(n * HW, [&](auto index) {
    using Index = decltype(index);
    Launch(GlobalAvgForwardKernel<Index>, Blocks(n), kThreads, stream, out, inp,
           static_cast<Index>(n), HW, C, 1.0f / static_cast<float>(HW));
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status global_avgpool_backward(float* dinp, const float* dout, int B, int HW, int C,
                               bool accumulate, cudaStream_t stream) {
  const int64_t n = int64_t{B} * HW * C;
  if (n == 0) return Status::Ok();
  ByIndex(n, [&](auto index) {
    using Index = decltype(index);
    Launch(GlobalAvgBackwardKernel<Index>, Blocks(n), kThreads, stream, dinp, dout,
           static_cast<Index>(n), HW, C, 1.0f / static_cast<float>(HW), accumulate);
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status act_forward(float* out, const float* x, int64_t n, cpu::Activation act, cudaStream_t stream,
                   uint16_t* out16, cpu::HalfType type) {
  if (n == 0) return Status::Ok();
  Launch(ActForwardKernel, Blocks(n), kThreads, stream, out, x, n, act, out16,
         type == cpu::HalfType::kBf16);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status act_backward(float* dx, const float* d, const float* x, const float* out, int64_t n,
                    cpu::Activation act, bool accumulate, cudaStream_t stream, const uint16_t* d16,
                    cpu::HalfType type) {
  if (n == 0) return Status::Ok();
  Launch(ActBackwardKernel, Blocks(n), kThreads, stream, dx, d, x, out, n, act, accumulate, d16,
         type == cpu::HalfType::kBf16);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status widen_half(float* out, const uint16_t* in, int64_t n, cpu::HalfType type, bool accumulate,
                  cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(WidenHalfKernel, Blocks(n), kThreads, stream, out, in, n, type == cpu::HalfType::kBf16,
         accumulate);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status transform_rows(float* out, const float* in, const int32_t* draws, const float* norm,
                      int rows, int H, int W, int C, cudaStream_t stream) {
  const int64_t n = int64_t{rows} * H * W * C;
  if (n == 0) return Status::Ok();
  ByIndex(n, [&](auto index) {
    using Index = decltype(index);
    Launch(TransformRowsKernel<Index>, Blocks(n), kThreads, stream, out, in, draws, norm,
           static_cast<Index>(n), H, W, C);
  });
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status add_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(AddKernel, Blocks(n), kThreads, stream, out, a, b, n);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status copy_or_add(float* dst, const float* src, int64_t n, bool accumulate, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(CopyOrAddKernel, Blocks(n), kThreads, stream, dst, src, n, accumulate);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace sweep::trainer::cuda
