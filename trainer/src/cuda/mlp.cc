// The GPU replica's forward and backward, as sequences of cuda/ops.h kernels in the order of
// cpu/mlp.cc. In bf16 / fp16 every GEMM input has a 16-bit copy, written by the kernel that makes
// the input (bias + activation, dropout, activation backward; the optimizer for the weights) in
// the same pass; only the batch, and the weights after a load, take a cast of their own. Owned
// by the trainer; one thread at a time.
#include "cuda/mlp.h"

#include <algorithm>
#include <string>
#include <utility>

#include "cuda/cuda_check.h"
#include "rng.h"

namespace sweep::trainer::cuda {

Mlp::Mlp(const MlpShape& shape, Activation act, int max_batch, float dropout, Precision precision,
         cudaStream_t stream, cublasHandle_t blas)
    : shape_(shape),
      act_(act),
      max_batch_(max_batch),
      dropout_(dropout),
      precision_(precision),
      half_type_(precision == Precision::kFp16 ? HalfType::kFp16 : HalfType::kBf16),
      stream_(stream),
      blas_(blas) {}

Result<std::unique_ptr<Mlp>> Mlp::Create(const MlpShape& shape, Activation act, int max_batch,
                                         float dropout, Precision precision, cudaStream_t stream,
                                         cublasHandle_t blas) {
  std::unique_ptr<Mlp> m(new Mlp(shape, act, max_batch, dropout, precision, stream, blas));
  SWEEP_RETURN_IF_ERROR(m->Allocate());
  return m;
}

Status Mlp::Allocate() {
  const int64_t rows = max_batch_;
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(shape_.num_params, &params_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(shape_.num_params, &grads_));
  for (int s = 0; s < kInputSlots; ++s) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(rows * shape_.in(0), &x_[s]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<int32_t>::Make(rows, &y_[s]));
  }
  const int L = shape_.layers();
  pre_.resize(static_cast<size_t>(L));
  out_.resize(static_cast<size_t>(L));
  drop_.resize(static_cast<size_t>(L));
  mask_.resize(static_cast<size_t>(L));
  act16_.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    const size_t i = static_cast<size_t>(l);
    const int64_t n = rows * shape_.out(l);
    const bool hidden = l < L - 1;
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(n, &pre_[i]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(hidden && keeps_out() ? n : 0, &out_[i]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(hidden && dropout_ > 0 ? n : 0, &drop_[i]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(hidden && dropout_ > 0 ? n : 0, &mask_[i]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(hidden && half() ? n : 0, &act16_[i]));
  }
  for (DeviceBuffer<float>& d : d_) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(rows * shape_.max_width(), &d));
  }
  if (half()) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(shape_.num_params, &params16_));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(rows * shape_.in(0), &x16_));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(rows * shape_.max_width(), &d16_));
  }
  int64_t scratch = 0;
  for (int l = 0; l < L; ++l) {
    scratch = std::max(scratch, BiasGradScratchFloats(max_batch_, shape_.out(l)));
  }
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(scratch, &bias_scratch_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(rows, &losses_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<double>::Make(1, &loss_));
  return Status::Ok();
}

Status Mlp::Forward(int slot, int B, bool train, uint64_t dropout_key, int64_t first_row) {
  if (B < 0 || B > max_batch_ || slot < 0 || slot >= kInputSlots) {
    return Status::Internal("cuda: batch of " + std::to_string(B) + " rows in slot " +
                            std::to_string(slot) + " (max_batch " + std::to_string(max_batch_) +
                            ")");
  }
  const int L = shape_.layers();
  const float* in = x_[slot].data();
  const uint16_t* in16 = x16_.data();
  const float* p = params_.data();
  if (half()) {
    if (!half_params_fresh_) {
      SWEEP_RETURN_IF_ERROR(
          cast_to_half(params16_.data(), p, shape_.num_params, half_type_, stream_));
      half_params_fresh_ = true;
    }
    SWEEP_RETURN_IF_ERROR(
        cast_to_half(x16_.data(), in, int64_t{B} * shape_.in(0), half_type_, stream_));
  }
  masked_ = train && dropout_ > 0;
  for (int l = 0; l < L; ++l) {
    const size_t i = static_cast<size_t>(l);
    const bool last = l == L - 1;
    float* pre = pre_[i].data();
    float* out = last ? pre : out_[i].data();  // null for a hidden layer unless keeps_out()
    if (half()) {
      SWEEP_RETURN_IF_ERROR(matmul_forward_half(blas_, pre, in16,
                                                params16_.data() + shape_.weight_offset[i], B,
                                                shape_.in(l), shape_.out(l), half_type_));
    } else {
      SWEEP_RETURN_IF_ERROR(matmul_forward(blas_, pre, in, p + shape_.weight_offset[i], B,
                                           shape_.in(l), shape_.out(l)));
    }
    // The 16-bit copy the next GEMM reads is written by whichever kernel writes its input last.
    uint16_t* next16 = !last && half() ? act16_[i].data() : nullptr;
    // A hidden layer without an fp32 activation keeps pre as the GEMM left it (the backward adds
    // the bias where it reads pre): 4 bytes an element not written.
    SWEEP_RETURN_IF_ERROR(bias_act_forward(out, pre, p + shape_.bias_offset[i], B, shape_.out(l),
                                           last ? Activation::kNone : act_, stream_,
                                           masked_ ? nullptr : next16, half_type_,
                                           /*keep_pre=*/pre_has_bias(l)));
    if (!last && masked_) {
      SWEEP_RETURN_IF_ERROR(
          dropout_forward(drop_[i].data(), mask_[i].data(), out, B, shape_.out(l), dropout_,
                          MixSeed(dropout_key, static_cast<uint64_t>(l)), first_row, stream_,
                          next16, half_type_, step_, static_cast<uint64_t>(l)));
      out = drop_[i].data();
    }
    if (next16 != nullptr) in16 = next16;
    in = out;
  }
  return Status::Ok();
}

Status Mlp::ForwardLoss(int slot, int B, float dloss_scale, const float* loss_scale,
                        uint64_t dropout_key, int64_t first_row, bool accumulate_loss) {
  SWEEP_RETURN_IF_ERROR(Forward(slot, B, /*train=*/true, dropout_key, first_row));
  const int L = shape_.layers();
  const int classes = shape_.out(L - 1);
  float* d = d_[(L - 1) % 2].data();
  SWEEP_RETURN_IF_ERROR(softmax_xent_forward_backward(
      d, losses_.data(), pre_.back().data(), y_[slot].data(), B, classes, dloss_scale, stream_));
  if (loss_scale != nullptr) {
    SWEEP_RETURN_IF_ERROR(scale_by(d, int64_t{B} * classes, loss_scale, stream_));
  }
  return loss_sum(loss_.data(), losses_.data(), B, stream_, accumulate_loss);
}

Status Mlp::Backward(int slot, int B, bool accumulate, LayerHook* hook) {
  const int L = shape_.layers();
  float* d = d_[(L - 1) % 2].data();
  const float* p = params_.data();
  float* g = grads_.data();
  for (int l = L - 1; l >= 0; --l) {
    const size_t i = static_cast<size_t>(l);
    const bool last = l == L - 1;
    if (!last && masked_) {
      SWEEP_RETURN_IF_ERROR(
          dropout_backward(d, mask_[i].data(), int64_t{B} * shape_.out(l), stream_));
    }
    SWEEP_RETURN_IF_ERROR(bias_act_backward(
        d, g + shape_.bias_offset[i], pre_[i].data(), last ? pre_[i].data() : out_[i].data(), B,
        shape_.out(l), last ? Activation::kNone : act_, stream_, accumulate,
        half() ? d16_.data() : nullptr, half_type_, /*keep_d=*/!half(), bias_scratch_.data(),
        /*pre_bias=*/pre_has_bias(l) ? nullptr : p + shape_.bias_offset[i]));
    float* d_in = l == 0 ? nullptr : d_[(l - 1) % 2].data();
    if (half()) {
      const uint16_t* in16 = l == 0 ? x16_.data() : act16_[i - 1].data();
      SWEEP_RETURN_IF_ERROR(
          matmul_backward_half(blas_, d_in, g + shape_.weight_offset[i], d16_.data(), in16,
                               params16_.data() + shape_.weight_offset[i], B, shape_.in(l),
                               shape_.out(l), half_type_, accumulate));
    } else {
      const float* in =
          l == 0 ? x_[slot].data() : (masked_ ? drop_[i - 1].data() : out_[i - 1].data());
      SWEEP_RETURN_IF_ERROR(matmul_backward(blas_, d_in, g + shape_.weight_offset[i], d, in,
                                            p + shape_.weight_offset[i], B, shape_.in(l),
                                            shape_.out(l), accumulate));
    }
    if (hook != nullptr) SWEEP_RETURN_IF_ERROR(hook->LayerDone(l));
    d = d_in;
  }
  return Status::Ok();
}

Status Mlp::EvaluateSlot(int B, double* loss_total, unsigned long long* correct) {
  if (B < 1 || B > max_batch_) {
    return Status::Internal("cuda: an evaluation batch of " + std::to_string(B) + " rows");
  }
  SWEEP_RETURN_IF_ERROR(Forward(0, B, /*train=*/false, 0, 0));
  const int classes = shape_.out(shape_.layers() - 1);
  const float* logits = pre_.back().data();
  SWEEP_RETURN_IF_ERROR(softmax_xent_forward_backward(nullptr, losses_.data(), logits, y_[0].data(),
                                                      B, classes, 0.0f, stream_));
  SWEEP_RETURN_IF_ERROR(loss_sum(loss_total, losses_.data(), B, stream_, /*accumulate=*/true));
  return accuracy(correct, logits, y_[0].data(), B, classes, stream_);
}

}  // namespace sweep::trainer::cuda
