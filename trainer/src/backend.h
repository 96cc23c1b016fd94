// The trainer's device seam (ggml-backend style): a Backend builds a ReplicaGroup, R copies of
// the model on R devices (CPU: threads) that train data-parallel, and the training loop in
// trainer.cc talks only to that interface. Each backend is a folder (cpu/, cuda/) with the
// same op names; only backend.cc knows which were compiled in. Backends are stateless singletons
// (thread-safe); a ReplicaGroup belongs to one Train() call, see its methods for threading.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model.h"
#include "step_math.h"

namespace sweep::trainer {

class HostAllocator;    // batcher.h
struct Dataset;         // data.h
struct InputTransform;  // augment.h

struct OptimizerSpec {
  enum class Kind { kSgd, kAdamw };
  Kind kind = Kind::kSgd;
  float momentum = 0.9f;   // sgd
  bool nesterov = false;   // sgd
  float weight_decay = 0;  // sgd: L2 added to the gradient; adamw: decoupled
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adamw
};

struct GroupSpec {
  ModelSpec model;
  float label_smoothing = 0;  // of the training loss
  int replicas = 1;
  int max_rows = 1;  // most rows one replica sees at once (a micro-batch shard or eval chunk)
  OptimizerSpec optimizer;
  int threads = 1;  // CPU threads the trial may use
  Precision precision = Precision::kFp32;
  // CUDA ordinals, one per replica; empty: 0 .. replicas - 1 on a GPU backend. A CPU backend
  // refuses a spec that names devices.
  std::vector<int> devices;
  // fp16's dynamic loss scaling (PyTorch GradScaler's defaults): the loss is multiplied by the
  // scale before backward and the gradients divided by it before the optimizer; a step whose
  // gradients are not finite is skipped and halves the scale; `loss_scale_window` good steps in
  // a row double it.
  float initial_loss_scale = 65536.0f;
  int loss_scale_window = 2000;
  // GPU, fp32: GEMMs on tensor cores in TF32 (10-bit mantissa products); false: exact fp32.
  bool tf32 = true;
  // Several GPUs: the least floats in one all-reduce bucket (layers join from the output down
  // until a bucket holds this many). 4 MiB: near NCCL's bus bandwidth, small enough that
  // several start while backward runs on a large model. 1: one bucket per layer.
  int64_t bucket_floats = int64_t{1} << 20;
  // GPU: after a few launches of a full micro-batch, capture its forward, backward, all-reduces
  // and optimizer as a CUDA graph and replay that (cuda/replica_step.cc); false: launch always.
  bool cuda_graphs = true;
  // GPU: each convolution's plans are the fastest of cuDNN's first candidates, timed on the
  // device; false: the first its heuristics rank.
  bool cudnn_autotune = false;
};

// One optimizer step's scalars, the same on every rank.
struct StepArgs {
  float lr = 0;
  // 1-based step of the run. AdamW's bias correction counts the steps applied: t minus those
  // fp16 skipped, which the group subtracts (on a GPU, without waiting for the device).
  int64_t t = 1;
  float dloss_scale = 1;     // 1 / (samples in the whole step, over replicas and micro-batches)
  uint64_t dropout_key = 0;  // fresh per step
};

// One replica's share of one micro-batch: its rows as arrays, or, for a group that holds the
// training set (ReplicaGroup::HoldDataset), as row numbers of that set.
struct MicroBatch {
  const float* x = nullptr;      // [rows, inputs]
  const int32_t* y = nullptr;    // [rows]
  const int32_t* idx = nullptr;  // [rows]: rows of the held set; x and y are then unused
  // [rows, inputs]: uint8 pixels, for a group that takes them (ReplicaGroup::takes_pixels),
  // which scales them by 1/255 as Dataset::Gather does; x is then unused.
  const uint8_t* pixels = nullptr;
  int rows = 0;
  int64_t first_row = 0;  // index of x's first row among the step's samples (keys dropout)
  // Row numbers (idx) of a group that transforms the held set itself: the epoch and the first
  // row's place in it, which key the augmentation's draws (InputTransform::Draw).
  int epoch = 0;
  int64_t position = 0;
  bool first = true;  // the step's first micro-batch: gradients start from zero
  bool last = true;   // the step's last: all-reduce and optimizer follow
};

// Weights and optimizer state as host arrays, for initialisation, checkpoints and tests.
struct ModelState {
  std::vector<float> params;                  // model.num_params
  std::vector<std::vector<float>> optimizer;  // sgd: {velocity}; adamw: {m, v}
  // fp16: the dynamic loss scale and the steps skipped so far (AdamW's step count leaves them
  // out). Empty: start from GroupSpec's initial scale, none skipped. Other precisions: empty.
  std::optional<LossScaleState> loss_scale;
  // Batch norm's running statistics (model.num_buffers floats; rank 0's, which every replica
  // evaluates with, as DDP broadcasts rank 0's buffers). Empty: their initial values.
  std::vector<float> stats;
};

// Checks that `state` fits a model of num_params parameters and num_stats running statistics,
// and an optimizer with optimizer_buffers buffers (an empty optimizer state is allowed: it
// means zeros; so are empty statistics: their initial values).
Status CheckModelState(const ModelState& state, size_t num_params, size_t optimizer_buffers,
                       size_t num_stats = 0);

// Per-epoch collective timings (seconds), rank 0's.
struct CommStats {
  double exposed_s = 0;  // all-reduce time after backward, not hidden by it
  double reduce_s = 0;   // all gradient summing, hidden or not
};

class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  virtual int size() const = 0;
  // Runs fn(rank) once for every replica, concurrently, each on the thread that owns that
  // replica's device; returns when all have returned. One Run at a time.
  virtual void Run(const std::function<void(int rank)>& fn) = 0;
  // Inside Run, on rank's thread: forward and backward of this rank's share of a micro-batch.
  // On the last micro-batch of a step, the gradients are all-reduced and the optimizer step
  // applied; every replica then holds the same new weights. mb's arrays may be reused once it
  // returns. Appends to *finished the loss of each step that finished during the call, summed
  // over all ranks, oldest first (the same values on every rank, so all of them see a
  // divergence at the same step). The CPU finishes a step within its last micro-batch's call;
  // a device may keep one micro-batch queued and report a step during a later call.
  virtual void TrainMicroBatch(int rank, const MicroBatch& mb, const StepArgs& args,
                               std::vector<double>* finished) = 0;
  // Inside Run, on rank's thread: waits until every step queued is done and appends the losses
  // not reported yet. Call it before Run's function returns.
  virtual void FinishSteps(int rank, std::vector<double>* finished) {
    (void)rank;
    (void)finished;
  }
  // Inside Run, on rank's thread: seconds this rank's device waited for input since the last
  // call, beyond what the Batcher reports (copies to the device that compute did not hide).
  virtual double TakeDataWait(int rank) {
    (void)rank;
    return 0;
  }
  // Inside Run, on rank's thread: adds the summed loss and correct count of rows (<= max_rows).
  virtual void Evaluate(int rank, const float* x, const int32_t* y, int rows, double* loss_sum,
                        int64_t* correct) = 0;
  // Inside Run, on rank's thread, after HoldDataset returned true: Evaluate of rows[0..n) of
  // the held set, gathered and transformed (without augmentation) on the device, in chunks of
  // `chunk` (<= max_rows) rows, as Evaluate would be given them: the same sums, without the
  // host's copies.
  virtual void EvaluateHeld(int rank, const int32_t* rows, int64_t n, int chunk, double* loss_sum,
                            int64_t* correct);
  // Outside Run. SetState loads every replica (optimizer may be empty: zeros).
  virtual Status SetState(const ModelState& state) = 0;
  virtual ModelState GetState() const = 0;
  // Outside Run: the timings since the last call.
  virtual CommStats TakeCommStats() = 0;
  // Outside Run: optimizer steps skipped since the last call (fp16 loss scaling).
  virtual int64_t TakeSkippedSteps() { return 0; }
  // Outside Run: micro-batches rank 0 replayed from a CUDA graph since the last call.
  virtual int64_t TakeGraphLaunches() { return 0; }
  // What runs rank 0's layers (a GPU's cuDNN plans, for instance), for logs, benchmarks and
  // tests; empty when there is nothing to say.
  virtual std::string Describe() const { return ""; }
  // Where the Batcher should put the batches this group reads (pinned memory for a GPU, so that
  // copies from it are asynchronous); null: ordinary memory. Owned by the group.
  virtual HostAllocator* host_allocator() { return nullptr; }
  // Whether training micro-batches of an IDX set may come as its uint8 pixels
  // (MicroBatch::pixels) rather than floats.
  virtual bool takes_pixels() const { return false; }
  // Outside Run: offers the group the training set. True when it copied the set to its devices
  // and will take training micro-batches as row numbers (MicroBatch::idx), gathering them
  // there, and applying `transform` (may be null: none) to them as the Batcher would; false
  // (the CPU; a GPU without room for it, or a transform it cannot apply) when batches must come
  // as arrays. The group keeps no reference to `data` or `transform`.
  virtual Result<bool> HoldDataset(const Dataset& data, const InputTransform* transform) {
    (void)data;
    (void)transform;
    return false;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Ok when this backend can train `spec` here; otherwise why not. NotFound means "not for this
  // machine" (no device): the registry asks the next backend. Any other error means the trial
  // is this backend's but cannot be trained as asked (two GPUs without NCCL): the registry stops
  // there rather than fall back to a backend that would train it differently.
  virtual Status Supports(const GroupSpec& spec) const = 0;
  virtual Result<std::unique_ptr<ReplicaGroup>> CreateGroup(const GroupSpec& spec) const = 0;
};

// ---- registry (backend.cc) ----

// Every backend compiled in, preferred first; the CPU backend is always there, and last.
const std::vector<const Backend*>& Backends();
// The first backend that supports `spec`; the first refusal that is not NotFound; or an error
// listing why each one declined. `only` (not empty): consider the backend of that name alone.
Result<const Backend*> PickBackend(const GroupSpec& spec, std::string_view only = {});

}  // namespace sweep::trainer
