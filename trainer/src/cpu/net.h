// One model replica on the CPU, built from a ModelSpec: parameters and gradients in flat buffers
// laid out by it, batch norm's running statistics in a third, and every activation, mask and
// gradient buffer allocated once for max_batch rows (a step allocates nothing). Optimizer state
// lives in the group (cpu_backend.cc), one copy for all replicas. An activation that follows a
// linear, convolution or batch norm layer (its only reader) runs in that layer's pass. In
// precision bf16 / fp16 the GEMMs (linear and convolution layers) read copies of the weights,
// inputs and gradients rounded to 16 bits (the GPU's numbers: fp32 GEMMs over rounded inputs
// accumulate as 16-bit tensor-core GEMMs do); everything else stays fp32.
// Not thread-safe: one replica per thread; other threads may write params() only where a
// LayerSink call has said this replica is done with them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "cpu/conv_ops.h"
#include "model.h"

namespace sweep::trainer::cpu {

// A 64-byte aligned float array (what the SIMD loops and OpenBLAS like best), zeroed.
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

// Told, during Backward, that the k-th layer with parameters (ModelSpec::param_layers) has its
// gradients final (its range [begin, end) of grads()) and that the replica will not read its
// parameters again this step: an all-reduce may start on them, and the optimizer may overwrite
// them. Layers are told last to first.
class LayerSink {
 public:
  virtual ~LayerSink() = default;
  virtual void LayerDone(int param_layer) = 0;
};

class Net {
 public:
  // label_smoothing: of the training loss (evaluation reports plain cross-entropy).
  Net(ModelSpec model, int max_batch, Precision precision = Precision::kFp32,
      float label_smoothing = 0.0f);

  const ModelSpec& model() const { return model_; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  // Batch norm's running statistics (ModelSpec::num_buffers floats).
  float* stats() { return stats_.data(); }
  const float* stats() const { return stats_.data(); }
  int64_t num_params() const { return model_.num_params; }
  // The weights changed (an optimizer step, a load): bf16 / fp16 round them again before the
  // next forward. Call it on the replica's thread, before its next forward.
  void ParamsChanged() { half_params_fresh_ = false; }

  // Logits [B, classes] of x [B, inputs] in evaluation mode (no dropout; batch norm with the
  // running statistics `stats`, this replica's when null); valid until the next call.
  const float* Forward(const float* x, int B, const float* stats = nullptr);
  // Training forward (dropout on, masks keyed by dropout_key and the global row first_row + b;
  // batch norm on the batch's statistics, and the running ones updated when update_stats) and
  // the loss; keeps what Backward needs. Returns the sum of the B per-sample losses (NaN or inf
  // when training diverged). The logits' gradient is scaled by dloss_scale, then by loss_scale
  // (fp16's dynamic loss scale; 1: none).
  double ForwardLoss(const float* x, const int32_t* y, int B, float dloss_scale,
                     uint64_t dropout_key = 0, int64_t first_row = 0, float loss_scale = 1.0f,
                     bool update_stats = true);
  // Backward of the last ForwardLoss (x and B as given to it): grads() = the gradient, or +=
  // it when `accumulate`. Tells `sink` (when not null) as each layer with parameters is done.
  void Backward(const float* x, int B, bool accumulate, LayerSink* sink = nullptr);
  // ForwardLoss then Backward, without dropout masks' key or a sink.
  double ForwardBackward(const float* x, const int32_t* y, int B, float dloss_scale);
  // Adds the summed loss and the number of correct argmaxes of a batch to *loss_sum, *correct
  // (evaluation mode, as Forward).
  void Evaluate(const float* x, const int32_t* y, int B, double* loss_sum, int64_t* correct,
                const float* stats = nullptr);

 private:
  bool half() const { return precision_ != Precision::kFp32; }
  const float* RunForward(const float* x, int B, bool train, uint64_t dropout_key,
                          int64_t first_row, const float* stats, bool update_stats);
  // What a GEMM layer reads as its input: x itself, or its 16-bit copy.
  const float* GemmInput(int i, const float* x, int64_t n);
  float* Grad(int i) { return gbuf_[static_cast<size_t>(gown_[static_cast<size_t>(i)])].data(); }

  ModelSpec model_;
  [[maybe_unused]] int max_batch_;  // checked by asserts only
  Precision precision_;
  HalfType half_type_;
  float label_smoothing_;
  FloatBuffer params_, grads_, stats_;
  // Per layer: its output buffer (empty where it aliases another: flatten, and dropout in
  // evaluation), and the pointer each forward set (y_[i]: what layer i gave).
  std::vector<FloatBuffer> out_;
  std::vector<const float*> y_;
  // fused_[p] = a: activation a runs in producer p's pass (p's buffer keeps the value before
  // it). skip_[a]: a has no pass of its own.
  std::vector<int> fused_;
  std::vector<char> skip_;
  // Gradients w.r.t. each layer's output: gown_[i] names the buffer (a flatten shares its
  // input's, a fused producer its activation's); written_ says whether this backward has
  // written it yet (then later contributions add).
  std::vector<int> gown_;
  std::vector<FloatBuffer> gbuf_;
  std::vector<char> written_;
  std::vector<FloatBuffer> mask_;             // dropout
  std::vector<std::vector<int32_t>> argmax_;  // max pool
  std::vector<FloatBuffer> mean_, invstd_;    // batch norm, of the last training forward
  FloatBuffer conv_scratch_;
  FloatBuffer losses_;
  // bf16 / fp16 only: what the GEMMs read. params16_ mirrors params_; in16_[i] GEMM layer i's
  // input; d16_ the gradient a backward GEMM reads.
  FloatBuffer params16_, d16_;
  std::vector<FloatBuffer> in16_;
  bool half_params_fresh_ = false;
};

}  // namespace sweep::trainer::cpu
