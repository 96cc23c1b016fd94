// Which GPUs this build's kernels run on. CMake's CUDA_ARCHITECTURES list
// (SWEEP_CUDA_ARCHITECTURES, e.g. "75-real;80-real;90-real;90-virtual") says what nvcc compiled:
// machine code for a capability runs on GPUs of the same major version and a minor one no lower;
// PTX is compiled by the driver for any GPU of its capability or later. A GPU outside both fails
// every launch with "no kernel image"; the backend refuses it first, naming the fix.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "model.h"

namespace sweep::trainer::cuda {

// Whether code built for `archs` (entries separated by ';' or ',') runs on a GPU of compute
// capability major.minor. Entries CMake resolves itself ("all", "native", ...) are taken to
// cover it.
bool ArchitecturesRun(std::string_view archs, int major, int minor);

// "machine code for 7.5, 8.0 and 9.0, PTX for 9.0 and later", for messages.
std::string DescribeArchitectures(std::string_view archs);

// Why code built for `archs` does not run on a GPU of capability major.minor, naming the
// rebuild ("compute capability 6.1: no code for it in this build (...); rebuild with ..."), or
// empty where it runs.
std::string ArchitectureGap(std::string_view archs, int major, int minor);

// GPU `device`'s capability against `archs`, and bf16 (tensor cores and cuDNN's engines from
// 8.0 on): InvalidArgument naming the GPU, its capability and what to change.
Status CheckDeviceArchitecture(int device, Precision precision, std::string_view archs);

// The list this build was compiled for.
std::string_view BuiltArchitectures();

}  // namespace sweep::trainer::cuda
