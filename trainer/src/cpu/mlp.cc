// The CPU replica's forward, backward and update, as sequences of cpu/ops.h kernels. Owned by
// the trainer. An Mlp is used by one thread at a time.
#include "cpu/mlp.h"

#include <cassert>
#include <cstring>
#include <new>
#include <utility>

#include "cpu/ops.h"

namespace sweep::trainer::cpu {

FloatBuffer::FloatBuffer(int64_t n) : size_(n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)));
  if (!data_) throw std::bad_alloc();  // caught at Train()'s edge
  std::memset(data_.get(), 0, bytes);
}

Mlp::Mlp(MlpShape shape, Activation act, int max_batch)
    : shape_(std::move(shape)),
      act_(act),
      max_batch_(max_batch),
      params_(shape_.num_params),
      grads_(shape_.num_params),
      velocity_(shape_.num_params),
      losses_(max_batch) {
  for (int l = 0; l < shape_.layers(); ++l) {
    pre_.emplace_back(int64_t{max_batch} * shape_.out(l));
    const bool last = l == shape_.layers() - 1;
    out_.emplace_back(last ? 0 : int64_t{max_batch} * shape_.out(l));
  }
  for (FloatBuffer& d : d_) d = FloatBuffer(int64_t{max_batch} * shape_.max_width());
}

const float* Mlp::Forward(const float* x, int B) {
  assert(B <= max_batch_ && "activation buffers hold max_batch rows");
  const float* in = x;
  const float* p = params_.data();
  for (int l = 0; l < shape_.layers(); ++l) {
    const bool last = l == shape_.layers() - 1;
    float* pre = pre_[l].data();
    float* out = last ? pre : out_[l].data();
    matmul_forward(pre, in, p + shape_.weight_offset[l], B, shape_.in(l), shape_.out(l));
    bias_act_forward(out, pre, p + shape_.bias_offset[l], B, shape_.out(l),
                     last ? Activation::kNone : act_);
    in = out;
  }
  return in;
}

double Mlp::ForwardBackward(const float* x, const int32_t* y, int B, float dloss_scale) {
  const float* logits = Forward(x, B);
  const int L = shape_.layers();
  float* d = d_[(L - 1) % 2].data();
  softmax_xent_forward_backward(d, losses_.data(), logits, y, B, shape_.out(L - 1), dloss_scale);
  double loss = 0;
  for (int b = 0; b < B; ++b) loss += losses_.data()[b];

  const float* p = params_.data();
  float* g = grads_.data();
  for (int l = L - 1; l >= 0; --l) {
    const bool last = l == L - 1;
    // d holds the gradient w.r.t. this layer's output; turn it into one w.r.t. pre.
    bias_act_backward(d, g + shape_.bias_offset[l], pre_[l].data(),
                      last ? pre_[l].data() : out_[l].data(), B, shape_.out(l),
                      last ? Activation::kNone : act_);
    const float* in = l == 0 ? x : out_[l - 1].data();
    float* d_in = l == 0 ? nullptr : d_[(l - 1) % 2].data();
    matmul_backward(d_in, g + shape_.weight_offset[l], d, in, p + shape_.weight_offset[l], B,
                    shape_.in(l), shape_.out(l));
    d = d_in;
  }
  return loss;
}

void Mlp::Evaluate(const float* x, const int32_t* y, int B, double* loss_sum, int64_t* correct) {
  const float* logits = Forward(x, B);
  const int classes = shape_.out(shape_.layers() - 1);
  softmax_xent_forward_backward(nullptr, losses_.data(), logits, y, B, classes, 0.0f);
  for (int b = 0; b < B; ++b) *loss_sum += losses_.data()[b];
  *correct += accuracy(logits, y, B, classes);
}

void Mlp::SgdStep(float lr, float momentum, float weight_decay) {
  sgd_momentum_update(params_.data(), velocity_.data(), grads_.data(), shape_.num_params, lr,
                      momentum, weight_decay);
}

}  // namespace sweep::trainer::cpu
