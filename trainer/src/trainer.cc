// Train(): loads the data (through the caches), splits it, builds a data-parallel replica group
// on a backend, resumes from a checkpoint when there is one, and runs the epochs: each replica
// thread pulls its rows of every micro-batch from one prefetching Batcher, the group all-reduces
// and steps, and the calling thread reports, checkpoints and evaluates between epochs. Owned by
// the trainer. Each call owns its group, buffers and threads, so calls may run concurrently;
// the one process-wide thing it sets is OpenBLAS's thread count.
#include "trainer/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "augment.h"
#include "backend.h"
#include "batcher.h"
#include "checkpoint.h"
#include "data.h"
#include "model.h"
#include "rng.h"
#include "schedule.h"
#include "step_gate.h"
#include "train_internal.h"

namespace sweep::trainer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kShuffleStream = 0x5F1Eull;  // keeps shuffle draws apart from init draws
constexpr uint64_t kDropoutStream = 0xD809ull;  // and dropout masks apart from both

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string LossText(double loss) {
  if (std::isnan(loss)) return "nan";
  return loss > 0 ? "inf" : "-inf";
}

// In fp16 the largest finite value is 65504: inputs or activations past it are infinite, which
// reads as a diverged run whatever the learning rate.
Status Diverged(int epoch, int64_t step, const std::string& what, Precision precision) {
  return Status::InvalidArgument(
      "diverged at epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + " (" +
      what + ")" +
      (precision == Precision::kFp16
           ? "; in fp16 a value past 65504 is infinite: if the learning rate is not the cause, "
             "inputs that large need scaling, or use "
             "precision = \"bf16\""
           : ""));
}

// Bytes of memory this process may use: the machine's, or its cgroup's limit when lower.
// The memory this process may have, and how to say where the bound comes from: the machine's,
// its container's (cgroup), or the process's own limits (ulimit -v, ulimit -d).
struct MemoryLimit {
  double bytes = 0;
  const char* said = "this machine has";
  const char* why = "";  // after the figure: which limit
};

MemoryLimit HostMemoryLimit() {
  MemoryLimit m;
  m.bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
            static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  for (const char* file :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(file);
    double limit = 0;
    if (in >> limit && limit > 0) m.bytes = std::min(m.bytes, limit);  // "max": no number
  }
  const std::pair<int, const char*> rlimits[] = {{RLIMIT_AS, " (ulimit -v)"},
                                                 {RLIMIT_DATA, " (ulimit -d)"}};
  for (const auto& [resource, why] : rlimits) {
    struct rlimit r {};
    if (::getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY &&
        static_cast<double>(r.rlim_cur) < m.bytes) {
      m.bytes = static_cast<double>(r.rlim_cur);
      m.said = "this process may use";
      m.why = why;
    }
  }
  return m;
}

// A model too large for this machine fails its trial here, with its size, rather than at an
// allocation the kernel answers by killing the process (and perhaps others). The estimate is a
// lower bound: in host memory the weights, the state kept for checkpoints and, on the CPU, each
// replica's gradients, the optimizer's state and the activations of a micro-batch.
Status CheckHostMemory(const GroupSpec& spec, bool on_cpu) {
  const ModelSpec& m = spec.model;
  const double params = static_cast<double>(m.num_params);
  const int states = spec.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 2
                     : spec.optimizer.momentum > 0                      ? 1
                                                                        : 0;
  double floats = 2 * params;
  double activations = 0;
  if (on_cpu) {
    // Each layer's output and its gradient, for a micro-batch shard on every replica.
    activations = 2.0 * spec.replicas * spec.max_rows * static_cast<double>(m.ActivationFloats());
    floats += params * (spec.replicas + states) + activations;
  }
  const double need = floats * sizeof(float);
  const MemoryLimit have = HostMemoryLimit();
  if (have.bytes > 0 && need > have.bytes) {
    const bool cnn = std::any_of(m.layers.begin(), m.layers.end(),
                                 [](const Layer& l) { return l.kind == LayerKind::kConv; });
    // Name what dominates: the activations grow with the batch, the weights with the widths.
    const char* smaller = activations > params * (spec.replicas + states + 2)
                              ? (cnn ? "batch_size or channels" : "batch_size or hidden")
                              : (cnn ? "channels or hidden" : "hidden or batch_size");
    char msg[400];
    std::snprintf(msg, sizeof msg,
                  "the model does not fit in memory: %.0f parameters need at least %.1f GiB "
                  "(weights, gradients, optimizer state, activations of %d samples per "
                  "replica), %s %.1f GiB%s; make %s smaller",
                  params, need / 1073741824.0, spec.max_rows, have.said, have.bytes / 1073741824.0,
                  have.why, smaller);
    return Status::InvalidArgument(msg);
  }
  return Status::Ok();
}

// Mean loss and accuracy over rows[0..n) of `data`, split into one contiguous part per replica
// and evaluated in chunks of at most `chunk` rows; parts are combined in rank order, so the
// result does not depend on timing. `held`: the group holds `data` and gathers the rows itself.
// NaN for both when n == 0.
void Evaluate(ReplicaGroup* group, const Dataset& data, bool held, const InputTransform& transform,
              const int32_t* rows, int64_t n, int chunk, std::vector<std::vector<float>>* x,
              std::vector<std::vector<int32_t>>* y, double* loss, double* acc) {
  if (n == 0) {
    *loss = *acc = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  const int R = group->size();
  std::vector<double> loss_sum(static_cast<size_t>(R), 0.0);
  std::vector<int64_t> correct(static_cast<size_t>(R), 0);
  group->Run([&](int rank) {
    const size_t r = static_cast<size_t>(rank);
    const int64_t begin = n * rank / R, end = n * (rank + 1) / R;
    if (held) {
      group->EvaluateHeld(rank, rows + begin, end - begin, chunk, &loss_sum[r], &correct[r]);
      return;
    }
    for (int64_t at = begin; at < end; at += chunk) {
      const int b = static_cast<int>(std::min<int64_t>(chunk, end - at));
      data.Gather(rows + at, b, (*x)[r].data(), (*y)[r].data());
      if (transform.active()) transform.Apply((*x)[r].data(), b, /*augment=*/false, 0, 0);
      group->Evaluate(rank, (*x)[r].data(), (*y)[r].data(), b, &loss_sum[r], &correct[r]);
    }
  });
  double total_loss = 0;
  int64_t total_correct = 0;
  for (int r = 0; r < R; ++r) {
    total_loss += loss_sum[static_cast<size_t>(r)];
    total_correct += correct[static_cast<size_t>(r)];
  }
  *loss = total_loss / static_cast<double>(n);
  *acc = static_cast<double>(total_correct) / static_cast<double>(n);
}

// Why a streamed set's rows could not all be decoded (a bad file); OK for a held set.
Status StreamStatus(const DatasetPtr& data) {
  if (data == nullptr || data->stream == nullptr) return Status::Ok();
  return data->stream->status();
}

// The cache folder to use; empty: none. One that cannot be made (a read-only file system, a
// file in the way) costs speed, not the trial: the dataset decodes in memory, as it does beside
// a cache folder that cannot be written.
std::string CacheDir(const TrainOptions& o) {
  if (o.cache_dir.empty()) return DefaultCacheDir();
  std::error_code ec;
  std::filesystem::create_directories(o.cache_dir, ec);
  if (!std::filesystem::is_directory(o.cache_dir, ec)) return "";
  return o.cache_dir;
}

// The transform between the dataset and the model: csv channels reordered, the split's
// per-channel statistics when normalizing, and the augmentations, which need images.
Status MakeTransform(const TrainOptions& o, const Dataset& train, TensorShape input,
                     const std::vector<int32_t>& split_rows, InputTransform* t) {
  t->shape = input;
  t->chw = o.dataset.format == "csv" && input.c > 1;
  t->crop = o.augment_crop;
  t->flip = o.augment_flip;
  t->erasing = static_cast<float>(o.random_erasing);
  t->seed = o.seed;
  if (t->augments() && input.h == 1 && input.w == 1) {
    return Status::InvalidArgument(
        std::string(o.augment_crop > 0 ? "augment_crop"
                    : o.augment_flip   ? "augment_flip"
                                       : "random_erasing") +
        ": augmentation needs images, and " + train.source + " holds flat vectors" +
        (o.dataset.format == "csv" ? " (give dataset.shape = [C, H, W])" : ""));
  }
  if (o.normalize.value_or(o.model == "cnn")) {
    std::vector<float> stddev;
    ChannelStats(train, split_rows.data(), static_cast<int64_t>(split_rows.size()), input, t->chw,
                 &t->mean, &stddev);
    for (float sd : stddev) t->inv_std.push_back(1.0f / sd);
  }
  return Status::Ok();
}

Result<TrainResult> TrainImpl(const TrainOptions& o, const EpochCallback& on_epoch,
                              ModelState* final_state, CommStats* comm) {
  SWEEP_RETURN_IF_ERROR(Validate(o));
  InitScheme init = InitScheme::kAuto;
  ParseInit(o.init, &init);
  const std::string cache_dir = CacheDir(o);

  // A folder set decodes with the trial's threads unless told otherwise: a trial packed
  // beside others uses its share of the cores, for the one-off decode and for a stream's.
  DatasetSpec dataset = o.dataset;
  if (dataset.decode_threads == 0) dataset.decode_threads = std::max(1, o.threads);
  // The test set loads up front too: a bad test file should fail before hours of training.
  SWEEP_ASSIGN_OR_RETURN(DatasetPtr train, LoadCached(dataset, /*test=*/false, cache_dir));
  SWEEP_RETURN_IF_ERROR(CheckTrainingLabels(*train));
  SWEEP_ASSIGN_OR_RETURN(const TensorShape input, SampleShape(*train, o.dataset));
  DatasetPtr test;
  if (!o.dataset.test_images.empty()) {
    SWEEP_ASSIGN_OR_RETURN(test, LoadCached(dataset, /*test=*/true, cache_dir));
    const Result<TensorShape> test_shape = SampleShape(*test, o.dataset);
    if (test->dim != train->dim || (test_shape.ok() && !(*test_shape == input))) {
      return Status::InvalidArgument(o.dataset.test_images + ": samples have " +
                                     std::to_string(test->dim) + " features, the training set's " +
                                     std::to_string(train->dim));
    }
    if (test->class_names != train->class_names) {
      return Status::InvalidArgument(o.dataset.test_images +
                                     ": its class folders are not the training folder's (" +
                                     train->source + "); labels are the sorted class names");
    }
    if (test->num_classes > train->num_classes) {
      return Status::InvalidArgument(
          test->source + ": has label " + std::to_string(test->num_classes - 1) +
          ", but the training set has only " + std::to_string(train->num_classes) + " classes");
    }
  }

  Split split = MakeSplit(train->n, o.validation_fraction);
  // Asked for a validation set and given none (0.01 of 60 samples rounds to 0): every val_
  // metric would be missing, and a sweep ranking by one would rank nothing.
  if (o.validation_fraction > 0 && split.val.empty()) {
    std::ostringstream msg;
    msg << "validation_fraction = " << o.validation_fraction << " of " << train->n
        << " training samples is less than one sample; give at least 1/" << train->n
        << " of them, or a larger training set";
    return Status::InvalidArgument(msg.str());
  }
  InputTransform transform;
  SWEEP_RETURN_IF_ERROR(MakeTransform(o, *train, input, split.train, &transform));
  std::vector<int32_t>& rows = split.train;
  // The split's order is a fixed permutation, so this subset is the same for every trial.
  const bool capped =
      o.max_train_samples > 0 && o.max_train_samples < static_cast<int64_t>(rows.size());
  if (capped) rows.resize(static_cast<size_t>(o.max_train_samples));
  const int R = o.replicas, B = o.batch_size, K = o.accum_steps;
  // Rank r takes rows [B r / R, B (r + 1) / R) of every micro-batch: shards differ by at most
  // one row when R does not divide B, and the loss is scaled by B whatever the split.
  auto shard_begin = [B, R](int rank) { return static_cast<int>(int64_t{B} * rank / R); };
  const int shard = (B + R - 1) / R;  // the largest
  const int64_t step_samples = int64_t{B} * K;
  const int64_t n_train = static_cast<int64_t>(rows.size());
  if (n_train < step_samples) {
    return Status::InvalidArgument(
        "training set has " + std::to_string(n_train) + (n_train == 1 ? " sample" : " samples") +
        (capped ? " (max_train_samples)" : " after the validation split") + ", fewer than " +
        (K == 1 ? "batch_size " : "batch_size * accum_steps = ") + std::to_string(step_samples));
  }
  // The last partial step of each epoch is dropped: every step then has the same shape and the
  // same gradient scale; the per-epoch shuffle means no sample is left out for long.
  const int64_t steps_per_epoch = n_train / step_samples;

  GroupSpec spec;
  SWEEP_ASSIGN_OR_RETURN(spec.model, BuildModel(o, input, train->num_classes));
  spec.label_smoothing = static_cast<float>(o.label_smoothing);
  spec.replicas = R;
  spec.max_rows = shard;
  spec.threads = o.threads;
  spec.optimizer.kind =
      o.optimizer == "adamw" ? OptimizerSpec::Kind::kAdamw : OptimizerSpec::Kind::kSgd;
  spec.optimizer.momentum = static_cast<float>(o.momentum);
  spec.optimizer.nesterov = o.nesterov;
  spec.optimizer.weight_decay = static_cast<float>(o.weight_decay);
  spec.optimizer.beta1 = static_cast<float>(o.beta1);
  spec.optimizer.beta2 = static_cast<float>(o.beta2);
  spec.optimizer.eps = static_cast<float>(o.eps);
  ParsePrecision(o.precision, &spec.precision);
  spec.devices = o.devices;
  spec.cuda_graphs = o.cuda_graphs;
  spec.cudnn_autotune = o.cudnn_autotune;
  SWEEP_ASSIGN_OR_RETURN(const Backend* backend,
                         PickBackend(spec, o.backend == "auto" ? "" : o.backend));
  SWEEP_RETURN_IF_ERROR(CheckHostMemory(spec, backend->name() == "cpu"));
  SWEEP_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaGroup> group, backend->CreateGroup(spec));

  // ---- initial state: fresh, or the checkpoint's ----
  TrainResult result;
  result.class_names = train->class_names;
  // Bad files left out of the held sets, and those a streamed one has met so far.
  auto skipped_files = [&] {
    int64_t n = 0;
    for (const DatasetPtr& d : {train, test}) {
      if (d == nullptr) continue;
      n += d->stream != nullptr ? d->stream->skipped_files() : d->skipped_files;
    }
    return n;
  };
  const std::string config = TrainingConfig(o);
  ModelState state;
  int first_epoch = 1;
  int64_t step = 0;  // optimizer steps before the epoch being trained
  std::optional<EpochReport> resumed_report;
  // The epoch the state is within, stopped part-way: its steps and sums so far (steps = 0: the
  // state is at an epoch's end). The checkpoint's is resumed first.
  PartialEpoch partial;
  if (!o.checkpoint_path.empty()) {
    RemoveAbandonedCheckpointWrites(o.checkpoint_path);
    Result<Checkpoint> ckpt = ReadCheckpoint(o.checkpoint_path);
    if (ckpt.ok()) {
      SWEEP_RETURN_IF_ERROR(CheckSameConfig(o.checkpoint_path, *ckpt, config));
      SWEEP_RETURN_IF_ERROR(CheckSameModel(o.checkpoint_path, *ckpt, spec.model));
      // Left by a longer run (its config differs only in epochs): going on from it would
      // report a model trained past what was asked as this run's.
      const int reached = ckpt->epoch + (ckpt->partial ? 1 : 0);
      const std::string at =
          (ckpt->partial ? "within epoch " : "at epoch ") + std::to_string(reached);
      if (reached > o.epochs) {
        return Status::InvalidArgument(o.checkpoint_path + ": checkpoint is " + at +
                                       ", past epochs = " + std::to_string(o.epochs) +
                                       " (a longer run's); delete it, or set epochs to at least " +
                                       std::to_string(reached));
      }
      if (ckpt->partial) {
        // Its steps are the epoch's first ones only in the epoch's order, which depends on the
        // training set's size; and a run told to stop before that epoch cannot go back to it.
        const PartialEpoch& p = *ckpt->partial;
        if (p.set_samples != train->n || p.steps_per_epoch != steps_per_epoch) {
          return Status::InvalidArgument(
              o.checkpoint_path + ": checkpoint is " + at + " of a training set of " +
              std::to_string(p.set_samples) + " samples (" + std::to_string(p.steps_per_epoch) +
              " steps an epoch), and " + train->source + " has " + std::to_string(train->n) + " (" +
              std::to_string(steps_per_epoch) +
              "); has it changed? delete the checkpoint to train from the start");
        }
        if (o.stop_after_epoch > 0 && reached > o.stop_after_epoch) {
          return Status::InvalidArgument(o.checkpoint_path + ": checkpoint is " + at +
                                         ", past the epoch this run is to stop after (" +
                                         std::to_string(o.stop_after_epoch) +
                                         "); delete it to train from the start");
        }
        partial = *ckpt->partial;
      }
      state = std::move(ckpt->state);
      first_epoch = ckpt->epoch + 1;
      step = ckpt->step - partial.steps;
      result.resumed_from_epoch = ckpt->epoch;
      result.epochs_done = ckpt->epoch;
      resumed_report = ckpt->report;
    } else if (ckpt.status().code() != Status::Code::kNotFound) {
      return ckpt.status();
    } else {
      // None yet: find out now, not after the epochs before the first one, that one can be
      // written there.
      SWEEP_RETURN_IF_ERROR(ProbeCheckpointPath(o.checkpoint_path));
    }
  }
  if (state.params.empty()) {
    state.params.resize(static_cast<size_t>(spec.model.num_params));
    InitParams(spec.model, o.seed, state.params.data(), nullptr, init);
  }
  SWEEP_RETURN_IF_ERROR(group->SetState(state));
  state = ModelState();

  std::optional<EpochReport> last_report = resumed_report;
  // After `epoch` whole epochs, and `part` of the next one when given.
  auto checkpoint = [&](int epoch, const PartialEpoch* part = nullptr) -> Status {
    Checkpoint c;
    c.config = config;
    c.epoch = epoch;
    c.step = step + (part != nullptr ? part->steps : 0);
    if (part != nullptr) c.partial = *part;
    c.rng_seed = o.seed;
    c.replicas = R;
    c.model = spec.model.ToJson();
    c.state = group->GetState();
    c.report = last_report;
    SWEEP_RETURN_IF_ERROR(WriteCheckpoint(o.checkpoint_path, c));
    result.checkpointed = true;
    return Status::Ok();
  };

  const LrSchedule schedule = LrSchedule::Make(o, steps_per_epoch);
  const float dloss_scale = static_cast<float>(1.0 / static_cast<double>(step_samples));
  // Declared before the batcher, so it outlives the producer thread reading it.
  std::vector<int32_t> order(rows.size());
  // A GPU with room for the training set holds it and gathers each micro-batch itself from the
  // row numbers: no gathering on the host and no copies of features per batch. Otherwise the
  // Batcher gathers ahead on its thread. Replicas sync once per step, so within one the fastest
  // may run K micro-batches ahead.
  bool resident = false;
  // A GPU that holds the set applies the transform there; otherwise it runs on the host as the
  // Batcher gathers, and such batches come as floats.
  if (o.dataset_on_gpu && train->stream == nullptr) {
    SWEEP_ASSIGN_OR_RETURN(resident,
                           group->HoldDataset(*train, transform.active() ? &transform : nullptr));
  }
  std::unique_ptr<Batcher> batcher;
  if (!resident) {
    // A GPU consumes batches faster than one thread gathers them; on the CPU the cores are
    // the replicas' own.
    HostAllocator* const pinned = group->host_allocator();
    // A streamed set decodes each batch on its own threads (decode_threads).
    const int gather_threads =
        pinned != nullptr && train->stream == nullptr ? GpuGatherThreads() : 1;
    batcher = std::make_unique<Batcher>(
        train, B, R, o.dataset.prefetch > 0 ? o.dataset.prefetch : kPrefetchDepth, R > 1 ? K : 0,
        pinned, gather_threads, group->takes_pixels() && !transform.active());
    if (transform.active()) batcher->SetTransform(&transform);
  }
  std::vector<std::vector<float>> eval_x(static_cast<size_t>(R));
  std::vector<std::vector<int32_t>> eval_y(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    eval_x[static_cast<size_t>(r)].resize(static_cast<size_t>(shard) * train->dim);
    eval_y[static_cast<size_t>(r)].resize(static_cast<size_t>(shard));
  }
  std::vector<double> wait_s(static_cast<size_t>(R));

  // The checkpoint's epoch again, for a caller that may not have kept its report; told to stop
  // there, it trains no further (the checkpoint is that epoch's already).
  int last_epoch = o.stop_after_epoch > 0 ? std::min(o.epochs, o.stop_after_epoch) : o.epochs;
  if (last_epoch < o.epochs && result.epochs_done >= last_epoch) {
    result.stopped = true;  // its checkpoint is there already: nothing to train
  }
  if (o.report_resumed_epoch && resumed_report && on_epoch) {
    EpochReport again = *resumed_report;
    again.replayed = true;
    if (!on_epoch(again)) {
      result.stopped = again.epoch < o.epochs;
      last_epoch = again.epoch;
    }
  }

  // Only a run that can keep its steps stops within an epoch.
  StepGate gate(o.checkpoint_path.empty() ? nullptr : o.stop_requested);
  for (int epoch = first_epoch; epoch <= last_epoch; ++epoch) {
    const Clock::time_point epoch_start = Clock::now();
    // An epoch resumed part-way goes on from its checkpoint's step, with its sums so far.
    const PartialEpoch before = partial;
    const int64_t s0 = before.steps;
    order = rows;
    Rng(MixSeed(o.seed, kShuffleStream, static_cast<uint64_t>(epoch)))
        .Shuffle(order.data(), n_train);
    if (batcher) batcher->StartEpoch(order.data(), steps_per_epoch * K, epoch, s0 * K);
    gate.StartEpoch(s0, steps_per_epoch);
    std::fill(wait_s.begin(), wait_s.end(), 0.0);
    group->TakeCommStats();
    group->TakeSkippedSteps();

    double loss_sum = before.loss_sum;
    // A streamed set's bad file in a batch trained on; one only gathered ahead, past a stop,
    // fails the run where it resumes instead.
    std::atomic<bool> met_bad{false};
    int64_t diverged_step = 0;  // 1-based, 0: none
    double diverged_loss = 0;
    const Clock::time_point train_start = Clock::now();
    auto train_on_rank = [&](int rank) {
      const size_t r = static_cast<size_t>(rank);
      // Losses arrive in step order, possibly a call or more after their step was queued (a GPU
      // keeps one in flight); every rank sees the same values, so all stop at the same call.
      std::vector<double> finished;
      int64_t seen = s0;  // steps of this epoch whose loss has arrived
      auto take = [&]() -> bool {
        for (const double loss : finished) {
          const int64_t t = step + seen++;
          if (!std::isfinite(loss)) {
            if (rank == 0) {
              diverged_step = t + 1;
              diverged_loss = loss;
            }
            return false;
          }
          if (rank == 0) loss_sum += loss;
        }
        finished.clear();
        return true;
      };
      for (int64_t s = s0; s < steps_per_epoch; ++s) {
        if (!gate.Begin(rank, s)) break;
        const int64_t t = step + s;  // 0-based over the whole run
        StepArgs args;
        args.lr = static_cast<float>(schedule.At(t));
        args.t = t + 1;
        args.dloss_scale = dloss_scale;
        args.dropout_key = MixSeed(o.seed, kDropoutStream, static_cast<uint64_t>(t));
        for (int m = 0; m < K; ++m) {
          const int begin = shard_begin(rank);
          MicroBatch mb;
          if (resident) {
            // The Batcher's batch j is order[j B, (j + 1) B); this is batch s K + m.
            mb.idx = order.data() + (s * K + m) * int64_t{B} + begin;
            mb.epoch = epoch;
            mb.position = (s * K + m) * int64_t{B} + begin;
          } else {
            const Batcher::Batch batch = batcher->Next(rank, &wait_s[r]);
            if (batch.y == nullptr) return;  // another rank failed: Run reports its error
            // A bad file of a streamed set: stop now, not at the epoch's end (reported below).
            if (batch.bad) {
              met_bad = true;
              return;
            }
            const int64_t at = static_cast<int64_t>(begin) * train->dim;
            if (batch.pixels != nullptr) {
              mb.pixels = batch.pixels + at;
            } else {
              mb.x = batch.x + at;
            }
            mb.y = batch.y + begin;
          }
          mb.rows = shard_begin(rank + 1) - begin;
          mb.first_row = int64_t{m} * B + begin;
          mb.first = m == 0;
          mb.last = m == K - 1;
          group->TrainMicroBatch(rank, mb, args, &finished);
        }
        if (!take()) return;
      }
      group->FinishSteps(rank, &finished);
      wait_s[r] += group->TakeDataWait(rank);
      take();
    };
    group->Run([&](int rank) {
      try {
        train_on_rank(rank);
      } catch (...) {
        // The other ranks may be waiting in the Batcher for a slot this one holds, which it
        // will never give back: they stop, and the group reports this failure, not a hang.
        if (batcher) batcher->Cancel();
        throw;
      }
    });
    const int64_t done = gate.stop();
    if (done == steps_per_epoch || met_bad) SWEEP_RETURN_IF_ERROR(StreamStatus(train));
    if (diverged_step != 0)
      return Diverged(epoch, diverged_step, "loss " + LossText(diverged_loss), spec.precision);
    const double train_s = Seconds(train_start) + before.train_s;
    if (done < steps_per_epoch) {
      // Told to stop within the epoch. At its start, the state is the last epoch's end.
      result.stopped = true;
      if (done == 0) {
        SWEEP_RETURN_IF_ERROR(checkpoint(epoch - 1));
        break;
      }
      const CommStats epoch_comm = group->TakeCommStats();
      if (comm != nullptr) {
        comm->exposed_s += epoch_comm.exposed_s;
        comm->reduce_s += epoch_comm.reduce_s;
      }
      PartialEpoch part;
      part.steps = done;
      part.steps_per_epoch = steps_per_epoch;
      part.set_samples = train->n;
      part.loss_sum = loss_sum;
      part.skipped_steps = before.skipped_steps + group->TakeSkippedSteps();
      part.train_s = train_s;
      part.data_wait_s = before.data_wait_s + *std::max_element(wait_s.begin(), wait_s.end());
      part.allreduce_s = before.allreduce_s + epoch_comm.exposed_s;
      part.epoch_s = before.epoch_s + Seconds(epoch_start);
      // Stopped before a step of its own: its checkpoint holds this already.
      if (done > s0) SWEEP_RETURN_IF_ERROR(checkpoint(epoch - 1, &part));
      partial = part;
      break;
    }
    partial = PartialEpoch();
    step += steps_per_epoch;

    EpochReport report;
    report.epoch = epoch;
    report.step = step;
    report.train_loss = loss_sum / static_cast<double>(steps_per_epoch * step_samples);
    report.samples_per_s =
        static_cast<double>(steps_per_epoch * step_samples) / std::max(train_s, 1e-9);
    report.data_wait_s = before.data_wait_s + *std::max_element(wait_s.begin(), wait_s.end());
    const CommStats epoch_comm = group->TakeCommStats();
    report.allreduce_s = before.allreduce_s + epoch_comm.exposed_s;
    report.skipped_steps = before.skipped_steps + group->TakeSkippedSteps();
    if (comm != nullptr) {
      comm->exposed_s += epoch_comm.exposed_s;
      comm->reduce_s += epoch_comm.reduce_s;
    }
    report.lr = schedule.At(step - 1);
    Evaluate(group.get(), *train, resident, transform, split.val.data(),
             static_cast<int64_t>(split.val.size()), shard, &eval_x, &eval_y, &report.val_loss,
             &report.val_acc);
    SWEEP_RETURN_IF_ERROR(StreamStatus(train));
    if (o.dataset.format == "folder") report.skipped_files = skipped_files();
    // A last step that blows up shows only here, in weights that no longer give a number.
    if (!split.val.empty() && !std::isfinite(report.val_loss)) {
      return Diverged(epoch, step, "validation loss " + LossText(report.val_loss), spec.precision);
    }
    report.epoch_s = before.epoch_s + Seconds(epoch_start);
    result.epochs_done = epoch;
    last_report = report;
    if (on_epoch && !on_epoch(report)) {
      // Asked to stop after its last epoch: it has run to its end all the same.
      result.stopped = epoch < o.epochs;
      if (!o.checkpoint_path.empty()) SWEEP_RETURN_IF_ERROR(checkpoint(epoch));
      break;
    }
    const bool due = o.checkpoint_every > 0 && epoch % o.checkpoint_every == 0;
    if (!o.checkpoint_path.empty() && (due || epoch == last_epoch)) {
      SWEEP_RETURN_IF_ERROR(checkpoint(epoch));
    }
    if (epoch == last_epoch && last_epoch < o.epochs) result.stopped = true;
  }

  if (partial.steps > 0) {
    result.stopped = true;
    result.stopped_in_epoch = result.epochs_done + 1;
    result.epoch_steps_done = partial.steps;
    result.steps_per_epoch = steps_per_epoch;
  }
  // Measured for a stopped run too: a trial stopped at early stopping's max_resource is a
  // finished one, and a pruned one's figure costs one pass over the test set. Not within an
  // epoch: that model is no epoch's.
  if (test != nullptr && partial.steps == 0) {
    std::vector<int32_t> all(static_cast<size_t>(test->n));
    for (int64_t i = 0; i < test->n; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    double test_loss = 0, test_acc = 0;
    Evaluate(group.get(), *test, /*held=*/false, transform, all.data(), test->n, shard, &eval_x,
             &eval_y, &test_loss, &test_acc);
    SWEEP_RETURN_IF_ERROR(StreamStatus(test));
    result.test_acc = test_acc;
  }
  result.skipped_files = skipped_files();
  for (const DatasetPtr& d : {train, test}) {
    if (d == nullptr) continue;
    const std::vector<std::string> some = d->stream != nullptr ? d->stream->skipped() : d->skipped;
    for (const std::string& s : some) {
      if (result.skipped.size() < 10) result.skipped.push_back(s);
    }
  }
  if (final_state != nullptr) *final_state = group->GetState();
  return result;
}

}  // namespace

Result<TrainResult> TrainWithState(const TrainOptions& options, const EpochCallback& on_epoch,
                                   ModelState* final_state, CommStats* comm) {
  try {
    return TrainImpl(options, on_epoch, final_state, comm);
  } catch (const std::bad_alloc&) {
    // Past CheckHostMemory's lower bound: the activations, the dataset's cache, the trials or
    // programs beside this one.
    return Status::Internal(
        "trainer: out of host memory (std::bad_alloc): make batch_size, hidden or channels "
        "smaller, run "
        "fewer trials at once on this machine, or give the process more memory");
  } catch (const std::exception& e) {  // std::system_error from a thread, a callback
    return Status::Internal(std::string("trainer: ") + e.what());
  }
}

Result<TrainResult> Train(const TrainOptions& options, const EpochCallback& on_epoch) {
  return TrainWithState(options, on_epoch, nullptr);
}

}  // namespace sweep::trainer
