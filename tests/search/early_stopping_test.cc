// Tests for the early-stopping schedulers: configuration messages, the median rule, ASHA and
// Hyperband on hand-made histories (ties, too few trials, NaN, both modes), the replay contract
// that resume relies on, and a 100k-report run. Deterministic: fixed seeds, no clocks.
// Single-threaded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "search/early_stopping.h"
#include "search_test_util.h"

namespace sweep::search {
namespace {

using testing::kInf;
using testing::kNan;

SchedulerConfig Asha(bool maximize = true) {
  SchedulerConfig c;
  c.algorithm = EarlyStopping::kAsha;
  c.min_resource = 1;
  c.max_resource = 27;
  c.reduction_factor = 3;
  c.maximize = maximize;
  c.metric = "val_acc";
  return c;
}

SchedulerConfig Hyperband() {
  SchedulerConfig c = Asha();
  c.algorithm = EarlyStopping::kHyperband;
  return c;
}

SchedulerConfig Median(int64_t grace_period, int64_t min_trials, bool maximize = true) {
  SchedulerConfig c;
  c.algorithm = EarlyStopping::kMedian;
  c.grace_period = grace_period;
  c.min_trials = min_trials;
  c.maximize = maximize;
  c.metric = "val_acc";
  return c;
}

std::unique_ptr<Scheduler> Make(const SchedulerConfig& config) {
  auto scheduler = MakeScheduler(config);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status().message();
  return scheduler.ok() ? std::move(scheduler).value() : nullptr;
}

std::string Refusal(const SchedulerConfig& config) {
  Status status = Validate(config);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  auto made = MakeScheduler(config);
  EXPECT_FALSE(made.ok());
  if (!made.ok()) {
    EXPECT_EQ(made.status().message(), status.message());
  }
  return status.message();
}

// "c" for continue, "s" for stop: one letter per report, so a history's decisions read as a word.
std::string Letters(Scheduler& scheduler, int64_t first_trial, double resource,
                    const std::vector<double>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += scheduler.OnReport(first_trial + static_cast<int64_t>(i), resource, values[i]).stop()
               ? 's'
               : 'c';
  }
  return out;
}

// ---- configuration ----

TEST(SchedulerConfigTest, NamesRoundTrip) {
  for (EarlyStopping a : {EarlyStopping::kNone, EarlyStopping::kMedian, EarlyStopping::kAsha,
                          EarlyStopping::kHyperband}) {
    EXPECT_EQ(EarlyStoppingFromName(EarlyStoppingName(a)), a);
  }
  EXPECT_EQ(EarlyStoppingName(EarlyStopping::kHyperband), "hyperband");
  EXPECT_EQ(EarlyStoppingFromName("ASHA"), std::nullopt);
}

TEST(SchedulerConfigTest, MessagesNameTheKey) {
  SchedulerConfig c = Asha();
  c.reduction_factor = 1;
  EXPECT_EQ(Refusal(c), "early_stopping.reduction_factor must be >= 2 (got 1)");
  c = Asha();
  c.reduction_factor = kNan;
  EXPECT_EQ(Refusal(c), "early_stopping.reduction_factor must be >= 2 (got nan)");
  c = Asha();
  c.min_resource = 0;
  EXPECT_EQ(Refusal(c), "early_stopping.min_resource must be > 0 (got 0)");
  c = Asha();
  c.max_resource = 1;
  EXPECT_EQ(Refusal(c),
            "early_stopping.max_resource must be greater than early_stopping.min_resource (1): "
            "the epochs or steps a surviving trial runs to (got 1)");
  c = Asha();
  c.max_resource = kInf;
  EXPECT_FALSE(Validate(c).ok());
  c = Median(-1, 3);
  EXPECT_EQ(Refusal(c), "early_stopping.grace_period must be >= 0 (got -1)");
  c = Median(1, 0);
  EXPECT_EQ(Refusal(c), "early_stopping.min_trials must be >= 1 (got 0)");
  c = Hyperband();
  c.bootstrap_count = -1;
  EXPECT_EQ(Refusal(c), "early_stopping.bootstrap_count must be >= 0 (got -1)");
}

TEST(SchedulerConfigTest, ChecksOnlyWhatTheAlgorithmUses) {
  SchedulerConfig c;  // none, with max_resource 0: nothing to check
  EXPECT_TRUE(Validate(c).ok());
  c = Median(1, 3);
  c.max_resource = -5;  // median has no rungs
  EXPECT_TRUE(Validate(c).ok());
  c = Asha();
  c.min_trials = 0;  // median only
  EXPECT_TRUE(Validate(c).ok());
}

TEST(SchedulerConfigTest, RefusesAHyperbandCycleTooLargeToHold) {
  SchedulerConfig c = Hyperband();
  c.reduction_factor = 2;
  c.max_resource = 1 << 22;
  EXPECT_EQ(Refusal(c),
            "early_stopping: hyperband with max_resource / min_resource = 4.1943e+06 and "
            "reduction_factor = 2 needs 23 brackets and a cycle of 8.81337e+06 trials (at most "
            "1048576); raise min_resource or reduction_factor");
  c.algorithm = EarlyStopping::kAsha;  // one bracket: no cycle to hold
  EXPECT_TRUE(Validate(c).ok());
}

// Hyperband whose max_resource / min_resource is below reduction_factor has s_max = 0: its
// only bracket runs every trial to max_resource, which is no early stopping at all.
TEST(SchedulerConfigTest, RefusesAHyperbandThatWouldStopNothing) {
  SchedulerConfig c = Hyperband();
  c.min_resource = 1;
  c.max_resource = 2;
  c.reduction_factor = 3;
  EXPECT_EQ(Refusal(c),
            "early_stopping: hyperband with max_resource / min_resource = 2, below "
            "reduction_factor = 3, has a single bracket that runs every trial to max_resource "
            "and stops nothing; lower min_resource or reduction_factor, or use asha");
  c.max_resource = 3;  // s_max = 1: two brackets, the first judges at resource 1
  EXPECT_TRUE(Validate(c).ok());
  c.max_resource = 2;
  c.algorithm = EarlyStopping::kAsha;  // judges at resource 1
  EXPECT_TRUE(Validate(c).ok());
}

TEST(NoSchedulerTest, AlwaysContinues) {
  auto s = Make(SchedulerConfig());
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->OnReport(0, 1, kNan).stop());
  EXPECT_EQ(s->Rung(0), -1);
  EXPECT_FALSE(s->Stopped(0));
  EXPECT_EQ(s->MaxResource(0), kInf);
}

// ---- asha ----

TEST(AshaTest, RungsSitAtPowersOfEtaBelowMaxResource) {
  EXPECT_EQ(Make(Asha())->RungResources(), (std::vector<double>{1, 3, 9}));
  SchedulerConfig c = Asha();
  c.max_resource = 20;  // not a power of eta: the last rung is still 9
  EXPECT_EQ(Make(c)->RungResources(), (std::vector<double>{1, 3, 9}));
  c.max_resource = 9;
  EXPECT_EQ(Make(c)->RungResources(), (std::vector<double>{1, 3}));
  c.min_resource = 2;
  c.max_resource = 16;
  c.reduction_factor = 2;
  EXPECT_EQ(Make(c)->RungResources(), (std::vector<double>{2, 4, 8}));
  c.min_resource = 0.1;  // 0.1 * 10 * 10 is not exactly 10 in doubles: still no rung at max
  c.max_resource = 10;
  c.reduction_factor = 10;
  EXPECT_EQ(Make(c)->RungResources().size(), 2u);
  EXPECT_EQ(Make(c)->MaxResource(7), 10);
}

TEST(AshaTest, KeepsTheTopThirdOfTheTrialsRecordedSoFar) {
  auto s = Make(Asha());
  // keep = max(1, floor(n / 3)) of the n trials at the rung, this one included:
  //   n=1 keep 1: 0.5 best            -> c     n=6 keep 2: 0.7 in {0.7, 0.6}     -> c
  //   n=2 keep 1: 0.4 < 0.5           -> s     n=7 keep 2: 0.2                   -> s
  //   n=3 keep 1: 0.6 best            -> c     n=8 keep 2: 0.65 in {0.7, 0.65}   -> c
  //   n=4 keep 1: 0.3                 -> s     n=9 keep 3: 0.71 best             -> c
  //   n=5 keep 1: 0.55 < 0.6          -> s     n=10 keep 3: 0.62 < 0.65 (3rd)    -> s
  EXPECT_EQ(Letters(*s, 0, 1, {0.5, 0.4, 0.6, 0.3, 0.55, 0.7, 0.2, 0.65, 0.71, 0.62}),
            "cscsscsccs");
  Decision d = s->OnReport(10, 1, 0.64);
  EXPECT_TRUE(d.stop());
  EXPECT_EQ(d.rung, 0);
  EXPECT_EQ(d.reason,
            "pruned at rung 0 (resource 1): val_acc 0.64 not in the top 1/3 of 11 trials "
            "(cutoff 0.65)");
  EXPECT_EQ(s->Rung(10), -1);
  EXPECT_EQ(s->Rung(8), 0);
  EXPECT_TRUE(s->Stopped(10));
  EXPECT_FALSE(s->Stopped(8));
}

TEST(AshaTest, MinimizeMirrorsMaximize) {
  auto s = Make(Asha(/*maximize=*/false));
  EXPECT_EQ(Letters(*s, 0, 1, {-0.5, -0.4, -0.6, -0.3, -0.55, -0.7, -0.2, -0.65, -0.71, -0.62}),
            "cscsscsccs");
  EXPECT_EQ(s->OnReport(10, 1, -0.64).reason,
            "pruned at rung 0 (resource 1): val_acc -0.64 not in the top 1/3 of 11 trials "
            "(cutoff -0.65)");
}

TEST(AshaTest, TooFewTrialsKeepOnlyTheBest) {
  auto s = Make(Asha());
  EXPECT_FALSE(s->OnReport(0, 1, 0.5).stop());  // the first trial at a rung always continues
  Decision d = s->OnReport(1, 1, 0.4);
  EXPECT_TRUE(d.stop());
  EXPECT_EQ(d.reason,
            "pruned at rung 0 (resource 1): val_acc 0.4 not the best of the 2 trials there "
            "(best 0.5; a rung with fewer than 3 trials keeps only its best)");
  // n = 3: no longer "too few", the ordinary rule (keep 1 of 3) and message.
  EXPECT_EQ(s->OnReport(2, 1, 0.45).reason,
            "pruned at rung 0 (resource 1): val_acc 0.45 not in the top 1/3 of 3 trials "
            "(cutoff 0.5)");
}

TEST(AshaTest, BootstrapCountStopsTheFirstTrialsAtEachRung) {
  SchedulerConfig c = Asha();
  c.bootstrap_count = 2;
  auto s = Make(c);
  // Trials 0 and 1 are the first two at rung 0: stopped, however good, and their values stay
  // recorded there. From n = 3 on, the ordinary rule: 0.6 is the best of 3 (keep 1), 0.3 is
  // not, 0.9 is.
  EXPECT_EQ(Letters(*s, 0, 1, {0.5, 0.4, 0.6, 0.3, 0.9}), "sscsc");
  EXPECT_EQ(s->OnReport(5, 1, 0.1).reason,
            "pruned at rung 0 (resource 1): val_acc 0.1 not in the top 1/3 of 6 trials "
            "(cutoff 0.6)");
  Decision d = Make(c)->OnReport(7, 1, 0.5);
  EXPECT_TRUE(d.stop());
  EXPECT_EQ(d.reason,
            "pruned at rung 0 (resource 1): val_acc 0.5: among the first 2 trials to reach the "
            "rung, which bootstrap_count = 2 stops");
  // Each rung counts its own arrivals: trials 2 and 4 passed rung 0; at rung 1 (resource 3)
  // they are the first two, and stop there.
  EXPECT_EQ(Letters(*s, 2, 3, {0.7}), "s");
  EXPECT_EQ(s->OnReport(4, 3, 0.95).reason,
            "pruned at rung 1 (resource 3): val_acc 0.95: among the first 2 trials to reach the "
            "rung, which bootstrap_count = 2 stops");
  EXPECT_EQ(s->Rung(4), 0);
  EXPECT_TRUE(s->Stopped(4));
}

TEST(AshaTest, TiesWithTheCutoffContinue) {
  auto s = Make(Asha());
  EXPECT_EQ(Letters(*s, 0, 1, std::vector<double>(12, 0.5)), std::string(12, 'c'));
  EXPECT_EQ(Letters(*s, 12, 1, {0.4999}), "s");
  // Minimize as well.
  auto m = Make(Asha(false));
  EXPECT_EQ(Letters(*m, 0, 1, {2.0, 1.0, 1.0, 3.0, 1.0}), "cccsc");
}

TEST(AshaTest, NanNeverSurvivesAndRanksLast) {
  auto s = Make(Asha());
  Decision d = s->OnReport(0, 1, kNan);
  EXPECT_TRUE(d.stop());  // even as the first trial at the rung
  EXPECT_EQ(d.reason, "pruned at rung 0 (resource 1): val_acc is NaN");
  // It still counts as a (worst) trial there: 0.1 is the best of two and continues, and a third
  // and fourth trial meet keep = 1 with two numbers above the NaN.
  EXPECT_EQ(Letters(*s, 1, 1, {0.1, 0.05, 0.2, kNan}), "cscs");
  auto m = Make(Asha(false));
  EXPECT_EQ(Letters(*m, 0, 1, {kNan, 5.0, kNan}), "scs");
}

TEST(AshaTest, ClimbsTheRungsAndIsNotStoppedAtMaxResource) {
  auto s = Make(Asha());
  Decision d = s->OnReport(0, 1, 0.5);
  EXPECT_EQ(d.rung, 0);
  EXPECT_EQ(s->Rung(0), 0);
  d = s->OnReport(0, 2, 0.6);  // between rungs: nothing to judge
  EXPECT_FALSE(d.stop());
  EXPECT_EQ(d.rung, -1);
  EXPECT_EQ(s->OnReport(0, 3, 0.7).rung, 1);
  for (int epoch = 4; epoch <= 27; ++epoch) EXPECT_FALSE(s->OnReport(0, epoch, 0.8).stop());
  EXPECT_EQ(s->Rung(0), 2);
  EXPECT_FALSE(s->OnReport(0, 30, 0.8).stop());  // past max_resource: still not a prune
  // The rung at resource 3 is judged among the trials that reached 3, not those at 1.
  EXPECT_EQ(Letters(*s, 1, 1, {0.9, 0.95}), "cc");
  EXPECT_EQ(s->OnReport(1, 3, 0.6).reason,
            "pruned at rung 1 (resource 3): val_acc 0.6 not the best of the 2 trials there "
            "(best 0.7; a rung with fewer than 3 trials keeps only its best)");
}

TEST(AshaTest, ARungIsReachedByTheFirstReportAtOrAboveIt) {
  SchedulerConfig c = Asha();
  c.min_resource = 2.5;
  c.max_resource = 20;
  c.reduction_factor = 2;  // rungs 2.5, 5, 10
  auto s = Make(c);
  EXPECT_EQ(s->OnReport(0, 2, 0.5).rung, -1);
  EXPECT_EQ(s->OnReport(0, 3, 0.5).rung, 0);
  EXPECT_EQ(s->OnReport(0, 4, 0.5).rung, -1);
  EXPECT_EQ(s->OnReport(0, 5, 0.5).rung, 1);
}

TEST(AshaTest, FractionalRungsAreTheDecimalsTheyAreWrittenAs) {
  SchedulerConfig c = Asha();
  c.min_resource = 0.1;
  c.max_resource = 1;
  c.reduction_factor = 3;  // 0.1 * 3 is 0.30000000000000004 in doubles; the rung is 0.3
  auto s = Make(c);
  EXPECT_EQ(s->RungResources(), (std::vector<double>{0.1, 0.3, 0.9}));
  EXPECT_EQ(s->OnReport(0, 0.1, 10).rung, 0);
  EXPECT_EQ(s->OnReport(0, 0.3, 100).rung, 1);  // a report at epoch 0.3 is judged at rung 1
  EXPECT_EQ(s->OnReport(1, 0.1, 10).rung, 0);
  Decision d = s->OnReport(1, 0.3, 5);
  EXPECT_TRUE(d.stop());
  EXPECT_EQ(d.rung, 1);
  EXPECT_EQ(d.reason.rfind("pruned at rung 1 (resource 0.3)", 0), 0u) << d.reason;
  // Whole-number rungs keep every digit.
  c.min_resource = 1;
  c.max_resource = 1e15;
  EXPECT_EQ(Make(c)->RungResources().back(), 617673396283947.0);  // 3^31
}

TEST(AshaTest, AJumpOverSeveralRungsIsJudgedAtTheHighestOnly) {
  auto s = Make(Asha());
  Decision d = s->OnReport(0, 10, 0.9);
  EXPECT_EQ(d.rung, 2);
  EXPECT_EQ(s->Rung(0), 2);
  // Rungs 0 and 1 did not record trial 0: a poor trial is alone there and continues.
  EXPECT_FALSE(s->OnReport(1, 1, 0.1).stop());
  EXPECT_FALSE(s->OnReport(1, 3, 0.1).stop());
  EXPECT_TRUE(s->OnReport(1, 9, 0.1).stop());
}

TEST(AshaTest, ATrialsLastReportIsRecordedAtItsRungButNeverStopsIt) {
  // Rungs at 1.5, 3.75 and 9.375 below max_resource 10: a trial of 10 steps reaches the top
  // rung with its last report, when stopping it would save nothing.
  SchedulerConfig c = Asha();
  c.min_resource = 1.5;
  c.reduction_factor = 2.5;
  c.max_resource = 10;
  auto s = Make(c);
  ASSERT_EQ(s->RungResources().back(), 9.375);
  EXPECT_FALSE(s->OnReport(0, 10, 0.9, /*last=*/true).stop());
  Decision d = s->OnReport(1, 10, 0.1, /*last=*/true);
  EXPECT_FALSE(d.stop());
  EXPECT_EQ(d.rung, 2);
  EXPECT_FALSE(s->Stopped(1));
  EXPECT_EQ(s->Rung(1), -1);  // recorded there, not passed
  // Both values count against later trials: 0.5 is not in the top 1/2.5 of three.
  EXPECT_TRUE(s->OnReport(2, 9.5, 0.5).stop());
  // Without the flag, a report at max_resource is its trial's end all the same (a command, or
  // a trial longer than max_resource): recorded, not stopped.
  EXPECT_FALSE(s->OnReport(3, 10, 0.2).stop());
  // With 0.2 recorded there are five: the top two go on, and 0.6 is one of them.
  EXPECT_FALSE(s->OnReport(4, 9.5, 0.6).stop());
}

TEST(AshaTest, ReportsAfterAStopRepeatItAndChangeNothing) {
  auto s = Make(Asha());
  ASSERT_EQ(Letters(*s, 0, 1, {0.5, 0.4}), "cs");
  const Decision first = s->OnReport(1, 1, 0.4);  // the same report again: still the stop
  for (double epoch : {2.0, 3.0, 9.0}) {
    Decision again = s->OnReport(1, epoch, 0.99);  // on its way before STOP arrived
    EXPECT_TRUE(again.stop());
    EXPECT_EQ(again.rung, 0);
    EXPECT_EQ(again.reason, first.reason);
  }
  EXPECT_EQ(s->Rung(1), -1);
  // Rung 1 never saw trial 1's 0.99: trial 0 is alone there and continues with 0.1.
  EXPECT_FALSE(s->OnReport(0, 3, 0.1).stop());
}

TEST(AshaTest, AResourceThatDoesNotAdvanceChangesNothing) {
  auto s = Make(Asha());
  ASSERT_FALSE(s->OnReport(0, 1, 0.5).stop());
  ASSERT_FALSE(s->OnReport(0, 2, 0.5).stop());
  // A trial resumed from its epoch-1 checkpoint reports epochs 1 and 2 again.
  EXPECT_EQ(s->OnReport(0, 1, 0.1).rung, -1);
  EXPECT_FALSE(s->OnReport(0, 2, 0.1).stop());
  EXPECT_FALSE(s->OnReport(0, kNan, 0.1).stop());
  // Rung 0 still holds only 0.5: a new 0.45 is worse than the best of two.
  EXPECT_TRUE(s->OnReport(1, 1, 0.45).stop());
}

// ---- hyperband ----

TEST(HyperbandTest, BracketSizesFollowThePaper) {
  // R/r = 27, eta = 3: K = 3 rungs, n_b = ceil(4 / (s + 1) * 3^s) = 27, 12, 6, 4 (s = 3..0).
  auto s = Make(Hyperband());
  std::vector<int> counts(4, 0);
  for (int64_t i = 0; i < 49; ++i) ++counts[static_cast<size_t>(s->Bracket(i))];
  EXPECT_EQ(counts, (std::vector<int>{27, 12, 6, 4}));
  EXPECT_EQ(s->Bracket(0), 0);
  for (int64_t i = 0; i < 200; ++i) EXPECT_EQ(s->Bracket(i), s->Bracket(i + 49)) << i;
  // Interleaved, not in blocks: every bracket appears among the first 12 trials.
  std::vector<int> early(4, 0);
  for (int64_t i = 0; i < 12; ++i) ++early[static_cast<size_t>(s->Bracket(i))];
  for (int b = 0; b < 4; ++b) EXPECT_GT(early[static_cast<size_t>(b)], 0) << b;

  // R/r = 81: the paper's Table 1 has n = 81, 34, 15, 8, 5.
  SchedulerConfig c = Hyperband();
  c.max_resource = 81;
  auto t = Make(c);
  std::vector<int> big(5, 0);
  for (int64_t i = 0; i < 143; ++i) ++big[static_cast<size_t>(t->Bracket(i))];
  EXPECT_EQ(big, (std::vector<int>{81, 34, 15, 8, 5}));
  EXPECT_EQ(t->MaxResource(3), 81);
}

// A resumed sweep must put trial i in the bracket it had before, so the interleave is pinned.
TEST(HyperbandTest, BracketSequenceIsPinned) {
  auto s = Make(Hyperband());
  std::string cycle;
  for (int64_t i = 0; i < 49; ++i) cycle += static_cast<char>('0' + s->Bracket(i));
  EXPECT_EQ(cycle, "0102030100102010301002010100201030102010030102010");
}

TEST(HyperbandTest, PermuteBelowIsABijection) {
  for (uint64_t n : {1u, 2u, 3u, 17u, 49u, 143u, 1000u}) {
    for (uint64_t key : {0u, 1u, 99u}) {
      std::vector<uint64_t> seen;
      for (uint64_t x = 0; x < n; ++x) seen.push_back(internal::PermuteBelow(x, n, key));
      std::sort(seen.begin(), seen.end());
      for (uint64_t x = 0; x < n; ++x) ASSERT_EQ(seen[x], x) << "n " << n << " key " << key;
    }
  }
  EXPECT_NE(internal::PermuteBelow(5, 49, 0), internal::PermuteBelow(5, 49, 1));
}

// A grid's trial numbers run along its axes, the last fastest: read in the round-robin's order,
// the brackets would line up with an axis whose size divides the cycle (7 values, a cycle of 49:
// bracket 2 never saw 3 of the 7). Grid sweeps read each block of the cycle in a scrambled order:
// the same counts per block, every value of the axis in every bracket, and the same brackets
// again on resume.
TEST(HyperbandTest, GridOrderedTrialsDoNotLineTheBracketsUpWithAnAxis) {
  SchedulerConfig c = Hyperband();
  auto plain = Make(c);
  c.grid_order = true;
  auto grid = Make(c);
  auto again = Make(c);
  constexpr int kBlocks = 70, kAxis = 7;
  std::vector<std::vector<int>> plain_counts(4, std::vector<int>(kAxis, 0));
  std::vector<std::vector<int>> grid_counts(4, std::vector<int>(kAxis, 0));
  for (int64_t i = 0; i < 49 * kBlocks; ++i) {
    ++plain_counts[static_cast<size_t>(plain->Bracket(i))][static_cast<size_t>(i % kAxis)];
    ++grid_counts[static_cast<size_t>(grid->Bracket(i))][static_cast<size_t>(i % kAxis)];
    ASSERT_EQ(grid->Bracket(i), again->Bracket(i)) << i;
  }
  for (int block = 0; block < kBlocks; ++block) {
    std::vector<int> counts(4, 0);
    for (int64_t i = 0; i < 49; ++i) ++counts[static_cast<size_t>(grid->Bracket(49 * block + i))];
    ASSERT_EQ(counts, (std::vector<int>{27, 12, 6, 4})) << "block " << block;
  }
  EXPECT_EQ(*std::min_element(plain_counts[2].begin(), plain_counts[2].end()), 0);
  const std::vector<double> sizes = {27, 12, 6, 4};
  for (size_t b = 0; b < 4; ++b) {
    const double expected = sizes[b] * kBlocks / kAxis;
    for (int v = 0; v < kAxis; ++v) {
      const int got = grid_counts[b][static_cast<size_t>(v)];
      EXPECT_GT(got, 0.5 * expected) << "bracket " << b << ", axis value " << v;
      EXPECT_LT(got, 1.5 * expected) << "bracket " << b << ", axis value " << v;
    }
  }
}

int64_t FirstInBracket(const Scheduler& s, int bracket, int64_t skip = 0) {
  for (int64_t i = 0;; ++i) {
    if (s.Bracket(i) == bracket && skip-- == 0) return i;
  }
}

// Where max / min is not a power of eta, the brackets are still the paper's s_max + 1 with
// s_max = floor(log_eta(R / r)): R = 10, eta = 3 gives 3 brackets (9, 5, 3 trials), not a fourth
// whose only rung (9) would judge a trial one epoch before its end; and the last bracket,
// whose trials run to max_resource, is never judged at the ladder's extra rung either.
TEST(HyperbandTest, BracketsAreFloorOfLogWhenTheRatioIsNotAPower) {
  SchedulerConfig c = Hyperband();
  c.max_resource = 10;
  auto s = Make(c);
  EXPECT_EQ(s->RungResources(), (std::vector<double>{1, 3, 9}));
  std::vector<int> counts(4, 0);
  for (int64_t i = 0; i < 17; ++i) ++counts[static_cast<size_t>(s->Bracket(i))];
  EXPECT_EQ(counts, (std::vector<int>{9, 5, 3, 0}));
  for (int64_t i = 0; i < 100; ++i) EXPECT_LE(s->Bracket(i), 2) << i;
  // Bracket 2 runs to the end: a poor value at resource 9 does not stop it, however many trials
  // of its bracket did better there.
  const int64_t first = FirstInBracket(*s, 2);
  for (int64_t skip = 1; skip <= 3; ++skip) {
    const int64_t t = FirstInBracket(*s, 2, skip);
    EXPECT_FALSE(s->OnReport(t, 9, 0.9).stop());
  }
  EXPECT_FALSE(s->OnReport(first, 9, 0.0).stop());
  // Bracket 1 still judges at 3 and 9.
  const int64_t b1 = FirstInBracket(*s, 1), b1_next = FirstInBracket(*s, 1, 1);
  EXPECT_FALSE(s->OnReport(b1, 3, 0.9).stop());
  EXPECT_TRUE(s->OnReport(b1_next, 3, 0.1).stop());

  // R = 28: 4 brackets (27, 12, 6, 4), as for 27.
  c.max_resource = 28;
  auto t = Make(c);
  std::vector<int> four(5, 0);
  for (int64_t i = 0; i < 49; ++i) ++four[static_cast<size_t>(t->Bracket(i))];
  EXPECT_EQ(four, (std::vector<int>{27, 12, 6, 4, 0}));
}

TEST(HyperbandTest, EachBracketStartsAtItsOwnRungAndRanksOnlyItsTrials) {
  auto s = Make(Hyperband());
  const int64_t a0 = FirstInBracket(*s, 0);
  const int64_t b0 = FirstInBracket(*s, 1);
  const int64_t b1 = FirstInBracket(*s, 1, 1);
  const int64_t c0 = FirstInBracket(*s, 3);
  // Bracket 0 starts at rung 0 (resource 1); bracket 1 has no rung at 1.
  EXPECT_EQ(s->OnReport(a0, 1, 0.9).rung, 0);
  EXPECT_EQ(s->OnReport(b0, 1, 0.1).rung, -1);
  EXPECT_EQ(s->OnReport(a0, 3, 0.9).rung, 1);
  // At rung 1, bracket 1's first trial is alone in its bracket: a0's 0.9 does not count.
  EXPECT_FALSE(s->OnReport(b0, 3, 0.2).stop());
  EXPECT_EQ(s->Rung(b0), 1);
  Decision d = s->OnReport(b1, 3, 0.15);
  EXPECT_TRUE(d.stop());
  EXPECT_EQ(d.rung, 1);
  EXPECT_EQ(d.reason,
            "pruned at rung 1 (resource 3) of bracket 1: val_acc 0.15 not the best of the 2 "
            "trials there (best 0.2; a rung with fewer than 3 trials keeps only its best)");
  // Bracket 3 has no rungs at all: its trials run to max_resource whatever they report.
  for (double r : {1.0, 3.0, 9.0, 27.0}) EXPECT_FALSE(s->OnReport(c0, r, kNan).stop());
  EXPECT_EQ(s->Rung(c0), -1);
}

// A trial carried over from another sweep keeps the bracket it ran in there: set, its number's
// bracket no longer counts, for its rungs and for whom it is ranked with.
TEST(HyperbandTest, ASetBracketOverridesTheTrialsNumber) {
  auto s = Make(Hyperband());
  const int64_t a0 = FirstInBracket(*s, 0);
  const int64_t a1 = FirstInBracket(*s, 0, 1);
  const int64_t c0 = FirstInBracket(*s, 3);
  s->SetBracket(a1, 3);  // no rungs: runs to max_resource whatever it reports
  s->SetBracket(c0, 0);  // judged from rung 0, with a0
  s->SetBracket(a0, 7);  // no such bracket: its number's stands
  EXPECT_EQ(s->Bracket(a1), 3);
  EXPECT_EQ(s->Bracket(c0), 0);
  EXPECT_EQ(s->Bracket(a0), 0);
  EXPECT_EQ(s->OnReport(a0, 1, 0.9).rung, 0);
  EXPECT_EQ(s->OnReport(a1, 1, 0.1).rung, -1);
  EXPECT_FALSE(s->OnReport(a1, 1, 0.1).stop());
  Decision d = s->OnReport(c0, 1, 0.2);
  EXPECT_TRUE(d.stop());
  EXPECT_EQ(d.rung, 0);
  // ASHA has one bracket: nothing to set.
  auto asha = Make(Asha());
  asha->SetBracket(0, 1);
  EXPECT_EQ(asha->Bracket(0), 0);
}

// ---- median ----

TEST(MedianTest, StopsBelowTheMedianOfTheOthersAtThatStep) {
  auto s = Make(Median(0, 2));
  EXPECT_EQ(Letters(*s, 0, 1, {0.5, 0.7}), "cc");  // fewer than min_trials others
  Decision d = s->OnReport(2, 1, 0.55);            // others 0.5, 0.7: median 0.6
  EXPECT_TRUE(d.stop());
  EXPECT_EQ(d.rung, -1);
  EXPECT_EQ(d.reason,
            "pruned at step 1: best val_acc so far 0.55 is worse than 0.6, the median running "
            "average of the 2 other trials at this step");
  EXPECT_FALSE(s->OnReport(3, 1, 0.55).stop());  // others 0.5, 0.55, 0.7: a tie continues
  EXPECT_TRUE(s->OnReport(4, 1, 0.54).stop());
  EXPECT_TRUE(s->Stopped(4));
  EXPECT_EQ(s->Rung(3), -1);
}

TEST(MedianTest, ComparesBestSoFarWithRunningAverages) {
  // At step 3 the others' running averages are 0.5 and 0.6 (median 0.55), though their last
  // values are 0.9 and 0.6 (median 0.75). The judged trial's best so far is its first value,
  // not its last 0.3. A grace period of 2 keeps steps 1 and 2 out of it.
  for (double first : {0.56, 0.54}) {
    auto s = Make(Median(2, 2));
    s->OnReport(0, 1, 0.1);
    s->OnReport(0, 2, 0.5);
    s->OnReport(0, 3, 0.9);
    for (double step : {1.0, 2.0, 3.0}) s->OnReport(1, step, 0.6);
    EXPECT_FALSE(s->OnReport(2, 1, first).stop());
    EXPECT_FALSE(s->OnReport(2, 2, 0.3).stop());
    EXPECT_EQ(s->OnReport(2, 3, 0.3).stop(), first < 0.55) << first;
  }
}

TEST(MedianTest, GracePeriodCountsReports) {
  auto s = Make(Median(2, 1));
  for (double step : {1.0, 2.0, 3.0}) s->OnReport(0, step, 0.9);
  EXPECT_FALSE(s->OnReport(1, 1, 0.1).stop());  // report 1 of 2 in grace
  EXPECT_FALSE(s->OnReport(1, 2, 0.1).stop());  // report 2 of 2 in grace
  EXPECT_TRUE(s->OnReport(1, 3, 0.1).stop());
}

TEST(MedianTest, MinTrialsCountsOthersAtTheSameStep) {
  auto s = Make(Median(0, 3));
  EXPECT_EQ(Letters(*s, 0, 1, {0.9, 0.9, 0.1}), "ccc");  // 0, 1, 2 others
  EXPECT_EQ(Letters(*s, 3, 1, {0.1}), "s");              // 3 others
  // Step 2 has its own population: trials 0..2 reported at step 1 only.
  EXPECT_EQ(Letters(*s, 4, 2, {0.0, 0.0, 0.0}), "ccc");
}

TEST(MedianTest, MinimizeAndNan) {
  auto s = Make(Median(0, 1, /*maximize=*/false));
  s->OnReport(0, 1, 2.0);
  EXPECT_FALSE(s->OnReport(1, 1, 1.0).stop());  // lower is better
  EXPECT_TRUE(s->OnReport(2, 1, 3.0).stop());
  Decision d = s->OnReport(3, 1, kNan);
  EXPECT_TRUE(d.stop());
  EXPECT_EQ(d.reason,
            "pruned at step 1: val_acc has been NaN at every report so far; the median running "
            "average of the 3 other trials at this step is 2");
  // A NaN among the others counts as the worst running average, not as a NaN that would
  // scramble the heaps: at step 2 the others are {NaN, 5, 4}, median 5.
  EXPECT_EQ(Letters(*s, 4, 2, {kNan, 5.0, 4.0, 6.0}), "cccs");
  EXPECT_EQ(s->OnReport(8, 2, 6.0).reason,
            "pruned at step 2: best val_acc so far 6 is worse than 5.5, the median running "
            "average of the 4 other trials at this step");
}

TEST(MedianTest, ATrialsLastReportIsRecordedButNeverStopsIt) {
  auto s = Make(Median(0, 1));
  s->OnReport(0, 1, 0.9);
  EXPECT_FALSE(s->OnReport(1, 1, 0.1, /*last=*/true).stop());
  EXPECT_FALSE(s->Stopped(1));
  // Its 0.1 is among the others at step 1 now: the median of 0.9 and 0.1 is 0.5.
  EXPECT_FALSE(s->OnReport(2, 1, 0.5).stop());
  EXPECT_TRUE(s->OnReport(3, 1, 0.49).stop());
}

TEST(MedianTest, ReportsAfterAStopRepeatIt) {
  auto s = Make(Median(0, 1));
  s->OnReport(0, 1, 0.9);
  const Decision d = s->OnReport(1, 1, 0.1);
  ASSERT_TRUE(d.stop());
  Decision again = s->OnReport(1, 2, 1.0);
  EXPECT_TRUE(again.stop());
  EXPECT_EQ(again.reason, d.reason);
  EXPECT_TRUE(s->OnReport(2, 2, 0.5).action == Decision::Action::kContinue);  // 1's 1.0 unseen
}

// ---- replay ----

// A run of `trials` trials, `concurrency` at a time, each reporting resources 1..max_resource
// until stopped or done; values follow noisy curves with some NaN. To be a fair test of rebuild
// it also has what real histories have: reports arriving after a STOP (the trial had not yet
// seen it), epochs re-reported after an interruption, and trials finishing out of order.
struct History {
  std::vector<Report> reports;
  std::vector<Decision> decisions;  // given live, one per report
};

History Simulate(const SchedulerConfig& config, int trials, int concurrency, uint64_t seed) {
  auto scheduler = Make(config);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  struct Running {
    int64_t trial;
    double quality;
    int64_t step = 0;
    int lag = -1;  // reports still to send after a stop; -1 while not stopped
  };
  const auto max_step = static_cast<int64_t>(config.max_resource > 0 ? config.max_resource : 27);
  History h;
  std::vector<Running> running;
  int64_t next = 0;
  while (next < trials || !running.empty()) {
    while (next < trials && static_cast<int>(running.size()) < concurrency) {
      running.push_back({next++, unit(rng)});
    }
    // One report from a random running trial, so trials interleave unevenly.
    const size_t pick = static_cast<size_t>(rng() % running.size());
    Running& r = running[pick];
    if (r.step > 2 && unit(rng) < 0.03) {
      r.step -= 2;  // interrupted, resumed from an older checkpoint
    } else {
      ++r.step;
    }
    const double noise = 0.05 * (unit(rng) - 0.5);
    double value = r.quality * (1 - 1.0 / (1 + static_cast<double>(r.step))) + noise;
    if (unit(rng) < 0.02) value = kNan;
    if (!config.maximize) value = -value;
    Report report{r.trial, static_cast<double>(r.step), value, r.step >= max_step};
    h.reports.push_back(report);
    h.decisions.push_back(
        scheduler->OnReport(report.trial, report.resource, report.value, report.last));
    if (h.decisions.back().stop() && r.lag < 0) r.lag = static_cast<int>(rng() % 3);
    const bool done = r.step >= max_step || r.lag == 0;
    if (r.lag > 0) --r.lag;
    if (done) running.erase(running.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return h;
}

void ExpectSameDecision(const Decision& a, const Decision& b, size_t i) {
  EXPECT_EQ(a.action, b.action) << i;
  EXPECT_EQ(a.rung, b.rung) << i;
  EXPECT_EQ(a.reason, b.reason) << i;
}

void ExpectReplayReproducesEverything(const SchedulerConfig& config) {
  const History h = Simulate(config, 3000, 16, 42);
  ASSERT_GT(h.reports.size(), 10000u);
  size_t stops = 0;
  for (const Decision& d : h.decisions) stops += d.stop();
  ASSERT_GT(stops, 100u) << "a history with few stops tests little";

  // In one go, through a fresh scheduler.
  auto whole = Make(config);
  const std::vector<Decision> again = Replay(*whole, h.reports);
  ASSERT_EQ(again.size(), h.decisions.size());
  for (size_t i = 0; i < again.size(); ++i) ExpectSameDecision(again[i], h.decisions[i], i);

  // Split: the process dies halfway; a fresh scheduler is rebuilt from the stored first half
  // and then judges the second half live.
  const size_t half = h.reports.size() / 2;
  const std::span<const Report> all(h.reports);
  auto rebuilt = Make(config);
  const std::vector<Decision> first = Replay(*rebuilt, all.first(half));
  for (size_t i = 0; i < half; ++i) ExpectSameDecision(first[i], h.decisions[i], i);
  for (size_t i = half; i < h.reports.size(); ++i) {
    const Report& r = h.reports[i];
    ExpectSameDecision(rebuilt->OnReport(r.trial, r.resource, r.value, r.last), h.decisions[i], i);
  }
  for (int64_t t = 0; t < 3000; ++t) {
    EXPECT_EQ(rebuilt->Rung(t), whole->Rung(t)) << t;
    EXPECT_EQ(rebuilt->Stopped(t), whole->Stopped(t)) << t;
  }
}

TEST(ReplayTest, AshaRebuiltHalfwayDecidesIdentically) { ExpectReplayReproducesEverything(Asha()); }

TEST(ReplayTest, HyperbandRebuiltHalfwayDecidesIdentically) {
  SchedulerConfig c = Hyperband();
  c.maximize = false;
  ExpectReplayReproducesEverything(c);
}

TEST(ReplayTest, ABootstrapCountRebuiltHalfwayDecidesIdentically) {
  for (SchedulerConfig c : {Asha(), Hyperband()}) {
    c.bootstrap_count = 2;
    ExpectReplayReproducesEverything(c);
  }
}

TEST(ReplayTest, MedianRebuiltHalfwayDecidesIdentically) {
  SchedulerConfig c = Median(2, 3);
  c.max_resource = 27;  // unused by median; the simulation's trial length
  ExpectReplayReproducesEverything(c);
}

// ---- cost ----

// 100k reports per algorithm with rungs and steps holding tens of thousands of trials. No time
// limit is asserted (the bench reports rates); an O(n) insert would make this take minutes.
TEST(SchedulerCostTest, HundredThousandReports) {
  for (SchedulerConfig c : {Asha(), Hyperband(), Median(1, 3)}) {
    auto s = Make(c);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> unit(0, 1);
    int64_t reports = 0;
    int64_t stops = 0;
    for (int64_t trial = 0; reports < 100000; ++trial) {
      const double quality = unit(rng);
      for (int step = 1; step <= 27 && reports < 100000; ++step, ++reports) {
        if (s->OnReport(trial, step, quality + 0.01 * unit(rng)).stop()) {
          ++stops;
          break;
        }
      }
    }
    EXPECT_GT(stops, 1000) << EarlyStoppingName(c.algorithm);
  }
}

}  // namespace
}  // namespace sweep::search
