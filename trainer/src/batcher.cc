// The prefetching batch gatherer. Owned by the trainer. All shared state is under mu_; the
// producer copies rows outside the lock into a slot no consumer can be reading (batch k goes to
// slot k % slots_, and the producer stays fewer than slots_ batches ahead of the slowest
// consumer).
#include "batcher.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace sweep::trainer {

int GpuGatherThreads() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores / 2, 1, 8);
}

Batcher::Batcher(DatasetPtr data, int batch_size, int consumers, int depth, int lag,
                 HostAllocator* alloc, int gather_threads, bool pixels)
    : data_(std::move(data)),
      batch_size_(batch_size),
      pixels_(pixels && (!data_->u8.empty() || data_->stream != nullptr)),
      slots_(depth + lag + 1),
      blocks_(static_cast<size_t>(slots_)),
      released_(static_cast<size_t>(consumers), 0),
      holding_(static_cast<size_t>(consumers), 0) {
  // x first (floats, or pixels padded to a multiple of 4 bytes), then y (int32): the labels
  // start 4-byte aligned.
  const size_t row_bytes = static_cast<size_t>(data_->dim) * (pixels_ ? 1 : sizeof(float));
  const size_t x_bytes = (static_cast<size_t>(batch_size) * row_bytes + 3) / 4 * 4;
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
      x_.push_back(b.p);
      y_.push_back(reinterpret_cast<int32_t*>(static_cast<char*>(b.p) + x_bytes));
    }
  } catch (...) {
    for (Block& b : blocks_) Release(&b);
    throw;
  }
  bad_.assign(static_cast<size_t>(slots_), 0);
  const int64_t batch_bytes = static_cast<int64_t>(batch_size) * static_cast<int64_t>(row_bytes);
  parts_ = static_cast<int>(
      std::clamp<int64_t>(std::min<int64_t>(batch_bytes / kMinGatherBytesPerThread, batch_size), 1,
                          std::max(gather_threads, 1)));
  if (parts_ > 1) {
    start_ = std::make_unique<std::barrier<>>(parts_);
    done_ = std::make_unique<std::barrier<>>(parts_);
  }
  // A thread that cannot start (the process's limit) throws here, and Train() fails the trial
  // with it: the threads already running are stopped first, or their destructors would end the
  // process.
  try {
    for (int p = 1; p < parts_; ++p) helpers_.emplace_back([this, p] { Help(p); });
    thread_ = std::thread([this] { Produce(); });
  } catch (...) {
    // The helpers that never started will not arrive: drop them, then stop the others.
    for (int p = static_cast<int>(helpers_.size()) + 1; p < parts_; ++p) {
      start_->arrive_and_drop();
    }
    StopHelpers();
    for (Block& b : blocks_) Release(&b);
    throw;
  }
}

void Batcher::StopHelpers() {
  if (helpers_.empty()) return;
  helpers_stop_ = true;
  start_->arrive_and_wait();
  for (std::thread& t : helpers_) t.join();
  helpers_.clear();
}

void Batcher::Help(int part) {
  for (;;) {
    start_->arrive_and_wait();
    if (helpers_stop_) return;
    GatherPart(part);
    done_->arrive_and_wait();
  }
}

void Batcher::GatherPart(int part) {
  const int64_t b = batch_size_, per = (b + parts_ - 1) / parts_;
  const int64_t begin = std::min(b, part * per), end = std::min(b, begin + per);
  if (begin >= end) return;
  const int64_t at = begin * data_->dim;
  if (pixels_) {
    data_->GatherPixels(job_.rows + begin, end - begin, static_cast<uint8_t*>(job_.x) + at,
                        job_.y + begin);
  } else {
    float* x = static_cast<float*>(job_.x) + at;
    if (transform_ != nullptr && data_->stream != nullptr) {
      // Each row augmented as it is decoded, on the stream's decode threads.
      const int64_t position = job_.position + begin;
      data_->GatherEach(job_.rows + begin, end - begin, x, job_.y + begin,
                        [&](int64_t i, float* row) {
                          transform_->Apply(row, 1, /*augment=*/true, epoch_, position + i);
                        });
      return;
    }
    data_->Gather(job_.rows + begin, end - begin, x, job_.y + begin);
    if (transform_ != nullptr) {
      transform_->Apply(x, end - begin, /*augment=*/true, epoch_, job_.position + begin);
    }
  }
}

void Batcher::GatherBatch(const int32_t* rows, size_t slot, int64_t position) {
  job_ = {rows, x_[slot], y_[slot], position};
  if (parts_ == 1) {
    GatherPart(0);
    return;
  }
  start_->arrive_and_wait();
  GatherPart(0);
  done_->arrive_and_wait();
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  freed_cv_.notify_all();
  thread_.join();
  StopHelpers();
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

void Batcher::StartEpoch(const int32_t* order, int64_t steps, int epoch, int64_t first) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A gather in flight may still be reading the old order: let it land first.
    produced_cv_.wait(lock, [&] { return !gathering_; });
    order_ = order + first * batch_size_;
    first_ = first;
    steps_ = steps - first;
    epoch_ = epoch;
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
  if (cancelled_) return {};
  holding_[c] = 1;
  const size_t slot = static_cast<size_t>(released_[c] % slots_);
  Batch b;
  b.y = y_[slot];
  b.bad = bad_[slot] != 0;
  if (pixels_) {
    b.pixels = static_cast<const uint8_t*>(x_[slot]);
  } else {
    b.x = static_cast<const float*>(x_[slot]);
  }
  return b;
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
    GatherBatch(rows, slot, (first_ + k) * batch_size_);
    const bool bad = data_->stream != nullptr && !data_->stream->status().ok();
    lock.lock();
    bad_[slot] = bad;
    gathering_ = false;
    ++produced_;
    produced_cv_.notify_all();
  }
}

}  // namespace sweep::trainer
