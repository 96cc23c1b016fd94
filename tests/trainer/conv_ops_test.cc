// The convolution and batch-norm kernels of cpu/conv_ops.h: both convolution paths (the direct
// AVX2 kernels and im2col + SGEMM) against a naive reference in double and against finite
// differences, over shapes that reach the kernels' tile remainders, strides and paddings; batch
// norm's float-blocked statistics against double sums.
#include "cpu/conv_ops.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rng.h"
#include "test_util.h"

namespace sweep::trainer::cpu {
namespace {

using testing::Random;

size_t Sz(int64_t n) { return static_cast<size_t>(n); }

int64_t InIndex(const ConvShape& s, int b, int h, int w, int c) {
  return ((int64_t{b} * s.H + h) * s.W + w) * s.C + c;
}
int64_t OutIndex(const ConvShape& s, int b, int h, int w, int oc) {
  return ((int64_t{b} * s.OH() + h) * s.OW() + w) * s.OC + oc;
}
int64_t WIndex(const ConvShape& s, int oc, int kh, int kw, int c) {
  return ((int64_t{oc} * s.K + kh) * s.K + kw) * s.C + c;
}

// Calls f(b, oh, ow, oc, kh, kw, c) for every product of the convolution inside the image.
template <typename F>
void ForEachProduct(const ConvShape& s, F f) {
  for (int b = 0; b < s.B; ++b) {
    for (int oh = 0; oh < s.OH(); ++oh) {
      for (int ow = 0; ow < s.OW(); ++ow) {
        for (int oc = 0; oc < s.OC; ++oc) {
          for (int kh = 0; kh < s.K; ++kh) {
            const int ih = oh * s.stride - s.pad + kh;
            if (ih < 0 || ih >= s.H) continue;
            for (int kw = 0; kw < s.K; ++kw) {
              const int iw = ow * s.stride - s.pad + kw;
              if (iw < 0 || iw >= s.W) continue;
              for (int c = 0; c < s.C; ++c) f(b, oh, ow, oc, kh, kw, c, ih, iw);
            }
          }
        }
      }
    }
  }
}

struct Reference {
  std::vector<double> out, dinp, dweight;
};

Reference Naive(const ConvShape& s, const std::vector<float>& x, const std::vector<float>& w,
                const std::vector<float>& dout) {
  Reference r;
  r.out.assign(dout.size(), 0.0);
  r.dinp.assign(x.size(), 0.0);
  r.dweight.assign(w.size(), 0.0);
  ForEachProduct(s, [&](int b, int oh, int ow, int oc, int kh, int kw, int c, int ih, int iw) {
    const size_t o = Sz(OutIndex(s, b, oh, ow, oc)), i = Sz(InIndex(s, b, ih, iw, c));
    const size_t k = Sz(WIndex(s, oc, kh, kw, c));
    r.out[o] += double{x[i]} * w[k];
    r.dinp[i] += double{dout[o]} * w[k];
    r.dweight[k] += double{dout[o]} * x[i];
  });
  return r;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-12;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * scale) << what << " at " << i;
  }
}

struct Case {
  int B, H, W, C, OC, K, stride, pad;
};

std::string Name(const Case& c) {
  return "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " W" + std::to_string(c.W) +
         " C" + std::to_string(c.C) + " OC" + std::to_string(c.OC) + " K" + std::to_string(c.K) +
         " s" + std::to_string(c.stride) + " p" + std::to_string(c.pad);
}

// Shapes for the direct kernels (channels of 16k; widths that leave tile remainders), a stride
// that sends backward-data to the GEMM path, and channel counts only the GEMM path takes.
const Case kCases[] = {
    {3, 9, 11, 1, 16, 3, 1, 1}, {2, 7, 13, 16, 32, 3, 1, 1}, {2, 8, 8, 32, 16, 3, 1, 0},
    {2, 9, 7, 16, 16, 5, 1, 2}, {2, 9, 10, 16, 32, 3, 2, 1}, {2, 6, 6, 16, 48, 1, 1, 0},
    {2, 6, 7, 3, 8, 3, 1, 1},   {1, 5, 5, 32, 64, 3, 1, 1},
};

class ConvOps : public ::testing::TestWithParam<ConvImpl> {
 protected:
  void TearDown() override { set_conv_impl(ConvImpl::kAuto); }
};

TEST_P(ConvOps, MatchTheNaiveConvolution) {
  set_conv_impl(GetParam());
  for (const Case& c : kCases) {
    ConvShape s{c.B, c.H, c.W, c.C, c.OC, c.K, c.stride, c.pad};
    // The direct kernels do run where the CPU has them, for the shapes meant for them.
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool direct = GetParam() == ConvImpl::kAuto && avx2 && c.OC % 16 == 0 && c.K > 1;
    EXPECT_EQ(conv2d_direct_forward(s), direct) << Name(c);
    EXPECT_EQ(conv2d_direct_backward_data(s), direct && c.C % 16 == 0 && c.stride == 1) << Name(c);
    const auto x = Random(Sz(int64_t{s.B} * s.H * s.W * s.C), 1);
    const auto w = Random(Sz(s.OC * s.patch()), 2);
    const auto dout = Random(Sz(int64_t{s.B} * s.OH() * s.OW() * s.OC), 3);
    const Reference ref = Naive(s, x, w, dout);
    std::vector<float> scratch(Sz(conv2d_scratch_floats(s)));
    std::vector<float> out(dout.size()), dinp(x.size()), dw(w.size());
    conv2d_forward(out.data(), x.data(), w.data(), nullptr, s, scratch.data());
    ExpectNear(out, ref.out, 1e-5, Name(c) + " forward");
    conv2d_backward(dinp.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), s,
                    scratch.data(), false, false);
    ExpectNear(dinp, ref.dinp, 1e-5, Name(c) + " dinp");
    ExpectNear(dw, ref.dweight, 1e-5, Name(c) + " dweight");
    // Accumulating adds to what is there: twice the gradients.
    conv2d_backward(dinp.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), s,
                    scratch.data(), true, true);
    std::vector<double> twice_dinp = ref.dinp, twice_dw = ref.dweight;
    for (double& v : twice_dinp) v *= 2;
    for (double& v : twice_dw) v *= 2;
    ExpectNear(dinp, twice_dinp, 1e-5, Name(c) + " dinp accumulated");
    ExpectNear(dw, twice_dw, 1e-5, Name(c) + " dweight accumulated");
    // No input gradient wanted (a model's first layer).
    conv2d_backward(nullptr, dw.data(), nullptr, dout.data(), x.data(), w.data(), s, scratch.data(),
                    false, false);
    ExpectNear(dw, ref.dweight, 1e-5, Name(c) + " dweight alone");
  }
}

// L = sum(conv(x, w) * R) against central differences of L, in float: L is linear in each
// of x and w, so the differences are exact but for rounding.
TEST_P(ConvOps, GradientsMatchFiniteDifferences) {
  set_conv_impl(GetParam());
  for (const Case& c : {kCases[0], kCases[1], kCases[3], kCases[4]}) {
    ConvShape s{c.B, c.H, c.W, c.C, c.OC, c.K, c.stride, c.pad};
    auto x = Random(Sz(int64_t{s.B} * s.H * s.W * s.C), 4);
    auto w = Random(Sz(s.OC * s.patch()), 5);
    const auto r = Random(Sz(int64_t{s.B} * s.OH() * s.OW() * s.OC), 6);
    std::vector<float> scratch(Sz(conv2d_scratch_floats(s))), out(r.size());
    auto loss = [&]() {
      conv2d_forward(out.data(), x.data(), w.data(), nullptr, s, scratch.data());
      double l = 0;
      for (size_t i = 0; i < out.size(); ++i) l += double{out[i]} * r[i];
      return l;
    };
    std::vector<float> dinp(x.size()), dw(w.size());
    conv2d_backward(dinp.data(), dw.data(), nullptr, r.data(), x.data(), w.data(), s,
                    scratch.data(), false, false);
    const float eps = 0.05f;
    auto check = [&](std::vector<float>* v, const std::vector<float>& grad, const char* what) {
      Rng pick(7);
      for (int t = 0; t < 24; ++t) {
        const size_t i = static_cast<size_t>(pick.Uniform() * static_cast<double>(v->size()));
        const float keep = (*v)[i];
        (*v)[i] = keep + eps;
        const double up = loss();
        (*v)[i] = keep - eps;
        const double down = loss();
        (*v)[i] = keep;
        EXPECT_NEAR(grad[i], (up - down) / (2 * eps), 1e-3 * (1 + std::fabs(grad[i])))
            << Name(c) << " " << what << " " << i;
      }
    };
    check(&x, dinp, "dinp");
    check(&w, dw, "dweight");
  }
}

INSTANTIATE_TEST_SUITE_P(Impls, ConvOps, ::testing::Values(ConvImpl::kAuto, ConvImpl::kGemm),
                         [](const ::testing::TestParamInfo<ConvImpl>& i) {
                           return std::string(i.param == ConvImpl::kAuto ? "Direct" : "Gemm");
                         });

// Statistics summed in float blocks stay within float's rounding of double sums, over as many
// rows as a batch of 28x28 images gives, with an offset that makes the variance ill-conditioned.
TEST(BatchNorm, StatisticsAndGradientsMatchDouble) {
  const int64_t N = 64 * 28 * 28;
  const int C = 16;
  auto x = Random(Sz(N * C), 8);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 3.0f + 0.5f * x[i] + 0.01f * static_cast<float>(i % C);
  const auto gamma = Random(Sz(C), 9), beta = Random(Sz(C), 10), dy = Random(Sz(N * C), 11);
  std::vector<float> out(x.size()), mean(Sz(C)), invstd(Sz(C));
  batchnorm_forward(out.data(), nullptr, mean.data(), invstd.data(), x.data(), gamma.data(),
                    beta.data(), nullptr, nullptr, N, C, 0.1f, 1e-5f, Activation::kNone);
  std::vector<double> m(Sz(C), 0.0), var(Sz(C), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    for (int c = 0; c < C; ++c) m[Sz(c)] += x[Sz(r * C + c)];
  }
  for (double& v : m) v /= static_cast<double>(N);
  for (int64_t r = 0; r < N; ++r) {
    for (int c = 0; c < C; ++c) {
      const double d = x[Sz(r * C + c)] - m[Sz(c)];
      var[Sz(c)] += d * d;
    }
  }
  std::vector<double> inv(Sz(C));
  for (int c = 0; c < C; ++c) {
    inv[Sz(c)] = 1.0 / std::sqrt(var[Sz(c)] / static_cast<double>(N) + 1e-5);
    EXPECT_NEAR(mean[Sz(c)], m[Sz(c)], 1e-6 * std::fabs(m[Sz(c)])) << c;
    EXPECT_NEAR(invstd[Sz(c)], inv[Sz(c)], 2e-6 * inv[Sz(c)]) << c;
  }
  // dx = gamma inv (dy - mean(dy) - xhat mean(dy xhat)), in double.
  std::vector<double> sd(Sz(C), 0.0), sdx(Sz(C), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[Sz(r * C + c)] - m[Sz(c)]) * inv[Sz(c)];
      sd[Sz(c)] += dy[Sz(r * C + c)];
      sdx[Sz(c)] += dy[Sz(r * C + c)] * xhat;
    }
  }
  std::vector<float> d = dy, dx(x.size()), dgamma(Sz(C)), dbeta(Sz(C));
  batchnorm_backward(dx.data(), dgamma.data(), dbeta.data(), d.data(), x.data(), nullptr,
                     out.data(), mean.data(), invstd.data(), gamma.data(), N, C, Activation::kNone,
                     false, false);
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(dbeta[Sz(c)], sd[Sz(c)], 1e-5 * (1 + std::fabs(sd[Sz(c)]))) << c;
    EXPECT_NEAR(dgamma[Sz(c)], sdx[Sz(c)], 1e-5 * (1 + std::fabs(sdx[Sz(c)]))) << c;
  }
  double worst = 0, scale = 0;
  for (int64_t r = 0; r < N; ++r) {
    for (int c = 0; c < C; ++c) {
      const size_t i = Sz(r * C + c);
      const double xhat = (x[i] - m[Sz(c)]) * inv[Sz(c)];
      const double want =
          gamma[Sz(c)] * inv[Sz(c)] *
          (dy[i] - sd[Sz(c)] / static_cast<double>(N) - xhat * sdx[Sz(c)] / static_cast<double>(N));
      worst = std::max(worst, std::fabs(dx[i] - want));
      scale = std::max(scale, std::fabs(want));
    }
  }
  EXPECT_LT(worst, 1e-4 * scale);
}

}  // namespace
}  // namespace sweep::trainer::cpu
