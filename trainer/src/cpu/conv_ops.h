// The CPU backend's kernels for convolutional networks, llm.c style as in cpu/ops.h: plain
// functions on NHWC float arrays (a sample's pixels one after another, a pixel's channels
// contiguous), outputs first, shapes last. A CUDA backend provides the same names. Each function
// is thread-safe for disjoint outputs and allocates nothing but what it is handed as scratch;
// gradients are overwritten unless `accumulate`.
#pragma once

#include <cstdint>

#include "cpu/ops.h"

namespace sweep::trainer::cpu {

// A convolution of a batch: inp [B, H, W, C] -> out [B, OH, OW, OC], weight [OC, K, K, C]
// (K = kernel), zero padding `pad` on each side, `stride`.
struct ConvShape {
  int B = 1, H = 1, W = 1, C = 1, OC = 1, K = 1, stride = 1, pad = 0;
  int OH() const { return (H + 2 * pad - K) / stride + 1; }
  int OW() const { return (W + 2 * pad - K) / stride + 1; }
  int64_t patch() const { return int64_t{K} * K * C; }  // one output's inputs
  // A 1x1 convolution with stride 1 and no padding reads its input as it is (no im2col).
  bool pointwise() const { return K == 1 && stride == 1 && pad == 0; }
};

// Floats of scratch that conv2d_forward and conv2d_backward need for this shape (with either
// implementation below).
int64_t conv2d_scratch_floats(const ConvShape& s);

// How convolutions run. kAuto: direct AVX2/FMA kernels (output channels in vector lanes) where the
// CPU has them and the channel counts are multiples of 16, im2col + SGEMM elsewhere. kGemm:
// im2col + SGEMM always (benchmarks and tests compare the two). Process-wide.
enum class ConvImpl { kAuto, kGemm };
void set_conv_impl(ConvImpl impl);
ConvImpl conv_impl();
// Whether the direct kernels would run for this shape: forward, backward-data, backward-weights.
bool conv2d_direct_forward(const ConvShape& s);
bool conv2d_direct_backward_data(const ConvShape& s);
bool conv2d_direct_backward_weights(const ConvShape& s);

// out = conv(inp, weight) (+ bias[OC] when not null). scratch: conv2d_scratch_floats floats.
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const ConvShape& s, float* scratch);

// Given dout [B, OH, OW, OC]: dweight (+)= its correlation with inp; dbias[OC] (+)= its sum
// when not null; dinp (+)= the gradient w.r.t. inp when not null (accumulate_dinp: added to
// what it holds, for an input that feeds several layers).
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const ConvShape& s, float* scratch, bool accumulate,
                     bool accumulate_dinp);

// Batch normalization of x [N, C] (N = samples x pixels) per channel. Training: the batch's
// mean and biased variance, written to mean[C] and invstd[C] (1 / sqrt(var + eps)) for
// backward, and when running_mean is not null the running statistics updated as PyTorch does
// (running_var with the unbiased variance). Evaluation (mean, invstd null): running statistics.
// out = gamma * xhat + beta, then `act` (pre, when act is not kNone, receives the value before
// it: backward reads it).
void batchnorm_forward(float* out, float* pre, float* mean, float* invstd, const float* x,
                       const float* gamma, const float* beta, float* running_mean,
                       float* running_var, int64_t N, int C, float momentum, float eps,
                       Activation act);
void batchnorm_eval(float* out, const float* x, const float* gamma, const float* beta,
                    const float* running_mean, const float* running_var, int64_t N, int C,
                    float eps, Activation act);

// On entry d [N, C] is the gradient w.r.t. out; it is used as scratch. dgamma, dbeta (+)= their
// gradients; dx (+= when accumulate_dx) the input's. pre and out are what forward left.
void batchnorm_backward(float* dx, float* dgamma, float* dbeta, float* d, const float* x,
                        const float* pre, const float* out, const float* mean, const float* invstd,
                        const float* gamma, int64_t N, int C, Activation act, bool accumulate,
                        bool accumulate_dx);

// K x K windows at `stride` over inp [B, H, W, C] into out [B, OH, OW, C]; max keeps the
// index (within the sample's H W C) of each maximum for backward.
void maxpool_forward(float* out, int32_t* argmax, const float* inp, int B, int H, int W, int C,
                     int K, int stride);
void maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, int B, int H, int W,
                      int C, int K, int stride, bool accumulate);
void avgpool_forward(float* out, const float* inp, int B, int H, int W, int C, int K, int stride);
void avgpool_backward(float* dinp, const float* dout, int B, int H, int W, int C, int K, int stride,
                      bool accumulate);

// Mean over each sample's H W pixels: inp [B, HW, C] -> out [B, C].
void global_avgpool_forward(float* out, const float* inp, int B, int HW, int C);
void global_avgpool_backward(float* dinp, const float* dout, int B, int HW, int C, bool accumulate);

// out[n] = act(x[n]) (out may not be x for gelu's backward, which reads x).
void act_forward(float* out, const float* x, int64_t n, Activation act);
// d[n] = d[n] * act'(x[n]) (relu and tanh read out, gelu reads x); with accumulate the result
// is added to dx instead (dx may be d only when not accumulating).
void act_backward(float* dx, const float* d, const float* x, const float* out, int64_t n,
                  Activation act, bool accumulate);

// out[n] = a[n] + b[n].
void add_forward(float* out, const float* a, const float* b, int64_t n);
// dst[n] (+)= src[n].
void copy_or_add(float* dst, const float* src, int64_t n, bool accumulate);

}  // namespace sweep::trainer::cpu
