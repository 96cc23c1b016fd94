// The TrialTask wire form, and RunTrial: the table of the kinds a worker runs (one file each,
// see worker_kinds.h).
#include "executor/trial.h"

#include "worker_kinds.h"

namespace sweep::executor {

using nlohmann::json;

std::string_view ToString(TrialKind kind) {
  switch (kind) {
    case TrialKind::kTrainer:
      return "trainer";
    case TrialKind::kFunction:
      return "function";
    case TrialKind::kCommand:
      return "command";
  }
  return "trainer";
}

std::vector<std::string> TrialKindNames() {
  std::vector<std::string> out;
  for (TrialKind kind : {TrialKind::kTrainer, TrialKind::kFunction, TrialKind::kCommand}) {
    out.emplace_back(ToString(kind));
  }
  return out;
}

std::optional<TrialKind> TrialKindFromString(std::string_view text) {
  for (TrialKind kind : {TrialKind::kTrainer, TrialKind::kFunction, TrialKind::kCommand}) {
    if (text == ToString(kind)) return kind;
  }
  return std::nullopt;
}

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
  json j = {{"number", task.number},     {"kind", ToString(task.kind)}, {"params", task.params},
            {"settings", task.settings}, {"threads", task.threads},     {"gpus", task.gpus},
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
    const std::string kind = j.at("kind").get<std::string>();
    const std::optional<TrialKind> known = TrialKindFromString(kind);
    if (!known) {
      // A newer coordinator's kind reaches an older worker: say so rather than run nothing.
      return Status::InvalidArgument("malformed trial task: unknown trial kind '" + kind +
                                     "' (this worker runs trainer, function and command trials)");
    }
    t.kind = *known;
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

namespace {

// One line per kind.
constexpr const WorkerKind* kKinds[] = {&kTrainerKind, &kFunctionKind, &kCommandKind};

const WorkerKind* FindKind(TrialKind id) {
  for (const WorkerKind* kind : kKinds) {
    if (kind->kind == id) return kind;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> TrialMetricNames(TrialKind kind) {
  const WorkerKind* found = FindKind(kind);
  return found != nullptr ? found->metrics() : std::vector<std::string>{};
}

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

TrialOutcome RunTrial(const TrialTask& task, const ReportSink& sink, const std::atomic<bool>& stop,
                      const TrialHooks& hooks) {
  const WorkerKind* kind = FindKind(task.kind);
  if (kind == nullptr)
    return Failed("no worker for trial kind '" + std::string(ToString(task.kind)) + "'");
  return kind->run(task, sink, stop, hooks);
}

}  // namespace sweep::executor
