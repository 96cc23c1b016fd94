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
void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC, bool accumulate = false);

// pre[B, C] += bias (in place: backward needs it for gelu), out = act(pre). For kNone out may
// be pre itself (the logits layer keeps one buffer); otherwise they must not overlap.
void bias_act_forward(float* out, float* pre, const float* bias, int B, int C, Activation act);

// On entry d[B, C] is the gradient w.r.t. out; on return, w.r.t. pre. dbias[C] (+)= the sum of
// that over the batch. pre and out are what bias_act_forward left.
void bias_act_backward(float* d, float* dbias, const float* pre, const float* out, int B, int C,
                       Activation act, bool accumulate = false);

// Per-sample cross-entropy of softmax(logits) against labels into losses[B]; when dlogits is
// not null, also dlogits = (softmax - onehot) * dloss_scale (1/B for a mean over the batch; a
// data-parallel caller passes 1/global batch).
void softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                   const int32_t* labels, int B, int V, float dloss_scale);

// SGD with momentum, PyTorch's convention (no dampening, no Nesterov):
//   g = grad + weight_decay * param; velocity = momentum * velocity + g; param -= lr * velocity.
void sgd_momentum_update(float* params, float* velocity, const float* grads, int64_t n, float lr,
                         float momentum, float weight_decay);

// How many rows' argmax equals the label (ties go to the lowest index).
int64_t accuracy(const float* logits, const int32_t* labels, int B, int V);

// Number of threads the GEMMs may use (OpenBLAS: process-wide). Returns the previous value, or
// 0 when the BLAS in use cannot be told.
int set_blas_threads(int threads);

}  // namespace sweep::trainer::cpu
