// Store: the SQLite implementation of store.h (schema, migrations, batched writes, queries).
// Owns one sqlite3 connection and its cached prepared statements; every SQLite error becomes a
// Status here, naming the database path. Not thread-safe: one Store per thread, as store.h says.
#include "store/store.h"

#include <sys/stat.h>

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include "sha256.h"
#include "store_sql.h"

namespace sweep::store {

namespace {
// A file's permission bits as chmod writes them: 0644.
std::string OctalMode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Why this user may not read (or, `read_only` false, read and write) the file at `path`, with
// whose it is; empty when it may, or when there is no file.
std::string NotAllowed(const std::string& path, bool read_only) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  if (::access(path.c_str(), read_only ? R_OK : R_OK | W_OK) == 0) return "";
  return std::string(read_only ? "this user may not read it" : "this user may not write it") +
         ": " + std::strerror(errno) + "; it belongs to user " + std::to_string(st.st_uid) +
         ", mode " + OctalMode(st.st_mode);
}
}  // namespace

// ---- enums ----

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

// ---- SQL ----

namespace internal {
namespace {

// Column list shared by every query that returns TrialRecords; ReadTrial() reads this order.
#define SWEEP_TRIAL_COLUMNS                                                                    \
  "number, status, params, placement, started, ended, error, checkpoint, metrics, objective, " \
  "epochs, retries, stdout_log, stderr_log, agent_losses"

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
             "carried, "
             "sample_shift FROM sweeps WHERE name = ?";
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
             "error, checkpoint, metrics, objective, epochs, stdout_log, stderr_log) "
             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
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
      return "UPDATE sweeps SET active_s = ? WHERE id = ?";
    case Query::kSetTrialRetries:
      return "UPDATE trials SET retries = ? WHERE sweep_id = ? AND number = ?";
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
      return "UPDATE sweeps SET carried = ?, sample_shift = ? WHERE id = ?";
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

}  // namespace internal

namespace {

using internal::Query;

// Which file a path names now (device and inode), or nullopt with errno set.
using FileId = std::pair<dev_t, ino_t>;
std::optional<FileId> IdOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

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
};
static_assert(std::size(kMigrations) == kSchemaVersion,
              "each schema version needs exactly one migration step");

constexpr int kBusyTimeoutMs = 5000;

}  // namespace

std::string_view internal::MigrationSql(int from) {
  return from >= 0 && from < kSchemaVersion ? kMigrations[from] : "";
}

namespace {

// Resets a statement when it goes out of scope, so no statement is left mid-step: an
// unfinished SELECT would hold a read snapshot open (stale reads, blocked checkpoints) and an
// unfinished write would make COMMIT fail.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~ResetOnExit() { sqlite3_reset(stmt_); }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

// Binds '?' parameters left to right, keeping the first failure. Text is bound SQLITE_STATIC:
// callers step the statement before the bound strings go out of scope.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* stmt) : stmt_(stmt) {}
  Binder& Int(int64_t value) { return Check(sqlite3_bind_int64(stmt_, ++index_, value)); }
  Binder& Real(double value) { return Check(sqlite3_bind_double(stmt_, ++index_, value)); }
  Binder& OptReal(std::optional<double> value) {
    return value ? Real(*value) : Check(sqlite3_bind_null(stmt_, ++index_));
  }
  Binder& OptInt(std::optional<int64_t> value) {
    return value ? Int(*value) : Check(sqlite3_bind_null(stmt_, ++index_));
  }
  Binder& Text(std::string_view text) {
    // A null data pointer would bind SQL NULL; an empty string_view may have one.
    const char* data = text.data() != nullptr ? text.data() : "";
    return Check(
        sqlite3_bind_text(stmt_, ++index_, data, static_cast<int>(text.size()), SQLITE_STATIC));
  }
  int rc() const { return rc_; }

 private:
  Binder& Check(int rc) {
    if (rc_ == SQLITE_OK) rc_ = rc;
    return *this;
  }
  sqlite3_stmt* stmt_;
  int index_ = 0;
  int rc_ = SQLITE_OK;
};

std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt, column)));
}

std::optional<double> ColumnOptReal(sqlite3_stmt* stmt, int column) {
  if (sqlite3_column_type(stmt, column) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(stmt, column);
}

std::string JsonOrEmptyObject(std::string_view json) {
  return json.empty() ? std::string("{}") : std::string(json);
}

}  // namespace

// ---- Store::Impl ----

struct Store::Impl {
  std::string path;
  sqlite3* db = nullptr;
  bool read_only = false;
  std::chrono::milliseconds lock_wait{0};             // see Store::WaitForLocks
  std::function<bool(double waited_s)> on_lock_wait;  // after each busy wait: go on waiting?
  // The file opened for writing, to notice it removed or replaced under us.
  std::optional<FileId> identity;
  // Its write-ahead log and index (path-wal, path-shm), and whether the file was found gone.
  std::optional<FileId> wal_identity, shm_identity;
  bool file_lost = false;
  // The file's largest size seen: it never shrinks under its writers (no VACUUM, no
  // auto_vacuum), so a smaller one was cut short or written over by another program.
  off_t largest_size = 0;
  std::array<sqlite3_stmt*, static_cast<size_t>(Query::kCount)> statements{};
  // Trials() statements keyed by SQL text: a few dozen shapes at most (sort key x direction x
  // filter), since metric names are bound rather than part of the text.
  std::unordered_map<std::string, sqlite3_stmt*> trials_statements;

  ~Impl() {
    for (sqlite3_stmt* stmt : statements) sqlite3_finalize(stmt);
    for (auto& entry : trials_statements) sqlite3_finalize(entry.second);
    if (db != nullptr) {
      // Uncommitted writes are dropped, as a crash would drop them: only Commit() publishes.
      if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      if (!read_only && !file_lost) {
        // Everything into the file itself and the log emptied, so that the file alone holds
        // the store once its writer ends (a copy of it is whole, a reader that cannot write
        // the folder reads it whole as immutable), even if a reader (an open `status --watch`)
        // keeps SQLite from deleting the log at close. A reader's snapshot holds the log back
        // while it reads (milliseconds, for ours), so this waits up to 2 s for the readers to
        // finish; one that keeps a snapshot longer leaves the log for the next writer.
        sqlite3_busy_timeout(db, 2000);
        sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
      }
      sqlite3_close_v2(db);
    }
  }

  Status DiskFull(const std::string& what) const {
    return Status::IoError(path + ": disk full while " + what + "; free some space");
  }

  // The one place SQLite result codes become Statuses. `doing` says what we were doing, for
  // the messages where SQLite's own text would not explain it.
  Status Error(int rc, std::string_view doing) const {
    std::string detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    std::string what(doing);
    switch (rc & 0xff) {
      case SQLITE_BUSY:
      case SQLITE_LOCKED:
        return Status::Busy(path + ": database is locked by another process");
      case SQLITE_FULL:
        return DiskFull(what);
      case SQLITE_READONLY: {
        // Its -wal and -shm files are written too: made by another user (an older reader's, in
        // a shared folder), they are that user's.
        for (const char* suffix : {"-wal", "-shm"}) {
          const std::string log = path + suffix;
          struct stat st {};
          if (::stat(log.c_str(), &st) == 0 && ::access(log.c_str(), W_OK) != 0) {
            return Status::IoError(path + ": cannot write its " + suffix + " file " + log +
                                   " (it belongs to user " + std::to_string(st.st_uid) +
                                   " and this user may not write it) while " + what + "; if " +
                                   path + "-wal is empty (a reader's), it and " + path +
                                   "-shm may be deleted while no sweep runs on it");
          }
        }
        return Status::IoError(path + ": database is read-only while " + what + " (" + detail +
                               "); check the permissions of the file and its directory");
      }
      case SQLITE_CORRUPT: {
        // A writer opened it whole (Open's quick_check): damaged since, another program wrote
        // over it, which its size may show.
        std::string since;
        struct stat st {};
        if (identity && ::stat(path.c_str(), &st) == 0 && st.st_size < largest_size) {
          since = "; it was " + CutShort(st.st_size);
        }
        return Status::Corruption(path + ": database file is corrupt (" + detail + ")" + since +
                                  "; restore it from a backup, or try `sqlite3 " + path +
                                  " .recover` to save what is left");
      }
      case SQLITE_NOTADB:
        // A file the user named that is no database at all: a usage error, as a missing one is.
        return Status::InvalidArgument(path + ": not a SQLite database (" + detail + ")");
      case SQLITE_CANTOPEN: {
        // SQLite does not say why; the usual cause is a directory we cannot write to (the
        // database, its journal and its lock live there).
        std::string dir = std::filesystem::path(path).parent_path().string();
        if (dir.empty()) dir = ".";
        std::string why = NotAllowed(path, read_only);
        if (why.empty()) why = detail;
        if (why == detail && !read_only && ::access(dir.c_str(), W_OK) != 0) {
          why = "cannot write to its directory " + dir + ": " + std::strerror(errno);
        }
        return Status::IoError(path + ": cannot open database file (" + why + ")");
      }
      case SQLITE_IOERR: {
        // SQLite calls every failed read, write or fsync an I/O error ("disk I/O error"); the
        // system's errno tells a full disk or a read-only mount, which the user can fix, from
        // a failing disk.
        switch (db != nullptr ? sqlite3_system_errno(db) : 0) {
          case ENOSPC:
            return DiskFull(what);
          case EDQUOT:
            return Status::IoError(path + ": disk quota exceeded while " + what +
                                   "; free some space");
          case EROFS:
            return Status::IoError(path + ": read-only file system while " + what);
          case EFBIG:
            return Status::IoError(path + ": the file size limit (ulimit -f) was reached while " +
                                   what);
          case EACCES:
          case EPERM:
            return Status::IoError(path + ": permission denied while " + what + " (" + detail +
                                   ")");
          default:
            return Status::IoError(path + ": I/O error while " + what + " (" + detail + ")");
        }
      }
      case SQLITE_PERM:
      case SQLITE_AUTH:
        return Status::IoError(path + ": permission denied while " + what + " (" + detail + ")");
      case SQLITE_NOMEM:
        return Status::IoError(path + ": out of memory while " + what);
      case SQLITE_CONSTRAINT:
        return Status::InvalidArgument(path + ": " + what + ": " + detail);
      default:
        return Status::Internal(path + ": " + what + ": " + detail + " (SQLite error " +
                                std::to_string(rc) + ")");
    }
  }

  Result<sqlite3_stmt*> Prepare(Query query) {
    sqlite3_stmt*& stmt = statements[static_cast<size_t>(query)];
    if (stmt != nullptr) return stmt;
    std::string_view sql = internal::QuerySql(query);
    int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      stmt = nullptr;
      return Error(rc, "preparing a query");
    }
    return stmt;
  }

  Result<sqlite3_stmt*> PrepareTrials(const std::string& sql) {
    auto found = trials_statements.find(sql);
    if (found != trials_statements.end()) return found->second;
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db, sql.c_str(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return Error(rc, "preparing the trials query");
    }
    trials_statements.emplace(sql, stmt);
    return stmt;
  }

  // Runs a cached statement that returns no rows.
  Status Run(Query query, std::string_view doing) {
    SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(query));
    ResetOnExit reset(stmt);
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return Error(rc, doing);
    return Status::Ok();
  }

  // One-off SQL (pragmas, migrations), possibly several statements.
  Status Exec(const std::string& sql, std::string_view doing) {
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return Error(rc, doing);
    return Status::Ok();
  }

  Status RefuseWriteIfReadOnly() const {
    if (!read_only) return Status::Ok();
    return Status::Internal(path + ": cannot write: this Store was opened read-only");
  }

  // Opens the write batch if none is open; later writes join it until Commit(). Another
  // process holding the write lock past busy_timeout is waited for up to lock_wait, the wait
  // told to on_lock_wait: nothing is written, so nothing is lost, meanwhile.
  Status BeginBatch() {
    SWEEP_RETURN_IF_ERROR(RefuseWriteIfReadOnly());
    if (!sqlite3_get_autocommit(db)) return Status::Ok();
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      Status begun = Run(Query::kBegin, "starting a write transaction");
      if (begun.ok() || begun.code() != Status::Code::kBusy) return begun;
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited >= lock_wait) {
        if (lock_wait.count() == 0) return begun;
        return Status::IoError(path + ": locked by another process for over " +
                               std::to_string(lock_wait.count() / 1000) +
                               " s (a sqlite3 shell or a viewer holding a write transaction?); "
                               "what was stored before is kept");
      }
      if (on_lock_wait && !on_lock_wait(std::chrono::duration<double>(waited).count())) {
        return Status::IoError(path +
                               ": locked by another process (a sqlite3 shell or a viewer "
                               "holding a write transaction?); stopped waiting to write when "
                               "interrupted; what was stored before is kept");
      }
    }
  }

  // One batched single-row UPDATE: `bind_fn` binds its parameters; NotFound when no row matched.
  template <typename BindFn>
  Status Update(Query query, std::string_view doing, BindFn&& bind_fn) {
    SWEEP_RETURN_IF_ERROR(BeginBatch());
    SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(query));
    ResetOnExit reset(stmt);
    Binder bind(stmt);
    bind_fn(bind);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), doing);
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return Error(rc, doing);
    if (sqlite3_changes(db) == 0) {
      return Status::NotFound(path + ": nothing matched when " + std::string(doing));
    }
    return Status::Ok();
  }

  Status CommitBatch() {
    if (sqlite3_get_autocommit(db)) return Status::Ok();
    SWEEP_RETURN_IF_ERROR(CheckStillTheFile());
    SWEEP_RETURN_IF_ERROR(Run(Query::kCommit, "committing"));
    // The commit may have checkpointed the log into the file, which grew.
    struct stat st {};
    if (identity && ::stat(path.c_str(), &st) == 0 && st.st_size > largest_size) {
      largest_size = st.st_size;
    }
    return CheckLogStillThere();
  }

  // The write-ahead log deleted under this writer (a clean-up's `rm *-wal`): SQLite goes on
  // committing into the deleted file, where no reader sees the commits and a crash loses them.
  // They are moved into the database file at once (a checkpoint, through the open log), and
  // the sweep stops rather than commit more there; a resume makes a new log.
  Status CheckLogStillThere() {
    if (!wal_identity || IdOf(path + "-wal") == wal_identity) return Status::Ok();
    wal_identity.reset();
    // Every frame of the log into the file: a reader's snapshot can hold the checkpoint back
    // (it says so in the frame counts and SQLITE_BUSY, which the PRAGMA's result code hides),
    // and is waited for as any lock is.
    int frames = -1, copied = -1;
    const int rc =
        sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &frames, &copied);
    if (rc != SQLITE_OK || frames != copied) {
      return Status::IoError(
          path + ": its write-ahead log " + path +
          "-wal was deleted while this sweep wrote to it, and its commits could not all be moved "
          "into the file (" +
          (frames >= 0 && copied >= 0 && frames != copied
               ? "a reader held " + std::to_string(frames - copied) + " of " +
                     std::to_string(frames) + " pages back"
               : std::string(sqlite3_errmsg(db))) +
          "): the sweep stops; it moves them as it closes if that reader is done by then, and "
          "those left are lost");
    }
    return Status::IoError(path + ": its write-ahead log " + path +
                           "-wal was deleted while this sweep wrote to it; every commit was "
                           "moved into the file, and the sweep stops rather than commit where "
                           "no reader finds it: resume it to go on");
  }

  // The file at `path` is still the one this Store writes: removed, or replaced by another
  // (a copy moved over it, a restore from backup), it would take every later commit with it.
  Status CheckStillTheFile() {
    if (!identity) return Status::Ok();
    struct stat st {};
    const bool there = ::stat(path.c_str(), &st) == 0;
    if (!there && errno != ENOENT) return Status::Ok();  // cannot tell: SQLite will say
    const std::optional<FileId> now =
        there ? std::optional<FileId>(FileId{st.st_dev, st.st_ino}) : std::nullopt;
    const bool cut = now == identity && st.st_size < largest_size;
    if (now == identity && !cut) {
      largest_size = st.st_size;
      RememberLogFiles();
      return Status::Ok();
    }
    const bool removed = !now;
    file_lost = true;
    if (cut) {
      // Still this file, damaged: its log stays beside it, holding the last commits.
      return Status::IoError(path + ": the database file was " + CutShort(st.st_size) +
                             ", and it is damaged; nothing more is written. Restore it from a "
                             "backup, or try `sqlite3 " +
                             path + " .recover` to save what is left");
    }
    const std::string kept = SetAsideLogFiles();
    std::string msg =
        path + (removed ? ": the database file was removed or renamed while this sweep wrote to "
                          "it; nothing more is written"
                        : ": the database file was replaced by another file while this sweep "
                          "wrote to it; nothing more is written (to either file)");
    if (!kept.empty()) {
      msg += ". Its last commits, not yet in that file, are in its write-ahead log, set aside as " +
             kept + " so that no database put at " + path +
             " takes them for its own: to keep them, put the file that was there back and " + kept +
             " at " + path + "-wal";
    }
    return Status::IoError(msg);
  }

  // What the file being `size` bytes, less than it was under this writer, means: "cut short
  // (from ...) ...".
  std::string CutShort(off_t size) const {
    return "cut short (from " + std::to_string(largest_size) + " to " + std::to_string(size) +
           " bytes) while this sweep wrote to it: another program wrote over it (a copy onto it, "
           "a truncate)";
  }

  // The identities of this connection's write-ahead log and its index, once they exist.
  void RememberLogFiles() {
    if (!wal_identity) wal_identity = IdOf(path + "-wal");
    if (!shm_identity) shm_identity = IdOf(path + "-shm");
  }

  // The database this Store wrote is no longer at `path`, but its write-ahead log is: SQLite
  // would replay it into whatever file is put there next (a restored backup), overwriting it.
  // Renamed aside (the log, which holds commits) or removed (the index, rebuilt from the log);
  // returns the log's new name, or "" when no log of this connection was there.
  std::string SetAsideLogFiles() {
    auto ours = [](const std::string& file, const std::optional<FileId>& id) {
      return id && IdOf(file) == id;
    };
    if (ours(path + "-shm", shm_identity)) ::unlink((path + "-shm").c_str());
    if (!ours(path + "-wal", wal_identity)) return "";
    const std::string kept = path + "-wal.orphaned-" + std::to_string(::getpid());
    if (::rename((path + "-wal").c_str(), kept.c_str()) != 0) {
      ::unlink((path + "-wal").c_str());
      return "";
    }
    return kept;
  }

  Status Rollback() {
    if (sqlite3_get_autocommit(db)) return Status::Ok();
    return Run(Query::kRollback, "rolling back");
  }

  Result<bool> HasNoTables() {
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
  Result<std::string> MissingSchema() {
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

  Result<int> UserVersion() {
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

  Status QuickCheck() {
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

  Status ForeignDatabase() const {
    return Status::InvalidArgument(path +
                                   ": a SQLite database that sweep did not create (it has tables "
                                   "but no sweep schema); choose another database path");
  }

  Status TooNew(int version) const {
    return Status::InvalidArgument(path + ": database schema version " + std::to_string(version) +
                                   " is newer than this sweep binary supports (" +
                                   std::to_string(kSchemaVersion) + "); upgrade sweep");
  }

  // Brings the schema from `version` to kSchemaVersion in one transaction, so a crash or a
  // failed step leaves the file as it was.
  Status Migrate(int version) {
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
  Status MigrateInMemory(int version) {
    sqlite3* copy = nullptr;
    int rc =
        sqlite3_open_v2(":memory:", &copy, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
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

  Status MigrateInTransaction() {
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

  Result<TrialRecord> ReadTrial(sqlite3_stmt* stmt) const {
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
    return trial;
  }

  // Steps a statement returning trial rows (already bound) to the end.
  Result<std::vector<TrialRecord>> ReadTrials(sqlite3_stmt* stmt, std::string_view doing) const {
    std::vector<TrialRecord> trials;
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      SWEEP_ASSIGN_OR_RETURN(TrialRecord trial, ReadTrial(stmt));
      trials.push_back(std::move(trial));
    }
    if (rc != SQLITE_DONE) return Error(rc, doing);
    return trials;
  }

  Status NoSuchTrial(int64_t sweep_id, int64_t number) const {
    return Status::NotFound("no trial " + std::to_string(number) + " in sweep id " +
                            std::to_string(sweep_id) + " in " + path);
  }
};

namespace {

// Whether a reader must leave the folder of `path` as it is: no -wal file is beside it (no
// writer is at work), and this process cannot write the folder, or cannot write the file. A
// reader of a WAL database makes the -wal and -shm files; made by a user who may not write the
// database (another user, in a shared folder), they would be that user's, and its owner could
// no longer write it (root's are given to the database's owner, so root is never refused here).
// The file `path` names, through links (SQLite keeps its -wal and -shm beside that file).
std::string RealPath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path file = std::filesystem::canonical(path, ec);
  return ec ? path : file.string();
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

bool CanOnlyReadInPlace(const std::string& path) {
  // SQLite follows a link to the file it names, and keeps the -wal beside the file itself.
  const std::filesystem::path file = RealPath(path);
  if (Exists(file.string() + "-wal")) return false;
  std::filesystem::path dir = file.parent_path();
  if (dir.empty()) dir = ".";
  return ::access(dir.c_str(), W_OK) != 0 || ::access(file.c_str(), W_OK) != 0;
}

// `path` for a file: URI (percent-encoding what a URI would read as syntax).
std::string UriPath(const std::string& path) {
  std::string out;
  for (char ch : path) {
    if (ch == '%' || ch == '?' || ch == '#') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(ch));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

// ---- Store ----

Store::Store(std::string path, std::unique_ptr<Impl> impl)
    : path_(std::move(path)), impl_(std::move(impl)) {}

Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::Open(const std::string& path, OpenMode mode, LockWait wait) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->read_only = mode == OpenMode::kReadOnly;
  impl->lock_wait = wait.limit;
  impl->on_lock_wait = std::move(wait.on_wait);

  int flags = SQLITE_OPEN_NOMUTEX;  // one Store per thread, so SQLite's own mutex is waste
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  if (type == std::filesystem::file_type::directory) {
    // SQLite would say "disk I/O error" (reading) or "unable to open" (writing).
    return Status::InvalidArgument(path + ": is a directory, not a database file");
  }
  if (!ec && type != std::filesystem::file_type::not_found &&
      type != std::filesystem::file_type::regular) {
    // SQLite would wait forever to read a FIFO's header, and has no business with a device or
    // a socket either.
    return Status::InvalidArgument(path + ": not a regular file");
  }
  if (!impl->read_only && type == std::filesystem::file_type::regular) {
    // SQLite would open it read-only and make its -wal and -shm files, this user's, which would
    // then keep the owner from writing it: refused before SQLite touches it.
    if (const std::string why = NotAllowed(path, /*read_only=*/false); !why.empty()) {
      return Status::IoError(path + ": cannot open database file (" + why + ")");
    }
    // SQLite keeps a database's write-ahead log and locks beside the name it was opened by, and
    // so does our lock: writers through two hard links of one file would each have their own,
    // both run, and the file would be corrupted.
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && st.st_nlink > 1) {
      return Status::InvalidArgument(
          path + ": the file has " + std::to_string(st.st_nlink) +
          " names (hard links), and a sweep database must have one: a writer through each name "
          "would get its own write-ahead log and lock; copy it to a file of its own");
    }
  }
  if (impl->read_only) {
    // SQLite would report CANTOPEN for a missing file; say plainly that it is missing.
    if (type == std::filesystem::file_type::not_found) {
      return Status::NotFound(path + ": no such database");
    }
    flags |= SQLITE_OPEN_READONLY;
  } else {
    flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  }
  // A reader of a WAL database makes its -wal and -shm files beside it. Where it must not (see
  // CanOnlyReadInPlace), the file is complete and unchanging (with no -wal, the last writer
  // closed it cleanly, and none is at work): read it as immutable, which needs neither.
  bool in_place = impl->read_only && CanOnlyReadInPlace(path);
  // A file the last writer closed cleanly (no -wal) is read as immutable also where a reader
  // cannot make its -wal and -shm for want of space (a full disk).
  const std::string real = RealPath(path);
  const bool had_wal = Exists(real + "-wal"), had_shm = Exists(real + "-shm");
  const auto open = [&] {
    if (impl->db != nullptr) sqlite3_close_v2(impl->db);
    impl->db = nullptr;
    int rc = in_place ? sqlite3_open_v2(("file:" + UriPath(path) + "?immutable=1").c_str(),
                                        &impl->db, flags | SQLITE_OPEN_URI, nullptr)
                      : sqlite3_open_v2(path.c_str(), &impl->db, flags, nullptr);
    if (rc != SQLITE_OK) return impl->Error(rc, "opening the database");
    sqlite3_extended_result_codes(impl->db, 1);
    sqlite3_busy_timeout(impl->db, kBusyTimeoutMs);
    return Status::Ok();
  };
  SWEEP_RETURN_IF_ERROR(open());

  // Reading the version is also the first read of the file header: a file that is not a
  // database fails here with NOTADB.
  Result<int> read = impl->UserVersion();
  const bool no_space = (sqlite3_errcode(impl->db) & 0xff) == SQLITE_FULL ||
                        ((sqlite3_errcode(impl->db) & 0xff) == SQLITE_IOERR &&
                         sqlite3_system_errno(impl->db) == ENOSPC);
  if (!read.ok() && impl->read_only && !in_place && !had_wal && no_space) {
    sqlite3_close_v2(impl->db);
    impl->db = nullptr;
    // What this open made and could not fill, and nobody else uses (no -wal: no writer).
    std::error_code left;
    if (std::filesystem::file_size(real + "-wal", left) == 0 && !left) {
      std::filesystem::remove(real + "-wal", left);
    }
    if (!had_shm && !Exists(real + "-wal")) std::filesystem::remove(real + "-shm", left);
    in_place = true;
    SWEEP_RETURN_IF_ERROR(open());
    read = impl->UserVersion();
  }
  if (in_place) {
    // A writer (another user, who may write there) that opened it meanwhile has made a -wal
    // file: an immutable reader would not see its commits. Refuse rather than read stale data.
    if (read.ok() && Exists(real + "-wal")) {
      return Status::IoError(path +
                             ": being written by another user while this one cannot "
                             "write it or its folder; read it again when that sweep ends");
    }
  }
  SWEEP_ASSIGN_OR_RETURN(int version, std::move(read));
  if (impl->read_only && version == 0) {
    // A file with no schema at all is one that `sweep run` is creating this instant. One with
    // tables may have had its schema committed (with its version) since the version was read:
    // look again.
    SWEEP_ASSIGN_OR_RETURN(bool empty, impl->HasNoTables());
    if (empty) return Status::NotFound(path + ": no sweep recorded yet (a new database)");
    SWEEP_ASSIGN_OR_RETURN(version, impl->UserVersion());
    if (version == 0) {
      return Status::InvalidArgument(path + ": not a sweep database (it has no sweep schema)");
    }
  }
  if (version > kSchemaVersion) return impl->TooNew(version);
  if (version > 0) {
    // Checked before anything is written: a foreign file is left as it was (not even
    // switched to WAL).
    SWEEP_ASSIGN_OR_RETURN(std::string missing, impl->MissingSchema());
    if (!missing.empty())
      return Status::InvalidArgument(path + ": not a sweep database (" + missing + ")");
  }

  if (!impl->read_only && version == 0) {
    // Version 0 with tables is some other program's database: refused before anything is
    // written (not even switched to WAL). MigrateInTransaction checks again under the lock.
    SWEEP_ASSIGN_OR_RETURN(bool empty, impl->HasNoTables());
    if (!empty) {
      // Or another `sweep run` created the schema between the two reads: look again.
      SWEEP_ASSIGN_OR_RETURN(version, impl->UserVersion());
      if (version == 0) return impl->ForeignDatabase();
      if (version > kSchemaVersion) return impl->TooNew(version);
      SWEEP_ASSIGN_OR_RETURN(std::string missing, impl->MissingSchema());
      if (!missing.empty())
        return Status::InvalidArgument(path + ": not a sweep database (" + missing + ")");
    }
  }
  if (!impl->read_only) {
    // WAL lets readers (sweep status, dashboards) run while the coordinator writes; NORMAL
    // sync is durable across process crashes and only risks the last commits on power loss.
    // Switching a new file to WAL needs it to itself, and SQLite answers BUSY at once, without
    // its busy handler, while another process is doing the same (two sweeps started together
    // on a new file): wait for that one here, as busy_timeout would.
    // Another process's write lock held past that is waited for as a write waits for it
    // (LockWait), said every busy timeout.
    const auto start = std::chrono::steady_clock::now();
    auto said = start;
    const auto limit = std::max(impl->lock_wait, std::chrono::milliseconds(kBusyTimeoutMs));
    for (int attempt = 0;; ++attempt) {
      Status wal = impl->Exec("PRAGMA journal_mode = WAL", "enabling WAL mode");
      if (wal.ok()) break;
      if (wal.code() != Status::Code::kBusy) return wal;
      const auto now = std::chrono::steady_clock::now();
      if (now - start >= limit) {
        if (impl->lock_wait.count() == 0) return wal;
        return Status::IoError(path + ": locked by another process for over " +
                               std::to_string(impl->lock_wait.count() / 1000) +
                               " s (a sqlite3 shell or a viewer holding a write transaction?)");
      }
      if (now - said >= std::chrono::milliseconds(kBusyTimeoutMs)) {
        said = now;
        if (impl->on_lock_wait &&
            !impl->on_lock_wait(std::chrono::duration<double>(now - start).count())) {
          return Status::IoError(path +
                                 ": locked by another process (a sqlite3 shell or a viewer "
                                 "holding a write transaction?); stopped waiting when "
                                 "interrupted");
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 + 5 * attempt, 50)));
    }
    SWEEP_RETURN_IF_ERROR(impl->Exec("PRAGMA synchronous = NORMAL", "setting synchronous"));
    // A reader holding one snapshot for long (a notebook's open cursor) keeps checkpoints from
    // reaching the log's start, and the log grows meanwhile; once they can, it is cut back to
    // this size rather than kept at its largest.
    SWEEP_RETURN_IF_ERROR(
        impl->Exec("PRAGMA journal_size_limit = 67108864", "limiting the write-ahead log"));
    SWEEP_RETURN_IF_ERROR(impl->Exec("PRAGMA foreign_keys = ON", "enabling foreign keys"));
    SWEEP_RETURN_IF_ERROR(impl->Migrate(version));
    // A damaged file (a disk's bad sector, a copy taken mid-write) is said so before a sweep
    // writes into it and spreads the damage: PRAGMA quick_check reads every page (about 2 ms a
    // MB), without the index cross-checks of integrity_check.
    if (version > 0) SWEEP_RETURN_IF_ERROR(impl->QuickCheck());
    impl->identity = IdOf(path);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) impl->largest_size = st.st_size;
    impl->RememberLogFiles();
  } else if (version < kSchemaVersion) {
    // An older file is a reader's to read, not to change (its folder may not even be
    // writable, and the binary writing it may still be running): copy it into memory, as one
    // consistent snapshot, and migrate the copy. The next command that writes migrates the
    // file itself.
    SWEEP_RETURN_IF_ERROR(impl->MigrateInMemory(version));
  }
  std::string store_path = path;
  return std::unique_ptr<Store>(new Store(std::move(store_path), std::move(impl)));
}

bool Store::file_lost() const { return impl_->file_lost; }

Status Store::CheckFile() {
  SWEEP_RETURN_IF_ERROR(impl_->CommitBatch());
  Status status = impl_->QuickCheck();
  if (status.code() != Status::Code::kCorruption) return status;
  return Status::Corruption(status.message() +
                            "; it was whole when the sweep opened it: another program wrote "
                            "over it while the sweep ran (a copy onto it, a truncate), or the "
                            "disk failed");
}

// ---- sweeps ----

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
  return sweep;
}

Result<std::vector<SweepSummary>> Store::ListSweeps() {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kListSweeps));
  ResetOnExit reset(stmt);
  std::vector<SweepSummary> sweeps;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
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
  }
  if (rc != SQLITE_DONE) return impl_->Error(rc, "listing sweeps");
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

// ---- batched writes ----

Status Store::InsertTrial(int64_t sweep_id, const TrialRecord& trial) {
  SWEEP_RETURN_IF_ERROR(impl_->BeginBatch());
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kInsertTrial));
  ResetOnExit reset(stmt);
  std::string params = JsonOrEmptyObject(trial.params_json);
  std::string metrics = JsonOrEmptyObject(trial.metrics_json);
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
      .Text(trial.stderr_log);
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

Status Store::Commit() { return impl_->CommitBatch(); }

void Store::WaitForLocks(LockWait wait) {
  impl_->lock_wait = wait.limit;
  impl_->on_lock_wait = std::move(wait.on_wait);
}

Status Store::ReadTogether(const std::function<Status()>& reads) {
  if (!sqlite3_get_autocommit(impl_->db)) return reads();  // inside the write batch
  SWEEP_RETURN_IF_ERROR(impl_->Exec("BEGIN DEFERRED", "starting a read transaction"));
  Status status = reads();
  Status ended = impl_->Exec(status.ok() ? "COMMIT" : "ROLLBACK", "ending a read transaction");
  return status.ok() ? ended : status;
}

// ---- queries ----

Result<std::vector<TrialRecord>> Store::BestTrials(int64_t sweep_id, bool maximize, int64_t top) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                         impl_->Prepare(maximize ? Query::kBestTrialsMax : Query::kBestTrialsMin));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id).Int(top);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the best-trials query");
  return impl_->ReadTrials(stmt, "reading the best trials");
}

Result<std::vector<TrialRecord>> Store::Trials(int64_t sweep_id, const TrialQuery& query) {
  SWEEP_ASSIGN_OR_RETURN(internal::TrialsSql sql, internal::BuildTrialsSql(query));
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->PrepareTrials(sql.sql));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id);
  if (query.status) bind.Text(ToString(*query.status));
  if (!sql.metric_path.empty()) bind.Text(sql.metric_path);
  bind.Int(query.limit < 0 ? -1 : query.limit);  // SQLite reads a negative LIMIT as "no limit"
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the trials query");
  return impl_->ReadTrials(stmt, "reading trials");
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
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kCountByStatus));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the count query");
  StatusCounts counts;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
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
  }
  if (rc != SQLITE_DONE) return impl_->Error(rc, "counting trials");
  return counts;
}

namespace {
Result<std::vector<ReportRecord>> StepReports(sqlite3_stmt* stmt) {
  std::vector<ReportRecord> reports;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    ReportRecord report;
    report.trial = sqlite3_column_int64(stmt, 0);
    report.step = sqlite3_column_int64(stmt, 1);
    report.epoch = sqlite3_column_double(stmt, 2);
    report.metrics_json = ColumnText(stmt, 3);
    report.time_s = sqlite3_column_double(stmt, 4);
    reports.push_back(std::move(report));
  }
  if (rc != SQLITE_DONE) return Status::IoError(std::to_string(rc));
  return reports;
}
}  // namespace

Result<std::vector<ReportRecord>> Store::Reports(int64_t sweep_id, int64_t trial_number) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kReports));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id).Int(trial_number);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the reports query");
  auto reports = StepReports(stmt);
  if (!reports.ok()) {
    return impl_->Error(sqlite3_errcode(impl_->db),
                        "reading the reports of trial " + std::to_string(trial_number));
  }
  return reports;
}

Result<std::vector<EventRecord>> Store::TrialEvents(int64_t sweep_id, int64_t trial_number) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kTrialEvents));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id).Int(trial_number);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the events query");
  std::vector<EventRecord> events;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    EventRecord e;
    e.from = ColumnText(stmt, 0);
    e.to = ColumnText(stmt, 1);
    e.detail = ColumnText(stmt, 2);
    e.time_s = sqlite3_column_double(stmt, 3);
    events.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) {
    return impl_->Error(rc, "reading the events of trial " + std::to_string(trial_number));
  }
  return events;
}

Result<std::optional<ReportRecord>> Store::ReportAt(int64_t sweep_id, int64_t trial, int64_t step) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kReportAt));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id).Int(trial).Int(step);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the report query");
  auto reports = StepReports(stmt);
  if (!reports.ok()) {
    return impl_->Error(sqlite3_errcode(impl_->db), "reading step " + std::to_string(step) +
                                                        " of trial " + std::to_string(trial));
  }
  if (reports->empty()) return std::optional<ReportRecord>();
  return std::optional<ReportRecord>(std::move(reports->front()));
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
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, impl_->Prepare(Query::kAllReports));
  ResetOnExit reset(stmt);
  Binder bind(stmt);
  bind.Int(sweep_id);
  if (bind.rc() != SQLITE_OK) return impl_->Error(bind.rc(), "binding the reports query");
  auto reports = StepReports(stmt);
  if (!reports.ok()) return impl_->Error(sqlite3_errcode(impl_->db), "reading the reports");
  return reports;
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

Status Store::SetSweepCarried(int64_t sweep_id, int64_t carried, int64_t sample_shift) {
  return impl_->Update(Query::kSetSweepCarried, "recording the trials carried over",
                       [&](Binder& b) { b.Int(carried).Int(sample_shift).Int(sweep_id); });
}

Status Store::SetSweepActive(int64_t sweep_id, double active_s) {
  return impl_->Update(Query::kSetSweepActive, "recording the sweep's running time",
                       [&](Binder& b) { b.Real(active_s).Int(sweep_id); });
}

Status Store::SetTrialRetries(int64_t sweep_id, int64_t number, int retries) {
  return impl_->Update(Query::kSetTrialRetries,
                       "recording the retries of trial " + std::to_string(number),
                       [&](Binder& b) { b.Int(retries).Int(sweep_id).Int(number); });
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
