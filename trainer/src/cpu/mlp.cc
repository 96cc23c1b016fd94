// The CPU replica's forward and backward, as sequences of cpu/ops.h kernels. Owned by the
// trainer. An Mlp is used by one thread at a time.
#include "cpu/mlp.h"

#include <cassert>
#include <cstring>
#include <new>
#include <utility>

#include "cpu/ops.h"
#include "rng.h"

namespace sweep::trainer::cpu {

FloatBuffer::FloatBuffer(int64_t n) : size_(n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)));
  if (!data_) throw std::bad_alloc();  // caught at Train()'s edge
  std::memset(data_.get(), 0, bytes);
}

Mlp::Mlp(MlpShape shape, Activation act, int max_batch, float dropout, Precision precision)
    : shape_(std::move(shape)),
      act_(act),
      max_batch_(max_batch),
      dropout_(dropout),
      precision_(precision),
      half_type_(precision == Precision::kFp16 ? HalfType::kFp16 : HalfType::kBf16),
      params_(shape_.num_params),
      grads_(shape_.num_params),
      losses_(max_batch) {
  for (int l = 0; l < shape_.layers(); ++l) {
    const int64_t n = int64_t{max_batch} * shape_.out(l);
    const bool hidden = l < shape_.layers() - 1;
    pre_.emplace_back(n);
    out_.emplace_back(hidden ? n : 0);
    drop_.emplace_back(hidden && dropout > 0 ? n : 0);
    mask_.emplace_back(hidden && dropout > 0 ? n : 0);
    act16_.emplace_back(hidden && half() ? n : 0);
  }
  for (FloatBuffer& d : d_) d = FloatBuffer(int64_t{max_batch} * shape_.max_width());
  if (half()) {
    params16_ = FloatBuffer(shape_.num_params);
    x16_ = FloatBuffer(int64_t{max_batch} * shape_.in(0));
    d16_ = FloatBuffer(int64_t{max_batch} * shape_.max_width());
  }
}

const float* Mlp::RunForward(const float* x, int B, bool train, uint64_t dropout_key,
                             int64_t first_row) {
  assert(B <= max_batch_ && "activation buffers hold max_batch rows");
  const int L = shape_.layers();
  const float* p = params_.data();
  const float* w = p;        // the weights the GEMMs read
  const float* gemm_in = x;  // and their input
  if (half()) {
    if (!half_params_fresh_) {
      round_to_half(params16_.data(), p, shape_.num_params, half_type_);
      half_params_fresh_ = true;
    }
    w = params16_.data();
    round_to_half(x16_.data(), x, int64_t{B} * shape_.in(0), half_type_);
    gemm_in = x16_.data();
  }
  masked_ = train && dropout_ > 0;
  const float* in = x;
  for (int l = 0; l < L; ++l) {
    const bool last = l == L - 1;
    float* pre = pre_[l].data();
    float* out = last ? pre : out_[l].data();
    matmul_forward(pre, gemm_in, w + shape_.weight_offset[l], B, shape_.in(l), shape_.out(l));
    bias_act_forward(out, pre, p + shape_.bias_offset[l], B, shape_.out(l),
                     last ? Activation::kNone : act_);
    if (!last && masked_) {
      // Each layer draws its own mask: the key mixes in the layer.
      dropout_forward(drop_[l].data(), mask_[l].data(), out, B, shape_.out(l), dropout_,
                      MixSeed(dropout_key, static_cast<uint64_t>(l)), first_row);
      out = drop_[l].data();
    }
    gemm_in = out;
    if (!last && half()) {
      round_to_half(act16_[l].data(), out, int64_t{B} * shape_.out(l), half_type_);
      gemm_in = act16_[l].data();
    }
    in = out;
  }
  return in;
}

const float* Mlp::Forward(const float* x, int B) { return RunForward(x, B, /*train=*/false, 0, 0); }

double Mlp::ForwardLoss(const float* x, const int32_t* y, int B, float dloss_scale,
                        uint64_t dropout_key, int64_t first_row, float loss_scale) {
  const float* logits = RunForward(x, B, /*train=*/true, dropout_key, first_row);
  const int L = shape_.layers();
  const int classes = shape_.out(L - 1);
  float* d = d_[(L - 1) % 2].data();
  softmax_xent_forward_backward(d, losses_.data(), logits, y, B, classes, dloss_scale);
  if (loss_scale != 1.0f) {
    for (int64_t i = 0; i < int64_t{B} * classes; ++i) d[i] *= loss_scale;
  }
  double loss = 0;
  for (int b = 0; b < B; ++b) loss += losses_.data()[b];
  return loss;
}

void Mlp::Backward(const float* x, int B, bool accumulate, LayerSink* sink) {
  const int L = shape_.layers();
  float* d = d_[(L - 1) % 2].data();
  const float* p = half() ? params16_.data() : params_.data();
  float* g = grads_.data();
  for (int l = L - 1; l >= 0; --l) {
    const bool last = l == L - 1;
    // d holds the gradient w.r.t. what layer l + 1 consumed; through the dropout mask it
    // becomes one w.r.t. this layer's activation, then one w.r.t. its pre-activation.
    if (!last && masked_) dropout_backward(d, mask_[l].data(), int64_t{B} * shape_.out(l));
    bias_act_backward(d, g + shape_.bias_offset[l], pre_[l].data(),
                      last ? pre_[l].data() : out_[l].data(), B, shape_.out(l),
                      last ? Activation::kNone : act_, accumulate);
    const float* in = l == 0 ? x : (masked_ ? drop_[l - 1].data() : out_[l - 1].data());
    const float* dout = d;
    if (half()) {
      in = l == 0 ? x16_.data() : act16_[l - 1].data();
      round_to_half(d16_.data(), d, int64_t{B} * shape_.out(l), half_type_);
      dout = d16_.data();
    }
    float* d_in = l == 0 ? nullptr : d_[(l - 1) % 2].data();
    matmul_backward(d_in, g + shape_.weight_offset[l], dout, in, p + shape_.weight_offset[l], B,
                    shape_.in(l), shape_.out(l), accumulate);
    if (sink != nullptr) sink->LayerDone(l);
    d = d_in;
  }
}

double Mlp::ForwardBackward(const float* x, const int32_t* y, int B, float dloss_scale) {
  const double loss = ForwardLoss(x, y, B, dloss_scale);
  Backward(x, B, /*accumulate=*/false);
  return loss;
}

void Mlp::Evaluate(const float* x, const int32_t* y, int B, double* loss_sum, int64_t* correct) {
  const float* logits = Forward(x, B);
  const int classes = shape_.out(shape_.layers() - 1);
  softmax_xent_forward_backward(nullptr, losses_.data(), logits, y, B, classes, 0.0f);
  for (int b = 0; b < B; ++b) *loss_sum += losses_.data()[b];
  *correct += accuracy(logits, y, B, classes);
}

}  // namespace sweep::trainer::cpu
