// One model replica on one GPU built from a ModelSpec (convolutions, batch norm, pooling, residual
// adds, linear layers): cpu/net.h's Net with device buffers. Parameters, gradients and batch norm's
// running statistics are flat device buffers in the ModelSpec's layout; the activation and gradient
// buffers its layout keeps (cuda/net_layout.h) are allocated once for max_batch rows. Convolutions
// run through cuDNN (cuda/cudnn_conv.h, a plan per batch size, made at its first use), and batch
// norm's training pass and backward too where cuDNN has an engine for the shape
// (cuda/cudnn_norm.h); linear layers through cuBLAS, the rest through cuda/cnn_ops.h and
// cuda/ops.h. Each layer is its own pass, but a ReLU read only by a max pool runs after the pool,
// and one read only after a batch norm that our kernels run runs in its passes (the CPU fuses an
// activation into its producer: the same numbers), as does a max pool after such a batch norm (or
// after two summed by a residual add). In fp32 the GEMMs and convolutions use TF32 tensor cores
// when tf32. In bf16 / fp16 they read 16-bit copies of the weights (kept by the optimizer kernels),
// of their inputs (kept for the weight gradient) and of the output gradient, as the CPU's emulation
// rounds them; a convolution's 16-bit output and gradients are widened back to fp32, which
// everything else (batch norm, pooling, activations, master weights, gradients) stays in. Where our
// kernels run a batch norm right after a convolution, they read and write those 16-bit arrays
// themselves (no widening or cast pass; the same bits). All work is queued on the replica's stream
// through its cuBLAS and cuDNN handles, which the caller owns and which outlive the Net. Not
// thread-safe: one thread, with the replica's device current, uses it.
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
#include "cuda/net_layout.h"
#include "cuda/replica_model.h"
#include "model.h"

namespace sweep::trainer::cuda {

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
  Status EvaluateSlot(int B, double* loss_total, unsigned long long* correct) override;

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
  // Forward's passes of layer i for the kinds that take more than one call, on its input `in`
  // (x: the model's), writing out (its out_ buffer) or the buffers its fusions name.
  Status ForwardLinear(int i, int B, const float* in, float* out);
  Status ForwardConv(int i, int B, bool train, const float* in, float* out);
  Status ForwardNorm(int i, int B, bool train, const float* in);
  Status ForwardAdd(int i, int B, bool train, const float* x, const float* in, float* out);
  // bf16 / fp16: GEMM layer i's 16-bit input, kept for its weight gradient, cast from `in` here
  // unless the pass before wrote it (in16_ready_) or another GEMM reading it did; null where a
  // direct convolution alone reads the input.
  Result<uint16_t*> GemmInput16(int i, int B, const float* in);
  // BackwardOn's passes of layer i for the kinds that take more than one call.
  Status BackwardGemm(int i, int B, const float* in, bool accumulate);
  // A convolution's weight and data gradients from output gradient d (h_d_ in bf16 / fp16) into
  // d_in (added to where `add`), or the 16 bits the layer before reads (Grad16Left).
  Status BackwardConv(int i, int B, const float* in, const uint16_t* in16, const float* d,
                      float* d_in, bool add, bool accumulate);
  Status BackwardNorm(int i, int B, const float* in, bool accumulate);
  Status BackwardMaxPool(int i, int B);
  Status BackwardAdd(int i, int B);
  // Where this backward's gradient w.r.t. layer j's output goes (null for the model's input), and
  // whether it adds to what is there: written_ says whether a reader wrote it already.
  float* GradTarget(int j, bool* add);
  // A gradient `reader`'s backward must write (j >= 0: not the model's input): a buffer the layout
  // left out is named, not skipped.
  static Status NeedGrad(int reader, int j, const float* buf);
  // Layer i's convolution plans for B rows, made at their first use.
  Result<const CudnnConv*> Plan(int i, int B);
  // Layer i's convolution forward at B rows: our direct kernels where they run (DirectRuns),
  // reading the fp32 input x, else cuDNN's plan, reading x16 in bf16 / fp16. y and w in the
  // net's storage precision.
  Status ConvForward(int i, int B, void* y, const float* x, const uint16_t* x16, const void* w);
  // Whether convolution i runs our direct kernels: the layout's choice, or with cudnn_autotune
  // the faster of those and cuDNN's, timed on input x at the first use at full batches
  // (TimeStem) outside a graph capture.
  Result<bool> DirectRuns(int i, int B, const float* x);
  // Milliseconds of convolution i's forward and weight gradient at B rows through our direct
  // kernels and through cuDNN's plan (with the input's cast and the gradient's widening it
  // brings in bf16 / fp16), over scratch buffers.
  Status TimeStem(int i, int B, const float* x, double* ours, double* cudnn);
  // Layer i's batch norm through cuDNN for B rows, made at its first use; null where cuDNN has
  // no engine for it (our kernels run).
  // cuDNN's plan for batch norm layer i at B rows, or null where our kernels run it (cuDNN has
  // no engine, or cudnn_autotune timed ours faster).
  Result<const CudnnBatchNorm*> NormPlan(int i, int B);
  // Whether our kernels run batch norm layer i in this pass (in evaluation, always).
  Result<bool> NormOurs(int i, int B, bool train);
  // Whether ReLU layer a is applied by the batch norm before it in this pass (lay_.bn_relu, and our
  // kernels run that batch norm).
  Result<bool> ReluInNorm(int a, int B, bool train);
  // The 16-bit arrays our kernels read and write for batch norm layer i (lay_.bn16,
  // lay_.copy16_for, lay_.grad16); BnHalf.out set means its fp32 output is not written.
  BnHalf NormHalf(int i);
  // Whether convolution i's only output is its 16-bit one, read by the batch norm after it
  // (forward), and whether that batch norm wrote its 16-bit output gradient (backward).
  Result<bool> ConvFeedsNorm16(int i, int B, bool train);
  // cudnn_autotune: milliseconds of a training pass and backward of layer i's batch norm at B
  // rows (with the ReLU our kernels would fuse, lay_.bn_relu) through `bn` and through our kernels,
  // over the layers' own buffers (their values do not matter), each with the widening and cast
  // passes it brings (NormHalf); *ours < 0 where the layer's input has no buffer to time on.
  Status TimeNorm(int i, int B, const CudnnBatchNorm& bn, double* cudnn, double* ours);
  using NormKey = std::tuple<int64_t, int, float, float>;  // rows, channels, eps, momentum
  NormKey NormKeyOf(int i, int B) const;
  // Grows the workspace to `bytes` for the plan of layer's `op` at batch B; refused, naming
  // batch_size, when the GPU has not that much free.
  Status EnsureWorkspace(size_t bytes, int layer, const char* op, int B);
  float* Grad(int i) {
    return gbuf_[static_cast<size_t>(lay_.gown[static_cast<size_t>(i)])].data();
  }

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
  // What runs fused and which buffers exist (cuda/net_layout.h): the flags by layer (gown,
  // relu_after_pool, bn_relu, copy16_for, in16_of, grad16, bn16, norm_pool, norm_pair,
  // add_pool) and each buffer's size.
  NetLayout lay_;
  // Per layer: its output (none for a flatten, which reads its input's, or where no pass
  // writes it: NetLayout), the pointer each forward set (val_[i]: what layer i gave), and the
  // gradient w.r.t. it (lay_.gown[i] names the buffer); written_ says whether this backward
  // wrote it yet.
  std::vector<DeviceBuffer<float>> out_, gbuf_, mask_, mean_, invstd_;
  std::vector<DeviceBuffer<int32_t>> argmax_;
  std::vector<const float*> val_;
  std::vector<char> written_;
  // in16_ready_[j]: an activation (or a max pool applying a ReLU, or our batch norm) wrote GEMM
  // j's 16-bit input in its own pass this forward (lay_.copy16_for), so j does not cast it again.
  std::vector<char> in16_ready_;
  // Layer i wrote the 16-bit copy for its GEMM reader (lay_.copy16_for) in this forward.
  void Copy16Made(int i);
  // Whether the convolution after layer a (an activation or a max pool, lay_.grad16) leaves its
  // data gradient in h_dx_ only, for a's backward or for the batch norm that runs a's passes.
  Result<bool> Grad16Left(int a, int B);
  // Where lay_.bn16[i + 1]: convolution i's 16-bit output, which the batch norm after it reads.
  std::vector<DeviceBuffer<uint16_t>> conv16_;
  // Where our kernels run batch norm i with its pool: the pool's side of the passes (forward:
  // its output, 16-bit copy and argmax; backward: its output gradient).
  BnPool NormPool(int i, int B);
  // Whether max pool p runs inside the batch norm before it (or the two before an add) in this
  // pass.
  Result<bool> PoolInNorm(int p, int B, bool train);
  // Whether add j runs both batch norms' apply passes and its pool (lay_.add_pool) in this pass.
  Result<bool> AddInNorm(int j, int B, bool train);
  // Whether batch norm i runs its pool's passes in this pass (alone, or with its pair):
  // PoolInNorm of its pool.
  Result<bool> NormRunsPool(int i, int B, bool train);
  // Batch norm i's side of batchnorm_add_pool: its input (x where that is the model's),
  // parameters and statistics.
  BnSide NormSide(int i, const float* x, bool train);
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
  // Whether batch norm i runs ours without cuDNN being asked (NormPlan): ours_norm_only, or
  // lay_.bn16 without cudnn_autotune. A layer of its shape may still run cuDNN's plan.
  bool OursWithoutAsking(int i) const;
  std::string bn_note_;
  // cudnn_autotune, per layer: whether the direct kernels run (-1: not timed yet), and the
  // times for Describe.
  std::vector<int> direct_choice_;
  std::vector<std::string> direct_timed_;
  // cuDNN's batch norm backward: dscale, then dbias bn_stride_ floats on.
  DeviceBuffer<float> bn_tmp_;
  int64_t bn_stride_ = 0;
  DeviceBuffer<uint8_t> workspace_, bn_scratch_, direct_scratch_;
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
};

}  // namespace sweep::trainer::cuda
