#include "build_info.h"

#include <string>

namespace sweep {

std::string VersionText() {
  std::string text = "sweep " SWEEP_VERSION " (commit " + std::string(BuildCommit()) + ")\n";
#ifdef SWEEP_BUILT_CUDA
  // cuBLAS and NCCL are opened at the first GPU trial: the machine's own libraries are used.
  text += "CUDA: " SWEEP_BUILT_CUDA
          " (cuBLAS opened at run time; kernels for " SWEEP_BUILT_CUDA_ARCHS ")\n";
#else
  text += "CUDA: no (CPU slots only)\n";
#endif
#ifdef SWEEP_BUILT_CUDNN
  text += "cuDNN: " SWEEP_BUILT_CUDNN " (opened at run time; convolutional models on GPUs)\n";
#else
  text += "cuDNN: no (convolutional models train on the CPU)\n";
#endif
#ifdef SWEEP_BUILT_NCCL
  text += "NCCL: yes (opened at run time; trials with gpus > 1 on GPUs)\n";
#else
  text += "NCCL: no (one GPU per trial)\n";
#endif
  text += "BLAS: " SWEEP_BUILT_BLAS "\n";
  text += "agents: Boost.Asio " SWEEP_BUILT_BOOST ", OpenSSL " SWEEP_BUILT_OPENSSL;
  return text;
}

}  // namespace sweep
