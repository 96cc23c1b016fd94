// The backend registry: the one file that knows which backends were compiled in. Owned by the
// trainer; the list is built once and is read-only after, so it is safe from any thread.
#include "backend.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cpu/cpu_backend.h"
#include "trainer/trainer.h"
#if defined(SWEEP_TRAINER_CUDA)
#include "cuda/cuda_backend.h"
#include "cuda/device_arch.h"
#endif

namespace sweep::trainer {

Status CheckModelState(const ModelState& state, size_t num_params, size_t optimizer_buffers,
                       size_t num_stats) {
  if (state.params.size() != num_params) {
    return Status::InvalidArgument("model state has " + std::to_string(state.params.size()) +
                                   " parameters, the model " + std::to_string(num_params));
  }
  if (!state.optimizer.empty() && state.optimizer.size() != optimizer_buffers) {
    return Status::InvalidArgument("optimizer state has " + std::to_string(state.optimizer.size()) +
                                   " buffers, the optimizer " + std::to_string(optimizer_buffers));
  }
  for (const std::vector<float>& o : state.optimizer) {
    if (o.size() != num_params) {
      return Status::InvalidArgument("optimizer state has the wrong size");
    }
  }
  if (!state.stats.empty() && state.stats.size() != num_stats) {
    return Status::InvalidArgument("model state has " + std::to_string(state.stats.size()) +
                                   " batch norm statistics, the model " +
                                   std::to_string(num_stats));
  }
  return Status::Ok();
}

void ReplicaGroup::EvaluateHeld(int rank, const int32_t* rows, int64_t n, int chunk,
                                double* loss_sum, int64_t* correct) {
  (void)rank, (void)rows, (void)n, (void)chunk, (void)loss_sum, (void)correct;
  throw std::logic_error("EvaluateHeld on a replica group that holds no training set");
}

const std::vector<const Backend*>& Backends() {
  static const std::vector<const Backend*> backends = {
#if defined(SWEEP_TRAINER_CUDA)
    cuda::GetBackend(),
#endif
    cpu::GetBackend(),  // always there, and last: it takes what no device backend does
  };
  return backends;
}

Result<const Backend*> PickBackend(const GroupSpec& spec, std::string_view only) {
  std::string why;
  bool known = only.empty();
  for (const Backend* b : Backends()) {
    if (!only.empty() && b->name() != only) continue;
    known = true;
    const Status s = b->Supports(spec);
    if (s.ok()) return b;
    if (s.code() != Status::Code::kNotFound) return s;
    why += (why.empty() ? "" : "; ") + s.message();
  }
  if (!known) {
    return Status::InvalidArgument("backend: \"" + std::string(only) +
                                   "\" is not compiled into this build");
  }
  return Status::InvalidArgument("no backend can train this model: " + why);
}

std::string GpuContextFault() {
#if defined(SWEEP_TRAINER_CUDA)
  return cuda::ContextFault();
#else
  return "";
#endif
}

std::string GpuArchitectureGap(int compute_capability) {
#if defined(SWEEP_TRAINER_CUDA)
  return cuda::ArchitectureGap(cuda::BuiltArchitectures(), compute_capability / 10,
                               compute_capability % 10);
#else
  (void)compute_capability;
  return "";
#endif
}

namespace {
bool nccl_environment_ours = false;
}  // namespace

void ConnectNcclAtInit() {
  if (std::getenv("NCCL_RUNTIME_CONNECT") != nullptr) return;
  nccl_environment_ours = ::setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0) == 0;
}

bool NcclEnvironmentIsOurs() { return nccl_environment_ours; }

}  // namespace sweep::trainer
