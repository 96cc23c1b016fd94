// SweepLock on Linux open-file-description locks (F_OFD_SETLK): per open file, not per process,
// so no other descriptor of the same file in this process can release it by accident.
#include "sweep_lock.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>

namespace sweep {

namespace {

// The lock file of the store at `db_path`, named after the database's canonical path: every
// path to one file (a symbolic link to it or to its folder, a path with `..`) must name one
// lock, or a second coordinator reaching the store by another path would run beside the
// first. (A hard link is another name for the file that no path resolution can see: the store
// refuses to write a file that has one.)
std::string LockPath(const std::string& db_path) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(db_path, ec);
  return (ec || canonical.empty() ? db_path : canonical.string()) + ".lock";
}

// A lock file just made (fd), as the database's owners may use it, as SQLite makes its -wal
// and -shm: the database's mode (for its group) and, when root made it, the database's owner.
// Otherwise a run by root, or by another user of a shared group-writable folder, would leave a
// lock file the database's own users could not open for writing, and keep them from running
// the sweep. Only a regular file of one name that this process created is changed.
void ShareWithTheDatabase(int fd, const std::string& db_path) {
  struct stat db {};
  struct stat lock {};
  if (::stat(db_path.c_str(), &db) != 0 || !S_ISREG(db.st_mode) || ::fstat(fd, &lock) != 0 ||
      !S_ISREG(lock.st_mode) || lock.st_nlink != 1 || lock.st_uid != ::geteuid()) {
    return;
  }
  const mode_t mode = (db.st_mode & 0666) | 0600;
  if ((lock.st_mode & 0777) != mode) (void)::fchmod(fd, mode);
  if (::geteuid() == 0 && (lock.st_uid != db.st_uid || lock.st_gid != db.st_gid)) {
    (void)!::fchown(fd, db.st_uid, db.st_gid);
  }
}

}  // namespace

Result<std::unique_ptr<SweepLock>> SweepLock::Acquire(const std::string& db_path,
                                                      int64_t sweep_id) {
  const std::string path = LockPath(db_path);
  // Never through a link: its target is not ours to lock, let alone to give away.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  const bool made = fd >= 0;
  if (!made && errno == EEXIST) fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {
      return Status::IoError(path +
                             ": is a symbolic link, which a sweep's lock file never is; "
                             "remove it");
    }
    return Status::IoError(path + ": " + std::strerror(errno));
  }
  if (made) ShareWithTheDatabase(fd, db_path);
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = sweep_id;
  lock.l_len = 1;
  if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EAGAIN || err == EACCES) return Status::Busy("held by another process");
    return Status::IoError(path + ": cannot lock: " + std::strerror(err));
  }
  return std::unique_ptr<SweepLock>(new SweepLock(fd));
}

Result<bool> SweepLock::IsHeld(const std::string& db_path, int64_t sweep_id) {
  const std::string path = LockPath(db_path);
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    return Status::IoError(path + ": " + std::strerror(errno));
  }
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = sweep_id;
  lock.l_len = 1;
  int rc = ::fcntl(fd, F_OFD_GETLK, &lock);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError(path + ": cannot test the lock: " + std::strerror(err));
  return lock.l_type != F_UNLCK;
}

bool SweepLock::OwnerHasLockFileOpen(const std::string& db_path, const std::string& owner) {
  const size_t at = owner.find('@');
  if (at == std::string::npos || at == 0) return false;
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || owner.substr(at + 1) != host) return false;
  const std::string pid_text = owner.substr(0, at);
  char* end = nullptr;
  const long pid = std::strtol(pid_text.c_str(), &end, 10);
  if (end == nullptr || *end != '\0' || pid <= 0 || pid == ::getpid()) return false;
  const std::string fds = "/proc/" + pid_text + "/fd";
  DIR* dir = ::opendir(fds.c_str());
  if (dir == nullptr) {
    // Another user's process: alive, but its files cannot be looked at. Say it runs.
    return errno == EACCES && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
  }
  const std::string lock = LockPath(db_path);
  bool open = false;
  while (const dirent* e = ::readdir(dir)) {
    char target[4096];
    const std::string link = fds + "/" + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string_view t(target, static_cast<size_t>(n));
    if (t == lock || t == lock + " (deleted)") {
      open = true;
      break;
    }
  }
  ::closedir(dir);
  return open;
}

SweepLock::~SweepLock() { ::close(fd_); }

std::string OwnerId() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  return std::to_string(::getpid()) + "@" + host;
}

}  // namespace sweep
