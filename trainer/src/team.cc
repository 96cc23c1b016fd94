// ThreadTeam: a generation counter under one mutex starts each Run; workers count themselves
// out. Owned by the trainer. A Run costs two condition-variable hand-offs, so callers run whole
// epochs in one, not single steps.
#include "team.h"

namespace sweep::trainer {

ThreadTeam::ThreadTeam(int size) : size_(size < 1 ? 1 : size), errors_(static_cast<size_t>(size_)) {
  for (int r = 1; r < size_; ++r) threads_.emplace_back([this, r] { Work(r); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadTeam::Run(const std::function<void(int rank)>& fn) {
  for (std::exception_ptr& e : errors_) e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    running_ = size_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return running_ == 0; });
    fn_ = nullptr;
  }
  for (const std::exception_ptr& e : errors_) {
    if (e) std::rethrow_exception(e);
  }
}

void ThreadTeam::Work(int rank) {
  int64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    try {
      (*fn)(rank);
    } catch (...) {
      errors_[static_cast<size_t>(rank)] = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) done_cv_.notify_all();
    }
  }
}

}  // namespace sweep::trainer
