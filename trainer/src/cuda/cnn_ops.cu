// Kernels for cuda/cnn_ops.h: grid-stride loops with one thread per output element (pooling
// forward, elementwise) or per input element (pooling backward, which gathers the windows that
// cover it). NHWC, so neighbouring threads take neighbouring channels: coalesced accesses.
#include "cuda/cnn_ops.h"

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

__global__ void MaxPoolForwardKernel(float* out, int32_t* argmax, const float* inp, int64_t n,
                                     int H, int W, int C, int K, int stride, int OH, int OW) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const int c = static_cast<int>(i % C);
    const int64_t pix = i / C;
    const int ow = static_cast<int>(pix % OW), oh = static_cast<int>(pix / OW % OH);
    const int64_t b = pix / (int64_t{OW} * OH);
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
__global__ void MaxPoolBackwardKernel(float* dinp, const float* dout, const int32_t* argmax,
                                      int64_t n, int H, int W, int C, int K, int stride, int OH,
                                      int OW, bool accumulate) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const int32_t within = static_cast<int32_t>(i % (int64_t{H} * W * C));
    const int64_t b = i / (int64_t{H} * W * C);
    const int c = within % C, w = within / C % W, h = within / C / W;
    int oh0, oh1, ow0, ow1;
    Covering(h, K, stride, OH, &oh0, &oh1);
    Covering(w, K, stride, OW, &ow0, &ow1);
    float sum = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh) {
      for (int ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = ((b * OH + oh) * OW + ow) * C + c;
        if (argmax[o] == within) sum += dout[o];
      }
    }
    dinp[i] = accumulate ? dinp[i] + sum : sum;
  }
}

__global__ void AvgPoolForwardKernel(float* out, const float* inp, int64_t n, int H, int W, int C,
                                     int K, int stride, int OH, int OW, float inv) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const int c = static_cast<int>(i % C);
    const int64_t pix = i / C;
    const int ow = static_cast<int>(pix % OW), oh = static_cast<int>(pix / OW % OH);
    const float* img = inp + pix / (int64_t{OW} * OH) * H * W * C;
    float sum = 0.0f;
    for (int kh = 0; kh < K; ++kh) {
      for (int kw = 0; kw < K; ++kw)
        sum += img[((oh * stride + kh) * W + ow * stride + kw) * C + c];
    }
    out[i] = sum * inv;
  }
}

__global__ void AvgPoolBackwardKernel(float* dinp, const float* dout, int64_t n, int H, int W,
                                      int C, int K, int stride, int OH, int OW, float inv,
                                      bool accumulate) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const int64_t within = i % (int64_t{H} * W * C), b = i / (int64_t{H} * W * C);
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

__global__ void GlobalAvgForwardKernel(float* out, const float* inp, int64_t n, int HW, int C,
                                       float inv) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const int64_t b = i / C;
    const float* x = inp + b * HW * C + i % C;
    float sum = 0.0f;
    for (int p = 0; p < HW; ++p) sum += x[int64_t{p} * C];
    out[i] = sum * inv;
  }
}

__global__ void GlobalAvgBackwardKernel(float* dinp, const float* dout, int64_t n, int HW, int C,
                                        float inv, bool accumulate) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float g = dout[i / (int64_t{HW} * C) * C + i % C] * inv;
    dinp[i] = accumulate ? dinp[i] + g : g;
  }
}

__global__ void ActForwardKernel(float* out, const float* x, int64_t n, Activation act) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) out[i] = ActForward(x[i], act);
}

__global__ void ActBackwardKernel(float* dx, const float* d, const float* x, const float* out,
                                  int64_t n, Activation act, bool accumulate) {
  const bool gelu = act == Activation::kGelu;
  for (int64_t i = FirstIndex(); i < n; i += Stride()) {
    const float g = ActGrad(d[i], gelu ? x[i] : out[i], act, gelu);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

__global__ void AddKernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += Stride()) out[i] = a[i] + b[i];
}

__global__ void CopyOrAddKernel(float* dst, const float* src, int64_t n, bool accumulate) {
  for (int64_t i = FirstIndex(); i < n; i += Stride())
    dst[i] = accumulate ? dst[i] + src[i] : src[i];
}

int PoolOut(int size, int K, int stride) { return (size - K) / stride + 1; }

}  // namespace

Status maxpool_forward(float* out, int32_t* argmax, const float* inp, int B, int H, int W, int C,
                       int K, int stride, cudaStream_t stream) {
  const int OH = PoolOut(H, K, stride), OW = PoolOut(W, K, stride);
  const int64_t n = int64_t{B} * OH * OW * C;
  if (n == 0) return Status::Ok();
  Launch(MaxPoolForwardKernel, Blocks(n), kThreads, stream, out, argmax, inp, n, H, W, C, K, stride,
         OH, OW);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, int B, int H, int W,
                        int C, int K, int stride, bool accumulate, cudaStream_t stream) {
  const int64_t n = int64_t{B} * H * W * C;
  if (n == 0) return Status::Ok();
  Launch(MaxPoolBackwardKernel, Blocks(n), kThreads, stream, dinp, dout, argmax, n, H, W, C, K,
         stride, PoolOut(H, K, stride), PoolOut(W, K, stride), accumulate);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status avgpool_forward(float* out, const float* inp, int B, int H, int W, int C, int K, int stride,
                       cudaStream_t stream) {
  const int OH = PoolOut(H, K, stride), OW = PoolOut(W, K, stride);
  const int64_t n = int64_t{B} * OH * OW * C;
  if (n == 0) return Status::Ok();
  Launch(AvgPoolForwardKernel, Blocks(n), kThreads, stream, out, inp, n, H, W, C, K, stride, OH, OW,
         1.0f / static_cast<float>(K * K));
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status avgpool_backward(float* dinp, const float* dout, int B, int H, int W, int C, int K,
                        int stride, bool accumulate, cudaStream_t stream) {
  const int64_t n = int64_t{B} * H * W * C;
  if (n == 0) return Status::Ok();
  Launch(AvgPoolBackwardKernel, Blocks(n), kThreads, stream, dinp, dout, n, H, W, C, K, stride,
         PoolOut(H, K, stride), PoolOut(W, K, stride), 1.0f / static_cast<float>(K * K),
         accumulate);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status global_avgpool_forward(float* out, const float* inp, int B, int HW, int C,
                              cudaStream_t stream) {
  const int64_t n = int64_t{B} * C;
  if (n == 0) return Status::Ok();
  Launch(GlobalAvgForwardKernel, Blocks(n), kThreads, stream, out, inp, n, HW, C,
         1.0f / static_cast<float>(HW));
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status global_avgpool_backward(float* dinp, const float* dout, int B, int HW, int C,
                               bool accumulate, cudaStream_t stream) {
  const int64_t n = int64_t{B} * HW * C;
  if (n == 0) return Status::Ok();
  Launch(GlobalAvgBackwardKernel, Blocks(n), kThreads, stream, dinp, dout, n, HW, C,
         1.0f / static_cast<float>(HW), accumulate);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status act_forward(float* out, const float* x, int64_t n, cpu::Activation act,
                   cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(ActForwardKernel, Blocks(n), kThreads, stream, out, x, n, act);
  CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status act_backward(float* dx, const float* d, const float* x, const float* out, int64_t n,
                    cpu::Activation act, bool accumulate, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  Launch(ActBackwardKernel, Blocks(n), kThreads, stream, dx, d, x, out, n, act, accumulate);
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
