// The CUDA backend's kernels and host entry points, compiled by the host compiler against the
// kernel emulator's headers (include/): the same source file that nvcc builds for the GPU.
#include "cuda/ops.cu"
