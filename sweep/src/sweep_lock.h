// One owner per sweep: a `sweep run` or `sweep resume` holds an open-file-description lock on
// byte `sweep_id` of "<db>.lock" for as long as it runs. The kernel drops the lock when the
// process dies, however it dies, so a stale lock from a dead process is simply free again.
// Not thread-safe; one coordinator owns one SweepLock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace sweep {

class SweepLock {
 public:
  // Busy when another process holds it.
  static Result<std::unique_ptr<SweepLock>> Acquire(const std::string& db_path, int64_t sweep_id);
  // Whether some process holds the lock now, without taking it (a reader's question: is this
  // sweep's coordinator alive?). False when the lock file does not exist.
  static Result<bool> IsHeld(const std::string& db_path, int64_t sweep_id);
  // Whether `owner` ("PID@HOST", as sweeps.owner stores it) is a live process of this host
  // that has the store's lock file open: one whose lock file was removed (or replaced) while it
  // ran still has it open, which IsHeld cannot see. False for another host's owner (nothing
  // here to look at), an empty one, or this process.
  static bool OwnerHasLockFileOpen(const std::string& db_path, const std::string& owner);
  ~SweepLock();
  SweepLock(const SweepLock&) = delete;
  SweepLock& operator=(const SweepLock&) = delete;

 private:
  explicit SweepLock(int fd) : fd_(fd) {}
  int fd_;
};

// "PID@HOST" of this process, as stored in sweeps.owner.
std::string OwnerId();

}  // namespace sweep
