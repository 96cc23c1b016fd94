// The emulator's cuDNN graph API (include/cudnn.h says what it models): typed descriptors with
// cuDNN's checks, four engines for a convolution, and convolutions computed on the host in the
// handle's stream.
#include "cudnn.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "emu_streams.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace {

struct Desc;

struct Attr {
  cudnnBackendAttributeType_t type;
  int64_t count = 0;
  std::vector<unsigned char> bytes;
  template <typename T>
  T at(int64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
  }
};

enum class Op { kForward, kBackwardData, kBackwardFilter };

struct Desc {
  cudnnBackendDescriptorType_t type;
  bool finalized = false;
  std::map<cudnnBackendAttributeName_t, Attr> attrs;
  // Engine configurations and engines, as the heuristics fill them.
  int64_t engine = -1;
  Desc* graph = nullptr;
};

std::mutex mu;  // guards the two sets
std::set<const Desc*> live;
std::set<const cudnnContext*> handles;
thread_local std::string last_error;

std::atomic<int64_t> workspace_bytes{4096};  // engine 0's; cuda_emu::SetConvWorkspace

cudnnStatus_t Fail(cudnnStatus_t status, std::string why) {
  last_error = std::move(why);
  return status;
}

bool Live(const void* d) {
  std::lock_guard<std::mutex> lock(mu);
  return live.count(static_cast<const Desc*>(d)) > 0;
}

size_t ElementSize(cudnnBackendAttributeType_t type) {
  switch (type) {
    case CUDNN_TYPE_DATA_TYPE:
      return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN:
      return sizeof(bool);
    case CUDNN_TYPE_NORM_MODE:
      return sizeof(cudnnBackendNormMode_t);
    case CUDNN_TYPE_NORM_FWD_PHASE:
      return sizeof(cudnnBackendNormFwdPhase_t);
    case CUDNN_TYPE_CONVOLUTION_MODE:
      return sizeof(cudnnConvolutionMode_t);
    case CUDNN_TYPE_HEUR_MODE:
      return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_NUMERICAL_NOTE:
      return sizeof(cudnnBackendNumericalNote_t);
    case CUDNN_TYPE_FLOAT:
      return sizeof(float);
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
      return 8;
  }
  return 8;
}

// The normalization operations' tensor attributes, in the order NormParts keeps them.
constexpr cudnnBackendAttributeName_t kNormForwardTensors[] = {
    CUDNN_ATTR_OPERATION_NORM_FWD_XDESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC,
    CUDNN_ATTR_OPERATION_NORM_FWD_YDESC,
};
constexpr cudnnBackendAttributeName_t kNormBackwardTensors[] = {
    CUDNN_ATTR_OPERATION_NORM_BWD_XDESC,
    CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC,
    CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC,
    CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC,
    CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC,
    CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC,
    CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC,
    CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC,
    CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC,
};

// The type an attribute of a descriptor must be set with, or false when the descriptor has no
// such attribute. Alpha and beta take FLOAT or DOUBLE; `type` is checked against both.
bool Expected(cudnnBackendDescriptorType_t d, cudnnBackendAttributeName_t n,
              cudnnBackendAttributeType_t type, cudnnBackendAttributeType_t* want) {
  struct Row {
    cudnnBackendDescriptorType_t d;
    cudnnBackendAttributeName_t n;
    cudnnBackendAttributeType_t t;
  };
  static const Row rows[] = {
      {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE},
      {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN},
      {CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_NORM_FWD_MODE,
       CUDNN_TYPE_NORM_MODE},
      {CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE,
       CUDNN_TYPE_NORM_FWD_PHASE},
      {CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_NORM_BWD_MODE,
       CUDNN_TYPE_NORM_MODE},
      {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
       CUDNN_TYPE_DATA_TYPE},
      {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
       CUDNN_TYPE_CONVOLUTION_MODE},
      {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
       CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
       CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS,
       CUDNN_TYPE_BACKEND_DESCRIPTOR},
      {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
       CUDNN_TYPE_HANDLE},
      {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
       CUDNN_TYPE_BACKEND_DESCRIPTOR},
      {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE},
      {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
       CUDNN_TYPE_HANDLE},
      {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
       CUDNN_TYPE_BACKEND_DESCRIPTOR},
      {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64},
      {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
       CUDNN_TYPE_VOID_PTR},
      {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
       CUDNN_TYPE_VOID_PTR},
  };
  for (const Row& r : rows) {
    if (r.d == d && r.n == n) {
      *want = r.t;
      return true;
    }
  }
  // The three convolution operations' attributes: conv, alpha, beta and three tensors.
  static const struct {
    cudnnBackendDescriptorType_t d;
    cudnnBackendAttributeName_t conv, alpha, beta, a, b, c;
  } ops[] = {
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
  };
  // The normalization operations' tensors.
  if (d == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR) {
    for (cudnnBackendAttributeName_t a : kNormForwardTensors) {
      if (n == a || n == CUDNN_ATTR_OPERATION_NORM_FWD_PEER_STAT_DESCS) {
        *want = CUDNN_TYPE_BACKEND_DESCRIPTOR;
        return true;
      }
    }
  }
  if (d == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR) {
    for (cudnnBackendAttributeName_t a : kNormBackwardTensors) {
      if (n == a || n == CUDNN_ATTR_OPERATION_NORM_BWD_PEER_STAT_DESCS) {
        *want = CUDNN_TYPE_BACKEND_DESCRIPTOR;
        return true;
      }
    }
  }
  for (const auto& o : ops) {
    if (o.d != d) continue;
    if (n == o.alpha || n == o.beta) {
      *want = type == CUDNN_TYPE_DOUBLE ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
      return true;
    }
    if (n == o.conv || n == o.a || n == o.b || n == o.c) {
      *want = CUDNN_TYPE_BACKEND_DESCRIPTOR;
      return true;
    }
  }
  return false;
}

const Attr* Find(const Desc* d, cudnnBackendAttributeName_t n) {
  auto it = d->attrs.find(n);
  return it == d->attrs.end() ? nullptr : &it->second;
}

std::vector<int64_t> Int64s(const Attr* a) {
  std::vector<int64_t> v;
  for (int64_t i = 0; a != nullptr && i < a->count; ++i) v.push_back(a->at<int64_t>(i));
  return v;
}

Desc* DescAt(const Desc* d, cudnnBackendAttributeName_t n) {
  const Attr* a = Find(d, n);
  return a == nullptr ? nullptr : static_cast<Desc*>(a->at<void*>(0));
}

// Whether a convolution operation's FLOAT or DOUBLE attribute is its alpha (else its beta).
bool IsAlpha(cudnnBackendAttributeName_t name) {
  return name == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA ||
         name == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA ||
         name == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
}

// A convolution operation's parts, in the roles x (the image), w (the filter) and y (the
// output), whichever gradient the operation computes.
struct ConvParts {
  Op op;
  const Desc *conv, *x, *w, *y;
  double alpha, beta;
};

bool PartsOf(const Desc* d, ConvParts* p) {
  switch (d->type) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      *p = {Op::kForward,
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y),
            0,
            0};
      break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      *p = {Op::kBackwardData,
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY),
            0,
            0};
      break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      *p = {Op::kBackwardFilter,
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW),
            DescAt(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY),
            0,
            0};
      break;
    default:
      return false;
  }
  for (const auto& [name, attr] : d->attrs) {
    if (attr.type != CUDNN_TYPE_FLOAT && attr.type != CUDNN_TYPE_DOUBLE) continue;
    const double v = attr.type == CUDNN_TYPE_FLOAT ? double{attr.at<float>(0)} : attr.at<double>(0);
    const bool is_alpha = IsAlpha(name);
    (is_alpha ? p->alpha : p->beta) = v;
  }
  return true;
}

cudnnStatus_t Require(const Desc* d, std::initializer_list<cudnnBackendAttributeName_t> names,
                      const char* what) {
  for (cudnnBackendAttributeName_t n : names) {
    if (Find(d, n) == nullptr) {
      return Fail(CUDNN_STATUS_BAD_PARAM, std::string(what) +
                                              ": a required attribute is not set (" +
                                              std::to_string(static_cast<int>(n)) + ")");
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t FinalizeTensor(const Desc* d) {
  if (cudnnStatus_t s = Require(
          d,
          {CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_ATTR_TENSOR_STRIDES,
           CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT},
          "tensor");
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  const std::vector<int64_t> dims = Int64s(Find(d, CUDNN_ATTR_TENSOR_DIMENSIONS));
  const std::vector<int64_t> strides = Int64s(Find(d, CUDNN_ATTR_TENSOR_STRIDES));
  if (dims.size() != strides.size() || dims.size() < 3 || dims.size() > 8) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "tensor: dimensions and strides differ in length");
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1 || strides[i] < 1) {
      return Fail(CUDNN_STATUS_BAD_PARAM, "tensor: a dimension or stride below 1");
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t FinalizeConvolution(const Desc* d) {
  if (cudnnStatus_t s =
          Require(d,
                  {CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                   CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_ATTR_CONVOLUTION_DILATIONS,
                   CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
                   CUDNN_ATTR_CONVOLUTION_POST_PADDINGS},
                  "convolution");
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  const int64_t dims = Find(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS)->at<int64_t>(0);
  for (cudnnBackendAttributeName_t n :
       {CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
        CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS}) {
    if (Find(d, n)->count != dims) {
      return Fail(CUDNN_STATUS_BAD_PARAM, "convolution: an array's length is not spatial dims");
    }
  }
  if (dims != 2) return Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: 2-D convolutions only");
  for (int64_t v : Int64s(Find(d, CUDNN_ATTR_CONVOLUTION_DILATIONS))) {
    if (v != 1) return Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: dilation 1 only");
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t FinalizeOperation(const Desc* d) {
  ConvParts p;
  PartsOf(d, &p);
  if (p.conv == nullptr || p.x == nullptr || p.w == nullptr || p.y == nullptr) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "convolution operation: a descriptor is not set");
  }
  bool alpha = false, beta = false;
  for (const auto& [name, attr] : d->attrs) {
    if (attr.type == CUDNN_TYPE_FLOAT || attr.type == CUDNN_TYPE_DOUBLE) {
      const bool is_alpha = IsAlpha(name);
      (is_alpha ? alpha : beta) = true;
    }
  }
  if (!alpha || !beta) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "convolution operation: alpha or beta is not set");
  }
  const std::vector<int64_t> x = Int64s(Find(p.x, CUDNN_ATTR_TENSOR_DIMENSIONS));
  const std::vector<int64_t> w = Int64s(Find(p.w, CUDNN_ATTR_TENSOR_DIMENSIONS));
  const std::vector<int64_t> y = Int64s(Find(p.y, CUDNN_ATTR_TENSOR_DIMENSIONS));
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) {
    return Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: 4-D tensors only");
  }
  const std::vector<int64_t> stride = Int64s(Find(p.conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES));
  const std::vector<int64_t> pre = Int64s(Find(p.conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS));
  const std::vector<int64_t> post = Int64s(Find(p.conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS));
  bool ok = x[0] == y[0] && x[1] == w[1] && w[0] == y[1];
  for (size_t i = 0; i < 2; ++i) {
    ok = ok && y[2 + i] == (x[2 + i] + pre[i] + post[i] - w[2 + i]) / stride[i] + 1;
  }
  if (!ok) {
    return Fail(CUDNN_STATUS_BAD_PARAM,
                "convolution operation: the output's dimensions do not follow from the input's, "
                "the filter's and the convolution's");
  }
  const auto type = [](const Desc* t) {
    return Find(t, CUDNN_ATTR_TENSOR_DATA_TYPE)->at<cudnnDataType_t>(0);
  };
  if (type(p.x) != type(p.w) || type(p.w) != type(p.y)) {
    return Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: one data type for the three tensors");
  }
  const auto uid = [](const Desc* t) {
    return Find(t, CUDNN_ATTR_TENSOR_UNIQUE_ID)->at<int64_t>(0);
  };
  if (uid(p.x) == uid(p.w) || uid(p.w) == uid(p.y) || uid(p.x) == uid(p.y)) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "convolution operation: two tensors share a unique id");
  }
  if (Find(p.conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE)->at<cudnnDataType_t>(0) != CUDNN_DATA_FLOAT) {
    return Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: fp32 accumulation only");
  }
  return CUDNN_STATUS_SUCCESS;
}

bool IsNorm(const Desc* op) {
  return op != nullptr && (op->type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR ||
                           op->type == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
}

bool ByValue(const Desc* t) {
  const Attr* a = Find(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
  return a != nullptr && a->at<bool>(0);
}

// A batch norm operation's tensors, null where not set: forward x, scale, bias, epsilon,
// momentum, running mean and variance in and out, mean, inverse std, y; backward x, dy, scale,
// mean, inverse std, epsilon, dscale, dbias, dx.
struct NormParts {
  bool forward = false;
  std::vector<const Desc*> t;
};

NormParts NormPartsOf(const Desc* d) {
  NormParts p;
  p.forward = d->type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR;
  if (p.forward) {
    for (cudnnBackendAttributeName_t n : kNormForwardTensors) p.t.push_back(DescAt(d, n));
  } else {
    for (cudnnBackendAttributeName_t n : kNormBackwardTensors) p.t.push_back(DescAt(d, n));
  }
  return p;
}

// Forward: NormParts::t's positions.
constexpr size_t kFx = 0, kFscale = 1, kFbias = 2, kFeps = 3, kFmomentum = 4, kFrmIn = 5,
                 kFrvIn = 6, kFrmOut = 7, kFrvOut = 8, kFmean = 9, kFinv = 10, kFy = 11;
// Backward.
constexpr size_t kBx = 0, kBdy = 1, kBscale = 2, kBmean = 3, kBinv = 4, kBeps = 5, kBdscale = 6,
                 kBdbias = 7, kBdx = 8;

cudnnStatus_t FinalizeNorm(const Desc* d) {
  const bool forward = d->type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR;
  const cudnnBackendAttributeName_t mode_name =
      forward ? CUDNN_ATTR_OPERATION_NORM_FWD_MODE : CUDNN_ATTR_OPERATION_NORM_BWD_MODE;
  const Attr* mode = Find(d, mode_name);
  if (mode == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "norm operation: no mode");
  if (mode->at<cudnnBackendNormMode_t>(0) != CUDNN_BATCH_NORM) {
    return Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: batch norm only");
  }
  const NormParts p = NormPartsOf(d);
  std::vector<size_t> required;
  if (forward) {
    const Attr* phase = Find(d, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE);
    if (phase == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "norm forward: no phase");
    if (phase->at<cudnnBackendNormFwdPhase_t>(0) != CUDNN_NORM_FWD_TRAINING) {
      return Fail(CUDNN_STATUS_NOT_SUPPORTED,
                  "batch norm's inference phase is not in the graph API");
    }
    required = {kFx, kFscale, kFbias, kFeps, kFmean, kFinv, kFy};
    // The running statistics come all four with the momentum, or not at all.
    const int running = (p.t[kFrmIn] != nullptr) + (p.t[kFrvIn] != nullptr) +
                        (p.t[kFrmOut] != nullptr) + (p.t[kFrvOut] != nullptr) +
                        (p.t[kFmomentum] != nullptr);
    if (running != 0 && running != 5) {
      return Fail(CUDNN_STATUS_BAD_PARAM,
                  "norm forward: running statistics in and out need each other and the momentum");
    }
  } else {
    required = {kBx, kBdy, kBscale, kBmean, kBinv, kBdscale, kBdbias, kBdx};
  }
  for (size_t i : required) {
    if (p.t[i] == nullptr) {
      return Fail(CUDNN_STATUS_BAD_PARAM, "norm operation: a required tensor is not set");
    }
  }
  const Desc* x = p.t[forward ? kFx : kBx];
  const std::vector<int64_t> xd = Int64s(Find(x, CUDNN_ATTR_TENSOR_DIMENSIONS));
  if (xd.size() != 4) return Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: 4-D tensors only");
  std::set<int64_t> uids;
  size_t set = 0;
  for (size_t i = 0; i < p.t.size(); ++i) {
    const Desc* t = p.t[i];
    if (t == nullptr) continue;
    ++set;
    uids.insert(Find(t, CUDNN_ATTR_TENSOR_UNIQUE_ID)->at<int64_t>(0));
    if (Find(t, CUDNN_ATTR_TENSOR_DATA_TYPE)->at<cudnnDataType_t>(0) != CUDNN_DATA_FLOAT) {
      return Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: fp32 batch norm only");
    }
    const std::vector<int64_t> dims = Int64s(Find(t, CUDNN_ATTR_TENSOR_DIMENSIONS));
    const bool scalar = forward ? (i == kFeps || i == kFmomentum) : i == kBeps;
    const bool per_row = forward ? (i == kFx || i == kFy) : (i == kBx || i == kBdy || i == kBdx);
    std::vector<int64_t> want = {1, xd[1], 1, 1};
    if (scalar) want = {1, 1, 1, 1};
    if (per_row) want = xd;
    if (dims != want) {
      return Fail(CUDNN_STATUS_BAD_PARAM, "norm operation: a tensor's dimensions do not fit x's");
    }
    if (scalar != ByValue(t)) {
      return Fail(CUDNN_STATUS_BAD_PARAM,
                  "norm operation: epsilon and the momentum are by value, the others are not");
    }
  }
  if (uids.size() != set) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "norm operation: two tensors share a unique id");
  }
  return CUDNN_STATUS_SUCCESS;
}

// The graph's one operation (the emulator's graphs hold one convolution or batch norm).
const Desc* OpOf(const Desc* graph) {
  return graph == nullptr ? nullptr : DescAt(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
}

std::vector<cudnnBackendNumericalNote_t> Notes(int64_t engine) {
  switch (engine) {
    case 0:
      return {CUDNN_NUMERICAL_NOTE_TENSOR_CORE};
    case 1:
    case 5:
      return {CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC};
    default:
      return {};
  }
}

// Batch norm's engine 6 asks for this much workspace, and overwrites it.
constexpr size_t kNormWorkspace = 256;

std::vector<int64_t> Ranking(cudnnBackendHeurMode_t mode, bool norm) {
  if (norm) {
    if (mode == CUDNN_HEUR_MODE_FALLBACK) return {};
    return {5, 6};
  }
  if (mode == CUDNN_HEUR_MODE_FALLBACK) return {2};
  return {1, 3, 0, 2};
}

// Reads element i of a tensor of `type` as a float (TF32-rounded when tf32 and fp32).
double Read(const void* p, int64_t i, cudnnDataType_t type, bool tf32) {
  if (type == CUDNN_DATA_FLOAT) {
    const float x = static_cast<const float*>(p)[i];
    return tf32 ? cuda_emu::RoundTf32(x) : x;
  }
  return cuda_emu::WidenHalf(static_cast<const uint16_t*>(p)[i], type == CUDNN_DATA_BFLOAT16);
}

void Write(void* p, int64_t i, cudnnDataType_t type, float v) {
  if (type == CUDNN_DATA_FLOAT) {
    static_cast<float*>(p)[i] = v;
  } else if (type == CUDNN_DATA_BFLOAT16) {
    static_cast<uint16_t*>(p)[i] = __bfloat16_as_ushort(__float2bfloat16(v));
  } else {
    static_cast<uint16_t*>(p)[i] = __half_as_ushort(__float2half(v));
  }
}

struct Tensor {
  std::vector<int64_t> dims, strides;
  cudnnDataType_t type;
  void* data;
  int64_t at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3];
  }
  int64_t elements() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
};

Tensor Bind(const Desc* t, void* data) {
  return {Int64s(Find(t, CUDNN_ATTR_TENSOR_DIMENSIONS)), Int64s(Find(t, CUDNN_ATTR_TENSOR_STRIDES)),
          Find(t, CUDNN_ATTR_TENSOR_DATA_TYPE)->at<cudnnDataType_t>(0), data};
}

// The convolution, in double: x [N, C, H, W], w [K, C, R, S], y [N, K, P, Q] in cuDNN's
// logical order, each element placed by its tensor's strides. The operation's output (y,
// x for backward data, w for backward filter) = alpha * result + beta * itself.
void Convolve(Op op, const Tensor& x, const Tensor& w, const Tensor& y, int64_t stride_h,
              int64_t stride_w, int64_t pad_h, int64_t pad_w, double alpha, double beta,
              bool tf32) {
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const int64_t K = w.dims[0], R = w.dims[2], S = w.dims[3], P = y.dims[2], Q = y.dims[3];
  const Tensor& out = op == Op::kForward ? y : op == Op::kBackwardData ? x : w;
  std::vector<double> acc(static_cast<size_t>(out.elements()), 0.0);
  // acc's own index, in the logical order of out's dimensions.
  const auto index = [&out](int64_t a, int64_t b, int64_t c, int64_t d) {
    return static_cast<size_t>(((a * out.dims[1] + b) * out.dims[2] + c) * out.dims[3] + d);
  };
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t q = 0; q < Q; ++q) {
          for (int64_t r = 0; r < R; ++r) {
            const int64_t h = p * stride_h - pad_h + r;
            if (h < 0 || h >= H) continue;
            for (int64_t s = 0; s < S; ++s) {
              const int64_t ww = q * stride_w - pad_w + s;
              if (ww < 0 || ww >= W) continue;
              for (int64_t c = 0; c < C; ++c) {
                // Each direction reads its two inputs only (its output may hold anything).
                const auto wv = [&] { return Read(w.data, w.at(k, c, r, s), w.type, tf32); };
                switch (op) {
                  case Op::kForward:
                    acc[index(n, k, p, q)] += Read(x.data, x.at(n, c, h, ww), x.type, tf32) * wv();
                    break;
                  case Op::kBackwardData:
                    acc[index(n, c, h, ww)] += Read(y.data, y.at(n, k, p, q), y.type, tf32) * wv();
                    break;
                  case Op::kBackwardFilter:
                    acc[index(k, c, r, s)] += Read(y.data, y.at(n, k, p, q), y.type, tf32) *
                                              Read(x.data, x.at(n, c, h, ww), x.type, tf32);
                    break;
                }
              }
            }
          }
        }
      }
    }
  }
  for (int64_t a = 0; a < out.dims[0]; ++a) {
    for (int64_t b = 0; b < out.dims[1]; ++b) {
      for (int64_t c = 0; c < out.dims[2]; ++c) {
        for (int64_t d = 0; d < out.dims[3]; ++d) {
          const int64_t at = out.at(a, b, c, d);
          // beta == 0: the output is not read (it may hold NaN).
          const double old = beta == 0 ? 0.0 : beta * Read(out.data, at, out.type, false);
          Write(out.data, at, out.type, static_cast<float>(alpha * acc[index(a, b, c, d)] + old));
        }
      }
    }
  }
}

// Batch norm over x [N, C, H, W] per channel, in double. Forward (training): the batch's mean
// and biased variance; y = scale * (x - mean) * invstd + bias, invstd = 1 / sqrt(var + eps);
// the running statistics, when given, move by the momentum towards the mean and the unbiased
// variance. Backward: dbias = sum dy, dscale = sum dy * xhat, dx = scale * invstd * (dy -
// (dbias + xhat * dscale) / count).
void Normalize(bool forward, const std::vector<Tensor>& t, double eps, double momentum) {
  const Tensor& x = t[forward ? kFx : kBx];
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const auto count = static_cast<double>(N * H * W);
  const auto channel = [](const Tensor& v, int64_t c) { return v.at(0, c, 0, 0); };
  const auto each = [&](const auto& fn) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t w = 0; w < W; ++w) fn(n, h, w);
      }
    }
  };
  for (int64_t c = 0; c < C; ++c) {
    if (forward) {
      double sum = 0, squares = 0;
      each([&](int64_t n, int64_t h, int64_t w) {
        sum += Read(x.data, x.at(n, c, h, w), x.type, false);
      });
      const double mean = sum / count;
      each([&](int64_t n, int64_t h, int64_t w) {
        const double d = Read(x.data, x.at(n, c, h, w), x.type, false) - mean;
        squares += d * d;
      });
      const double var = squares / count;
      const double inv = 1 / std::sqrt(var + eps);
      const double scale = Read(t[kFscale].data, channel(t[kFscale], c), CUDNN_DATA_FLOAT, false);
      const double bias = Read(t[kFbias].data, channel(t[kFbias], c), CUDNN_DATA_FLOAT, false);
      const Tensor& y = t[kFy];
      each([&](int64_t n, int64_t h, int64_t w) {
        const double v = Read(x.data, x.at(n, c, h, w), x.type, false);
        Write(y.data, y.at(n, c, h, w), y.type,
              static_cast<float>(scale * (v - mean) * inv + bias));
      });
      Write(t[kFmean].data, channel(t[kFmean], c), CUDNN_DATA_FLOAT, static_cast<float>(mean));
      Write(t[kFinv].data, channel(t[kFinv], c), CUDNN_DATA_FLOAT, static_cast<float>(inv));
      if (t[kFrmIn].data != nullptr) {
        const double unbiased = count > 1 ? squares / (count - 1) : var;
        const double rm = Read(t[kFrmIn].data, channel(t[kFrmIn], c), CUDNN_DATA_FLOAT, false);
        const double rv = Read(t[kFrvIn].data, channel(t[kFrvIn], c), CUDNN_DATA_FLOAT, false);
        Write(t[kFrmOut].data, channel(t[kFrmOut], c), CUDNN_DATA_FLOAT,
              static_cast<float>((1 - momentum) * rm + momentum * mean));
        Write(t[kFrvOut].data, channel(t[kFrvOut], c), CUDNN_DATA_FLOAT,
              static_cast<float>((1 - momentum) * rv + momentum * unbiased));
      }
      continue;
    }
    const Tensor &dy = t[kBdy], &dx = t[kBdx];
    const double mean = Read(t[kBmean].data, channel(t[kBmean], c), CUDNN_DATA_FLOAT, false);
    const double inv = Read(t[kBinv].data, channel(t[kBinv], c), CUDNN_DATA_FLOAT, false);
    const double scale = Read(t[kBscale].data, channel(t[kBscale], c), CUDNN_DATA_FLOAT, false);
    double dbias = 0, dscale = 0;
    each([&](int64_t n, int64_t h, int64_t w) {
      const double g = Read(dy.data, dy.at(n, c, h, w), dy.type, false);
      dbias += g;
      dscale += g * (Read(x.data, x.at(n, c, h, w), x.type, false) - mean) * inv;
    });
    each([&](int64_t n, int64_t h, int64_t w) {
      const double g = Read(dy.data, dy.at(n, c, h, w), dy.type, false);
      const double xhat = (Read(x.data, x.at(n, c, h, w), x.type, false) - mean) * inv;
      Write(dx.data, dx.at(n, c, h, w), dx.type,
            static_cast<float>(scale * inv * (g - (dbias + xhat * dscale) / count)));
    });
    Write(t[kBdscale].data, channel(t[kBdscale], c), CUDNN_DATA_FLOAT, static_cast<float>(dscale));
    Write(t[kBdbias].data, channel(t[kBdbias], c), CUDNN_DATA_FLOAT, static_cast<float>(dbias));
  }
}

}  // namespace

size_t cudnnGetVersion() { return 90000; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR:
      return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  std::strncpy(message, last_error.c_str(), max_size - 1);
  message[max_size - 1] = '\0';
  last_error.clear();
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: null");
  *handle = new cudnnContext();
  std::lock_guard<std::mutex> lock(mu);
  handles.insert(*handle);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  std::lock_guard<std::mutex> lock(mu);
  if (handles.erase(handle) == 0) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: no handle");
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu);
  if (handles.count(handle) == 0) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: no handle");
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  std::lock_guard<std::mutex> lock(mu);
  if (handles.count(handle) == 0 || stream == nullptr) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: no handle");
  }
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "create: null");
  Desc* d = new Desc();
  d->type = type;
  std::lock_guard<std::mutex> lock(mu);
  live.insert(d);
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  std::lock_guard<std::mutex> lock(mu);
  Desc* d = static_cast<Desc*>(descriptor);
  if (live.erase(d) == 0) return Fail(CUDNN_STATUS_BAD_PARAM, "destroy: not a live descriptor");
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* values) {
  if (!Live(descriptor)) return Fail(CUDNN_STATUS_BAD_PARAM, "set: not a live descriptor");
  Desc* d = static_cast<Desc*>(descriptor);
  if (d->finalized) return Fail(CUDNN_STATUS_BAD_PARAM, "set: the descriptor is finalized");
  cudnnBackendAttributeType_t want;
  if (!Expected(d->type, name, type, &want)) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "set: the descriptor has no such attribute");
  }
  if (type != want) return Fail(CUDNN_STATUS_BAD_PARAM, "set: the attribute's type is wrong");
  if (count < 1 || values == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "set: no values");
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    for (int64_t i = 0; i < count; ++i) {
      const void* v = static_cast<void* const*>(values)[i];
      if (!Live(v) || !static_cast<const Desc*>(v)->finalized) {
        return Fail(CUDNN_STATUS_BAD_PARAM, "set: a descriptor value is not finalized");
      }
    }
  }
  if (type == CUDNN_TYPE_HANDLE) {
    std::lock_guard<std::mutex> lock(mu);
    if (handles.count(*static_cast<cudnnContext* const*>(values)) == 0) {
      return Fail(CUDNN_STATUS_BAD_PARAM, "set: not a live handle");
    }
  }
  Attr a{type, count, {}};
  const auto* bytes = static_cast<const unsigned char*>(values);
  a.bytes.assign(bytes, bytes + static_cast<size_t>(count) * ElementSize(type));
  d->attrs[name] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  if (!Live(descriptor)) return Fail(CUDNN_STATUS_BAD_PARAM, "finalize: not a live descriptor");
  Desc* d = static_cast<Desc*>(descriptor);
  if (d->finalized) return Fail(CUDNN_STATUS_BAD_PARAM, "finalize: already finalized");
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      s = FinalizeTensor(d);
      break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
      s = FinalizeConvolution(d);
      break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      s = FinalizeOperation(d);
      break;
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR:
      s = FinalizeNorm(d);
      break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      s = Require(d, {CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_ATTR_OPERATIONGRAPH_HANDLE}, "graph");
      if (s == CUDNN_STATUS_SUCCESS && Find(d, CUDNN_ATTR_OPERATIONGRAPH_OPS)->count != 1) {
        s = Fail(CUDNN_STATUS_NOT_SUPPORTED, "emulator: graphs of one operation only");
      }
      break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      s = Require(d, {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_ATTR_ENGINEHEUR_MODE},
                  "heuristics");
      break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      s = Require(d, {CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG},
                  "execution plan");
      if (s != CUDNN_STATUS_SUCCESS) break;
      const Desc* config = DescAt(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
      if (config->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) {
        s = Fail(CUDNN_STATUS_BAD_PARAM, "execution plan: not an engine configuration");
      } else if (config->engine == 3) {
        s = Fail(CUDNN_STATUS_NOT_SUPPORTED, "engine 3 supports no convolution here");
      } else if (IsNorm(OpOf(config->graph)) != (config->engine >= 5)) {
        s = Fail(CUDNN_STATUS_NOT_SUPPORTED, "the engine runs another kind of operation");
      } else if (config->engine == 6 && Int64s(Find(NormPartsOf(OpOf(config->graph)).t[0],
                                                    CUDNN_ATTR_TENSOR_DIMENSIONS))[1] %
                                                4 !=
                                            0) {
        s = Fail(CUDNN_STATUS_NOT_SUPPORTED, "engine 6: fp32 channels must be a multiple of 4");
      } else {
        d->engine = config->engine;
        d->graph = config->graph;
      }
      break;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
      s = Require(d,
                  {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                   CUDNN_ATTR_VARIANT_PACK_WORKSPACE},
                  "variant pack");
      if (s == CUDNN_STATUS_SUCCESS && Find(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)->count !=
                                           Find(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->count) {
        s = Fail(CUDNN_STATUS_BAD_PARAM, "variant pack: as many ids as pointers");
      }
      break;
    }
    default:
      s = Fail(CUDNN_STATUS_BAD_PARAM, "finalize: this descriptor is filled by cuDNN");
  }
  if (s == CUDNN_STATUS_SUCCESS) d->finalized = true;
  return s;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* count, void* values) {
  if (!Live(descriptor)) return Fail(CUDNN_STATUS_BAD_PARAM, "get: not a live descriptor");
  const Desc* d = static_cast<const Desc*>(descriptor);
  if (!d->finalized) return Fail(CUDNN_STATUS_BAD_PARAM, "get: the descriptor is not finalized");
  if (count == nullptr || requested < 0 || (requested > 0 && values == nullptr)) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "get: no room for the values");
  }
  const auto fill = [&](cudnnBackendAttributeType_t want, int64_t engine, const Desc* graph,
                        cudnnBackendDescriptorType_t filled_type) -> cudnnStatus_t {
    if (type != want || requested < 1) return Fail(CUDNN_STATUS_BAD_PARAM, "get: wrong request");
    Desc* out = static_cast<Desc**>(values)[0];
    if (!Live(out) || out->type != filled_type || out->finalized) {
      return Fail(CUDNN_STATUS_BAD_PARAM, "get: the descriptor to fill is not a fresh one");
    }
    out->engine = engine;
    out->graph = const_cast<Desc*>(graph);
    out->finalized = true;
    *count = 1;
    return CUDNN_STATUS_SUCCESS;
  };
  switch (name) {
    case CUDNN_ATTR_ENGINEHEUR_RESULTS: {
      if (d->type != CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR || type != CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        return Fail(CUDNN_STATUS_BAD_PARAM, "get: wrong request");
      }
      const Desc* graph = DescAt(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
      const std::vector<int64_t> ranking = Ranking(
          Find(d, CUDNN_ATTR_ENGINEHEUR_MODE)->at<cudnnBackendHeurMode_t>(0), IsNorm(OpOf(graph)));
      const int64_t n = std::min<int64_t>(requested, static_cast<int64_t>(ranking.size()));
      if (requested == 0) {
        *count = static_cast<int64_t>(ranking.size());
        return CUDNN_STATUS_SUCCESS;
      }
      for (int64_t i = 0; i < n; ++i) {
        Desc* out = static_cast<Desc**>(values)[i];
        if (!Live(out) || out->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR || out->finalized) {
          return Fail(CUDNN_STATUS_BAD_PARAM, "get: results need fresh engine configurations");
        }
        out->engine = ranking[static_cast<size_t>(i)];
        out->graph = const_cast<Desc*>(graph);
        out->finalized = true;
      }
      *count = n;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_ENGINECFG_ENGINE:
      if (d->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) break;
      return fill(CUDNN_TYPE_BACKEND_DESCRIPTOR, d->engine, d->graph,
                  CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      if (d->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR || type != CUDNN_TYPE_INT64) break;
      if (requested < 1) break;
      static_cast<int64_t*>(values)[0] = d->engine;
      *count = 1;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: {
      if (d->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR || type != CUDNN_TYPE_NUMERICAL_NOTE) break;
      const std::vector<cudnnBackendNumericalNote_t> notes = Notes(d->engine);
      *count = static_cast<int64_t>(notes.size());
      for (int64_t i = 0; i < std::min(requested, *count); ++i) {
        static_cast<cudnnBackendNumericalNote_t*>(values)[i] = notes[static_cast<size_t>(i)];
      }
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
      if (d->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || type != CUDNN_TYPE_INT64) break;
      if (requested < 1) break;
      static_cast<int64_t*>(values)[0] = d->engine == 0   ? workspace_bytes.load()
                                         : d->engine == 6 ? static_cast<int64_t>(kNormWorkspace)
                                                          : 0;
      *count = 1;
      return CUDNN_STATUS_SUCCESS;
    default:
      break;
  }
  return Fail(CUDNN_STATUS_BAD_PARAM, "get: an attribute the emulator does not give");
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan_desc,
                                  cudnnBackendDescriptor_t pack_desc) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (handles.count(handle) == 0) return Fail(CUDNN_STATUS_BAD_PARAM, "execute: no handle");
  }
  if (!Live(plan_desc) || !Live(pack_desc)) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "execute: the plan or pack is not live");
  }
  const Desc* plan = static_cast<const Desc*>(plan_desc);
  const Desc* pack = static_cast<const Desc*>(pack_desc);
  if (plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !plan->finalized ||
      pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR || !pack->finalized) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "execute: not a finalized plan and pack");
  }
  // Everything the plan was built from must still exist: the graph, its operation, the
  // convolution and the tensors.
  const Desc* graph = plan->graph;
  const Desc* op = Live(graph) ? OpOf(graph) : nullptr;
  const std::vector<int64_t> uids = Int64s(Find(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS));
  const Attr* ptrs = Find(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  const auto pointer = [&](const Desc* t) -> void* {
    const int64_t uid = Find(t, CUDNN_ATTR_TENSOR_UNIQUE_ID)->at<int64_t>(0);
    for (size_t i = 0; i < uids.size(); ++i) {
      if (uids[i] == uid) return ptrs->at<void*>(static_cast<int64_t>(i));
    }
    return nullptr;
  };
  void* workspace = Find(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)->at<void*>(0);
  // As the tensor was declared: an engine may load it in vectors of that many bytes. Measured
  // from its buffer's start, which a GPU aligns to 256 bytes.
  const auto aligned = [](const Desc* t, const void* data) {
    const auto a = static_cast<uint64_t>(Find(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT)->at<int64_t>(0));
    uint64_t offset = reinterpret_cast<uintptr_t>(data);
    cuda_emu::DeviceOffset(data, &offset);
    return a <= 1 || offset % a == 0;
  };
  if (op != nullptr && Live(op) && IsNorm(op)) {
    const NormParts parts = NormPartsOf(op);
    std::vector<Tensor> t;
    double eps = 0, momentum = 0;
    for (size_t i = 0; i < parts.t.size(); ++i) {
      const Desc* d = parts.t[i];
      if (d == nullptr) {
        t.push_back(Tensor{{1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, nullptr});
        continue;
      }
      if (!Live(d)) {
        return Fail(CUDNN_STATUS_BAD_PARAM,
                    "execute: a descriptor the plan was built from has been destroyed");
      }
      void* data = pointer(d);
      if (data == nullptr) {
        return Fail(CUDNN_STATUS_BAD_PARAM, "execute: the pack lacks a tensor's pointer");
      }
      if (ByValue(d)) {  // a host value, read now
        const double v = *static_cast<const float*>(data);
        (i == kFmomentum && parts.forward ? momentum : eps) = v;
        data = nullptr;
      } else if (!aligned(d, data)) {
        return Fail(CUDNN_STATUS_BAD_PARAM,
                    "execute: a tensor's pointer is not as aligned as its descriptor says");
      }
      t.push_back(Bind(d, data));
    }
    if (plan->engine == 6 && workspace == nullptr) {
      return Fail(CUDNN_STATUS_BAD_PARAM, "execute: the plan needs a workspace");
    }
    const int64_t engine = plan->engine;
    const bool forward = parts.forward;
    const bool queued = cuda_emu::Enqueue(handle->stream, [=] {
      if (engine == 6) std::memset(workspace, 0xAB, kNormWorkspace);
      Normalize(forward, t, eps, momentum);
    });
    return queued ? CUDNN_STATUS_SUCCESS
                  : Fail(CUDNN_STATUS_EXECUTION_FAILED, "execute: the stream is gone");
  }
  ConvParts p;
  if (op == nullptr || !Live(op) || !PartsOf(op, &p) || !Live(p.conv) || !Live(p.x) || !Live(p.w) ||
      !Live(p.y)) {
    return Fail(CUDNN_STATUS_BAD_PARAM,
                "execute: a descriptor the plan was built from has been destroyed");
  }
  const Tensor x = Bind(p.x, pointer(p.x)), w = Bind(p.w, pointer(p.w)),
               y = Bind(p.y, pointer(p.y));
  if (x.data == nullptr || w.data == nullptr || y.data == nullptr) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "execute: the pack lacks a tensor's pointer");
  }
  if (!aligned(p.x, x.data) || !aligned(p.w, w.data) || !aligned(p.y, y.data)) {
    return Fail(CUDNN_STATUS_BAD_PARAM,
                "execute: a tensor's pointer is not as aligned as its descriptor says");
  }
  const int64_t engine = plan->engine;
  if (engine == 0 && workspace == nullptr) {
    return Fail(CUDNN_STATUS_BAD_PARAM, "execute: the plan needs a workspace");
  }
  const std::vector<int64_t> stride = Int64s(Find(p.conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES));
  const std::vector<int64_t> pad = Int64s(Find(p.conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS));
  const bool tf32 = engine == 0;  // tensor cores read fp32 as TF32
  const auto used = static_cast<size_t>(workspace_bytes.load());
  const bool queued = cuda_emu::Enqueue(handle->stream, [=] {
    // The engine uses its workspace: a buffer smaller than the plan asked for faults here.
    if (engine == 0) std::memset(workspace, 0xAB, used);
    Convolve(p.op, x, w, y, stride[0], stride[1], pad[0], pad[1], p.alpha, p.beta, tf32);
  });
  return queued ? CUDNN_STATUS_SUCCESS
                : Fail(CUDNN_STATUS_EXECUTION_FAILED, "execute: the stream is gone");
}

int64_t cuda_emu::SetConvWorkspace(int64_t bytes) { return workspace_bytes.exchange(bytes); }
