// Gathers training batches on a background thread so gathering overlaps compute: up to `depth`
// batches are ready ahead of the ones being computed on. One Batcher feeds the R replicas of a
// data-parallel group: every batch goes to all of them (each reads its own rows of it), and a
// slot is reused only once every consumer has moved past it. One producer thread inside; each
// consumer index is used by one thread at a time; StartEpoch while no consumer is in Next.
// A large batch may be gathered by several threads at once (gather_threads): the producer and
// helpers that each write their own rows of it. For a device that scales pixels itself, the
// batches of an IDX set can hold its uint8 pixels as they are (pixels): a quarter of the bytes
// to gather and to copy.
#pragma once

#include <barrier>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "augment.h"
#include "data.h"

namespace sweep::trainer {

inline constexpr int kPrefetchDepth = 2;
// A thread of a parallel gather writes at least this many bytes of a batch (tens of
// microseconds of copying): a smaller share costs more in waking and waiting than it saves.
inline constexpr int64_t kMinGatherBytesPerThread = int64_t{1} << 18;

// How many threads gather a GPU group's batches: the host must feed a GPU that consumes tens of
// millions of samples a second (random rows gather at a few GB/s a thread). Half the machine's
// cores, up to 8; they wait on a barrier between batches, so trials packed beside it get them
// back while the GPU computes.
int GpuGatherThreads();

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
  // x or pixels is set, as the Batcher was made; all null once cancelled.
  struct Batch {
    const float* x = nullptr;         // [batch_size, dim]
    const int32_t* y = nullptr;       // [batch_size]
    const uint8_t* pixels = nullptr;  // [batch_size, dim]: the set's uint8 pixels, unscaled
    // A streamed set's file failed to decode by the time this batch was (its stream's status
    // says which): every consumer sees the same batch so, and so stops at the same step.
    bool bad = false;
  };

  // lag: how many batches the fastest consumer may run ahead of the slowest without waiting
  // for a free slot (the micro-batches of one optimizer step, when consumers sync per step).
  // alloc (null: ordinary memory) holds the slots; it must outlive the Batcher.
  // gather_threads: at most how many threads gather one batch, each at least
  // kMinGatherBytesPerThread of it; the batches are the same whatever the number.
  // pixels: batches hold the set's uint8 pixels (Batch::pixels) rather than floats; only for a
  // set with u8 features.
  Batcher(DatasetPtr data, int batch_size, int consumers = 1, int depth = kPrefetchDepth,
          int lag = 0, HostAllocator* alloc = nullptr, int gather_threads = 1, bool pixels = false);
  ~Batcher();  // stops and joins the producer, also mid-epoch
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Starts gathering rows order[first * batch_size .. steps * batch_size) as batches first ..
  // steps - 1 (first > 0: an epoch resumed part-way). `order` must stay alive and unchanged
  // until the next StartEpoch returns or the destructor has returned. Abandons any unread
  // batches. `epoch` and a row's place in `order` key the transform's augmentation
  // (SetTransform).
  void StartEpoch(const int32_t* order, int64_t steps, int epoch = 0, int64_t first = 0);
  // Applies `t` (training: with augmentation) to every batch gathered from now on; it must
  // outlive the Batcher. Only for float batches (not pixels); call before the first StartEpoch.
  void SetTransform(const InputTransform* t) { transform_ = t; }
  // Consumer c's next batch, valid until c's following Next or StartEpoch; blocks while it is
  // being gathered and adds the time blocked to *wait_s. Each consumer calls it at most
  // `steps` times per epoch.
  // Returns an empty Batch (all null) once Cancel has been called.
  Batch Next(int consumer, double* wait_s);
  // For a consumer that fails: it will not move on, so the others, who may be waiting for a
  // slot it holds, get no more batches (Next returns nulls, also to a consumer blocked in it)
  // for the rest of the Batcher's life.
  void Cancel();

  // How many threads gather each batch (1: the producer alone).
  int gather_parts() const { return parts_; }
  // Whether batches hold pixels (Batch::pixels) rather than floats.
  bool pixels() const { return pixels_; }

 private:
  void Produce();
  // Writes rows order[k B, (k + 1) B) into `slot`, split among the helpers when there are any.
  void GatherBatch(const int32_t* rows, size_t slot, int64_t position);
  void GatherPart(int part);  // part p of the batch job_ names
  void Help(int part);        // a helper's loop
  void StopHelpers();
  int64_t MinReleased() const;  // under mu_

  const DatasetPtr data_;
  const int batch_size_;
  const bool pixels_;
  // One block per slot: x [batch_size, dim] floats (or pixels, bytes, padded to 4), then y
  // [batch_size] labels.
  struct Block {
    HostAllocator* alloc = nullptr;
    void* p = nullptr;
    std::vector<char> own;  // when there is no allocator
  };
  static void Release(Block* b);

  const int slots_;  // depth + lag + the one each consumer holds
  std::vector<Block> blocks_;
  std::vector<void*> x_;
  std::vector<int32_t*> y_;
  std::vector<char> bad_;  // per slot: Batch::bad

  std::mutex mu_;
  std::condition_variable produced_cv_, freed_cv_;
  const int32_t* order_ = nullptr;  // the epoch's order from batch first_ on
  int64_t first_ = 0;
  int64_t steps_ = 0;              // batches to gather this epoch, from first_ on
  int64_t produced_ = 0;           // of them gathered
  std::vector<int64_t> released_;  // per consumer: batches of this epoch it is done with
  std::vector<char> holding_;      // per consumer: it holds batch released_[c]
  bool gathering_ = false;         // the producer is writing a slot outside the lock
  bool stop_ = false;
  bool cancelled_ = false;
  // The parallel gather: parts_ threads (the producer is part 0) meet at start_ once job_ is
  // set and at done_ once each has written its rows; job_ and helpers_stop_ are written only
  // by the thread that arrives at start_ after writing them, so the barrier orders them.
  int parts_ = 1;
  struct Job {
    const int32_t* rows = nullptr;
    void* x = nullptr;
    int32_t* y = nullptr;
    int64_t position = 0;  // of the batch's first row in the epoch
  } job_;
  const InputTransform* transform_ = nullptr;
  int epoch_ = 0;
  bool helpers_stop_ = false;
  std::unique_ptr<std::barrier<>> start_, done_;
  std::vector<std::thread> helpers_;

  std::thread thread_;  // last: starts once everything above is ready
};

}  // namespace sweep::trainer
