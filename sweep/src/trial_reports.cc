// A running trial's reports: stored, merged into a step already stored, shown to early
// stopping and to TPE, checked against stop_when and max_resource; the worker waiting at a
// decision point hears go on or stop.
#include <algorithm>
#include <cmath>

#include "coordinator_loop.h"

namespace sweep {

using nlohmann::json;

Status Coordinator::HandleReport(executor::WorkerEvent& ev, RunningTrial& t, double now) {
  // Early stopping has decided on this trial (pruned, or at max_resource), or it met stop_when:
  // what it reports while it stops (a program that ignores SIGTERM for its grace period, a
  // function's next step) is not its result, is not stored, and reaches no scheduler, as resume
  // would replay the store.
  if (!t.prune_reason.empty() || t.at_max_resource || target_trials_.contains(ev.trial)) {
    // A worker waiting for a verdict on it hears the stop (one run again only to measure its
    // test set has not been told yet).
    if (!t.stop_sent) (void)StopTrial(ev.trial, t);
    return Status::Ok();
  }
  // A command (its length unknown) is stopped once it reports past max_resource; its result is
  // its last report within it (as a pruned trial's is its report at the rung), unless it has no
  // other. Nor is a report past it stored while the trial stops for another reason (the sweep
  // stops, and the program reports on during its grace period, or a function takes its next
  // step): it had reached max_resource, and ends completed there.
  if (scheduler_ != nullptr && !t.metrics.empty() &&
      kind_->Resource(ev.step, ev.epoch) > scheduler_->MaxResource(ev.trial)) {
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
    // reporting one twice) keeps that first report's values, which early stopping decided on.
    // Metrics it lacked are added (a program printing its training loss and its validation
    // accuracy of one step on two lines), and go on as a report of their own.
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
  if (decision_point && kind_->checkpoints()) SWEEP_RETURN_IF_ERROR(CommitNow(now));
  if (scheduler_ != nullptr) {
    Decide(ev, t);
  } else if (source_->learns()) {
    // Without early stopping TPE reads the reports too: a running trial's latest stands in for
    // its result until it ends.
    if (auto report = SchedulerReport(ev.trial, ev.step, ev.epoch, ev.metrics, std::nullopt)) {
      source_->NoteReport(report->trial, report->resource, report->value, t.params);
    }
  }
  // A report that pruned its trial does not end the sweep by its target. One that arrives while
  // the sweep stops for another reason (an interrupt, its time budget) does: its trial ends
  // completed and the sweep with it, as a resume replaying the store would.
  if (t.prune_reason.empty()) NoteTarget(ev.trial, ev.metrics);
  // The worker waits at a decision point until told; a stop already sent is its answer, and so
  // is the target met: it stops now, its result this report.
  if (target_trials_.contains(ev.trial) && !t.stop_sent) (void)StopTrial(ev.trial, t);
  if (decision_point && !t.stop_sent) ContinueTrial(ev.trial, t);
  return Status::Ok();
}

// Early stopping's verdict on a stored report, and max_resource.
void Coordinator::Decide(executor::WorkerEvent& ev, RunningTrial& t) {
  if (auto report = SchedulerReport(ev.trial, ev.step, ev.epoch, ev.metrics, t.length)) {
    search::Decision d =
        scheduler_->OnReport(report->trial, report->resource, report->value, report->last);
    source_->NoteReport(report->trial, report->resource, report->value, t.params);
    if (d.stop() && t.prune_reason.empty()) {
      t.prune_reason = d.reason;
      if (!t.stop_sent) (void)StopTrial(ev.trial, t);
    }
    // A command that reported the sweep's metric at max_resource has its result there, whatever
    // ends it after (its own end-of-run work failing or hanging to its timeout, a stop): it is
    // not stopped, so a program that ends there finishes undisturbed.
    if (!t.length && report->resource >= scheduler_->MaxResource(ev.trial)) {
      metric_at_cap_.insert(ev.trial);
    }
  }
  // A survivor runs to max_resource (ASHA's and Hyperband's), not past it, whatever its own
  // epochs or steps: there it ends completed (Ray Tune's max_t). A trial whose length is known
  // is stopped on reaching it, if it would go on; a command, whose length is not, once it
  // reports past it (so a program that ends there anyway finishes undisturbed).
  const double resource = kind_->Resource(ev.step, ev.epoch);
  const double cap = scheduler_->MaxResource(ev.trial);
  const bool beyond = t.length ? *t.length > cap && resource >= cap : resource > cap;
  if (t.prune_reason.empty() && !t.stop_sent && beyond) StopAtMaxResource(ev.trial, t);
}

// A report of a step already stored: the metrics the stored report lacks are added to it (the
// values it has stand), and returned, an object; `ev` takes the stored report's epoch. When the
// sweep's metric or stop_when's is among them, the report moves to the end of the arrival
// order, since early stopping or the target decides on it now and resume replays reports in
// that order.
Result<json> Coordinator::MergeIntoStoredReport(executor::WorkerEvent& ev, double now) {
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
  const bool decides = added.contains(config_.sweep.metric) ||
                       (config_.sweep.stop_when && added.contains(config_.sweep.stop_when->metric));
  SWEEP_RETURN_IF_ERROR(store_.RewriteReport(sweep_id_, *stored, decides));
  ev.epoch = stored->epoch;
  return added;
}

// The scheduler's view of a report: the resource is the kind's (epochs, or a function's steps);
// the value is the sweep's metric (null, as JSON writes NaN, reads as NaN); it is the trial's
// last when it reaches the trial's `length` (unknown for a command). Used for live reports and
// for replays alike, so both see the same numbers.
std::optional<search::Report> Coordinator::SchedulerReport(int64_t trial, int64_t step,
                                                           double epoch, const json& metrics,
                                                           std::optional<double> length) const {
  if (!metrics.is_object()) return std::nullopt;
  auto m = metrics.find(config_.sweep.metric);
  if (m == metrics.end()) return std::nullopt;
  // NaN or an infinity (stored as null) in the sweep's metric: the trial diverged, and its
  // worker fails it so ("the run diverged"), whether or not the report fell on a rung. Early
  // stopping does not see it, so the failure is not recorded as a prune, live or on replay.
  if (!m->is_number() || !std::isfinite(m->get<double>())) return std::nullopt;
  search::Report r;
  r.trial = trial;
  r.resource = kind_->Resource(step, epoch);
  r.value = m->get<double>();
  r.last = length && r.resource >= *length * (1 - 1e-9);
  return r;
}

// A survivor reached early_stopping.max_resource: it stops there and ends completed.
void Coordinator::StopAtMaxResource(int64_t number, RunningTrial& t) {
  t.at_max_resource = true;
  (void)StopTrial(number, t);
}

// Whether a trial's reports show the sweep's metric.
void Coordinator::NoteMetric(RunningTrial& t, const json& reported) {
  if (!reported.is_object()) return;
  auto m = reported.find(config_.sweep.metric);
  if (m == reported.end()) return;
  // NaN arrives as null: a diverged loss, under the right name.
  if (m->is_number() || m->is_null()) {
    t.metric_reported = true;
    metric_seen_ = true;
  } else {
    t.metric_not_number = true;
  }
}

// Whether a report's `metrics` meet stop_when (false without one).
bool Coordinator::MeetsTarget(const json& metrics) const {
  if (!config_.sweep.stop_when || !metrics.is_object()) return false;
  auto m = metrics.find(config_.sweep.stop_when->metric);
  return m != metrics.end() && m->is_number() && config_.sweep.stop_when->Reached(m->get<double>());
}

// Records that `trial`'s report `metrics` met stop_when. The first to meet it ends the sweep;
// one whose report meets it as it stops (for that, an interrupt or the time budget) has met it
// as well, and ends completed too.
void Coordinator::NoteTarget(int64_t trial, const json& metrics) {
  if (!MeetsTarget(metrics)) return;
  if (!target_trials_.insert(trial).second || target_trials_.size() > 1) return;
  // Met as the sweep stopped for another reason: both are said.
  stop_reason_ = (stop_reason_.empty() ? "" : stop_reason_ + "; then ") + "target " +
                 config_.sweep.stop_when->ToString() + " reached by trial " + std::to_string(trial);
}

// The configured metric's value in `metrics`, when it is a finite number.
std::optional<double> Coordinator::Objective(const json& metrics) const {
  auto m = metrics.find(config_.sweep.metric);
  if (m != metrics.end() && m->is_number() && std::isfinite(m->get<double>())) {
    return m->get<double>();
  }
  return std::nullopt;
}

// The note of a trial stopped at max_resource.
std::string Coordinator::CapNote() const {
  return "ran to early_stopping.max_resource = " +
         FormatMetric(config_.early_stopping.max_resource);
}

// The note of the trial that met stop_when.
std::string Coordinator::TargetNote() const {
  return "reached the target " + config_.sweep.stop_when->ToString() + "; the sweep stopped";
}

}  // namespace sweep
