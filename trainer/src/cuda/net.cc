// The CUDA replica's forward and backward for a general ModelSpec: the layers in order, then
// backward in reverse, each a call of the CUDA kernels or of cuDNN / cuBLAS, as cpu/net.cc
// does on the CPU.
#include "cuda/net.h"

#include <algorithm>
#include <string>

#include "cuda/cnn_ops.h"
#include "cuda/cuda_check.h"
#include "cuda/ops.h"
#include "rng.h"

namespace sweep::trainer::cuda {

Net::Net(const ModelSpec& model, int max_batch, Precision precision, float label_smoothing,
         bool tf32, cudaStream_t stream, cublasHandle_t blas, cudnnHandle_t dnn,
         const NetOptions& options)
    : model_(model),
      max_batch_(max_batch),
      precision_(precision),
      half_type_(precision == Precision::kFp16 ? cpu::HalfType::kFp16 : cpu::HalfType::kBf16),
      label_smoothing_(label_smoothing),
      tf32_(tf32),
      options_(options),
      stream_(stream),
      blas_(blas),
      dnn_(dnn) {}

Result<std::unique_ptr<Net>> Net::Create(const ModelSpec& model, int max_batch, Precision precision,
                                         float label_smoothing, bool tf32, cudaStream_t stream,
                                         cublasHandle_t blas, cudnnHandle_t dnn,
                                         const NetOptions& options) {
  if (max_batch < 1) return Status::InvalidArgument("cuda: max_batch must be >= 1");
  std::unique_ptr<Net> net(
      new Net(model, max_batch, precision, label_smoothing, tf32, stream, blas, dnn, options));
  SWEEP_RETURN_IF_ERROR(net->Allocate());
  return net;
}

Status Net::Allocate() {
  const size_t n = model_.layers.size();
  const int L = static_cast<int>(n);
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(model_.num_params, &params_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(model_.num_params, &grads_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(model_.num_buffers, &stats_));
  std::vector<float> initial(static_cast<size_t>(model_.num_buffers));
  InitStats(model_, initial.data());
  if (!initial.empty()) {
    CUDA_CHECK(cudaMemcpy(stats_.data(), initial.data(), initial.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
  }
  lay_ = NetLayout::Make(model_, max_batch_, precision_, options_);
  direct_choice_.assign(n, -1);
  direct_timed_.assign(n, std::string());
  in16_ready_.assign(n, 0);
  out_.resize(n);
  gbuf_.resize(n);
  mask_.resize(n);
  mean_.resize(n);
  invstd_.resize(n);
  argmax_.resize(n);
  in16_.resize(n);
  conv16_.resize(n);
  plans_.resize(n);
  val_.assign(n, nullptr);
  written_.assign(n, 0);
  // A size of 0 leaves a buffer empty (data() null): nothing reads or writes it.
  for (size_t at = 0; at < n; ++at) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.out[at], &out_[at]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.grad[at], &gbuf_[at]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.mask[at], &mask_[at]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<int32_t>::Make(lay_.argmax[at], &argmax_[at]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.norm[at], &mean_[at]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.norm[at], &invstd_[at]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(lay_.in16[at], &in16_[at]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(lay_.conv16[at], &conv16_[at]));
  }
  if (half()) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(model_.num_params, &params16_));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(lay_.h_out, &h_out_));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(lay_.h_d, &h_d_));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(lay_.h_dx, &h_dx_));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint16_t>::Make(lay_.h_dw, &h_dw_));
  }
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.dtmp, &dtmp_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.dw_tmp, &dw_tmp_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.bias_scratch, &bias_scratch_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint8_t>::Make(lay_.bn_scratch, &bn_scratch_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint8_t>::Make(lay_.direct_scratch, &direct_scratch_));
  // dscale then dbias, the second at a 16-byte boundary as cuDNN's tensors are declared.
  bn_stride_ = lay_.bn_stride;
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(2 * bn_stride_, &bn_tmp_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(max_batch_, &losses_));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<double>::Make(1, &loss_));
  for (int s = 0; s < kInputSlots; ++s) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(lay_.input, &in_x_[s]));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<int32_t>::Make(max_batch_, &in_y_[s]));
  }
  // The convolutions' and batch norms' plans for full batches now, so that their workspace is
  // counted before training (a smaller batch, such as an epoch's last, gets its plans at its
  // first use).
  for (int i = 0; i < L; ++i) {
    const LayerKind kind = model_.layer(i).kind;
    if (kind == LayerKind::kConv &&
        (!lay_.direct_conv[static_cast<size_t>(i)] || options_.cudnn_autotune)) {
      SWEEP_RETURN_IF_ERROR(Plan(i, max_batch_).status());
    }
    if (kind == LayerKind::kBatchNorm) SWEEP_RETURN_IF_ERROR(NormPlan(i, max_batch_).status());
  }
  return Status::Ok();
}

std::string Net::Describe() const {
  std::string out;
  for (size_t i = 0; i < model_.layers.size(); ++i) {
    const std::string layer = "layer " + std::to_string(i);
    const bool direct = lay_.direct_conv[i] && direct_choice_[i] != 0;
    if (direct) {
      const int c = model_.layers[i].in_shape.c;
      out += layer + " convolution: ours, direct (" + std::to_string(c) +
             (c == 1 ? " input channel)" : " input channels)") + direct_timed_[i] + "\n";
    } else if (auto it = plans_[i].find(max_batch_);
               it != plans_[i].end() && it->second != nullptr) {
      out += layer + " convolution: " + it->second->Describe() + direct_timed_[i] + "\n";
    }
    if (model_.layers[i].kind != LayerKind::kBatchNorm) continue;
    auto it = norm_plans_.find(NormKeyOf(static_cast<int>(i), max_batch_));
    if (OursWithoutAsking(static_cast<int>(i)) || it == norm_plans_.end()) {
      out += layer + " batch norm: ours" +
             (lay_.bn16[i] ? std::string(", 16-bit input from its convolution") : std::string()) +
             "\n";
      continue;
    }
    const CudnnBatchNorm* cudnn = CudnnNormAtMaxBatch(static_cast<int>(i));
    const NormChoice* choice = ChoiceOf(static_cast<int>(i), max_batch_);
    out += layer + " batch norm: " +
           (cudnn != nullptr ? "cuDNN " + cudnn->Describe() : std::string("ours")) +
           (choice != nullptr ? choice->timed : std::string()) + "\n";
  }
  return out;
}

int Net::batch_norms() const {
  int n = 0;
  for (const Layer& l : model_.layers) n += l.kind == LayerKind::kBatchNorm;
  return n;
}

int Net::batch_norms_through_cudnn() const {
  int n = 0;
  for (size_t i = 0; i < model_.layers.size(); ++i) {
    if (model_.layers[i].kind != LayerKind::kBatchNorm) continue;
    n += CudnnNormAtMaxBatch(static_cast<int>(i)) != nullptr;
  }
  return n;
}

Status Net::Forward(const float* x, int B, bool train, uint64_t dropout_key, int64_t first_row) {
  if (B < 1 || B > max_batch_) {
    return Status::Internal("cuda: a batch of " + std::to_string(B) + " rows; the net holds " +
                            std::to_string(max_batch_));
  }
  if (half() && !half_params_fresh_) {
    SWEEP_RETURN_IF_ERROR(
        cast_to_half(params16_.data(), params_.data(), model_.num_params, half_type_, stream_));
    half_params_fresh_ = true;
  }
  std::fill(in16_ready_.begin(), in16_ready_.end(), 0);  // none from a forward left unfinished
  const int L = static_cast<int>(model_.layers.size());
  for (int i = 0; i < L; ++i) {
    const size_t at = static_cast<size_t>(i);
    const Layer& l = model_.layer(i);
    const float* in = l.input < 0 ? x : val_[static_cast<size_t>(l.input)];
    const int64_t n_out = int64_t{B} * l.out_shape.size();
    // An activation's 16-bit copy for the GEMM layer that alone reads it, in its own pass.
    uint16_t* copy16 = nullptr;
    if (const int j = lay_.copy16_for[at]; j >= 0) copy16 = in16_[static_cast<size_t>(j)].data();
    float* out = out_[at].data();
    val_[at] = out;
    switch (l.kind) {
      case LayerKind::kLinear:
        SWEEP_RETURN_IF_ERROR(ForwardLinear(i, B, in, out));
        break;
      case LayerKind::kConv:
        SWEEP_RETURN_IF_ERROR(ForwardConv(i, B, train, in, out));
        break;
      case LayerKind::kBatchNorm:
        SWEEP_RETURN_IF_ERROR(ForwardNorm(i, B, train, in));
        break;
      case LayerKind::kActivation: {
        if (l.input >= 0 && lay_.lin_relu[static_cast<size_t>(l.input)] == i) break;  // its linear
        SWEEP_ASSIGN_OR_RETURN(const bool in_norm, ReluInNorm(i, B, train));
        if (in_norm) break;  // the batch norm before it wrote its output
        if (lay_.relu_after_pool[at]) {
          val_[at] = in;  // the max pool reading it applies the ReLU
          break;
        }
        SWEEP_RETURN_IF_ERROR(act_forward(out, in, n_out, l.act, stream_, copy16, half_type_));
        if (copy16 != nullptr) Copy16Made(i);
        break;
      }
      case LayerKind::kMaxPool: {
        SWEEP_ASSIGN_OR_RETURN(const bool in_norm, PoolInNorm(i, B, train));
        if (in_norm) break;  // the batch norm before it gave its output
        SWEEP_RETURN_IF_ERROR(maxpool_forward(out, argmax_[at].data(), in, B, l.in_shape.h,
                                              l.in_shape.w, l.in_shape.c, l.kernel, l.stride,
                                              stream_));
        if (l.input >= 0 && lay_.relu_after_pool[static_cast<size_t>(l.input)]) {
          SWEEP_RETURN_IF_ERROR(
              act_forward(out, out, n_out, Activation::kRelu, stream_, copy16, half_type_));
          if (copy16 != nullptr) Copy16Made(i);
        }
        break;
      }
      case LayerKind::kAvgPool:
        SWEEP_RETURN_IF_ERROR(avgpool_forward(out, in, B, l.in_shape.h, l.in_shape.w, l.in_shape.c,
                                              l.kernel, l.stride, stream_));
        break;
      case LayerKind::kGlobalAvgPool:
        SWEEP_RETURN_IF_ERROR(
            global_avgpool_forward(out, in, B, l.in_shape.h * l.in_shape.w, l.in_shape.c, stream_));
        break;
      case LayerKind::kFlatten:
        val_[at] = in;
        break;
      case LayerKind::kDropout:
        if (train && l.p > 0) {
          const int C = static_cast<int>(l.in_shape.size());
          // Each layer draws its own mask, as on the CPU: the key mixes in the layer.
          SWEEP_RETURN_IF_ERROR(dropout_forward(
              out, mask_[at].data(), in, B, C, l.p,
              MixSeed(dropout_key, static_cast<uint64_t>(l.dropout_index)), first_row, stream_,
              nullptr, HalfType::kBf16, step_, static_cast<uint64_t>(l.dropout_index)));
        } else {
          val_[at] = in;
        }
        break;
      case LayerKind::kAdd:
        SWEEP_RETURN_IF_ERROR(ForwardAdd(i, B, train, x, in, out));
        break;
    }
  }
  return Status::Ok();
}

Result<uint16_t*> Net::GemmInput16(int i, int B, const float* in) {
  const size_t at = static_cast<size_t>(i);
  const int src = lay_.in16_of[at];
  uint16_t* in16 = in16_[static_cast<size_t>(src)].data();
  // A direct convolution alone reading the input needs no copy (NetLayout gives none, or one for
  // cuDNN's side where autotuning may choose it).
  if (in16 == nullptr && !lay_.direct_conv[at]) {
    return Status::Internal("cuda: layer " + std::to_string(i) +
                            " has no 16-bit copy of its input");
  }
  bool wanted = in16 != nullptr;
  if (wanted && lay_.direct_conv[at] && !lay_.in16_shared[at]) {
    SWEEP_ASSIGN_OR_RETURN(const bool direct, DirectRuns(i, B, in));
    wanted = !direct;
  }
  if (src == i && wanted) {  // else the GEMM before it that reads it made it
    if (!in16_ready_[at]) {
      const int64_t n_in = int64_t{B} * model_.layer(i).in_shape.size();
      SWEEP_RETURN_IF_ERROR(cast_to_half(in16, in, n_in, half_type_, stream_));
    }
    in16_ready_[at] = 0;
  }
  return in16;
}

Status Net::ForwardLinear(int i, int B, const float* in, float* out) {
  const size_t at = static_cast<size_t>(i);
  const Layer& l = model_.layer(i);
  const float* p = params_.data();
  const int C = static_cast<int>(l.in_shape.size());
  if (half()) {
    SWEEP_ASSIGN_OR_RETURN(const uint16_t* in16, GemmInput16(i, B, in));
    SWEEP_RETURN_IF_ERROR(matmul_forward_half(blas_, out, in16, params16_.data() + l.weight, B, C,
                                              l.out, half_type_));
  } else {
    SWEEP_RETURN_IF_ERROR(matmul_forward(blas_, out, in, p + l.weight, B, C, l.out));
  }
  if (const int a = lay_.lin_relu[at]; a >= 0) {
    // The ReLU reading it, in the bias's pass, with its GEMM reader's 16-bit input.
    float* relu_out = out_[static_cast<size_t>(a)].data();
    const int j = lay_.copy16_for[static_cast<size_t>(a)];
    uint16_t* relu16 = j >= 0 ? in16_[static_cast<size_t>(j)].data() : nullptr;
    SWEEP_RETURN_IF_ERROR(bias_act_forward(relu_out, out, p + l.bias_at, B, l.out,
                                           Activation::kRelu, stream_, relu16, half_type_));
    val_[static_cast<size_t>(a)] = relu_out;
    if (relu16 != nullptr) Copy16Made(a);
  } else if (l.bias_at >= 0) {
    SWEEP_RETURN_IF_ERROR(
        bias_act_forward(out, out, p + l.bias_at, B, l.out, Activation::kNone, stream_));
  }
  return Status::Ok();
}

Status Net::ForwardConv(int i, int B, bool train, const float* in, float* out) {
  const size_t at = static_cast<size_t>(i);
  const Layer& l = model_.layer(i);
  // bf16 / fp16: the input as 16 bits, kept for the weight gradient.
  uint16_t* in16 = nullptr;
  if (half()) {
    SWEEP_ASSIGN_OR_RETURN(in16, GemmInput16(i, B, in));
  }
  const uint16_t* w16 = half() ? params16_.data() + l.weight : nullptr;  // none in fp32
  SWEEP_ASSIGN_OR_RETURN(const bool to_norm16, ConvFeedsNorm16(i, B, train));
  if (to_norm16) {  // the batch norm after it reads the 16 bits (no bias: lay_.bn16)
    return ConvForward(i, B, conv16_[at].data(), in, in16, w16);
  }
  if (half()) {
    SWEEP_RETURN_IF_ERROR(ConvForward(i, B, h_out_.data(), in, in16, w16));
    SWEEP_RETURN_IF_ERROR(widen_half(out, h_out_.data(), int64_t{B} * l.out_shape.size(),
                                     half_type_, false, stream_));
  } else {
    SWEEP_RETURN_IF_ERROR(ConvForward(i, B, out, in, nullptr, params_.data() + l.weight));
  }
  if (l.bias_at >= 0) {
    const int rows = B * l.out_shape.h * l.out_shape.w;
    SWEEP_RETURN_IF_ERROR(bias_act_forward(out, out, params_.data() + l.bias_at, rows, l.out,
                                           Activation::kNone, stream_));
  }
  return Status::Ok();
}

Status Net::ForwardNorm(int i, int B, bool train, const float* in) {
  const size_t at = static_cast<size_t>(i);
  const Layer& l = model_.layer(i);
  const float* p = params_.data();
  const int C = l.in_shape.c;
  const int64_t N = int64_t{B} * l.in_shape.h * l.in_shape.w;
  float* rm = stats_.data() + l.stats;
  SWEEP_ASSIGN_OR_RETURN(const bool ours, NormOurs(i, B, train));
  if (!ours) {
    float* mean = mean_[at].data();
    float* invstd = invstd_[at].data();
    SWEEP_ASSIGN_OR_RETURN(const CudnnBatchNorm* bn, NormPlan(i, B));
    SWEEP_RETURN_IF_ERROR(bn->Forward(out_[at].data(), mean, invstd, in, p + l.weight,
                                      p + l.bias_at, workspace_.data()));
    return batchnorm_running_update(rm, rm + C, mean, invstd, N, C, l.momentum, l.eps, stream_);
  }
  // Our kernels apply the ReLU reading this layer too, writing its output instead; and where a
  // GEMM alone reads that, its 16-bit input only (the fp32 one is left stale).
  const int a = lay_.bn_relu[at];
  const int o = a >= 0 ? a : i;
  float* dst = out_[static_cast<size_t>(o)].data();
  val_[static_cast<size_t>(o)] = dst;
  const Activation act = a >= 0 ? Activation::kRelu : Activation::kNone;
  const BnHalf h = NormHalf(i);
  if (h.out != nullptr) Copy16Made(o);
  float* dst32 = h.out != nullptr ? nullptr : dst;
  // Or the max pool reading it gives its output here instead (and its 16-bit copy); or, at a
  // residual block's end, the add after both batch norms does, and this one gives its
  // statistics only.
  SWEEP_ASSIGN_OR_RETURN(const bool runs_pool, NormRunsPool(i, B, train));
  if (runs_pool && lay_.norm_pair[at] >= 0) {
    if (!train) return Status::Ok();
    return batchnorm_forward(nullptr, nullptr, mean_[at].data(), invstd_[at].data(), in,
                             p + l.weight, p + l.bias_at, rm, rm + C, N, C, l.momentum, l.eps, act,
                             bn_scratch_.data(), stream_, h);
  }
  BnPool bp;
  if (runs_pool) {
    bp = NormPool(i, B);
    val_[static_cast<size_t>(lay_.norm_pool[at])] = bp.out;
    Copy16Made(lay_.norm_pool[at]);
  }
  if (train) {
    return batchnorm_forward(dst32, nullptr, mean_[at].data(), invstd_[at].data(), in, p + l.weight,
                             p + l.bias_at, rm, rm + C, N, C, l.momentum, l.eps, act,
                             bn_scratch_.data(), stream_, h, runs_pool ? &bp : nullptr);
  }
  return batchnorm_eval(dst32, in, p + l.weight, p + l.bias_at, rm, rm + C, N, C, l.eps, act,
                        stream_, h, runs_pool ? &bp : nullptr);
}

Status Net::ForwardAdd(int i, int B, bool train, const float* x, const float* in, float* out) {
  const Layer& l = model_.layer(i);
  SWEEP_ASSIGN_OR_RETURN(const bool in_norm, AddInNorm(i, B, train));
  if (in_norm) {  // both batch norms' apply passes, the sum and the pool after it
    const int pool = lay_.add_pool[static_cast<size_t>(i)];
    const BnPool bp = NormPool(l.input, B);
    val_[static_cast<size_t>(pool)] = bp.out;
    Copy16Made(pool);
    const Layer& bn = model_.layer(l.input);
    return batchnorm_add_pool(NormSide(l.input, x, train), NormSide(l.shortcut, x, train),
                              int64_t{B} * bn.in_shape.h * bn.in_shape.w, bn.in_shape.c, bp,
                              half_type_, stream_);
  }
  const float* other = l.shortcut < 0 ? x : val_[static_cast<size_t>(l.shortcut)];
  return add_forward(out, in, other, int64_t{B} * l.out_shape.size(), stream_);
}

Status Net::ForwardLossOn(const float* x, const int32_t* y, int B, float dloss_scale,
                          uint64_t dropout_key, int64_t first_row, bool accumulate_loss,
                          const float* loss_scale) {
  SWEEP_RETURN_IF_ERROR(Forward(x, B, /*train=*/true, dropout_key, first_row));
  const int last = static_cast<int>(model_.layers.size()) - 1;
  SWEEP_RETURN_IF_ERROR(softmax_xent_forward_backward(Grad(last), losses_.data(), val_.back(), y, B,
                                                      model_.classes, dloss_scale, stream_,
                                                      label_smoothing_));
  if (loss_scale != nullptr) {
    SWEEP_RETURN_IF_ERROR(scale_by(Grad(last), int64_t{B} * model_.classes, loss_scale, stream_));
  }
  return loss_sum(loss_.data(), losses_.data(), B, stream_, accumulate_loss);
}

Status Net::EvaluateOn(const float* x, const int32_t* y, int B, double* loss_total,
                       unsigned long long* correct) {
  SWEEP_RETURN_IF_ERROR(Forward(x, B, /*train=*/false, 0, 0));
  SWEEP_RETURN_IF_ERROR(softmax_xent_forward_backward(nullptr, losses_.data(), val_.back(), y, B,
                                                      model_.classes, 1.0f, stream_));
  SWEEP_RETURN_IF_ERROR(loss_sum(loss_total, losses_.data(), B, stream_, /*accumulate=*/true));
  return accuracy(correct, val_.back(), y, B, model_.classes, stream_);
}

Status Net::ForwardLoss(int slot, int B, float dloss_scale, const float* loss_scale,
                        uint64_t dropout_key, int64_t first_row, bool accumulate_loss) {
  return ForwardLossOn(x(slot), y(slot), B, dloss_scale, dropout_key, first_row, accumulate_loss,
                       loss_scale);
}

Status Net::Backward(int slot, int B, bool accumulate, LayerHook* hook) {
  return BackwardOn(x(slot), B, accumulate, hook);
}

Status Net::EvaluateSlot(int B, double* loss_total, unsigned long long* correct) {
  if (B < 1 || B > max_batch_) {
    return Status::Internal("cuda: an evaluation batch of " + std::to_string(B) + " rows");
  }
  return EvaluateOn(x(0), y(0), B, loss_total, correct);
}

}  // namespace sweep::trainer::cuda
