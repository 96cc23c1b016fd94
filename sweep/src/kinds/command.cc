// Command trials: the user's own program, its metrics read from its output
// (executor/command.h).
#include "executor/command.h"
#include "progress.h"
#include "sweep/coordinator.h"
#include "trial_kind.h"

namespace sweep {
namespace {

class CommandKind final : public TrialKindRules {
 public:
  explicit CommandKind(const SweepConfig& config) : config_(config) {}
  TrialKind kind() const override { return TrialKind::kCommand; }
  nlohmann::json Settings(const TrialPlace& place) const override {
    return CommandSettings(config_, place.trial_dir, place.sweep_key);
  }
  bool folders() const override { return true; }
  // Its program or folder missing here would fail every trial that runs here.
  Status CheckHere() const override {
    Status runs = executor::CheckProgram(config_.trial.command.at(0), config_.trial.workdir);
    if (runs.ok()) return runs;
    const bool workdir = runs.message().rfind("trial.workdir", 0) == 0;
    const std::string& where = workdir ? config_.where.workdir : config_.where.command;
    return runs.WithMessage((where.empty() ? config_.path : where) + ": " + runs.message());
  }
  // A command gets SIGTERM now, its program deciding when to end (SIGKILL after kill_grace).
  std::string HowTrialsStop() const override {
    return ": their programs got SIGTERM, and SIGKILL follows " +
           FormatMetric(config_.trial.kill_grace_s) +
           " s later (trial.kill_grace); interrupt again to kill them at once";
  }

 private:
  const SweepConfig& config_;
};

}  // namespace

nlohmann::json CommandSettings(const SweepConfig& config, const std::string& trial_dir,
                               const std::string& sweep_key) {
  nlohmann::json settings = {{"command", config.trial.command},
                             {"workdir", config.trial.workdir},
                             {"trial_dir", trial_dir},
                             {"metric", config.sweep.metric},
                             {"kill_grace_s", config.trial.kill_grace_s},
                             {"sweep_key", sweep_key}};
  if (config.trial.timeout_s) settings["timeout_s"] = *config.trial.timeout_s;
  return settings;
}

std::unique_ptr<TrialKindRules> MakeCommandKind(const SweepConfig& config) {
  return std::make_unique<CommandKind>(config);
}

}  // namespace sweep
