// cuBLAS, cuDNN and NCCL, loaded when first called. Linked at build time, libcublasLt's static
// initialisers alone cost every `sweep` process (each worker, each query) about 0.1 s and 200 MB
// of resident memory before main, on CPU-only runs too, and a machine without the toolkit
// could not start the binary at all. Here the functions the backend uses are defined with their
// real signatures (from the toolkit's headers) and forward to the library, opened with dlopen
// on the first call; a library that cannot be found makes each call fail with a status whose
// string says why, so the trial fails with that message. Thread-safe (function-local statics).
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <cublas_v2.h>
#if defined(SWEEP_HAVE_CUDNN)
#include <cudnn.h>
#endif
#if defined(SWEEP_HAVE_NCCL)
#include <nccl.h>
#endif

namespace {

struct Library {
  void* handle = nullptr;
  std::string error;  // why it could not be opened
};

// Opens `soname` through the usual search (LD_LIBRARY_PATH, the system's), then in the library's
// folder found at build time, then in the folders a toolkit installed elsewhere usually has
// ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda): a machine whose loader was never told about its
// toolkit still finds it. The error kept is the first one, from the usual search.
Library Open(const char* soname, std::vector<std::string> dirs) {
  Library lib;
  lib.handle = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (lib.handle != nullptr) return lib;
  lib.error = ::dlerror();
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* root = std::getenv(var);
    if (root != nullptr && root[0] != '\0') {
      dirs.push_back(std::string(root) + "/lib64");
      dirs.push_back(std::string(root) + "/lib");
    }
  }
  dirs.push_back("/usr/local/cuda/lib64");
  dirs.push_back("/usr/local/cuda/targets/x86_64-linux/lib");
  for (const std::string& dir : dirs) {
    if (dir.empty()) continue;
    const std::string path = dir + "/" + soname;
    lib.handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle != nullptr) {
      lib.error.clear();
      return lib;
    }
  }
  return lib;
}

const Library& Cublas() {
  static const Library lib = Open(SWEEP_CUBLAS_SONAME, {SWEEP_CUDA_LIBRARY_DIR});
  return lib;
}

template <typename Fn>
Fn Symbol(const Library& lib, const char* name) {
  if (lib.handle == nullptr) return nullptr;
  return reinterpret_cast<Fn>(::dlsym(lib.handle, name));
}

// The status a call gets when its library or symbol is missing.
constexpr cublasStatus_t kCublasMissing = CUBLAS_STATUS_NOT_INITIALIZED;

}  // namespace

#define SWEEP_CUBLAS_FORWARD(name, fn_type, ...)           \
  static const auto fn = Symbol<fn_type>(Cublas(), #name); \
  if (fn == nullptr) return kCublasMissing;                \
  return fn(__VA_ARGS__)

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  SWEEP_CUBLAS_FORWARD(cublasCreate_v2, decltype(&cublasCreate_v2), handle);
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  SWEEP_CUBLAS_FORWARD(cublasDestroy_v2, decltype(&cublasDestroy_v2), handle);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  SWEEP_CUBLAS_FORWARD(cublasSetStream_v2, decltype(&cublasSetStream_v2), handle, stream);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  SWEEP_CUBLAS_FORWARD(cublasSetMathMode, decltype(&cublasSetMathMode), handle, mode);
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  SWEEP_CUBLAS_FORWARD(cublasSetWorkspace_v2, decltype(&cublasSetWorkspace_v2), handle, workspace,
                       bytes);
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  SWEEP_CUBLAS_FORWARD(cublasSgemm_v2, decltype(&cublasSgemm_v2), handle, transa, transb, m, n, k,
                       alpha, A, lda, B, ldb, beta, C, ldc);
}

// cublas_api.h also has a C++ overload taking cudaDataType: name the C one's type explicitly.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  SWEEP_CUBLAS_FORWARD(cublasGemmEx, GemmExFn, handle, transa, transb, m, n, k, alpha, A, Atype,
                       lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo);
}

const char* cublasGetStatusString(cublasStatus_t status) {
  static const auto fn =
      Symbol<decltype(&cublasGetStatusString)>(Cublas(), "cublasGetStatusString");
  if (fn != nullptr) return fn(status);
  static const std::string why =
      "cuBLAS (" SWEEP_CUBLAS_SONAME ") could not be loaded: " + Cublas().error;
  return why.c_str();
}

}  // extern "C"

#if defined(SWEEP_HAVE_NCCL)

namespace {

const Library& Nccl() {
  // Where the build found it (the toolkit's folder, or python's nvidia-nccl package), then the
  // toolkit's.
  static const Library lib = Open("libnccl.so.2", {SWEEP_NCCL_LIBRARY_DIR, SWEEP_CUDA_LIBRARY_DIR});
  return lib;
}

}  // namespace

#define SWEEP_NCCL_FORWARD(name, ...)                            \
  static const auto fn = Symbol<decltype(&name)>(Nccl(), #name); \
  if (fn == nullptr) return ncclSystemError;                     \
  return fn(__VA_ARGS__)

extern "C" {

ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  SWEEP_NCCL_FORWARD(ncclCommInitAll, comm, ndev, devlist);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { SWEEP_NCCL_FORWARD(ncclCommDestroy, comm); }

ncclResult_t ncclCommAbort(ncclComm_t comm) { SWEEP_NCCL_FORWARD(ncclCommAbort, comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  SWEEP_NCCL_FORWARD(ncclCommGetAsyncError, comm, asyncError);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  SWEEP_NCCL_FORWARD(ncclBroadcast, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  SWEEP_NCCL_FORWARD(ncclAllReduce, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclGroupStart() { SWEEP_NCCL_FORWARD(ncclGroupStart); }

ncclResult_t ncclGroupEnd() { SWEEP_NCCL_FORWARD(ncclGroupEnd); }

const char* ncclGetErrorString(ncclResult_t result) {
  static const auto fn = Symbol<decltype(&ncclGetErrorString)>(Nccl(), "ncclGetErrorString");
  if (fn != nullptr) return fn(result);
  static const std::string why = "NCCL (libnccl.so.2) could not be loaded: " + Nccl().error;
  return why.c_str();
}

}  // extern "C"

#endif  // SWEEP_HAVE_NCCL

#if defined(SWEEP_HAVE_CUDNN)

namespace {

const Library& Cudnn() {
  // libcudnn.so.9 is cuDNN's front library; it opens its engines' libraries from its own folder.
  static const Library lib = Open(SWEEP_CUDNN_SONAME, {SWEEP_CUDNN_LIBRARY_DIR});
  return lib;
}

}  // namespace

#define SWEEP_CUDNN_FORWARD(name, ...)                            \
  static const auto fn = Symbol<decltype(&name)>(Cudnn(), #name); \
  if (fn == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;         \
  return fn(__VA_ARGS__)

extern "C" {

size_t cudnnGetVersion() {
  static const auto fn = Symbol<decltype(&cudnnGetVersion)>(Cudnn(), "cudnnGetVersion");
  return fn != nullptr ? fn() : 0;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  static const auto fn = Symbol<decltype(&cudnnGetErrorString)>(Cudnn(), "cudnnGetErrorString");
  if (fn != nullptr) return fn(status);
  static const std::string why =
      "cuDNN (" SWEEP_CUDNN_SONAME ") could not be loaded: " + Cudnn().error;
  return why.c_str();
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  static const auto fn =
      Symbol<decltype(&cudnnGetLastErrorString)>(Cudnn(), "cudnnGetLastErrorString");
  if (fn != nullptr) {
    fn(message, max_size);
  } else if (message != nullptr && max_size > 0) {
    message[0] = '\0';
  }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) { SWEEP_CUDNN_FORWARD(cudnnCreate, handle); }

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) { SWEEP_CUDNN_FORWARD(cudnnDestroy, handle); }

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  SWEEP_CUDNN_FORWARD(cudnnSetStream, handle, stream);
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  SWEEP_CUDNN_FORWARD(cudnnGetStream, handle, stream);
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* descriptor) {
  SWEEP_CUDNN_FORWARD(cudnnBackendCreateDescriptor, type, descriptor);
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  SWEEP_CUDNN_FORWARD(cudnnBackendDestroyDescriptor, descriptor);
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  SWEEP_CUDNN_FORWARD(cudnnBackendFinalize, descriptor);
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* values) {
  SWEEP_CUDNN_FORWARD(cudnnBackendSetAttribute, descriptor, name, type, count, values);
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* count, void* values) {
  SWEEP_CUDNN_FORWARD(cudnnBackendGetAttribute, descriptor, name, type, requested, count, values);
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack) {
  SWEEP_CUDNN_FORWARD(cudnnBackendExecute, handle, plan, pack);
}

}  // extern "C"

#endif  // SWEEP_HAVE_CUDNN
