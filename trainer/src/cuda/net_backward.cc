// The CUDA replica's backward for a general ModelSpec: the layers in reverse, each a call of the
// CUDA kernels or of cuDNN / cuBLAS, as cpu/net.cc does on the CPU. A layer whose pass runs
// inside another's (NetLayout's fusions) only marks its gradient written.
#include <algorithm>
#include <string>

#include "cuda/cnn_ops.h"
#include "cuda/net.h"
#include "cuda/ops.h"

namespace sweep::trainer::cuda {

float* Net::GradTarget(int j, bool* add) {
  if (j < 0) return nullptr;  // the model's input: no gradient wanted
  char& w = written_[static_cast<size_t>(lay_.gown[static_cast<size_t>(j)])];
  *add = w != 0;
  w = 1;
  return Grad(j);
}

Status Net::NeedGrad(int reader, int j, const float* buf) {
  if (j < 0 || buf != nullptr) return Status::Ok();
  return Status::Internal("cuda: layer " + std::to_string(reader) +
                          "'s backward has no buffer for layer " + std::to_string(j) +
                          "'s gradient");
}

Status Net::BackwardOn(const float* x, int B, bool accumulate, LayerHook* hook) {
  const int L = static_cast<int>(model_.layers.size());
  std::fill(written_.begin(), written_.end(), 0);
  written_[static_cast<size_t>(lay_.gown[static_cast<size_t>(L - 1)])] = 1;  // the loss wrote it
  for (int i = L - 1; i >= 0; --i) {
    const size_t at = static_cast<size_t>(i);
    const Layer& l = model_.layer(i);
    if (l.kind == LayerKind::kFlatten) continue;
    const float* in = l.input < 0 ? x : val_[static_cast<size_t>(l.input)];
    float* d = Grad(i);
    const int64_t n_out = int64_t{B} * l.out_shape.size();
    bool add = false;
    switch (l.kind) {
      case LayerKind::kLinear:
      case LayerKind::kConv:
        SWEEP_RETURN_IF_ERROR(BackwardGemm(i, B, in, accumulate));
        break;
      case LayerKind::kBatchNorm:
        SWEEP_RETURN_IF_ERROR(BackwardNorm(i, B, in, accumulate));
        break;
      case LayerKind::kActivation: {
        // Its linear layer's bias pass applies its mask (lay_.lin_relu).
        if (l.input >= 0 && lay_.lin_relu[static_cast<size_t>(l.input)] == i) break;
        SWEEP_ASSIGN_OR_RETURN(const bool in_norm, ReluInNorm(i, B, true));
        if (in_norm) break;                   // its batch norm's backward takes the ReLU's gradient
        if (lay_.relu_after_pool[at]) break;  // its max pool's backward took the ReLU's gradient
        float* d_in = GradTarget(l.input, &add);
        SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
        // The convolution after it left its gradient in 16 bits (Grad16Left).
        SWEEP_ASSIGN_OR_RETURN(const bool from16, Grad16Left(i, B));
        if (d_in != nullptr) {
          SWEEP_RETURN_IF_ERROR(act_backward(d_in, d, in, val_[at], n_out, l.act, add, stream_,
                                             from16 ? h_dx_.data() : nullptr, half_type_));
        }
        break;
      }
      case LayerKind::kMaxPool:
        SWEEP_RETURN_IF_ERROR(BackwardMaxPool(i, B));
        break;
      case LayerKind::kAvgPool: {
        float* d_in = GradTarget(l.input, &add);
        SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
        if (d_in != nullptr) {
          SWEEP_RETURN_IF_ERROR(avgpool_backward(d_in, d, B, l.in_shape.h, l.in_shape.w,
                                                 l.in_shape.c, l.kernel, l.stride, add, stream_));
        }
        break;
      }
      case LayerKind::kGlobalAvgPool: {
        float* d_in = GradTarget(l.input, &add);
        SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
        if (d_in != nullptr) {
          SWEEP_RETURN_IF_ERROR(global_avgpool_backward(d_in, d, B, l.in_shape.h * l.in_shape.w,
                                                        l.in_shape.c, add, stream_));
        }
        break;
      }
      case LayerKind::kDropout: {
        float* d_in = GradTarget(l.input, &add);
        SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
        if (d_in == nullptr) break;
        if (l.p > 0) SWEEP_RETURN_IF_ERROR(dropout_backward(d, mask_[at].data(), n_out, stream_));
        SWEEP_RETURN_IF_ERROR(copy_or_add(d_in, d, n_out, add, stream_));
        break;
      }
      case LayerKind::kAdd:
        SWEEP_RETURN_IF_ERROR(BackwardAdd(i, B));
        break;
      case LayerKind::kFlatten:
        break;
    }
    if (hook != nullptr && l.has_params()) SWEEP_RETURN_IF_ERROR(hook->LayerDone(l.param_index));
  }
  return Status::Ok();
}

Status Net::BackwardGemm(int i, int B, const float* in, bool accumulate) {
  const size_t at = static_cast<size_t>(i);
  const Layer& l = model_.layer(i);
  const bool conv = l.kind == LayerKind::kConv;
  const int rows = conv ? B * l.out_shape.h * l.out_shape.w : B;
  float* g = grads_.data();
  // With the ReLU reading a linear layer (lay_.lin_relu): the gradient w.r.t. the ReLU's output,
  // masked here into the one w.r.t. this layer's. In bf16 / fp16 the bias's pass writes the
  // 16-bit gradient the GEMMs read (the same bits as a cast of its own).
  float* d = Grad(i);
  const int relu = lay_.lin_relu[at];
  if (relu >= 0) {
    d = Grad(relu);
    if (d == nullptr) return NeedGrad(i, relu, d);
  }
  if (l.bias_at >= 0) {
    SWEEP_RETURN_IF_ERROR(bias_act_backward(
        d, g + l.bias_at, val_[at], relu >= 0 ? val_[static_cast<size_t>(relu)] : val_[at], rows,
        l.out, relu >= 0 ? Activation::kRelu : Activation::kNone, stream_, accumulate,
        half() ? h_d_.data() : nullptr, half_type_, true, bias_scratch_.data()));
  }
  bool add = false;
  float* d_in = GradTarget(l.input, &add);
  // A 16-bit convolution checks below: its input may read the 16 bits itself.
  if (!conv || !half()) SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
  if (half() && l.bias_at < 0) {
    // The batch norm after a convolution may have written its 16-bit gradient already.
    SWEEP_ASSIGN_OR_RETURN(const bool d16_written, ConvFeedsNorm16(i, B, true));
    if (!d16_written) {
      SWEEP_RETURN_IF_ERROR(
          cast_to_half(h_d_.data(), d, int64_t{B} * l.out_shape.size(), half_type_, stream_));
    }
  }
  const uint16_t* in16 = half() ? in16_[static_cast<size_t>(lay_.in16_of[at])].data() : nullptr;
  if (conv) return BackwardConv(i, B, in, in16, d, d_in, add, accumulate);
  const int64_t n_in = int64_t{B} * l.in_shape.size();
  float* dx = d_in == nullptr ? nullptr : add ? dtmp_.data() : d_in;
  if (half()) {
    SWEEP_RETURN_IF_ERROR(matmul_backward_half(
        blas_, dx, g + l.weight, h_d_.data(), in16, params16_.data() + l.weight, B,
        static_cast<int>(l.in_shape.size()), l.out, half_type_, accumulate));
  } else {
    SWEEP_RETURN_IF_ERROR(matmul_backward(blas_, dx, g + l.weight, d, in, params_.data() + l.weight,
                                          B, static_cast<int>(l.in_shape.size()), l.out,
                                          accumulate));
  }
  if (dx != nullptr && add) SWEEP_RETURN_IF_ERROR(copy_or_add(d_in, dx, n_in, true, stream_));
  return Status::Ok();
}

Status Net::BackwardConv(int i, int B, const float* in, const uint16_t* in16, const float* d,
                         float* d_in, bool add, bool accumulate) {
  const Layer& l = model_.layer(i);
  float* g = grads_.data();
  const int64_t n_in = int64_t{B} * l.in_shape.size();
  SWEEP_ASSIGN_OR_RETURN(const bool direct, DirectRuns(i, B, in));
  if (direct) {  // the model's input: no data gradient
    return direct_conv_backward_filter(
        g + l.weight, in, half() ? static_cast<const void*>(h_d_.data()) : d, ConvShapeOf(l, B),
        half(), half_type_, accumulate, direct_scratch_.data(), stream_);
  }
  SWEEP_ASSIGN_OR_RETURN(const CudnnConv* plan, Plan(i, B));
  const int64_t nw = int64_t{l.out} * l.kernel * l.kernel * l.in_shape.c;
  if (half()) {
    // 16-bit gradients, widened into the fp32 ones (added where they accumulate).
    SWEEP_RETURN_IF_ERROR(plan->BackwardFilter(h_dw_.data(), in16, h_d_.data(), workspace_.data()));
    SWEEP_RETURN_IF_ERROR(
        widen_half(g + l.weight, h_dw_.data(), nw, half_type_, accumulate, stream_));
    // Not d_in: a layer reading the 16 bits may have no fp32 gradient (NetLayout).
    if (l.input < 0) return Status::Ok();
    SWEEP_RETURN_IF_ERROR(plan->BackwardData(h_dx_.data(), h_d_.data(), params16_.data() + l.weight,
                                             workspace_.data()));
    // The activation right before (or the batch norm applying it), its only input, reads the
    // 16 bits itself.
    SWEEP_ASSIGN_OR_RETURN(const bool read16, Grad16Left(l.input, B));
    if (read16) return Status::Ok();
    SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
    return widen_half(d_in, h_dx_.data(), n_in, half_type_, add, stream_);
  }
  SWEEP_RETURN_IF_ERROR(
      plan->BackwardFilter(accumulate ? dw_tmp_.data() : g + l.weight, in, d, workspace_.data()));
  if (accumulate) {
    SWEEP_RETURN_IF_ERROR(copy_or_add(g + l.weight, dw_tmp_.data(), nw, true, stream_));
  }
  if (d_in == nullptr) return Status::Ok();
  // A gradient already written by another reader is added to, through dtmp_.
  float* dx = add ? dtmp_.data() : d_in;
  SWEEP_RETURN_IF_ERROR(plan->BackwardData(dx, d, params_.data() + l.weight, workspace_.data()));
  if (add) SWEEP_RETURN_IF_ERROR(copy_or_add(d_in, dx, n_in, true, stream_));
  return Status::Ok();
}

Status Net::BackwardNorm(int i, int B, const float* in, bool accumulate) {
  const size_t at = static_cast<size_t>(i);
  const Layer& l = model_.layer(i);
  const float* p = params_.data();
  float* g = grads_.data();
  float* d = Grad(i);
  bool add = false;
  float* d_in = GradTarget(l.input, &add);
  SWEEP_ASSIGN_OR_RETURN(const CudnnBatchNorm* bn, NormPlan(i, B));
  if (bn == nullptr) {
    // The ReLU's gradient, masked by its output in the pass that sums (or by that output
    // computed again, where only its 16-bit copy was written); the 16-bit arrays of NormHalf
    // read and written in place of fp32 ones.
    const int a = lay_.bn_relu[at];
    const BnHalf h = NormHalf(i);
    if (h.dx != nullptr && add) {
      return Status::Internal("cuda: a 16-bit batch-norm gradient added to another");
    }
    if (h.dx == nullptr) SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
    const float* out = h.out != nullptr ? nullptr : val_[static_cast<size_t>(a >= 0 ? a : i)];
    SWEEP_ASSIGN_OR_RETURN(const bool runs_pool, NormRunsPool(i, B, true));
    BnPool bp;
    if (runs_pool) bp = NormPool(i, B);
    return batchnorm_backward(
        h.dx != nullptr ? nullptr : d_in, g + l.weight, g + l.bias_at, a >= 0 ? Grad(a) : d, in,
        nullptr, out, mean_[at].data(), invstd_[at].data(), p + l.weight,
        int64_t{B} * l.in_shape.h * l.in_shape.w, l.in_shape.c,
        a >= 0 ? Activation::kRelu : Activation::kNone, accumulate, add, bn_scratch_.data(),
        stream_, h, p + l.bias_at, runs_pool ? &bp : nullptr);
  }
  // cuDNN overwrites its outputs: what adds to a gradient goes through scratch first. A first
  // micro-batch's dscale and dbias go straight to the gradients, aligned as the ModelSpec lays
  // parameters out (64 bytes): two copies fewer a layer.
  SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
  const int C = l.in_shape.c;
  float* dscale = accumulate ? bn_tmp_.data() : g + l.weight;
  float* dbias = accumulate ? bn_tmp_.data() + bn_stride_ : g + l.bias_at;
  float* dx = d_in != nullptr && !add ? d_in : dtmp_.data();
  SWEEP_RETURN_IF_ERROR(bn->Backward(dx, dscale, dbias, d, in, p + l.weight, mean_[at].data(),
                                     invstd_[at].data(), workspace_.data()));
  if (accumulate) {
    SWEEP_RETURN_IF_ERROR(copy_or_add(g + l.weight, dscale, C, true, stream_));
    SWEEP_RETURN_IF_ERROR(copy_or_add(g + l.bias_at, dbias, C, true, stream_));
  }
  if (d_in != nullptr && add) {
    SWEEP_RETURN_IF_ERROR(
        copy_or_add(d_in, dtmp_.data(), int64_t{B} * l.in_shape.size(), true, stream_));
  }
  return Status::Ok();
}

Status Net::BackwardMaxPool(int i, int B) {
  const size_t at = static_cast<size_t>(i);
  const Layer& l = model_.layer(i);
  float* d = Grad(i);
  // The batch norm it runs in spreads the gradient itself (BnPool), leaving d_in stale; and
  // where the convolution after left it in 16 bits, applies the ReLU's mask too.
  SWEEP_ASSIGN_OR_RETURN(const bool in_norm, PoolInNorm(i, B, true));
  SWEEP_ASSIGN_OR_RETURN(const bool read16, Grad16Left(i, B));
  int from = l.input;
  if (from >= 0 && lay_.relu_after_pool[static_cast<size_t>(from)]) {
    // The ReLU's gradient on the pooled output, in place, then to the ReLU's input.
    if (!read16) {
      SWEEP_RETURN_IF_ERROR(act_backward(d, d, val_[at], val_[at], int64_t{B} * l.out_shape.size(),
                                         Activation::kRelu, false, stream_));
    }
    from = model_.layer(from).input;
  }
  bool add = false;
  float* d_in = GradTarget(from, &add);
  if (in_norm) return Status::Ok();
  SWEEP_RETURN_IF_ERROR(NeedGrad(i, from, d_in));
  if (d_in == nullptr) return Status::Ok();
  return maxpool_backward(d_in, d, argmax_[at].data(), B, l.in_shape.h, l.in_shape.w, l.in_shape.c,
                          l.kernel, l.stride, add, stream_);
}

Status Net::BackwardAdd(int i, int B) {
  const Layer& l = model_.layer(i);
  SWEEP_ASSIGN_OR_RETURN(const bool in_norm, AddInNorm(i, B, true));
  bool add = false, add2 = false;
  if (in_norm) {  // both batch norms read the pool's gradient (BnPool)
    GradTarget(l.input, &add);
    GradTarget(l.shortcut, &add2);
    return Status::Ok();
  }
  const float* d = Grad(i);
  const int64_t n_out = int64_t{B} * l.out_shape.size();
  float* d_in = GradTarget(l.input, &add);
  SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.input, d_in));
  if (d_in != nullptr) SWEEP_RETURN_IF_ERROR(copy_or_add(d_in, d, n_out, add, stream_));
  float* d_short = GradTarget(l.shortcut, &add2);
  SWEEP_RETURN_IF_ERROR(NeedGrad(i, l.shortcut, d_short));
  if (d_short != nullptr) SWEEP_RETURN_IF_ERROR(copy_or_add(d_short, d, n_out, add2, stream_));
  return Status::Ok();
}

}  // namespace sweep::trainer::cuda
