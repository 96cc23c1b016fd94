// The CPU backend's kernels, llm.c style: plain functions on row-major float arrays, outputs
// first, shapes last. A CUDA backend provides the same names in sweep::trainer::cuda over
// device pointers, so model code reads the same on both. Every function is thread-safe for
// disjoint outputs and allocates nothing; gradients are overwritten unless `accumulate`.
#pragma once

#include <cstdint>

namespace sweep::trainer::cpu {

enum class Activation { kNone, kRelu, kTanh, kGelu };

// out[B, OC] = inp[B, C] · weight[OC, C]ᵀ  (weight in PyTorch's [out, in] layout; no bias: the
// bias is added, fused with the activation, by bias_act_forward).
void matmul_forward(float* out, const float* inp, const float* weight, int B, int C, int OC);

// Given dout[B, OC]: dweight[OC, C] (+)= doutᵀ · inp, and dinp[B, C] = dout · weight unless
// dinp is null (the first layer's input needs no gradient).
// accumulate_dinp: dinp += instead (an input that feeds several layers).
void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC, bool accumulate = false,
                     bool accumulate_dinp = false);

// pre[B, C] += bias (in place: backward needs it for gelu), out = act(pre). For kNone out may
// be pre itself (the logits layer keeps one buffer); otherwise they must not overlap.
void bias_act_forward(float* out, float* pre, const float* bias, int B, int C, Activation act);

// On entry d[B, C] is the gradient w.r.t. out; on return, w.r.t. pre. dbias[C] (+)= the sum of
// that over the batch. pre and out are what bias_act_forward left.
void bias_act_backward(float* d, float* dbias, const float* pre, const float* out, int B, int C,
                       Activation act, bool accumulate = false);

// Per-sample cross-entropy of softmax(logits) against labels into losses[B]; when dlogits is
// not null, also dlogits = (softmax - target) * dloss_scale (1/B for a mean over the batch; a
// data-parallel caller passes 1/global batch). The target is the one-hot label, or with
// label_smoothing = e, (1 - e) onehot + e / V (PyTorch's rule; the loss is then against it).
void softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                   const int32_t* labels, int B, int V, float dloss_scale,
                                   float label_smoothing = 0.0f);

// SGD with momentum, PyTorch's convention (no dampening):
//   g = grad + weight_decay * param;  velocity = momentum * velocity + g;
//   param -= lr * (nesterov ? g + momentum * velocity : velocity).
// With momentum 0 the velocity is still written (it is then just g).
void sgd_update(float* params, float* velocity, const float* grads, int64_t n, float lr,
                float momentum, float weight_decay, bool nesterov);

// AdamW, PyTorch's convention (decoupled weight decay, bias correction by the step count):
//   param *= 1 - lr * weight_decay;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
// t is the 1-based optimizer step.
void adamw_update(float* params, float* m, float* v, const float* grads, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t);

// The 16-bit formats the GEMMs read in precision bf16 / fp16 (the CUDA backend's too).
enum class HalfType { kBf16, kFp16 };

// out[n] = in rounded to the nearest value of `type`, ties to even, kept as a float: what a GEMM
// with 16-bit inputs multiplies, so fp32 GEMMs on rounded inputs give the CPU the GPU's bf16 and
// fp16 numbers up to summation order. fp16: subnormals kept, beyond its range (|x| >= 65520)
// inf; NaN stays NaN. out may be in.
void round_to_half(float* out, const float* in, int64_t n, HalfType type);

// Inverted dropout of x[B, C] into out: each element is kept with probability 1 - p and then
// scaled by 1 / (1 - p); mask[B, C] receives that factor (0 or 1 / (1 - p)) for the backward
// pass. Which elements drop is a pure function of (key, first_row + b, c): a row keeps its mask
// whichever replica or micro-batch it lands in, so data-parallel runs match one replica.
void dropout_forward(float* out, float* mask, const float* x, int B, int C, float p, uint64_t key,
                     int64_t first_row);

// d[n] *= mask[n]: the gradient through dropout_forward.
void dropout_backward(float* d, const float* mask, int64_t n);

// out[n] = a[0][i] + a[1][i] + ... + a[count - 1][i], summed in that order (a fixed order makes
// the all-reduce deterministic whichever thread does it).
void sum_buffers(float* out, const float* const* a, int count, int64_t n);

// How many rows' argmax equals the label (ties go to the lowest index).
int64_t accuracy(const float* logits, const int32_t* labels, int B, int V);

// Number of threads the GEMMs may use (OpenBLAS: process-wide). Returns the previous value, or
// 0 when the BLAS in use cannot be told.
int set_blas_threads(int threads);

}  // namespace sweep::trainer::cpu
