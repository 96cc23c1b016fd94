// Resuming a sweep from the store alone: its stored config, its trials left running marked
// interrupted, early stopping's and TPE's state replayed from the stored reports in their
// order, the interrupted trials queued to run again (or ended as they would have), and the
// numbering, counts and best trial restored. Also `resume --max-trials/--time-budget` and
// `run --from` (trials carried over from another sweep).
#include <algorithm>

#include "coordinator_loop.h"
#include "output.h"

namespace sweep {

using nlohmann::json;
using store::TrialStatus;

Result<RunSummary> Coordinator::Resume(const std::string& name) {
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
  SWEEP_RETURN_IF_ERROR(RefuseOwnerWithoutLockFile(
      store_.path(), rec, name, "stop that process first (resume refuses to run a sweep twice)"));
  lock_ = std::move(lock).value();
  auto cfg = ParseConfig(rec.config_text, rec.config_path, ConfigUse::kResume);
  if (!cfg.ok()) {
    return Status::InvalidArgument(
        "cannot resume '" + name +
        "': its stored config no longer loads: " + cfg.status().message());
  }
  config_ = std::move(cfg).value();
  config_.sweep.name = rec.name;  // it may have been renamed by `run --name`
  sweep_key_ = SweepKey(rec.name, rec.created_s);
  // A budget an earlier `resume --max-trials/--time-budget` gave stands over the config's.
  if (rec.max_trials) {
    config_.sweep.max_trials = *rec.max_trials;
    config_.sweep.unbounded_trials = false;
  }
  if (rec.time_budget_s) config_.sweep.time_budget_s = rec.time_budget_s;
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
    SWEEP_ASSIGN_OR_RETURN(const int64_t max_number, store_.MaxTrialNumber(sweep_id_));
    SWEEP_ASSIGN_OR_RETURN(summary.no_budget_helps,
                           NoBudgetAddsWork(rec, max_number, summary.counts.interrupted > 0));
    return summary;
  }
  // Its owner from now on, said at once: a second resume refused meanwhile names this one.
  SWEEP_RETURN_IF_ERROR(store_.SetSweepOwner(sweep_id_, OwnerId(), rec.run_options));
  SWEEP_RETURN_IF_ERROR(store_.Commit());
  SWEEP_RETURN_IF_ERROR(Prepare());
  start_s_ = Now();
  active_before_s_ = rec.active_s;
  SWEEP_RETURN_IF_ERROR(store_.SetSweepOwner(sweep_id_, OwnerId(), AgentFlags()));
  SWEEP_RETURN_IF_ERROR(InterruptOrphans());
  SWEEP_RETURN_IF_ERROR(RebuildKeptCheckpoints());
  // Early stopping's state, and whether stop_when was met, are functions of the stored reports:
  // replay them in order, as they were decided live.
  std::map<int64_t, std::string> stop_reasons;
  std::map<int64_t, double> reached;  // the largest resource each trial reported
  SWEEP_RETURN_IF_ERROR(ReplayReports(&stop_reasons, &reached));
  SWEEP_RETURN_IF_ERROR(RequeueInterrupted(stop_reasons, reached));
  int64_t stored = 0;
  SWEEP_RETURN_IF_ERROR(RestoreTotals(&stored));
  SWEEP_RETURN_IF_ERROR(store_.AddEvent(
      sweep_id_, std::nullopt, store::ToString(rec.status), "running",
      "resumed by " + OwnerId() + (extended.empty() ? "" : "; " + extended), start_s_));
  SWEEP_RETURN_IF_ERROR(store_.SetSweepStatus(sweep_id_, store::SweepStatus::kRunning, {}));
  if (!extended.empty()) {
    SWEEP_RETURN_IF_ERROR(store_.SetSweepBudget(sweep_id_, rec.max_trials, rec.time_budget_s));
  }
  Announce(" (resumed: " + std::to_string(queue_.size()) + " trial(s) to run again, " +
           std::to_string(stored) + " started before" + (extended.empty() ? "" : "; " + extended) +
           ")");
  return Loop();
}

// Trials the dead coordinator left RUNNING have no worker any more.
Status Coordinator::InterruptOrphans() {
  store::TrialQuery running;
  running.status = TrialStatus::kRunning;
  SWEEP_ASSIGN_OR_RETURN(auto orphans, store_.Trials(sweep_id_, running));
  for (const auto& t : orphans) {
    SWEEP_RETURN_IF_ERROR(
        store_.UpdateTrialStatus(sweep_id_, t.number, TrialStatus::kInterrupted, "", {}));
    SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, t.number, "running", "interrupted",
                                          "its coordinator stopped before it ended", start_s_));
  }
  return Status::Ok();
}

// TPE learns again what it had learnt (every trial's parameters, the completed ones' ends, the
// values at the rungs, or without early stopping the reports of trials that did not end);
// early stopping and stop_when see the stored reports in their order.
Status Coordinator::ReplayReports(std::map<int64_t, std::string>* stop_reasons,
                                  std::map<int64_t, double>* reached) {
  std::map<int64_t, json> params;
  std::map<int64_t, std::optional<double>> lengths;  // early stopping's view of each trial
  if (source_->learns() || scheduler_ != nullptr) {
    SWEEP_ASSIGN_OR_RETURN(auto all, store_.Trials(sweep_id_, store::TrialQuery{}));
    for (const auto& t : all) {
      json p = json::parse(t.params_json, nullptr, /*allow_exceptions=*/false);
      if (scheduler_ != nullptr && p.is_object()) lengths[t.number] = kind_->Length(p);
      if (scheduler_ != nullptr && t.bracket) {
        scheduler_->SetBracket(t.number, static_cast<int>(*t.bracket));
      }
      if (!source_->learns()) continue;
      if (t.status == TrialStatus::kCompleted && t.objective) {
        source_->NoteEnd(t.number, *t.objective, p);
      }
      source_->NoteParams(t.number, p);
      params[t.number] = std::move(p);
    }
  }
  if (scheduler_ == nullptr && !config_.sweep.stop_when && !source_->learns()) {
    return Status::Ok();
  }
  SWEEP_ASSIGN_OR_RETURN(auto stored, store_.AllReports(sweep_id_));
  for (const auto& r : stored) {
    (*reached)[r.trial] = std::max((*reached)[r.trial], kind_->Resource(r.step, r.epoch));
    json metrics = json::parse(r.metrics_json, nullptr, /*allow_exceptions=*/false);
    bool pruned_here = false;
    if (scheduler_ != nullptr) {
      if (auto report = SchedulerReport(r.trial, r.step, r.epoch, metrics, lengths[r.trial])) {
        search::Decision d =
            scheduler_->OnReport(report->trial, report->resource, report->value, report->last);
        source_->NoteReport(report->trial, report->resource, report->value, params[r.trial]);
        if (d.stop() && !stop_reasons->count(r.trial)) {
          (*stop_reasons)[r.trial] = d.reason;
          pruned_here = true;
        }
        if (report->resource >= scheduler_->MaxResource(r.trial)) metric_at_cap_.insert(r.trial);
      }
    } else if (source_->learns()) {
      if (auto report = SchedulerReport(r.trial, r.step, r.epoch, metrics, std::nullopt)) {
        source_->NoteReport(report->trial, report->resource, report->value, params[r.trial]);
      }
    }
    // stop_when counts the sweep's own trials, not those carried over (as live).
    if (!pruned_here && !stop_reasons->count(r.trial) && r.trial >= carried_) {
      NoteTarget(r.trial, metrics);
    }
  }
  return Status::Ok();
}

// The interrupted trials: those early stopping or stop_when had already ended end so now (a
// trainer trial runs again only to measure its test set where it stopped); the others queue to
// run again, those that survived more rungs first.
Status Coordinator::RequeueInterrupted(const std::map<int64_t, std::string>& stop_reasons,
                                       std::map<int64_t, double>& reached) {
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
    const std::optional<double> length = params.is_object() ? kind_->Length(params) : std::nullopt;
    const bool ran = reached.count(t.number) > 0;
    const bool at_cap = scheduler_ != nullptr && !scheduler_->Stopped(t.number) && ran &&
                        reached[t.number] >= scheduler_->MaxResource(t.number) && length &&
                        *length > scheduler_->MaxResource(t.number);
    const bool was_pruned = scheduler_ != nullptr && scheduler_->Stopped(t.number);
    const auto said = stop_reasons.find(t.number);
    const std::string reason = said == stop_reasons.end() ? "" : said->second;
    if ((at_cap || was_pruned) && kind_->checkpoints() && ran && params.is_object()) {
      // Stopped there live, it had not yet measured its test set (test_acc): it runs again to
      // do so at that epoch, and ends as it would have.
      Pending finish{t.number, std::move(params), t.retries, t.agent_losses};
      finish.finish_pruned = reason;
      finish.finish_at_cap = at_cap;
      finish.finish_at = reached[t.number];
      queue_.push_back(std::move(finish));
    } else if (at_cap || (!length && !was_pruned && metric_at_cap_.contains(t.number))) {
      // It had run to max_resource, where it would have been stopped; or a command that had
      // reported the metric there ran on (its own end) until the coordinator died: completed.
      SWEEP_RETURN_IF_ERROR(CompleteOnResume(t, CapNote()));
    } else if (was_pruned) {
      // Early stopping had already decided this one: it ends pruned, not run again.
      store::TrialRecord pruned = t;
      pruned.status = TrialStatus::kPruned;
      pruned.ended_s = start_s_;
      pruned.error = reason;
      SWEEP_RETURN_IF_ERROR(store_.FinishTrial(sweep_id_, pruned));
      SWEEP_RETURN_IF_ERROR(
          store_.AddEvent(sweep_id_, t.number, "interrupted", "pruned", pruned.error, start_s_));
      SWEEP_RETURN_IF_ERROR(KeepCheckpoints(t.number, TrialStatus::kPruned, t.objective));
    } else if (!params.is_object()) {
      return Status::Corruption(store_.path() + ": trial " + std::to_string(t.number) +
                                " has unreadable params");
    } else {
      queue_.push_back({t.number, std::move(params), t.retries, t.agent_losses});
    }
  }
  if (scheduler_ != nullptr) {
    std::stable_sort(queue_.begin(), queue_.end(), [&](const Pending& a, const Pending& b) {
      return scheduler_->Rung(a.number) > scheduler_->Rung(b.number);
    });
  }
  return Status::Ok();
}

// Numbering goes on after the highest stored trial; counts, the best trial and the grid points
// carried over come from the store. `stored`: how many trials it holds.
Status Coordinator::RestoreTotals(int64_t* stored_count) {
  SWEEP_ASSIGN_OR_RETURN(int64_t max_number, store_.MaxTrialNumber(sweep_id_));
  // order = "longest_first" starts trials out of number order: those drawn but not started when
  // the sweep stopped are drawn again (the sampler gives a number the same parameters).
  SWEEP_ASSIGN_OR_RETURN(auto stored, store_.Trials(sweep_id_, store::TrialQuery{}));
  std::vector<bool> seen(static_cast<size_t>(max_number + 1), false);
  for (const auto& t : stored) {
    if (t.number >= 0 && t.number <= max_number) seen[static_cast<size_t>(t.number)] = true;
  }
  source_->ContinueAfter(max_number, seen);
  SWEEP_ASSIGN_OR_RETURN(counts_, store_.CountByStatus(sweep_id_));
  for (const auto& t : stored) {
    metric_seen_ = metric_seen_ || t.objective.has_value();
    if (t.number < carried_ && config_.search.algorithm == "grid")
      source_->CarriedPoint(t.params_json);
  }
  SWEEP_ASSIGN_OR_RETURN(auto best, store_.BestTrials(sweep_id_, config_.sweep.maximize, 1));
  if (!best.empty()) {
    best_ = best[0].objective;
    best_trial_ = best[0].number;
  }
  *stored_count = static_cast<int64_t>(stored.size());
  return Status::Ok();
}

// `run --from`: copies the planned trials into the new sweep, and has early stopping, TPE, the
// counts and the best trial start from them.
Status Coordinator::TakeCarried(const CarryPlan& plan) {
  std::vector<store::ReportRecord> reports;
  SWEEP_RETURN_IF_ERROR(ApplyCarryOver(store_, sweep_id_, plan, start_s_, &reports));
  carried_ = static_cast<int64_t>(plan.trials.size());
  sample_shift_ = plan.sample_shift;
  source_->SetCarried(carried_, sample_shift_);
  std::map<int64_t, json> params;
  for (const store::TrialRecord& t : plan.trials) {
    if (scheduler_ != nullptr && t.bracket) {
      scheduler_->SetBracket(t.number, static_cast<int>(*t.bracket));
    }
    if (config_.search.algorithm == "grid") source_->CarriedPoint(t.params_json);
    json p = json::parse(t.params_json, nullptr, /*allow_exceptions=*/false);
    metric_seen_ = true;
    if (t.status == TrialStatus::kCompleted) {
      ++counts_.completed;
      source_->NoteEnd(t.number, *t.objective, p);
      // The best completed trial, as `best` ranks them (ties: the lower number).
      if (!best_ || (config_.sweep.maximize ? *t.objective > *best_ : *t.objective < *best_)) {
        best_ = t.objective;
        best_trial_ = t.number;
      }
    } else {
      ++counts_.pruned;
    }
    source_->NoteParams(t.number, p);
    params[t.number] = std::move(p);
  }
  if (scheduler_ == nullptr) return Status::Ok();
  for (const auto& r : reports) {
    json metrics = json::parse(r.metrics_json, nullptr, /*allow_exceptions=*/false);
    const json& p = params[r.trial];
    const std::optional<double> length = p.is_object() ? kind_->Length(p) : std::nullopt;
    if (auto report = SchedulerReport(r.trial, r.step, r.epoch, metrics, length)) {
      (void)scheduler_->OnReport(report->trial, report->resource, report->value, report->last);
      source_->NoteReport(report->trial, report->resource, report->value, params[r.trial]);
    }
  }
  return Status::Ok();
}

// `resume --max-trials/--time-budget`: sets the new budget in config_ and `rec` (stored once
// the resume starts) and says what changed ("max_trials 16 -> 32"). Refused, before anything is
// written, when it leaves nothing to run (CheckBudgetLeavesWork).
Result<std::string> Coordinator::ExtendBudget(store::SweepRecord& rec) {
  const BudgetChange& change = options_.budget;
  const std::string who = "sweep '" + rec.name + "'";
  SWEEP_ASSIGN_OR_RETURN(const int64_t max_number, store_.MaxTrialNumber(sweep_id_));
  const int64_t started = max_number + 1 - rec.carried;  // max_trials counts these
  std::string said;
  if (change.max_trials) {
    const int64_t before = config_.sweep.unbounded_trials ? started : config_.sweep.max_trials;
    const int64_t want = change.more_trials ? before + *change.max_trials : *change.max_trials;
    if (want < started || (want == started && rec.status == store::SweepStatus::kCompleted)) {
      // `status` counts the trials carried over too; max_trials does not.
      const std::string carried = rec.carried > 0
                                      ? " (besides the " + std::to_string(rec.carried) +
                                            " carried over, which max_trials does not count)"
                                      : "";
      return Status::InvalidArgument("--max-trials " + std::to_string(want) + ": " + who +
                                     " has started " + std::to_string(started) +
                                     " trial(s) already" + carried +
                                     "; give a larger total, or +N for N more");
    }
    // The total in force again changes nothing, and is not said to.
    if (config_.sweep.unbounded_trials || want != before) {
      said = "max_trials " +
             (config_.sweep.unbounded_trials ? std::string("unset") : std::to_string(before)) +
             " -> " + std::to_string(want);
    }
    config_.sweep.max_trials = want;
    config_.sweep.unbounded_trials = false;
    rec.max_trials = want;
  }
  if (change.time_budget_s) {
    const double before = std::max(config_.sweep.time_budget_s.value_or(0), rec.active_s);
    const double want = change.more_time ? before + *change.time_budget_s : *change.time_budget_s;
    if (want <= rec.active_s) {
      return Status::InvalidArgument(
          "--time-budget " + FormatDuration(want) + ": " + who + " has run for " +
          FormatDuration(rec.active_s) +
          " already, and the budget is its total running time; give more than that, or +30m "
          "for 30 more minutes");
    }
    said += std::string(said.empty() ? "" : ", ") + "time_budget " +
            (config_.sweep.time_budget_s ? FormatDuration(*config_.sweep.time_budget_s)
                                         : std::string("unset")) +
            " -> " + FormatDuration(want);
    config_.sweep.time_budget_s = want;
    rec.time_budget_s = want;
  }
  if (rec.status != store::SweepStatus::kCompleted) return said;
  SWEEP_RETURN_IF_ERROR(CheckBudgetLeavesWork(rec, max_number).status());
  return said;
}

// A completed sweep: does the new budget let anything run? Not when its time is spent, all its
// trials have started and the budget is not raised past them, its grid is done, or it met its
// stop_when target.
Result<std::string> Coordinator::CheckBudgetLeavesWork(const store::SweepRecord& rec,
                                                       int64_t max_number) {
  const std::string who = "sweep '" + rec.name + "'";
  const int64_t started = max_number + 1 - rec.carried;
  SWEEP_ASSIGN_OR_RETURN(const store::StatusCounts counts, store_.CountByStatus(sweep_id_));
  const bool reruns = counts.interrupted > 0;
  if (config_.sweep.time_budget_s && rec.active_s >= *config_.sweep.time_budget_s) {
    return Status::InvalidArgument(who + " spent its time budget of " +
                                   FormatDuration(*config_.sweep.time_budget_s) +
                                   "; give a larger --time-budget (or +30m for 30 more minutes)");
  }
  if (!reruns && !config_.sweep.unbounded_trials && started >= config_.sweep.max_trials) {
    return Status::InvalidArgument(who + " has started all its " +
                                   std::to_string(config_.sweep.max_trials) +
                                   " trials; give a larger --max-trials (or +N for N more)");
  }
  SWEEP_ASSIGN_OR_RETURN(const std::string none, NoBudgetAddsWork(rec, max_number, reruns));
  if (!none.empty()) return Status::InvalidArgument(none);
  return std::string();
}

// Why no larger budget would let a completed sweep run anything, or "": its grid is done (and
// no trial waits to run again, `reruns`), or it met its stop_when target.
Result<std::string> Coordinator::NoBudgetAddsWork(const store::SweepRecord& rec, int64_t max_number,
                                                  bool reruns) {
  const std::string who = "sweep '" + rec.name + "'";
  SWEEP_ASSIGN_OR_RETURN(auto probe, MakeSampler(config_));
  // Every trial, carried over or not, is a distinct point of the grid.
  if (!reruns && probe->size() && max_number + 1 >= *probe->size()) {
    return who + " has run all " + std::to_string(*probe->size()) + " points of its " +
           config_.search.algorithm +
           " search; a larger budget adds none (widen the space in a new sweep: sweep run "
           "CONFIG --from " +
           rec.name + ")";
  }
  if (config_.sweep.stop_when) {
    SWEEP_ASSIGN_OR_RETURN(auto reports, store_.AllReports(sweep_id_));
    for (const auto& r : reports) {
      if (r.trial < rec.carried) continue;
      if (MeetsTarget(json::parse(r.metrics_json, nullptr, /*allow_exceptions=*/false))) {
        return who + " met its target " + config_.sweep.stop_when->ToString() + " (trial " +
               std::to_string(r.trial) +
               "), so it would end at once; set a new target in a new sweep: sweep run CONFIG "
               "--from " +
               rec.name;
      }
    }
  }
  return std::string();
}

// Resume with keep_checkpoints: the ended trials that keep theirs are the best of those whose
// checkpoints the store still names (the best N do not depend on the order). An ended trial
// whose checkpoint the store no longer names lost it just before the coordinator stopped: its
// file goes now.
Status Coordinator::RebuildKeptCheckpoints() {
  if (!keeper_) return Status::Ok();
  SWEEP_ASSIGN_OR_RETURN(auto trials, store_.Trials(sweep_id_, store::TrialQuery{}));
  for (const auto& t : trials) {
    if (!store::IsTerminal(t.status)) continue;
    if (t.checkpoint.empty()) {
      paths_->Doom(t.number);
    } else {
      SWEEP_RETURN_IF_ERROR(KeepCheckpoints(t.number, t.status, t.objective));
    }
  }
  return Status::Ok();
}

// Resume: an interrupted trial whose stored reports show it had finished (it met stop_when, or
// reached max_resource) ends completed with its stored metrics, not run again.
Status Coordinator::CompleteOnResume(const store::TrialRecord& t, const std::string& note) {
  store::TrialRecord done = t;
  done.status = TrialStatus::kCompleted;
  done.ended_s = start_s_;
  done.error = note;
  SWEEP_RETURN_IF_ERROR(store_.FinishTrial(sweep_id_, done));
  SWEEP_RETURN_IF_ERROR(KeepCheckpoints(t.number, TrialStatus::kCompleted, t.objective));
  if (t.objective) {
    source_->NoteEnd(t.number, *t.objective,
                     json::parse(t.params_json, nullptr, /*allow_exceptions=*/false));
  }
  return store_.AddEvent(sweep_id_, t.number, "interrupted", "completed", note, start_s_);
}

}  // namespace sweep
