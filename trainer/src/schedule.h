// Learning-rate schedules: constant, step and cosine, each with an optional linear warmup and
// the linear scaling rule, as a pure function of the optimizer step. Because the rate is a
// function of the step alone, a resumed trial needs only the step count to continue exactly.
// Plain values: thread-safe.
#pragma once

#include <cstdint>

#include "trainer/trainer.h"

namespace sweep::trainer {

struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine };
  Kind kind = Kind::kConstant;
  double peak = 0;              // lr after the linear scaling rule
  double warmup_steps = 0;      // W = warmup_epochs x steps per epoch, not rounded; 0: none
  int64_t total_steps = 1;      // of the whole run (cosine decays over those after warmup)
  int64_t steps_per_epoch = 1;  // step: decays happen on epoch boundaries
  int step_size = 1;            // step: epochs between decays
  double gamma = 1;             // step: factor per decay

  // From validated options: warmup_epochs and epochs become steps.
  static LrSchedule Make(const TrainOptions& o, int64_t steps_per_epoch);

  // The rate of 0-based optimizer step `step`:
  //   warmup factor  min(1, (step + 1) / W): the first step already moves;
  //   constant       peak;
  //   step           peak * gamma^floor(epoch / step_size), epoch = step / steps_per_epoch;
  //   cosine         peak * (1 + cos(pi * p)) / 2, p = (step - W) / (total - W) in [0, 1],
  //                  which starts at the peak when warmup ends and nears 0 at the last step.
  double At(int64_t step) const;
};

}  // namespace sweep::trainer
