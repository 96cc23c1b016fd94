// Which implementation runs each layer of the CUDA replica's net: cuDNN's plans for its
// convolutions and batch norms, whether our batch norm runs (with the ReLU, pool or residual
// add it takes in), whether the first convolution runs our direct kernels, and under
// cudnn_autotune the timing that decides. net.cc runs the passes these choices name.
#include <cstdio>
#include <string>
#include <utility>

#include "cuda/cnn_ops.h"
#include "cuda/cuda_check.h"
#include "cuda/net.h"
#include "cuda/ops.h"
#include "cuda/pass_timer.h"

namespace sweep::trainer::cuda {

bool Net::OursWithoutAsking(int i) const {
  // The layout's rule: the buffers it leaves out rely on it.
  return lay_.sure_ours[static_cast<size_t>(i)] != 0;
}

const CudnnBatchNorm* Net::CudnnNormAtMaxBatch(int i) const {
  if (OursWithoutAsking(i)) return nullptr;  // another layer of its shape may run cuDNN's
  auto it = norm_plans_.find(NormKeyOf(i, max_batch_));
  if (it == norm_plans_.end() || it->second == nullptr) return nullptr;
  const NormChoice* choice = ChoiceOf(i, max_batch_);
  return choice != nullptr && choice->ours ? nullptr : it->second.get();
}

bool Net::NormTimes(int i, double* cudnn, double* ours, bool* ours_runs) const {
  const NormChoice* choice = ChoiceOf(i, max_batch_);
  if (choice == nullptr || choice->ours_ms < 0) return false;
  *cudnn = choice->cudnn_ms;
  *ours = choice->ours_ms;
  *ours_runs = choice->ours;
  return true;
}

const Net::NormChoice* Net::ChoiceOf(int i, int B) const {
  auto it = norm_choice_.find({NormKeyOf(i, B), NormFusions(i)});
  return it == norm_choice_.end() ? nullptr : &it->second;
}

Result<bool> Net::Grad16Left(int a, int B) {
  if (a < 0 || !lay_.grad16[static_cast<size_t>(a)]) return false;
  if (model_.layer(a).kind == LayerKind::kMaxPool) return PoolInNorm(a, B, true);
  SWEEP_ASSIGN_OR_RETURN(const bool in_norm, ReluInNorm(a, B, true));
  // A batch norm right before reads h_dx_ next; one further back would find it overwritten.
  return !in_norm || model_.layer(a).input == a - 1;
}

Result<bool> Net::NormOurs(int i, int B, bool train) {
  if (!train) return true;
  SWEEP_ASSIGN_OR_RETURN(const CudnnBatchNorm* bn, NormPlan(i, B));
  return bn == nullptr;
}

Result<bool> Net::ReluInNorm(int a, int B, bool train) {
  const int i = model_.layer(a).input;
  if (i < 0 || lay_.bn_relu[static_cast<size_t>(i)] != a) return false;
  return NormOurs(i, B, train);
}

Result<bool> Net::PoolInNorm(int p, int B, bool train) {
  int i = model_.layer(p).input;
  if (i >= 0 && lay_.relu_after_pool[static_cast<size_t>(i)]) i = model_.layer(i).input;
  if (i >= 0 && lay_.add_pool[static_cast<size_t>(i)] == p) return AddInNorm(i, B, train);
  if (i < 0 || lay_.norm_pool[static_cast<size_t>(i)] != p) return false;
  return NormOurs(i, B, train);
}

Result<bool> Net::AddInNorm(int j, int B, bool train) {
  if (lay_.add_pool[static_cast<size_t>(j)] < 0) return false;
  SWEEP_ASSIGN_OR_RETURN(const bool a, NormOurs(model_.layer(j).input, B, train));
  SWEEP_ASSIGN_OR_RETURN(const bool b, NormOurs(model_.layer(j).shortcut, B, train));
  return a && b;
}

Result<bool> Net::NormRunsPool(int i, int B, bool train) {
  const int p = lay_.norm_pool[static_cast<size_t>(i)];
  if (p < 0) return false;
  return PoolInNorm(p, B, train);
}

void Net::Copy16Made(int i) {
  if (const int j = lay_.copy16_for[static_cast<size_t>(i)]; j >= 0) {
    in16_ready_[static_cast<size_t>(j)] = 1;
  }
}

BnSide Net::NormSide(int i, const float* x, bool train) {
  const Layer& l = model_.layer(i);
  const size_t at = static_cast<size_t>(i);
  BnSide side;
  side.x = l.input < 0 ? x : val_[static_cast<size_t>(l.input)];
  side.x16 = NormHalf(i).x;
  side.gamma = params_.data() + l.weight;
  side.beta = params_.data() + l.bias_at;
  side.eps = l.eps;
  float* rm = stats_.data() + l.stats;
  if (train) {
    side.mean = mean_[at].data();
    side.invstd = invstd_[at].data();
  } else {
    side.mean = rm;
    side.running_var = rm + l.in_shape.c;
  }
  return side;
}

BnPool Net::NormPool(int i, int B) {
  BnPool bp;
  const int p = lay_.norm_pool[static_cast<size_t>(i)];
  const Layer& pool = model_.layer(p);
  const size_t at = static_cast<size_t>(p);
  bp.out = out_[at].data();
  if (const int j = lay_.copy16_for[at]; j >= 0) bp.out16 = in16_[static_cast<size_t>(j)].data();
  bp.argmax = argmax_[at].data();
  bp.dout = Grad(p);
  if (lay_.grad16[at]) bp.dout16 = h_dx_.data();
  bp.B = B;
  bp.H = pool.in_shape.h;
  bp.W = pool.in_shape.w;
  bp.K = pool.kernel;
  bp.stride = pool.stride;
  // Through the ReLU that runs after the pool.
  bp.relu = pool.input >= 0 && lay_.relu_after_pool[static_cast<size_t>(pool.input)];
  return bp;
}

Result<bool> Net::ConvFeedsNorm16(int i, int B, bool train) {
  const int bn = i + 1;
  if (bn >= static_cast<int>(model_.layers.size()) || !lay_.bn16[static_cast<size_t>(bn)]) {
    return false;
  }
  return NormOurs(bn, B, train);
}

int Net::NormFusions(int i) const {
  const size_t at = static_cast<size_t>(i);
  const int a = lay_.bn_relu[at];
  const int o = a >= 0 ? a : i;
  return (a >= 0 ? 1 : 0) | (lay_.bn16[at] ? 2 : 0) |
         (lay_.copy16_for[static_cast<size_t>(o)] >= 0 ? 4 : 0) |
         (a == i + 1 && lay_.grad16[static_cast<size_t>(a)] ? 8 : 0) |
         (lay_.norm_pool[at] >= 0 ? 16 : 0) |
         (lay_.norm_pool[at] >= 0 && lay_.grad16[static_cast<size_t>(lay_.norm_pool[at])] ? 32
                                                                                          : 0) |
         (lay_.norm_pair[at] >= 0 ? 64 : 0);
}

BnHalf Net::NormHalf(int i) {
  BnHalf h;
  if (!half()) return h;
  h.type = half_type_;
  const size_t at = static_cast<size_t>(i);
  const int a = lay_.bn_relu[at];
  const int o = a >= 0 ? a : i;
  if (lay_.bn16[at]) {
    h.x = conv16_[at - 1].data();
    h.dx = h_d_.data();
  }
  if (const int j = lay_.copy16_for[static_cast<size_t>(o)]; j >= 0) {
    h.out = in16_[static_cast<size_t>(j)].data();
  }
  if (a == i + 1 && lay_.grad16[static_cast<size_t>(a)]) h.d = h_dx_.data();
  return h;
}

Net::NormKey Net::NormKeyOf(int i, int B) const {
  const Layer& l = model_.layer(i);
  return {int64_t{B} * l.in_shape.h * l.in_shape.w, l.in_shape.c, l.eps, l.momentum};
}

// Layers of one shape share a plan: cuDNN may compile a batch-norm engine's kernels for each.
Result<const CudnnBatchNorm*> Net::NormPlan(int i, int B) {
  // In bf16 / fp16 after a convolution, ours without asking cuDNN unless both are timed: ours
  // then moves 16-bit arrays only, where cuDNN's chain adds a widening pass, a cast pass and
  // fp32 reads and writes, about four times the bytes.
  if (OursWithoutAsking(i)) {
    if (bn_note_.empty()) {
      bn_note_ = "layer " + std::to_string(i) +
                 (options_.ours_norm_only ? ": ours asked for"
                                          : ": ours reads its convolution's 16-bit output");
    }
    return nullptr;
  }
  const NormKey key = NormKeyOf(i, B);
  auto it = norm_plans_.find(key);
  if (it == norm_plans_.end()) {
    const auto [N, C, eps, momentum] = key;
    std::string none;
    Result<std::unique_ptr<CudnnBatchNorm>> made =
        CudnnBatchNorm::Create(dnn_, N, C, eps, momentum, &none);
    // A graph cuDNN refuses to build (a version without batch norm in its graph API) leaves the
    // layer to our kernels, as no engine does.
    if (!made.ok()) none = made.status().message();
    it = norm_plans_.emplace(key, made.ok() ? std::move(made).value() : nullptr).first;
    if (it->second == nullptr) {
      if (bn_note_.empty()) bn_note_ = "layer " + std::to_string(i) + ": " + none;
    } else {
      SWEEP_RETURN_IF_ERROR(EnsureWorkspace(it->second->workspace_bytes(), i, "batch norm", B));
    }
  }
  const CudnnBatchNorm* plan = it->second.get();
  if (plan == nullptr || !options_.cudnn_autotune) return plan;
  // As for the convolutions, the faster of the two, timed on this GPU at this shape, with the
  // ReLU ours would fuse. Timing waits on the stream, which a graph capture forbids: a shape
  // first met there keeps cuDNN's (each batch size's first steps run launched, so none is).
  const std::pair<NormKey, int> which{key, NormFusions(i)};
  auto choice = norm_choice_.find(which);
  if (choice == norm_choice_.end()) {
    NormChoice made;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
    double cudnn = 0, ours = -1;
    if (capturing == cudaStreamCaptureStatusNone) {
      SWEEP_RETURN_IF_ERROR(TimeNorm(i, B, *plan, &cudnn, &ours));
    }
    if (ours >= 0) {
      char times[96];
      std::snprintf(times, sizeof(times), " (timed: cuDNN %.3f ms, ours %.3f ms)", cudnn, ours);
      made.timed = times;
      made.ours = ours < cudnn;
      made.cudnn_ms = cudnn;
      made.ours_ms = ours;
    } else if (capturing != cudaStreamCaptureStatusNone) {
      made.timed = " (not timed: first met in a graph capture)";
    }
    choice = norm_choice_.emplace(which, std::move(made)).first;
  }
  return choice->second.ours ? nullptr : plan;
}

Status Net::TimeNorm(int i, int B, const CudnnBatchNorm& bn, double* cudnn, double* ours) {
  const Layer& l = model_.layer(i);
  *cudnn = *ours = -1;
  if (l.input < 0 || out_[static_cast<size_t>(l.input)].data() == nullptr) return Status::Ok();
  const size_t at = static_cast<size_t>(i);
  const int C = l.in_shape.c;
  const int64_t N = int64_t{B} * l.in_shape.h * l.in_shape.w;
  float* x = out_[static_cast<size_t>(l.input)].data();
  float* y = out_[at].data();
  const float* gamma = params_.data() + l.weight;
  const float* beta = params_.data() + l.bias_at;
  float* mean = mean_[at].data();
  float* invstd = invstd_[at].data();
  float* dscale = bn_tmp_.data();
  // A ReLU that ours would apply in its passes costs cuDNN two passes of their own; the 16-bit
  // arrays ours reads and writes cost it a widening or cast pass each.
  const int a = lay_.bn_relu[at];
  float* relu_out = a >= 0 ? out_[static_cast<size_t>(a)].data() : nullptr;
  float* relu_grad = a >= 0 ? Grad(a) : nullptr;
  const BnHalf h = NormHalf(i);
  // A max pool that ours would run in its passes costs cuDNN the pool's own two passes.
  const int pool = lay_.norm_pool[at];
  BnPool bp;
  if (pool >= 0) bp = NormPool(i, B);
  auto cudnn_pass = [&]() -> Status {
    if (h.x != nullptr) SWEEP_RETURN_IF_ERROR(widen_half(x, h.x, N * C, h.type, false, stream_));
    SWEEP_RETURN_IF_ERROR(bn.Forward(y, mean, invstd, x, gamma, beta, workspace_.data()));
    // The running statistics, as the net moves them after cuDNN's pass (into scratch here).
    SWEEP_RETURN_IF_ERROR(batchnorm_running_update(dscale, dscale + bn_stride_, mean, invstd, N, C,
                                                   l.momentum, l.eps, stream_));
    if (a >= 0) {
      SWEEP_RETURN_IF_ERROR(
          act_forward(relu_out, y, N * C, Activation::kRelu, stream_, h.out, h.type));
      SWEEP_RETURN_IF_ERROR(act_backward(Grad(i), relu_grad, y, relu_out, N * C, Activation::kRelu,
                                         false, stream_, h.d, h.type));
    } else if (h.out != nullptr) {
      SWEEP_RETURN_IF_ERROR(cast_to_half(h.out, y, N * C, h.type, stream_));
    }
    if (pool >= 0) {
      const Layer& pl = model_.layer(pool);
      SWEEP_RETURN_IF_ERROR(maxpool_forward(bp.out, bp.argmax, y, B, pl.in_shape.h, pl.in_shape.w,
                                            C, pl.kernel, pl.stride, stream_));
      const int64_t pooled = int64_t{B} * pl.out_shape.size();
      if (bp.relu) {  // the ReLU after the pool, with its 16-bit copy
        SWEEP_RETURN_IF_ERROR(
            act_forward(bp.out, bp.out, pooled, Activation::kRelu, stream_, bp.out16, h.type));
      }
      if (bp.dout16 != nullptr) {  // the pool's gradient widened, and its ReLU's mask
        float* dp = Grad(pool);
        SWEEP_RETURN_IF_ERROR(widen_half(dp, bp.dout16, pooled, h.type, false, stream_));
        if (bp.relu) {
          SWEEP_RETURN_IF_ERROR(
              act_backward(dp, dp, bp.out, bp.out, pooled, Activation::kRelu, false, stream_));
        }
      }
      SWEEP_RETURN_IF_ERROR(maxpool_backward(Grad(i), bp.dout, bp.argmax, B, pl.in_shape.h,
                                             pl.in_shape.w, C, pl.kernel, pl.stride, false,
                                             stream_));
    }
    SWEEP_RETURN_IF_ERROR(bn.Backward(dtmp_.data(), dscale, dscale + bn_stride_, Grad(i), x, gamma,
                                      mean, invstd, workspace_.data()));
    if (h.dx != nullptr) {
      SWEEP_RETURN_IF_ERROR(cast_to_half(h.dx, dtmp_.data(), N * C, h.type, stream_));
    }
    return Status::Ok();
  };
  auto our_pass = [&]() -> Status {
    const Activation act = a >= 0 ? Activation::kRelu : Activation::kNone;
    float* dst = h.out != nullptr ? nullptr : a >= 0 ? relu_out : y;
    const BnPool* with_pool = pool >= 0 ? &bp : nullptr;
    SWEEP_RETURN_IF_ERROR(batchnorm_forward(dst, nullptr, mean, invstd, x, gamma, beta, nullptr,
                                            nullptr, N, C, l.momentum, l.eps, act,
                                            bn_scratch_.data(), stream_, h, with_pool));
    return batchnorm_backward(h.dx != nullptr ? nullptr : dtmp_.data(), dscale, dscale + bn_stride_,
                              a >= 0 ? relu_grad : Grad(i), x, nullptr, dst, mean, invstd, gamma, N,
                              C, act, false, false, bn_scratch_.data(), stream_, h, beta,
                              with_pool);
  };
  SWEEP_RETURN_IF_ERROR(TimePass(stream_, cudnn_pass, cudnn));
  return TimePass(stream_, our_pass, ours);
}

Result<const CudnnConv*> Net::Plan(int i, int B) {
  std::unique_ptr<CudnnConv>& plan = plans_[static_cast<size_t>(i)][B];
  if (plan == nullptr) {
    ConvOptions o;
    o.precision = precision_;
    o.tf32 = tf32_;
    o.autotune = options_.cudnn_autotune;
    o.backward_data = model_.layer(i).input >= 0;  // the model's input takes no gradient
    SWEEP_ASSIGN_OR_RETURN(plan, CudnnConv::Create(dnn_, ConvShapeOf(model_.layer(i), B), o));
    SWEEP_RETURN_IF_ERROR(EnsureWorkspace(plan->workspace_bytes(), i, "convolution", B));
  }
  return plan.get();
}

Status Net::ConvForward(int i, int B, void* y, const float* x, const uint16_t* x16, const void* w) {
  SWEEP_ASSIGN_OR_RETURN(const bool direct, DirectRuns(i, B, x));
  if (direct) {  // reads the fp32 input itself
    return direct_conv_forward(y, x, w, ConvShapeOf(model_.layer(i), B), half(), half_type_,
                               stream_);
  }
  SWEEP_ASSIGN_OR_RETURN(const CudnnConv* plan, Plan(i, B));
  return plan->Forward(y, half() ? static_cast<const void*>(x16) : x, w, workspace_.data());
}

Result<bool> Net::DirectRuns(int i, int B, const float* x) {
  const size_t at = static_cast<size_t>(i);
  if (!lay_.direct_conv[at]) return false;
  if (!options_.cudnn_autotune || direct_choice_[at] >= 0) return direct_choice_[at] != 0;
  // Timed at full batches, which the trainer's first steps are; a smaller batch before that (an
  // evaluation) runs ours. Timing waits on the stream, which a graph capture forbids: a first
  // use there keeps ours for good (each batch size's first steps run launched, so none is).
  if (B != max_batch_) return true;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) {
    direct_choice_[at] = 1;
    return true;
  }
  double ours = 0, cudnn = 0;
  SWEEP_RETURN_IF_ERROR(TimeStem(i, B, x, &ours, &cudnn));
  char times[96];
  std::snprintf(times, sizeof(times), " (timed: cuDNN %.3f ms, ours %.3f ms)", cudnn, ours);
  direct_timed_[at] = times;
  direct_choice_[at] = ours <= cudnn ? 1 : 0;
  return direct_choice_[at] != 0;
}

Status Net::TimeStem(int i, int B, const float* x, double* ours, double* cudnn) {
  const Layer& l = model_.layer(i);
  const cpu::ConvShape s = ConvShapeOf(l, B);
  SWEEP_ASSIGN_OR_RETURN(const CudnnConv* plan, Plan(i, B));
  const int64_t n_in = int64_t{B} * l.in_shape.size();
  const int64_t nw = int64_t{l.out} * l.kernel * l.kernel * l.in_shape.c;
  // Scratch of the right sizes whatever the layout left out, none holding live values at a
  // forward's first convolution: the 16-bit output (or the batch norm's 16-bit input) and
  // gradient scratch, the weight-gradient scratch; in fp32 the data-gradient scratch for both.
  uint16_t* y16 =
      i + 1 < static_cast<int>(model_.layers.size()) && lay_.bn16[static_cast<size_t>(i) + 1]
          ? conv16_[static_cast<size_t>(i)].data()
          : h_out_.data();
  void* y = half() ? static_cast<void*>(y16) : dtmp_.data();
  const void* dy = half() ? static_cast<const void*>(h_d_.data()) : dtmp_.data();
  const void* w = half() ? static_cast<const void*>(params16_.data() + l.weight)
                         : static_cast<const void*>(params_.data() + l.weight);
  // The input's 16-bit copy in the data-gradient scratch (as wide as any convolution's input,
  // unused in a forward): the layer's own copy may already hold this step's input for a GEMM
  // sharing it.
  uint16_t* x16 = h_dx_.data();
  auto direct = [&]() -> Status {
    SWEEP_RETURN_IF_ERROR(direct_conv_forward(y, x, w, s, half(), half_type_, stream_));
    return direct_conv_backward_filter(dw_tmp_.data(), x, dy, s, half(), half_type_, false,
                                       direct_scratch_.data(), stream_);
  };
  auto through_cudnn = [&]() -> Status {
    if (!half()) {
      SWEEP_RETURN_IF_ERROR(plan->Forward(y, x, w, workspace_.data()));
      return plan->BackwardFilter(dw_tmp_.data(), x, dy, workspace_.data());
    }
    // The cast is the price of cuDNN's side, unless another GEMM needs the copy anyway.
    if (!lay_.in16_shared[static_cast<size_t>(i)]) {
      SWEEP_RETURN_IF_ERROR(cast_to_half(x16, x, n_in, half_type_, stream_));
    }
    SWEEP_RETURN_IF_ERROR(plan->Forward(y, x16, w, workspace_.data()));
    SWEEP_RETURN_IF_ERROR(plan->BackwardFilter(h_dw_.data(), x16, dy, workspace_.data()));
    return widen_half(dw_tmp_.data(), h_dw_.data(), nw, half_type_, false, stream_);
  };
  if (x16 == nullptr && half()) return Status::Internal("cuda: no 16-bit input to time cuDNN's on");
  SWEEP_RETURN_IF_ERROR(TimePass(stream_, direct, ours));
  return TimePass(stream_, through_cudnn, cudnn);
}

Status Net::EnsureWorkspace(size_t bytes, int layer, const char* op, int B) {
  if (bytes <= static_cast<size_t>(workspace_.size())) return Status::Ok();
  // Work queued on the old workspace is done before it is freed: cudaFree waits for the device.
  // Freed first, so its bytes count as free below.
  workspace_ = DeviceBuffer<uint8_t>();
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (bytes > free) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    char msg[400];
    std::snprintf(msg, sizeof msg,
                  "cuda: cuDNN's plan for layer %d's %s at batches of %d rows needs "
                  "%.1f MiB of workspace, and GPU %d has %.1f MiB free of %.1f GiB; make "
                  "batch_size smaller",
                  layer, op, B, static_cast<double>(bytes) / 1048576.0, device,
                  static_cast<double>(free) / 1048576.0, static_cast<double>(total) / 1073741824.0);
    return Status::InvalidArgument(msg);
  }
  ++workspace_epoch_;
  return DeviceBuffer<uint8_t>::Make(static_cast<int64_t>(bytes), &workspace_);
}

}  // namespace sweep::trainer::cuda
