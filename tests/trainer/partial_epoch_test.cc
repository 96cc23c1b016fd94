// Tests of a run stopped within an epoch (TrainOptions::stop_requested): where the replicas
// stop (StepGate), the partial epoch in the checkpoint file, and through Train(): a run stopped
// part-way through epochs, perhaps more than once, and resumed each time ends with the same
// reports, weights and optimizer state, bit for bit, as one that never stopped.
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "gtest/gtest.h"
#include "partial_epoch_util.h"
#include "step_gate.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace sweep::trainer {
namespace {

using testing::ExpectStopsWithinEpochsChangeNothing;
using testing::StopAt;
using testing::TempDir;

// ---- StepGate ----

// Without a request every step up to the end given runs, and none past it (a pause, to
// checkpoint within the epoch).
TEST(StepGate, WithoutARequestEveryStepToTheEndRuns) {
  StepGate never(nullptr);
  never.StartEpoch(3, 10);
  for (int64_t s = 3; s < 10; ++s) EXPECT_TRUE(never.Begin(0, s));
  EXPECT_FALSE(never.Begin(0, 10));
  EXPECT_FALSE(never.Begin(1, 10));
  EXPECT_EQ(never.stop(), 10);
  EXPECT_FALSE(never.heard());
}

// Rank 1 has begun two steps past rank 0 (a GPU thread queueing ahead) when rank 0 hears the
// request: both stop after the last step either began, and a later epoch starts afresh.
TEST(StepGate, ReplicasStopAfterTheLastStepAnyOfThemBegan) {
  std::atomic<bool> asked{false};
  StepGate gate([&] { return asked.load(); });
  gate.StartEpoch(0, 100);
  for (int64_t s = 0; s < 5; ++s) ASSERT_TRUE(gate.Begin(1, s));
  for (int64_t s = 0; s < 3; ++s) ASSERT_TRUE(gate.Begin(0, s));
  asked = true;
  std::this_thread::sleep_for(StepGate::kPollInterval + std::chrono::milliseconds(1));
  EXPECT_TRUE(gate.Begin(0, 3));  // heard here: rank 1 has begun step 4
  EXPECT_TRUE(gate.Begin(0, 4));
  EXPECT_FALSE(gate.Begin(0, 5));
  EXPECT_FALSE(gate.Begin(1, 5));
  EXPECT_EQ(gate.stop(), 5);
  // Only rank 0 polls: a request rank 1 alone would see is not heard.
  gate.StartEpoch(2, 100);
  asked = false;
  std::this_thread::sleep_for(StepGate::kPollInterval + std::chrono::milliseconds(1));
  EXPECT_TRUE(gate.Begin(0, 2));
  asked = true;
  for (int64_t s = 2; s < 50; ++s) ASSERT_TRUE(gate.Begin(1, s));
  std::this_thread::sleep_for(StepGate::kPollInterval + std::chrono::milliseconds(1));
  EXPECT_TRUE(gate.Begin(0, 3));
  EXPECT_EQ(gate.stop(), 50);
}

// Rank 0 polls at most every kPollInterval: a caller's poll (reading its messages) is not made
// at every step of a fast model.
TEST(StepGate, PollsAtMostEveryInterval) {
  int polls = 0;
  StepGate gate([&] { return ++polls, false; });
  gate.StartEpoch(0, 1000000);
  const auto start = std::chrono::steady_clock::now();
  int64_t s = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(50)) {
    ASSERT_TRUE(gate.Begin(0, s++));
  }
  EXPECT_GT(s, 100);
  EXPECT_GE(polls, 1);
  EXPECT_LE(polls, 11);
}

// Threads at full speed: however they interleave, each stops at the same step.
TEST(StepGate, ThreadsAgreeOnTheStep) {
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> asked{false};
    StepGate gate([&] { return asked.load(); });
    gate.StartEpoch(0, int64_t{1} << 40);
    std::vector<int64_t> stopped(3);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        int64_t s = 0;
        while (gate.Begin(r, s)) ++s;
        stopped[static_cast<size_t>(r)] = s;
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + round % 5));
    asked = true;
    for (std::thread& t : ranks) t.join();
    EXPECT_EQ(stopped[0], gate.stop());
    EXPECT_EQ(stopped[1], gate.stop());
    EXPECT_EQ(stopped[2], gate.stop());
  }
}

// ---- the file ----

Checkpoint PartialSample() {
  Checkpoint c;
  c.config = TrainingConfig(TrainOptions());
  c.epoch = 2;
  c.step = 50;
  c.state.params = {1, 2, 3};
  EpochReport r;
  r.epoch = 2;
  r.step = 44;
  r.train_loss = 0.5;
  c.report = r;
  PartialEpoch p;
  p.steps = 6;
  p.steps_per_epoch = 22;
  p.set_samples = 480;
  p.loss_sum = 0.1 + 0.2 + 1e-17;
  p.skipped_steps = 1;
  p.train_s = 1.25;
  p.data_wait_s = 0.001;
  p.allreduce_s = 0.5;
  p.epoch_s = 1.75;
  c.partial = p;
  return c;
}

TEST(PartialEpoch, RoundTripsUnderItsOwnMagic) {
  TempDir dir;
  const std::string path = dir / "p.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path, PartialSample()).ok());
  EXPECT_EQ(testing::ReadText(path).substr(0, 8), "SWEEPCK2");
  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->partial.has_value());
  const PartialEpoch& p = *back->partial;
  const Checkpoint sample = PartialSample();
  const PartialEpoch& want = *sample.partial;
  EXPECT_EQ(p.steps, 6);
  EXPECT_EQ(p.steps_per_epoch, 22);
  EXPECT_EQ(p.set_samples, 480);
  EXPECT_EQ(p.loss_sum, want.loss_sum);  // every bit: the epoch's loss goes on from it
  EXPECT_EQ(p.skipped_steps, 1);
  EXPECT_EQ(p.train_s, 1.25);
  EXPECT_EQ(p.data_wait_s, 0.001);
  EXPECT_EQ(p.allreduce_s, 0.5);
  EXPECT_EQ(p.epoch_s, 1.75);
  EXPECT_EQ(back->step, 50);
  ASSERT_TRUE(back->report.has_value());
  EXPECT_EQ(back->report->step, 44);
  // A whole epoch's checkpoint keeps the first format's magic, which older readers know.
  Checkpoint whole = PartialSample();
  whole.partial.reset();
  whole.report->step = 50;
  ASSERT_TRUE(WriteCheckpoint(path, whole).ok());
  EXPECT_EQ(testing::ReadText(path).substr(0, 8), "SWEEPCK1");
  EXPECT_FALSE(ReadCheckpoint(path)->partial.has_value());
}

TEST(PartialEpoch, AMalformedOneIsRefusedNamingTheFile) {
  TempDir dir;
  const std::string path = dir / "p.ckpt";
  using Edit = std::function<void(nlohmann::json&)>;
  const struct {
    Edit edit;
    const char* magic;
    std::string message;
  } bad[] = {
      {[](nlohmann::json& h) { h.erase("partial"); }, nullptr,
       "no partial epoch in a file marked with one"},
      {[](nlohmann::json&) {}, "SWEEPCK1", "a partial epoch in a file not marked with one"},
      {[](nlohmann::json& h) { h["partial"]["steps"] = 22; }, nullptr, "partial: "},
      {[](nlohmann::json& h) { h["partial"]["steps"] = 0; }, nullptr, "partial: "},
      {[](nlohmann::json& h) { h["partial"]["steps"] = 2.5; }, nullptr,
       "partial: steps is not an integer: 2.5"},
      {[](nlohmann::json& h) { h["partial"]["skipped_steps"] = 7; }, nullptr, "partial: "},
      {[](nlohmann::json& h) { h["partial"]["set_samples"] = 0; }, nullptr, "partial: "},
      {[](nlohmann::json& h) { h["partial"].erase("loss_sum"); }, nullptr, "partial: "},
      {[](nlohmann::json& h) { h["step"] = 5; }, nullptr,
       "a partial epoch of 6 steps in a checkpoint at step 5"},
      {[](nlohmann::json& h) { h["report"]["step"] = 50; }, nullptr,
       "report of epoch 2, step 50 in a checkpoint of epoch 2, step 44"},
  };
  for (const auto& b : bad) {
    ASSERT_TRUE(WriteCheckpoint(path, PartialSample()).ok());
    testing::EditHeader(path, b.edit, b.magic);
    auto refused = ReadCheckpoint(path);
    ASSERT_FALSE(refused.ok()) << b.message;
    EXPECT_EQ(refused.status().code(), Status::Code::kCorruption);
    EXPECT_EQ(refused.status().message().rfind(path + ": not a valid checkpoint: " + b.message, 0),
              0u)
        << refused.status().message();
  }
}

// ---- through Train() ----

TEST(PartialEpoch, AnMlpStoppedWithinEpochsEndsAsIfNeverStopped) {
  for (const char* precision : {"fp32", "fp16"})
    for (int replicas : {1, 2}) {
      SCOPED_TRACE(std::string(precision) + ", " + std::to_string(replicas) + " replica(s)");
      TempDir dir;
      TrainOptions o = testing::BlobOptions(dir);
      o.optimizer = "adamw";
      o.lr = 0.01;
      o.lr_schedule = "cosine";
      o.warmup_epochs = 1;
      o.dropout = 0.2;  // keyed by the step
      o.replicas = replicas;
      o.precision = precision;
      ExpectStopsWithinEpochsChangeNothing(o, dir);
    }
}

// Crops and flips keyed by each row's place in the epoch, gathered ahead by the Batcher from
// the stopped step on; batch norm's running statistics; two micro-batches a step.
TEST(PartialEpoch, ACnnWithAugmentationStoppedWithinEpochsEndsAsIfNeverStopped) {
  TempDir dir;
  TrainOptions o = testing::BlobCnnOptions(dir);
  o.batch_norm = true;
  o.augment_crop = 1;
  o.augment_flip = true;
  o.batch_size = 8;
  o.accum_steps = 2;
  o.epochs = 3;
  ExpectStopsWithinEpochsChangeNothing(o, dir);
  // And with checkpoints every 4 steps between the stops.
  o.checkpoint_every_steps = 4;
  ExpectStopsWithinEpochsChangeNothing(o, dir);
}

// Checkpoints every 7 steps within an epoch (22 steps) change nothing learned. A run that dies
// in epoch 2 (here its callback throws at that epoch's report, before the epoch's checkpoint)
// leaves the one after step 21 of it, and goes on from there to the uninterrupted run's end.
TEST(PartialEpoch, CheckpointsWithinEpochsChangeNothingAndACrashGoesOnFromThem) {
  TempDir dir;
  TrainOptions o = testing::BlobOptions(dir);
  o.optimizer = "adamw";
  o.lr = 0.01;
  o.dropout = 0.2;
  o.replicas = 2;
  Result<TrainResult> r = Status::Internal("not run");
  ModelState expect;
  const std::vector<EpochReport> straight = testing::Collect(&r, o, &expect);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(straight.size(), 4u);
  ASSERT_EQ(straight[0].step, 22);

  o.checkpoint_path = dir / "t.ckpt";
  o.checkpoint_every_steps = 7;
  ModelState got;
  const std::vector<EpochReport> paused = testing::Collect(&r, o, &got);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(paused.size(), straight.size());
  for (size_t i = 0; i < paused.size(); ++i) testing::ExpectSameReport(paused[i], straight[i]);
  EXPECT_EQ(got.params, expect.params);
  EXPECT_EQ(got.optimizer, expect.optimizer);
  const std::optional<double> test_acc = r->test_acc;
  EXPECT_TRUE(test_acc.has_value());

  std::filesystem::remove(o.checkpoint_path);
  auto crashed = Train(o, [](const EpochReport& e) -> bool {
    if (e.epoch == 2) throw std::runtime_error("killed");
    return true;
  });
  ASSERT_FALSE(crashed.ok());
  auto ckpt = ReadCheckpoint(o.checkpoint_path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->epoch, 1);
  ASSERT_TRUE(ckpt->partial.has_value());
  EXPECT_EQ(ckpt->partial->steps, 21);
  EXPECT_EQ(ckpt->step, 43);
  ASSERT_TRUE(ckpt->report.has_value());
  EXPECT_EQ(ckpt->report->epoch, 1);

  const std::vector<EpochReport> rest = testing::Collect(&r, o, &got);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->resumed_from_epoch, 1);
  EXPECT_EQ(r->resumed_epoch_steps, 21);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < rest.size(); ++i) testing::ExpectSameReport(rest[i], straight[i + 1]);
  EXPECT_EQ(got.params, expect.params);
  EXPECT_EQ(got.optimizer, expect.optimizer);
  EXPECT_EQ(r->test_acc, test_acc);
}

// Told to stop before its first step, a run checkpoints its start (no partial epoch); resumed
// from a partial checkpoint and told to stop at once, it trains nothing and leaves the file as
// it was. Without a checkpoint path nothing would keep the steps: the request is not polled.
TEST(PartialEpoch, StopsAtAnEpochsEdgeAndWithoutACheckpoint) {
  TempDir dir;
  TrainOptions o = testing::BlobOptions(dir);
  o.epochs = 2;
  int polls = 0;
  o.stop_requested = [&] { return ++polls, true; };
  auto r = Train(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->stopped);
  EXPECT_EQ(polls, 0);
  EXPECT_EQ(r->epochs_done, 2);

  o.checkpoint_path = dir / "t.ckpt";
  r = Train(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->stopped_in_epoch, 0);
  EXPECT_EQ(r->epochs_done, 0);
  auto ckpt = ReadCheckpoint(o.checkpoint_path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->epoch, 0);
  EXPECT_EQ(ckpt->step, 0);
  EXPECT_FALSE(ckpt->partial.has_value());

  StopAt later{5};
  o.stop_requested = later.Fn();
  r = Train(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->stopped_in_epoch, 1);
  const std::string bytes = testing::ReadText(o.checkpoint_path);
  o.stop_requested = [] { return true; };
  std::vector<EpochReport> heard;
  r = Train(o, [&](const EpochReport& e) { return heard.push_back(e), true; });
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(heard.empty());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->stopped_in_epoch, 1);
  EXPECT_EQ(r->epoch_steps_done, ReadCheckpoint(o.checkpoint_path)->partial->steps);
  EXPECT_FALSE(r->checkpointed);
  EXPECT_EQ(testing::ReadText(o.checkpoint_path), bytes);
}

// A partial epoch goes on only where its steps are the same steps: refused, naming the file,
// for a training set of another size (whatever its steps an epoch), or for a run to stop at an
// epoch before it.
TEST(PartialEpoch, AResumeWhereItsStepsWouldDifferIsRefused) {
  TempDir dir;
  TrainOptions o = testing::BlobOptions(dir);
  o.epochs = 3;
  o.checkpoint_path = dir / "t.ckpt";
  StopAt stop{30};
  o.stop_requested = stop.Fn();
  auto r = Train(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->stopped_in_epoch, 2);
  o.stop_requested = nullptr;

  // The training set's size is not in the training configuration: 484 samples give 22 steps an
  // epoch too, in another order.
  testing::WriteBlobs(dir, "train", 484, 1);
  auto refused = Train(o, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
  const std::string& said = refused.status().message();
  EXPECT_EQ(said.rfind(o.checkpoint_path +
                           ": checkpoint is within epoch 2 of a training set of 480 samples (22 "
                           "steps an epoch), and ",
                       0),
            0u)
      << said;
  EXPECT_NE(said.find(" has 484 (22); has it changed? delete the checkpoint to train from the "
                      "start"),
            std::string::npos)
      << said;
  testing::WriteBlobs(dir, "train", 480, 1);

  TrainOptions stops_before = o;
  stops_before.stop_after_epoch = 1;
  TrainOptions shorter = o;
  shorter.epochs = 1;
  const std::pair<TrainOptions, std::string> refusals[] = {
      {stops_before,
       "past the epoch this run is to stop after (1); delete it to train from the "
       "start"},
      {shorter, "past epochs = 1 (a longer run's); delete it, or set epochs to at least 2"}};
  for (const auto& [options, why] : refusals) {
    refused = Train(options, nullptr);
    ASSERT_FALSE(refused.ok()) << why;
    EXPECT_EQ(refused.status().message(),
              o.checkpoint_path + ": checkpoint is within epoch 2, " + why);
  }
  EXPECT_TRUE(Train(o, nullptr).ok());
}

}  // namespace
}  // namespace sweep::trainer
