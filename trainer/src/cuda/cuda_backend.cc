// The CUDA ReplicaGroup: one replica per GPU of the trial, each driven by its own thread (a
// ThreadTeam rank) with three non-blocking streams: compute (forward, backward, optimizer; its
// cuBLAS handle), copy (the next micro-batch's input, host to device) and, with several GPUs,
// comm (NCCL). A CUDA, cuBLAS or NCCL error becomes a Status naming the statement, file and
// line; the ReplicaGroup methods that return no Status throw it as CudaError, which Train()
// turns into a failed trial. Owned by the trainer; the group is used as backend.h says.
//
// One training micro-batch m on one rank, as TrainMicroBatch queues it:
//   1. copy stream: wait until compute has finished with input slot m % 2 (micro-batch m - 2),
//      copy the rows from the Batcher's pinned slot into it, record `copied`. When the group
//      holds the training set (HoldDataset), the micro-batch's row numbers go through a pinned
//      staging slot instead and a gather kernel on the copy stream fills the input slot.
//   2. compute stream: wait for `copied`, forward, backward. On the step's last micro-batch with
//      several GPUs, as backward queues the last layer of a gradient bucket it records an event
//      that the comm stream waits on before all-reducing that bucket (ncclSum: the loss is
//      already scaled by the global batch), so reduction overlaps the rest of backward; then the
//      comm stream sums the ranks' losses and records `comm_done`, and the compute stream waits
//      for it. fp16: unscale and check the gradients. The optimizer (skipped on the device when
//      fp16 found inf/nan), fp16's loss-scale update, the loss copied to pinned host memory,
//      and `done` recorded.
//   3. host: wait for micro-batch m - 1's `done` (the GPU now has m queued behind it), report
//      its step's loss if it ended a step, then wait for m's `copied`: the time blocked there is
//      time the GPU waited for input (data_wait_s). The Batcher's slot is free once it returns.
// The host never waits for the step it has just queued, so input copies, kernel launches and the
// Batcher's gathering overlap the GPU's work. One GPU: no comm stream, no NCCL.
//
// Several GPUs and a rank that fails (a CUDA error on its device): the others would wait for
// ever in all-reduces it never joins. The failing rank aborts every communicator
// (ncclCommAbort ends the NCCL kernels they wait behind); the others then fail at their next
// NCCL call, and Run rethrows the first failure, so the trial fails with its cause. NCCL calls
// hold nccl_mu_ shared and the abort holds it exclusively, so no call uses a freed
// communicator; after an abort the group only reports errors.
#include "cuda/cuda_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(SWEEP_HAVE_NCCL)
#include <nccl.h>
#endif

#include "batcher.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/mlp.h"
#include "cuda/ops.h"
#include "data.h"
#include "team.h"

namespace sweep::trainer::cuda {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The Batcher's slots in pinned memory, portable to every device of the process, so the copy
// stream's cudaMemcpyAsync from them is a DMA that does not block the host.
class PinnedAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes) override {
    void* p = nullptr;
    ThrowIfError(Alloc(bytes, &p));
    return p;
  }
  void Free(void* p) override { cudaFreeHost(p); }  // an error here has nowhere to go

 private:
  static Status Alloc(size_t bytes, void** p) {
    CUDA_CHECK(cudaHostAlloc(p, bytes, cudaHostAllocPortable));
    return Status::Ok();
  }
};

#if defined(SWEEP_HAVE_NCCL)
using Comm = ncclComm_t;
#else
using Comm = void*;
#endif

class CudaReplicaGroup;

// The devices this process has built groups on, for ContextFault.
std::mutex used_mu;
std::set<int> used_devices;

void NoteDevicesUsed(const std::vector<int>& devices) {
  std::lock_guard<std::mutex> lock(used_mu);
  used_devices.insert(devices.begin(), devices.end());
}

// Starts each gradient bucket's all-reduce as backward queues its last layer.
class BucketHook final : public LayerHook {
 public:
  BucketHook(CudaReplicaGroup* group, int rank) : group_(group), rank_(rank) {}
  void Reset() { next_ = 0; }
  Status LayerDone(int layer) override;

 private:
  CudaReplicaGroup* group_;
  int rank_;
  size_t next_ = 0;  // the next bucket to start
};

class CudaReplicaGroup final : public ReplicaGroup {
 public:
  static Result<std::unique_ptr<ReplicaGroup>> Create(const GroupSpec& spec,
                                                      std::vector<int> devices) {
    MlpView mlp;
    if (!AsMlp(spec.model, &mlp)) return Status::InvalidArgument("cuda: not an MLP");
    NoteDevicesUsed(devices);
    std::unique_ptr<CudaReplicaGroup> g(
        new CudaReplicaGroup(spec, std::move(mlp), std::move(devices)));
    SWEEP_RETURN_IF_ERROR(g->Init());
    return std::unique_ptr<ReplicaGroup>(std::move(g));
  }

  ~CudaReplicaGroup() override {
    // Errors here have nowhere to go. Every rank's queued work ends before its communicator,
    // buffers, events and streams go, each on its own device; a communicator that has had an
    // asynchronous error is aborted first, or its collectives would never end.
#if defined(SWEEP_HAVE_NCCL)
    bool faulted = false;
    for (Rank& r : ranks_) {
      ncclResult_t async = ncclSuccess;
      if (r.nccl != nullptr && ncclCommGetAsyncError(r.nccl, &async) == ncclSuccess &&
          async != ncclSuccess && async != ncclInProgress) {
        faulted = true;
      }
    }
    if (faulted) AbortCommunicators();
#endif
    SynchronizeAll();
#if defined(SWEEP_HAVE_NCCL)
    // One thread destroys every rank's communicator: as a group, since a destroy may wait for
    // the other ranks' (it finalizes the communicator, an intra-node collective). None with one
    // GPU (or once aborted): then NCCL is not even loaded.
    bool any = false;
    for (const Rank& r : ranks_) any = any || r.nccl != nullptr;
    if (any) {
      ncclGroupStart();
      for (Rank& r : ranks_) {
        if (r.nccl != nullptr) ncclCommDestroy(r.nccl);
      }
      ncclGroupEnd();
    }
#endif
    ReleaseDataset();
    for (Rank& r : ranks_) {
      cudaSetDevice(r.device);
      r.model.reset();
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
      for (cudaStream_t s : {r.compute, r.copy, r.comm}) {
        if (s != nullptr) cudaStreamDestroy(s);
      }
    }
    // What a failed teardown call left as this thread's last error would fail the next group's
    // first launch check (a reused worker's next trial).
    (void)cudaGetLastError();
  }

  int size() const override { return static_cast<int>(ranks_.size()); }

  void Run(const std::function<void(int rank)>& fn) override {
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

  // Waits for every rank's streams, ignoring their errors (said already, or sticky).
  void SynchronizeAll() {
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

  void TrainMicroBatch(int rank, const MicroBatch& mb, const StepArgs& args,
                       std::vector<double>* finished) override {
    ThrowIfError(Queue(rank, mb, args, finished));
  }

  void FinishSteps(int rank, std::vector<double>* finished) override {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    if (r.queued > 0) ThrowIfError(Observe(rank, r.queued - 1, finished));
  }

  double TakeDataWait(int rank) override {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    const double w = r.data_wait_s;
    r.data_wait_s = 0;
    return w;
  }

  void Evaluate(int rank, const float* x, const int32_t* y, int rows, double* loss_sum,
                int64_t* correct) override {
    ThrowIfError(ranks_[static_cast<size_t>(rank)].model->Evaluate(x, y, rows, loss_sum, correct));
  }

  Status SetState(const ModelState& state) override {
    const size_t n = static_cast<size_t>(mlp_.shape.num_params);
    SWEEP_RETURN_IF_ERROR(CheckModelState(state, n, ranks_[0].opt.size()));
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
        CUDA_CHECK(cudaMemcpyAsync(r.loss_scale.data(), &scale, sizeof scale,
                                   cudaMemcpyHostToDevice, r.compute));
      }
      CUDA_CHECK(cudaStreamSynchronize(r.compute));
      r.model->ParamsChanged();
    }
    skipped_reported_ = static_cast<int64_t>(scale.skipped);
    return Status::Ok();
  }

  ModelState GetState() const override {
    ModelState s;
    ThrowIfError(ReadState(&s));
    return s;
  }

  CommStats TakeCommStats() override {
    const CommStats s = ranks_[0].comm_stats;
    ranks_[0].comm_stats = CommStats{};
    return s;
  }

  int64_t TakeSkippedSteps() override {
    int64_t skipped = 0;
    ThrowIfError(ReadSkipped(&skipped));
    const int64_t delta = skipped - skipped_reported_;
    skipped_reported_ = skipped;
    return delta;
  }

  HostAllocator* host_allocator() override { return &pinned_; }
  bool takes_pixels() const override { return true; }

  Result<bool> HoldDataset(const Dataset& data) override {
    const bool u8 = !data.u8.empty();
    const size_t n = static_cast<size_t>(data.n), dim = static_cast<size_t>(data.dim);
    const size_t bytes = n * dim * (u8 ? 1 : sizeof(float)) + n * sizeof(int32_t);
    // A quarter of free memory at most: the trial's activations, and other trials sharing the
    // GPU, keep the rest.
    for (int i = 0; i < size(); ++i) {
      SWEEP_RETURN_IF_ERROR(SetDevice(i));
      size_t free = 0, total = 0;
      CUDA_CHECK(cudaMemGetInfo(&free, &total));
      if (bytes > free / 4) return false;
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

 private:
  friend class BucketHook;

  struct Rank {
    int device = 0;
    cudaStream_t compute = nullptr, copy = nullptr, comm = nullptr;
    cublasHandle_t blas = nullptr;
    std::unique_ptr<Mlp> model;
    std::vector<DeviceBuffer<float>> opt;  // sgd: velocity; adamw: m, v
    Comm nccl = nullptr;
    std::unique_ptr<BucketHook> hook;
    // The pipeline. Per input slot: `copied` (the copy stream filled it) and `input_free`
    // (compute is done with it). Per micro-batch parity: `done` (all its work).
    cudaEvent_t copied[Mlp::kInputSlots] = {}, input_free[Mlp::kInputSlots] = {};
    cudaEvent_t done[2] = {};
    bool ends_step[2] = {false, false};  // micro-batch of that parity was a step's last
    int64_t step_of[2] = {0, 0};         // and the step it belongs to
    int64_t queued = 0;                  // micro-batches queued so far
    int64_t observed = 0;                // micro-batches whose `done` the host has seen
    int64_t steps = 0;                   // steps queued so far
    double* loss_host = nullptr;         // pinned [2]: the step's total loss, by step parity
    double data_wait_s = 0;
    // Several GPUs: the summed loss; per bucket, "backward has queued it"; per step parity, the
    // timing events for CommStats (end of backward, first reduction, last reduction).
    DeviceBuffer<double> loss_total;
    std::vector<cudaEvent_t> bucket_ready;
    cudaEvent_t backward_end[2] = {}, comm_start[2] = {}, comm_done[2] = {};
    CommStats comm_stats;
    // fp16: the loss scale and its bookkeeping, on the device; found_inf is this step's.
    DeviceBuffer<LossScaleState> loss_scale;
    DeviceBuffer<int> found_inf;
    // HoldDataset: the training set (one of data_u8, data_f32), its labels, and per input slot
    // the micro-batch's row numbers on the device and in pinned staging (idx_host, kInputSlots x
    // max_rows).
    DeviceBuffer<uint8_t> data_u8;
    DeviceBuffer<float> data_f32;
    DeviceBuffer<int32_t> data_labels;
    DeviceBuffer<int32_t> idx[Mlp::kInputSlots];
    int32_t* idx_host = nullptr;
    int64_t data_dim = 0, data_rows = 0;
    // Streamed pixels (MicroBatch::pixels): per input slot, the micro-batch's uint8 rows, which
    // the copy stream scales into the model's input slot. Made at the first such micro-batch.
    DeviceBuffer<uint8_t> pixels[Mlp::kInputSlots];

    std::vector<cudaEvent_t> AllEvents() const {
      std::vector<cudaEvent_t> all(bucket_ready);
      for (int i = 0; i < Mlp::kInputSlots; ++i) {
        all.push_back(copied[i]);
        all.push_back(input_free[i]);
      }
      for (int i = 0; i < 2; ++i) {
        for (cudaEvent_t e : {done[i], backward_end[i], comm_start[i], comm_done[i]}) {
          all.push_back(e);
        }
      }
      return all;
    }
  };

  CudaReplicaGroup(const GroupSpec& spec, MlpView mlp, std::vector<int> devices)
      : spec_(spec),
        mlp_(std::move(mlp)),
        buckets_(MakeGradBuckets(mlp_.shape, spec.bucket_floats)),
        team_(static_cast<int>(devices.size())),
        ranks_(devices.size()) {
    for (size_t i = 0; i < devices.size(); ++i) ranks_[i].device = devices[i];
  }

  bool fp16() const { return spec_.precision == Precision::kFp16; }

  Status SetDevice(int rank) const {
    CUDA_CHECK(cudaSetDevice(ranks_[static_cast<size_t>(rank)].device));
    return Status::Ok();
  }

  Status Init() {
    const int R = size();
    for (int i = 0; i < R; ++i) SWEEP_RETURN_IF_ERROR(InitRank(i));
    if (R > 1) {
#if defined(SWEEP_HAVE_NCCL)
      // One communicator per rank, made together from this thread, kept for the whole trial.
      // A process that trains sets NCCL_RUNTIME_CONNECT=0 at its start (ConnectNcclAtInit), so
      // that every connection is made here rather than at a collective's first call.
      std::vector<ncclComm_t> comms(static_cast<size_t>(R), nullptr);
      std::vector<int> devices;
      for (const Rank& r : ranks_) devices.push_back(r.device);
      const ncclResult_t made = ncclCommInitAll(comms.data(), R, devices.data());
      NCCL_CHECK(made);
      for (int i = 0; i < R; ++i)
        ranks_[static_cast<size_t>(i)].nccl = comms[static_cast<size_t>(i)];
#else
      return Status::InvalidArgument("cuda: several GPUs need NCCL, which this build lacks");
#endif
    }
    return Status::Ok();
  }

  Status InitRank(int rank) {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    SWEEP_RETURN_IF_ERROR(SetDevice(rank));
    CUDA_CHECK(cudaStreamCreateWithFlags(&r.compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&r.copy, cudaStreamNonBlocking));
    SWEEP_RETURN_IF_ERROR(CreateBlasHandle(r.compute, spec_.tf32, &r.blas));
    SWEEP_ASSIGN_OR_RETURN(r.model, Mlp::Create(mlp_.shape, mlp_.act, spec_.max_rows, mlp_.dropout,
                                                spec_.precision, r.compute, r.blas));
    const int slots = spec_.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 2 : 1;
    r.opt.resize(static_cast<size_t>(slots));
    for (DeviceBuffer<float>& o : r.opt) {
      SWEEP_RETURN_IF_ERROR(DeviceBuffer<float>::Make(mlp_.shape.num_params, &o));
    }
    // Events that only order work carry no timestamps (cheaper to record and wait on).
    for (int i = 0; i < Mlp::kInputSlots; ++i) {
      CUDA_CHECK(cudaEventCreateWithFlags(&r.copied[i], cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&r.input_free[i], cudaEventDisableTiming));
    }
    for (cudaEvent_t& e : r.done) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    void* loss_host = nullptr;
    CUDA_CHECK(cudaHostAlloc(&loss_host, 2 * sizeof(double), cudaHostAllocPortable));
    r.loss_host = static_cast<double*>(loss_host);
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

  // Every rank's communicator, aborted once (several GPUs; a no-op with one).
  void AbortCommunicators() {
#if defined(SWEEP_HAVE_NCCL)
    std::unique_lock<std::shared_mutex> lock(nccl_mu_);
    if (aborted_ || size() == 1) return;
    aborted_ = true;
    for (Rank& r : ranks_) {
      if (r.nccl != nullptr) ncclCommAbort(r.nccl);  // an error here has nowhere to go
      r.nccl = nullptr;
    }
#endif
  }

  Status Aborted() const {
    return Status::Aborted("cuda: another GPU of this trial failed; its all-reduce was aborted");
  }

  // HoldDataset's copy of `data` on rank i's device.
  Status HoldOn(int i, const Dataset& data) {
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
    CUDA_CHECK(cudaMemcpy(r.data_labels.data(), data.labels.data(), n * sizeof(int32_t),
                          cudaMemcpyHostToDevice));
    for (DeviceBuffer<int32_t>& idx : r.idx) {
      SWEEP_RETURN_IF_ERROR(DeviceBuffer<int32_t>::Make(spec_.max_rows, &idx));
    }
    void* staging = nullptr;
    CUDA_CHECK(cudaHostAlloc(&staging, Mlp::kInputSlots * sizeof(int32_t) * spec_.max_rows,
                             cudaHostAllocPortable));
    if (r.idx_host != nullptr) cudaFreeHost(r.idx_host);  // held before: replaced
    r.idx_host = static_cast<int32_t*>(staging);
    r.data_dim = data.dim;
    r.data_rows = data.n;
    // The zeroing and the copies ran on the legacy stream, which the copy stream does not wait
    // for, and a copy from pageable memory may still be landing when cudaMemcpy returns.
    CUDA_CHECK(cudaDeviceSynchronize());
    return Status::Ok();
  }

  // Frees what HoldOn made, on every rank.
  void ReleaseDataset() {
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
    }
  }

  Status BroadcastFromRank0() {
#if defined(SWEEP_HAVE_NCCL)
    std::shared_lock<std::shared_mutex> lock(nccl_mu_);
    if (aborted_) return Aborted();
    // One thread drives every communicator here, so the calls form one NCCL group.
    const size_t n = static_cast<size_t>(mlp_.shape.num_params);
    NCCL_CHECK(ncclGroupStart());
    Status first = Status::Ok();
    auto keep = [&first](Status s) {
      if (first.ok()) first = std::move(s);
    };
    for (Rank& r : ranks_) {
      keep([&]() -> Status {
        NCCL_CHECK(ncclBroadcast(r.model->params(), r.model->params(), n, ncclFloat, 0, r.nccl,
                                 r.compute));
        for (DeviceBuffer<float>& o : r.opt) {
          NCCL_CHECK(ncclBroadcast(o.data(), o.data(), n, ncclFloat, 0, r.nccl, r.compute));
        }
        return Status::Ok();
      }());
    }
    keep([]() -> Status {
      NCCL_CHECK(ncclGroupEnd());
      return Status::Ok();
    }());
    return first;
#else
    return Status::InvalidArgument("cuda: several GPUs need NCCL, which this build lacks");
#endif
  }

  // Step 3 of the protocol for micro-batch m (< queued): waits for its `done` unless seen.
  Status Observe(int rank, int64_t m, std::vector<double>* finished) {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    if (m < r.observed) return Status::Ok();
    const size_t parity = static_cast<size_t>(m % 2);
    SWEEP_RETURN_IF_ERROR(WaitPastCollectives(r, r.done[parity]));
    r.observed = m + 1;
    if (!r.ends_step[parity]) return Status::Ok();
    const size_t sp = static_cast<size_t>(r.step_of[parity] % 2);
    finished->push_back(r.loss_host[sp]);
    if (size() > 1) {
      float exposed_ms = 0, span_ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&exposed_ms, r.backward_end[sp], r.comm_done[sp]));
      CUDA_CHECK(cudaEventElapsedTime(&span_ms, r.comm_start[sp], r.comm_done[sp]));
      r.comm_stats.exposed_s += exposed_ms > 0 ? exposed_ms * 1e-3 : 0.0;
      r.comm_stats.reduce_s += span_ms > 0 ? span_ms * 1e-3 : 0.0;
    }
    return Status::Ok();
  }

  // Waits for `event`, recorded on rank's streams after work that may include its collectives.
  // NCCL's own faults (a transport or proxy failure) leave a collective waiting for ever
  // without any CUDA error: with several GPUs the wait polls the communicator's asynchronous
  // error, and returns it (the abort that follows frees the other ranks).
  Status WaitPastCollectives(Rank& r, cudaEvent_t event) {
    if (size() == 1) {
      CUDA_CHECK(cudaEventSynchronize(event));
      return Status::Ok();
    }
    for (unsigned spins = 1;; ++spins) {
      const cudaError_t ready = cudaEventQuery(event);
      if (ready == cudaSuccess) return Status::Ok();
      if (ready != cudaErrorNotReady) CUDA_CHECK(ready);
      // Not ready is an answer, not a fault, but the runtime keeps it as the thread's last error
      // all the same: the next launch's check would fail on it.
      (void)cudaGetLastError();
      if (spins % 64 == 0) SWEEP_RETURN_IF_ERROR(CheckAsyncError(r));
      std::this_thread::yield();
    }
  }

  Status CheckAsyncError(Rank& r) {
#if defined(SWEEP_HAVE_NCCL)
    std::shared_lock<std::shared_mutex> lock(nccl_mu_);
    if (aborted_) return Aborted();
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(r.nccl, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      return NcclStatus(static_cast<int>(async), ncclGetErrorString(async),
                        "an all-reduce (ncclCommGetAsyncError)", __FILE__, __LINE__);
    }
#else
    (void)r;
#endif
    return Status::Ok();
  }

  Status Queue(int rank, const MicroBatch& mb, const StepArgs& args,
               std::vector<double>* finished) {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    Mlp& model = *r.model;
    const int64_t m = r.queued;
    const int slot = static_cast<int>(m % Mlp::kInputSlots);
    const size_t parity = static_cast<size_t>(m % 2);
    // The input slots hold max_rows rows: a larger batch would overwrite what lies after them.
    if (mb.rows < 0 || mb.rows > spec_.max_rows) {
      return Status::Internal("cuda: a micro-batch of " + std::to_string(mb.rows) +
                              " rows; the group was made for at most " +
                              std::to_string(spec_.max_rows));
    }
    const size_t rows = static_cast<size_t>(mb.rows);
    // 1. The input, on the copy stream.
    CUDA_CHECK(cudaStreamWaitEvent(r.copy, r.input_free[slot], 0));
    if (mb.idx != nullptr) {
      if (r.data_labels.data() == nullptr) {
        return Status::Internal(
            "cuda: a micro-batch of row numbers, but the group holds no "
            "training set");
      }
      // The staging slot's last copy (micro-batch m - 2) finished: the host waited for its
      // `copied` at the end of that call.
      int32_t* staged = r.idx_host + static_cast<size_t>(slot) * spec_.max_rows;
      std::memcpy(staged, mb.idx, rows * sizeof(int32_t));
      // A row outside the set would be an illegal address on the device, which ends the context
      // for every later trial of the process: refuse it here (a few hundred compares).
      for (size_t i = 0; i < rows; ++i) {
        if (staged[i] < 0 || staged[i] >= r.data_rows) {
          return Status::Internal("cuda: row " + std::to_string(staged[i]) +
                                  " of a micro-batch is outside the held set of " +
                                  std::to_string(r.data_rows) + " rows");
        }
      }
      CUDA_CHECK(cudaMemcpyAsync(r.idx[slot].data(), staged, rows * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, r.copy));
      SWEEP_RETURN_IF_ERROR(gather_rows(model.x(slot), model.y(slot), r.idx[slot].data(), mb.rows,
                                        r.data_u8.data(), r.data_f32.data(), r.data_labels.data(),
                                        r.data_dim, r.copy));
    } else if (mb.pixels != nullptr) {
      const int64_t dim = mlp_.shape.in(0);
      if (r.pixels[slot].data() == nullptr) {
        for (DeviceBuffer<uint8_t>& p : r.pixels) {
          SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint8_t>::Make(spec_.max_rows * dim, &p));
        }
      }
      CUDA_CHECK(cudaMemcpyAsync(r.pixels[slot].data(), mb.pixels, rows * static_cast<size_t>(dim),
                                 cudaMemcpyHostToDevice, r.copy));
      CUDA_CHECK(cudaMemcpyAsync(model.y(slot), mb.y, rows * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, r.copy));
      SWEEP_RETURN_IF_ERROR(gather_rows(model.x(slot), nullptr, nullptr, mb.rows,
                                        r.pixels[slot].data(), nullptr, nullptr, dim, r.copy));
    } else {
      CUDA_CHECK(cudaMemcpyAsync(model.x(slot), mb.x,
                                 rows * static_cast<size_t>(mlp_.shape.in(0)) * sizeof(float),
                                 cudaMemcpyHostToDevice, r.copy));
      CUDA_CHECK(cudaMemcpyAsync(model.y(slot), mb.y, rows * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, r.copy));
    }
    CUDA_CHECK(cudaEventRecord(r.copied[slot], r.copy));
    // 2. Compute.
    CUDA_CHECK(cudaStreamWaitEvent(r.compute, r.copied[slot], 0));
    SWEEP_RETURN_IF_ERROR(model.ForwardLoss(slot, mb.rows, args.dloss_scale,
                                            fp16() ? &r.loss_scale.data()->scale : nullptr,
                                            args.dropout_key, mb.first_row, !mb.first));
    const bool reduce = mb.last && size() > 1;
    if (reduce) r.hook->Reset();
    SWEEP_RETURN_IF_ERROR(
        model.Backward(slot, mb.rows, !mb.first, reduce ? r.hook.get() : nullptr));
    CUDA_CHECK(cudaEventRecord(r.input_free[slot], r.compute));
    r.ends_step[parity] = mb.last;
    r.step_of[parity] = r.steps;
    if (mb.last) SWEEP_RETURN_IF_ERROR(FinishStep(rank, args));
    CUDA_CHECK(cudaEventRecord(r.done[parity], r.compute));
    ++r.queued;
    if (mb.last) ++r.steps;
    // 3. The previous micro-batch, then this one's input.
    if (m > 0) SWEEP_RETURN_IF_ERROR(Observe(rank, m - 1, finished));
    const Clock::time_point wait_start = Clock::now();
    CUDA_CHECK(cudaEventSynchronize(r.copied[slot]));
    r.data_wait_s += Since(wait_start);
    return Status::Ok();
  }

  // The end of a step on the compute stream (after the last micro-batch's backward).
  Status FinishStep(int rank, const StepArgs& args) {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    Mlp& model = *r.model;
    const size_t sp = static_cast<size_t>(r.steps % 2);
    const double* loss = model.summed_loss();
    if (size() > 1) {
#if defined(SWEEP_HAVE_NCCL)
      // Every bucket's all-reduce is queued on the comm stream, which has waited for the last
      // bucket (recorded after the loss was summed): add the ranks' losses there too.
      CUDA_CHECK(cudaEventRecord(r.backward_end[sp], r.compute));
      {
        std::shared_lock<std::shared_mutex> lock(nccl_mu_);
        if (aborted_) return Aborted();
        NCCL_CHECK(ncclAllReduce(model.summed_loss(), r.loss_total.data(), 1, ncclDouble, ncclSum,
                                 r.nccl, r.comm));
      }
      CUDA_CHECK(cudaEventRecord(r.comm_done[sp], r.comm));
      CUDA_CHECK(cudaStreamWaitEvent(r.compute, r.comm_done[sp], 0));
      loss = r.loss_total.data();
#else
      return Status::InvalidArgument("cuda: several GPUs need NCCL, which this build lacks");
#endif
    }
    const int64_t n = mlp_.shape.num_params;
    const int* skip = nullptr;
    if (fp16()) {
      SWEEP_RETURN_IF_ERROR(unscale_check(model.grads(), n, &r.loss_scale.data()->scale,
                                          r.found_inf.data(), r.compute));
      skip = r.found_inf.data();
    }
    const OptimizerSpec& o = spec_.optimizer;
    if (o.kind == OptimizerSpec::Kind::kSgd) {
      SWEEP_RETURN_IF_ERROR(sgd_update(model.params(), r.opt[0].data(), model.grads(), n, args.lr,
                                       o.momentum, o.weight_decay, o.nesterov, r.compute, skip,
                                       model.params16(), model.half_type()));
    } else {
      SWEEP_RETURN_IF_ERROR(adamw_update(
          model.params(), r.opt[0].data(), r.opt[1].data(), model.grads(), n, args.lr, o.beta1,
          o.beta2, o.eps, o.weight_decay, args.t, r.compute, skip,
          fp16() ? r.loss_scale.data() : nullptr, model.params16(), model.half_type()));
    }
    if (fp16()) {
      SWEEP_RETURN_IF_ERROR(update_loss_scale(r.loss_scale.data(), r.found_inf.data(),
                                              spec_.loss_scale_window, r.compute));
    }
    // The optimizer wrote the 16-bit copy of the weights too (bf16 / fp16): it stays current.
    CUDA_CHECK(
        cudaMemcpyAsync(&r.loss_host[sp], loss, sizeof(double), cudaMemcpyDeviceToHost, r.compute));
    return Status::Ok();
  }

  // BucketHook's work: bucket `b` of rank's gradients is queued on compute; reduce it on comm.
  Status StartBucket(int rank, size_t b) {
#if defined(SWEEP_HAVE_NCCL)
    Rank& r = ranks_[static_cast<size_t>(rank)];
    const GradBucket& bucket = buckets_[b];
    CUDA_CHECK(cudaEventRecord(r.bucket_ready[b], r.compute));
    CUDA_CHECK(cudaStreamWaitEvent(r.comm, r.bucket_ready[b], 0));
    if (b == 0) CUDA_CHECK(cudaEventRecord(r.comm_start[static_cast<size_t>(r.steps % 2)], r.comm));
    float* g = r.model->grads() + bucket.begin;
    std::shared_lock<std::shared_mutex> lock(nccl_mu_);
    if (aborted_) return Aborted();
    NCCL_CHECK(ncclAllReduce(g, g, static_cast<size_t>(bucket.end - bucket.begin), ncclFloat,
                             ncclSum, r.nccl, r.comm));
    return Status::Ok();
#else
    (void)rank;
    (void)b;
    return Status::InvalidArgument("cuda: several GPUs need NCCL, which this build lacks");
#endif
  }

  Status ReadState(ModelState* s) const {
    const Rank& r = ranks_[0];  // every replica holds the same weights and optimizer state
    SWEEP_RETURN_IF_ERROR(SetDevice(0));
    const size_t n = static_cast<size_t>(mlp_.shape.num_params);
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
    CUDA_CHECK(cudaStreamSynchronize(r.compute));
    if (fp16()) s->loss_scale = scale;
    return Status::Ok();
  }

  Status ReadSkipped(int64_t* skipped) const {
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

  const GroupSpec spec_;
  const MlpView mlp_;                      // the model, which Supports checked is an MLP
  const std::vector<GradBucket> buckets_;  // in the order backward completes them
  ThreadTeam team_;
  std::vector<Rank> ranks_;
  PinnedAllocator pinned_;
  int64_t skipped_reported_ = 0;
  // Several GPUs: NCCL calls hold it shared, AbortCommunicators exclusively; aborted_ under it.
  std::shared_mutex nccl_mu_;
  bool aborted_ = false;
};

Status BucketHook::LayerDone(int layer) {
  // Buckets complete in order, each when backward has queued its lowest layer.
  if (next_ < group_->buckets_.size() && group_->buckets_[next_].first_layer == layer) {
    SWEEP_RETURN_IF_ERROR(group_->StartBucket(rank_, next_));
    ++next_;
  }
  return Status::Ok();
}

bool HaveNccl() {
#if defined(SWEEP_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

// The ordinals the group will use: spec.devices, or 0 .. replicas - 1.
Result<std::vector<int>> GroupDevices(const GroupSpec& spec, int count) {
  std::vector<int> devices = spec.devices;
  if (devices.empty()) {
    if (spec.replicas > count) {
      return Status::InvalidArgument("cuda: replicas = " + std::to_string(spec.replicas) +
                                     " needs as many GPUs; this " + "process sees " +
                                     std::to_string(count) + " (set replicas, or devices = [...])");
    }
    for (int d = 0; d < spec.replicas; ++d) devices.push_back(d);
  }
  if (static_cast<int>(devices.size()) != spec.replicas) {
    return Status::InvalidArgument("cuda: " + std::to_string(devices.size()) +
                                   " devices for replicas = " + std::to_string(spec.replicas));
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    const int d = devices[i];
    if (d < 0 || d >= count) {
      return Status::InvalidArgument("cuda: device " + std::to_string(d) +
                                     " is not present; this process sees " + std::to_string(count) +
                                     " GPU(s)");
    }
    // NCCL takes one rank per GPU: the same one twice fails its init or hangs.
    if (std::find(devices.begin(), devices.begin() + static_cast<ptrdiff_t>(i), d) !=
        devices.begin() + static_cast<ptrdiff_t>(i)) {
      return Status::InvalidArgument("cuda: device " + std::to_string(d) +
                                     " is listed twice; each replica needs a GPU of its own");
    }
  }
  return devices;
}

// What every GPU of the group must hold for the model: weights and gradients in fp32, the
// optimizer's state, and the 16-bit copy of the weights in bf16/fp16. A lower bound (the
// activations and cuBLAS's workspace come on top), so a model refused here could never have been
// made, and the user learns why in words rather than from a failed cudaMalloc.
Status CheckDeviceMemory(const GroupSpec& spec, const std::vector<int>& devices) {
  const double params = static_cast<double>(spec.model.num_params);
  const int states = spec.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 2 : 1;
  const double need = params * (sizeof(float) * (2.0 + states) +
                                (spec.precision != Precision::kFp32 ? sizeof(uint16_t) : 0));
  for (int d : devices) {
    CUDA_CHECK(cudaSetDevice(d));
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    if (need > static_cast<double>(free)) {
      char msg[320];
      std::snprintf(msg, sizeof msg,
                    "cuda: the model does not fit in GPU %d's memory: %.0f parameters need at "
                    "least %.1f GiB (weights, gradients, optimizer state), it has %.1f GiB free "
                    "of %.1f; make hidden smaller",
                    d, params, need / 1073741824.0, static_cast<double>(free) / 1073741824.0,
                    static_cast<double>(total) / 1073741824.0);
      return Status::InvalidArgument(msg);
    }
  }
  return Status::Ok();
}

class CudaBackend final : public Backend {
 public:
  std::string_view name() const override { return "cuda"; }
  Status Supports(const GroupSpec& spec) const override {
    const Result<int> count = DeviceCount();
    if (!count.ok()) return count.status();  // NotFound: the CPU may take it
    if (spec.replicas < 1) return Status::InvalidArgument("cuda: replicas must be >= 1");
    MlpView mlp;
    if (!AsMlp(spec.model, &mlp) || spec.label_smoothing != 0) {
      // NotFound: the CPU backend trains it (and with backend = "cuda" this is the error).
      return Status::NotFound(
          "cuda: the GPU backend trains MLPs only for now (this model has convolution, pooling "
          "or batch norm layers, or label_smoothing)");
    }
    if (spec.replicas > 1 && !HaveNccl()) {
      return Status::InvalidArgument(
          "cuda: replicas = " + std::to_string(spec.replicas) +
          " needs NCCL for the gradient all-reduce, and this build has none (install NCCL and "
          "rebuild, or run the trial with gpus = 1)");
    }
    return GroupDevices(spec, *count).status();
  }
  Result<std::unique_ptr<ReplicaGroup>> CreateGroup(const GroupSpec& spec) const override {
    SWEEP_RETURN_IF_ERROR(Supports(spec));
    SWEEP_ASSIGN_OR_RETURN(const int count, DeviceCount());
    SWEEP_ASSIGN_OR_RETURN(std::vector<int> devices, GroupDevices(spec, count));
    SWEEP_RETURN_IF_ERROR(CheckDeviceMemory(spec, devices));
    Result<std::unique_ptr<ReplicaGroup>> group = CudaReplicaGroup::Create(spec, devices);
    if (!group.ok() &&
        group.status().message().find("cudaErrorMemoryAllocation") != std::string::npos) {
      // The weights fit (above), so the activations, another trial sharing the GPU, or
      // another program took the rest.
      return group.status().WithMessage(
          group.status().message() + " (making the model, " +
          std::to_string(spec.model.num_params) + " parameters, for batches of " +
          std::to_string(spec.max_rows) +
          " rows: make hidden or batch_size smaller, or leave the GPU to one trial)");
    }
    return group;
  }
};

Result<int> ProbeDevices() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the CPU path must not trip over it later
    // The runtime says "insufficient driver" also where there is no driver at all: say which.
    if (err == cudaErrorInsufficientDriver) {
      void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
      if (driver == nullptr) {
        return Status::NotFound(
            "cuda: no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)");
      }
      ::dlclose(driver);
    }
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

std::string ContextFault() {
  std::set<int> devices;
  {
    std::lock_guard<std::mutex> lock(used_mu);
    devices = used_devices;
  }
  if (devices.empty()) return "";
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  std::string fault;
  for (const int d : devices) {
    // A broken context fails these with its sticky error; a healthy idle one returns at once.
    cudaError_t err = cudaSetDevice(d);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      fault = "GPU " + std::to_string(d) + ": " + cudaGetErrorName(err) + " (" +
              cudaGetErrorString(err) + ")";
      break;
    }
  }
  if (restore) cudaSetDevice(current);
  (void)cudaGetLastError();  // said in `fault`; not the next launch's error
  return fault;
}

}  // namespace sweep::trainer::cuda
