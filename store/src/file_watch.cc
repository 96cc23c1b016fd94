// The database file under a writer: noticing it removed, replaced or cut short, or its
// write-ahead log deleted, before a commit goes where no reader finds it.
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include <cerrno>
#include <optional>
#include <string>

#include "store_impl.h"

namespace sweep::store {

// Which file a path names now (device and inode), or nullopt with errno set.
std::optional<FileId> IdOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

Store::Impl::Folded Store::Impl::FoldLog() {
  Folded folded;
  folded.rc = sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &folded.frames,
                                        &folded.copied);
  return folded;
}

// The write-ahead log deleted under this writer (a clean-up's `rm *-wal`): SQLite goes on
// committing into the deleted file, where no reader sees the commits and a crash loses them.
// They are moved into the database file at once (a checkpoint, through the open log), and
// the sweep stops rather than commit more there; a resume makes a new log.
Status Store::Impl::CheckLogStillThere() {
  if (!wal_identity || IdOf(path + "-wal") == wal_identity) return Status::Ok();
  wal_identity.reset();
  // Every frame of the log into the file: a reader's snapshot can hold the checkpoint back
  // (it says so in the frame counts and SQLITE_BUSY, which the PRAGMA's result code hides),
  // and is waited for as any lock is.
  const Folded folded = FoldLog();
  if (!folded.whole()) {
    const int frames = folded.frames, copied = folded.copied;
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
Status Store::Impl::CheckStillTheFile() {
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
std::string Store::Impl::CutShort(off_t size) const {
  return "cut short (from " + std::to_string(largest_size) + " to " + std::to_string(size) +
         " bytes) while this sweep wrote to it: another program wrote over it (a copy onto it, "
         "a truncate)";
}

// The identities of this connection's write-ahead log and its index, once they exist.
void Store::Impl::RememberLogFiles() {
  if (!wal_identity) wal_identity = IdOf(path + "-wal");
  if (!shm_identity) shm_identity = IdOf(path + "-shm");
}

// The database this Store wrote is no longer at `path`, but its write-ahead log is: SQLite
// would replay it into whatever file is put there next (a restored backup), overwriting it.
// Renamed aside (the log, which holds commits) or removed (the index, rebuilt from the log);
// returns the log's new name, or "" when no log of this connection was there.
std::string Store::Impl::SetAsideLogFiles() {
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

}  // namespace sweep::store
