// The emulator itself: what it must catch (a barrier not every thread reaches, a write past a
// buffer's end, a launch CUDA refuses, a GEMM's bad leading dimension, ranks that disagree on a
// collective, what a stream capture may not do) and what it must compute (shared memory across a
// barrier, cuBLAS's column-major products with transposes, TF32's rounding, NCCL's sums and
// broadcasts between rank threads and from one thread in a group, graphs replaying a capture). The
// backend's tests (cuda_ops_test.cc, cuda_trainer_test.cc) trust these.
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime_api.h"
#include "gtest/gtest.h"
#include "nccl.h"

#include "../group_util.h"
#include "../test_util.h"
#include "backend.h"
#include "cuda/cuda_backend.h"

namespace {

// Reverses each block's slice through shared memory: right only if every thread's write is
// seen by every other thread after the barrier.
__global__ void ReverseInBlocks(int* x) {
  __shared__ int tile[256];
  const unsigned base = blockIdx.x * blockDim.x;
  tile[threadIdx.x] = x[base + threadIdx.x];
  __syncthreads();
  x[base + threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

__global__ void BarrierSkippedByOneWarp(int* x) {
  if (threadIdx.x < 32) return;
  __syncthreads();
  x[threadIdx.x] = 1;
}

__global__ void WriteOnePastTheEnd(float* x, int n) {
  if (threadIdx.x == 0) x[n] = 1.0f;
}

__global__ void Count(unsigned long long* count) { atomicAdd(count, 1ull); }

template <typename F>
void LaunchOnHost(dim3 grid, dim3 block, F&& f) {
  cuda_emu::Launch(grid, block, nullptr, f);
}

template <typename T>
T* Alloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

TEST(CudaEmu, SharedMemoryIsSeenAcrossTheBarrier) {
  int* x = Alloc<int>(512);
  std::vector<int> h(512);
  for (int i = 0; i < 512; ++i) h[i] = i;
  ASSERT_EQ(cudaMemcpy(x, h.data(), 512 * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  LaunchOnHost(2, 256, [&] { ReverseInBlocks(x); });
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), x, 512 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], 255);
  EXPECT_EQ(h[255], 0);
  EXPECT_EQ(h[256], 511);
  EXPECT_EQ(h[511], 256);
  EXPECT_EQ(cudaFree(x), cudaSuccess);
}

TEST(CudaEmu, EveryThreadOfTheGridRuns) {
  auto* count = Alloc<unsigned long long>(1);
  ASSERT_EQ(cudaMemset(count, 0, sizeof *count), cudaSuccess);
  LaunchOnHost(dim3(3, 2, 2), dim3(32, 4, 2), [&] { Count(count); });
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream's work runs now
  EXPECT_EQ(*count, 3ull * 2 * 2 * 32 * 4 * 2);
  EXPECT_EQ(cudaFree(count), cudaSuccess);
}

TEST(CudaEmuDeathTest, ABarrierSomeThreadsNeverReachEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenBLAS has started its threads
  int* x = Alloc<int>(64);
  EXPECT_DEATH(
      {
        LaunchOnHost(1, 64, [&] { BarrierSkippedByOneWarp(x); });
        cudaDeviceSynchronize();
      },
      "__syncthreads\\(\\) waited for by 32 threads, never reached by 32");
  EXPECT_EQ(cudaFree(x), cudaSuccess);
}

TEST(CudaEmuDeathTest, AWritePastABuffersEndFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float* x = Alloc<float>(37);  // an odd count: no padding hides the overrun
  EXPECT_EXIT(
      {
        LaunchOnHost(1, 32, [&] { WriteOnePastTheEnd(x, 37); });
        cudaDeviceSynchronize();
      },
      testing::KilledBySignal(SIGSEGV), "");
  LaunchOnHost(1, 32, [&] { WriteOnePastTheEnd(x, 36); });  // the last element is fine
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaFree(x), cudaSuccess);
}

TEST(CudaEmu, LaunchesCudaRefusesRunNothing) {
  auto* count = Alloc<unsigned long long>(1);
  ASSERT_EQ(cudaMemset(count, 0, sizeof *count), cudaSuccess);
  for (const auto& [grid, block] :
       {std::pair{dim3(0), dim3(32)}, std::pair{dim3(1), dim3(0)}, std::pair{dim3(1), dim3(1025)},
        std::pair{dim3(1, 65536), dim3(32)}}) {
    LaunchOnHost(grid, block, [&] { Count(count); });
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(*count, 0ull);
  EXPECT_EQ(cudaFree(count), cudaSuccess);
  EXPECT_EQ(cudaFree(count), cudaErrorInvalidValue);  // not a live allocation any more
}

// Work queued on a stream runs when the host waits for it (the default, lazy order): a result
// read before the wait is not there yet, and a wait on another stream's event runs that work
// first.
TEST(CudaEmu, StreamsRunTheirWorkWhenWaitedFor) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t copied = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), cudaSuccess);
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 4 * sizeof(int), cudaHostAllocPortable), cudaSuccess);
  int* host = static_cast<int*>(pinned);
  int* x = Alloc<int>(4);
  int* y = Alloc<int>(4);
  for (int i = 0; i < 4; ++i) host[i] = i + 1;
  ASSERT_EQ(cudaMemcpyAsync(x, host, 4 * sizeof(int), cudaMemcpyHostToDevice, a), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(copied, a), cudaSuccess);
  // b copies x on once a's copy is done; then the host reads y back through pinned memory.
  ASSERT_EQ(cudaStreamWaitEvent(b, copied, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(y, x, 4 * sizeof(int), cudaMemcpyDeviceToDevice, b), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host, y, 4 * sizeof(int), cudaMemcpyDeviceToHost, b), cudaSuccess);
  host[0] = 100;       // the host writes again before a's copy ran: the copy reads this
  EXPECT_NE(y[1], 2);  // nothing has run yet (the emulator's device memory is the host's)
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(host[0], 100);
  EXPECT_EQ(host[3], 4);
  // Timing: events made without it cannot be timed.
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, copied, copied), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaErrorInvalidValue);
  for (int* p : {x, y}) EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(copied), cudaSuccess);
  for (cudaStream_t s : {a, b}) EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(a), cudaErrorInvalidResourceHandle);  // destroyed
}

__global__ void AddOne(int* x) { x[threadIdx.x] += 1; }

// A capture forks to a second stream through an event and joins back; each launch of its graph
// runs the recorded work again, reading the pinned input as it is then. What a capture may
// not do is refused with CUDA's errors.
TEST(CudaEmu, AGraphRunsWhatItsCaptureRecordedAtEachLaunch) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t fork = nullptr, join = nullptr, done = nullptr;
  for (cudaEvent_t* e : {&fork, &join, &done}) {
    ASSERT_EQ(cudaEventCreateWithFlags(e, cudaEventDisableTiming), cudaSuccess);
  }
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 8 * sizeof(int), cudaHostAllocPortable), cudaSuccess);
  int* host = static_cast<int*>(pinned);
  int* x = Alloc<int>(4);
  int* y = Alloc<int>(4);
  std::vector<int> pageable(4, 0);

  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamIsCapturing(a, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  ASSERT_EQ(cudaMemcpyAsync(x, host, 4 * sizeof(int), cudaMemcpyHostToDevice, a), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, fork, 0), cudaSuccess);  // b joins the capture
  ASSERT_EQ(cudaStreamIsCapturing(b, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  cuda_emu::Launch(dim3(1), dim3(4), b, [x] { AddOne(x); });
  ASSERT_EQ(cudaMemcpyAsync(y, x, 4 * sizeof(int), cudaMemcpyDeviceToDevice, b), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(join, b), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(a, join, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host + 4, y, 4 * sizeof(int), cudaMemcpyDeviceToHost, a), cudaSuccess);
  ASSERT_EQ(cudaEventRecordWithFlags(done, a, cudaEventRecordExternal), cudaSuccess);
  cudaEvent_t outside = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(a, outside, 0), cudaSuccess);  // never recorded: no wait
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(b, &graph), cudaErrorStreamCaptureUnmatched);  // not its origin
  ASSERT_EQ(cudaStreamEndCapture(a, &graph), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(b, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  (void)cudaGetLastError();
  // Nothing ran while capturing; an event recorded inside is not the host's to wait for.
  EXPECT_EQ(cudaEventSynchronize(join), cudaErrorCapturedEvent);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int launch = 0; launch < 2; ++launch) {
    for (int i = 0; i < 4; ++i) host[i] = 10 * launch + i;
    ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);  // the external record ran
    for (int i = 0; i < 4; ++i) EXPECT_EQ(host[4 + i], 10 * launch + i + 1) << "launch " << launch;
  }
  // Refused while capturing, and the capture then gives no graph: pageable copies, allocation,
  // host waits, an event recorded outside it.
  ASSERT_EQ(cudaEventRecord(outside, b), cudaSuccess);
  void* more = nullptr;
  const std::vector<std::function<cudaError_t()>> refused = {
      [&] {
        return cudaMemcpyAsync(x, pageable.data(), 4 * sizeof(int), cudaMemcpyHostToDevice, a);
      },
      [&] { return cudaMalloc(&more, 64); }, [&] { return cudaStreamSynchronize(a); },
      [&] { return cudaStreamWaitEvent(a, outside, 0); }};
  const cudaError_t why[] = {cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureUnsupported,
                             cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureIsolation};
  for (size_t i = 0; i < refused.size(); ++i) {
    ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    EXPECT_EQ(refused[i](), why[i]) << "call " << i;
    cudaGraph_t none = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(a, &none), cudaErrorStreamCaptureInvalidated) << "call " << i;
    EXPECT_EQ(none, nullptr);
  }
  // A fork whose work the origin never waits for: unjoined, no graph.
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, fork, 0), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(y, 0, 4 * sizeof(int), b), cudaSuccess);
  cudaGraph_t unjoined = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(a, &unjoined), cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(unjoined, nullptr);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  for (int* p : {x, y}) EXPECT_EQ(cudaFree(p), cudaSuccess);
  for (cudaEvent_t e : {fork, join, done, outside}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  for (cudaStream_t st : {a, b}) EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
}

__global__ void SetTo(int* x, int v) { x[threadIdx.x] = v; }

// A GPU runs a graph's nodes as their dependencies allow. The emulator's launches take turns:
// the forked streams' nodes as early as they may, then the origin's. A read on a forked stream
// that nothing orders before the origin's next write sees the old value on the first launch and
// the new one on the second; with the missing event it sees the old one on both.
TEST(CudaEmu, AGraphsLaunchesRunItsNodesInOrdersItsDependenciesAllow) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t fork = nullptr, read = nullptr, join = nullptr;
  for (cudaEvent_t* e : {&fork, &read, &join}) {
    ASSERT_EQ(cudaEventCreateWithFlags(e, cudaEventDisableTiming), cudaSuccess);
  }
  int* x = Alloc<int>(4);
  int* y = Alloc<int>(4);
  // Ends the capture on a, launches its graph twice and checks what y holds after each launch.
  auto launch_twice = [&](const std::string& what, int first, int second) {
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(a, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int launch = 0; launch < 2; ++launch) {
      ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
      std::vector<int> got(4);
      ASSERT_EQ(cudaMemcpy(got.data(), y, 4 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got, std::vector<int>(4, launch == 0 ? first : second))
          << what << ", launch " << launch;
    }
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  };
  for (bool ordered : {false, true}) {
    ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cuda_emu::Launch(dim3(1), dim3(4), a, [x] { SetTo(x, 1); });
    ASSERT_EQ(cudaEventRecord(fork, a), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(b, fork, 0), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(y, x, 4 * sizeof(int), cudaMemcpyDeviceToDevice, b), cudaSuccess);
    if (ordered) {
      ASSERT_EQ(cudaEventRecord(read, b), cudaSuccess);
      ASSERT_EQ(cudaStreamWaitEvent(a, read, 0), cudaSuccess);
    }
    cuda_emu::Launch(dim3(1), dim3(4), a, [x] { SetTo(x, 2); });
    ASSERT_EQ(cudaEventRecord(join, b), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(a, join, 0), cudaSuccess);
    launch_twice(ordered ? "ordered" : "unordered", 1, ordered ? 1 : 2);
  }
  // A wait passed on through an event recorded before any work: stream c reads x after a's
  // first write because b waited for it, though b has no node of its own.
  cudaStream_t c = nullptr;
  cudaEvent_t relay = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&relay, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cuda_emu::Launch(dim3(1), dim3(4), a, [x] { SetTo(x, 3); });
  ASSERT_EQ(cudaEventRecord(fork, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, fork, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(relay, b), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(c, relay, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(y, x, 4 * sizeof(int), cudaMemcpyDeviceToDevice, c), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(join, c), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(a, join, 0), cudaSuccess);
  cuda_emu::Launch(dim3(1), dim3(4), a, [x] { SetTo(x, 4); });
  launch_twice("relayed", 3, 3);
  for (int* p : {x, y}) EXPECT_EQ(cudaFree(p), cudaSuccess);
  for (cudaEvent_t e : {fork, read, join, relay}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  for (cudaStream_t st : {a, b, c}) EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
}

// C (2 x 2) = A^T (2 x 3) B (3 x 2), column-major: A is stored 3 x 2 with lda 3 (padded to 4 to
// check lda is used), B 3 x 2 with ldb 3.
TEST(CudaEmu, GemmFollowsCublasColumnMajorContract) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> a = {1, 2, 3, -1, 4, 5, 6, -1};  // columns (1,2,3) and (4,5,6), lda 4
  const std::vector<float> b = {1, 0, 2, 0, 1, 1};          // columns (1,0,2) and (0,1,1)
  float* d_a = Alloc<float>(a.size());
  float* d_b = Alloc<float>(b.size());
  float* d_c = Alloc<float>(4);
  cudaMemcpy(d_a, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(d_b, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice);
  const float one = 1, zero = 0;
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, d_a, 4, d_b, 3, &zero, d_c, 2),
            CUBLAS_STATUS_SUCCESS);
  // row 0 of A^T is (1,2,3), row 1 is (4,5,6): C = [[7, 5], [16, 11]], stored by columns.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(d_c, d_c + 4), (std::vector<float>{7, 16, 5, 11}));
  // A leading dimension below op(A)'s rows as stored is refused, as cuBLAS refuses it.
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, d_a, 2, d_b, 3, &zero, d_c, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, d_a, 4, d_b, 3, &zero, d_c, 1),
            CUBLAS_STATUS_INVALID_VALUE);
  // TF32 keeps 10 significand bits: 1 + 2^-12 is read as 1.
  ASSERT_EQ(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  const float x = 1.0f + 1.0f / 4096;
  cudaMemcpy(d_a, &x, sizeof x, cudaMemcpyHostToDevice);
  cudaMemcpy(d_b, &one, sizeof one, cudaMemcpyHostToDevice);
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, d_a, 1, d_b, 1, &zero, d_c, 1),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_c[0], 1.0f);
  EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  for (float* p : {d_a, d_b, d_c}) EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// Two ranks on two threads: each all-reduces its own buffer in place and gets the sum.
TEST(NcclEmu, AllReduceSumsAcrossRankThreads) {
  ncclComm_t comms[2] = {};
  const int devices[2] = {0, 1};
  ASSERT_EQ(ncclCommInitAll(comms, 2, devices), ncclSuccess);
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  std::vector<double> la = {0.5}, lb = {0.25};
  auto rank = [&](int r, std::vector<float>* g, std::vector<double>* loss) {
    EXPECT_EQ(ncclAllReduce(g->data(), g->data(), g->size(), ncclFloat, ncclSum, comms[r], nullptr),
              ncclSuccess);
    EXPECT_EQ(ncclAllReduce(loss->data(), loss->data(), 1, ncclDouble, ncclSum, comms[r], nullptr),
              ncclSuccess);
  };
  std::thread t0(rank, 0, &a, &la), t1(rank, 1, &b, &lb);
  t0.join();
  t1.join();
  EXPECT_EQ(a, (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(b, a);
  EXPECT_EQ(la[0], 0.75);
  EXPECT_EQ(lb[0], 0.75);
  // One thread, in a group: rank 0's values reach rank 1.
  std::vector<float> x = {7, 8}, y = {0, 0};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(x.data(), x.data(), 2, ncclFloat, 0, comms[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(y.data(), y.data(), 2, ncclFloat, 0, comms[1], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(y, x);
  EXPECT_EQ(ncclAllReduce(x.data(), x.data(), 2, ncclFloat, static_cast<ncclRedOp_t>(3), comms[0],
                          nullptr),
            ncclInvalidArgument);  // only sums are emulated
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A captured all-reduce is a fresh collective at each launch: two ranks, each replaying its
// graph, sum what their buffers hold then.
TEST(NcclEmu, ACapturedAllReduceSumsAgainAtEachLaunch) {
  ncclComm_t comms[2] = {};
  const int devices[2] = {0, 1};
  ASSERT_EQ(ncclCommInitAll(comms, 2, devices), ncclSuccess);
  std::vector<float> result[2];
  auto rank = [&](int r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    float* g = Alloc<float>(2);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(ncclAllReduce(g, g, 2, ncclFloat, ncclSum, comms[r], s), ncclSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int launch = 1; launch <= 2; ++launch) {
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      g[0] = static_cast<float>(launch * (r + 1));
      g[1] = 1;
      ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      result[r].insert(result[r].end(), g, g + 2);
    }
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaFree(g), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(result[0], (std::vector<float>{3, 2, 6, 2}));
  EXPECT_EQ(result[1], result[0]);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(NcclEmuDeathTest, RanksThatDisagreeEndTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto disagree = [] {
    ncclComm_t comms[2] = {};
    ncclCommInitAll(comms, 2, nullptr);
    std::vector<float> a(4), b(3);
    ncclGroupStart();
    ncclAllReduce(a.data(), a.data(), 4, ncclFloat, ncclSum, comms[0], nullptr);
    ncclAllReduce(b.data(), b.data(), 3, ncclFloat, ncclSum, comms[1], nullptr);
    ncclGroupEnd();
  };
  EXPECT_DEATH(disagree(), "rank 0 all-reduces 4 floats but rank 1 all-reduces 3 floats");
}

// NCCL's own fault (a transport or proxy failure) gives no CUDA error, and the collective never
// ends: the replicas' waits poll the communicators' asynchronous error, so the step fails with
// it, every replica stops, and the group can be destroyed, instead of the trial hanging.
TEST(NcclEmu, AnAsynchronousNcclErrorFailsTheStepInsteadOfHanging) {
  using namespace sweep::trainer;
  namespace tt = sweep::trainer::testing;
  GroupSpec spec = tt::Spec(2, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.devices = {0, 1};
  auto group = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_TRUE(group.ok()) << group.status().message();
  ASSERT_TRUE((*group)->SetState(tt::InitialState(spec)).ok());
  const tt::Batches data = tt::MakeBatches(4, 3);
  cuda_emu::StallEventQueries(true);
  nccl_emu::InjectAsyncError(ncclRemoteError);
  std::string error;
  try {
    (*group)->Run([&](int rank) {
      std::vector<double> finished;
      const int begin = tt::kBatch * rank / 2, end = tt::kBatch * (rank + 1) / 2;
      for (int s = 0; s < 4; ++s) {
        StepArgs args;
        args.lr = 0.05f;
        args.t = s + 1;
        args.dloss_scale = 1.0f / tt::kBatch;
        MicroBatch mb;
        mb.x = data.x.data() + (int64_t{s} * tt::kBatch + begin) * tt::kInputs;
        mb.y = data.y.data() + int64_t{s} * tt::kBatch + begin;
        mb.rows = end - begin;
        mb.first_row = begin;
        (*group)->TrainMicroBatch(rank, mb, args, &finished);
      }
      (*group)->FinishSteps(rank, &finished);
    });
  } catch (const std::exception& e) {
    error = e.what();
  }
  cuda_emu::StallEventQueries(false);
  nccl_emu::InjectAsyncError(ncclSuccess);
  EXPECT_NE(error.find("an all-reduce (ncclCommGetAsyncError)"), std::string::npos) << error;
  EXPECT_NE(error.find("remote process exited or there was a network error"), std::string::npos)
      << error;
  group->reset();  // its streams' work ends: the communicators were aborted
}

// The same fault in a whole training run whose batches stream from the Batcher's pinned
// buffers: Train() returns NCCL's error (the trial fails with it), and the group and the
// Batcher come down cleanly (the emulator ends the process if a copy queued from a pinned
// buffer outlives it).
TEST(NcclEmu, AnAsynchronousNcclErrorFailsTheTrainingRun) {
  using namespace sweep::trainer;
  namespace tt = sweep::trainer::testing;
  tt::TempDir dir;
  TrainOptions o = tt::BlobOptions(dir);
  o.backend = "cuda";
  o.replicas = 2;
  o.devices = {0, 1};
  o.dataset_on_gpu = false;
  cuda_emu::StallEventQueries(true);
  nccl_emu::InjectAsyncError(ncclRemoteError);
  auto r = Train(o, [](const EpochReport&) { return true; });
  cuda_emu::StallEventQueries(false);
  nccl_emu::InjectAsyncError(ncclSuccess);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ncclCommGetAsyncError"), std::string::npos)
      << r.status().message();
}

// A full GPU, emulated: cudaMalloc fails past the set memory, and cudaMemGetInfo counts what is
// allocated. A group whose weights fit but whose batches do not keeps CUDA's own words (the
// statement, file and line) and says what to make smaller; a model whose weights alone exceed
// the free memory is refused before anything is allocated.
TEST(CudaEmu, AFullGpuFailsTheGroupWithWhatToMakeSmaller) {
  using namespace sweep::trainer;
  namespace tt = sweep::trainer::testing;
  struct Restore {
    size_t limit;
    ~Restore() { cuda_emu::SetDeviceMemory(limit); }
  } restore{cuda_emu::SetDeviceMemory(size_t{64} << 20)};
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(free, size_t{64} << 20);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, size_t{16} << 20), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(free, size_t{48} << 20);
  void* q = nullptr;
  EXPECT_EQ(cudaMalloc(&q, size_t{49} << 20), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaFree(p), cudaSuccess);

  GroupSpec spec = tt::Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  // The layers' outputs alone (133 floats a row) take more than the GPU has: refused before
  // anything is allocated, naming the batch.
  spec.max_rows = 1 << 20;
  auto group = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find(
                "GiB of activations for 1048576 rows), it has 0.1 GiB free of 16.0; make "
                "batch_size or hidden smaller"),
            std::string::npos)
      << group.status().message();
  // The check counts nearly all a replica allocates, not the labels' and losses' buffers: just
  // below the batch it refuses, the check passes and an allocation fails, and says what to make
  // smaller.
  std::string why;
  for (int rows = 50000; rows <= 80000 && why.empty(); rows += 100) {
    spec.max_rows = rows;
    group = cuda::GetBackend()->CreateGroup(spec);
    if (!group.ok() &&
        group.status().message().find("cudaErrorMemoryAllocation") != std::string::npos) {
      why = group.status().message() + " [rows " + std::to_string(rows) + "]";
    }
    group = sweep::Status::Internal("released");  // a group made here frees its memory
  }
  ASSERT_FALSE(why.empty()) << "no batch between the check and the allocation failing";
  EXPECT_NE(why.find(".h:"), std::string::npos) << why;
  EXPECT_NE(why.find(" rows: make batch_size or hidden smaller"), std::string::npos) << why;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(free, size_t{64} << 20) << "the failed group left memory allocated";

  spec.max_rows = tt::kBatch;
  // 8.5 M parameters: 102 MB of weights, gradients and momentum.
  spec.model = ModelSpec::Mlp(tt::kInputs, {4096, 2048}, tt::kClasses, Activation::kGelu);
  group = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("does not fit in GPU 0's memory: " +
                                          std::to_string(spec.model.num_params) + " parameters"),
            std::string::npos)
      << group.status().message();
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(free, size_t{64} << 20);
}

// The check before training is a lower bound: what it counts for a group is at most what the
// group's replica allocates, for the MLP (cuda/mlp.h) in fp32, in bf16 without dropout (its
// hidden outputs kept in 16 bits only) and with dropout, and for CNNs (cuda/net.h). For CNNs,
// plain and residual, what a row adds is counted exactly: the check reads the net's layout.
TEST(CudaEmu, TheMemoryCheckCountsNoMoreThanAGroupAllocates) {
  using namespace sweep::trainer;
  namespace tt = sweep::trainer::testing;
  TrainOptions cnn;
  cnn.model = "cnn";
  cnn.channels = {8, 16};
  cnn.hidden = {32};
  cnn.dropout = 0.1;
  sweep::Result<ModelSpec> cnn_model = BuildModel(cnn, TensorShape{1, 12, 12}, 10);
  ASSERT_TRUE(cnn_model.ok()) << cnn_model.status().message();
  TrainOptions res = cnn;  // as configs/fashion_cnn_gpu.toml builds it, smaller
  res.residual = true;
  res.global_pool = true;
  res.hidden = {};
  res.dropout = 0;
  sweep::Result<ModelSpec> res_model = BuildModel(res, TensorShape{1, 12, 12}, 10);
  ASSERT_TRUE(res_model.ok()) << res_model.status().message();
  struct Case {
    const char* name;
    ModelSpec model;
    Precision precision;
  };
  const std::vector<Case> cases = {
      {"mlp fp32", ModelSpec::Mlp(784, {256, 128}, 10, Activation::kRelu), Precision::kFp32},
      {"mlp bf16", ModelSpec::Mlp(784, {256, 128}, 10, Activation::kRelu), Precision::kBf16},
      {"mlp bf16 dropout", ModelSpec::Mlp(784, {256, 128}, 10, Activation::kRelu, 0.2f),
       Precision::kBf16},
      {"cnn fp32", *cnn_model, Precision::kFp32},
      {"cnn bf16", *cnn_model, Precision::kBf16},
      {"resnet fp32", *res_model, Precision::kFp32},
      {"resnet bf16", *res_model, Precision::kBf16},
      {"resnet fp16", *res_model, Precision::kFp16},
  };
  for (const Case& c : cases) {
    GroupSpec spec = tt::Spec(1, OptimizerSpec::Kind::kAdamw, 0.0f);
    spec.model = c.model;
    spec.precision = c.precision;
    // At two batch sizes: what a row adds is the activations', which the check must count
    // nearly all of (cuBLAS's workspace and the like come on top, the same at any batch).
    double counted[2], allocated[2];
    for (int k = 0; k < 2; ++k) {
      spec.max_rows = 512 << k;
      size_t before = 0, after = 0, total = 0;
      ASSERT_EQ(cudaMemGetInfo(&before, &total), cudaSuccess);
      auto group = cuda::GetBackend()->CreateGroup(spec);
      ASSERT_TRUE(group.ok()) << c.name << ": " << group.status().message();
      ASSERT_EQ(cudaMemGetInfo(&after, &total), cudaSuccess);
      allocated[k] = static_cast<double>(before - after);
      counted[k] = cuda::DeviceBytesNeeded(spec);
      std::printf("  %s, %d rows: counted %.0f bytes, allocated %.0f\n", c.name, spec.max_rows,
                  counted[k], allocated[k]);
      EXPECT_LE(counted[k], allocated[k]) << c.name << ", " << spec.max_rows << " rows";
    }
    const double per_rows_counted = counted[1] - counted[0];
    const double per_rows_allocated = allocated[1] - allocated[0];
    EXPECT_LE(per_rows_counted, per_rows_allocated) << c.name;
    EXPECT_GT(per_rows_counted, 0.85 * per_rows_allocated) << c.name;
    if (c.model.layers.front().kind == LayerKind::kConv) {
      EXPECT_EQ(per_rows_counted, per_rows_allocated) << c.name;
    }
  }
}

}  // namespace
