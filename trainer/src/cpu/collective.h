// The CPU backend's collective: a shared-memory all-reduce among the R replica threads of one
// process, bucketed by layer so that reducing a bucket starts while backward still works on
// earlier layers. One Communicator is shared by the R ranks of a group; each rank calls its
// methods from its own thread only. With one rank every call returns at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace sweep::trainer::cpu {

// A range [begin, end) of the flat gradient buffer, in floats; begin is 64-byte aligned.
struct Bucket {
  int64_t begin = 0, end = 0;
};

// Receives each reduced range: sum[0 .. end - begin) holds the sum over ranks of the gradients
// in [begin, end). Called on the thread of `rank`, whichever rank reduced it, once per range per
// step; different ranges concurrently.
class ReduceSink {
 public:
  virtual ~ReduceSink() = default;
  virtual void Reduced(int rank, int64_t begin, int64_t end, const float* sum) = 0;
};

// Time one rank spent in the collective, seconds, since the last TakeTimes(rank).
struct CommTimes {
  double reduce_s = 0;   // summing gradient chunks, hidden or not
  double exposed_s = 0;  // in Finish: after this rank's backward, excluding the sink's work
};

// The protocol, per optimizer step, for every rank:
//   1. As backward makes bucket b's gradients final, BucketReady(rank, b). It returns without
//      waiting for the other ranks; before returning it reduces any chunks that every rank has
//      made ready (its share of the work, claimed dynamically), handing each to the sink.
//   2. After backward, Finish(rank): reduces what is left and waits until every chunk of every
//      bucket has been through the sink. Then the next step may begin.
// A chunk's sum adds the ranks' gradients in rank order 0, 1, ..., R - 1, whichever thread does
// it, so the result does not depend on timing. A rank must not write its gradient buffer for
// the next step before Finish returns (Finish guarantees the others no longer read it).
class Communicator {
 public:
  // grads[r]: rank r's gradient buffer (all the same length, covering every bucket);
  // chunk_floats: the unit of work (a multiple of 16); buckets may be ready in any order.
  Communicator(std::vector<const float*> grads, std::vector<Bucket> buckets, int64_t chunk_floats,
               ReduceSink* sink);
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int size() const { return size_; }
  // scratch: chunk_floats floats owned by the calling rank.
  void BucketReady(int rank, int bucket, float* scratch);
  void Finish(int rank, float* scratch);

  // Call from the rank's own thread, or while no rank is inside the protocol.
  CommTimes TakeTimes(int rank);

 private:
  struct alignas(64) BucketState {
    std::atomic<int64_t> ready{0};    // BucketReady calls, over all steps
    std::atomic<int64_t> claimed{0};  // chunks claimed, over all steps
  };
  struct alignas(64) RankState {
    int64_t step = 0;  // steps this rank has finished
    CommTimes times;
    double sink_s = 0;                  // time in the sink, to keep it out of exposed_s
    std::vector<const float*> sources;  // per chunk: each rank's gradients of it
  };

  // Claims and reduces one chunk of a bucket every rank has made ready; false when none.
  bool ReduceOne(int rank, float* scratch);
  void Notify();

  const int size_;
  const std::vector<const float*> grads_;
  const std::vector<Bucket> buckets_;
  const int64_t chunk_floats_;
  ReduceSink* const sink_;
  std::vector<int64_t> chunks_;  // per bucket
  int64_t total_chunks_ = 0;
  std::vector<BucketState> bucket_state_;
  std::vector<RankState> rank_state_;
  alignas(64) std::atomic<int64_t> done_{0};  // chunks through the sink, over all steps
  // Waiting: `progress_` changes whenever a bucket becomes ready or a chunk is done; a rank with
  // nothing to do sleeps on it (futex) after a short spin. `waiters_` spares the wake-up
  // system call when nobody sleeps.
  alignas(64) std::atomic<uint32_t> progress_{0};
  std::atomic<int> waiters_{0};
};

// Everything a replica needs to take part in its group's collectives, in one place (llm.c's
// MultiGpuConfig): its rank, the group size, the shared communicator and its own scratch.
// A group of one has a communicator too: it hands the rank's own gradients to the sink at once.
struct DeviceGroup {
  int rank = 0;
  int size = 1;
  Communicator* comm = nullptr;
  float* scratch = nullptr;  // chunk_floats floats, this rank's
};

inline void AllReduceBucketReady(const DeviceGroup& g, int bucket) {
  g.comm->BucketReady(g.rank, bucket, g.scratch);
}
inline void AllReduceFinish(const DeviceGroup& g) { g.comm->Finish(g.rank, g.scratch); }

}  // namespace sweep::trainer::cpu
