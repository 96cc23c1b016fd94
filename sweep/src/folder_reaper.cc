#include "folder_reaper.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <system_error>

namespace sweep {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = ".cleared-";

// Deletes `path` one entry at a time, so a stop does not wait for a whole tree. Returns false
// when it stopped before the end.
bool DeleteTree(const fs::path& path, const std::atomic<bool>& stop) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(path, ec))) {
    for (auto it = fs::directory_iterator(path, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      if (stop.load(std::memory_order_relaxed)) return false;
      if (!DeleteTree(it->path(), stop)) return false;
    }
  }
  fs::remove(path, ec);
  return true;
}

}  // namespace

FolderReaper::~FolderReaper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_.store(true);
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FolderReaper::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void FolderReaper::Adopt(const std::string& parent) {
  std::error_code ec;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().starts_with(kPrefix)) {
      queue_.push_back(it->path().string());
    }
  }
  if (!queue_.empty()) {
    Start();
    cv_.notify_all();
  }
}

bool FolderReaper::Discard(const std::string& path, std::string* why) {
  const fs::path from(path);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(from, ec))) return true;
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const fs::path aside =
      from.parent_path() /
      (std::string(kPrefix) + from.filename().string() + "-" + std::to_string(::getpid()) + "-" +
       std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) + "-" +
       std::to_string(counter.fetch_add(1)));
  fs::rename(from, aside, ec);
  if (ec) {
    // Not renamable (a read-only parent, say): deleted here, which says why it cannot be.
    ec.clear();
    fs::remove_all(from, ec);
    if (ec && why != nullptr) *why = ec.message();
    return !ec;
  }
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(aside.string());
  Start();
  cv_.notify_all();
  return true;
}

void FolderReaper::Drain(const std::atomic<bool>* interrupt) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(100),
                       [&] { return (queue_.empty() && !busy_) || stopping_; })) {
    if (interrupt != nullptr && interrupt->load()) return;
  }
}

bool FolderReaper::Busy() {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_ || !queue_.empty();
}

void FolderReaper::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (stopping_) return;
    const std::string next = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    DeleteTree(next, stop_);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace sweep
