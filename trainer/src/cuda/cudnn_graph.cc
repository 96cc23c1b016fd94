#include "cuda/cudnn_graph.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace sweep::trainer::cuda::cudnn_graph {
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

}  // namespace

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

Status Tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
              const std::vector<int64_t>& strides, bool by_value, Descriptor* out) {
  Descriptor d;
  if (Status s = Descriptor::Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d); !s.ok()) return s;
  // cudaMalloc's buffers and the parameters' 64-byte offsets are at least this aligned.
  const int64_t alignment = 16;
  for (Status s : {Set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type),
                   SetInt64s(d, CUDNN_ATTR_TENSOR_DIMENSIONS, dims),
                   SetInt64s(d, CUDNN_ATTR_TENSOR_STRIDES, strides),
                   Set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                   Set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment)}) {
    if (!s.ok()) return s;
  }
  if (by_value) {
    const bool yes = true;
    if (Status s = Set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes); !s.ok()) {
      return s;
    }
  }
  if (Status s = Finalize(d); !s.ok()) return s;
  *out = std::move(d);
  return Status::Ok();
}

Status OneOperationGraph(cudnnHandle_t handle, const Descriptor& op, Descriptor* graph) {
  Descriptor g;
  for (Status s :
       {Descriptor::Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g),
        SetDescriptor(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, op),
        Set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle), Finalize(g)}) {
    if (!s.ok()) return s;
  }
  *graph = std::move(g);
  return Status::Ok();
}

Status Candidates(cudnnHandle_t handle, const Descriptor& graph, const Acceptable& acceptable,
                  size_t limit, std::vector<Plan>* plans) {
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs;
    if (Status s = Heuristics(graph, mode, &configs); !s.ok()) {
      if (mode == CUDNN_HEUR_MODE_A) continue;  // the fallback list may still have one
      return s;
    }
    for (Descriptor& config : configs) {
      Plan p;
      if (Status s = EngineOf(config, &p.engine, &p.notes); !s.ok()) return s;
      if (!acceptable(p.notes)) continue;
      bool seen = false;
      for (const Plan& q : *plans) seen = seen || q.engine == p.engine;
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

Status Execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
               const std::vector<const void*>& pointers, void* workspace) {
  Descriptor pack;
  if (Status s = Descriptor::Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack); !s.ok()) return s;
  const auto n = static_cast<int64_t>(uids.size());
  for (Status s :
       {Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data()),
        Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data()),
        Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace),
        Finalize(pack)}) {
    if (!s.ok()) return s;
  }
  CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
  return Status::Ok();
}

std::string DescribePlan(const Plan& p) {
  std::string out = "engine " + std::to_string(p.engine);
  for (cudnnBackendNumericalNote_t n : p.notes) {
    if (n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) out += " tensor-core";
    if (n == CUDNN_NUMERICAL_NOTE_WINOGRAD) out += " winograd";
    if (n == CUDNN_NUMERICAL_NOTE_FFT) out += " fft";
  }
  if (p.workspace > 0) out += ", " + std::to_string(p.workspace) + " B workspace";
  if (p.ms >= 0) {
    char timed[48];
    std::snprintf(timed, sizeof timed, ", timed %.3f ms", static_cast<double>(p.ms));
    out += timed;
  }
  return out;
}

}  // namespace sweep::trainer::cuda::cudnn_graph
