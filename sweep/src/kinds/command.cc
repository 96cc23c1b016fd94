// Command trials: the user's own program, its metrics read from its output
// (executor/command.h), configured in [trial] (command, workdir, ...).
#include <string>
#include <vector>

#include "executor/command.h"
#include "kind_config.h"
#include "progress.h"
#include "sweep/coordinator.h"
#include "trial_kind.h"

namespace sweep {
namespace config_internal {
namespace {

Status CheckCommandTrial(const Checker& c, ParseState* state, SweepConfig* config) {
  const ParseState& ps = *state;
  const SweepConfig& cfg = *config;
  const std::optional<std::string>& metric = ps.metric;
  if (!metric) {
    return c.Error(*ps.sweep, "sweep.metric",
                   "missing: name the metric to optimise, as the program reports it in its "
                   "`sweep-report {...}` lines");
  }
  if (*metric == "step" || *metric == "epoch") {
    return c.Error(*ps.metric_node, "sweep.metric",
                   "'" + *metric +
                       "' is where a report stands, not a metric: name a value the program "
                       "reports");
  }
  std::vector<std::string> names;
  for (const ParamEntry& e : ps.params) names.push_back(e.parameter.name);
  Status s = executor::CheckCommandTemplate(cfg.trial.command, names);
  if (!s.ok()) return c.Error(*ps.command_node, "trial.command", s.message());
  return Status::Ok();
}

// A program's reports say where they stand by step and epoch: neither is a metric to stop on.
Status CheckCommandStopWhen(const Checker& c, const toml::node& written,
                            const SweepConfig::Target& target, const ParseState&) {
  if (target.metric == "step" || target.metric == "epoch") {
    return c.Error(written, "sweep.stop_when",
                   "'" + target.metric +
                       "' is where a report stands, not a metric: to bound a trial's length, "
                       "use early_stopping.max_resource or the program's own setting");
  }
  return Status::Ok();
}

}  // namespace

// What its program reports is its own: any metric, any resource, any length.
const KindConfig kCommandConfig{.kind = TrialKind::kCommand,
                                .unit = "epochs",
                                .whole_units = false,
                                .length_known = false,
                                .program = true,
                                .parse = CheckCommandTrial,
                                .check_stop_when = CheckCommandStopWhen};

}  // namespace config_internal

namespace {

class CommandKind final : public TrialKindRules {
 public:
  explicit CommandKind(const SweepConfig& config) : config_(config) {}
  TrialKind kind() const override { return TrialKind::kCommand; }
  nlohmann::json Settings(const TrialPlace& place) const override {
    return CommandSettings(config_, place.trial_dir, place.sweep_key);
  }
  // Its parameters fill the command's words: another command ran another program.
  std::optional<nlohmann::json> Computes(const nlohmann::json& params) override {
    nlohmann::json computes = params;
    computes["trial.command"] = config_.trial.command;
    return computes;
  }
  bool folders() const override { return true; }
  // Its program or folder missing here would fail every trial that runs here.
  Status CheckHere(bool /*gpus*/) const override {
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
