// RunTrial for each trial kind, and the TrialTask wire form.
// Trainer trials apply [trainer] settings, then the trial's parameters, then the executor's
// choices (threads, seed); function trials evaluate an analytic test function, optionally as a
// curve over `steps` reports.
#include "executor/trial.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "command_trial.h"
#include "executor/functions.h"
#include "trainer/trainer.h"

namespace sweep::executor {

using nlohmann::json;

std::string_view ToString(TrialOutcome::Kind kind) {
  switch (kind) {
    case TrialOutcome::Kind::kCompleted:
      return "completed";
    case TrialOutcome::Kind::kStopped:
      return "stopped";
    case TrialOutcome::Kind::kFailed:
      return "failed";
    case TrialOutcome::Kind::kInterrupted:
      return "interrupted";
  }
  return "failed";
}

std::optional<TrialOutcome::Kind> OutcomeFromString(std::string_view text) {
  for (TrialOutcome::Kind kind : {TrialOutcome::Kind::kCompleted, TrialOutcome::Kind::kStopped,
                                  TrialOutcome::Kind::kFailed, TrialOutcome::Kind::kInterrupted}) {
    if (text == ToString(kind)) return kind;
  }
  return std::nullopt;
}

bool TrialTask::IsDecisionPoint(int64_t step, double epoch, size_t* next_point) const {
  if (decide_every_report) return true;
  const double resource = decide_by_epoch ? epoch : static_cast<double>(step);
  bool reached = false;
  while (*next_point < decision_points.size() && resource >= decision_points[*next_point]) {
    ++*next_point;
    reached = true;
  }
  return reached;
}

json ToJson(const TrialTask& task) {
  json j = {{"number", task.number},     {"kind", task.kind},       {"params", task.params},
            {"settings", task.settings}, {"threads", task.threads}, {"gpus", task.gpus},
            {"seed", task.seed}};
  if (task.fresh) j["fresh"] = true;
  if (task.replay_checkpoint_report) j["replay"] = true;
  if (task.stop_at_epoch > 0) j["stop_at_epoch"] = task.stop_at_epoch;
  if (task.heartbeat_timeout_s > 0) j["heartbeat_timeout_s"] = task.heartbeat_timeout_s;
  if (task.stored_step > 0) {
    j["stored"] = {{"step", task.stored_step},
                   {"epoch", task.stored_epoch},
                   {"metric", task.stored_metric},
                   {"epoch_steps", task.stored_epoch_steps}};
  }
  if (!task.decision_points.empty() || task.decide_every_report) {
    j["decide"] = {{"at", task.decision_points},
                   {"every", task.decide_every_report},
                   {"by_epoch", task.decide_by_epoch}};
  }
  return j;
}

Result<TrialTask> TrialTaskFromJson(const json& j) {
  try {
    TrialTask t;
    t.number = j.at("number").get<int64_t>();
    t.kind = j.at("kind").get<std::string>();
    t.params = j.at("params");
    t.settings = j.at("settings");
    t.threads = j.at("threads").get<int>();
    t.gpus = j.at("gpus").get<std::vector<int>>();
    t.seed = j.at("seed").get<uint64_t>();
    t.fresh = j.value("fresh", false);
    t.replay_checkpoint_report = j.value("replay", false);
    t.stop_at_epoch = j.value("stop_at_epoch", 0);
    t.heartbeat_timeout_s = j.value("heartbeat_timeout_s", 0.0);
    if (!std::isfinite(t.heartbeat_timeout_s) || t.heartbeat_timeout_s < 0 ||
        t.heartbeat_timeout_s > 86400.0 * 365) {
      return Status::InvalidArgument(
          "malformed trial task: heartbeat_timeout_s must be a "
          "number of seconds, at most a year");
    }
    if (auto stored = j.find("stored"); stored != j.end()) {
      t.stored_step = stored->at("step").get<int64_t>();
      t.stored_epoch = stored->at("epoch").get<double>();
      t.stored_metric = stored->at("metric").get<bool>();
      t.stored_epoch_steps = stored->value("epoch_steps", int64_t{1});
      if (t.stored_epoch_steps < 1 || t.stored_epoch_steps > t.stored_step) {
        return Status::InvalidArgument("malformed trial task: stored epoch_steps out of range");
      }
    }
    if (auto d = j.find("decide"); d != j.end()) {
      t.decision_points = d->at("at").get<std::vector<double>>();
      t.decide_every_report = d->at("every").get<bool>();
      t.decide_by_epoch = d->at("by_epoch").get<bool>();
    }
    return t;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("malformed trial task: ") + e.what());
  }
}

std::vector<std::string> TrialMetricNames(std::string_view kind) {
  if (kind == "trainer") return trainer::MetricNames();
  if (kind == "function") return {"value"};
  return {};
}

namespace {

TrialOutcome Failed(std::string error) {
  TrialOutcome out;
  out.kind = TrialOutcome::Kind::kFailed;
  out.error = std::move(error);
  return out;
}

// The machine, or the trial's own files, stopped it, not the trial: see TrialOutcome.
TrialOutcome Interrupted(std::string error) {
  TrialOutcome out = Failed(std::move(error));
  out.kind = TrialOutcome::Kind::kInterrupted;
  return out;
}

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
                             const std::atomic<bool>& stop) {
  Result<trainer::TrainOptions> built = TrainerOptions(task);
  if (!built.ok()) return Failed(built.status().message());
  trainer::TrainOptions& options = *built;
  options.report_resumed_epoch = task.replay_checkpoint_report;
  options.stop_after_epoch = task.stop_at_epoch;
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
    note = result.status().message() + "; deleted it and trained the trial from the start";
    result = trainer::Train(options, on_epoch);
  }
  if (!result.ok() && result.status().code() == Status::Code::kUnavailable) {
    return Interrupted(result.status().message());
  }
  if (!result.ok()) return Failed(result.status().message());
  TrialOutcome out;
  out.kind = result->stopped ? TrialOutcome::Kind::kStopped : TrialOutcome::Kind::kCompleted;
  out.error = note;
  out.end_metrics = json::object();
  if (result->test_acc) out.end_metrics["test_acc"] = *result->test_acc;
  out.resumed_from_epoch = result->resumed_from_epoch;
  return out;
}

TrialOutcome RunFunctionTrial(const TrialTask& task, const ReportSink& sink,
                              const std::atomic<bool>& stop) {
  std::string name = task.settings.value("name", "");
  const FunctionInfo* info = FindFunction(name);
  if (info == nullptr) return Failed("unknown function '" + name + "'");
  Result<double> value = EvaluateFunction(name, task.params);
  if (!value.ok()) return Failed(value.status().message());
  int64_t steps = task.settings.value("steps", int64_t{0});
  int64_t step_ms = task.settings.value("step_ms", int64_t{0});
  // The curve descends towards the function's minimum in this many inputs (Styblinski-Tang's
  // grows with them).
  const double minimum = MinimumOf(*info, static_cast<int>(task.params.size()));
  TrialOutcome out;
  out.end_metrics = json::object();
  if (steps <= 0) {
    sink(1, 1, json{{"value", *value}});
    return out;
  }
  for (int64_t t = 1; t <= steps; ++t) {
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    double v = CurveValue(*value, minimum, task.params, t, steps);
    sink(t, static_cast<double>(t), json{{"value", v}});
    if (t < steps && stop.load(std::memory_order_relaxed)) {
      out.kind = TrialOutcome::Kind::kStopped;
      return out;
    }
  }
  return out;
}

}  // namespace

Status CheckTrainerTask(const TrialTask& task) { return TrainerOptions(task).status(); }

Result<TrainerLayout> TrainerLayoutOf(const TrialTask& task) {
  SWEEP_ASSIGN_OR_RETURN(trainer::TrainOptions options, TrainerOptions(task));
  return TrainerLayout{options.replicas, options.threads};
}

TrialOutcome RunTrial(const TrialTask& task, const ReportSink& sink, const std::atomic<bool>& stop,
                      const TrialHooks& hooks) {
  if (task.kind == "trainer") return RunTrainerTrial(task, sink, stop);
  if (task.kind == "function") return RunFunctionTrial(task, sink, stop);
  if (task.kind == "command") return RunCommandTrial(task, sink, stop, hooks);
  return Failed("unknown trial kind '" + task.kind + "'");
}

}  // namespace sweep::executor
