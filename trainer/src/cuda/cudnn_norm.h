// Batch normalization's training pass and its backward through cuDNN 9's graph API, on rows
// x [N, C] in fp32 (N = samples x pixels of an NHWC tensor) with fp32 scale and bias per channel.
// cuDNN's graph API has no inference phase for batch norm, and the deprecated
// cudnnBatchNormalizationForwardInference is not used: evaluation stays cnn_ops.h's
// batchnorm_eval, as do the running statistics (batchnorm_running_update), which keep the CPU's
// unbiased variance whatever cuDNN's own update does. The plans are chosen once, when the object
// is made; engines cuDNN marks nondeterministic or reducing below fp32 are never taken, so a
// step gives the same bits every time. Not thread-safe: one replica's thread uses it.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "cuda/cudnn_graph.h"
#include "cuda/device_buffer.h"

namespace sweep::trainer::cuda {

class CudnnBatchNorm {
 public:
  // Plans for N rows of C channels with `eps` (and `momentum` for cuDNN's running statistics,
  // which the caller ignores). A null result when cuDNN has no acceptable engine for the shape,
  // with the reason in *none: the caller then uses its own kernels.
  static Result<std::unique_ptr<CudnnBatchNorm>> Create(cudnnHandle_t handle, int64_t N, int C,
                                                        float eps, float momentum,
                                                        std::string* none);
  ~CudnnBatchNorm();
  CudnnBatchNorm(const CudnnBatchNorm&) = delete;
  CudnnBatchNorm& operator=(const CudnnBatchNorm&) = delete;

  // Bytes of scratch the larger of the two plans needs.
  size_t workspace_bytes() const { return workspace_bytes_; }
  // What runs each pass (engine indices and notes), for logs and benchmarks.
  std::string Describe() const;

  // y = scale * (x - mean) * invstd + bias with the batch's mean and invstd = 1 / sqrt(biased
  // variance + eps), which go to mean[C] and invstd[C]. cuDNN's own running statistics stay in
  // the object's scratch. Every pointer is 16-byte aligned, as the tensors are declared.
  Status Forward(float* y, float* mean, float* invstd, const float* x, const float* scale,
                 const float* bias, void* workspace) const;
  // dx [N, C], dscale [C] and dbias [C] (all overwritten) from dy [N, C], x and the forward's
  // mean and invstd.
  Status Backward(float* dx, float* dscale, float* dbias, const float* dy, const float* x,
                  const float* scale, const float* mean, const float* invstd,
                  void* workspace) const;

  struct Operands;  // the tensor descriptors the plans were built from

 private:
  CudnnBatchNorm(cudnnHandle_t handle, float eps, float momentum);

  cudnnHandle_t handle_;
  float eps_, momentum_;  // passed by value: the variant pack points at these
  std::unique_ptr<Operands> operands_;
  std::unique_ptr<cudnn_graph::Plan> forward_, backward_;
  // cuDNN's running statistics in and out (mean, variance), each at a 16-byte boundary: the
  // model's own sit packed at 2C floats a layer, which need not be aligned, and keep the CPU's
  // update (batchnorm_running_update).
  mutable DeviceBuffer<float> running_;  // written by Forward, which is const to its callers
  int64_t running_stride_ = 0;
  size_t workspace_bytes_ = 0;
};

}  // namespace sweep::trainer::cuda
