// What a worker runs: a TrialTask (kind, hyperparameters, settings, devices) in, reports and one
// outcome out. RunTrial is what a worker process calls, and what `sweep train` calls in-process.
// RunTrial blocks the calling thread; `stop` may be set from another thread at any time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace sweep::executor {

// What a trial runs: the embedded trainer, an analytic test function, or the user's program. On
// the wire and in configs by its name (ToString).
enum class TrialKind { kTrainer, kFunction, kCommand };
std::string_view ToString(TrialKind kind);
// The kind ToString names; nullopt for any other text.
std::optional<TrialKind> TrialKindFromString(std::string_view text);
// Every kind's name, in enum order: "trainer", "function", "command".
std::vector<std::string> TrialKindNames();

struct TrialTask {
  int64_t number = 0;
  TrialKind kind = TrialKind::kTrainer;
  nlohmann::json params;    // the trial's hyperparameters (object)
  nlohmann::json settings;  // [trainer] defaults, the [function] table, or the command's
                            // settings (see command_trial.h) (object)
  int threads = 1;          // CPU threads for the trial (its number of CPU slots)
  std::vector<int> gpus;    // CUDA ordinals; empty on CPU slots
  uint64_t seed = 0;        // used when neither settings nor params give `seed`
  // A trial's first run: a trainer checkpoint already at its checkpoint_path cannot be its own
  // (an earlier sweep's, in a store made anew) and is deleted rather than resumed from.
  bool fresh = false;
  // A trial run again: where the reports its earlier runs stored end (the last step, the highest
  // epoch; 0 when none) and whether one had the sweep's metric. A command trial's program that
  // goes on from its own checkpoint reports its later epochs without a step: they are numbered
  // after the stored ones, and its reports of epochs already stored are skipped.
  int64_t stored_step = 0;
  double stored_epoch = 0;
  bool stored_metric = false;
  // How many stored reports have stored_epoch: that epoch's steps, stored_step the last of
  // them (a program logging several times an epoch). Its lines printed again map onto them.
  int64_t stored_epoch_steps = 1;
  // A trainer trial run again: going on from its checkpoint, it first reports the checkpoint's
  // epoch again when that is past stored_step (a trial told to stop checkpoints without waiting
  // to hear that its report was stored, so the store may have lost that report).
  bool replay_checkpoint_report = false;
  // A trainer trial that early stopping had already stopped at this epoch when its coordinator
  // died, before it ended: it trains no further than this (from its checkpoint: no epoch, or
  // the one its checkpoint lacked) and measures its test set, as it would have. 0: none.
  int stop_at_epoch = 0;
  // How long its worker may send nothing (no report, no heartbeat) before it is taken for hung
  // and killed: [trial] heartbeat_timeout, carried to an agent's workers too. 0: the executor's
  // own setting.
  double heartbeat_timeout_s = 0;
  // Early stopping's decision points: at a report whose resource (the epoch when
  // decide_by_epoch, else the step) first reaches one of these, or at every report when
  // decide_every_report, the worker waits for the coordinator's go or stop before going on, so a
  // stop takes effect at the report that earned it. Empty and false: never wait.
  std::vector<double> decision_points;
  bool decide_every_report = false;
  bool decide_by_epoch = false;

  // True when the report (step, epoch) is a decision point; `next_point` walks
  // decision_points as the trial's reports go by (start it at 0).
  bool IsDecisionPoint(int64_t step, double epoch, size_t* next_point) const;
};

nlohmann::json ToJson(const TrialTask& task);
Result<TrialTask> TrialTaskFromJson(const nlohmann::json& json);

struct TrialOutcome {
  // kInterrupted: the machine, not the trial, stopped it (its checkpoint could not be written:
  // disk full, a quota, a read-only file system; or read: permissions, an I/O error); it can go
  // on from its last checkpoint once that is put right.
  enum class Kind { kCompleted, kStopped, kFailed, kInterrupted };
  Kind kind = Kind::kCompleted;
  std::string error;           // kFailed, kInterrupted: why; else a note on the run, or empty
  nlohmann::json end_metrics;  // metrics known only at the end (test_acc); an object
  // What the run found out that is not a metric (store::TrialRecord::info_json): an object,
  // empty when there is nothing to tell.
  nlohmann::json info = nlohmann::json::object();
  // A trainer trial that went on from its checkpoint: the checkpoint's epoch (else 0), and the
  // steps of the next epoch it held when stopped within it (else 0), of that epoch's steps.
  // Known where RunTrial ran (sweep train); a worker does not send them.
  int resumed_from_epoch = 0;
  int64_t resumed_epoch_steps = 0;
  int64_t steps_per_epoch = 0;
  // A command's reports had the sweep's metric only as text, a bool or a list (reports carry
  // numbers alone, so the coordinator would not know it came under that name).
  bool metric_not_number = false;
};
std::string_view ToString(TrialOutcome::Kind kind);

// What a command trial's task would run, as its runner builds it: the argv with the parameters
// filled in, the program PATH resolves argv[0] to here (empty when none), and the variables set
// in the program's environment on top of the ones it inherits.
struct CommandLaunch {
  std::vector<std::string> argv;
  std::string program;
  std::vector<std::pair<std::string, std::string>> env;
};
Result<CommandLaunch> DescribeCommand(const TrialTask& task);
// The kind ToString names; nullopt for any other text.
std::optional<TrialOutcome::Kind> OutcomeFromString(std::string_view text);

// Receives each report as it happens: step (optimizer steps, or curve step), epoch (the
// resource consumed so far), and a JSON object of metric -> number.
using ReportSink = std::function<void(int64_t step, double epoch, const nlohmann::json& metrics)>;

// What RunTrial tells its caller while a trial runs, on the calling thread. Either may be unset.
struct TrialHooks {
  // Called between reports while a command trial's program is silent (about every 100 ms), so
  // that the caller can read a stop meant for it.
  std::function<void()> idle;
  // Called with the process group of a command trial's program once it runs. Its helpers (data
  // loaders) share that group, and only the program itself dies with its parent: whoever may
  // have to kill the caller outright kills this group first, so nothing is left behind.
  std::function<void(int pgid)> started;
  // Called when that group has been killed after the program exited, while the program (not
  // yet reaped) still holds its id: from here on the id may name another group, which nobody
  // must kill.
  std::function<void()> ended;
  // Where the caller gives one: set by a command trial for the time its program runs (empty
  // otherwise) to what the caller calls, about every 20 ms, while it waits inside the report
  // sink for an early-stopping verdict. The program runs on meanwhile, and this moves what it
  // prints to its log, where a run again finds it if the coordinator dies before the verdict.
  std::function<void()>* while_waiting = nullptr;
};

// Runs the task to its end, or until `stop` is set (then kStopped after the current epoch/step).
TrialOutcome RunTrial(const TrialTask& task, const ReportSink& sink, const std::atomic<bool>& stop,
                      const TrialHooks& hooks = {});

// Whether a trainer task's settings and parameters, with its slots, make options the trainer
// accepts together (what the trial would fail with at its start, found without running it).
Status CheckTrainerTask(const TrialTask& task);

// What a trainer task trains on: `replicas` and `threads` as its config sets them, else from
// its slots (a replica per GPU; on CPU, the slot count as threads, and as replicas too).
struct TrainerLayout {
  int replicas = 1;
  int threads = 1;
};
Result<TrainerLayout> TrainerLayoutOf(const TrialTask& task);

// Metrics a trial of this kind reports (a trainer's; a function's "value"; none known in advance
// for a command).
std::vector<std::string> TrialMetricNames(TrialKind kind);

}  // namespace sweep::executor
