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
#include "cpu/conv_ops.h"
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

// out[n] = act(x[n]); out may be x. out16, when not null, gets the 16-bit copy of out (`type`)
// that cast_to_half would make, in the same pass.
Status act_forward(float* out, const float* x, int64_t n, cpu::Activation act, cudaStream_t stream,
                   uint16_t* out16 = nullptr, cpu::HalfType type = cpu::HalfType::kBf16);
// dx[n] (+)= d[n] * act'(x[n]) (relu and tanh read out, gelu reads x); dx may be d when not
// accumulating.
// d16, when not null, is read instead of d: the gradient in 16 bits (`type`), widened as
// widen_half would.
Status act_backward(float* dx, const float* d, const float* x, const float* out, int64_t n,
                    cpu::Activation act, bool accumulate, cudaStream_t stream,
                    const uint16_t* d16 = nullptr, cpu::HalfType type = cpu::HalfType::kBf16);

// ---- batch normalization of x [N, C] (N = samples x pixels), per channel, as cpu/conv_ops.h ----
// The net's training pass and backward go through cuDNN (cuda/cudnn_norm.h) where it has an
// engine for the shape; these run where it has none, and evaluation always. Each channel's sums run
// in double over row ranges whose number depends only on N, then the ranges are added in order: the
// same inputs give the same bits every run. The training pass and the backward take `scratch`
// (batchnorm_scratch_bytes(N, C) bytes on the device, unused by anything else while they run on
// `stream`, zeroed before its first use: it starts with counters each call leaves at 0, so
// scratch shared by layers of other shapes must be the largest of their sizes, one buffer).
// At most 131,072 channels.
int64_t batchnorm_scratch_bytes(int64_t N, int C);

// bf16 / fp16: the 16-bit arrays batch norm's passes read or write in place of fp32 ones (each
// may be null), widened or rounded as widen_half and cast_to_half would, so the results are the
// bits of separate passes. Of `type`.
struct BnHalf {
  const uint16_t* x = nullptr;  // read instead of x: a convolution's 16-bit output
  uint16_t* out = nullptr;      // forward and evaluation: out's 16-bit copy (out may be null)
  uint16_t* d = nullptr;        // backward: read instead of d; ReLU's mask applied as to d
  uint16_t* dx = nullptr;       // backward: dx in 16 bits, written instead of dx (not added to)
  cpu::HalfType type = cpu::HalfType::kBf16;
};

// Our batch norm fused with the max pool that reads its output (directly, or through a ReLU
// that then runs after the pool): forward and evaluation write the pool's output (ReLU applied
// where relu; its 16-bit copy where out16 is given) and argmax as maxpool_forward would, and
// not batch norm's own output; backward takes the pool's output gradient (dout, the ReLU's
// already applied; or dout16, the next convolution's 16-bit data gradient, to which it applies
// the ReLU's mask from out where relu) and argmax where it would take d, as maxpool_backward
// would spread them. The same bits as the separate passes. Batch norm's act must be kNone; the
// windows must neither overlap nor leave gaps between them (stride == K). Every index of the
// input, and of the pool's output, must fit in an int.
struct BnPool {
  float* out = nullptr;
  uint16_t* out16 = nullptr;
  int32_t* argmax = nullptr;
  const float* dout = nullptr;
  const uint16_t* dout16 = nullptr;
  int B = 0, H = 0, W = 0, K = 0, stride = 0;
  bool relu = false;
};

// One batch norm's apply pass as batchnorm_add_pool takes it: its input x, or x16 (16 bits of
// the call's type) where given; gamma, beta; the batch's mean and invstd from its statistics
// (training), or with invstd null the running mean (as mean) and running_var (evaluation).
struct BnSide {
  const float* x = nullptr;
  const uint16_t* x16 = nullptr;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  const float* mean = nullptr;
  const float* invstd = nullptr;
  const float* running_var = nullptr;
  float eps = 0;
};

// A residual block's end in one pass: two batch norms' outputs (a + b, as add_forward adds
// them), the max pool reading their sum and the ReLU after it (BnPool's forward side). The
// statistics come from each one's batchnorm_forward with nothing to write. Backward: each
// batch norm's batchnorm_backward with the same BnPool, since the add passes the pool's
// gradient to both unchanged.
Status batchnorm_add_pool(const BnSide& a, const BnSide& b, int64_t N, int C, const BnPool& pool,
                          cpu::HalfType type, cudaStream_t stream);

// Training: the batch's mean and biased variance, written to mean[C] and invstd[C] for
// backward; running statistics updated when running_mean is not null (running_var with the
// unbiased variance); out = act(gamma * xhat + beta), pre receiving the value before act when
// act is not kNone. With out, pre, half.out and pool all null: the statistics only.
Status batchnorm_forward(float* out, float* pre, float* mean, float* invstd, const float* x,
                         const float* gamma, const float* beta, float* running_mean,
                         float* running_var, int64_t N, int C, float momentum, float eps,
                         cpu::Activation act, void* scratch, cudaStream_t stream,
                         const BnHalf& half = {}, const BnPool* pool = nullptr);
// The running statistics moved by `momentum` towards a batch of N rows whose mean and invstd
// (1 / sqrt(biased variance + eps)) are given: with the unbiased variance, as batchnorm_forward.
Status batchnorm_running_update(float* running_mean, float* running_var, const float* mean,
                                const float* invstd, int64_t N, int C, float momentum, float eps,
                                cudaStream_t stream);
// Evaluation, with the running statistics.
Status batchnorm_eval(float* out, const float* x, const float* gamma, const float* beta,
                      const float* running_mean, const float* running_var, int64_t N, int C,
                      float eps, cpu::Activation act, cudaStream_t stream, const BnHalf& half = {},
                      const BnPool* pool = nullptr);
// d [N, C]: the gradient w.r.t. out on entry, used as scratch. dgamma, dbeta (+)= their
// gradients; dx (+= when accumulate_dx; may be null) the input's. ReLU's mask reads out (and is
// written into d), or, where out is null, is act(gamma * xhat + beta) computed again from x,
// beta and the statistics in each pass (the forward's bits; d is left as it came).
Status batchnorm_backward(float* dx, float* dgamma, float* dbeta, float* d, const float* x,
                          const float* pre, const float* out, const float* mean,
                          const float* invstd, const float* gamma, int64_t N, int C,
                          cpu::Activation act, bool accumulate, bool accumulate_dx, void* scratch,
                          cudaStream_t stream, const BnHalf& half = {}, const float* beta = nullptr,
                          const BnPool* pool = nullptr);

// out[n] (+)= the float that 16-bit in[n] holds (bf16 or fp16 bits): a convolution's 16-bit
// output or gradient brought back to fp32.
Status widen_half(float* out, const uint16_t* in, int64_t n, cpu::HalfType type, bool accumulate,
                  cudaStream_t stream);

// The Batcher's input transform on the device, for a held training set: out[r] = in[r] (rows
// of H x W x C, channels last) cropped and flipped by draws[r] (kDrawInts ints: dy, dx, mirror,
// erased top, left, height, width; null: no move, no erasing), then normalized per channel
// (norm: mean[C], then 1 / std[C]; null: none), then the erased rectangle set to 0: the same
// operations as InputTransform::Apply, in its order, so the same bits.
inline constexpr int kDrawInts = 7;
Status transform_rows(float* out, const float* in, const int32_t* draws, const float* norm,
                      int rows, int H, int W, int C, cudaStream_t stream);

// out[n] = a[n] + b[n].
Status add_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
// dst[n] (+)= src[n].
Status copy_or_add(float* dst, const float* src, int64_t n, bool accumulate, cudaStream_t stream);

// ---- a convolution over few input channels (the model's first layer), computed directly ----
// cuDNN has no tensor-core engine for an NHWC input of one channel in 16 bits: on an H200 it
// ran a 3x3 convolution of 1 into 32 channels at batch 256 through a generic forward kernel
// (31 us) and a weight gradient between two layout transforms (84 us), a tenth of the step.
// These read the input once a tap and the output gradient once. Tensors as cuda/cudnn_conv.h
// takes them (x [B, H, W, C], w [OC, K, K, C], y [B, OH, OW, OC]): x is the model's input in
// fp32, rounded on load as cast_to_half would where half; w, y and dy are fp32, or 16 bits of
// `type` where half; dw is fp32. Products and sums in fp32, as cuDNN's engines (the weight
// gradient's sums over pixel ranges are added in double, in a fixed order: the same bits every
// run). So no 16-bit copy of the input is made, nor a widening pass of the weight gradient.

// Whether the kernels take shape s: K K C <= 32 taps an output, OC (K K C rounded up to odd)
// <= 8192 weights, and every index of x and y within an int.
bool direct_conv_supported(const cpu::ConvShape& s);
// Bytes of scratch direct_conv_backward_filter needs for s (its batch the largest it is given).
int64_t direct_conv_scratch_bytes(const cpu::ConvShape& s);
Status direct_conv_forward(void* y, const float* x, const void* w, const cpu::ConvShape& s,
                           bool half, cpu::HalfType type, cudaStream_t stream);
// dw (+)= the gradient w.r.t. w, given dy; where half, rounded through the 16 bits first (as a
// 16-bit gradient widened into dw).
Status direct_conv_backward_filter(float* dw, const float* x, const void* dy,
                                   const cpu::ConvShape& s, bool half, cpu::HalfType type,
                                   bool accumulate, void* scratch, cudaStream_t stream);

}  // namespace sweep::trainer::cuda
