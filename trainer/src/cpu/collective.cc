// The shared-memory all-reduce. Owned by the trainer. All cross-thread state is atomics:
// counters that only grow (over all steps), so a rank in step s compares them with s-based
// targets and needs no reset between steps. Release on "ready"/"done", acquire before reading
// the gradients or the sink's results they publish.
#include "cpu/collective.h"

#include <algorithm>
#include <cassert>
#include <chrono>

#include "cpu/ops.h"

namespace sweep::trainer::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spin this many rounds before sleeping: a few tens of microseconds, short against a step (a
// millisecond or more) but long enough to catch a peer that is about to finish its backward.
// Longer spins would steal a core from that very peer when the machine is oversubscribed.
constexpr int kSpinRounds = 400;

}  // namespace

Communicator::Communicator(std::vector<const float*> grads, std::vector<Bucket> buckets,
                           int64_t chunk_floats, ReduceSink* sink)
    : size_(static_cast<int>(grads.size())),
      grads_(std::move(grads)),
      buckets_(std::move(buckets)),
      chunk_floats_(chunk_floats),
      sink_(sink),
      bucket_state_(buckets_.size()),
      rank_state_(static_cast<size_t>(size_)) {
  assert(chunk_floats_ > 0 && chunk_floats_ % 16 == 0);
  for (const Bucket& b : buckets_) {
    chunks_.push_back((b.end - b.begin + chunk_floats_ - 1) / chunk_floats_);
    total_chunks_ += chunks_.back();
  }
  for (RankState& r : rank_state_) r.sources.resize(static_cast<size_t>(size_));
}

void Communicator::Notify() {
  progress_.fetch_add(1, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) > 0) progress_.notify_all();
}

bool Communicator::ReduceOne(int rank, float* scratch) {
  RankState& me = rank_state_[static_cast<size_t>(rank)];
  const int64_t need = int64_t{size_} * (me.step + 1);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    BucketState& st = bucket_state_[b];
    if (st.ready.load(std::memory_order_acquire) < need) continue;
    const int64_t first = me.step * chunks_[b], last = first + chunks_[b];
    int64_t c = st.claimed.load(std::memory_order_relaxed);
    // Every rank has left the previous step (they all made this bucket ready since), so all
    // of its chunks were claimed: the counter is within this step's range.
    assert(c >= first);
    while (c < last) {
      if (!st.claimed.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) continue;
      const int64_t begin = buckets_[b].begin + (c - first) * chunk_floats_;
      const int64_t end = std::min(begin + chunk_floats_, buckets_[b].end);
      for (int r = 0; r < size_; ++r) {
        me.sources[static_cast<size_t>(r)] = grads_[static_cast<size_t>(r)] + begin;
      }
      const Clock::time_point t0 = Clock::now();
      sum_buffers(scratch, me.sources.data(), size_, end - begin);
      const Clock::time_point t1 = Clock::now();
      sink_->Reduced(rank, begin, end, scratch);
      me.times.reduce_s += std::chrono::duration<double>(t1 - t0).count();
      me.sink_s += Since(t1);
      done_.fetch_add(1, std::memory_order_acq_rel);
      Notify();
      return true;
    }
  }
  return false;
}

void Communicator::BucketReady(int rank, int bucket, float* scratch) {
  const Bucket& b = buckets_[static_cast<size_t>(bucket)];
  if (size_ == 1) {  // nothing to reduce: this rank's gradients are the sum
    sink_->Reduced(rank, b.begin, b.end, grads_[0] + b.begin);
    return;
  }
  bucket_state_[static_cast<size_t>(bucket)].ready.fetch_add(1, std::memory_order_acq_rel);
  Notify();
  while (ReduceOne(rank, scratch)) {
  }
}

void Communicator::Finish(int rank, float* scratch) {
  RankState& me = rank_state_[static_cast<size_t>(rank)];
  if (size_ == 1) {
    ++me.step;
    return;
  }
  const Clock::time_point start = Clock::now();
  const double sink_before = me.sink_s;
  const int64_t target = (me.step + 1) * total_chunks_;
  for (;;) {
    // The snapshot comes before the checks: progress made after it (work or completion the
    // checks miss) changes progress_, so the wait below returns at once rather than sleeping
    // through the last Notify().
    const uint32_t seen = progress_.load(std::memory_order_seq_cst);
    if (ReduceOne(rank, scratch)) continue;
    if (done_.load(std::memory_order_acquire) >= target) break;
    // Nothing to claim and chunks still in flight or buckets not ready: wait for progress.
    bool moved = false;
    for (int i = 0; i < kSpinRounds && !moved; ++i) {
      for (int k = 0; k < 8; ++k) CpuRelax();
      moved = progress_.load(std::memory_order_acquire) != seen;
    }
    if (moved) continue;
    // Registered before sleeping: a Notify() after this sees waiters_ > 0 and wakes us; one
    // before it changed progress_, and wait() returns at once.
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    progress_.wait(seen, std::memory_order_seq_cst);
    waiters_.fetch_sub(1, std::memory_order_seq_cst);
  }
  me.times.exposed_s += Since(start) - (me.sink_s - sink_before);
  ++me.step;
}

CommTimes Communicator::TakeTimes(int rank) {
  RankState& me = rank_state_[static_cast<size_t>(rank)];
  const CommTimes t = me.times;
  me.times = CommTimes();
  return t;
}

}  // namespace sweep::trainer::cpu
