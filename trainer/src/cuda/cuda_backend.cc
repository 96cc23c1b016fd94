// The CUDA ReplicaGroup, single GPU: one replica on device 0 with a non-blocking stream and a
// TF32 cuBLAS handle; forward, backward and the optimizer run as kernels on that stream, and
// the host waits only to read a step's loss or an evaluation's sums. A CUDA, cuBLAS or NCCL
// error becomes a Status naming the statement, file and line; the ReplicaGroup methods that
// return no Status throw it as CudaError, which Train() turns into a failed trial. Several
// replicas (NCCL) are not implemented yet: Supports() declines them and the CPU takes them.
#include "cuda/cuda_backend.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/mlp.h"
#include "cuda/ops.h"
#include "team.h"

namespace sweep::trainer::cuda {
namespace {

// TF32 GEMMs: fp32 storage and accumulation, 10-bit mantissa products (tensor cores).
constexpr bool kTf32 = true;

class CudaReplicaGroup final : public ReplicaGroup {
 public:
  static Result<std::unique_ptr<ReplicaGroup>> Create(const GroupSpec& spec) {
    std::unique_ptr<CudaReplicaGroup> g(new CudaReplicaGroup(spec));
    SWEEP_RETURN_IF_ERROR(g->Init());
    return std::unique_ptr<ReplicaGroup>(std::move(g));
  }

  ~CudaReplicaGroup() override {
    // Errors here have nowhere to go; the buffers free before the stream they were used on.
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    model_.reset();
    opt_.clear();
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  int size() const override { return 1; }

  void Run(const std::function<void(int rank)>& fn) override {
    team_.Run([&](int rank) {
      ThrowIfError(SetDevice());
      fn(rank);
    });
  }

  double TrainMicroBatch(int rank, const MicroBatch& mb, const StepArgs& args) override {
    (void)rank;
    double loss = 0;
    ThrowIfError(Train(mb, args, &loss));
    return loss;
  }

  void Evaluate(int rank, const float* x, const int32_t* y, int rows, double* loss_sum,
                int64_t* correct) override {
    (void)rank;
    ThrowIfError(model_->Evaluate(x, y, rows, loss_sum, correct));
  }

  Status SetState(const ModelState& state) override {
    const size_t n = static_cast<size_t>(spec_.shape.num_params);
    SWEEP_RETURN_IF_ERROR(CheckModelState(state, n, opt_.size()));
    SWEEP_RETURN_IF_ERROR(SetDevice());
    CUDA_CHECK(cudaMemcpyAsync(model_->params(), state.params.data(), n * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    for (size_t s = 0; s < opt_.size(); ++s) {
      if (state.optimizer.empty()) {
        CUDA_CHECK(cudaMemsetAsync(opt_[s].data(), 0, opt_[s].bytes(), stream_));
      } else {
        CUDA_CHECK(cudaMemcpyAsync(opt_[s].data(), state.optimizer[s].data(), n * sizeof(float),
                                   cudaMemcpyHostToDevice, stream_));
      }
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  ModelState GetState() const override {
    ModelState s;
    ThrowIfError(ReadState(&s));
    return s;
  }

  // One GPU: nothing to communicate.
  CommStats TakeCommStats() override { return CommStats{}; }

 private:
  explicit CudaReplicaGroup(const GroupSpec& spec) : spec_(spec), team_(1) {}

  Status SetDevice() const {
    CUDA_CHECK(cudaSetDevice(device_));
    return Status::Ok();
  }

  Status Init() {
    SWEEP_RETURN_IF_ERROR(SetDevice());
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SWEEP_RETURN_IF_ERROR(CreateBlasHandle(stream_, kTf32, &blas_));
    SWEEP_ASSIGN_OR_RETURN(
        model_, Mlp::Create(spec_.shape, spec_.act, spec_.max_rows, spec_.dropout, stream_, blas_));
    const int slots = spec_.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 2 : 1;
    opt_.resize(static_cast<size_t>(slots));
    for (DeviceBuffer<float>& o : opt_) {
      SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(spec_.shape.num_params, &o));
    }
    return Status::Ok();
  }

  // The step's loss is summed on the device across micro-batches and read once, at the last.
  Status Train(const MicroBatch& mb, const StepArgs& args, double* loss) {
    SWEEP_RETURN_IF_ERROR(model_->Upload(mb.x, mb.y, mb.rows));
    SWEEP_RETURN_IF_ERROR(
        model_->ForwardLoss(mb.rows, args.dloss_scale, args.dropout_key, mb.first_row, !mb.first));
    SWEEP_RETURN_IF_ERROR(model_->Backward(mb.rows, !mb.first));
    if (!mb.last) return Status::Ok();
    const OptimizerSpec& o = spec_.optimizer;
    const int64_t n = spec_.shape.num_params;
    if (o.kind == OptimizerSpec::Kind::kSgd) {
      SWEEP_RETURN_IF_ERROR(sgd_update(model_->params(), opt_[0].data(), model_->grads(), n,
                                       args.lr, o.momentum, o.weight_decay, o.nesterov, stream_));
    } else {
      SWEEP_RETURN_IF_ERROR(adamw_update(model_->params(), opt_[0].data(), opt_[1].data(),
                                         model_->grads(), n, args.lr, o.beta1, o.beta2, o.eps,
                                         o.weight_decay, args.t, stream_));
    }
    SWEEP_ASSIGN_OR_RETURN(*loss, model_->ReadLoss());
    return Status::Ok();
  }

  Status ReadState(ModelState* s) const {
    SWEEP_RETURN_IF_ERROR(SetDevice());
    const size_t n = static_cast<size_t>(spec_.shape.num_params);
    s->params.resize(n);
    CUDA_CHECK(cudaMemcpyAsync(s->params.data(), model_->params(), n * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    for (const DeviceBuffer<float>& o : opt_) {
      s->optimizer.emplace_back(n);
      CUDA_CHECK(cudaMemcpyAsync(s->optimizer.back().data(), o.data(), n * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  const GroupSpec spec_;
  const int device_ = 0;  // rank 0's device; a device per rank comes with NCCL
  ThreadTeam team_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<Mlp> model_;
  std::vector<DeviceBuffer<float>> opt_;  // sgd: velocity; adamw: m, v
};

class CudaBackend final : public Backend {
 public:
  std::string_view name() const override { return "cuda"; }
  Status Supports(const GroupSpec& spec) const override {
    const Result<int> devices = DeviceCount();
    if (!devices.ok()) return devices.status();
    if (spec.replicas != 1) {
      return Status::InvalidArgument("cuda: " + std::to_string(spec.replicas) +
                                     " replicas need the multi-GPU (NCCL) path, not built yet");
    }
    return Status::Ok();
  }
  Result<std::unique_ptr<ReplicaGroup>> CreateGroup(const GroupSpec& spec) const override {
    SWEEP_RETURN_IF_ERROR(Supports(spec));
    return CudaReplicaGroup::Create(spec);
  }
};

Result<int> ProbeDevices() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the CPU path must not trip over it later
    return Status::NotFound(std::string("cuda: no usable device (") + cudaGetErrorName(err) + ": " +
                            cudaGetErrorString(err) + ")");
  }
  if (count < 1) return Status::NotFound("cuda: no device");
  return count;
}

}  // namespace

Result<int> DeviceCount() {
  static const Result<int> count = ProbeDevices();
  return count;
}

const Backend* GetBackend() {
  static const CudaBackend backend;
  return &backend;
}

}  // namespace sweep::trainer::cuda
