// The CUDA CNN kernels (cuda/cnn_ops.h) against the CPU's of the same names (cpu/conv_ops.h):
// pooling with and without overlapping windows over odd sizes, the global average, the
// activations, the residual add and batch normalization, each also accumulating. Sums are taken in
// the same order or differ in it alone (bound 1e-6; tanh and gelu 1e-5: CUDA's tanhf against the
// CPU's); max pooling's argmax exactly. Skipped where no CUDA device is present (label `gpu`); the
// emulator runs the same file on every machine (`emu.` tests).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/conv_ops.h"
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
using test::NormErr;
using test::Up;
using testing::Random;

// The kernels run on the legacy stream (0), so the copies back order after them.
class CudaCnnOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> devices = DeviceCount();
    if (!devices.ok()) GTEST_SKIP() << devices.status().message();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
};

struct Pool {
  int B, H, W, C, K, stride;
  int OH() const { return (H - K) / stride + 1; }
  int OW() const { return (W - K) / stride + 1; }
  int64_t in() const { return int64_t{B} * H * W * C; }
  int64_t out() const { return int64_t{B} * OH() * OW() * C; }
  std::string Name(const char* what) const {
    return std::string(what) + " " + std::to_string(H) + "x" + std::to_string(W) + "x" +
           std::to_string(C) + " k" + std::to_string(K) + " s" + std::to_string(stride);
  }
};

const Pool kPools[] = {
    {2, 7, 6, 5, 2, 2},  // the CNNs' pool, odd sizes leave a row and a column out
    {3, 9, 8, 3, 3, 2},  // overlapping windows
    {1, 5, 5, 4, 3, 1},  // stride 1
};

TEST_F(CudaCnnOps, MaxPoolMatchesTheCpu) {
  for (const Pool& p : kPools) {
    std::vector<float> x = Random(Count(p.in()), 1);
    x[3] = x[3 + Count(p.C)];  // a tie in the first window keeps the first
    std::vector<float> out(Count(p.out())), dout = Random(Count(p.out()), 2);
    std::vector<int32_t> argmax(Count(p.out()));
    cpu::maxpool_forward(out.data(), argmax.data(), x.data(), p.B, p.H, p.W, p.C, p.K, p.stride);
    std::vector<float> dx = Random(Count(p.in()), 3), dx_acc = dx;
    cpu::maxpool_backward(dx.data(), dout.data(), argmax.data(), p.B, p.H, p.W, p.C, p.K, p.stride,
                          false);
    cpu::maxpool_backward(dx_acc.data(), dout.data(), argmax.data(), p.B, p.H, p.W, p.C, p.K,
                          p.stride, true);

    DeviceBuffer<float> d_x = Up(x), d_out = Up(std::vector<float>(out.size()));
    DeviceBuffer<int32_t> d_arg = Up(std::vector<int32_t>(argmax.size()));
    DeviceBuffer<float> d_dout = Up(dout), d_dx = Up(Random(Count(p.in()), 3));
    DeviceBuffer<float> d_acc = Up(Random(Count(p.in()), 3));
    ASSERT_TRUE(maxpool_forward(d_out.data(), d_arg.data(), d_x.data(), p.B, p.H, p.W, p.C, p.K,
                                p.stride, nullptr)
                    .ok());
    ASSERT_TRUE(maxpool_backward(d_dx.data(), d_dout.data(), d_arg.data(), p.B, p.H, p.W, p.C, p.K,
                                 p.stride, false, nullptr)
                    .ok());
    ASSERT_TRUE(maxpool_backward(d_acc.data(), d_dout.data(), d_arg.data(), p.B, p.H, p.W, p.C, p.K,
                                 p.stride, true, nullptr)
                    .ok());
    EXPECT_EQ(Down(d_arg), argmax) << p.Name("maxpool");
    ExpectErr(p.Name("maxpool forward").c_str(), NormErr(Down(d_out), out), 1e-6);
    ExpectErr(p.Name("maxpool backward").c_str(), NormErr(Down(d_dx), dx), 1e-6);
    ExpectErr(p.Name("maxpool backward, accumulating").c_str(), NormErr(Down(d_acc), dx_acc), 1e-6);
  }
}

TEST_F(CudaCnnOps, AvgPoolMatchesTheCpu) {
  for (const Pool& p : kPools) {
    const std::vector<float> x = Random(Count(p.in()), 4), dout = Random(Count(p.out()), 5);
    std::vector<float> out(Count(p.out()));
    cpu::avgpool_forward(out.data(), x.data(), p.B, p.H, p.W, p.C, p.K, p.stride);
    std::vector<float> dx(Count(p.in())), dx_acc = Random(Count(p.in()), 6);
    cpu::avgpool_backward(dx.data(), dout.data(), p.B, p.H, p.W, p.C, p.K, p.stride, false);
    cpu::avgpool_backward(dx_acc.data(), dout.data(), p.B, p.H, p.W, p.C, p.K, p.stride, true);

    DeviceBuffer<float> d_x = Up(x), d_out = Up(std::vector<float>(out.size()));
    DeviceBuffer<float> d_dout = Up(dout), d_dx = Up(std::vector<float>(dx.size()));
    DeviceBuffer<float> d_acc = Up(Random(Count(p.in()), 6));
    ASSERT_TRUE(
        avgpool_forward(d_out.data(), d_x.data(), p.B, p.H, p.W, p.C, p.K, p.stride, nullptr).ok());
    ASSERT_TRUE(avgpool_backward(d_dx.data(), d_dout.data(), p.B, p.H, p.W, p.C, p.K, p.stride,
                                 false, nullptr)
                    .ok());
    ASSERT_TRUE(avgpool_backward(d_acc.data(), d_dout.data(), p.B, p.H, p.W, p.C, p.K, p.stride,
                                 true, nullptr)
                    .ok());
    ExpectErr(p.Name("avgpool forward").c_str(), NormErr(Down(d_out), out), 1e-6);
    ExpectErr(p.Name("avgpool backward").c_str(), NormErr(Down(d_dx), dx), 1e-6);
    ExpectErr(p.Name("avgpool backward, accumulating").c_str(), NormErr(Down(d_acc), dx_acc), 1e-6);
  }
}

TEST_F(CudaCnnOps, GlobalAveragePoolMatchesTheCpu) {
  const int B = 3, HW = 49, C = 10;
  const std::vector<float> x = Random(Count(int64_t{B} * HW * C), 7);
  const std::vector<float> dout = Random(Count(int64_t{B} * C), 8);
  std::vector<float> out(Count(int64_t{B} * C)), dx(x.size()), dx_acc = Random(x.size(), 9);
  cpu::global_avgpool_forward(out.data(), x.data(), B, HW, C);
  cpu::global_avgpool_backward(dx.data(), dout.data(), B, HW, C, false);
  cpu::global_avgpool_backward(dx_acc.data(), dout.data(), B, HW, C, true);

  DeviceBuffer<float> d_x = Up(x), d_out = Up(std::vector<float>(out.size()));
  DeviceBuffer<float> d_dout = Up(dout), d_dx = Up(std::vector<float>(x.size()));
  DeviceBuffer<float> d_acc = Up(Random(x.size(), 9));
  ASSERT_TRUE(global_avgpool_forward(d_out.data(), d_x.data(), B, HW, C, nullptr).ok());
  ASSERT_TRUE(global_avgpool_backward(d_dx.data(), d_dout.data(), B, HW, C, false, nullptr).ok());
  ASSERT_TRUE(global_avgpool_backward(d_acc.data(), d_dout.data(), B, HW, C, true, nullptr).ok());
  ExpectErr("global average forward", NormErr(Down(d_out), out), 1e-6);
  ExpectErr("global average backward", NormErr(Down(d_dx), dx), 1e-6);
  ExpectErr("global average backward, accumulating", NormErr(Down(d_acc), dx_acc), 1e-6);
}

TEST_F(CudaCnnOps, ActivationsMatchTheCpu) {
  const int64_t n = 3001;
  const std::vector<float> x = Random(Count(n), 10, 3.0), d = Random(Count(n), 11);
  for (cpu::Activation act : {cpu::Activation::kRelu, cpu::Activation::kTanh,
                              cpu::Activation::kGelu, cpu::Activation::kNone}) {
    const std::string name = std::string("activation ") + std::to_string(static_cast<int>(act));
    std::vector<float> out(Count(n)), dx(Count(n)), dx_acc = Random(Count(n), 12);
    cpu::act_forward(out.data(), x.data(), n, act);
    cpu::act_backward(dx.data(), d.data(), x.data(), out.data(), n, act, false);
    cpu::act_backward(dx_acc.data(), d.data(), x.data(), out.data(), n, act, true);

    DeviceBuffer<float> d_x = Up(x), d_out = Up(std::vector<float>(Count(n)));
    DeviceBuffer<float> d_d = Up(d), d_dx = Up(std::vector<float>(Count(n)));
    DeviceBuffer<float> d_acc = Up(Random(Count(n), 12));
    ASSERT_TRUE(act_forward(d_out.data(), d_x.data(), n, act, nullptr).ok());
    ASSERT_TRUE(
        act_backward(d_dx.data(), d_d.data(), d_x.data(), d_out.data(), n, act, false, nullptr)
            .ok());
    ASSERT_TRUE(
        act_backward(d_acc.data(), d_d.data(), d_x.data(), d_out.data(), n, act, true, nullptr)
            .ok());
    ExpectErr((name + " forward").c_str(), NormErr(Down(d_out), out), 1e-5);
    ExpectErr((name + " backward").c_str(), NormErr(Down(d_dx), dx), 1e-5);
    ExpectErr((name + " backward, accumulating").c_str(), NormErr(Down(d_acc), dx_acc), 1e-5);
  }
}

TEST_F(CudaCnnOps, AddAndCopyMatchTheCpu) {
  const int64_t n = 1027;
  const std::vector<float> a = Random(Count(n), 13), b = Random(Count(n), 14);
  std::vector<float> sum(Count(n)), acc = b;
  cpu::add_forward(sum.data(), a.data(), b.data(), n);
  cpu::copy_or_add(acc.data(), a.data(), n, true);
  DeviceBuffer<float> d_a = Up(a), d_b = Up(b), d_sum = Up(std::vector<float>(Count(n)));
  DeviceBuffer<float> d_copy = Up(std::vector<float>(Count(n)));
  ASSERT_TRUE(add_forward(d_sum.data(), d_a.data(), d_b.data(), n, nullptr).ok());
  ASSERT_TRUE(copy_or_add(d_copy.data(), d_a.data(), n, false, nullptr).ok());
  ASSERT_TRUE(copy_or_add(d_b.data(), d_a.data(), n, true, nullptr).ok());
  EXPECT_EQ(Down(d_sum), sum);
  EXPECT_EQ(Down(d_copy), a);
  EXPECT_EQ(Down(d_b), acc);
}

TEST_F(CudaCnnOps, BatchNormMatchesTheCpu) {
  struct Case {
    int64_t N;
    int C;
    cpu::Activation act;
  };
  // One range and one block of channels; several ranges and a partial second block; more
  // ranges than a channel's lanes (32), so that a lane adds several.
  for (const Case& k :
       {Case{147, 5, cpu::Activation::kRelu}, Case{5000, 40, cpu::Activation::kTanh},
        Case{5000, 40, cpu::Activation::kNone}, Case{40000, 3, cpu::Activation::kRelu}}) {
    const std::string name = "batch norm " + std::to_string(k.N) + "x" + std::to_string(k.C) +
                             " act " + std::to_string(static_cast<int>(k.act));
    const size_t n = Count(k.N * k.C), c = Count(k.C);
    std::vector<float> x = Random(n, 20, 2.0);
    for (size_t i = 0; i < n; ++i) x[i] += 3.0f;  // a mean far from 0
    const std::vector<float> gamma = Random(c, 21), beta = Random(c, 22), dout = Random(n, 23);
    std::vector<float> rm = Random(c, 24, 0.1), rv(c, 1.5f);
    std::vector<float> out(n), pre(n), mean(c), invstd(c), rm_cpu = rm, rv_cpu = rv;
    cpu::batchnorm_forward(out.data(), pre.data(), mean.data(), invstd.data(), x.data(),
                           gamma.data(), beta.data(), rm_cpu.data(), rv_cpu.data(), k.N, k.C, 0.1f,
                           1e-5f, k.act);
    std::vector<float> eval(n);
    cpu::batchnorm_eval(eval.data(), x.data(), gamma.data(), beta.data(), rm_cpu.data(),
                        rv_cpu.data(), k.N, k.C, 1e-5f, k.act);
    std::vector<float> d = dout, dx(n), dgamma = Random(c, 25), dbeta = Random(c, 26);
    std::vector<float> dx_acc = Random(n, 27);
    cpu::batchnorm_backward(dx.data(), dgamma.data(), dbeta.data(), d.data(), x.data(), pre.data(),
                            out.data(), mean.data(), invstd.data(), gamma.data(), k.N, k.C, k.act,
                            true, false);
    d = dout;
    std::vector<float> dgamma2(c), dbeta2(c);
    cpu::batchnorm_backward(dx_acc.data(), dgamma2.data(), dbeta2.data(), d.data(), x.data(),
                            pre.data(), out.data(), mean.data(), invstd.data(), gamma.data(), k.N,
                            k.C, k.act, false, true);

    DeviceBuffer<float> g_x = Up(x), g_gamma = Up(gamma), g_beta = Up(beta), g_rm = Up(rm);
    DeviceBuffer<float> g_rv = Up(rv), g_out = Up(std::vector<float>(n));
    DeviceBuffer<float> g_pre = Up(std::vector<float>(n)), g_mean = Up(std::vector<float>(c));
    DeviceBuffer<float> g_inv = Up(std::vector<float>(c)), g_eval = Up(std::vector<float>(n));
    DeviceBuffer<uint8_t> scratch;
    ASSERT_TRUE(DeviceBuffer<uint8_t>::Make(batchnorm_scratch_bytes(k.N, k.C), &scratch).ok());
    ASSERT_TRUE(batchnorm_forward(g_out.data(), g_pre.data(), g_mean.data(), g_inv.data(),
                                  g_x.data(), g_gamma.data(), g_beta.data(), g_rm.data(),
                                  g_rv.data(), k.N, k.C, 0.1f, 1e-5f, k.act, scratch.data(),
                                  nullptr)
                    .ok());
    ASSERT_TRUE(batchnorm_eval(g_eval.data(), g_x.data(), g_gamma.data(), g_beta.data(),
                               g_rm.data(), g_rv.data(), k.N, k.C, 1e-5f, k.act, nullptr)
                    .ok());
    DeviceBuffer<float> g_d = Up(dout), g_dx = Up(std::vector<float>(n));
    DeviceBuffer<float> g_dgamma = Up(Random(c, 25)), g_dbeta = Up(Random(c, 26));
    ASSERT_TRUE(batchnorm_backward(g_dx.data(), g_dgamma.data(), g_dbeta.data(), g_d.data(),
                                   g_x.data(), g_pre.data(), g_out.data(), g_mean.data(),
                                   g_inv.data(), g_gamma.data(), k.N, k.C, k.act, true, false,
                                   scratch.data(), nullptr)
                    .ok());
    DeviceBuffer<float> g_d2 = Up(dout), g_acc = Up(Random(n, 27));
    DeviceBuffer<float> g_dgamma2 = Up(std::vector<float>(c)), g_dbeta2 = Up(std::vector<float>(c));
    ASSERT_TRUE(batchnorm_backward(g_acc.data(), g_dgamma2.data(), g_dbeta2.data(), g_d2.data(),
                                   g_x.data(), g_pre.data(), g_out.data(), g_mean.data(),
                                   g_inv.data(), g_gamma.data(), k.N, k.C, k.act, false, true,
                                   scratch.data(), nullptr)
                    .ok());
    ExpectErr((name + " mean").c_str(), NormErr(Down(g_mean), mean), 1e-6);
    ExpectErr((name + " invstd").c_str(), NormErr(Down(g_inv), invstd), 1e-5);
    ExpectErr((name + " running mean").c_str(), NormErr(Down(g_rm), rm_cpu), 1e-6);
    ExpectErr((name + " running var").c_str(), NormErr(Down(g_rv), rv_cpu), 1e-5);
    ExpectErr((name + " out").c_str(), NormErr(Down(g_out), out), 1e-5);
    if (k.act != cpu::Activation::kNone) {
      ExpectErr((name + " pre").c_str(), NormErr(Down(g_pre), pre), 1e-5);
    }
    ExpectErr((name + " eval").c_str(), NormErr(Down(g_eval), eval), 1e-5);
    ExpectErr((name + " dx").c_str(), NormErr(Down(g_dx), dx), 1e-5);
    ExpectErr((name + " dgamma, accumulating").c_str(), NormErr(Down(g_dgamma), dgamma), 1e-5);
    ExpectErr((name + " dbeta, accumulating").c_str(), NormErr(Down(g_dbeta), dbeta), 1e-5);
    ExpectErr((name + " dx, accumulating").c_str(), NormErr(Down(g_acc), dx_acc), 1e-5);
    ExpectErr((name + " dgamma").c_str(), NormErr(Down(g_dgamma2), dgamma2), 1e-5);
    ExpectErr((name + " dbeta").c_str(), NormErr(Down(g_dbeta2), dbeta2), 1e-5);
  }
}

// What a run of the batch-norm passes wrote, output by output, as bytes.
using Outputs = std::vector<std::vector<uint8_t>>;

// Appends the `bytes` bytes at device pointer p to *got, once the device is done.
void Take(Outputs* got, const void* p, int64_t bytes) {
  std::vector<uint8_t> h(Count(bytes));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), p, h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  got->push_back(h);
}

// run(shift, &outputs) on arrays aligned (shift 0: four channels a thread) and on arrays shifted
// by one element (one channel a thread): every output the same bytes.
template <typename Run>
void ExpectTheSameBitsAlignedOrNot(const Run& run) {
  Outputs four, one;
  run(0, &four);
  run(1, &one);
  ASSERT_EQ(four.size(), one.size());
  for (size_t k = 0; k < four.size(); ++k) EXPECT_EQ(four[k], one[k]) << "output " << k;
}

// Batch norm's apply passes take four channels a thread where their arrays are aligned to four
// elements: the same bits as one channel a thread, which the same 16-bit arrays one element
// further on (2-byte aligned) get. bf16 throughout: forward with a ReLU, with the fused pool, the
// residual pair's pool; backward with the mask computed again, and with the pool's gradient.
TEST_F(CudaCnnOps, BatchNormsFourChannelPassesGiveTheOneChannelBits) {
  const int B = 3, H = 6, W = 6, C = 8, K = 2;
  const int64_t N = int64_t{B} * H * W, n = N * C, pooled = n / (K * K);
  const std::vector<uint16_t> x16 = test::HostBf16(Random(Count(n), 30, 2.0));
  const std::vector<uint16_t> y16 = test::HostBf16(Random(Count(n), 31, 2.0));
  const std::vector<uint16_t> d16 = test::HostBf16(Random(Count(n), 32));
  const std::vector<uint16_t> dout16 = test::HostBf16(Random(Count(pooled), 33));
  const std::vector<float> gamma = Random(Count(C), 34), beta = Random(Count(C), 35);
  const std::vector<float> gamma2 = Random(Count(C), 36), beta2 = Random(Count(C), 37);
  // Every output of one run, as bytes, into *got.
  auto run = [&](int shift, Outputs* got) {
    // A 16-bit array `shift` elements into its buffer, holding h (or zeros).
    std::vector<DeviceBuffer<uint16_t>> keep;
    auto half = [&](const std::vector<uint16_t>& h, int64_t size) {
      // A whole number of 16-byte blocks: the buffer's start is 16-byte aligned on a GPU and
      // in the emulator (which aligns it to the largest power of two dividing its size).
      std::vector<uint16_t> padded(Count((size + 8) / 8 * 8));
      std::copy(h.begin(), h.end(), padded.begin() + shift);
      keep.push_back(Up(padded));
      return keep.back().data() + shift;
    };
    auto take = [&](const void* p, int64_t bytes) { Take(got, p, bytes); };
    DeviceBuffer<float> g_gamma = Up(gamma), g_beta = Up(beta), g_gamma2 = Up(gamma2);
    DeviceBuffer<float> g_beta2 = Up(beta2), mean = Up(std::vector<float>(Count(C)));
    DeviceBuffer<float> inv = Up(std::vector<float>(Count(C)));
    DeviceBuffer<float> mean2 = Up(std::vector<float>(Count(C)));
    DeviceBuffer<float> inv2 = Up(std::vector<float>(Count(C)));
    DeviceBuffer<float> dgamma = Up(std::vector<float>(Count(C)));
    DeviceBuffer<float> dbeta = Up(std::vector<float>(Count(C)));
    DeviceBuffer<float> pool_out = Up(std::vector<float>(Count(pooled)));
    DeviceBuffer<int32_t> argmax = Up(std::vector<int32_t>(Count(pooled)));
    DeviceBuffer<uint8_t> scratch = Up(std::vector<uint8_t>(Count(batchnorm_scratch_bytes(N, C))));
    uint16_t* x = half(x16, n);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(x) % 8, shift == 0 ? 0u : 2u);
    uint16_t* y = half(y16, n);
    uint16_t* out = half({}, n);
    uint16_t* dx = half({}, n);
    uint16_t* pout16 = half({}, pooled);
    const uint16_t* dout = half(dout16, pooled);
    uint16_t* d = half(d16, n);
    const cpu::HalfType bf16 = cpu::HalfType::kBf16;
    // Forward with a ReLU, into 16 bits.
    ASSERT_TRUE(batchnorm_forward(nullptr, nullptr, mean.data(), inv.data(), nullptr,
                                  g_gamma.data(), g_beta.data(), nullptr, nullptr, N, C, 0.1f,
                                  1e-5f, cpu::Activation::kRelu, scratch.data(), nullptr,
                                  BnHalf{x, out, nullptr, nullptr, bf16})
                    .ok());
    take(out, n * 2);
    // Backward, ReLU's mask computed again from beta, into 16 bits.
    ASSERT_TRUE(batchnorm_backward(nullptr, dgamma.data(), dbeta.data(), nullptr, nullptr, nullptr,
                                   nullptr, mean.data(), inv.data(), g_gamma.data(), N, C,
                                   cpu::Activation::kRelu, false, false, scratch.data(), nullptr,
                                   BnHalf{x, nullptr, d, dx, bf16}, g_beta.data())
                    .ok());
    take(dx, n * 2);
    // The pool fused, ReLU after it; then its backward, ReLU's mask from its output.
    BnPool pool{pool_out.data(), pout16, argmax.data(), nullptr, dout, B, H, W, K, K, true};
    ASSERT_TRUE(batchnorm_forward(nullptr, nullptr, mean.data(), inv.data(), nullptr,
                                  g_gamma.data(), g_beta.data(), nullptr, nullptr, N, C, 0.1f,
                                  1e-5f, cpu::Activation::kNone, scratch.data(), nullptr,
                                  BnHalf{x, nullptr, nullptr, nullptr, bf16}, &pool)
                    .ok());
    take(pool_out.data(), pooled * 4);
    take(pout16, pooled * 2);
    take(argmax.data(), pooled * 4);
    ASSERT_TRUE(batchnorm_backward(nullptr, dgamma.data(), dbeta.data(), nullptr, nullptr, nullptr,
                                   nullptr, mean.data(), inv.data(), g_gamma.data(), N, C,
                                   cpu::Activation::kNone, false, false, scratch.data(), nullptr,
                                   BnHalf{x, nullptr, nullptr, dx, bf16}, g_beta.data(), &pool)
                    .ok());
    take(dx, n * 2);
    // A residual pair's end: the second side's statistics, then both sides' sum pooled.
    ASSERT_TRUE(batchnorm_forward(nullptr, nullptr, mean2.data(), inv2.data(), nullptr,
                                  g_gamma2.data(), g_beta2.data(), nullptr, nullptr, N, C, 0.1f,
                                  1e-5f, cpu::Activation::kNone, scratch.data(), nullptr,
                                  BnHalf{y, nullptr, nullptr, nullptr, bf16})
                    .ok());
    const BnSide a{nullptr, x, g_gamma.data(), g_beta.data(), mean.data(), inv.data(), nullptr, 0};
    const BnSide b{nullptr,      y,           g_gamma2.data(), g_beta2.data(),
                   mean2.data(), inv2.data(), nullptr,         0};
    ASSERT_TRUE(batchnorm_add_pool(a, b, N, C, pool, bf16, nullptr).ok());
    take(pool_out.data(), pooled * 4);
    take(pout16, pooled * 2);
    take(argmax.data(), pooled * 4);
  };
  ExpectTheSameBitsAlignedOrNot(run);
}

// The statistics' and backward's sums four channels a thread against one, over three ranges of
// rows and a second block of channels partly filled: fp32 and fp16, ReLU's mask read from the
// forward's output and written back into the gradient (which the sums pass writes).
TEST_F(CudaCnnOps, BatchNormSumsFourChannelsGiveTheOneChannelBits) {
  const int C = 40;
  const int64_t N = 2100, n = N * C;
  const std::vector<float> x = Random(Count(n), 40, 2.0), d = Random(Count(n), 41);
  const std::vector<float> gamma = Random(Count(C), 42), beta = Random(Count(C), 43);
  std::vector<uint16_t> x16, d16;
  for (float v : x) x16.push_back(test::HostFp16(v));
  for (float v : d) d16.push_back(test::HostFp16(v));
  auto run = [&](int shift, Outputs* got) {
    std::vector<DeviceBuffer<uint8_t>> keep;
    // An array `shift` elements into a buffer of whole 16-byte blocks (aligned to 16 bytes on a
    // GPU and in the emulator), holding h (or zeros).
    auto place = [&](auto h, int64_t size) {
      using T = typename decltype(h)::value_type;
      std::vector<uint8_t> bytes(Count((size + 8) * 4 / 16 * 16));
      if (!h.empty()) std::memcpy(bytes.data() + shift * sizeof(T), h.data(), h.size() * sizeof(T));
      keep.push_back(Up(bytes));
      return reinterpret_cast<T*>(keep.back().data()) + shift;
    };
    auto take = [&](const void* p, int64_t bytes) { Take(got, p, bytes); };
    const std::vector<float> none(Count(C));
    DeviceBuffer<float> g_gamma = Up(gamma), g_beta = Up(beta), mean = Up(none), inv = Up(none);
    DeviceBuffer<float> rmean = Up(none), rvar = Up(std::vector<float>(Count(C), 1.0f));
    DeviceBuffer<float> dgamma = Up(none), dbeta = Up(none);
    DeviceBuffer<uint8_t> scratch = Up(std::vector<uint8_t>(Count(batchnorm_scratch_bytes(N, C))));
    auto stats = [&] {
      for (const DeviceBuffer<float>* b : {&mean, &inv, &rmean, &rvar}) take(b->data(), C * 4);
    };
    float* gx = place(x, n);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(gx) % 16, shift == 0 ? 0u : 4u);
    float* gd = place(d, n);
    float* out = place(std::vector<float>{}, n);
    float* pre = place(std::vector<float>{}, n);
    float* dx = place(std::vector<float>{}, n);
    ASSERT_TRUE(batchnorm_forward(out, pre, mean.data(), inv.data(), gx, g_gamma.data(),
                                  g_beta.data(), rmean.data(), rvar.data(), N, C, 0.1f, 1e-5f,
                                  cpu::Activation::kRelu, scratch.data(), nullptr)
                    .ok());
    stats();
    take(out, n * 4);
    ASSERT_TRUE(batchnorm_backward(dx, dgamma.data(), dbeta.data(), gd, gx, pre, out, mean.data(),
                                   inv.data(), g_gamma.data(), N, C, cpu::Activation::kRelu, false,
                                   false, scratch.data(), nullptr)
                    .ok());
    take(dx, n * 4);
    take(gd, n * 4);
    take(dgamma.data(), C * 4);
    take(dbeta.data(), C * 4);
    // fp16: the mask from the fp32 output, the 16-bit gradient written back.
    const cpu::HalfType fp16 = cpu::HalfType::kFp16;
    uint16_t* hx = place(x16, n);
    uint16_t* hd = place(d16, n);
    uint16_t* hdx = place(std::vector<uint16_t>{}, n);
    ASSERT_TRUE(batchnorm_forward(out, pre, mean.data(), inv.data(), nullptr, g_gamma.data(),
                                  g_beta.data(), rmean.data(), rvar.data(), N, C, 0.1f, 1e-5f,
                                  cpu::Activation::kRelu, scratch.data(), nullptr,
                                  BnHalf{hx, nullptr, nullptr, nullptr, fp16})
                    .ok());
    stats();
    ASSERT_TRUE(batchnorm_backward(nullptr, dgamma.data(), dbeta.data(), nullptr, nullptr, pre, out,
                                   mean.data(), inv.data(), g_gamma.data(), N, C,
                                   cpu::Activation::kRelu, true, false, scratch.data(), nullptr,
                                   BnHalf{hx, nullptr, hd, hdx, fp16})
                    .ok());
    take(hdx, n * 2);
    take(hd, n * 2);
    take(dgamma.data(), C * 4);
    take(dbeta.data(), C * 4);
  };
  ExpectTheSameBitsAlignedOrNot(run);
}

}  // namespace
}  // namespace sweep::trainer::cuda
