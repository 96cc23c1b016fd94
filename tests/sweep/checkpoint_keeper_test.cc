// CheckpointKeeper: which trials keep their checkpoints under keep_checkpoints = N.
#include "checkpoint_keeper.h"

#include <gtest/gtest.h>

namespace sweep {
namespace {

using V = std::vector<int64_t>;

TEST(CheckpointKeeperTest, KeepsTheBestCompletedTrialsWhenMaximising) {
  CheckpointKeeper k(2, /*maximize=*/true);
  EXPECT_EQ(k.Ended(0, true, 0.5), V{});
  EXPECT_EQ(k.Ended(1, true, 0.7), V{});
  EXPECT_EQ(k.Ended(2, true, 0.6), V{0});  // pushes out the worst
  EXPECT_EQ(k.Ended(3, true, 0.1), V{3});  // not among the best: its own goes
  EXPECT_EQ(k.Kept(), (V{1, 2}));
}

TEST(CheckpointKeeperTest, KeepsTheLowestWhenMinimising) {
  CheckpointKeeper k(1, /*maximize=*/false);
  EXPECT_EQ(k.Ended(0, true, 3.0), V{});
  EXPECT_EQ(k.Ended(1, true, -1.0), V{0});
  EXPECT_EQ(k.Ended(2, true, 2.0), V{2});
  EXPECT_EQ(k.Kept(), V{1});
}

// Ties rank as `sweep best` ranks them: the lower trial number first.
TEST(CheckpointKeeperTest, TiesKeepTheEarlierTrial) {
  CheckpointKeeper k(1, true);
  EXPECT_EQ(k.Ended(4, true, 0.5), V{});
  EXPECT_EQ(k.Ended(2, true, 0.5), V{4});
  EXPECT_EQ(k.Ended(7, true, 0.5), V{7});
  EXPECT_EQ(k.Kept(), V{2});
}

TEST(CheckpointKeeperTest, TrialsThatDidNotCompleteWithTheObjectiveKeepNone) {
  CheckpointKeeper k(3, true);
  EXPECT_EQ(k.Ended(0, false, 0.9), V{0});          // pruned or failed
  EXPECT_EQ(k.Ended(1, true, std::nullopt), V{1});  // never reported the metric
  EXPECT_EQ(k.Ended(2, true, 0.1), V{});
  EXPECT_EQ(k.Kept(), V{2});
}

TEST(CheckpointKeeperTest, ZeroKeepsNothing) {
  CheckpointKeeper k(0, true);
  EXPECT_EQ(k.Ended(0, true, 1.0), V{0});
  EXPECT_TRUE(k.Kept().empty());
}

}  // namespace
}  // namespace sweep
