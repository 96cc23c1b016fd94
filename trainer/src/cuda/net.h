// One model replica on one GPU built from a ModelSpec (convolutions, batch norm, pooling,
// residual adds, linear layers): cpu/net.h's Net with device buffers. Parameters, gradients
// and batch norm's running statistics are flat device buffers in the ModelSpec's layout;
// every activation and gradient buffer is allocated once for max_batch rows. Convolutions run
// through cuDNN (cuda/cudnn_conv.h, a plan per batch size, made at its first use), and batch
// norm's training pass and backward too where cuDNN has an engine for the shape
// (cuda/cudnn_norm.h); linear layers through cuBLAS, the rest through cuda/cnn_ops.h and
// cuda/ops.h. Each layer is its own pass, but a ReLU read only by a max pool runs after the
// pool, and one read only after a batch norm that our kernels run runs in its passes (the CPU
// fuses an activation into its producer: the same numbers), as does a max pool after such a
// batch norm (or after two summed by a residual add). In fp32 the GEMMs and
// convolutions use TF32 tensor cores when tf32. In bf16 / fp16 they read 16-bit copies of the
// weights (kept by the optimizer kernels), of their inputs (kept for the weight gradient) and
// of the output gradient, as the CPU's emulation rounds them; a convolution's 16-bit output and
// gradients are widened back to fp32, which everything else (batch norm, pooling, activations,
// master weights, gradients) stays in. Where our kernels run a batch norm right after a
// convolution, they read and write those 16-bit arrays themselves (no widening or cast pass;
// the same bits). All work is queued on the replica's stream through its cuBLAS and cuDNN
// handles, which the caller owns and which outlive the Net. Not thread-safe: one thread, with
// the replica's device current, uses it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "cuda/cnn_ops.h"
#include "cuda/cudnn_conv.h"
#include "cuda/cudnn_norm.h"
#include "cuda/device_buffer.h"
#include "cuda/replica_model.h"
#include "model.h"

namespace sweep::trainer::cuda {

// What a Net is made with besides its model, batch and precision.
struct NetOptions {
  // Each convolution's plans and each batch norm's kernels (cuDNN's or ours) timed on the device
  // (the trainer's cudnn_autotune).
  bool cudnn_autotune = false;
  // For tests: every batch norm's training pass through our kernels, never cuDNN's; and, with
  // fuse false, every 16-bit copy made in a pass of its own and every max pool in its own passes
  // (the unfused path, which the fused one must match bit for bit).
  bool ours_norm_only = false;
  bool fuse = true;
};

class Net final : public ReplicaModel {
 public:
  static Result<std::unique_ptr<Net>> Create(const ModelSpec& model, int max_batch,
                                             Precision precision, float label_smoothing, bool tf32,
                                             cudaStream_t stream, cublasHandle_t blas,
                                             cudnnHandle_t dnn, const NetOptions& options = {});

  const ModelSpec& model() const { return model_; }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  float* stats() override { return model_.num_buffers > 0 ? stats_.data() : nullptr; }
  float* x(int slot) override { return in_x_[slot].data(); }
  int32_t* y(int slot) override { return in_y_[slot].data(); }
  double* summed_loss() override { return loss_.data(); }
  void ParamsChanged() override { half_params_fresh_ = false; }
  uint64_t memory_epoch() const override { return workspace_epoch_; }
  uint16_t* params16() override { return half() ? params16_.data() : nullptr; }
  // Batch norm layers whose training pass and backward at full batches run through cuDNN, of
  // all of them; and why the first that does not is ours (empty when all are cuDNN's).
  int batch_norms_through_cudnn() const;
  int batch_norms() const;
  const std::string& batch_norm_note() const { return bn_note_; }
  // cudnn_autotune: batch norm layer i's two times at full batches in ms, cuDNN's and ours, each
  // with the passes it brings (TimeNorm), and whether ours runs; false where none was timed.
  bool NormTimes(int i, double* cudnn, double* ours, bool* ours_runs) const;
  // Each convolution's and batch norm's plans at full batches, one layer a line.
  std::string Describe() const override;
  cpu::HalfType half_type() const override { return half_type_; }

  // ReplicaModel's, on input slots.
  Status ForwardLoss(int slot, int B, float dloss_scale, const float* loss_scale,
                     uint64_t dropout_key, int64_t first_row, bool accumulate_loss) override;
  Status Backward(int slot, int B, bool accumulate, LayerHook* hook) override;
  Status Evaluate(const float* x, const int32_t* y, int B, double* loss_sum,
                  int64_t* correct) override;

  // Training forward of x [B, inputs] with labels y (both on the device), its loss summed into
  // summed_loss() (reset first unless accumulate_loss); keeps what Backward needs. The logits'
  // gradient is scaled by dloss_scale, then by *loss_scale when it is not null (fp16's scale,
  // on the device). Batch norm updates its running statistics.
  Status ForwardLossOn(const float* x, const int32_t* y, int B, float dloss_scale,
                       uint64_t dropout_key, int64_t first_row, bool accumulate_loss,
                       const float* loss_scale = nullptr);
  // Backward of the last ForwardLossOn (x and B as given to it): grads() = the gradient, or +=
  // it when `accumulate`. Tells `hook` (when not null) as each layer with parameters is queued,
  // by its index among those layers, last to first.
  Status BackwardOn(const float* x, int B, bool accumulate, LayerHook* hook);
  // Evaluation of x and y (on the device): adds the summed loss to *loss_total and the correct
  // argmaxes to *correct (both on the device), with batch norm's running statistics.
  Status EvaluateOn(const float* x, const int32_t* y, int B, double* loss_total,
                    unsigned long long* correct);

 private:
  Net(const ModelSpec& model, int max_batch, Precision precision, float label_smoothing, bool tf32,
      cudaStream_t stream, cublasHandle_t blas, cudnnHandle_t dnn, const NetOptions& options);
  bool half() const { return precision_ != Precision::kFp32; }
  Status Allocate();
  // The layers in order; the logits end in y_.back().
  Status Forward(const float* x, int B, bool train, uint64_t dropout_key, int64_t first_row);
  // Layer i's convolution plans for B rows, made at their first use.
  Result<const CudnnConv*> Plan(int i, int B);
  // Layer i's batch norm through cuDNN for B rows, made at its first use; null where cuDNN has
  // no engine for it (our kernels run).
  // cuDNN's plan for batch norm layer i at B rows, or null where our kernels run it (cuDNN has
  // no engine, or cudnn_autotune timed ours faster).
  Result<const CudnnBatchNorm*> NormPlan(int i, int B);
  // Whether our kernels run batch norm layer i in this pass (in evaluation, always).
  Result<bool> NormOurs(int i, int B, bool train);
  // Whether ReLU layer a is applied by the batch norm before it in this pass (bn_relu_, and our
  // kernels run that batch norm).
  Result<bool> ReluInNorm(int a, int B, bool train);
  // The 16-bit arrays our kernels read and write for batch norm layer i (bn16_, copy16_for_,
  // grad16_); BnHalf.out set means its fp32 output is not written.
  BnHalf NormHalf(int i);
  // Whether convolution i's only output is its 16-bit one, read by the batch norm after it
  // (forward), and whether that batch norm wrote its 16-bit output gradient (backward).
  Result<bool> ConvFeedsNorm16(int i, int B, bool train);
  // cudnn_autotune: milliseconds of a training pass and backward of layer i's batch norm at B
  // rows (with the ReLU our kernels would fuse, bn_relu_) through `bn` and through our kernels,
  // over the layers' own buffers (their values do not matter), each with the widening and cast
  // passes it brings (NormHalf); *ours < 0 where the layer's input has no buffer to time on.
  Status TimeNorm(int i, int B, const CudnnBatchNorm& bn, double* cudnn, double* ours);
  using NormKey = std::tuple<int64_t, int, float, float>;  // rows, channels, eps, momentum
  NormKey NormKeyOf(int i, int B) const;
  // Grows the workspace to `bytes` for the plan of layer's `op` at batch B; refused, naming
  // batch_size, when the GPU has not that much free.
  Status EnsureWorkspace(size_t bytes, int layer, const char* op, int B);
  float* Grad(int i) { return gbuf_[static_cast<size_t>(gown_[static_cast<size_t>(i)])].data(); }

  ModelSpec model_;
  int max_batch_;
  Precision precision_;
  cpu::HalfType half_type_;
  float label_smoothing_;
  bool tf32_;
  NetOptions options_;
  cudaStream_t stream_;
  cublasHandle_t blas_;
  cudnnHandle_t dnn_;
  DeviceBuffer<float> params_, grads_, stats_;
  // Per layer: its output (empty for a flatten, which reads its input's), the pointer each
  // forward set (val_[i]: what layer i gave), and the gradient w.r.t. it (gown_[i] names the
  // buffer: a flatten shares its input's); written_ says whether this backward wrote it yet.
  std::vector<DeviceBuffer<float>> out_, gbuf_, mask_, mean_, invstd_;
  std::vector<DeviceBuffer<int32_t>> argmax_;
  std::vector<const float*> val_;
  std::vector<int> gown_;
  std::vector<char> written_;
  // relu_after_pool_[i]: layer i is a ReLU whose only reader is a max pool, which then runs on
  // the ReLU's input and applies the ReLU to its 4x smaller output (and the ReLU's gradient to
  // its own), the same values bit for bit: a ReLU is monotonic and gives 0 where it cuts, so
  // max and ReLU commute and the cut windows pass no gradient either way (for finite inputs:
  // a NaN the pool would pass on, the ReLU ahead of it made 0).
  std::vector<char> relu_after_pool_;
  // bn_relu_[i]: the ReLU that is batch norm i's only reader (and not a max pool's: that one
  // runs after the pool), or -1. Where our kernels run the batch norm, they apply the ReLU in
  // the same passes, as the CPU's net does.
  std::vector<int> bn_relu_;
  // bf16 / fp16 with fuse: copy16_for_[i], the GEMM layer (convolution or linear) that is
  // layer i's only reader (or the first of the GEMMs that are all its readers), or -1. An
  // activation layer (or a max pool applying a ReLU, or our batch norm giving layer i's output)
  // writes that layer's 16-bit input in its own pass, and in16_ready_ tells the reader, this
  // forward, not to cast it again.
  std::vector<int> copy16_for_;
  std::vector<char> in16_ready_;
  // Layer i wrote the 16-bit copy for its GEMM reader (copy16_for_) in this forward.
  void Copy16Made(int i);
  // bf16 / fp16: in16_of_[j], the GEMM layer whose in16_ GEMM layer j reads: itself, or with
  // fuse the first GEMM reading the same layer (a residual block's body and projection), whose
  // copy it shares. copy16_for_ then names that first one, where GEMMs are all the readers.
  std::vector<int> in16_of_;
  // bf16 / fp16 with fuse: grad16_[a], activation a (or a max pool run in its batch norm's
  // passes, norm_pool_) is read only by the convolution right after it, whose 16-bit data
  // gradient (h_dx_) the activation's backward then reads itself, not widened first; or the
  // batch norm right before it, applying it, or running the pool (Grad16Left). So Grad(a) is
  // marked written but left stale: nothing else may read it, which its one reader guarantees.
  std::vector<char> grad16_;
  // Whether the convolution after layer a (an activation or a max pool, grad16_) leaves its
  // data gradient in h_dx_ only, for a's backward or for the batch norm that runs a's passes.
  Result<bool> Grad16Left(int a, int B);
  // bf16 / fp16 with fuse: bn16_[i], batch norm i reads convolution i - 1 (its only reader,
  // without bias) in 16 bits where our kernels run it: the convolution writes conv16_[i - 1]
  // only, and the batch norm's backward writes the convolution's 16-bit output gradient (h_d_).
  std::vector<char> bn16_;
  std::vector<DeviceBuffer<uint16_t>> conv16_;
  // With fuse: norm_pool_[i], the max pool reading batch norm i (directly, or through a ReLU
  // that runs after it), which our kernels run inside the batch norm's passes (BnPool), or -1.
  // The batch norm's own output is then never written, nor the pool's input gradient.
  std::vector<int> norm_pool_;
  // Where our kernels run batch norm i with its pool: the pool's side of the passes (forward:
  // its output, 16-bit copy and argmax; backward: its output gradient).
  BnPool NormPool(int i, int B);
  // Whether max pool p runs inside the batch norm before it (or the two before an add) in this
  // pass.
  Result<bool> PoolInNorm(int p, int B, bool train);
  // Whether add j runs both batch norms' apply passes and its pool (add_pool_) in this pass.
  Result<bool> AddInNorm(int j, int B, bool train);
  // Whether batch norm i runs its pool's passes in this pass (alone, or with its pair):
  // PoolInNorm of its pool.
  Result<bool> NormRunsPool(int i, int B, bool train);
  // Batch norm i's side of batchnorm_add_pool: its input (x where that is the model's),
  // parameters and statistics.
  BnSide NormSide(int i, const float* x, bool train);
  // With fuse: norm_pair_[i], the other batch norm an add sums with batch norm i before a max
  // pool (add_pool_[j], that pool, for the add j), or -1. Each then computes its statistics
  // only; the add runs both apply passes with the sum and the pool (batchnorm_add_pool), and
  // each batch norm's backward reads the pool's gradient (the add's copies are gone). Only where
  // our kernels run both.
  std::vector<int> norm_pair_, add_pool_;
  std::vector<std::map<int, std::unique_ptr<CudnnConv>>> plans_;
  // Batch norm's plans by shape, shared by the layers of that shape; null: ours.
  std::map<NormKey, std::unique_ptr<CudnnBatchNorm>> norm_plans_;
  // cudnn_autotune: by shape and what ours would fuse (NormFusions), whether ours runs, and the
  // two times for Describe. Plans are shared by shape; the choice is not, as the fusions count.
  struct NormChoice {
    bool ours = false;
    std::string timed;
    double cudnn_ms = -1, ours_ms = -1;
  };
  std::map<std::pair<NormKey, int>, NormChoice> norm_choice_;
  int NormFusions(int i) const;
  // The choice made for layer i at B rows, or null where none was timed.
  const NormChoice* ChoiceOf(int i, int B) const;
  // cuDNN's plan for batch norm layer i at max_batch_ where cuDNN runs it, else null (none made
  // yet, no engine, or ours chosen).
  const CudnnBatchNorm* CudnnNormAtMaxBatch(int i) const;
  // Whether batch norm i runs ours without cuDNN being asked (NormPlan): ours_norm_only, or bn16_
  // without cudnn_autotune. A layer of its shape may still run cuDNN's plan.
  bool OursWithoutAsking(int i) const;
  std::string bn_note_;
  // cuDNN's batch norm backward: dscale, then dbias bn_stride_ floats on.
  DeviceBuffer<float> bn_tmp_;
  int64_t bn_stride_ = 0;
  DeviceBuffer<uint8_t> workspace_, bn_scratch_;
  uint64_t workspace_epoch_ = 0;  // memory_epoch(): counts workspace_'s replacements
  DeviceBuffer<float> dtmp_;      // a gradient that must be added to one already written
  DeviceBuffer<float> dw_tmp_;    // a convolution's weight gradient before it is added
  DeviceBuffer<float> bias_scratch_;
  DeviceBuffer<float> losses_;
  DeviceBuffer<double> loss_;
  // bf16 / fp16 only: params16_ mirrors params_; in16_[i] GEMM layer i's input, kept for its
  // weight gradient; h_out_, h_d_, h_dx_, h_dw_ scratch for a layer's 16-bit output, output
  // gradient, input gradient and weight gradient.
  DeviceBuffer<uint16_t> params16_, h_out_, h_d_, h_dx_, h_dw_;
  std::vector<DeviceBuffer<uint16_t>> in16_;
  bool half_params_fresh_ = false;
  DeviceBuffer<float> in_x_[kInputSlots];
  DeviceBuffer<int32_t> in_y_[kInputSlots];
  DeviceBuffer<double> eval_loss_;                 // [1]: Evaluate's sum
  DeviceBuffer<unsigned long long> eval_correct_;  // [1]: Evaluate's count
};

}  // namespace sweep::trainer::cuda
