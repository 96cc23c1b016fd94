// The coordinator loop. One turn: place trials while slots are free (trials to run again
// first, then new ones), take the runners' events, store them, commit before waiting, refresh
// the status line. What it keeps in memory (counts, best so far) is updated incrementally, so a
// turn costs the same at trial 10 and at trial 10,000; on resume it is rebuilt from the store.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "coordinator_loop.h"
#include "output.h"

namespace sweep {

using nlohmann::json;
using store::TrialStatus;

namespace {
// Longest time a busy loop keeps writes uncommitted. A crash loses at most this much of the
// record; the trials involved are still RUNNING in the store and are rerun on resume.
constexpr double kCommitIntervalS = 0.05;
}  // namespace

std::string SweepKey(const std::string& name, double created_s) {
  char created[32];
  std::snprintf(created, sizeof created, "%.6f", created_s);
  return name + "@" + created;
}

Coordinator::Coordinator(store::Store& store, const RunOptions& options,
                         const CoordinatorSeams& seams)
    : store_(store),
      options_(options),
      seams_(seams),
      clock_(seams.clock != nullptr ? seams.clock : &system_clock_),
      progress_(options.log, options.live_status) {
  store_.WaitForLocks(SweepLockWait(options_, store_.path()));
}

Result<RunSummary> Coordinator::Start(const SweepConfig& config) {
  config_ = config;
  // Read before the new sweep is recorded or its folders made, so that a mistyped name leaves
  // nothing behind.
  std::optional<CarryPlan> carry;
  if (!options_.from.empty()) {
    SWEEP_ASSIGN_OR_RETURN(carry, PlanCarryOver(store_, config_, options_.from));
  } else {
    SWEEP_RETURN_IF_ERROR(CheckTpeStartup(config_, 0));
  }
  SWEEP_RETURN_IF_ERROR(Prepare());
  store::NewSweep ns;
  ns.name = config_.sweep.name;
  ns.config_text = config_.text;
  // Absolute, so that a resume from another folder finds what the config's relative paths mean.
  std::error_code abs_ec;
  std::filesystem::path config_abs = std::filesystem::absolute(config_.path, abs_ec);
  ns.config_path = abs_ec ? config_.path : config_abs.lexically_normal().string();
  ns.metric = config_.sweep.metric;
  ns.maximize = config_.sweep.maximize;
  ns.seed = static_cast<int64_t>(config_.sweep.seed);
  start_s_ = Now();
  ns.created_s = start_s_;
  sweep_key_ = SweepKey(config_.sweep.name, ns.created_s);
  // The owner goes in with the sweep's row, and the lock is taken before the row commits: a
  // reader sees the sweep only with an owner that holds its lock (or held it and died).
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

Status Coordinator::Prepare() {
  kind_ = MakeTrialKindRules(config_);
  SWEEP_ASSIGN_OR_RETURN(servers_, Servers::Create());
  SWEEP_ASSIGN_OR_RETURN(runners_, seams_.runners ? seams_.runners(config_, options_)
                                                  : DefaultRunners(config_, options_));
  // This machine's server joins at once (agents later, as they connect).
  SWEEP_RETURN_IF_ERROR(runners_.Poll(0, &events_));
  SWEEP_RETURN_IF_ERROR(TakeEvents(Now()));
  SWEEP_RETURN_IF_ERROR(
      FitsHere(config_, options_, servers_->packer().largest_server(), servers_->packer().gpu()));
  if (options_.local_slots && options_.log != nullptr) kind_->WarnHere(*options_.log);
  if (runners_.may_add_servers() && options_.log != nullptr) kind_->WarnRemote(*options_.log);
  if (config_.trial.gpu_share > 1 && !servers_->packer().gpu() && options_.log != nullptr) {
    *options_.log << "sweep: trial.gpu_share = " << config_.trial.gpu_share
                  << " applies to GPUs; this machine offers CPU slots, one trial each\n";
  }
  std::vector<double> rungs;
  if (config_.early_stopping.algorithm != search::EarlyStopping::kNone) {
    SWEEP_ASSIGN_OR_RETURN(scheduler_, search::MakeScheduler(config_.early_stopping));
    rungs = scheduler_->RungResources();
    // Where the scheduler can decide, workers wait for its verdict: rungs for ASHA and
    // Hyperband, every report for the median rule.
    decisions_.decide_every_report =
        config_.early_stopping.algorithm == search::EarlyStopping::kMedian;
    if (!decisions_.decide_every_report) {
      decisions_.decision_points = rungs;
      // And max_resource, where a longer survivor is stopped: it waits there for the verdict,
      // so it stops at the cap, not an epoch past it.
      decisions_.decision_points.push_back(config_.early_stopping.max_resource);
    }
    decisions_.decide_by_epoch = config_.trial.kind != TrialKind::kFunction;
  }
  SWEEP_ASSIGN_OR_RETURN(
      source_, TrialSource::Make(
                   config_, [this](const json& params) { return kind_->Work(params); }, rungs));
  source_->SetCarried(carried_, sample_shift_);
  // Every report is a decision point of a checkpointing trial, whose worker writes the epoch's
  // checkpoint only once told to go on: by then the report is committed (HandleReport), so a
  // checkpoint is not ahead of the store, and a rerun from it has reported all it skips. And
  // with stop_when, a trial stops at the report that met the target, not one later.
  if (kind_->checkpoints() || config_.sweep.stop_when) decisions_.decide_every_report = true;
  // The default folders are beside the store's file itself: one store, one set of folders,
  // however --db names it (through a link, or another spelling), as its lock is.
  SWEEP_ASSIGN_OR_RETURN(paths_, TrialPaths::Make(config_, StoreFile(store_.path())));
  if (kind_->checkpoints() && config_.trial.keep_checkpoints) {
    keeper_.emplace(*config_.trial.keep_checkpoints, config_.sweep.maximize);
  }
  // Folders an earlier run moved aside and had not deleted when it ended.
  if (kind_->folders()) reaper_.Adopt(paths_->trials_dir());
  return Status::Ok();
}

// Servers joining, stopping and leaving; trials' reports and ends.
Status Coordinator::TakeEvents(double now) {
  for (RunnerEvent& e : events_) {
    switch (e.kind) {
      case RunnerEvent::Kind::kTrial:
        SWEEP_RETURN_IF_ERROR(Handle(e.trial, now, e.server_lost, e.server_stopped));
        break;
      case RunnerEvent::Kind::kServerJoined:
        SWEEP_RETURN_IF_ERROR(servers_->Join(e.runner, e.server, std::move(e.offer),
                                             config_.trial.slots, options_.log));
        break;
      case RunnerEvent::Kind::kServerDraining:
        servers_->Draining(e.runner, e.server);
        break;
      case RunnerEvent::Kind::kServerLost:
        servers_->Lost(e.runner, e.server);
        break;
    }
  }
  events_.clear();
  return Status::Ok();
}

void Coordinator::TrackSlots(double now) {
  const bool none = servers_->packer().largest_server() == 0;
  if (none && !slotless_since_) {
    slotless_since_ = now;
  } else if (!none && slotless_since_) {
    slotless_s_ += now - *slotless_since_;
    slotless_since_.reset();
  }
}

Result<RunSummary> Coordinator::Loop() {
  for (;;) {
    const double now = Now();
    TrackSlots(now);
    CheckStops(now);
    if (stopping_ && !running_.empty() && options_.interrupt_again != nullptr &&
        options_.interrupt_again->load()) {
      SWEEP_RETURN_IF_ERROR(StopAtOnce(now));
    }
    if (stopping_) {
      for (auto& [number, t] : running_) {
        if (!t.stop_sent) (void)StopTrial(number, t);
      }
    }
    if (!stopping_) SWEEP_RETURN_IF_ERROR(PlaceTrials(now));
    // (Trouble met while placing, the sweep stops interrupted at the loop's top first.)
    if (running_.empty() && (stopping_ || !WorkLeft() || !MayPlaceLater()) &&
        (stopping_ || machine_trouble_.empty())) {
      break;
    }
    // Take what has arrived; commit before waiting, so readers see everything up to the moment
    // the loop goes idle, and at least every kCommitIntervalS while busy.
    SWEEP_RETURN_IF_ERROR(runners_.Poll(0, &events_));
    double t = Now();
    if (events_.empty() || t - last_commit_s_ >= kCommitIntervalS) {
      SWEEP_RETURN_IF_ERROR(CommitNow(t));
    }
    if (events_.empty()) {
      SWEEP_RETURN_IF_ERROR(runners_.Poll(200, &events_));
      t = Now();
    }
    SWEEP_RETURN_IF_ERROR(TakeEvents(t));
    ShowProgress(t, false);
  }
  return End();
}

// Whether the sweep stops now, and why: an interrupt, stop_when met, the machine's trouble,
// trials that cannot succeed as configured, the time budget.
void Coordinator::CheckStops(double now) {
  if (stopping_) return;
  if (options_.interrupt != nullptr && options_.interrupt->load()) {
    stopping_ = interrupted_ = true;
    stop_reason_ = "interrupted by the user";
    progress_.Interrupted(running_.size(), kind_->HowTrialsStop());
  } else if (!target_trials_.empty()) {
    stopping_ = true;  // stop_reason_ says which trial reached it
  } else if (!machine_trouble_.empty()) {
    stopping_ = interrupted_ = true;
    stop_reason_ = machine_trouble_;
    progress_.Stopping(machine_trouble_, running_.size());
  } else if (const std::string& hopeless =
                 !metric_missing_.empty() ? metric_missing_ : failing_start_;
             !hopeless.empty()) {
    // Trials that cannot succeed as configured: the sweep stops, resumable once fixed.
    stopping_ = interrupted_ = true;
    stop_reason_ = hopeless;
    progress_.Stopping(hopeless, 0);
  } else if (config_.sweep.time_budget_s && ActiveSeconds(now) >= *config_.sweep.time_budget_s) {
    stopping_ = true;
    // A budget under a minute in seconds ("0.4 s", which mm:ss would show as 00:00).
    const double budget = *config_.sweep.time_budget_s;
    stop_reason_ = "time budget of " +
                   (budget < 60 ? FormatMetric(budget) + " s" : FormatElapsed(budget)) + " spent";
  }
}

// Places trials while there is room: those to run again first, then new ones.
Status Coordinator::PlaceTrials(double now) {
  const int max_concurrent =
      config_.sweep.max_concurrent > 0 ? config_.sweep.max_concurrent : 1 << 30;
  executor::Packer& packer = servers_->packer();
  while (static_cast<int>(running_.size()) < max_concurrent) {
    const bool fresh = queue_.empty();
    if (fresh && !source_->Left()) break;
    executor::Request request;
    request.trial = fresh ? source_->next_number() : queue_.front().number;
    request.gpus = config_.trial.slots;
    request.share = packer.gpu() ? config_.trial.gpu_share : 1;
    std::optional<executor::Placement> got = packer.Place(request);
    if (!got) break;
    if (!fresh) {
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      SWEEP_RETURN_IF_ERROR(StartTrial(p, std::move(*got), now, /*rerun=*/true));
      continue;
    }
    std::optional<NewTrial> next = source_->Next([this] {
      std::vector<NewTrial> pending;
      for (const auto& [n, t] : running_) pending.push_back({n, t.params});
      for (const Pending& p : queue_) pending.push_back({p.number, p.params});
      return pending;
    });
    if (!next) {
      (void)packer.Release(*got);
      break;
    }
    got->trial = next->number;
    SWEEP_RETURN_IF_ERROR(
        StartTrial(Pending{next->number, std::move(next->params)}, std::move(*got), now, false));
  }
  return Status::Ok();
}

Result<RunSummary> Coordinator::End() {
  const double end = Now();
  // The target was met, whatever else stopped the sweep meanwhile: it has what it sought, and a
  // resume would end it at once.
  if (!target_trials_.empty()) interrupted_ = false;
  store::SweepStatus final_status =
      interrupted_ ? store::SweepStatus::kInterrupted : store::SweepStatus::kCompleted;
  SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, std::nullopt, "running",
                                        store::ToString(final_status), stop_reason_, end));
  SWEEP_RETURN_IF_ERROR(CommitNow(end));
  SWEEP_RETURN_IF_ERROR(store_.SetSweepStatus(
      sweep_id_, final_status,
      final_status == store::SweepStatus::kCompleted ? std::optional<double>(end) : std::nullopt));
  // Written over in place while the sweep ran (a backup copied onto it), the file would be
  // damaged with nothing said, and the sweep's end claim results it no longer holds.
  SWEEP_RETURN_IF_ERROR(store_.CheckFile());
  ShowProgress(end, true);
  // A completed sweep lets its agents go; an interrupted one keeps them for its resume.
  runners_.Shutdown(/*sweep_over=*/!interrupted_, 1000);
  // An interrupted sweep ends now; what is left to delete goes on the next run or resume.
  if (!interrupted_ && reaper_.Busy()) {
    if (options_.log != nullptr) {
      *options_.log << "sweep: deleting what an earlier sweep of this name left in "
                    << paths_->trials_dir() << " (Ctrl-C leaves it for the next run)\n";
    }
    reaper_.Drain(options_.interrupt);
  }
  RunSummary summary;
  summary.sweep_id = sweep_id_;
  summary.counts = counts_;
  summary.interrupted = interrupted_;
  summary.elapsed_s = end - start_s_;
  summary.trials_started = started_;
  summary.listen_port = runners_.port();
  return summary;
}

Status Coordinator::StartTrial(const Pending& p, executor::Placement where, double now,
                               bool rerun) {
  ++started_;
  RunningTrial t;
  t.params = p.params;
  t.retries = p.retries;
  t.agent_losses = p.agent_losses;
  if (scheduler_ != nullptr) t.length = kind_->Length(t.params);
  t.where = std::move(where);
  const ServerInfo& server = servers_->at(t.where.server);
  t.placement = servers_->Describe(t.where);
  t.started_s = now;
  t.first_run = !rerun || p.never_ran;
  t.prune_reason = p.finish_pruned;
  t.at_max_resource = p.finish_at_cap;
  t.checkpoint = paths_->RunCheckpoint(p.number, server);
  executor::TrialTask task = MakeTask(p, t, server);
  if (rerun) {
    SWEEP_RETURN_IF_ERROR(RecordRerun(p, t, task, now));
  } else {
    SWEEP_RETURN_IF_ERROR(RecordFirstRun(p, t, now));
  }
  ++counts_.running;
  StartFailure why = StartFailure::kRefused;
  Status s = runners_.at(server.runner).Start(server.key, task, &why);
  if (!s.ok()) return StartFailed(p, t, server, std::move(s), why, now);
  running_.emplace(p.number, std::move(t));
  return Status::Ok();
}

// What a rerun reported before stands until it reports again: a trial whose checkpoint holds
// its last epoch trains nothing more, and ends with these (and with that epoch's report, which
// it reports again from the checkpoint if the store lost it).
Status Coordinator::RecordRerun(const Pending& p, RunningTrial& t, executor::TrialTask& task,
                                double now) {
  SWEEP_ASSIGN_OR_RETURN(auto before, store_.Reports(sweep_id_, p.number));
  for (const auto& r : before) {
    json m = json::parse(r.metrics_json, nullptr, /*allow_exceptions=*/false);
    if (m.is_object()) {
      for (auto& [k, v] : m.items()) t.metrics[k] = v;
      auto metric = m.find(config_.sweep.metric);
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
  return Status::Ok();
}

Status Coordinator::RecordFirstRun(const Pending& p, const RunningTrial& t, double now) {
  store::TrialRecord rec;
  rec.number = p.number;
  rec.status = TrialStatus::kRunning;
  rec.params_json = p.params.dump();
  rec.placement = t.placement;
  rec.started_s = now;
  rec.checkpoint = t.checkpoint;
  // Its first run: a file at its path is an earlier sweep's (a store made anew). The worker
  // deletes it too (on an agent's own disk), but a coordinator killed before that would resume
  // this trial from it.
  if (const std::string mine = paths_->StoredCheckpoint(p.number); !mine.empty()) {
    std::error_code ec;
    std::filesystem::remove(mine, ec);
  }
  if (kind_->folders()) {
    // So is its folder, with its program's own checkpoints (the worker clears it too, on an
    // agent's disk). Moved aside at once and deleted off this loop: it may hold gigabytes. One
    // that cannot be cleared is the worker's to report.
    const std::string dir = paths_->TrialDir(p.number);
    (void)reaper_.Discard(dir, nullptr);
    rec.stdout_log = dir + "/stdout.log";
    rec.stderr_log = dir + "/stderr.log";
  }
  // With TPE, which way it was proposed (the first trials are random search's).
  const std::string by = source_->TakeProposer(p.number);
  rec.proposed_by = by;
  SWEEP_RETURN_IF_ERROR(store_.InsertTrial(sweep_id_, rec));
  return store_.AddEvent(sweep_id_, p.number, "", "running",
                         by.empty() ? t.placement : t.placement + std::string(kProposedBy) + by,
                         now);
}

executor::TrialTask Coordinator::MakeTask(const Pending& p, const RunningTrial& t,
                                          const ServerInfo& server) {
  executor::TrialTask task;
  task.number = p.number;
  task.kind = config_.trial.kind;
  task.params = p.params;
  task.settings =
      kind_->Settings({paths_->TrialDir(p.number),
                       paths_->WorkerCheckpoint(p.number, server.this_machine), sweep_key_});
  task.seed = TrialSeed(config_.sweep.seed, p.number);
  task.heartbeat_timeout_s = config_.trial.heartbeat_timeout_s;  // an agent's workers too
  task.fresh = t.first_run;
  task.replay_checkpoint_report = kind_->checkpoints() && !task.fresh;
  if (!p.finish_pruned.empty() || p.finish_at_cap) {
    task.stop_at_epoch = static_cast<int>(std::ceil(p.finish_at));
  }
  task.decision_points = decisions_.decision_points;
  task.decide_every_report = decisions_.decide_every_report;
  task.decide_by_epoch = decisions_.decide_by_epoch;
  const bool gpu = server.slots[t.where.gpus[0]].gpu;
  task.threads = gpu ? 1 : static_cast<int>(t.where.gpus.size());
  if (gpu) {
    for (int i : t.where.gpus) task.gpus.push_back(server.slots[i].device);
  }
  return task;
}

Status Coordinator::StartFailed(const Pending& p, RunningTrial& t, const ServerInfo& server,
                                Status s, StartFailure why, double now) {
  executor::Packer& packer = servers_->packer();
  (void)packer.Release(t.where);
  --counts_.running;
  // The server could not take it: fail this trial, keep the sweep going.
  if (why == StartFailure::kRefused) {
    return FinishTrial(p.number, t, TrialStatus::kFailed, s.message(), now);
  }
  // Nothing ran, and not for the trial's sake: it runs again elsewhere, without using up a
  // retry, and nothing more goes to this server.
  Pending again = p;
  again.never_ran = t.first_run;
  queue_.push_front(std::move(again));
  if (why == StartFailure::kServerGone) {
    servers_->Forget(t.where.server);  // its loss is still on the way here
    return FinishTrial(p.number, t, TrialStatus::kInterrupted, s.message() + "; running it again",
                       now);
  }
  // No worker process could be started there: the machine's trouble, and the next trials would
  // meet it too. As for a checkpoint that cannot be written, the sweep stops when no other
  // server can take the trial, so that `resume` runs it once that is put right.
  const std::string trouble = server.name + ": " + s.message();
  servers_->Retire(t.where.server, trouble, options_.log, options_.live_status);
  if (packer.largest_server() < config_.trial.slots && machine_trouble_.empty()) {
    machine_trouble_ = trouble;
  }
  return FinishTrial(p.number, t, TrialStatus::kInterrupted, s.message(), now);
}

Status Coordinator::StopTrial(int64_t number, RunningTrial& t) {
  t.stop_sent = true;
  const ServerInfo* server = servers_->Find(t.where.server);
  if (server == nullptr) return Status::Ok();  // its server is gone; its end is on the way
  return runners_.at(server->runner).Stop(server->key, number);
}

// Tells the worker of `number`, waiting at a decision point, to go on.
void Coordinator::ContinueTrial(int64_t number, const RunningTrial& t) {
  const ServerInfo* server = servers_->Find(t.where.server);
  if (server != nullptr) (void)runners_.at(server->runner).Continue(server->key, number);
}

// A second interrupt: the runners end their trials now where they can (no grace), and each
// running trial ends as its stop would have ended it (interrupted, unless it was already pruned
// or finished); resume continues the interrupted ones from their last checkpoints.
Status Coordinator::StopAtOnce(double now) {
  runners_.EndTrialsNow();
  while (!running_.empty()) {
    auto it = running_.begin();
    const int64_t number = it->first;
    RunningTrial t = std::move(it->second);
    running_.erase(it);
    (void)servers_->packer().Release(t.where);
    --counts_.running;
    progressed_.erase(number);
    const TrialEnd end = StoppedEnd(FactsOf(number, t), "stopped at once by a second interrupt");
    SWEEP_RETURN_IF_ERROR(FinishTrial(number, t, end.status, end.note, now));
  }
  return Status::Ok();
}

Status Coordinator::CommitNow(double now) {
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
  SWEEP_RETURN_IF_ERROR(store_.SetSweepActive(sweep_id_, ActiveSeconds(now), now));
  SWEEP_RETURN_IF_ERROR(store_.Commit());
  last_commit_s_ = now;
  paths_->DeleteDoomed(options_.log);
  return Status::Ok();
}

// Whether waiting can ever let a trial start: a server big enough is here, or agents may still
// join.
bool Coordinator::MayPlaceLater() const {
  return runners_.may_add_servers() || config_.trial.slots <= servers_->packer().largest_server();
}

// The flags a resume needs to bring this run's agents back (stored with the sweep's owner).
std::string Coordinator::AgentFlags() const {
  if (runners_.port() == 0) return "";
  return sweep::AgentFlags(options_.listen_host, runners_.port(), options_.token_file,
                           !options_.local_slots);
}

void Coordinator::Announce(const std::string& extra) {
  progress_.Announce(config_, servers_->packer(), store_.path(), extra);
}

void Coordinator::ShowProgress(double now, bool final) {
  Progress::Line line;
  line.counts = counts_;
  if (!config_.sweep.unbounded_trials) line.limit = source_->TrialLimit();
  line.best = best_;
  line.best_trial = best_trial_;
  line.active_s = ActiveSeconds(now);
  progress_.Show(config_.sweep.name, config_.sweep.metric, line, now, final);
}

}  // namespace sweep
