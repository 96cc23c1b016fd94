// The emulator's streams as its NCCL sees them (cuda_emu.cc owns them): where work will sit in
// a stream's queue, and running a stream up to a position from another rank's thread, which is
// how a collective waiting for a rank gets that rank's part run. Thread-safe.
#pragma once

#include <cstdint>

#include "cuda_runtime_api.h"

namespace cuda_emu {

// The position the next work queued on `stream` will have (non-null stream).
uint64_t NextPosition(cudaStream_t stream);

// Runs `stream`'s work up to `position`, unless another thread is running that stream's work
// now (then returns false: it gets there itself).
bool TryRunTo(cudaStream_t stream, uint64_t position);

}  // namespace cuda_emu
