// Each pass is an operation graph of one normalization node: NORM_FORWARD in the training phase
// (x, scale, bias, epsilon and the running statistics in; y, the batch's mean and inverse
// standard deviation, and the next running statistics out) and NORM_BACKWARD (x, dy, scale,
// mean, inverse standard deviation in; dx, dscale, dbias out). Tensors are [N, C, 1, 1] with
// the channels contiguous, as NHWC rows are; the statistics and parameters [1, C, 1, 1].
#include "cuda/cudnn_norm.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace sweep::trainer::cuda {
namespace {

using cudnn_graph::Descriptor;
using cudnn_graph::Set;
using cudnn_graph::SetDescriptor;

// The tensors' unique ids in both graphs and their variant packs.
enum Uid : int64_t {
  kX = 1,
  kY,
  kScale,
  kBias,
  kMean,
  kInvStd,
  kEps,
  kMomentum,
  kRunMeanIn,
  kRunVarIn,
  kRunMeanOut,
  kRunVarOut,
  kDy,
  kDx,
  kDscale,
  kDbias,
};

// Deterministic, and no reduction below fp32.
bool Acceptable(const std::vector<cudnnBackendNumericalNote_t>& notes) {
  for (cudnnBackendNumericalNote_t n : notes) {
    if (n == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC ||
        n == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) {
      return false;
    }
  }
  return true;
}

// The first acceptable plan for a graph of `op`, or none (plans empty).
Status PlanFor(cudnnHandle_t handle, Descriptor op, std::vector<cudnn_graph::Plan>* plans) {
  Descriptor graph;
  if (Status s = cudnn_graph::OneOperationGraph(handle, op, &graph); !s.ok()) return s;
  if (Status s = cudnn_graph::Candidates(handle, graph, Acceptable, 1, plans); !s.ok()) return s;
  if (!plans->empty()) {
    plans->front().op = std::move(op);
    plans->front().graph = std::move(graph);
  }
  return Status::Ok();
}

}  // namespace

struct CudnnBatchNorm::Operands {
  Descriptor x, y, scale, bias, mean, invstd, eps, momentum, run_in[2], run_out[2], dy, dx, dscale,
      dbias;
};

CudnnBatchNorm::CudnnBatchNorm(cudnnHandle_t handle, float eps, float momentum)
    : handle_(handle), eps_(eps), momentum_(momentum) {}

CudnnBatchNorm::~CudnnBatchNorm() = default;

Result<std::unique_ptr<CudnnBatchNorm>> CudnnBatchNorm::Create(cudnnHandle_t handle, int64_t N,
                                                               int C, float eps, float momentum,
                                                               std::string* none) {
  if (N < 1 || C < 1) {
    return Status::InvalidArgument("batch norm of " + std::to_string(N) + " rows of " +
                                   std::to_string(C) + " channels: not a valid shape");
  }
  std::unique_ptr<CudnnBatchNorm> bn(new CudnnBatchNorm(handle, eps, momentum));
  bn->operands_ = std::make_unique<Operands>();
  Operands& o = *bn->operands_;
  const int64_t c = C;
  const std::vector<int64_t> rows = {N, c, 1, 1}, row_strides = {c, 1, c, c};
  const std::vector<int64_t> channels = {1, c, 1, 1}, channel_strides = {c, 1, c, c};
  const std::vector<int64_t> scalar = {1, 1, 1, 1};
  const auto tensor = [&](int64_t uid, bool per_row, Descriptor* d) {
    return cudnn_graph::Tensor(uid, CUDNN_DATA_FLOAT, per_row ? rows : channels,
                               per_row ? row_strides : channel_strides, false, d);
  };
  const auto by_value = [&](int64_t uid, Descriptor* d) {
    return cudnn_graph::Tensor(uid, CUDNN_DATA_FLOAT, scalar, scalar, true, d);
  };
  for (Status s :
       {tensor(kX, true, &o.x), tensor(kY, true, &o.y), tensor(kScale, false, &o.scale),
        tensor(kBias, false, &o.bias), tensor(kMean, false, &o.mean),
        tensor(kInvStd, false, &o.invstd), by_value(kEps, &o.eps), by_value(kMomentum, &o.momentum),
        tensor(kRunMeanIn, false, &o.run_in[0]), tensor(kRunVarIn, false, &o.run_in[1]),
        tensor(kRunMeanOut, false, &o.run_out[0]), tensor(kRunVarOut, false, &o.run_out[1]),
        tensor(kDy, true, &o.dy), tensor(kDx, true, &o.dx), tensor(kDscale, false, &o.dscale),
        tensor(kDbias, false, &o.dbias)}) {
    if (!s.ok()) return s;
  }

  const cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
  const cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
  Descriptor fwd, bwd;
  for (Status s :
       {Descriptor::Make(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, &fwd),
        Set(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode),
        Set(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &phase),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, o.x),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, o.scale),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, o.bias),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, o.eps),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, o.momentum),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, o.run_in[0]),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, o.run_in[1]),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, o.run_out[0]),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, o.run_out[1]),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, o.mean),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, o.invstd),
        SetDescriptor(fwd, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, o.y),
        cudnn_graph::Finalize(fwd),
        Descriptor::Make(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR, &bwd),
        Set(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode),
        SetDescriptor(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, o.x),
        SetDescriptor(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, o.dy),
        SetDescriptor(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, o.scale),
        SetDescriptor(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, o.mean),
        SetDescriptor(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, o.invstd),
        SetDescriptor(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, o.dscale),
        SetDescriptor(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, o.dbias),
        SetDescriptor(bwd, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, o.dx),
        cudnn_graph::Finalize(bwd)}) {
    if (!s.ok()) return s;
  }
  const std::string shape = std::to_string(N) + " rows of " + std::to_string(C) + " channels";
  std::vector<cudnn_graph::Plan> plans;
  if (Status s = PlanFor(handle, std::move(fwd), &plans); !s.ok()) return s;
  if (plans.empty()) {
    *none = "cuDNN has no deterministic engine for batch norm's training pass over " + shape;
    return std::unique_ptr<CudnnBatchNorm>();
  }
  bn->forward_ = std::make_unique<cudnn_graph::Plan>(std::move(plans.front()));
  plans.clear();
  if (Status s = PlanFor(handle, std::move(bwd), &plans); !s.ok()) return s;
  if (plans.empty()) {
    *none = "cuDNN has no deterministic engine for batch norm's backward over " + shape;
    return std::unique_ptr<CudnnBatchNorm>();
  }
  bn->backward_ = std::make_unique<cudnn_graph::Plan>(std::move(plans.front()));
  bn->workspace_bytes_ = std::max(bn->forward_->workspace, bn->backward_->workspace);
  bn->running_stride_ = (c + 3) / 4 * 4;
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(4 * bn->running_stride_, &bn->running_));
  // Read by the training pass: defined values, though what cuDNN makes of them is not used.
  // Zeroed on the handle's stream, which the legacy stream's cudaMemset would not be ordered
  // with.
  cudaStream_t stream = nullptr;
  CUDNN_CHECK(cudnnGetStream(handle, &stream));
  CUDA_CHECK(cudaMemsetAsync(bn->running_.data(), 0,
                             static_cast<size_t>(4 * bn->running_stride_) * sizeof(float), stream));
  return bn;
}

std::string CudnnBatchNorm::Describe() const {
  return "training: " + cudnn_graph::DescribePlan(*forward_) +
         "; backward: " + cudnn_graph::DescribePlan(*backward_);
}

Status CudnnBatchNorm::Forward(float* y, float* mean, float* invstd, const float* x,
                               const float* scale, const float* bias, void* workspace) const {
  float* running = running_.data();
  const int64_t s = running_stride_;
  return cudnn_graph::Execute(handle_, *forward_,
                              {kX, kScale, kBias, kEps, kMomentum, kRunMeanIn, kRunVarIn,
                               kRunMeanOut, kRunVarOut, kMean, kInvStd, kY},
                              {x, scale, bias, &eps_, &momentum_, running, running + s,
                               running + 2 * s, running + 3 * s, mean, invstd, y},
                              workspace);
}

Status CudnnBatchNorm::Backward(float* dx, float* dscale, float* dbias, const float* dy,
                                const float* x, const float* scale, const float* mean,
                                const float* invstd, void* workspace) const {
  return cudnn_graph::Execute(handle_, *backward_,
                              {kX, kDy, kScale, kMean, kInvStd, kDscale, kDbias, kDx},
                              {x, dy, scale, mean, invstd, dscale, dbias, dx}, workspace);
}

}  // namespace sweep::trainer::cuda
