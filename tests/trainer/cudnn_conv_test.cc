// cuDNN's convolutions (cuda/cudnn_conv.h) against the CPU's (cpu/conv_ops.h): forward, the
// data gradient and the weight gradient, over shapes with padding, strides, 1x1 and 5x5
// filters, in fp32 (exact and TF32), bf16 and fp16. The inputs are first rounded to the
// precision's storage, so the bounds cover only the products' rounding (TF32: 10-bit
// significands, 5e-3) and the output's (bf16: 2^-9 relative, 1e-2; fp16: 2^-12, 2e-3); exact
// fp32 differs by summation order alone (1e-5). Skipped where no CUDA device is present
// (ctest label `gpu`); the emulator runs the same file on every machine (`emu.` tests), where
// cuDNN's graph API is emulated (cuda_emu/include/cudnn.h).
#include "cuda/cudnn_conv.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/conv_ops.h"
#include "cpu/ops.h"
#include "cuda/cnn_ops.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_buffer.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace sweep::trainer::cuda {
namespace {

using test::Count;
using test::Down;
using test::ExpectErr;
using test::FromBf16;
using test::FromFp16;
using test::HostBf16;
using test::HostFp16;
using test::NormErr;
using test::Up;
using testing::Random;

// The values x holds once stored in precision p: what the device reads.
std::vector<float> Stored(std::vector<float> x, Precision p) {
  if (p == Precision::kBf16)
    cpu::round_to_half(x.data(), x.data(), int64_t(x.size()), HalfType::kBf16);
  if (p == Precision::kFp16)
    cpu::round_to_half(x.data(), x.data(), int64_t(x.size()), HalfType::kFp16);
  return x;
}

// x in precision p's storage on the device.
DeviceBuffer<uint8_t> Upload(const std::vector<float>& x, Precision p) {
  std::vector<uint8_t> bytes;
  if (p == Precision::kFp32) {
    bytes.resize(x.size() * 4);
    std::memcpy(bytes.data(), x.data(), bytes.size());
  } else {
    std::vector<uint16_t> h;
    for (float v : x) h.push_back(p == Precision::kBf16 ? HostBf16(v) : HostFp16(v));
    bytes.resize(h.size() * 2);
    std::memcpy(bytes.data(), h.data(), bytes.size());
  }
  DeviceBuffer<uint8_t> d;
  EXPECT_TRUE(DeviceBuffer<uint8_t>::Make(int64_t(bytes.size()), &d).ok());
  EXPECT_EQ(cudaMemcpy(d.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

// n values of precision p from the device, as floats.
std::vector<float> Download(const DeviceBuffer<uint8_t>& d, size_t n, Precision p) {
  std::vector<uint8_t> bytes(static_cast<size_t>(d.size()));
  EXPECT_EQ(cudaMemcpy(bytes.data(), d.data(), bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> out(n);
  if (p == Precision::kFp32) {
    std::memcpy(out.data(), bytes.data(), n * 4);
    return out;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = p == Precision::kBf16 ? FromBf16(h) : FromFp16(h);
  }
  return out;
}

std::string Name(const cpu::ConvShape& s, const ConvOptions& o) {
  const char* p = o.precision == Precision::kBf16   ? "bf16"
                  : o.precision == Precision::kFp16 ? "fp16"
                  : o.tf32                          ? "tf32"
                                                    : "fp32";
  return std::string(p) + " " + std::to_string(s.H) + "x" + std::to_string(s.W) + "x" +
         std::to_string(s.C) + " k" + std::to_string(s.K) + " s" + std::to_string(s.stride) + " p" +
         std::to_string(s.pad) + " -> " + std::to_string(s.OC);
}

double Bound(const ConvOptions& o) {
  switch (o.precision) {
    case Precision::kBf16:
      return 1e-2;
    case Precision::kFp16:
      return 2e-3;
    case Precision::kFp32:
      break;
  }
  return o.tf32 ? 5e-3 : 1e-5;
}

// An input layer's convolution of shape s in precision p's storage: random inputs from seeds
// seed, seed + 1 and seed + 2, the CPU's forward and weight gradient of them, and the same on
// the device (outputs zeroed), uploaded through the legacy stream.
struct InputLayerCase {
  InputLayerCase(const cpu::ConvShape& s, Precision p, uint64_t seed)
      : nx(int64_t{s.B} * s.H * s.W * s.C),
        nw(s.OC * s.patch()),
        ny(int64_t{s.B} * s.OH() * s.OW() * s.OC),
        x(Stored(Random(Count(nx), seed), p)),
        w(Stored(Random(Count(nw), seed + 1, 0.5), p)),
        dy(Stored(Random(Count(ny), seed + 2), p)),
        y_ref(Count(ny)),
        dw_ref(Count(nw)) {
    std::vector<float> scratch(Count(cpu::conv2d_scratch_floats(s)));
    cpu::conv2d_forward(y_ref.data(), x.data(), w.data(), nullptr, s, scratch.data());
    cpu::conv2d_backward(nullptr, dw_ref.data(), nullptr, dy.data(), x.data(), w.data(), s,
                         scratch.data(), false, false);
    dev_x = Upload(x, p);
    dev_w = Upload(w, p);
    dev_dy = Upload(dy, p);
    dev_y = Upload(std::vector<float>(Count(ny)), p);
    dev_dw = Upload(std::vector<float>(Count(nw)), p);
  }
  int64_t nx, nw, ny;
  std::vector<float> x, w, dy, y_ref, dw_ref;
  DeviceBuffer<uint8_t> dev_x, dev_w, dev_dy, dev_y, dev_dw;
};

class CudnnConvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> devices = DeviceCount();
    if (!devices.ok()) GTEST_SKIP() << devices.status().message();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    const Status s = CreateCudnnHandle(stream_, &handle_);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  void TearDown() override {
    if (handle_ != nullptr) cudnnDestroy(handle_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Runs the three directions of `s` and compares each with the CPU's; returns the plans'
  // description (empty when they could not be made).
  std::string Check(const cpu::ConvShape& s, const ConvOptions& o) {
    const std::string name = Name(s, o);
    Result<std::unique_ptr<CudnnConv>> made = CudnnConv::Create(handle_, s, o);
    EXPECT_TRUE(made.ok()) << name << ": " << made.status().message();
    if (!made.ok()) return "";
    const CudnnConv& conv = *made.value();
    const int64_t nx = int64_t{s.B} * s.H * s.W * s.C, nw = s.OC * s.patch();
    const int64_t ny = int64_t{s.B} * s.OH() * s.OW() * s.OC;
    const std::vector<float> x = Stored(Random(Count(nx), 1), o.precision);
    const std::vector<float> w = Stored(Random(Count(nw), 2, 0.5), o.precision);
    const std::vector<float> dy = Stored(Random(Count(ny), 3), o.precision);

    std::vector<float> y_ref(Count(ny)), dx_ref(Count(nx)), dw_ref(Count(nw));
    std::vector<float> scratch(Count(cpu::conv2d_scratch_floats(s)));
    cpu::conv2d_forward(y_ref.data(), x.data(), w.data(), nullptr, s, scratch.data());
    cpu::conv2d_backward(dx_ref.data(), dw_ref.data(), nullptr, dy.data(), x.data(), w.data(), s,
                         scratch.data(), false, false);

    DeviceBuffer<uint8_t> dev_x = Upload(x, o.precision), dev_w = Upload(w, o.precision);
    DeviceBuffer<uint8_t> dev_dy = Upload(dy, o.precision);
    DeviceBuffer<uint8_t> dev_y = Upload(std::vector<float>(Count(ny)), o.precision);
    DeviceBuffer<uint8_t> dev_dx = Upload(std::vector<float>(Count(nx)), o.precision);
    DeviceBuffer<uint8_t> dev_dw = Upload(std::vector<float>(Count(nw)), o.precision);
    DeviceBuffer<uint8_t> workspace;  // exactly what the plans asked for
    EXPECT_TRUE(DeviceBuffer<uint8_t>::Make(int64_t(conv.workspace_bytes()), &workspace).ok());
    // The uploads went through the legacy stream, which stream_ does not wait for.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (Status st :
         {conv.Forward(dev_y.data(), dev_x.data(), dev_w.data(), workspace.data()),
          conv.BackwardData(dev_dx.data(), dev_dy.data(), dev_w.data(), workspace.data()),
          conv.BackwardFilter(dev_dw.data(), dev_x.data(), dev_dy.data(), workspace.data())}) {
      EXPECT_TRUE(st.ok()) << name << ": " << st.message();
    }
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const double bound = Bound(o);
    ExpectErr((name + " forward").c_str(), NormErr(Download(dev_y, Count(ny), o.precision), y_ref),
              bound);
    ExpectErr((name + " backward data").c_str(),
              NormErr(Download(dev_dx, Count(nx), o.precision), dx_ref), bound);
    ExpectErr((name + " backward filter").c_str(),
              NormErr(Download(dev_dw, Count(nw), o.precision), dw_ref), bound);
    return conv.Describe();
  }

  cudaStream_t stream_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
};

// B, H, W, C, OC, K, stride, pad.
const cpu::ConvShape kShapes[] = {
    {2, 7, 6, 3, 5, 3, 1, 1},    // odd sizes, "same" padding
    {3, 9, 9, 4, 8, 3, 2, 1},    // stride 2
    {2, 5, 5, 16, 16, 1, 1, 0},  // 1x1
    {1, 8, 8, 2, 3, 5, 2, 2},    // 5x5, stride 2
};

TEST_F(CudnnConvTest, EveryDirectionMatchesTheCpuInEveryPrecision) {
  for (const cpu::ConvShape& s : kShapes) {
    for (ConvOptions o : {ConvOptions{Precision::kFp32, false}, ConvOptions{Precision::kFp32, true},
                          ConvOptions{Precision::kBf16}, ConvOptions{Precision::kFp16}}) {
      const std::string plans = Check(s, o);
      std::printf("  %s: %s\n", Name(s, o).c_str(), plans.c_str());
#if defined(SWEEP_CUDA_EMU)
      // The emulator's engine 1 is nondeterministic and engine 3 never builds; engine 0 has
      // tensor cores (TF32 for fp32), which exact fp32 must not take.
      EXPECT_EQ(plans.find("engine 1"), std::string::npos) << plans;
      EXPECT_EQ(plans.find("engine 3"), std::string::npos) << plans;
      const bool exact = o.precision == Precision::kFp32 && !o.tf32;
      EXPECT_EQ(plans.find("tensor-core") != std::string::npos, !exact) << plans;
#endif
    }
  }
}

TEST_F(CudnnConvTest, AutotuneKeepsAPlanThatAgreesAndRepeatsItself) {
  const cpu::ConvShape s{4, 12, 12, 8, 16, 3, 1, 1};
  ConvOptions o{Precision::kBf16};
  o.autotune = true;
  EXPECT_FALSE(Check(s, o).empty());

  // The same inputs twice give the same bits (no nondeterministic engine is taken).
  Result<std::unique_ptr<CudnnConv>> made = CudnnConv::Create(handle_, s, o);
  ASSERT_TRUE(made.ok()) << made.status().message();
  const CudnnConv& conv = *made.value();
  const int64_t nx = int64_t{s.B} * s.H * s.W * s.C, nw = s.OC * s.patch();
  const int64_t ny = int64_t{s.B} * s.OH() * s.OW() * s.OC;
  DeviceBuffer<uint8_t> x = Upload(Random(Count(nx), 4), o.precision);
  DeviceBuffer<uint8_t> dy = Upload(Random(Count(ny), 5), o.precision);
  DeviceBuffer<uint8_t> dw = Upload(std::vector<float>(Count(nw)), o.precision);
  DeviceBuffer<uint8_t> workspace;
  ASSERT_TRUE(DeviceBuffer<uint8_t>::Make(int64_t(conv.workspace_bytes()), &workspace).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads, on the legacy stream
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(conv.BackwardFilter(dw.data(), x.data(), dy.data(), workspace.data()).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const std::vector<float> got = Download(dw, Count(nw), o.precision);
    if (run == 0) {
      first = got;
    } else {
      EXPECT_EQ(std::memcmp(first.data(), got.data(), first.size() * 4), 0);
    }
  }
}

// A network's first convolution reads the model's input (one channel for Fashion-MNIST) and
// needs no data gradient: it is not planned, so a missing engine for it cannot stop training.
TEST_F(CudnnConvTest, TheInputLayersConvolutionPlansNoDataGradient) {
  const cpu::ConvShape s{4, 10, 10, 1, 8, 3, 1, 1};
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    ConvOptions o{precision};
    o.backward_data = false;
    Result<std::unique_ptr<CudnnConv>> made = CudnnConv::Create(handle_, s, o);
    ASSERT_TRUE(made.ok()) << Name(s, o) << ": " << made.status().message();
    const CudnnConv& conv = *made.value();
    const std::string plans = conv.Describe();
    EXPECT_NE(plans.find("forward"), std::string::npos) << plans;
    EXPECT_NE(plans.find("backward filter"), std::string::npos) << plans;
    EXPECT_EQ(plans.find("backward data"), std::string::npos) << plans;
    const Status none = conv.BackwardData(nullptr, nullptr, nullptr, nullptr);
    EXPECT_FALSE(none.ok());
    EXPECT_NE(none.message().find("backward data convolution of input 4x10x10x1"),
              std::string::npos)
        << none.message();
    // The two it does plan compute what the CPU does.
    InputLayerCase k(s, precision, 6);
    DeviceBuffer<uint8_t> workspace;
    ASSERT_TRUE(DeviceBuffer<uint8_t>::Make(int64_t(conv.workspace_bytes()), &workspace).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads, on the legacy stream
    ASSERT_TRUE(
        conv.Forward(k.dev_y.data(), k.dev_x.data(), k.dev_w.data(), workspace.data()).ok());
    ASSERT_TRUE(
        conv.BackwardFilter(k.dev_dw.data(), k.dev_x.data(), k.dev_dy.data(), workspace.data())
            .ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ExpectErr((Name(s, o) + " forward").c_str(),
              NormErr(Download(k.dev_y, Count(k.ny), precision), k.y_ref), Bound(o));
    ExpectErr((Name(s, o) + " backward filter").c_str(),
              NormErr(Download(k.dev_dw, Count(k.nw), precision), k.dw_ref), Bound(o));
    std::printf("  %s: %s\n", Name(s, o).c_str(), plans.c_str());
  }
}

TEST_F(CudnnConvTest, RefusesAShapeWithoutAnOutputNamingIt) {
  const cpu::ConvShape s{1, 4, 4, 3, 8, 7, 1, 1};  // a 7x7 filter over 4x4 padded to 6x6
  Result<std::unique_ptr<CudnnConv>> made = CudnnConv::Create(handle_, s, ConvOptions{});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(made.status().message().find("input 1x4x4x3, 8 filters 7x7"), std::string::npos)
      << made.status().message();
}

// The direct kernels for a few input channels (cuda/cnn_ops.h), which a net runs for its first
// convolution in cuDNN's place: forward and weight gradient against the CPU's, in every
// precision (exact fp32 products: fp32's bound), over one and three channels, padding, stride
// 2, a 5x5 filter and more output channels than a block takes; the weight gradient the same
// bits every run; shapes past their limits refused.
TEST_F(CudnnConvTest, DirectConvolutionsOfFewChannelsMatchTheCpu) {
  const cpu::ConvShape shapes[] = {
      {4, 10, 10, 1, 8, 3, 1, 1},   // Fashion-MNIST's first layer, smaller
      {3, 9, 7, 3, 40, 3, 2, 1},    // RGB, stride 2, two blocks of output channels
      {2, 8, 8, 1, 5, 5, 1, 2},     // 5x5
      {2, 7, 6, 2, 3, 3, 1, 0},     // no padding
      {13, 9, 9, 1, 8, 3, 1, 1},    // 1,053 pixels: uneven ranges of the weight gradient
      {110, 9, 9, 1, 5, 3, 1, 1},   // 35 ranges, more than a warp; 45 sums, 8 to a block
      {40, 9, 9, 3, 8, 3, 1, 1},    // 27 taps: four longer ranges, the last uneven
      {1, 4, 4, 32, 248, 1, 1, 0},  // 32 taps, 8,184 weights at their odd stride
  };
  for (const cpu::ConvShape& s : shapes) {
    ASSERT_TRUE(direct_conv_supported(s)) << Name(s, ConvOptions{});
    for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      ConvOptions o{precision, /*tf32=*/false};
      const bool half = precision != Precision::kFp32;
      const HalfType type = precision == Precision::kFp16 ? HalfType::kFp16 : HalfType::kBf16;
      InputLayerCase k(s, precision, 11);
      // The input in fp32 as drawn: the kernels round it as the CPU's reference was.
      DeviceBuffer<float> x32 = Up(Random(Count(k.nx), 11));
      DeviceBuffer<float> dw = Up(std::vector<float>(Count(k.nw)));
      DeviceBuffer<uint8_t> partials;
      ASSERT_TRUE(DeviceBuffer<uint8_t>::Make(direct_conv_scratch_bytes(s), &partials).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads, on the legacy stream
      ASSERT_TRUE(
          direct_conv_forward(k.dev_y.data(), x32.data(), k.dev_w.data(), s, half, type, stream_)
              .ok());
      // Twice overwritten (the same bits), then added to (twice them).
      std::vector<float> first;
      for (int run = 0; run < 3; ++run) {
        ASSERT_TRUE(direct_conv_backward_filter(dw.data(), x32.data(), k.dev_dy.data(), s, half,
                                                type, run == 2, partials.data(), stream_)
                        .ok());
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        const std::vector<float> got = Down(dw);
        if (run == 0) {
          first = got;
          ExpectErr(("direct " + Name(s, o) + " backward filter").c_str(), NormErr(got, k.dw_ref),
                    Bound(o));
          // Where half, each value is a 16-bit one, as cuDNN's gradient widened.
          std::vector<float> rounded = got;
          if (half) cpu::round_to_half(rounded.data(), rounded.data(), int64_t(got.size()), type);
          EXPECT_EQ(std::memcmp(rounded.data(), got.data(), got.size() * 4), 0) << Name(s, o);
        } else if (run == 1) {
          EXPECT_EQ(std::memcmp(first.data(), got.data(), first.size() * 4), 0) << Name(s, o);
        } else {
          std::vector<float> twice = first;
          for (float& v : twice) v += v;
          EXPECT_EQ(std::memcmp(twice.data(), got.data(), got.size() * 4), 0) << Name(s, o);
        }
      }
      ExpectErr(("direct " + Name(s, o) + " forward").c_str(),
                NormErr(Download(k.dev_y, Count(k.ny), precision), k.y_ref), Bound(o));
    }
  }
  EXPECT_FALSE(direct_conv_supported({1, 8, 8, 4, 8, 3, 1, 1}));     // 36 taps an output
  EXPECT_FALSE(direct_conv_supported({1, 8, 8, 1, 1024, 3, 1, 1}));  // 9,216 weights
  EXPECT_FALSE(direct_conv_supported({1, 4, 4, 32, 256, 1, 1, 0}));  // 8,448 at an odd stride
  EXPECT_FALSE(direct_conv_forward(nullptr, nullptr, nullptr, {1, 8, 8, 4, 8, 3, 1, 1}, false,
                                   HalfType::kBf16, stream_)
                   .ok());
}

}  // namespace
}  // namespace sweep::trainer::cuda
