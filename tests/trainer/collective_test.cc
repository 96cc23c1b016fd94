// Tests of the shared-memory all-reduce (cpu/collective.h) and the thread team that runs the
// replicas: sums in rank order whatever the timing, buckets ready in any order, many steps
// without reset, and a group of one that returns at once.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cpu/collective.h"
#include "gtest/gtest.h"
#include "rng.h"
#include "team.h"

namespace sweep::trainer::cpu {
namespace {

// Records every reduced range into `out` and counts the calls.
class CopySink : public ReduceSink {
 public:
  explicit CopySink(int64_t n) : out(static_cast<size_t>(n), -1.0f) {}
  void Reduced(int rank, int64_t begin, int64_t end, const float* sum) override {
    std::copy(sum, sum + (end - begin), out.begin() + begin);
    calls.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    ranks.push_back(rank);
  }
  std::vector<float> out;
  std::atomic<int> calls{0};
  std::mutex mu;
  std::vector<int> ranks;
};

TEST(Collective, SumsInRankOrderOverManySteps) {
  const int R = 4;
  const std::vector<Bucket> buckets = {{0, 100}, {112, 5000}, {5008, 5010}};
  const int64_t n = 5024;
  std::vector<std::vector<float>> grads(R, std::vector<float>(n));
  std::vector<const float*> ptrs;
  for (auto& g : grads) ptrs.push_back(g.data());
  CopySink sink(n);
  Communicator comm(ptrs, buckets, 64, &sink);  // small chunks: many claims
  std::vector<std::vector<float>> scratch(R, std::vector<float>(64));
  ThreadTeam team(R);
  for (int step = 0; step < 20; ++step) {
    // Values whose float sum depends on the order: only rank order gives `expect`.
    Rng rng(static_cast<uint64_t>(step));
    for (int r = 0; r < R; ++r) {
      for (float& v : grads[static_cast<size_t>(r)]) {
        v = static_cast<float>((rng.Uniform() - 0.5) * std::pow(10.0, rng.Below(8)));
      }
    }
    std::vector<float> expect(n, -1.0f);
    for (const Bucket& b : buckets) {
      for (int64_t i = b.begin; i < b.end; ++i) {
        float s = grads[0][i];
        for (int r = 1; r < R; ++r) s += grads[static_cast<size_t>(r)][i];
        expect[i] = s;
      }
    }
    std::fill(sink.out.begin(), sink.out.end(), -1.0f);
    team.Run([&](int rank) {
      // Ranks make buckets ready in different orders and at different times.
      std::vector<int> order = {2, 1, 0};
      if (rank % 2 == 1) std::reverse(order.begin(), order.end());
      for (int b : order) {
        if (rank == step % R) std::this_thread::yield();
        comm.BucketReady(rank, b, scratch[static_cast<size_t>(rank)].data());
      }
      comm.Finish(rank, scratch[static_cast<size_t>(rank)].data());
      // After Finish, every range is through the sink, whichever rank reduced it.
      for (int64_t i = 0; i < n; i += 97) {
        if (sink.out[static_cast<size_t>(i)] != expect[static_cast<size_t>(i)]) {
          ADD_FAILURE() << "rank " << rank << " step " << step << " element " << i;
          break;
        }
      }
    });
    ASSERT_EQ(sink.out, expect) << "step " << step;
  }
  // Every chunk once per step: ceil(100/64) + ceil(4888/64) + ceil(2/64) = 2 + 77 + 1.
  EXPECT_EQ(sink.calls.load(), 20 * 80);
  // Work was shared (claims are dynamic, so not evenly, but not all by one rank either).
  std::sort(sink.ranks.begin(), sink.ranks.end());
  EXPECT_GT(std::unique(sink.ranks.begin(), sink.ranks.end()) - sink.ranks.begin(), 1);
}

// Fails the whole binary (rather than hanging it) when `body` has not returned in time.
void WithWatchdog(const char* what, const std::function<void()>& body) {
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 3000 && !finished.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!finished.load()) {
      std::fprintf(stderr, "%s: no progress in 30 s (deadlock)\n", what);
      std::_Exit(1);
    }
  });
  body();
  finished.store(true);
  watchdog.join();
}

// Bug: Finish took its snapshot of the progress counter after checking for work and
// completion, so when another rank finished the last chunk between the two it slept through
// the final notification, forever. One tiny bucket and thousands of steps make that window
// likely to be hit.
TEST(Collective, FinishDoesNotSleepThroughTheLastChunk) {
  WithWatchdog("FinishDoesNotSleepThroughTheLastChunk", [] {
    const int R = 2;
    std::vector<std::vector<float>> grads(R, std::vector<float>(16, 1.0f));
    std::vector<const float*> ptrs;
    for (auto& g : grads) ptrs.push_back(g.data());
    CopySink sink(16);
    Communicator comm(ptrs, {{0, 16}}, 16, &sink);
    std::vector<std::vector<float>> scratch(R, std::vector<float>(16));
    ThreadTeam team(R);
    team.Run([&](int rank) {
      Rng rng(static_cast<uint64_t>(rank));
      for (int step = 0; step < 3000; ++step) {
        for (uint64_t spin = rng.Below(200); spin > 0; --spin) {
          std::atomic_signal_fence(std::memory_order_seq_cst);  // a short, varying delay
        }
        comm.BucketReady(rank, 0, scratch[static_cast<size_t>(rank)].data());
        comm.Finish(rank, scratch[static_cast<size_t>(rank)].data());
      }
    });
    EXPECT_EQ(sink.calls.load(), 3000);
    EXPECT_EQ(sink.out, std::vector<float>(16, 2.0f));
  });
}

TEST(Collective, OneRankHandsItsGradientsOverAtOnce) {
  std::vector<float> grads = {1, 2, 3, 4};
  CopySink sink(4);
  Communicator comm({grads.data()}, {{0, 2}, {2, 4}}, 16, &sink);
  float scratch[16];
  comm.BucketReady(0, 1, scratch);
  EXPECT_EQ(sink.calls.load(), 1);  // during backward, not at Finish
  EXPECT_EQ(sink.out, (std::vector<float>{-1, -1, 3, 4}));
  comm.BucketReady(0, 0, scratch);
  comm.Finish(0, scratch);  // returns at once: nothing to wait for
  EXPECT_EQ(sink.out, grads);
  const CommTimes t = comm.TakeTimes(0);
  EXPECT_EQ(t.exposed_s, 0.0);
  EXPECT_EQ(t.reduce_s, 0.0);
}

TEST(ThreadTeam, RunsEveryRankAndRethrows) {
  ThreadTeam team(3);
  std::vector<int> hits(3, 0);
  for (int i = 0; i < 50; ++i) {
    team.Run([&](int rank) { ++hits[static_cast<size_t>(rank)]; });
  }
  EXPECT_EQ(hits, (std::vector<int>{50, 50, 50}));
  EXPECT_THROW(team.Run([](int rank) {
    if (rank == 2) throw std::runtime_error("boom");
  }),
               std::runtime_error);
  team.Run([&](int rank) { ++hits[static_cast<size_t>(rank)]; });  // still usable
  EXPECT_EQ(hits, (std::vector<int>{51, 51, 51}));
}

}  // namespace
}  // namespace sweep::trainer::cpu
