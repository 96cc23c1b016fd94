// What the CUDA replica group drives on each GPU: one replica of the model, either an MLP
// (cuda/mlp.h: every precision, its own fused kernels) or any ModelSpec (cuda/net.h: CNNs).
// Parameters and gradients are flat device buffers in the ModelSpec's layout, so the group's
// optimizer, all-reduce buckets and checkpoints are the same for both. kInputSlots device
// input buffers are filled by the caller (on its copy stream) while the replica computes on
// another. Not thread-safe: one thread, with the replica's device current, uses it.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "cpu/ops.h"
#include "step_math.h"

namespace sweep::trainer::cuda {

// Told, during Backward, that layer l's gradients (l counts the layers with parameters) are
// queued in full on the replica's stream (what runs after that point on the stream sees them
// final): a bucket's all-reduce may start.
class LayerHook {
 public:
  virtual ~LayerHook() = default;
  virtual Status LayerDone(int layer) = 0;
};

class ReplicaModel {
 public:
  static constexpr int kInputSlots = 2;  // one being computed on, one being copied into

  virtual ~ReplicaModel() = default;
  virtual float* params() = 0;
  virtual float* grads() = 0;
  // Batch norm's running statistics (the model's num_buffers floats), or null without any.
  virtual float* stats() { return nullptr; }
  // Input slot s (< kInputSlots): x [max_batch, inputs], y [max_batch], for the caller to fill.
  virtual float* x(int slot) = 0;
  virtual int32_t* y(int slot) = 0;
  // [1] on the device: the loss ForwardLoss sums.
  virtual double* summed_loss() = 0;
  // The weights changed (a load): a 16-bit copy of them is remade before the next forward.
  virtual void ParamsChanged() = 0;
  // bf16 / fp16: the 16-bit copy of the weights, which the optimizer kernels keep current;
  // null in fp32.
  virtual uint16_t* params16() = 0;
  virtual cpu::HalfType half_type() const = 0;
  // What runs the layers (ReplicaGroup::Describe).
  virtual std::string Describe() const { return ""; }

  // Training forward of the B rows in input slot `slot` and its loss, summed into summed_loss()
  // (reset first unless accumulate_loss); keeps what Backward needs. The logits' gradient is
  // scaled by dloss_scale and, when loss_scale (a device float) is not null, by *loss_scale.
  virtual Status ForwardLoss(int slot, int B, float dloss_scale, const float* loss_scale,
                             uint64_t dropout_key, int64_t first_row, bool accumulate_loss) = 0;
  // Backward of the last ForwardLoss: grads() = the gradient, or += it when `accumulate`.
  // Tells `hook` (when not null) as each layer with parameters, last to first, is queued.
  virtual Status Backward(int slot, int B, bool accumulate, LayerHook* hook) = 0;
  // Evaluation (no dropout; batch norm's running statistics) of the B >= 1 rows in input slot 0, on
  // the stream: adds their summed loss to *loss_total and their correct argmaxes to *correct,
  // both on the device. Queues work only, so a whole set costs one wait; the caller fills slot 0
  // while no training work is queued.
  virtual Status EvaluateSlot(int B, double* loss_total, unsigned long long* correct) = 0;

  // The step's scalars on the device (null: none). When set, training dropout takes its key
  // from there (ForwardLoss's dropout_key is then not read), so a captured step's kernels need
  // no new arguments from step to step.
  void SetStepScalars(const StepScalars* step) { step_ = step; }
  // Changes whenever device memory the model's queued work points at is replaced (a cuDNN
  // workspace that grew): a CUDA graph captured before then points at freed memory.
  virtual uint64_t memory_epoch() const { return 0; }

 protected:
  const StepScalars* step_ = nullptr;
};

}  // namespace sweep::trainer::cuda
