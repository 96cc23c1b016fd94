// How a command trial's reports are numbered: see step_numbering.h.
#include "step_numbering.h"

namespace sweep::executor {

std::optional<int64_t> StepNumbering::Next(const CommandReport& r) {
  ++reports;
  if (by_line) {
    if (r.step) return *r.step;
    if (stored_step > 0 && r.epoch) {
      if (*r.epoch <= stored_epoch) return std::nullopt;
      return stored_step + ++appended;
    }
    return reports;
  }
  if (r.step) {
    epoch_step_.reset();
    return *r.step;
  }
  if (r.epoch && epoch_step_ && epoch_step_->epoch == *r.epoch && !epoch_step_->Repeats(r)) {
    epoch_step_->Add(r);
    return epoch_step_->step;
  }
  std::optional<int64_t> step;
  if (stored_step > 0 && r.epoch) {
    if (*r.epoch == stored_epoch && stored_epoch_seen_ < stored_epoch_steps) {
      // The last stored epoch printed again: its steps, in order, then new ones.
      step = stored_step - stored_epoch_steps + 1 + stored_epoch_seen_++;
    } else if (*r.epoch >= stored_epoch) {
      step = stored_step + ++appended;
    }
  } else {
    step = ++numbered;
  }
  if (r.epoch) {
    epoch_step_.emplace(EpochStep{*r.epoch, step, {}});
    epoch_step_->Add(r);
  } else {
    epoch_step_.reset();
  }
  return step;
}

double StepNumbering::EpochOf(const CommandReport& r, int64_t step, bool* disagrees) {
  if (last_step == step) {
    if (disagrees != nullptr) *disagrees = r.epoch && *r.epoch != last_epoch;
    return last_epoch;
  }
  last_step = step;
  last_epoch = r.epoch.value_or(static_cast<double>(step));
  return last_epoch;
}
}  // namespace sweep::executor
