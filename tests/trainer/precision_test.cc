// The CPU backend's bf16 and fp16: GEMM inputs rounded as a GPU's 16-bit GEMMs read them, fp16's
// dynamic loss scaling (overflowing steps skipped, the scale walked), AdamW counting only the
// steps it applied, the loss scale carried through GetState / SetState, and Train() end to end.
// Each comparison prints its figures.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu/cpu_backend.h"
#include "group_util.h"
#include "gtest/gtest.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace sweep::trainer {
namespace {

using testing::Batches;
using testing::InitialState;
using testing::MakeBatches;
using testing::NormErr;
using testing::RunResult;
using testing::RunSteps;
using testing::Spec;

std::unique_ptr<ReplicaGroup> Group(const GroupSpec& spec) {
  Result<std::unique_ptr<ReplicaGroup>> g = cpu::GetBackend()->CreateGroup(spec);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(*g) : nullptr;
}

RunResult RunOnCpu(const GroupSpec& spec, int steps, const Batches& data, int first_step = 0,
                   int64_t first_t = 1, const ModelState* init = nullptr) {
  std::unique_ptr<ReplicaGroup> g = Group(spec);
  if (g == nullptr) return {};
  return RunSteps(g.get(), spec, steps, 1, data, first_step, first_t, init);
}

const char* Name(Precision p) {
  return p == Precision::kBf16 ? "bf16" : p == Precision::kFp16 ? "fp16" : "fp32";
}

// Rounding the GEMM inputs moves the weights off the fp32 run, but no further than the GPU's
// 16-bit GEMMs are allowed to (cuda_trainer_test's bounds); replicas change only the order of
// the gradient sums.
TEST(CpuHalfPrecision, StaysCloseToFp32AndReplicasAgree) {
  const Batches data = MakeBatches(12, 2);
  for (const OptimizerSpec::Kind kind : {OptimizerSpec::Kind::kSgd, OptimizerSpec::Kind::kAdamw}) {
    const GroupSpec fp32 = Spec(1, kind, kind == OptimizerSpec::Kind::kSgd ? 0.0f : 0.1f);
    const RunResult ref = RunOnCpu(fp32, 12, data);
    for (const Precision p : {Precision::kBf16, Precision::kFp16}) {
      GroupSpec spec = fp32;
      spec.precision = p;
      const RunResult one = RunOnCpu(spec, 12, data);
      spec.replicas = 2;
      const RunResult two = RunOnCpu(spec, 12, data);
      const double err = NormErr(one.state.params, ref.state.params);
      const double replicas_err = NormErr(two.state.params, one.state.params);
      const double bound = p == Precision::kBf16 ? 5e-2 : 2e-2;
      std::printf("  %s %s, 12 steps: weights vs fp32 %.3g (bound %.3g), 2 replicas vs 1 %.3g\n",
                  Name(p), kind == OptimizerSpec::Kind::kSgd ? "sgd" : "adamw", err, bound,
                  replicas_err);
      EXPECT_GT(err, 1e-6) << Name(p) << ": nothing was rounded";
      EXPECT_LT(err, bound) << Name(p);
      EXPECT_LT(replicas_err, 1e-3) << Name(p);
      EXPECT_EQ(one.skipped, 0) << Name(p);
      EXPECT_EQ(two.skipped, 0) << Name(p);
      EXPECT_EQ(one.state.loss_scale.has_value(), p == Precision::kFp16);
    }
  }
}

// A loss scale of 2^40 makes the scaled logit gradients (about 2^40 / 32) inf once rounded to
// fp16: the first step is skipped and leaves the weights as they were, and the scale halves
// every step until the gradients fit (below about 2^21); then training goes on.
TEST(CpuHalfPrecision, Fp16SkipsStepsWhoseGradientsOverflow) {
  const Batches data = MakeBatches(40, 3);
  for (const int replicas : {1, 2}) {
    GroupSpec spec = Spec(replicas, OptimizerSpec::Kind::kSgd, 0.0f);
    spec.precision = Precision::kFp16;
    spec.initial_loss_scale = std::ldexp(1.0f, 40);
    const ModelState init = InitialState(spec);
    const RunResult one = RunOnCpu(spec, 1, data);
    EXPECT_EQ(one.skipped, 1);
    EXPECT_EQ(one.state.params, init.params);
    ASSERT_EQ(one.losses.size(), 1u);
    EXPECT_TRUE(std::isfinite(one.losses[0]));  // the loss itself is not scaled

    const RunResult many = RunOnCpu(spec, 40, data);
    ASSERT_TRUE(many.state.loss_scale.has_value());
    const LossScaleState& ls = *many.state.loss_scale;
    std::printf("  %d replica(s), 40 steps from scale 2^40: skipped %lld, scale 2^%g, loss %.4f\n",
                replicas, static_cast<long long>(many.skipped), std::log2(ls.scale),
                many.losses.back());
    EXPECT_GE(many.skipped, 17);
    EXPECT_LE(many.skipped, 22);
    EXPECT_EQ(ls.skipped, static_cast<uint64_t>(many.skipped));
    EXPECT_EQ(ls.scale, std::ldexp(1.0f, 40 - static_cast<int>(many.skipped)));
    EXPECT_LE(ls.good_steps, 40 - many.skipped);
    EXPECT_LT(many.losses.back(), many.losses.front());
  }
}

// fp16 with accumulation (two micro-batches per step) on two replicas: the ranks meet at the
// step-end barrier once per step, not per micro-batch; skipped steps and the scale's walk match
// one replica, and the weights differ by the order of the gradient sums only.
TEST(CpuHalfPrecision, Fp16AccumulatesAcrossReplicas) {
  const Batches data = MakeBatches(40, 6);
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kAdamw, 0.1f);
  spec.precision = Precision::kFp16;
  spec.initial_loss_scale = std::ldexp(1.0f, 30);  // overflows for the first several steps
  std::unique_ptr<ReplicaGroup> one = Group(spec);
  spec.replicas = 2;
  std::unique_ptr<ReplicaGroup> two = Group(spec);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  const RunResult a = RunSteps(one.get(), spec, 20, 2, data);
  const RunResult b = RunSteps(two.get(), spec, 20, 2, data);
  const double err = NormErr(b.state.params, a.state.params);
  std::printf(
      "  20 steps of 2 micro-batches from 2^30: skipped %lld / %lld, 2 replicas vs 1 %.3g\n",
      static_cast<long long>(a.skipped), static_cast<long long>(b.skipped), err);
  EXPECT_GT(a.skipped, 0);
  EXPECT_LT(a.skipped, 20);
  EXPECT_EQ(b.skipped, a.skipped);
  ASSERT_TRUE(a.state.loss_scale.has_value() && b.state.loss_scale.has_value());
  EXPECT_EQ(b.state.loss_scale->scale, a.state.loss_scale->scale);
  EXPECT_LT(err, 1e-3);
  EXPECT_LT(a.losses.back(), a.losses.front());
}

// PyTorch's AdamW never sees a step GradScaler skipped, so its bias correction counts applied
// steps only: after 7 skipped steps, step 8 of the run is AdamW's step 1. A group told so by its
// state must end bit for bit where a fresh one numbered from 1 ends; skipping steps changes
// nothing else (Fp16SkipsStepsWhoseGradientsOverflow).
TEST(CpuHalfPrecision, SkippedStepsDoNotCountForAdamw) {
  const Batches data = MakeBatches(12, 4);
  for (const int replicas : {1, 2}) {
    GroupSpec spec = Spec(replicas, OptimizerSpec::Kind::kAdamw, 0.1f);
    spec.precision = Precision::kFp16;
    spec.initial_loss_scale = 1024.0f;
    ModelState after_skips = InitialState(spec);
    after_skips.loss_scale = LossScaleState{1024.0f, 0, 7};
    const RunResult counted = RunOnCpu(spec, 12, data, 0, /*first_t=*/8, &after_skips);
    const RunResult fresh = RunOnCpu(spec, 12, data, 0, /*first_t=*/1);
    EXPECT_EQ(counted.skipped, 0);
    EXPECT_EQ(counted.state.params, fresh.state.params) << replicas << " replica(s)";
    EXPECT_EQ(counted.state.optimizer, fresh.state.optimizer);
    EXPECT_EQ(counted.state.loss_scale->skipped, 7u);
    // Numbered from 8 without the skips, the bias correction is another one.
    const RunResult uncounted = RunOnCpu(spec, 12, data, 0, /*first_t=*/8);
    EXPECT_NE(uncounted.state.params, fresh.state.params);
  }
}

// A run stopped after 10 steps and resumed from its state (weights, AdamW moments, the loss
// scale with its good-step count and skipped steps) ends bit for bit where an uninterrupted one
// does. A short growth window makes the scale move both ways within the run.
TEST(CpuHalfPrecision, LossScaleSurvivesGetAndSetState) {
  const Batches data = MakeBatches(30, 5);
  GroupSpec spec = Spec(1, OptimizerSpec::Kind::kAdamw, 0.1f);
  spec.precision = Precision::kFp16;
  spec.initial_loss_scale = std::ldexp(1.0f, 26);
  spec.loss_scale_window = 3;
  const RunResult straight = RunOnCpu(spec, 30, data);
  const RunResult first = RunOnCpu(spec, 10, data);
  ASSERT_TRUE(first.state.loss_scale.has_value());
  const RunResult rest = RunOnCpu(spec, 20, data, 10, 11, &first.state);
  std::printf("  skipped %lld + %lld of 30 (straight: %lld), final scale 2^%g\n",
              static_cast<long long>(first.skipped), static_cast<long long>(rest.skipped),
              static_cast<long long>(straight.skipped),
              std::log2(straight.state.loss_scale->scale));
  EXPECT_GT(straight.skipped, 0);
  EXPECT_EQ(first.skipped + rest.skipped, straight.skipped);
  EXPECT_EQ(rest.state.params, straight.state.params);
  EXPECT_EQ(rest.state.optimizer, straight.state.optimizer);
  EXPECT_EQ(rest.state.loss_scale->scale, straight.state.loss_scale->scale);
  EXPECT_EQ(rest.state.loss_scale->good_steps, straight.state.loss_scale->good_steps);
  EXPECT_EQ(rest.state.loss_scale->skipped, straight.state.loss_scale->skipped);

  // Without the loss scale, the resumed run starts from the initial scale and step count again.
  ModelState no_scale = first.state;
  no_scale.loss_scale.reset();
  const RunResult forgot = RunOnCpu(spec, 20, data, 10, 11, &no_scale);
  EXPECT_NE(forgot.state.params, straight.state.params);
}

// Train() on the CPU in bf16 and fp16: it learns as fp32 does, deterministically.
TEST(CpuHalfPrecision, TrainLearns) {
  testing::TempDir dir;
  for (const char* precision : {"bf16", "fp16"}) {
    TrainOptions o = testing::BlobOptions(dir);
    o.precision = precision;
    auto run = [&](std::vector<EpochReport>* reports) {
      return Train(o, [&](const EpochReport& e) {
        reports->push_back(e);
        return true;
      });
    };
    std::vector<EpochReport> a, b;
    auto r = run(&a);
    ASSERT_TRUE(r.ok()) << precision << ": " << r.status().message();
    ASSERT_TRUE(run(&b).ok());
    ASSERT_EQ(a.size(), 4u);
    std::printf("  %s: val_acc %.4f, train_loss %.4f -> %.4f, skipped %lld\n", precision,
                a.back().val_acc, a.front().train_loss, a.back().train_loss,
                static_cast<long long>(a.back().skipped_steps));
    EXPECT_GE(a.back().val_acc, 0.99) << precision;
    EXPECT_LT(a.back().train_loss, a.front().train_loss) << precision;
    EXPECT_EQ(a.back().skipped_steps, 0) << precision;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].train_loss, b[i].train_loss);
  }
}

}  // namespace
}  // namespace sweep::trainer
