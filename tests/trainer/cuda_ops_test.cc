// Every CUDA kernel against the CPU kernel of the same name, on random inputs with odd shapes.
// Errors are normalised: |gpu - cpu|_2 / |cpu|_2. Tolerances: exact-fp32 GEMMs 1e-5 (summation
// order only), TF32 GEMMs 5e-3 (10-bit mantissa products), elementwise kernels 1e-5 (CUDA's
// tanhf/expf against the CPU's rational tanh and std::exp), dropout masks and counts exact.
// Skipped (GTEST_SKIP) where no CUDA device is present; ctest label `gpu`.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/ops.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_buffer.h"
#include "cuda/ops.h"
#include "gtest/gtest.h"
#include "rng.h"

namespace sweep::trainer::cuda {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * (2.0 * rng.Uniform() - 1.0));
  return v;
}

double NormErr(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    diff += (double{gpu[i]} - cpu[i]) * (double{gpu[i]} - cpu[i]);
    ref += double{cpu[i]} * cpu[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

template <typename T>
DeviceBuffer<T> Up(const std::vector<T>& h) {
  DeviceBuffer<T> d;
  EXPECT_TRUE(DeviceBuffer<T>::Make(static_cast<int64_t>(h.size()), &d).ok());
  EXPECT_EQ(cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return d;
}

template <typename T>
std::vector<T> Down(const DeviceBuffer<T>& d) {
  std::vector<T> h(static_cast<size_t>(d.size()));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), d.data(), h.size() * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return h;
}

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
