// Convolution on the CPU (conv2d_* of cpu/conv_ops.h): per shape and pass, the direct AVX2
// kernels of conv2d_direct.cc or OpenBLAS SGEMMs over im2col patches of a few samples at a time.
#include "cpu/conv_ops.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "cpu/conv2d_direct.h"

namespace sweep::trainer::cpu {
namespace {

// The GEMM path takes the samples in chunks of kChunkFloats patches, 2 MiB, what an L2 holds
// beside the weights; the GEMM's rows are still many (one per output pixel of every sample).
constexpr int64_t kChunkFloats = int64_t{1} << 19;

// Samples per chunk: as many as fit kChunkFloats of patches, at least one.
int ChunkSamples(const ConvShape& s) {
  const int64_t per_sample = int64_t{s.OH()} * s.OW() * s.patch();
  return static_cast<int>(
      std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(per_sample, 1), 1, s.B));
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

// set_conv_impl's switch: the only state of the convolutions.
std::atomic<int> g_conv_impl{static_cast<int>(ConvImpl::kAuto)};

bool UseDirect() {
  return g_conv_impl.load(std::memory_order_relaxed) == static_cast<int>(ConvImpl::kAuto) &&
         HaveAvx2();
}

}  // namespace

int64_t conv2d_scratch_floats(const ConvShape& s) {
  const int64_t gemm =
      s.pointwise() ? 0 : 2 * int64_t{ChunkSamples(s)} * s.OH() * s.OW() * s.patch();
  return std::max(gemm, DirectScratchFloats(s));
}

void set_conv_impl(ConvImpl impl) {
  g_conv_impl.store(static_cast<int>(impl), std::memory_order_relaxed);
}

ConvImpl conv_impl() { return static_cast<ConvImpl>(g_conv_impl.load(std::memory_order_relaxed)); }

bool conv2d_direct_forward(const ConvShape& s) {
  return UseDirect() && !s.pointwise() && s.OC % kLanes == 0;
}

bool conv2d_direct_backward_data(const ConvShape& s) {
  return UseDirect() && !s.pointwise() && s.stride == 1 && s.pad <= s.K - 1 && s.C % kLanes == 0;
}

bool conv2d_direct_backward_weights(const ConvShape& s) {
  return UseDirect() && !s.pointwise() && s.OC % kLanes == 0;
}

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const ConvShape& s, float* scratch) {
  const int64_t P = s.patch(), pixels = int64_t{s.OH()} * s.OW();
  if (conv2d_direct_forward(s)) {
    float* wp = scratch;
    PackForward(wp, weight, s);
    DirectConv(out, inp, wp, s.B, s.H, s.W, s.C, s.OC, s.K, s.stride, s.pad, scratch + s.OC * P,
               false);
    if (bias != nullptr) AddBiasRows(out, bias, int64_t{s.B} * pixels, s.OC);
    return;
  }
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

void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const ConvShape& s, float* scratch, bool accumulate,
                     bool accumulate_dinp) {
  const int64_t P = s.patch(), pixels = int64_t{s.OH()} * s.OW();
  const int64_t in_floats = int64_t{s.H} * s.W * s.C;
  if (dbias != nullptr) SumRows(dbias, dout, int64_t{s.B} * pixels, s.OC, accumulate);
  const bool direct_dw = conv2d_direct_backward_weights(s);
  const bool direct_dx = dinp != nullptr && conv2d_direct_backward_data(s);
  if (direct_dw) DirectDweight(dweight, dout, inp, s, scratch, accumulate);
  if (direct_dx) {
    float* wp = scratch;
    PackBackwardData(wp, weight, s);
    DirectConv(dinp, dout, wp, s.B, s.OH(), s.OW(), s.OC, s.C, s.K, 1, s.K - 1 - s.pad,
               scratch + s.OC * P, accumulate_dinp);
  }
  if (direct_dw && (direct_dx || dinp == nullptr)) return;
  const int chunk = s.pointwise() ? s.B : ChunkSamples(s);
  float* cols = scratch;
  float* dcols = s.pointwise() ? nullptr : scratch + int64_t{chunk} * pixels * P;
  for (int b0 = 0; b0 < s.B; b0 += chunk) {
    const int count = std::min(chunk, s.B - b0);
    const int rows = static_cast<int>(count * pixels);
    const float* d = dout + int64_t{b0} * pixels * s.OC;
    const float* x = inp + int64_t{b0} * in_floats;
    if (!s.pointwise() && !direct_dw) {  // the input-gradient GEMM does not read the patches
      Im2col(cols, x, count, s);
      x = cols;
    }
    const float beta = accumulate || b0 > 0 ? 1.0f : 0.0f;
    if (!direct_dw) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.OC, static_cast<int>(P), rows, 1.0f, d,
                  s.OC, x, static_cast<int>(P), beta, dweight, static_cast<int>(P));
    }
    if (dinp == nullptr || direct_dx) continue;
    float* di = dinp + int64_t{b0} * in_floats;
    if (s.pointwise()) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, s.C, s.OC, 1.0f, d, s.OC, weight,
                  s.C, accumulate_dinp ? 1.0f : 0.0f, di, s.C);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, static_cast<int>(P), s.OC, 1.0f, d,
                s.OC, weight, static_cast<int>(P), 0.0f, dcols, static_cast<int>(P));
    if (!accumulate_dinp) {
      std::memset(di, 0, sizeof(float) * static_cast<size_t>(count * in_floats));
    }
    Col2imAdd(di, dcols, count, s);
  }
}

}  // namespace sweep::trainer::cpu
