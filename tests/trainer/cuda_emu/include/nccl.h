// The kernel emulator's NCCL: communicators made together (ncclCommInitAll), all-reduce (sum)
// and broadcast of floats and doubles, groups, destroy and abort, for ranks that are threads of
// one process sharing the host's memory. A collective completes when the last rank joins it,
// and each caller waits for that (NCCL itself returns at once and the stream waits): ranks that
// disagree on a collective's kind, size, type or root end the process naming both, as do ranks
// that wait more than a minute for one that never joins (a GPU would hang).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t { ncclFloat = 7, ncclFloat32 = 7, ncclDouble = 8, ncclFloat64 = 8 };

enum ncclRedOp_t { ncclSum = 0 };

struct ncclComm;
using ncclComm_t = ncclComm*;

const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
// ncclSuccess, or the error injected below (NCCL's faults of its own: a transport, a proxy).
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

namespace nccl_emu {
// For tests: every communicator reports `error` as its asynchronous error from now on, until
// set back to ncclSuccess.
void InjectAsyncError(ncclResult_t error);
}  // namespace nccl_emu
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
