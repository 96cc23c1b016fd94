// The schema: its migrations, one per version, and how a Store reads a file's version, refuses
// a foreign or newer file, checks a file for damage and brings an older one up to date.
#include <sqlite3.h>

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "store_impl.h"
#include "store_sql.h"

namespace sweep::store {
namespace {

// Schema migrations, run in order inside one transaction: kMigrations[v] takes a database from
// user_version v to v + 1. Append a step (and bump kSchemaVersion) to change the schema; never
// edit a step that has shipped, since files in the wild already ran it.
//
// Statuses are TEXT without CHECK constraints on purpose: SQLite cannot alter a CHECK without
// rebuilding the table, and readers validate statuses when they parse rows anyway.
constexpr const char* kMigrations[] = {
    // 0 -> 1: the initial schema.
    R"sql(
CREATE TABLE sweeps (
  id          INTEGER PRIMARY KEY,
  name        TEXT    NOT NULL UNIQUE,
  config_text TEXT    NOT NULL,
  config_hash TEXT    NOT NULL,
  config_path TEXT    NOT NULL,
  metric      TEXT    NOT NULL,
  maximize    INTEGER NOT NULL,
  seed        INTEGER NOT NULL,
  status      TEXT    NOT NULL,
  created     REAL    NOT NULL,
  ended       REAL
);
CREATE TABLE trials (
  id         INTEGER PRIMARY KEY,
  sweep_id   INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  number     INTEGER NOT NULL,
  params     TEXT    NOT NULL,
  status     TEXT    NOT NULL,
  placement  TEXT    NOT NULL DEFAULT '',
  started    REAL,
  ended      REAL,
  error      TEXT    NOT NULL DEFAULT '',
  checkpoint TEXT    NOT NULL DEFAULT '',
  metrics    TEXT    NOT NULL DEFAULT '{}',
  objective  REAL,
  epochs     REAL    NOT NULL DEFAULT 0,
  UNIQUE (sweep_id, number)
);
-- BestTrials (equality on sweep_id and status, range on objective), CountByStatus (covering
-- GROUP BY status) and ListSweeps' MIN/MAX. UNIQUE (sweep_id, number) above serves lookups by
-- number, MaxTrialNumber and the default Trials() order.
CREATE INDEX trials_by_status_objective ON trials (sweep_id, status, objective);
CREATE TABLE reports (
  id       INTEGER PRIMARY KEY,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  trial    INTEGER NOT NULL,
  step     INTEGER NOT NULL,
  epoch    REAL    NOT NULL,
  metrics  TEXT    NOT NULL,
  time     REAL    NOT NULL,
  FOREIGN KEY (sweep_id, trial) REFERENCES trials (sweep_id, number) ON DELETE CASCADE
);
CREATE INDEX reports_by_trial_step ON reports (sweep_id, trial, step);
CREATE TABLE events (
  id         INTEGER PRIMARY KEY,
  sweep_id   INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  trial      INTEGER,
  from_state TEXT    NOT NULL,
  to_state   TEXT    NOT NULL,
  detail     TEXT    NOT NULL,
  time       REAL    NOT NULL,
  FOREIGN KEY (sweep_id, trial) REFERENCES trials (sweep_id, number) ON DELETE CASCADE
);
CREATE INDEX events_by_trial ON events (sweep_id, trial);
)sql",
    // 1 -> 2: resume. A trial rerun after an interruption reports its steps again, so a step is
    // stored once per trial (the rerun's report replaces the first); trials count their retries;
    // a sweep records who runs it and how long it has run in all.
    R"sql(
ALTER TABLE sweeps ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE sweeps ADD COLUMN active_s REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
DELETE FROM reports WHERE id NOT IN (SELECT MIN(id) FROM reports GROUP BY sweep_id, trial, step);
DROP INDEX reports_by_trial_step;
CREATE UNIQUE INDEX reports_by_trial_step ON reports (sweep_id, trial, step);
)sql",
    // 2 -> 3: command trials. Where a trial's program wrote its stdout and stderr.
    R"sql(
ALTER TABLE trials ADD COLUMN stdout_log TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN stderr_log TEXT NOT NULL DEFAULT '';
)sql",
    // 3 -> 4: how many times the agent running a trial was lost while it ran (a trial that
    // takes its agent down fails after a few, across resumes too).
    R"sql(
ALTER TABLE trials ADD COLUMN agent_losses INTEGER NOT NULL DEFAULT 0;
)sql",
    // 4 -> 5: the agent flags (--listen, --token-file, --no-local) of the process that runs a
    // sweep, so that a resume hint given after it died brings its agents back.
    R"sql(
ALTER TABLE sweeps ADD COLUMN run_options TEXT NOT NULL DEFAULT '';
)sql",
    // 5 -> 6: a budget given to `sweep resume --max-trials/--time-budget` in place of the
    // config's (NULL: the config's), kept for the sweep's later resumes; and, for a sweep
    // started with `run --from`, how many trials it carried over and its sampler's shift.
    R"sql(
ALTER TABLE sweeps ADD COLUMN max_trials INTEGER;
ALTER TABLE sweeps ADD COLUMN time_budget_s REAL;
ALTER TABLE sweeps ADD COLUMN carried INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sweeps ADD COLUMN sample_shift INTEGER NOT NULL DEFAULT 0;
)sql",
    // 6 -> 7: which sampler proposed a TPE sweep's trial (TPE, or its startup random trials),
    // taken for earlier trials from their start event ("local:cpu0; proposed by tpe").
    R"sql(
ALTER TABLE trials ADD COLUMN proposed_by TEXT NOT NULL DEFAULT '';
UPDATE trials SET proposed_by = COALESCE((
  SELECT substr(e.detail, instr(e.detail, '; proposed by ') + 14) FROM events e
  WHERE e.sweep_id = trials.sweep_id AND e.trial = trials.number AND e.from_state = ''
    AND instr(e.detail, '; proposed by ') > 0
  ORDER BY e.id LIMIT 1), '');
)sql",
    // 7 -> 8: what a trial's run found out that is not a metric (a folder dataset's label map
    // and its skipped files), as a JSON object.
    R"sql(
ALTER TABLE trials ADD COLUMN info TEXT NOT NULL DEFAULT '{}';
)sql",
    // 8 -> 9: the sweep `run --from` started a sweep from (taken for earlier sweeps from their
    // start event, "carried over 3 of 5 trial(s) from 'NAME'..."), and the Hyperband bracket a
    // carried trial ran in.
    R"sql(
ALTER TABLE sweeps ADD COLUMN carried_from TEXT NOT NULL DEFAULT '';
UPDATE sweeps SET carried_from = COALESCE((
  SELECT substr(d, 1, instr(d, '''') - 1) FROM (
    SELECT substr(e.detail, instr(e.detail, ' from ''') + 7) AS d FROM events e
    WHERE e.sweep_id = sweeps.id AND e.trial IS NULL AND e.from_state = ''
      AND e.detail LIKE 'carried over % from ''%'
    ORDER BY e.id LIMIT 1)), '');
ALTER TABLE trials ADD COLUMN bracket INTEGER;
)sql",
    // 9 -> 10: when the sweep's coordinator last committed, where a stopped sweep's elapsed
    // time ends (taken for earlier sweeps from their end, or their last event).
    R"sql(
ALTER TABLE sweeps ADD COLUMN seen REAL;
UPDATE sweeps SET seen = COALESCE(ended, (SELECT MAX(e.time) FROM events e
  WHERE e.sweep_id = sweeps.id));
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion,
              "each schema version needs exactly one migration step");

}  // namespace

std::string_view internal::MigrationSql(int from) {
  return from >= 0 && from < kSchemaVersion ? kMigrations[from] : "";
}

Result<bool> Store::Impl::HasNoTables() {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master", -1, &stmt, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  bool empty = rc == SQLITE_ROW && sqlite3_column_int(stmt, 0) == 0;
  sqlite3_finalize(stmt);
  if (rc != SQLITE_ROW) return Error(rc, "reading the schema");
  return empty;
}

// Whether a file with a schema version has sweep's tables: another program's database can
// carry any user_version, and would otherwise fail later on a missing table or column. Only
// what every version has is checked: the four tables and sweeps.name. Empty when it does.
Result<std::string> Store::Impl::MissingSchema() {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(
      db,
      "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
      "('sweeps', 'trials', 'reports', 'events')), "
      "(SELECT count(*) FROM pragma_table_info('sweeps') WHERE name = 'name')",
      -1, &stmt, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  const int tables = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : 0;
  const int name_column = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 1) : 0;
  sqlite3_finalize(stmt);
  if (rc != SQLITE_ROW) return Error(rc, "reading the schema");
  if (tables < 4) return std::string("it lacks sweep's tables");
  if (name_column == 0) return std::string("its sweeps table is not sweep's");
  return std::string();
}

Result<int> Store::Impl::UserVersion() {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error(rc, "reading the schema version");
  }
  rc = sqlite3_step(stmt);
  int version = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : 0;
  Status status = rc == SQLITE_ROW ? Status::Ok() : Error(rc, "reading the schema version");
  sqlite3_finalize(stmt);
  if (!status.ok()) return status;
  return version;
}

Status Store::Impl::QuickCheck() {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(3)", -1, &stmt, nullptr);
  std::string problems;
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) break;
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    const std::string line = text != nullptr ? text : "";
    if (line != "ok") problems += (problems.empty() ? "" : "; ") + line;
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return Error(rc, "checking the file");
  if (problems.empty()) return Status::Ok();
  return Status::Corruption(path + ": database file is corrupt (" + problems +
                            "); restore it from a backup, or try `sqlite3 " + path +
                            " .recover` to save what is left");
}

Status Store::Impl::ForeignDatabase() const {
  return Status::InvalidArgument(path +
                                 ": a SQLite database that sweep did not create (it has tables "
                                 "but no sweep schema); choose another database path");
}

Status Store::Impl::TooNew(int version) const {
  return Status::InvalidArgument(path + ": database schema version " + std::to_string(version) +
                                 " is newer than this sweep binary supports (" +
                                 std::to_string(kSchemaVersion) + "); upgrade sweep");
}

// Brings the schema from `version` to kSchemaVersion in one transaction, so a crash or a
// failed step leaves the file as it was.
Status Store::Impl::Migrate(int version) {
  if (version == kSchemaVersion) return Status::Ok();
  // The file's lock waited for as any write's is (WaitForLocks, LockWait); a reader's
  // in-memory copy (MigrateInMemory) has no other process to wait for.
  SWEEP_RETURN_IF_ERROR(read_only ? Exec("BEGIN IMMEDIATE", "starting the schema migration")
                                  : BeginBatch());
  Status status = MigrateInTransaction();
  if (!status.ok()) {
    Rollback();
    return status;
  }
  return Exec("COMMIT", "committing the schema migration");
}

// Replaces `db` (an older file, opened to read) with an in-memory copy of it brought to
// kSchemaVersion.
Status Store::Impl::MigrateInMemory(int version) {
  sqlite3* copy = nullptr;
  int rc = sqlite3_open_v2(":memory:", &copy, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_close(copy);
    return Status::IoError(path + ": cannot make an in-memory copy to read an older schema");
  }
  // One step copies every page under a single read transaction: a snapshot.
  sqlite3_backup* backup = sqlite3_backup_init(copy, "main", db, "main");
  rc = backup == nullptr ? sqlite3_errcode(copy) : sqlite3_backup_step(backup, -1);
  if (backup != nullptr) sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE) {
    sqlite3_close(copy);
    return Error(rc, "copying an older schema's file to read it");
  }
  sqlite3_close_v2(db);
  db = copy;
  sqlite3_extended_result_codes(db, 1);
  return Migrate(version);
}

Status Store::Impl::MigrateInTransaction() {
  // Read again under the write lock: another process may have migrated since we looked.
  SWEEP_ASSIGN_OR_RETURN(int version, UserVersion());
  if (version > kSchemaVersion) return TooNew(version);
  if (version == kSchemaVersion) return Status::Ok();
  if (version == 0) {
    // Version 0 is a new, empty file. If it already has tables it is some other program's
    // database, and adding ours to it would be a surprise.
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM sqlite_master", -1, &stmt, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    int64_t objects = rc == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : 0;
    Status status = rc == SQLITE_ROW ? Status::Ok() : Error(rc, "reading the schema");
    sqlite3_finalize(stmt);
    SWEEP_RETURN_IF_ERROR(status);
    if (objects > 0) return ForeignDatabase();
  }
  for (int step = version; step < kSchemaVersion; ++step) {
    SWEEP_RETURN_IF_ERROR(Exec(kMigrations[step], "migrating the schema from version " +
                                                      std::to_string(step) + " to " +
                                                      std::to_string(step + 1)));
  }
  return Exec("PRAGMA user_version = " + std::to_string(kSchemaVersion),
              "setting the schema version");
}

}  // namespace sweep::store
