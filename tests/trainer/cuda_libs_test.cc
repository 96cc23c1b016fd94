// The CUDA build's loading of its libraries. cuBLAS is opened at its first call (cuda_libs.cc),
// not at start-up; this needs no device, so it runs wherever the toolkit's libraries are
// installed.
#include <cublas_v2.h>

#include "gtest/gtest.h"

namespace {

TEST(CudaLibs, CublasIsLoadedOnFirstCall) {
  // The library's own words, not the loader's "could not be loaded".
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "success");
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED),
               "the library was not initialized");
}

}  // namespace
