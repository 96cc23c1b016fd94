#include "carry_over.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "kinds/trial_kind.h"
#include "output.h"
#include "progress.h"
#include "search/early_stopping.h"
#include "search/space.h"
#include "sweep/coordinator.h"

namespace sweep {

using nlohmann::json;
using store::TrialStatus;

std::string CarryPlan::Summary() const {
  int64_t completed = 0, pruned = 0;
  for (const auto& t : trials) (t.status == TrialStatus::kCompleted ? completed : pruned) += 1;
  std::string s = "carried over " + std::to_string(trials.size()) + " of " +
                  std::to_string(considered) + " trial(s) from '" + from + "'";
  if (!trials.empty()) {
    s += " (" + std::to_string(completed) + " completed, " + std::to_string(pruned) + " pruned)";
  }
  if (!left.empty()) {
    s += "; not carried:";
    bool first = true;
    for (const auto& [why, n] : left) {
      s += std::string(first ? " " : ", ") + std::to_string(n) + " " + why;
      if (auto example = examples.find(why); example != examples.end()) {
        s += " (" + example->second + ")";
      }
      first = false;
    }
  }
  return s;
}

namespace {

// Results that would not compare: the trials were ranked the other way (pruned for being good),
// or evaluated another function.
Status CheckSameTrials(const SweepConfig& old, const SweepConfig& config, const std::string& from) {
  const std::string said = "--from " + from + ": ";
  if (old.sweep.metric == config.sweep.metric && old.sweep.maximize != config.sweep.maximize) {
    auto mode = [](bool max) { return std::string(max ? "\"max\"" : "\"min\""); };
    return Status::InvalidArgument(
        said + "its trials were ranked with mode = " + mode(old.sweep.maximize) + " on '" +
        config.sweep.metric + "', this config's with " + mode(config.sweep.maximize) +
        ": its pruned trials were stopped for what this sweep calls good; nothing to carry over");
  }
  if (config.trial.kind == TrialKind::kFunction) {
    const std::string was = old.function.value("name", ""), is = config.function.value("name", "");
    if (was != is) {
      return Status::InvalidArgument(said + "its trials evaluated " + was + ", this config's " +
                                     is + ": their results would not compare");
    }
  }
  return Status::Ok();
}

// A value as a config would write it: 3, not 3.0; a long one cut in the middle, keeping a
// path's file name.
std::string Shown(const json& v) {
  if (v.is_null()) return "unset";
  std::string s = v.is_number_float() ? FormatNumber(v.get<double>()) : v.dump();
  return s.size() > 64 ? s.substr(0, 24) + "..." + s.substr(s.size() - 37) : s;
}

// The first setting (in key order, a dataset's files by name) in which two trials' Computes()
// differ: "lr = 0.1, this config's 0.05".
std::string FirstDifference(const json& ran, const json& runs) {
  std::map<std::string, std::pair<json, json>> keys;  // sorted: the same one every time
  auto add = [&keys](const json& settings, bool second) {
    for (const auto& [key, value] : settings.items()) {
      if (value.is_object()) {
        for (const auto& [inner, v] : value.items()) {
          (second ? keys[key + "." + inner].second : keys[key + "." + inner].first) = v;
        }
      } else {
        (second ? keys[key].second : keys[key].first) = value;
      }
    }
  };
  add(ran, false);
  add(runs, true);
  // A setting both give comes first: another optimizer, not the keys only it has.
  for (bool both : {true, false}) {
    for (const auto& [key, values] : keys) {
      if (values.first == values.second) continue;
      if (both && (values.first.is_null() || values.second.is_null())) continue;
      return key + " = " + Shown(values.first) + ", this config's " + Shown(values.second);
    }
  }
  return "other settings";
}

// A trial trained with the seed its config fixed, or else its own (TrialSeed): a config that
// fixes none takes any trial's (each of its trials has one of its own); one that fixes a seed
// takes only trials that trained with it.
void SameSeeds(json& ran, json& runs, uint64_t old_sweep_seed, int64_t old_number) {
  auto fixed = [](const json& c) { return c.contains("seed") && !c["seed"].is_null(); };
  if (!runs.contains("seed") && !ran.contains("seed")) return;
  if (!fixed(runs)) {
    ran.erase("seed");
    runs.erase("seed");
  } else if (!fixed(ran)) {
    ran["seed"] = TrialSeed(old_sweep_seed, old_number);
  }
}

// A trial's parameters as a point of the new space: a value the earlier config fixed in
// [trainer] fills a parameter the new one varies (where its condition holds), and a parameter
// the new space no longer has is left to what the new config fixes (Computes() then compares
// the two).
json InThisSpace(const SweepConfig& old, const SweepConfig& config, const json& params) {
  if (!params.is_object()) return params;
  json point = json::object();
  for (const search::Parameter& p : config.search.space.parameters()) {
    if (auto v = params.find(p.name); v != params.end()) {
      point[p.name] = *v;
    } else if (auto fixed = old.trainer.find(p.name);
               config.trial.kind == TrialKind::kTrainer && fixed != old.trainer.end()) {
      point[p.name] = *fixed;
    }
  }
  // A filled value where the new space has its parameter inactive would not be a point of it.
  for (const search::Parameter& p : config.search.space.parameters()) {
    if (!p.condition || params.contains(p.name) || !point.contains(p.name)) continue;
    auto parent = point.find(p.condition->parent);
    const auto& values = p.condition->values;
    if (parent == point.end() || std::find(values.begin(), values.end(), *parent) == values.end()) {
      point.erase(p.name);
    }
  }
  return point;
}

// Hyperband judges a trial by its bracket's rungs: a carried trial keeps the bracket it ran in
// where both sweeps climb the same ladder (ASHA's trials ran in bracket 0); elsewhere, or for a
// sweep without Hyperband, the one its new number gives.
class CarriedBrackets {
 public:
  CarriedBrackets(const SweepConfig* old, const SweepConfig& config) {
    using search::EarlyStopping;
    const auto& is = config.early_stopping;
    if (old == nullptr || is.algorithm != EarlyStopping::kHyperband) return;
    const auto& was = old->early_stopping;
    if ((was.algorithm != EarlyStopping::kHyperband && was.algorithm != EarlyStopping::kAsha) ||
        was.min_resource != is.min_resource || was.max_resource != is.max_resource ||
        was.reduction_factor != is.reduction_factor) {
      return;
    }
    same_ladder_ = true;
    if (was.algorithm == EarlyStopping::kHyperband) {
      auto made = search::MakeScheduler(was);
      if (made.ok()) old_ = std::move(made).value();
    }
  }
  // The bracket trial `t` (of the earlier sweep) keeps.
  std::optional<int64_t> Of(const store::TrialRecord& t) const {
    if (!same_ladder_) return std::nullopt;
    if (t.bracket) return t.bracket;  // carried there too
    return old_ != nullptr ? old_->Bracket(t.number) : 0;
  }

 private:
  bool same_ladder_ = false;
  std::unique_ptr<search::Scheduler> old_;
};

}  // namespace

Status CheckTpeStartup(const SweepConfig& config, int64_t carried) {
  const std::string why = TpeStartupProblem(config, carried);
  if (why.empty()) return Status::Ok();
  const std::string& where = config.where.startup.empty() ? config.path : config.where.startup;
  return Status::InvalidArgument(where + ": search.n_startup_trials: " + why);
}

Result<CarryPlan> PlanCarryOver(store::Store& store, const SweepConfig& config,
                                const std::string& from) {
  if (from == config.sweep.name) {
    return Status::InvalidArgument("--from " + from +
                                   ": that is the new sweep's own name; give the new sweep "
                                   "another (--name)");
  }
  SWEEP_ASSIGN_OR_RETURN(store::SweepRecord rec, FindSweepOrSuggest(store, from));
  auto old_config = ParseConfig(rec.config_text, rec.config_path, ConfigUse::kResume);
  if (old_config.ok() && old_config->trial.kind != config.trial.kind) {
    return Status::InvalidArgument(
        "--from " + from + ": its trials are " + std::string(ToString(old_config->trial.kind)) +
        " trials, and this config's are " + std::string(ToString(config.trial.kind)) +
        "; nothing to carry over");
  }
  if (old_config.ok()) SWEEP_RETURN_IF_ERROR(CheckSameTrials(*old_config, config, from));
  // What a trial runs to under each config: a trial that ran another length did not run this
  // sweep's trial (its rungs, its end).
  std::unique_ptr<TrialKindRules> old_kind, new_kind = MakeTrialKindRules(config);
  if (old_config.ok()) old_kind = MakeTrialKindRules(*old_config);
  // ASHA and Hyperband stop a survivor at max_resource: that is where its trial ends.
  auto runs_to = [](TrialKindRules& kind, const SweepConfig& c, const json& params) {
    std::optional<double> length = kind.Length(params);
    const auto es = c.early_stopping.algorithm;
    const bool capped =
        es == search::EarlyStopping::kAsha || es == search::EarlyStopping::kHyperband;
    if (length && capped && c.early_stopping.max_resource > 0) {
      length = std::min(*length, c.early_stopping.max_resource);
    }
    return length;
  };
  const std::string unit = config.trial.kind == TrialKind::kTrainer ? " epochs" : " steps";
  CarryPlan plan;
  plan.from = rec.name;
  plan.from_id = rec.id;
  SWEEP_ASSIGN_OR_RETURN(auto trials, store.Trials(rec.id, store::TrialQuery{}));
  plan.considered = static_cast<int64_t>(trials.size());
  int64_t highest = -1;
  const CarriedBrackets brackets(old_config.ok() ? &*old_config : nullptr, config);
  auto leave = [&plan](const std::string& why, const std::string& example) {
    if (plan.left[why]++ == 0 && !example.empty()) plan.examples[why] = example;
  };
  for (auto& t : trials) {
    highest = std::max(highest, t.number);
    if (t.status != TrialStatus::kCompleted && t.status != TrialStatus::kPruned) {
      leave(std::string(store::ToString(t.status)), "");
      continue;
    }
    const json old_params = json::parse(t.params_json, nullptr, /*allow_exceptions=*/false);
    const json params = old_config.ok() ? InThisSpace(*old_config, config, old_params) : old_params;
    const std::string trial = "trial " + std::to_string(t.number);
    if (std::string why = search::Outside(config.search.space, params); !why.empty()) {
      leave("outside this space", trial + ": " + why);
      continue;
    }
    if (old_kind != nullptr) {
      const std::optional<double> was = runs_to(*old_kind, *old_config, old_params),
                                  is = runs_to(*new_kind, config, params);
      if (was && is && *was != *is) {
        leave("of another length", trial + " ran " + FormatMetric(*was) + unit +
                                       ", this config's run " + FormatMetric(*is));
        continue;
      }
      std::optional<json> ran = old_kind->Computes(old_params), runs = new_kind->Computes(params);
      if (ran && runs) SameSeeds(*ran, *runs, old_config->sweep.seed, t.number);
      if (ran && runs && *ran != *runs) {
        leave("run with other settings", trial + " ran with " + FirstDifference(*ran, *runs));
        continue;
      }
    }
    const json metrics = json::parse(t.metrics_json, nullptr, /*allow_exceptions=*/false);
    auto m = metrics.is_object() ? metrics.find(config.sweep.metric) : metrics.end();
    if (m == metrics.end() || !m->is_number() || !std::isfinite(m->get<double>())) {
      ++plan.left["without " + config.sweep.metric];
      continue;
    }
    plan.old_numbers.push_back(t.number);
    t.bracket = brackets.Of(t);
    t.params_json = params.dump();
    t.objective = m->get<double>();
    t.number = static_cast<int64_t>(plan.trials.size());
    t.checkpoint.clear();  // the earlier sweep's to keep or delete
    t.stdout_log.clear();
    t.stderr_log.clear();
    t.retries = 0;
    t.agent_losses = 0;
    plan.trials.push_back(std::move(t));
  }
  const int64_t carried = static_cast<int64_t>(plan.trials.size());
  SWEEP_RETURN_IF_ERROR(CheckTpeStartup(config, carried));
  // A grid starts from its first point and skips those carried (the coordinator's SampleFor);
  // random draws go on after the earlier sweep's, so that with the same seed none repeats.
  plan.sample_shift =
      config.search.algorithm == "grid" ? 0 : highest + 1 + rec.sample_shift - carried;
  return plan;
}

Status ApplyCarryOver(store::Store& store, int64_t sweep_id, const CarryPlan& plan, double now_s,
                      std::vector<store::ReportRecord>* reports) {
  std::map<int64_t, int64_t> renumber;
  for (size_t i = 0; i < plan.trials.size(); ++i) {
    const store::TrialRecord& t = plan.trials[i];
    renumber[plan.old_numbers[i]] = t.number;
    SWEEP_RETURN_IF_ERROR(store.InsertTrial(sweep_id, t));
    SWEEP_RETURN_IF_ERROR(store.AddEvent(
        sweep_id, t.number, "", store::ToString(t.status),
        "carried over from sweep '" + plan.from + "' trial " + std::to_string(plan.old_numbers[i]),
        now_s));
  }
  if (!plan.trials.empty()) {
    SWEEP_ASSIGN_OR_RETURN(auto all, store.AllReports(plan.from_id));
    for (store::ReportRecord& r : all) {
      auto it = renumber.find(r.trial);
      if (it == renumber.end()) continue;
      r.trial = it->second;
      SWEEP_RETURN_IF_ERROR(store.AddReport(sweep_id, r));
      reports->push_back(std::move(r));
    }
  }
  return store.SetSweepCarried(sweep_id, static_cast<int64_t>(plan.trials.size()),
                               plan.sample_shift, plan.from);
}

}  // namespace sweep
