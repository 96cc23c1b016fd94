// The CPU kernels of cpu/conv_ops.h other than convolution (conv2d.cc): batch norm, pooling,
// activations, the residual add: loops over NHWC rows, channels innermost, that g++ vectorises.
#include "cpu/conv_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/act_math.h"

namespace sweep::trainer::cpu {
namespace {

// The elementwise and per-channel loops at AVX2's width where the CPU has it (the build targets
// generic x86-64, i.e. SSE2): GCC clones the function and picks one at load time. No FMA, so
// the results are the same bits either way. Not under ThreadSanitizer: it instruments the
// clones' resolver, which the loader runs before TSan's runtime starts.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define SWEEP_CLONES __attribute__((target_clones("avx2", "default")))
#define SWEEP_INLINE __attribute__((always_inline)) inline
#else
#define SWEEP_CLONES
#define SWEEP_INLINE inline
#endif

// Rows per float partial sum in batch norm's statistics (then added up in double).
constexpr int64_t kBlockRows = 64;

SWEEP_INLINE float Act(float x, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return x > 0.0f ? x : 0.0f;
    case Activation::kTanh:
      return Tanh(x);
    case Activation::kGelu:
      return Gelu(x);
    case Activation::kNone:
      break;
  }
  return x;
}

// d/dx of act at x whose value is y.
SWEEP_INLINE float ActGrad(float x, float y, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return y > 0.0f ? 1.0f : 0.0f;
    case Activation::kTanh:
      return 1.0f - y * y;
    case Activation::kGelu:
      return GeluGrad(x);
    case Activation::kNone:
      break;
  }
  return 1.0f;
}

template <Activation A>
void ActForwardT(float* __restrict out, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Act(x[i], A);
}

// dx may be d (an in-place backward), so neither is __restrict.
template <Activation A>
void ActBackwardT(float* dx, const float* d, const float* __restrict x, const float* __restrict y,
                  int64_t n, bool accumulate) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) dx[i] += d[i] * ActGrad(x[i], y[i], A);
  } else {
    for (int64_t i = 0; i < n; ++i) dx[i] = d[i] * ActGrad(x[i], y[i], A);
  }
}

// kPre: keep the value before the activation in pre (training; evaluation has no backward).
template <Activation A, bool kPre = true>
SWEEP_INLINE void BatchnormApply(float* __restrict out, float* __restrict pre,
                                 const float* __restrict x, const float* __restrict scale,
                                 const float* __restrict shift, int64_t N, int C) {
  for (int64_t r = 0; r < N; ++r) {
    const float* __restrict xr = x + r * C;
    float* __restrict o = out + r * C;
    if constexpr (A == Activation::kNone || !kPre) {
      (void)pre;
      for (int c = 0; c < C; ++c) o[c] = Act(xr[c] * scale[c] + shift[c], A);
    } else {
      float* __restrict p = pre + r * C;
      for (int c = 0; c < C; ++c) {
        const float v = xr[c] * scale[c] + shift[c];
        p[c] = v;
        o[c] = Act(v, A);
      }
    }
  }
}

// out = x * scale + shift per channel, then the activation (pre keeps the value before it).
SWEEP_INLINE void ScaleShiftAct(float* out, float* pre, const float* x, const float* scale,
                                const float* shift, int64_t N, int C, Activation act) {
  switch (act) {
    case Activation::kNone:
      return BatchnormApply<Activation::kNone>(out, pre, x, scale, shift, N, C);
    case Activation::kRelu:
      return BatchnormApply<Activation::kRelu>(out, pre, x, scale, shift, N, C);
    case Activation::kTanh:
      return BatchnormApply<Activation::kTanh>(out, pre, x, scale, shift, N, C);
    case Activation::kGelu:
      return BatchnormApply<Activation::kGelu>(out, pre, x, scale, shift, N, C);
  }
}

}  // namespace

SWEEP_CLONES
void batchnorm_forward(float* out, float* pre, float* mean, float* invstd, const float* x,
                       const float* gamma, const float* beta, float* running_mean,
                       float* running_var, int64_t N, int C, float momentum, float eps,
                       Activation act) {
  // One pass over x: sums of x - k and (x - k)^2 with k = the first row (near the mean, so
  // the variance does not cancel), in float over blocks of kBlockRows rows, added up in double.
  // Within ~1e-6 of two passes in double (tests/trainer/conv_ops_test.cc), one read of x fewer.
  constexpr int kMaxC = 4096;
  double sum[kMaxC], sq[kMaxC];
  float part[kMaxC], part_sq[kMaxC];
  for (int c0 = 0; c0 < C; c0 += kMaxC) {
    const int cn = std::min(kMaxC, C - c0);
    const float* __restrict k = x + c0;
    std::fill_n(sum, cn, 0.0);
    std::fill_n(sq, cn, 0.0);
    for (int64_t r0 = 0; r0 < N; r0 += kBlockRows) {
      std::fill_n(part, cn, 0.0f);
      std::fill_n(part_sq, cn, 0.0f);
      for (int64_t r = r0; r < std::min(N, r0 + kBlockRows); ++r) {
        const float* __restrict xr = x + r * C + c0;
        for (int c = 0; c < cn; ++c) {
          const float dv = xr[c] - k[c];
          part[c] += dv;
          part_sq[c] += dv * dv;
        }
      }
      for (int c = 0; c < cn; ++c) {
        sum[c] += part[c];
        sq[c] += part_sq[c];
      }
    }
    for (int c = 0; c < cn; ++c) {
      const double offset = sum[c] / static_cast<double>(N);  // mean - k
      mean[c0 + c] = static_cast<float>(k[c] + offset);
      sq[c] = std::max(0.0, sq[c] - offset * sum[c]);  // the sum of squared deviations
    }
    for (int c = 0; c < cn; ++c) {
      const double var = sq[c] / static_cast<double>(N);
      invstd[c0 + c] = static_cast<float>(1.0 / std::sqrt(var + eps));
      if (running_mean != nullptr) {
        const double unbiased = N > 1 ? sq[c] / static_cast<double>(N - 1) : var;
        running_mean[c0 + c] = (1.0f - momentum) * running_mean[c0 + c] + momentum * mean[c0 + c];
        running_var[c0 + c] =
            (1.0f - momentum) * running_var[c0 + c] + momentum * static_cast<float>(unbiased);
      }
    }
  }
  // y = gamma (x - mean) invstd + beta = x scale + shift.
  float scale[kMaxC], shift[kMaxC];
  for (int c0 = 0; c0 < C; c0 += kMaxC) {
    const int cn = std::min(kMaxC, C - c0);
    for (int c = 0; c < cn; ++c) {
      scale[c] = gamma[c0 + c] * invstd[c0 + c];
      shift[c] = beta[c0 + c] - mean[c0 + c] * scale[c];
    }
    if (cn == C) {
      ScaleShiftAct(out, pre, x, scale, shift, N, C, act);
    } else {
      for (int64_t r = 0; r < N; ++r) {
        ScaleShiftAct(out + r * C + c0, pre == nullptr ? nullptr : pre + r * C + c0, x + r * C + c0,
                      scale, shift, 1, cn, act);
      }
    }
  }
}

SWEEP_CLONES
void batchnorm_eval(float* out, const float* x, const float* gamma, const float* beta,
                    const float* running_mean, const float* running_var, int64_t N, int C,
                    float eps, Activation act) {
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int c = 0; c < C; ++c) {
    const float inv =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps));
    scale[static_cast<size_t>(c)] = gamma[c] * inv;
    shift[static_cast<size_t>(c)] = beta[c] - running_mean[c] * gamma[c] * inv;
  }
  // Evaluation keeps nothing for backward: the value before the activation is not needed.
  if (act == Activation::kNone) {
    ScaleShiftAct(out, nullptr, x, scale.data(), shift.data(), N, C, act);
    return;
  }
  switch (act) {
    case Activation::kNone:
      break;
    case Activation::kRelu:
      return BatchnormApply<Activation::kRelu, false>(out, nullptr, x, scale.data(), shift.data(),
                                                      N, C);
    case Activation::kTanh:
      return BatchnormApply<Activation::kTanh, false>(out, nullptr, x, scale.data(), shift.data(),
                                                      N, C);
    case Activation::kGelu:
      return BatchnormApply<Activation::kGelu, false>(out, nullptr, x, scale.data(), shift.data(),
                                                      N, C);
  }
}

SWEEP_CLONES
void batchnorm_backward(float* dx, float* dgamma, float* dbeta, float* d, const float* x,
                        const float* pre, const float* out, const float* mean, const float* invstd,
                        const float* gamma, int64_t N, int C, Activation act, bool accumulate,
                        bool accumulate_dx) {
  // ReLU's gradient is applied in the pass that sums (one pass over d fewer); the others first.
  const bool relu = act == Activation::kRelu;
  if (act != Activation::kNone && !relu) act_backward(d, d, pre, out, N * C, act, false);
  // dbeta = sum d; dgamma = sum d xhat; dx = gamma invstd / N (N d - dbeta - xhat dgamma).
  constexpr int kMaxC = 4096;
  double sd[kMaxC], sdx[kMaxC];
  float psd[kMaxC], psdx[kMaxC];  // float sums of kBlockRows rows, as in forward
  for (int c0 = 0; c0 < C; c0 += kMaxC) {
    const int cn = std::min(kMaxC, C - c0);
    std::fill_n(sd, cn, 0.0);
    std::fill_n(sdx, cn, 0.0);
    for (int64_t r0 = 0; r0 < N; r0 += kBlockRows) {
      std::fill_n(psd, cn, 0.0f);
      std::fill_n(psdx, cn, 0.0f);
      for (int64_t r = r0; r < std::min(N, r0 + kBlockRows); ++r) {
        float* __restrict g = d + r * C + c0;
        const float* __restrict xr = x + r * C + c0;
        const float* __restrict m = mean + c0;
        if (relu) {
          const float* __restrict y = out + r * C + c0;
          for (int c = 0; c < cn; ++c) g[c] *= y[c] > 0.0f ? 1.0f : 0.0f;  // as act_backward
        }
        for (int c = 0; c < cn; ++c) {
          psd[c] += g[c];
          psdx[c] += g[c] * (xr[c] - m[c]);
        }
      }
      for (int c = 0; c < cn; ++c) {
        sd[c] += psd[c];
        sdx[c] += psdx[c];
      }
    }
    float a[kMaxC], b[kMaxC], k[kMaxC];
    for (int c = 0; c < cn; ++c) {
      const float inv = invstd[c0 + c];
      const float db = static_cast<float>(sd[c]);
      const float dg = static_cast<float>(sdx[c]) * inv;
      dbeta[c0 + c] = accumulate ? dbeta[c0 + c] + db : db;
      dgamma[c0 + c] = accumulate ? dgamma[c0 + c] + dg : dg;
      // dx = k (d - db / N - (x - mean) inv^2 sdx / N), k = gamma inv.
      k[c] = gamma[c0 + c] * inv;
      a[c] = db / static_cast<float>(N);
      b[c] = static_cast<float>(sdx[c] / static_cast<double>(N)) * inv * inv;
    }
    if (dx == nullptr) continue;  // the model's input: no gradient wanted
    for (int64_t r = 0; r < N; ++r) {
      const float* __restrict g = d + r * C + c0;
      const float* __restrict xr = x + r * C + c0;
      const float* __restrict m = mean + c0;
      float* __restrict o = dx + r * C + c0;
      if (accumulate_dx) {
        for (int c = 0; c < cn; ++c) o[c] += k[c] * (g[c] - a[c] - (xr[c] - m[c]) * b[c]);
      } else {
        for (int c = 0; c < cn; ++c) o[c] = k[c] * (g[c] - a[c] - (xr[c] - m[c]) * b[c]);
      }
    }
  }
}

SWEEP_CLONES
void maxpool_forward(float* out, int32_t* argmax, const float* inp, int B, int H, int W, int C,
                     int K, int stride) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
  if (K == 2 && stride == 2) {
    // The CNNs' pool: the window's four pixels in one loop over the channels, in the order of
    // the general loop below (ties keep the first; NaN propagates).
    for (int b = 0; b < B; ++b) {
      const float* img = inp + int64_t{b} * H * W * C;
      for (int oh = 0; oh < OH; ++oh) {
        for (int ow = 0; ow < OW; ++ow) {
          const int64_t at = ((int64_t{b} * OH + oh) * OW + ow) * C;
          float* __restrict o = out + at;
          int32_t* __restrict am = argmax + at;
          const int32_t i0 = (2 * oh * W + 2 * ow) * C, i1 = i0 + C, i2 = i0 + W * C, i3 = i2 + C;
          const float* __restrict x0 = img + i0;
          const float* __restrict x1 = img + i1;
          const float* __restrict x2 = img + i2;
          const float* __restrict x3 = img + i3;
          for (int c = 0; c < C; ++c) {
            float m = x0[c];
            int32_t a = i0 + c;
            const bool t1 = x1[c] > m || x1[c] != x1[c];
            m = t1 ? x1[c] : m;
            a = t1 ? i1 + c : a;
            const bool t2 = x2[c] > m || x2[c] != x2[c];
            m = t2 ? x2[c] : m;
            a = t2 ? i2 + c : a;
            const bool t3 = x3[c] > m || x3[c] != x3[c];
            o[c] = t3 ? x3[c] : m;
            am[c] = t3 ? i3 + c : a;
          }
        }
      }
    }
    return;
  }
  for (int b = 0; b < B; ++b) {
    const float* img = inp + int64_t{b} * H * W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        const int64_t at = ((int64_t{b} * OH + oh) * OW + ow) * C;
        float* __restrict o = out + at;
        int32_t* __restrict am = argmax + at;
        const int32_t first = (oh * stride * W + ow * stride) * C;
        for (int c = 0; c < C; ++c) {
          o[c] = img[first + c];
          am[c] = first + c;
        }
        for (int kh = 0; kh < K; ++kh) {
          for (int kw = 0; kw < K; ++kw) {
            if (kh == 0 && kw == 0) continue;
            const int32_t base = ((oh * stride + kh) * W + ow * stride + kw) * C;
            const float* __restrict x = img + base;
            // Strictly greater: ties keep the first, as PyTorch's (NaN propagates: x != x).
            for (int c = 0; c < C; ++c) {
              const bool take = x[c] > o[c] || x[c] != x[c];
              o[c] = take ? x[c] : o[c];
              am[c] = take ? base + c : am[c];
            }
          }
        }
      }
    }
  }
}

SWEEP_CLONES
void maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, int B, int H, int W,
                      int C, int K, int stride, bool accumulate) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
  const int64_t in_floats = int64_t{H} * W * C, out_floats = int64_t{OH} * OW * C;
  if (!accumulate) std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(B * in_floats));
  for (int b = 0; b < B; ++b) {
    float* di = dinp + b * in_floats;
    const float* d = dout + b * out_floats;
    const int32_t* am = argmax + b * out_floats;
    for (int64_t i = 0; i < out_floats; ++i) di[am[i]] += d[i];
  }
}

void avgpool_forward(float* out, const float* inp, int B, int H, int W, int C, int K, int stride) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
  const float inv = 1.0f / static_cast<float>(K * K);
  for (int b = 0; b < B; ++b) {
    const float* img = inp + int64_t{b} * H * W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        float* __restrict o = out + ((int64_t{b} * OH + oh) * OW + ow) * C;
        std::fill_n(o, C, 0.0f);
        for (int kh = 0; kh < K; ++kh) {
          for (int kw = 0; kw < K; ++kw) {
            const float* __restrict x = img + ((oh * stride + kh) * W + ow * stride + kw) * C;
            for (int c = 0; c < C; ++c) o[c] += x[c];
          }
        }
        for (int c = 0; c < C; ++c) o[c] *= inv;
      }
    }
  }
}

void avgpool_backward(float* dinp, const float* dout, int B, int H, int W, int C, int K, int stride,
                      bool accumulate) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
  const float inv = 1.0f / static_cast<float>(K * K);
  if (!accumulate) {
    std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(int64_t{B} * H * W * C));
  }
  for (int b = 0; b < B; ++b) {
    float* img = dinp + int64_t{b} * H * W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        const float* __restrict d = dout + ((int64_t{b} * OH + oh) * OW + ow) * C;
        for (int kh = 0; kh < K; ++kh) {
          for (int kw = 0; kw < K; ++kw) {
            float* __restrict x = img + ((oh * stride + kh) * W + ow * stride + kw) * C;
            for (int c = 0; c < C; ++c) x[c] += d[c] * inv;
          }
        }
      }
    }
  }
}

void global_avgpool_forward(float* out, const float* inp, int B, int HW, int C) {
  const float inv = 1.0f / static_cast<float>(HW);
  for (int b = 0; b < B; ++b) {
    float* __restrict o = out + int64_t{b} * C;
    std::fill_n(o, C, 0.0f);
    for (int p = 0; p < HW; ++p) {
      const float* __restrict x = inp + (int64_t{b} * HW + p) * C;
      for (int c = 0; c < C; ++c) o[c] += x[c];
    }
    for (int c = 0; c < C; ++c) o[c] *= inv;
  }
}

void global_avgpool_backward(float* dinp, const float* dout, int B, int HW, int C,
                             bool accumulate) {
  const float inv = 1.0f / static_cast<float>(HW);
  for (int b = 0; b < B; ++b) {
    const float* __restrict d = dout + int64_t{b} * C;
    for (int p = 0; p < HW; ++p) {
      float* __restrict x = dinp + (int64_t{b} * HW + p) * C;
      if (accumulate) {
        for (int c = 0; c < C; ++c) x[c] += d[c] * inv;
      } else {
        for (int c = 0; c < C; ++c) x[c] = d[c] * inv;
      }
    }
  }
}

void act_forward(float* out, const float* x, int64_t n, Activation act) {
  switch (act) {
    case Activation::kNone:
      if (out != x) std::memcpy(out, x, sizeof(float) * static_cast<size_t>(n));
      return;
    case Activation::kRelu:
      return ActForwardT<Activation::kRelu>(out, x, n);
    case Activation::kTanh:
      return ActForwardT<Activation::kTanh>(out, x, n);
    case Activation::kGelu:
      return ActForwardT<Activation::kGelu>(out, x, n);
  }
}

void act_backward(float* dx, const float* d, const float* x, const float* out, int64_t n,
                  Activation act, bool accumulate) {
  switch (act) {
    case Activation::kNone:
      return copy_or_add(dx, d, n, accumulate);
    case Activation::kRelu:
      return ActBackwardT<Activation::kRelu>(dx, d, x, out, n, accumulate);
    case Activation::kTanh:
      return ActBackwardT<Activation::kTanh>(dx, d, x, out, n, accumulate);
    case Activation::kGelu:
      return ActBackwardT<Activation::kGelu>(dx, d, x, out, n, accumulate);
  }
}

void add_forward(float* __restrict out, const float* __restrict a, const float* __restrict b,
                 int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void copy_or_add(float* __restrict dst, const float* __restrict src, int64_t n, bool accumulate) {
  if (!accumulate) {
    if (dst != src) std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace sweep::trainer::cpu