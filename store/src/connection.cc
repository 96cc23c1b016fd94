// The Store's connection at work: its cached statements, one-off SQL, and the write batch that
// every write joins until Commit(), waiting out another process's lock when told to.
#include <sys/stat.h>

#include <sqlite3.h>

#include <chrono>
#include <string>
#include <string_view>

#include "store_impl.h"
#include "store_sql.h"

namespace sweep::store {

using internal::Query;

Store::Impl::~Impl() {
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
      FoldLog();
    }
    sqlite3_close_v2(db);
  }
}

Result<sqlite3_stmt*> Store::Impl::Prepare(Query query) {
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

Result<sqlite3_stmt*> Store::Impl::PrepareTrials(const std::string& sql) {
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
Status Store::Impl::Run(Query query, std::string_view doing) {
  SWEEP_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(query));
  ResetOnExit reset(stmt);
  int rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return Error(rc, doing);
  return Status::Ok();
}

// One-off SQL (pragmas, migrations), possibly several statements.
Status Store::Impl::Exec(const std::string& sql, std::string_view doing) {
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, doing);
  return Status::Ok();
}

Status Store::Impl::RefuseWriteIfReadOnly() const {
  if (!read_only) return Status::Ok();
  return Status::Internal(path + ": cannot write: this Store was opened read-only");
}

// Opens the write batch if none is open; later writes join it until Commit(). Another
// process holding the write lock past busy_timeout is waited for up to lock_wait, the wait
// told to on_lock_wait: nothing is written, so nothing is lost, meanwhile.
Status Store::Impl::BeginBatch() {
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

Status Store::Impl::CommitBatch() {
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

Status Store::Impl::Rollback() {
  if (sqlite3_get_autocommit(db)) return Status::Ok();
  return Run(Query::kRollback, "rolling back");
}

}  // namespace sweep::store
