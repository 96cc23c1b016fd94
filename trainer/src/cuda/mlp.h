// One model replica on one GPU, cpu/mlp.h's Mlp with device buffers: parameters and gradients
// flat in MlpShape's layout, every activation buffer allocated once for max_batch rows, the
// host's batch copied in by Upload. All work is queued on the replica's stream through its
// cuBLAS handle (both owned by the caller, which outlives the Mlp). Not thread-safe: one thread,
// with the replica's device current, uses it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "cuda/device_buffer.h"
#include "model.h"

namespace sweep::trainer::cuda {

class Mlp {
 public:
  static Result<std::unique_ptr<Mlp>> Create(const MlpShape& shape, Activation act, int max_batch,
                                             float dropout, cudaStream_t stream,
                                             cublasHandle_t blas);

  const MlpShape& shape() const { return shape_; }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }

  // Copies x [B, inputs] and y [B] from (pageable) host memory; the host arrays may be reused
  // when it returns. B <= max_batch.
  Status Upload(const float* x, const int32_t* y, int B);
  // Training forward of the uploaded batch and its loss, summed into the device's loss
  // accumulator (reset first unless accumulate_loss); keeps what Backward needs.
  Status ForwardLoss(int B, float dloss_scale, uint64_t dropout_key, int64_t first_row,
                     bool accumulate_loss);
  // Backward of the last ForwardLoss: grads() = the gradient, or += it when `accumulate`.
  Status Backward(int B, bool accumulate);
  // Waits for the stream and returns the loss accumulator.
  Result<double> ReadLoss();
  // Uploads a batch and adds its summed loss and correct count (no dropout); waits for the stream.
  Status Evaluate(const float* x, const int32_t* y, int B, double* loss_sum, int64_t* correct);

 private:
  Mlp(const MlpShape& shape, Activation act, int max_batch, float dropout, cudaStream_t stream,
      cublasHandle_t blas);
  Status Allocate();
  // Forward of the uploaded batch; the logits end in pre_.back().
  Status Forward(int B, bool train, uint64_t dropout_key, int64_t first_row);

  MlpShape shape_;
  Activation act_;
  int max_batch_;
  float dropout_;
  cudaStream_t stream_;
  cublasHandle_t blas_;
  DeviceBuffer<float> params_, grads_, x_;
  DeviceBuffer<int32_t> y_;
  // As in cpu::Mlp: pre_[l] biased pre-activation, out_[l] activation (hidden layers), drop_[l]
  // and mask_[l] with dropout, d_[0..1] ping-pong gradients.
  std::vector<DeviceBuffer<float>> pre_, out_, drop_, mask_;
  DeviceBuffer<float> d_[2];
  DeviceBuffer<float> losses_;
  DeviceBuffer<double> loss_;                 // [1]: the summed loss
  DeviceBuffer<unsigned long long> correct_;  // [1]: Evaluate's count
  bool masked_ = false;
};

}  // namespace sweep::trainer::cuda
