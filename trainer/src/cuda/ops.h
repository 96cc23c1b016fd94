// The CUDA backend's kernels under cpu/ops.h's names and argument order, over device pointers:
// outputs first, shapes last, then the stream (GEMMs: the cuBLAS handle, whose stream is used).
// Each returns the launch's Status; the work itself is asynchronous on the stream, so a fault
// inside a kernel surfaces at the next checked call. Safe from several threads for disjoint
// outputs on their own streams and handles. Gradients are overwritten unless `accumulate`.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cpu/ops.h"

namespace sweep::trainer::cuda {

using Activation = cpu::Activation;

// A cuBLAS handle for `stream`, in TF32 tensor-op mode when `tf32` (fp32 storage, 10-bit
// mantissa products, fp32 accumulation: about 1e-3 relative error per GEMM) and exact fp32
// otherwise. The caller destroys it with cublasDestroy.
Status CreateBlasHandle(cudaStream_t stream, bool tf32, cublasHandle_t* handle);

// out[B, OC] = inp[B, C] · weight[OC, C]ᵀ.
Status matmul_forward(cublasHandle_t handle, float* out, const float* inp, const float* weight,
                      int B, int C, int OC);

// dweight[OC, C] (+)= doutᵀ · inp; dinp[B, C] = dout · weight unless dinp is null.
Status matmul_backward(cublasHandle_t handle, float* dinp, float* dweight, const float* dout,
                       const float* inp, const float* weight, int B, int C, int OC,
                       bool accumulate = false);

// pre[B, C] += bias, out = act(pre); for kNone out may be pre.
Status bias_act_forward(float* out, float* pre, const float* bias, int B, int C, Activation act,
                        cudaStream_t stream);

// d: gradient w.r.t. out on entry, w.r.t. pre on return; dbias[C] (+)= its column sums.
Status bias_act_backward(float* d, float* dbias, const float* pre, const float* out, int B, int C,
                         Activation act, cudaStream_t stream, bool accumulate = false);

// losses[B] = cross-entropy of softmax(logits); dlogits (unless null) = (softmax - onehot) *
// dloss_scale. Labels must lie in [0, V).
Status softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                     const int32_t* labels, int B, int V, float dloss_scale,
                                     cudaStream_t stream);

// The optimizers, as cpu/ops.h defines them. The parameters, gradients and optimizer state are
// each one flat buffer holding every tensor, so one launch updates all of them (the
// multi-tensor form without a pointer list).
Status sgd_update(float* params, float* velocity, const float* grads, int64_t n, float lr,
                  float momentum, float weight_decay, bool nesterov, cudaStream_t stream);
Status adamw_update(float* params, float* m, float* v, const float* grads, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int64_t t,
                    cudaStream_t stream);

// Inverted dropout with cpu::dropout_forward's counter-based hash: the same (key, row, column)
// drops the same element on both backends, bit for bit.
Status dropout_forward(float* out, float* mask, const float* x, int B, int C, float p, uint64_t key,
                       int64_t first_row, cudaStream_t stream);
Status dropout_backward(float* d, const float* mask, int64_t n, cudaStream_t stream);

// ---- metric reductions (the CPU sums these in its callers' loops) ----

// *out (+)= losses[0] + ... + losses[B - 1], in double, in a fixed order (one block): the same
// inputs give the same bits every time.
Status loss_sum(double* out, const float* losses, int B, cudaStream_t stream,
                bool accumulate = false);

// *correct += the number of rows whose argmax (lowest index on ties) equals the label.
Status accuracy(unsigned long long* correct, const float* logits, const int32_t* labels, int B,
                int V, cudaStream_t stream);

}  // namespace sweep::trainer::cuda
