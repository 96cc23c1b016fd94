// Function trials: an analytic test function evaluated step by step (executor/functions.h).
#include <algorithm>

#include "trial_kind.h"

namespace sweep {
namespace {

class FunctionKind final : public TrialKindRules {
 public:
  explicit FunctionKind(const SweepConfig& config) : config_(config) {}
  TrialKind kind() const override { return TrialKind::kFunction; }
  double Resource(int64_t step, double) const override { return static_cast<double>(step); }
  std::optional<double> Length(const nlohmann::json&) override {
    const int64_t steps = config_.function.value("steps", int64_t{0});
    return static_cast<double>(std::max<int64_t>(1, steps));
  }
  nlohmann::json Settings(const TrialPlace&) const override { return config_.function; }

 private:
  const SweepConfig& config_;
};

}  // namespace

std::unique_ptr<TrialKindRules> MakeFunctionKind(const SweepConfig& config) {
  return std::make_unique<FunctionKind>(config);
}

}  // namespace sweep
