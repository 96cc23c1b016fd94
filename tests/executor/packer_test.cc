// Packer and Queue: gang placement, link groups, best fit, priority, GPU sharing, release,
// reservations against starvation, and determinism.
#include "executor/packer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <deque>
#include <limits>
#include <random>
#include <tuple>

namespace sweep::executor {
namespace {

Server Gpus(int id, std::vector<int> link_group) { return Server{id, std::move(link_group), 0}; }
Server Flat(int id, int gpus) { return Gpus(id, std::vector<int>(gpus, 0)); }

Packer Make(std::vector<Server> servers, PackerOptions options = {}) {
  Result<Packer> p = Packer::Create(std::move(servers), options);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return std::move(p).value();
}

Request Req(int64_t trial, int gpus, int priority = 0, int share = 1) {
  return Request{trial, gpus, share, priority};
}

Placement MustPlace(Packer& p, const Request& r) {
  std::optional<Placement> got = p.Place(r);
  EXPECT_TRUE(got.has_value()) << "trial " << r.trial;
  return got.value_or(Placement{});
}

// ---- packer ----

TEST(PackerTest, CreateRejectsBadClusters) {
  EXPECT_FALSE(Packer::Create({Flat(1, 2), Flat(1, 2)}).ok());
  EXPECT_FALSE(Packer::Create({Server{2, {}, 0}}).ok());
  Result<Packer> cpu = Packer::Create({Server{3, {}, 4}});
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->gpu());
  EXPECT_EQ(cpu->total_slots(), 4);
}

// Servers join and leave (remote agents): totals follow, a request waits for a server big
// enough, and what was placed on a server that left cannot be released.
TEST(PackerTest, ServersJoinAndLeave) {
  Result<Packer> made = Packer::Create({});
  ASSERT_TRUE(made.ok());
  Packer& p = *made;
  EXPECT_EQ(p.total_slots(), 0);
  EXPECT_FALSE(p.Check(Req(1, 1)).ok());
  EXPECT_FALSE(p.Place(Req(1, 1)).has_value());
  ASSERT_TRUE(p.AddServer(Flat(5, 2)).ok());
  EXPECT_FALSE(p.AddServer(Flat(5, 4)).ok());
  ASSERT_TRUE(p.AddServer(Server{2, {}, 4}).ok());  // CPU shares beside GPUs
  EXPECT_EQ(p.total_slots(), 6);
  EXPECT_EQ(p.largest_server(), 4);
  Placement a = MustPlace(p, Req(1, 3));
  EXPECT_EQ(a.server, 2);
  Placement b = MustPlace(p, Req(2, 1, 0, /*share=*/2));  // shared: GPUs only
  EXPECT_EQ(b.server, 5);
  ASSERT_TRUE(p.RemoveServer(2).ok());
  EXPECT_EQ(p.RemoveServer(2).code(), Status::Code::kNotFound);
  EXPECT_EQ(p.total_slots(), 2);
  EXPECT_EQ(p.free_slots(), 1);
  EXPECT_EQ(p.largest_server(), 2);
  EXPECT_FALSE(p.Release(a).ok());
  EXPECT_FALSE(p.Check(Req(3, 3)).ok());
  ASSERT_TRUE(p.Release(b).ok());
  EXPECT_EQ(p.free_slots(), 2);
  ASSERT_TRUE(p.AddServer(Server{2, {}, 4}).ok());  // it comes back
  EXPECT_EQ(MustPlace(p, Req(4, 4)).server, 2);
}

// gpu_share is for GPUs: beside a GPU server, CPU slots still take trials, one each, once no
// GPU has room (they did sit idle).
TEST(PackerTest, SharedRequestsUseCpuSlotsOnlyWhereNoGpuHasRoom) {
  Packer p = Make({Flat(0, 1), Server{1, {}, 2}});
  EXPECT_EQ(MustPlace(p, Req(1, 1, 0, /*share=*/2)).server, 0);
  EXPECT_EQ(MustPlace(p, Req(2, 1, 0, 2)).server, 0);  // the GPU, shared two ways
  Placement c = MustPlace(p, Req(3, 1, 0, 2));
  EXPECT_EQ(c.server, 1);
  EXPECT_EQ(c.share, 1);  // a CPU slot of its own
  Placement d = MustPlace(p, Req(4, 1, 0, 2));
  EXPECT_EQ(d.server, 1);
  EXPECT_NE(d.gpus, c.gpus);
  EXPECT_FALSE(p.Place(Req(5, 1, 0, 2)).has_value());
  ASSERT_TRUE(p.Release(c).ok());
  EXPECT_EQ(MustPlace(p, Req(6, 1, 0, 2)).gpus, c.gpus);
}

TEST(PackerTest, CheckRejectsImpossibleRequests) {
  Packer p = Make({Flat(0, 4), Flat(1, 8)});
  EXPECT_TRUE(p.Check(Req(1, 8)).ok());
  EXPECT_FALSE(p.Check(Req(1, 9)).ok());
  EXPECT_FALSE(p.Check(Req(1, 0)).ok());
  EXPECT_FALSE(p.Check(Req(1, 2, 0, /*share=*/2)).ok());
  EXPECT_FALSE(p.Place(Req(1, 9)).has_value());
  EXPECT_EQ(p.free_slots(), 12);
}

TEST(PackerTest, GangIsAllOrNothing) {
  Packer p = Make({Flat(0, 4), Flat(1, 4)});
  MustPlace(p, Req(1, 3));
  MustPlace(p, Req(2, 3));
  EXPECT_EQ(p.free_slots(), 2);  // one free on each server: a 2-GPU trial does not fit
  EXPECT_FALSE(p.Place(Req(3, 2)).has_value());
  EXPECT_EQ(p.free_slots(), 2);  // and took nothing
  Placement one = MustPlace(p, Req(4, 1));
  EXPECT_EQ(one.gpus.size(), 1u);
}

TEST(PackerTest, PrefersTheSmallestLinkGroupThatFits) {
  Packer p = Make({Gpus(0, {7, 7, 3, 3, 3, 3})});
  Placement a = MustPlace(p, Req(1, 2));
  EXPECT_EQ(a.gpus, (std::vector<int>{0, 1}));  // the pair, keeping the group of four whole
  Placement b = MustPlace(p, Req(2, 3));
  EXPECT_EQ(b.gpus, (std::vector<int>{2, 3, 4}));
}

TEST(PackerTest, SpansTheFewestLinkGroups) {
  Packer p = Make({Gpus(0, {0, 0, 0, 1, 1, 2})});
  Placement a = MustPlace(p, Req(1, 5));
  EXPECT_EQ(a.gpus, (std::vector<int>{0, 1, 2, 3, 4}));  // groups 0 and 1, not 2
}

TEST(PackerTest, PrefersOneLinkGroupAcrossServers) {
  // Server 0: two free GPUs in different groups; server 1: four free. A pair goes where it can
  // share a link, though server 0 is the tighter fit.
  Packer p = Make({Gpus(0, {0, 0, 1, 1}), Gpus(1, {0, 0, 1, 1})});
  MustPlace(p, Req(1, 1));  // server 0 gpu 0
  Placement b = MustPlace(p, Req(2, 1));
  ASSERT_EQ(b.server, 0);
  ASSERT_EQ(b.gpus, (std::vector<int>{1}));  // completes group 0 first (tightest group)
  ASSERT_TRUE(p.Release(Placement{1, 0, {0}, 1}).ok());
  MustPlace(p, Req(3, 1));  // back on server 0, group 0 again
  Placement c = MustPlace(p, Req(4, 1));
  EXPECT_EQ(c.server, 0);
  EXPECT_EQ(c.gpus, (std::vector<int>{2}));
  Placement d = MustPlace(p, Req(5, 2));
  EXPECT_EQ(d.server, 1);
  EXPECT_EQ(d.gpus, (std::vector<int>{0, 1}));
}

TEST(PackerTest, BestFitAcrossServersTiesByLowerId) {
  Packer p = Make({Flat(2, 8), Flat(0, 8), Flat(1, 8)});
  EXPECT_EQ(MustPlace(p, Req(1, 5)).server, 0);  // all empty: lowest id
  EXPECT_EQ(MustPlace(p, Req(2, 6)).server, 1);  // server 0 has 3 free: does not fit
  EXPECT_EQ(MustPlace(p, Req(3, 2)).server, 1);  // 0 left on server 1 beats 1 on server 0
  EXPECT_EQ(MustPlace(p, Req(4, 3)).server, 0);
  EXPECT_EQ(MustPlace(p, Req(5, 4)).server, 2);
  EXPECT_EQ(p.free_slots(0), 0);
  EXPECT_EQ(p.free_slots(1), 0);
  EXPECT_EQ(p.free_slots(2), 4);
}

TEST(PackerTest, FirstFitTakesTheLowestServerWithRoom) {
  Packer p = Make({Flat(0, 8), Flat(1, 8)}, PackerOptions{Fit::kFirstFit});
  MustPlace(p, Req(1, 6));
  MustPlace(p, Req(2, 6));
  EXPECT_EQ(MustPlace(p, Req(3, 1)).server, 0);  // best fit would pick either; first fit: 0
  ASSERT_TRUE(p.Release(Placement{1, 0, {0, 1, 2, 3, 4, 5}, 1}).ok());
  EXPECT_EQ(MustPlace(p, Req(4, 2)).server, 0);  // best fit would pick server 1 (2 free)
}

TEST(PackerTest, GpuShareFillsAGpuUpToItsLimit) {
  Packer p = Make({Flat(0, 2)});
  Placement a = MustPlace(p, Req(1, 1, 0, 3));
  Placement b = MustPlace(p, Req(2, 1, 0, 3));
  Placement c = MustPlace(p, Req(3, 1, 0, 3));
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_EQ(a.gpus, c.gpus);
  EXPECT_EQ(p.free_slots(), 1);
  Placement d = MustPlace(p, Req(4, 1, 0, 3));  // the fourth opens the other GPU
  EXPECT_NE(d.gpus, a.gpus);
  EXPECT_EQ(p.free_slots(), 0);
  EXPECT_FALSE(p.Place(Req(5, 1)).has_value());        // no whole GPU for an exclusive trial
  EXPECT_FALSE(p.Place(Req(6, 1, 0, 2)).has_value());  // nor a GPU shared two ways
  EXPECT_EQ(p.trials_on(0), 4);
  ASSERT_TRUE(p.Release(a).ok());
  ASSERT_TRUE(p.Release(b).ok());
  EXPECT_EQ(p.free_slots(), 0);  // trial 3 still runs there
  ASSERT_TRUE(p.Release(c).ok());
  EXPECT_EQ(p.free_slots(), 1);
  EXPECT_EQ(MustPlace(p, Req(5, 1)).gpus, a.gpus);
}

TEST(PackerTest, ReleaseReturnsSlotsAndRejectsWhatIsNotHeld) {
  Packer p = Make({Gpus(0, {0, 0, 1, 1})});
  Placement a = MustPlace(p, Req(1, 2));
  EXPECT_EQ(p.free_slots(), 2);
  EXPECT_FALSE(p.Release(Placement{1, 9, a.gpus, 1}).ok());  // unknown server
  EXPECT_FALSE(p.Release(Placement{1, 0, {0, 2}, 1}).ok());  // slot 2 is free
  EXPECT_FALSE(p.Release(Placement{1, 0, a.gpus, 2}).ok());  // not shared
  EXPECT_FALSE(p.Release(Placement{1, 0, {7}, 1}).ok());     // no such slot
  EXPECT_EQ(p.free_slots(), 2);                              // none of those changed anything
  ASSERT_TRUE(p.Release(a).ok());
  EXPECT_EQ(p.free_slots(), 4);
  EXPECT_EQ(p.trials_on(0), 0);
  EXPECT_FALSE(p.Release(a).ok());  // twice
  EXPECT_EQ(MustPlace(p, Req(2, 4)).gpus, (std::vector<int>{0, 1, 2, 3}));
}

TEST(PackerTest, ReservedServerTakesOnlyItsTrial) {
  Packer p = Make({Flat(0, 4), Flat(1, 4)});
  MustPlace(p, Req(1, 2));  // server 0
  ASSERT_TRUE(p.Reserve(0, 9).ok());
  EXPECT_EQ(p.Reserve(0, 8).code(), Status::Code::kBusy);
  EXPECT_EQ(p.Reserve(5, 8).code(), Status::Code::kNotFound);
  EXPECT_EQ(MustPlace(p, Req(2, 1)).server, 1);  // best fit would be server 0
  EXPECT_EQ(MustPlace(p, Req(9, 2)).server, 0);  // its owner may use it
  p.Unreserve(0);
  EXPECT_FALSE(p.reserved_for(0).has_value());
}

TEST(PackerTest, LinkGroupsFromRanks) {
  // NVLink pairs (rank 0) joined by PCIe (rank 1).
  std::vector<std::vector<int>> rank = {{0, 0, 1, 1}, {0, 0, 1, 1}, {1, 1, 0, 0}, {1, 1, 0, 0}};
  EXPECT_EQ(LinkGroupsFromRanks(rank), (std::vector<int>{0, 0, 2, 2}));
  // A chain 0-1-2 of fast links is one group.
  rank = {{0, 2, 5}, {2, 0, 2}, {5, 2, 0}};
  EXPECT_EQ(LinkGroupsFromRanks(rank), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(LinkGroupsFromRanks({{0, 1}, {1}}), (std::vector<int>{0, 1}));  // malformed
}

// ---- queue ----

// Empties a queue whose requests each fill the cluster: the order they ran in.
std::vector<int64_t> RunOneAtATime(Queue& q, Packer& p) {
  std::vector<int64_t> order;
  while (!q.empty()) {
    std::vector<Placement> got = q.Schedule(p);
    EXPECT_EQ(got.size(), 1u);
    if (got.empty()) break;
    order.push_back(got[0].trial);
    EXPECT_TRUE(p.Release(got[0]).ok());
  }
  return order;
}

TEST(PackerQueueTest, HigherPriorityThenArrivalGoesFirst) {
  Packer p = Make({Flat(0, 4)});
  Queue q;
  ASSERT_TRUE(q.Push(Req(1, 4, /*priority=*/0), p).ok());
  ASSERT_TRUE(q.Push(Req(2, 4, /*priority=*/2), p).ok());
  ASSERT_TRUE(q.Push(Req(3, 4, /*priority=*/2), p).ok());
  EXPECT_EQ(q.Push(Req(3, 1), p).code(), Status::Code::kAlreadyExists);
  EXPECT_EQ(q.Push(Req(4, 5), p).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RunOneAtATime(q, p), (std::vector<int64_t>{2, 3, 1}));
}

TEST(PackerQueueTest, LongerExpectedDurationFirstWithinAPriority) {
  Packer p = Make({Flat(0, 1)});
  Queue q;
  auto with_cost = [](int64_t trial, int priority, double cost_s) {
    Request r = Req(trial, 1, priority);
    r.cost_s = cost_s;
    return r;
  };
  ASSERT_TRUE(q.Push(with_cost(1, 0, 60), p).ok());
  ASSERT_TRUE(q.Push(with_cost(2, 0, 3600), p).ok());
  ASSERT_TRUE(q.Push(with_cost(3, 0, 0), p).ok());     // unknown: after those with an estimate
  ASSERT_TRUE(q.Push(with_cost(4, 1, 10), p).ok());    // a rung survived beats any duration
  ASSERT_TRUE(q.Push(with_cost(5, 0, 3600), p).ok());  // a tie keeps arrival order
  EXPECT_EQ(RunOneAtATime(q, p), (std::vector<int64_t>{4, 2, 5, 1, 3}));
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    Status s = q.Push(with_cost(9, 0, bad), p);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("trial 9"), std::string::npos) << s.message();
  }
}

TEST(PackerQueueTest, BackfillsPastARequestThatDoesNotFit) {
  Packer p = Make({Flat(0, 4)});
  MustPlace(p, Req(1, 2));
  Queue q;
  ASSERT_TRUE(q.Push(Req(2, 4, 1), p).ok());
  ASSERT_TRUE(q.Push(Req(3, 1), p).ok());
  ASSERT_TRUE(q.Push(Req(4, 4), p).ok());
  ASSERT_TRUE(q.Push(Req(5, 1), p).ok());
  std::vector<Placement> got = q.Schedule(p);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].trial, 3);
  EXPECT_EQ(got[1].trial, 5);
  EXPECT_EQ(q.bypasses(2), 2);
  // Trial 4 is of trial 2's class, behind it: hopeless once 2 failed, so not visited. Only the
  // first of a class to fail counts bypasses; it is the one that would reserve first.
  EXPECT_EQ(q.bypasses(4), 0);
  EXPECT_EQ(q.bypasses(3), -1);
}

// One 8-GPU server busy with 1-GPU trials; an 8-GPU request waits while a 1-GPU request arrives
// each time a 1-GPU trial ends. Returns the step at which the big one ran, or -1.
int StepWhenBigRuns(QueueOptions options, int steps) {
  Packer p = Make({Flat(0, 8)});
  Queue q(options);
  std::deque<Placement> running;
  int64_t next = 100;
  for (int i = 0; i < 8; ++i) running.push_back(MustPlace(p, Req(next++, 1)));
  EXPECT_TRUE(q.Push(Req(1, 8), p).ok());
  for (int step = 0; step < steps; ++step) {
    if (!running.empty()) {
      EXPECT_TRUE(p.Release(running.front()).ok());
      running.pop_front();
    }
    EXPECT_TRUE(q.Push(Req(next++, 1), p).ok());
    for (Placement& got : q.Schedule(p)) {
      if (got.trial == 1) return step;
      running.push_back(std::move(got));
    }
  }
  return -1;
}

TEST(PackerQueueTest, EightGpuRequestIsNotStarvedByOneGpuStream) {
  QueueOptions options;
  options.reserve_after_bypasses = 4;
  int step = StepWhenBigRuns(options, 1000);
  // 4 bypasses to reserve, then the 8 running trials drain one per step.
  EXPECT_GE(step, 0);
  EXPECT_LE(step, 4 + 8);
  // Without reservations the stream takes every freed GPU: the big request never runs.
  options.reserve_after_bypasses = 0;
  EXPECT_EQ(StepWhenBigRuns(options, 1000), -1);
}

TEST(PackerQueueTest, RemoveGivesTheReservationBack) {
  Packer p = Make({Flat(0, 4)});
  MustPlace(p, Req(1, 1));
  Queue q(QueueOptions{1, 1});
  ASSERT_TRUE(q.Push(Req(2, 4), p).ok());
  ASSERT_TRUE(q.Push(Req(3, 1), p).ok());
  ASSERT_EQ(q.Schedule(p).size(), 1u);  // trial 3 passes trial 2 once
  ASSERT_TRUE(q.Push(Req(4, 1), p).ok());
  EXPECT_TRUE(q.Schedule(p).empty());  // trial 2 reserves server 0; trial 4 may not go there
  EXPECT_EQ(q.reservation(2), std::optional<int>(0));
  EXPECT_EQ(p.reserved_for(0), std::optional<int64_t>(2));
  EXPECT_TRUE(q.Remove(2, p));
  EXPECT_FALSE(q.Remove(2, p));
  EXPECT_FALSE(p.reserved_for(0).has_value());
  ASSERT_EQ(q.Schedule(p).size(), 1u);  // trial 4 runs
}

// A random stream of requests, releases and shares; the placements as text.
std::vector<std::string> RandomRun(uint32_t seed) {
  Packer p = Make({Gpus(3, {0, 0, 1, 1, 1, 1, 2, 2}), Flat(1, 8), Gpus(2, {0, 0, 0, 0})});
  Queue q(QueueOptions{8, 1});
  std::mt19937 rng(seed);
  std::vector<Placement> running;
  std::vector<std::string> log;
  for (int64_t trial = 0; trial < 400; ++trial) {
    int gpus = 1 << (rng() % 4);
    int share = gpus == 1 && rng() % 4 == 0 ? 2 : 1;
    EXPECT_TRUE(q.Push(Request{trial, gpus, share, static_cast<int>(rng() % 3)}, p).ok());
    for (Placement& got : q.Schedule(p)) {
      std::string line = std::to_string(got.trial) + "@" + std::to_string(got.server) + ":";
      for (int g : got.gpus) line += std::to_string(g) + ",";
      log.push_back(line);
      running.push_back(std::move(got));
    }
    while (!running.empty() && rng() % 3 != 0) {
      size_t k = rng() % running.size();
      EXPECT_TRUE(p.Release(running[k]).ok());
      running.erase(running.begin() + static_cast<long>(k));
    }
  }
  return log;
}

// Schedule skips the requests a pass cannot place; what it places must be what a plain walk over
// every pending request in queue order places (no reservations here, so no holder to visit).
TEST(PackerQueueTest, SkippingHopelessRequestsPlacesWhatAPlainWalkPlaces) {
  std::mt19937 rng(11);
  Packer p = Make({Gpus(0, {0, 0, 1, 1, 1, 1, 2, 2}), Flat(1, 8), Gpus(2, {0, 0, 0, 0})});
  Queue q(QueueOptions{0, 1});
  std::vector<std::pair<std::tuple<int, double, int64_t>, Request>> pending;  // the reference
  std::vector<Placement> running;
  int64_t placed_total = 0;
  for (int64_t trial = 0; trial < 3000; ++trial) {
    Request r;
    r.trial = trial;
    r.gpus = 1 << (rng() % 4);
    r.share = r.gpus == 1 && rng() % 4 == 0 ? 2 + static_cast<int>(rng() % 2) : 1;
    r.priority = static_cast<int>(rng() % 3);
    r.cost_s = static_cast<double>(rng() % 50);
    ASSERT_TRUE(q.Push(r, p).ok());
    pending.push_back({{-r.priority, -r.cost_s, trial}, r});
    // The reference pass, on a copy of the packer.
    Packer ref = p;
    std::sort(pending.begin(), pending.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> want;
    int smallest_failed = INT_MAX;
    std::vector<int> failed_shares;
    for (auto it = pending.begin(); it != pending.end();) {
      const Request& x = it->second;
      bool hopeless = x.share == 1
                          ? x.gpus >= smallest_failed
                          : std::count(failed_shares.begin(), failed_shares.end(), x.share) > 0;
      std::optional<Placement> got = hopeless ? std::nullopt : ref.Place(x);
      if (got) {
        want.push_back(std::to_string(got->trial) + "@" + std::to_string(got->server));
        it = pending.erase(it);
        continue;
      }
      if (x.share == 1) {
        smallest_failed = std::min(smallest_failed, x.gpus);
      } else {
        failed_shares.push_back(x.share);
      }
      ++it;
    }
    std::vector<std::string> have;
    for (Placement& got : q.Schedule(p)) {
      have.push_back(std::to_string(got.trial) + "@" + std::to_string(got.server));
      running.push_back(std::move(got));
    }
    ASSERT_EQ(have, want) << "after trial " << trial;
    placed_total += static_cast<int64_t>(have.size());
    while (!running.empty() && rng() % 2 != 0) {
      size_t k = rng() % running.size();
      ASSERT_TRUE(p.Release(running[k]).ok());
      running.erase(running.begin() + static_cast<long>(k));
    }
  }
  EXPECT_GT(placed_total, 1000);
  EXPECT_GT(q.size(), 100u);  // a long queue built up, so the skipping was exercised
}

TEST(PackerQueueTest, SameInputsGiveSamePlacements) {
  std::vector<std::string> a = RandomRun(7);
  EXPECT_GT(a.size(), 100u);
  EXPECT_EQ(a, RandomRun(7));
  EXPECT_NE(a, RandomRun(8));
}

}  // namespace
}  // namespace sweep::executor
