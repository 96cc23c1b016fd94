// What the trainer's cuDNN operations (cudnn_conv.h, cudnn_norm.h) share of cuDNN 9's graph
// (backend) API: owned descriptors, typed attribute setters, tensors, and plans chosen from the
// engine configurations cuDNN's heuristics rank, then executed over a variant pack.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "cuda/cuda_check.h"

namespace sweep::trainer::cuda::cudnn_graph {

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

Status SetDescriptor(const Descriptor& d, cudnnBackendAttributeName_t name, const Descriptor& v);
Status SetInt64s(const Descriptor& d, cudnnBackendAttributeName_t name,
                 const std::vector<int64_t>& v);
Status Finalize(const Descriptor& d);

// A tensor of `dims` and `strides` (cuDNN's logical order: n, c, h, w); by_value: a scalar the
// variant pack passes by a host pointer, read when the plan executes.
Status Tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
              const std::vector<int64_t>& strides, bool by_value, Descriptor* out);

// A graph of one operation, on `handle`.
Status OneOperationGraph(cudnnHandle_t handle, const Descriptor& op, Descriptor* graph);

// One execution plan and what it was built from: the plan refers to its engine configuration
// and the graph, the graph to the operation.
struct Plan {
  Descriptor op, graph, config, plan;
  int64_t engine = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
  size_t workspace = 0;
  float ms = -1;  // autotune's time per call, when timed
};

// Whether an engine with these numerical notes computes what the caller promises.
using Acceptable = std::function<bool(const std::vector<cudnnBackendNumericalNote_t>&)>;

// The plans that build for `graph`, in the heuristics' order (mode A, then the fallback list
// when A gave none), skipping engines `acceptable` refuses; at most `limit`.
Status Candidates(cudnnHandle_t handle, const Descriptor& graph, const Acceptable& acceptable,
                  size_t limit, std::vector<Plan>* plans);

// Executes `plan` on the handle's stream with the tensors `uids` at `pointers` (inputs and
// outputs alike: the plan knows which it writes).
Status Execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
               const std::vector<const void*>& pointers, void* workspace);

// "engine 12 tensor-core, 4096 B workspace, timed 0.153 ms" (the time when autotune timed it),
// for logs, benchmarks and tests.
std::string DescribePlan(const Plan& p);

}  // namespace sweep::trainer::cuda::cudnn_graph
