// Reports and events: a trial's reported steps (added once per step, read back, rewritten
// when a rerun adds what the store lacked) and its state transitions.
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store_impl.h"
#include "store_sql.h"

namespace sweep::store {

using internal::Query;

namespace {
// The row function of ReadRows for every report query: trial, step, epoch, metrics, time.
Status AppendReport(sqlite3_stmt* stmt, std::vector<ReportRecord>* reports) {
  ReportRecord report;
  report.trial = sqlite3_column_int64(stmt, 0);
  report.step = sqlite3_column_int64(stmt, 1);
  report.epoch = sqlite3_column_double(stmt, 2);
  report.metrics_json = ColumnText(stmt, 3);
  report.time_s = sqlite3_column_double(stmt, 4);
  reports->push_back(std::move(report));
  return Status::Ok();
}
}  // namespace

// ---- reports ----

Status Store::AddReport(int64_t sweep_id, const ReportRecord& report, bool* stored) {
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kAddReport));
  ResetOnExit reset(stmt);
  std::string metrics = JsonOrEmptyObject(report.metrics_json);
  Binder bind(stmt);
  bind.Int(sweep_id)
      .Int(report.trial)
      .Int(report.step)
      .Real(report.epoch)
      .Text(metrics)
      .Real(report.time_s);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding a report");
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) {
    if (stored != nullptr) *stored = sqlite3_changes(impl_->db) > 0;
    return Status::Ok();
  }
  if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) return impl_->NoSuchTrial(sweep_id, report.trial);
  return impl_->Error(rc, "adding a report for trial " + std::to_string(report.trial));
}

Result<std::vector<ReportRecord>> Store::Reports(int64_t sweep_id, int64_t trial_number) {
  std::vector<ReportRecord> reports;
  SWEEP_RETURN_IF_ERROR(impl_->ReadRows(
      impl_->Prepare(Query::kReports), "binding the reports query",
      "reading the reports of trial " + std::to_string(trial_number),
      [&](Binder& b) { b.Int(sweep_id).Int(trial_number); },
      [&](sqlite3_stmt* stmt) { return AppendReport(stmt, &reports); }));
  return reports;
}

Result<std::optional<ReportRecord>> Store::ReportAt(int64_t sweep_id, int64_t trial, int64_t step) {
  std::vector<ReportRecord> reports;
  SWEEP_RETURN_IF_ERROR(impl_->ReadRows(
      impl_->Prepare(Query::kReportAt), "binding the report query",
      "reading step " + std::to_string(step) + " of trial " + std::to_string(trial),
      [&](Binder& b) { b.Int(sweep_id).Int(trial).Int(step); },
      [&](sqlite3_stmt* stmt) { return AppendReport(stmt, &reports); }));
  if (reports.empty()) return std::optional<ReportRecord>();
  return std::optional<ReportRecord>(std::move(reports.front()));
}

Status Store::RewriteReport(int64_t sweep_id, const ReportRecord& report, bool last) {
  const std::string metrics = JsonOrEmptyObject(report.metrics_json);
  return impl_->Update(
      Query::kRewriteReport,
      "rewriting step " + std::to_string(report.step) + " of trial " + std::to_string(report.trial),
      [&](Binder& b) {
        b.Text(metrics)
            .Real(report.time_s)
            .Int(last ? 1 : 0)
            .Int(sweep_id)
            .Int(report.trial)
            .Int(report.step);
      });
}

Result<std::vector<ReportRecord>> Store::AllReports(int64_t sweep_id) {
  std::vector<ReportRecord> reports;
  SWEEP_RETURN_IF_ERROR(impl_->ReadRows(
      impl_->Prepare(Query::kAllReports), "binding the reports query", "reading the reports",
      [&](Binder& b) { b.Int(sweep_id); },
      [&](sqlite3_stmt* stmt) { return AppendReport(stmt, &reports); }));
  return reports;
}

// ---- events ----

Status Store::AddEvent(int64_t sweep_id, std::optional<int64_t> trial, std::string_view from,
                       std::string_view to, std::string_view detail, double time_s) {
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kAddEvent));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id).OptInt(trial).Text(from).Text(to).Text(detail).Real(time_s);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding an event");
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) return Status::Ok();
  if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
    if (trial) return impl_->NoSuchTrial(sweep_id, *trial);
    return Status::NotFound("no sweep with id " + std::to_string(sweep_id) + " in " + path_);
  }
  return impl_->Error(rc, "adding an event");
}

Result<std::vector<EventRecord>> Store::TrialEvents(int64_t sweep_id, int64_t trial_number) {
  std::vector<EventRecord> events;
  SWEEP_RETURN_IF_ERROR(impl_->ReadRows(
      impl_->Prepare(Query::kTrialEvents), "binding the events query",
      "reading the events of trial " + std::to_string(trial_number),
      [&](Binder& b) { b.Int(sweep_id).Int(trial_number); },
      [&](sqlite3_stmt* stmt) {
        EventRecord e;
        e.from = ColumnText(stmt, 0);
        e.to = ColumnText(stmt, 1);
        e.detail = ColumnText(stmt, 2);
        e.time_s = sqlite3_column_double(stmt, 3);
        events.push_back(std::move(e));
        return Status::Ok();
      }));
  return events;
}

}  // namespace sweep::store
