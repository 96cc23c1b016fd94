// Checked wrappers for the CUDA backend (llm.c's cudaCheck, as values): CUDA_CHECK(stmt),
// CUBLAS_CHECK(stmt) and NCCL_CHECK(stmt) return, from the enclosing function that returns a
// Status, an error naming the statement, the library's error string, the file and the line.
// ThrowIfError carries such a Status through the ReplicaGroup methods that return no Status;
// Train() catches it at its edge and the trial fails with that message. Thread-safe.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>

#include "base/status.h"

namespace sweep::trainer::cuda {

Status CudaStatus(cudaError_t err, const char* stmt, const char* file, int line);
Status CublasStatus(cublasStatus_t err, const char* stmt, const char* file, int line);
// NCCL's result as an int (ncclResult_t), so this header needs no nccl.h.
Status NcclStatus(int err, const char* error_string, const char* stmt, const char* file, int line);
// cuDNN's status as an int (cudnnStatus_t) and cudnnGetLastErrorString's detail (may be empty),
// so this header needs no cudnn.h.
Status CudnnStatus(int err, const char* error_string, const char* detail, const char* stmt,
                   const char* file, int line);

// What ThrowIfError throws: a std::runtime_error, so Train()'s catch turns it into a Status.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CudaError(s.message()) when s is not ok.
void ThrowIfError(const Status& s);

}  // namespace sweep::trainer::cuda

#define CUDA_CHECK(stmt)                                                                     \
  do {                                                                                       \
    const cudaError_t sweep_cuda_err_ = (stmt);                                              \
    if (sweep_cuda_err_ != cudaSuccess) {                                                    \
      return ::sweep::trainer::cuda::CudaStatus(sweep_cuda_err_, #stmt, __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

#define CUBLAS_CHECK(stmt)                                                                       \
  do {                                                                                           \
    const cublasStatus_t sweep_cublas_err_ = (stmt);                                             \
    if (sweep_cublas_err_ != CUBLAS_STATUS_SUCCESS) {                                            \
      return ::sweep::trainer::cuda::CublasStatus(sweep_cublas_err_, #stmt, __FILE__, __LINE__); \
    }                                                                                            \
  } while (0)

// Only where cudnn.h is included. cuDNN keeps why a call failed (which attribute, which shape)
// for cudnnGetLastErrorString; the message carries it.
#define CUDNN_CHECK(stmt)                                                                         \
  do {                                                                                            \
    const cudnnStatus_t sweep_cudnn_err_ = (stmt);                                                \
    if (sweep_cudnn_err_ != CUDNN_STATUS_SUCCESS) {                                               \
      char sweep_cudnn_detail_[512] = "";                                                         \
      cudnnGetLastErrorString(sweep_cudnn_detail_, sizeof(sweep_cudnn_detail_));                  \
      return ::sweep::trainer::cuda::CudnnStatus(static_cast<int>(sweep_cudnn_err_),              \
                                                 cudnnGetErrorString(sweep_cudnn_err_),           \
                                                 sweep_cudnn_detail_, #stmt, __FILE__, __LINE__); \
    }                                                                                             \
  } while (0)

// Only where nccl.h is included (multi-GPU code).
#define NCCL_CHECK(stmt)                                                                    \
  do {                                                                                      \
    const ncclResult_t sweep_nccl_err_ = (stmt);                                            \
    if (sweep_nccl_err_ != ncclSuccess) {                                                   \
      return ::sweep::trainer::cuda::NcclStatus(static_cast<int>(sweep_nccl_err_),          \
                                                ncclGetErrorString(sweep_nccl_err_), #stmt, \
                                                __FILE__, __LINE__);                        \
    }                                                                                       \
  } while (0)
