// Trials: their statuses as text, their rows written in the batch (inserted, started,
// finished, progress, retries) and read back (by number, best first, sorted, counted).
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

std::string_view ToString(TrialStatus status) {
  switch (status) {
    case TrialStatus::kPending:
      return "pending";
    case TrialStatus::kRunning:
      return "running";
    case TrialStatus::kCompleted:
      return "completed";
    case TrialStatus::kPruned:
      return "pruned";
    case TrialStatus::kFailed:
      return "failed";
    case TrialStatus::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

std::optional<TrialStatus> ParseTrialStatus(std::string_view text) {
  for (TrialStatus status :
       {TrialStatus::kPending, TrialStatus::kRunning, TrialStatus::kCompleted, TrialStatus::kPruned,
        TrialStatus::kFailed, TrialStatus::kInterrupted}) {
    if (ToString(status) == text) return status;
  }
  return std::nullopt;
}

bool IsTerminal(TrialStatus status) {
  return status == TrialStatus::kCompleted || status == TrialStatus::kPruned ||
         status == TrialStatus::kFailed;
}
// ---- reading trial rows ----

Result<TrialRecord> Store::Impl::ReadTrial(sqlite3_stmt* stmt) const {
  TrialRecord trial;
  trial.number = sqlite3_column_int64(stmt, 0);
  std::string status = ColumnText(stmt, 1);
  std::optional<TrialStatus> parsed = ParseTrialStatus(status);
  if (!parsed) {
    return Status::Corruption(path + ": trial " + std::to_string(trial.number) +
                              " has unknown status '" + status + "'");
  }
  trial.status = *parsed;
  trial.params_json = ColumnText(stmt, 2);
  trial.placement = ColumnText(stmt, 3);
  trial.started_s = ColumnOptReal(stmt, 4);
  trial.ended_s = ColumnOptReal(stmt, 5);
  trial.error = ColumnText(stmt, 6);
  trial.checkpoint = ColumnText(stmt, 7);
  trial.metrics_json = ColumnText(stmt, 8);
  trial.objective = ColumnOptReal(stmt, 9);
  trial.epochs = sqlite3_column_double(stmt, 10);
  trial.retries = sqlite3_column_int(stmt, 11);
  trial.agent_losses = sqlite3_column_int(stmt, 14);
  trial.stdout_log = ColumnText(stmt, 12);
  trial.stderr_log = ColumnText(stmt, 13);
  trial.proposed_by = ColumnText(stmt, 15);
  trial.info_json = ColumnText(stmt, 16);
  if (sqlite3_column_type(stmt, 17) != SQLITE_NULL) trial.bracket = sqlite3_column_int64(stmt, 17);
  return trial;
}

Status Store::Impl::AppendTrial(sqlite3_stmt* stmt, std::vector<TrialRecord>* trials) const {
  SWEEP_ASSIGN_OR_RETURN(TrialRecord trial, ReadTrial(stmt));
  trials->push_back(std::move(trial));
  return Status::Ok();
}

Status Store::Impl::NoSuchTrial(int64_t sweep_id, int64_t number) const {
  return Status::NotFound("no trial " + std::to_string(number) + " in sweep id " +
                          std::to_string(sweep_id) + " in " + path);
}

// ---- batched writes ----

Status Store::InsertTrial(int64_t sweep_id, const TrialRecord& trial) {
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kInsertTrial));
  ResetOnExit reset(stmt);
  std::string params = JsonOrEmptyObject(trial.params_json);
  std::string metrics = JsonOrEmptyObject(trial.metrics_json);
  std::string info = JsonOrEmptyObject(trial.info_json);
  Binder bind(stmt);
  bind.Int(sweep_id)
      .Int(trial.number)
      .Text(params)
      .Text(ToString(trial.status))
      .Text(trial.placement)
      .OptReal(trial.started_s)
      .OptReal(trial.ended_s)
      .Text(trial.error)
      .Text(trial.checkpoint)
      .Text(metrics)
      .OptReal(trial.objective)
      .Real(trial.epochs)
      .Text(trial.stdout_log)
      .Text(trial.stderr_log)
      .Text(trial.proposed_by)
      .Text(info)
      .OptInt(trial.bracket);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding a trial");
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) return Status::Ok();
  if (rc == SQLITE_CONSTRAINT_UNIQUE) {
    return Status::AlreadyExists("trial " + std::to_string(trial.number) +
                                 " already exists in sweep id " + std::to_string(sweep_id) +
                                 " in " + path_);
  }
  if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return Status::NotFound("no sweep with id " + std::to_string(sweep_id) + " in " + path_);
  }
  return impl_->Error(rc, "inserting trial " + std::to_string(trial.number));
}

Status Store::UpdateTrialStatus(int64_t sweep_id, int64_t number, TrialStatus status,
                                std::string_view placement, std::optional<double> started_s,
                                std::string_view checkpoint) {
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kUpdateTrialStatus));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Text(ToString(status))
      .Text(placement)
      .OptReal(started_s)
      .Text(checkpoint)
      .Int(sweep_id)
      .Int(number);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding a trial status");
  int rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) {
    return impl_->Error(rc, "updating the status of trial " + std::to_string(number));
  }
  if (sqlite3_changes(impl_->db) == 0) return impl_->NoSuchTrial(sweep_id, number);
  return Status::Ok();
}

Status Store::FinishTrial(int64_t sweep_id, const TrialRecord& trial) {
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kFinishTrial));
  ResetOnExit reset(stmt);
  std::string metrics = JsonOrEmptyObject(trial.metrics_json);
  Binder bind(stmt);
  bind.Text(ToString(trial.status))
      .OptReal(trial.ended_s)
      .Text(trial.error)
      .Text(trial.checkpoint)
      .Text(metrics)
      .OptReal(trial.objective)
      .Real(trial.epochs)
      .Int(sweep_id)
      .Int(trial.number);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding a finished trial");
  int rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "finishing trial " + std::to_string(trial.number));
  if (sqlite3_changes(impl_->db) == 0) return impl_->NoSuchTrial(sweep_id, trial.number);
  return Status::Ok();
}

Status Store::SetTrialProgress(int64_t sweep_id, const TrialRecord& trial) {
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kTrialProgress));
  ResetOnExit reset(stmt);
  std::string metrics = JsonOrEmptyObject(trial.metrics_json);
  Binder bind(stmt);
  bind.Text(metrics).OptReal(trial.objective).Real(trial.epochs).Int(sweep_id).Int(trial.number);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding a trial's progress");
  int rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) {
    return impl_->Error(rc, "storing the progress of trial " + std::to_string(trial.number));
  }
  return Status::Ok();
}

Status Store::SetTrialRetries(int64_t sweep_id, int64_t number, int retries) {
  return impl_->Update(Query::kSetTrialRetries,
                       "recording the retries of trial " + std::to_string(number),
                       [&](Binder& b) { b.Int(retries).Int(sweep_id).Int(number); });
}

Status Store::SetTrialInfo(int64_t sweep_id, int64_t number, const std::string& info_json) {
  const std::string info = JsonOrEmptyObject(info_json);
  return impl_->Update(Query::kSetTrialInfo,
                       "recording what trial " + std::to_string(number) + "'s run found out",
                       [&](Binder& b) { b.Text(info).Int(sweep_id).Int(number); });
}

Status Store::SetTrialAgentLosses(int64_t sweep_id, int64_t number, int losses) {
  return impl_->Update(Query::kSetTrialAgentLosses,
                       "recording the lost agents of trial " + std::to_string(number),
                       [&](Binder& b) { b.Int(losses).Int(sweep_id).Int(number); });
}

Status Store::DropTrialCheckpoint(int64_t sweep_id, int64_t number) {
  return impl_->Update(Query::kDropCheckpoint,
                       "forgetting the checkpoint of trial " + std::to_string(number),
                       [&](Binder& b) { b.Int(sweep_id).Int(number); });
}

// ---- queries ----

Result<std::vector<TrialRecord>> Store::BestTrials(int64_t sweep_id, bool maximize, int64_t top) {
  std::vector<TrialRecord> trials;
  SWEEP_RETURN_IF_ERROR(impl_->ReadRows(
      impl_->Prepare(maximize ? Query::kBestTrialsMax : Query::kBestTrialsMin),
      "binding the best-trials query", "reading the best trials",
      [&](Binder& b) { b.Int(sweep_id).Int(top); },
      [&](sqlite3_stmt* stmt) { return impl_->AppendTrial(stmt, &trials); }));
  return trials;
}

Result<std::vector<TrialRecord>> Store::Trials(int64_t sweep_id, const TrialQuery& query) {
  SWEEP_ASSIGN_OR_RETURN(internal::TrialsSql sql, internal::BuildTrialsSql(query));
  std::vector<TrialRecord> trials;
  SWEEP_RETURN_IF_ERROR(impl_->ReadRows(
      impl_->PrepareTrials(sql.sql), "binding the trials query", "reading trials",
      [&](Binder& b) {
        b.Int(sweep_id);
        if (query.status) b.Text(ToString(*query.status));
        if (!sql.metric_path.empty()) b.Text(sql.metric_path);
        b.Int(query.limit < 0 ? -1 : query.limit);  // SQLite reads a negative LIMIT as "no limit"
      },
      [&](sqlite3_stmt* stmt) { return impl_->AppendTrial(stmt, &trials); }));
  return trials;
}

Result<std::optional<TrialRecord>> Store::Trial(int64_t sweep_id, int64_t number) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kTrial));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id).Int(number);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the trial query");
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) return std::optional<TrialRecord>();
  if (rc != SQLITE_ROW) return impl_->Error(rc, "reading trial " + std::to_string(number));
  SWEEP_ASSIGN_OR_RETURN(TrialRecord trial, impl_->ReadTrial(stmt));
  return std::optional<TrialRecord>(std::move(trial));
}

Result<StatusCounts> Store::CountByStatus(int64_t sweep_id) {
  StatusCounts counts;
  SWEEP_RETURN_IF_ERROR(impl_->ReadRows(
      impl_->Prepare(Query::kCountByStatus), "binding the count query", "counting trials",
      [&](Binder& b) { b.Int(sweep_id); },
      [&](sqlite3_stmt* stmt) {
        std::string status = ColumnText(stmt, 0);
        int64_t count = sqlite3_column_int64(stmt, 1);
        std::optional<TrialStatus> parsed = ParseTrialStatus(status);
        if (!parsed) {
          return Status::Corruption(path_ + ": " + std::to_string(count) +
                                    " trial(s) have unknown status '" + status + "'");
        }
        switch (*parsed) {
          case TrialStatus::kPending:
            counts.pending = count;
            break;
          case TrialStatus::kRunning:
            counts.running = count;
            break;
          case TrialStatus::kCompleted:
            counts.completed = count;
            break;
          case TrialStatus::kPruned:
            counts.pruned = count;
            break;
          case TrialStatus::kFailed:
            counts.failed = count;
            break;
          case TrialStatus::kInterrupted:
            counts.interrupted = count;
            break;
        }
        return Status::Ok();
      }));
  return counts;
}

Result<int64_t> Store::MaxTrialNumber(int64_t sweep_id) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kMaxTrialNumber));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the max-number query");
  int rc = sqlite3_step(stmt);
  if (rc != SQLITE_ROW) return impl_->Error(rc, "reading the highest trial number");
  if (sqlite3_column_type(stmt, 0) == SQLITE_NULL) return int64_t{-1};
  return static_cast<int64_t>(sqlite3_column_int64(stmt, 0));
}

}  // namespace sweep::store
