// Tests of checkpoints: the file round trip, a damaged file and a foreign configuration refused
// with the file named, and through Train(): a trial stopped after epoch 2 and resumed ends with
// the same weights and optimizer state, bit for bit, as one that never stopped.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "gtest/gtest.h"
#include "test_util.h"
#include "train_internal.h"
#include "trainer/trainer.h"

namespace sweep::trainer {
namespace {

using testing::BlobOptions;
using testing::TempDir;

Checkpoint Sample() {
  Checkpoint c;
  c.config = TrainingConfig(TrainOptions());
  c.epoch = 3;
  c.step = 1234;
  c.rng_seed = 18446744073709551615ull;
  c.replicas = 2;
  c.state.params = {1.5f, -2.0f, 0.0f, 3.25f};
  c.state.optimizer = {{0.1f, 0.2f, 0.3f, 0.4f}, {1, 2, 3, 4}};
  return c;
}

void FlipByte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(at);
  f.write(&c, 1);
}

// A read that fails part-way (EIO: the kernel refuses to read its own address 0 of
// /proc/self/mem) is the machine's trouble, named with the file, not an exception of the library.
TEST(Checkpoint, AReadErrorIsUnavailableAndNamesTheFile) {
  auto c = ReadCheckpoint("/proc/self/mem");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kUnavailable) << c.status().message();
  EXPECT_EQ(c.status().message().rfind("/proc/self/mem: cannot read the checkpoint", 0), 0u)
      << c.status().message();
}

TEST(Checkpoint, RoundTrip) {
  TempDir dir;
  const std::string path = dir / "a.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  auto c = ReadCheckpoint(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const Checkpoint s = Sample();
  EXPECT_EQ(c->config, s.config);
  EXPECT_EQ(c->epoch, 3);
  EXPECT_EQ(c->step, 1234);
  EXPECT_EQ(c->rng_seed, s.rng_seed);
  EXPECT_EQ(c->replicas, 2);
  EXPECT_EQ(c->state.params, s.state.params);
  EXPECT_EQ(c->state.optimizer, s.state.optimizer);
  EXPECT_FALSE(c->state.loss_scale.has_value());
  // fp16's loss scale travels with the weights.
  Checkpoint fp16 = Sample();
  fp16.state.loss_scale = LossScaleState{0.125f, 1999, 123456789012ull};
  ASSERT_TRUE(WriteCheckpoint(dir / "fp16.ckpt", fp16).ok());
  auto back = ReadCheckpoint(dir / "fp16.ckpt");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->state.loss_scale.has_value());
  EXPECT_EQ(back->state.loss_scale->scale, 0.125f);
  EXPECT_EQ(back->state.loss_scale->good_steps, 1999);
  EXPECT_EQ(back->state.loss_scale->skipped, 123456789012ull);
  std::filesystem::remove(dir / "fp16.ckpt");
  // Atomic: no temporary file is left beside it.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.exists();
  EXPECT_EQ(files, 1);
  // A second write replaces the first.
  Checkpoint later = Sample();
  later.epoch = 4;
  ASSERT_TRUE(WriteCheckpoint(path, later).ok());
  EXPECT_EQ(ReadCheckpoint(path)->epoch, 4);
}

// A remote agent writes to the coordinator's checkpoint path, whose folder it may not have.
TEST(Checkpoint, WritingCreatesTheFolder) {
  TempDir dir;
  const std::string path = dir / "sweeps.db-checkpoints/s/trial-3.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  EXPECT_EQ(ReadCheckpoint(path)->epoch, 3);
}

TEST(Checkpoint, DamageIsReportedWithTheFile) {
  TempDir dir;
  const std::string path = dir / "a.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  const auto size = static_cast<std::streamoff>(std::filesystem::file_size(path));
  for (std::streamoff at : {std::streamoff{20}, size - 10, size - 1}) {  // header, data, crc
    ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
    FlipByte(path, at);
    auto c = ReadCheckpoint(path);
    ASSERT_FALSE(c.ok()) << at;
    EXPECT_EQ(c.status().code(), Status::Code::kCorruption);
    EXPECT_EQ(c.status().message(),
              path + ": checkpoint checksum mismatch (the file is damaged or cut short)");
  }
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  std::filesystem::resize_file(path, static_cast<uintmax_t>(size - 7));
  EXPECT_EQ(ReadCheckpoint(path).status().code(), Status::Code::kCorruption);
  testing::WriteText(path, "not a checkpoint");
  EXPECT_EQ(ReadCheckpoint(path).status().message(),
            path + ": not a valid checkpoint: no checkpoint header (16 bytes)");
  EXPECT_EQ(ReadCheckpoint(dir / "none").status().code(), Status::Code::kNotFound);
}

// The report a checkpoint holds comes back as written (NaN figures too); an older file without
// one loads without it; a malformed one is refused, naming the file and the report.
TEST(Checkpoint, ItsEpochsReportRoundTrips) {
  TempDir dir;
  const std::string path = dir / "r.ckpt";
  Checkpoint c = Sample();
  EpochReport r;
  r.epoch = c.epoch;
  r.step = c.step;
  r.train_loss = 0.25;
  r.val_loss = std::numeric_limits<double>::quiet_NaN();
  r.val_acc = std::numeric_limits<double>::quiet_NaN();
  r.samples_per_s = 12345.678;
  r.data_wait_s = 0.001;
  r.epoch_s = 1.5;
  r.lr = 0.1;
  r.skipped_steps = 7;
  c.report = r;
  ASSERT_TRUE(WriteCheckpoint(path, c).ok());
  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->report.has_value());
  EXPECT_EQ(back->report->train_loss, 0.25);
  EXPECT_TRUE(std::isnan(back->report->val_loss));
  EXPECT_TRUE(std::isnan(back->report->val_acc));
  EXPECT_EQ(back->report->samples_per_s, 12345.678);
  EXPECT_EQ(back->report->skipped_steps, 7);
  EXPECT_FALSE(back->report->replayed);

  testing::EditHeader(path, [](nlohmann::json& h) { h.erase("report"); });
  back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_FALSE(back->report.has_value());

  const std::pair<std::function<void(nlohmann::json&)>, std::string> bad[] = {
      {[](nlohmann::json& h) { h["report"]["epoch"] = 2; },
       "report of epoch 2, step 1234 in a checkpoint of epoch 3, step 1234"},
      {[](nlohmann::json& h) { h["report"]["epoch"] = 3.5; },
       "report: epoch is not an integer: 3.5"},
      {[](nlohmann::json& h) { h["report"].erase("step"); }, "report: "},
      {[](nlohmann::json& h) { h["report"] = 5; }, "report: "},
  };
  for (const auto& [edit, message] : bad) {
    ASSERT_TRUE(WriteCheckpoint(path, c).ok());
    testing::EditHeader(path, edit);
    auto refused = ReadCheckpoint(path);
    ASSERT_FALSE(refused.ok()) << message;
    EXPECT_EQ(refused.status().code(), Status::Code::kCorruption);
    EXPECT_EQ(refused.status().message().rfind(path + ": not a valid checkpoint: " + message, 0),
              0u)
        << refused.status().message();
  }
}

TEST(Checkpoint, ConfigurationCoversWhatTrainingComputes) {
  TrainOptions a;
  TrainOptions b = a;
  b.threads = 8;  // speed only
  b.replicas = 4;
  b.checkpoint_path = "x";
  b.checkpoint_every = 3;
  b.cache_dir = "/tmp";
  b.epochs = 50;  // not under a constant schedule: a resumed trial may run longer
  b.dataset.test_images = "t";
  EXPECT_EQ(TrainingConfig(a), TrainingConfig(b));
  for (auto change : std::vector<void (*)(TrainOptions*)>{
           [](TrainOptions* o) { o->lr = 0.1; }, [](TrainOptions* o) { o->seed = 9; },
           [](TrainOptions* o) { o->hidden = {10}; }, [](TrainOptions* o) { o->dropout = 0.1; },
           [](TrainOptions* o) { o->batch_size = 64; }, [](TrainOptions* o) { o->accum_steps = 2; },
           [](TrainOptions* o) { o->optimizer = "adamw"; },
           [](TrainOptions* o) { o->momentum = 0.5; },
           [](TrainOptions* o) { o->dataset.train_images = "other"; }}) {
    TrainOptions c = a;
    change(&c);
    EXPECT_NE(TrainingConfig(a), TrainingConfig(c));
  }
  TrainOptions cos = a;
  cos.lr_schedule = "cosine";
  TrainOptions longer = cos;
  longer.epochs = 20;
  EXPECT_NE(TrainingConfig(cos), TrainingConfig(longer));  // the cosine's length is its shape
}

// ---- through Train() ----

TrainOptions ResumeOptions(const TempDir& dir) {
  TrainOptions o = BlobOptions(dir);
  o.epochs = 4;
  o.optimizer = "adamw";
  o.lr = 0.01;
  o.weight_decay = 0.01;
  o.lr_schedule = "cosine";
  o.warmup_epochs = 1;
  o.dropout = 0.2;
  return o;
}

TEST(Checkpoint, ResumedTrialEndsBitForBitWhereAnUninterruptedOneDoes) {
  for (const char* precision : {"fp32", "fp16"})
    for (int replicas : {1, 2}) {
      SCOPED_TRACE(std::string(precision) + ", " + std::to_string(replicas) + " replica(s)");
      TempDir dir;
      TrainOptions o = ResumeOptions(dir);
      o.replicas = replicas;
      o.precision = precision;
      std::vector<EpochReport> straight;
      ModelState expect;
      auto r = TrainWithState(
          o,
          [&](const EpochReport& e) {
            straight.push_back(e);
            return true;
          },
          &expect);
      ASSERT_TRUE(r.ok()) << r.status().message();
      ASSERT_EQ(straight.size(), 4u);

      o.checkpoint_path = dir / "trial.ckpt";
      auto stopped = Train(o, [](const EpochReport& e) { return e.epoch < 2; });
      ASSERT_TRUE(stopped.ok()) << stopped.status().message();
      EXPECT_TRUE(stopped->stopped);
      EXPECT_TRUE(stopped->checkpointed);
      EXPECT_EQ(stopped->epochs_done, 2);
      auto at_stop = ReadCheckpoint(o.checkpoint_path);
      ASSERT_TRUE(at_stop.ok()) << at_stop.status().message();
      EXPECT_EQ(at_stop->epoch, 2);
      EXPECT_EQ(at_stop->step, straight[1].step);
      // fp16's loss scale is saved: every step so far was good (none overflowed at 65536).
      ASSERT_EQ(at_stop->state.loss_scale.has_value(), std::string(precision) == "fp16");
      if (at_stop->state.loss_scale.has_value()) {
        EXPECT_EQ(at_stop->state.loss_scale->good_steps, at_stop->step);
        EXPECT_EQ(at_stop->state.loss_scale->skipped, 0u);
      }

      std::vector<EpochReport> resumed;
      ModelState got;
      r = TrainWithState(
          o,
          [&](const EpochReport& e) {
            resumed.push_back(e);
            return true;
          },
          &got);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->resumed_from_epoch, 2);
      EXPECT_EQ(r->epochs_done, 4);
      ASSERT_EQ(resumed.size(), 2u);
      EXPECT_EQ(resumed[0].epoch, 3);
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(resumed[i].step, straight[i + 2].step);
        EXPECT_EQ(resumed[i].train_loss, straight[i + 2].train_loss) << "replicas " << replicas;
        EXPECT_EQ(resumed[i].val_loss, straight[i + 2].val_loss);
        EXPECT_EQ(resumed[i].lr, straight[i + 2].lr);
      }
      EXPECT_EQ(got.params, expect.params) << "replicas " << replicas;
      EXPECT_EQ(got.optimizer, expect.optimizer) << "replicas " << replicas;
      ASSERT_TRUE(r->test_acc.has_value());
      // Finishing also checkpointed: running again resumes at the end and only evaluates.
      EXPECT_EQ(ReadCheckpoint(o.checkpoint_path)->epoch, 4);
      int calls = 0;
      auto again = Train(o, [&](const EpochReport&) { return ++calls > 0; });
      ASSERT_TRUE(again.ok()) << again.status().message();
      EXPECT_EQ(calls, 0);
      EXPECT_EQ(again->resumed_from_epoch, 4);
      EXPECT_EQ(again->test_acc, r->test_acc);
    }
}

// A caller that may have lost the checkpoint's epoch report (report_resumed_epoch) hears it
// again on a resume, as it was first reported, before any epoch trains; told to stop there, the
// run trains no further and leaves the checkpoint as it was. NaN figures (no validation set)
// survive the file.
TEST(Checkpoint, AResumeCanReportTheCheckpointsEpochAgain) {
  for (double validation : {0.2, 0.0}) {
    SCOPED_TRACE("validation_fraction " + std::to_string(validation));
    TempDir dir;
    TrainOptions o = ResumeOptions(dir);
    o.validation_fraction = validation;
    o.checkpoint_path = dir / "trial.ckpt";
    std::vector<EpochReport> first;
    auto stopped = Train(o, [&](const EpochReport& e) {
      first.push_back(e);
      return e.epoch < 2;
    });
    ASSERT_TRUE(stopped.ok()) << stopped.status().message();
    ASSERT_EQ(first.size(), 2u);
    const auto same = [](const EpochReport& a, const EpochReport& b) {
      auto eq = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
      return a.epoch == b.epoch && a.step == b.step && eq(a.train_loss, b.train_loss) &&
             eq(a.val_loss, b.val_loss) && eq(a.val_acc, b.val_acc) &&
             eq(a.samples_per_s, b.samples_per_s) && eq(a.data_wait_s, b.data_wait_s) &&
             eq(a.epoch_s, b.epoch_s) && eq(a.allreduce_s, b.allreduce_s) && eq(a.lr, b.lr) &&
             a.skipped_steps == b.skipped_steps;
    };
    auto ckpt = ReadCheckpoint(o.checkpoint_path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    ASSERT_TRUE(ckpt->report.has_value());
    EXPECT_TRUE(same(*ckpt->report, first[1]));
    EXPECT_EQ(std::isnan(ckpt->report->val_loss), validation == 0.0);

    // Told to stop at the report heard again: nothing trains, the checkpoint stays.
    std::vector<EpochReport> heard;
    const auto bytes = testing::ReadText(o.checkpoint_path);
    o.report_resumed_epoch = true;
    auto again = Train(o, [&](const EpochReport& e) {
      heard.push_back(e);
      return false;
    });
    ASSERT_TRUE(again.ok()) << again.status().message();
    ASSERT_EQ(heard.size(), 1u);
    EXPECT_TRUE(heard[0].replayed);
    EXPECT_TRUE(same(heard[0], first[1]));
    EXPECT_TRUE(again->stopped);
    EXPECT_EQ(again->epochs_done, 2);
    EXPECT_EQ(testing::ReadText(o.checkpoint_path), bytes);

    // Told to go on: the epoch again, then the rest trained; the last checkpoint holds the last
    // epoch's report.
    heard.clear();
    auto rest = Train(o, [&](const EpochReport& e) {
      heard.push_back(e);
      return true;
    });
    ASSERT_TRUE(rest.ok()) << rest.status().message();
    ASSERT_EQ(heard.size(), 3u);
    EXPECT_TRUE(heard[0].replayed);
    EXPECT_EQ(heard[0].epoch, 2);
    EXPECT_FALSE(heard[1].replayed);
    EXPECT_EQ(heard[1].epoch, 3);
    EXPECT_EQ(heard[2].epoch, 4);
    ckpt = ReadCheckpoint(o.checkpoint_path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    ASSERT_TRUE(ckpt->report.has_value());
    EXPECT_TRUE(same(*ckpt->report, heard[2]));

    // Not asked for: the resume reports only what it trains (here nothing: it is at its end).
    o.report_resumed_epoch = false;
    heard.clear();
    ASSERT_TRUE(Train(o, [&](const EpochReport& e) {
                  heard.push_back(e);
                  return true;
                }).ok());
    EXPECT_TRUE(heard.empty());
  }
}

TEST(Checkpoint, EveryNEpochs) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.epochs = 3;
  o.checkpoint_path = dir / "sub/every.ckpt";
  std::filesystem::create_directories(dir / "sub");
  o.checkpoint_every = 2;
  std::vector<int> seen;  // the checkpoint's epoch as each epoch's report arrives
  auto r = Train(o, [&](const EpochReport&) {
    auto c = ReadCheckpoint(o.checkpoint_path);
    seen.push_back(c.ok() ? c->epoch : 0);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Written after a report's callback: at epoch 2 (every 2) and 3 (the end).
  EXPECT_EQ(seen, (std::vector<int>{0, 0, 2}));
  EXPECT_EQ(ReadCheckpoint(o.checkpoint_path)->epoch, 3);
}

// A trial killed while it wrote its checkpoint left the temporary file (as large as the
// checkpoint); the trial's next start deletes it, and nothing a live process is writing.
TEST(Checkpoint, ATrialStartDeletesWhatAKilledWriteLeft) {
  TempDir dir;
  const std::string dead = std::to_string(testing::DeadPid()), live = std::to_string(::getpid());
  // A writer killed but not yet reaped (a zombie: its parent died too, and what inherits it
  // reaps slowly) writes no more either.
  const pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  ASSERT_GT(zombie, 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(zombie), &info, WEXITED | WNOWAIT), 0);
  const std::vector<std::string> left = {"t.ckpt.tmp." + dead + ".2.7637122",
                                         "t.ckpt.probe.tmp." + dead + ".0.1",
                                         "t.ckpt.tmp." + std::to_string(zombie) + ".1.5"};
  const std::vector<std::string> kept = {"t.ckpt.tmp." + live + ".0.1",      // being written
                                         "other.ckpt.tmp." + dead + ".0.1",  // another trial's
                                         "t.ckpt.tmp.notapid", "t.ckpt"};
  for (const auto& name : left) std::ofstream(dir / name) << "partial";
  for (const auto& name : kept) std::ofstream(dir / name) << "x";
  TrainOptions o = BlobOptions(dir);
  o.epochs = 1;
  o.checkpoint_path = dir / "t.ckpt";
  std::filesystem::remove(o.checkpoint_path);
  ASSERT_TRUE(Train(o, nullptr).ok());
  for (const auto& name : left) EXPECT_FALSE(std::filesystem::exists(dir / name)) << name;
  for (const auto& name : kept) EXPECT_TRUE(std::filesystem::exists(dir / name)) << name;
  ::waitpid(zombie, nullptr, 0);
}

// A checkpoint of a longer run (same config but epochs) is refused: going on from it would give
// a model trained past what was asked. One at exactly epochs trains nothing more.
TEST(Checkpoint, TrainRefusesACheckpointPastItsEpochs) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.epochs = 3;
  o.checkpoint_path = dir / "t.ckpt";
  ASSERT_TRUE(Train(o, nullptr).ok());

  TrainOptions shorter = o;
  shorter.epochs = 2;
  auto r = Train(shorter, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            o.checkpoint_path +
                ": checkpoint is at epoch 3, past epochs = 2 (a longer run's); delete it, or set "
                "epochs to at least 3");

  int epochs_run = 0;
  auto again = Train(o, [&](const EpochReport&) { return ++epochs_run, true; });
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(epochs_run, 0);
  EXPECT_EQ(again->resumed_from_epoch, 3);
  EXPECT_EQ(again->epochs_done, 3);
}

// The validation split is drawn over the training file's samples: a checkpoint at an epoch's end
// does not go on over a training set of another size (files added to a folder), whose split
// would score as validation what its weights trained on.
TEST(Checkpoint, TrainRefusesACheckpointOfATrainingSetOfAnotherSize) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.epochs = 2;
  o.checkpoint_path = dir / "t.ckpt";
  o.stop_after_epoch = 1;
  ASSERT_TRUE(Train(o, nullptr).ok());
  o.stop_after_epoch = 0;

  testing::WriteBlobs(dir, "train", 500, 1);
  auto r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  const std::string& said = r.status().message();
  EXPECT_EQ(said.rfind(o.checkpoint_path +
                           ": checkpoint is at epoch 1 of a training set of 480 samples, and ",
                       0),
            0u)
      << said;
  EXPECT_NE(said.find(" has 500; has it changed? delete the checkpoint to train from the start"),
            std::string::npos)
      << said;

  testing::WriteBlobs(dir, "train", 480, 1);
  auto again = Train(o, nullptr);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->resumed_from_epoch, 1);
}

// A dataset is the files it names: a relative path goes on from its own files given absolutely,
// and the same relative words in another folder (other files) do not.
TEST(Checkpoint, ADatasetIsItsFilesHoweverItsPathIsWritten) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  std::filesystem::create_directories(dir / "a");
  std::filesystem::create_directories(dir / "b");
  for (const char* sub : {"a", "b"}) {
    for (const char* f : {"train-images.gz", "train-labels"}) {
      std::filesystem::copy_file(dir / f, dir / (std::string(sub) + "/" + f));
    }
  }
  o.epochs = 2;
  o.stop_after_epoch = 1;
  o.checkpoint_path = dir / "t.ckpt";
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir / "a");
  o.dataset.train_images = "train-images.gz";
  o.dataset.train_labels = "./train-labels";
  const bool wrote = Train(o, nullptr).ok();
  o.stop_after_epoch = 0;
  std::filesystem::current_path(dir / "b");
  auto elsewhere = Train(o, nullptr);
  std::filesystem::current_path(before);
  ASSERT_TRUE(wrote);
  ASSERT_FALSE(elsewhere.ok());
  // The field that differs, by name.
  EXPECT_NE(elsewhere.status().message().find(
                "belongs to a different training configuration (dataset.train_images \"" +
                (dir / "b/train-images.gz") + "\" here, \"" + (dir / "a/train-images.gz") +
                "\" in the checkpoint, dataset.train_labels "),
            std::string::npos)
      << elsewhere.status().message();

  o.dataset.train_images = dir / "a/train-images.gz";
  o.dataset.train_labels = dir / "x/../a/train-labels";
  auto same = Train(o, nullptr);
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_EQ(same->resumed_from_epoch, 1);
}

TEST(Checkpoint, TrainRefusesADamagedOrForeignCheckpoint) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.epochs = 1;
  o.checkpoint_path = dir / "t.ckpt";
  ASSERT_TRUE(Train(o, nullptr).ok());

  TrainOptions other = o;
  other.lr = 0.1;
  other.hidden = {8};
  auto r = Train(other, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            o.checkpoint_path +
                ": checkpoint belongs to a different training configuration (hidden [8] here, "
                "[16] in the checkpoint, lr 0.1 here, 0.05 in the checkpoint); delete it or "
                "point checkpoint_path elsewhere");

  FlipByte(o.checkpoint_path, 100);
  r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_EQ(
      r.status().message(),
      o.checkpoint_path + ": checkpoint checksum mismatch (the file is damaged or cut short)");

  // A checkpoint folder that cannot be there (a file is in the way): refused, naming the path.
  std::ofstream(dir / "blocked") << "x";
  o.checkpoint_path = dir / "blocked/t.ckpt";
  r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable);
  EXPECT_EQ(r.status().message(),
            dir / "blocked" + ": cannot create the checkpoint directory: Not a directory");
}

}  // namespace
}  // namespace sweep::trainer
