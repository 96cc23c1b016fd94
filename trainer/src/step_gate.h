// Where the replicas of a run stop when told to within an epoch. Every replica must stop after
// the same step (each step's all-reduce needs them all), yet a GPU replica's host thread may
// queue steps ahead of the others'. So each replica asks before it begins a step, and the first
// to hear the request sets the stop after the last step any replica has begun: the others run
// up to it. Owned by the trainer; one per run, used by its replica threads at once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>

namespace sweep::trainer {

class StepGate {
 public:
  // requested: polled by rank 0 only (at most every kPollInterval), from its thread; empty:
  // never stop within an epoch.
  explicit StepGate(std::function<bool()> requested) : requested_(std::move(requested)) {}

  // An epoch's steps first .. end - 1 are to run (first > 0: a resumed epoch; end short of the
  // epoch's: a pause, to checkpoint).
  void StartEpoch(int64_t first, int64_t end) {
    std::lock_guard lock(mu_);
    begun_ = first - 1;
    stop_ = end;
  }

  // Whether `rank` may begin step s of the epoch. False from the step the run stops at on,
  // the same step for every rank.
  bool Begin(int rank, int64_t s) {
    std::unique_lock lock(mu_);
    if (s >= stop_) return false;
    if (rank == 0 && requested_) {
      const auto now = std::chrono::steady_clock::now();
      if (now - polled_ >= kPollInterval) {
        polled_ = now;
        // Unlocked: the caller's poll may read its messages.
        lock.unlock();
        const bool heard = requested_();
        lock.lock();
        if (heard) {
          heard_ = true;
          stop_ = std::min(stop_, begun_ + 1);
          if (s >= stop_) return false;
        }
      }
    }
    begun_ = std::max(begun_, s);
    return true;
  }

  // The step the epoch stopped at (its end when it ran to it). After the replicas are done.
  int64_t stop() const {
    std::lock_guard lock(mu_);
    return stop_;
  }

  // Whether the request was heard (in this epoch or an earlier one): the run is to stop.
  bool heard() const {
    std::lock_guard lock(mu_);
    return heard_;
  }

  // A stop request costs a poll of the caller's messages; a step may take microseconds.
  static constexpr std::chrono::milliseconds kPollInterval{5};

 private:
  std::function<bool()> requested_;
  std::chrono::steady_clock::time_point polled_{};  // rank 0's
  mutable std::mutex mu_;
  int64_t begun_ = -1;  // the latest step any rank has begun
  int64_t stop_ = 0;
  bool heard_ = false;
};

}  // namespace sweep::trainer
