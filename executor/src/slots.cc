// Local slot discovery and the gang-allocating slot pool.
// CUDA discovery goes through the runtime API only when the build found a toolkit; the static
// runtime fails softly (no driver, no device) and we then offer CPU slots.
#include "executor/slots.h"

#include <algorithm>
#include <climits>
#include <thread>

#include "executor/packer.h"

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

std::vector<int> LinkGroupsFromPeers(const std::vector<std::vector<bool>>& peer,
                                     const std::vector<std::vector<int>>& rank) {
  const size_t n = peer.size();
  std::vector<int> alone(n);
  for (size_t i = 0; i < n; ++i) alone[i] = static_cast<int>(i);
  if (rank.size() != n) return alone;
  for (size_t i = 0; i < n; ++i) {
    if (peer[i].size() != n || rank[i].size() != n) return alone;
  }
  // No peer access is worse than every rank CUDA reports; with none at all, nothing is joined.
  bool any = false;
  std::vector<std::vector<int>> link(n, std::vector<int>(n, INT_MAX));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i == j || !peer[i][j] || !peer[j][i]) continue;
      link[i][j] = std::max(0, std::min(rank[i][j], INT_MAX - 1));
      any = true;
    }
  }
  return any ? LinkGroupsFromRanks(link) : alone;
}

int DefaultCpuSlots() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace {

// What this machine's CUDA runtime says about every pair of GPUs; a pair it cannot answer for
// counts as having no peer access.
struct PeerMatrix {
  std::vector<std::vector<bool>> peer;  // [i][j]: i can access j's memory
  std::vector<std::vector<int>> rank;   // [i][j]: CUDA's performance rank of that link
};

PeerMatrix LocalPeers(int gpus) {
  const size_t n = static_cast<size_t>(gpus);
  PeerMatrix m{std::vector<std::vector<bool>>(n, std::vector<bool>(n, false)),
               std::vector<std::vector<int>>(n, std::vector<int>(n, 0))};
#ifdef SWEEP_HAVE_CUDA
  for (int i = 0; i < gpus; ++i) {
    for (int j = 0; j < gpus; ++j) {
      if (i == j) continue;
      int can = 0, perf = 0;
      const size_t a = static_cast<size_t>(i), b = static_cast<size_t>(j);
      if (cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      if (can == 0) continue;
      if (cudaDeviceGetP2PAttribute(&perf, cudaDevP2PAttrPerformanceRank, i, j) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      m.peer[a][b] = true;
      m.rank[a][b] = perf;
    }
  }
#endif
  return m;
}

}  // namespace

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
      s.compute_capability = prop.major * 10 + prop.minor;
    } else {
      (void)cudaGetLastError();
    }
#endif
    slots.push_back(s);
  }
  if (!slots.empty()) {
    const PeerMatrix m = LocalPeers(gpus);
    const std::vector<int> groups = LinkGroupsFromPeers(m.peer, m.rank);
    for (size_t i = 0; i < slots.size(); ++i) {
      slots[i].link_group = groups[i];
      for (size_t j = 0; j < slots.size(); ++j) {
        if (m.peer[i][j] && m.peer[j][i]) slots[i].peers.push_back(static_cast<int>(j));
      }
    }
    return slots;
  }
  return CpuSlots(cpu_slots);
}

std::vector<Slot> CpuSlots(int n) {
  if (n <= 0) n = DefaultCpuSlots();
  std::vector<Slot> slots;
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
