// Function trials: an analytic test function evaluated step by step (executor/functions.h),
// configured by [function] and a parameter for each of its inputs.
#include <algorithm>
#include <string>
#include <vector>

#include "executor/functions.h"
#include "kind_config.h"
#include "trial_kind.h"

namespace sweep {

using nlohmann::json;

namespace config_internal {
namespace {

// The function's inputs: every one given, without conditions, as numbers.
Status CheckFunctionParameters(const Checker& c, const ParseState& ps, const std::string& fn,
                               const toml::node& fname) {
  std::vector<std::string> names;
  for (const ParamEntry& e : ps.params) {
    names.push_back(e.parameter.name);
    if (e.parameter.condition) {
      return c.Error(*e.node, "parameters." + e.parameter.name + ".when",
                     "function trials need every input; conditions apply to trainer and "
                     "command trials");
    }
  }
  Status s = executor::CheckFunctionParams(*executor::FindFunction(fn), names);
  if (!s.ok()) {
    // At the parameter it names (unexpected, or given twice), else at [parameters].
    for (const ParamEntry& e : ps.params) {
      if (s.message().find("'" + e.parameter.name + "'") != std::string::npos) {
        return c.Error(*e.node, "parameters." + e.parameter.name, s.message());
      }
    }
    const toml::node* where = ps.Table("parameters") ? (*ps.root)["parameters"].node() : &fname;
    return c.Error(*where, "parameters", s.message());
  }
  for (const ParamEntry& e : ps.params) {
    const auto& d = e.parameter.distribution;
    for (const json& v : d.values) {
      if (!v.is_number()) {
        return c.Error(*e.node, "parameters." + e.parameter.name,
                       "function parameters are numbers, got " + v.dump());
      }
    }
  }
  return Status::Ok();
}

Status ParseFunctionTable(const Checker& c, ParseState* ps, SweepConfig* cfg) {
  const toml::table* function_table = ps->Table("function");
  if (function_table == nullptr) {
    const std::string msg = "kind = \"function\" needs a [function] table with `name`";
    return ps->kind_node != nullptr ? c.Error(*ps->kind_node, "trial.kind", msg) : c.FileError(msg);
  }
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(*function_table, "[function]", {"name", "steps", "step_ms"}));
  std::vector<std::string> fnames;
  for (const auto& f : executor::Functions()) fnames.push_back(f.name);
  const toml::node* fname = function_table->get("name");
  if (fname == nullptr) return c.Error(*function_table, "function.name", "missing");
  SWEEP_ASSIGN_OR_RETURN(std::string fn, c.OneOf(*fname, "function.name", fnames));
  cfg->function["name"] = fn;
  if (const toml::node* n = function_table->get("steps")) {
    SWEEP_ASSIGN_OR_RETURN(cfg->function["steps"], c.Integer(*n, "function.steps", 0, 1'000'000));
  }
  if (const toml::node* n = function_table->get("step_ms")) {
    SWEEP_ASSIGN_OR_RETURN(cfg->function["step_ms"],
                           c.Integer(*n, "function.step_ms", 0, 3'600'000));
  }
  ps->natural_max_resource = std::max<int64_t>(1, cfg->function.value("steps", int64_t{0}));
  SWEEP_RETURN_IF_ERROR(CheckFunctionParameters(c, *ps, fn, *fname));
  if (!ps->metric) ps->metric = "value", ps->mode = ps->mode.value_or("min");
  if (*ps->metric != "value") {
    return c.Error(*ps->metric_node, "sweep.metric",
                   "function trials report only 'value' (got '" + *ps->metric + "')");
  }
  return Status::Ok();
}

// Early stopping compares trials along a curve: one step is no curve.
Status CheckFunctionEarlyStopping(const Checker& c, const toml::node& where,
                                  const SweepConfig& cfg) {
  if (cfg.function.value("steps", int64_t{0}) < 2) {
    return c.Error(where, "early_stopping",
                   "early stopping needs trials that report a curve: set function.steps");
  }
  return Status::Ok();
}

}  // namespace

const KindConfig kFunctionConfig{.kind = TrialKind::kFunction,
                                 .table = "function",
                                 .unit = "steps",
                                 .parse = ParseFunctionTable,
                                 .check_early_stopping = CheckFunctionEarlyStopping};

}  // namespace config_internal

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
  std::optional<nlohmann::json> Computes(const nlohmann::json& params) override {
    nlohmann::json computes = params;
    computes["function.name"] = config_.function.value("name", "");
    return computes;
  }

 private:
  const SweepConfig& config_;
};

}  // namespace

std::unique_ptr<TrialKindRules> MakeFunctionKind(const SweepConfig& config) {
  return std::make_unique<FunctionKind>(config);
}

}  // namespace sweep
