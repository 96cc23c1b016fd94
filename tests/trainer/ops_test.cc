// Gradient checks of the CPU kernels and of a whole Mlp against central finite differences
// (computed in float, the losses summed in double), plus the optimizer, accuracy and the
// seeded initialisation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "cpu/net.h"
#include "cpu/ops.h"
#include "gtest/gtest.h"
#include "model.h"
#include "rng.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace sweep::trainer::cpu {
namespace {

using testing::Random;

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double{a[i]} * b[i];
  return s;
}

// Checks analytic[i] against the central difference of loss() in x[i]. eps is large for float
// (1e-2): the truncation error of a smooth function is O(eps^2), the rounding error O(1e-7/eps).
void ExpectGradient(const std::function<double()>& loss, std::vector<float>* x,
                    const std::vector<float>& analytic, const char* what, float eps = 1e-2f) {
  ASSERT_EQ(x->size(), analytic.size());
  for (size_t i = 0; i < x->size(); ++i) {
    const float keep = (*x)[i];
    (*x)[i] = keep + eps;
    const double up = loss();
    (*x)[i] = keep - eps;
    const double down = loss();
    (*x)[i] = keep;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], numeric, 2e-3 + 1e-2 * std::abs(numeric)) << what << "[" << i << "]";
  }
}

TEST(Ops, MatmulBackward) {
  const int B = 3, C = 5, OC = 4;
  auto inp = Random(B * C, 1), w = Random(OC * C, 2), r = Random(B * OC, 3);
  std::vector<float> out(B * OC);
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), w.data(), B, C, OC);
    return Dot(out, r);
  };
  // Forward against a plain triple loop.
  loss();
  for (int b = 0; b < B; ++b) {
    for (int o = 0; o < OC; ++o) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += double{inp[b * C + c]} * w[o * C + c];
      EXPECT_NEAR(out[b * OC + o], s, 1e-5);
    }
  }
  std::vector<float> dinp(B * C), dw(OC * C);
  matmul_backward(dinp.data(), dw.data(), r.data(), inp.data(), w.data(), B, C, OC);
  ExpectGradient(loss, &inp, dinp, "dinp");
  ExpectGradient(loss, &w, dw, "dweight");

  // accumulate adds; a null dinp is skipped.
  std::vector<float> dw2 = dw;
  matmul_backward(nullptr, dw2.data(), r.data(), inp.data(), w.data(), B, C, OC, true);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_FLOAT_EQ(dw2[i], 2 * dw[i]);
}

std::string ActName(const ::testing::TestParamInfo<Activation>& p) {
  switch (p.param) {
    case Activation::kNone:
      return "None";
    case Activation::kRelu:
      return "Relu";
    case Activation::kTanh:
      return "Tanh";
    case Activation::kGelu:
      return "Gelu";
  }
  return "Unknown";
}

class BiasAct : public ::testing::TestWithParam<Activation> {};

TEST_P(BiasAct, Backward) {
  const Activation act = GetParam();
  const int B = 4, C = 6;
  auto x = Random(B * C, 4, 2.0), bias = Random(C, 5, 0.5), r = Random(B * C, 6);
  // ReLU has a kink at 0: keep finite differences away from it.
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) {
      float& v = x[b * C + c];
      if (std::abs(v + bias[c]) < 0.05f) v += 0.1f;
    }
  }
  std::vector<float> pre(B * C), out(B * C);
  auto loss = [&] {
    pre = x;
    bias_act_forward(out.data(), pre.data(), bias.data(), B, C, act);
    return Dot(out, r);
  };
  loss();
  std::vector<float> d = r, dbias(C);
  bias_act_backward(d.data(), dbias.data(), pre.data(), out.data(), B, C, act);
  for (int i = 0; i < B * C; ++i) EXPECT_FLOAT_EQ(pre[i], x[i] + bias[i % C]) << i;
  ExpectGradient(loss, &x, d, "dpre");
  ExpectGradient(loss, &bias, dbias, "dbias");
}

INSTANTIATE_TEST_SUITE_P(AllActivations, BiasAct,
                         ::testing::Values(Activation::kNone, Activation::kRelu, Activation::kTanh,
                                           Activation::kGelu),
                         ActName);

// tanh and gelu use a rational tanh (it vectorises); it must track std::tanh closely everywhere,
// saturation included.
TEST(Ops, TanhAndGeluMatchTheLibraryTanh) {
  const int n = 4001;
  std::vector<float> x(n), zero(n, 0.0f), pre(n), out(n);
  for (int i = 0; i < n; ++i) x[i] = -20.0f + 0.01f * i;
  pre = x;
  bias_act_forward(out.data(), pre.data(), zero.data(), 1, n, Activation::kTanh);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(out[i], std::tanh(double{x[i]}), 1e-6) << x[i];
  pre = x;
  bias_act_forward(out.data(), pre.data(), zero.data(), 1, n, Activation::kGelu);
  for (int i = 0; i < n; ++i) {
    const double v = x[i];
    const double gelu = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(out[i], gelu, 1e-5 * std::max(1.0, std::abs(v))) << v;
  }
  EXPECT_EQ(out[0], -0.0f);  // gelu(-20) underflows to zero rather than going astray
}

TEST(Ops, SoftmaxCrossEntropy) {
  const int B = 3, V = 5;
  auto logits = Random(B * V, 7, 3.0);
  logits[4] = 80.0f;  // large logits must not overflow
  const std::vector<int32_t> labels = {4, 0, 2};
  std::vector<float> losses(B), dlogits(B * V);
  auto loss = [&] {
    softmax_xent_forward_backward(nullptr, losses.data(), logits.data(), labels.data(), B, V, 0);
    double s = 0;
    for (float l : losses) s += l;
    return s / B;
  };
  softmax_xent_forward_backward(dlogits.data(), losses.data(), logits.data(), labels.data(), B, V,
                                1.0f / B);
  for (int b = 0; b < B; ++b) {
    double m = -1e30, sum = 0;
    for (int v = 0; v < V; ++v) m = std::max(m, double{logits[b * V + v]});
    for (int v = 0; v < V; ++v) sum += std::exp(logits[b * V + v] - m);
    EXPECT_NEAR(losses[b], m + std::log(sum) - logits[b * V + labels[b]], 1e-5);
  }
  ExpectGradient(loss, &logits, dlogits, "dlogits");
}

// A label outside the classes is never used as an index: NaN loss and NaN gradients for its
// row (as on CUDA), the other rows as usual.
TEST(Ops, SoftmaxCrossEntropyWithALabelOutsideTheClasses) {
  const int B = 2, V = 3;
  const std::vector<float> logits = {1, 2, 3, 1, 2, 3};
  for (int32_t bad : {-1, V, 1 << 30}) {
    const std::vector<int32_t> labels = {bad, 1};
    std::vector<float> losses(B), dlogits(B * V, 7.0f);
    softmax_xent_forward_backward(dlogits.data(), losses.data(), logits.data(), labels.data(), B, V,
                                  1.0f);
    EXPECT_TRUE(std::isnan(losses[0])) << bad;
    EXPECT_TRUE(std::isfinite(losses[1])) << bad;
    for (int v = 0; v < V; ++v) {
      EXPECT_TRUE(std::isnan(dlogits[v])) << bad;
      EXPECT_TRUE(std::isfinite(dlogits[V + v])) << bad;
    }
  }
}

TEST(Ops, SgdMomentumMatchesPyTorchConvention) {
  std::vector<float> p = {1.0f, -2.0f}, v = {0.0f, 0.0f};
  const std::vector<float> g = {0.5f, 1.0f};
  sgd_update(p.data(), v.data(), g.data(), 2, 0.1f, 0.9f, 0.0f, false);
  EXPECT_FLOAT_EQ(v[0], 0.5f);
  EXPECT_FLOAT_EQ(p[0], 0.95f);
  sgd_update(p.data(), v.data(), g.data(), 2, 0.1f, 0.9f, 0.0f, false);
  EXPECT_FLOAT_EQ(v[0], 0.95f);   // 0.9 * 0.5 + 0.5
  EXPECT_FLOAT_EQ(p[0], 0.855f);  // 0.95 - 0.1 * 0.95
  EXPECT_FLOAT_EQ(v[1], 1.9f);
  EXPECT_FLOAT_EQ(p[1], -2.29f);  // -2 - 0.1 - 0.19
  std::vector<float> q = {2.0f}, u = {0.0f};
  const float zero = 0.0f;
  sgd_update(q.data(), u.data(), &zero, 1, 0.5f, 0.0f, 0.1f, false);  // decay alone
  EXPECT_FLOAT_EQ(q[0], 1.9f);
}

// Nesterov, by hand (PyTorch: g' = g + wd p; v = mu v + g'; p -= lr (g' + mu v)):
//   step 1: g' = 0.5 + 0.1 * 1 = 0.6; v = 0.6; p = 1 - 0.1 * (0.6 + 0.9 * 0.6) = 0.886
//   step 2: g' = 0.5 + 0.0886 = 0.5886; v = 0.54 + 0.5886 = 1.1286;
//           p = 0.886 - 0.1 * (0.5886 + 1.01574) = 0.725566
TEST(Ops, SgdNesterovByHand) {
  std::vector<float> p = {1.0f}, v = {0.0f};
  const float g = 0.5f;
  sgd_update(p.data(), v.data(), &g, 1, 0.1f, 0.9f, 0.1f, true);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(p[0], 0.886f);
  sgd_update(p.data(), v.data(), &g, 1, 0.1f, 0.9f, 0.1f, true);
  EXPECT_FLOAT_EQ(v[0], 1.1286f);
  EXPECT_NEAR(p[0], 0.725566f, 1e-6);
}

// AdamW, by hand (PyTorch's AdamW: decay first, then the bias-corrected Adam step):
//   step 1, g = 0.5, lr 0.01, wd 0.1: p = 1 * (1 - 0.001) = 0.999; m = 0.05; v = 0.00025;
//     m_hat = 0.5, v_hat = 0.25: p = 0.999 - 0.01 * 0.5 / (0.5 + 1e-8) = 0.989
//   step 2, g = -1: p = 0.989 * 0.999 = 0.988011; m = 0.045 - 0.1 = -0.055;
//     v = 0.00024975 + 0.001 = 0.00124975; m_hat = -0.055 / 0.19 = -0.289474;
//     v_hat = 0.00124975 / 0.001999 = 0.625188, sqrt = 0.790688;
//     p = 0.988011 + 0.01 * 0.289474 / 0.790688 = 0.991672
TEST(Ops, AdamwByHand) {
  std::vector<float> p = {1.0f}, m = {0.0f}, v = {0.0f};
  float g = 0.5f;
  adamw_update(p.data(), m.data(), v.data(), &g, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  // 1 - beta2 is 0.00099998713 in float: v carries that 1.3e-5 relative offset.
  EXPECT_FLOAT_EQ(m[0], 0.05f);
  EXPECT_NEAR(v[0], 0.00025f, 0.00025 * 2e-5);
  EXPECT_FLOAT_EQ(p[0], 0.989f);
  g = -1.0f;
  adamw_update(p.data(), m.data(), v.data(), &g, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 2);
  EXPECT_FLOAT_EQ(m[0], -0.055f);
  EXPECT_NEAR(v[0], 0.00124975f, 0.00124975 * 2e-5);
  EXPECT_NEAR(p[0], 0.991672f, 2e-6);
  // Zero gradient, zero state (the padding between tensors): stays exactly zero.
  std::vector<float> z = {0.0f}, zm = {0.0f}, zv = {0.0f};
  const float zero = 0.0f;
  adamw_update(z.data(), zm.data(), zv.data(), &zero, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  EXPECT_EQ(z[0], 0.0f);
}

TEST(Ops, DropoutKeepsTheRightShareAndIsAPureFunctionOfRowAndKey) {
  const int B = 64, C = 256;
  const float p = 0.25f;
  std::vector<float> x(B * C, 2.0f), out(B * C), mask(B * C);
  dropout_forward(out.data(), mask.data(), x.data(), B, C, p, 1234, 0);
  int64_t kept = 0;
  for (int i = 0; i < B * C; ++i) {
    ASSERT_TRUE(mask[i] == 0.0f || mask[i] == 1.0f / 0.75f) << mask[i];
    EXPECT_EQ(out[i], x[i] * mask[i]);
    kept += mask[i] != 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / (B * C), 0.75, 0.02);
  // Rows 10.. of the batch computed alone, as a replica holding them would: the same masks.
  std::vector<float> part_out((B - 10) * C), part_mask((B - 10) * C);
  dropout_forward(part_out.data(), part_mask.data(), x.data(), B - 10, C, p, 1234, 10);
  for (int i = 0; i < (B - 10) * C; ++i) EXPECT_EQ(part_mask[i], mask[10 * C + i]);
  // Another key, other masks.
  std::vector<float> other(B * C);
  dropout_forward(out.data(), other.data(), x.data(), B, C, p, 1235, 0);
  EXPECT_NE(other, mask);
  // Backward multiplies by the mask.
  std::vector<float> d(B * C, 1.0f);
  dropout_backward(d.data(), mask.data(), B * C);
  EXPECT_EQ(d, mask);
}

TEST(Ops, SumBuffersAddsInRankOrder) {
  const std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, c = {100, 200, 300};
  const float* three[] = {a.data(), b.data(), c.data()};
  std::vector<float> out(3);
  sum_buffers(out.data(), three, 3, 3);
  EXPECT_EQ(out, (std::vector<float>{111, 222, 333}));
  sum_buffers(out.data(), three, 1, 3);
  EXPECT_EQ(out, a);
  // Order is part of the contract: in float, (1e8 + -1e8) + 1 is 1 but 1e8 + (-1e8 + 1) and
  // (1 + -1e8) + 1e8 are 0.
  const std::vector<float> big = {1e8f}, neg = {-1e8f}, one = {1.0f};
  const float* order[] = {big.data(), neg.data(), one.data()};
  sum_buffers(out.data(), order, 3, 1);
  EXPECT_EQ(out[0], 1.0f);
}

TEST(Ops, Accuracy) {
  const std::vector<float> logits = {0, 1, 2, /**/ 5, 1, 0, /**/ 1, 1, 0};
  EXPECT_EQ(accuracy(logits.data(), std::vector<int32_t>{2, 0, 0}.data(), 3, 3), 3);  // tie: 0
  EXPECT_EQ(accuracy(logits.data(), std::vector<int32_t>{1, 0, 1}.data(), 3, 3), 1);
}

class WholeMlp : public ::testing::TestWithParam<Activation> {};

TEST_P(WholeMlp, GradientsMatchFiniteDifferences) {
  const int B = 5, in = 4, classes = 3;
  Net model(ModelSpec::Mlp(in, {6, 5}, classes, GetParam()), B);
  InitParams(model.model(), 42, model.params(), nullptr);
  // Biases start at zero; give them values so their gradients are exercised off the kink.
  Rng rng(9);
  for (const Layer& l : model.model().layers) {
    if (l.bias_at < 0) continue;
    for (int o = 0; o < l.out; ++o) {
      model.params()[l.bias_at + o] = static_cast<float>(0.2 * rng.Uniform() - 0.1);
    }
  }
  const auto x = Random(B * in, 10, 1.5);
  const std::vector<int32_t> y = {0, 1, 2, 1, 0};
  model.ForwardBackward(x.data(), y.data(), B, 1.0f / B);
  std::vector<float> params(model.params(), model.params() + model.num_params());
  const std::vector<float> grads(model.grads(), model.grads() + model.num_params());
  auto loss = [&] {
    std::copy(params.begin(), params.end(), model.params());
    double sum = 0;
    int64_t correct = 0;
    model.Evaluate(x.data(), y.data(), B, &sum, &correct);
    return sum / B;
  };
  ExpectGradient(loss, &params, grads, "param", 5e-3f);
}

INSTANTIATE_TEST_SUITE_P(Activations, WholeMlp,
                         ::testing::Values(Activation::kRelu, Activation::kTanh, Activation::kGelu),
                         ActName);

// Dropout acts in training only: evaluation of a dropout model gives exactly what the same
// weights give without dropout, every time; a training forward pass does not.
TEST(WholeMlp, DropoutIsOffAtEvaluation) {
  const int B = 8, in = 5, classes = 3;
  Net dropped(ModelSpec::Mlp(in, {32, 16}, classes, Activation::kRelu, 0.5f), B);
  Net plain(ModelSpec::Mlp(in, {32, 16}, classes, Activation::kRelu), B);
  InitParams(dropped.model(), 5, dropped.params(), nullptr);
  InitParams(plain.model(), 5, plain.params(), nullptr);
  const auto x = Random(B * in, 11);
  const std::vector<int32_t> y = {0, 1, 2, 0, 1, 2, 0, 1};
  double a = 0, b = 0, c = 0;
  int64_t ca = 0, cb = 0, cc = 0;
  dropped.Evaluate(x.data(), y.data(), B, &a, &ca);
  dropped.Evaluate(x.data(), y.data(), B, &b, &cb);
  plain.Evaluate(x.data(), y.data(), B, &c, &cc);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(ca, cc);
  const double train_loss = dropped.ForwardLoss(x.data(), y.data(), B, 1.0f / B, 77, 0);
  EXPECT_NE(train_loss, a);
  EXPECT_EQ(train_loss, dropped.ForwardLoss(x.data(), y.data(), B, 1.0f / B, 77, 0));
  EXPECT_NE(train_loss, dropped.ForwardLoss(x.data(), y.data(), B, 1.0f / B, 78, 0));
}

// With dropout, the gradients are those of the masked network: finite differences of the
// training loss with the same key (the same masks) agree with Backward.
TEST(WholeMlp, DropoutGradientsMatchFiniteDifferences) {
  const int B = 4, in = 3, classes = 3;
  Net model(ModelSpec::Mlp(in, {8}, classes, Activation::kTanh, 0.3f), B);
  InitParams(model.model(), 8, model.params(), nullptr);
  const auto x = Random(B * in, 12, 1.5);
  const std::vector<int32_t> y = {0, 1, 2, 1};
  model.ForwardLoss(x.data(), y.data(), B, 1.0f / B, 99, 0);
  model.Backward(x.data(), B, false);
  std::vector<float> params(model.params(), model.params() + model.num_params());
  const std::vector<float> grads(model.grads(), model.grads() + model.num_params());
  auto loss = [&] {
    std::copy(params.begin(), params.end(), model.params());
    return model.ForwardLoss(x.data(), y.data(), B, 1.0f / B, 99, 0) / B;
  };
  ExpectGradient(loss, &params, grads, "param", 5e-3f);
}

TEST(Init, SeededScaledAndPadded) {
  const MlpShape s = MlpShape::Make(784, {256, 128}, 10);
  EXPECT_EQ(s.weight_offset[0], 0);
  for (int64_t off : s.weight_offset) EXPECT_EQ(off % 16, 0);
  for (int64_t off : s.bias_offset) EXPECT_EQ(off % 16, 0);
  EXPECT_GE(s.num_params, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  const ModelSpec relu = ModelSpec::Mlp(784, {256, 128}, 10, Activation::kRelu);
  const ModelSpec tanh = ModelSpec::Mlp(784, {256, 128}, 10, Activation::kTanh);
  EXPECT_EQ(relu.num_params, s.num_params);
  std::vector<float> a(s.num_params), b(s.num_params), c(s.num_params);
  InitParams(relu, 7, a.data(), nullptr);
  InitParams(relu, 7, b.data(), nullptr);
  InitParams(relu, 8, c.data(), nullptr);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double sq = 0;
  for (int64_t i = 0; i < 784 * 256; ++i) sq += double{a[i]} * a[i];
  EXPECT_NEAR(std::sqrt(sq / (784 * 256)), std::sqrt(2.0 / 784), 0.002);  // He
  for (int64_t i = s.bias_offset[0]; i < s.weight_offset[1]; ++i) EXPECT_EQ(a[i], 0.0f);
  InitParams(tanh, 7, c.data(), nullptr);
  sq = 0;
  for (int64_t i = 0; i < 784 * 256; ++i) sq += double{c[i]} * c[i];
  EXPECT_NEAR(std::sqrt(sq / (784 * 256)), std::sqrt(2.0 / (784 + 256)), 0.002);  // Xavier
  // Chosen explicitly, whatever the activation; the output layer stays Xavier.
  std::vector<float> d(s.num_params);
  InitParams(tanh, 7, d.data(), nullptr, InitScheme::kHe);
  EXPECT_EQ(d, a);
  InitParams(relu, 7, d.data(), nullptr, InitScheme::kXavier);
  EXPECT_EQ(d, c);
  InitParams(relu, 7, d.data(), nullptr, InitScheme::kHe);
  sq = 0;
  for (int64_t i = s.weight_offset[2]; i < s.weight_offset[2] + 128 * 10; ++i) {
    sq += double{d[i]} * d[i];
  }
  EXPECT_NEAR(std::sqrt(sq / (128 * 10)), std::sqrt(2.0 / (128 + 10)), 0.01);
}

// init = "pytorch": every weight and bias of a linear or convolution layer (the output layer's
// too) uniform in +-1 / sqrt(fan_in), as nn.Linear and nn.Conv2d start; batch norm at 1 and 0.
TEST(Init, PytorchDrawsEachLayerUniformWithinItsBound) {
  for (bool batch_norm : {true, false}) {
    TrainOptions o;
    o.model = "cnn";
    o.channels = {8, 16};
    o.hidden = {32};
    o.batch_norm = batch_norm;
    Result<ModelSpec> built = BuildModel(o, TensorShape{1, 12, 12}, 10);
    ASSERT_TRUE(built.ok()) << built.status().message();
    const ModelSpec& m = built.value();
    std::vector<float> p(static_cast<size_t>(m.num_params), -7.0f), q = p;
    InitParams(m, 3, p.data(), nullptr, InitScheme::kPytorch);
    InitParams(m, 3, q.data(), nullptr, InitScheme::kPytorch);
    EXPECT_EQ(p, q);
    int biased = 0;
    for (int k : m.param_layers) {
      const Layer& l = m.layer(k);
      SCOPED_TRACE(k);
      if (l.kind == LayerKind::kBatchNorm) {
        for (int c = 0; c < l.in_shape.c; ++c) {
          EXPECT_EQ(p[static_cast<size_t>(l.weight + c)], 1.0f);
          EXPECT_EQ(p[static_cast<size_t>(l.bias_at + c)], 0.0f);
        }
        continue;
      }
      const double bound = 1.0 / std::sqrt(static_cast<double>(l.fan_in()));
      const int64_t n = int64_t{l.out} * l.fan_in();
      double sq = 0, top = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double w = p[static_cast<size_t>(l.weight + i)];
        ASSERT_LE(std::abs(w), bound);
        sq += w * w;
        top = std::max(top, std::abs(w));
      }
      // A uniform draw's standard deviation is bound / sqrt(3), and its largest of n nears the
      // bound: not a normal draw, nor a narrower one.
      EXPECT_NEAR(std::sqrt(sq / static_cast<double>(n)), bound / std::sqrt(3.0), 0.08 * bound);
      EXPECT_GT(top, 0.9 * bound);
      if (l.bias_at >= 0) {
        ++biased;
        double bias_sq = 0;
        for (int i = 0; i < l.out; ++i) {
          const double b = p[static_cast<size_t>(l.bias_at + i)];
          ASSERT_LE(std::abs(b), bound);
          bias_sq += b * b;
        }
        EXPECT_GT(bias_sq, 0.0);
      }
    }
    // The two linear layers have biases; without batch norm, the four convolutions too.
    EXPECT_EQ(biased, batch_norm ? 2 : 6);
  }
}

// The GPU all-reduce's buckets: contiguous, covering the buffer once, in backward's order.
TEST(GradBuckets, CoverTheBufferInBackwardOrder) {
  const MlpShape s = MlpShape::Make(784, {4096, 4096, 4096, 4096}, 10);
  for (int64_t min_floats : {int64_t{0}, int64_t{1} << 20, int64_t{1} << 24, int64_t{1} << 40}) {
    const std::vector<GradBucket> b = MakeGradBuckets(s, min_floats);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.front().last_layer, s.layers() - 1);
    EXPECT_EQ(b.front().end, s.num_params);
    EXPECT_EQ(b.back().first_layer, 0);
    EXPECT_EQ(b.back().begin, 0);
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b[i].begin, s.layer_begin(b[i].first_layer));
      EXPECT_EQ(b[i].end, s.layer_end(b[i].last_layer));
      if (i + 1 < b.size()) {
        EXPECT_EQ(b[i + 1].last_layer, b[i].first_layer - 1) << min_floats;
        EXPECT_EQ(b[i + 1].end, b[i].begin) << min_floats;
        // Every bucket but the input layer's holds at least min_floats.
        EXPECT_GE(b[i].end - b[i].begin, min_floats);
      }
    }
  }
  // One per layer when any size will do; everything in one when none is big enough.
  EXPECT_EQ(MakeGradBuckets(s, 0).size(), 5u);
  EXPECT_EQ(MakeGradBuckets(s, int64_t{1} << 40).size(), 1u);
  // 4 MiB buckets: the 10-class head joins the last hidden layer; the others stand alone.
  const std::vector<GradBucket> mib = MakeGradBuckets(s, int64_t{1} << 20);
  ASSERT_EQ(mib.size(), 4u);
  EXPECT_EQ(mib[0].first_layer, 3);
  EXPECT_EQ(mib[0].last_layer, 4);
  // The Fashion-MNIST MLP is one bucket at that size: nothing to overlap, one NCCL call.
  EXPECT_EQ(MakeGradBuckets(MlpShape::Make(784, {256, 128}, 10), int64_t{1} << 20).size(), 1u);
}

TEST(Precision, Names) {
  Precision p = Precision::kFp32;
  EXPECT_TRUE(ParsePrecision("bf16", &p));
  EXPECT_EQ(p, Precision::kBf16);
  EXPECT_TRUE(ParsePrecision("fp16", &p));
  EXPECT_EQ(p, Precision::kFp16);
  EXPECT_TRUE(ParsePrecision("fp32", &p));
  EXPECT_EQ(p, Precision::kFp32);
  EXPECT_FALSE(ParsePrecision("FP32", &p));
  EXPECT_FALSE(ParsePrecision("tf32", &p));
}

// Every positive finite value of a 16-bit format, ascending, as floats.
std::vector<float> HalfValues(HalfType type) {
  std::vector<float> v;
  if (type == HalfType::kBf16) {
    for (uint32_t h = 0; h <= 0x7F7Fu; ++h) {
      const uint32_t bits = h << 16;
      float x;
      std::memcpy(&x, &bits, sizeof x);
      v.push_back(x);
    }
  } else {
    for (int h = 0; h <= 0x7BFF; ++h) {
      const int exp = h >> 10, frac = h & 0x3FF;
      v.push_back(exp == 0 ? std::ldexp(static_cast<float>(frac), -24)
                           : std::ldexp(static_cast<float>(frac + 1024), exp - 25));
    }
  }
  return v;
}

float Round(float x, HalfType type) {
  float out;
  round_to_half(&out, &x, 1, type);
  return out;
}

// Exhaustive over the format: every value rounds to itself; between two neighbours, the exact
// midpoint goes to the one with an even last bit and the floats either side of it to the
// nearer; the sign is kept. Then the ends: past the largest value, inf and NaN.
TEST(Ops, RoundToHalfIsNearestTiesToEvenOverEveryValue) {
  for (HalfType type : {HalfType::kBf16, HalfType::kFp16}) {
    SCOPED_TRACE(type == HalfType::kBf16 ? "bf16" : "fp16");
    const std::vector<float> v = HalfValues(type);
    int bad = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const float lo = v[i];
      if (Round(lo, type) != lo || Round(-lo, type) != -lo) ++bad;
      if (i + 1 == v.size()) break;
      const float hi = v[i + 1];
      const float mid = lo + (hi - lo) / 2;  // exact: one more bit than the format has
      const float even = i % 2 == 0 ? lo : hi;
      if (Round(mid, type) != even || Round(-mid, type) != -even) ++bad;
      if (Round(std::nextafter(mid, lo), type) != lo) ++bad;
      if (Round(std::nextafter(mid, hi), type) != hi) ++bad;
      if (Round(-std::nextafter(mid, hi), type) != -hi) ++bad;
      if (bad > 0) {
        ADD_FAILURE() << "between " << lo << " and " << hi;
        break;
      }
    }
    // The largest value's last bit is odd: from half a step above it on, the result is inf.
    const float top = v.back(), step = v.back() - v[v.size() - 2];
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(Round(std::nextafter(top + step / 2, 0.0f), type), top);
    EXPECT_EQ(Round(top + step / 2, type), inf);
    EXPECT_EQ(Round(-(top + step / 2), type), -inf);
    EXPECT_EQ(Round(3.4e38f, type), inf);
    EXPECT_EQ(Round(inf, type), inf);
    EXPECT_EQ(Round(-inf, type), -inf);
    EXPECT_TRUE(std::isnan(Round(std::numeric_limits<float>::quiet_NaN(), type)));
    EXPECT_TRUE(std::signbit(Round(-0.0f, type)));
  }
  EXPECT_EQ(Round(1e-30f, HalfType::kFp16), 0.0f);             // below half the smallest subnormal
  EXPECT_EQ(Round(1e-30f, HalfType::kBf16), 9.98402083e-31f);  // bf16 has float's exponents
  EXPECT_EQ(Round(65504.0f, HalfType::kFp16), 65504.0f);
  EXPECT_EQ(Round(65520.0f, HalfType::kFp16), std::numeric_limits<float>::infinity());
  // In place, over an array.
  std::vector<float> a = {1.0f + 1.0f / 4096, 3.14159265f, -4e-8f};
  round_to_half(a.data(), a.data(), 3, HalfType::kFp16);
  EXPECT_EQ(a[0], 1.0f);  // 2^-12 is below half of fp16's step at 1 (2^-10)
  EXPECT_EQ(a[1], 3.140625f);
  EXPECT_EQ(a[2], -std::ldexp(1.0f, -24));  // the smallest subnormal, 5.96e-8
}

}  // namespace
}  // namespace sweep::trainer::cpu
