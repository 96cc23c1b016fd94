// The SQL text of the Store's statements (store_sql.h): the cached queries, and the Trials()
// statement built from its sort key. Pure functions: safe from any thread.
#include "store_sql.h"

#include <string>
#include <string_view>

namespace sweep::store::internal {
namespace {

// Column list shared by every query that returns TrialRecords; ReadTrial() reads this order.
#define SWEEP_TRIAL_COLUMNS                                                                    \
  "number, status, params, placement, started, ended, error, checkpoint, metrics, objective, " \
  "epochs, retries, stdout_log, stderr_log, agent_losses, proposed_by, info, bracket"

// Whether a quoted JSON path ($."name") reaches a metric or parameter name: any but '"', '\\'
// and control characters (SQLite's paths have no escapes).
bool IsPathSafe(std::string_view name) {
  for (char c : name) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

std::string_view QuerySql(Query query) {
  switch (query) {
    case Query::kBegin:
      // IMMEDIATE takes the write lock up front, so a batch never fails half-way on a lock
      // upgrade; waiting for the lock is left to busy_timeout.
      return "BEGIN IMMEDIATE";
    case Query::kCommit:
      return "COMMIT";
    case Query::kRollback:
      return "ROLLBACK";
    case Query::kInsertSweep:
      return "INSERT INTO sweeps (name, config_text, config_hash, config_path, metric, maximize, "
             "seed, status, created, owner, run_options) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    case Query::kFindSweep:
      return "SELECT id, name, config_text, config_hash, config_path, metric, maximize, seed, "
             "status, created, ended, owner, active_s, run_options, max_trials, time_budget_s, "
             "carried, sample_shift, carried_from, seen FROM sweeps WHERE name = ?";
    case Query::kListSweeps:
      // Correlated subqueries so each count and best value is an index range, not a scan of the
      // sweep's trials; MIN/MAX on trials_best(sweep_id, status, objective) is one index seek.
      return "SELECT name, status, metric, maximize, created, ended, "
             "(SELECT COUNT(*) FROM trials WHERE trials.sweep_id = sweeps.id), "
             "CASE WHEN maximize "
             "THEN (SELECT MAX(objective) FROM trials "
             "WHERE trials.sweep_id = sweeps.id AND trials.status = 'completed') "
             "ELSE (SELECT MIN(objective) FROM trials "
             "WHERE trials.sweep_id = sweeps.id AND trials.status = 'completed') END "
             "FROM sweeps ORDER BY created, id";
    case Query::kSetSweepStatus:
      return "UPDATE sweeps SET status = ?, ended = ? WHERE id = ?";
    case Query::kInsertTrial:
      return "INSERT INTO trials (sweep_id, number, params, status, placement, started, ended, "
             "error, checkpoint, metrics, objective, epochs, stdout_log, stderr_log, proposed_by, "
             "info, bracket) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    case Query::kUpdateTrialStatus:
      return "UPDATE trials SET status = ?, placement = COALESCE(NULLIF(?, ''), placement), "
             "started = COALESCE(?, started), checkpoint = COALESCE(NULLIF(?, ''), checkpoint) "
             "WHERE sweep_id = ? AND number = ?";
    case Query::kFinishTrial:
      return "UPDATE trials SET status = ?, ended = ?, error = ?, "
             "checkpoint = COALESCE(NULLIF(?, ''), checkpoint), metrics = ?, objective = ?, "
             "epochs = ? WHERE sweep_id = ? AND number = ?";
    case Query::kAddReport:
      // A step reported again (a rerun trial going over its steps once more, or a program
      // printing one twice) keeps its first report: that is the one early stopping decided
      // on (it ignores a resource it has seen), and resume replays the stored reports in
      // order of arrival, so the replay decides exactly as the live run did.
      return "INSERT INTO reports (sweep_id, trial, step, epoch, metrics, time) "
             "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (sweep_id, trial, step) DO NOTHING";
    case Query::kTrialProgress:
      return "UPDATE trials SET metrics = ?, objective = ?, epochs = ? "
             "WHERE sweep_id = ? AND number = ? AND status = 'running'";
    case Query::kAddEvent:
      return "INSERT INTO events (sweep_id, trial, from_state, to_state, detail, time) "
             "VALUES (?, ?, ?, ?, ?, ?)";
    case Query::kBestTrialsMax:
      return "SELECT " SWEEP_TRIAL_COLUMNS
             " FROM trials WHERE sweep_id = ? AND "
             "status = 'completed' AND objective IS NOT NULL "
             "ORDER BY objective DESC, number ASC LIMIT ?";
    case Query::kBestTrialsMin:
      return "SELECT " SWEEP_TRIAL_COLUMNS
             " FROM trials WHERE sweep_id = ? AND "
             "status = 'completed' AND objective IS NOT NULL "
             "ORDER BY objective ASC, number ASC LIMIT ?";
    case Query::kTrial:
      return "SELECT " SWEEP_TRIAL_COLUMNS " FROM trials WHERE sweep_id = ? AND number = ?";
    case Query::kCountByStatus:
      return "SELECT status, COUNT(*) FROM trials WHERE sweep_id = ? GROUP BY status";
    case Query::kReports:
      return "SELECT trial, step, epoch, metrics, time FROM reports "
             "WHERE sweep_id = ? AND trial = ? ORDER BY step, id";
    case Query::kMaxTrialNumber:
      return "SELECT MAX(number) FROM trials WHERE sweep_id = ?";
    case Query::kReportAt:
      return "SELECT trial, step, epoch, metrics, time FROM reports "
             "WHERE sweep_id = ? AND trial = ? AND step = ?";
    case Query::kRewriteReport:
      // An INTEGER PRIMARY KEY may be rewritten: past the largest id, the report is the latest
      // in arrival order (kAllReports' order, which resume replays).
      return "UPDATE reports SET metrics = ?, time = ?, "
             "id = CASE WHEN ? THEN (SELECT MAX(id) + 1 FROM reports) ELSE id END "
             "WHERE sweep_id = ? AND trial = ? AND step = ?";
    case Query::kAllReports:
      return "SELECT trial, step, epoch, metrics, time FROM reports WHERE sweep_id = ? "
             "ORDER BY id";
    case Query::kSetSweepOwner:
      return "UPDATE sweeps SET owner = ?, run_options = ? WHERE id = ?";
    case Query::kSetSweepActive:
      return "UPDATE sweeps SET active_s = ?, seen = ? WHERE id = ?";
    case Query::kSetTrialRetries:
      return "UPDATE trials SET retries = ? WHERE sweep_id = ? AND number = ?";
    case Query::kSetTrialInfo:
      return "UPDATE trials SET info = ? WHERE sweep_id = ? AND number = ?";
    case Query::kSetTrialAgentLosses:
      return "UPDATE trials SET agent_losses = ? WHERE sweep_id = ? AND number = ?";
    case Query::kDropCheckpoint:
      return "UPDATE trials SET checkpoint = '' WHERE sweep_id = ? AND number = ?";
    case Query::kRowCounts:
      return "SELECT (SELECT COUNT(*) FROM trials WHERE sweep_id = ?1), "
             "(SELECT COUNT(*) FROM reports WHERE sweep_id = ?1), "
             "(SELECT COUNT(*) FROM events WHERE sweep_id = ?1)";
    case Query::kDeleteSweep:
      // Its trials, reports and events go with it (ON DELETE CASCADE).
      return "DELETE FROM sweeps WHERE id = ?";
    case Query::kSetSweepBudget:
      return "UPDATE sweeps SET max_trials = ?, time_budget_s = ? WHERE id = ?";
    case Query::kTrialEvents:
      return "SELECT from_state, to_state, detail, time FROM events "
             "WHERE sweep_id = ? AND trial = ? ORDER BY id";
    case Query::kSetSweepCarried:
      return "UPDATE sweeps SET carried = ?, sample_shift = ?, carried_from = ? WHERE id = ?";
    case Query::kCount:
      break;
  }
  return "";
}

Result<TrialsSql> BuildTrialsSql(const TrialQuery& query) {
  std::string_view key = query.sort;
  bool descending = false;
  if (!key.empty() && key.front() == '-') {
    descending = true;
    key.remove_prefix(1);
  }
  if (key.empty()) {
    return Status::InvalidArgument("empty sort key '" + query.sort +
                                   "'; use number, status, objective, started, ended, epochs "
                                   "or a metric name, with '-' in front for descending");
  }
  const char* direction = descending ? " DESC" : " ASC";

  TrialsSql out;
  out.sql = "SELECT " SWEEP_TRIAL_COLUMNS " FROM trials WHERE sweep_id = ?";
  if (query.status) out.sql += " AND status = ?";
  out.sql += " ORDER BY ";
  if (key == "number") {
    // No tie-break and no NULLS LAST: number is unique and NOT NULL, and a bare ORDER BY number
    // is what lets SQLite walk the (sweep_id, number) index instead of sorting.
    out.sql += std::string("number") + direction;
  } else if (key == "status" || key == "objective" || key == "started" || key == "ended" ||
             key == "epochs") {
    out.sql += std::string(key) + direction + " NULLS LAST, number ASC";
  } else {
    // A hyperparameter (param.NAME), a metric named explicitly (metric.NAME, where a
    // hyperparameter has the same name) or a metric. The name is bound, never pasted into the
    // SQL: as a quoted JSON path (which keeps '.' and '-' in a name literal, and lets SQLite
    // read the value straight from the JSON), or, for a name no path can spell ('"', '\\',
    // control characters), as the key json_each() compares.
    std::string_view column = "metrics";
    std::string_view name = key;
    if (key.starts_with("param.") && key.size() > 6) {
      column = "params";
      name = key.substr(6);
    } else if (key.starts_with("metric.") && key.size() > 7) {
      name = key.substr(7);
    }
    std::string value;
    if (IsPathSafe(name)) {
      value = "json_extract(" + std::string(column) + ", ?)";
      out.metric_path = "$.\"" + std::string(name) + "\"";
    } else {
      value = "(SELECT value FROM json_each(" + std::string(column) + ") WHERE key = ?)";
      out.metric_path = std::string(name);
    }
    out.sql += value + direction + " NULLS LAST, number ASC";
  }
  out.sql += " LIMIT ?";
  return out;
}

#undef SWEEP_TRIAL_COLUMNS

}  // namespace sweep::store::internal
