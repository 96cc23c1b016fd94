// The backend registry: the one file that knows which backends were compiled in. Owned by the
// trainer; the list is built once and is read-only after, so it is safe from any thread.
#include "backend.h"

#include <string>

#include "cpu/cpu_backend.h"
#if defined(SWEEP_TRAINER_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace sweep::trainer {

const std::vector<const Backend*>& Backends() {
  static const std::vector<const Backend*> backends = {
#if defined(SWEEP_TRAINER_CUDA)
    cuda::GetBackend(),
#endif
    cpu::GetBackend(),  // always there, and last: it takes what no device backend does
  };
  return backends;
}

Result<const Backend*> PickBackend(const GroupSpec& spec) {
  std::string why;
  for (const Backend* b : Backends()) {
    const Status s = b->Supports(spec);
    if (s.ok()) return b;
    why += (why.empty() ? "" : "; ") + s.message();
  }
  return Status::InvalidArgument("no backend can train this model: " + why);
}

}  // namespace sweep::trainer
