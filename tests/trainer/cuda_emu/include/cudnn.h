// The kernel emulator's cuDNN: the part of the graph (backend) API that the trainer's
// convolutions and batch norm use (cuda/cudnn_conv.cc, cuda/cudnn_norm.cc), under cuDNN's
// names, implemented on the host
// (cudnn_emu.cc) from the API's documented contract:
// - Descriptors are typed; an attribute of the wrong type or count, or a descriptor not yet
//   finalized where one is expected, is CUDNN_STATUS_BAD_PARAM. Finalize checks what cuDNN
//   checks: every required attribute set, strides and dimensions of equal length, an output
//   shape that follows from the input, filter and convolution, one data type for the three
//   tensors, and a handle for graphs and plans.
// - The heuristics rank four engines for a convolution: 1 (nondeterministic), 3 (which never
//   builds a plan: NOT_SUPPORTED, as an engine unfit for a shape does), 0 (tensor cores: fp32
//   inputs are read as TF32; 4 KiB of workspace, which it overwrites) and 2 (exact fp32
//   products); the fallback mode gives 2 alone.
// - Batch norm (NORM_FORWARD in the training phase, NORM_BACKWARD; fp32) has two engines: 5
//   (nondeterministic) and 6, which builds only when the channels are a multiple of 4, as
//   cuDNN's specialized batch-norm engines ask of fp32, and overwrites 256 bytes of workspace;
//   the fallback mode gives none. The inference phase of batch norm is NOT_SUPPORTED, as in
//   cuDNN's graph API. By-value tensors (epsilon, the momentum) are read when the plan executes.
// - Execute checks that every descriptor behind the plan is still alive and that the variant
//   pack has a pointer for each tensor, then queues the convolution on the handle's stream;
//   sums run in double, 16-bit outputs are rounded to nearest even.
// Enumerators keep cuDNN's names; their values are the emulator's own.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

enum cudnnStatus_t {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
  CUDNN_STATUS_INTERNAL_ERROR = 4000,
  CUDNN_STATUS_EXECUTION_FAILED = 5000,
};

struct cudnnContext;
using cudnnHandle_t = cudnnContext*;
using cudnnBackendDescriptor_t = void*;

enum cudnnDataType_t { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_HALF = 2, CUDNN_DATA_BFLOAT16 = 9 };

enum cudnnConvolutionMode_t { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 };

enum cudnnBackendDescriptorType_t {
  CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
  CUDNN_BACKEND_ENGINE_DESCRIPTOR,
  CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
  CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
  CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
  CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
  CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
  CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
  CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR,
  CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR,
  CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
  CUDNN_BACKEND_TENSOR_DESCRIPTOR,
  CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
};

enum cudnnBackendAttributeType_t {
  CUDNN_TYPE_HANDLE,
  CUDNN_TYPE_BOOLEAN,
  CUDNN_TYPE_DATA_TYPE,
  CUDNN_TYPE_INT64,
  CUDNN_TYPE_FLOAT,
  CUDNN_TYPE_DOUBLE,
  CUDNN_TYPE_VOID_PTR,
  CUDNN_TYPE_CONVOLUTION_MODE,
  CUDNN_TYPE_HEUR_MODE,
  CUDNN_TYPE_NUMERICAL_NOTE,
  CUDNN_TYPE_BACKEND_DESCRIPTOR,
  CUDNN_TYPE_NORM_MODE,
  CUDNN_TYPE_NORM_FWD_PHASE,
};

enum cudnnBackendAttributeName_t {
  CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
  CUDNN_ATTR_CONVOLUTION_CONV_MODE,
  CUDNN_ATTR_CONVOLUTION_DILATIONS,
  CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
  CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
  CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
  CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
  CUDNN_ATTR_ENGINEHEUR_MODE,
  CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
  CUDNN_ATTR_ENGINEHEUR_RESULTS,
  CUDNN_ATTR_ENGINECFG_ENGINE,
  CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
  CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
  CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
  CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
  CUDNN_ATTR_OPERATIONGRAPH_OPS,
  CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
  CUDNN_ATTR_TENSOR_DATA_TYPE,
  CUDNN_ATTR_TENSOR_DIMENSIONS,
  CUDNN_ATTR_TENSOR_STRIDES,
  CUDNN_ATTR_TENSOR_UNIQUE_ID,
  CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
  CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
  CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
  CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
  CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
  CUDNN_ATTR_TENSOR_IS_BY_VALUE,
  CUDNN_ATTR_OPERATION_NORM_FWD_MODE,
  CUDNN_ATTR_OPERATION_NORM_FWD_PHASE,
  CUDNN_ATTR_OPERATION_NORM_FWD_XDESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_YDESC,
  CUDNN_ATTR_OPERATION_NORM_FWD_PEER_STAT_DESCS,
  CUDNN_ATTR_OPERATION_NORM_BWD_MODE,
  CUDNN_ATTR_OPERATION_NORM_BWD_XDESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC,
  CUDNN_ATTR_OPERATION_NORM_BWD_PEER_STAT_DESCS,
};

enum cudnnBackendNormMode_t {
  CUDNN_LAYER_NORM = 0,
  CUDNN_INSTANCE_NORM = 1,
  CUDNN_BATCH_NORM = 2,
  CUDNN_GROUP_NORM = 3,
  CUDNN_RMS_NORM = 4,
};

enum cudnnBackendNormFwdPhase_t { CUDNN_NORM_FWD_INFERENCE = 0, CUDNN_NORM_FWD_TRAINING = 1 };

enum cudnnBackendHeurMode_t {
  CUDNN_HEUR_MODE_INSTANT = 0,
  CUDNN_HEUR_MODE_B = 1,
  CUDNN_HEUR_MODE_FALLBACK = 2,
  CUDNN_HEUR_MODE_A = 3,
};

enum cudnnBackendNumericalNote_t {
  CUDNN_NUMERICAL_NOTE_TENSOR_CORE = 0,
  CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
  CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
  CUDNN_NUMERICAL_NOTE_FFT,
  CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC,
  CUDNN_NUMERICAL_NOTE_WINOGRAD,
  CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
};

size_t cudnnGetVersion();
const char* cudnnGetErrorString(cudnnStatus_t status);
void cudnnGetLastErrorString(char* message, size_t max_size);
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream);
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream);
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* descriptor);
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* values);
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* count, void* values);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack);

namespace cuda_emu {

// For tests: the bytes of workspace engine 0's plans ask for (4 KiB unless set), as a real
// engine may ask for a large one. Returns the previous value.
int64_t SetConvWorkspace(int64_t bytes);

}  // namespace cuda_emu
