// Autotuning's timer: the milliseconds one pass of queued work takes on a stream, from CUDA
// events around it. It waits on the stream, so it must not run inside a graph capture.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "cuda/cuda_check.h"

namespace sweep::trainer::cuda {

// Runs pass() (a Status-returning callable that queues work on `stream`) twice untimed, then five
// times between two events; *ms is the mean of the five.
template <typename Pass>
Status TimePass(cudaStream_t stream, const Pass& pass, double* ms) {
  struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
      if (start != nullptr) cudaEventDestroy(start);
      if (stop != nullptr) cudaEventDestroy(stop);
    }
  } events;
  CUDA_CHECK(cudaEventCreate(&events.start));
  CUDA_CHECK(cudaEventCreate(&events.stop));
  for (int rep = 0; rep < 7; ++rep) {
    if (rep == 2) CUDA_CHECK(cudaEventRecord(events.start, stream));
    if (Status s = pass(); !s.ok()) return s;
  }
  CUDA_CHECK(cudaEventRecord(events.stop, stream));
  CUDA_CHECK(cudaEventSynchronize(events.stop));
  float elapsed = 0;
  CUDA_CHECK(cudaEventElapsedTime(&elapsed, events.start, events.stop));
  *ms = elapsed / 5.0;
  return Status::Ok();
}

}  // namespace sweep::trainer::cuda
