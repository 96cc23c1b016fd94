// Trainer trials in a worker: [trainer] settings, then the trial's parameters, then its slots
// (threads, replicas, GPUs) make the trainer's options; each epoch is a report.
#include <cmath>
#include <filesystem>

#include "trainer/trainer.h"
#include "worker_kinds.h"

namespace sweep::executor {

using nlohmann::json;

namespace {

// The trainer's options for a task: its settings, then its parameters, then its slots.
Result<trainer::TrainOptions> TrainerOptions(const TrialTask& task) {
  trainer::TrainOptions options;
  options.seed = task.seed;
  for (const json* source : {&task.settings, &task.params}) {
    for (const auto& [key, value] : source->items()) {
      SWEEP_RETURN_IF_ERROR(trainer::ApplyOption(&options, key, value));
    }
  }
  // The trial's slots give its threads and replicas, unless the config says otherwise.
  auto set = [&](const char* key) {
    return task.settings.contains(key) || task.params.contains(key);
  };
  if (!set("threads")) options.threads = std::max(1, task.threads);
  // One replica per slot (device). On CPU a single-slot trial keeps one replica and lets BLAS
  // use its thread.
  if (!set("replicas")) {
    options.replicas =
        task.gpus.empty() ? std::max(1, task.threads) : static_cast<int>(task.gpus.size());
  }
  // The trial's slots are the GPUs its replicas train on.
  if (!task.gpus.empty()) options.devices = task.gpus;
  SWEEP_RETURN_IF_ERROR(trainer::Validate(options));
  return options;
}

TrialOutcome RunTrainerTrial(const TrialTask& task, const ReportSink& sink,
                             const std::atomic<bool>& stop, const TrialHooks& hooks) {
  Result<trainer::TrainOptions> built = TrainerOptions(task);
  if (!built.ok()) return Failed(built.status().message());
  trainer::TrainOptions& options = *built;
  options.report_resumed_epoch = task.replay_checkpoint_report;
  options.stop_after_epoch = task.stop_at_epoch;
  // A stop (the sweep stopping, an agent preempted) reaches the trial between its steps: a
  // batch system's grace period is shorter than a long epoch. Its checkpoint keeps the steps.
  options.stop_requested = [&] {
    if (hooks.idle) hooks.idle();
    return stop.load(std::memory_order_relaxed);
  };
  if (task.fresh && !options.checkpoint_path.empty()) {
    std::error_code ec;
    std::filesystem::remove(options.checkpoint_path, ec);
    // A file where a folder of the path should be leaves nothing to delete: writing the first
    // checkpoint says why it cannot be there.
    // A folder in its place is the trial's trouble (its generated path), not the machine's.
    if (ec == std::errc::directory_not_empty || ec == std::errc::is_a_directory) {
      return Failed(options.checkpoint_path + ": cannot delete the checkpoint an earlier sweep " +
                    "left there: " + ec.message());
    }
    if (ec && ec != std::errc::not_a_directory) {
      return Interrupted(
          options.checkpoint_path +
          ": cannot delete the checkpoint an earlier sweep left there: " + ec.message());
    }
  }

  auto on_epoch = [&](const trainer::EpochReport& r) {
    // The checkpoint's epoch again: only the store that lost its report needs it.
    if (r.replayed && r.step <= task.stored_step) return !stop.load(std::memory_order_relaxed);
    json metrics = {{"train_loss", r.train_loss},   {"samples_per_s", r.samples_per_s},
                    {"data_wait_s", r.data_wait_s}, {"epoch_s", r.epoch_s},
                    {"allreduce_s", r.allreduce_s}, {"lr", r.lr}};
    metrics["skipped_steps"] = r.skipped_steps;
    if (r.skipped_files >= 0) metrics["skipped_files"] = r.skipped_files;
    if (std::isfinite(r.val_loss)) metrics["val_loss"] = r.val_loss;
    if (std::isfinite(r.val_acc)) metrics["val_acc"] = r.val_acc;
    sink(r.step, r.epoch, metrics);
    return !stop.load(std::memory_order_relaxed);
  };
  Result<trainer::TrainResult> result = trainer::Train(options, on_epoch);
  // Its own checkpoint, written by this sweep, refused (damaged, cut short, or replaced by
  // another file): the file's trouble, not the trial's, nor its machine's. It trains from the
  // start, as it does without a checkpoint; the store keeps the reports it had (a step reported
  // again keeps its first report). Only a sweep's rerun (replay_checkpoint_report) owns its
  // file: `sweep train`'s checkpoint_path is the user's, and a file refused there is left as it
  // is and named in the failure.
  const std::string& path = options.checkpoint_path;
  std::string note;
  if (!result.ok() && task.replay_checkpoint_report && !path.empty() &&
      result.status().message().rfind(path + ": ", 0) == 0 &&
      (result.status().code() == Status::Code::kCorruption ||
       result.status().code() == Status::Code::kInvalidArgument)) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    if (ec) {
      return Interrupted(result.status().message() + "; cannot delete it: " + ec.message());
    }
    // The trainer's advice to delete the file (after its question) is done by now.
    std::string why = result.status().message();
    for (const char* advice : {"; has it changed? delete ", "; delete "}) {
      if (const size_t at = why.rfind(advice); at != std::string::npos) {
        why.erase(at);
        break;
      }
    }
    note = why + "; deleted it and trained the trial from the start";
    result = trainer::Train(options, on_epoch);
  }
  if (!result.ok() && result.status().code() == Status::Code::kUnavailable) {
    return Interrupted(result.status().message());
  }
  if (!result.ok()) return Failed(result.status().message());
  TrialOutcome out;
  out.kind = result->stopped ? TrialOutcome::Kind::kStopped : TrialOutcome::Kind::kCompleted;
  out.error = note;
  if (result->stopped_in_epoch > 0) {
    out.error += (out.error.empty() ? "" : "; ") + std::string("stopped ") +
                 trainer::WithinEpoch(result->stopped_in_epoch, result->epoch_steps_done,
                                      result->steps_per_epoch) +
                 ": it goes on from there";
  }
  out.end_metrics = json::object();
  if (result->test_acc) out.end_metrics["test_acc"] = *result->test_acc;
  // A folder set's label map, and the bad files it left out, go with the trial.
  if (!result->class_names.empty()) {
    out.info["classes"] = result->class_names;
    out.info["skipped_files"] = result->skipped_files;
    if (!result->skipped.empty()) out.info["skipped"] = result->skipped;
  }
  out.resumed_from_epoch = result->resumed_from_epoch;
  out.resumed_epoch_steps = result->resumed_epoch_steps;
  out.steps_per_epoch = result->steps_per_epoch;
  return out;
}

std::vector<std::string> TrainerMetrics() { return trainer::MetricNames(); }

}  // namespace

const WorkerKind kTrainerKind{TrialKind::kTrainer, RunTrainerTrial, TrainerMetrics};

Status CheckTrainerTask(const TrialTask& task) { return TrainerOptions(task).status(); }

Result<TrainerLayout> TrainerLayoutOf(const TrialTask& task) {
  SWEEP_ASSIGN_OR_RETURN(trainer::TrainOptions options, TrainerOptions(task));
  return TrainerLayout{options.replicas, options.threads};
}

}  // namespace sweep::executor
