// The CUDA backend's CNN kernels compiled by the host compiler against the kernel emulator's
// headers, as ops_emu.cc does for ops.cu.
#include "cuda/cnn_ops.cu"
