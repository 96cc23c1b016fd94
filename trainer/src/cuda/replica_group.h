// The CUDA ReplicaGroup: one replica per GPU of the trial, each driven by its own thread. Made
// by cuda_backend.cc and owned by the trainer; each rank's calls come from that rank's thread.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <vector>

#if defined(SWEEP_HAVE_NCCL)
#include <nccl.h>
#endif
#if defined(SWEEP_HAVE_CUDNN)
#include <cudnn.h>
#endif

#include "backend.h"
#include "batcher.h"
#include "cuda/device_buffer.h"
#include "cuda/mlp.h"
#include "cuda/replica_model.h"
#include "model.h"
#include "team.h"

namespace sweep::trainer::cuda {

#if defined(SWEEP_HAVE_NCCL)
using Comm = ncclComm_t;
#else
using Comm = void*;
#endif

// The Batcher's slots in pinned memory, portable to every device of the process, so the copy
// stream's cudaMemcpyAsync from them is a DMA that does not block the host.
class PinnedAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes) override;
  void Free(void* p) override;  // an error here has nowhere to go

 private:
  static Status Alloc(size_t bytes, void** p);
};

class CudaReplicaGroup;

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

// Each rank (a ThreadTeam rank) has three non-blocking streams: compute (forward, backward,
// optimizer; its cuBLAS handle), copy (the next micro-batch's input, host to device) and, with
// several GPUs, comm (NCCL). A CUDA, cuBLAS or NCCL error becomes a Status naming the statement,
// file and line; the methods that return no Status throw it as CudaError, which Train() turns
// into a failed trial. The methods are defined by concern, one file each:
//   replica_group.cc  each rank's streams, handles and buffers; Run; the weights in and out;
//                     the training set held on the devices
//   replica_step.cc   one micro-batch on one rank: the input copy, compute, the optimizer step
//   replica_nccl.cc   several GPUs: communicators, broadcast, bucketed all-reduce, abort
class CudaReplicaGroup final : public ReplicaGroup {
 public:
  // An MLP without label smoothing trains as cuda/mlp.h (every precision); any other model as
  // cuda/net.h (fp32, one GPU, a build with cuDNN). devices: one CUDA ordinal per replica, each
  // present.
  static Result<std::unique_ptr<ReplicaGroup>> Create(const GroupSpec& spec,
                                                      std::vector<int> devices);
  ~CudaReplicaGroup() override;

  int size() const override { return static_cast<int>(ranks_.size()); }
  void Run(const std::function<void(int rank)>& fn) override;
  void TrainMicroBatch(int rank, const MicroBatch& mb, const StepArgs& args,
                       std::vector<double>* finished) override;
  void FinishSteps(int rank, std::vector<double>* finished) override;
  double TakeDataWait(int rank) override;
  void Evaluate(int rank, const float* x, const int32_t* y, int rows, double* loss_sum,
                int64_t* correct) override;
  void EvaluateHeld(int rank, const int32_t* rows, int64_t n, int chunk, double* loss_sum,
                    int64_t* correct) override;
  Status SetState(const ModelState& state) override;
  ModelState GetState() const override;
  CommStats TakeCommStats() override;
  int64_t TakeSkippedSteps() override;
  int64_t TakeGraphLaunches() override;
  std::string Describe() const override;
  HostAllocator* host_allocator() override { return &pinned_; }
  bool takes_pixels() const override { return true; }
  Result<bool> HoldDataset(const Dataset& data, const InputTransform* transform) override;

 private:
  friend class BucketHook;

  // What a micro-batch's captured work depends on besides the StepScalars: input slot, step
  // parity (the loss's pinned slot and the comm events), rows, first row, first and last of its
  // step, and dloss_scale's bits.
  using GraphKey = std::tuple<int, int, int, int64_t, bool, bool, uint32_t>;
  struct StepGraph {
    int seen = 0;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
  };

  struct Rank {
    int device = 0;
    cudaStream_t compute = nullptr, copy = nullptr, comm = nullptr;
    cublasHandle_t blas = nullptr;
    DeviceBuffer<uint8_t> blas_workspace;  // cublasSetWorkspace's
#if defined(SWEEP_HAVE_CUDNN)
    cudnnHandle_t dnn = nullptr;  // convolutions (cuda/net.h)
#endif
    std::unique_ptr<ReplicaModel> model;
    std::vector<DeviceBuffer<float>> opt;  // sgd: velocity; adamw: m, v
    Comm nccl = nullptr;
    std::unique_ptr<BucketHook> hook;
    // The pipeline. Per input slot: `copied` (the copy stream filled it) and `input_free`
    // (compute is done with it). Per micro-batch parity: `done` (all its work).
    cudaEvent_t copied[ReplicaModel::kInputSlots] = {}, input_free[ReplicaModel::kInputSlots] = {};
    cudaEvent_t done[2] = {};
    bool ends_step[2] = {false, false};  // micro-batch of that parity was a step's last
    int64_t step_of[2] = {0, 0};         // and the step it belongs to
    int64_t queued = 0;                  // micro-batches queued so far
    int64_t observed = 0;                // micro-batches whose `done` the host has seen
    int64_t steps = 0;                   // steps queued so far
    double* loss_host = nullptr;         // pinned [2]: the step's total loss, by step parity
    double data_wait_s = 0;
    // Several GPUs, a model with batch norm: the running statistics changed since this rank
    // last took rank 0's, which every replica evaluates with (as on the CPU); host staging.
    bool stats_stale = false;
    std::vector<float> stats_host;
    // Evaluation: the summed loss and correct count on the device ([1] each), and the held
    // set's rows to evaluate (made with the set, one per row; grown for a longer list).
    DeviceBuffer<double> eval_loss;
    DeviceBuffer<unsigned long long> eval_correct;
    DeviceBuffer<int32_t> eval_rows;
    // The step's scalars: on the device, where the kernels read them, and two pinned slots the
    // host fills by micro-batch parity and copies from on the compute stream.
    DeviceBuffer<StepScalars> step_dev;
    StepScalars* step_host = nullptr;
    // CUDA graphs of a micro-batch's compute work, by what its kernels are given (GraphKey):
    // launches seen, then the graph once captured. graphs_off after a capture failed.
    std::map<GraphKey, StepGraph> graphs;
    bool graphs_off = false;
    bool capturing = false;     // compute is being captured now
    uint64_t graphs_epoch = 0;  // the model's memory_epoch() when its graphs were captured
    int64_t graph_launches = 0;
    // Several GPUs: the summed loss; per bucket, "backward has queued it"; per step parity, the
    // timing events for CommStats (end of backward, first reduction, last reduction).
    DeviceBuffer<double> loss_total;
    std::vector<cudaEvent_t> bucket_ready;
    // They are recorded as external events (timing only); comm_joined orders compute after comm.
    cudaEvent_t backward_end[2] = {}, comm_start[2] = {}, comm_done[2] = {}, comm_joined[2] = {};
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
    DeviceBuffer<int32_t> idx[ReplicaModel::kInputSlots];
    int32_t* idx_host = nullptr;
    int64_t data_dim = 0, data_rows = 0;
    // Streamed pixels (MicroBatch::pixels): per input slot, the micro-batch's uint8 rows, which
    // the copy stream scales into the model's input slot. Made at the first such micro-batch.
    DeviceBuffer<uint8_t> pixels[ReplicaModel::kInputSlots];
    // A held set with a transform: per input slot the gathered rows before it and the
    // augmentation's draws (device, and pinned staging kInputSlots x max_rows x kDrawInts);
    // the normalization's mean and 1 / std per channel.
    DeviceBuffer<float> raw[ReplicaModel::kInputSlots];
    DeviceBuffer<int32_t> draws[ReplicaModel::kInputSlots];
    int32_t* draws_host = nullptr;
    DeviceBuffer<float> norm;

    std::vector<cudaEvent_t> AllEvents() const;
  };

  CudaReplicaGroup(const GroupSpec& spec, std::vector<int> devices);

  bool fp16() const { return spec_.precision == Precision::kFp16; }
  Status SetDevice(int rank) const;
  // Refuses `rows` outside [least, max_rows], naming `what` ("a micro-batch"): the input slots
  // hold max_rows rows, and a larger batch would overwrite what lies after them.
  Status FitsInputSlots(int64_t rows, int64_t least, const char* what) const;
  // Refuses a row number outside rank r's held set, naming `what` ("of a micro-batch"): it
  // would be an illegal address on the device, which ends the context for every later trial
  // of the process (a few hundred compares a batch).
  static Status CheckHeldRows(const Rank& r, const int32_t* rows, int64_t n, const char* what);

  // ---- life, state and the held dataset (replica_group.cc) ----
  Status Init();
  Status InitRank(int rank);
  // Waits for every rank's streams, ignoring their errors (said already, or sticky).
  void SynchronizeAll();
  // HoldDataset's copy of `data` on rank i's device (and transform_'s buffers).
  Status HoldOn(int i, const Dataset& data);
  // The held rows in input slot `slot` through transform_ (draws for rows at mb's epoch and
  // position), on the copy stream.
  Status TransformHeld(int rank, int slot, const MicroBatch& mb);
  // Evaluation, queued on the compute stream: before the first chunk (the counters zeroed,
  // rank 0's statistics taken), and after the last (the sums read back, added to the caller's).
  Status StartEvaluation(int rank);
  Status FinishEvaluation(int rank, double* loss_sum, int64_t* correct);
  Status EvaluateHeldOn(int rank, const int32_t* rows, int64_t n, int chunk, double* loss_sum,
                        int64_t* correct);
  // Frees what HoldOn made, on every rank.
  void ReleaseDataset();
  Status ReadState(ModelState* s) const;
  Status ReadSkipped(int64_t* skipped) const;

  // ---- one micro-batch (replica_step.cc) ----
  // Steps 1 to 3 of the protocol for rank's next micro-batch.
  Status Queue(int rank, const MicroBatch& mb, const StepArgs& args, std::vector<double>* finished);
  // The end of a step on the compute stream (after the last micro-batch's backward).
  Status FinishStep(int rank, const StepArgs& args);
  // Forward, backward and (on a step's last micro-batch) FinishStep, on the compute stream: what
  // a CUDA graph captures.
  Status ComputeMicroBatch(int rank, const MicroBatch& mb, const StepArgs& args);
  // ComputeMicroBatch as a graph: replayed once captured; captured after kGraphWarmup launches
  // of the same key; false in *ran when it was not run (the caller launches it).
  Status ReplayOrCapture(int rank, const MicroBatch& mb, const StepArgs& args, bool* ran);
  // Drops every rank's graphs (the weights were loaded: a graph would not recast them; NCCL is
  // about to abort or destroy the communicators their all-reduces belong to).
  void DropGraphs();
  void DropRankGraphs(Rank& r);
  // Records a timing event on s: as an external event while compute is being captured, so that
  // each replay records it too (elsewhere a plain record).
  static Status RecordTiming(const Rank& r, cudaEvent_t event, cudaStream_t s);
  // Step 3 of the protocol for micro-batch m (< queued): waits for its `done` unless seen.
  Status Observe(int rank, int64_t m, std::vector<double>* finished);
  // Rank 0's running statistics into rank's model (rank > 0), before it evaluates. Each
  // replica trains with its own batches' statistics and keeps running ones of its own, but only
  // rank 0's are ever read: by evaluation, and by checkpoints.
  Status TakeRank0Stats(int rank);

  // ---- several GPUs (replica_nccl.cc) ----
  // One communicator per rank, made together from this thread.
  Status InitCommunicators();
  // The destructor's: abort communicators with an asynchronous error (their collectives would
  // never end), and, once every stream is idle, destroy the rest.
  void AbortFaultedCommunicators();
  void DestroyCommunicators();
  // Every rank's communicator, aborted once (several GPUs; a no-op with one).
  void AbortCommunicators();
  Status Aborted() const;
  // Rank 0's weights and optimizer state to every other rank, on their compute streams.
  Status BroadcastFromRank0();
  // BucketHook's work: bucket `b` of rank's gradients is queued on compute; reduce it on comm.
  Status StartBucket(int rank, size_t b);
  // The losses of step parity sp summed over the ranks into r.loss_total, on comm, which compute
  // waits for (after every bucket's all-reduce).
  Status SumStepLoss(Rank& r, size_t sp);
  // Waits for `event`, recorded on rank's streams after work that may include its collectives.
  // NCCL's own faults (a transport or proxy failure) leave a collective waiting for ever
  // without any CUDA error: with several GPUs the wait polls the communicator's asynchronous
  // error, and returns it (the abort that follows frees the other ranks).
  Status WaitPastCollectives(Rank& r, cudaEvent_t event);
  Status CheckAsyncError(Rank& r);

  const GroupSpec spec_;
  const std::vector<GradBucket> buckets_;  // in the order backward completes them
  ThreadTeam team_;
  std::vector<Rank> ranks_;
  PinnedAllocator pinned_;
  int64_t skipped_reported_ = 0;
  // The transform the devices apply to the held set's training rows; null: none.
  std::unique_ptr<InputTransform> transform_;
  // Several GPUs: NCCL calls hold it shared, AbortCommunicators exclusively; aborted_ under it.
  std::shared_mutex nccl_mu_;
  bool aborted_ = false;
  // Guards every rank's graphs: a rank's thread captures and launches its own, an abort or a
  // load drops them all. Once aborting_ is set, nothing is captured or launched any more.
  std::mutex graphs_mu_;
  bool aborting_ = false;
};

}  // namespace sweep::trainer::cuda
