// [parameters]: each parameter's distribution as written, the search space, and the sweep's trial
// count, with the rules grid search and TPE add.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config_parse.h"

namespace sweep::config_internal {

namespace {

using nlohmann::json;

Status CheckFinite(const Checker& c, const toml::node& given, const std::string& at) {
  if (const toml::node* bad = NonFinite(given)) {
    return c.Error(*bad, at, "nan and inf are not values a trial can be given (JSON has none)");
  }
  return Status::Ok();
}

// when = { parent = value } or { parent = [value, ...] }: active only for those values.
Result<search::Condition> ParseCondition(const Checker& c, const std::string& key,
                                         const toml::node& when) {
  const toml::table* w = when.as_table();
  if (w == nullptr || w->size() != 1) {
    return c.Error(when, key + ".when",
                   "expected one parent parameter and its values, e.g. when = { optimizer = "
                   "[\"sgd\"] }");
  }
  SWEEP_RETURN_IF_ERROR(CheckFinite(c, when, key + ".when"));
  search::Condition cond;
  for (auto&& [parent, values] : *w) {
    cond.parent = std::string(parent.str());
    if (const toml::array* a = values.as_array()) {
      for (auto&& v : *a) cond.values.push_back(ToJson(v));
    } else {
      cond.values.push_back(ToJson(values));
    }
    if (cond.values.empty()) return c.Error(values, key + ".when", "give at least one value");
  }
  return cond;
}

// `values = [...]`: the choices, listed (a distribution, if given, must say so).
Status ParseValues(const Checker& c, const std::string& key, const toml::table& t,
                   const toml::node* dist, const toml::node& values, search::Parameter* p) {
  if (dist != nullptr) {
    SWEEP_ASSIGN_OR_RETURN(std::string d, c.String(*dist, key + ".distribution"));
    if (d != "categorical" && d != "values") {
      // A distribution samples from min..max; `values` lists the choices: one or the other.
      return c.Error(*dist, key + ".distribution",
                     "\"" + d + "\" with `values`: give either `values = [...]` (the choices) or " +
                         "a distribution with `min` and `max`, not both");
    }
  }
  for (const char* k : {"min", "max", "step"}) {
    if (const toml::node* extra = t.get(k)) {
      return c.Error(*extra, key + "." + k,
                     std::string("'values' lists its choices; ") + k + " does not apply");
    }
  }
  const toml::array* a = values.as_array();
  if (a == nullptr) {
    return c.Error(values, key + ".values", "expected an array, got " + TypeName(values));
  }
  if (a->empty()) return c.Error(values, key + ".values", "empty `values`: give at least one");
  SWEEP_RETURN_IF_ERROR(CheckFinite(c, values, key + ".values"));
  p->distribution.kind = search::Distribution::Kind::kCategorical;
  for (auto&& v : *a) p->distribution.values.push_back(ToJson(v));
  return Status::Ok();
}

// The bounds of an integer distribution: integers a double holds exactly.
Status CheckIntegerBounds(const Checker& c, const std::string& key, const std::string& d,
                          const toml::node* min, const toml::node* max) {
  for (const toml::node* n : {min, max}) {
    if (!n->is_integer()) {
      return c.Error(*n, key + (n == min ? ".min" : ".max"),
                     d + " needs integer bounds, got " + TypeName(*n));
    }
    // Said here, with the value as written: past 2^53 a double no longer holds it. (Compared
    // as the double the sampler uses, which is what search::Validate checks below.)
    const int64_t v = n->as_integer()->get();
    constexpr int64_t kTwoTo53 = int64_t{1} << 53;
    if (v > kTwoTo53 || v < -kTwoTo53) {  // compared as integers: 2^53 + 1 is a double's 2^53
      return c.Error(*n, key + (n == min ? ".min" : ".max"),
                     d + " bounds must lie within +-2^53 (got " + std::to_string(v) + ")");
    }
  }
  return Status::Ok();
}

// `distribution = "uniform", min = ..., max = ...` (and an optional `step`).
Status ParseRange(const Checker& c, const std::string& key, const toml::node& node,
                  const toml::table& t, const toml::node& dist, search::Parameter* p) {
  SWEEP_ASSIGN_OR_RETURN(std::string d, c.OneOf(dist, key + ".distribution",
                                                {"uniform", "log_uniform", "int_uniform",
                                                 "log_int_uniform", "categorical"}));
  if (d == "categorical") return c.Error(dist, key, "a categorical parameter needs `values`");
  using Kind = search::Distribution::Kind;
  p->distribution.kind = d == "uniform"       ? Kind::kUniform
                         : d == "log_uniform" ? Kind::kLogUniform
                         : d == "int_uniform" ? Kind::kIntUniform
                                              : Kind::kLogIntUniform;
  const toml::node* min = t.get("min");
  const toml::node* max = t.get("max");
  if (min == nullptr) return c.Error(node, key, d + " needs `min`");
  if (max == nullptr) return c.Error(node, key, d + " needs `max`");
  SWEEP_ASSIGN_OR_RETURN(p->distribution.min, c.Number(*min, key + ".min"));
  SWEEP_ASSIGN_OR_RETURN(p->distribution.max, c.Number(*max, key + ".max"));
  bool integral = d == "int_uniform" || d == "log_int_uniform";
  if (integral) SWEEP_RETURN_IF_ERROR(CheckIntegerBounds(c, key, d, min, max));
  if (p->distribution.min > p->distribution.max) {
    return c.Error(*min, key,
                   "min > max (" + FormatNumber(p->distribution.min) + " > " +
                       FormatNumber(p->distribution.max) + ")");
  }
  if ((d == "log_uniform" || d == "log_int_uniform") && p->distribution.min <= 0) {
    return c.Error(*min, key + ".min",
                   d + " needs min > 0 (got " + FormatNumber(p->distribution.min) + ")");
  }
  if (const toml::node* step = t.get("step")) {
    if (d != "uniform" && d != "int_uniform") {
      return c.Error(*step, key + ".step",
                     d + " takes no step (its values are spaced by ratio, not difference); a "
                         "step applies to uniform and int_uniform");
    }
    if (integral && !step->is_integer()) {
      return c.Error(*step, key + ".step", d + " needs an integer step, got " + TypeName(*step));
    }
    SWEEP_ASSIGN_OR_RETURN(p->distribution.step, c.Number(*step, key + ".step"));
    if (!(p->distribution.step > 0)) {
      return c.Error(*step, key + ".step",
                     "step must be > 0 (got " + FormatNumber(p->distribution.step) + ")");
    }
    Status s = search::Validate(*p);
    if (!s.ok()) return c.Error(*step, "", "parameters." + s.message());
  }
  return Status::Ok();
}

Result<search::Parameter> ParseParameter(const Checker& c, const std::string& name,
                                         const toml::node& node) {
  const std::string key = "parameters." + name;
  search::Parameter p;
  p.name = name;
  const toml::table* t = node.as_table();
  if (t == nullptr) {
    SWEEP_RETURN_IF_ERROR(CheckFinite(c, node, key));
    p.distribution.kind = search::Distribution::Kind::kConstant;
    p.distribution.values = {ToJson(node)};
    return p;
  }
  SWEEP_RETURN_IF_ERROR(
      c.KnownKeys(*t, key, {"distribution", "min", "max", "step", "values", "when"}));
  if (const toml::node* when = t->get("when")) {
    SWEEP_ASSIGN_OR_RETURN(p.condition, ParseCondition(c, key, *when));
  }
  const toml::node* dist = t->get("distribution");
  if (const toml::node* values = t->get("values")) {
    SWEEP_RETURN_IF_ERROR(ParseValues(c, key, *t, dist, *values, &p));
    return p;
  }
  if (dist == nullptr) {
    return c.Error(node, key,
                   "expected a value, `{ values = [...] }` or `{ distribution = \"uniform\", min "
                   "= ..., max = ... }`");
  }
  SWEEP_RETURN_IF_ERROR(ParseRange(c, key, node, *t, *dist, &p));
  Status s = search::Validate(p);
  if (!s.ok()) return c.Error(node, "", "parameters." + s.message());
  return p;
}

// Grid search runs the points listed: a parameter it cannot list, or one listed twice, is
// refused.
Status CheckGridParameters(const Checker& c, const std::vector<ParamEntry>& params) {
  for (const ParamEntry& e : params) {
    auto k = e.parameter.distribution.kind;
    if (search::StepCount(e.parameter.distribution) > 0) continue;  // distinct by design
    if (k != search::Distribution::Kind::kConstant &&
        k != search::Distribution::Kind::kCategorical) {
      const bool steppable =
          k == search::Distribution::Kind::kUniform || k == search::Distribution::Kind::kIntUniform;
      return c.Error(*e.node, "parameters." + e.parameter.name,
                     "grid search takes the points listed in `values = [...]`" +
                         std::string(steppable ? " or a range with a `step`" : "") +
                         ", not distribution = \"" + std::string(search::KindName(k)) + "\"" +
                         (steppable ? " without one" : "") +
                         "; list them, or use search.algorithm = \"random\"");
    }
    // The same value twice would run the same trials twice (1 and 1.0 are the same value).
    // json's order compares numbers by value, so the map holds 1 and 1.0 as one key.
    const auto& values = e.parameter.distribution.values;
    std::map<json, size_t> seen;
    for (size_t j = 0; j < values.size(); ++j) {
      const auto [at, fresh] = seen.emplace(values[j], j);
      if (!fresh) {
        return c.Error(*e.node, "parameters." + e.parameter.name,
                       "grid search would run every trial with " + values[j].dump() +
                           " twice: it is listed at positions " + std::to_string(at->second + 1) +
                           " and " + std::to_string(j + 1));
      }
    }
  }
  return Status::Ok();
}

// A grid's trial count: its size, or max_trials of it.
Status SetGridTrialCount(const Checker& c, const ParseState& ps, SweepConfig* cfg) {
  SWEEP_RETURN_IF_ERROR(CheckGridParameters(c, ps.params));
  auto grid = search::MakeGridSampler(cfg->search.space);
  if (!grid.ok()) {
    return ps.algorithm_node != nullptr
               ? c.Error(*ps.algorithm_node, "search.algorithm", grid.status().message())
               : c.FileError(grid.status().message());
  }
  int64_t size = (*grid)->size().value_or(1);
  // A grid of fine steps can be billions of points: each run writes rows, reports and
  // folders until the disk fills. Past this size, max_trials must say how much of it to run.
  constexpr int64_t kMaxUncappedGrid = 1'000'000;
  if (!ps.max_trials && size > kMaxUncappedGrid) {
    std::vector<std::pair<int64_t, std::string>> axes;
    for (const ParamEntry& e : ps.params) {
      const search::Distribution& d = e.parameter.distribution;
      const int64_t n = search::StepCount(d) > 0 ? search::StepCount(d)
                        : d.kind == search::Distribution::Kind::kCategorical
                            ? static_cast<int64_t>(d.values.size())
                            : 1;
      if (n > 1) axes.emplace_back(n, e.parameter.name);
    }
    std::stable_sort(axes.begin(), axes.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string list;
    for (const auto& [n, axis] : axes) {
      list += (list.empty() ? "" : ", ") + axis + ": " + std::to_string(n) + " values";
    }
    return c.Error(*ps.sweep, "sweep.max_trials",
                   "the grid has " + std::to_string(size) + " points (" + list + "), more than " +
                       std::to_string(kMaxUncappedGrid) +
                       " to run without a cap; make the steps larger or list fewer values, "
                       "set max_trials to run the grid's first N points, or use "
                       "search.algorithm = \"random\" with max_trials");
  }
  cfg->sweep.max_trials = ps.max_trials ? std::min(*ps.max_trials, size) : size;
  return Status::Ok();
}

// Without max_trials a random search draws until its time budget is spent or its target is
// reached (as Optuna's timeout); with neither it would never end.
Status SetDrawnTrialCount(const Checker& c, const ParseState& ps, SweepConfig* cfg) {
  if (ps.max_trials) {
    cfg->sweep.max_trials = *ps.max_trials;
  } else if (cfg->trial.longest_first && (ps.new_sweep || ps.use == ConfigUse::kResume) &&
             ps.order_node != nullptr) {
    // It starts the heaviest of the trials drawn ahead: with no end to the draw, it would
    // start only the heaviest the sampler can give.
    return c.Error(*ps.order_node, "trial.order",
                   "\"longest_first\" orders a sweep of known size; set sweep.max_trials");
  } else if (cfg->sweep.time_budget_s || cfg->sweep.stop_when || ps.one_trial) {
    cfg->sweep.max_trials = kUnboundedTrials;
    cfg->sweep.unbounded_trials = true;
  } else {
    return c.Error(*ps.sweep, "sweep.max_trials",
                   "random search needs max_trials (how many trials to draw), or time_budget "
                   "or stop_when to end it");
  }
  return Status::Ok();
}

// TPE proposes each trial from the results before it.
Status CheckTpeSweep(const Checker& c, const ParseState& ps, const SweepConfig& cfg) {
  // It cannot draw the sweep ahead.
  if (cfg.trial.longest_first && ps.order_node != nullptr) {
    return c.Error(*ps.order_node, "trial.order",
                   "\"longest_first\" draws the whole sweep ahead to start the longest trials "
                   "first, and TPE proposes each trial from the results before it; use order "
                   "= \"sampled\" (the default) with algorithm = \"tpe\"");
  }
  // Every trial would be a startup trial: random search under another name. Trials carried
  // over (--from) count among the startup trials: a run from another sweep checks this once it
  // knows how many (PlanCarryOver), and a resumed sweep was checked as it started.
  if (ps.new_sweep && ps.use != ConfigUse::kSweepFrom) {
    if (const std::string why = TpeStartupProblem(cfg, 0); !why.empty()) {
      const toml::node* at = ps.search_table->get("n_startup_trials");
      return c.Error(at != nullptr ? *at : *ps.algorithm_node, "search.n_startup_trials", why);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<ParamEntry>> ParseParameters(const Checker& c, const ParseState& ps) {
  std::vector<ParamEntry> params;
  if (const toml::table* table = ps.Table("parameters")) {
    for (auto&& [k, v] : *table) {
      SWEEP_ASSIGN_OR_RETURN(search::Parameter p, ParseParameter(c, std::string(k.str()), v));
      params.push_back({std::move(p), &v, k.source()});
    }
  }
  // toml++ keeps keys sorted; declaration order is what users expect for grid order.
  std::stable_sort(params.begin(), params.end(), [](const ParamEntry& a, const ParamEntry& b) {
    return std::pair(a.key_source.begin.line, a.key_source.begin.column) <
           std::pair(b.key_source.begin.line, b.key_source.begin.column);
  });
  return params;
}

Status BuildSpace(const Checker& c, const ParseState& ps, SweepConfig* cfg) {
  for (const ParamEntry& e : ps.params) {
    Status s = cfg->search.space.Add(e.parameter);
    if (!s.ok()) return c.Error(*e.node, "parameters." + e.parameter.name, s.message());
  }
  if (cfg->search.algorithm == "grid") {
    SWEEP_RETURN_IF_ERROR(SetGridTrialCount(c, ps, cfg));
  } else {
    SWEEP_RETURN_IF_ERROR(SetDrawnTrialCount(c, ps, cfg));
  }
  if (cfg->search.algorithm == "tpe") SWEEP_RETURN_IF_ERROR(CheckTpeSweep(c, ps, *cfg));
  return Status::Ok();
}

}  // namespace sweep::config_internal

namespace sweep {

std::string TpeStartupProblem(const SweepConfig& config, int64_t carried) {
  const int64_t startup = config.search.tpe.n_startup_trials;
  if (config.search.algorithm != "tpe" || config.sweep.unbounded_trials ||
      startup < config.sweep.max_trials + carried) {
    return "";
  }
  return std::to_string(startup) + " random trials before TPE, and max_trials is " +
         std::to_string(config.sweep.max_trials) +
         (carried > 0 ? " with " + std::to_string(carried) + " carried over" : "") +
         ": no trial would be proposed by TPE; lower n_startup_trials or raise max_trials";
}

}  // namespace sweep
