// The CUDA backend's batch-norm kernels compiled by the host compiler against the kernel
// emulator's headers, as ops_emu.cc does for ops.cu.
#include "cuda/bn_ops.cu"
