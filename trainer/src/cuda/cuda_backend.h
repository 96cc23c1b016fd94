// The CUDA backend: a replica is a GPU with its own stream and cuBLAS handle, driven by one
// thread; the kernels are cuda/ops.h's. Owned by the registry (backend.cc); the returned
// Backend is a stateless singleton, safe from any thread. It supports a group only where a
// device is present at run time, so the CPU backend takes the rest.
#pragma once

#include <string>

#include "backend.h"

namespace sweep::trainer::cuda {

const Backend* GetBackend();

// The number of CUDA devices this process can use, or why there are none (no driver, no
// device). Asked once; later calls return the first answer.
Result<int> DeviceCount();

// trainer::GpuContextFault for the devices this process has built groups on: "" when each still
// synchronises cleanly, else the first device's error.
std::string ContextFault();

// The bytes each GPU of the group must hold at least for `spec` (weights, gradients, optimizer
// state, 16-bit weights, activations for spec.max_rows rows): what the check before training
// compares with the free memory. A lower bound of what a replica allocates.
double DeviceBytesNeeded(const GroupSpec& spec);

}  // namespace sweep::trainer::cuda
