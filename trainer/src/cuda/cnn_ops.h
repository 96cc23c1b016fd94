// The CUDA backend's kernels for convolutional networks other than the convolutions themselves
// (cuda/cudnn_conv.h): pooling, the global average, the residual add and the activations, under
// cpu/conv_ops.h's names and argument order, on NHWC fp32 device arrays, with the stream last.
// Each returns the launch's Status; the work is asynchronous on the stream. Gradients are
// overwritten unless `accumulate`. Backward passes gather (each input element sums the outputs
// that read it) rather than scatter with atomics, so every result is the same bits every run.
// Safe from several threads for disjoint outputs on their own streams.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cpu/ops.h"

namespace sweep::trainer::cuda {

// K x K windows at `stride` over inp [B, H, W, C] into out [B, OH, OW, C]; argmax keeps the
// index (within the sample's H W C) of each maximum: ties keep the first in row-major window
// order, and NaN propagates, as on the CPU.
Status maxpool_forward(float* out, int32_t* argmax, const float* inp, int B, int H, int W, int C,
                       int K, int stride, cudaStream_t stream);
Status maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, int B, int H, int W,
                        int C, int K, int stride, bool accumulate, cudaStream_t stream);
Status avgpool_forward(float* out, const float* inp, int B, int H, int W, int C, int K, int stride,
                       cudaStream_t stream);
Status avgpool_backward(float* dinp, const float* dout, int B, int H, int W, int C, int K,
                        int stride, bool accumulate, cudaStream_t stream);

// Mean over each sample's HW pixels: inp [B, HW, C] -> out [B, C].
Status global_avgpool_forward(float* out, const float* inp, int B, int HW, int C,
                              cudaStream_t stream);
Status global_avgpool_backward(float* dinp, const float* dout, int B, int HW, int C,
                               bool accumulate, cudaStream_t stream);

// out[n] = act(x[n]); out may be x.
Status act_forward(float* out, const float* x, int64_t n, cpu::Activation act, cudaStream_t stream);
// dx[n] (+)= d[n] * act'(x[n]) (relu and tanh read out, gelu reads x); dx may be d when not
// accumulating.
Status act_backward(float* dx, const float* d, const float* x, const float* out, int64_t n,
                    cpu::Activation act, bool accumulate, cudaStream_t stream);

// out[n] = a[n] + b[n].
Status add_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
// dst[n] (+)= src[n].
Status copy_or_add(float* dst, const float* src, int64_t n, bool accumulate, cudaStream_t stream);

}  // namespace sweep::trainer::cuda
