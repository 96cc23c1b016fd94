// Kernel launches for cuda/ops.cu: Launch(kernel, grid, block, stream, args...) is
// kernel<<<grid, block, 0, stream>>>(args...) under nvcc. Compiled by a host compiler instead,
// it hands the kernel to the kernel emulator (tests/trainer/cuda_emu), which runs every thread
// of every block on the CPU; so the kernels' own source is what those tests run, on machines
// without a GPU. Errors surface as a launch's do: through cudaGetLastError().
#pragma once

#include <cuda_runtime_api.h>

namespace sweep::trainer::cuda {

template <typename... Params, typename... Args>
void Launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  // The check after a launch reads the thread's last error, which any earlier runtime call may
  // have set, NCCL's and cuBLAS's own included (an event query answered "not ready"): start from
  // none, so the check sees this launch's error only. Every call of ours is checked where made.
  (void)cudaGetLastError();
#if defined(__CUDACC__)
  kernel<<<grid, block, 0, stream>>>(args...);
#else
  cuda_emu::Launch(grid, block, stream, [=] { kernel(args...); });
#endif
}

}  // namespace sweep::trainer::cuda
