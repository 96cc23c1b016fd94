// The CUDA ReplicaGroup against the CPU one, N optimizer steps from the same weights on the same
// batches: one GPU against the CPU reference (exact fp32 GEMMs: 1e-4 normalised error in the
// final weights, summation order only; TF32: 2e-2; bf16: 5e-2; fp16: 2e-2, the bounds an input
// rounding per GEMM allows after a few steps; against the CPU's own bf16 / fp16, which rounds
// the same inputs, 1e-2 and 5e-3), two GPUs against one (exact fp32: 1e-5; NCCL's
// sum order), fp16's loss scaling skipping a step whose scaled gradients overflow, and Train()
// on the GPU end to end. Every comparison prints its figures. Skipped without a CUDA device
// (the two-GPU test without two); ctest label `gpu`. The same file also runs on every machine
// against the emulator (cuda_emu/: two emulated GPUs, NCCL between threads), as `emu.` tests.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend.h"
#include "cpu/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/net_layout.h"
#include "data.h"
#include "group_util.h"
#include "gtest/gtest.h"
#include "model.h"
#include "partial_epoch_util.h"
#include "rng.h"
#include "test_util.h"
#include "trainer/trainer.h"

#if defined(SWEEP_CUDA_EMU)
#include "cudnn.h"  // the emulator's, with its test hooks
#endif

namespace sweep::trainer {
namespace {

using testing::BlobOptions;
using testing::TempDir;

using testing::Batches;
using testing::kBatch;
using testing::MakeBatches;
using testing::NormErr;
using testing::RunResult;
using testing::RunSteps;
using testing::Spec;

// A residual stage with batch norm, max pooling, dropout and a hidden layer, on 1 x 4 x 6 images
// (the blobs' 24 features).
Result<ModelSpec> ResidualCnn() {
  TrainOptions o;
  o.model = "cnn";
  o.channels = {4};
  o.residual = true;
  o.hidden = {8};
  o.dropout = 0.2;
  return BuildModel(o, TensorShape{1, 4, 6}, testing::kClasses);
}

class CudaGroup : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> devices = cuda::DeviceCount();
    if (!devices.ok()) GTEST_SKIP() << devices.status().message();
    devices_ = *devices;
  }

  // The same steps on the CPU backend: in fp32, or in spec's precision (the CPU's emulation of
  // 16-bit GEMM inputs) when same_precision.
  static RunResult Reference(GroupSpec spec, int steps, int accum, const Batches& data,
                             bool same_precision = false) {
    if (!same_precision) spec.precision = Precision::kFp32;
    spec.devices.clear();
    Result<std::unique_ptr<ReplicaGroup>> g = cpu::GetBackend()->CreateGroup(spec);
    EXPECT_TRUE(g.ok());
    return RunSteps(g->get(), spec, steps, accum, data);
  }

  static RunResult OnGpu(const GroupSpec& spec, int steps, int accum, const Batches& data) {
    Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
    EXPECT_TRUE(g.ok()) << g.status().message();
    if (!g.ok()) return {};
    return RunSteps(g->get(), spec, steps, accum, data);
  }

  static void Compare(const char* what, const RunResult& gpu, const RunResult& ref, double bound) {
    ASSERT_EQ(gpu.losses.size(), ref.losses.size()) << what;
    ASSERT_EQ(gpu.state.params.size(), ref.state.params.size()) << what;
    const double err = NormErr(gpu.state.params, ref.state.params);
    double worst_loss = 0;
    for (size_t s = 0; s < ref.losses.size(); ++s) {
      worst_loss = std::max(worst_loss, std::abs(gpu.losses[s] - ref.losses[s]) / ref.losses[s]);
    }
    std::printf("  %-40s weights %.3g, worst step loss %.3g (bound %.3g); last loss %.6f vs %.6f\n",
                what, err, worst_loss, bound, gpu.losses.back(), ref.losses.back());
    EXPECT_LT(err, bound) << what;
    EXPECT_LT(worst_loss, bound) << what;
    for (size_t b = 0; b < ref.state.optimizer.size(); ++b) {
      EXPECT_LT(NormErr(gpu.state.optimizer[b], ref.state.optimizer[b]), bound * 10)
          << what << " optimizer buffer " << b;
    }
  }

  // Trains `o` with the training set held on the GPU, then streamed from the host
  // (dataset_on_gpu = false), and expects the same train_loss, val_loss and val_acc every
  // epoch, bit for bit: the held set's validation rows are gathered and transformed on the
  // device, the streamed set's on the host.
  static void ExpectHeldTrainsAsStreamed(TrainOptions o, const char* what) {
    std::vector<double> held[3], streamed[3];
    for (std::vector<double>* figures : {held, streamed}) {
      o.dataset_on_gpu = figures == held;
      ASSERT_TRUE(Train(o, [&](const EpochReport& e) {
                    figures[0].push_back(e.train_loss);
                    figures[1].push_back(e.val_loss);
                    figures[2].push_back(e.val_acc);
                    return true;
                  }).ok());
    }
    const char* names[] = {"train_loss", "val_loss", "val_acc"};
    for (int i = 0; i < 3; ++i) {
      std::printf("  %s, %s: %s\n", what, names[i],
                  held[i] == streamed[i] ? "identical" : "DIFFER");
      EXPECT_EQ(held[i], streamed[i]) << names[i];
    }
  }

  int devices_ = 0;
};

TEST_F(CudaGroup, OneGpuMatchesTheCpuReference) {
  const Batches data = MakeBatches(24, 1);
  struct Case {
    const char* name;
    OptimizerSpec::Kind kind;
    float dropout;
    int accum;
  } cases[] = {{"sgd, 24 steps", OptimizerSpec::Kind::kSgd, 0.0f, 1},
               {"adamw + dropout, 24 steps", OptimizerSpec::Kind::kAdamw, 0.2f, 1},
               {"sgd, accum_steps 2, 12 steps", OptimizerSpec::Kind::kSgd, 0.0f, 2}};
  for (const Case& c : cases) {
    GroupSpec spec = Spec(1, c.kind, c.dropout);
    const int steps = 24 / c.accum;
    const RunResult ref = Reference(spec, steps, c.accum, data);
    spec.tf32 = false;
    Compare((std::string("exact fp32, ") + c.name).c_str(), OnGpu(spec, steps, c.accum, data), ref,
            1e-4);
    spec.tf32 = true;
    Compare((std::string("tf32, ") + c.name).c_str(), OnGpu(spec, steps, c.accum, data), ref, 2e-2);
  }
}

// A CNN (cuda/net.h under the group): ResidualCnn with label smoothing, against the CPU group
// from the same weights, batch norm's running statistics included.
TEST_F(CudaGroup, ACnnMatchesTheCpuReference) {
  const Batches data = MakeBatches(24, 1);
  Result<ModelSpec> model = ResidualCnn();
  ASSERT_TRUE(model.ok()) << model.status().message();
  for (OptimizerSpec::Kind kind : {OptimizerSpec::Kind::kSgd, OptimizerSpec::Kind::kAdamw}) {
    for (int accum : {1, 2}) {
      GroupSpec spec = Spec(1, kind, 0.0f);
      spec.model = model.value();
      spec.label_smoothing = 0.1f;
      const int steps = 24 / accum;
      const RunResult ref = Reference(spec, steps, accum, data);
      spec.tf32 = false;
      const RunResult gpu = OnGpu(spec, steps, accum, data);
      const std::string name = std::string("cnn, exact fp32, ") +
                               (kind == OptimizerSpec::Kind::kSgd ? "sgd" : "adamw") +
                               ", accum_steps " + std::to_string(accum);
      // AdamW divides by each gradient's running size: parameters whose gradients are near
      // zero (batch norm's shifts) move by lr whatever their rounding, so its bound is wider.
      const double bound = kind == OptimizerSpec::Kind::kSgd ? 1e-4 : 1e-3;
      Compare(name.c_str(), gpu, ref, bound);
      ASSERT_EQ(gpu.state.stats.size(), ref.state.stats.size());
      EXPECT_LT(NormErr(gpu.state.stats, ref.state.stats), bound) << name << ": running statistics";
    }
  }
  // fp16 (its loss scaling too) against the CPU's emulation of it, which keeps convolutions'
  // outputs in fp32: 4 steps (at lr 0.05 through batch norm the two drift apart by about 1% a
  // step after that, 2% by step 12).
  {
    GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
    spec.model = model.value();
    spec.precision = Precision::kFp16;
    const RunResult ref = Reference(spec, 4, 1, data, /*same_precision=*/true);
    Compare("cnn, fp16 against the CPU's fp16, sgd", OnGpu(spec, 4, 1, data), ref, 2e-2);
  }
}

// The same CNN on two GPUs against the CPU group with two replicas, from the same weights: each
// replica normalizes its own half of the batch and keeps running statistics of its own; rank
// 0's are the model's, and every rank evaluates with them, so both give the same figures for
// the same rows.
TEST_F(CudaGroup, TwoGpusTrainACnnAsTwoCpuReplicasDo) {
  if (devices_ < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << devices_;
  const Batches data = MakeBatches(24, 1);
  Result<ModelSpec> model = ResidualCnn();
  ASSERT_TRUE(model.ok()) << model.status().message();
  for (int accum : {1, 2}) {
    GroupSpec spec = Spec(2, OptimizerSpec::Kind::kSgd, 0.0f);
    spec.model = model.value();
    spec.label_smoothing = 0.1f;
    spec.tf32 = false;
    spec.devices = {0, 1};
    spec.bucket_floats = 1;  // a bucket per layer: all-reduces overlap backward
    const int steps = 24 / accum;
    Result<std::unique_ptr<ReplicaGroup>> cpu = cpu::GetBackend()->CreateGroup([&] {
      GroupSpec c = spec;
      c.devices.clear();
      return c;
    }());
    Result<std::unique_ptr<ReplicaGroup>> gpu = cuda::GetBackend()->CreateGroup(spec);
    ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status().message();
    const RunResult ref = RunSteps(cpu->get(), spec, steps, accum, data);
    const RunResult two = RunSteps(gpu->get(), spec, steps, accum, data);
    const std::string name =
        "cnn on 2 GPUs vs 2 CPU replicas, accum_steps " + std::to_string(accum);
    Compare(name.c_str(), two, ref, 1e-4);
    ASSERT_EQ(two.state.stats.size(), ref.state.stats.size());
    EXPECT_LT(NormErr(two.state.stats, ref.state.stats), 1e-4) << name << ": running statistics";
    // Both ranks evaluate the first batch; so does the CPU group.
    double loss[2][2] = {};
    int64_t correct[2][2] = {};
    for (int side = 0; side < 2; ++side) {
      ReplicaGroup* g = side == 0 ? gpu->get() : cpu->get();
      g->Run([&](int rank) {
        g->Evaluate(rank, data.x.data(), data.y.data(), testing::kBatch, &loss[side][rank],
                    &correct[side][rank]);
      });
    }
    std::printf("  evaluation: GPU ranks %.6f %.6f (correct %lld %lld), CPU %.6f\n", loss[0][0],
                loss[0][1], static_cast<long long>(correct[0][0]),
                static_cast<long long>(correct[0][1]), loss[1][0]);
    EXPECT_EQ(loss[0][0], loss[0][1]);
    EXPECT_EQ(correct[0][0], correct[0][1]);
    EXPECT_EQ(correct[0][0], correct[1][0]);
    EXPECT_NEAR(loss[0][0], loss[1][0], 1e-4 * loss[1][0]);
  }
}

TEST_F(CudaGroup, HalfPrecisionStaysCloseToTheCpuReference) {
  const Batches data = MakeBatches(12, 2);
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  const RunResult ref = Reference(spec, 12, 1, data);
  spec.precision = Precision::kBf16;
  const RunResult bf16 = OnGpu(spec, 12, 1, data);
  Compare("bf16 GEMM inputs, 12 steps", bf16, ref, 5e-2);
  // Against the CPU's bf16 (the same rounded inputs): only summation order differs, and the
  // roundings it flips.
  const RunResult cpu_bf16 = Reference(spec, 12, 1, data, true);
  Compare("bf16 vs the CPU's bf16, 12 steps", bf16, cpu_bf16, 1e-2);
  spec.precision = Precision::kFp16;
  const RunResult fp16 = OnGpu(spec, 12, 1, data);
  Compare("fp16 GEMM inputs, loss scale 65536, 12 steps", fp16, ref, 2e-2);
  const RunResult cpu_fp16 = Reference(spec, 12, 1, data, true);
  Compare("fp16 vs the CPU's fp16, 12 steps", fp16, cpu_fp16, 5e-3);
  // The bounds above hold even for a GPU that rounded nothing (the CPU's bf16 is ~5e-4 from
  // fp32): the GPU must also be nearer the CPU's emulation than that emulation is to fp32.
  for (const auto& [name, gpu, cpu] :
       {std::tuple("bf16", &bf16, &cpu_bf16), std::tuple("fp16", &fp16, &cpu_fp16)}) {
    const double to_cpu = NormErr(gpu->state.params, cpu->state.params);
    const double rounding = NormErr(cpu->state.params, ref.state.params);
    std::printf("  %s: GPU to the CPU's emulation %.3g, emulation to fp32 %.3g\n", name, to_cpu,
                rounding);
    EXPECT_LT(to_cpu, 0.5 * rounding) << name;
  }
  std::printf("  fp16 skipped steps: %lld (expected 0)\n", static_cast<long long>(fp16.skipped));
  EXPECT_EQ(fp16.skipped, 0);
}

// An injected overflow: a loss scale of 2^40 makes the scaled logit gradients (about 2^40 / 32)
// inf once cast to fp16, so the first step must be skipped, leaving the weights as they were,
// and the scale halves every step until the gradients fit (below about 2^21), then training
// goes on.
TEST_F(CudaGroup, Fp16SkipsStepsWhoseGradientsOverflow) {
  const Batches data = MakeBatches(40, 3);
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.precision = Precision::kFp16;
  spec.initial_loss_scale = std::ldexp(1.0f, 40);
  ModelState init;
  init.params.resize(static_cast<size_t>(spec.model.num_params));
  InitParams(spec.model, 11, init.params.data(), nullptr);

  Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const RunResult one = RunSteps(g->get(), spec, 1, 1, data);
  std::printf("  after 1 step at scale 2^40: skipped %lld (expected 1), loss %.6f, weights %s\n",
              static_cast<long long>(one.skipped), one.losses.empty() ? -1.0 : one.losses[0],
              one.state.params == init.params ? "unchanged" : "CHANGED");
  EXPECT_EQ(one.skipped, 1);
  EXPECT_EQ(one.state.params, init.params);
  ASSERT_EQ(one.losses.size(), 1u);
  EXPECT_TRUE(std::isfinite(one.losses[0]));  // the loss itself is not scaled

  Result<std::unique_ptr<ReplicaGroup>> g2 = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_TRUE(g2.ok()) << g2.status().message();
  const RunResult many = RunSteps(g2->get(), spec, 40, 1, data);
  std::printf(
      "  after 40 steps from scale 2^40: skipped %lld (expected 17 to 22), last loss %.6f\n",
      static_cast<long long>(many.skipped), many.losses.back());
  EXPECT_GE(many.skipped, 17);
  EXPECT_LE(many.skipped, 22);
  EXPECT_NE(many.state.params, init.params);
  EXPECT_LT(many.losses.back(), many.losses.front());
}

TEST_F(CudaGroup, TwoGpusMatchOne) {
  if (devices_ < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << devices_;
  const Batches data = MakeBatches(24, 4);
  for (const int64_t bucket_floats : {int64_t{1}, int64_t{1} << 20}) {
    for (const OptimizerSpec::Kind kind :
         {OptimizerSpec::Kind::kSgd, OptimizerSpec::Kind::kAdamw}) {
      GroupSpec one = Spec(1, kind, 0.1f);
      one.tf32 = false;
      const RunResult ref = OnGpu(one, 12, 2, data);
      GroupSpec two = one;
      two.replicas = 2;
      two.devices = {0, 1};
      two.bucket_floats = bucket_floats;
      const std::string what = std::string("2 GPUs vs 1, ") +
                               (kind == OptimizerSpec::Kind::kSgd ? "sgd" : "adamw") +
                               (bucket_floats == 1 ? ", a bucket per layer" : ", one bucket");
      Compare(what.c_str(), OnGpu(two, 12, 2, data), ref, 1e-5);
    }
  }
}

// A step replayed from a CUDA graph does what the launched step does, bit for bit: weights,
// optimizer state, losses, running statistics and fp16's skipped steps, with a learning rate
// that changes every step, dropout, gradient accumulation, an fp16 loss scale that overflows at
// first, a CNN, and two GPUs. Graphs are captured after two launches of each kind of
// micro-batch, so most of the 24 steps replay one.
TEST_F(CudaGroup, AStepReplayedFromACudaGraphIsTheLaunchedStep) {
  const Batches data = MakeBatches(24, 5);
  Result<ModelSpec> cnn = ResidualCnn();
  ASSERT_TRUE(cnn.ok()) << cnn.status().message();
  struct Case {
    const char* name;
    OptimizerSpec::Kind kind;
    float dropout;
    int accum;
    Precision precision;
    bool cnn;
    int replicas;
  } cases[] = {
      {"mlp, sgd + dropout", OptimizerSpec::Kind::kSgd, 0.2f, 1, Precision::kFp32, false, 1},
      {"mlp, adamw, accum_steps 2", OptimizerSpec::Kind::kAdamw, 0.0f, 2, Precision::kFp32, false,
       1},
      {"mlp, fp16 from scale 2^40", OptimizerSpec::Kind::kAdamw, 0.1f, 1, Precision::kFp16, false,
       1},
      {"cnn, sgd", OptimizerSpec::Kind::kSgd, 0.0f, 1, Precision::kFp32, true, 1},
      {"cnn, bf16, adamw, accum_steps 2", OptimizerSpec::Kind::kAdamw, 0.0f, 2, Precision::kBf16,
       true, 1},
      {"mlp on 2 GPUs, sgd + dropout", OptimizerSpec::Kind::kSgd, 0.2f, 1, Precision::kFp32, false,
       2},
      {"cnn on 2 GPUs, adamw", OptimizerSpec::Kind::kAdamw, 0.0f, 1, Precision::kFp32, true, 2},
  };
  for (const Case& c : cases) {
    if (c.replicas > devices_) continue;
    GroupSpec spec = Spec(c.replicas, c.kind, c.dropout);
    if (c.cnn) spec.model = cnn.value();
    spec.precision = c.precision;
    if (c.precision == Precision::kFp16) spec.initial_loss_scale = std::ldexp(1.0f, 40);
    if (c.replicas > 1) {
      spec.devices = {0, 1};
      spec.bucket_floats = 1;  // a bucket per layer: the all-reduces overlap backward in the graph
    }
    const int steps = 24 / c.accum;
    RunResult out[2];
    int64_t replayed[2] = {0, 0};
    for (int graphs = 0; graphs < 2; ++graphs) {
      spec.cuda_graphs = graphs == 1;
      Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
      ASSERT_TRUE(g.ok()) << c.name << ": " << g.status().message();
      out[graphs] = RunSteps(g->get(), spec, steps, c.accum, data, 0, 1, nullptr,
                             /*decaying_lr=*/true);
      replayed[graphs] = (*g)->TakeGraphLaunches();
    }
    std::printf("  %-34s micro-batches replayed %lld of %d, skipped %lld; %s\n", c.name,
                static_cast<long long>(replayed[1]), steps * c.accum,
                static_cast<long long>(out[1].skipped),
                out[1].state.params == out[0].state.params ? "same weights" : "OTHER WEIGHTS");
    EXPECT_EQ(replayed[0], 0) << c.name;
    EXPECT_GE(replayed[1], steps * c.accum - 4 * c.accum - 1) << c.name;
    EXPECT_EQ(out[1].losses, out[0].losses) << c.name;
    EXPECT_EQ(out[1].state.params, out[0].state.params) << c.name;
    EXPECT_EQ(out[1].state.optimizer, out[0].state.optimizer) << c.name;
    EXPECT_EQ(out[1].state.stats, out[0].state.stats) << c.name;
    EXPECT_EQ(out[1].skipped, out[0].skipped) << c.name;
    if (c.precision == Precision::kFp16) {
      EXPECT_GT(out[1].skipped, 2) << c.name;
    }
  }
}

// A group that holds the training set gathers on the device what the host gathers: the same
// steps fed as row numbers end with the same bits as when fed as arrays, for a uint8 set (scaled
// by 1/255 on both sides) and a float one.
TEST_F(CudaGroup, HeldDatasetGathersWhatTheHostGathers) {
  constexpr int kRows = 300, kSteps = 10;
  Rng rng(7);
  std::vector<uint8_t> pixels(static_cast<size_t>(kRows) * testing::kInputs);
  std::vector<float> values(pixels.size());
  std::vector<int32_t> labels(kRows);
  for (size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<uint8_t>(rng.Below(256));
    values[i] = static_cast<float>(rng.Uniform() * 2 - 1);
  }
  for (int32_t& l : labels) l = static_cast<int32_t>(rng.Below(testing::kClasses));
  Dataset meta;
  meta.source = "generated";
  meta.n = kRows;
  meta.dim = testing::kInputs;
  meta.num_classes = testing::kClasses;
  meta.shape = {testing::kInputs};
  const DatasetPtr sets[] = {MakeDataset(meta, pixels, {}, labels),
                             MakeDataset(meta, {}, values, labels)};
  Batches rows;
  for (int i = 0; i < kSteps * kBatch; ++i)
    rows.idx.push_back(static_cast<int32_t>(rng.Below(kRows)));
  for (const DatasetPtr& set : sets) {
    const char* kind = set->u8.empty() ? "f32 set" : "u8 set";
    Batches arrays;
    arrays.x.resize(rows.idx.size() * testing::kInputs);
    arrays.y.resize(rows.idx.size());
    set->Gather(rows.idx.data(), static_cast<int64_t>(rows.idx.size()), arrays.x.data(),
                arrays.y.data());
    const GroupSpec spec = Spec(1, OptimizerSpec::Kind::kAdamw, 0.1f);
    const RunResult fed = OnGpu(spec, kSteps, 1, arrays);
    Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
    ASSERT_TRUE(g.ok()) << g.status().message();
    Result<bool> held = (*g)->HoldDataset(*set, nullptr);
    ASSERT_TRUE(held.ok()) << held.status().message();
    ASSERT_TRUE(*held) << kind << ": a 300-row set should fit";
    const RunResult gathered = RunSteps(g->get(), spec, kSteps, 1, rows);
    std::printf(
        "  %s: %d steps fed as arrays and as row numbers: weights %s, last loss %.6f vs "
        "%.6f\n",
        kind, kSteps, gathered.state.params == fed.state.params ? "identical" : "DIFFER",
        gathered.losses.back(), fed.losses.back());
    EXPECT_EQ(gathered.losses, fed.losses) << kind;
    EXPECT_EQ(gathered.state.params, fed.state.params) << kind;
    // Evaluated from row numbers on the device, and from the host's arrays in the same chunks
    // (the last one partial): the same sums. A row outside the set is refused.
    const int64_t n = 2 * spec.max_rows + 3;
    double held_loss = 0, fed_loss = 0;
    int64_t held_right = 0, fed_right = 0;
    ReplicaGroup* group = g->get();
    group->Run([&](int rank) {
      group->EvaluateHeld(rank, rows.idx.data(), n, spec.max_rows, &held_loss, &held_right);
      for (int64_t at = 0; at < n; at += spec.max_rows) {
        const int b = static_cast<int>(std::min<int64_t>(spec.max_rows, n - at));
        group->Evaluate(rank, arrays.x.data() + at * testing::kInputs, arrays.y.data() + at, b,
                        &fed_loss, &fed_right);
      }
    });
    std::printf("  %s: %lld rows evaluated held and fed: loss %.9g vs %.9g, correct %lld vs %lld\n",
                kind, static_cast<long long>(n), held_loss, fed_loss,
                static_cast<long long>(held_right), static_cast<long long>(fed_right));
    EXPECT_EQ(held_loss, fed_loss) << kind;
    EXPECT_EQ(held_right, fed_right) << kind;
    // So is a chunk larger than the input slot.
    auto refusal = [&](const int32_t* list, int64_t count, int chunk) {
      try {
        group->Run([&](int rank) {
          group->EvaluateHeld(rank, list, count, chunk, &held_loss, &held_right);
        });
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
      return std::string("not refused");
    };
    const int32_t outside[] = {0, kRows};
    const std::string row = refusal(outside, 2, spec.max_rows);
    EXPECT_NE(row.find("row 300 to evaluate is outside the held set of 300 rows"),
              std::string::npos)
        << row;
    const std::string wide = refusal(rows.idx.data(), n, spec.max_rows + 1);
    EXPECT_NE(wide.find("evaluation chunks of 33 rows; the group was made for at most 32"),
              std::string::npos)
        << wide;
    if (!set->u8.empty()) {
      // Streamed as the set's pixels, scaled on the device: the same floats as the host's.
      Batches raw;
      raw.pixels.resize(rows.idx.size() * testing::kInputs);
      raw.y.resize(rows.idx.size());
      set->GatherPixels(rows.idx.data(), static_cast<int64_t>(rows.idx.size()), raw.pixels.data(),
                        raw.y.data());
      const RunResult scaled = OnGpu(spec, kSteps, 1, raw);
      std::printf("  %s: %d steps fed as arrays and as pixels: weights %s\n", kind, kSteps,
                  scaled.state.params == fed.state.params ? "identical" : "DIFFER");
      EXPECT_EQ(scaled.losses, fed.losses) << kind;
      EXPECT_EQ(scaled.state.params, fed.state.params) << kind;
    }
  }
}

// Train() end to end on the GPU: it learns, reports what it measured, and with bf16/fp16 too.
TEST_F(CudaGroup, TrainLearnsOnTheGpu) {
  TempDir dir;
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    TrainOptions o = BlobOptions(dir);
    o.backend = "cuda";
    o.precision = precision;
    std::vector<EpochReport> reports;
    auto r = Train(o, [&](const EpochReport& e) {
      reports.push_back(e);
      return true;
    });
    ASSERT_TRUE(r.ok()) << precision << ": " << r.status().message();
    ASSERT_EQ(reports.size(), 4u);
    const EpochReport& last = reports.back();
    std::printf(
        "  %s: val_acc %.4f, train_loss %.4f -> %.4f, %.0f samples/s, data_wait %.4f s "
        "of %.4f s, skipped %lld, test_acc %.4f\n",
        precision, last.val_acc, reports.front().train_loss, last.train_loss, last.samples_per_s,
        last.data_wait_s, last.epoch_s, static_cast<long long>(last.skipped_steps),
        r->test_acc.value_or(-1));
    EXPECT_GE(last.val_acc, 0.99) << precision;
    EXPECT_LT(last.train_loss, reports.front().train_loss) << precision;
    EXPECT_EQ(last.skipped_steps, 0) << precision;
    // The host's waits for input fall inside the epoch. No share of it is a bound: a copy waits
    // for its input slot, so the wait includes the GPU computing an earlier micro-batch.
    for (const EpochReport& e : reports) {
      EXPECT_GE(e.data_wait_s, 0) << precision;
      EXPECT_LT(e.data_wait_s, e.epoch_s) << precision;
    }
  }
  // A CNN on the GPU, end to end, against the same training on the CPU: normalized 6 x 6 images
  // with flips (batches come from the host as floats). TF32 on the GPU: within 0.05 (two of the
  // validation set's 40 samples). Then on two GPUs against two CPU replicas.
  for (int replicas = 1; replicas <= std::min(devices_, 2); ++replicas) {
    TrainOptions o = testing::BlobCnnOptions(dir);
    o.augment_flip = true;
    o.epochs = 8;
    o.replicas = replicas;
    double val[2] = {0, 0}, first_loss = 0, last_loss = 0;
    for (int gpu = 0; gpu < 2; ++gpu) {
      o.backend = gpu ? "cuda" : "cpu";
      std::vector<EpochReport> reports;
      auto r = Train(o, [&](const EpochReport& e) {
        reports.push_back(e);
        return true;
      });
      ASSERT_TRUE(r.ok()) << o.backend << " cnn: " << r.status().message();
      ASSERT_FALSE(reports.empty());
      val[gpu] = reports.back().val_acc;
      first_loss = reports.front().train_loss;
      last_loss = reports.back().train_loss;
    }
    std::printf(
        "  cnn, %d replica(s): val_acc %.4f on the GPU, %.4f on the CPU; train_loss %.4f -> "
        "%.4f\n",
        replicas, val[1], val[0], first_loss, last_loss);
    EXPECT_NEAR(val[1], val[0], 0.05) << replicas << " replica(s)";
    EXPECT_LT(last_loss, first_loss) << replicas << " replica(s)";
  }
  // A CNN's training set held on the GPU, normalized, cropped, flipped and erased there, trains
  // as the same set transformed on the host and streamed: the same draws, the same bits.
  {
    TrainOptions o = testing::BlobCnnOptions(dir);
    o.backend = "cuda";
    o.augment_crop = 1;
    o.augment_flip = true;
    o.random_erasing = 0.5;
    ExpectHeldTrainsAsStreamed(o, "cnn per epoch, transformed on the GPU vs on the host");
  }
  // The training set held on the GPU (the default) and batches streamed from pinned host memory
  // train the same: the same rows reach the same kernels.
  {
    TrainOptions o = BlobOptions(dir);
    o.backend = "cuda";
    ExpectHeldTrainsAsStreamed(o, "per epoch, set on the GPU vs streamed");
  }
  if (devices_ >= 2) {
    TrainOptions o = BlobOptions(dir);
    o.backend = "cuda";
    o.replicas = 2;
    o.devices = {1, 0};
    std::vector<EpochReport> reports;
    auto r = Train(o, [&](const EpochReport& e) {
      reports.push_back(e);
      return true;
    });
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_FALSE(reports.empty());
    std::printf("  2 GPUs (devices 1, 0): val_acc %.4f, allreduce_s %.6f of %.4f s\n",
                reports.back().val_acc, reports.back().allreduce_s, reports.back().epoch_s);
    EXPECT_GE(reports.back().val_acc, 0.99);
    for (const EpochReport& e : reports) {
      // The steps' exposed all-reduce spans are disjoint, each inside the epoch.
      EXPECT_LT(e.allreduce_s, e.epoch_s) << "epoch " << e.epoch;
#if !defined(SWEEP_CUDA_EMU)
      // On a GPU, comm_done follows the last bucket's and the loss's all-reduces, which start
      // when compute reaches backward's end: every step leaves some exposed. The emulator runs
      // streams when the host waits, in any order (greedy-reverse: comm first), so not there.
      EXPECT_GT(e.allreduce_s, 0.0) << "epoch " << e.epoch;
#endif
    }
  }
}

// Stopped within epochs and resumed, a run on the GPU ends as the run straight through does,
// bit for bit: a held CNN set (rows gathered, cropped and flipped on the device from the
// stopped step on), an fp16 MLP fed from the host (the loss scale in the checkpoint), and on
// two GPUs a held fp16 CNN of two micro-batches a step (replicas stop after the same step),
// each with steps replayed from CUDA graphs after every resume.
TEST_F(CudaGroup, AStopWithinAnEpochResumesAsIfNeverStopped) {
  {
    SCOPED_TRACE("cnn, held");
    TempDir dir;
    TrainOptions o = testing::BlobCnnOptions(dir);
    o.backend = "cuda";
    o.batch_norm = true;
    o.augment_crop = 1;
    o.augment_flip = true;
    o.batch_size = 16;  // 22 steps an epoch, as the stops expect
    o.epochs = 3;
    testing::ExpectStopsWithinEpochsChangeNothing(o, dir);
    // And with checkpoints every 5 steps between the stops: the queue drained at each.
    o.checkpoint_every_steps = 5;
    testing::ExpectStopsWithinEpochsChangeNothing(o, dir);
  }
  {
    SCOPED_TRACE("mlp, fp16, batches from the host");
    TempDir dir;
    TrainOptions o = BlobOptions(dir);
    o.backend = "cuda";
    o.precision = "fp16";
    o.dataset_on_gpu = false;
    o.dropout = 0.2;
    testing::ExpectStopsWithinEpochsChangeNothing(o, dir);
  }
  if (devices_ >= 2) {
    SCOPED_TRACE("cnn, fp16, held, 2 GPUs");
    TempDir dir;
    TrainOptions o = testing::BlobCnnOptions(dir);
    o.backend = "cuda";
    o.replicas = 2;
    o.precision = "fp16";
    o.batch_norm = true;
    o.augment_crop = 1;
    o.augment_flip = true;
    o.batch_size = 8;
    o.accum_steps = 2;  // 22 steps an epoch
    o.epochs = 3;
    testing::ExpectStopsWithinEpochsChangeNothing(o, dir);
  }
}

// The errors a user can cause name what is wrong.
TEST_F(CudaGroup, RefusesDevicesItDoesNotHave) {
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.devices = {devices_};
  const Status s = cuda::GetBackend()->Supports(spec);
  std::printf("  devices = [%d]: %s\n", devices_, s.message().c_str());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("device " + std::to_string(devices_) + " is not present"),
            std::string::npos);
}

// NCCL takes one rank per GPU: the same GPU twice is refused before any communicator is made.
TEST_F(CudaGroup, RefusesADeviceListedTwice) {
  if (devices_ < 1) GTEST_SKIP() << "no GPU";
  GroupSpec spec = Spec(2, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.devices = {0, 0};
  Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(g.status().message(),
            "cuda: device 0 is listed twice; each replica needs a GPU of its own");
}

// A model whose weights, gradients and optimizer state alone exceed the GPU's free memory is
// refused in words, naming the GPU and what it needs, before anything is allocated; one that
// fits is made.
TEST_F(CudaGroup, RefusesAModelLargerThanTheGpu) {
  if (devices_ < 1) GTEST_SKIP() << "no GPU";
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kAdamw, 0.0f);
  // 4 x 10^10 parameters, 640 GB in fp32 with AdamW's two buffers: more than any GPU holds.
  spec.model =
      ModelSpec::Mlp(testing::kInputs, {200000, 200000}, testing::kClasses, Activation::kGelu);
  Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_FALSE(g.ok());
  std::printf("  hidden [200000, 200000]: %s\n", g.status().message().c_str());
  EXPECT_EQ(g.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(g.status().message().find("cuda: the model does not fit in GPU 0's memory: " +
                                      std::to_string(spec.model.num_params) + " parameters"),
            std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("make hidden smaller"), std::string::npos);
  spec.model = ModelSpec::Mlp(testing::kInputs, {40, 24}, testing::kClasses, Activation::kGelu);
  EXPECT_TRUE(cuda::GetBackend()->CreateGroup(spec).ok());
}

// A CNN whose weights are small and whose activations for the batch cannot fit is refused
// before anything is allocated, counting the buffers the net would allocate (cuda/net_layout.h),
// and names the batch and the channels as what to make smaller.
TEST_F(CudaGroup, RefusesACnnWhoseActivationsExceedTheGpuNamingBatchAndChannels) {
  TrainOptions o;
  o.model = "cnn";
  o.channels = {4096};
  o.convs_per_stage = 1;
  o.hidden = {};
  Result<ModelSpec> cnn = BuildModel(o, TensorShape{1, 28, 28}, 10);
  ASSERT_TRUE(cnn.ok()) << cnn.status().message();
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.model = *cnn;
  spec.precision = Precision::kBf16;
  // 28 x 28 x 4096 floats a layer's output, for 50,000 rows: terabytes, on any GPU.
  spec.max_rows = 50000;
  Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_FALSE(g.ok());
  const std::string& m = g.status().message();
  std::printf("  channels [4096], 50000 rows: %s\n", m.c_str());
  EXPECT_EQ(g.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(m.find("cuda: the model does not fit in GPU 0's memory"), std::string::npos) << m;
  EXPECT_NE(m.find("activations for 50000 rows"), std::string::npos) << m;
  EXPECT_NE(m.find("make batch_size or channels smaller"), std::string::npos) << m;
  // The layout's bytes, to the 0.1 GiB printed: in bf16 at least the convolution's 16-bit
  // output, which the batch norm after it reads (its fp32 output is never written).
  const double gib = 1073741824.0;
  const size_t at = m.find(" GiB of activations");
  ASSERT_NE(at, std::string::npos) << m;
  const size_t from = m.rfind(' ', at - 1) + 1;
  const double printed = std::stod(m.substr(from, at - from));
  const double layout =
      cuda::NetLayout::Make(spec.model, spec.max_rows, spec.precision, {}).ActivationBytes() / gib;
  EXPECT_NEAR(printed, layout, 0.051) << m;
  const double conv16 = 2.0 * 50000 * static_cast<double>(spec.model.layer(0).out_shape.size());
  EXPECT_GT(printed, conv16 / gib) << m;
}

#if !defined(SWEEP_CUDA_EMU)
// A CNN trained three epochs on 20,000 Fashion-MNIST images (SWEEP_FASHION_MNIST, or Debian's
// folder) reaches the CPU's test accuracy within 0.005 (50 of the 10,000 test images), in fp32
// (TF32) and bf16, the set held on the GPU and augmented there. A seed gives both backends the
// same initial weights, sample order and augmentation, but rounding moves one run's accuracy by
// about 0.005, so the mean of five seeds is compared. Too slow for the emulator: a real GPU
// only. The CPU's runs take a core each, beside the GPU's (three took 28 s on 2 cores); with
// 60,000 images one after the other they did not end within four minutes on a GPU machine.
TEST(CudaFashionMnist, ACnnReachesTheCpusTestAccuracy) {
  if (!cuda::DeviceCount().ok()) GTEST_SKIP() << "no GPU";
  const char* env = std::getenv("SWEEP_FASHION_MNIST");
  const std::string data = env != nullptr ? env : "/usr/share/datasets/fashion-mnist";
  TrainOptions o;
  if (!ApplyOption(&o, "dataset", data).ok()) GTEST_SKIP() << "no Fashion-MNIST in " << data;
  o.model = "cnn";
  o.channels = {16, 32};
  o.hidden = {64};
  o.batch_size = 128;
  o.epochs = 3;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 5e-4;
  o.lr_schedule = "cosine";
  o.augment_crop = 2;
  o.augment_flip = true;
  o.validation_fraction = 0;
  o.max_train_samples = 20000;
  o.threads = 1;
  constexpr int kSeeds = 5;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // [run][seed]: run 0 the CPU, 1 the GPU in fp32 (TF32), 2 in bf16.
  const char* names[3] = {"cpu", "cuda fp32 (TF32)", "cuda bf16"};
  std::optional<Result<TrainResult>> results[3][kSeeds];
  auto train = [&](int run, int seed) {
    TrainOptions mine = o;
    mine.backend = run == 0 ? "cpu" : "cuda";
    mine.precision = run == 2 ? "bf16" : "fp32";
    mine.seed = static_cast<uint64_t>(seed + 1);
    results[run][seed] = Train(mine, nullptr);
    const Result<TrainResult>& r = *results[run][seed];
    std::printf("  %s, seed %d: %s %.4f after %.0f s\n", names[run], seed + 1,
                r.ok() && r->test_acc.has_value() ? "test_acc" : "failed",
                r.ok() && r->test_acc.has_value() ? *r->test_acc : 0.0, seconds());
    std::fflush(stdout);
  };
  {
    std::vector<std::jthread> cpu;  // joined at the block's end, however it is left
    for (int seed = 0; seed < kSeeds; ++seed) cpu.emplace_back(train, 0, seed);
    for (int run = 1; run < 3; ++run) {
      for (int seed = 0; seed < kSeeds; ++seed) train(run, seed);
    }
  }
  double acc[3] = {0, 0, 0};  // the mean over the seeds
  for (int run = 0; run < 3; ++run) {
    for (int seed = 0; seed < kSeeds; ++seed) {
      const Result<TrainResult>& r = *results[run][seed];
      ASSERT_TRUE(r.ok()) << names[run] << ", seed " << seed + 1 << ": " << r.status().message();
      ASSERT_TRUE(r->test_acc.has_value()) << names[run];
      acc[run] += *r->test_acc / kSeeds;
    }
  }
  std::printf("  mean test_acc: cpu %.4f, cuda fp32 %.4f, cuda bf16 %.4f\n", acc[0], acc[1],
              acc[2]);
  EXPECT_GT(acc[0], 0.83);  // it learnt (0.866 on 2 cores)
  EXPECT_NEAR(acc[1], acc[0], 0.005);
  EXPECT_NEAR(acc[2], acc[0], 0.005);
}
#endif

#if defined(SWEEP_CUDA_EMU)
// After a group's first steps, its first convolution (one input channel): with cudnn_autotune
// our direct kernels timed against cuDNN's, the faster kept, both times printed; else untimed.
void ExpectFirstConvolutionTimed(ReplicaGroup* group, bool timed) {
  const std::string after = group->Describe();
  const std::string first = after.substr(0, after.find('\n'));
  EXPECT_EQ(first.find("(timed: cuDNN ") != std::string::npos, timed) << after;
  if (timed) std::printf("after the first step: %s\n", first.c_str());
}

// cudnn_autotune: each convolution's plans are the fastest of cuDNN's first candidates, and each
// batch norm the faster of cuDNN's and ours, timed on the device (the group says so). With TF32
// on there are two to time, tensor cores and exact fp32, and which wins is the host's timing. So a
// CNN trained with autotuned plans must end within TF32's rounding of one trained with the plans
// the heuristics rank first (TF32), as measured by a run with exact fp32 alone: within three times
// that distance, plus 1e-3.
TEST_F(CudaGroup, AutotunedConvolutionsTrainAsTheFirstRankedDo) {
  Result<ModelSpec> cnn = ResidualCnn();
  ASSERT_TRUE(cnn.ok()) << cnn.status().message();
  const Batches data = MakeBatches(8, 3);
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.model = cnn.value();
  // 0: the first-ranked plans, with TF32; 1: autotuned, with TF32; 2: exact fp32.
  RunResult out[3];
  for (int run = 0; run < 3; ++run) {
    spec.tf32 = run < 2;
    spec.cudnn_autotune = run == 1;
    Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
    ASSERT_TRUE(g.ok()) << g.status().message();
    const std::string plans = (*g)->Describe();
    EXPECT_NE(plans.find("convolution"), std::string::npos) << plans;
    EXPECT_EQ(plans.find("timed") != std::string::npos, run == 1) << plans;
    // Batch norm too: cuDNN's against ours, the faster kept.
    EXPECT_EQ(plans.find("batch norm: ") != std::string::npos, true) << plans;
    EXPECT_EQ(plans.find("(timed: cuDNN ") != std::string::npos, run == 1) << plans;
    if (run == 1) std::printf("%s", plans.c_str());
    out[run] = RunSteps(g->get(), spec, 8, 1, data);
    ExpectFirstConvolutionTimed(g->get(), run == 1);
  }
  ASSERT_EQ(out[1].losses.size(), out[0].losses.size());
  ASSERT_EQ(out[2].losses.size(), out[0].losses.size());
  for (size_t i = 0; i < out[0].losses.size(); ++i) {
    const double tf32 = std::abs(out[2].losses[i] - out[0].losses[i]);
    EXPECT_NEAR(out[1].losses[i], out[0].losses[i], 1e-3 * std::abs(out[0].losses[i]) + 3 * tf32)
        << i;
  }
  const double tf32 = NormErr(out[2].state.params, out[0].state.params);
  EXPECT_LT(NormErr(out[1].state.params, out[0].state.params), 1e-3 + 3 * tf32);
  // The bound is not vacuous: TF32 moves this run by well under a tenth.
  EXPECT_LT(tf32, 0.1);
}

// In bf16, batch norms after convolutions are timed too (ours reads the 16-bit output; cuDNN's
// chain widens and casts), so either may run beside the fused passes around it: every fp32
// buffer that either may touch exists (cuda/net_layout.h), and the run trains as the one with
// ours throughout does, within bf16's rounding.
TEST_F(CudaGroup, AnAutotunedBf16CnnTrainsAsOursThroughoutDoes) {
  Result<ModelSpec> cnn = ResidualCnn();
  ASSERT_TRUE(cnn.ok()) << cnn.status().message();
  const Batches data = MakeBatches(8, 3);
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.model = cnn.value();
  spec.precision = Precision::kBf16;
  RunResult out[2];
  for (int run = 0; run < 2; ++run) {
    spec.cudnn_autotune = run == 1;
    Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
    ASSERT_TRUE(g.ok()) << g.status().message();
    const std::string plans = (*g)->Describe();
    EXPECT_EQ(plans.find("(timed: cuDNN ") != std::string::npos, run == 1) << plans;
    if (run == 1) std::printf("%s", plans.c_str());
    out[run] = RunSteps(g->get(), spec, 8, 1, data);
    ExpectFirstConvolutionTimed(g->get(), run == 1);
  }
  ASSERT_EQ(out[1].losses.size(), out[0].losses.size());
  ASSERT_FALSE(out[0].losses.empty());
  for (size_t i = 0; i < out[0].losses.size(); ++i) {
    EXPECT_NEAR(out[1].losses[i], out[0].losses[i], 2e-2 * std::abs(out[0].losses[i])) << i;
  }
  EXPECT_LT(NormErr(out[1].state.params, out[0].state.params), 2e-2);
}

// Graphs point at the cuDNN workspace they were captured with. An evaluation at a new batch
// size whose plan needs a larger one replaces it (the old one is unmapped in the emulator):
// the graphs are captured again, and training goes on as launched training does.
TEST_F(CudaGroup, GraphsAreCapturedAgainWhenTheConvolutionWorkspaceGrows) {
  struct Restore {
    int64_t bytes;
    ~Restore() { cuda_emu::SetConvWorkspace(bytes); }
  } restore{cuda_emu::SetConvWorkspace(4096)};
  Result<ModelSpec> cnn = ResidualCnn();
  ASSERT_TRUE(cnn.ok()) << cnn.status().message();
  const Batches data = MakeBatches(16, 6);
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.model = cnn.value();
  spec.tf32 = true;  // tensor cores: the engine with a workspace
  std::vector<double> losses[2];
  int64_t replayed = 0;
  for (int graphs = 0; graphs < 2; ++graphs) {
    cuda_emu::SetConvWorkspace(4096);
    spec.cuda_graphs = graphs == 1;
    Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
    ASSERT_TRUE(g.ok()) << g.status().message();
    ReplicaGroup* group = g->get();
    ASSERT_TRUE(group->SetState(testing::InitialState(spec)).ok());
    group->Run([&](int rank) {
      for (int step = 0; step < 16; ++step) {
        if (step == 8) {  // between steps, as the trainer evaluates after an epoch
          cuda_emu::SetConvWorkspace(int64_t{1} << 16);
          double loss = 0;
          int64_t correct = 0;
          group->Evaluate(rank, data.x.data(), data.y.data(), 7, &loss, &correct);
        }
        StepArgs args;
        args.lr = 0.05f;
        args.t = step + 1;
        args.dloss_scale = 1.0f / testing::kBatch;
        MicroBatch mb;
        mb.x = data.x.data() + int64_t{step} * testing::kBatch * testing::kInputs;
        mb.y = data.y.data() + int64_t{step} * testing::kBatch;
        mb.rows = testing::kBatch;
        group->TrainMicroBatch(rank, mb, args, &losses[graphs]);
      }
      group->FinishSteps(rank, &losses[graphs]);
    });
    if (graphs == 1) replayed = group->TakeGraphLaunches();
  }
  std::printf("  replayed %lld of 16 steps; losses %s\n", static_cast<long long>(replayed),
              losses[1] == losses[0] ? "the same" : "DIFFER");
  EXPECT_GE(replayed, 8);  // 4 before the evaluation, 4 after it (2 kinds, 2 launches each)
  EXPECT_EQ(losses[1], losses[0]);
}

// A CNN whose convolution plans ask for more workspace than the GPU has free is refused when
// its group is made, before training, naming the layer and batch_size. The emulator's tensor-core
// engine asks for what the test sets.
TEST_F(CudaGroup, RefusesACnnWhoseConvolutionWorkspaceDoesNotFit) {
  struct Restore {
    int64_t bytes;
    ~Restore() { cuda_emu::SetConvWorkspace(bytes); }
  } restore{cuda_emu::SetConvWorkspace(int64_t{1} << 40)};
  Result<ModelSpec> model = ResidualCnn();
  ASSERT_TRUE(model.ok()) << model.status().message();
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kSgd, 0.0f);
  spec.model = model.value();
  spec.tf32 = true;  // tensor cores: the engine with a workspace
  Result<std::unique_ptr<ReplicaGroup>> g = cuda::GetBackend()->CreateGroup(spec);
  ASSERT_FALSE(g.ok());
  std::printf("  a 1 TiB workspace: %s\n", g.status().message().c_str());
  EXPECT_EQ(g.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(
      g.status().message().find("convolution at batches of " + std::to_string(testing::kBatch) +
                                " rows needs 1048576.0 MiB of workspace"),
      std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("make batch_size smaller"), std::string::npos);
  cuda_emu::SetConvWorkspace(4096);
  EXPECT_TRUE(cuda::GetBackend()->CreateGroup(spec).ok());
}
#endif

}  // namespace
}  // namespace sweep::trainer
