// Tests of ApplyOption (every key, type errors, the dataset forms), OptionKeys, MetricNames and
// Validate.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

// GCC 12 at -O3 reports a false -Wrestrict inside std::string assignment once the lambdas below
// are inlined (GCC bug 105329); nothing here overlaps.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "gtest/gtest.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace sweep::trainer {
namespace {

using json = nlohmann::json;
using testing::IdxBytes;
using testing::TempDir;
using testing::WriteBytes;

std::string ApplyError(std::string_view key, const json& value) {
  TrainOptions o;
  Status s = ApplyOption(&o, key, value);
  return s.ok() ? "" : s.message();
}

TEST(Options, EveryKeyApplies) {
  TempDir dir;
  TrainOptions o;
  const json values = {
      {"dataset",
       {{"format", "csv"}, {"train_images", "a.csv"}, {"label_column", -1}, {"shape", {1, 8, 8}}}},
      {"model", "mlp"},
      {"hidden", {64, 32.0}},
      {"activation", "tanh"},
      {"optimizer", "sgd"},
      {"lr", 0.1},
      {"momentum", 0},
      {"batch_size", 64.0},
      {"epochs", 3},
      {"validation_fraction", 0.2},
      {"max_train_samples", 1000},
      {"precision", "fp32"},
      {"seed", 18446744073709551615ull},
      {"threads", 2},
      {"init", "xavier"},
      {"dropout", 0.2},
      {"nesterov", true},
      {"weight_decay", 5e-4},
      {"beta1", 0.8},
      {"beta2", 0.99},
      {"eps", 1e-6},
      {"lr_schedule", "cosine"},
      {"warmup_epochs", 0.5},
      {"step_size", 3},
      {"gamma", 0.5},
      {"scale_lr", true},
      {"base_batch", 256},
      {"accum_steps", 2},
      {"replicas", 2},
      {"backend", "cuda"},
      {"devices", {3, 1}},
      {"dataset_on_gpu", false},
      {"cuda_graphs", false},
      {"cudnn_autotune", true},
      {"checkpoint_path", "/tmp/x.ckpt"},
      {"checkpoint_every", 2},
      {"checkpoint_every_steps", 500},
      {"cache_dir", "/tmp/cache"},
      {"channels", {32, 64}},
      {"convs_per_stage", 1},
      {"kernel_size", 5},
      {"batch_norm", false},
      {"residual", true},
      {"pool", "avg"},
      {"global_pool", true},
      {"bn_momentum", 0.2},
      {"bn_eps", 1e-3},
      {"normalize", true},
      {"augment_crop", 2},
      {"augment_flip", true},
      {"random_erasing", 0.25},
      {"label_smoothing", 0.1}};
  for (const std::string& key : OptionKeys()) {
    ASSERT_TRUE(values.contains(key)) << key;
    Status s = ApplyOption(&o, key, values[key]);
    EXPECT_TRUE(s.ok()) << key << ": " << s.message();
  }
  EXPECT_EQ(values.size(), OptionKeys().size());
  EXPECT_EQ(o.backend, "cuda");
  EXPECT_EQ(o.devices, (std::vector<int>{3, 1}));
  EXPECT_FALSE(o.dataset_on_gpu);
  EXPECT_FALSE(o.cuda_graphs);
  EXPECT_TRUE(o.cudnn_autotune);
  EXPECT_EQ(o.dataset.format, "csv");
  EXPECT_EQ(o.dataset.train_images, "a.csv");
  EXPECT_EQ(o.dataset.label_column, -1);
  EXPECT_EQ(o.hidden, (std::vector<int>{64, 32}));
  EXPECT_EQ(o.activation, "tanh");
  EXPECT_EQ(o.lr, 0.1);
  EXPECT_EQ(o.momentum, 0.0);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.validation_fraction, 0.2);
  EXPECT_EQ(o.max_train_samples, 1000);
  EXPECT_EQ(o.seed, 18446744073709551615ull);
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.init, "xavier");
  EXPECT_EQ(o.dropout, 0.2);
  EXPECT_TRUE(o.nesterov);
  EXPECT_EQ(o.weight_decay, 5e-4);
  EXPECT_EQ(o.beta1, 0.8);
  EXPECT_EQ(o.beta2, 0.99);
  EXPECT_EQ(o.eps, 1e-6);
  EXPECT_EQ(o.lr_schedule, "cosine");
  EXPECT_EQ(o.warmup_epochs, 0.5);
  EXPECT_EQ(o.step_size, 3);
  EXPECT_EQ(o.gamma, 0.5);
  EXPECT_TRUE(o.scale_lr);
  EXPECT_EQ(o.base_batch, 256);
  EXPECT_EQ(o.accum_steps, 2);
  EXPECT_EQ(o.replicas, 2);
  EXPECT_EQ(o.checkpoint_path, "/tmp/x.ckpt");
  EXPECT_EQ(o.checkpoint_every, 2);
  EXPECT_EQ(o.checkpoint_every_steps, 500);
  EXPECT_EQ(o.cache_dir, "/tmp/cache");
  // momentum was set to 0 above: Nesterov needs some.
  EXPECT_EQ(Validate(o).message(),
            "nesterov: needs momentum > 0 (Nesterov momentum without momentum is plain SGD)");
  o.momentum = 0.9;
  EXPECT_TRUE(Validate(o).ok()) << Validate(o).message();

  ASSERT_TRUE(ApplyOption(&o, "hidden", 100).ok());  // one integer: one layer
  EXPECT_EQ(o.hidden, (std::vector<int>{100}));
  ASSERT_TRUE(ApplyOption(&o, "hidden", json::array()).ok());  // none: a linear model
  EXPECT_TRUE(o.hidden.empty());
}

TEST(Options, TypeErrors) {
  EXPECT_EQ(ApplyError("hidden", "abc"),
            "hidden: expected a list of positive integers (or one, for one layer), each at most "
            "1048576, got \"abc\"");
  EXPECT_EQ(ApplyError("hidden", {256, 0}),
            "hidden: expected a list of positive integers (or one, for one layer), each at most "
            "1048576, got [256,0]");
  EXPECT_EQ(ApplyError("hidden", {1.5}),
            "hidden: expected a list of positive integers (or one, for one layer), each at most "
            "1048576, got [1.5]");
  EXPECT_EQ(ApplyError("lr", "0.1"), "lr: expected a number, got \"0.1\"");
  EXPECT_EQ(ApplyError("lr", true), "lr: expected a number, got true");
  EXPECT_EQ(ApplyError("lr", std::numeric_limits<double>::infinity()),
            "lr: expected a finite number, got inf");
  EXPECT_EQ(ApplyError("lr", std::nan("")), "lr: expected a finite number, got nan");
  EXPECT_EQ(ApplyError("momentum", nullptr), "momentum: expected a number, got null");
  EXPECT_EQ(ApplyError("batch_size", 12.5), "batch_size: expected an integer, got 12.5");
  EXPECT_EQ(ApplyError("batch_size", 1e12), "batch_size: expected an integer, got 1000000000000.0");
  EXPECT_EQ(ApplyError("epochs", "3"), "epochs: expected an integer, got \"3\"");
  EXPECT_EQ(ApplyError("seed", -1), "seed: expected a non-negative integer, got -1");
  EXPECT_EQ(ApplyError("activation", 3), "activation: expected a string, got 3");
  EXPECT_EQ(ApplyError("dataset", 3),
            "dataset: expected an object {format, train_images, ...} or a directory name, got 3");
  EXPECT_EQ(ApplyError("dataset", {{"train_image", "x"}}),
            "dataset: unknown key \"train_image\" (expected format, train_images, train_labels, "
            "test_images, test_labels, label_column, header, shape, cache, prefetch; or for "
            "format = \"folder\": train, test, image_size, on_bad_file, decode_threads)");
  EXPECT_EQ(ApplyError("dataset", {{"label_column", "x"}}),
            "dataset.label_column: expected an integer column index, got \"x\"");
  EXPECT_EQ(ApplyError("dataset", {{"header", 1}}),
            "dataset.header: expected true, false or \"auto\" (a first row whose label is not a "
            "number is a header), got 1");
  // The other lists of integers: a length, a range, and whole numbers each.
  EXPECT_EQ(ApplyError("dataset", {{"shape", {1, 28}}}),
            "dataset.shape: expected [channels, height, width], positive integers, got [1,28]");
  EXPECT_EQ(ApplyError("dataset", {{"shape", {1, 28, 0}}}),
            "dataset.shape: expected [channels, height, width], positive integers, got [1,28,0]");
  EXPECT_EQ(
      ApplyError("dataset", {{"format", "folder"}, {"image_size", {32, 24.5}}}),
      "dataset.image_size: expected [height, width], integers from 1 to 32768, got [32,24.5]");
  EXPECT_EQ(
      ApplyError("dataset", {{"format", "folder"}, {"image_size", {32, 40000}}}),
      "dataset.image_size: expected [height, width], integers from 1 to 32768, got [32,40000]");
  EXPECT_EQ(ApplyError("devices", {0, -1}),
            "devices: expected a list of CUDA device ordinals (integers >= 0), got [0,-1]");
  EXPECT_EQ(ApplyError("devices", 0),
            "devices: expected a list of CUDA device ordinals (integers >= 0), got 0");
  EXPECT_EQ(ApplyError("learning_rate", 0.1), "unknown trainer option \"learning_rate\"");
  EXPECT_EQ(ApplyError("nesterov", 1), "nesterov: expected true or false, got 1");
  EXPECT_EQ(ApplyError("scale_lr", "yes"), "scale_lr: expected true or false, got \"yes\"");
  EXPECT_EQ(ApplyError("replicas", 1.5), "replicas: expected an integer, got 1.5");
  EXPECT_EQ(ApplyError("dropout", "0.1"), "dropout: expected a number, got \"0.1\"");
  EXPECT_EQ(ApplyError("checkpoint_path", 3), "checkpoint_path: expected a string, got 3");
}

TEST(Options, DatasetDirectory) {
  TempDir dir;
  EXPECT_EQ(ApplyError("dataset", dir / "none"),
            "dataset: \"" + (dir / "none") + "\" is not a directory");
  EXPECT_EQ(ApplyError("dataset", dir.path()),
            "dataset: directory \"" + dir.path() +
                "\" has no train-images-idx3-ubyte (or train-images-idx3-ubyte.gz)");
  // Gzipped training pair, raw test pair: each name resolves to whichever exists.
  WriteBytes(dir / "train-images-idx3-ubyte.gz", IdxBytes({1, 1, 1}, {0}), true);
  WriteBytes(dir / "train-labels-idx1-ubyte.gz", IdxBytes({1}, {0}), true);
  TrainOptions o;
  ASSERT_TRUE(ApplyOption(&o, "dataset", dir.path()).ok());
  EXPECT_EQ(o.dataset.format, "idx");
  EXPECT_EQ(o.dataset.train_images, dir / "train-images-idx3-ubyte.gz");
  EXPECT_EQ(o.dataset.train_labels, dir / "train-labels-idx1-ubyte.gz");
  EXPECT_EQ(o.dataset.test_images, "");
  WriteBytes(dir / "t10k-images-idx3-ubyte", IdxBytes({1, 1, 1}, {0}), false);
  EXPECT_EQ(
      ApplyError("dataset", dir.path()),
      "dataset: directory \"" + dir.path() + "\" has only one of the t10k image and label files");
  WriteBytes(dir / "t10k-labels-idx1-ubyte", IdxBytes({1}, {0}), false);
  ASSERT_TRUE(ApplyOption(&o, "dataset", dir.path()).ok());
  EXPECT_EQ(o.dataset.test_images, dir / "t10k-images-idx3-ubyte");
  EXPECT_EQ(o.dataset.test_labels, dir / "t10k-labels-idx1-ubyte");
  EXPECT_TRUE(Validate(o).ok());
}

TEST(Options, MetricNames) {
  const auto& m = MetricNames();
  for (const char* name : {"train_loss", "val_loss", "val_acc", "samples_per_s", "data_wait_s",
                           "epoch_s", "allreduce_s", "lr", "skipped_steps", "test_acc"}) {
    EXPECT_NE(std::find(m.begin(), m.end(), name), m.end()) << name;
  }
}

std::string ValidateError(const std::function<void(TrainOptions*)>& change) {
  TrainOptions o;
  o.dataset.train_images = "i";
  o.dataset.train_labels = "l";
  change(&o);
  Status s = Validate(o);
  return s.ok() ? "" : s.message();
}

TEST(Options, Validate) {
  EXPECT_EQ(ValidateError([](TrainOptions*) {}), "");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->dataset.train_images.clear(); }),
            "dataset: no training file (dataset.train_images)");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->dataset.format = "parquet"; }),
            "dataset.format: expected \"idx\", \"csv\" or \"folder\", got \"parquet\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->dataset.test_images = "t"; }),
            "dataset: idx needs both dataset.test_images and dataset.test_labels, or neither");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->dataset.format = "csv"; }),
            "dataset: csv takes labels from dataset.label_column; leave *_labels empty");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->model = "resnet"; }),
            "model: expected \"mlp\" or \"cnn\", got \"resnet\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->hidden = {0}; }),
            "hidden: widths must be positive, got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->activation = "swish"; }),
            "activation: expected relu, tanh or gelu, got \"swish\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->optimizer = "adam"; }),
            "optimizer: expected \"sgd\" or \"adamw\", got \"adam\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->optimizer = "adamw"; }), "");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->init = "lecun"; }),
            "init: expected he, xavier, pytorch or auto, got \"lecun\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->dropout = 1; }),
            "dropout: must be in [0, 1) as a 32-bit float (at most 0.99999994), got 1");
  // Below 1 as a double, 1 as the float training uses: refused, not a NaN at the first step.
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->dropout = 0.99999999; }),
            "dropout: must be in [0, 1) as a 32-bit float (at most 0.99999994), got 0.99999999");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->dropout = 0.9999999; }), "");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->beta1 = 0.99999999; }),
            "beta1: must be in [0, 1) as a 32-bit float (at most 0.99999994), got 0.99999999");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->eps = 1e-50; }),
            "eps: must be > 0 as a 32-bit float (at least about 1.4e-45), got 1e-50");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->weight_decay = -1; }),
            "weight_decay: must be >= 0, got -1");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->beta2 = 1; }),
            "beta2: must be in [0, 1) as a 32-bit float (at most 0.99999994), got 1");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->eps = 0; }),
            "eps: must be > 0 as a 32-bit float (at least about 1.4e-45), got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->lr_schedule = "linear"; }),
            "lr_schedule: expected constant, step or cosine, got \"linear\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->warmup_epochs = -1; }),
            "warmup_epochs: must be >= 0, got -1");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->step_size = 0; }),
            "step_size: must be >= 1 (epochs), got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->gamma = 0; }), "gamma: must be > 0, got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->base_batch = 0; }),
            "base_batch: must be >= 1, got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->accum_steps = 0; }),
            "accum_steps: must be in [1, 65536], got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->replicas = 0; }),
            "replicas: must be in [1, 1024], got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->replicas = 3; }), "");  // 43 + 43 + 42
  EXPECT_EQ(ValidateError([](TrainOptions* o) {
              o->replicas = 4;
              o->batch_size = 2;
            }),
            "batch_size: 2 is smaller than replicas = 4 (every replica needs a sample of each "
            "batch)");
  // Fewer samples than one optimizer step takes: no step would train.
  EXPECT_EQ(ValidateError([](TrainOptions* o) {
              o->batch_size = 64;
              o->max_train_samples = 10;
            }),
            "max_train_samples: 10 samples make no optimizer step of batch_size 64: give at "
            "least 64");
  EXPECT_EQ(ValidateError([](TrainOptions* o) {
              o->batch_size = 64;
              o->accum_steps = 2;
              o->max_train_samples = 127;
            }),
            "max_train_samples: 127 samples make no optimizer step of batch_size 64 x "
            "accum_steps 2: give at least 128");
  EXPECT_EQ(ValidateError([](TrainOptions* o) {
              o->batch_size = 64;
              o->accum_steps = 2;
              o->max_train_samples = 128;
            }),
            "");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->checkpoint_every = -1; }),
            "checkpoint_every: must be >= 0 (0: only when stopped and at the end), got -1");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->checkpoint_every_steps = -1; }),
            "checkpoint_every_steps: must be >= 0 (0: none within an epoch), got -1");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->lr = 0; }),
            "lr: must be a positive number that a 32-bit float holds (about 1.4e-45 to 3.4e38), "
            "got 0");
  // 0 and infinity as the optimizer's float: no step, or every weight NaN.
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->lr = 1e-320; }),
            "lr: must be a positive number that a 32-bit float holds (about 1.4e-45 to 3.4e38), "
            "got 9.99989e-321");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->lr = 1e39; }),
            "lr: must be a positive number that a 32-bit float holds (about 1.4e-45 to 3.4e38), "
            "got 1e+39");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->momentum = 1; }),
            "momentum: must be in [0, 1) as a 32-bit float (at most 0.99999994), got 1");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->batch_size = 0; }),
            "batch_size: must be >= 1, got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->epochs = 0; }), "epochs: must be >= 1, got 0");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->validation_fraction = 1; }),
            "validation_fraction: must be in [0, 1), got 1");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->max_train_samples = -1; }),
            "max_train_samples: must be >= 0 (0: all), got -1");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->precision = "fp8"; }),
            "precision: expected fp32, bf16 or fp16, got \"fp8\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->backend = "tpu"; }),
            "backend: expected auto, cpu or cuda, got \"tpu\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) {
              o->devices = {0, 1};
            }),
            "devices: 2 GPUs given for replicas = 1 (one device per replica)");
  EXPECT_EQ(ValidateError([](TrainOptions* o) {
              o->replicas = 2;
              o->devices = {1, 1};
            }),
            "devices: GPU 1 is given twice (one replica per device)");
  EXPECT_EQ(ValidateError([](TrainOptions* o) {
              o->backend = "cpu";
              o->devices = {0};
            }),
            "devices: GPUs are given, but backend = \"cpu\"");
  EXPECT_EQ(ValidateError([](TrainOptions* o) { o->threads = 0; }),
            "threads: must be in [1, 1024], got 0");
}

// bf16 and fp16 train on either backend: the CPU rounds the GEMMs' inputs as the GPU does.
TEST(Options, HalfPrecisionOnEveryBackend) {
  for (const char* precision : {"bf16", "fp16"}) {
    for (const char* backend : {"auto", "cpu", "cuda"}) {
      EXPECT_EQ(ValidateError([&](TrainOptions* o) {
                  o->precision = precision;
                  o->backend = backend;
                }),
                "")
          << precision << " " << backend;
    }
  }
}

// The work estimate ranks trials for order = "longest_first": three GEMMs per layer per sample.
TEST(Options, EstimatedWorkCountsTheLayersSamplesAndEpochs) {
  TrainOptions o;
  o.hidden = {100};
  o.epochs = 2;
  o.validation_fraction = 0.5;
  // 30,000 training samples x (784 x 100 + 100 x 10) x 3 x 2 epochs.
  EXPECT_DOUBLE_EQ(EstimatedWork(o), 30000.0 * (784 * 100 + 100 * 10) * 3 * 2);
  TrainOptions wider = o;
  wider.hidden = {100, 400};
  EXPECT_GT(EstimatedWork(wider), EstimatedWork(o));
  TrainOptions fewer = o;
  fewer.max_train_samples = 1000;
  EXPECT_DOUBLE_EQ(EstimatedWork(fewer), EstimatedWork(o) / 30);
  TrainOptions none = o;
  none.epochs = 0;
  EXPECT_EQ(EstimatedWork(none), 0);
}

}  // namespace
}  // namespace sweep::trainer
