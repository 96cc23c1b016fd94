// End-to-end tests of Train() on tiny datasets the tests write (and, when installed, a subset of
// Fashion-MNIST): learning, determinism, divergence, stopping, the fixed validation split and
// the errors a bad dataset gives.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "data.h"
#include "gtest/gtest.h"
#include "rng.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace sweep::trainer {
namespace {

using testing::IdxBytes;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteText;

// n 6x6 images in 4 classes: class k lights up quadrant k (with noise everywhere). Separable.
void WriteBlobs(const TempDir& dir, const std::string& prefix, uint32_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> pixels, labels;
  for (uint32_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng.Below(4));
    labels.push_back(static_cast<uint8_t>(k));
    for (int r = 0; r < 6; ++r) {
      for (int c = 0; c < 6; ++c) {
        const int quadrant = (r / 3) * 2 + c / 3;
        const double v = (quadrant == k ? 150 : 0) + 100 * rng.Uniform();
        pixels.push_back(static_cast<uint8_t>(v));
      }
    }
  }
  WriteBytes(dir / (prefix + "-images.gz"), IdxBytes({n, 6, 6}, pixels), true);
  WriteBytes(dir / (prefix + "-labels"), IdxBytes({n}, labels), false);
}

TrainOptions BlobOptions(const TempDir& dir) {
  WriteBlobs(dir, "train", 480, 1);
  WriteBlobs(dir, "test", 100, 2);
  TrainOptions o;
  o.dataset.train_images = dir / "train-images.gz";
  o.dataset.train_labels = dir / "train-labels";
  o.dataset.test_images = dir / "test-images.gz";
  o.dataset.test_labels = dir / "test-labels";
  o.hidden = {16};
  o.batch_size = 16;
  o.epochs = 4;
  o.lr = 0.05;
  o.validation_fraction = 0.25;
  o.seed = 3;
  return o;
}

TEST(Train, LearnsASeparableProblem) {
  TempDir dir;
  const TrainOptions o = BlobOptions(dir);
  std::vector<EpochReport> reports;
  auto r = Train(o, [&](const EpochReport& e) {
    reports.push_back(e);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(r->epochs_done, 4);
  EXPECT_FALSE(r->stopped);
  const EpochReport& last = reports.back();
  EXPECT_EQ(last.epoch, 4);
  EXPECT_EQ(last.step, 4 * (360 / 16));  // the last partial batch is dropped
  EXPECT_GE(last.val_acc, 0.99);
  EXPECT_LT(last.train_loss, reports.front().train_loss);
  ASSERT_TRUE(r->test_acc.has_value());
  EXPECT_GE(*r->test_acc, 0.99);
  for (const EpochReport& e : reports) {
    EXPECT_GT(e.samples_per_s, 0);
    EXPECT_GE(e.data_wait_s, 0);
    EXPECT_GE(e.epoch_s, e.data_wait_s);
  }
}

TEST(Train, SameSeedSameBits) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.activation = "gelu";
  auto run = [&](uint64_t seed) {
    o.seed = seed;
    std::vector<EpochReport> reports;
    auto r = Train(o, [&](const EpochReport& e) {
      reports.push_back(e);
      return true;
    });
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::make_pair(reports, r.ok() ? r->test_acc.value_or(-1) : -2);
  };
  const auto [a, a_test] = run(11);
  const auto [b, b_test] = run(11);
  const auto [c, c_test] = run(12);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    // Bit-identical, so exact comparisons (timings aside).
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_EQ(a[i].train_loss, b[i].train_loss);
    EXPECT_EQ(a[i].val_loss, b[i].val_loss);
    EXPECT_EQ(a[i].val_acc, b[i].val_acc);
  }
  EXPECT_EQ(a_test, b_test);
  EXPECT_NE(a[0].train_loss, c[0].train_loss);
}

TEST(Train, HugeLearningRateDiverges) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.lr = 1e30;
  int calls = 0;
  auto r = Train(o, [&](const EpochReport&) { return ++calls > 0; });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("diverged at epoch 1, step ", 0), 0u)
      << r.status().message();
  EXPECT_NE(r.status().message().find("(loss "), std::string::npos);
  EXPECT_EQ(calls, 0);
}

TEST(Train, CallbackStopsAfterThatEpoch) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.epochs = 5;
  int calls = 0;
  auto r = Train(o, [&](const EpochReport& e) {
    ++calls;
    return e.epoch < 2;
  });
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r->epochs_done, 2);
  EXPECT_TRUE(r->stopped);
  EXPECT_FALSE(r->test_acc.has_value());
}

// The validation rows (by MakeSplit) get label 1, every other row label 0: a model trained on
// the rest predicts 0 everywhere, so val_acc is exactly 0 for every seed only if every seed holds
// out exactly MakeSplit's rows.
TEST(Train, ValidationSetIsTheSameForEverySeed) {
  TempDir dir;
  const int n = 200;
  const Split split = MakeSplit(n, 0.2);
  std::vector<int> label(n, 0);
  for (int32_t v : split.val) label[static_cast<size_t>(v)] = 1;
  std::string csv = "label,x0,x1\n";
  Rng rng(5);
  for (int i = 0; i < n; ++i) {
    csv += std::to_string(label[static_cast<size_t>(i)]) + "," + std::to_string(rng.Uniform()) +
           "," + std::to_string(rng.Uniform()) + "\n";
  }
  WriteText(dir / "d.csv", csv);
  TrainOptions o;
  o.dataset.format = "csv";
  o.dataset.train_images = dir / "d.csv";
  o.validation_fraction = 0.2;
  o.hidden = {4};
  o.batch_size = 16;
  o.epochs = 2;
  for (uint64_t seed : {0, 1, 2, 99}) {
    o.seed = seed;
    double val_acc = -1;
    auto r = Train(o, [&](const EpochReport& e) {
      val_acc = e.val_acc;
      return true;
    });
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(val_acc, 0.0) << "seed " << seed;
  }
  // And no validation set: NaN metrics.
  o.validation_fraction = 0;
  double val_loss = 0;
  ASSERT_TRUE(Train(o, [&](const EpochReport& e) {
                val_loss = e.val_loss;
                return true;
              }).ok());
  EXPECT_TRUE(std::isnan(val_loss));
}

// Train() promises that separate calls may run at once: each owns its model and batcher, and
// with threads = 1 OpenBLAS runs in the calling thread, so results match a lone run bit for bit.
TEST(Train, ConcurrentCallsMatchSequentialOnes) {
  TempDir dir;
  const TrainOptions o = BlobOptions(dir);
  auto losses = [&](uint64_t seed) {
    TrainOptions mine = o;
    mine.seed = seed;
    std::vector<double> out;
    auto r = Train(mine, [&](const EpochReport& e) {
      out.push_back(e.train_loss);
      out.push_back(e.val_loss);
      return true;
    });
    if (!r.ok()) out.push_back(-1);
    return out;
  };
  const std::vector<double> alone_a = losses(1), alone_b = losses(2);
  std::vector<double> together_a, together_b;
  std::thread ta([&] { together_a = losses(1); });
  std::thread tb([&] { together_b = losses(2); });
  ta.join();
  tb.join();
  EXPECT_EQ(together_a, alone_a);
  EXPECT_EQ(together_b, alone_b);
  EXPECT_NE(alone_a, alone_b);
}

TEST(Train, DatasetErrorsNameTheFile) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.dataset.train_labels = dir / "missing";
  auto r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), (dir / "missing") + ": cannot open: No such file or directory");

  o = BlobOptions(dir);
  WriteBytes(dir / "odd-images", IdxBytes({1, 2, 2}, {1, 2, 3, 4}), false);
  WriteBytes(dir / "odd-labels", IdxBytes({1}, {0}), false);
  o.dataset.test_images = dir / "odd-images";
  o.dataset.test_labels = dir / "odd-labels";
  r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            (dir / "odd-images") + ": samples have 4 features, the training set's 36");

  o = BlobOptions(dir);
  o.batch_size = 400;
  r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "training set has 360 samples after the validation split, fewer than batch_size 400");

  o = BlobOptions(dir);
  o.lr = -1;
  r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "lr: must be a positive number, got -1");
}

TEST(Train, FashionMnistSubset) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed at " << dir;
  }
  TrainOptions o;
  ASSERT_TRUE(ApplyOption(&o, "dataset", dir).ok());
  o.max_train_samples = 10000;
  o.epochs = 2;
  double val_acc = 0;
  const auto start = std::chrono::steady_clock::now();
  auto r = Train(o, [&](const EpochReport& e) {
    val_acc = e.val_acc;
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GE(val_acc, 0.75);  // 0.79-0.83 over seeds 0-4; the margin is for other BLAS kernels
  ASSERT_TRUE(r->test_acc.has_value());
  EXPECT_GE(*r->test_acc, 0.72);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 30.0);  // normally 1-2 s; generous for a loaded machine
}

}  // namespace
}  // namespace sweep::trainer
