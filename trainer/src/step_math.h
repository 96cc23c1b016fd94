// The scalar rules of an optimizer step that both backends run: fp16's dynamic loss scale
// (PyTorch GradScaler's rule) and AdamW's bias-corrected step sizes. One definition, compiled for
// the host by g++ and for the device by nvcc (the CUDA backend keeps the loss scale on the GPU
// and updates it there, so no step waits for the host). Plain data and inline functions.
#pragma once

#include <math.h>  // ::pow and ::sqrt: the names both compilers provide on host and device

#include <cstdint>

#include "host_device.h"

namespace sweep::trainer {

// fp16's loss scale and its bookkeeping. Trivially copyable: the CUDA backend holds it as one
// struct in device memory, and checkpoints carry it, so a resumed trial scales as before.
struct LossScaleState {
  float scale = 65536.0f;
  int32_t good_steps = 0;  // finite steps in a row since the scale last changed
  uint64_t skipped = 0;    // steps skipped for inf / nan gradients since the run began
};

inline constexpr float kMaxLossScale = 16777216.0f;  // 2^24: a scaled fp32 loss stays finite

// After a step: a step whose unscaled gradients were not all finite was skipped; it halves the
// scale and is counted. Otherwise, `window` good steps in a row double the scale (at most
// kMaxLossScale).
SWEEP_HOST_DEVICE inline void AdvanceLossScale(LossScaleState* s, bool found_inf, int window) {
  if (found_inf) {
    s->scale *= 0.5f;
    s->good_steps = 0;
    s->skipped += 1;
  } else if (++s->good_steps >= window) {
    const float doubled = s->scale * 2.0f;
    s->scale = doubled < kMaxLossScale ? doubled : kMaxLossScale;
    s->good_steps = 0;
  }
}

// AdamW's per-step scalars (cpu/ops.h gives the update they feed). `t` is the 1-based count of
// steps the optimizer has applied: skipped fp16 steps do not count, as in PyTorch, where a
// skipped step never calls optimizer.step(). Bias corrections in double: beta^t for t in the
// millions is where float would lose them.
struct AdamwScalars {
  float decay;         // 1 - lr * weight_decay
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
};

SWEEP_HOST_DEVICE inline AdamwScalars MakeAdamwScalars(float lr, float beta1, float beta2,
                                                       float weight_decay, int64_t t) {
  const double bc1 = 1.0 - ::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - ::pow(static_cast<double>(beta2), static_cast<double>(t));
  return AdamwScalars{1.0f - lr * weight_decay, static_cast<float>(lr / bc1),
                      static_cast<float>(1.0 / ::sqrt(bc2))};
}

// What changes from one optimizer step to the next. The CUDA backend holds it on the device and
// its kernels read it there, so a step captured as a CUDA graph runs with each step's values.
struct StepScalars {
  float lr = 0;
  int64_t t = 1;             // AdamW's 1-based step
  uint64_t dropout_key = 0;  // mixed with each dropout layer's salt (MixSeed)
  // AdamW's, made on the host for t as the CPU makes them (fp16 remakes them on the device for
  // the steps actually applied).
  AdamwScalars adamw{};
};

}  // namespace sweep::trainer
