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
