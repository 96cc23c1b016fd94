// One model replica on the CPU: parameters and gradients in flat buffers laid out by MlpShape,
// every activation, mask and gradient buffer allocated once for max_batch rows (a step allocates
// nothing). Optimizer state lives in the group (cpu_backend.cc), one copy for all replicas. In
// precision bf16 / fp16 the GEMMs read copies of the weights, inputs, activations and gradients
// rounded to 16 bits (cuda/mlp.h's numbers: fp32 GEMMs over rounded inputs accumulate as the
// GPU's 16-bit tensor-core GEMMs do); everything else stays fp32.
// Not thread-safe: one replica per thread; other threads may write params() only where a
// LayerSink call has said this replica is done with them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "model.h"

namespace sweep::trainer::cpu {

// A 64-byte aligned float array (what the SIMD loops and OpenBLAS like best).
class FloatBuffer {
 public:
  FloatBuffer() = default;
  explicit FloatBuffer(int64_t n);
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  int64_t size() const { return size_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  int64_t size_ = 0;
};

// Told, during Backward, that layer l's gradients (its range [layer_begin, layer_end) of
// grads()) are final and that the replica will not read layer l's parameters again this step:
// an all-reduce may start on them, and the optimizer may overwrite those parameters.
class LayerSink {
 public:
  virtual ~LayerSink() = default;
  virtual void LayerDone(int layer) = 0;
};

class Mlp {
 public:
  // dropout: drop probability after every hidden activation while training (0: none).
  Mlp(MlpShape shape, Activation act, int max_batch, float dropout = 0.0f,
      Precision precision = Precision::kFp32);

  const MlpShape& shape() const { return shape_; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  int64_t num_params() const { return shape_.num_params; }
  // The weights changed (an optimizer step, a load): bf16 / fp16 round them again before the
  // next forward. Call it on the replica's thread, before its next forward.
  void ParamsChanged() { half_params_fresh_ = false; }

  // Logits [B, classes] of x [B, inputs], no dropout; valid until the next call. B <= max_batch.
  const float* Forward(const float* x, int B);
  // Training forward (dropout on, masks keyed by dropout_key and the global row first_row + b)
  // and the loss; keeps what Backward needs. Returns the sum of the B per-sample losses (NaN or
  // inf when training diverged). The logits' gradient is scaled by dloss_scale, then by
  // loss_scale (fp16's dynamic loss scale; 1: none).
  double ForwardLoss(const float* x, const int32_t* y, int B, float dloss_scale,
                     uint64_t dropout_key = 0, int64_t first_row = 0, float loss_scale = 1.0f);
  // Backward of the last ForwardLoss (x and B as given to it): grads() = the gradient, or +=
  // it when `accumulate`. Tells `sink` (when not null) as each layer, last to first, is done.
  void Backward(const float* x, int B, bool accumulate, LayerSink* sink = nullptr);
  // ForwardLoss then Backward, without dropout masks' key or a sink.
  double ForwardBackward(const float* x, const int32_t* y, int B, float dloss_scale);
  // Adds the summed loss and the number of correct argmaxes of a batch to *loss_sum, *correct.
  void Evaluate(const float* x, const int32_t* y, int B, double* loss_sum, int64_t* correct);

 private:
  bool half() const { return precision_ != Precision::kFp32; }
  // Forward of x[B] with dropout when `train`; returns the logits (in pre_.back()).
  const float* RunForward(const float* x, int B, bool train, uint64_t dropout_key,
                          int64_t first_row);

  MlpShape shape_;
  Activation act_;
  [[maybe_unused]] int max_batch_;  // checked by asserts only
  float dropout_;
  Precision precision_;
  HalfType half_type_;
  FloatBuffer params_, grads_;
  // pre_[l]: layer l's biased pre-activation; out_[l]: its activation (the last layer's logits
  // live in pre_ alone); with dropout, drop_[l] = out_[l] * mask_[l] feeds layer l + 1.
  // d_[0], d_[1]: ping-pong gradients w.r.t. layer outputs.
  std::vector<FloatBuffer> pre_, out_, drop_, mask_;
  FloatBuffer d_[2];
  FloatBuffer losses_;
  bool masked_ = false;  // the last ForwardLoss applied dropout
  // bf16 / fp16 only: what the GEMMs read. params16_ mirrors params_; x16_ the input; act16_[l]
  // what hidden layer l feeds layer l + 1; d16_ the gradient a backward GEMM reads.
  FloatBuffer params16_, x16_, d16_;
  std::vector<FloatBuffer> act16_;
  bool half_params_fresh_ = false;
};

}  // namespace sweep::trainer::cpu
