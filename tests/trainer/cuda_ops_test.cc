// Every CUDA kernel against the CPU kernel of the same name, on random inputs with odd shapes.
// Errors are normalised: |gpu - cpu|_2 / |cpu|_2. Tolerances: exact-fp32 GEMMs 1e-5 (summation
// order only), TF32 GEMMs 5e-3 (10-bit mantissa products), bf16-input GEMMs 1e-2 (8-bit
// significands: each input off by up to 2^-8 relative, about 2.3e-3 rms on a product of two),
// fp16-input GEMMs 2e-3 (11-bit: 2^-11 per input), elementwise kernels 1e-5 (CUDA's tanhf/expf
// against the CPU's rational tanh and std::exp), dropout masks, bf16 casts and counts exact.
// Each comparison prints its error and bound. Skipped (GTEST_SKIP) where no CUDA device is
// present; ctest label `gpu`. The same file also runs on every machine under the kernel
// emulator (cuda_emu/: ops.cu compiled by g++, GPU threads as fibers), as the `emu.` tests.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>

#include "cpu/ops.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_buffer.h"
#include "cuda/fast_div.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "rng.h"
#include "test_util.h"

namespace sweep::trainer::cuda {
namespace {

using testing::Random;

using test::Down;
using test::ExpectErr;
using test::FromBf16;
using test::FromFp16;
using test::HostBf16;
using test::NormErr;
using test::Up;
using test::Widen;

// Kernels run on the legacy default stream (0), so cudaMemcpy orders after them.
class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> devices = DeviceCount();
    if (!devices.ok()) GTEST_SKIP() << devices.status().message();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_TRUE(CreateBlasHandle(nullptr, /*tf32=*/false, &fp32_).ok());
    ASSERT_TRUE(CreateBlasHandle(nullptr, /*tf32=*/true, &tf32_).ok());
  }
  void TearDown() override {
    if (fp32_ != nullptr) cublasDestroy(fp32_);
    if (tf32_ != nullptr) cublasDestroy(tf32_);
  }
  cublasHandle_t fp32_ = nullptr, tf32_ = nullptr;
  static constexpr int B = 37, C = 53, OC = 29;
};

// The kernels' divider against / and %: every divisor up to 4,100 and the layer sizes beyond,
// at the numerators where rounding could slip (around multiples of d, and near 2^31). Host
// only: the device's __umulhi gives the same high word.
TEST(FastDivTest, MatchesDivisionBelowTwoToThe31) {
  std::vector<int> divisors;
  for (int d = 1; d <= 4100; ++d) divisors.push_back(d);
  for (int d : {7 * 7 * 256, 14 * 14 * 128, 28 * 28 * 64, 100003, 1 << 20, (1 << 30) + 1,
                std::numeric_limits<int>::max()}) {
    divisors.push_back(d);
  }
  const uint32_t top = (uint32_t{1} << 31) - 1;
  Rng rng(5);
  int64_t checked = 0;
  for (int d : divisors) {
    const FastDiv by(d);
    const uint32_t ud = static_cast<uint32_t>(d);
    std::vector<uint32_t> ns = {
        0, 1, ud - 1, ud, ud + 1, top, top - 1, top - ud, top / ud * ud, top / ud * ud - 1};
    for (int k = 0; k < 64; ++k) {
      const uint32_t q = static_cast<uint32_t>(rng.NextU64() % (top / ud + 1));
      ns.push_back(q * ud);
      if (q > 0) ns.push_back(q * ud - 1);
      ns.push_back(static_cast<uint32_t>(rng.NextU64() % (uint64_t{top} + 1)));
    }
    for (const uint32_t n : ns) {
      if (n > top) continue;
      ASSERT_EQ(by.Div(n), n / ud) << n << " / " << d;
      ASSERT_EQ(by.Mod(n), n % ud) << n << " % " << d;
      ++checked;
    }
  }
  EXPECT_GT(checked, 500000);
}

TEST_F(CudaOps, MatmulForward) {
  const auto inp = Random(B * C, 1), w = Random(OC * C, 2);
  std::vector<float> ref(B * OC);
  cpu::matmul_forward(ref.data(), inp.data(), w.data(), B, C, OC);
  auto d_inp = Up(inp), d_w = Up(w), d_out = Up(std::vector<float>(B * OC));
  for (cublasHandle_t h : {fp32_, tf32_}) {
    ASSERT_TRUE(matmul_forward(h, d_out.data(), d_inp.data(), d_w.data(), B, C, OC).ok());
    EXPECT_LT(NormErr(Down(d_out), ref), h == fp32_ ? 1e-5 : 5e-3);
  }
}

TEST_F(CudaOps, MatmulBackward) {
  const auto inp = Random(B * C, 1), w = Random(OC * C, 2), dout = Random(B * OC, 3);
  for (bool accumulate : {false, true}) {
    const auto dw0 = Random(OC * C, 4);
    std::vector<float> dinp(B * C), dw = dw0;
    cpu::matmul_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), B, C, OC,
                         accumulate);
    auto d_inp = Up(inp), d_w = Up(w), d_dout = Up(dout), d_dw = Up(dw0);
    auto d_dinp = Up(std::vector<float>(B * C));
    ASSERT_TRUE(matmul_backward(fp32_, d_dinp.data(), d_dw.data(), d_dout.data(), d_inp.data(),
                                d_w.data(), B, C, OC, accumulate)
                    .ok());
    EXPECT_LT(NormErr(Down(d_dinp), dinp), 1e-5) << accumulate;
    EXPECT_LT(NormErr(Down(d_dw), dw), 1e-5) << accumulate;
  }
}

TEST_F(CudaOps, BiasActForwardAndBackward) {
  for (Activation act :
       {Activation::kNone, Activation::kRelu, Activation::kTanh, Activation::kGelu}) {
    const auto pre0 = Random(B * C, 5, 3.0), bias = Random(C, 6), g = Random(B * C, 7);
    std::vector<float> pre = pre0, out(B * C);
    cpu::bias_act_forward(out.data(), pre.data(), bias.data(), B, C, act);
    auto d_pre = Up(pre0), d_bias = Up(bias), d_out = Up(std::vector<float>(B * C));
    ASSERT_TRUE(
        bias_act_forward(d_out.data(), d_pre.data(), d_bias.data(), B, C, act, nullptr).ok());
    EXPECT_LT(NormErr(Down(d_pre), pre), 1e-6) << static_cast<int>(act);
    EXPECT_LT(NormErr(Down(d_out), out), 1e-5) << static_cast<int>(act);
    for (bool accumulate : {false, true}) {
      const auto db0 = Random(C, 8);
      std::vector<float> d = g, db = db0;
      cpu::bias_act_backward(d.data(), db.data(), pre.data(), out.data(), B, C, act, accumulate);
      auto d_d = Up(g), d_db = Up(db0), d_pre_ref = Up(pre), d_out_ref = Up(out);
      ASSERT_TRUE(bias_act_backward(d_d.data(), d_db.data(), d_pre_ref.data(), d_out_ref.data(), B,
                                    C, act, nullptr, accumulate)
                      .ok());
      EXPECT_LT(NormErr(Down(d_d), d), 1e-5) << static_cast<int>(act);
      EXPECT_LT(NormErr(Down(d_db), db), 1e-5) << static_cast<int>(act);
    }
  }
}

// Bit-for-bit equality of two host copies, naming the first element that differs (gtest would
// print every element of a large vector).
template <typename T>
void ExpectSameBits(const std::vector<T>& got, const std::vector<T>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " of " << got.size() << " is " << +got[i]
                    << ", want " << +want[i];
      return;
    }
  }
}

// The 16-bit path as cuda::Mlp runs it without dropout (keeps_out() false): no fp32 activation,
// pre left as the GEMM wrote it (the backward adds the bias back), no fp32 gradient w.r.t. pre,
// and with the replica's scratch. It must write the same 16-bit activation, 16-bit gradient and
// bias gradient as the fp32-activation path, bit for bit; and the backward without out (relu's
// sign and tanh taken from pre) the same fp32 gradient too. Shapes with one block of rows, two
// row ranges, and 32 ranges; bf16 and fp16.
TEST_F(CudaOps, BiasActWithoutFp32OutputIsTheSameBits) {
  const std::vector<std::pair<int, int>> shapes = {{B, C}, {300, 1000}, {4096, 10}};
  for (const auto& [rows, cols] : shapes) {
    const size_t n = static_cast<size_t>(rows) * cols;
    const auto pre0 = Random(n, 40, 3.0), bias = Random(static_cast<size_t>(cols), 41);
    const auto g = Random(n, 42);
    DeviceBuffer<float> scratch;
    ASSERT_TRUE(DeviceBuffer<float>::Make(BiasGradScratchFloats(rows, cols), &scratch).ok());
    for (HalfType type : {HalfType::kBf16, HalfType::kFp16}) {
      for (Activation act : {Activation::kRelu, Activation::kTanh, Activation::kGelu}) {
        const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " " +
                                 (type == HalfType::kBf16 ? "bf16" : "fp16") + " act " +
                                 std::to_string(static_cast<int>(act));
        auto d_bias = Up(bias);
        // The fp32-activation path.
        auto d_pre = Up(pre0), d_out = Up(std::vector<float>(n));
        auto d_out16 = Up(std::vector<uint16_t>(n));
        ASSERT_TRUE(bias_act_forward(d_out.data(), d_pre.data(), d_bias.data(), rows, cols, act,
                                     nullptr, d_out16.data(), type)
                        .ok());
        auto d_d = Up(g), d_db = Up(std::vector<float>(cols));
        auto d_d16 = Up(std::vector<uint16_t>(n));
        ASSERT_TRUE(bias_act_backward(d_d.data(), d_db.data(), d_pre.data(), d_out.data(), rows,
                                      cols, act, nullptr, false, d_d16.data(), type, true,
                                      scratch.data())
                        .ok());
        // The 16-bit path.
        auto d_raw = Up(pre0);
        auto d_raw16 = Up(std::vector<uint16_t>(n));
        ASSERT_TRUE(bias_act_forward(nullptr, d_raw.data(), d_bias.data(), rows, cols, act, nullptr,
                                     d_raw16.data(), type, /*keep_pre=*/false)
                        .ok());
        ExpectSameBits(Down(d_raw), pre0, what + ": pre left as it came");
        ExpectSameBits(Down(d_raw16), Down(d_out16), what + ": 16-bit activation");
        auto d_d2 = Up(g), d_db2 = Up(std::vector<float>(cols));
        auto d_d16_2 = Up(std::vector<uint16_t>(n));
        ASSERT_TRUE(bias_act_backward(d_d2.data(), d_db2.data(), d_raw.data(), nullptr, rows, cols,
                                      act, nullptr, false, d_d16_2.data(), type,
                                      /*keep_d=*/false, scratch.data(),
                                      /*pre_bias=*/d_bias.data())
                        .ok());
        ExpectSameBits(Down(d_d2), g, what + ": d left as it came");
        ExpectSameBits(Down(d_db2), Down(d_db), what + ": bias gradient");
        ExpectSameBits(Down(d_d16_2), Down(d_d16), what + ": 16-bit gradient");
        // Without out, from the biased pre, d kept.
        auto d_d3 = Up(g), d_db3 = Up(std::vector<float>(cols));
        auto d_d16_3 = Up(std::vector<uint16_t>(n));
        ASSERT_TRUE(bias_act_backward(d_d3.data(), d_db3.data(), d_pre.data(), nullptr, rows, cols,
                                      act, nullptr, false, d_d16_3.data(), type, true,
                                      scratch.data())
                        .ok());
        ExpectSameBits(Down(d_d3), Down(d_d), what + ": gradient without out");
        ExpectSameBits(Down(d_db3), Down(d_db), what + ": bias gradient without out");
        ExpectSameBits(Down(d_d16_3), Down(d_d16), what + ": 16-bit gradient without out");
      }
    }
  }
  // What the options cannot mean is refused before any launch.
  DeviceBuffer<float> a, b;
  ASSERT_TRUE(DeviceBuffer<float>::Make(int64_t{B} * C, &a).ok());
  ASSERT_TRUE(DeviceBuffer<float>::Make(C, &b).ok());
  EXPECT_FALSE(bias_act_backward(a.data(), b.data(), a.data(), nullptr, B, C, Activation::kRelu,
                                 nullptr, false, nullptr, HalfType::kBf16, /*keep_d=*/false)
                   .ok())
      << "keep_d = false without d16";
  EXPECT_FALSE(bias_act_forward(nullptr, a.data(), b.data(), B, C, Activation::kRelu, nullptr,
                                nullptr, HalfType::kBf16, /*keep_pre=*/false)
                   .ok())
      << "keep_pre = false writing nothing";
  EXPECT_FALSE(bias_act_forward(a.data(), a.data(), b.data(), B, C, Activation::kRelu, nullptr,
                                nullptr, HalfType::kBf16, /*keep_pre=*/false)
                   .ok())
      << "keep_pre = false with out = pre";
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The kernels that also write a 16-bit copy of their output (what the next 16-bit GEMM reads):
// the copy must be exactly that output rounded, as cast_to_half and cpu::round_to_half round it.
TEST_F(CudaOps, FusedHalfCopiesAreTheirOutputsRounded) {
  for (HalfType type : {HalfType::kBf16, HalfType::kFp16}) {
    const char* name = type == HalfType::kBf16 ? "bf16" : "fp16";
    auto rounded = [type](std::vector<float> v) {
      cpu::round_to_half(v.data(), v.data(), static_cast<int64_t>(v.size()), type);
      return v;
    };
    auto half_of = [type](const DeviceBuffer<uint16_t>& h) { return Widen(Down(h), type); };
    for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kGelu}) {
      auto d_pre = Up(Random(B * C, 30, 3.0)), d_bias = Up(Random(C, 31));
      auto d_out = Up(std::vector<float>(B * C));
      auto d_out16 = Up(std::vector<uint16_t>(B * C));
      ASSERT_TRUE(bias_act_forward(d_out.data(), d_pre.data(), d_bias.data(), B, C, act, nullptr,
                                   d_out16.data(), type)
                      .ok());
      EXPECT_EQ(half_of(d_out16), rounded(Down(d_out))) << name << " bias_act_forward";
      auto d_d = Up(Random(B * C, 32)), d_db = Up(std::vector<float>(C));
      auto d_d16 = Up(std::vector<uint16_t>(B * C));
      ASSERT_TRUE(bias_act_backward(d_d.data(), d_db.data(), d_pre.data(), d_out.data(), B, C, act,
                                    nullptr, false, d_d16.data(), type)
                      .ok());
      EXPECT_EQ(half_of(d_d16), rounded(Down(d_d))) << name << " bias_act_backward";
    }
    auto d_x = Up(Random(B * C, 33)), d_drop = Up(std::vector<float>(B * C));
    auto d_mask = Up(std::vector<float>(B * C));
    auto d_drop16 = Up(std::vector<uint16_t>(B * C));
    ASSERT_TRUE(dropout_forward(d_drop.data(), d_mask.data(), d_x.data(), B, C, 0.3f, 77, 5,
                                nullptr, d_drop16.data(), type)
                    .ok());
    EXPECT_EQ(half_of(d_drop16), rounded(Down(d_drop))) << name << " dropout_forward";

    const int64_t n = 1000;
    const auto g = Random(n, 34);
    auto d_g = Up(g), d_p = Up(Random(n, 35)), d_vel = Up(std::vector<float>(n));
    auto d_p16 = Up(std::vector<uint16_t>(n));
    ASSERT_TRUE(sgd_update(d_p.data(), d_vel.data(), d_g.data(), n, 0.1f, 0.9f, 1e-4f, true,
                           nullptr, nullptr, d_p16.data(), type)
                    .ok());
    EXPECT_EQ(half_of(d_p16), rounded(Down(d_p))) << name << " sgd_update";
    auto d_m = Up(std::vector<float>(n)), d_v = Up(std::vector<float>(n));
    ASSERT_TRUE(adamw_update(d_p.data(), d_m.data(), d_v.data(), d_g.data(), n, 0.01f, 0.9f, 0.999f,
                             1e-8f, 0.01f, 1, nullptr, nullptr, nullptr, d_p16.data(), type)
                    .ok());
    EXPECT_EQ(half_of(d_p16), rounded(Down(d_p))) << name << " adamw_update";
  }
}

TEST_F(CudaOps, SoftmaxXent) {
  const int V = 10;
  const auto logits = Random(B * V, 9, 4.0);
  std::vector<int32_t> labels(B);
  for (int b = 0; b < B; ++b) labels[static_cast<size_t>(b)] = (b * 7) % V;
  std::vector<float> dl(B * V), losses(B);
  cpu::softmax_xent_forward_backward(dl.data(), losses.data(), logits.data(), labels.data(), B, V,
                                     0.25f);
  auto d_logits = Up(logits), d_dl = Up(std::vector<float>(B * V));
  auto d_losses = Up(std::vector<float>(B));
  auto d_labels = Up(labels);
  ASSERT_TRUE(softmax_xent_forward_backward(d_dl.data(), d_losses.data(), d_logits.data(),
                                            d_labels.data(), B, V, 0.25f, nullptr)
                  .ok());
  EXPECT_LT(NormErr(Down(d_losses), losses), 1e-5);
  EXPECT_LT(NormErr(Down(d_dl), dl), 1e-5);

  // With label smoothing, as the CPU's.
  std::vector<float> dl_smooth(B * V), losses_smooth(B);
  cpu::softmax_xent_forward_backward(dl_smooth.data(), losses_smooth.data(), logits.data(),
                                     labels.data(), B, V, 0.25f, 0.1f);
  auto d_dl_smooth = Up(std::vector<float>(B * V)), d_losses_smooth = Up(std::vector<float>(B));
  ASSERT_TRUE(softmax_xent_forward_backward(d_dl_smooth.data(), d_losses_smooth.data(),
                                            d_logits.data(), d_labels.data(), B, V, 0.25f, nullptr,
                                            0.1f)
                  .ok());
  ExpectErr("softmax xent, label smoothing 0.1: losses",
            NormErr(Down(d_losses_smooth), losses_smooth), 1e-5);
  ExpectErr("softmax xent, label smoothing 0.1: gradients", NormErr(Down(d_dl_smooth), dl_smooth),
            1e-5);

  // The metric reductions on the same rows.
  double sum = 0;
  for (float l : losses) sum += l;
  auto d_sum = Up(std::vector<double>{123.0});
  ASSERT_TRUE(loss_sum(d_sum.data(), d_losses.data(), B, nullptr).ok());
  EXPECT_NEAR(Down(d_sum)[0], sum, 1e-5 * std::abs(sum));
  auto d_correct = Up(std::vector<unsigned long long>{5});
  ASSERT_TRUE(accuracy(d_correct.data(), d_logits.data(), d_labels.data(), B, V, nullptr).ok());
  EXPECT_EQ(Down(d_correct)[0],
            5 + static_cast<unsigned long long>(cpu::accuracy(logits.data(), labels.data(), B, V)));
}

// A label outside the classes (a bad dataset) gives its row a NaN loss and NaN gradients: the
// step is visibly poisoned rather than applying the gradients left from the last batch.
TEST_F(CudaOps, SoftmaxXentWithALabelOutsideTheClasses) {
  const int V = 10;
  const auto logits = Random(B * V, 9, 4.0);
  std::vector<int32_t> labels(B, 3);
  labels[1] = V;
  auto d_logits = Up(logits), d_dl = Up(std::vector<float>(B * V, 7.0f));
  auto d_losses = Up(std::vector<float>(B));
  auto d_labels = Up(labels);
  ASSERT_TRUE(softmax_xent_forward_backward(d_dl.data(), d_losses.data(), d_logits.data(),
                                            d_labels.data(), B, V, 1.0f, nullptr)
                  .ok());
  const std::vector<float> losses = Down(d_losses), dl = Down(d_dl);
  EXPECT_TRUE(std::isnan(losses[1]));
  EXPECT_TRUE(std::isfinite(losses[0]));
  for (int v = 0; v < V; ++v) {
    EXPECT_TRUE(std::isnan(dl[static_cast<size_t>(V + v)])) << v;
    EXPECT_NE(dl[static_cast<size_t>(v)], 7.0f) << v;
  }
}

TEST_F(CudaOps, Optimizers) {
  const int64_t n = 1000;
  const auto p0 = Random(n, 10), g = Random(n, 11), s0 = Random(n, 12, 0.1);
  const auto v0 = Random(n, 13, 0.1);
  for (bool nesterov : {false, true}) {
    std::vector<float> p = p0, vel = s0;
    cpu::sgd_update(p.data(), vel.data(), g.data(), n, 0.1f, 0.9f, 1e-3f, nesterov);
    auto d_p = Up(p0), d_vel = Up(s0), d_g = Up(g);
    ASSERT_TRUE(
        sgd_update(d_p.data(), d_vel.data(), d_g.data(), n, 0.1f, 0.9f, 1e-3f, nesterov, nullptr)
            .ok());
    EXPECT_LT(NormErr(Down(d_p), p), 1e-6) << nesterov;
    EXPECT_LT(NormErr(Down(d_vel), vel), 1e-6) << nesterov;
  }
  std::vector<float> p = p0, m = s0, v(n);
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::abs(v0[static_cast<size_t>(i)]);
  const std::vector<float> v_init = v;
  cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f,
                    7);
  auto d_p = Up(p0), d_m = Up(s0), d_v = Up(v_init), d_g = Up(g);
  ASSERT_TRUE(adamw_update(d_p.data(), d_m.data(), d_v.data(), d_g.data(), n, 1e-3f, 0.9f, 0.999f,
                           1e-8f, 0.01f, 7, nullptr)
                  .ok());
  EXPECT_LT(NormErr(Down(d_p), p), 1e-6);
  EXPECT_LT(NormErr(Down(d_m), m), 1e-6);
  EXPECT_LT(NormErr(Down(d_v), v), 1e-6);
}

TEST_F(CudaOps, DropoutMatchesCpuBitForBit) {
  const auto x = Random(B * C, 14), g = Random(B * C, 15);
  std::vector<float> out(B * C), mask(B * C);
  cpu::dropout_forward(out.data(), mask.data(), x.data(), B, C, 0.3f, 0x123456789abcdefull, 1000);
  auto d_x = Up(x), d_out = Up(std::vector<float>(B * C)), d_mask = Up(std::vector<float>(B * C));
  ASSERT_TRUE(dropout_forward(d_out.data(), d_mask.data(), d_x.data(), B, C, 0.3f,
                              0x123456789abcdefull, 1000, nullptr)
                  .ok());
  EXPECT_EQ(Down(d_mask), mask);
  EXPECT_EQ(Down(d_out), out);
  std::vector<float> d = g;
  cpu::dropout_backward(d.data(), mask.data(), B * C);
  auto d_d = Up(g);
  ASSERT_TRUE(dropout_backward(d_d.data(), d_mask.data(), B * C, nullptr).ok());
  EXPECT_EQ(Down(d_d), d);
}

// A wide layer: the column sums run as 32-column blocks of 16 row groups.
// Shapes around the bias-gradient kernel's turns (32 row groups x 4 running sums: 128 rows a
// turn) and its remainder, and narrow layers at a large batch, where scratch splits the rows
// into ranges (2 ranges for 300 x 1000, 32 for 4096 x 10 and 4096 x 256): with and without
// scratch, against the CPU.
TEST_F(CudaOps, BiasBackwardShapesAndRowRanges) {
  const std::vector<std::pair<int, int>> shapes = {
      {1, 1000}, {97, 1000}, {128, 1000}, {129, 1000}, {300, 1000}, {4096, 10}, {4096, 256}};
  for (const auto& [rows, cols] : shapes) {
    const size_t n = static_cast<size_t>(rows) * cols;
    const auto g = Random(n, 16), db0 = Random(static_cast<size_t>(cols), 17);
    const auto pre = Random(n, 18);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = pre[i] > 0 ? pre[i] : 0.0f;
    DeviceBuffer<float> scratch;
    ASSERT_TRUE(DeviceBuffer<float>::Make(BiasGradScratchFloats(rows, cols), &scratch).ok());
    for (Activation act : {Activation::kNone, Activation::kRelu}) {
      for (bool accumulate : {false, true}) {
        std::vector<float> d = g, db = db0;
        cpu::bias_act_backward(d.data(), db.data(), pre.data(), out.data(), rows, cols, act,
                               accumulate);
        for (bool split : {false, true}) {
          auto d_d = Up(g), d_db = Up(db0), d_pre = Up(pre), d_out = Up(out);
          ASSERT_TRUE(bias_act_backward(d_d.data(), d_db.data(), d_pre.data(), d_out.data(), rows,
                                        cols, act, nullptr, accumulate, nullptr, HalfType::kBf16,
                                        true, split ? scratch.data() : nullptr)
                          .ok());
          const std::string what =
              "bias gradient " + std::to_string(rows) + "x" + std::to_string(cols) +
              (act == Activation::kRelu ? " relu" : "") + (accumulate ? ", accumulate" : "") +
              (split && scratch.size() > 0 ? ", row ranges" : "");
          ExpectErr(what.c_str(), NormErr(Down(d_db), db), 1e-5);
          EXPECT_LT(NormErr(Down(d_d), d), 1e-6) << what;
        }
      }
    }
  }
}

// Scratch grows with the batch, so a buffer sized for the largest batch fits every smaller one
// (host arithmetic only: runs without a GPU).
TEST(CudaOpsHost, BiasGradScratchGrowsWithTheBatch) {
  for (int cols : {10, 128, 256, 4096}) {
    int64_t last = 0;
    for (int rows = 0; rows <= 8192; rows += 16) {
      EXPECT_GE(BiasGradScratchFloats(rows, cols), last) << rows << "x" << cols;
      last = BiasGradScratchFloats(rows, cols);
    }
    EXPECT_GT(last, 0) << cols;  // a large batch is split
  }
  EXPECT_EQ(BiasGradScratchFloats(37, 53), 0);  // one turn of rows: nothing to split
}

TEST_F(CudaOps, CastToHalf) {
  std::vector<float> x = Random(4099, 18, 100.0);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1.0f + 1.0f / 256;  // halfway between two bf16 values: ties to even (1.0)
  x[3] = 1e-30f;             // below fp16's smallest subnormal: 0 there
  auto d_x = Up(x);
  for (HalfType type : {HalfType::kBf16, HalfType::kFp16}) {
    auto d_h = Up(std::vector<uint16_t>(x.size()));
    ASSERT_TRUE(
        cast_to_half(d_h.data(), d_x.data(), static_cast<int64_t>(x.size()), type, nullptr).ok());
    const std::vector<uint16_t> h = Down(d_h);
    if (type == HalfType::kBf16) {
      EXPECT_EQ(h, HostBf16(x)) << "bf16 bits differ from round-to-nearest-even";
      EXPECT_EQ(FromBf16(h[2]), 1.0f);
    }
    // The CPU backend's emulation rounds to the same values, so it is the GPU's reference.
    std::vector<float> cpu_rounded(x.size());
    cpu::round_to_half(cpu_rounded.data(), x.data(), static_cast<int64_t>(x.size()), type);
    EXPECT_EQ(Widen(h, type), cpu_rounded) << "cast_to_half and cpu::round_to_half differ";
    // Every value within half a unit in the last place of its format: 8 and 11 significant
    // bits, so a unit in the last place is up to 2^-7 (bf16) and 2^-10 (fp16) of the value.
    const double ulp = type == HalfType::kBf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    const std::vector<float> back = Widen(h, type);
    double worst = 0;
    for (size_t i = 4; i < x.size(); ++i) {
      worst = std::max(worst, std::abs(double{back[i]} - x[i]) / std::abs(double{x[i]}));
    }
    std::printf("  cast to %s: worst relative error %.3g (bound %.3g)\n",
                type == HalfType::kBf16 ? "bf16" : "fp16", worst, ulp / 2 * 1.0001);
    EXPECT_LE(worst, ulp / 2 * 1.0001);
    EXPECT_EQ(back[0], 0.0f);
    // 1e-30 is below fp16's smallest subnormal; bf16 has fp32's exponent range and keeps it.
    if (type == HalfType::kFp16) {
      EXPECT_EQ(back[3], 0.0f);
    } else {
      EXPECT_EQ(h[3], HostBf16(x[3]));
    }
  }
  // Beyond fp16's largest finite value (65504): inf, which is what loss scaling detects.
  auto d_big = Up(std::vector<float>{70000.0f, -1e9f});
  auto d_h = Up(std::vector<uint16_t>(2));
  ASSERT_TRUE(cast_to_half(d_h.data(), d_big.data(), 2, HalfType::kFp16, nullptr).ok());
  const std::vector<float> big = Widen(Down(d_h), HalfType::kFp16);
  EXPECT_EQ(big[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(big[1], -std::numeric_limits<float>::infinity());

  // The cases cpu::round_to_half treats apart, on the GPU: fp16's largest value and its overflow
  // threshold (65520 ties away from 65504 to inf), its smallest normal, its subnormals and their
  // ties (2^-25 to 0, 3 x 2^-25 to 2^-23), and bf16's overflow past its largest value.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {65504.0f,
                                    std::nextafter(65520.0f, 0.0f),
                                    65520.0f,
                                    -65520.0f,
                                    std::ldexp(1.0f, -14),
                                    std::nextafter(std::ldexp(1.0f, -14), 0.0f),
                                    std::ldexp(1.0f, -24),
                                    std::ldexp(1.0f, -25),
                                    std::ldexp(3.0f, -25),
                                    -std::ldexp(5.0f, -26),
                                    3.3895314e38f,
                                    std::numeric_limits<float>::max(),
                                    inf,
                                    -inf};
  auto d_edges = Up(edges);
  for (HalfType type : {HalfType::kBf16, HalfType::kFp16}) {
    auto d_e = Up(std::vector<uint16_t>(edges.size()));
    ASSERT_TRUE(
        cast_to_half(d_e.data(), d_edges.data(), static_cast<int64_t>(edges.size()), type, nullptr)
            .ok());
    std::vector<float> cpu_rounded(edges.size());
    cpu::round_to_half(cpu_rounded.data(), edges.data(), static_cast<int64_t>(edges.size()), type);
    EXPECT_EQ(Widen(Down(d_e), type), cpu_rounded)
        << (type == HalfType::kBf16 ? "bf16" : "fp16") << ": edge cases differ";
  }
}

// The 16-bit GEMMs against the CPU's fp32 GEMM on the same (unrounded) inputs, and against the
// CPU's emulation (fp32 GEMMs on inputs rounded by cpu::round_to_half): products of two 16-bit
// values are exact in fp32, so there only the summation order differs (bound 1e-4).
TEST_F(CudaOps, MatmulHalfForwardAndBackward) {
  const auto inp = Random(B * C, 1), w = Random(OC * C, 2), dout = Random(B * OC, 3);
  std::vector<float> out(B * OC), dinp(B * C);
  const auto dw0 = Random(OC * C, 4);
  cpu::matmul_forward(out.data(), inp.data(), w.data(), B, C, OC);
  auto d_inp = Up(inp), d_w = Up(w), d_dout = Up(dout);
  for (HalfType type : {HalfType::kBf16, HalfType::kFp16}) {
    const bool bf16 = type == HalfType::kBf16;
    const double bound = bf16 ? 1e-2 : 2e-3;
    auto h_inp = Up(std::vector<uint16_t>(B * C)), h_w = Up(std::vector<uint16_t>(OC * C));
    auto h_dout = Up(std::vector<uint16_t>(B * OC));
    ASSERT_TRUE(cast_to_half(h_inp.data(), d_inp.data(), B * C, type, nullptr).ok());
    ASSERT_TRUE(cast_to_half(h_w.data(), d_w.data(), OC * C, type, nullptr).ok());
    ASSERT_TRUE(cast_to_half(h_dout.data(), d_dout.data(), B * OC, type, nullptr).ok());
    auto d_out = Up(std::vector<float>(B * OC));
    ASSERT_TRUE(
        matmul_forward_half(fp32_, d_out.data(), h_inp.data(), h_w.data(), B, C, OC, type).ok());
    ExpectErr(bf16 ? "matmul_forward_half bf16" : "matmul_forward_half fp16",
              NormErr(Down(d_out), out), bound);
    auto rounded = [type](std::vector<float> v) {
      cpu::round_to_half(v.data(), v.data(), static_cast<int64_t>(v.size()), type);
      return v;
    };
    const auto r_inp = rounded(inp), r_w = rounded(w), r_dout = rounded(dout);
    std::vector<float> emulated(B * OC), e_dinp(B * C), e_dw(OC * C);
    cpu::matmul_forward(emulated.data(), r_inp.data(), r_w.data(), B, C, OC);
    ExpectErr(bf16 ? "matmul_forward_half bf16 vs CPU emulation"
                   : "matmul_forward_half fp16 vs CPU emulation",
              NormErr(Down(d_out), emulated), 1e-4);
    cpu::matmul_backward(e_dinp.data(), e_dw.data(), r_dout.data(), r_inp.data(), r_w.data(), B, C,
                         OC);
    {
      auto d_dw = Up(std::vector<float>(OC * C)), d_dinp = Up(std::vector<float>(B * C));
      ASSERT_TRUE(matmul_backward_half(fp32_, d_dinp.data(), d_dw.data(), h_dout.data(),
                                       h_inp.data(), h_w.data(), B, C, OC, type)
                      .ok());
      ExpectErr(bf16 ? "matmul_backward_half bf16 dinp vs CPU emulation"
                     : "matmul_backward_half fp16 dinp vs CPU emulation",
                NormErr(Down(d_dinp), e_dinp), 1e-4);
      ExpectErr(bf16 ? "matmul_backward_half bf16 dweight vs CPU emulation"
                     : "matmul_backward_half fp16 dweight vs CPU emulation",
                NormErr(Down(d_dw), e_dw), 1e-4);
    }
    for (bool accumulate : {false, true}) {
      std::vector<float> dw = dw0;
      cpu::matmul_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), B, C, OC,
                           accumulate);
      auto d_dw = Up(dw0), d_dinp = Up(std::vector<float>(B * C));
      ASSERT_TRUE(matmul_backward_half(fp32_, d_dinp.data(), d_dw.data(), h_dout.data(),
                                       h_inp.data(), h_w.data(), B, C, OC, type, accumulate)
                      .ok());
      ExpectErr(bf16 ? "matmul_backward_half bf16 dinp" : "matmul_backward_half fp16 dinp",
                NormErr(Down(d_dinp), dinp), bound);
      ExpectErr(bf16 ? "matmul_backward_half bf16 dweight" : "matmul_backward_half fp16 dweight",
                NormErr(Down(d_dw), dw), bound);
    }
  }
}

// fp16's loss scaling, kernel by kernel: scale, unscale and detect, skip, the scale's walk, and
// AdamW counting only the steps applied.
TEST_F(CudaOps, LossScaling) {
  const auto g = Random(1000, 19);
  auto d_g = Up(g);
  auto d_state = Up(std::vector<LossScaleState>{LossScaleState{1024.0f, 0, 0}});
  const float* d_scale = &d_state.data()->scale;
  ASSERT_TRUE(scale_by(d_g.data(), 1000, d_scale, nullptr).ok());
  auto d_found = Up(std::vector<int>{0});
  ASSERT_TRUE(unscale_check(d_g.data(), 1000, d_scale, d_found.data(), nullptr).ok());
  EXPECT_EQ(Down(d_g), g);  // times 1024, then divided by it: exact in binary
  EXPECT_EQ(Down(d_found)[0], 0);

  std::vector<float> bad = g;
  bad[517] = std::numeric_limits<float>::infinity();
  auto d_bad = Up(bad);
  ASSERT_TRUE(unscale_check(d_bad.data(), 1000, d_scale, d_found.data(), nullptr).ok());
  EXPECT_EQ(Down(d_found)[0], 1);
  // A set flag makes the optimizers change nothing.
  const auto p0 = Random(1000, 20);
  auto d_p = Up(p0), d_vel = Up(std::vector<float>(1000)), d_v = Up(std::vector<float>(1000));
  ASSERT_TRUE(sgd_update(d_p.data(), d_vel.data(), d_bad.data(), 1000, 0.1f, 0.9f, 0, false,
                         nullptr, d_found.data())
                  .ok());
  ASSERT_TRUE(adamw_update(d_p.data(), d_vel.data(), d_v.data(), d_bad.data(), 1000, 0.1f, 0.9f,
                           0.999f, 1e-8f, 0.01f, 1, nullptr, d_found.data())
                  .ok());
  EXPECT_EQ(Down(d_p), p0);

  // window 2: overflow halves and counts; two good steps double; the flag is cleared each time.
  const int found_seq[] = {1, 0, 0, 1, 0};
  const float scale_seq[] = {512, 512, 1024, 512, 512};
  for (int i = 0; i < 5; ++i) {
    auto d_flag = Up(std::vector<int>{found_seq[i]});
    ASSERT_TRUE(update_loss_scale(d_state.data(), d_flag.data(), 2, nullptr).ok());
    EXPECT_EQ(Down(d_state)[0].scale, scale_seq[i]) << "after update " << i;
    EXPECT_EQ(Down(d_flag)[0], 0);
  }
  const LossScaleState end = Down(d_state)[0];
  EXPECT_EQ(end.skipped, 2u);
  EXPECT_EQ(end.good_steps, 1);

  // With the state given, AdamW's step 5 after 2 skipped steps is the CPU's step 3.
  const auto p1 = Random(1000, 21), m1 = Random(1000, 22), v1 = Random(1000, 23, 0.01);
  std::vector<float> v1_abs = v1;
  for (float& x : v1_abs) x = std::abs(x);
  std::vector<float> cp = p1, cm = m1, cv = v1_abs;
  cpu::adamw_update(cp.data(), cm.data(), cv.data(), g.data(), 1000, 0.01f, 0.9f, 0.999f, 1e-8f,
                    0.01f, 3);
  auto a_p = Up(p1), a_m = Up(m1), a_v = Up(v1_abs), a_g = Up(g);
  ASSERT_TRUE(adamw_update(a_p.data(), a_m.data(), a_v.data(), a_g.data(), 1000, 0.01f, 0.9f,
                           0.999f, 1e-8f, 0.01f, 5, nullptr, nullptr, d_state.data())
                  .ok());
  ExpectErr("adamw_update, step 5 less 2 skipped, vs the CPU's step 3", NormErr(Down(a_p), cp),
            1e-6);
}

TEST_F(CudaOps, EmptyBatchesLaunchNothing) {
  // A zero-block grid is an invalid launch; every kernel must return before it.
  DeviceBuffer<float> none;
  EXPECT_TRUE(
      bias_act_forward(none.data(), none.data(), none.data(), 0, C, Activation::kRelu, nullptr)
          .ok());
  EXPECT_TRUE(dropout_backward(none.data(), none.data(), 0, nullptr).ok());
  EXPECT_TRUE(
      sgd_update(none.data(), none.data(), none.data(), 0, 0.1f, 0.9f, 0, false, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace sweep::trainer::cuda
