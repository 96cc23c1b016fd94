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
#include "step_math.h"

namespace sweep::trainer::cuda {

using Activation = cpu::Activation;
using LossScaleState = trainer::LossScaleState;

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

// ---- 16-bit GEMM inputs (precision bf16 / fp16) ----

// The 16-bit formats a GEMM may read (cpu::round_to_half gives the CPU the same values). Such
// arrays are passed as uint16_t: the values' bits.
using HalfType = cpu::HalfType;

// out[n] = in rounded to the nearest 16-bit value (ties to even; beyond fp16's range: inf).
Status cast_to_half(uint16_t* out, const float* in, int64_t n, HalfType type, cudaStream_t stream);

// matmul_forward and matmul_backward with 16-bit inputs (cublasGemmEx: products of the 16-bit
// values, fp32 accumulation, fp32 outputs; tensor cores).
Status matmul_forward_half(cublasHandle_t handle, float* out, const uint16_t* inp,
                           const uint16_t* weight, int B, int C, int OC, HalfType type);
Status matmul_backward_half(cublasHandle_t handle, float* dinp, float* dweight,
                            const uint16_t* dout, const uint16_t* inp, const uint16_t* weight,
                            int B, int C, int OC, HalfType type, bool accumulate = false);

// Kernels whose output a 16-bit GEMM reads next take an optional out16 (bf16 / fp16): they also
// write cast_to_half of what they write there, in the same pass over memory.

// pre[B, C] += bias, out = act(pre); for kNone out may be pre. out may be null where nothing
// reads it (the 16-bit path without dropout: the GEMMs read out16, bias_act_backward pre).
// keep_pre = false (with out or out16, and out not pre) leaves pre as it came, without the bias:
// 4 bytes an element not written; bias_act_backward then takes the bias as pre_bias.
Status bias_act_forward(float* out, float* pre, const float* bias, int B, int C, Activation act,
                        cudaStream_t stream, uint16_t* out16 = nullptr,
                        HalfType type = HalfType::kBf16, bool keep_pre = true);

// d: gradient w.r.t. out on entry, w.r.t. pre on return; dbias[C] (+)= its column sums; d16 (may
// be null): the returned d cast to 16 bits. out (may be null) spares recomputing act(pre): the
// result is the same bits either way. keep_d = false (with d16) leaves d as it came: what
// the 16-bit GEMMs read is d16, and the fp32 result would cost 4 bytes an element unread. One
// pass over d for all of it. scratch (may be null; else BiasGradScratchFloats(B, C) floats on
// the device, unused by anything else while this runs on `stream`) lets the rows be split over
// several blocks, so a narrow layer at a large batch fills the GPU; the column sums then add
// the ranges' sums in order. A given (B, C), with scratch or without, sums in one fixed order.
// pre_bias (may be null): pre was left without its bias (bias_act_forward's keep_pre = false);
// the bias is added back wherever pre is read, the same sums as the forward's, bit for bit.
Status bias_act_backward(float* d, float* dbias, const float* pre, const float* out, int B, int C,
                         Activation act, cudaStream_t stream, bool accumulate = false,
                         uint16_t* d16 = nullptr, HalfType type = HalfType::kBf16,
                         bool keep_d = true, float* scratch = nullptr,
                         const float* pre_bias = nullptr);
// The scratch bias_act_backward uses for B rows of C columns (0: none), non-decreasing in B.
int64_t BiasGradScratchFloats(int B, int C);

// losses[B] = cross-entropy of softmax(logits); dlogits (unless null) = (softmax - target) *
// dloss_scale, the target onehot or, with label_smoothing e, (1 - e) onehot + e / V. Labels
// must lie in [0, V).
Status softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                     const int32_t* labels, int B, int V, float dloss_scale,
                                     cudaStream_t stream, float label_smoothing = 0.0f);

// The optimizers, as cpu/ops.h defines them. The parameters, gradients and optimizer state are
// each one flat buffer holding every tensor, so one launch updates all of them (the
// multi-tensor form without a pointer list). skip (a device int, may be null): when it holds a
// non-zero value the kernel changes nothing (fp16's overflowed step), decided on the device.
// AdamW's t is the run's 1-based step; with loss_scale (device, fp16) the kernel takes
// t - loss_scale->skipped, the steps actually applied, as PyTorch's step count does. params16
// (bf16 / fp16, may be null): the updated weights cast to 16 bits, so the next forward need not
// cast them again (a skipped step leaves both as they were).
// step (device, may be null): when given, lr and t are read from it on the device instead.
Status sgd_update(float* params, float* velocity, const float* grads, int64_t n, float lr,
                  float momentum, float weight_decay, bool nesterov, cudaStream_t stream,
                  const int* skip = nullptr, uint16_t* params16 = nullptr,
                  HalfType type = HalfType::kBf16, const StepScalars* step = nullptr);
Status adamw_update(float* params, float* m, float* v, const float* grads, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int64_t t,
                    cudaStream_t stream, const int* skip = nullptr,
                    const LossScaleState* loss_scale = nullptr, uint16_t* params16 = nullptr,
                    HalfType type = HalfType::kBf16, const StepScalars* step = nullptr);

// ---- dynamic loss scaling (fp16); every scalar lives on the device, so no step waits ----

// x[n] *= *scale.
Status scale_by(float* x, int64_t n, const float* scale, cudaStream_t stream);
// grads[n] *= 1 / *scale, and *found_inf = 1 when any result is inf or nan (else untouched).
Status unscale_check(float* grads, int64_t n, const float* scale, int* found_inf,
                     cudaStream_t stream);
// After a step: AdvanceLossScale (step_math.h) on *state with *found_inf, then *found_inf = 0.
Status update_loss_scale(LossScaleState* state, int* found_inf, int window, cudaStream_t stream);

// Inverted dropout with cpu::dropout_forward's counter-based hash: the same (key, row, column)
// drops the same element on both backends, bit for bit. step (device, may be null): when given,
// the key is MixSeed(step->dropout_key, salt), made on the device.
Status dropout_forward(float* out, float* mask, const float* x, int B, int C, float p, uint64_t key,
                       int64_t first_row, cudaStream_t stream, uint16_t* out16 = nullptr,
                       HalfType type = HalfType::kBf16, const StepScalars* step = nullptr,
                       uint64_t salt = 0);
Status dropout_backward(float* d, const float* mask, int64_t n, cudaStream_t stream);

// ---- input ----

// Dataset::Gather on the device, from a training set held in GPU memory: x[r, :] = row idx[r] of
// the features (u8 / 255, as the CPU divides, or f32 as stored; exactly one of u8 and f32 is not
// null) and y[r] = labels[idx[r]], for r < rows. Every idx[r] must be a row of the set. A null
// idx takes rows 0..rows-1 in order (a streamed batch of pixels, scaled); null labels leave y.
Status gather_rows(float* x, int32_t* y, const int32_t* idx, int rows, const uint8_t* u8,
                   const float* f32, const int32_t* labels, int64_t dim, cudaStream_t stream);

// ---- metric reductions (the CPU sums these in its callers' loops) ----

// *out (+)= losses[0] + ... + losses[B - 1], in double, in a fixed order (one block): the same
// inputs give the same bits every time.
Status loss_sum(double* out, const float* losses, int B, cudaStream_t stream,
                bool accumulate = false);

// *correct += the number of rows whose argmax (lowest index on ties) equals the label.
Status accuracy(unsigned long long* correct, const float* logits, const int32_t* labels, int B,
                int V, cudaStream_t stream);

}  // namespace sweep::trainer::cuda
