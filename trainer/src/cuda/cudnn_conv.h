// Convolutions through cuDNN 9's graph (backend) API, the one NVIDIA recommends (the legacy
// cudnnConvolution* calls are deprecated in 9). Tensors are NHWC, as the CPU backend's: a
// sample's pixels one after another with their channels contiguous, weights [OC, K, K, C].
// Storage is fp32 (TF32 tensor cores unless tf32 is off) or bf16 / fp16 with fp32 accumulation;
// all three tensors of a call share it. Each direction's plan is chosen once, when the object
// is made, and kept: cuDNN's heuristics rank engine configurations and the first that builds
// is used, or with autotune the fastest of the first few, timed on the device. Engines that
// cuDNN marks nondeterministic, or that would convert fp32 inputs down, are never taken, so a
// step gives the same bits every time. Not thread-safe: one replica's thread uses it, with
// its device current.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "cpu/conv_ops.h"
#include "cuda/cudnn_graph.h"
#include "model.h"

namespace sweep::trainer::cuda {

// A cuDNN handle whose work is queued on `stream`. The caller destroys it with cudnnDestroy.
Status CreateCudnnHandle(cudaStream_t stream, cudnnHandle_t* handle);

// cuDNN's version as "9.19.0": the library this process loaded (empty when it cannot be loaded).
std::string CudnnVersion();

struct ConvOptions {
  Precision precision = Precision::kFp32;
  bool tf32 = true;        // fp32 storage: tensor cores with TF32 products allowed
  bool autotune = false;   // time the candidate plans and keep the fastest of each direction
  int max_candidates = 8;  // autotune: how many of the heuristics' configurations are timed
  // Plan the data gradient. A layer reading the model's input needs none, and cuDNN may have no
  // engine for it there (one input channel in 16 bits); BackwardData then fails.
  bool backward_data = true;
};

class CudnnConv {
 public:
  enum Direction { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };
  static constexpr int kDirections = 3;

  // Plans for `shape` (its batch size B is the largest a call may use; each call runs the
  // plan for that B). InvalidArgument when cuDNN supports no engine for a direction, naming the
  // shape; the handle's stream must outlive the object.
  static Result<std::unique_ptr<CudnnConv>> Create(cudnnHandle_t handle,
                                                   const cpu::ConvShape& shape,
                                                   const ConvOptions& options);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  const cpu::ConvShape& shape() const { return shape_; }
  // Bytes of scratch the most demanding direction needs: Run's workspace.
  size_t workspace_bytes() const { return workspace_bytes_; }
  // What runs each direction (engine indices and notes), for logs and benchmarks.
  std::string Describe() const;

  // y [B, OH, OW, OC] = conv(x [B, H, W, C], w [OC, K, K, C]).
  Status Forward(void* y, const void* x, const void* w, void* workspace) const;
  // dx [B, H, W, C] = the gradient w.r.t. x, given dy [B, OH, OW, OC].
  Status BackwardData(void* dx, const void* dy, const void* w, void* workspace) const;
  // dw [OC, K, K, C] = the gradient w.r.t. w, given dy.
  Status BackwardFilter(void* dw, const void* x, const void* dy, void* workspace) const;

  using Plan = cudnn_graph::Plan;
  struct Operands;  // the tensor and convolution descriptors the plans were built from

 private:
  CudnnConv(cudnnHandle_t handle, const cpu::ConvShape& shape);
  // x, w, y in the roles kOps names; the direction's plan writes one of them.
  Status Execute(Direction d, const void* x, const void* w, const void* y, void* workspace) const;

  cudnnHandle_t handle_;
  cpu::ConvShape shape_;
  std::unique_ptr<Operands> operands_;
  std::unique_ptr<Plan> plans_[kDirections];
  size_t workspace_bytes_ = 0;
};

}  // namespace sweep::trainer::cuda
