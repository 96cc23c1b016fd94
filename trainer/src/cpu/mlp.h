// One model replica on the CPU: parameters, gradients and momentum in flat buffers laid out by
// MlpShape, and every activation and gradient buffer allocated once for max_batch rows, so a
// training step allocates nothing. Owned by the trainer. Not thread-safe: one replica per
// thread (a data-parallel trainer holds R of them and all-reduces grads()).
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

class Mlp {
 public:
  Mlp(MlpShape shape, Activation act, int max_batch);

  const MlpShape& shape() const { return shape_; }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  float* velocity() { return velocity_.data(); }
  int64_t num_params() const { return shape_.num_params; }

  // Logits [B, classes] of x [B, inputs]; valid until the next call. B <= max_batch.
  const float* Forward(const float* x, int B);
  // Forward, loss and backward: grads() = d(sum of losses * dloss_scale)/d params. Returns the
  // sum of the B per-sample losses (NaN or inf when training diverged).
  double ForwardBackward(const float* x, const int32_t* y, int B, float dloss_scale);
  // Adds the summed loss and the number of correct argmaxes of a batch to *loss_sum, *correct.
  void Evaluate(const float* x, const int32_t* y, int B, double* loss_sum, int64_t* correct);
  void SgdStep(float lr, float momentum, float weight_decay);

 private:
  MlpShape shape_;
  Activation act_;
  int max_batch_;
  FloatBuffer params_, grads_, velocity_;
  // pre_[l]: layer l's biased pre-activation; out_[l]: its activation (the last layer's logits
  // live in pre_ alone). d_[0], d_[1]: ping-pong gradients w.r.t. layer outputs.
  std::vector<FloatBuffer> pre_, out_;
  FloatBuffer d_[2];
  FloatBuffer losses_;
};

}  // namespace sweep::trainer::cpu
