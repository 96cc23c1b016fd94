// What the emulator's libraries (its NCCL and cuDNN) share with its runtime, cuda_emu.cc: where
// work will sit in a stream's queue, running a stream up to a position from another rank's
// thread (how a collective waiting for a rank gets that rank's part run), and the number
// formats' conversions. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>

#include "cuda_runtime_api.h"

namespace cuda_emu {

// The position the next work queued on `stream` will have (non-null stream).
uint64_t NextPosition(cudaStream_t stream);

// While `stream` captures (cudaStreamBeginCapture): records `issue`, which each launch of the
// graph calls with the stream it is launched on, and returns true. Otherwise false.
bool Capture(cudaStream_t stream, std::function<void(cudaStream_t)> issue);

// Runs `stream`'s work up to `position`, unless another thread is running that stream's work
// now (then returns false: it gets there itself).
bool TryRunTo(cudaStream_t stream, uint64_t position);

// Where p lies in the cudaMalloc buffer that holds it: its offset from the buffer's start, whose
// alignment on a GPU is 256 bytes (the emulator's own starts are not: each buffer ends at a
// guard page). False when no buffer holds p.
bool DeviceOffset(const void* p, uint64_t* offset);

// The TF32 value nearest x (10 explicit significand bits, ties to even), as tensor cores read
// fp32 inputs in TF32 mode.
float RoundTf32(float x);

// The float a 16-bit value's bits hold: bfloat16 when bf16, else IEEE binary16.
float WidenHalf(uint16_t bits, bool bf16);

}  // namespace cuda_emu
