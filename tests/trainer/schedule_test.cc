// Tests of the learning-rate schedules: values at chosen steps, warmup, and the linear scaling
// rule, against numbers worked out by hand.
#include <cmath>
#include <numbers>

#include "gtest/gtest.h"
#include "schedule.h"

namespace sweep::trainer {
namespace {

TrainOptions Base() {
  TrainOptions o;
  o.lr = 0.1;
  o.epochs = 10;
  return o;
}

TEST(Schedule, ConstantIsThePeak) {
  const LrSchedule s = LrSchedule::Make(Base(), 100);
  for (int64_t step : {0, 1, 99, 500, 999}) EXPECT_DOUBLE_EQ(s.At(step), 0.1) << step;
}

TEST(Schedule, StepDecaysOnEpochBoundaries) {
  TrainOptions o = Base();
  o.lr_schedule = "step";
  o.step_size = 3;
  o.gamma = 0.5;
  const LrSchedule s = LrSchedule::Make(o, 100);  // 100 steps an epoch
  EXPECT_DOUBLE_EQ(s.At(0), 0.1);
  EXPECT_DOUBLE_EQ(s.At(299), 0.1);   // last step of epoch 3
  EXPECT_DOUBLE_EQ(s.At(300), 0.05);  // first of epoch 4
  EXPECT_DOUBLE_EQ(s.At(599), 0.05);
  EXPECT_DOUBLE_EQ(s.At(600), 0.025);
  EXPECT_DOUBLE_EQ(s.At(999), 0.0125);
}

TEST(Schedule, CosineFromPeakTowardsZero) {
  TrainOptions o = Base();
  o.lr_schedule = "cosine";
  const LrSchedule s = LrSchedule::Make(o, 100);  // 1000 steps in all
  EXPECT_DOUBLE_EQ(s.At(0), 0.1);
  EXPECT_NEAR(s.At(500), 0.05, 1e-12);                                                  // halfway
  EXPECT_NEAR(s.At(250), 0.1 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-12);      // 0.0853553
  EXPECT_NEAR(s.At(999), 0.1 * 0.5 * (1 + std::cos(std::numbers::pi * 0.999)), 1e-15);  // 2.47e-7
  EXPECT_GT(s.At(999), 0.0);
  for (int64_t t = 1; t < 1000; ++t) EXPECT_LE(s.At(t), s.At(t - 1)) << t;
}

TEST(Schedule, LinearWarmupThenTheSchedule) {
  TrainOptions o = Base();
  o.lr_schedule = "cosine";
  o.warmup_epochs = 0.5;  // 50 steps
  const LrSchedule s = LrSchedule::Make(o, 100);
  EXPECT_EQ(s.warmup_steps, 50.0);
  EXPECT_DOUBLE_EQ(s.At(0), 0.1 / 50);  // the first step already moves
  EXPECT_DOUBLE_EQ(s.At(24), 0.1 * 25 / 50);
  EXPECT_DOUBLE_EQ(s.At(49), 0.1);      // warmup's last step reaches the peak
  EXPECT_DOUBLE_EQ(s.At(50), 0.1);      // where the cosine starts
  EXPECT_NEAR(s.At(525), 0.05, 1e-12);  // the cosine spans the 950 steps after warmup
  o.lr_schedule = "constant";
  const LrSchedule c = LrSchedule::Make(o, 100);
  EXPECT_DOUBLE_EQ(c.At(9), 0.1 * 10 / 50);
  EXPECT_DOUBLE_EQ(c.At(70), 0.1);
}

// W = warmup_epochs x steps per epoch is not rounded: 1.5 epochs of 7 steps warm up over 10.5
// steps, and a warmup shorter than a step still starts below the peak.
TEST(Schedule, FractionalWarmupFollowsTheFormula) {
  TrainOptions o = Base();
  o.epochs = 2;
  o.warmup_epochs = 1.5;
  const LrSchedule s = LrSchedule::Make(o, 7);
  EXPECT_DOUBLE_EQ(s.At(6), 0.1 * 7 / 10.5);
  EXPECT_DOUBLE_EQ(s.At(9), 0.1 * 10 / 10.5);
  EXPECT_DOUBLE_EQ(s.At(10), 0.1);  // (s + 1) = 11 > W
  o.lr_schedule = "cosine";
  const LrSchedule c = LrSchedule::Make(o, 7);  // 14 steps: the cosine spans 14 - 10.5
  EXPECT_NEAR(c.At(12), 0.1 * 0.5 * (1 + std::cos(std::numbers::pi * 1.5 / 3.5)), 1e-15);
  o.lr_schedule = "constant";
  o.warmup_epochs = 0.04;  // W = 0.48 at 12 steps per epoch
  const LrSchedule tiny = LrSchedule::Make(o, 12);
  EXPECT_DOUBLE_EQ(tiny.At(0), 0.1);  // (0 + 1) / 0.48 > 1: the peak at once
}

TEST(Schedule, LinearScalingRule) {
  TrainOptions o = Base();
  o.batch_size = 512;
  o.accum_steps = 2;
  o.base_batch = 256;
  EXPECT_DOUBLE_EQ(LrSchedule::Make(o, 10).At(0), 0.1);  // off by default
  o.scale_lr = true;
  EXPECT_DOUBLE_EQ(LrSchedule::Make(o, 10).At(0), 0.4);  // 0.1 * 1024 / 256
  o.warmup_epochs = 1;
  EXPECT_DOUBLE_EQ(LrSchedule::Make(o, 10).At(4), 0.2);  // warmup to the scaled peak
}

}  // namespace
}  // namespace sweep::trainer
