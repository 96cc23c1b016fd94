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
  int index = 0;               // position in the pool
  bool gpu = false;            // true: a CUDA device; false: a CPU share
  int device = 0;              // CUDA ordinal for GPUs; CPU share number otherwise
  std::string name;            // "gpu0", "cpu1": what the placement column shows
  std::string model;           // GPU name, empty for CPU
  int64_t memory_bytes = 0;    // GPU memory; 0 for CPU
  int compute_capability = 0;  // major * 10 + minor (90: Hopper); 0 for CPU or when unknown
  // GPUs with the same value have peer access to each other at the fastest link this machine
  // has (NVLink, a PCIe switch): a trial's replicas belong in one group. Named by the group's
  // lowest ordinal; a lone GPU, or one without peer access, is a group of its own. 0 for CPU.
  int link_group = 0;
  // The CUDA ordinals this GPU has peer access to (both ways), lowest first; empty for CPU and for
  // a GPU without any. link_group is drawn from these pairs and their performance rank.
  std::vector<int> peers;
};

// Link groups of n GPUs from what CUDA reports for each ordered pair (i, j), i != j:
// peer[i][j] (cudaDeviceCanAccessPeer) and rank[i][j] (cudaDevP2PAttrPerformanceRank, lower is
// faster; read only where peer access exists). GPUs joined by peer access at the best rank seen
// share a group (executor::LinkGroupsFromRanks); without any peer access, one group per GPU.
// Non-square input gives one group per GPU.
std::vector<int> LinkGroupsFromPeers(const std::vector<std::vector<bool>>& peer,
                                     const std::vector<std::vector<int>>& rank);

// Number of CUDA devices this process can use; 0 without a driver, a device, or a CUDA build.
int CudaDeviceCount();
// This machine's GPUs, or `cpu_slots` CPU shares when it has none (cpu_slots <= 0: one per
// hardware thread).
std::vector<Slot> DiscoverLocalSlots(int cpu_slots);
// n CPU shares, "cpu0" .. "cpu<n-1>" (n <= 0: one per hardware thread).
std::vector<Slot> CpuSlots(int n);
int DefaultCpuSlots();

}  // namespace sweep::executor
