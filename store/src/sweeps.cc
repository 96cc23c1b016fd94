// Sweeps: their statuses as text, their rows (created with the config's hash, found by name,
// listed with their best value) and what is recorded on them (status, owner, budget, time).
#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sha256.h"
#include "store_impl.h"
#include "store_sql.h"

namespace sweep::store {

using internal::Query;

std::string_view ToString(SweepStatus status) {
  switch (status) {
    case SweepStatus::kRunning:
      return "running";
    case SweepStatus::kCompleted:
      return "completed";
    case SweepStatus::kFailed:
      return "failed";
    case SweepStatus::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

std::optional<SweepStatus> ParseSweepStatus(std::string_view text) {
  for (SweepStatus status : {SweepStatus::kRunning, SweepStatus::kCompleted, SweepStatus::kFailed,
                             SweepStatus::kInterrupted}) {
    if (ToString(status) == text) return status;
  }
  return std::nullopt;
}

Result<int64_t> Store::CreateSweep(const NewSweep& sweep,
                                   const std::function<Status(int64_t id)>& before_commit) {
  SWEEP_RETURN_IF_ERROR(impl_->RefuseWriteIfReadOnly());
  if (sweep.name.empty()) return Status::InvalidArgument("a sweep needs a name");
  // The sweep row commits on its own, so publish whatever batch came before it first.
  SWEEP_RETURN_IF_ERROR(Commit());
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  auto inserted = [&]() -> Result<int64_t> {
    SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kInsertSweep));
    ResetOnExit reset(stmt);
    std::string hash = internal::Sha256Hex(sweep.config_text);
    Binder bind(stmt);
    bind.Text(sweep.name)
        .Text(sweep.config_text)
        .Text(hash)
        .Text(sweep.config_path)
        .Text(sweep.metric)
        .Int(sweep.maximize ? 1 : 0)
        .Int(sweep.seed)
        .Text(ToString(SweepStatus::kRunning))
        .Real(sweep.created_s)
        .Text(sweep.owner)
        .Text(sweep.run_options);
    if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the new sweep");
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_CONSTRAINT_UNIQUE) {
      return Status::AlreadyExists("sweep '" + sweep.name + "' already exists in " + path_);
    }
    if (rc != SQLITE_DONE) return impl_->Error(rc, "creating sweep '" + sweep.name + "'");
    const auto id = static_cast<int64_t>(sqlite3_last_insert_rowid(impl_->db));
    if (before_commit) SWEEP_RETURN_IF_ERROR(before_commit(id));
    return id;
  }();
  if (!inserted.ok()) {
    // The failure is what the caller needs to hear, not a rollback's.
    (void)impl_->Rollback();
    return inserted;
  }
  SWEEP_RETURN_IF_ERROR(Commit());
  return inserted;
}

Result<SweepRecord> Store::FindSweep(std::string_view name) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kFindSweep));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Text(name);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the sweep name");
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) {
    return Status::NotFound("no sweep named '" + std::string(name) + "' in " + path_);
  }
  if (rc != SQLITE_ROW) return impl_->Error(rc, "looking up sweep '" + std::string(name) + "'");
  SweepRecord sweep;
  sweep.id = sqlite3_column_int64(stmt, 0);
  sweep.name = ColumnText(stmt, 1);
  sweep.config_text = ColumnText(stmt, 2);
  sweep.config_hash = ColumnText(stmt, 3);
  sweep.config_path = ColumnText(stmt, 4);
  sweep.metric = ColumnText(stmt, 5);
  sweep.maximize = sqlite3_column_int(stmt, 6) != 0;
  sweep.seed = sqlite3_column_int64(stmt, 7);
  std::string status = ColumnText(stmt, 8);
  std::optional<SweepStatus> parsed = ParseSweepStatus(status);
  if (!parsed) {
    return Status::Corruption(path_ + ": sweep '" + sweep.name + "' has unknown status '" + status +
                              "'");
  }
  sweep.status = *parsed;
  sweep.created_s = sqlite3_column_double(stmt, 9);
  sweep.ended_s = ColumnOptReal(stmt, 10);
  sweep.owner = ColumnText(stmt, 11);
  sweep.active_s = sqlite3_column_double(stmt, 12);
  sweep.run_options = ColumnText(stmt, 13);
  if (sqlite3_column_type(stmt, 14) != SQLITE_NULL)
    sweep.max_trials = sqlite3_column_int64(stmt, 14);
  sweep.time_budget_s = ColumnOptReal(stmt, 15);
  sweep.carried = sqlite3_column_int64(stmt, 16);
  sweep.sample_shift = sqlite3_column_int64(stmt, 17);
  sweep.carried_from = ColumnText(stmt, 18);
  sweep.seen_s = ColumnOptReal(stmt, 19);
  return sweep;
}

Result<std::vector<SweepSummary>> Store::ListSweeps() {
  std::vector<SweepSummary> sweeps;
  SWEEP_RETURN_IF_ERROR(impl_->ReadRows(
      impl_->Prepare(Query::kListSweeps), "binding the sweeps query", "listing sweeps",
      [](Binder&) {},  // it takes no parameters
      [&](sqlite3_stmt* stmt) {
        SweepSummary summary;
        summary.name = ColumnText(stmt, 0);
        std::string status = ColumnText(stmt, 1);
        std::optional<SweepStatus> parsed = ParseSweepStatus(status);
        if (!parsed) {
          return Status::Corruption(path_ + ": sweep '" + summary.name + "' has unknown status '" +
                                    status + "'");
        }
        summary.status = *parsed;
        summary.metric = ColumnText(stmt, 2);
        summary.maximize = sqlite3_column_int(stmt, 3) != 0;
        summary.created_s = sqlite3_column_double(stmt, 4);
        summary.ended_s = ColumnOptReal(stmt, 5);
        summary.trials = sqlite3_column_int64(stmt, 6);
        summary.best = ColumnOptReal(stmt, 7);
        sweeps.push_back(std::move(summary));
        return Status::Ok();
      }));
  return sweeps;
}

Status Store::SetSweepStatus(int64_t sweep_id, SweepStatus status, std::optional<double> ended_s) {
  SWEEP_RETURN_IF_ERROR(impl_->RefuseWriteIfReadOnly());
  // With whatever is pending, in a batch of its own: it waits for another process's lock as
  // every write does.
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  {
    SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kSetSweepStatus));
    ResetOnExit reset(stmt);
    Binder bind(stmt);
    bind.Text(ToString(status)).OptReal(ended_s).Int(sweep_id);
    if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the sweep status");
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return impl_->Error(rc, "setting the sweep status");
    if (sqlite3_changes(impl_->db) == 0) {
      return Status::NotFound("no sweep with id " + std::to_string(sweep_id) + " in " + path_);
    }
  }
  return Commit();
}

Status Store::SetSweepOwner(int64_t sweep_id, std::string_view owner,
                            std::string_view run_options) {
  return impl_->Update(Query::kSetSweepOwner, "recording the sweep's owner",
                       [&](Binder& b) { b.Text(owner).Text(run_options).Int(sweep_id); });
}

Status Store::SetSweepBudget(int64_t sweep_id, std::optional<int64_t> max_trials,
                             std::optional<double> time_budget_s) {
  return impl_->Update(Query::kSetSweepBudget, "recording the sweep's budget", [&](Binder& b) {
    b.OptInt(max_trials).OptReal(time_budget_s).Int(sweep_id);
  });
}

Status Store::SetSweepCarried(int64_t sweep_id, int64_t carried, int64_t sample_shift,
                              const std::string& from) {
  return impl_->Update(
      Query::kSetSweepCarried, "recording the trials carried over",
      [&](Binder& b) { b.Int(carried).Int(sample_shift).Text(from).Int(sweep_id); });
}

Status Store::SetSweepActive(int64_t sweep_id, double active_s, double now_s) {
  return impl_->Update(Query::kSetSweepActive, "recording the sweep's running time",
                       [&](Binder& b) { b.Real(active_s).Real(now_s).Int(sweep_id); });
}

Result<RowCounts> Store::CountRows(int64_t sweep_id) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kRowCounts));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the row count query");
  const int rc = sqlite3_step(stmt);
  if (rc != SQLITE_ROW) return impl_->Error(rc, "counting the sweep's rows");
  RowCounts counts;
  counts.trials = sqlite3_column_int64(stmt, 0);
  counts.reports = sqlite3_column_int64(stmt, 1);
  counts.events = sqlite3_column_int64(stmt, 2);
  return counts;
}

Status Store::DeleteSweep(int64_t sweep_id) {
  SWEEP_RETURN_IF_ERROR(impl_->Update(Query::kDeleteSweep, "deleting the sweep",
                                      [&](Binder& b) { b.Int(sweep_id); }));
  return Commit();
}

}  // namespace sweep::store
