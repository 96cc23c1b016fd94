// Each direction is an operation graph of one convolution node over three tensors; its plan is
// an execution plan finalized from one of the engine configurations cuDNN's heuristics rank.
// Calls fill a variant pack (the three pointers and the workspace) and execute that plan on the
// handle's stream.
#include "cuda/cudnn_conv.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/pass_timer.h"

namespace sweep::trainer::cuda {
namespace {

using cudnn_graph::Descriptor;
using cudnn_graph::Finalize;
using cudnn_graph::Set;
using cudnn_graph::SetDescriptor;
using cudnn_graph::SetInt64s;

cudnnDataType_t DataType(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return CUDNN_DATA_BFLOAT16;
    case Precision::kFp16:
      return CUDNN_DATA_HALF;
    case Precision::kFp32:
      break;
  }
  return CUDNN_DATA_FLOAT;
}

size_t ElementBytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

// The tensors' unique ids in every graph and variant pack.
constexpr int64_t kX = 1, kW = 2, kY = 3;

// An NHWC tensor of logical dimensions [n, c, h, w], as cuDNN names them.
Status Tensor(int64_t uid, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w,
              Descriptor* out) {
  return cudnn_graph::Tensor(uid, type, {n, c, h, w}, {h * w * c, 1, w * c, c}, false, out);
}

Status Convolution(const cpu::ConvShape& s, Descriptor* out) {
  Descriptor d;
  if (Status st = Descriptor::Make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &d); !st.ok()) return st;
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;  // what deep learning calls conv
  const int64_t dims = 2;
  const std::vector<int64_t> ones = {1, 1}, strides = {s.stride, s.stride}, pads = {s.pad, s.pad};
  for (Status st : {Set(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute),
                    Set(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode),
                    Set(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims),
                    SetInt64s(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, ones),
                    SetInt64s(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, strides),
                    SetInt64s(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, pads),
                    SetInt64s(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, pads), Finalize(d)}) {
    if (!st.ok()) return st;
  }
  *out = std::move(d);
  return Status::Ok();
}

// The attribute names of one direction's operation: its type, then conv, alpha, beta and the
// three tensors in the order x, w, y (backward data: dx, w, dy; backward filter: x, dw, dy).
struct OpNames {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t conv, alpha, beta, x, w, y;
  const char* name;
};

constexpr std::array<OpNames, CudnnConv::kDirections> kOps = {{
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, "forward"},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     "backward data"},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, "backward filter"},
}};

std::string ShapeText(const cpu::ConvShape& s) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "input %dx%dx%dx%d, %d filters %dx%d, stride %d, padding %d", s.B,
                s.H, s.W, s.C, s.OC, s.K, s.K, s.stride, s.pad);
  return buf;
}

const char* PrecisionText(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp32:
      break;
  }
  return "fp32";
}

// Whether an engine with these numerical notes computes what the trainer promises: no
// nondeterminism (a replayed step gives the same bits), no fp32 inputs converted to 16 bits,
// no reductions below fp32, and TF32 products for fp32 only when allowed.
bool Acceptable(const std::vector<cudnnBackendNumericalNote_t>& notes, const ConvOptions& o) {
  for (cudnnBackendNumericalNote_t n : notes) {
    if (n == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC ||
        n == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) {
      return false;
    }
    if (o.precision == Precision::kFp32) {
      if (n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return false;
      if (n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && !o.tf32) return false;
    }
  }
  return true;
}

// Executes `plan` on the handle's stream over x, w, y (the operation's three tensors in the
// order kOps names them) and the workspace.
Status Run(cudnnHandle_t handle, const CudnnConv::Plan& plan, const void* x, const void* w,
           const void* y, void* workspace) {
  return cudnn_graph::Execute(handle, plan, {kX, kW, kY}, {x, w, y}, workspace);
}

}  // namespace

struct CudnnConv::Operands {
  Descriptor x, w, y, conv;
};

namespace {

// Autotune: sets each plan's ms from two untimed runs, then five timed ones, over operands of
// `s` in `precision` (their values do not matter: the same work is done for any).
Status TimePlans(cudnnHandle_t handle, const cpu::ConvShape& s, Precision precision,
                 std::vector<CudnnConv::Plan>* plans) {
  size_t most = 1;
  for (const CudnnConv::Plan& p : *plans) most = std::max(most, p.workspace);
  const int64_t e = static_cast<int64_t>(ElementBytes(precision));
  DeviceBuffer<uint8_t> x, w, y, scratch;
  for (Status st : {DeviceBuffer<uint8_t>::Make(int64_t{s.B} * s.H * s.W * s.C * e, &x),
                    DeviceBuffer<uint8_t>::Make(s.OC * s.patch() * e, &w),
                    DeviceBuffer<uint8_t>::Make(int64_t{s.B} * s.OH() * s.OW() * s.OC * e, &y),
                    DeviceBuffer<uint8_t>::Make(static_cast<int64_t>(most), &scratch)}) {
    if (!st.ok()) return st;
  }
  cudaStream_t stream = nullptr;
  CUDNN_CHECK(cudnnGetStream(handle, &stream));
  for (CudnnConv::Plan& p : *plans) {
    double ms = 0;
    SWEEP_RETURN_IF_ERROR(TimePass(
        stream, [&] { return Run(handle, p, x.data(), w.data(), y.data(), scratch.data()); }, &ms));
    p.ms = static_cast<float>(ms);
  }
  return Status::Ok();
}

}  // namespace

Status CreateCudnnHandle(cudaStream_t stream, cudnnHandle_t* handle) {
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK(cudnnCreate(&h));
  const cudnnStatus_t set = cudnnSetStream(h, stream);
  if (set != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(h);
    CUDNN_CHECK(set);
  }
  *handle = h;
  return Status::Ok();
}

std::string CudnnVersion() {
  const size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch in cuDNN 9
  if (v == 0) return "";
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

CudnnConv::CudnnConv(cudnnHandle_t handle, const cpu::ConvShape& shape)
    : handle_(handle), shape_(shape) {}

CudnnConv::~CudnnConv() = default;

Result<std::unique_ptr<CudnnConv>> CudnnConv::Create(cudnnHandle_t handle,
                                                     const cpu::ConvShape& shape,
                                                     const ConvOptions& options) {
  const cpu::ConvShape& s = shape;
  if (s.B < 1 || s.H < 1 || s.W < 1 || s.C < 1 || s.OC < 1 || s.K < 1 || s.stride < 1 ||
      s.pad < 0 || s.OH() < 1 || s.OW() < 1) {
    return Status::InvalidArgument("convolution of " + ShapeText(s) + ": not a valid shape");
  }
  std::unique_ptr<CudnnConv> conv(new CudnnConv(handle, shape));
  conv->operands_ = std::make_unique<Operands>();
  Operands& o = *conv->operands_;
  const cudnnDataType_t type = DataType(options.precision);
  for (Status st :
       {Tensor(kX, type, s.B, s.C, s.H, s.W, &o.x), Tensor(kW, type, s.OC, s.C, s.K, s.K, &o.w),
        Tensor(kY, type, s.B, s.OC, s.OH(), s.OW(), &o.y), Convolution(s, &o.conv)}) {
    if (!st.ok()) return st;
  }
  const float alpha = 1, beta = 0;
  for (int dir = 0; dir < kDirections; ++dir) {
    if (dir == kBackwardData && !options.backward_data) continue;
    const OpNames& names = kOps[static_cast<size_t>(dir)];
    Descriptor op, graph;
    for (Status st :
         {Descriptor::Make(names.type, &op), SetDescriptor(op, names.conv, o.conv),
          Set(op, names.alpha, CUDNN_TYPE_FLOAT, 1, &alpha),
          Set(op, names.beta, CUDNN_TYPE_FLOAT, 1, &beta), SetDescriptor(op, names.x, o.x),
          SetDescriptor(op, names.w, o.w), SetDescriptor(op, names.y, o.y), Finalize(op),
          cudnn_graph::OneOperationGraph(handle, op, &graph)}) {
      if (!st.ok()) return st;
    }
    std::vector<Plan> plans;
    const size_t limit =
        options.autotune ? static_cast<size_t>(std::max(1, options.max_candidates)) : 1;
    const auto acceptable = [&options](const std::vector<cudnnBackendNumericalNote_t>& notes) {
      return Acceptable(notes, options);
    };
    if (Status st = cudnn_graph::Candidates(handle, graph, acceptable, limit, &plans); !st.ok()) {
      return st;
    }
    if (plans.empty()) {
      return Status::InvalidArgument(
          std::string("cuDNN has no deterministic engine for the ") + names.name +
          " convolution of " + ShapeText(s) + " in " + PrecisionText(options.precision) +
          (options.precision == Precision::kFp32 && !options.tf32 ? " without TF32" : ""));
    }
    size_t best = 0;
    if (plans.size() > 1) {
      if (Status st = TimePlans(handle, s, options.precision, &plans); !st.ok()) return st;
      for (size_t i = 1; i < plans.size(); ++i) {
        if (plans[i].ms < plans[best].ms) best = i;
      }
    }
    Plan& chosen = plans[best];
    chosen.op = std::move(op);
    chosen.graph = std::move(graph);
    conv->workspace_bytes_ = std::max(conv->workspace_bytes_, chosen.workspace);
    conv->plans_[dir] = std::make_unique<Plan>(std::move(chosen));
  }
  return conv;
}

std::string CudnnConv::Describe() const {
  std::string out;
  for (int dir = 0; dir < kDirections; ++dir) {
    const Plan* p = plans_[dir].get();
    if (p == nullptr) continue;
    if (!out.empty()) out += "; ";
    out += std::string(kOps[static_cast<size_t>(dir)].name) + ": " + cudnn_graph::DescribePlan(*p);
  }
  return out;
}

Status CudnnConv::Execute(Direction d, const void* x, const void* w, const void* y,
                          void* workspace) const {
  const Plan* p = plans_[d].get();
  if (p == nullptr) {
    return Status::Internal(std::string("cudnn: the ") + kOps[static_cast<size_t>(d)].name +
                            " convolution of " + ShapeText(shape_) + " was not planned");
  }
  return Run(handle_, *p, x, w, y, workspace);
}

Status CudnnConv::Forward(void* y, const void* x, const void* w, void* workspace) const {
  return Execute(kForward, x, w, y, workspace);
}

Status CudnnConv::BackwardData(void* dx, const void* dy, const void* w, void* workspace) const {
  return Execute(kBackwardData, dx, w, dy, workspace);
}

Status CudnnConv::BackwardFilter(void* dw, const void* x, const void* dy, void* workspace) const {
  return Execute(kBackwardFilter, x, dw, dy, workspace);
}

}  // namespace sweep::trainer::cuda
