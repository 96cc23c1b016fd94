// LrSchedule. Owned by the trainer. Pure functions.
#include "schedule.h"

#include <algorithm>
#include <cmath>

namespace sweep::trainer {

LrSchedule LrSchedule::Make(const TrainOptions& o, int64_t steps_per_epoch) {
  LrSchedule s;
  s.kind = o.lr_schedule == "step"     ? Kind::kStep
           : o.lr_schedule == "cosine" ? Kind::kCosine
                                       : Kind::kConstant;
  s.peak = o.lr;
  if (o.scale_lr) {
    s.peak *= static_cast<double>(o.batch_size) * o.accum_steps / static_cast<double>(o.base_batch);
  }
  s.steps_per_epoch = std::max<int64_t>(1, steps_per_epoch);
  // Fractional, as documented: 1.5 epochs of 7 steps warm up over 10.5 steps.
  s.warmup_steps = o.warmup_epochs * static_cast<double>(s.steps_per_epoch);
  s.total_steps = s.steps_per_epoch * o.epochs;
  s.step_size = o.step_size;
  s.gamma = o.gamma;
  return s;
}

double LrSchedule::At(int64_t step) const {
  double lr = peak;
  switch (kind) {
    case Kind::kConstant:
      break;
    case Kind::kStep: {
      const int64_t decays = step / steps_per_epoch / step_size;
      lr *= std::pow(gamma, static_cast<double>(decays));
      break;
    }
    case Kind::kCosine: {
      const double span = std::max(1.0, static_cast<double>(total_steps) - warmup_steps);
      const double p = std::clamp((static_cast<double>(step) - warmup_steps) / span, 0.0, 1.0);
      lr *= 0.5 * (1.0 + std::cos(3.141592653589793 * p));
      break;
    }
  }
  if (static_cast<double>(step + 1) < warmup_steps) {
    lr *= static_cast<double>(step + 1) / warmup_steps;
  }
  return lr;
}

}  // namespace sweep::trainer
