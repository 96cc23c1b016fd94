// The prefetching batch gatherer. Owned by the trainer. All shared state is under mu_; the
// producer copies rows outside the lock into a slot no consumer can be reading (batch k goes to
// slot k % slots_, and the producer stays fewer than slots_ batches ahead of the slowest
// consumer).
#include "batcher.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace sweep::trainer {

Batcher::Batcher(DatasetPtr data, int batch_size, int consumers, int depth, int lag,
                 HostAllocator* alloc)
    : data_(std::move(data)),
      batch_size_(batch_size),
      slots_(depth + lag + 1),
      blocks_(static_cast<size_t>(slots_)),
      released_(static_cast<size_t>(consumers), 0),
      holding_(static_cast<size_t>(consumers), 0) {
  // x first (floats), then y (int32): the labels start 4-byte aligned.
  const size_t x_bytes =
      static_cast<size_t>(batch_size) * static_cast<size_t>(data_->dim) * sizeof(float);
  const size_t bytes = x_bytes + static_cast<size_t>(batch_size) * sizeof(int32_t);
  try {
    for (Block& b : blocks_) {
      if (alloc != nullptr) {
        b.p = alloc->Allocate(bytes);
        b.alloc = alloc;
      } else {
        b.own.resize(bytes);
        b.p = b.own.data();
      }
      x_.push_back(static_cast<float*>(b.p));
      y_.push_back(reinterpret_cast<int32_t*>(static_cast<char*>(b.p) + x_bytes));
    }
  } catch (...) {
    for (Block& b : blocks_) Release(&b);
    throw;
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
  for (Block& b : blocks_) Release(&b);
}

void Batcher::Release(Block* b) {
  if (b->alloc != nullptr && b->p != nullptr) b->alloc->Free(b->p);
  b->p = nullptr;
  b->alloc = nullptr;
}

int64_t Batcher::MinReleased() const {
  return *std::min_element(released_.begin(), released_.end());
}

void Batcher::StartEpoch(const int32_t* order, int64_t steps) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A gather in flight may still be reading the old order: let it land first.
    produced_cv_.wait(lock, [&] { return !gathering_; });
    order_ = order;
    steps_ = steps;
    produced_ = 0;
    std::fill(released_.begin(), released_.end(), 0);
    std::fill(holding_.begin(), holding_.end(), 0);
  }
  freed_cv_.notify_all();
}

Batcher::Batch Batcher::Next(int consumer, double* wait_s) {
  const size_t c = static_cast<size_t>(consumer);
  std::unique_lock<std::mutex> lock(mu_);
  if (holding_[c]) {
    const int64_t before = MinReleased();
    ++released_[c];
    holding_[c] = 0;
    if (MinReleased() != before) freed_cv_.notify_all();
  }
  if (!cancelled_ && produced_ <= released_[c]) {
    const auto start = std::chrono::steady_clock::now();
    produced_cv_.wait(lock, [&] { return cancelled_ || produced_ > released_[c]; });
    *wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (cancelled_) return {nullptr, nullptr};
  holding_[c] = 1;
  const size_t slot = static_cast<size_t>(released_[c] % slots_);
  return {x_[slot], y_[slot]};
}

void Batcher::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  produced_cv_.notify_all();
}

void Batcher::Produce() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    freed_cv_.wait(
        lock, [&] { return stop_ || (produced_ < steps_ && produced_ - MinReleased() < slots_); });
    if (stop_) return;
    const int64_t k = produced_;
    const size_t slot = static_cast<size_t>(k % slots_);
    const int32_t* rows = order_ + k * batch_size_;
    gathering_ = true;
    lock.unlock();
    data_->Gather(rows, batch_size_, x_[slot], y_[slot]);
    lock.lock();
    gathering_ = false;
    ++produced_;
    produced_cv_.notify_all();
  }
}

}  // namespace sweep::trainer
