// Train(): sets up a run (train_setup.h: the data, the group's spec, the start point), builds a
// data-parallel replica group on a backend, and runs the epochs: each replica thread pulls its
// rows of every micro-batch from one prefetching Batcher (or a GPU gathers them from a set it
// holds), the group all-reduces and steps, and the calling thread reports, checkpoints and
// evaluates between epochs. Owned by the trainer. Each call owns its group, buffers and threads,
// so calls may run concurrently; the one process-wide thing it sets is OpenBLAS's thread count.
#include "trainer/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <new>
#include <string>
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
#include "train_setup.h"

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

// What an epoch's steps on every replica came to.
struct EpochSteps {
  int64_t done = 0;           // the epoch's steps done: its end, unless the gate stopped it
  double loss_sum = 0;        // the epoch's losses so far (a resumed part's too), in step order
  bool met_bad = false;       // a batch trained on had a streamed set's bad file
  int64_t diverged_step = 0;  // 1-based over the run; 0: none
  double diverged_loss = 0;
};

// What the steps of every epoch share.
struct Stepper {
  const TrainOptions& o;
  const Dataset& train;
  ReplicaGroup* group;
  Batcher* batcher;  // null when the group holds the set (`resident`)
  const LrSchedule& schedule;
  StepGate& gate;
  int64_t steps_per_epoch;
};

// Runs steps before.steps .. of `epoch` on every replica (rows order[...]; `step`: the run's
// steps before the epoch), adding each rank's time waiting for data to (*wait_s)[rank]. Every
// rank pulls its rows of each micro-batch from the Batcher, or the GPU gathers them from a set
// it holds; all stop after the same step when the gate says so.
EpochSteps RunSteps(const Stepper& c, int epoch, const int32_t* order, int64_t step,
                    const PartialEpoch& before, std::vector<double>* wait_s) {
  const TrainOptions& o = c.o;
  const int R = o.replicas, B = o.batch_size, K = o.accum_steps;
  // Rank r takes rows [B r / R, B (r + 1) / R) of every micro-batch: shards differ by at most
  // one row when R does not divide B, and the loss is scaled by B whatever the split.
  auto shard_begin = [B, R](int rank) { return static_cast<int>(int64_t{B} * rank / R); };
  const float dloss_scale = static_cast<float>(1.0 / (static_cast<double>(B) * K));
  const int64_t s0 = before.steps;
  EpochSteps out;
  out.loss_sum = before.loss_sum;
  // A streamed set's bad file in a batch trained on; one only gathered ahead, past a stop,
  // fails the run where it resumes instead.
  std::atomic<bool> met_bad{false};
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
            out.diverged_step = t + 1;
            out.diverged_loss = loss;
          }
          return false;
        }
        if (rank == 0) out.loss_sum += loss;
      }
      finished.clear();
      return true;
    };
    for (int64_t s = s0; s < c.steps_per_epoch; ++s) {
      if (!c.gate.Begin(rank, s)) break;
      const int64_t t = step + s;  // 0-based over the whole run
      StepArgs args;
      args.lr = static_cast<float>(c.schedule.At(t));
      args.t = t + 1;
      args.dloss_scale = dloss_scale;
      args.dropout_key = MixSeed(o.seed, kDropoutStream, static_cast<uint64_t>(t));
      for (int m = 0; m < K; ++m) {
        const int begin = shard_begin(rank);
        MicroBatch mb;
        if (c.batcher == nullptr) {
          // The Batcher's batch j is order[j B, (j + 1) B); this is batch s K + m.
          mb.idx = order + (s * K + m) * int64_t{B} + begin;
          mb.epoch = epoch;
          mb.position = (s * K + m) * int64_t{B} + begin;
        } else {
          const Batcher::Batch batch = c.batcher->Next(rank, &(*wait_s)[r]);
          if (batch.y == nullptr) return;  // another rank failed: Run reports its error
          // A bad file of a streamed set: stop now, not at the epoch's end (reported after).
          if (batch.bad) {
            met_bad = true;
            return;
          }
          const int64_t at = static_cast<int64_t>(begin) * c.train.dim;
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
        c.group->TrainMicroBatch(rank, mb, args, &finished);
      }
      if (!take()) return;
    }
    c.group->FinishSteps(rank, &finished);
    (*wait_s)[r] += c.group->TakeDataWait(rank);
    take();
  };
  c.group->Run([&](int rank) {
    try {
      train_on_rank(rank);
    } catch (...) {
      // The other ranks may be waiting in the Batcher for a slot this one holds, which it
      // will never give back: they stop, and the group reports this failure, not a hang.
      if (c.batcher != nullptr) c.batcher->Cancel();
      throw;
    }
  });
  out.done = c.gate.stop();
  out.met_bad = met_bad;
  return out;
}

Result<TrainResult> TrainImpl(const TrainOptions& o, const EpochCallback& on_epoch,
                              ModelState* final_state, CommStats* comm) {
  SWEEP_RETURN_IF_ERROR(Validate(o));
  InitScheme init = InitScheme::kAuto;
  ParseInit(o.init, &init);
  SWEEP_RETURN_IF_ERROR(CheckImageSizeFits(o));
  SWEEP_ASSIGN_OR_RETURN(RunData data, LoadRunData(o));
  const DatasetPtr& train = data.train;
  const DatasetPtr& test = data.test;
  const InputTransform& transform = data.transform;
  const int64_t steps_per_epoch = data.steps_per_epoch;
  SWEEP_ASSIGN_OR_RETURN(const GroupSpec spec, GroupSpecOf(o, data));
  SWEEP_ASSIGN_OR_RETURN(const Backend* backend,
                         PickBackend(spec, o.backend == "auto" ? "" : o.backend));
  SWEEP_RETURN_IF_ERROR(CheckHostMemory(spec, backend->name() == "cpu"));
  SWEEP_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaGroup> group, backend->CreateGroup(spec));
  const int R = o.replicas, shard = spec.max_rows;
  const int64_t step_samples = int64_t{o.batch_size} * o.accum_steps;

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
  SWEEP_ASSIGN_OR_RETURN(StartPoint start, ReadStartPoint(o, config, spec.model, data));
  result.steps_per_epoch = steps_per_epoch;
  if (start.resumed) {
    result.resumed_from_epoch = start.epochs_done;
    result.resumed_epoch_steps = start.partial.steps;
    result.epochs_done = start.epochs_done;
  }
  if (start.state.params.empty()) {
    start.state.params.resize(static_cast<size_t>(spec.model.num_params));
    InitParams(spec.model, o.seed, start.state.params.data(), nullptr, init);
  }
  SWEEP_RETURN_IF_ERROR(group->SetState(start.state));
  start.state = ModelState();
  const int first_epoch = start.epochs_done + 1;
  int64_t step = start.step;  // optimizer steps before the epoch being trained
  // The epoch the state is within, stopped part-way: its steps and sums so far (steps = 0: the
  // state is at an epoch's end). The checkpoint's is resumed first.
  PartialEpoch partial = start.partial;

  std::optional<EpochReport> last_report = start.report;
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
    c.set_samples = data.train->n;
    SWEEP_RETURN_IF_ERROR(WriteCheckpoint(o.checkpoint_path, c));
    result.checkpointed = true;
    return Status::Ok();
  };

  const LrSchedule schedule = LrSchedule::Make(o, steps_per_epoch);
  // Declared before the batcher, so it outlives the producer thread reading it.
  std::vector<int32_t> order(data.rows.size());
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
        train, o.batch_size, R, o.dataset.prefetch > 0 ? o.dataset.prefetch : kPrefetchDepth,
        R > 1 ? o.accum_steps : 0, pinned, gather_threads,
        group->takes_pixels() && !transform.active());
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
  if (o.report_resumed_epoch && start.report && on_epoch) {
    EpochReport again = *start.report;
    again.replayed = true;
    if (!on_epoch(again)) {
      result.stopped = again.epoch < o.epochs;
      last_epoch = again.epoch;
    }
  }

  // Only a run that can keep its steps stops within an epoch.
  StepGate gate(o.checkpoint_path.empty() ? nullptr : o.stop_requested);
  const Stepper stepper{o, *train, group.get(), batcher.get(), schedule, gate, steps_per_epoch};
  const int every = o.checkpoint_path.empty() ? 0 : o.checkpoint_every_steps;
  bool stopping = false;
  for (int epoch = first_epoch; epoch <= last_epoch && !stopping; ++epoch) {
    // The epoch runs in segments: to its end, or to each checkpoint within it, as a resume from
    // that checkpoint would. The first goes on from a checkpoint's step, with its sums so far.
    Clock::time_point segment_start = Clock::now();
    order = data.rows;
    Rng(MixSeed(o.seed, kShuffleStream, static_cast<uint64_t>(epoch)))
        .Shuffle(order.data(), static_cast<int64_t>(order.size()));
    PartialEpoch sums;  // the epoch's steps done and its sums so far
    for (;;) {
      const PartialEpoch before = partial;
      const int64_t s0 = before.steps;
      const int64_t until =
          every > 0 ? std::min(steps_per_epoch, (s0 / every + 1) * every) : steps_per_epoch;
      if (batcher) {
        batcher->StartEpoch(order.data(), steps_per_epoch * o.accum_steps, epoch,
                            s0 * o.accum_steps);
      }
      gate.StartEpoch(s0, until);
      std::fill(wait_s.begin(), wait_s.end(), 0.0);
      group->TakeCommStats();
      group->TakeSkippedSteps();

      const Clock::time_point train_start = Clock::now();
      const EpochSteps ran = RunSteps(stepper, epoch, order.data(), step, before, &wait_s);
      const int64_t done = ran.done;
      if (done == steps_per_epoch || ran.met_bad) SWEEP_RETURN_IF_ERROR(StreamStatus(train));
      if (ran.diverged_step != 0) {
        return Diverged(epoch, ran.diverged_step, "loss " + LossText(ran.diverged_loss),
                        spec.precision);
      }
      const CommStats epoch_comm = group->TakeCommStats();
      if (comm != nullptr) {
        comm->exposed_s += epoch_comm.exposed_s;
        comm->reduce_s += epoch_comm.reduce_s;
      }
      sums.steps = done;
      sums.steps_per_epoch = steps_per_epoch;
      sums.set_samples = train->n;
      sums.loss_sum = ran.loss_sum;
      sums.skipped_steps = before.skipped_steps + group->TakeSkippedSteps();
      sums.train_s = before.train_s + Seconds(train_start);
      sums.data_wait_s = before.data_wait_s + *std::max_element(wait_s.begin(), wait_s.end());
      sums.allreduce_s = before.allreduce_s + epoch_comm.exposed_s;
      sums.epoch_s = before.epoch_s + Seconds(segment_start);
      segment_start = Clock::now();
      if (done == steps_per_epoch) break;
      stopping = gate.heard() || done < until;  // else paused, to checkpoint
      if (stopping) result.stopped = true;
      if (done == 0) {
        // Told to stop before the epoch's first step: the state is the last epoch's end.
        SWEEP_RETURN_IF_ERROR(checkpoint(epoch - 1));
        break;
      }
      // Stopped before a step of its own: its checkpoint holds this already.
      if (done > s0) SWEEP_RETURN_IF_ERROR(checkpoint(epoch - 1, &sums));
      partial = sums;
      if (stopping) break;
    }
    if (stopping) break;
    partial = PartialEpoch();
    step += steps_per_epoch;

    EpochReport report;
    report.epoch = epoch;
    report.step = step;
    report.train_loss = sums.loss_sum / static_cast<double>(steps_per_epoch * step_samples);
    report.samples_per_s =
        static_cast<double>(steps_per_epoch * step_samples) / std::max(sums.train_s, 1e-9);
    report.data_wait_s = sums.data_wait_s;
    report.allreduce_s = sums.allreduce_s;
    report.skipped_steps = sums.skipped_steps;
    report.lr = schedule.At(step - 1);
    Evaluate(group.get(), *train, resident, transform, data.val.data(),
             static_cast<int64_t>(data.val.size()), shard, &eval_x, &eval_y, &report.val_loss,
             &report.val_acc);
    SWEEP_RETURN_IF_ERROR(StreamStatus(train));
    if (o.dataset.format == "folder") report.skipped_files = skipped_files();
    // A last step that blows up shows only here, in weights that no longer give a number.
    if (!data.val.empty() && !std::isfinite(report.val_loss)) {
      return Diverged(epoch, step, "validation loss " + LossText(report.val_loss), spec.precision);
    }
    report.epoch_s = sums.epoch_s + Seconds(segment_start);  // with the evaluation
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
    const bool resized = options.dataset.format == "folder" && !options.dataset.image_size.empty();
    return Status::Internal(std::string("trainer: out of host memory (std::bad_alloc): make ") +
                            (resized ? "batch_size, hidden, channels or dataset.image_size"
                                     : "batch_size, hidden or channels") +
                            " smaller, run fewer trials at once on this machine, or give the "
                            "process more memory");
  } catch (const std::exception& e) {  // std::system_error from a thread, a callback
    return Status::Internal(std::string("trainer: ") + e.what());
  }
}

std::string WithinEpoch(int epoch, int64_t steps, int64_t steps_per_epoch) {
  return "within epoch " + std::to_string(epoch) + ", after step " + std::to_string(steps) +
         " of its " + std::to_string(steps_per_epoch);
}

Result<TrainResult> Train(const TrainOptions& options, const EpochCallback& on_epoch) {
  return TrainWithState(options, on_epoch, nullptr);
}

}  // namespace sweep::trainer
