// Gathers training batches on a background thread so gathering overlaps compute: up to
// kPrefetchDepth batches are ready ahead of the one the compute thread holds. This is the shape
// of the later input pipeline (one Batcher feeding R replicas). One producer thread inside; the
// public methods are for a single consumer thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "data.h"

namespace sweep::trainer {

inline constexpr int kPrefetchDepth = 2;

class Batcher {
 public:
  struct Batch {
    const float* x;    // [batch_size, dim]
    const int32_t* y;  // [batch_size]
  };

  Batcher(DatasetPtr data, int batch_size, int depth = kPrefetchDepth);
  ~Batcher();  // stops and joins the producer, also mid-epoch
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Starts gathering rows order[0 .. steps * batch_size) as `steps` batches. `order` must stay
  // alive and unchanged until the next StartEpoch returns or the destructor has returned.
  // Abandons any unread batches.
  void StartEpoch(const int32_t* order, int64_t steps);
  // The next batch, valid until the following Next/StartEpoch; blocks while it is being
  // gathered and adds the time blocked to *wait_s. Call at most `steps` times per epoch.
  Batch Next(double* wait_s);

 private:
  void Produce();

  const DatasetPtr data_;
  const int batch_size_;
  const int slots_;  // depth + the one the consumer holds
  std::vector<std::vector<float>> x_;
  std::vector<std::vector<int32_t>> y_;

  std::mutex mu_;
  std::condition_variable produced_cv_, freed_cv_;
  const int32_t* order_ = nullptr;
  int64_t steps_ = 0;
  int64_t produced_ = 0;    // batches of this epoch gathered
  int64_t released_ = 0;    // batches of this epoch the consumer is done with
  bool holding_ = false;    // the consumer holds batch released_
  bool gathering_ = false;  // the producer is writing a slot outside the lock
  bool stop_ = false;
  std::thread thread_;  // last: starts once everything above is ready
};

}  // namespace sweep::trainer
