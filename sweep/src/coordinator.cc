// The coordinator loop. One turn: place trials while slots are free (trials to run again
// first, then new ones), take the workers' messages, store them, commit before waiting, refresh
// the status line. What it keeps in memory (counts, best so far) is updated incrementally, so a
// turn costs the same at trial 10 and at trial 10,000; on resume it is rebuilt from the store.
#include "sweep/coordinator.h"

#include <poll.h>
#include <unistd.h>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>

#include "base/clock.h"
#include "base/hash.h"
#include "carry_over.h"
#include "checkpoint_keeper.h"
#include "executor/agent_hub.h"
#include "executor/command.h"
#include "executor/local_executor.h"
#include "executor/net_auth.h"
#include "executor/packer.h"
#include "executor/slots.h"
#include "executor/transport.h"
#include "folder_reaper.h"
#include "output.h"
#include "search/early_stopping.h"
#include "search/space.h"
#include "sweep_lock.h"
#include "trainer/trainer.h"

namespace sweep {

using nlohmann::json;
using store::TrialStatus;

std::string StoreFile(const std::string& db) {
  std::error_code ec;
  std::string file = std::filesystem::weakly_canonical(db, ec).string();
  return ec || file.empty() ? db : file;
}

std::string CheckpointDirFor(const SweepConfig& config, const std::string& db_file) {
  return config.checkpoint_dir.empty() ? db_file + "-checkpoints/" + config.name
                                       : (std::filesystem::absolute(config.path).parent_path() /
                                          config.checkpoint_dir / config.name)
                                             .string();
}

std::string CommandTrialsDir(const SweepConfig& config, const std::string& db_file) {
  const std::string dir =
      config.trials_dir.empty()
          ? db_file + "-trials"
          : (std::filesystem::absolute(config.path).parent_path() / config.trials_dir).string();
  return std::filesystem::absolute(dir).lexically_normal().string() + "/" + config.name;
}

nlohmann::json CommandSettings(const SweepConfig& config, const std::string& trial_dir,
                               const std::string& sweep_key) {
  nlohmann::json settings = {
      {"command", config.command}, {"workdir", config.workdir},           {"trial_dir", trial_dir},
      {"metric", config.metric},   {"kill_grace_s", config.kill_grace_s}, {"sweep_key", sweep_key}};
  if (config.trial_timeout_s) settings["timeout_s"] = *config.trial_timeout_s;
  return settings;
}

uint64_t TrialSeed(uint64_t sweep_seed, int64_t number) {
  uint64_t z = SplitMix64(SplitMix64(sweep_seed) ^ static_cast<uint64_t>(number));
  return z & 0x7FFFFFFFFFFFFFFFULL;  // fits a signed 64-bit column
}

namespace {

// Longest time a busy loop keeps writes uncommitted. A crash loses at most this much of the
// record; the trials involved are still RUNNING in the store and are rerun on resume.
constexpr double kCommitIntervalS = 0.05;
// order = "longest_first" draws the sweep ahead, up to this many trials at a time.
constexpr size_t kMaxDrawnAhead = 100000;

// The refusals that depend on this machine, whose largest server (its own slots, before any
// agent joins) has `local_slots`: a trial needing more slots with no agents to come, and a
// command trial's program or folder missing here where trials run here (it would fail every
// one of them; where this machine cannot hold a trial, only agents run them, and theirs count).
Status FitsHere(const SweepConfig& config, const RunOptions& options, int local_slots) {
  if (options.listen_host.empty() && config.gpus > local_slots) {
    return Status::InvalidArgument((config.gpus_where.empty() ? config.path : config.gpus_where) +
                                   ": trial.gpus: " + std::to_string(config.gpus) +
                                   " slots per trial, but this machine offers " +
                                   std::to_string(local_slots) +
                                   " (add agents with --listen, or lower it)");
  }
  if (options.local_slots && config.kind == TrialKind::kCommand && local_slots >= config.gpus) {
    Status runs = executor::CheckProgram(config.command.at(0), config.workdir);
    if (!runs.ok()) {
      const bool workdir = runs.message().rfind("trial.workdir", 0) == 0;
      const std::string& where = workdir ? config.workdir_where : config.command_where;
      return runs.WithMessage((where.empty() ? config.path : where) + ": " + runs.message());
    }
  }
  return Status::Ok();
}

std::string SweepKey(const std::string& name, double created_s) {
  char created[32];
  std::snprintf(created, sizeof created, "%.6f", created_s);
  return name + "@" + created;
}

std::string FormatElapsed(double s) {
  int total = static_cast<int>(s);
  char buf[32];
  if (total >= 3600) {
    std::snprintf(buf, sizeof buf, "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%02d:%02d", total / 60, total % 60);
  }
  return buf;
}

std::string FormatMetric(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A trial waiting to run again (interrupted by a dead coordinator, a lost worker or a stop).
struct Pending {
  int64_t number = 0;
  json params;
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

// Losing the agent a trial runs on uses up no retry (a preempted or rebooted server is not the
// trial's fault), but a trial whose agent is lost this many times is failed: it is likely what
// takes the agent down (out of memory), and would otherwise be run again for ever.
constexpr int kMaxAgentLosses = 3;

// A server trials are placed on: this machine (id 0) or a remote agent.
struct ServerInfo {
  std::string name;                   // what placements show: "local", an agent's name
  std::vector<executor::Slot> slots;  // by the packer's slot index
  std::optional<int64_t> agent;       // the hub's agent id; none for this machine
  std::string folder;                 // an agent's folder on its machine (empty: not said)
};

struct RunningTrial {
  json params;
  executor::Placement where;  // server and slot indexes held in the packer
  std::string placement;
  double started_s = 0;
  json metrics = json::object();  // last value of each metric
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

constexpr int kLocalServer = 0;

}  // namespace

store::LockWait SweepLockWait(const RunOptions& options, const std::string& path) {
  // Another process holding a write transaction (a sqlite3 shell, a viewer) does not end the
  // sweep: its writes wait, said every half minute, for up to ten minutes.
  // An interrupt (Ctrl-C) ends the wait: nothing can be recorded meanwhile, so the sweep
  // stops where it is, and resume goes on from what was stored.
  std::ostream* log = options.log;
  return {std::chrono::minutes(10),
          [log, interrupt = options.interrupt, path, said = -1.0](double waited_s) mutable {
            if (interrupt != nullptr && interrupt->load()) return false;
            if (log == nullptr || (said >= 0 && waited_s < said + 30)) return true;
            said = waited_s;
            *log << "sweep: " << path
                 << " is locked by another process (a sqlite3 shell or a viewer holding a write "
                    "transaction?); waiting to write, "
                 << static_cast<int>(waited_s) << " s so far (Ctrl-C stops the sweep)\n";
            return true;
          }};
}

namespace {

class Coordinator {
 public:
  Coordinator(store::Store& store, const RunOptions& options) : store_(store), options_(options) {
    store_.WaitForLocks(SweepLockWait(options_, store_.path()));
  }

  Result<RunSummary> Start(const SweepConfig& config) {
    config_ = config;
    SWEEP_RETURN_IF_ERROR(Prepare());
    // Read before the new sweep is recorded, so that a mistyped name leaves nothing behind.
    std::optional<CarryPlan> carry;
    if (!options_.from.empty()) {
      SWEEP_ASSIGN_OR_RETURN(carry, PlanCarryOver(store_, config_, options_.from));
    }
    store::NewSweep ns;
    ns.name = config_.name;
    ns.config_text = config_.text;
    // Absolute, so that a resume from another folder finds what the config's relative paths
    // mean.
    std::error_code abs_ec;
    std::filesystem::path config_abs = std::filesystem::absolute(config_.path, abs_ec);
    ns.config_path = abs_ec ? config_.path : config_abs.lexically_normal().string();
    ns.metric = config_.metric;
    ns.maximize = config_.maximize;
    ns.seed = static_cast<int64_t>(config_.seed);
    start_s_ = UnixSeconds();
    ns.created_s = start_s_;
    sweep_key_ = SweepKey(config_.name, ns.created_s);
    // The owner goes in with the sweep's row, and the lock is taken before the row commits:
    // a reader sees the sweep only with an owner that holds its lock (or held it and died).
    ns.owner = OwnerId();
    ns.run_options = AgentFlags();
    SWEEP_ASSIGN_OR_RETURN(sweep_id_, store_.CreateSweep(ns, [this](int64_t id) {
      auto lock = SweepLock::Acquire(store_.path(), id);
      if (!lock.ok()) return lock.status();
      lock_ = std::move(lock).value();
      return Status::Ok();
    }));
    SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, std::nullopt, "", "running",
                                          carry ? carry->Summary() : "", start_s_));
    if (carry) SWEEP_RETURN_IF_ERROR(TakeCarried(*carry));
    SWEEP_RETURN_IF_ERROR(store_.Commit());
    Announce(carry ? " (" + carry->Summary() + ")" : "");
    return Loop();
  }

  Result<RunSummary> Resume(const std::string& name) {
    SWEEP_ASSIGN_OR_RETURN(store::SweepRecord rec, FindSweepOrSuggest(store_, name));
    sweep_id_ = rec.id;
    auto lock = SweepLock::Acquire(store_.path(), rec.id);
    // What was read before the lock may be stale: another resume may have run it meanwhile (to
    // its end), or be running it now under its own name. Read again.
    if (auto now = store_.FindSweep(rec.name); now.ok() && now->id == rec.id) rec = *now;
    if (!lock.ok()) {
      if (lock.status().code() != Status::Code::kBusy) return lock.status();
      return Status::Busy("sweep '" + name + "' is being run by " + DescribeOwner(rec.owner) +
                          "; stop that process first (resume refuses to run a sweep twice)");
    }
    if (rec.status == store::SweepStatus::kRunning &&
        SweepLock::OwnerHasLockFileOpen(store_.path(), rec.owner)) {
      return Status::Busy("sweep '" + name + "' is being run by " + DescribeOwner(rec.owner) +
                          " (its lock file " + store_.path() +
                          ".lock was removed while it ran); stop that process first (resume "
                          "refuses to run a sweep twice)");
    }
    lock_ = std::move(lock).value();
    auto cfg = ParseConfig(rec.config_text, rec.config_path, ConfigUse::kResume);
    if (!cfg.ok()) {
      return Status::InvalidArgument(
          "cannot resume '" + name +
          "': its stored config no longer loads: " + cfg.status().message());
    }
    config_ = std::move(cfg).value();
    config_.name = rec.name;  // it may have been renamed by `run --name`
    sweep_key_ = SweepKey(rec.name, rec.created_s);
    // A budget an earlier `resume --max-trials/--time-budget` gave stands over the config's.
    if (rec.max_trials) {
      config_.max_trials = *rec.max_trials;
      config_.unbounded_trials = false;
    }
    if (rec.time_budget_s) config_.time_budget_s = rec.time_budget_s;
    carried_ = rec.carried;
    sample_shift_ = rec.sample_shift;
    std::string extended;  // what the new budget changed, for the log and the resume event
    if (!options_.budget.empty()) {
      SWEEP_ASSIGN_OR_RETURN(extended, ExtendBudget(rec));
    }
    if (rec.status == store::SweepStatus::kCompleted && extended.empty()) {
      // Nothing to run: no slots to discover, no agents to accept.
      RunSummary summary;
      summary.sweep_id = sweep_id_;
      SWEEP_ASSIGN_OR_RETURN(summary.counts, store_.CountByStatus(sweep_id_));
      summary.already_complete = true;
      return summary;
    }
    // Its owner from now on, said at once: a second resume refused meanwhile names this one.
    SWEEP_RETURN_IF_ERROR(store_.SetSweepOwner(sweep_id_, OwnerId(), rec.run_options));
    SWEEP_RETURN_IF_ERROR(store_.Commit());
    SWEEP_RETURN_IF_ERROR(Prepare());
    start_s_ = UnixSeconds();
    active_before_s_ = rec.active_s;
    SWEEP_RETURN_IF_ERROR(store_.SetSweepOwner(sweep_id_, OwnerId(), AgentFlags()));

    // Trials the dead coordinator left RUNNING have no worker any more.
    store::TrialQuery running;
    running.status = TrialStatus::kRunning;
    SWEEP_ASSIGN_OR_RETURN(auto orphans, store_.Trials(sweep_id_, running));
    for (const auto& t : orphans) {
      SWEEP_RETURN_IF_ERROR(
          store_.UpdateTrialStatus(sweep_id_, t.number, TrialStatus::kInterrupted, "", {}));
      SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, t.number, "running", "interrupted",
                                            "its coordinator stopped before it ended", start_s_));
    }
    SWEEP_RETURN_IF_ERROR(RebuildKeptCheckpoints());
    // Early stopping's state, and whether stop_when was met, are functions of the stored
    // reports: replay them in order, as they were decided live.
    std::map<int64_t, std::string> stop_reasons;
    std::map<int64_t, double> reached;  // the largest resource each trial reported
    if (tpe_ != nullptr) {
      // TPE learns again what it had learnt: every trial's parameters, the completed ones'
      // ends, and (below) the values at the rungs.
      SWEEP_ASSIGN_OR_RETURN(auto all, store_.Trials(sweep_id_, store::TrialQuery{}));
      for (const auto& t : all) {
        json params = json::parse(t.params_json, nullptr, /*allow_exceptions=*/false);
        if (t.status == TrialStatus::kCompleted && t.objective) {
          TpeNoteEnd(t.number, *t.objective, params);
        }
        tpe_params_[t.number] = std::move(params);
      }
    }
    if (scheduler_ != nullptr || config_.stop_when) {
      SWEEP_ASSIGN_OR_RETURN(auto stored, store_.AllReports(sweep_id_));
      for (const auto& r : stored) {
        reached[r.trial] = std::max(reached[r.trial], Resource(r.step, r.epoch));
        json metrics = json::parse(r.metrics_json, nullptr, /*allow_exceptions=*/false);
        bool pruned_here = false;
        if (scheduler_ != nullptr) {
          if (auto report = SchedulerReport(r.trial, r.step, r.epoch, metrics)) {
            search::Decision d =
                scheduler_->OnReport(report->trial, report->resource, report->value);
            TpeNoteReport(report->trial, report->resource, report->value, tpe_params_[r.trial]);
            if (d.stop() && !stop_reasons.count(r.trial)) {
              stop_reasons[r.trial] = d.reason;
              pruned_here = true;
            }
            if (report->resource >= scheduler_->MaxResource(r.trial)) {
              metric_at_cap_.insert(r.trial);
            }
          }
        }
        // stop_when counts the sweep's own trials, not those carried over (as live).
        if (!pruned_here && !stop_reasons.count(r.trial) && r.trial >= carried_) {
          NoteTarget(r.trial, metrics);
        }
      }
    }
    store::TrialQuery interrupted;
    interrupted.status = TrialStatus::kInterrupted;
    SWEEP_ASSIGN_OR_RETURN(auto again, store_.Trials(sweep_id_, interrupted));
    for (const auto& t : again) {
      if (target_trials_.contains(t.number)) {
        // It met stop_when before the coordinator died: it ends completed, as it would have.
        SWEEP_RETURN_IF_ERROR(CompleteOnResume(t, TargetNote()));
        continue;
      }
      json params = json::parse(t.params_json, nullptr, /*allow_exceptions=*/false);
      const std::optional<double> length = params.is_object() ? TrialLength(params) : std::nullopt;
      const bool at_cap = scheduler_ != nullptr && !scheduler_->Stopped(t.number) &&
                          reached.count(t.number) &&
                          reached[t.number] >= scheduler_->MaxResource(t.number) && length &&
                          *length > scheduler_->MaxResource(t.number);
      const bool was_pruned = scheduler_ != nullptr && scheduler_->Stopped(t.number);
      if ((at_cap || was_pruned) && config_.kind == TrialKind::kTrainer &&
          reached.count(t.number)) {
        // Stopped there live, it had not yet measured its test set (test_acc): it runs again to
        // do so at that epoch, and ends as it would have.
        if (params.is_object()) {
          Pending finish{t.number, std::move(params), t.retries, t.agent_losses};
          finish.finish_pruned = was_pruned ? stop_reasons[t.number] : "";
          finish.finish_at_cap = at_cap;
          finish.finish_at = reached[t.number];
          queue_.push_back(std::move(finish));
          continue;
        }
      }
      if (at_cap) {
        // It had run to max_resource, where it would have been stopped: completed, as live.
        SWEEP_RETURN_IF_ERROR(CompleteOnResume(t, CapNote()));
        continue;
      }
      if (!length && !was_pruned && metric_at_cap_.contains(t.number)) {
        // A command that had reported the sweep's metric at max_resource, and ran on (its own
        // end) until the coordinator died: its result is there, as live (ReachedMaxResource).
        SWEEP_RETURN_IF_ERROR(CompleteOnResume(t, CapNote()));
        continue;
      }
      if (was_pruned) {
        // Early stopping had already decided this one: it ends pruned, not run again.
        store::TrialRecord pruned = t;
        pruned.status = TrialStatus::kPruned;
        pruned.ended_s = start_s_;
        pruned.error = stop_reasons[t.number];
        SWEEP_RETURN_IF_ERROR(store_.FinishTrial(sweep_id_, pruned));
        SWEEP_RETURN_IF_ERROR(
            store_.AddEvent(sweep_id_, t.number, "interrupted", "pruned", pruned.error, start_s_));
        SWEEP_RETURN_IF_ERROR(KeepCheckpoints(t.number, TrialStatus::kPruned, t.objective));
        continue;
      }
      if (!params.is_object()) {
        return Status::Corruption(store_.path() + ": trial " + std::to_string(t.number) +
                                  " has unreadable params");
      }
      queue_.push_back({t.number, std::move(params), t.retries, t.agent_losses});
    }
    // Trials that survived more rungs go first.
    if (scheduler_ != nullptr) {
      std::stable_sort(queue_.begin(), queue_.end(), [&](const Pending& a, const Pending& b) {
        return scheduler_->Rung(a.number) > scheduler_->Rung(b.number);
      });
    }
    SWEEP_ASSIGN_OR_RETURN(int64_t max_number, store_.MaxTrialNumber(sweep_id_));
    next_number_ = max_number + 1;
    // order = "longest_first" starts trials out of number order: those drawn but not started
    // when the sweep stopped are drawn again (the sampler gives a number the same parameters).
    SWEEP_ASSIGN_OR_RETURN(auto stored, store_.Trials(sweep_id_, store::TrialQuery{}));
    std::vector<bool> seen(static_cast<size_t>(next_number_), false);
    for (const auto& t : stored) {
      if (t.number >= 0 && t.number < next_number_) seen[static_cast<size_t>(t.number)] = true;
    }
    for (int64_t n = 0; n < next_number_; ++n) {
      if (!seen[static_cast<size_t>(n)]) gaps_.push_back(n);
    }
    SWEEP_ASSIGN_OR_RETURN(counts_, store_.CountByStatus(sweep_id_));
    for (const auto& t : stored) {
      metric_seen_ = metric_seen_ || t.objective.has_value();
      if (t.number < carried_ && config_.algorithm == "grid") {
        carried_params_.insert(CanonicalParams(t.params_json));
      }
    }
    SWEEP_ASSIGN_OR_RETURN(auto best, store_.BestTrials(sweep_id_, config_.maximize, 1));
    if (!best.empty()) {
      best_ = best[0].objective;
      best_trial_ = best[0].number;
    }
    SWEEP_RETURN_IF_ERROR(store_.AddEvent(
        sweep_id_, std::nullopt, store::ToString(rec.status), "running",
        "resumed by " + OwnerId() + (extended.empty() ? "" : "; " + extended), start_s_));
    SWEEP_RETURN_IF_ERROR(store_.SetSweepStatus(sweep_id_, store::SweepStatus::kRunning, {}));
    if (!extended.empty()) {
      SWEEP_RETURN_IF_ERROR(store_.SetSweepBudget(sweep_id_, rec.max_trials, rec.time_budget_s));
    }
    Announce(" (resumed: " + std::to_string(queue_.size()) + " trial(s) to run again, " +
             std::to_string(stored.size()) + " started before" +
             (extended.empty() ? "" : "; " + extended) + ")");
    return Loop();
  }

 private:
  // `run --from`: copies the planned trials into the new sweep, and has early stopping, the
  // counts and the best trial start from them.
  Status TakeCarried(const CarryPlan& plan) {
    std::vector<store::ReportRecord> reports;
    SWEEP_RETURN_IF_ERROR(ApplyCarryOver(store_, sweep_id_, plan, start_s_, &reports));
    carried_ = static_cast<int64_t>(plan.trials.size());
    sample_shift_ = plan.sample_shift;
    next_number_ = carried_;
    for (const store::TrialRecord& t : plan.trials) {
      if (config_.algorithm == "grid") carried_params_.insert(CanonicalParams(t.params_json));
      json params = json::parse(t.params_json, nullptr, /*allow_exceptions=*/false);
      metric_seen_ = true;
      if (t.status == TrialStatus::kCompleted) {
        ++counts_.completed;
        TpeNoteEnd(t.number, *t.objective, params);
        // The best completed trial, as `best` ranks them (ties: the lower number).
        if (!best_ || (config_.maximize ? *t.objective > *best_ : *t.objective < *best_)) {
          best_ = t.objective;
          best_trial_ = t.number;
        }
      } else {
        ++counts_.pruned;
      }
      tpe_params_[t.number] = std::move(params);
    }
    if (scheduler_ != nullptr) {
      for (const auto& r : reports) {
        json metrics = json::parse(r.metrics_json, nullptr, /*allow_exceptions=*/false);
        if (auto report = SchedulerReport(r.trial, r.step, r.epoch, metrics)) {
          (void)scheduler_->OnReport(report->trial, report->resource, report->value);
          TpeNoteReport(report->trial, report->resource, report->value, tpe_params_[r.trial]);
        }
      }
    }
    return Status::Ok();
  }

  // The sampler's point for trial `number`: n + sample_shift_; for a grid that carried points
  // over, trial carried_ + k is its k-th point not carried (so none runs twice, and numbers
  // have no gaps), found by walking the grid once.
  std::optional<json> SampleFor(int64_t number) {
    if (tpe_ != nullptr) return SuggestTpe(number);
    if (carried_params_.empty()) return sampler_->Sample(number + sample_shift_);
    const int64_t k = number - carried_;
    while (static_cast<int64_t>(fresh_points_.size()) <= k) {
      std::optional<json> p = sampler_->Sample(grid_cursor_);
      if (!p) return std::nullopt;
      if (!carried_params_.contains(p->dump())) fresh_points_.push_back(grid_cursor_);
      ++grid_cursor_;
    }
    return sampler_->Sample(fresh_points_[static_cast<size_t>(k)]);
  }

  // ---- TPE ----

  // TPE's proposal for trial `number`, from the observations at the level TpeLevel picks, with
  // the trials running or waiting to run again as pessimistic ones (the constant liar).
  json SuggestTpe(int64_t number) {
    const size_t level = TpeLevel();
    if (level != tpe_fed_) {
      // A higher rung has enough values now: TPE learns from it instead (rare: once a rung).
      tpe_->Reset();
      for (const auto& [trial, value] : tpe_values_[level]) {
        tpe_->Observe(trial, tpe_params_[trial], value);
      }
      tpe_fed_ = level;
    }
    std::vector<json> pending;
    for (const auto& [n, t] : running_) pending.push_back(t.params);
    for (const Pending& p : queue_) pending.push_back(p.params);
    search::Suggestion s = tpe_->Suggest(number, pending);
    proposed_by_[number] = std::string(search::SourceName(s.source));
    tpe_params_[number] = s.params;
    return std::move(s.params);
  }

  // The highest level (rung, or the trials' ends) with n_startup_trials values; else the
  // lowest, which has the most.
  size_t TpeLevel() const {
    const size_t enough = static_cast<size_t>(std::max<int64_t>(1, config_.tpe.n_startup_trials));
    for (size_t k = tpe_levels_.size(); k-- > 0;) {
      if (tpe_values_[k].size() >= enough) return k;
    }
    return 0;
  }

  // A trial's value at each level its report reached for the first time (live and replayed).
  void TpeNoteReport(int64_t trial, double resource, double value, const json& params) {
    if (tpe_ == nullptr) return;
    if (!tpe_params_.contains(trial)) tpe_params_[trial] = params;
    for (size_t k = 0; k + 1 < tpe_levels_.size() && resource >= tpe_levels_[k]; ++k) {
      if (tpe_values_[k].emplace(trial, value).second && k == tpe_fed_) {
        tpe_->Observe(trial, tpe_params_[trial], value);
      }
    }
  }

  // A completed trial's final value (its objective).
  void TpeNoteEnd(int64_t trial, double value, const json& params) {
    if (tpe_ == nullptr) return;
    tpe_params_[trial] = params;
    const size_t last = tpe_levels_.size() - 1;
    tpe_values_[last][trial] = value;
    if (last == tpe_fed_) tpe_->Observe(trial, params, value);
  }

  // A trial's parameters as one string, to tell a grid point already carried over.
  static std::string CanonicalParams(const std::string& params_json) {
    return json::parse(params_json, nullptr, /*allow_exceptions=*/false).dump();
  }

  // The number below which new trials may start: carried-over ones do not count.
  int64_t TrialLimit() const {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    return config_.max_trials > kMax - carried_ ? kMax : carried_ + config_.max_trials;
  }

  // `resume --max-trials/--time-budget`: sets the new budget in config_ and `rec` (stored once
  // the resume starts) and says what changed ("max_trials 16 -> 32"). Refused, before anything
  // is written, when it leaves nothing to run: a completed sweep whose trials have all started
  // and whose budget is not raised past them, whose time is spent, whose grid is done, or which
  // met its stop_when target.
  Result<std::string> ExtendBudget(store::SweepRecord& rec) {
    const BudgetChange& change = options_.budget;
    const std::string who = "sweep '" + rec.name + "'";
    SWEEP_ASSIGN_OR_RETURN(const int64_t max_number, store_.MaxTrialNumber(sweep_id_));
    const int64_t started = max_number + 1 - rec.carried;  // max_trials counts these
    std::string said;
    if (change.max_trials) {
      const int64_t before = config_.unbounded_trials ? started : config_.max_trials;
      const int64_t want = change.more_trials ? before + *change.max_trials : *change.max_trials;
      if (want < started || (want == started && rec.status == store::SweepStatus::kCompleted)) {
        return Status::InvalidArgument("--max-trials " + std::to_string(want) + ": " + who +
                                       " has started " + std::to_string(started) +
                                       " trial(s) already; give a larger total, or +N for N more");
      }
      said = "max_trials " +
             (config_.unbounded_trials ? std::string("unset") : std::to_string(before)) + " -> " +
             std::to_string(want);
      config_.max_trials = want;
      config_.unbounded_trials = false;
      rec.max_trials = want;
    }
    if (change.time_budget_s) {
      const double before = std::max(config_.time_budget_s.value_or(0), rec.active_s);
      const double want = change.more_time ? before + *change.time_budget_s : *change.time_budget_s;
      if (want <= rec.active_s) {
        return Status::InvalidArgument(
            "--time-budget " + FormatElapsed(want) + ": " + who + " has run for " +
            FormatElapsed(rec.active_s) +
            " already, and the budget is its total running time; give more than that, or +30m "
            "for 30 more minutes");
      }
      said +=
          std::string(said.empty() ? "" : ", ") + "time_budget " +
          (config_.time_budget_s ? FormatElapsed(*config_.time_budget_s) : std::string("unset")) +
          " -> " + FormatElapsed(want);
      config_.time_budget_s = want;
      rec.time_budget_s = want;
    }
    if (rec.status != store::SweepStatus::kCompleted) return said;
    // A completed sweep: does the new budget let anything run?
    SWEEP_ASSIGN_OR_RETURN(const store::StatusCounts counts, store_.CountByStatus(sweep_id_));
    const bool reruns = counts.interrupted > 0;
    if (config_.time_budget_s && rec.active_s >= *config_.time_budget_s) {
      return Status::InvalidArgument(who + " spent its time budget of " +
                                     FormatElapsed(*config_.time_budget_s) +
                                     "; give a larger --time-budget (or +30m for 30 more minutes)");
    }
    if (!reruns && !config_.unbounded_trials && started >= config_.max_trials) {
      return Status::InvalidArgument(who + " has started all its " +
                                     std::to_string(config_.max_trials) +
                                     " trials; give a larger --max-trials (or +N for N more)");
    }
    SWEEP_ASSIGN_OR_RETURN(auto probe, MakeSampler(config_));
    // Every trial, carried over or not, is a distinct point of the grid.
    if (!reruns && probe->size() && max_number + 1 >= *probe->size()) {
      return Status::InvalidArgument(who + "'s " + config_.algorithm + " search has run all " +
                                     std::to_string(*probe->size()) +
                                     " of its points; a larger budget adds none (widen the "
                                     "space in a new sweep: sweep run CONFIG --from " +
                                     rec.name + ")");
    }
    if (config_.stop_when) {
      SWEEP_ASSIGN_OR_RETURN(auto reports, store_.AllReports(sweep_id_));
      for (const auto& r : reports) {
        if (r.trial < rec.carried) continue;
        if (MeetsTarget(json::parse(r.metrics_json, nullptr, /*allow_exceptions=*/false))) {
          return Status::InvalidArgument(who + " met its target " + config_.stop_when->ToString() +
                                         " (trial " + std::to_string(r.trial) +
                                         "), so it would end at once; set a new target in a new "
                                         "sweep: sweep run CONFIG --from " +
                                         rec.name);
        }
      }
    }
    return said;
  }

  Status Prepare() {
    SWEEP_ASSIGN_OR_RETURN(packer_, executor::Packer::Create({}));
    if (options_.local_slots) {
      SWEEP_RETURN_IF_ERROR(
          AddServer(kLocalServer, "local", executor::DiscoverLocalSlots(config_.cpu_slots)));
    }
    SWEEP_RETURN_IF_ERROR(FitsHere(config_, options_, packer_->largest_server()));
    if (!options_.listen_host.empty()) {
      hub_ = std::make_unique<executor::AgentHub>();
      executor::HubOptions hub_options;
      hub_options.heartbeat_timeout_ms = static_cast<int>(config_.agent_timeout_s * 1000);
      std::ostream* log = options_.log;
      hub_options.log = [log](std::string_view line) {
        if (log != nullptr) *log << "sweep: " << line << "\n";
      };
      SWEEP_RETURN_IF_ERROR(
          hub_->Listen(options_.listen_host, options_.listen_port, options_.token, hub_options));
      if (options_.log != nullptr) {
        *options_.log << "sweep: listening for agents on "
                      << executor::net::FormatHostPort(options_.listen_host, hub_->port()) << "\n";
      }
    }
    // A cache folder the trials here cannot use costs every one of them the dataset's decoding
    // (they go on without it): said once, here, rather than by none of them.
    if (config_.kind == TrialKind::kTrainer && options_.local_slots && options_.log != nullptr) {
      const auto set = config_.trainer.find("cache_dir");
      const std::string dir =
          set != config_.trainer.end() && set->is_string() ? set->get<std::string>() : "";
      if (const std::string why = UnusableCacheDir(dir); !why.empty()) {
        *options_.log << "sweep: " << config_.path << ": trainer.cache_dir '" << dir
                      << "' cannot be used here (" << why
                      << "): each trial decodes the dataset itself\n";
      }
    }
    if (config_.gpu_share > 1 && !packer_->gpu() && options_.log != nullptr) {
      *options_.log << "sweep: trial.gpu_share = " << config_.gpu_share
                    << " applies to GPUs; this machine offers CPU slots, one trial each\n";
    }
    SWEEP_ASSIGN_OR_RETURN(sampler_, MakeSampler(config_));
    if (config_.early_stopping.algorithm != search::EarlyStopping::kNone) {
      SWEEP_ASSIGN_OR_RETURN(scheduler_, search::MakeScheduler(config_.early_stopping));
      // Where the scheduler can decide, workers wait for its verdict: rungs for ASHA and
      // Hyperband, every report for the median rule.
      decisions_.decide_every_report =
          config_.early_stopping.algorithm == search::EarlyStopping::kMedian;
      if (!decisions_.decide_every_report) {
        decisions_.decision_points = scheduler_->RungResources();
        // And max_resource, where a longer survivor is stopped: it waits there for the
        // verdict, so it stops at the cap, not an epoch past it.
        decisions_.decision_points.push_back(config_.early_stopping.max_resource);
      }
      decisions_.decide_by_epoch = config_.kind != TrialKind::kFunction;
    }
    if (config_.algorithm == "tpe") {
      SWEEP_ASSIGN_OR_RETURN(
          tpe_, search::MakeTpeSampler(config_.space, config_.seed, config_.tpe, config_.maximize));
      // What TPE learns from (the BOHB rule): the values at each rung, then the trials' ends.
      if (scheduler_ != nullptr) tpe_levels_ = scheduler_->RungResources();
      tpe_levels_.push_back(std::numeric_limits<double>::infinity());
      tpe_values_.resize(tpe_levels_.size());
    }
    // Every report is a decision point of a trainer trial, whose worker writes the epoch's
    // checkpoint only once told to go on: by then the report is committed (Handle), so a
    // checkpoint is not ahead of the store, and a rerun from it has reported all it skips. (One
    // told to stop before its report arrived checkpoints at once; its rerun reports that epoch
    // again from the checkpoint, and the store keeps it if it had not.)
    // And with stop_when, a trial stops at the report that met the target, not one later.
    if (config_.kind == TrialKind::kTrainer || config_.stop_when) {
      decisions_.decide_every_report = true;
    }
    // Relative [trial] folders are the config's folder's, as its other paths are: a sweep
    // resumed from another folder finds them.
    // The default folders are beside the store's file itself: one store, one set of folders,
    // however --db names it (through a link, or another spelling), as its lock is.
    const std::string db_file = StoreFile(store_.path());
    if (config_.kind == TrialKind::kTrainer) {
      // Each trainer trial checkpoints into a file of its own, so an interrupted trial goes on
      // from its last epoch instead of from the start. An agent's workers get the folder as
      // configured (a relative one is the agent's own folder's); it is stored absolute, so
      // readers in other folders find the files.
      // The default is beside the store here, and in the agent's folder on an agent, however
      // --db was spelt (an absolute one names a folder an agent's machine may not have).
      const std::string db_name = std::filesystem::path(db_file).filename().string();
      agent_checkpoint_dir_ =
          (config_.checkpoint_dir.empty() ? db_name + "-checkpoints" : config_.checkpoint_dir) +
          "/" + config_.name;
      checkpoint_dir_ = CheckpointDirFor(config_, db_file);
      stored_checkpoint_dir_ =
          std::filesystem::absolute(checkpoint_dir_).lexically_normal().string();
      std::error_code ec;
      std::filesystem::create_directories(checkpoint_dir_, ec);
      if (ec) {
        return Status::IoError(checkpoint_dir_ +
                               ": cannot create the checkpoint directory: " + ec.message());
      }
      if (config_.keep_checkpoints) keeper_.emplace(*config_.keep_checkpoints, config_.maximize);
    }
    if (config_.kind == TrialKind::kCommand) {
      // Each command trial gets a directory of its own: its logs, and room for its files.
      trials_dir_ = CommandTrialsDir(config_, db_file);
      std::error_code ec;
      std::filesystem::create_directories(trials_dir_, ec);
      if (ec) {
        return Status::IoError(trials_dir_ +
                               ": cannot create the trials directory: " + ec.message());
      }
      // Folders an earlier run moved aside and had not deleted when it ended.
      reaper_.Adopt(trials_dir_);
    }
    executor_ =
        std::make_unique<executor::LocalExecutor>(options_.worker_command, options_.worker_env);
    executor_->set_heartbeat_timeout_ms(static_cast<int64_t>(config_.heartbeat_timeout_s * 1000));
    if (hub_ != nullptr) executor_->set_wake_fd(hub_->wake_fd());
    return Status::Ok();
  }

  // Early stopping's resource of a report: function trials count steps; trainer and command
  // trials count epochs (a program that does not say its epoch gets one per report).
  double Resource(int64_t step, double epoch) const {
    return config_.kind == TrialKind::kFunction ? static_cast<double>(step) : epoch;
  }

  // A report of a step already stored: the metrics the stored report lacks are added to it (the
  // values it has stand), and returned, an object; `ev` takes the stored report's epoch. When
  // the sweep's metric or stop_when's is among them, the report moves to the end of the arrival
  // order, since early stopping or the target decides on it now and resume replays reports in
  // that order.
  Result<json> MergeIntoStoredReport(executor::WorkerEvent& ev, double now) {
    json added = json::object();
    SWEEP_ASSIGN_OR_RETURN(std::optional<store::ReportRecord> stored,
                           store_.ReportAt(sweep_id_, ev.trial, ev.step));
    if (!stored || !ev.metrics.is_object()) return added;
    json merged = json::parse(stored->metrics_json, nullptr, /*allow_exceptions=*/false);
    if (!merged.is_object()) return added;
    for (const auto& [k, v] : ev.metrics.items()) {
      if (!merged.contains(k)) added[k] = merged[k] = v;
    }
    if (added.empty()) return added;
    stored->metrics_json = merged.dump(-1, ' ', false, json::error_handler_t::replace);
    stored->time_s = now;
    // Decided on now: by early stopping (the sweep's metric), or by stop_when (its own).
    const bool decides = added.contains(config_.metric) ||
                         (config_.stop_when && added.contains(config_.stop_when->metric));
    SWEEP_RETURN_IF_ERROR(store_.RewriteReport(sweep_id_, *stored, decides));
    ev.epoch = stored->epoch;
    return added;
  }

  // The scheduler's view of a report: the resource is the epoch for trainer trials and the step
  // for the others; the value is the sweep's metric (null, as JSON writes NaN, reads as NaN).
  // Used for live reports and for replays alike, so both see the same numbers.
  std::optional<search::Report> SchedulerReport(int64_t trial, int64_t step, double epoch,
                                                const json& metrics) const {
    if (!metrics.is_object()) return std::nullopt;
    auto m = metrics.find(config_.metric);
    if (m == metrics.end()) return std::nullopt;
    // NaN or an infinity (stored as null) in the sweep's metric: the trial diverged, and its
    // worker fails it so ("the run diverged"), whether or not the report fell on a rung. Early
    // stopping does not see it, so the failure is not recorded as a prune, live or on replay.
    if (!m->is_number() || !std::isfinite(m->get<double>())) return std::nullopt;
    search::Report r;
    r.trial = trial;
    r.resource = Resource(step, epoch);
    r.value = m->get<double>();
    return r;
  }

  // ---- servers and remote agents ----

  const ServerInfo* Server(int id) const {
    auto it = servers_.find(id);
    return it == servers_.end() ? nullptr : &it->second;
  }

  Status StopTrial(int64_t number, const RunningTrial& t) {
    const ServerInfo* server = Server(t.where.server);
    if (server != nullptr && server->agent) return hub_->Stop(*server->agent, number);
    return executor_->Stop(number);
  }

  // Trials still to start: reruns, or new ones the sampler and max_trials allow.
  bool WorkLeft(bool exhausted) const { return !queue_.empty() || FreshLeft(exhausted); }

  bool FreshLeft(bool exhausted) const {
    return !gaps_.empty() || !ahead_.empty() || (!exhausted && next_number_ < TrialLimit());
  }

  // The next new trial: numbers a resume found never started first, then the sampler's next; or,
  // with order = "longest_first", the one with the most work among all drawn ahead.
  std::optional<Pending> NextFresh(bool* exhausted) {
    auto draw = [&]() -> std::optional<Pending> {
      const bool gap = !gaps_.empty();
      if (!gap && (*exhausted || next_number_ >= TrialLimit())) return std::nullopt;
      const int64_t number = gap ? gaps_.front() : next_number_;
      std::optional<json> params = SampleFor(number);
      if (gap) {
        gaps_.pop_front();
      } else if (params) {
        ++next_number_;
      } else {
        *exhausted = true;
      }
      if (!params) return std::nullopt;
      return Pending{number, std::move(*params), 0};
    };
    if (!config_.longest_first) {
      while (!gaps_.empty() || (!*exhausted && next_number_ < TrialLimit())) {
        if (std::optional<Pending> p = draw()) return p;
      }
      return std::nullopt;
    }
    while (ahead_.size() < kMaxDrawnAhead) {
      std::optional<Pending> p = draw();
      if (!p) {
        if (gaps_.empty() && (*exhausted || next_number_ >= TrialLimit())) break;
        continue;
      }
      ahead_.emplace(std::make_pair(-EstimatedWork(p->params), p->number), std::move(p->params));
    }
    if (ahead_.empty()) return std::nullopt;
    auto first = ahead_.begin();
    Pending p{first->first.second, std::move(first->second), 0};
    ahead_.erase(first);
    return p;
  }

  // Multiply-adds a trainer trial will do with these parameters (0 when they are unreadable:
  // the trial will fail at its start, which may as well come late).
  double EstimatedWork(const json& params) {
    std::optional<trainer::TrainOptions> options = TrainerOptions(params);
    return options ? trainer::EstimatedWork(*options) : 0;
  }

  // A trainer trial's options: [trainer], then its parameters; none when they do not apply.
  std::optional<trainer::TrainOptions> TrainerOptions(const json& params) {
    if (!work_base_) {  // [trainer] once (a dataset directory is resolved on disk), not per trial
      work_base_.emplace();
      for (const auto& [key, value] : config_.trainer.items()) {
        (void)trainer::ApplyOption(&*work_base_, key, value);
      }
    }
    trainer::TrainOptions options = *work_base_;
    for (const auto& [key, value] : params.items()) {
      if (!trainer::ApplyOption(&options, key, value).ok()) return std::nullopt;
    }
    return options;
  }

  // The resource a trial runs to on its own: a function's steps, a trainer's epochs; none for
  // a command.
  std::optional<double> TrialLength(const json& params) {
    if (config_.kind == TrialKind::kFunction) {
      const int64_t steps = config_.function.value("steps", int64_t{0});
      return static_cast<double>(std::max<int64_t>(1, steps));
    }
    if (config_.kind == TrialKind::kTrainer) {
      std::optional<trainer::TrainOptions> options = TrainerOptions(params);
      if (options) return static_cast<double>(options->epochs);
    }
    return std::nullopt;
  }

  // Whether waiting can ever let a trial start: a server big enough is here, or agents may
  // still join.
  bool MayPlaceLater() const {
    return hub_ != nullptr || config_.gpus <= packer_->largest_server();
  }

  bool HubHasEvents() const {
    if (hub_ == nullptr) return false;
    pollfd p{hub_->wake_fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  // Agents joining and leaving, and their trials' reports and outcomes.
  Status DrainHub(double now, bool stopping) {
    if (hub_ == nullptr) return Status::Ok();
    hub_events_.clear();
    hub_->Drain(&hub_events_);
    if (hub_events_.empty()) return Status::Ok();
    // A lost agent's trials get their kDone just before its AgentLost, in the same batch (and
    // one started there as it went, in a later one): the loss is known before they are handled.
    for (const executor::HubEvent& e : hub_events_) {
      if (auto* gone = std::get_if<executor::AgentLost>(&e.event)) {
        lost_agents_[e.agent_id] = gone->reason;
      }
    }
    for (executor::HubEvent& e : hub_events_) {
      if (auto* ev = std::get_if<executor::WorkerEvent>(&e.event)) {
        // An agent that said it is stopping, or said bye: the trials it ended as it went are
        // not at fault. Nor is a trial started there as the agent went (its done comes after the
        // loss). A worker there that died by itself meanwhile (a crash) is lost as anywhere.
        using End = executor::WorkerEvent::AgentEnd;
        const auto gone = lost_agents_.find(e.agent_id);
        const bool agent_lost = ev->agent_end == End::kLost;
        // One that had said it is stopping and was then killed (a batch system's SIGKILL
        // after its SIGTERM) is stopped as much as one that said bye.
        const bool bye =
            agent_lost &&
            ((gone != lost_agents_.end() && gone->second == executor::AgentLost::Reason::kBye) ||
             draining_agents_.contains(e.agent_id));
        const bool by_stopping = ev->agent_end == End::kStopping;
        SWEEP_RETURN_IF_ERROR(
            Handle(*ev, now, stopping, agent_lost || by_stopping, bye || by_stopping));
      } else if (std::holds_alternative<executor::AgentDraining>(e.event)) {
        // It is stopping: nothing more is placed there; its trials end there, then run again
        // elsewhere.
        draining_agents_.insert(e.agent_id);
        for (const auto& [id, server] : servers_) {
          if (server.agent == e.agent_id) (void)packer_->RemoveServer(id);
        }
      } else if (auto* joined = std::get_if<executor::AgentJoined>(&e.event)) {
        std::vector<executor::Slot> slots = joined->slots;
        if (joined->link_group.size() == slots.size()) {
          for (size_t i = 0; i < slots.size(); ++i) slots[i].link_group = joined->link_group[i];
        }
        // Placements must tell servers apart: a second agent of a name (two on one host
        // without --name) gets a suffix.
        std::string name = joined->name;
        auto taken = [&](const std::string& n) {
          return std::any_of(servers_.begin(), servers_.end(),
                             [&](const auto& s) { return s.second.name == n; });
        };
        if (taken(name)) {
          int k = 2;
          while (taken(joined->name + "#" + std::to_string(k))) ++k;
          name = joined->name + "#" + std::to_string(k);
          if (options_.log != nullptr) {
            *options_.log << "sweep: agent '" << joined->name << "' (id " << e.agent_id << ") is '"
                          << name << "' in placements: another server has its name\n";
          }
        }
        Status added =
            AddServer(next_server_++, name, std::move(slots), e.agent_id, joined->folder);
        if (!added.ok() && options_.log != nullptr) {
          *options_.log << "sweep: agent " << joined->name << " not used: " << added.message()
                        << "\n";
        } else if (options_.log != nullptr && config_.gpus > packer_->largest_server()) {
          *options_.log << "sweep: trials need " << config_.gpus
                        << " slots on one server; waiting for an agent that has them\n";
        }
      } else if (std::holds_alternative<executor::AgentLost>(e.event)) {
        draining_agents_.erase(e.agent_id);
        for (auto it = servers_.begin(); it != servers_.end(); ++it) {
          if (it->second.agent == e.agent_id) {
            (void)packer_->RemoveServer(it->first);
            servers_.erase(it);
            break;
          }
        }
      }
    }
    return Status::Ok();
  }

  // A server whose machine failed a trial (its disk is full): its slots leave the packer, so no
  // trial is placed there again, while those still running there go on (their release is void).
  // Its agent stays connected; one that connects again comes back as a new server.
  void RetireServer(int server, const std::string& why) {
    auto it = servers_.find(server);
    if (it == servers_.end() || !packer_->has_server(server)) return;
    (void)packer_->RemoveServer(server);
    if (options_.log != nullptr) {
      *options_.log << (options_.live_status ? "\n" : "") << "sweep: no more trials on "
                    << it->second.name << ": " << why << "\n";
    }
  }

  // A server joins: its slots go to the packer (GPUs grouped by their fastest link).
  Status AddServer(int id, std::string name, std::vector<executor::Slot> slots,
                   std::optional<int64_t> agent = std::nullopt, std::string folder = "") {
    if (slots.empty()) return Status::InvalidArgument(name + ": offers no slot");
    executor::Server server;
    server.id = id;
    if (slots[0].gpu) {
      for (const executor::Slot& slot : slots) server.link_group.push_back(slot.link_group);
    } else {
      server.cpu_slots = static_cast<int>(slots.size());
    }
    SWEEP_RETURN_IF_ERROR(packer_->AddServer(server));
    said_no_server_ = false;
    servers_[id] = ServerInfo{std::move(name), std::move(slots), agent, std::move(folder)};
    return Status::Ok();
  }

  std::string TrialDir(int64_t number) const {
    if (trials_dir_.empty()) return "";
    return trials_dir_ + "/trial-" + std::to_string(number);
  }

  // Where the coordinator records trial `number`'s checkpoint: absolute.
  std::string StoredCheckpointPath(int64_t number) const {
    if (stored_checkpoint_dir_.empty()) return "";
    return stored_checkpoint_dir_ + "/trial-" + std::to_string(number) + ".ckpt";
  }

  // Where a run of trial `number` on `server` checkpoints, as the store names it: on this
  // machine, StoredCheckpointPath; on an agent, its absolute checkpoint_dir's path, or for a
  // relative one (the agent's own folder's) "AGENT:PATH", PATH on that agent's machine
  // (absolute where the agent said its folder).
  std::string RunCheckpointPath(int64_t number, const ServerInfo& server) const {
    if (!server.agent) return StoredCheckpointPath(number);
    std::filesystem::path path = CheckpointPath(number, /*agent=*/true);
    if (path.empty()) return "";
    // An absolute checkpoint_dir is the same path on every server (storage they share, as a
    // trial that runs again elsewhere needs): named as it is.
    if (path.is_absolute()) return path.lexically_normal().string();
    if (!server.folder.empty()) path = server.folder / path;
    return server.name + ":" + path.lexically_normal().string();
  }

  // Where its worker writes it: on this machine, relative to the coordinator's folder; on an
  // agent, as configured (an agent resolves a relative path in its own working folder).
  std::string CheckpointPath(int64_t number, bool agent = false) const {
    const std::string& dir = agent ? agent_checkpoint_dir_ : checkpoint_dir_;
    if (dir.empty()) return "";
    return dir + "/trial-" + std::to_string(number) + ".ckpt";
  }

  double ActiveSeconds(double now) const { return active_before_s_ + (now - start_s_); }

  // Whether a report's `metrics` meet stop_when (false without one).
  bool MeetsTarget(const json& metrics) const {
    if (!config_.stop_when || !metrics.is_object()) return false;
    auto m = metrics.find(config_.stop_when->metric);
    return m != metrics.end() && m->is_number() && config_.stop_when->Reached(m->get<double>());
  }

  // Records that `trial`'s report `metrics` met stop_when. The first to meet it ends the sweep;
  // one whose report meets it as it stops (for that, an interrupt or the time budget) has met
  // it as well, and ends completed too.
  void NoteTarget(int64_t trial, const json& metrics) {
    if (!MeetsTarget(metrics)) return;
    if (!target_trials_.insert(trial).second || target_trials_.size() > 1) return;
    // Met as the sweep stopped for another reason: both are said.
    stop_reason_ = (stop_reason_.empty() ? "" : stop_reason_ + "; then ") + "target " +
                   config_.stop_when->ToString() + " reached by trial " + std::to_string(trial);
  }
  // Resume with keep_checkpoints: the ended trials that keep theirs are the best of those whose
  // checkpoints the store still names (the best N do not depend on the order). An ended trial whose
  // checkpoint the store no longer names lost it just before the coordinator stopped: its file goes
  // now.
  Status RebuildKeptCheckpoints() {
    if (!keeper_) return Status::Ok();
    SWEEP_ASSIGN_OR_RETURN(auto trials, store_.Trials(sweep_id_, store::TrialQuery{}));
    for (const auto& t : trials) {
      if (!store::IsTerminal(t.status)) continue;
      if (t.checkpoint.empty()) {
        doomed_.insert(t.number);
      } else {
        SWEEP_RETURN_IF_ERROR(KeepCheckpoints(t.number, t.status, t.objective));
      }
    }
    return Status::Ok();
  }

  // Resume: an interrupted trial whose stored reports show it had finished (it met stop_when,
  // or reached max_resource) ends completed with its stored metrics, not run again.
  Status CompleteOnResume(const store::TrialRecord& t, const std::string& note) {
    store::TrialRecord done = t;
    done.status = TrialStatus::kCompleted;
    done.ended_s = start_s_;
    done.error = note;
    SWEEP_RETURN_IF_ERROR(store_.FinishTrial(sweep_id_, done));
    SWEEP_RETURN_IF_ERROR(KeepCheckpoints(t.number, TrialStatus::kCompleted, t.objective));
    if (t.objective) TpeNoteEnd(t.number, *t.objective, tpe_params_[t.number]);
    return store_.AddEvent(sweep_id_, t.number, "interrupted", "completed", note, start_s_);
  }

  // The note of a trial stopped at max_resource.
  std::string CapNote() const {
    return "ran to early_stopping.max_resource = " +
           FormatMetric(config_.early_stopping.max_resource);
  }
  // The note of the trial that met stop_when.
  std::string TargetNote() const {
    return "reached the target " + config_.stop_when->ToString() + "; the sweep stopped";
  }

  // The configured metric's value in `metrics`, when it is a finite number.
  std::optional<double> Objective(const json& metrics) const {
    auto m = metrics.find(config_.metric);
    if (m != metrics.end() && m->is_number() && std::isfinite(m->get<double>())) {
      return m->get<double>();
    }
    return std::nullopt;
  }

  // A command (a trial of unknown length) that reported the sweep's metric at max_resource, in
  // this run or an earlier one: its result is there, whatever ends it after.
  bool ReachedMaxResource(int64_t number, const RunningTrial& t) const {
    return !t.length && metric_at_cap_.contains(number);
  }

  // How a trial that was stopped ends: pruned (early stopping decided), completed (it met
  // stop_when, or reached max_resource), or else interrupted with `why`.
  std::pair<TrialStatus, std::string> StoppedOutcome(int64_t number, const RunningTrial& t,
                                                     const std::string& why) const {
    if (!t.prune_reason.empty()) return {TrialStatus::kPruned, t.prune_reason};
    // It reached the target that ended the sweep: its result is the one sought.
    if (target_trials_.contains(number)) return {TrialStatus::kCompleted, TargetNote()};
    if (t.at_max_resource || ReachedMaxResource(number, t)) {
      return {TrialStatus::kCompleted, CapNote()};
    }
    return {TrialStatus::kInterrupted, why};
  }

  // A second interrupt: the local workers end now (no grace), and each running trial ends as
  // its stop would have ended it (interrupted, unless it was already pruned or finished);
  // resume continues the interrupted ones from their last checkpoints. Trials on agents stop
  // when this coordinator goes.
  Status StopAtOnce(double now) {
    executor_->Shutdown(0);
    while (!running_.empty()) {
      auto it = running_.begin();
      const int64_t number = it->first;
      RunningTrial t = std::move(it->second);
      running_.erase(it);
      (void)packer_->Release(t.where);
      --counts_.running;
      progressed_.erase(number);
      const auto [status, note] =
          StoppedOutcome(number, t, "stopped at once by a second interrupt");
      SWEEP_RETURN_IF_ERROR(FinishTrial(number, t, status, note, now));
    }
    return Status::Ok();
  }

  Status CommitNow(double now) {
    // Running trials that reported since the last commit: their latest metrics, once each.
    for (int64_t number : progressed_) {
      auto it = running_.find(number);
      if (it == running_.end()) continue;
      store::TrialRecord rec;
      rec.number = number;
      rec.metrics_json = it->second.metrics.dump(-1, ' ', false, json::error_handler_t::replace);
      rec.objective = Objective(it->second.metrics);
      rec.epochs = it->second.epochs;
      SWEEP_RETURN_IF_ERROR(store_.SetTrialProgress(sweep_id_, rec));
    }
    progressed_.clear();
    SWEEP_RETURN_IF_ERROR(store_.SetSweepActive(sweep_id_, ActiveSeconds(now)));
    SWEEP_RETURN_IF_ERROR(store_.Commit());
    last_commit_s_ = now;
    DeleteDoomedCheckpoints();
    return Status::Ok();
  }

  // keep_checkpoints: trial `number` ended with `status`. The checkpoints no longer kept (its
  // own, or a trial's it pushed out of the best) are forgotten in the store now and their files
  // deleted once that commits: a crash in between leaves a file that resume deletes, never a
  // row that names a deleted file.
  Status KeepCheckpoints(int64_t number, TrialStatus status, std::optional<double> objective) {
    if (!keeper_ || !store::IsTerminal(status)) return Status::Ok();
    for (int64_t n : keeper_->Ended(number, status == TrialStatus::kCompleted, objective)) {
      SWEEP_RETURN_IF_ERROR(store_.DropTrialCheckpoint(sweep_id_, n));
      doomed_.insert(n);
    }
    return Status::Ok();
  }

  // Deletes the doomed trials' checkpoint files, with the temporary files of a write that a
  // killed worker left behind. What cannot be deleted is said, not fatal.
  void DeleteDoomedCheckpoints() {
    if (doomed_.empty()) return;
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (auto it = std::filesystem::directory_iterator(checkpoint_dir_, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const auto trial = CheckpointTrial(name);
      if (trial && doomed_.count(*trial)) files.push_back(it->path());
    }
    for (const auto& f : files) {
      if (!std::filesystem::remove(f, ec) && ec && options_.log != nullptr) {
        *options_.log << "sweep: cannot delete " << f.string() << ": " << ec.message() << "\n";
      }
    }
    doomed_.clear();
  }

  // The trial whose checkpoint (or temporary checkpoint) file `name` is: "trial-N.ckpt" or
  // "trial-N.ckpt.tmp.*".
  static std::optional<int64_t> CheckpointTrial(const std::string& name) {
    constexpr std::string_view kPrefix = "trial-", kSuffix = ".ckpt";
    if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
    size_t end = kPrefix.size();
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (end == kPrefix.size() || end - kPrefix.size() > 18) return std::nullopt;
    const std::string rest = name.substr(end);
    if (rest != kSuffix && rest.rfind(std::string(kSuffix) + ".tmp.", 0) != 0) {
      return std::nullopt;
    }
    return std::stoll(name.substr(kPrefix.size(), end - kPrefix.size()));
  }

  Result<RunSummary> Loop() {
    const int max_concurrent = config_.max_concurrent > 0 ? config_.max_concurrent : 1 << 30;
    bool exhausted = false;
    bool stopping = false;
    std::vector<executor::WorkerEvent> events;
    for (;;) {
      const double now = UnixSeconds();
      if (!stopping && options_.interrupt != nullptr && options_.interrupt->load()) {
        stopping = true;
        interrupted_ = true;
        stop_reason_ = "interrupted by the user";
        if (options_.log != nullptr && !running_.empty()) {
          // What a stop means depends on the kind: a command gets SIGTERM now, its program
          // deciding when to end (SIGKILL after kill_grace); the others end at their epoch.
          if (config_.kind == TrialKind::kCommand) {
            *options_.log << "\nsweep: stopping " << running_.size()
                          << " running trial(s): their programs got SIGTERM, and SIGKILL follows "
                          << FormatMetric(config_.kill_grace_s)
                          << " s later (trial.kill_grace); interrupt again to kill them at once\n";
          } else {
            *options_.log << "\nsweep: stopping " << running_.size()
                          << " running trial(s) after their current epoch; interrupt again to "
                             "stop them at once\n";
          }
        }
      }
      if (stopping && !running_.empty() && options_.interrupt_again != nullptr &&
          options_.interrupt_again->load()) {
        SWEEP_RETURN_IF_ERROR(StopAtOnce(now));
      }
      if (!stopping && !target_trials_.empty()) {
        stopping = true;  // stop_reason_ says which trial reached it
      }
      if (!stopping && !machine_trouble_.empty()) {
        stopping = true;
        interrupted_ = true;
        stop_reason_ = machine_trouble_;
        if (options_.log != nullptr) {
          *options_.log << (options_.live_status ? "\n" : "") << "sweep: stopping";
          if (!running_.empty()) {
            *options_.log << " " << running_.size() << " running trial(s) after their epoch";
          }
          *options_.log << ": " << machine_trouble_ << "\n";
        }
      }
      // Trials that cannot succeed as configured: the sweep stops, resumable once fixed.
      const std::string& hopeless = !metric_missing_.empty() ? metric_missing_ : failing_start_;
      if (!stopping && !hopeless.empty()) {
        stopping = true;
        interrupted_ = true;
        stop_reason_ = hopeless;
        if (options_.log != nullptr) {
          *options_.log << (options_.live_status ? "\n" : "") << "sweep: stopping: " << hopeless
                        << "\n";
        }
      }
      if (!stopping && config_.time_budget_s && ActiveSeconds(now) >= *config_.time_budget_s) {
        stopping = true;
        // A budget under a minute in seconds ("0.4 s", which mm:ss would show as 00:00).
        const double budget = *config_.time_budget_s;
        stop_reason_ = "time budget of " +
                       (budget < 60 ? FormatMetric(budget) + " s" : FormatElapsed(budget)) +
                       " spent";
      }
      if (stopping) {
        for (auto& [number, t] : running_) {
          if (!t.stop_sent) {
            (void)StopTrial(number, t);
            t.stop_sent = true;
          }
        }
      }

      // Place trials while there is room: those to run again first, then new ones.
      while (!stopping && static_cast<int>(running_.size()) < max_concurrent) {
        bool fresh = queue_.empty();
        if (fresh && !FreshLeft(exhausted)) break;
        executor::Request request;
        request.trial = fresh ? next_number_ : queue_.front().number;
        request.gpus = config_.gpus;
        request.share = packer_->gpu() ? config_.gpu_share : 1;
        std::optional<executor::Placement> got = packer_->Place(request);
        if (!got) break;
        if (!fresh) {
          Pending p = std::move(queue_.front());
          queue_.pop_front();
          SWEEP_RETURN_IF_ERROR(StartTrial(p, std::move(*got), now, /*rerun=*/true));
          continue;
        }
        std::optional<Pending> p = NextFresh(&exhausted);
        if (!p) {
          (void)packer_->Release(*got);
          break;
        }
        got->trial = p->number;
        SWEEP_RETURN_IF_ERROR(StartTrial(*p, std::move(*got), now, /*rerun=*/false));
      }
      // (Trouble met while placing, the sweep stops interrupted at the loop's top first.)
      if (running_.empty() && (stopping || !WorkLeft(exhausted) || !MayPlaceLater()) &&
          (stopping || machine_trouble_.empty())) {
        break;
      }
      // Take what has arrived; commit before waiting, so readers see everything up to the
      // moment the loop goes idle, and at least every kCommitIntervalS while busy.
      events.clear();
      SWEEP_RETURN_IF_ERROR(executor_->Poll(0, &events));
      double t = UnixSeconds();
      if (events.empty() || t - last_commit_s_ >= kCommitIntervalS) {
        SWEEP_RETURN_IF_ERROR(CommitNow(t));
      }
      if (events.empty() && !HubHasEvents()) {
        SWEEP_RETURN_IF_ERROR(executor_->Poll(200, &events));
        t = UnixSeconds();
      }
      for (executor::WorkerEvent& ev : events) {
        SWEEP_RETURN_IF_ERROR(Handle(ev, t, stopping));
      }
      SWEEP_RETURN_IF_ERROR(DrainHub(t, stopping));
      ShowProgress(t, false);
    }

    const double end = UnixSeconds();
    // The target was met, whatever else stopped the sweep meanwhile: it has what it sought, and
    // a resume would end it at once.
    if (!target_trials_.empty()) interrupted_ = false;
    store::SweepStatus final_status =
        interrupted_ ? store::SweepStatus::kInterrupted : store::SweepStatus::kCompleted;
    SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, std::nullopt, "running",
                                          store::ToString(final_status), stop_reason_, end));
    SWEEP_RETURN_IF_ERROR(CommitNow(end));
    SWEEP_RETURN_IF_ERROR(store_.SetSweepStatus(sweep_id_, final_status,
                                                final_status == store::SweepStatus::kCompleted
                                                    ? std::optional<double>(end)
                                                    : std::nullopt));
    // Written over in place while the sweep ran (a backup copied onto it), the file would be
    // damaged with nothing said, and the sweep's end claim results it no longer holds.
    SWEEP_RETURN_IF_ERROR(store_.CheckFile());
    ShowProgress(end, true);
    executor_->Shutdown(1000);
    // A completed sweep lets its agents go; an interrupted one keeps them for its resume.
    if (hub_ != nullptr && interrupted_) hub_->Shutdown();
    if (hub_ != nullptr && !interrupted_) hub_->ShutdownSweepOver();
    // An interrupted sweep ends now; what is left to delete goes on the next run or resume.
    if (!interrupted_ && reaper_.Busy()) {
      if (options_.log != nullptr) {
        *options_.log << "sweep: deleting what an earlier sweep of this name left in "
                      << trials_dir_ << " (Ctrl-C leaves it for the next run)\n";
      }
      reaper_.Drain(options_.interrupt);
    }
    RunSummary summary;
    summary.sweep_id = sweep_id_;
    summary.counts = counts_;
    summary.interrupted = interrupted_;
    summary.elapsed_s = end - start_s_;
    summary.trials_started = started_;
    if (hub_ != nullptr) summary.listen_port = hub_->port();
    return summary;
  }

  // The flags a resume needs to bring this run's agents back (stored with the sweep's owner).
  std::string AgentFlags() const {
    if (hub_ == nullptr) return "";
    return sweep::AgentFlags(options_.listen_host, hub_->port(), options_.token_file,
                             !options_.local_slots);
  }

  void Announce(const std::string& extra) {
    if (options_.log == nullptr) return;
    *options_.log << "sweep '" << config_.name << "': ";
    if (config_.unbounded_trials) {
      *options_.log << "trials until "
                    << (config_.time_budget_s && config_.stop_when ? "its time budget or target"
                        : config_.time_budget_s                    ? "its time budget"
                                                                   : "its target")
                    << ", ";
    } else {
      *options_.log << config_.max_trials << " trial(s), ";
    }
    *options_.log << config_.algorithm << " search, " << (config_.maximize ? "max " : "min ")
                  << config_.metric << "; ";
    if (packer_->total_slots() == 0) {
      *options_.log << "no local slots (trials run on agents), ";
    } else {
      *options_.log << packer_->total_slots() << " " << (packer_->gpu() ? "GPU" : "CPU")
                    << " slot(s), ";
    }
    *options_.log << config_.gpus << " per trial";
    if (config_.gpu_share > 1 && packer_->gpu()) {
      *options_.log << ", up to " << config_.gpu_share << " per GPU";
    }
    *options_.log << "; store " << store_.path() << extra << "\n";
  }

  Status StartTrial(const Pending& p, executor::Placement where, double now, bool rerun) {
    ++started_;
    RunningTrial t;
    t.params = p.params;
    t.retries = p.retries;
    t.agent_losses = p.agent_losses;
    if (scheduler_ != nullptr) t.length = TrialLength(t.params);
    t.where = std::move(where);
    const ServerInfo& server = servers_.at(t.where.server);
    t.placement = server.name + ":";
    for (size_t i = 0; i < t.where.gpus.size(); ++i) {
      t.placement += (i > 0 ? "," : "") + server.slots[t.where.gpus[i]].name;
    }
    t.started_s = now;
    t.first_run = !rerun || p.never_ran;
    t.prune_reason = p.finish_pruned;
    t.at_max_resource = p.finish_at_cap;
    t.checkpoint = RunCheckpointPath(p.number, server);

    executor::TrialTask task;
    if (rerun) {
      // What it reported before stands until it reports again: a trainer trial whose
      // checkpoint holds its last epoch trains nothing more, and ends with these (and with
      // that epoch's report, which it reports again from the checkpoint if the store lost it).
      SWEEP_ASSIGN_OR_RETURN(auto before, store_.Reports(sweep_id_, p.number));
      for (const auto& r : before) {
        json m = json::parse(r.metrics_json, nullptr, /*allow_exceptions=*/false);
        if (m.is_object()) {
          for (auto& [k, v] : m.items()) t.metrics[k] = v;
          auto metric = m.find(config_.metric);
          if (metric != m.end() && metric->is_number()) task.stored_metric = true;
          NoteMetric(t, m);
        }
        t.epochs = std::max(t.epochs, r.epoch);
        task.stored_step = std::max(task.stored_step, r.step);
        task.stored_epoch = std::max(task.stored_epoch, r.epoch);
      }
      task.stored_epoch_steps = std::max<int64_t>(
          1, std::count_if(before.begin(), before.end(),
                           [&](const auto& r) { return r.epoch == task.stored_epoch; }));
      SWEEP_RETURN_IF_ERROR(store_.UpdateTrialStatus(sweep_id_, p.number, TrialStatus::kRunning,
                                                     t.placement, now, t.checkpoint));
      SWEEP_RETURN_IF_ERROR(
          store_.AddEvent(sweep_id_, p.number, "interrupted", "running", t.placement, now));
      --counts_.interrupted;
    } else {
      store::TrialRecord rec;
      rec.number = p.number;
      rec.status = TrialStatus::kRunning;
      rec.params_json = p.params.dump();
      rec.placement = t.placement;
      rec.started_s = now;
      rec.checkpoint = t.checkpoint;
      // Its first run: a file at its path is an earlier sweep's (a store made anew). The worker
      // deletes it too (on an agent's own disk), but a coordinator killed before that would
      // resume this trial from it.
      if (const std::string mine = StoredCheckpointPath(p.number); !mine.empty()) {
        std::error_code ec;
        std::filesystem::remove(mine, ec);
      }
      if (config_.kind == TrialKind::kCommand) {
        // So is its folder, with its program's own checkpoints (the worker clears it too, on an
        // agent's disk). Moved aside at once and deleted off this loop: it may hold gigabytes.
        // One that cannot be cleared is the worker's to report.
        (void)reaper_.Discard(TrialDir(p.number), nullptr);
        rec.stdout_log = TrialDir(p.number) + "/stdout.log";
        rec.stderr_log = TrialDir(p.number) + "/stderr.log";
      }
      SWEEP_RETURN_IF_ERROR(store_.InsertTrial(sweep_id_, rec));
      // With TPE, which way it was proposed (the first trials are random search's).
      auto by = proposed_by_.find(p.number);
      SWEEP_RETURN_IF_ERROR(store_.AddEvent(
          sweep_id_, p.number, "", "running",
          by == proposed_by_.end() ? t.placement
                                   : t.placement + std::string(kProposedBy) + by->second,
          now));
      if (by != proposed_by_.end()) proposed_by_.erase(by);
    }

    task.number = p.number;
    task.kind = std::string(ToString(config_.kind));
    task.params = p.params;
    task.settings = config_.kind == TrialKind::kTrainer ? config_.trainer : config_.function;
    if (config_.kind == TrialKind::kCommand) {
      task.settings = CommandSettings(config_, TrialDir(p.number), sweep_key_);
    }
    if (config_.kind == TrialKind::kTrainer) {
      task.settings["checkpoint_path"] = CheckpointPath(p.number, server.agent.has_value());
      if (!task.settings.contains("checkpoint_every")) task.settings["checkpoint_every"] = 1;
    }
    task.seed = TrialSeed(config_.seed, p.number);
    task.heartbeat_timeout_s = config_.heartbeat_timeout_s;  // an agent's workers too
    task.fresh = t.first_run;
    task.replay_checkpoint_report = config_.kind == TrialKind::kTrainer && !task.fresh;
    if (!p.finish_pruned.empty() || p.finish_at_cap) {
      task.stop_at_epoch = static_cast<int>(std::ceil(p.finish_at));
    }
    task.decision_points = decisions_.decision_points;
    task.decide_every_report = decisions_.decide_every_report;
    task.decide_by_epoch = decisions_.decide_by_epoch;
    bool gpu = server.slots[t.where.gpus[0]].gpu;
    task.threads = gpu ? 1 : static_cast<int>(t.where.gpus.size());
    if (gpu) {
      for (int i : t.where.gpus) task.gpus.push_back(server.slots[i].device);
    }
    ++counts_.running;
    Status s = server.agent ? hub_->Start(*server.agent, task) : executor_->Start(task);
    if (!s.ok()) {
      (void)packer_->Release(t.where);
      --counts_.running;
      if (server.agent && s.code() != Status::Code::kNotFound) {
        // The agent could not take it: fail this trial, keep the sweep going.
        return FinishTrial(p.number, t, TrialStatus::kFailed, s.message(), now);
      }
      // Nothing ran, and not for the trial's sake: it runs again elsewhere, without using up a
      // retry, and nothing more goes to this server.
      Pending again = p;
      again.never_ran = t.first_run;
      queue_.push_front(std::move(again));
      if (server.agent) {
        // Its agent is gone, and its loss is still on the way here.
        (void)packer_->RemoveServer(t.where.server);
        return FinishTrial(p.number, t, TrialStatus::kInterrupted,
                           s.message() + "; running it again", now);
      }
      // No worker process could be started here (no descriptors or memory left, the worker
      // program gone): the machine's trouble, and the next trials would meet it too. As for a
      // checkpoint that cannot be written, the sweep stops when no other server can take the
      // trial, so that `resume` runs it once that is put right.
      const std::string trouble = server.name + ": " + s.message();
      RetireServer(t.where.server, trouble);
      if (packer_->largest_server() < config_.gpus && machine_trouble_.empty()) {
        machine_trouble_ = trouble;
      }
      return FinishTrial(p.number, t, TrialStatus::kInterrupted, s.message(), now);
    }
    running_.emplace(p.number, std::move(t));
    return Status::Ok();
  }

  // A survivor reached early_stopping.max_resource: it stops there and ends completed.
  void StopAtMaxResource(int64_t number, RunningTrial& t) {
    t.at_max_resource = true;
    (void)StopTrial(number, t);
    t.stop_sent = true;
  }

  // Tells the worker of `number`, waiting at a decision point, to go on.
  void ContinueTrial(int64_t number, const RunningTrial& t) {
    const ServerInfo* server = Server(t.where.server);
    if (server != nullptr && server->agent) {
      (void)hub_->Continue(*server->agent, number);
    } else {
      (void)executor_->Continue(number);
    }
  }

  // agent_lost: the trial's agent went away; agent_bye: it said so first (it was stopped: a
  // batch system's preemption, maintenance), which the trial cannot have caused.
  Status Handle(executor::WorkerEvent& ev, double now, bool stopping, bool agent_lost = false,
                bool agent_bye = false) {
    // When it happened, not when this loop turn came to it: a turn held up by a locked store
    // takes many events at once, and some arrived after the turn's time was taken (never later
    // than now, though: a worker's clock is not this one's to push ahead).
    if (ev.time_s > 0) now = std::min(ev.time_s, UnixSeconds());
    // Ctrl-C or SIGTERM has arrived, perhaps since this loop turn began.
    const bool signalled = options_.interrupt != nullptr && options_.interrupt->load();
    auto it = running_.find(ev.trial);
    if (it == running_.end()) return Status::Ok();  // a late message for a finished trial
    RunningTrial& t = it->second;
    if (ev.type == executor::WorkerEvent::Type::kReport) {
      // Early stopping has decided on this trial (pruned, or at max_resource), or it met
      // stop_when: what it reports while it stops (a program that ignores SIGTERM for its grace
      // period, a function's next step) is not its result, is not stored, and reaches no
      // scheduler, as resume would replay the store.
      if (!t.prune_reason.empty() || t.at_max_resource || target_trials_.contains(ev.trial)) {
        // A worker waiting for a verdict on it hears the stop (one run again only to measure
        // its test set has not been told yet).
        if (!t.stop_sent) {
          (void)StopTrial(ev.trial, t);
          t.stop_sent = true;
        }
        return Status::Ok();
      }
      // A command (its length unknown) is stopped once it reports past max_resource; its
      // result is its last report within it (as a pruned trial's is its report at the rung),
      // unless it has no other. Nor is a report past it stored while the trial stops for
      // another reason (the sweep stops, and the program reports on during its grace period, or
      // a function takes its next step): it had reached max_resource, and ends completed there.
      if (scheduler_ != nullptr && !t.metrics.empty() &&
          Resource(ev.step, ev.epoch) > scheduler_->MaxResource(ev.trial)) {
        if (t.stop_sent) {
          t.at_max_resource = true;
        } else {
          StopAtMaxResource(ev.trial, t);
        }
        return Status::Ok();
      }
      store::ReportRecord r;
      r.trial = ev.trial;
      r.step = ev.step;
      r.epoch = ev.epoch;
      r.metrics_json = ev.metrics.dump(-1, ' ', false, json::error_handler_t::replace);
      r.time_s = now;
      bool stored = false;
      SWEEP_RETURN_IF_ERROR(store_.AddReport(sweep_id_, r, &stored));
      const bool decision_point = decisions_.IsDecisionPoint(ev.step, ev.epoch, &t.next_point);
      if (!stored) {
        // A step it has a report for already (a rerun going over its steps again, a program
        // reporting one twice) keeps that first report's values, which early stopping decided
        // on. Metrics it lacked are added (a program printing its training loss and its
        // validation accuracy of one step on two lines), and go on as a report of their own.
        SWEEP_ASSIGN_OR_RETURN(json added, MergeIntoStoredReport(ev, now));
        if (added.empty()) {
          // Not its result either. A worker waiting at a decision point goes on.
          if (decision_point && !t.stop_sent) ContinueTrial(ev.trial, t);
          return Status::Ok();
        }
        ev.metrics = std::move(added);
      }
      for (auto& [k, v] : ev.metrics.items()) t.metrics[k] = v;
      NoteMetric(t, ev.metrics);
      t.epochs = std::max(t.epochs, ev.epoch);
      progressed_.insert(ev.trial);
      // Its worker checkpoints this epoch once it hears back (go on, or stop): commit first.
      if (decision_point && config_.kind == TrialKind::kTrainer) {
        SWEEP_RETURN_IF_ERROR(CommitNow(now));
      }
      if (scheduler_ != nullptr) {
        if (auto report = SchedulerReport(ev.trial, ev.step, ev.epoch, ev.metrics)) {
          search::Decision d = scheduler_->OnReport(report->trial, report->resource, report->value);
          TpeNoteReport(report->trial, report->resource, report->value, t.params);
          if (d.stop() && t.prune_reason.empty()) {
            t.prune_reason = d.reason;
            if (!t.stop_sent) {
              (void)StopTrial(ev.trial, t);
              t.stop_sent = true;
            }
          }
          // A command that reported the sweep's metric at max_resource has its result there,
          // whatever ends it after (its own end-of-run work failing or hanging to its timeout,
          // a stop): it is not stopped, so a program that ends there finishes undisturbed.
          if (!t.length && report->resource >= scheduler_->MaxResource(ev.trial)) {
            metric_at_cap_.insert(ev.trial);
          }
        }
        // A survivor runs to max_resource (ASHA's and Hyperband's), not past it, whatever
        // its own epochs or steps: there it ends completed (Ray Tune's max_t). A trial whose
        // length is known is stopped on reaching it, if it would go on; a command, whose length
        // is not, once it reports past it (so a program that ends there anyway finishes
        // undisturbed).
        const double resource = Resource(ev.step, ev.epoch);
        const double cap = scheduler_->MaxResource(ev.trial);
        const bool beyond = t.length ? *t.length > cap && resource >= cap : resource > cap;
        if (t.prune_reason.empty() && !t.stop_sent && beyond) StopAtMaxResource(ev.trial, t);
      }
      // A report that pruned its trial does not end the sweep by its target. One that arrives
      // while the sweep stops for another reason (an interrupt, its time budget) does: its
      // trial ends completed and the sweep with it, as a resume replaying the store would.
      if (t.prune_reason.empty()) NoteTarget(ev.trial, ev.metrics);
      // The worker waits at a decision point until told; a stop already sent is its answer,
      // and so is the target met: it stops now, its result this report.
      if (target_trials_.contains(ev.trial) && !t.stop_sent) {
        (void)StopTrial(ev.trial, t);
        t.stop_sent = true;
      }
      if (decision_point && !t.stop_sent) ContinueTrial(ev.trial, t);
      return Status::Ok();
    }
    for (auto& [k, v] : ev.metrics.items()) t.metrics[k] = v;
    NoteMetric(t, ev.metrics);
    if (ev.metric_not_number) t.metric_not_number = true;
    TrialStatus status = TrialStatus::kCompleted;
    std::string error;
    switch (ev.outcome) {
      case executor::TrialOutcome::Kind::kCompleted:
        // Pruned at a rung while its program ran on to its end (a command trial's worker waits
        // for the verdict as the program goes on): the decision stands, as do the metrics it
        // had there.
        if (!t.prune_reason.empty()) {
          status = TrialStatus::kPruned;
          error = t.prune_reason;
        } else if (t.at_max_resource) {
          error = CapNote();  // it ended by itself just as it was stopped there
        } else if (target_trials_.contains(ev.trial)) {
          error = TargetNote();  // its last report met it
        }
        break;
      case executor::TrialOutcome::Kind::kStopped:
        std::tie(status, error) = StoppedOutcome(ev.trial, t, "stopped: " + stop_reason_);
        break;
      case executor::TrialOutcome::Kind::kInterrupted:
        // The machine stopped it (its checkpoint could not be written: disk full, a quota, a
        // read-only file system), not the trial, and the trials after it there would meet the
        // same: it ends interrupted, without using up a retry. Its server takes no more trials;
        // while other servers can hold the sweep's trials it runs again on one of them (from
        // its checkpoint, where that is on storage they share), and otherwise the sweep stops,
        // so that `resume` runs it again once that is put right.
        std::tie(status, error) = StoppedOutcome(ev.trial, t, ev.error);
        if (status == TrialStatus::kInterrupted && !stopping && machine_trouble_.empty()) {
          const std::string trouble = "trial " + std::to_string(ev.trial) + ": " + ev.error;
          RetireServer(t.where.server, trouble);
          // Agents may still join: with none left that can hold it, it waits for one, as a
          // sweep that starts before its agents does.
          if (packer_->largest_server() >= config_.gpus || hub_ != nullptr) {
            queue_.push_front(
                {ev.trial, t.params, t.retries, t.agent_losses, t.first_run && ev.never_started});
            error += "; running it again on another server";
            if (packer_->largest_server() < config_.gpus && options_.log != nullptr &&
                !said_no_server_) {
              said_no_server_ = true;
              *options_.log << "sweep: no server left that can run a trial; waiting for an "
                               "agent (Ctrl-C stops the sweep)\n";
            }
          } else {
            machine_trouble_ = trouble;
          }
        }
        break;
      case executor::TrialOutcome::Kind::kFailed:
        status = TrialStatus::kFailed;
        error = ev.error;
        if (t.at_max_resource) {
          // It had reached max_resource; what ended it while it stopped does not undo that.
          status = TrialStatus::kCompleted;
          error = CapNote();
        } else if (ReachedMaxResource(ev.trial, t) && t.prune_reason.empty()) {
          // Its result is its report there; what failed after is said beside it.
          status = TrialStatus::kCompleted;
          error = CapNote() + "; after that: " + ev.error;
        } else if (!t.prune_reason.empty()) {
          // Early stopping had already decided. Whatever ended it while it stopped (its worker
          // or agent vanished, its program failed or diverged), the decision stands: it ends
          // pruned, as resume would record it, rather than failed or run again.
          status = TrialStatus::kPruned;
          error = t.prune_reason;
        } else if (target_trials_.contains(ev.trial)) {
          // It met the target; whatever ended it while it stopped does not undo that.
          status = TrialStatus::kCompleted;
          error = TargetNote();
        } else if ((ev.worker_lost && stopping) || signalled) {
          // The sweep is being stopped: a signal to every process (systemd's stop, a batch
          // system's cancel) also ends the trial's program or worker. Not the trial's fault:
          // it runs again on resume, without using up a retry.
          status = TrialStatus::kInterrupted;
        } else if (ev.worker_lost && agent_bye) {
          // Its agent was stopped and said goodbye: it runs again (from its checkpoint when that
          // is on storage the next server shares), counted neither as a retry nor as a loss.
          status = TrialStatus::kInterrupted;
          queue_.push_front(
              {ev.trial, t.params, t.retries, t.agent_losses, t.first_run && ev.never_started});
          error += "; running it again";
        } else if (ev.worker_lost && agent_lost && !ev.never_started &&
                   t.agent_losses + 1 >= kMaxAgentLosses) {
          SWEEP_RETURN_IF_ERROR(
              store_.SetTrialAgentLosses(sweep_id_, ev.trial, t.agent_losses + 1));
          error = "its agent was lost " + std::to_string(kMaxAgentLosses) +
                  " times while it ran (is the trial what takes it down? out of memory?); the "
                  "last time: " +
                  error;
        } else if (ev.worker_lost && agent_lost) {
          // Its agent went away, not the trial's fault: it runs again (from its checkpoint when
          // that is on storage the next server shares), without using up a retry. The loss
          // counts against it only if it ran there.
          status = TrialStatus::kInterrupted;
          const int losses = t.agent_losses + (ev.never_started ? 0 : 1);
          queue_.push_front(
              {ev.trial, t.params, t.retries, losses, t.first_run && ev.never_started});
          if (losses != t.agent_losses) {
            SWEEP_RETURN_IF_ERROR(store_.SetTrialAgentLosses(sweep_id_, ev.trial, losses));
          }
          error += "; running it again";
        } else if (ev.worker_lost && t.retries < config_.max_retries) {
          // The worker died, not the trial: run it again (from its checkpoint, if any).
          status = TrialStatus::kInterrupted;
          queue_.push_front({ev.trial, t.params, t.retries + 1, t.agent_losses});
          SWEEP_RETURN_IF_ERROR(store_.SetTrialRetries(sweep_id_, ev.trial, t.retries + 1));
          error += "; running it again (retry " + std::to_string(t.retries + 1) + " of " +
                   std::to_string(config_.max_retries) + ")";
        } else if (ev.worker_lost && t.retries > 0) {
          error += " (after " + std::to_string(t.retries) + " retr" +
                   (t.retries == 1 ? "y" : "ies") + ")";
        }
        break;
    }
    // A note on a run that ended by itself or was stopped (it trained from the start: see
    // RunTrial) goes with whatever ended it, so that pruned or stopped trials keep it too.
    const bool ran_out = ev.outcome == executor::TrialOutcome::Kind::kCompleted ||
                         ev.outcome == executor::TrialOutcome::Kind::kStopped;
    if (ran_out && !ev.error.empty()) error += (error.empty() ? "" : "; ") + ev.error;
    (void)packer_->Release(t.where);
    RunningTrial done = std::move(t);
    running_.erase(it);
    progressed_.erase(ev.trial);  // its final row is written below, not a progress update
    --counts_.running;
    return FinishTrial(ev.trial, done, status, error, now);
  }

  // [trial] max_initial_failures: the sweep stops when that many trials of this run failed
  // before reporting anything and none of the sweep's completed or was pruned, unless a trial
  // still running may yet succeed: one that has reported, or that started before the one that
  // just failed and outlived it (fast failures of a bad region of the space come before slow
  // successes; a broken program fails every trial in the order they started).
  void NoteInitialFailure(int64_t number, const RunningTrial& failed, const std::string& error) {
    const int limit = options_.max_initial_failures.value_or(config_.max_initial_failures);
    if (limit <= 0 || !failing_start_.empty() || counts_.completed + counts_.pruned > 0 ||
        failed_unreported_ < limit) {
      return;
    }
    for (const auto& [other, r] : running_) {
      if (other != number && (!r.metrics.empty() || r.started_s < failed.started_s)) return;
    }
    std::string one_line = error.substr(0, 400);
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    // Counted in this run, new trials only (see FinishTrial): the words say so on a resume too.
    failing_start_ = std::to_string(failed_unreported_) +
                     " new trials all failed before reporting anything (none of the sweep's has "
                     "succeeded), the last (trial " +
                     std::to_string(number) + ") with: " + executor::Abbreviate(one_line, 300) +
                     "; fix the cause and resume (they run again), or resume with "
                     "--max-initial-failures 0 to go on whatever fails (a cause in the config "
                     "itself needs a new sweep: run it with --name)";
  }

  // The trials that failed before reporting anything in a run the failures stopped: they never
  // had a chance, so they end interrupted, and run again (once) on resume; at once, in the same
  // commit as their failure, so that however the run ends they are recorded so.
  Status RequeueInitialFailures(double now) {
    for (const int64_t number : initial_failures_) {
      SWEEP_RETURN_IF_ERROR(
          store_.UpdateTrialStatus(sweep_id_, number, TrialStatus::kInterrupted, "", {}));
      SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, number, "failed", "interrupted",
                                            "to run again: the sweep's first trials all failed",
                                            now));
      --counts_.failed;
      ++counts_.interrupted;
    }
    initial_failures_.clear();
    return Status::Ok();
  }

  // Whether a trial's reports show the sweep's metric.
  void NoteMetric(RunningTrial& t, const json& reported) {
    if (!reported.is_object()) return;
    auto m = reported.find(config_.metric);
    if (m == reported.end()) return;
    // NaN arrives as null: a diverged loss, under the right name.
    if (m->is_number() || m->is_null()) {
      t.metric_reported = true;
      metric_seen_ = true;
    } else {
      t.metric_not_number = true;
    }
  }

  // A trial that ran to its end reporting other metrics but never the sweep's, while no trial
  // of the sweep has: a misspelt name (in the config or the program) that would fail every
  // trial and leave early stopping nothing to rank. The sweep stops, interrupted, at the first;
  // it and any like it end interrupted, to run again on resume once the program is fixed.
  bool MetricNeverReported(int64_t number, const RunningTrial& t, TrialStatus status,
                           const std::string& error) {
    if (metric_seen_ || t.metric_reported || (t.metrics.empty() && !t.metric_not_number) ||
        (status != TrialStatus::kCompleted && status != TrialStatus::kFailed)) {
      return false;
    }
    if (metric_missing_.empty()) {
      // The names it reported besides the metric (which it may have sent as text).
      std::vector<std::string> others;
      for (const auto& [k, v] : t.metrics.items()) {
        if (k != config_.metric) others.push_back(k);
      }
      std::string list;
      for (const std::string& n : others) list += (list.empty() ? "'" : ", '") + n + "'";
      if (t.metric_not_number) list += (list.empty() ? "'" : ", '") + config_.metric + "'";
      std::string hint = DidYouMean(config_.metric, others);
      // "val_accuracy" for "val_acc": too far apart to be a typo, but one begins the other.
      for (size_t i = 0; hint.empty() && i < others.size(); ++i) {
        const std::string& n = others[i];
        const std::string& m = config_.metric;
        if (std::min(n.size(), m.size()) >= 3 && (n.starts_with(m) || m.starts_with(n))) {
          hint = n;
        }
      }
      metric_missing_ =
          "trial " + std::to_string(number) +
          (status == TrialStatus::kFailed && error.find("never reported") == std::string::npos
               ? " failed (" + executor::Abbreviate(error, 200) + ")"
               : " ended") +
          " without reporting the sweep's metric '" + config_.metric + "'" +
          (t.metric_not_number ? " as a number (it came only as text, a bool or a list)" : "") +
          "; it reported " + list + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
          ". A wrong [sweep] metric in the config: start the fixed config under a new name "
          "(--name). A wrong name in the program's reports: fix it and resume (this trial runs "
          "again)";
    }
    return true;
  }

  Status FinishTrial(int64_t number, const RunningTrial& t, TrialStatus status, std::string error,
                     double now) {
    if (MetricNeverReported(number, t, status, error)) {
      status = TrialStatus::kInterrupted;
      error = "to run again: it never reported the sweep's metric '" + config_.metric + "'" +
              (error.empty() ? "" : " (" + error + ")");
    }
    store::TrialRecord rec;
    rec.number = number;
    rec.status = status;
    rec.ended_s = now;
    rec.error = error;
    rec.metrics_json = t.metrics.dump(-1, ' ', false, json::error_handler_t::replace);
    rec.epochs = t.epochs;
    rec.objective = Objective(t.metrics);
    if (status == TrialStatus::kCompleted && rec.objective) {
      TpeNoteEnd(number, *rec.objective, t.params);
    }
    rec.checkpoint = t.checkpoint;  // this run's: a rerun may have run elsewhere
    SWEEP_RETURN_IF_ERROR(store_.FinishTrial(sweep_id_, rec));
    SWEEP_RETURN_IF_ERROR(
        store_.AddEvent(sweep_id_, number, "running", store::ToString(status), error, now));
    SWEEP_RETURN_IF_ERROR(KeepCheckpoints(number, status, rec.objective));
    // A trial that ended before its first checkpoint (it failed at once, diverged in its first
    // epoch) has none: the store stops naming a file that never was. (An agent's own disk is
    // not seen from here.)
    if (store::IsTerminal(status) && t.where.server == kLocalServer) {
      const std::string path = StoredCheckpointPath(number);
      std::error_code ec;
      if (!path.empty() && !std::filesystem::exists(path, ec) && !ec) {
        SWEEP_RETURN_IF_ERROR(store_.DropTrialCheckpoint(sweep_id_, number));
      }
    }
    switch (status) {
      case TrialStatus::kCompleted:
        ++counts_.completed;
        if (rec.objective &&
            (!best_ || (config_.maximize ? *rec.objective > *best_ : *rec.objective < *best_) ||
             (*rec.objective == *best_ && number < best_trial_))) {  // ties: as `best` ranks
          best_ = rec.objective;
          best_trial_ = number;
        }
        break;
      case TrialStatus::kFailed:
        ++counts_.failed;
        // Failed before it reported anything (a program that cannot run, a setting that breaks
        // at once), in its first run: one run again (requeued when such failures stopped the
        // sweep before) has had its chance, and counting it again would stop every resume of a
        // sweep whose first trials fail for their parameters (a region that runs out of memory).
        // Once the sweep stops for them, each such failure is requeued as it comes.
        if (t.metrics.empty() && t.first_run) {
          ++failed_unreported_;
          if (counts_.completed + counts_.pruned == 0) initial_failures_.push_back(number);
          if (failing_start_.empty()) NoteInitialFailure(number, t, error);
          if (!failing_start_.empty()) SWEEP_RETURN_IF_ERROR(RequeueInitialFailures(now));
        }
        break;
      case TrialStatus::kPruned:
        ++counts_.pruned;
        break;
      default:
        ++counts_.interrupted;
        break;
    }
    if (options_.log != nullptr && !options_.live_status) {
      *options_.log << "trial " << number << " " << store::ToString(status);
      if (rec.objective) {
        *options_.log << " " << config_.metric << "=" << FormatMetric(*rec.objective);
      }
      *options_.log << " (" << FormatMetric(now - t.started_s) << " s)";
      if (!error.empty()) *options_.log << ": " << error;
      *options_.log << "\n";
    } else if (options_.log != nullptr && status == TrialStatus::kFailed) {
      *options_.log << "\r\033[Ktrial " << number << " failed: " << error << "\n";
    }
    return Status::Ok();
  }

  void ShowProgress(double now, bool final) {
    if (options_.log == nullptr || !options_.live_status) return;
    if (!final && now - last_progress_s_ < 0.1) return;
    last_progress_s_ = now;
    std::string line =
        "\r\033[K" + config_.name + ": " +
        std::to_string(counts_.completed + counts_.pruned + counts_.failed) +
        (config_.unbounded_trials ? std::string() : "/" + std::to_string(TrialLimit())) +
        " done, " + std::to_string(counts_.running) + " running, " +
        std::to_string(counts_.pruned) + " pruned, " + std::to_string(counts_.failed) + " failed";
    if (best_) {
      line += ", best " + config_.metric + " " + FormatMetric(*best_) + " (trial " +
              std::to_string(best_trial_) + ")";
    }
    line += ", " + FormatElapsed(ActiveSeconds(now));
    *options_.log << line << (final ? "\n" : "") << std::flush;
  }

  store::Store& store_;
  const RunOptions& options_;
  SweepConfig config_;
  // Declared before the executor and the hub, so released after them: the workers and agents'
  // trials are gone before another process can take the sweep.
  std::unique_ptr<SweepLock> lock_;
  std::optional<executor::Packer> packer_;   // every server's slots, free and held
  std::map<int, ServerInfo> servers_;        // by packer server id
  std::unique_ptr<executor::AgentHub> hub_;  // remote agents; null without --listen
  std::vector<executor::HubEvent> hub_events_;
  int next_server_ = kLocalServer + 1;
  std::unique_ptr<search::Sampler> sampler_;
  std::unique_ptr<search::Scheduler> scheduler_;  // null without early stopping
  executor::TrialTask decisions_;                 // only its decision-point fields are used
  std::string trials_dir_;                        // command trials' directories; else empty
  std::string checkpoint_dir_;                    // trainer trials' checkpoints; else empty
  std::string agent_checkpoint_dir_;              // the same, as agents' workers get it
  std::string stored_checkpoint_dir_;             // the same, absolute
  std::optional<CheckpointKeeper> keeper_;        // with [trial] keep_checkpoints
  FolderReaper reaper_;                           // deletes first runs' folders off the loop
  std::set<int64_t> draining_agents_;             // agents that said they are stopping
  bool said_no_server_ = false;                   // "no server left" since the last one came
  // Agents gone, and how (ids are never reused): a trial's done may come after its agent's loss.
  std::map<int64_t, executor::AgentLost::Reason> lost_agents_;
  std::set<int64_t> doomed_;  // trials whose checkpoint files go once the store commits
  std::unique_ptr<executor::LocalExecutor> executor_;
  int64_t sweep_id_ = 0;
  int64_t next_number_ = 0;   // the next trial number the sampler has not been asked for
  std::deque<int64_t> gaps_;  // numbers below next_number_ that never started (after a resume)
  // order = "longest_first": drawn from the sampler, not started yet; most work first.
  std::map<std::pair<double, int64_t>, json> ahead_;  // (-work, number) -> params
  int64_t started_ = 0;                               // trials started by this run
  std::optional<trainer::TrainOptions> work_base_;    // [trainer] applied, for EstimatedWork
  double start_s_ = 0;
  double active_before_s_ = 0;  // running time of earlier runs of this sweep
  // `run --from`: trials below carried_ came from another sweep; trial n is the sampler's
  // point n + sample_shift_, or for a grid (SampleFor) the next point not in carried_params_.
  int64_t carried_ = 0;
  int64_t sample_shift_ = 0;
  std::set<std::string> carried_params_;  // CanonicalParams of the grid points carried over
  // algorithm = "tpe": the sampler, and what it learns from at each level (the rungs, then the
  // end: +inf), with the parameters of every trial seen; tpe_fed_ is the level it was given.
  std::unique_ptr<search::TpeSampler> tpe_;
  std::vector<double> tpe_levels_;
  std::vector<std::map<int64_t, double>> tpe_values_;
  std::map<int64_t, json> tpe_params_;
  size_t tpe_fed_ = std::numeric_limits<size_t>::max();
  std::map<int64_t, std::string> proposed_by_;  // "tpe" or "startup random", for the start event
  std::vector<int64_t> fresh_points_;  // grid indices of trials carried_, carried_ + 1, ...
  int64_t grid_cursor_ = 0;            // the next grid index SampleFor looks at
  double last_progress_s_ = 0;
  double last_commit_s_ = 0;
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
  std::string machine_trouble_;  // what stopped a trial that was not its fault; stops the sweep
};

}  // namespace

namespace {

// A sweep that stopped on a storage or system error after it was recorded can be resumed: say
// so, since the store's own advice ("run the command again") would be refused by `run`.
Result<RunSummary> WithResumeHint(Result<RunSummary> result, store::Store& store,
                                  const std::string& name) {
  if (result.ok()) return result;
  const Status& s = result.status();
  bool resumable = s.code() == Status::Code::kIoError || s.code() == Status::Code::kCorruption ||
                   s.code() == Status::Code::kInternal;
  // A file removed or replaced: the store's message says what is left and where.
  if (!resumable || store.file_lost()) return result;
  auto sweep = store.FindSweep(name);
  if (!sweep.ok()) return result;
  return s.WithMessage(s.message() + "\nsweep '" + name +
                       "' stopped; what it had committed is kept. Once the cause is fixed, `" +
                       ResumeCommand(*sweep, store.path()) + "` continues it.");
}

}  // namespace

std::string UnusableCacheDir(const std::string& dir) {
  if (dir.empty()) return "";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec.message();
  if (!std::filesystem::is_directory(dir, ec)) return "not a folder";
  if (::access(dir.c_str(), W_OK) != 0) return std::strerror(errno);
  return "";
}

Status CheckRunHere(const SweepConfig& config, const RunOptions& options) {
  const int local = options.local_slots
                        ? static_cast<int>(executor::DiscoverLocalSlots(config.cpu_slots).size())
                        : 0;
  return FitsHere(config, options, local);
}

Status CheckCanListen(const RunOptions& options) {
  // Listened on, and let go, the same way the sweep's own listening does; port 0 is always free.
  if (options.listen_host.empty() || options.listen_port == 0) return Status::Ok();
  boost::asio::io_context io;
  auto probe = executor::net::MakeTcpTransport(io);
  auto bound = probe->Listen(options.listen_host, options.listen_port, [](auto&&) {});
  if (!bound.ok()) return bound.status();
  probe->StopListening();
  return Status::Ok();
}

Result<RunSummary> RunSweep(const SweepConfig& config, store::Store& store,
                            const RunOptions& options) {
  return WithResumeHint(Coordinator(store, options).Start(config), store, config.name);
}

Result<RunSummary> ResumeSweep(const std::string& name, store::Store& store,
                               const RunOptions& options) {
  return WithResumeHint(Coordinator(store, options).Resume(name), store, name);
}

}  // namespace sweep
