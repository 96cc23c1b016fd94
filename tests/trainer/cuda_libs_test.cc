// The CUDA build's loading of its libraries. cuBLAS is opened at its first call (cuda_libs.cc),
// not at start-up; this needs no device, so it runs wherever the toolkit's libraries are
// installed.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace {

// Whether this process has cuBLAS loaded: RTLD_NOLOAD finds a loaded library by its soname and
// loads nothing.
bool CublasLoaded() {
  void* handle = ::dlopen(SWEEP_CUBLAS_SONAME, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  ::dlclose(handle);  // the reference RTLD_NOLOAD took
  return true;
}

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

}  // namespace
