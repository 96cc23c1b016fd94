// SweepLock on Linux open-file-description locks (F_OFD_SETLK): per open file, not per process,
// so no other descriptor of the same file in this process can release it by accident.
#include "sweep_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sweep {

Result<std::unique_ptr<SweepLock>> SweepLock::Acquire(const std::string& db_path,
                                                      int64_t sweep_id) {
  const std::string path = db_path + ".lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(path + ": " + std::strerror(errno));
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
  const std::string path = db_path + ".lock";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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

SweepLock::~SweepLock() { ::close(fd_); }

std::string OwnerId() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  return std::to_string(::getpid()) + "@" + host;
}

}  // namespace sweep
