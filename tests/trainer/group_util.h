// Helpers for tests that drive a ReplicaGroup directly, as trainer.cc does: a small MLP's spec,
// random batches, and a loop that trains N steps and returns the weights, the losses and the
// steps fp16 skipped. Used by the CPU precision tests and the CUDA backend's tests alike, so
// both compare the same runs. Test-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend.h"
#include "gtest/gtest.h"
#include "model.h"
#include "rng.h"

namespace sweep::trainer::testing {

inline constexpr int kInputs = 24, kClasses = 5, kBatch = 32;

// |a - ref|_2 / |ref|_2.
inline double NormErr(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (double{a[i]} - ref[i]) * (double{a[i]} - ref[i]);
    norm += double{ref[i]} * ref[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// Inputs and labels for micro-batches of kBatch rows, one after another; or, when idx is not
// empty, the row numbers of a set the group holds (ReplicaGroup::HoldDataset).
// The micro-batches as arrays (x, y), as uint8 pixels with y, or as row numbers of a held set.
struct Batches {
  std::vector<float> x;
  std::vector<int32_t> y;
  std::vector<int32_t> idx;
  std::vector<uint8_t> pixels;
};

inline Batches MakeBatches(int micro_batches, uint64_t seed) {
  Rng rng(seed);
  Batches b;
  for (int i = 0; i < micro_batches * kBatch; ++i) {
    const int label = static_cast<int>(rng.Below(kClasses));
    b.y.push_back(label);
    for (int f = 0; f < kInputs; ++f) {
      b.x.push_back(static_cast<float>(rng.Uniform() + (f % kClasses == label ? 1.0 : 0.0)));
    }
  }
  return b;
}

inline GroupSpec Spec(int replicas, OptimizerSpec::Kind kind, float dropout) {
  GroupSpec spec;
  spec.model = ModelSpec::Mlp(kInputs, {40, 24}, kClasses, Activation::kGelu, dropout);
  spec.replicas = replicas;
  spec.max_rows = kBatch;
  spec.optimizer.kind = kind;
  spec.optimizer.weight_decay = 1e-3f;
  return spec;
}

// The seeded initial weights of spec's model, no optimizer state.
inline ModelState InitialState(const GroupSpec& spec) {
  ModelState init;
  init.params.resize(static_cast<size_t>(spec.model.num_params));
  InitParams(spec.model, 11, init.params.data(), nullptr);
  return init;
}

struct RunResult {
  ModelState state;
  std::vector<double> losses;  // per step, as rank 0 saw them
  int64_t skipped = 0;         // steps fp16 skipped during the run
};

// Loads `init` (default: InitialState) and trains `steps` steps of `accum` micro-batches, each
// rank taking its rows of every micro-batch, as trainer.cc does. The steps read the batches of
// steps first_step, first_step + 1, ... of `data` and are numbered first_t, first_t + 1, ...
// (StepArgs::t); a resumed run passes both, a run on later data with fresh numbering only the
// first.
inline RunResult RunSteps(ReplicaGroup* group, const GroupSpec& spec, int steps, int accum,
                          const Batches& data, int first_step = 0, int64_t first_t = 1,
                          const ModelState* init = nullptr, bool decaying_lr = false) {
  const ModelState fresh = init == nullptr ? InitialState(spec) : ModelState();
  EXPECT_TRUE(group->SetState(init == nullptr ? fresh : *init).ok());
  group->TakeSkippedSteps();
  const int R = group->size();
  RunResult out;
  std::vector<std::vector<double>> seen(static_cast<size_t>(R));
  group->Run([&](int rank) {
    std::vector<double>& finished = seen[static_cast<size_t>(rank)];
    const int begin = kBatch * rank / R, end = kBatch * (rank + 1) / R;
    for (int s = 0; s < steps; ++s) {
      const int step = first_step + s;
      StepArgs args;
      // AdamW's step is about lr whatever the gradient's scale: at 0.05 the blob losses jump
      // tenfold between steps, and TF32's rounding alone then moves a step's loss by ~20%.
      args.lr = spec.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 0.005f : 0.05f;
      // A schedule: each step's rate its own (halving over the run).
      if (decaying_lr) args.lr *= 1.0f - 0.5f * static_cast<float>(s) / static_cast<float>(steps);
      args.t = first_t + s;
      args.dloss_scale = 1.0f / static_cast<float>(kBatch * accum);
      args.dropout_key = MixSeed(99, static_cast<uint64_t>(step));
      for (int m = 0; m < accum; ++m) {
        const int64_t row0 = int64_t{step * accum + m} * kBatch + begin;
        MicroBatch mb;
        if (!data.pixels.empty()) {
          mb.pixels = data.pixels.data() + row0 * kInputs;
          mb.y = data.y.data() + row0;
        } else if (data.idx.empty()) {
          mb.x = data.x.data() + row0 * kInputs;
          mb.y = data.y.data() + row0;
        } else {
          mb.idx = data.idx.data() + row0;
        }
        mb.rows = end - begin;
        mb.first_row = int64_t{m} * kBatch + begin;
        mb.first = m == 0;
        mb.last = m == accum - 1;
        group->TrainMicroBatch(rank, mb, args, &finished);
      }
    }
    group->FinishSteps(rank, &finished);
  });
  for (int r = 1; r < R; ++r) {
    EXPECT_EQ(seen[static_cast<size_t>(r)], seen[0]) << "rank " << r << " saw other losses";
  }
  out.losses = seen[0];
  out.state = group->GetState();
  out.skipped = group->TakeSkippedSteps();
  return out;
}

}  // namespace sweep::trainer::testing
