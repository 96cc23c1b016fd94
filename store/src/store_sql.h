// The SQL text behind sweep_store's queries, private to the store and its tests.
// Kept apart from store.cc so tests can run EXPLAIN QUERY PLAN on exactly the statements the
// Store prepares and check they use an index. Pure functions: safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "store/store.h"

namespace sweep::store::internal {

// Statements a Store prepares once and keeps for its lifetime. '?' parameters are bound in
// the order they appear.
enum class Query {
  kBegin,
  kCommit,
  kRollback,
  kInsertSweep,        // name, config_text, config_hash, config_path, metric, maximize, seed,
                       // status, created
  kFindSweep,          // name
  kListSweeps,         // (none)
  kSetSweepStatus,     // status, ended, id
  kInsertTrial,        // sweep_id, number, params, status, placement, started, ended, error,
                       // checkpoint, metrics, objective, epochs, stdout_log, stderr_log
  kUpdateTrialStatus,  // status, placement ('' keeps), started (NULL keeps), checkpoint ('' keeps),
                       // sweep_id, number
  kFinishTrial,        // status, ended, error, checkpoint ('' keeps), metrics, objective, epochs,
                       // sweep_id, number
  kAddReport,          // sweep_id, trial, step, epoch, metrics, time
  kTrialProgress,      // metrics, objective, epochs, sweep_id, number (running trials only)
  kAddEvent,           // sweep_id, trial, from_state, to_state, detail, time
  kBestTrialsMax,      // sweep_id, limit
  kBestTrialsMin,      // sweep_id, limit
  kTrial,              // sweep_id, number
  kCountByStatus,      // sweep_id
  kReports,            // sweep_id, trial
  kMaxTrialNumber,     // sweep_id
  kAllReports,         // sweep_id
  kSetSweepOwner,      // owner, run_options, id
  kSetSweepActive,     // active_s, seen, id
  kSetTrialRetries,    // retries, sweep_id, number
  kDropCheckpoint,     // sweep_id, number
  kSetTrialAgentLosses,  // agent_losses, sweep_id, number
  kReportAt,             // sweep_id, trial, step
  kRewriteReport,        // metrics, time, last (0/1), sweep_id, trial, step
  kRowCounts,            // sweep_id
  kDeleteSweep,          // id
  kSetSweepBudget,       // max_trials, time_budget_s, id
  kSetSweepCarried,      // carried, sample_shift, id
  kTrialEvents,          // sweep_id, trial
  kSetTrialInfo,         // info, sweep_id, number
  kCount,                // not a query: the number of them
};

std::string_view QuerySql(Query query);

// The SQL that takes a database from schema version `from` to `from + 1` (tests build old
// files with it).
std::string_view MigrationSql(int from);

// Trials() builds its statement from the sort key, so it is not in the table above.
struct TrialsSql {
  std::string sql;          // parameters: sweep_id, [status when filtered], [metric_path], limit
  std::string metric_path;  // bound for a metric or parameter sort: a JSON path, e.g.
                            // $."val_loss", or the bare name for json_each(); else empty
};
// InvalidArgument for an empty sort key or a metric name outside [A-Za-z0-9_.-]+.
Result<TrialsSql> BuildTrialsSql(const TrialQuery& query);

}  // namespace sweep::store::internal
