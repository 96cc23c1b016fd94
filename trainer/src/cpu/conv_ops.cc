// CPU kernels of convolutional networks (cpu/conv_ops.h). Convolutions are OpenBLAS SGEMMs over
// im2col patches of a few samples at a time (the patches of a chunk stay in L2, and the GEMM's
// rows are many: one per output pixel of every sample in the chunk); the rest are loops over
// NHWC rows, channels innermost, that g++ vectorises. Owned by the trainer; stateless.
#include "cpu/conv_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/act_math.h"

namespace sweep::trainer::cpu {
namespace {

// Floats of one chunk's patches: 2 MiB, what an L2 holds beside the weights.
constexpr int64_t kChunkFloats = int64_t{1} << 19;

// Samples per chunk: as many as fit kChunkFloats of patches, at least one.
int ChunkSamples(const ConvShape& s) {
  const int64_t per_sample = int64_t{s.OH()} * s.OW() * s.patch();
  return static_cast<int>(std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(per_sample, 1), 1,
                                              s.B));
}

// cols [samples x OH x OW, K K C] = the patches of `count` samples of inp.
void Im2col(float* __restrict cols, const float* __restrict inp, int count, const ConvShape& s) {
  const int OH = s.OH(), OW = s.OW(), C = s.C;
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(C);
  for (int b = 0; b < count; ++b) {
    const float* img = inp + int64_t{b} * s.H * s.W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        float* dst = cols + ((int64_t{b} * OH + oh) * OW + ow) * s.patch();
        for (int kh = 0; kh < s.K; ++kh) {
          const int ih = oh * s.stride - s.pad + kh;
          if (ih < 0 || ih >= s.H) {
            std::memset(dst, 0, row_bytes * static_cast<size_t>(s.K));
            dst += int64_t{s.K} * C;
            continue;
          }
          // The window's row: the columns inside the image are one contiguous run.
          const int iw0 = ow * s.stride - s.pad;
          const int lo = std::max(0, -iw0), hi = std::min(s.K, s.W - iw0);
          if (lo > 0) std::memset(dst, 0, row_bytes * static_cast<size_t>(lo));
          if (hi > lo) {
            std::memcpy(dst + int64_t{lo} * C, img + (int64_t{ih} * s.W + iw0 + lo) * C,
                        row_bytes * static_cast<size_t>(hi - lo));
          }
          if (hi < s.K) {
            std::memset(dst + int64_t{std::max(hi, lo)} * C, 0,
                        row_bytes * static_cast<size_t>(s.K - std::max(hi, lo)));
          }
          dst += int64_t{s.K} * C;
        }
      }
    }
  }
}

// dinp[count samples] += the patches' gradients dcols, each back where it was read from.
void Col2imAdd(float* __restrict dinp, const float* __restrict dcols, int count,
               const ConvShape& s) {
  const int OH = s.OH(), OW = s.OW(), C = s.C;
  for (int b = 0; b < count; ++b) {
    float* img = dinp + int64_t{b} * s.H * s.W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        const float* src = dcols + ((int64_t{b} * OH + oh) * OW + ow) * s.patch();
        for (int kh = 0; kh < s.K; ++kh) {
          const int ih = oh * s.stride - s.pad + kh;
          if (ih < 0 || ih >= s.H) {
            src += int64_t{s.K} * C;
            continue;
          }
          const int iw0 = ow * s.stride - s.pad;
          const int lo = std::max(0, -iw0), hi = std::min(s.K, s.W - iw0);
          for (int kw = lo; kw < hi; ++kw) {
            float* __restrict d = img + (int64_t{ih} * s.W + iw0 + kw) * C;
            const float* __restrict g = src + int64_t{kw} * C;
            for (int c = 0; c < C; ++c) d[c] += g[c];
          }
          src += int64_t{s.K} * C;
        }
      }
    }
  }
}

void AddBiasRows(float* __restrict out, const float* __restrict bias, int64_t rows, int C) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict o = out + r * C;
    for (int c = 0; c < C; ++c) o[c] += bias[c];
  }
}

void SumRows(float* __restrict sum, const float* __restrict d, int64_t rows, int C,
             bool accumulate) {
  if (!accumulate) std::memset(sum, 0, sizeof(float) * static_cast<size_t>(C));
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict g = d + r * C;
    for (int c = 0; c < C; ++c) sum[c] += g[c];
  }
}

inline float Act(float x, Activation act) {
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
inline float ActGrad(float x, float y, Activation act) {
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
void ActBackwardT(float* dx, const float* d, const float* __restrict x,
                  const float* __restrict y, int64_t n, bool accumulate) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) dx[i] += d[i] * ActGrad(x[i], y[i], A);
  } else {
    for (int64_t i = 0; i < n; ++i) dx[i] = d[i] * ActGrad(x[i], y[i], A);
  }
}

template <Activation A>
void BatchnormApply(float* __restrict out, float* __restrict pre, const float* __restrict x,
                    const float* __restrict scale, const float* __restrict shift, int64_t N,
                    int C) {
  for (int64_t r = 0; r < N; ++r) {
    const float* __restrict xr = x + r * C;
    float* __restrict o = out + r * C;
    if constexpr (A == Activation::kNone) {
      for (int c = 0; c < C; ++c) o[c] = xr[c] * scale[c] + shift[c];
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
void ScaleShiftAct(float* out, float* pre, const float* x, const float* scale, const float* shift,
                   int64_t N, int C, Activation act) {
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

int64_t conv2d_scratch_floats(const ConvShape& s) {
  if (s.pointwise()) return 0;
  return 2 * int64_t{ChunkSamples(s)} * s.OH() * s.OW() * s.patch();
}

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const ConvShape& s, float* scratch) {
  const int64_t P = s.patch(), pixels = int64_t{s.OH()} * s.OW();
  const int chunk = s.pointwise() ? s.B : ChunkSamples(s);
  for (int b0 = 0; b0 < s.B; b0 += chunk) {
    const int count = std::min(chunk, s.B - b0);
    const float* cols = inp + int64_t{b0} * s.H * s.W * s.C;
    if (!s.pointwise()) {
      Im2col(scratch, cols, count, s);
      cols = scratch;
    }
    const int rows = static_cast<int>(count * pixels);
    float* o = out + int64_t{b0} * pixels * s.OC;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, s.OC, static_cast<int>(P), 1.0f,
                cols, static_cast<int>(P), weight, static_cast<int>(P), 0.0f, o, s.OC);
  }
  if (bias != nullptr) AddBiasRows(out, bias, int64_t{s.B} * pixels, s.OC);
}

void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, const ConvShape& s, float* scratch,
                     bool accumulate, bool accumulate_dinp) {
  const int64_t P = s.patch(), pixels = int64_t{s.OH()} * s.OW();
  const int64_t in_floats = int64_t{s.H} * s.W * s.C;
  if (dbias != nullptr) SumRows(dbias, dout, int64_t{s.B} * pixels, s.OC, accumulate);
  const int chunk = s.pointwise() ? s.B : ChunkSamples(s);
  float* cols = scratch;
  float* dcols = s.pointwise() ? nullptr : scratch + int64_t{chunk} * pixels * P;
  for (int b0 = 0; b0 < s.B; b0 += chunk) {
    const int count = std::min(chunk, s.B - b0);
    const int rows = static_cast<int>(count * pixels);
    const float* d = dout + int64_t{b0} * pixels * s.OC;
    const float* x = inp + int64_t{b0} * in_floats;
    if (!s.pointwise()) {
      Im2col(cols, x, count, s);
      x = cols;
    }
    const float beta = accumulate || b0 > 0 ? 1.0f : 0.0f;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.OC, static_cast<int>(P), rows, 1.0f, d,
                s.OC, x, static_cast<int>(P), beta, dweight, static_cast<int>(P));
    if (dinp == nullptr) continue;
    float* di = dinp + int64_t{b0} * in_floats;
    if (s.pointwise()) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, s.C, s.OC, 1.0f, d, s.OC,
                  weight, s.C, accumulate_dinp ? 1.0f : 0.0f, di, s.C);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, static_cast<int>(P), s.OC, 1.0f,
                d, s.OC, weight, static_cast<int>(P), 0.0f, dcols, static_cast<int>(P));
    if (!accumulate_dinp) {
      std::memset(di, 0, sizeof(float) * static_cast<size_t>(count * in_floats));
    }
    Col2imAdd(di, dcols, count, s);
  }
}

void batchnorm_forward(float* out, float* pre, float* mean, float* invstd, const float* x,
                       const float* gamma, const float* beta, float* running_mean,
                       float* running_var, int64_t N, int C, float momentum, float eps,
                       Activation act) {
  // Two passes in double: the variance of tens of thousands of values, to PyTorch's figures.
  constexpr int kMaxC = 4096;
  double sum[kMaxC], sq[kMaxC];
  for (int c0 = 0; c0 < C; c0 += kMaxC) {
    const int cn = std::min(kMaxC, C - c0);
    std::fill_n(sum, cn, 0.0);
    std::fill_n(sq, cn, 0.0);
    for (int64_t r = 0; r < N; ++r) {
      const float* __restrict xr = x + r * C + c0;
      for (int c = 0; c < cn; ++c) sum[c] += xr[c];
    }
    for (int c = 0; c < cn; ++c) mean[c0 + c] = static_cast<float>(sum[c] / static_cast<double>(N));
    for (int64_t r = 0; r < N; ++r) {
      const float* __restrict xr = x + r * C + c0;
      const float* __restrict m = mean + c0;
      for (int c = 0; c < cn; ++c) {
        const double dv = static_cast<double>(xr[c]) - m[c];
        sq[c] += dv * dv;
      }
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
        ScaleShiftAct(out + r * C + c0, pre == nullptr ? nullptr : pre + r * C + c0,
                      x + r * C + c0, scale, shift, 1, cn, act);
      }
    }
  }
}

void batchnorm_eval(float* out, const float* x, const float* gamma, const float* beta,
                    const float* running_mean, const float* running_var, int64_t N, int C,
                    float eps, Activation act) {
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int c = 0; c < C; ++c) {
    const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps));
    scale[static_cast<size_t>(c)] = gamma[c] * inv;
    shift[static_cast<size_t>(c)] = beta[c] - running_mean[c] * gamma[c] * inv;
  }
  // Evaluation keeps nothing for backward: the value before the activation is not needed.
  if (act == Activation::kNone) {
    ScaleShiftAct(out, nullptr, x, scale.data(), shift.data(), N, C, act);
    return;
  }
  for (int64_t r = 0; r < N; ++r) {
    const float* __restrict xr = x + r * C;
    float* __restrict o = out + r * C;
    for (int c = 0; c < C; ++c) {
      o[c] = Act(xr[c] * scale[static_cast<size_t>(c)] + shift[static_cast<size_t>(c)], act);
    }
  }
}

void batchnorm_backward(float* dx, float* dgamma, float* dbeta, float* d, const float* x,
                        const float* pre, const float* out, const float* mean,
                        const float* invstd, const float* gamma, int64_t N, int C, Activation act,
                        bool accumulate, bool accumulate_dx) {
  if (act != Activation::kNone) act_backward(d, d, pre, out, N * C, act, false);
  // dbeta = sum d; dgamma = sum d xhat; dx = gamma invstd / N (N d - dbeta - xhat dgamma).
  constexpr int kMaxC = 4096;
  double sd[kMaxC], sdx[kMaxC];
  for (int c0 = 0; c0 < C; c0 += kMaxC) {
    const int cn = std::min(kMaxC, C - c0);
    std::fill_n(sd, cn, 0.0);
    std::fill_n(sdx, cn, 0.0);
    for (int64_t r = 0; r < N; ++r) {
      const float* __restrict g = d + r * C + c0;
      const float* __restrict xr = x + r * C + c0;
      const float* __restrict m = mean + c0;
      for (int c = 0; c < cn; ++c) {
        sd[c] += g[c];
        sdx[c] += static_cast<double>(g[c]) * (xr[c] - m[c]);
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

void maxpool_forward(float* out, int32_t* argmax, const float* inp, int B, int H, int W, int C,
                     int K, int stride) {
  const int OH = (H - K) / stride + 1, OW = (W - K) / stride + 1;
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

void avgpool_backward(float* dinp, const float* dout, int B, int H, int W, int C, int K,
                      int stride, bool accumulate) {
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
