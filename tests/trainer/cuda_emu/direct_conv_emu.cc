// The CUDA backend's direct-convolution kernels compiled by the host compiler against the kernel
// emulator's headers, as ops_emu.cc does for ops.cu.
#include "cuda/direct_conv.cu"
