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
  s.warmup_steps = static_cast<int64_t>(std::llround(o.warmup_epochs * s.steps_per_epoch));
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
      const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
      const double p = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
      lr *= 0.5 * (1.0 + std::cos(3.141592653589793 * p));
      break;
    }
  }
  if (step < warmup_steps) lr *= static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  return lr;
}

}  // namespace sweep::trainer
