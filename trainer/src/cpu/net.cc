// The CPU replica's forward and backward: the model's layers in order, then backward in reverse,
// each a call of cpu/ops.h or cpu/conv_ops.h kernels. Owned by the trainer. A Net is used by one
// thread at a time.
#include "cpu/net.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <new>
#include <utility>

#include "cpu/conv_ops.h"
#include "cpu/ops.h"
#include "rng.h"

namespace sweep::trainer::cpu {

FloatBuffer::FloatBuffer(int64_t n) : size_(n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)));
  if (!data_) throw std::bad_alloc();  // caught at Train()'s edge
  std::memset(data_.get(), 0, bytes);
}

namespace {

bool IsGemm(LayerKind k) { return k == LayerKind::kLinear || k == LayerKind::kConv; }

}  // namespace

Net::Net(ModelSpec model, int max_batch, Precision precision, float label_smoothing)
    : model_(std::move(model)),
      max_batch_(max_batch),
      precision_(precision),
      half_type_(precision == Precision::kFp16 ? HalfType::kFp16 : HalfType::kBf16),
      label_smoothing_(label_smoothing),
      params_(model_.num_params),
      grads_(model_.num_params),
      stats_(model_.num_buffers),
      losses_(max_batch) {
  const int L = static_cast<int>(model_.layers.size());
  const size_t n = static_cast<size_t>(L);
  std::vector<int> readers(n, 0);
  for (const Layer& l : model_.layers) {
    if (l.input >= 0) ++readers[static_cast<size_t>(l.input)];
    if (l.kind == LayerKind::kAdd && l.shortcut >= 0) ++readers[static_cast<size_t>(l.shortcut)];
  }
  fused_.assign(n, -1);
  skip_.assign(n, 0);
  for (int a = 0; a < L; ++a) {
    const Layer& act = model_.layer(a);
    if (act.kind != LayerKind::kActivation || act.input < 0) continue;
    const int p = act.input;
    const LayerKind k = model_.layer(p).kind;
    if ((IsGemm(k) || k == LayerKind::kBatchNorm) && readers[static_cast<size_t>(p)] == 1) {
      fused_[static_cast<size_t>(p)] = a;
      skip_[static_cast<size_t>(a)] = 1;
    }
  }
  gown_.resize(n);
  for (int i = 0; i < L; ++i) gown_[static_cast<size_t>(i)] = i;
  for (int i = 0; i < L; ++i) {
    if (fused_[static_cast<size_t>(i)] >= 0)
      gown_[static_cast<size_t>(i)] = fused_[static_cast<size_t>(i)];
  }
  for (int i = 0; i < L; ++i) {
    const Layer& l = model_.layer(i);
    if (l.kind == LayerKind::kFlatten && l.input >= 0) {
      gown_[static_cast<size_t>(i)] = gown_[static_cast<size_t>(l.input)];
    }
  }
  out_.resize(n);
  y_.assign(n, nullptr);
  gbuf_.resize(n);
  written_.assign(n, 0);
  mask_.resize(n);
  argmax_.resize(n);
  mean_.resize(n);
  invstd_.resize(n);
  in16_.resize(n);
  int64_t scratch = 0, widest = 0;
  for (int i = 0; i < L; ++i) {
    const Layer& l = model_.layer(i);
    const size_t at = static_cast<size_t>(i);
    const int64_t rows_out = int64_t{max_batch} * l.out_shape.size();
    widest = std::max(widest, l.out_shape.size());
    if (l.kind != LayerKind::kFlatten) out_[at] = FloatBuffer(rows_out);
    if (gown_[at] == i) gbuf_[at] = FloatBuffer(rows_out);
    switch (l.kind) {
      case LayerKind::kDropout:
        mask_[at] = FloatBuffer(rows_out);
        break;
      case LayerKind::kMaxPool:
        argmax_[at].resize(static_cast<size_t>(rows_out));
        break;
      case LayerKind::kBatchNorm:
        mean_[at] = FloatBuffer(l.in_shape.c);
        invstd_[at] = FloatBuffer(l.in_shape.c);
        break;
      case LayerKind::kConv:
        scratch = std::max(scratch, conv2d_scratch_floats(ConvShapeOf(l, max_batch)));
        break;
      default:
        break;
    }
    if (half() && IsGemm(l.kind)) in16_[at] = FloatBuffer(int64_t{max_batch} * l.in_shape.size());
  }
  conv_scratch_ = FloatBuffer(scratch);
  if (half()) {
    params16_ = FloatBuffer(model_.num_params);
    d16_ = FloatBuffer(int64_t{max_batch} * widest);
  }
  InitStats(model_, stats_.data());
}

const float* Net::GemmInput(int i, const float* x, int64_t n) {
  if (!half()) return x;
  float* copy = in16_[static_cast<size_t>(i)].data();
  round_to_half(copy, x, n, half_type_);
  return copy;
}

const float* Net::RunForward(const float* x, int B, bool train, uint64_t dropout_key,
                             int64_t first_row, const float* stats, bool update_stats) {
  assert(B <= max_batch_ && "activation buffers hold max_batch rows");
  const float* p = params_.data();
  const float* w = p;  // the weights the GEMMs read
  if (half()) {
    if (!half_params_fresh_) {
      round_to_half(params16_.data(), p, model_.num_params, half_type_);
      half_params_fresh_ = true;
    }
    w = params16_.data();
  }
  if (stats == nullptr) stats = stats_.data();
  const int L = static_cast<int>(model_.layers.size());
  for (int i = 0; i < L; ++i) {
    const size_t at = static_cast<size_t>(i);
    const Layer& l = model_.layer(i);
    const float* in = l.input < 0 ? x : y_[static_cast<size_t>(l.input)];
    const int64_t n_in = int64_t{B} * l.in_shape.size(), n_out = int64_t{B} * l.out_shape.size();
    float* out = out_[at].data();
    y_[at] = out;
    // A fused activation writes its own buffer in this pass.
    const int a = fused_[at];
    const Activation act = a >= 0 ? model_.layer(a).act : Activation::kNone;
    float* act_out = a >= 0 ? out_[static_cast<size_t>(a)].data() : out;
    if (a >= 0) y_[static_cast<size_t>(a)] = act_out;
    switch (l.kind) {
      case LayerKind::kLinear: {
        const int C = static_cast<int>(l.in_shape.size());
        matmul_forward(out, GemmInput(i, in, n_in), w + l.weight, B, C, l.out);
        if (l.bias_at >= 0) {
          bias_act_forward(act_out, out, p + l.bias_at, B, l.out, act);
        } else if (a >= 0) {
          act_forward(act_out, out, n_out, act);
        }
        break;
      }
      case LayerKind::kConv: {
        const ConvShape s = ConvShapeOf(l, B);
        conv2d_forward(out, GemmInput(i, in, n_in), w + l.weight, nullptr, s, conv_scratch_.data());
        const int64_t rows = int64_t{B} * s.OH() * s.OW();
        if (l.bias_at >= 0) {
          bias_act_forward(act_out, out, p + l.bias_at, static_cast<int>(rows), l.out, act);
        } else if (a >= 0) {
          act_forward(act_out, out, n_out, act);
        }
        break;
      }
      case LayerKind::kBatchNorm: {
        const int C = l.in_shape.c;
        const int64_t N = int64_t{B} * l.in_shape.h * l.in_shape.w;
        const float* gamma = p + l.weight;
        const float* beta = p + l.bias_at;
        if (train) {
          float* rm = update_stats ? stats_.data() + l.stats : nullptr;
          batchnorm_forward(act_out, a >= 0 ? out : nullptr, mean_[at].data(), invstd_[at].data(),
                            in, gamma, beta, rm, rm == nullptr ? nullptr : rm + C, N, C, l.momentum,
                            l.eps, act);
        } else {
          batchnorm_eval(act_out, in, gamma, beta, stats + l.stats, stats + l.stats + C, N, C,
                         l.eps, act);
        }
        break;
      }
      case LayerKind::kActivation:
        if (!skip_[at]) act_forward(out, in, n_out, l.act);
        break;
      case LayerKind::kMaxPool:
        maxpool_forward(out, argmax_[at].data(), in, B, l.in_shape.h, l.in_shape.w, l.in_shape.c,
                        l.kernel, l.stride);
        break;
      case LayerKind::kAvgPool:
        avgpool_forward(out, in, B, l.in_shape.h, l.in_shape.w, l.in_shape.c, l.kernel, l.stride);
        break;
      case LayerKind::kGlobalAvgPool:
        global_avgpool_forward(out, in, B, l.in_shape.h * l.in_shape.w, l.in_shape.c);
        break;
      case LayerKind::kFlatten:
        y_[at] = in;
        break;
      case LayerKind::kDropout:
        if (train && l.p > 0) {
          const int C = static_cast<int>(l.in_shape.size());
          // Each layer draws its own mask: the key mixes in the layer.
          dropout_forward(out, mask_[at].data(), in, B, C, l.p,
                          MixSeed(dropout_key, static_cast<uint64_t>(l.dropout_index)), first_row);
        } else {
          y_[at] = in;
        }
        break;
      case LayerKind::kAdd: {
        const float* other = l.shortcut < 0 ? x : y_[static_cast<size_t>(l.shortcut)];
        add_forward(out, in, other, n_out);
        break;
      }
    }
  }
  return y_.back();
}

const float* Net::Forward(const float* x, int B, const float* stats) {
  return RunForward(x, B, /*train=*/false, 0, 0, stats, false);
}

double Net::ForwardLoss(const float* x, const int32_t* y, int B, float dloss_scale,
                        uint64_t dropout_key, int64_t first_row, float loss_scale,
                        bool update_stats) {
  const float* logits =
      RunForward(x, B, /*train=*/true, dropout_key, first_row, nullptr, update_stats);
  const int last = static_cast<int>(model_.layers.size()) - 1;
  const int classes = model_.classes;
  float* d = Grad(last);
  softmax_xent_forward_backward(d, losses_.data(), logits, y, B, classes, dloss_scale,
                                label_smoothing_);
  if (loss_scale != 1.0f) {
    for (int64_t i = 0; i < int64_t{B} * classes; ++i) d[i] *= loss_scale;
  }
  double loss = 0;
  for (int b = 0; b < B; ++b) loss += losses_.data()[b];
  return loss;
}

void Net::Backward(const float* x, int B, bool accumulate, LayerSink* sink) {
  const int L = static_cast<int>(model_.layers.size());
  std::fill(written_.begin(), written_.end(), 0);
  written_[static_cast<size_t>(gown_[static_cast<size_t>(L - 1)])] = 1;  // the loss wrote it
  const float* p = half() ? params16_.data() : params_.data();
  const float* p32 = params_.data();
  float* g = grads_.data();
  // Where the gradient w.r.t. layer j's output goes, and whether it adds to what is there.
  auto target = [&](int j, bool* add) -> float* {
    if (j < 0) return nullptr;  // the model's input: no gradient wanted
    char& w = written_[static_cast<size_t>(gown_[static_cast<size_t>(j)])];
    *add = w != 0;
    w = 1;
    return Grad(j);
  };
  for (int i = L - 1; i >= 0; --i) {
    const size_t at = static_cast<size_t>(i);
    const Layer& l = model_.layer(i);
    if (skip_[at] || l.kind == LayerKind::kFlatten) continue;
    const float* in = l.input < 0 ? x : y_[static_cast<size_t>(l.input)];
    float* d = Grad(i);
    const int64_t n_out = int64_t{B} * l.out_shape.size();
    const int a = fused_[at];
    const Activation act = a >= 0 ? model_.layer(a).act : Activation::kNone;
    const float* act_out = a >= 0 ? y_[static_cast<size_t>(a)] : nullptr;
    bool add = false;
    switch (l.kind) {
      case LayerKind::kLinear:
      case LayerKind::kConv: {
        // Through the fused activation (and the bias's gradient) first: d becomes the
        // gradient w.r.t. this layer's own output.
        const bool conv = l.kind == LayerKind::kConv;
        const ConvShape s = conv ? ConvShapeOf(l, B) : ConvShape{};
        const int rows = conv ? B * s.OH() * s.OW() : B;
        if (l.bias_at >= 0) {
          bias_act_backward(d, g + l.bias_at, y_[at], a >= 0 ? act_out : y_[at], rows, l.out, act,
                            accumulate);
        } else if (a >= 0) {
          act_backward(d, d, y_[at], act_out, n_out, act, false);
        }
        const float* gemm_in = half() ? in16_[at].data() : in;
        const float* dout = d;
        if (half()) {
          round_to_half(d16_.data(), d, n_out, half_type_);
          dout = d16_.data();
        }
        float* d_in = target(l.input, &add);
        if (conv) {
          conv2d_backward(d_in, g + l.weight, nullptr, dout, gemm_in, p + l.weight, s,
                          conv_scratch_.data(), accumulate, add);
        } else {
          matmul_backward(d_in, g + l.weight, dout, gemm_in, p + l.weight, B,
                          static_cast<int>(l.in_shape.size()), l.out, accumulate, add);
        }
        break;
      }
      case LayerKind::kBatchNorm: {
        float* d_in = target(l.input, &add);
        batchnorm_backward(d_in, g + l.weight, g + l.bias_at, d, in, y_[at], act_out,
                           mean_[at].data(), invstd_[at].data(), p32 + l.weight,
                           int64_t{B} * l.in_shape.h * l.in_shape.w, l.in_shape.c, act, accumulate,
                           add);
        break;
      }
      case LayerKind::kActivation: {
        float* d_in = target(l.input, &add);
        if (d_in != nullptr) act_backward(d_in, d, in, y_[at], n_out, l.act, add);
        break;
      }
      case LayerKind::kMaxPool: {
        float* d_in = target(l.input, &add);
        if (d_in != nullptr) {
          maxpool_backward(d_in, d, argmax_[at].data(), B, l.in_shape.h, l.in_shape.w, l.in_shape.c,
                           l.kernel, l.stride, add);
        }
        break;
      }
      case LayerKind::kAvgPool: {
        float* d_in = target(l.input, &add);
        if (d_in != nullptr) {
          avgpool_backward(d_in, d, B, l.in_shape.h, l.in_shape.w, l.in_shape.c, l.kernel, l.stride,
                           add);
        }
        break;
      }
      case LayerKind::kGlobalAvgPool: {
        float* d_in = target(l.input, &add);
        if (d_in != nullptr) {
          global_avgpool_backward(d_in, d, B, l.in_shape.h * l.in_shape.w, l.in_shape.c, add);
        }
        break;
      }
      case LayerKind::kDropout: {
        float* d_in = target(l.input, &add);
        if (d_in == nullptr) break;
        if (l.p > 0) dropout_backward(d, mask_[at].data(), n_out);
        copy_or_add(d_in, d, n_out, add);
        break;
      }
      case LayerKind::kAdd: {
        float* d_in = target(l.input, &add);
        if (d_in != nullptr) copy_or_add(d_in, d, n_out, add);
        bool add2 = false;
        float* d_short = target(l.shortcut, &add2);
        if (d_short != nullptr) copy_or_add(d_short, d, n_out, add2);
        break;
      }
      case LayerKind::kFlatten:
        break;
    }
    if (sink != nullptr && l.has_params()) sink->LayerDone(l.param_index);
  }
}

double Net::ForwardBackward(const float* x, const int32_t* y, int B, float dloss_scale) {
  const double loss = ForwardLoss(x, y, B, dloss_scale);
  Backward(x, B, /*accumulate=*/false);
  return loss;
}

void Net::Evaluate(const float* x, const int32_t* y, int B, double* loss_sum, int64_t* correct,
                   const float* stats) {
  const float* logits = Forward(x, B, stats);
  const int classes = model_.classes;
  softmax_xent_forward_backward(nullptr, losses_.data(), logits, y, B, classes, 0.0f);
  for (int b = 0; b < B; ++b) *loss_sum += losses_.data()[b];
  *correct += accuracy(logits, y, B, classes);
}

}  // namespace sweep::trainer::cpu
