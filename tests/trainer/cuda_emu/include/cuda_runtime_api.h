// The kernel emulator's stand-in for the CUDA runtime: the part of its API that the trainer's
// kernels (trainer/src/cuda/ops.cu) and their tests use, implemented on the host, so that the
// kernels' own source compiles with g++ and runs on a machine without a GPU.
//
// - A launch (cuda/launch.h) runs at once, on the calling thread: every block in turn, and in a
//   block every thread as a fiber that runs until it ends or reaches __syncthreads(). A barrier
//   that some threads of a block never reach, a block over 1024 threads, an empty grid or a grid
//   past CUDA's limits is reported as CUDA reports it (cudaGetLastError), or, for the barrier,
//   ends the process with the block's index, as a GPU would hang there.
// - Streams are lazy: work queued on a stream (a kernel, an async copy or memset, a GEMM, a
//   collective, an event's record) runs only when the host waits for it (cudaStreamSynchronize,
//   cudaEventSynchronize, cudaDeviceSynchronize, cudaFree), or another stream's queued
//   cudaStreamWaitEvent needs it, in the stream's order. So a missing wait is not a rare race
//   but a certain one: the host reads a result not yet written, a kernel reads an input not yet
//   copied, a pinned buffer rewritten before its queued copy reads what the host wrote last.
//   Stream 0 is each device's legacy stream, lazy like the others and not ordered with them
//   (the trainer's streams are non-blocking). Copies follow CUDA's "API synchronization
//   behavior": one into pageable memory, or cudaMemcpy from pinned memory, is done when the
//   call returns; one from pageable memory has read the host's bytes by then, but lands on the
//   device in stream order. A destroyed handle, or a launch into another device's stream, is
//   refused. Two devices share the host's memory.
// - cudaMalloc places each buffer's end against an unmapped page, so a kernel (or an emulated
//   cuBLAS call) that reads or writes past a buffer's end faults at that access.
// - A kernel's access of a whole vector type (uint2, int4, float4) not aligned to its size ends
//   the process naming the block, where a GPU would fault (SWEEP_CHECK_ALIGNED).
// - A block's threads run one at a time between barriers, in index order upwards or downwards
//   (alternating with barrier and block, reversed under greedy-reverse).
// What it does not model: concurrency between threads (a data race runs as if serialised),
// warp-level operations, timing, the device's math library (libm's expf stands in, within an
// ulp or two) and nvcc's fused multiply-adds, shared memory's garbage (it starts zeroed and
// keeps its values from block to block), TF32's exact rounding (cuBLAS does not document it;
// the emulator rounds to nearest even), and memory tied to a device.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Shared memory is per block; blocks of one launch run one after another on one OS thread.
#define __shared__ static thread_local

struct uint3 {
  unsigned int x, y, z;
};

// CUDA's vector types that kernels load and store whole (vector_types.h): their alignment is
// what makes one access of them a single wide one on a GPU.
struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

// A kernel's wide access at p, `bytes` wide, must be aligned to them: a GPU faults where x86
// does not. Kernels call it through SWEEP_CHECK_ALIGNED (device_util.h), a no-op under nvcc.
#define SWEEP_CHECK_ALIGNED(p, bytes) ::cuda_emu::CheckAligned(p, bytes)

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
};

// The running thread's coordinates, set by the emulator before each thread resumes.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

// Device functions that the kernels call by their CUDA names.
using std::isfinite;
inline int min(int a, int b) { return a < b ? a : b; }
unsigned long long atomicAdd(unsigned long long* address, unsigned long long value);
unsigned int atomicAdd(unsigned int* address, unsigned int value);
// Blocks run one after another: each one's writes are seen by the next.
inline void __threadfence() {}
void __syncthreads();

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorCapturedEvent = 907,
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
struct CUgraph_st;
using cudaGraph_t = CUgraph_st*;
struct CUgraphExec_st;
using cudaGraphExec_t = CUgraphExec_st*;

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
};

constexpr unsigned int cudaStreamNonBlocking = 0x01;
constexpr unsigned int cudaEventDisableTiming = 0x02;
constexpr unsigned int cudaHostAllocPortable = 0x01;
constexpr unsigned int cudaEventRecordDefault = 0x00;
constexpr unsigned int cudaEventRecordExternal = 0x01;

const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
enum cudaDeviceAttr {
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
};
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
// Lazy streams never finish on their own: a query runs the work up to the event, as a wait
// would, and says it is done (unless stalled, below).
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
// Stream capture (the stream's mode is taken as thread-local whatever is asked). While a stream
// captures, what is queued on it is recorded instead, with the streams that join it by waiting
// on an event recorded in the capture; a launch of the graph queues it all again, in the order
// it was recorded, on the stream it is launched on (one stream: the emulator does not model
// concurrency). A collective is joined afresh at each launch. An event recorded in a capture
// is not recorded when the graph runs, unless with cudaEventRecordExternal, and the host may
// not wait for it (cudaErrorCapturedEvent); waiting in a capture for an event recorded outside
// it is cudaErrorStreamCaptureIsolation; a pageable copy, cudaMalloc, cudaFree or a host wait
// from the capturing thread is cudaErrorStreamCaptureUnsupported. Each of those invalidates the
// capture (its end is then cudaErrorStreamCaptureInvalidated), and a stream the capture forked
// whose last work no stream of the capture waited for makes its end
// cudaErrorStreamCaptureUnjoined; neither gives a graph.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream = nullptr,
                                     unsigned int flags = 0);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

namespace cuda_emu {

// For tests: while set, cudaEventQuery of a recorded event answers cudaErrorNotReady and runs
// nothing, as for work stuck behind a collective that never ends.
void StallEventQueries(bool stall);

// For tests: how many bytes of device memory there are (every device; 12 GiB unless set).
// cudaMemGetInfo reports them less what is allocated, and a cudaMalloc past them fails with
// cudaErrorMemoryAllocation, as a full GPU's does. Returns the previous limit.
size_t SetDeviceMemory(size_t bytes);

// For tests: every device's compute capability, as cudaDeviceGetAttribute reports it (9.0
// unless set). Returns the previous one as major * 10 + minor.
int SetComputeCapability(int major, int minor);

// Dies naming the block where p is not a multiple of `bytes` (SWEEP_CHECK_ALIGNED).
void CheckAligned(const void* p, size_t bytes);

// Runs body(ctx) once for every thread of grid x block, now (see the top of this file).
void LaunchBody(dim3 grid, dim3 block, void (*body)(void*), void* ctx);

// Whether CUDA accepts the launch (its configuration, and a live stream of the current device);
// if not, why becomes the thread's last error.
bool CheckLaunch(dim3 grid, dim3 block, cudaStream_t stream);

// Queues fn on stream (null: the current device's legacy stream), to run when something waits
// for it; false when the stream has been destroyed.
bool Enqueue(cudaStream_t stream, std::function<void()> fn);

template <typename F>
void Launch(dim3 grid, dim3 block, cudaStream_t stream, F f) {
  if (!CheckLaunch(grid, block, stream)) return;
  Enqueue(stream, [grid, block, f]() mutable {
    LaunchBody(
        grid, block, [](void* p) { (*static_cast<F*>(p))(); }, &f);
  });
}

}  // namespace cuda_emu
