// Deletes folders off the coordinator's loop. A command trial's first run clears its folder,
// which an earlier sweep of the same name (a store made anew) may have filled with gigabytes of
// its program's checkpoints; deleting them where they stand would hold the loop (heartbeats,
// reports, agents) for as long as that takes. Discard() renames the folder aside at once, into
// a hidden `.cleared-*` name beside it, and a thread of its own deletes it. What it has not
// deleted when the coordinator ends stays under that name, and a later reaper on the same
// parent folder (the sweep's next run or resume) picks it up.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace sweep {

class FolderReaper {
 public:
  FolderReaper() = default;
  ~FolderReaper();
  FolderReaper(const FolderReaper&) = delete;
  FolderReaper& operator=(const FolderReaper&) = delete;

  // Deletes what earlier reapers left under `parent` (folders named `.cleared-*`).
  void Adopt(const std::string& parent);

  // Moves `path` out of the way (its parent then holds no `path`) and deletes it in the
  // background. A `path` that does not exist is no error; one that cannot be renamed is deleted
  // here, as before. Returns false, with `why`, when `path` is still there.
  bool Discard(const std::string& path, std::string* why);

  // Waits until every folder handed over so far is gone (or could not be deleted), or until
  // `interrupt` (when given) is set.
  void Drain(const std::atomic<bool>* interrupt = nullptr);

  // Whether folders handed over are still being deleted.
  bool Busy();

 private:
  void Loop();
  void Start();  // the thread, on the first folder handed over

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::atomic<bool> stop_{false};  // stopping_, read by a deletion between entries
  std::thread thread_;
};

}  // namespace sweep
