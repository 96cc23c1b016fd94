// The coordinator loop. One turn: place new trials while slots are free, wait briefly for worker
// messages, store them, commit once, refresh the status line. Everything it keeps in memory
// (counts, best so far) is updated incrementally so a turn costs the same at trial 10 and 10,000.
#include "sweep/coordinator.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "executor/local_executor.h"
#include "executor/slots.h"
#include "search/space.h"

namespace sweep {

using nlohmann::json;
using store::TrialStatus;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint64_t TrialSeed(uint64_t sweep_seed, int64_t number) {
  uint64_t z = sweep_seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(number) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFFULL;  // fits a signed 64-bit column
}

namespace {

// Longest time a busy loop keeps writes uncommitted. A crash loses at most this much of the
// record; the trials involved are still RUNNING in the store and are rerun on resume.
constexpr double kCommitIntervalS = 0.05;

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

struct RunningTrial {
  std::vector<int> slots;
  std::string placement;
  double started_s = 0;
  json metrics = json::object();  // last value of each metric
  double epochs = 0;
  bool stop_sent = false;
};

class Coordinator {
 public:
  Coordinator(const SweepConfig& config, store::Store& store, const RunOptions& options)
      : config_(config),
        store_(store),
        options_(options),
        slots_(executor::DiscoverLocalSlots(config.cpu_slots)),
        executor_(options.worker_command, options.worker_env) {}

  Result<RunSummary> Run() {
    if (config_.gpus > static_cast<int>(slots_.slots().size())) {
      return Status::InvalidArgument(
          config_.path + ": trial.gpus = " + std::to_string(config_.gpus) + " but this machine " +
          "offers " + std::to_string(slots_.slots().size()) + " slot(s)");
    }
    std::unique_ptr<search::Sampler> sampler;
    if (config_.algorithm == "grid") {
      SWEEP_ASSIGN_OR_RETURN(sampler, search::MakeGridSampler(config_.space));
    } else {
      sampler = search::MakeRandomSampler(config_.space, config_.seed);
    }

    store::NewSweep ns;
    ns.name = config_.name;
    ns.config_text = config_.text;
    ns.config_path = config_.path;
    ns.metric = config_.metric;
    ns.maximize = config_.maximize;
    ns.seed = static_cast<int64_t>(config_.seed);
    start_s_ = NowSeconds();
    ns.created_s = start_s_;
    SWEEP_ASSIGN_OR_RETURN(sweep_id_, store_.CreateSweep(ns));
    SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, std::nullopt, "", "running", "", start_s_));
    Announce();

    const int max_concurrent = config_.max_concurrent > 0 ? config_.max_concurrent : 1 << 30;
    bool exhausted = false;
    bool stopping = false;
    std::string stop_reason;
    std::vector<executor::WorkerEvent> events;
    for (;;) {
      const double now = NowSeconds();
      if (!stopping && options_.interrupt != nullptr && options_.interrupt->load()) {
        stopping = true;
        interrupted_ = true;
        stop_reason = "interrupted by the user";
      }
      if (!stopping && config_.time_budget_s && now - start_s_ >= *config_.time_budget_s) {
        stopping = true;
        stop_reason = "time budget of " + FormatElapsed(*config_.time_budget_s) + " spent";
      }
      if (stopping) {
        for (auto& [number, t] : running_) {
          if (!t.stop_sent) {
            (void)executor_.Stop(number);
            t.stop_sent = true;
          }
        }
      }

      // Place new trials while there is room.
      while (!stopping && !exhausted && next_number_ < config_.max_trials &&
             static_cast<int>(running_.size()) < max_concurrent) {
        std::optional<std::vector<int>> got = slots_.Acquire(config_.gpus);
        if (!got) break;
        std::optional<json> params = sampler->Sample(next_number_);
        if (!params) {
          slots_.Release(*got);
          exhausted = true;
          break;
        }
        SWEEP_RETURN_IF_ERROR(StartTrial(next_number_, std::move(*params), std::move(*got), now));
        ++next_number_;
      }
      if (running_.empty()) break;

      // Take what has arrived; commit before waiting, so readers see everything up to the
      // moment the loop goes idle, and at least every kCommitInterval while busy.
      events.clear();
      SWEEP_RETURN_IF_ERROR(executor_.Poll(0, &events));
      double t = NowSeconds();
      if (events.empty() || t - last_commit_s_ >= kCommitIntervalS) {
        SWEEP_RETURN_IF_ERROR(store_.Commit());
        last_commit_s_ = t;
      }
      if (events.empty()) {
        SWEEP_RETURN_IF_ERROR(executor_.Poll(200, &events));
        t = NowSeconds();
      }
      for (executor::WorkerEvent& ev : events) {
        SWEEP_RETURN_IF_ERROR(Handle(ev, t, stop_reason));
      }
      ShowProgress(t, false);
    }

    const double end = NowSeconds();
    store::SweepStatus final_status =
        interrupted_ ? store::SweepStatus::kInterrupted : store::SweepStatus::kCompleted;
    SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, std::nullopt, "running",
                                          store::ToString(final_status), stop_reason, end));
    SWEEP_RETURN_IF_ERROR(store_.Commit());
    SWEEP_RETURN_IF_ERROR(store_.SetSweepStatus(sweep_id_, final_status, end));
    ShowProgress(end, true);
    executor_.Shutdown(1000);

    RunSummary summary;
    summary.sweep_id = sweep_id_;
    summary.counts = counts_;
    summary.interrupted = interrupted_;
    summary.elapsed_s = end - start_s_;
    summary.trials_started = next_number_;
    return summary;
  }

 private:
  void Announce() {
    if (options_.log == nullptr) return;
    const auto& s = slots_.slots();
    *options_.log << "sweep '" << config_.name << "': " << config_.max_trials << " trial(s), "
                  << config_.algorithm << " search, " << (config_.maximize ? "max " : "min ")
                  << config_.metric << "; " << s.size() << " " << (s[0].gpu ? "GPU" : "CPU")
                  << " slot(s), " << config_.gpus << " per trial; store " << store_.path() << "\n";
  }

  Status StartTrial(int64_t number, json params, std::vector<int> slots, double now) {
    RunningTrial t;
    t.slots = std::move(slots);
    t.placement = slots_.Placement(t.slots);
    t.started_s = now;

    store::TrialRecord rec;
    rec.number = number;
    rec.status = TrialStatus::kRunning;
    rec.params_json = params.dump();
    rec.placement = t.placement;
    rec.started_s = now;
    SWEEP_RETURN_IF_ERROR(store_.InsertTrial(sweep_id_, rec));
    SWEEP_RETURN_IF_ERROR(store_.AddEvent(sweep_id_, number, "", "running", t.placement, now));

    executor::TrialTask task;
    task.number = number;
    task.kind = std::string(ToString(config_.kind));
    task.params = std::move(params);
    task.settings = config_.kind == TrialKind::kTrainer ? config_.trainer : config_.function;
    task.seed = TrialSeed(config_.seed, number);
    bool gpu = slots_.slots()[t.slots[0]].gpu;
    task.threads = gpu ? 1 : static_cast<int>(t.slots.size());
    if (gpu) {
      for (int i : t.slots) task.gpus.push_back(slots_.slots()[i].device);
    }
    Status s = executor_.Start(task);
    if (!s.ok()) {
      // The worker could not even start: fail this trial, keep the sweep going.
      slots_.Release(t.slots);
      return FinishTrial(number, t, TrialStatus::kFailed, s.message(), now);
    }
    running_.emplace(number, std::move(t));
    ++counts_.running;
    return Status::Ok();
  }

  Status Handle(executor::WorkerEvent& ev, double now, const std::string& stop_reason) {
    auto it = running_.find(ev.trial);
    if (it == running_.end()) return Status::Ok();  // a late message for a finished trial
    RunningTrial& t = it->second;
    if (ev.type == executor::WorkerEvent::Type::kReport) {
      for (auto& [k, v] : ev.metrics.items()) t.metrics[k] = v;
      t.epochs = std::max(t.epochs, ev.epoch);
      store::ReportRecord r;
      r.trial = ev.trial;
      r.step = ev.step;
      r.epoch = ev.epoch;
      r.metrics_json = ev.metrics.dump(-1, ' ', false, json::error_handler_t::replace);
      r.time_s = now;
      return store_.AddReport(sweep_id_, r);
    }
    for (auto& [k, v] : ev.metrics.items()) t.metrics[k] = v;
    TrialStatus status = TrialStatus::kCompleted;
    std::string error;
    switch (ev.outcome) {
      case executor::TrialOutcome::Kind::kCompleted:
        break;
      case executor::TrialOutcome::Kind::kStopped:
        status = TrialStatus::kInterrupted;
        error = "stopped: " + stop_reason;
        break;
      case executor::TrialOutcome::Kind::kFailed:
        status = TrialStatus::kFailed;
        error = ev.error;
        break;
    }
    slots_.Release(t.slots);
    RunningTrial done = std::move(t);
    running_.erase(it);
    --counts_.running;
    return FinishTrial(ev.trial, done, status, error, now);
  }

  Status FinishTrial(int64_t number, const RunningTrial& t, TrialStatus status,
                     const std::string& error, double now) {
    store::TrialRecord rec;
    rec.number = number;
    rec.status = status;
    rec.ended_s = now;
    rec.error = error;
    rec.metrics_json = t.metrics.dump(-1, ' ', false, json::error_handler_t::replace);
    rec.epochs = t.epochs;
    auto m = t.metrics.find(config_.metric);
    if (m != t.metrics.end() && m->is_number() && std::isfinite(m->get<double>())) {
      rec.objective = m->get<double>();
    }
    SWEEP_RETURN_IF_ERROR(store_.FinishTrial(sweep_id_, rec));
    SWEEP_RETURN_IF_ERROR(
        store_.AddEvent(sweep_id_, number, "running", store::ToString(status), error, now));
    switch (status) {
      case TrialStatus::kCompleted:
        ++counts_.completed;
        if (rec.objective &&
            (!best_ || (config_.maximize ? *rec.objective > *best_ : *rec.objective < *best_))) {
          best_ = rec.objective;
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
    if (options_.log != nullptr && !options_.live_status) {
      *options_.log << "trial " << number << " " << store::ToString(status);
      if (rec.objective)
        *options_.log << " " << config_.metric << "=" << FormatMetric(*rec.objective);
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
        std::to_string(counts_.completed + counts_.pruned + counts_.failed + counts_.interrupted) +
        "/" + std::to_string(config_.max_trials) + " done, " + std::to_string(counts_.running) +
        " running, " + std::to_string(counts_.pruned) + " pruned, " +
        std::to_string(counts_.failed) + " failed";
    if (best_) {
      line += ", best " + config_.metric + " " + FormatMetric(*best_) + " (trial " +
              std::to_string(best_trial_) + ")";
    }
    line += ", " + FormatElapsed(now - start_s_);
    *options_.log << line << (final ? "\n" : "") << std::flush;
  }

  const SweepConfig& config_;
  store::Store& store_;
  const RunOptions& options_;
  executor::SlotPool slots_;
  executor::LocalExecutor executor_;
  int64_t sweep_id_ = 0;
  int64_t next_number_ = 0;
  double start_s_ = 0;
  double last_progress_s_ = 0;
  double last_commit_s_ = 0;
  std::map<int64_t, RunningTrial> running_;
  store::StatusCounts counts_;
  std::optional<double> best_;
  int64_t best_trial_ = -1;
  bool interrupted_ = false;
};

}  // namespace

Result<RunSummary> RunSweep(const SweepConfig& config, store::Store& store,
                            const RunOptions& options) {
  Coordinator c(config, store, options);
  return c.Run();
}

}  // namespace sweep
