// Local slot discovery and the gang-allocating slot pool.
// CUDA discovery goes through the runtime API only when the build found a toolkit; the static
// runtime fails softly (no driver, no device) and we then offer CPU slots.
#include "executor/slots.h"

#include <thread>

#ifdef SWEEP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sweep::executor {

int CudaDeviceCount() {
#ifdef SWEEP_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

int DefaultCpuSlots() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

std::vector<Slot> DiscoverLocalSlots(int cpu_slots) {
  std::vector<Slot> slots;
  int gpus = CudaDeviceCount();
  for (int d = 0; d < gpus; ++d) {
    Slot s;
    s.index = d;
    s.gpu = true;
    s.device = d;
    s.name = "gpu" + std::to_string(d);
#ifdef SWEEP_HAVE_CUDA
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      s.model = prop.name;
      s.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    }
#endif
    slots.push_back(s);
  }
  if (!slots.empty()) return slots;
  int n = cpu_slots > 0 ? cpu_slots : DefaultCpuSlots();
  for (int i = 0; i < n; ++i) {
    Slot s;
    s.index = i;
    s.device = i;
    s.name = "cpu" + std::to_string(i);
    slots.push_back(s);
  }
  return slots;
}

}  // namespace sweep::executor
