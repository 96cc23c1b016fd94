// The kernel emulator (include/cuda_runtime_api.h says what it models and what not): launches
// run block by block, each thread a fiber (ucontext) that yields at __syncthreads(); device
// memory is host memory ending against an unmapped page; cuBLAS's GEMMs are computed from their
// documented contract.
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime_api.h"
#include "emu_streams.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace {

thread_local cudaError_t last_error = cudaSuccess;
// Stream captures this thread has open: its calls that would wait for the device, or
// allocate, are refused meanwhile, and invalidate them (the graphs section).
thread_local int captures_open = 0;
thread_local std::vector<CUgraph_st*> my_captures;

// A call a capture may not make: it fails, and the capture is invalidated.
cudaError_t Refuse(cudaError_t err, CUgraph_st* also = nullptr);

// As the CUDA runtime: every call that fails, cudaErrorNotReady included, leaves its error for
// the thread's next cudaGetLastError(), which a launch check would otherwise report as its own.
cudaError_t Failed(cudaError_t err) {
  last_error = err;
  return err;
}
thread_local int current_device = 0;
constexpr int kDevices = 2;

// Runs every stream's queued work on `device` (streams, below).
void DrainDevice(int device);

[[noreturn]] void Die(const char* what);

// CUDA_EMU_SCHEDULE picks the order in which streams run their queued work:
// - lazy (the default): only the work the host waits for, and what it waits for in turn, as
//   late as possible: the host reading a result it did not wait for reads it unwritten;
// - greedy: wherever the host waits, every stream of the device first runs all it has queued,
//   in the order the streams were made (in the trainer: compute, copy, comm), so work runs
//   before another stream's that it should have waited for, unless the wait is there;
// - greedy-reverse: the same, newest stream first (comm before compute).
// It also picks the order of a block's threads between barriers (RunBlock).
enum class Schedule { kLazy, kGreedy, kGreedyReverse };

Schedule Order() {
  static const Schedule order = [] {
    const char* v = std::getenv("CUDA_EMU_SCHEDULE");
    if (v == nullptr || std::strcmp(v, "lazy") == 0) return Schedule::kLazy;
    if (std::strcmp(v, "greedy") == 0) return Schedule::kGreedy;
    if (std::strcmp(v, "greedy-reverse") == 0) return Schedule::kGreedyReverse;
    Die("CUDA_EMU_SCHEDULE must be lazy, greedy or greedy-reverse");
  }();
  return order;
}

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// ---- launches ----

constexpr size_t kStackBytes = size_t{128} << 10;
constexpr unsigned kMaxThreadsPerBlock = 1024;

enum class FiberState { kReady, kAtBarrier, kDone };

struct Fiber {
  ucontext_t context;
  char* stack;  // kStackBytes, above an unmapped page that an overflow faults on
  uint3 index;
  FiberState state;
};

// One per OS thread that launches: the fibers of the block being run, and where they return.
struct Scheduler {
  ucontext_t main;
  std::deque<Fiber> fibers;  // a ucontext_t points into itself: it never moves
  Fiber* current = nullptr;
  void (*body)(void*) = nullptr;
  void* body_context = nullptr;
};

thread_local Scheduler scheduler;

void FiberEntry() {
  scheduler.body(scheduler.body_context);
  scheduler.current->state = FiberState::kDone;
  // Returning resumes uc_link: the scheduler.
}

void Die(const char* what) {
  std::fprintf(stderr, "cuda_emu: %s (block %u,%u,%u of grid %u,%u,%u)\n", what, blockIdx.x,
               blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z);
  std::abort();
}

void RunBlock(unsigned threads) {
  Scheduler& s = scheduler;
  while (s.fibers.size() < threads) {
    s.fibers.emplace_back();
    Fiber& f = s.fibers.back();
    const size_t page = PageBytes();
    void* m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0) Die("no memory for a fiber stack");
    f.stack = static_cast<char*>(m) + page;  // kept for the thread's life, reused by every block
    if (getcontext(&f.context) != 0) Die("getcontext failed");
  }
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = s.fibers[t];
    f.index = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
    f.state = FiberState::kReady;
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &s.main;
    makecontext(&f.context, FiberEntry, 0);
  }
  // Between two barriers the threads run one after another, by index, upwards or downwards,
  // alternating with each barrier and from block to block, and the other way round under
  // greedy-reverse: a barrier left out between one thread's write and another's read then
  // shows, whichever thread writes, in one order or the other.
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned phase = block + (Order() == Schedule::kGreedyReverse ? 1 : 0);
  for (;; ++phase) {
    unsigned at_barrier = 0, done = 0;
    for (unsigned i = 0; i < threads; ++i) {
      Fiber& f = s.fibers[phase % 2 == 0 ? i : threads - 1 - i];
      if (f.state == FiberState::kReady) {
        s.current = &f;
        threadIdx = f.index;
        if (swapcontext(&s.main, &f.context) != 0) Die("swapcontext failed");
      }
      (f.state == FiberState::kDone ? done : at_barrier) += 1;
    }
    s.current = nullptr;
    if (at_barrier == 0) return;
    if (done > 0) {
      char what[160];
      std::snprintf(what, sizeof what,
                    "__syncthreads() waited for by %u threads, never reached by %u that ended",
                    at_barrier, done);
      Die(what);  // a GPU would hang here, or worse
    }
    for (unsigned t = 0; t < threads; ++t) s.fibers[t].state = FiberState::kReady;
  }
}

// ---- device memory ----

struct Mapping {
  void* base;
  size_t bytes;      // mapped, the guard page included
  size_t requested;  // what cudaMalloc was asked for (counted against the limit)
};

std::mutex memory_mu;
std::map<void*, Mapping>& Allocations() {
  static auto* allocations = new std::map<void*, Mapping>();
  return *allocations;
}
// Under memory_mu: cuda_emu::SetDeviceMemory's limit, and the bytes cudaMalloc handed out (all
// devices together: the tests that set a limit use one).
size_t memory_limit = size_t{12} << 30;
size_t memory_used = 0;
// Every device's, major * 10 + minor (cuda_emu::SetComputeCapability).
std::atomic<int> compute_capability{90};

void Gemm(bool ta, bool tb, int m, int n, int k, float a, const void* A, cudaDataType_t Atype,
          int lda, const void* B, cudaDataType_t Btype, int ldb, float b, float* c, int ldc,
          bool tf32);

float Widen(const void* p, int64_t i, cudaDataType_t type) {
  if (type == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return cuda_emu::WidenHalf(static_cast<const uint16_t*>(p)[i], type == CUDA_R_16BF);
}

}  // namespace

// ---- shared with the emulator's other libraries (emu_streams.h) ----

namespace cuda_emu {

float RoundTf32(float x) {
  if (!std::isfinite(x)) return x;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0xFFFu + ((bits >> 13) & 1u);
  bits &= ~0x1FFFu;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

float WidenHalf(uint16_t h, bool bf16) {
  if (bf16) {
    const uint32_t bits = uint32_t{h} << 16;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
  }
  __extension__ _Float16 f;
  std::memcpy(&f, &h, sizeof h);
  return static_cast<float>(f);
}

}  // namespace cuda_emu

// ---- device functions ----

unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  const unsigned long long old = *address;  // one OS thread runs the launch: no race
  *address = old + value;
  return old;
}

unsigned int atomicAdd(unsigned int* address, unsigned int value) {
  const unsigned int old = *address;  // one OS thread runs the launch: no race
  *address = old + value;
  return old;
}

void __syncthreads() {
  Scheduler& s = scheduler;
  if (s.current == nullptr) Die("__syncthreads() outside a kernel");
  s.current->state = FiberState::kAtBarrier;
  if (swapcontext(&s.current->context, &s.main) != 0) Die("swapcontext failed");
}

float __half2float(__half h) { return cuda_emu::WidenHalf(h.x, /*bf16=*/false); }

__half __float2half(float f) {
  if (std::isnan(f)) return {0x7FFF};
  __extension__ const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return {bits};
}

namespace cuda_emu {

void CheckAligned(const void* p, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  char what[96];
  std::snprintf(what, sizeof what, "a %zu-byte access at %p, not %zu-byte aligned", bytes, p,
                bytes);
  Die(what);
}

void LaunchBody(dim3 grid, dim3 block, void (*body)(void*), void* ctx) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  Scheduler& s = scheduler;
  if (s.body != nullptr) Die("a launch from inside a kernel");
  s.body = body;
  s.body_context = ctx;
  gridDim = grid;
  blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        RunBlock(static_cast<unsigned>(threads));
      }
    }
  }
  s.body = nullptr;
  s.body_context = nullptr;
}

}  // namespace cuda_emu

// ---- runtime ----

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
  }
  return "unknown error";
}

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined:
      return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation:
      return "cudaErrorStreamCaptureIsolation";
    case cudaErrorCapturedEvent:
      return "cudaErrorCapturedEvent";
  }
  return "cudaErrorUnknown";
}

cudaError_t cudaGetLastError() {
  const cudaError_t err = last_error;
  last_error = cudaSuccess;
  return err;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = kDevices;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= kDevices) return Failed(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= kDevices) return Failed(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = compute_capability / 10;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = compute_capability % 10;
      return cudaSuccess;
  }
  return Failed(cudaErrorInvalidValue);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lock(memory_mu);
  *total = std::max(size_t{16} << 30, memory_limit);
  *free = memory_limit > memory_used ? memory_limit - memory_used : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Failed(cudaErrorInvalidValue);
  if (captures_open > 0) return Refuse(cudaErrorStreamCaptureUnsupported);
  if (bytes == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  {
    std::lock_guard<std::mutex> lock(memory_mu);
    if (bytes > memory_limit - std::min(memory_used, memory_limit)) {
      return Failed(cudaErrorMemoryAllocation);
    }
    memory_used += bytes;
  }
  // The buffer ends exactly where the guard page starts, so a one-element overrun faults. Its
  // start is then aligned to the largest power of two dividing bytes: n * sizeof(T) bytes keep
  // T's alignment, which sizeof(T) is a multiple of.
  const size_t page = PageBytes();
  const size_t data_pages = (bytes + page - 1) / page;
  const size_t mapped = (data_pages + 1) * page;
  auto unreserve = [bytes] {
    std::lock_guard<std::mutex> lock(memory_mu);
    memory_used -= bytes;
  };
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    unreserve();
    return Failed(cudaErrorMemoryAllocation);
  }
  char* guard = static_cast<char*>(base) + data_pages * page;
  if (mprotect(guard, page, PROT_NONE) != 0) {
    munmap(base, mapped);
    unreserve();
    return Failed(cudaErrorMemoryAllocation);
  }
  void* p = guard - bytes;
  std::memset(p, 0xA5, bytes);  // not zero: cudaMalloc's memory holds whatever was there
  {
    std::lock_guard<std::mutex> lock(memory_mu);
    Allocations()[p] = Mapping{base, mapped, bytes};
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (captures_open > 0) return Refuse(cudaErrorStreamCaptureUnsupported);
  DrainDevice(current_device);  // cudaFree waits for the device, as CUDA's does
  Mapping m;
  {
    std::lock_guard<std::mutex> lock(memory_mu);
    auto it = Allocations().find(ptr);
    if (it == Allocations().end()) return Failed(cudaErrorInvalidValue);
    m = it->second;
    Allocations().erase(it);
    memory_used -= m.requested;
  }
  munmap(m.base, m.bytes);
  return cudaSuccess;
}

// ---- streams ----

struct CUstream_st {
  explicit CUstream_st(int d) : device(d) {}
  const int device;
  uint64_t id = 0;                // creation order
  std::recursive_mutex drain_mu;  // held while running queued work, so it runs in order
  std::mutex queue_mu;            // guards what follows
  std::deque<std::function<void()>> queue;
  uint64_t queued = 0;  // work ever queued; the k-th has position k
  uint64_t ran = 0;     // work ever run: positions 1..ran
  bool running = false;
  CUgraph_st* capture = nullptr;  // the capture it is in (under capture_mu)
};

struct CUevent_st {
  explicit CUevent_st(bool t) : timing(t) {}
  const bool timing;
  // Its last record: the stream and position, and whether that record has run, and when.
  cudaStream_t stream = nullptr;
  uint64_t position = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
  uint64_t queried_early = 0;  // the record a query has already found not ready
  // Its last record was in a capture: `captured` while that capture is open, null after.
  bool in_capture = false;
  CUgraph_st* captured = nullptr;
  cudaStream_t captured_on = nullptr;  // and how much of the capture that stream had then
  uint64_t captured_nodes = 0;
  // The nodes that stream's waits since its last node point to: a record orders after them too.
  std::vector<size_t> captured_waits;
};

// One node of a captured graph: what a launch issues on the launch stream, and what it waits
// for (the nodes before it on its stream and those its stream's waits point to).
struct GraphNode {
  std::function<void(cudaStream_t)> issue;
  bool on_origin = false;     // recorded on the capture's origin stream
  std::vector<size_t> after;  // indices of the nodes it depends on
};

// A capture, then its graph.
struct CUgraph_st {
  cudaStream_t origin = nullptr;
  std::vector<cudaStream_t> streams;  // the origin and those that joined
  std::vector<cudaEvent_t> events;    // recorded in it
  std::vector<GraphNode> nodes;
  bool invalidated = false;  // a call the capture may not make was made
  // Per stream: nodes recorded on it, and how many of them a wait in the capture covers.
  std::map<cudaStream_t, uint64_t> nodes_on, joined;
  // Per stream: its nodes' indices, and the nodes its next node will wait for (its waits').
  std::map<cudaStream_t, std::vector<size_t>> indices_on, waits;
};

// A GPU runs a graph's nodes as their dependencies allow, not in the order they were captured.
// So launches take turns: the other streams' nodes as early as their dependencies allow (the
// origin's as late), then the origin's as early. Work a capture forgot to order (a missing
// event between the compute and comm streams) runs in the wrong order on one of the first two
// launches and gives other results.
struct CUgraphExec_st {
  std::vector<GraphNode> nodes;
  uint64_t launches = 0;
};

namespace {

// Live handles (streams, events, pinned blocks with their sizes): using one after its destroy,
// or one never made, is an error. A destroyed stream or event is not freed: work still queued
// (a record, another stream's wait) may point to it, as CUDA allows.
std::mutex handles_mu;
std::map<uintptr_t, size_t>& Handles() {
  static auto* handles = new std::map<uintptr_t, size_t>();
  return *handles;
}
// Every live stream by creation: DrainDevice runs them in that order.
std::map<uint64_t, cudaStream_t>& Streams() {
  static auto* streams = new std::map<uint64_t, cudaStream_t>();
  return *streams;
}
std::mutex events_mu;  // an event's fields: set by its record's work, read by the host
std::atomic<bool> stall_queries{false};  // cuda_emu::StallEventQueries

// Handles are kept as numbers: the map never reads what they point to.
uintptr_t Key(const void* handle) { return reinterpret_cast<uintptr_t>(handle); }

bool Live(const void* handle) {
  std::lock_guard<std::mutex> lock(handles_mu);
  return Handles().count(Key(handle)) > 0;
}

void Track(uintptr_t key, size_t bytes = 0) {
  std::lock_guard<std::mutex> lock(handles_mu);
  Handles()[key] = bytes;
}

bool Untrack(const void* handle) {
  std::lock_guard<std::mutex> lock(handles_mu);
  return Handles().erase(Key(handle)) > 0;
}

// Whether [p, p + bytes) lies in a block from cudaHostAlloc.
bool Pinned(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(handles_mu);
  auto it = Handles().upper_bound(Key(p));
  if (it == Handles().begin()) return false;
  --it;
  return Key(p) + bytes <= it->first + it->second && it->second > 0;
}

// The size of the pinned block that starts at p (0 if none does).
size_t PinnedSize(const void* p) {
  std::lock_guard<std::mutex> lock(handles_mu);
  auto it = Handles().find(Key(p));
  return it == Handles().end() ? 0 : it->second;
}

// Each device's legacy stream (stream 0 while it is current): a stream like the others, which
// the non-blocking streams the trainer makes do not wait for, nor it for them.
cudaStream_t Legacy(int device) {
  static CUstream_st* legacy[kDevices] = {new CUstream_st(0), new CUstream_st(1)};
  return legacy[device];
}

// The stream work given `s` goes to: s, or the current device's legacy stream.
cudaStream_t Resolve(cudaStream_t s) { return s != nullptr ? s : Legacy(current_device); }

// Null (the legacy stream) or a stream not yet destroyed.
bool StreamOk(cudaStream_t s) { return s == nullptr || Live(s); }

// Stream capture: which capture a stream is in.
std::mutex capture_mu;

CUgraph_st* CaptureOf(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(capture_mu);
  return s == nullptr ? nullptr : s->capture;
}

// Records `issue` when s captures.
bool Record(cudaStream_t s, std::function<void(cudaStream_t)> issue) {
  std::lock_guard<std::mutex> lock(capture_mu);
  if (s == nullptr || s->capture == nullptr) return false;
  CUgraph_st* g = s->capture;
  GraphNode node{std::move(issue), s == g->origin, std::move(g->waits[s])};
  g->waits[s].clear();
  std::vector<size_t>& mine = g->indices_on[s];
  if (!mine.empty()) node.after.push_back(mine.back());
  mine.push_back(g->nodes.size());
  g->nodes.push_back(std::move(node));
  ++g->nodes_on[s];
  return true;
}

cudaError_t Refuse(cudaError_t err, CUgraph_st* also) {
  {
    std::lock_guard<std::mutex> lock(capture_mu);
    for (CUgraph_st* g : my_captures) g->invalidated = true;
    if (also != nullptr) also->invalidated = true;
  }
  return Failed(err);
}

// Runs s's queued work up to position `upto`, in order, on this thread.
void DrainTo(cudaStream_t s, uint64_t upto) {
  if (s == nullptr) return;
  std::lock_guard<std::recursive_mutex> drain(s->drain_mu);
  for (;;) {
    std::function<void()> work;
    {
      std::lock_guard<std::mutex> lock(s->queue_mu);
      if (s->ran >= upto || s->queue.empty()) return;
      // Work that waits, through other streams, for work queued after itself on this one.
      if (s->running) Die("a stream's work waits for later work on the same stream");
      work = std::move(s->queue.front());
      s->queue.pop_front();
      s->running = true;
    }
    work();
    std::lock_guard<std::mutex> lock(s->queue_mu);
    s->running = false;
    ++s->ran;
  }
}

uint64_t Queued(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(s->queue_mu);
  return s->queued;
}

void Drain(cudaStream_t s) { DrainTo(s, Queued(s)); }

void Push(cudaStream_t s, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(s->queue_mu);
  s->queue.push_back(std::move(fn));
  ++s->queued;
}

// The host waits for work on `s`'s device.
void HostWaits(cudaStream_t s) {
  if (Order() != Schedule::kLazy) DrainDevice(s->device);
}

void DrainDevice(int device) {
  std::vector<cudaStream_t> streams = {Legacy(device)};
  {
    std::lock_guard<std::mutex> lock(handles_mu);
    for (const auto& [id, s] : Streams()) {
      if (s->device == device) streams.push_back(s);
    }
  }
  if (Order() == Schedule::kGreedyReverse) std::reverse(streams.begin(), streams.end());
  for (cudaStream_t s : streams) Drain(s);
}

// A copy to device memory from pageable host memory: CUDA has read the host's bytes when the
// call returns (into its staging buffer); the device's copy lands in the stream's order.
// Pinned host memory that queued copies still read or write: [begin, end) per queued copy.
// Freeing it before they ran is a use after free on a GPU (a copy from freed pages, or into
// them), which plain host memory here would hide.
std::mutex pending_mu;
std::multiset<std::pair<uintptr_t, uintptr_t>> pending_host;

void PushPinnedCopy(cudaStream_t s, const void* host, size_t bytes, std::function<void()> copy) {
  const std::pair<uintptr_t, uintptr_t> range{Key(host), Key(host) + bytes};
  {
    std::lock_guard<std::mutex> lock(pending_mu);
    pending_host.insert(range);
  }
  Push(s, [range, copy = std::move(copy)] {
    copy();
    std::lock_guard<std::mutex> lock(pending_mu);
    pending_host.erase(pending_host.find(range));
  });
}

void QueueFromPageable(cudaStream_t s, void* dst, const void* src, size_t bytes) {
  auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                    static_cast<const char*>(src) + bytes);
  Push(s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
}

}  // namespace

namespace cuda_emu {

void StallEventQueries(bool stall) { stall_queries = stall; }

int SetComputeCapability(int major, int minor) {
  return compute_capability.exchange(major * 10 + minor);
}

size_t SetDeviceMemory(size_t bytes) {
  std::lock_guard<std::mutex> lock(memory_mu);
  return std::exchange(memory_limit, bytes);
}

uint64_t NextPosition(cudaStream_t stream) { return Queued(Resolve(stream)) + 1; }

bool TryRunTo(cudaStream_t stream, uint64_t position) {
  stream = Resolve(stream);
  std::unique_lock<std::recursive_mutex> drain(stream->drain_mu, std::try_to_lock);
  if (!drain.owns_lock()) return false;
  DrainTo(stream, position);
  return true;
}

bool Enqueue(cudaStream_t stream, std::function<void()> fn) {
  if (!StreamOk(stream)) return false;
  if (Record(stream, [fn](cudaStream_t s) { Push(s, fn); })) return true;
  Push(Resolve(stream), std::move(fn));
  return true;
}

bool DeviceOffset(const void* p, uint64_t* offset) {
  std::lock_guard<std::mutex> lock(memory_mu);
  auto it = Allocations().upper_bound(const_cast<void*>(p));
  if (it == Allocations().begin()) return false;
  --it;
  const auto start = reinterpret_cast<uintptr_t>(it->first);
  const auto at = reinterpret_cast<uintptr_t>(p);
  if (at >= start + it->second.requested) return false;
  *offset = at - start;
  return true;
}

bool Capture(cudaStream_t stream, std::function<void(cudaStream_t)> issue) {
  return Record(stream, std::move(issue));
}

bool CheckLaunch(dim3 grid, dim3 block, cudaStream_t stream) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.z > 64 || blocks == 0 ||
      grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
    last_error = cudaErrorInvalidConfiguration;
    return false;
  }
  // A stream destroyed, or one of another device than the current one.
  if (!StreamOk(stream) || (stream != nullptr && stream->device != current_device)) {
    last_error = cudaErrorInvalidResourceHandle;
    return false;
  }
  return true;
}

}  // namespace cuda_emu

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  return cudaMemsetAsync(ptr, value, bytes, nullptr);  // asynchronous for device memory
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (ptr == nullptr && bytes > 0) return Failed(cudaErrorInvalidValue);
  if (!cuda_emu::Enqueue(stream, [=] { std::memset(ptr, value, bytes); })) {
    return Failed(cudaErrorInvalidResourceHandle);
  }
  return cudaSuccess;
}

// The copies, as the CUDA Runtime API's "API synchronization behavior" section describes them.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if ((dst == nullptr || src == nullptr) && bytes > 0) return Failed(cudaErrorInvalidValue);
  if (!StreamOk(stream)) return Failed(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;  // nothing to order: the pointers may be null
  if (CaptureOf(stream) != nullptr) {
    // A graph copies at each launch: from or into pageable memory it cannot.
    if ((kind == cudaMemcpyHostToDevice && !Pinned(src, bytes)) ||
        (kind == cudaMemcpyDeviceToHost && !Pinned(dst, bytes)) || kind == cudaMemcpyHostToHost) {
      return Refuse(cudaErrorStreamCaptureUnsupported, CaptureOf(stream));
    }
    Record(stream, [=](cudaStream_t s) { cudaMemcpyAsync(dst, src, bytes, kind, s); });
    return cudaSuccess;
  }
  const cudaStream_t s = Resolve(stream);
  if (kind == cudaMemcpyHostToDevice && !Pinned(src, bytes)) {
    QueueFromPageable(s, dst, src, bytes);
  } else if (kind == cudaMemcpyDeviceToHost && !Pinned(dst, bytes)) {
    HostWaits(s);  // into pageable memory: done when the call returns
    Drain(s);
    std::memmove(dst, src, bytes);
  } else if (kind == cudaMemcpyHostToHost) {
    std::memmove(dst, src, bytes);
  } else if (kind == cudaMemcpyHostToDevice) {
    PushPinnedCopy(s, src, bytes, [=] { std::memmove(dst, src, bytes); });
  } else if (kind == cudaMemcpyDeviceToHost) {
    PushPinnedCopy(s, dst, bytes, [=] { std::memmove(dst, src, bytes); });
  } else {
    Push(s, [=] { std::memmove(dst, src, bytes); });
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (captures_open > 0) return Refuse(cudaErrorStreamCaptureUnsupported);
  const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (err != cudaSuccess) return err;
  // Synchronous, but for device to device, and from pageable memory (returns once the bytes
  // are staged; QueueFromPageable took them).
  const bool waits =
      kind == cudaMemcpyDeviceToHost || (kind == cudaMemcpyHostToDevice && Pinned(src, bytes));
  if (waits) {
    HostWaits(Legacy(current_device));
    Drain(Legacy(current_device));
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (captures_open > 0) return Refuse(cudaErrorStreamCaptureUnsupported);
  DrainDevice(current_device);
  return cudaSuccess;
}

// ---- pinned memory, streams, events ----

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  if (ptr == nullptr) return Failed(cudaErrorInvalidValue);
  void* p = std::malloc(bytes > 0 ? bytes : 1);
  if (p == nullptr) return Failed(cudaErrorMemoryAllocation);
  Track(reinterpret_cast<uintptr_t>(p), bytes > 0 ? bytes : 1);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  DrainDevice(current_device);  // as cudaFree: queued copies may still read it
  {
    // A copy still queued on another device (or a stream never waited for) would use the
    // block after it is gone.
    std::lock_guard<std::mutex> lock(pending_mu);
    const uintptr_t first = Key(ptr), last = first + PinnedSize(ptr);
    for (const auto& [begin, end] : pending_host) {
      if (begin < last && first < end) {
        Die("cudaFreeHost of pinned memory that a queued copy still reads or writes");
      }
    }
  }
  if (!Untrack(ptr))
    return Failed(cudaErrorInvalidValue);  // not from cudaHostAlloc, or freed twice
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = new CUstream_st(current_device);
  Track(Key(*stream));
  std::lock_guard<std::mutex> lock(handles_mu);
  static uint64_t created = 0;
  (*stream)->id = ++created;
  Streams()[(*stream)->id] = *stream;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || !Live(stream)) return Failed(cudaErrorInvalidResourceHandle);
  Drain(stream);  // CUDA lets queued work finish first
  Untrack(stream);
  std::lock_guard<std::mutex> lock(handles_mu);
  Streams().erase(stream->id);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!StreamOk(stream)) return Failed(cudaErrorInvalidResourceHandle);
  if (captures_open > 0 || CaptureOf(stream) != nullptr) {
    return Refuse(cudaErrorStreamCaptureUnsupported, CaptureOf(stream));
  }
  const cudaStream_t s = Resolve(stream);
  HostWaits(s);
  Drain(s);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (!StreamOk(stream) || !Live(event)) return Failed(cudaErrorInvalidResourceHandle);
  // The record the event has now; a later record does not move the wait. Never recorded: no
  // wait.
  cudaStream_t on, captured_on;
  uint64_t position, captured_nodes;
  bool in_capture;
  CUgraph_st* captured;
  std::vector<size_t> captured_waits;
  {
    std::lock_guard<std::mutex> lock(events_mu);
    on = event->stream;
    position = event->position;
    in_capture = event->in_capture;
    captured = event->captured;
    captured_on = event->captured_on;
    captured_nodes = event->captured_nodes;
    captured_waits = event->captured_waits;
  }
  CUgraph_st* mine = CaptureOf(stream);
  if (in_capture) {
    // Recorded in a capture: the waiting stream joins it (a graph runs in recorded order, so
    // the wait itself needs no node); once that capture has ended, the event is unusable.
    if (captured == nullptr || (mine != nullptr && mine != captured)) {
      return Failed(cudaErrorCapturedEvent);
    }
    std::lock_guard<std::mutex> lock(capture_mu);
    uint64_t& joined = captured->joined[captured_on];
    joined = std::max(joined, captured_nodes);  // that stream's work so far is waited for
    const cudaStream_t s = Resolve(stream);
    if (mine == nullptr) {
      s->capture = captured;
      captured->streams.push_back(s);
    }
    // The stream's next node waits for the recording stream's nodes up to the record, and
    // for what that stream had waited for since its last node.
    std::vector<size_t>& next = captured->waits[s];
    if (captured_nodes > 0) next.push_back(captured->indices_on[captured_on][captured_nodes - 1]);
    next.insert(next.end(), captured_waits.begin(), captured_waits.end());
    return cudaSuccess;
  }
  if (on == nullptr) return cudaSuccess;  // never recorded: no wait
  if (mine != nullptr) return Refuse(cudaErrorStreamCaptureIsolation, mine);
  Push(Resolve(stream), [on, position] { DrainTo(on, position); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st((flags & cudaEventDisableTiming) == 0);
  Track(Key(*event));
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr || !Untrack(event)) return Failed(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!Live(event) || !StreamOk(stream)) return Failed(cudaErrorInvalidResourceHandle);
  // As CUDA: the stream must belong to the current device.
  if (stream != nullptr && stream->device != current_device)
    return Failed(cudaErrorInvalidResourceHandle);
  const cudaStream_t s = Resolve(stream);
  if (CUgraph_st* g = CaptureOf(stream); g != nullptr) {
    uint64_t nodes;
    std::vector<size_t> waits;
    {
      std::lock_guard<std::mutex> lock(capture_mu);
      nodes = g->nodes_on[s];
      waits = g->waits[s];
    }
    std::lock_guard<std::mutex> lock(events_mu);
    event->in_capture = true;
    event->captured = g;
    event->captured_on = s;
    event->captured_nodes = nodes;
    event->captured_waits = std::move(waits);
    g->events.push_back(event);
    return cudaSuccess;
  }
  uint64_t position;
  {
    std::lock_guard<std::mutex> lock(events_mu);
    position = Queued(s) + 1;
    event->stream = s;
    event->position = position;
    event->recorded = false;
    event->in_capture = false;
    event->captured = nullptr;
  }
  Push(s, [event, position] {
    std::lock_guard<std::mutex> lock(events_mu);
    if (event->position != position) return;  // recorded again since: that record counts
    event->recorded = true;
    event->when = std::chrono::steady_clock::now();
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!Live(event)) return Failed(cudaErrorInvalidResourceHandle);
  if (captures_open > 0) return Refuse(cudaErrorStreamCaptureUnsupported);
  cudaStream_t on;
  uint64_t position;
  {
    std::lock_guard<std::mutex> lock(events_mu);
    if (event->in_capture) return Failed(cudaErrorCapturedEvent);
    on = event->stream;
    position = event->position;
  }
  if (on == nullptr) return cudaSuccess;  // never recorded
  HostWaits(on);
  DrainTo(on, position);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!Live(event)) return Failed(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(events_mu);
    if (event->in_capture) return Failed(cudaErrorCapturedEvent);
    if (stall_queries.load() && event->stream != nullptr) return Failed(cudaErrorNotReady);
    // A GPU is rarely done at the first look: the first query of a record whose work has not
    // run says so (and leaves the error a caller must clear), the next one waits for it.
    if (event->stream != nullptr && !event->recorded && event->queried_early != event->position) {
      event->queried_early = event->position;
      return Failed(cudaErrorNotReady);
    }
  }
  return cudaEventSynchronize(event);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!Live(start) || !Live(end)) return Failed(cudaErrorInvalidResourceHandle);
  // As CUDA: events made without timing cannot be timed; ones not yet reached are not ready.
  if (!start->timing || !end->timing) return Failed(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(events_mu);
  if (start->in_capture || end->in_capture) return Failed(cudaErrorCapturedEvent);
  if (!start->recorded || !end->recorded) return Failed(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

// ---- graphs ----

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (stream == nullptr) return Failed(cudaErrorStreamCaptureUnsupported);  // the legacy stream
  if (!Live(stream)) return Failed(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(capture_mu);
  if (stream->capture != nullptr) return Failed(cudaErrorIllegalState);
  auto* g = new CUgraph_st();
  g->origin = stream;
  g->streams.push_back(stream);
  stream->capture = g;
  ++captures_open;
  my_captures.push_back(g);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (stream == nullptr || !Live(stream) || graph == nullptr) {
    return Failed(cudaErrorInvalidResourceHandle);
  }
  CUgraph_st* g;
  cudaError_t result = cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(capture_mu);
    g = stream->capture;
    if (g == nullptr) return Failed(cudaErrorIllegalState);
    if (g->origin != stream) return Failed(cudaErrorStreamCaptureUnmatched);
    for (cudaStream_t s : g->streams) s->capture = nullptr;
    --captures_open;
    my_captures.erase(std::find(my_captures.begin(), my_captures.end(), g));
    if (g->invalidated) result = cudaErrorStreamCaptureInvalidated;
    for (cudaStream_t s : g->streams) {
      if (s != stream && g->nodes_on[s] > g->joined[s] && result == cudaSuccess) {
        result = cudaErrorStreamCaptureUnjoined;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(events_mu);
    for (cudaEvent_t e : g->events) {
      if (e->captured == g) e->captured = nullptr;
    }
  }
  if (result != cudaSuccess) {
    delete g;
    *graph = nullptr;
    return Failed(result);
  }
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!StreamOk(stream) || status == nullptr) return Failed(cudaErrorInvalidResourceHandle);
  *status =
      CaptureOf(stream) != nullptr ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  if (!Live(event) || !StreamOk(stream)) return Failed(cudaErrorInvalidResourceHandle);
  // External, in a capture: a node that records the event each time the graph runs.
  if ((flags & cudaEventRecordExternal) != 0 &&
      Record(stream, [event](cudaStream_t s) { cudaEventRecord(event, s); })) {
    return cudaSuccess;
  }
  return cudaEventRecord(event, stream);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return Failed(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes, 0};
  return cudaSuccess;
}

namespace {

// The order a launch issues the nodes in: dependencies first; among the nodes ready, the first
// captured of the preferred side (the origin's or the other streams'), else the first captured.
std::vector<size_t> LaunchOrder(const std::vector<GraphNode>& nodes, bool origin_first) {
  std::vector<size_t> waiting(nodes.size(), 0);
  std::vector<std::vector<size_t>> next(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t before : nodes[i].after) {
      ++waiting[i];
      next[before].push_back(i);
    }
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (waiting[i] == 0) ready.insert(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    auto pick = ready.begin();
    for (auto it = ready.begin(); it != ready.end(); ++it) {
      if (nodes[*it].on_origin == origin_first) {
        pick = it;
        break;
      }
    }
    const size_t i = *pick;
    ready.erase(pick);
    order.push_back(i);
    for (size_t j : next[i]) {
      if (--waiting[j] == 0) ready.insert(j);
    }
  }
  return order;
}

}  // namespace

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr || !StreamOk(stream)) return Failed(cudaErrorInvalidResourceHandle);
  if (CaptureOf(stream) != nullptr) {
    return Refuse(cudaErrorStreamCaptureUnsupported, CaptureOf(stream));
  }
  const cudaStream_t s = Resolve(stream);
  for (size_t i : LaunchOrder(exec->nodes, exec->launches++ % 2 == 1)) exec->nodes[i].issue(s);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

// ---- cuBLAS ----

struct cublasContext {
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cudaStream_t stream = nullptr;
};

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr && bytes > 0) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
  }
  return "unknown error";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto op_ok = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; };
  if (!op_ok(transa) || !op_ok(transb) || m < 0 || n < 0 || k < 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (Ctype != CUDA_R_32F || computeType != CUBLAS_COMPUTE_32F || Atype != Btype) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // Host pointer mode: the scalars are read now; the product runs in the handle's stream.
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const bool tf32 = handle->math == CUBLAS_TF32_TENSOR_OP_MATH && Atype == CUDA_R_32F;
  const bool queued = cuda_emu::Enqueue(handle->stream, [=] {
    Gemm(ta, tb, m, n, k, a, A, Atype, lda, B, Btype, ldb, b, static_cast<float*>(C), ldc, tf32);
  });
  return queued ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

namespace {

void Gemm(bool ta, bool tb, int m, int n, int k, float a, const void* A, cudaDataType_t Atype,
          int lda, const void* B, cudaDataType_t Btype, int ldb, float b, float* c, int ldc,
          bool tf32) {
  auto in = [tf32](const void* p, int64_t i, cudaDataType_t t) {
    const float x = Widen(p, i, t);
    return tf32 ? cuda_emu::RoundTf32(x) : x;
  };
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double sum = 0;
      for (int l = 0; l < k; ++l) {
        const int64_t ai = ta ? l + int64_t{i} * lda : i + int64_t{l} * lda;
        const int64_t bi = tb ? j + int64_t{l} * ldb : l + int64_t{j} * ldb;
        sum += double{in(A, ai, Atype)} * in(B, bi, Btype);
      }
      float& out = c[i + int64_t{j} * ldc];
      // beta == 0: C is not read (it may hold NaN).
      out = static_cast<float>(a * sum + (b == 0.0f ? 0.0 : double{b} * out));
    }
  }
}

}  // namespace

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float* alpha,
                           const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  return cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F,
                      ldb, beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
