// The checked wrappers' messages: "cuda: <statement>: <error> (<name>) at <file>:<line>".
#include "cuda/cuda_check.h"

#include <cstring>
#include <string>

namespace sweep::trainer::cuda {
namespace {

// The file's name without its directories: enough to find it, and stable across checkouts.
const char* BaseName(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash != nullptr ? slash + 1 : file;
}

Status Make(const char* lib, const std::string& what, const char* stmt, const char* file,
            int line) {
  return Status::Internal(std::string(lib) + ": " + stmt + " failed: " + what + " at " +
                          BaseName(file) + ":" + std::to_string(line));
}

}  // namespace

Status CudaStatus(cudaError_t err, const char* stmt, const char* file, int line) {
  // The runtime also keeps a failed call's error for the thread's next cudaGetLastError(): left
  // there, the next launch check on this thread (the next trial's, a worker being reused) would
  // report it as its own. A sticky error (the context is lost) comes back from every call anyway.
  (void)cudaGetLastError();
  return Make("cuda", std::string(cudaGetErrorString(err)) + " (" + cudaGetErrorName(err) + ")",
              stmt, file, line);
}

Status CublasStatus(cublasStatus_t err, const char* stmt, const char* file, int line) {
  return Make("cublas", std::string(cublasGetStatusString(err)) + " (" + std::to_string(err) + ")",
              stmt, file, line);
}

Status NcclStatus(int err, const char* error_string, const char* stmt, const char* file, int line) {
  return Make("nccl", std::string(error_string) + " (" + std::to_string(err) + ")", stmt, file,
              line);
}

Status CudnnStatus(int err, const char* error_string, const char* detail, const char* stmt,
                   const char* file, int line) {
  std::string what = std::string(error_string) + " (" + std::to_string(err) + ")";
  if (detail != nullptr && detail[0] != '\0') what += std::string(": ") + detail;
  return Make("cudnn", what, stmt, file, line);
}

void ThrowIfError(const Status& s) {
  if (!s.ok()) throw CudaError(s.message());
}

}  // namespace sweep::trainer::cuda
