// Store::Impl, the one SQLite connection behind a Store, and the small statement helpers every
// store .cc file uses. Private to sweep_store. Not thread-safe, as Store is not.
// Where its methods live: store.cc (opening), connection.cc (statements, write batches),
// sqlite_errors.cc (SQLite codes to Statuses), file_watch.cc (the file under a writer),
// schema.cc (versions, migrations), trials.cc (reading trial rows).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <sqlite3.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "store/store.h"
#include "store_sql.h"

namespace sweep::store {

// Which file a path names now (device and inode), or nullopt with errno set.
using FileId = std::pair<dev_t, ino_t>;
std::optional<FileId> IdOf(const std::string& path);

// Why this user may not read (or, `read_only` false, read and write) the file at `path`, with
// whose it is; empty when it may, or when there is no file.
std::string NotAllowed(const std::string& path, bool read_only);

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

inline std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt, column)));
}

inline std::optional<double> ColumnOptReal(sqlite3_stmt* stmt, int column) {
  if (sqlite3_column_type(stmt, column) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(stmt, column);
}

inline std::string JsonOrEmptyObject(std::string_view json) {
  return json.empty() ? std::string("{}") : std::string(json);
}

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
  std::array<sqlite3_stmt*, static_cast<size_t>(internal::Query::kCount)> statements{};
  // Trials() statements keyed by SQL text: a few dozen shapes at most (sort key x direction x
  // filter), since metric names are bound rather than part of the text.
  std::unordered_map<std::string, sqlite3_stmt*> trials_statements;

  ~Impl();

  // ---- opening (store.cc) ----
  // (Re)opens `db` with `flags`; `immutable` reads the file without its -wal and -shm.
  Status OpenDb(int flags, bool immutable);
  // Opens the connection and reads the schema version, falling back to an immutable read
  // where a reader must leave the folder alone or has no room for its -wal and -shm.
  Result<int> OpenAndReadVersion();
  // Refuses what is not a sweep database (or is too new) before anything is written; returns
  // the version read again where another process may have created the schema meanwhile.
  Result<int> CheckSchemaAtOpen(int version);
  // WAL mode, pragmas, migration and a quick check, for a writer.
  Status PrepareForWriting(int version);
  Status SwitchToWal();

  // ---- SQLite errors (sqlite_errors.cc) ----
  Status DiskFull(const std::string& what) const;
  Status Error(int rc, std::string_view doing) const;

  // ---- statements and write batches (connection.cc) ----
  Result<sqlite3_stmt*> Prepare(internal::Query query);
  Result<sqlite3_stmt*> PrepareTrials(const std::string& sql);
  Status Run(internal::Query query, std::string_view doing);
  Status Exec(const std::string& sql, std::string_view doing);
  Status RefuseWriteIfReadOnly() const;
  Status BeginBatch();
  Status CommitBatch();
  Status Rollback();

  // One batched single-row UPDATE: `bind_fn` binds its parameters; NotFound when no row matched.
  template <typename BindFn>
  Status Update(internal::Query query, std::string_view doing, BindFn&& bind_fn) {
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

  // Reads every row of a statement that returns rows (Prepare's or PrepareTrials', whose failure
  // is returned), bound by `bind_fn` as Update binds: `row_fn(stmt)` reads each row, and a failure
  // it returns ends the read. `binding` and `reading` say what was being done where SQLite fails.
  template <typename BindFn, typename RowFn>
  Status ReadRows(Result<sqlite3_stmt*> prepared, std::string_view binding,
                  std::string_view reading, BindFn&& bind_fn, RowFn&& row_fn) {
    SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, std::move(prepared));
    ResetOnExit reset(stmt);
    Binder bind(stmt);
    bind_fn(bind);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), binding);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) SWEEP_RETURN_IF_ERROR(row_fn(stmt));
    if (rc != SQLITE_DONE) return Error(rc, reading);
    return Status::Ok();
  }

  // ---- the file under this writer (file_watch.cc) ----
  // Every frame of the write-ahead log into the file, and the log emptied: SQLite's result
  // code, and the log's frames and those copied (fewer: a reader's snapshot held some back).
  struct Folded {
    int rc = SQLITE_OK;
    int frames = -1, copied = -1;
    bool whole() const { return rc == SQLITE_OK && frames == copied; }
  };
  Folded FoldLog();
  Status CheckLogStillThere();
  Status CheckStillTheFile();
  std::string CutShort(off_t size) const;
  void RememberLogFiles();
  std::string SetAsideLogFiles();

  // ---- schema and migrations (schema.cc) ----
  Result<bool> HasNoTables();
  Result<std::string> MissingSchema();
  Result<int> UserVersion();
  Status QuickCheck();
  Status ForeignDatabase() const;
  Status TooNew(int version) const;
  Status Migrate(int version);
  Status MigrateInMemory(int version);
  Status MigrateInTransaction();

  // ---- trial rows (trials.cc) ----
  Result<TrialRecord> ReadTrial(sqlite3_stmt* stmt) const;
  // ReadTrial's row added to `trials`: the row function of ReadRows for trial rows.
  Status AppendTrial(sqlite3_stmt* stmt, std::vector<TrialRecord>* trials) const;
  Status NoSuchTrial(int64_t sweep_id, int64_t number) const;
};

}  // namespace sweep::store
