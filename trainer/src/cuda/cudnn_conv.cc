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

namespace sweep::trainer::cuda {
namespace {

// An owned backend descriptor.
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    if (this != &o) {
      Reset();
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() { Reset(); }

  static Status Make(cudnnBackendDescriptorType_t type, Descriptor* out) {
    Descriptor d;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d.d_));
    *out = std::move(d);
    return Status::Ok();
  }
  cudnnBackendDescriptor_t get() const { return d_; }
  // The address of the handle, for the attribute calls that take an array of descriptors.
  const cudnnBackendDescriptor_t* ptr() const { return &d_; }

 private:
  void Reset() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_ = nullptr;
};

template <typename T>
Status Set(const Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const T* values) {
  CUDNN_CHECK(cudnnBackendSetAttribute(d.get(), name, type, count, values));
  return Status::Ok();
}

Status SetDescriptor(const Descriptor& d, cudnnBackendAttributeName_t name, const Descriptor& v) {
  return Set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, v.ptr());
}

Status SetInt64s(const Descriptor& d, cudnnBackendAttributeName_t name,
                 const std::vector<int64_t>& v) {
  return Set(d, name, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.data());
}

Status Finalize(const Descriptor& d) {
  CUDNN_CHECK(cudnnBackendFinalize(d.get()));
  return Status::Ok();
}

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
  Descriptor d;
  if (Status s = Descriptor::Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d); !s.ok()) return s;
  const std::vector<int64_t> dims = {n, c, h, w};
  const std::vector<int64_t> strides = {h * w * c, 1, w * c, c};
  // cudaMalloc's buffers and the parameters' 64-byte offsets are at least this aligned.
  const int64_t alignment = 16;
  for (Status s :
       {Set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type),
        SetInt64s(d, CUDNN_ATTR_TENSOR_DIMENSIONS, dims),
        SetInt64s(d, CUDNN_ATTR_TENSOR_STRIDES, strides),
        Set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
        Set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment), Finalize(d)}) {
    if (!s.ok()) return s;
  }
  *out = std::move(d);
  return Status::Ok();
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

}  // namespace

struct CudnnConv::Plan {
  // The plan refers to its engine configuration and the graph, the graph to the operation.
  Descriptor op, graph, config, plan;
  int64_t engine = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
  size_t workspace = 0;
  float ms = -1;  // autotune's time per call, when timed
};

struct CudnnConv::Operands {
  Descriptor x, w, y, conv;
};

namespace {

// The engine configurations cuDNN's heuristics suggest for `graph`, best first.
Status Heuristics(const Descriptor& graph, cudnnBackendHeurMode_t mode,
                  std::vector<Descriptor>* configs) {
  Descriptor heur;
  if (Status s = Descriptor::Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur); !s.ok()) return s;
  for (Status s :
       {SetDescriptor(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph),
        Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode), Finalize(heur)}) {
    if (!s.ok()) return s;
  }
  int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<Descriptor> out(static_cast<size_t>(count));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (Descriptor& d : out) {
    if (Status s = Descriptor::Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &d); !s.ok()) return s;
    raw.push_back(d.get());
  }
  int64_t got = 0;
  if (count > 0) {
    CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  }
  out.resize(static_cast<size_t>(std::min(got, count)));
  *configs = std::move(out);
  return Status::Ok();
}

// Reads a configuration's engine: its global index and numerical notes.
Status EngineOf(const Descriptor& config, int64_t* index,
                std::vector<cudnnBackendNumericalNote_t>* notes) {
  Descriptor engine;
  if (Status s = Descriptor::Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine); !s.ok()) return s;
  int64_t n = 0;
  cudnnBackendDescriptor_t raw = engine.get();
  CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw));
  CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                       CUDNN_TYPE_INT64, 1, &n, index));
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> buf{};
  CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                       CUDNN_TYPE_NUMERICAL_NOTE, static_cast<int64_t>(buf.size()),
                                       &n, buf.data()));
  notes->assign(buf.begin(),
                buf.begin() + std::clamp<int64_t>(n, 0, static_cast<int64_t>(buf.size())));
  return Status::Ok();
}

// The execution plans that build for `graph`, in the heuristics' order, at most `limit`.
Status Candidates(cudnnHandle_t handle, const Descriptor& graph, const ConvOptions& options,
                  size_t limit, std::vector<CudnnConv::Plan>* plans) {
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs;
    if (Status s = Heuristics(graph, mode, &configs); !s.ok()) {
      if (mode == CUDNN_HEUR_MODE_A) continue;  // the fallback list may still have one
      return s;
    }
    for (Descriptor& config : configs) {
      CudnnConv::Plan p;
      if (Status s = EngineOf(config, &p.engine, &p.notes); !s.ok()) return s;
      if (!Acceptable(p.notes, options)) continue;
      bool seen = false;
      for (const CudnnConv::Plan& q : *plans) seen = seen || q.engine == p.engine;
      if (seen) continue;  // the fallback list repeats engines mode A gave
      if (!Descriptor::Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p.plan).ok()) continue;
      // An engine that cannot run this graph on this device refuses to finalize: try the next.
      if (cudnnBackendSetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                   CUDNN_TYPE_HANDLE, 1, &handle) != CUDNN_STATUS_SUCCESS ||
          cudnnBackendSetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                   config.ptr()) != CUDNN_STATUS_SUCCESS ||
          cudnnBackendFinalize(p.plan.get()) != CUDNN_STATUS_SUCCESS) {
        continue;
      }
      int64_t n = 0, bytes = 0;
      CUDNN_CHECK(cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                           CUDNN_TYPE_INT64, 1, &n, &bytes));
      p.workspace = static_cast<size_t>(std::max<int64_t>(bytes, 0));
      p.config = std::move(config);
      plans->push_back(std::move(p));
      if (plans->size() >= limit) return Status::Ok();
    }
    if (!plans->empty()) return Status::Ok();
  }
  return Status::Ok();
}

// Executes `plan` on the handle's stream over x, w, y (the operation's three tensors in the
// order kOps names them) and the workspace.
Status Run(cudnnHandle_t handle, const CudnnConv::Plan& plan, void* x, void* w, void* y,
           void* workspace) {
  Descriptor pack;
  if (Status s = Descriptor::Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack); !s.ok()) return s;
  const int64_t uids[3] = {kX, kW, kY};
  void* pointers[3] = {x, w, y};
  for (Status s :
       {Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids),
        Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers),
        Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace),
        Finalize(pack)}) {
    if (!s.ok()) return s;
  }
  CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
  return Status::Ok();
}

// Two events, destroyed with the object.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~EventPair() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

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
  EventPair events;
  CUDA_CHECK(cudaEventCreate(&events.start));
  CUDA_CHECK(cudaEventCreate(&events.stop));
  for (CudnnConv::Plan& p : *plans) {
    for (int rep = 0; rep < 7; ++rep) {
      if (rep == 2) CUDA_CHECK(cudaEventRecord(events.start, stream));
      if (Status st = Run(handle, p, x.data(), w.data(), y.data(), scratch.data()); !st.ok()) {
        return st;
      }
    }
    CUDA_CHECK(cudaEventRecord(events.stop, stream));
    CUDA_CHECK(cudaEventSynchronize(events.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
    p.ms = ms / 5;
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
    const OpNames& names = kOps[static_cast<size_t>(dir)];
    Descriptor op, graph;
    for (Status st :
         {Descriptor::Make(names.type, &op), SetDescriptor(op, names.conv, o.conv),
          Set(op, names.alpha, CUDNN_TYPE_FLOAT, 1, &alpha),
          Set(op, names.beta, CUDNN_TYPE_FLOAT, 1, &beta), SetDescriptor(op, names.x, o.x),
          SetDescriptor(op, names.w, o.w), SetDescriptor(op, names.y, o.y), Finalize(op),
          Descriptor::Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph),
          SetDescriptor(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op),
          Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle),
          Finalize(graph)}) {
      if (!st.ok()) return st;
    }
    std::vector<Plan> plans;
    const size_t limit =
        options.autotune ? static_cast<size_t>(std::max(1, options.max_candidates)) : 1;
    if (Status st = Candidates(handle, graph, options, limit, &plans); !st.ok()) return st;
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
    out +=
        std::string(kOps[static_cast<size_t>(dir)].name) + ": engine " + std::to_string(p->engine);
    for (cudnnBackendNumericalNote_t n : p->notes) {
      if (n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) out += " tensor-core";
      if (n == CUDNN_NUMERICAL_NOTE_WINOGRAD) out += " winograd";
      if (n == CUDNN_NUMERICAL_NOTE_FFT) out += " fft";
    }
    if (p->workspace > 0) out += ", " + std::to_string(p->workspace) + " B workspace";
  }
  return out;
}

Status CudnnConv::Execute(Direction d, void* x, void* w, void* y, void* workspace) const {
  const Plan* p = plans_[d].get();
  if (p == nullptr) return Status::Internal("cudnn: a convolution without its plan");
  return Run(handle_, *p, x, w, y, workspace);
}

Status CudnnConv::Forward(void* y, const void* x, const void* w, void* workspace) const {
  return Execute(kForward, const_cast<void*>(x), const_cast<void*>(w), y, workspace);
}

Status CudnnConv::BackwardData(void* dx, const void* dy, const void* w, void* workspace) const {
  return Execute(kBackwardData, dx, const_cast<void*>(w), const_cast<void*>(dy), workspace);
}

Status CudnnConv::BackwardFilter(void* dw, const void* x, const void* dy, void* workspace) const {
  return Execute(kBackwardFilter, const_cast<void*>(x), dw, const_cast<void*>(dy), workspace);
}

}  // namespace sweep::trainer::cuda
