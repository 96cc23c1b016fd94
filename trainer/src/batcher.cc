// The prefetching batch gatherer. Owned by the trainer. All shared state is under mu_; the
// producer copies rows outside the lock into a slot the consumer cannot be reading (batch k
// goes to slot k % slots_, and the producer stays fewer than slots_ batches ahead).
#include "batcher.h"

#include <chrono>
#include <utility>

namespace sweep::trainer {

Batcher::Batcher(DatasetPtr data, int batch_size, int depth)
    : data_(std::move(data)), batch_size_(batch_size), slots_(depth + 1) {
  for (int s = 0; s < slots_; ++s) {
    x_.emplace_back(static_cast<size_t>(batch_size) * static_cast<size_t>(data_->dim));
    y_.emplace_back(static_cast<size_t>(batch_size));
  }
  thread_ = std::thread([this] { Produce(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  freed_cv_.notify_all();
  thread_.join();
}

void Batcher::StartEpoch(const int32_t* order, int64_t steps) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A gather in flight may still be reading the old order: let it land first.
    produced_cv_.wait(lock, [&] { return !gathering_; });
    order_ = order;
    steps_ = steps;
    produced_ = released_ = 0;
    holding_ = false;
  }
  freed_cv_.notify_all();
}

Batcher::Batch Batcher::Next(double* wait_s) {
  std::unique_lock<std::mutex> lock(mu_);
  if (holding_) {
    ++released_;
    holding_ = false;
    freed_cv_.notify_all();
  }
  if (produced_ <= released_) {
    const auto start = std::chrono::steady_clock::now();
    produced_cv_.wait(lock, [&] { return produced_ > released_; });
    *wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  holding_ = true;
  const size_t slot = static_cast<size_t>(released_ % slots_);
  return {x_[slot].data(), y_[slot].data()};
}

void Batcher::Produce() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    freed_cv_.wait(lock,
                   [&] { return stop_ || (produced_ < steps_ && produced_ - released_ < slots_); });
    if (stop_) return;
    const int64_t k = produced_;
    const size_t slot = static_cast<size_t>(k % slots_);
    const int32_t* rows = order_ + k * batch_size_;
    gathering_ = true;
    lock.unlock();
    data_->Gather(rows, batch_size_, x_[slot].data(), y_[slot].data());
    lock.lock();
    gathering_ = false;
    ++produced_;
    produced_cv_.notify_all();
  }
}

}  // namespace sweep::trainer
