// The CUDA ReplicaGroup's life (replica_group.h): each rank's streams, cuBLAS handle and
// buffers made and freed, Run, the weights in and out, and the training set held on the devices.
#include "cuda/replica_group.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "augment.h"
#include "cuda/cnn_ops.h"
#include "cuda/cuda_check.h"
#if defined(SWEEP_HAVE_CUDNN)
#include "cuda/net.h"
#endif
#include "cuda/ops.h"
#include "data.h"

namespace sweep::trainer::cuda {

void* PinnedAllocator::Allocate(size_t bytes) {
  void* p = nullptr;
  ThrowIfError(Alloc(bytes, &p));
  return p;
}

void PinnedAllocator::Free(void* p) { cudaFreeHost(p); }

Status PinnedAllocator::Alloc(size_t bytes, void** p) {
  CUDA_CHECK(cudaHostAlloc(p, bytes, cudaHostAllocPortable));
  return Status::Ok();
}

Result<std::unique_ptr<ReplicaGroup>> CudaReplicaGroup::Create(const GroupSpec& spec,
                                                               std::vector<int> devices) {
  std::unique_ptr<CudaReplicaGroup> g(new CudaReplicaGroup(spec, std::move(devices)));
  SWEEP_RETURN_IF_ERROR(g->Init());
  return std::unique_ptr<ReplicaGroup>(std::move(g));
}

CudaReplicaGroup::CudaReplicaGroup(const GroupSpec& spec, std::vector<int> devices)
    : spec_(spec),
      buckets_(MakeGradBuckets(spec.model, spec.bucket_floats)),
      team_(static_cast<int>(devices.size())),
      ranks_(devices.size()) {
  for (size_t i = 0; i < devices.size(); ++i) ranks_[i].device = devices[i];
}

CudaReplicaGroup::~CudaReplicaGroup() {
  // Errors here have nowhere to go. Every rank's queued work ends before its communicator,
  // buffers, events and streams go, each on its own device. The graphs go first: NCCL's
  // destroy and abort wait for the graphs that hold their collectives.
  DropGraphs();
  AbortFaultedCommunicators();
  SynchronizeAll();
  DestroyCommunicators();
  ReleaseDataset();
  for (Rank& r : ranks_) {
    cudaSetDevice(r.device);
    r.model.reset();
    r.step_dev = DeviceBuffer<StepScalars>();
    if (r.step_host != nullptr) cudaFreeHost(r.step_host);
    r.opt.clear();
    r.loss_total = DeviceBuffer<double>();
    r.loss_scale = DeviceBuffer<LossScaleState>();
    r.found_inf = DeviceBuffer<int>();
    for (DeviceBuffer<uint8_t>& p : r.pixels) p = DeviceBuffer<uint8_t>();
    for (cudaEvent_t e : r.AllEvents()) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (r.loss_host != nullptr) cudaFreeHost(r.loss_host);
    if (r.blas != nullptr) cublasDestroy(r.blas);
    r.blas_workspace = DeviceBuffer<uint8_t>();
#if defined(SWEEP_HAVE_CUDNN)
    if (r.dnn != nullptr) cudnnDestroy(r.dnn);
#endif
    for (cudaStream_t s : {r.compute, r.copy, r.comm}) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  }
  // What a failed teardown call left as this thread's last error would fail the next group's
  // first launch check (a reused worker's next trial).
  (void)cudaGetLastError();
}

Status CudaReplicaGroup::SetDevice(int rank) const {
  CUDA_CHECK(cudaSetDevice(ranks_[static_cast<size_t>(rank)].device));
  return Status::Ok();
}

Status CudaReplicaGroup::Init() {
  for (int i = 0; i < size(); ++i) SWEEP_RETURN_IF_ERROR(InitRank(i));
  if (size() > 1) SWEEP_RETURN_IF_ERROR(InitCommunicators());
  return Status::Ok();
}

Status CudaReplicaGroup::InitRank(int rank) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  SWEEP_RETURN_IF_ERROR(SetDevice(rank));
  CUDA_CHECK(cudaStreamCreateWithFlags(&r.compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&r.copy, cudaStreamNonBlocking));
  SWEEP_RETURN_IF_ERROR(CreateBlasHandle(r.compute, spec_.tf32, &r.blas));
  // A workspace of our own: cuBLAS then picks the same kernels whether or not the compute stream
  // is being captured (without one it may take others during a capture), so a step replayed
  // from a CUDA graph is the launched one, bit for bit. 32 MiB: NVIDIA's advice for Hopper.
  constexpr int64_t kBlasWorkspaceBytes = int64_t{32} << 20;
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint8_t>::Make(kBlasWorkspaceBytes, &r.blas_workspace));
  CUBLAS_CHECK(cublasSetWorkspace(r.blas, r.blas_workspace.data(),
                                  static_cast<size_t>(kBlasWorkspaceBytes)));
  MlpView mlp;
  if (AsMlp(spec_.model, &mlp) && spec_.label_smoothing == 0) {
    SWEEP_ASSIGN_OR_RETURN(r.model, Mlp::Create(mlp.shape, mlp.act, spec_.max_rows, mlp.dropout,
                                                spec_.precision, r.compute, r.blas));
  } else {
#if defined(SWEEP_HAVE_CUDNN)
    SWEEP_RETURN_IF_ERROR(CreateCudnnHandle(r.compute, &r.dnn));
    SWEEP_ASSIGN_OR_RETURN(
        r.model, Net::Create(spec_.model, spec_.max_rows, spec_.precision, spec_.label_smoothing,
                             spec_.tf32, r.compute, r.blas, r.dnn, NetOptionsOf(spec_)));
#else
    return Status::InvalidArgument("cuda: this build has no cuDNN for the model's layers");
#endif
  }
  const int slots = spec_.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 2 : 1;
  r.opt.resize(static_cast<size_t>(slots));
  for (DeviceBuffer<float>& o : r.opt) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(spec_.model.num_params, &o));
  }
  // Events that only order work carry no timestamps (cheaper to record and wait on).
  for (int i = 0; i < ReplicaModel::kInputSlots; ++i) {
    CUDA_CHECK(cudaEventCreateWithFlags(&r.copied[i], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&r.input_free[i], cudaEventDisableTiming));
  }
  for (cudaEvent_t& e : r.done) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  void* loss_host = nullptr;
  CUDA_CHECK(cudaHostAlloc(&loss_host, 2 * sizeof(double), cudaHostAllocPortable));
  r.loss_host = static_cast<double*>(loss_host);
  void* step_host = nullptr;
  CUDA_CHECK(cudaHostAlloc(&step_host, 2 * sizeof(StepScalars), cudaHostAllocPortable));
  r.step_host = static_cast<StepScalars*>(step_host);
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<StepScalars>::Make(1, &r.step_dev));
  r.model->SetStepScalars(r.step_dev.data());
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<double>::Make(1, &r.eval_loss));
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<unsigned long long>::Make(1, &r.eval_correct));
  if (size() > 1) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&r.comm, cudaStreamNonBlocking));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<double>::Make(1, &r.loss_total));
    r.bucket_ready.resize(buckets_.size(), nullptr);
    for (cudaEvent_t& e : r.bucket_ready) {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    for (int i = 0; i < 2; ++i) {
      CUDA_CHECK(cudaEventCreate(&r.backward_end[i]));
      CUDA_CHECK(cudaEventCreate(&r.comm_start[i]));
      CUDA_CHECK(cudaEventCreate(&r.comm_done[i]));
      CUDA_CHECK(cudaEventCreateWithFlags(&r.comm_joined[i], cudaEventDisableTiming));
    }
    r.hook = std::make_unique<BucketHook>(this, rank);
  }
  if (fp16()) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<LossScaleState>::Make(1, &r.loss_scale));
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<int>::Make(1, &r.found_inf));
    const LossScaleState initial{spec_.initial_loss_scale, 0, 0};
    CUDA_CHECK(cudaMemcpy(r.loss_scale.data(), &initial, sizeof initial, cudaMemcpyHostToDevice));
  }
  // The buffers were zeroed on the legacy stream, which the non-blocking streams do not wait
  // for: let that finish before any of them runs.
  CUDA_CHECK(cudaDeviceSynchronize());
  return Status::Ok();
}

std::vector<cudaEvent_t> CudaReplicaGroup::Rank::AllEvents() const {
  std::vector<cudaEvent_t> all(bucket_ready);
  for (int i = 0; i < ReplicaModel::kInputSlots; ++i) {
    all.push_back(copied[i]);
    all.push_back(input_free[i]);
  }
  for (int i = 0; i < 2; ++i) {
    for (cudaEvent_t e : {done[i], backward_end[i], comm_start[i], comm_done[i], comm_joined[i]}) {
      all.push_back(e);
    }
  }
  return all;
}

void CudaReplicaGroup::Run(const std::function<void(int rank)>& fn) {
  std::mutex first_mu;
  std::exception_ptr first;  // the failure that started an abort, not its echoes
  try {
    team_.Run([&](int rank) {
      try {
        ThrowIfError(SetDevice(rank));
        fn(rank);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(first_mu);
          if (!first) first = std::current_exception();
        }
        AbortCommunicators();
        throw;
      }
    });
  } catch (...) {
    // A rank that failed may have left copies queued from the Batcher's pinned buffers, which
    // its owner frees next: let every stream finish (the communicators are aborted, so the
    // collectives end too) before the failure goes up.
    SynchronizeAll();
    if (first) std::rethrow_exception(first);
    throw;
  }
}

void CudaReplicaGroup::SynchronizeAll() {
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  for (Rank& r : ranks_) {
    cudaSetDevice(r.device);
    for (cudaStream_t s : {r.compute, r.copy, r.comm}) {
      if (s != nullptr) cudaStreamSynchronize(s);
    }
  }
  if (restore) cudaSetDevice(current);  // the caller's device, as it was
  (void)cudaGetLastError();
}

void CudaReplicaGroup::Evaluate(int rank, const float* x, const int32_t* y, int rows,
                                double* loss_sum, int64_t* correct) {
  ThrowIfError([&]() -> Status {
    SWEEP_RETURN_IF_ERROR(FitsInputSlots(rows, 0, "an evaluation batch"));
    if (rows == 0) return Status::Ok();
    Rank& r = ranks_[static_cast<size_t>(rank)];
    ReplicaModel& model = *r.model;
    SWEEP_RETURN_IF_ERROR(StartEvaluation(rank));
    const size_t n = static_cast<size_t>(rows);
    CUDA_CHECK(cudaMemcpyAsync(model.x(0), x,
                               n * static_cast<size_t>(spec_.model.input.size()) * sizeof(float),
                               cudaMemcpyHostToDevice, r.compute));
    CUDA_CHECK(
        cudaMemcpyAsync(model.y(0), y, n * sizeof(int32_t), cudaMemcpyHostToDevice, r.compute));
    SWEEP_RETURN_IF_ERROR(model.EvaluateSlot(rows, r.eval_loss.data(), r.eval_correct.data()));
    return FinishEvaluation(rank, loss_sum, correct);
  }());
}

void CudaReplicaGroup::EvaluateHeld(int rank, const int32_t* rows, int64_t n, int chunk,
                                    double* loss_sum, int64_t* correct) {
  ThrowIfError(EvaluateHeldOn(rank, rows, n, chunk, loss_sum, correct));
}

Status CudaReplicaGroup::StartEvaluation(int rank) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  if (r.stats_stale) SWEEP_RETURN_IF_ERROR(TakeRank0Stats(rank));
  CUDA_CHECK(cudaMemsetAsync(r.eval_loss.data(), 0, sizeof(double), r.compute));
  CUDA_CHECK(cudaMemsetAsync(r.eval_correct.data(), 0, sizeof(unsigned long long), r.compute));
  return Status::Ok();
}

Status CudaReplicaGroup::FinishEvaluation(int rank, double* loss_sum, int64_t* correct) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  double loss = 0;
  unsigned long long right = 0;
  CUDA_CHECK(
      cudaMemcpyAsync(&loss, r.eval_loss.data(), sizeof loss, cudaMemcpyDeviceToHost, r.compute));
  CUDA_CHECK(cudaMemcpyAsync(&right, r.eval_correct.data(), sizeof right, cudaMemcpyDeviceToHost,
                             r.compute));
  CUDA_CHECK(cudaStreamSynchronize(r.compute));
  *loss_sum += loss;
  *correct += static_cast<int64_t>(right);
  return Status::Ok();
}

Status CudaReplicaGroup::TakeRank0Stats(int rank) {
  // Rank 0's last update of them was in the forward of its last step, which ended before this
  // rank's last all-reduce could (it waits for rank 0's gradients), and this rank has waited
  // for that. Through the host: a few kilobytes once per evaluation, and no peer access needed.
  Rank& r = ranks_[static_cast<size_t>(rank)];
  const size_t n = static_cast<size_t>(spec_.model.num_buffers);
  r.stats_host.resize(n);
  CUDA_CHECK(cudaMemcpy(r.stats_host.data(), ranks_[0].model->stats(), n * sizeof(float),
                        cudaMemcpyDeviceToHost));
  // On the compute stream, where the evaluation's kernels follow it.
  CUDA_CHECK(cudaMemcpyAsync(r.model->stats(), r.stats_host.data(), n * sizeof(float),
                             cudaMemcpyHostToDevice, r.compute));
  r.stats_stale = false;
  return Status::Ok();
}

Status CudaReplicaGroup::SetState(const ModelState& state) {
  const size_t n = static_cast<size_t>(spec_.model.num_params);
  const size_t n_stats = static_cast<size_t>(spec_.model.num_buffers);
  SWEEP_RETURN_IF_ERROR(CheckModelState(state, n, ranks_[0].opt.size(), n_stats));
  DropGraphs();
  // Batch norm's running statistics: the state's, or their initial values, on every rank.
  std::vector<float> stats = state.stats;
  if (stats.empty() && n_stats > 0) {
    stats.resize(n_stats);
    InitStats(spec_.model, stats.data());
  }
  // Rank 0 loads the host state; the others receive it by broadcast, so every replica starts
  // from the same bits whatever the host holds.
  Rank& r0 = ranks_[0];
  SWEEP_RETURN_IF_ERROR(SetDevice(0));
  CUDA_CHECK(cudaMemcpyAsync(r0.model->params(), state.params.data(), n * sizeof(float),
                             cudaMemcpyHostToDevice, r0.compute));
  for (size_t s = 0; s < r0.opt.size(); ++s) {
    if (state.optimizer.empty()) {
      CUDA_CHECK(cudaMemsetAsync(r0.opt[s].data(), 0, r0.opt[s].bytes(), r0.compute));
    } else {
      CUDA_CHECK(cudaMemcpyAsync(r0.opt[s].data(), state.optimizer[s].data(), n * sizeof(float),
                                 cudaMemcpyHostToDevice, r0.compute));
    }
  }
  if (size() > 1) {
    Status sent = BroadcastFromRank0();
    for (int i = 0; sent.ok() && i < size(); ++i) {
      Rank& r = ranks_[static_cast<size_t>(i)];
      SWEEP_RETURN_IF_ERROR(SetDevice(i));
      CUDA_CHECK(cudaEventRecord(r.done[0], r.compute));
      sent = WaitPastCollectives(r, r.done[0]);
    }
    if (!sent.ok()) {
      // Some ranks' parts may be queued without the others': they would wait for ever.
      AbortCommunicators();
      return sent;
    }
  }
  // fp16: every rank gets the same loss scale state from the host (a few bytes).
  const LossScaleState scale =
      state.loss_scale.value_or(LossScaleState{spec_.initial_loss_scale, 0, 0});
  for (int i = 0; i < size(); ++i) {
    Rank& r = ranks_[static_cast<size_t>(i)];
    SWEEP_RETURN_IF_ERROR(SetDevice(i));
    if (fp16()) {
      CUDA_CHECK(cudaMemcpyAsync(r.loss_scale.data(), &scale, sizeof scale, cudaMemcpyHostToDevice,
                                 r.compute));
    }
    if (r.model->stats() != nullptr) {
      CUDA_CHECK(cudaMemcpyAsync(r.model->stats(), stats.data(), n_stats * sizeof(float),
                                 cudaMemcpyHostToDevice, r.compute));
    }
    CUDA_CHECK(cudaStreamSynchronize(r.compute));
    r.model->ParamsChanged();
  }
  skipped_reported_ = static_cast<int64_t>(scale.skipped);
  return Status::Ok();
}

ModelState CudaReplicaGroup::GetState() const {
  ModelState s;
  ThrowIfError(ReadState(&s));
  return s;
}

Status CudaReplicaGroup::ReadState(ModelState* s) const {
  const Rank& r = ranks_[0];  // every replica holds the same weights and optimizer state
  SWEEP_RETURN_IF_ERROR(SetDevice(0));
  const size_t n = static_cast<size_t>(spec_.model.num_params);
  s->params.resize(n);
  CUDA_CHECK(cudaMemcpyAsync(s->params.data(), r.model->params(), n * sizeof(float),
                             cudaMemcpyDeviceToHost, r.compute));
  for (const DeviceBuffer<float>& o : r.opt) {
    s->optimizer.emplace_back(n);
    CUDA_CHECK(cudaMemcpyAsync(s->optimizer.back().data(), o.data(), n * sizeof(float),
                               cudaMemcpyDeviceToHost, r.compute));
  }
  LossScaleState scale;
  if (fp16()) {
    CUDA_CHECK(cudaMemcpyAsync(&scale, r.loss_scale.data(), sizeof scale, cudaMemcpyDeviceToHost,
                               r.compute));
  }
  // Rank 0's running statistics, which every replica evaluates with.
  ReplicaModel& model = *r.model;
  if (model.stats() != nullptr) {
    s->stats.resize(static_cast<size_t>(spec_.model.num_buffers));
    CUDA_CHECK(cudaMemcpyAsync(s->stats.data(), model.stats(), s->stats.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, r.compute));
  }
  CUDA_CHECK(cudaStreamSynchronize(r.compute));
  if (fp16()) s->loss_scale = scale;
  return Status::Ok();
}

int64_t CudaReplicaGroup::TakeGraphLaunches() { return std::exchange(ranks_[0].graph_launches, 0); }

std::string CudaReplicaGroup::Describe() const { return ranks_[0].model->Describe(); }

void CudaReplicaGroup::DropGraphs() {
  std::lock_guard<std::mutex> lock(graphs_mu_);
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  for (Rank& r : ranks_) {
    cudaSetDevice(r.device);
    DropRankGraphs(r);
  }
  if (restore) cudaSetDevice(current);  // the caller's device, as it was
}

// Under graphs_mu_. A graph still running may be destroyed: CUDA frees it once it is done.
void CudaReplicaGroup::DropRankGraphs(Rank& r) {
  for (auto& [key, g] : r.graphs) {
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
    if (g.graph != nullptr) cudaGraphDestroy(g.graph);
  }
  r.graphs.clear();
}

int64_t CudaReplicaGroup::TakeSkippedSteps() {
  int64_t skipped = 0;
  ThrowIfError(ReadSkipped(&skipped));
  const int64_t delta = skipped - skipped_reported_;
  skipped_reported_ = skipped;
  return delta;
}

Status CudaReplicaGroup::ReadSkipped(int64_t* skipped) const {
  *skipped = 0;
  if (!fp16()) return Status::Ok();
  const Rank& r = ranks_[0];  // every rank skips the same steps
  SWEEP_RETURN_IF_ERROR(SetDevice(0));
  LossScaleState scale;
  CUDA_CHECK(cudaMemcpyAsync(&scale, r.loss_scale.data(), sizeof scale, cudaMemcpyDeviceToHost,
                             r.compute));
  CUDA_CHECK(cudaStreamSynchronize(r.compute));
  *skipped = static_cast<int64_t>(scale.skipped);
  return Status::Ok();
}

Result<bool> CudaReplicaGroup::HoldDataset(const Dataset& data, const InputTransform* transform) {
  transform_.reset();
  if (transform != nullptr && transform->active()) {
    // Channels-first rows would need reordering too: the host does those.
    if (transform->chw || transform->shape.size() != data.dim) return false;
    transform_ = std::make_unique<InputTransform>(*transform);
  }
  const bool u8 = !data.u8.empty();
  const size_t n = static_cast<size_t>(data.n), dim = static_cast<size_t>(data.dim);
  // The features, the labels, and room for as many row numbers to evaluate.
  const size_t bytes = n * dim * (u8 ? 1 : sizeof(float)) + 2 * n * sizeof(int32_t);
  // A quarter of free memory at most: the trial's activations, and other trials sharing the
  // GPU, keep the rest.
  for (int i = 0; i < size(); ++i) {
    SWEEP_RETURN_IF_ERROR(SetDevice(i));
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    if (bytes > free / 4) {
      transform_.reset();  // the host transforms what it streams
      return false;
    }
  }
  for (int i = 0; i < size(); ++i) {
    const Status held = HoldOn(i, data);
    if (!held.ok()) {
      // Most likely another trial took the memory after the check above: stream the batches
      // instead. A broken device shows again at the next call that needs it.
      ReleaseDataset();
      cudaGetLastError();  // not sticky (an allocation): clear it for the next launch
      return false;
    }
  }
  return true;
}

Status CudaReplicaGroup::HoldOn(int i, const Dataset& data) {
  Rank& r = ranks_[static_cast<size_t>(i)];
  SWEEP_RETURN_IF_ERROR(SetDevice(i));
  const size_t n = static_cast<size_t>(data.n), dim = static_cast<size_t>(data.dim);
  if (!data.u8.empty()) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint8_t>::Make(data.n * data.dim, &r.data_u8));
    CUDA_CHECK(cudaMemcpy(r.data_u8.data(), data.u8.data(), n * dim, cudaMemcpyHostToDevice));
  } else {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(data.n * data.dim, &r.data_f32));
    CUDA_CHECK(cudaMemcpy(r.data_f32.data(), data.f32.data(), n * dim * sizeof(float),
                          cudaMemcpyHostToDevice));
  }
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<int32_t>::Make(data.n, &r.data_labels));
  // Made here, not at the first evaluation: a GPU without room for it streams the set instead
  // of failing the trial later.
  SWEEP_RETURN_IF_ERROR(DeviceBuffer<int32_t>::Make(data.n, &r.eval_rows));
  CUDA_CHECK(cudaMemcpy(r.data_labels.data(), data.labels.data(), n * sizeof(int32_t),
                        cudaMemcpyHostToDevice));
  for (DeviceBuffer<int32_t>& idx : r.idx) {
    SWEEP_RETURN_IF_ERROR(DeviceBuffer<int32_t>::Make(spec_.max_rows, &idx));
  }
  void* staging = nullptr;
  CUDA_CHECK(cudaHostAlloc(&staging, ReplicaModel::kInputSlots * sizeof(int32_t) * spec_.max_rows,
                           cudaHostAllocPortable));
  if (r.idx_host != nullptr) cudaFreeHost(r.idx_host);  // held before: replaced
  r.idx_host = static_cast<int32_t*>(staging);
  r.data_dim = data.dim;
  r.data_rows = data.n;
  if (transform_ != nullptr) {
    for (int s = 0; s < ReplicaModel::kInputSlots; ++s) {
      SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(spec_.max_rows * data.dim, &r.raw[s]));
      SWEEP_RETURN_IF_ERROR(
          DeviceBuffer<int32_t>::Make(int64_t{spec_.max_rows} * kDrawInts, &r.draws[s]));
    }
    void* draws = nullptr;
    CUDA_CHECK(cudaHostAlloc(
        &draws, ReplicaModel::kInputSlots * sizeof(int32_t) * kDrawInts * spec_.max_rows,
        cudaHostAllocPortable));
    if (r.draws_host != nullptr) cudaFreeHost(r.draws_host);
    r.draws_host = static_cast<int32_t*>(draws);
    if (!transform_->mean.empty()) {
      std::vector<float> norm = transform_->mean;
      norm.insert(norm.end(), transform_->inv_std.begin(), transform_->inv_std.end());
      SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(static_cast<int64_t>(norm.size()), &r.norm));
      CUDA_CHECK(cudaMemcpy(r.norm.data(), norm.data(), norm.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
  }
  // The zeroing and the copies ran on the legacy stream, which the copy stream does not wait
  // for, and a copy from pageable memory may still be landing when cudaMemcpy returns.
  CUDA_CHECK(cudaDeviceSynchronize());
  return Status::Ok();
}

void CudaReplicaGroup::ReleaseDataset() {
  for (int i = 0; i < size(); ++i) {
    Rank& r = ranks_[static_cast<size_t>(i)];
    cudaSetDevice(r.device);
    r.data_u8 = DeviceBuffer<uint8_t>();
    r.data_f32 = DeviceBuffer<float>();
    r.data_labels = DeviceBuffer<int32_t>();
    for (DeviceBuffer<int32_t>& idx : r.idx) idx = DeviceBuffer<int32_t>();
    if (r.idx_host != nullptr) cudaFreeHost(r.idx_host);
    r.idx_host = nullptr;
    r.data_dim = r.data_rows = 0;
    for (DeviceBuffer<float>& raw : r.raw) raw = DeviceBuffer<float>();
    for (DeviceBuffer<int32_t>& d : r.draws) d = DeviceBuffer<int32_t>();
    if (r.draws_host != nullptr) cudaFreeHost(r.draws_host);
    r.draws_host = nullptr;
    r.norm = DeviceBuffer<float>();
    r.eval_rows = DeviceBuffer<int32_t>();
  }
  transform_.reset();
}

Status CudaReplicaGroup::FitsInputSlots(int64_t rows, int64_t least, const char* what) const {
  if (rows >= least && rows <= spec_.max_rows) return Status::Ok();
  return Status::Internal(std::string("cuda: ") + what + " of " + std::to_string(rows) +
                          " rows; the group was made for at most " +
                          std::to_string(spec_.max_rows));
}

Status CudaReplicaGroup::CheckHeldRows(const Rank& r, const int32_t* rows, int64_t n,
                                       const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= r.data_rows) {
      return Status::Internal("cuda: row " + std::to_string(rows[i]) + " " + what +
                              " is outside the held set of " + std::to_string(r.data_rows) +
                              " rows");
    }
  }
  return Status::Ok();
}

Status CudaReplicaGroup::EvaluateHeldOn(int rank, const int32_t* rows, int64_t n, int chunk,
                                        double* loss_sum, int64_t* correct) {
  SWEEP_RETURN_IF_ERROR(FitsInputSlots(chunk, 1, "evaluation chunks"));
  Rank& r = ranks_[static_cast<size_t>(rank)];
  if (r.data_labels.data() == nullptr) {
    return Status::Internal("cuda: an evaluation of held rows, but the group holds no set");
  }
  SWEEP_RETURN_IF_ERROR(CheckHeldRows(r, rows, n, "to evaluate"));
  if (n == 0) return Status::Ok();
  // Rows listed twice: no queued work reads the old buffer (every evaluation ends waiting).
  if (r.eval_rows.size() < n) SWEEP_RETURN_IF_ERROR(DeviceBuffer<int32_t>::Make(n, &r.eval_rows));
  ReplicaModel& model = *r.model;
  SWEEP_RETURN_IF_ERROR(StartEvaluation(rank));
  // The caller's rows stay put until FinishEvaluation's wait.
  CUDA_CHECK(cudaMemcpyAsync(r.eval_rows.data(), rows, static_cast<size_t>(n) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, r.compute));
  // All on the compute stream, in the chunks the host would hand over, so the sums come out in
  // the same order, bit for bit; one wait for the whole list.
  float* gathered = transform_ != nullptr ? r.raw[0].data() : model.x(0);
  for (int64_t at = 0; at < n; at += chunk) {
    const int b = static_cast<int>(std::min<int64_t>(chunk, n - at));
    SWEEP_RETURN_IF_ERROR(gather_rows(gathered, model.y(0), r.eval_rows.data() + at, b,
                                      r.data_u8.data(), r.data_f32.data(), r.data_labels.data(),
                                      r.data_dim, r.compute));
    if (transform_ != nullptr) {
      const TensorShape& shape = transform_->shape;
      SWEEP_RETURN_IF_ERROR(transform_rows(model.x(0), gathered, /*draws=*/nullptr, r.norm.data(),
                                           b, shape.h, shape.w, shape.c, r.compute));
    }
    SWEEP_RETURN_IF_ERROR(model.EvaluateSlot(b, r.eval_loss.data(), r.eval_correct.data()));
  }
  return FinishEvaluation(rank, loss_sum, correct);
}

Status CudaReplicaGroup::TransformHeld(int rank, int slot, const MicroBatch& mb) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  const TensorShape& shape = transform_->shape;
  const int32_t* draws = nullptr;
  if (transform_->augments()) {
    // The staging slot's last copy (micro-batch m - 2) finished, as the row numbers' did.
    int32_t* staged = r.draws_host + static_cast<size_t>(slot) * kDrawInts * spec_.max_rows;
    for (int i = 0; i < mb.rows; ++i) {
      const AugmentDraw d = transform_->Draw(mb.epoch, mb.position + i);
      int32_t* at = staged + static_cast<size_t>(i) * kDrawInts;
      at[0] = d.dy;
      at[1] = d.dx;
      at[2] = d.mirror ? 1 : 0;
      at[3] = d.ey;
      at[4] = d.ex;
      at[5] = d.eh;
      at[6] = d.ew;
    }
    CUDA_CHECK(cudaMemcpyAsync(r.draws[slot].data(), staged,
                               static_cast<size_t>(mb.rows) * kDrawInts * sizeof(int32_t),
                               cudaMemcpyHostToDevice, r.copy));
    draws = r.draws[slot].data();
  }
  // norm is empty (null) without normalization.
  return transform_rows(r.model->x(slot), r.raw[slot].data(), draws, r.norm.data(), mb.rows,
                        shape.h, shape.w, shape.c, r.copy);
}

}  // namespace sweep::trainer::cuda
