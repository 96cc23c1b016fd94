// Where SQLite's result codes become Statuses: the one place, naming the database path and
// saying what the user can do (free space, fix permissions, restore a backup).
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "store_impl.h"

namespace sweep::store {
namespace {

// A file's permission bits as chmod writes them: 0644.
std::string OctalMode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

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

Status Store::Impl::DiskFull(const std::string& what) const {
  return Status::IoError(path + ": disk full while " + what + "; free some space");
}

// The one place SQLite result codes become Statuses. `doing` says what we were doing, for
// the messages where SQLite's own text would not explain it.
Status Store::Impl::Error(int rc, std::string_view doing) const {
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
                                 " and this user may not write it) while " + what + "; if " + path +
                                 "-wal is empty (a reader's), it and " + path +
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
          return Status::IoError(path + ": permission denied while " + what + " (" + detail + ")");
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

}  // namespace sweep::store
