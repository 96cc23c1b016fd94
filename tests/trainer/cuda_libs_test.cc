// The CUDA build's loading of its libraries. cuBLAS and cuDNN are opened at their first call
// (cuda_libs.cc), not at start-up; this needs no device, so it runs wherever the toolkit's
// libraries are installed.
#include <cublas_v2.h>
#include <dlfcn.h>
#if defined(SWEEP_CUDNN_SONAME)
#include <cudnn.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace {

// Whether this process has the library of that soname loaded: RTLD_NOLOAD finds a loaded
// library by its soname and loads nothing.
bool Loaded(const char* soname) {
  void* handle = ::dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  ::dlclose(handle);  // the reference RTLD_NOLOAD took
  return true;
}

bool CublasLoaded() { return Loaded(SWEEP_CUBLAS_SONAME); }

// For the child process below: says why on stderr, which the test's failure shows.
[[noreturn]] void ExitWith(int code, const char* why, const char* detail = "") {
  std::fprintf(stderr, "%s%s\n", why, detail);
  std::exit(code);
}

TEST(CudaLibs, CublasIsLoadedOnFirstCall) {
  // In a process of its own, started afresh ("threadsafe" re-executes this binary for this test
  // alone): a forked one would inherit what the tests before this one loaded.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (CublasLoaded()) ExitWith(1, "cuBLAS is loaded before any cuBLAS call");
        const char* success = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
        if (!CublasLoaded()) ExitWith(2, "cuBLAS is not loaded after its first call");
        // The library's own words, not the loader's "could not be loaded".
        if (std::strcmp(success, "success") != 0) ExitWith(3, "CUBLAS_STATUS_SUCCESS: ", success);
        const char* not_init = cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
        if (std::strcmp(not_init, "the library was not initialized") != 0) {
          ExitWith(4, "CUBLAS_STATUS_NOT_INITIALIZED: ", not_init);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

#if defined(SWEEP_CUDNN_SONAME)
TEST(CudaLibs, CudnnIsLoadedOnFirstCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (Loaded(SWEEP_CUDNN_SONAME)) ExitWith(1, "cuDNN is loaded before any cuDNN call");
        const size_t version = cudnnGetVersion();
        if (!Loaded(SWEEP_CUDNN_SONAME)) ExitWith(2, "cuDNN is not loaded after its first call");
        // The library found is the one built against (its major version at least), and it
        // answers in its own words.
        if (version / 10000 != CUDNN_MAJOR)
          ExitWith(3, "cuDNN's version: ", std::to_string(version).c_str());
        const char* bad = cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM);
        if (std::strstr(bad, "could not be loaded") != nullptr) ExitWith(4, bad);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}
#endif

}  // namespace
