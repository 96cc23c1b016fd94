// One model replica on one GPU, cpu/mlp.h's Mlp with device buffers: parameters and gradients
// flat in MlpShape's layout, every activation buffer allocated once for max_batch rows, and
// kInputSlots device input buffers that the caller fills (asynchronously, on its copy stream)
// while the replica computes on another. In bf16 / fp16 the GEMMs read 16-bit copies of the
// weights and activations; everything else stays fp32. All work is queued on the replica's
// stream through its cuBLAS handle (both owned by the caller, which outlives the Mlp). Not
// thread-safe: one thread, with the replica's device current, uses it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "cuda/device_buffer.h"
#include "cuda/ops.h"
#include "cuda/replica_model.h"
#include "model.h"

namespace sweep::trainer::cuda {

class Mlp final : public ReplicaModel {
 public:
  static Result<std::unique_ptr<Mlp>> Create(const MlpShape& shape, Activation act, int max_batch,
                                             float dropout, Precision precision,
                                             cudaStream_t stream, cublasHandle_t blas);

  const MlpShape& shape() const { return shape_; }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  // Input slot s (< kInputSlots): x [max_batch, inputs], y [max_batch], for the caller to fill.
  float* x(int slot) override { return x_[slot].data(); }
  int32_t* y(int slot) override { return y_[slot].data(); }
  // [1] on the device: the loss ForwardLoss sums.
  double* summed_loss() override { return loss_.data(); }

  // The weights changed (a load): the 16-bit copy is remade before the next forward. No-op in
  // fp32. An optimizer step that writes params16() (cuda/ops.h) keeps the copy current instead.
  void ParamsChanged() override { half_params_fresh_ = false; }
  // bf16 / fp16: the 16-bit copy of the weights the GEMMs read (current after any forward);
  // null in fp32.
  uint16_t* params16() override { return half() ? params16_.data() : nullptr; }
  HalfType half_type() const override { return half_type_; }

  // Training forward of the B rows in input slot `slot` and its loss, summed into summed_loss()
  // (reset first unless accumulate_loss); keeps what Backward needs. The logits' gradient is
  // scaled by dloss_scale and, when loss_scale (a device float) is not null, by *loss_scale.
  Status ForwardLoss(int slot, int B, float dloss_scale, const float* loss_scale,
                     uint64_t dropout_key, int64_t first_row, bool accumulate_loss) override;
  // Backward of the last ForwardLoss: grads() = the gradient, or += it when `accumulate`. Tells
  // `hook` (when not null) as each layer, last to first, is queued.
  Status Backward(int slot, int B, bool accumulate, LayerHook* hook) override;
  Status EvaluateSlot(int B, double* loss_total, unsigned long long* correct) override;

 private:
  Mlp(const MlpShape& shape, Activation act, int max_batch, float dropout, Precision precision,
      cudaStream_t stream, cublasHandle_t blas);
  Status Allocate();
  bool half() const { return precision_ != Precision::kFp32; }
  // Whether hidden layers keep their fp32 activation: an fp32 GEMM or dropout reads it. In
  // bf16 / fp16 without dropout the GEMMs read the 16-bit copy and the activation's backward
  // reads pre, so writing it would only cost bandwidth; pre then stays as the GEMM wrote it,
  // without the bias, which the backward adds back (6 bytes an element of the forward, not 14).
  bool keeps_out() const { return !half() || dropout_ > 0; }
  // Whether layer l's pre_ holds its bias: the logits always do; a hidden layer when it keeps
  // its fp32 activation.
  bool pre_has_bias(int l) const { return l == shape_.layers() - 1 || keeps_out(); }
  // Forward of input slot `slot`; the logits end in pre_.back().
  Status Forward(int slot, int B, bool train, uint64_t dropout_key, int64_t first_row);

  MlpShape shape_;
  Activation act_;
  int max_batch_;
  float dropout_;
  Precision precision_;
  HalfType half_type_;
  cudaStream_t stream_;
  cublasHandle_t blas_;
  DeviceBuffer<float> params_, grads_;
  DeviceBuffer<float> x_[kInputSlots];
  DeviceBuffer<int32_t> y_[kInputSlots];
  // As in cpu::Mlp: pre_[l] biased pre-activation (a hidden layer's without its bias unless
  // keeps_out()), out_[l] activation (hidden layers, when keeps_out()), drop_[l] and mask_[l]
  // with dropout, d_[0..1] ping-pong gradients.
  std::vector<DeviceBuffer<float>> pre_, out_, drop_, mask_;
  DeviceBuffer<float> d_[2];
  // bf16 / fp16 only: the GEMMs' inputs. params16_ mirrors params_; x16_ the input; act16_[l]
  // what hidden layer l feeds layer l + 1; d16_ the gradient a backward GEMM reads.
  DeviceBuffer<uint16_t> params16_, x16_, d16_;
  std::vector<DeviceBuffer<uint16_t>> act16_;
  bool half_params_fresh_ = false;
  // bias_act_backward's scratch for the widest need of any layer at max_batch rows.
  DeviceBuffer<float> bias_scratch_;
  DeviceBuffer<float> losses_;
  DeviceBuffer<double> loss_;  // [1]: the summed loss
  bool masked_ = false;
};

}  // namespace sweep::trainer::cuda
