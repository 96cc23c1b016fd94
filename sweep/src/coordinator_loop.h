// The Coordinator: the loop that ties the trial source, the servers and their runners, early
// stopping and the store together for one sweep. Its parts, by file:
//   coordinator.cc    starting a sweep, the loop, placing and starting trials
//   trial_reports.cc  a running trial's reports: the store, early stopping, stop_when
//   trial_end.cc      a trial's end: its status (trial_outcome.h), the store, the breakers
//   resume.cc         resuming from the store alone, and a larger budget; `run --from`
// The seams below let tests drive it with a fake runner and a fake clock.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "carry_over.h"
#include "checkpoint_keeper.h"
#include "folder_reaper.h"
#include "kinds/trial_kind.h"
#include "progress.h"
#include "runner.h"
#include "search/early_stopping.h"
#include "servers.h"
#include "store/store.h"
#include "sweep/coordinator.h"
#include "sweep_lock.h"
#include "trial_outcome.h"
#include "trial_paths.h"
#include "trial_source.h"

namespace sweep {

// What a test replaces: the clock, and the runners (by default this machine's workers, and the
// agents' hub with --listen).
struct CoordinatorSeams {
  const Clock* clock = nullptr;  // null: the system clock
  std::function<Result<RunnerSet>(const SweepConfig&, const RunOptions&)> runners;
};

Result<RunSummary> RunSweepWith(const SweepConfig& config, store::Store& store,
                                const RunOptions& options, const CoordinatorSeams& seams);
Result<RunSummary> ResumeSweepWith(const std::string& name, store::Store& store,
                                   const RunOptions& options, const CoordinatorSeams& seams);
// This machine's workers, and the agents' hub with --listen (listening already).
Result<RunnerSet> DefaultRunners(const SweepConfig& config, const RunOptions& options);
// What this machine, whose own slots are `local_slots` (GPUs when `local_gpus`), refuses (see
// CheckRunHere).
Status FitsHere(const SweepConfig& config, const RunOptions& options, int local_slots,
                bool local_gpus);
// "NAME@CREATED": tells a sweep from another of its name.
std::string SweepKey(const std::string& name, double created_s);

// A trial waiting to run again (interrupted by a dead coordinator, a lost worker or a stop).
struct Pending {
  int64_t number = 0;
  nlohmann::json params;
  int retries = 0;
  int agent_losses = 0;    // agents lost while it ran (stored with the trial)
  bool never_ran = false;  // requeued before any worker had it: still its first run
  // Resume: a trainer trial that early stopping had stopped (pruned with this reason, or at
  // max_resource) at epoch `finish_at`, its coordinator dead before it ended: it runs only to
  // measure its test set there, as it would have (see TrialTask::stop_at_epoch).
  std::string finish_pruned{};
  bool finish_at_cap = false;
  double finish_at = 0;
};

struct RunningTrial {
  nlohmann::json params;
  executor::Placement where;  // server and slot indexes held in the packer
  std::string placement;
  double started_s = 0;
  nlohmann::json metrics = nlohmann::json::object();  // last value of each metric
  double epochs = 0;
  int retries = 0;
  int agent_losses = 0;
  bool stop_sent = false;
  std::string prune_reason;        // set when early stopping asked it to stop
  bool at_max_resource = false;    // stopped on reaching early_stopping.max_resource
  std::optional<double> length;    // the resource it runs to on its own (with early stopping)
  size_t next_point = 0;           // see TrialTask::IsDecisionPoint
  bool first_run = false;          // no earlier run of it started (its checkpoint is none of its)
  std::string checkpoint;          // where this run checkpoints, as the store names it
  bool metric_reported = false;    // the sweep's metric came as a number (or NaN) in a report
  bool metric_not_number = false;  // ... or only as a string, a bool, a list
};

class Coordinator {
 public:
  Coordinator(store::Store& store, const RunOptions& options, const CoordinatorSeams& seams);

  Result<RunSummary> Start(const SweepConfig& config);
  Result<RunSummary> Resume(const std::string& name);

 private:
  double Now() const { return clock_->Now(); }

  // coordinator.cc
  Status Prepare();
  Status TakeEvents(double now);
  Result<RunSummary> Loop();
  void CheckStops(double now);
  Status PlaceTrials(double now);
  Result<RunSummary> End();
  Status StartTrial(const Pending& p, executor::Placement where, double now, bool rerun);
  Status RecordRerun(const Pending& p, RunningTrial& t, executor::TrialTask& task, double now);
  Status RecordFirstRun(const Pending& p, const RunningTrial& t, double now);
  executor::TrialTask MakeTask(const Pending& p, const RunningTrial& t, const ServerInfo& server);
  Status StartFailed(const Pending& p, RunningTrial& t, const ServerInfo& server, Status s,
                     StartFailure why, double now);
  Status StopTrial(int64_t number, RunningTrial& t);
  void ContinueTrial(int64_t number, const RunningTrial& t);
  Status StopAtOnce(double now);
  Status CommitNow(double now);
  bool MayPlaceLater() const;
  bool WorkLeft() const { return !queue_.empty() || source_->Left(); }
  // Running time, over every run of the sweep: less the time with no slot anywhere.
  double ActiveSeconds(double now) const {
    return active_before_s_ + (now - start_s_) - slotless_s_ -
           (slotless_since_ ? now - *slotless_since_ : 0.0);
  }
  void TrackSlots(double now);
  std::string AgentFlags() const;
  void Announce(const std::string& extra);
  void ShowProgress(double now, bool final);

  // trial_reports.cc
  Status HandleReport(executor::WorkerEvent& ev, RunningTrial& t, double now);
  Result<nlohmann::json> MergeIntoStoredReport(executor::WorkerEvent& ev, double now);
  void Decide(executor::WorkerEvent& ev, RunningTrial& t);
  std::optional<search::Report> SchedulerReport(int64_t trial, int64_t step, double epoch,
                                                const nlohmann::json& metrics,
                                                std::optional<double> length) const;
  void StopAtMaxResource(int64_t number, RunningTrial& t);
  void NoteMetric(RunningTrial& t, const nlohmann::json& reported);
  bool MeetsTarget(const nlohmann::json& metrics) const;
  void NoteTarget(int64_t trial, const nlohmann::json& metrics);
  std::optional<double> Objective(const nlohmann::json& metrics) const;
  std::string CapNote() const;
  std::string TargetNote() const;

  // trial_end.cc
  Status Handle(executor::WorkerEvent& ev, double now, bool server_lost, bool server_stopped);
  Status HandleEnd(executor::WorkerEvent& ev, RunningTrial& t, double now, bool server_lost,
                   bool server_stopped);
  TrialFacts FactsOf(int64_t number, const RunningTrial& t) const;
  void ServerTrouble(int64_t number, const RunningTrial& t, TrialEnd& end,
                     const std::string& error);
  Status FinishTrial(int64_t number, const RunningTrial& t, store::TrialStatus status,
                     std::string error, double now);
  void CountEnd(int64_t number, store::TrialStatus status, std::optional<double> objective);
  Status NoteFailure(int64_t number, const RunningTrial& t, const std::string& error, double now);
  void NoteInitialFailure(int64_t number, const RunningTrial& failed, const std::string& error);
  Status RequeueInitialFailures(double now);
  bool MetricNeverReported(int64_t number, const RunningTrial& t, store::TrialStatus status,
                           const std::string& error);
  Status KeepCheckpoints(int64_t number, store::TrialStatus status,
                         std::optional<double> objective);

  // resume.cc
  Status TakeCarried(const CarryPlan& plan);
  Result<std::string> ExtendBudget(store::SweepRecord& rec);
  Result<std::string> CheckBudgetLeavesWork(const store::SweepRecord& rec, int64_t max_number);
  Result<std::string> NoBudgetAddsWork(const store::SweepRecord& rec, int64_t max_number,
                                       bool reruns);
  Status InterruptOrphans();
  Status ReplayReports(std::map<int64_t, std::string>* stop_reasons,
                       std::map<int64_t, double>* reached);
  Status RequeueInterrupted(const std::map<int64_t, std::string>& stop_reasons,
                            std::map<int64_t, double>& reached);
  Status RestoreTotals(int64_t* stored);
  Status RebuildKeptCheckpoints();
  Status CompleteOnResume(const store::TrialRecord& t, const std::string& note);

  store::Store& store_;
  const RunOptions& options_;
  CoordinatorSeams seams_;
  SystemClock system_clock_;
  const Clock* clock_;
  SweepConfig config_;
  Progress progress_;
  // Declared before the runners, so released after them: the workers and agents' trials are
  // gone before another process can take the sweep.
  std::unique_ptr<SweepLock> lock_;
  std::optional<Servers> servers_;
  RunnerSet runners_;
  std::unique_ptr<TrialKindRules> kind_;
  std::unique_ptr<TrialSource> source_;
  std::unique_ptr<search::Scheduler> scheduler_;  // null without early stopping
  executor::TrialTask decisions_;                 // only its decision-point fields are used
  std::optional<TrialPaths> paths_;
  std::optional<CheckpointKeeper> keeper_;  // with [trial] keep_checkpoints
  FolderReaper reaper_;                     // deletes first runs' folders off the loop
  int64_t sweep_id_ = 0;
  int64_t started_ = 0;  // trials started by this run
  double start_s_ = 0;
  double active_before_s_ = 0;  // running time of earlier runs of this sweep
  // Time with no slot to run a trial on (a --no-local sweep before its first agent joins, or
  // after its last left) is no running time: time_budget does not count it.
  double slotless_s_ = 0;
  std::optional<double> slotless_since_;
  // `run --from`: trials below carried_ came from another sweep (see TrialSource).
  int64_t carried_ = 0;
  int64_t sample_shift_ = 0;
  double last_commit_s_ = 0;
  bool stopping_ = false;
  std::deque<Pending> queue_;
  std::map<int64_t, RunningTrial> running_;
  store::StatusCounts counts_;
  std::optional<double> best_;
  int64_t best_trial_ = -1;
  bool interrupted_ = false;
  // Tells this sweep from another of its name (a store made anew): its name and creation time.
  // A command trial's folder records it (see command_trial.h).
  std::string sweep_key_;
  std::set<int64_t> target_trials_;  // the trials whose reports met stop_when
  std::set<int64_t> progressed_;     // running trials with reports not yet in their row
  std::string stop_reason_;
  // Set when the run's first trials all failed ([trial] max_initial_failures): why the sweep
  // stops.
  std::string failing_start_;
  // Set when a trial ended without the sweep's metric while no trial has reported it.
  std::string metric_missing_;
  bool metric_seen_ = false;  // a trial of the sweep (in any run) reported the metric
  // Commands (trials of unknown length) whose sweep's metric was reported at max_resource.
  std::set<int64_t> metric_at_cap_;
  int64_t failed_unreported_ = 0;  // trials of this run that failed before reporting anything
  std::vector<int64_t> initial_failures_;  // their numbers, while none of the sweep succeeded
  std::string machine_trouble_;      // what stopped a trial that was not its fault; stops the sweep
  std::vector<RunnerEvent> events_;  // what the runners said this loop turn
};

}  // namespace sweep
