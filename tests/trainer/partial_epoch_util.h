// Runs a training stopped within epochs and resumed, against the same training run straight
// through, for the CPU's and the GPU's tests of TrainOptions::stop_requested. Test-only.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint.h"
#include "gtest/gtest.h"
#include "step_gate.h"
#include "test_util.h"
#include "train_internal.h"
#include "trainer/trainer.h"

namespace sweep::trainer::testing {

// A stop request that comes at rank 0's `at`-th poll. Each poll sleeps past StepGate's interval,
// so rank 0 polls before every step: the stop lands near step `at` of the run.
struct StopAt {
  int at = 0;
  int polls = 0;
  std::function<bool()> Fn() {
    return [this] {
      std::this_thread::sleep_for(StepGate::kPollInterval + std::chrono::milliseconds(1));
      return ++polls >= at;
    };
  }
};

inline std::vector<EpochReport> Collect(Result<TrainResult>* out, const TrainOptions& o,
                                        ModelState* state) {
  std::vector<EpochReport> reports;
  *out = TrainWithState(
      o,
      [&](const EpochReport& e) {
        reports.push_back(e);
        return true;
      },
      state);
  return reports;
}

inline void ExpectSameReport(const EpochReport& got, const EpochReport& want) {
  EXPECT_EQ(got.epoch, want.epoch);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.train_loss, want.train_loss) << "epoch " << want.epoch;
  EXPECT_EQ(got.val_loss, want.val_loss) << "epoch " << want.epoch;
  EXPECT_EQ(got.val_acc, want.val_acc) << "epoch " << want.epoch;
  EXPECT_EQ(got.lr, want.lr);
  EXPECT_EQ(got.skipped_steps, want.skipped_steps);
}

// Stopped at rank 0's 30th poll (with 22 steps an epoch: in epoch 2), then after a resume at its
// 5th (later in epoch 2), then at its 20th (in epoch 3); then resumed to the end. Each stop leaves
// a partial checkpoint; the reports, the test accuracy and the final state are the uninterrupted
// run's.
inline void ExpectStopsWithinEpochsChangeNothing(TrainOptions o, const TempDir& dir) {
  Result<TrainResult> r = Status::Internal("not run");
  ModelState expect;
  const std::vector<EpochReport> straight = Collect(&r, o, &expect);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(straight.size(), static_cast<size_t>(o.epochs));
  const int64_t steps_per_epoch = straight[0].step;
  // The stops below fall within the run, with room for a step more on each of two replicas.
  ASSERT_GT(steps_per_epoch * o.epochs, 30 + 5 + 20 + 2 * o.replicas);
  const std::optional<double> test_acc = r->test_acc;
  ASSERT_TRUE(test_acc.has_value());

  o.checkpoint_path = dir / "trial.ckpt";
  std::filesystem::remove(o.checkpoint_path);  // an earlier call's
  std::vector<EpochReport> heard;
  int64_t last_stop = 0;    // the run's steps at the last stop
  int64_t within_last = 0;  // the steps of its epoch the last stop's checkpoint held
  for (int at : {30, 5, 20}) {
    SCOPED_TRACE("stop at poll " + std::to_string(at));
    StopAt stop{at};
    o.stop_requested = stop.Fn();
    ModelState unused;
    const std::vector<EpochReport> part = Collect(&r, o, &unused);
    ASSERT_TRUE(r.ok()) << r.status().message();
    heard.insert(heard.end(), part.begin(), part.end());
    EXPECT_TRUE(r->stopped);
    EXPECT_TRUE(r->checkpointed);
    EXPECT_FALSE(r->test_acc.has_value());  // no epoch's model
    EXPECT_EQ(r->resumed_epoch_steps, within_last);
    ASSERT_GT(r->stopped_in_epoch, 0);
    EXPECT_EQ(r->steps_per_epoch, steps_per_epoch);
    auto ckpt = ReadCheckpoint(o.checkpoint_path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    ASSERT_TRUE(ckpt->partial.has_value());
    EXPECT_EQ(ckpt->epoch, r->stopped_in_epoch - 1);
    EXPECT_EQ(ckpt->partial->steps, r->epoch_steps_done);
    EXPECT_GT(ckpt->partial->steps, 0);
    EXPECT_LT(ckpt->partial->steps, steps_per_epoch);
    EXPECT_EQ(ckpt->step, ckpt->epoch * steps_per_epoch + ckpt->partial->steps);
    EXPECT_GT(ckpt->step, last_stop);
    // Near the poll asked for: replicas may add a step.
    EXPECT_LE(ckpt->step - last_stop, at + o.replicas);
    last_stop = ckpt->step;
    within_last = ckpt->partial->steps;
    EXPECT_EQ(static_cast<int>(heard.size()), ckpt->epoch);
  }
  o.stop_requested = nullptr;
  ModelState got;
  const std::vector<EpochReport> rest = Collect(&r, o, &got);
  ASSERT_TRUE(r.ok()) << r.status().message();
  heard.insert(heard.end(), rest.begin(), rest.end());
  EXPECT_FALSE(r->stopped);
  EXPECT_EQ(r->stopped_in_epoch, 0);
  EXPECT_EQ(r->resumed_epoch_steps, within_last);
  ASSERT_EQ(heard.size(), straight.size());
  for (size_t i = 0; i < heard.size(); ++i) ExpectSameReport(heard[i], straight[i]);
  EXPECT_EQ(got.params, expect.params);
  EXPECT_EQ(got.optimizer, expect.optimizer);
  EXPECT_EQ(got.stats, expect.stats);
  EXPECT_EQ(r->test_acc, test_acc);
  EXPECT_FALSE(ReadCheckpoint(o.checkpoint_path)->partial.has_value());
}

}  // namespace sweep::trainer::testing
