// Store::Open, and the calls on the whole file (Commit, ReadTogether, CheckFile). Open refuses
// what is not a sweep database before SQLite writes to it, reads in place where a reader must
// leave its folder alone, and readies a writer's file. One Store per thread, as store.h says.
#include "store/store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "store_impl.h"

namespace sweep::store {
namespace {

constexpr int kBusyTimeoutMs = 5000;

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

// Whether a reader must leave the folder of `path` as it is: no -wal file is beside it (no
// writer is at work), and this process cannot write the folder, or cannot write the file. A
// reader of a WAL database makes the -wal and -shm files; made by a user who may not write the
// database (another user, in a shared folder), they would be that user's, and its owner could
// no longer write it (root's are given to the database's owner, so root is never refused here).
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

// What is refused before SQLite touches `path`: a directory, a FIFO or device, a file this
// user may not write (for a writer) or one with several names, and a missing file (for a
// reader).
Status CheckOpenable(const std::string& path, bool read_only) {
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
  if (!read_only && type == std::filesystem::file_type::regular) {
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
  // SQLite would report CANTOPEN for a missing file; say plainly that it is missing.
  if (read_only && type == std::filesystem::file_type::not_found) {
    return Status::NotFound(path + ": no such database");
  }
  return Status::Ok();
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
  SWEEP_RETURN_IF_ERROR(CheckOpenable(path, impl->read_only));
  SWEEP_ASSIGN_OR_RETURN(int version, impl->OpenAndReadVersion());
  SWEEP_ASSIGN_OR_RETURN(version, impl->CheckSchemaAtOpen(version));
  if (!impl->read_only) {
    SWEEP_RETURN_IF_ERROR(impl->PrepareForWriting(version));
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

Status Store::Commit() { return impl_->CommitBatch(); }

Result<bool> Store::FoldLog() {
  if (impl_->read_only || impl_->file_lost) return true;
  SWEEP_RETURN_IF_ERROR(Commit());
  const Impl::Folded folded = impl_->FoldLog();
  if (folded.rc == SQLITE_BUSY) return false;
  if (folded.rc != SQLITE_OK) {
    return impl_->Error(folded.rc, "moving the write-ahead log into the file");
  }
  return folded.whole();
}

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

// ---- opening, step by step ----

Status Store::Impl::OpenDb(int flags, bool immutable) {
  if (db != nullptr) sqlite3_close_v2(db);
  db = nullptr;
  int rc = immutable ? sqlite3_open_v2(("file:" + UriPath(path) + "?immutable=1").c_str(), &db,
                                       flags | SQLITE_OPEN_URI, nullptr)
                     : sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "opening the database");
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  return Status::Ok();
}

Result<int> Store::Impl::OpenAndReadVersion() {
  // One Store per thread, so SQLite's own mutex is waste.
  const int flags = SQLITE_OPEN_NOMUTEX |
                    (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  // A reader of a WAL database makes its -wal and -shm files beside it. Where it must not (see
  // CanOnlyReadInPlace), the file is complete and unchanging (with no -wal, the last writer
  // closed it cleanly, and none is at work): read it as immutable, which needs neither.
  bool in_place = read_only && CanOnlyReadInPlace(path);
  // A file the last writer closed cleanly (no -wal) is read as immutable also where a reader
  // cannot make its -wal and -shm for want of space (a full disk).
  const std::string real = RealPath(path);
  const bool had_wal = Exists(real + "-wal"), had_shm = Exists(real + "-shm");
  SWEEP_RETURN_IF_ERROR(OpenDb(flags, in_place));

  // Reading the version is also the first read of the file header: a file that is not a
  // database fails here with NOTADB.
  Result<int> read = UserVersion();
  const bool no_space =
      (sqlite3_errcode(db) & 0xff) == SQLITE_FULL ||
      ((sqlite3_errcode(db) & 0xff) == SQLITE_IOERR && sqlite3_system_errno(db) == ENOSPC);
  if (!read.ok() && read_only && !in_place && !had_wal && no_space) {
    sqlite3_close_v2(db);
    db = nullptr;
    // What this open made and could not fill, and nobody else uses (no -wal: no writer).
    std::error_code left;
    if (std::filesystem::file_size(real + "-wal", left) == 0 && !left) {
      std::filesystem::remove(real + "-wal", left);
    }
    if (!had_shm && !Exists(real + "-wal")) std::filesystem::remove(real + "-shm", left);
    in_place = true;
    SWEEP_RETURN_IF_ERROR(OpenDb(flags, in_place));
    read = UserVersion();
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
  return read;
}

Result<int> Store::Impl::CheckSchemaAtOpen(int version) {
  if (read_only && version == 0) {
    // A file with no schema at all is one that `sweep run` is creating this instant. One with
    // tables may have had its schema committed (with its version) since the version was read:
    // look again.
    SWEEP_ASSIGN_OR_RETURN(bool empty, HasNoTables());
    if (empty) return Status::NotFound(path + ": no sweep recorded yet (a new database)");
    SWEEP_ASSIGN_OR_RETURN(version, UserVersion());
    if (version == 0) {
      return Status::InvalidArgument(path + ": not a sweep database (it has no sweep schema)");
    }
  }
  if (version > kSchemaVersion) return TooNew(version);
  if (version > 0) {
    // Checked before anything is written: a foreign file is left as it was (not even
    // switched to WAL).
    SWEEP_ASSIGN_OR_RETURN(std::string missing, MissingSchema());
    if (!missing.empty())
      return Status::InvalidArgument(path + ": not a sweep database (" + missing + ")");
  }

  if (!read_only && version == 0) {
    // Version 0 with tables is some other program's database: refused before anything is
    // written (not even switched to WAL). MigrateInTransaction checks again under the lock.
    SWEEP_ASSIGN_OR_RETURN(bool empty, HasNoTables());
    if (!empty) {
      // Or another `sweep run` created the schema between the two reads: look again.
      SWEEP_ASSIGN_OR_RETURN(version, UserVersion());
      if (version == 0) return ForeignDatabase();
      if (version > kSchemaVersion) return TooNew(version);
      SWEEP_ASSIGN_OR_RETURN(std::string missing, MissingSchema());
      if (!missing.empty())
        return Status::InvalidArgument(path + ": not a sweep database (" + missing + ")");
    }
  }
  return version;
}

Status Store::Impl::PrepareForWriting(int version) {
  SWEEP_RETURN_IF_ERROR(SwitchToWal());
  // NORMAL sync is durable across process crashes and only risks the last commits on power
  // loss.
  SWEEP_RETURN_IF_ERROR(Exec("PRAGMA synchronous = NORMAL", "setting synchronous"));
  // A reader holding one snapshot for long (a notebook's open cursor) keeps checkpoints from
  // reaching the log's start, and the log grows meanwhile; once they can, it is cut back to
  // this size rather than kept at its largest.
  SWEEP_RETURN_IF_ERROR(
      Exec("PRAGMA journal_size_limit = 67108864", "limiting the write-ahead log"));
  SWEEP_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys = ON", "enabling foreign keys"));
  SWEEP_RETURN_IF_ERROR(Migrate(version));
  // A damaged file (a disk's bad sector, a copy taken mid-write) is said so before a sweep
  // writes into it and spreads the damage: PRAGMA quick_check reads every page (about 2 ms a
  // MB), without the index cross-checks of integrity_check.
  if (version > 0) SWEEP_RETURN_IF_ERROR(QuickCheck());
  identity = IdOf(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) largest_size = st.st_size;
  RememberLogFiles();
  return Status::Ok();
}

// WAL lets readers (sweep status, dashboards) run while the coordinator writes. Switching a
// new file to WAL needs it to itself, and SQLite answers BUSY at once, without its busy
// handler, while another process is doing the same (two sweeps started together on a new
// file): wait for that one here, as busy_timeout would. Another process's write lock held
// past that is waited for as a write waits for it (LockWait), said every busy timeout.
Status Store::Impl::SwitchToWal() {
  const auto start = std::chrono::steady_clock::now();
  auto said = start;
  const auto limit = std::max(lock_wait, std::chrono::milliseconds(kBusyTimeoutMs));
  for (int attempt = 0;; ++attempt) {
    Status wal = Exec("PRAGMA journal_mode = WAL", "enabling WAL mode");
    if (wal.ok()) return Status::Ok();
    if (wal.code() != Status::Code::kBusy) return wal;
    const auto now = std::chrono::steady_clock::now();
    if (now - start >= limit) {
      if (lock_wait.count() == 0) return wal;
      return Status::IoError(path + ": locked by another process for over " +
                             std::to_string(lock_wait.count() / 1000) +
                             " s (a sqlite3 shell or a viewer holding a write transaction?)");
    }
    if (now - said >= std::chrono::milliseconds(kBusyTimeoutMs)) {
      said = now;
      if (on_lock_wait && !on_lock_wait(std::chrono::duration<double>(now - start).count())) {
        return Status::IoError(path +
                               ": locked by another process (a sqlite3 shell or a viewer "
                               "holding a write transaction?); stopped waiting when "
                               "interrupted");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 + 5 * attempt, 50)));
  }
}

}  // namespace sweep::store
