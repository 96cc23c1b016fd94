// Slots: the units of hardware a trial is placed on. A slot is one GPU, or with no GPU one CPU
// share (a trial with gpus = n then runs n threads). Discovery runs once at start-up; the
// returned values are plain data; executor::Packer (packer.h) allocates them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sweep::executor {

struct Slot {
  int index = 0;             // position in the pool
  bool gpu = false;          // true: a CUDA device; false: a CPU share
  int device = 0;            // CUDA ordinal for GPUs; CPU share number otherwise
  std::string name;          // "gpu0", "cpu1": what the placement column shows
  std::string model;         // GPU name, empty for CPU
  int64_t memory_bytes = 0;  // GPU memory; 0 for CPU
  // GPUs with equal values share the fastest link (peer access); 0 for CPU shares.
  int link_group = 0;
};

// Number of CUDA devices this process can use; 0 without a driver, a device, or a CUDA build.
int CudaDeviceCount();
// This machine's GPUs, or `cpu_slots` CPU shares when it has none (cpu_slots <= 0: one per
// hardware thread).
std::vector<Slot> DiscoverLocalSlots(int cpu_slots);
int DefaultCpuSlots();

}  // namespace sweep::executor
