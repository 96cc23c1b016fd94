// A fixed team of threads that run one function on every rank at once: rank 0 on the caller's
// thread, ranks 1..size-1 on threads the team owns (one per replica: a CPU "device", or the
// thread that drives one GPU). Owned by whoever builds it; Run() is for one caller at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sweep::trainer {

class ThreadTeam {
 public:
  explicit ThreadTeam(int size);
  ~ThreadTeam();  // joins the threads (none may be inside Run)
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }
  // Calls fn(rank) for every rank concurrently and returns when all have returned. An
  // exception thrown by any of them is rethrown here (the first by rank) after all have ended.
  void Run(const std::function<void(int rank)>& fn);

 private:
  void Work(int rank);

  const int size_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  int64_t generation_ = 0;  // Run calls so far
  int running_ = 0;         // worker ranks still in the current Run
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;  // per rank, of the current Run
  std::vector<std::thread> threads_;        // last: they start once the rest is ready
};

}  // namespace sweep::trainer
