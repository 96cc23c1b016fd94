// WriteFileAtomically. Owned by the trainer. POSIX calls only; errno is turned into a Status
// here, once.
#include "file_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace sweep::trainer {
namespace {

Status Errno(const std::string& path, const std::string& what) {
  return Status::IoError(path + ": " + what + ": " + std::strerror(errno));
}

// Unique among the processes and threads that may write the same target at once.
std::string TempName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t n = counter.fetch_add(1);
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(n) + "." +
         std::to_string(static_cast<uint64_t>(now) & 0xFFFFFF);
}

Status WriteAll(int fd, const std::string& path, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(path, "write failed");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// The rename or link is durable only once the directory entry is on disk too.
void SyncDirectory(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the data itself is synced
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::vector<ByteRange>& pieces,
                           Publish publish, bool* published) {
  const std::string tmp = TempName(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(path, "cannot create a temporary file beside it");
  Status s;
  for (const ByteRange& piece : pieces) {
    s = WriteAll(fd, path, piece.data, piece.size);
    if (!s.ok()) break;
  }
  if (s.ok() && ::fsync(fd) != 0) s = Errno(path, "fsync failed");
  if (::close(fd) != 0 && s.ok()) s = Errno(path, "close failed");
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  bool mine = true;
  if (publish == Publish::kFirstWins) {
    // link() refuses to replace: exactly one writer's file ends up at `path`.
    if (::link(tmp.c_str(), path.c_str()) == 0) {
      ::unlink(tmp.c_str());
    } else if (errno == EEXIST) {
      mine = false;
      ::unlink(tmp.c_str());
    } else if (::rename(tmp.c_str(), path.c_str()) != 0) {  // no hard links here: last wins
      s = Errno(path, "cannot publish " + tmp);
      ::unlink(tmp.c_str());
      return s;
    }
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Errno(path, "cannot rename " + tmp + " to it");
    ::unlink(tmp.c_str());
    return s;
  }
  if (mine) SyncDirectory(path);
  if (published != nullptr) *published = mine;
  return Status::Ok();
}

namespace {

// Whether process `pid` may still write: it exists (or is not ours to ask about) and is not a
// zombie. A worker killed with its coordinator stays a zombie until something reaps it (slowly,
// in a container whose first process is not an init), and writes nothing more.
bool MayStillWrite(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;  // no /proc to tell: it may
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses; the state follows the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return true;
  const char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

void RemoveAbandonedTemporaries(const std::string& dir,
                                const std::function<bool(std::string_view target)>& ours) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec)) {
    // TARGET.tmp.PID.N.T, as TempName makes them.
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || !ours(std::string_view(name).substr(0, at))) continue;
    const char* digits = name.c_str() + at + 5;
    char* end = nullptr;
    const long pid = std::strtol(digits, &end, 10);
    if (end == digits || *end != '.' || pid <= 0) continue;
    if (MayStillWrite(static_cast<pid_t>(pid))) continue;  // alive, or not ours to know
    std::error_code rm;
    std::filesystem::remove(entry.path(), rm);
  }
}

}  // namespace sweep::trainer
