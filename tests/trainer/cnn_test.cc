// Convolutional models: every layer's and a residual block's gradients against finite
// differences, ten SGD steps against PyTorch, and Train() of a CNN end to end (replicas,
// accumulation, checkpoints, augmentation) and its refusals.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "cpu/net.h"
#include "cpu/ops.h"
#include "gtest/gtest.h"
#include "model.h"
#include "rng.h"
#include "test_util.h"
#include "train_internal.h"
#include "trainer/trainer.h"

namespace sweep::trainer {
namespace {

using json = nlohmann::json;
using testing::BlobOptions;
using testing::TempDir;

using testing::Random;

// ---- models by hand ----

Layer Make(LayerKind kind, int input, int out = 0, int kernel = 1, int stride = 1, int pad = 0) {
  Layer l;
  l.kind = kind;
  l.input = input;
  l.out = out;
  l.kernel = kernel;
  l.stride = stride;
  l.pad = pad;
  return l;
}

int Add(ModelSpec* m, Layer l) {
  m->layers.push_back(l);
  return static_cast<int>(m->layers.size()) - 1;
}

// conv 3x3 (bias off) - bn - relu - maxpool 2 - [conv - bn - relu - conv - bn] + shortcut - relu
// - flatten - linear: every kind of layer the issue names, on 1 x side x side inputs.
ModelSpec ResidualModel(int side, int classes, bool bias, LayerKind pool = LayerKind::kMaxPool,
                        bool global_pool = false) {
  ModelSpec m;
  m.input = {1, side, side};
  m.classes = classes;
  Layer conv = Make(LayerKind::kConv, -1, 4, 3, 1, 1);
  conv.bias = bias;
  int at = Add(&m, conv);
  at = Add(&m, Make(LayerKind::kBatchNorm, at));
  Layer relu = Make(LayerKind::kActivation, at);
  at = Add(&m, relu);
  at = Add(&m, Make(pool, at, 0, 2, 2));
  const int block_in = at;
  conv.input = at;
  at = Add(&m, conv);
  at = Add(&m, Make(LayerKind::kBatchNorm, at));
  relu.input = at;
  at = Add(&m, relu);
  conv.input = at;
  at = Add(&m, conv);
  at = Add(&m, Make(LayerKind::kBatchNorm, at));
  Layer sum = Make(LayerKind::kAdd, at);
  sum.shortcut = block_in;
  at = Add(&m, sum);
  relu.input = at;
  at = Add(&m, relu);
  at = Add(&m, Make(global_pool ? LayerKind::kGlobalAvgPool : LayerKind::kFlatten, at));
  Layer head = Make(LayerKind::kLinear, at, classes);
  Add(&m, head);
  EXPECT_TRUE(m.Finish().ok());
  return m;
}

// Central differences of the training loss (batch statistics; dropout keyed the same every
// time) against Backward's gradient of every parameter.
void ExpectGradients(ModelSpec model, int B, uint64_t seed, float tolerance = 1e-2f) {
  cpu::Net net(model, B);
  InitParams(net.model(), seed, net.params(), nullptr);
  Rng rng(seed + 1);
  // Nonzero biases and betas, gammas off 1: every term of the gradient is exercised.
  for (const Layer& l : net.model().layers) {
    if (l.bias_at >= 0) {
      const int n = l.kind == LayerKind::kBatchNorm ? l.in_shape.c : l.out;
      for (int i = 0; i < n; ++i)
        net.params()[l.bias_at + i] = static_cast<float>(0.2 * rng.Uniform() - 0.1);
      if (l.kind == LayerKind::kBatchNorm) {
        for (int i = 0; i < n; ++i)
          net.params()[l.weight + i] = static_cast<float>(0.8 + 0.4 * rng.Uniform());
      }
    }
  }
  const auto x = Random(static_cast<size_t>(B * model.input.size()), seed + 2, 1.5);
  std::vector<int32_t> y;
  for (int b = 0; b < B; ++b) y.push_back(b % model.classes);
  net.ForwardLoss(x.data(), y.data(), B, 1.0f / static_cast<float>(B), 5, 0, 1.0f, false);
  net.Backward(x.data(), B, false);
  std::vector<float> params(net.params(), net.params() + net.num_params());
  const std::vector<float> grads(net.grads(), net.grads() + net.num_params());
  auto loss = [&] {
    std::copy(params.begin(), params.end(), net.params());
    return net.ForwardLoss(x.data(), y.data(), B, 1.0f / static_cast<float>(B), 5, 0, 1.0f, false) /
           B;
  };
  // A step small enough that max pool's and relu's kinks are rarely crossed, in a loss summed
  // in double; the bound allows float's rounding of the loss (~1e-7) over the step.
  int bad = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const float keep = params[i];
    const float h = 1e-3f;
    params[i] = keep + h;
    const double up = loss();
    params[i] = keep - h;
    const double down = loss();
    params[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    if (std::abs(numeric - grads[i]) > tolerance * (0.1 + std::abs(numeric)) && ++bad <= 5) {
      ADD_FAILURE() << "parameter " << i << ": analytic " << grads[i] << ", numeric " << numeric;
    }
  }
}

TEST(CnnGradients, ConvolutionWithBiasStrideAndPadding) {
  for (const auto& [stride, pad, kernel] :
       {std::tuple{1, 1, 3}, std::tuple{2, 1, 3}, std::tuple{1, 0, 1}, std::tuple{2, 2, 5}}) {
    ModelSpec m;
    m.input = {3, 7, 7};
    m.classes = 3;
    int at = Add(&m, Make(LayerKind::kConv, -1, 5, kernel, stride, pad));
    at = Add(&m, Make(LayerKind::kConv, at, 4, 3, 1, 1));  // the first conv's input gradient
    at = Add(&m, Make(LayerKind::kFlatten, at));
    Add(&m, Make(LayerKind::kLinear, at, 3));
    ASSERT_TRUE(m.Finish().ok());
    SCOPED_TRACE(::testing::Message() << "stride " << stride << " pad " << pad << " k " << kernel);
    ExpectGradients(m, 3, 11);
  }
}

TEST(CnnGradients, EachActivationFusedAndAlone) {
  for (Activation act : {Activation::kRelu, Activation::kTanh, Activation::kGelu}) {
    ModelSpec m;
    m.input = {2, 5, 5};
    m.classes = 3;
    int at = Add(&m, Make(LayerKind::kConv, -1, 4, 3, 1, 1));
    Layer a = Make(LayerKind::kActivation, at);
    a.act = act;
    at = Add(&m, a);  // fused into the conv
    at = Add(&m, Make(LayerKind::kMaxPool, at, 0, 2, 2));
    a.input = at;
    at = Add(&m, a);  // alone
    at = Add(&m, Make(LayerKind::kFlatten, at));
    Add(&m, Make(LayerKind::kLinear, at, 3));
    ASSERT_TRUE(m.Finish().ok());
    SCOPED_TRACE(ActivationName(act));
    ExpectGradients(m, 4, 12);
  }
}

TEST(CnnGradients, BatchNormPoolsAndResidualBlock) {
  ExpectGradients(ResidualModel(8, 3, false), 4, 13);
  ExpectGradients(ResidualModel(8, 3, true, LayerKind::kAvgPool, /*global_pool=*/true), 4, 14);
}

TEST(CnnGradients, DropoutBeforeTheHead) {
  ModelSpec m;
  m.input = {1, 6, 6};
  m.classes = 3;
  int at = Add(&m, Make(LayerKind::kConv, -1, 3, 3, 1, 1));
  at = Add(&m, Make(LayerKind::kFlatten, at));
  Layer drop = Make(LayerKind::kDropout, at);
  drop.p = 0.3f;
  at = Add(&m, drop);
  Add(&m, Make(LayerKind::kLinear, at, 3));
  ASSERT_TRUE(m.Finish().ok());
  ExpectGradients(m, 4, 15);
}

TEST(CnnGradients, LabelSmoothing) {
  cpu::Net net(ResidualModel(6, 4, true), 3, Precision::kFp32, 0.1f);
  InitParams(net.model(), 3, net.params(), nullptr);
  const auto x = Random(3 * 36, 4);
  const std::vector<int32_t> y = {0, 3, 1};
  net.ForwardLoss(x.data(), y.data(), 3, 1.0f / 3, 0, 0, 1.0f, false);
  net.Backward(x.data(), 3, false);
  const std::vector<float> grads(net.grads(), net.grads() + net.num_params());
  std::vector<float> params(net.params(), net.params() + net.num_params());
  // The loss is (1 - e) CE + e mean over classes of -log p: its derivative along the gradient.
  const float h = 1e-3f;
  double norm = 0;
  for (float g : grads) norm += double{g} * g;
  std::vector<float> moved = params;
  for (size_t i = 0; i < moved.size(); ++i)
    moved[i] = params[i] + h * grads[i] / static_cast<float>(std::sqrt(norm));
  std::copy(moved.begin(), moved.end(), net.params());
  const double up = net.ForwardLoss(x.data(), y.data(), 3, 1.0f / 3, 0, 0, 1.0f, false) / 3;
  std::copy(params.begin(), params.end(), net.params());
  const double at = net.ForwardLoss(x.data(), y.data(), 3, 1.0f / 3, 0, 0, 1.0f, false) / 3;
  EXPECT_NEAR((up - at) / h, std::sqrt(norm), 0.02 * std::sqrt(norm));
}

// ---- PyTorch parity ----

bool HaveTorch() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

// The same model, weights and batches trained 10 steps of SGD with momentum here and by
// tests/trainer/torch_parity.py: losses, weights, running statistics and evaluation logits
// agree within 1e-4 relative.
TEST(CnnParity, TenSgdStepsMatchPyTorch) {
  if (!HaveTorch()) GTEST_SKIP() << "python3-torch is not installed";
  TempDir dir;
  const int B = 8, side = 8, classes = 5, steps = 10;
  const float lr = 0.05f, momentum = 0.9f, weight_decay = 1e-3f;
  const ModelSpec model = ResidualModel(side, classes, /*bias=*/false);
  cpu::Net net(model, B);
  InitParams(net.model(), 21, net.params(), nullptr);
  json in;
  in["model"] = model.ToJson();
  for (const Layer& l : model.layers) {
    in["layout"].push_back({{"weight", l.weight},
                            {"bias", l.bias_at},
                            {"stats", l.stats},
                            {"in", {l.in_shape.c, l.in_shape.h, l.in_shape.w}}});
  }
  in["params"] = std::vector<float>(net.params(), net.params() + net.num_params());
  in["lr"] = lr;
  in["momentum"] = momentum;
  in["weight_decay"] = weight_decay;
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int32_t>> ys;
  Rng rng(5);
  for (int s = 0; s < steps + 1; ++s) {  // the last batch is evaluated
    xs.push_back(Random(static_cast<size_t>(B * side * side), 100 + s, 2.0));
    std::vector<int32_t> y;
    for (int b = 0; b < B; ++b) y.push_back(static_cast<int32_t>(rng.Below(classes)));
    ys.push_back(y);
  }
  in["x"] = xs;
  in["y"] = ys;
  const std::string in_path = dir / "in.json", out_path = dir / "out.json";
  std::ofstream(in_path) << in.dump();
  const std::string script = std::string(SWEEP_SOURCE_DIR) + "/tests/trainer/torch_parity.py";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + in_path + " " + out_path).c_str()),
            0);
  const json out = json::parse(std::ifstream(out_path));

  std::vector<float> velocity(static_cast<size_t>(net.num_params()), 0.0f);
  for (int s = 0; s < steps; ++s) {
    const double loss =
        net.ForwardLoss(xs[s].data(), ys[s].data(), B, 1.0f / B, 0, 0, 1.0f, true) / B;
    net.Backward(xs[s].data(), B, false);
    cpu::sgd_update(net.params(), velocity.data(), net.grads(), net.num_params(), lr, momentum,
                    weight_decay, false);
    const double theirs = out["losses"][static_cast<size_t>(s)].get<double>();
    EXPECT_NEAR(loss, theirs, 1e-4 * std::abs(theirs)) << "step " << s;
  }
  auto expect_close = [](const std::vector<float>& mine, const std::vector<float>& theirs,
                         const char* what) {
    ASSERT_EQ(mine.size(), theirs.size()) << what;
    double scale = 0;
    for (float v : theirs) scale = std::max(scale, std::abs(double{v}));
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_NEAR(mine[i], theirs[i], 1e-4 * std::max(std::abs(double{theirs[i]}), 1e-2 * scale))
          << what << " " << i;
    }
  };
  expect_close(std::vector<float>(net.params(), net.params() + net.num_params()),
               out["params"].get<std::vector<float>>(), "weight");
  expect_close(std::vector<float>(net.stats(), net.stats() + model.num_buffers),
               out["stats"].get<std::vector<float>>(), "running statistic");
  const float* logits = net.Forward(xs[steps].data(), B);
  expect_close(std::vector<float>(logits, logits + B * classes),
               out["eval_logits"].get<std::vector<float>>(), "evaluation logit");
}

// ---- Train() end to end ----

TrainOptions CnnOptions(const TempDir& dir) {
  TrainOptions o = testing::BlobCnnOptions(dir);  // 6x6 images, 4 classes
  o.epochs = 2;
  return o;
}

ModelState FinalState(const TrainOptions& o, TrainResult* result = nullptr) {
  ModelState state;
  auto r = TrainWithState(o, nullptr, &state);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (r.ok() && result != nullptr) *result = *r;
  return state;
}

double MaxRelative(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 0, worst = 0;
  for (float v : a) scale = std::max(scale, std::abs(double{v}));
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - b[i]) / scale);
  }
  return worst;
}

TEST(CnnTrain, LearnsTheBlobs) {
  TempDir dir;
  TrainOptions o = CnnOptions(dir);
  o.epochs = 4;
  auto r = Train(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->test_acc.has_value());
  EXPECT_GE(*r->test_acc, 0.9);
}

// Without batch norm, replicas agree with one replica as the MLP's do; with it each replica
// normalizes its own shard (PyTorch DDP's default), so the numbers differ, but every replica
// count is deterministic and learns.
TEST(CnnTrain, ReplicasMatchOneReplicaWithoutBatchNorm) {
  TempDir dir;
  TrainOptions o = CnnOptions(dir);
  o.batch_norm = false;
  o.augment_crop = 1;  // keyed by the sample's place in the epoch, not by the replica
  o.augment_flip = true;
  const ModelState one = FinalState(o);
  for (int replicas : {2, 3}) {
    o.replicas = replicas;
    EXPECT_LE(MaxRelative(one.params, FinalState(o).params), 1e-5) << replicas;
  }
  o.batch_norm = true;
  o.replicas = 1;
  const ModelState bn_one = FinalState(o);
  o.replicas = 2;
  const ModelState bn_two = FinalState(o), bn_two_again = FinalState(o);
  EXPECT_EQ(bn_two.params, bn_two_again.params);
  EXPECT_EQ(bn_two.stats, bn_two_again.stats);
  EXPECT_GT(MaxRelative(bn_one.params, bn_two.params), 1e-6);
}

TEST(CnnTrain, AccumulationMatchesTheFullBatchWithoutBatchNorm) {
  TempDir dir;
  TrainOptions o = CnnOptions(dir);
  o.batch_norm = false;
  o.residual = true;
  o.convs_per_stage = 2;
  const ModelState full = FinalState(o);
  o.batch_size = 12;
  o.accum_steps = 2;
  EXPECT_LE(MaxRelative(full.params, FinalState(o).params), 1e-5);
}

TEST(CnnTrain, ACheckpointResumesBitForBit) {
  TempDir dir;
  TrainOptions o = CnnOptions(dir);
  o.residual = true;
  o.augment_crop = 1;
  o.random_erasing = 0.5;
  o.label_smoothing = 0.1;
  o.epochs = 3;
  const ModelState straight = FinalState(o);
  o.checkpoint_path = dir / "ckpt";
  o.stop_after_epoch = 1;
  TrainResult first;
  FinalState(o, &first);
  ASSERT_TRUE(first.stopped);
  o.stop_after_epoch = 0;
  TrainResult second;
  const ModelState resumed = FinalState(o, &second);
  EXPECT_EQ(second.resumed_from_epoch, 1);
  EXPECT_EQ(resumed.params, straight.params);
  EXPECT_EQ(resumed.stats, straight.stats);
  EXPECT_EQ(resumed.optimizer, straight.optimizer);
  // The file names its layers and keeps the running statistics.
  Result<Checkpoint> c = ReadCheckpoint(o.checkpoint_path);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->model.has_value());
  EXPECT_EQ(c->state.stats, straight.stats);
}

// A checkpoint from before models were layers (no description) holds an MLP: an MLP resumes
// from it, a CNN refuses it by name.
TEST(CnnTrain, AnOldMlpCheckpointIsLoadedOrRefusedByName) {
  TempDir dir;
  TrainOptions o = BlobOptions(dir);
  o.checkpoint_path = dir / "ckpt";
  o.stop_after_epoch = 1;
  ASSERT_TRUE(Train(o, nullptr).ok());
  Result<Checkpoint> c = ReadCheckpoint(o.checkpoint_path);
  ASSERT_TRUE(c.ok());
  c->model.reset();
  ASSERT_TRUE(WriteCheckpoint(o.checkpoint_path, *c).ok());
  o.stop_after_epoch = 0;
  auto resumed = Train(o, nullptr);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->resumed_from_epoch, 1);

  ASSERT_TRUE(WriteCheckpoint(o.checkpoint_path, *c).ok());
  TrainOptions cnn = CnnOptions(dir);
  cnn.checkpoint_path = o.checkpoint_path;
  cnn.seed = o.seed;
  // Same options but the model: the config differs too, and either refusal names the file.
  auto refused = Train(cnn, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(o.checkpoint_path), std::string::npos);
  Checkpoint forged = *c;
  forged.config = TrainingConfig(cnn);
  ASSERT_TRUE(WriteCheckpoint(o.checkpoint_path, forged).ok());
  refused = Train(cnn, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("an MLP from an older version"), std::string::npos)
      << refused.status().message();
}

// bf16 rounds what the convolutions read as it does for linear layers: close to fp32, not equal.
TEST(CnnTrain, Bf16RoundsTheConvolutionsInputs) {
  TempDir dir;
  TrainOptions o = CnnOptions(dir);
  o.epochs = 1;
  const ModelState fp32 = FinalState(o);
  o.precision = "bf16";
  const ModelState bf16 = FinalState(o);
  const double d = MaxRelative(fp32.params, bf16.params);
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 0.05);
}

// The activations of a wide CNN's batch, not its weights, are what does not fit: the refusal
// says so before anything large is allocated.
TEST(CnnTrain, ActivationsTooLargeNameBatchSizeAndChannels) {
  TempDir dir;
  TrainOptions o = CnnOptions(dir);
  o.channels = {1 << 20};  // 117 Mi floats of outputs a sample, 9 Mi of weights
  o.convs_per_stage = 1;
  o.batch_size = 240;
  auto r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("activations of 240 samples per replica"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("make batch_size or channels smaller"), std::string::npos)
      << r.status().message();
}

TEST(CnnTrain, EstimatedWorkCountsTheConvolutions) {
  TrainOptions small, wide, deep;
  small.model = wide.model = deep.model = "cnn";
  small.channels = {16, 32};
  wide.channels = {32, 64};
  deep.channels = {16, 32};
  deep.convs_per_stage = 4;
  EXPECT_GT(EstimatedWork(wide), 3 * EstimatedWork(small));
  EXPECT_GT(EstimatedWork(deep), 1.8 * EstimatedWork(small));
  TrainOptions mlp;
  EXPECT_GT(EstimatedWork(small), 5 * EstimatedWork(mlp));
}

// ---- refusals, before anything runs ----

std::string Refusal(const std::function<void(TrainOptions*)>& change) {
  TempDir dir;
  TrainOptions o = CnnOptions(dir);
  change(&o);
  const Status s = Validate(o);
  return s.ok() ? "" : s.message();
}

TEST(CnnOptions, BadInputIsRefusedNamingTheKey) {
  EXPECT_EQ(Refusal([](TrainOptions*) {}), "");
  EXPECT_EQ(Refusal([](TrainOptions* o) { o->channels = {}; }),
            "channels: needs at least one stage, got []");
  EXPECT_EQ(Refusal([](TrainOptions* o) {
              o->channels = {4, 8, 16};
            }),
            "channels: stage 3 of 3 (16 channels) would start from a 1x1 input, too small for "
            "its 2x2 pool (6x6 images allow at most 2 stages)");
  EXPECT_EQ(Refusal([](TrainOptions* o) { o->kernel_size = 15; }),
            "kernel_size: 15 is larger than the 6x6 input of stage 1 of 1 (4 channels)");
  EXPECT_EQ(Refusal([](TrainOptions* o) { o->kernel_size = 4; }),
            "kernel_size: must be odd and in [1, 31] (\"same\" padding), got 4");
  EXPECT_EQ(Refusal([](TrainOptions* o) {
              o->batch_size = 4;
              o->replicas = 4;
            }),
            "batch_norm: batch_size 4 over replicas = 4 leaves a replica one sample, and batch "
            "statistics need two; make batch_size larger or set batch_norm = false");
  EXPECT_EQ(Refusal([](TrainOptions* o) { o->label_smoothing = -0.1; }),
            "label_smoothing: must be in [0, 1), got -0.1");
  EXPECT_EQ(Refusal([](TrainOptions* o) { o->pool = "min"; }),
            "pool: expected \"max\" or \"avg\", got \"min\"");
  EXPECT_EQ(Refusal([](TrainOptions* o) { o->random_erasing = 1.5; }),
            "random_erasing: must be a probability in [0, 1], got 1.5");
}

TEST(CnnOptions, CsvImagesNeedAShapeThatFitsTheRow) {
  TempDir dir;
  std::string csv = "label";
  for (int i = 0; i < 12; ++i) csv += ",p" + std::to_string(i);
  csv += "\n";
  for (int r = 0; r < 40; ++r) {
    csv += std::to_string(r % 2);
    for (int i = 0; i < 12; ++i) csv += "," + std::to_string((r * 7 + i) % 5);
    csv += "\n";
  }
  testing::WriteText(dir / "data.csv", csv);
  TrainOptions o;
  o.dataset.format = "csv";
  o.dataset.train_images = dir / "data.csv";
  o.cache_dir = dir / "cache";
  o.model = "cnn";
  o.channels = {2};
  o.hidden = {};
  o.batch_size = 8;
  o.epochs = 1;
  o.backend = "cpu";
  EXPECT_EQ(Validate(o).message(),
            "model: \"cnn\" needs images; give a csv dataset its dataset.shape = [C, H, W]");
  o.model = "mlp";
  o.augment_flip = true;
  EXPECT_EQ(Validate(o).message(),
            "augment_flip: augmentation needs images; give a csv dataset its dataset.shape = "
            "[C, H, W]");
  o.model = "cnn";
  o.dataset.shape = {3, 2, 3};
  EXPECT_EQ(Validate(o).message(), "dataset.shape: [3, 2, 3] holds 18 values, but the rows of " +
                                       o.dataset.train_images + " have 12 features");
  o.dataset.shape = {3, 2, 2};  // channels first, as PyTorch's tensors
  EXPECT_EQ(Validate(o).message(),
            "kernel_size: 3 is larger than the 2x2 input of stage 1 of 1 (2 channels)");
  o.kernel_size = 1;
  EXPECT_TRUE(Validate(o).ok()) << Validate(o).message();
  auto r = Train(o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status().message();
}

}  // namespace
}  // namespace sweep::trainer
