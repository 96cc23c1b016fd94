// CPU kernels: OpenBLAS SGEMM for the matmuls, plain loops over contiguous __restrict arrays for
// the rest so g++ -O3 vectorises them. Owned by the trainer. Stateless and allocation-free;
// safe to call from several threads on disjoint outputs (GEMM threading is OpenBLAS's own).
#include "cpu/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/act_math.h"
#include "rng.h"
#include "step_math.h"

namespace sweep::trainer::cpu {
namespace {}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, int B, int C, int OC) {
  // The transpose is sgemm's job (CblasTrans), not a copy of ours.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C, weight, C, 0.0f, out,
              OC);
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC, bool accumulate,
                     bool accumulate_dinp) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, dout, OC, inp, C,
              accumulate ? 1.0f : 0.0f, dweight, C);
  if (dinp != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout, OC, weight, C,
                accumulate_dinp ? 1.0f : 0.0f, dinp, C);
  }
}

namespace {

// Row kernels: __restrict on parameters (which GCC honours, unlike on locals) lets each loop
// vectorise without a runtime overlap check.
void AddBias(float* __restrict p, const float* __restrict bias, int C) {
  for (int c = 0; c < C; ++c) p[c] += bias[c];
}

void BiasRelu(float* __restrict o, float* __restrict p, const float* __restrict bias, int C) {
  for (int c = 0; c < C; ++c) {
    const float x = p[c] + bias[c];
    p[c] = x;
    o[c] = x > 0.0f ? x : 0.0f;
  }
}

void BiasTanh(float* __restrict o, float* __restrict p, const float* __restrict bias, int C) {
  for (int c = 0; c < C; ++c) {
    const float x = p[c] + bias[c];
    p[c] = x;
    o[c] = Tanh(x);
  }
}

void BiasGelu(float* __restrict o, float* __restrict p, const float* __restrict bias, int C) {
  for (int c = 0; c < C; ++c) {
    const float x = p[c] + bias[c];
    p[c] = x;
    const float t = Tanh(kGeluScale * (x + kGeluCubic * x * x * x));
    o[c] = 0.5f * x * (1.0f + t);
  }
}

// The relu test reads the output, not pre: the same answer, from the array still hot in cache.
void ReluBackward(float* __restrict g, float* __restrict db, const float* __restrict o, int C) {
  for (int c = 0; c < C; ++c) {
    const float gc = o[c] > 0.0f ? g[c] : 0.0f;
    g[c] = gc;
    db[c] += gc;
  }
}

void TanhBackward(float* __restrict g, float* __restrict db, const float* __restrict o, int C) {
  for (int c = 0; c < C; ++c) {
    const float gc = g[c] * (1.0f - o[c] * o[c]);
    g[c] = gc;
    db[c] += gc;
  }
}

void GeluBackward(float* __restrict g, float* __restrict db, const float* __restrict p, int C) {
  for (int c = 0; c < C; ++c) {
    const float x = p[c];
    const float t = Tanh(kGeluScale * (x + kGeluCubic * x * x * x));
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const float gc = g[c] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    g[c] = gc;
    db[c] += gc;
  }
}

void SumInto(float* __restrict db, const float* __restrict g, int C) {
  for (int c = 0; c < C; ++c) db[c] += g[c];
}

void SgdRange(float* __restrict p, float* __restrict v, const float* __restrict g, int64_t n,
              float lr, float momentum, float weight_decay) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + weight_decay * p[i];
    const float vi = momentum * v[i] + gi;
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

void NesterovRange(float* __restrict p, float* __restrict v, const float* __restrict g, int64_t n,
                   float lr, float momentum, float weight_decay) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + weight_decay * p[i];
    const float vi = momentum * v[i] + gi;
    v[i] = vi;
    p[i] -= lr * (gi + momentum * vi);
  }
}

void AdamwRange(float* __restrict p, float* __restrict m, float* __restrict v,
                const float* __restrict g, int64_t n, float decay, float beta1, float beta2,
                float step_size, float inv_sqrt_bc2, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

void DropoutRow(float* __restrict o, float* __restrict mask, const float* __restrict x, int C,
                uint32_t base, uint32_t key_lo, uint32_t key_hi, uint32_t threshold, float scale) {
  for (int c = 0; c < C; ++c) {
    const float f =
        DropoutFactor(base + static_cast<uint32_t>(c), key_lo, key_hi, threshold, scale);
    mask[c] = f;
    o[c] = x[c] * f;
  }
}

void MulInto(float* __restrict d, const float* __restrict m, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] *= m[i];
}

void Add2(float* __restrict out, const float* __restrict a, const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void AddInto(float* __restrict out, const float* __restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += a[i];
}

}  // namespace

void bias_act_forward(float* out, float* pre, const float* bias, int B, int C, Activation act) {
  for (int b = 0; b < B; ++b) {
    const int64_t row = static_cast<int64_t>(b) * C;
    switch (act) {
      case Activation::kNone:
        AddBias(pre + row, bias, C);
        break;
      case Activation::kRelu:
        BiasRelu(out + row, pre + row, bias, C);
        break;
      case Activation::kTanh:
        BiasTanh(out + row, pre + row, bias, C);
        break;
      case Activation::kGelu:
        BiasGelu(out + row, pre + row, bias, C);
        break;
    }
  }
  if (act == Activation::kNone && out != pre) {
    std::memcpy(out, pre, sizeof(float) * static_cast<size_t>(B) * C);
  }
}

void bias_act_backward(float* d, float* dbias, const float* pre, const float* out, int B, int C,
                       Activation act, bool accumulate) {
  if (!accumulate) std::memset(dbias, 0, sizeof(float) * static_cast<size_t>(C));
  for (int b = 0; b < B; ++b) {
    const int64_t row = static_cast<int64_t>(b) * C;
    switch (act) {
      case Activation::kNone:
        SumInto(dbias, d + row, C);
        break;
      case Activation::kRelu:
        ReluBackward(d + row, dbias, out + row, C);
        break;
      case Activation::kTanh:
        TanhBackward(d + row, dbias, out + row, C);
        break;
      case Activation::kGelu:
        GeluBackward(d + row, dbias, pre + row, C);
        break;
    }
  }
}

void softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                   const int32_t* labels, int B, int V, float dloss_scale,
                                   float label_smoothing) {
  for (int b = 0; b < B; ++b) {
    const float* __restrict row = logits + static_cast<int64_t>(b) * V;
    float max = row[0];
    for (int v = 1; v < V; ++v) max = row[v] > max ? row[v] : max;
    float sum = 0.0f;
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - max);
    const float lse = max + std::log(sum);
    const int y = labels[b];
    if (y < 0 || y >= V) {  // as the CUDA kernel: never read outside the row; NaN loss and grads
      losses[b] = std::numeric_limits<float>::quiet_NaN();
      if (dlogits != nullptr) {
        std::fill_n(dlogits + static_cast<int64_t>(b) * V, V,
                    std::numeric_limits<float>::quiet_NaN());
      }
      continue;
    }
    if (label_smoothing == 0.0f) {
      losses[b] = lse - row[y];
      if (dlogits != nullptr) {
        float* __restrict g = dlogits + static_cast<int64_t>(b) * V;
        for (int v = 0; v < V; ++v) g[v] = std::exp(row[v] - lse) * dloss_scale;
        g[y] -= dloss_scale;
      }
      continue;
    }
    // Against (1 - e) onehot + e / V: (1 - e) (lse - row[y]) + e mean_v (lse - row[v]).
    const float e = label_smoothing, spread = e / static_cast<float>(V);
    float sum_logits = 0.0f;
    for (int v = 0; v < V; ++v) sum_logits += row[v];
    losses[b] = (1.0f - e) * (lse - row[y]) + e * (lse - sum_logits / static_cast<float>(V));
    if (dlogits != nullptr) {
      float* __restrict g = dlogits + static_cast<int64_t>(b) * V;
      for (int v = 0; v < V; ++v) g[v] = (std::exp(row[v] - lse) - spread) * dloss_scale;
      g[y] -= (1.0f - e) * dloss_scale;
    }
  }
}

void sgd_update(float* params, float* velocity, const float* grads, int64_t n, float lr,
                float momentum, float weight_decay, bool nesterov) {
  if (nesterov) {
    NesterovRange(params, velocity, grads, n, lr, momentum, weight_decay);
  } else {
    SgdRange(params, velocity, grads, n, lr, momentum, weight_decay);
  }
}

void adamw_update(float* params, float* m, float* v, const float* grads, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t) {
  const AdamwScalars a = MakeAdamwScalars(lr, beta1, beta2, weight_decay, t);
  AdamwRange(params, m, v, grads, n, a.decay, beta1, beta2, a.step_size, a.inv_sqrt_bc2, eps);
}

namespace {

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float FromBits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// bf16 keeps float's exponent and the top 7 of its 23 fraction bits: round the low 16 bits
// away, ties to even. Overflow past bf16's largest value carries into the exponent: inf.
float RoundBf16(float x) {
  const uint32_t b = Bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return FromBits((b & 0xFFFF0000u) | 0x00400000u);  // NaN
  return FromBits((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);
}

// fp16: 10 fraction bits, exponents down to -14, subnormals in steps of 2^-24.
float RoundFp16(float x) {
  constexpr float kOverflow = 65520.0f;  // halfway from 65504 (the largest) to 2^16: rounds up
  constexpr float kMinNormal = 6.103515625e-05f;  // 2^-14
  const float a = std::fabs(x);
  if (!(a < kOverflow)) return a == a ? std::copysign(HUGE_VALF, x) : x;  // inf, or NaN as is
  if (a < kMinNormal) {
    // Floats in [0.5, 1) are spaced 2^-24 apart, so the addition rounds a to that grid, ties to
    // even, as fp16's subnormals are.
    return std::copysign((a + 0.5f) - 0.5f, x);
  }
  const uint32_t b = Bits(x);
  return FromBits((b + 0xFFFu + ((b >> 13) & 1u)) & 0xFFFFE000u);
}

}  // namespace

void round_to_half(float* out, const float* in, int64_t n, HalfType type) {
  if (type == HalfType::kBf16) {
    for (int64_t i = 0; i < n; ++i) out[i] = RoundBf16(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = RoundFp16(in[i]);
  }
}

void dropout_forward(float* out, float* mask, const float* x, int B, int C, float p, uint64_t key,
                     int64_t first_row) {
  // Keep when the hash is >= p * 2^32; p < 1, so the threshold fits.
  const uint32_t threshold = static_cast<uint32_t>(std::ldexp(static_cast<double>(p), 32));
  const float scale = 1.0f / (1.0f - p);
  for (int b = 0; b < B; ++b) {
    const int64_t row = static_cast<int64_t>(b) * C;
    // Element (r, c) hashes r * C + c; wrapping at 2^32 only reuses a counter across rows
    // billions of elements apart, under a per-step key.
    const uint32_t base = static_cast<uint32_t>((first_row + b) * static_cast<int64_t>(C));
    DropoutRow(out + row, mask + row, x + row, C, base, static_cast<uint32_t>(key),
               static_cast<uint32_t>(key >> 32), threshold, scale);
  }
}

void dropout_backward(float* d, const float* mask, int64_t n) { MulInto(d, mask, n); }

void sum_buffers(float* out, const float* const* a, int count, int64_t n) {
  if (count == 1) {
    std::memcpy(out, a[0], sizeof(float) * static_cast<size_t>(n));
    return;
  }
  Add2(out, a[0], a[1], n);
  for (int r = 2; r < count; ++r) AddInto(out, a[r], n);
}

int64_t accuracy(const float* logits, const int32_t* labels, int B, int V) {
  int64_t correct = 0;
  for (int b = 0; b < B; ++b) {
    const float* row = logits + static_cast<int64_t>(b) * V;
    int best = 0;
    for (int v = 1; v < V; ++v) best = row[v] > row[best] ? v : best;
    correct += best == labels[b];
  }
  return correct;
}

int set_blas_threads(int threads) {
#ifdef SWEEP_HAVE_OPENBLAS
  const int previous = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  return previous;
#else
  (void)threads;
  return 0;
#endif
}

}  // namespace sweep::trainer::cpu
