// What `sweep --version` prints: the version, the commit, and what was compiled in.
#ifndef SWEEP_SWEEP_BUILD_INFO_H_
#define SWEEP_SWEEP_BUILD_INFO_H_

#include <string>

namespace sweep {

// The commit the binary was built from (12 hex digits, "+changes" when the checkout had
// uncommitted changes), or "unknown" outside a git checkout. Written at build time.
const char* BuildCommit();

// Several lines: "sweep VERSION (commit C)", then one line per optional part (CUDA, cuBLAS,
// cuDNN, NCCL, BLAS, agents) saying whether and which version was compiled in; no final
// newline.
std::string VersionText();

}  // namespace sweep

#endif  // SWEEP_SWEEP_BUILD_INFO_H_
