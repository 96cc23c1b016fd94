// A trial's end: its status from the rules in trial_outcome.h, what runs again, the store's
// row, the kept checkpoints, the counts and the best so far; and the two breakers that stop a
// sweep whose trials cannot succeed (max_initial_failures, a metric never reported).
#include <algorithm>
#include <filesystem>

#include "coordinator_loop.h"
#include "executor/command.h"

namespace sweep {

using nlohmann::json;
using store::TrialStatus;

// server_lost: the trial's server went away; server_stopped: it said so first (it was stopped:
// a batch system's preemption, maintenance), which the trial cannot have caused.
Status Coordinator::Handle(executor::WorkerEvent& ev, double now, bool server_lost,
                           bool server_stopped) {
  // When it happened, not when this loop turn came to it: a turn held up by a locked store
  // takes many events at once, and some arrived after the turn's time was taken (never later
  // than now, though: a worker's clock is not this one's to push ahead).
  if (ev.time_s > 0) now = std::min(ev.time_s, Now());
  auto it = running_.find(ev.trial);
  if (it == running_.end()) return Status::Ok();  // a late message for a finished trial
  if (ev.type == executor::WorkerEvent::Type::kReport) return HandleReport(ev, it->second, now);
  return HandleEnd(ev, it->second, now, server_lost, server_stopped);
}

TrialFacts Coordinator::FactsOf(int64_t number, const RunningTrial& t) const {
  TrialFacts f;
  f.prune_reason = t.prune_reason;
  f.at_max_resource = t.at_max_resource;
  // A command (a trial of unknown length) that reported the sweep's metric at max_resource, in
  // this run or an earlier one: its result is there, whatever ends it after.
  f.reached_cap = !t.length && metric_at_cap_.contains(number);
  f.met_target = target_trials_.contains(number);
  f.retries = t.retries;
  f.agent_losses = t.agent_losses;
  f.first_run = t.first_run;
  f.stopping = stopping_;
  // Ctrl-C or SIGTERM has arrived, perhaps since this loop turn began.
  f.signalled = options_.interrupt != nullptr && options_.interrupt->load();
  f.stop_reason = stop_reason_;
  f.max_retries = config_.trial.max_retries;
  if (scheduler_ != nullptr) f.cap_note = CapNote();
  if (config_.sweep.stop_when) f.target_note = TargetNote();
  return f;
}

Status Coordinator::HandleEnd(executor::WorkerEvent& ev, RunningTrial& t, double now,
                              bool server_lost, bool server_stopped) {
  for (auto& [k, v] : ev.metrics.items()) t.metrics[k] = v;
  NoteMetric(t, ev.metrics);
  if (ev.metric_not_number) t.metric_not_number = true;
  RunEnd run{ev.outcome, ev.error, ev.worker_lost, ev.never_started, server_lost, server_stopped};
  TrialEnd end = DecideEnd(FactsOf(ev.trial, t), run);
  if (end.store_agent_losses) {
    SWEEP_RETURN_IF_ERROR(store_.SetTrialAgentLosses(sweep_id_, ev.trial, *end.store_agent_losses));
  }
  if (end.store_retries) {
    SWEEP_RETURN_IF_ERROR(store_.SetTrialRetries(sweep_id_, ev.trial, *end.store_retries));
  }
  if (ev.info.is_object() && !ev.info.empty()) {
    SWEEP_RETURN_IF_ERROR(store_.SetTrialInfo(
        sweep_id_, ev.trial, ev.info.dump(-1, ' ', false, json::error_handler_t::replace)));
  }
  if (end.then == TrialEnd::Then::kServerTrouble && machine_trouble_.empty()) {
    ServerTrouble(ev.trial, t, end, ev.error);
  }
  if (end.then == TrialEnd::Then::kRunAgain) {
    queue_.push_front({ev.trial, t.params, end.retries, end.agent_losses, end.never_ran});
  }
  (void)servers_->packer().Release(t.where);
  RunningTrial done = std::move(t);
  running_.erase(ev.trial);
  progressed_.erase(ev.trial);  // its final row is written below, not a progress update
  --counts_.running;
  return FinishTrial(ev.trial, done, end.status, end.note, now);
}

// The machine stopped a trial (its checkpoint could not be written: disk full, a quota, a
// read-only file system), not the trial, and the trials after it there would meet the same.
// Its server takes no more trials; while other servers can hold the sweep's trials (or agents
// may still join) it runs again on one of them, and otherwise the sweep stops, so that `resume`
// runs it again once that is put right.
void Coordinator::ServerTrouble(int64_t number, const RunningTrial& t, TrialEnd& end,
                                const std::string& error) {
  const std::string trouble = "trial " + std::to_string(number) + ": " + error;
  servers_->Retire(t.where.server, trouble, options_.log, options_.live_status);
  const executor::Packer& packer = servers_->packer();
  if (packer.largest_server() >= config_.trial.slots || runners_.may_add_servers()) {
    end.then = TrialEnd::Then::kRunAgain;
    end.note += "; running it again on another server";
    if (packer.largest_server() < config_.trial.slots && options_.log != nullptr &&
        servers_->TakeNoServerNotice()) {
      *options_.log << "sweep: no server left that can run a trial; waiting for an agent "
                       "(Ctrl-C stops the sweep)\n";
    }
  } else {
    machine_trouble_ = trouble;
  }
}

Status Coordinator::FinishTrial(int64_t number, const RunningTrial& t, TrialStatus status,
                                std::string error, double now) {
  if (MetricNeverReported(number, t, status, error)) {
    status = TrialStatus::kInterrupted;
    error = "to run again: it never reported the sweep's metric '" + config_.sweep.metric + "'" +
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
    source_->NoteEnd(number, *rec.objective, t.params);
  }
  rec.checkpoint = t.checkpoint;  // this run's: a rerun may have run elsewhere
  SWEEP_RETURN_IF_ERROR(store_.FinishTrial(sweep_id_, rec));
  SWEEP_RETURN_IF_ERROR(
      store_.AddEvent(sweep_id_, number, "running", store::ToString(status), error, now));
  SWEEP_RETURN_IF_ERROR(KeepCheckpoints(number, status, rec.objective));
  // A trial that ended before its first checkpoint (it failed at once, diverged in its first
  // epoch) has none: the store stops naming a file that never was. (An agent's own disk is not
  // seen from here.)
  const ServerInfo* server = servers_->Find(t.where.server);
  if (store::IsTerminal(status) && server != nullptr && server->this_machine) {
    const std::string path = paths_->StoredCheckpoint(number);
    std::error_code ec;
    if (!path.empty() && !std::filesystem::exists(path, ec) && !ec) {
      SWEEP_RETURN_IF_ERROR(store_.DropTrialCheckpoint(sweep_id_, number));
    }
  }
  CountEnd(number, status, rec.objective);
  if (status == TrialStatus::kFailed) SWEEP_RETURN_IF_ERROR(NoteFailure(number, t, error, now));
  progress_.TrialEnded(number, status, config_.sweep.metric, rec.objective, now - t.started_s,
                       error);
  return Status::Ok();
}

void Coordinator::CountEnd(int64_t number, TrialStatus status, std::optional<double> objective) {
  switch (status) {
    case TrialStatus::kCompleted:
      ++counts_.completed;
      if (objective &&
          (!best_ || (config_.sweep.maximize ? *objective > *best_ : *objective < *best_) ||
           (*objective == *best_ && number < best_trial_))) {  // ties: as `best` ranks them
        best_ = objective;
        best_trial_ = number;
      }
      break;
    case TrialStatus::kFailed:
      ++counts_.failed;
      break;
    case TrialStatus::kPruned:
      ++counts_.pruned;
      break;
    default:
      ++counts_.interrupted;
      break;
  }
}

// A trial failed before it reported anything (a program that cannot run, a setting that breaks
// at once), in its first run: one run again (requeued when such failures stopped the sweep
// before) has had its chance, and counting it again would stop every resume of a sweep whose
// first trials fail for their parameters (a region that runs out of memory). Once the sweep
// stops for them, each such failure is requeued as it comes.
Status Coordinator::NoteFailure(int64_t number, const RunningTrial& t, const std::string& error,
                                double now) {
  if (!t.metrics.empty() || !t.first_run) return Status::Ok();
  ++failed_unreported_;
  if (counts_.completed + counts_.pruned == 0) initial_failures_.push_back(number);
  if (failing_start_.empty()) NoteInitialFailure(number, t, error);
  if (!failing_start_.empty()) SWEEP_RETURN_IF_ERROR(RequeueInitialFailures(now));
  return Status::Ok();
}

// [trial] max_initial_failures: the sweep stops when that many trials of this run failed before
// reporting anything and none of the sweep's completed or was pruned, unless a trial still
// running may yet succeed: one that has reported, or that started before the one that just
// failed and outlived it (fast failures of a bad region of the space come before slow
// successes; a broken program fails every trial in the order they started).
void Coordinator::NoteInitialFailure(int64_t number, const RunningTrial& failed,
                                     const std::string& error) {
  const int limit = options_.max_initial_failures.value_or(config_.trial.max_initial_failures);
  if (limit <= 0 || !failing_start_.empty() || counts_.completed + counts_.pruned > 0 ||
      failed_unreported_ < limit) {
    return;
  }
  for (const auto& [other, r] : running_) {
    if (other != number && (!r.metrics.empty() || r.started_s < failed.started_s)) return;
  }
  std::string one_line = error.substr(0, 400);
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  // Counted in this run, new trials only (see NoteFailure): the words say so on a resume too.
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
Status Coordinator::RequeueInitialFailures(double now) {
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

// A trial that ran to its end reporting other metrics but never the sweep's, while no trial of
// the sweep has: a misspelt name (in the config or the program) that would fail every trial
// and leave early stopping nothing to rank. The sweep stops, interrupted, at the first; it and
// any like it end interrupted, to run again on resume once the program is fixed.
bool Coordinator::MetricNeverReported(int64_t number, const RunningTrial& t, TrialStatus status,
                                      const std::string& error) {
  if (metric_seen_ || t.metric_reported || (t.metrics.empty() && !t.metric_not_number) ||
      (status != TrialStatus::kCompleted && status != TrialStatus::kFailed)) {
    return false;
  }
  if (!metric_missing_.empty()) return true;
  const std::string& metric = config_.sweep.metric;
  const std::string ended =
      "trial " + std::to_string(number) +
      (status == TrialStatus::kFailed && error.find("never reported") == std::string::npos &&
               error.find("never a number") == std::string::npos
           ? " failed (" + executor::Abbreviate(error, 200) + ")"
           : " ended") +
      " without reporting the sweep's metric '" + metric + "'";
  // The name is right and only its type is wrong: the config is not at fault.
  if (t.metric_not_number) {
    metric_missing_ = ended +
                      " as a number (it came only as text, a bool, null or a list): report it "
                      "as a JSON number, e.g. \"" +
                      metric + "\": 0.9, and resume (this trial runs again)";
    return true;
  }
  // The names it reported besides the metric.
  std::vector<std::string> others;
  for (const auto& [k, v] : t.metrics.items()) {
    if (k != metric) others.push_back(k);
  }
  std::string list;
  for (const std::string& n : others) list += (list.empty() ? "'" : ", '") + n + "'";
  std::string hint = DidYouMean(metric, others);
  // "val_accuracy" for "val_acc": too far apart to be a typo, but one begins the other.
  for (size_t i = 0; hint.empty() && i < others.size(); ++i) {
    const std::string& n = others[i];
    if (std::min(n.size(), metric.size()) >= 3 &&
        (n.starts_with(metric) || metric.starts_with(n))) {
      hint = n;
    }
  }
  metric_missing_ =
      ended + "; it reported " + list +
      (hint.empty() ? "" : " (did you mean metric = \"" + hint + "\"?)") +
      ". A wrong [sweep] metric in the config: start the fixed config under a new name "
      "(--name). A wrong name in the program's reports: fix it and resume (this trial runs "
      "again)";
  return true;
}

// keep_checkpoints: trial `number` ended with `status`. The checkpoints no longer kept (its own,
// or a trial's it pushed out of the best) are forgotten in the store now and their files deleted
// once that commits: a crash in between leaves a file that resume deletes, never a row that
// names a deleted file.
Status Coordinator::KeepCheckpoints(int64_t number, TrialStatus status,
                                    std::optional<double> objective) {
  if (!keeper_ || !store::IsTerminal(status)) return Status::Ok();
  for (int64_t n : keeper_->Ended(number, status == TrialStatus::kCompleted, objective)) {
    SWEEP_RETURN_IF_ERROR(store_.DropTrialCheckpoint(sweep_id_, n));
    paths_->Doom(n);
  }
  return Status::Ok();
}

}  // namespace sweep
