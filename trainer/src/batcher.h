// Gathers training batches on a background thread so gathering overlaps compute: up to `depth`
// batches are ready ahead of the ones being computed on. One Batcher feeds the R replicas of a
// data-parallel group: every batch goes to all of them (each reads its own rows of it), and a
// slot is reused only once every consumer has moved past it. One producer thread inside; each
// consumer index is used by one thread at a time; StartEpoch while no consumer is in Next.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "data.h"

namespace sweep::trainer {

inline constexpr int kPrefetchDepth = 2;

// Memory for the Batcher's slots, from a backend (a GPU's pinned host memory, so that copies out
// of the slots are asynchronous DMA). Allocate throws on failure (Train() catches it); both are
// called from the thread that builds or destroys the Batcher.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
};

class Batcher {
 public:
  struct Batch {
    const float* x;    // [batch_size, dim]
    const int32_t* y;  // [batch_size]
  };

  // lag: how many batches the fastest consumer may run ahead of the slowest without waiting
  // for a free slot (the micro-batches of one optimizer step, when consumers sync per step).
  // alloc (null: ordinary memory) holds the slots; it must outlive the Batcher.
  Batcher(DatasetPtr data, int batch_size, int consumers = 1, int depth = kPrefetchDepth,
          int lag = 0, HostAllocator* alloc = nullptr);
  ~Batcher();  // stops and joins the producer, also mid-epoch
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Starts gathering rows order[0 .. steps * batch_size) as `steps` batches. `order` must stay
  // alive and unchanged until the next StartEpoch returns or the destructor has returned.
  // Abandons any unread batches.
  void StartEpoch(const int32_t* order, int64_t steps);
  // Consumer c's next batch, valid until c's following Next or StartEpoch; blocks while it is
  // being gathered and adds the time blocked to *wait_s. Each consumer calls it at most
  // `steps` times per epoch.
  // Returns {nullptr, nullptr} once Cancel has been called.
  Batch Next(int consumer, double* wait_s);
  // For a consumer that fails: it will not move on, so the others, who may be waiting for a
  // slot it holds, get no more batches (Next returns nulls, also to a consumer blocked in it)
  // for the rest of the Batcher's life.
  void Cancel();

 private:
  void Produce();
  int64_t MinReleased() const;  // under mu_

  const DatasetPtr data_;
  const int batch_size_;
  // One block per slot: x [batch_size, dim] floats, then y [batch_size] labels.
  struct Block {
    HostAllocator* alloc = nullptr;
    void* p = nullptr;
    std::vector<char> own;  // when there is no allocator
  };
  static void Release(Block* b);

  const int slots_;  // depth + lag + the one each consumer holds
  std::vector<Block> blocks_;
  std::vector<float*> x_;
  std::vector<int32_t*> y_;

  std::mutex mu_;
  std::condition_variable produced_cv_, freed_cv_;
  const int32_t* order_ = nullptr;
  int64_t steps_ = 0;
  int64_t produced_ = 0;           // batches of this epoch gathered
  std::vector<int64_t> released_;  // per consumer: batches of this epoch it is done with
  std::vector<char> holding_;      // per consumer: it holds batch released_[c]
  bool gathering_ = false;         // the producer is writing a slot outside the lock
  bool stop_ = false;
  bool cancelled_ = false;
  std::thread thread_;  // last: starts once everything above is ready
};

}  // namespace sweep::trainer
