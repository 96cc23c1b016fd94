// Which GPUs a build's kernels run on (cuda/device_arch.h): CMake's architecture list read as
// nvcc and the driver use it, and the backend's refusal of a GPU outside it, or of bf16 before
// compute capability 8.0 (the emulator's capability set by the test). On a GPU: this build runs
// on it.
#include <string>

#include "backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_arch.h"
#include "gtest/gtest.h"
#include "model.h"
#include "trainer/trainer.h"

#if defined(SWEEP_CUDA_EMU)
#include <cuda_runtime_api.h>
#endif

namespace sweep::trainer::cuda {
namespace {

constexpr const char* kDefault = "75-real;80-real;90-real;90-virtual";

TEST(CudaArchitectures, MachineCodeRunsOnItsMajorVersionAndPtxOnLaterOnes) {
  struct Case {
    const char* archs;
    int major, minor;
    bool runs;
  };
  const Case cases[] = {
      {kDefault, 7, 5, true},     // T4
      {kDefault, 8, 0, true},     // A100
      {kDefault, 8, 6, true},     // A10, RTX 30: 8.0's machine code
      {kDefault, 8, 9, true},     // L4, RTX 40
      {kDefault, 9, 0, true},     // H100, H200
      {kDefault, 10, 0, true},    // B200: 9.0's PTX
      {kDefault, 12, 0, true},    // RTX 50
      {kDefault, 7, 0, false},    // V100
      {kDefault, 6, 1, false},    // P40
      {"90-real", 10, 0, false},  // no PTX
      {"90-real", 8, 9, false},
      {"80-virtual", 8, 6, true},
      {"80-virtual", 7, 5, false},
      {"80", 9, 0, true},  // real and virtual
      {"90a-real", 9, 0, true},
      {"90a-real;90a-virtual", 10, 0, false},  // 'a': that capability alone
      {"100f-real", 10, 3, true},
      {"75-real,86-real", 8, 9, true},  // the backend's own separator
      {"75-real,86-real", 8, 0, false},
      {"75,86", 8, 0, true},                // 7.5's PTX
      {"native", 6, 1, true},               // CMake resolves it: not ours to refuse
      {"99999999999999-real", 9, 0, true},  // not a capability: left to CMake too
      {"", 9, 0, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ArchitecturesRun(c.archs, c.major, c.minor), c.runs)
        << "\"" << c.archs << "\" on " << c.major << "." << c.minor;
  }
}

TEST(CudaArchitectures, DescribedForMessages) {
  EXPECT_EQ(DescribeArchitectures(kDefault),
            "machine code for 7.5, 8.0 and 9.0, PTX for 9.0 and later");
  EXPECT_EQ(DescribeArchitectures("86"), "machine code for 8.6, PTX for 8.6 and later");
  EXPECT_EQ(DescribeArchitectures("90a-real,native"), "machine code for 9.0a, native");
}

// Where a device is present (the emulator's, or a GPU), this build runs on it.
TEST(CudaArchitectures, TheDeviceRunsThisBuild) {
  if (!DeviceCount().ok()) GTEST_SKIP() << "no GPU";
  const Status s = CheckDeviceArchitecture(0, Precision::kBf16, BuiltArchitectures());
  EXPECT_TRUE(s.ok()) << s.message() << " (built for " << BuiltArchitectures() << ")";
}

// What `sweep devices` says of a GPU: nothing where the build runs on it.
TEST(CudaArchitectures, TheGapNamesTheRebuild) {
  EXPECT_EQ(GpuArchitectureGap(90), "");
  EXPECT_EQ(GpuArchitectureGap(86), "");
  const std::string gap = GpuArchitectureGap(61);
  EXPECT_NE(gap.find("compute capability 6.1: this build's kernels do not run on it"),
            std::string::npos)
      << gap;
  EXPECT_NE(gap.find("-DSWEEP_CUDA_ARCHITECTURES=\"61-real;"), std::string::npos) << gap;
}

#if defined(SWEEP_CUDA_EMU)
// The backend refuses a trial on a GPU the build has no code for, and bf16 on one before 8.0,
// saying what to change; fp16 on a 7.5 GPU trains.
TEST(CudaArchitectures, TheBackendRefusesAGpuItCannotRun) {
  GroupSpec spec;
  spec.model = ModelSpec::Mlp(4, {8}, 3, cpu::Activation::kRelu);
  spec.max_rows = 4;
  const int before = cuda_emu::SetComputeCapability(6, 1);
  Status s = GetBackend()->Supports(spec);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_NE(
      s.message().find("GPU 0, compute capability 6.1: this build's kernels do not run on it"),
      std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("-DSWEEP_CUDA_ARCHITECTURES=\"61-real;"), std::string::npos)
      << s.message();
  cuda_emu::SetComputeCapability(7, 5);
  spec.precision = Precision::kBf16;
  s = GetBackend()->Supports(spec);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find("precision = \"bf16\" needs a GPU of compute capability 8.0"),
            std::string::npos)
      << s.message();
  spec.precision = Precision::kFp16;
  EXPECT_TRUE(GetBackend()->Supports(spec).ok());
  cuda_emu::SetComputeCapability(before / 10, before % 10);
  spec.precision = Precision::kBf16;
  EXPECT_TRUE(GetBackend()->Supports(spec).ok());
}
#endif

}  // namespace
}  // namespace sweep::trainer::cuda
