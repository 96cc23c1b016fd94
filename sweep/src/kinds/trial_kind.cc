#include "trial_kind.h"

namespace sweep {

std::unique_ptr<TrialKindRules> MakeTrialKindRules(const SweepConfig& config) {
  switch (config.trial.kind) {
    case TrialKind::kTrainer:
      return MakeTrainerKind(config);
    case TrialKind::kFunction:
      return MakeFunctionKind(config);
    case TrialKind::kCommand:
      return MakeCommandKind(config);
  }
  return nullptr;
}

}  // namespace sweep
