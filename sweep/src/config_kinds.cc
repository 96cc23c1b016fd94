// The trial kinds' own tables ([trainer], [function], a command's template) and each kind's
// default metric and checks of it.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config_parse.h"
#include "executor/command.h"
#include "executor/functions.h"
#include "executor/trial.h"
#include "trainer/trainer.h"

namespace sweep {

using nlohmann::json;

Status CheckTrainerOption(std::string_view key, const json& value) {
  trainer::TrainOptions scratch;
  // A stand-in dataset, so that checking one option does not trip over the absent others.
  scratch.dataset.train_images = scratch.dataset.train_labels = "-";
  Status s = trainer::ApplyOption(&scratch, key, value);
  if (s.ok()) s = trainer::Validate(scratch, trainer::ValidateScope::kEachOption);
  return s;
}

namespace config_internal {

namespace {

// Checks a trainer option's values through the trainer itself, so types and ranges are the
// trainer's own rules.
Status CheckTrainerValue(const Checker& c, const toml::node& where, const std::string& key,
                         const std::string& option, const json& value) {
  Status s = CheckTrainerOption(option, value);
  if (!s.ok()) return c.Error(where, key, s.message());
  return Status::Ok();
}

Status CheckTrainerParameter(const Checker& c, const ParamEntry& e, bool stored) {
  const auto& d = e.parameter.distribution;
  const std::string key = "parameters." + e.parameter.name;
  const auto& known = trainer::OptionKeys();
  if (std::find(known.begin(), known.end(), e.parameter.name) == known.end()) {
    std::string msg = "the trainer has no hyperparameter '" + e.parameter.name + "'";
    std::string hint = DidYouMean(e.parameter.name, known);
    if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
    return c.Error(e.key_source, key, msg);
  }
  if (e.parameter.name == "checkpoint_path") {
    return c.Error(e.key_source, key,
                   "each trial gets a checkpoint file of its own; set [trial] checkpoint_dir to "
                   "choose where they go");
  }
  using Kind = search::Distribution::Kind;
  if (d.kind == Kind::kConstant || d.kind == Kind::kCategorical) {
    for (const json& v : d.values) {
      SWEEP_RETURN_IF_ERROR(CheckTrainerValue(c, *e.node, key, e.parameter.name, v));
    }
    return Status::Ok();
  }
  bool integral = d.kind == Kind::kIntUniform || d.kind == Kind::kLogIntUniform;
  for (double bound : {d.min, d.max}) {
    json v = integral ? json(static_cast<int64_t>(bound)) : json(bound);
    SWEEP_RETURN_IF_ERROR(CheckTrainerValue(c, *e.node, key, e.parameter.name, v));
  }
  if (!integral && d.max > d.min && !stored) {
    // A continuous distribution draws fractions: an option of whole numbers (epochs,
    // batch_size) would fail every trial as it starts.
    double inside = d.min + (d.max - d.min) * 0.382;
    if (inside == std::floor(inside)) inside = d.min + (d.max - d.min) * 0.618;
    if (search::StepCount(d) > 0) {
      // Its values are all whole when min and step are (16 to 256 by 16); otherwise min or
      // min + step is a fraction.
      inside = search::StepValue(d, d.min == std::floor(d.min) ? 1 : 0).get<double>();
    }
    if (!CheckTrainerOption(e.parameter.name, json(inside)).ok() &&
        CheckTrainerOption(e.parameter.name, json(static_cast<int64_t>(std::floor(inside)))).ok()) {
      const bool log = d.kind == Kind::kLogUniform;
      return c.Error(*e.node, key,
                     std::string(log ? "log_uniform" : "uniform") + " draws fractions and " +
                         e.parameter.name + " takes whole numbers: use distribution = \"" +
                         (log ? "log_int_uniform" : "int_uniform") + "\"");
    }
  }
  return Status::Ok();
}

// `dataset` with its relative paths made relative to `base`, the config's folder: a config
// means the same files wherever sweep runs (and when a sweep is resumed from another folder).
// A relative path in a config starts at the config's folder (`base`), not where sweep runs.
void ResolveRelativeTo(json& path, const std::filesystem::path& base) {
  if (!path.is_string()) return;
  const std::filesystem::path p = path.get<std::string>();
  if (!p.empty() && p.is_relative()) path = (base / p).lexically_normal().string();
}

json DatasetRelativeTo(json value, const std::filesystem::path& base) {
  auto resolve = [&](json& path) { ResolveRelativeTo(path, base); };
  if (value.is_string()) resolve(value);
  if (value.is_object()) {
    for (const char* k : {"train_images", "train_labels", "test_images", "test_labels"}) {
      if (value.contains(k)) resolve(value[k]);
    }
  }
  return value;
}

// What is wrong with the files a dataset names here: the file's key ("train_images", or empty
// for the dataset as a whole) and why; an empty `why` when nothing is.
struct DatasetProblem {
  std::string field;
  std::string why;
};
DatasetProblem DatasetFilesProblem(const trainer::DatasetSpec& ds) {
  const std::pair<const char*, const std::string*> files[] = {{"train_images", &ds.train_images},
                                                              {"train_labels", &ds.train_labels},
                                                              {"test_images", &ds.test_images},
                                                              {"test_labels", &ds.test_labels}};
  for (auto [name, file] : files) {
    if (file->empty()) continue;
    std::error_code ec;
    const auto type = std::filesystem::status(*file, ec).type();
    if (type == std::filesystem::file_type::not_found) {
      std::string msg = "no such file '" + *file + "'";
      if (file->find("fashion-mnist") != std::string::npos) {
        msg += " (Debian's dataset-fashion-mnist package installs it)";
      }
      return {name, msg};
    }
    if (ec) return {name, "cannot reach '" + *file + "': " + ec.message()};
    if (type != std::filesystem::file_type::regular) {
      return {name, "'" + *file + "' is " +
                        (type == std::filesystem::file_type::directory
                             ? "a folder, not a file"
                             : "not a regular file (a device, pipe or socket)")};
    }
    errno = 0;
    std::ifstream probe(*file);
    if (!probe) {
      const int err = errno;
      return {name, "cannot read '" + *file + "'" +
                        (err != 0 ? ": " + std::string(std::strerror(err)) : "")};
    }
  }
  if (ds.train_images.empty()) return {"", "no training data given"};
  return {};
}

// Every dataset file the options name must exist and be readable before the sweep starts.
Status CheckDatasetFiles(const Checker& c, const toml::node& where, const std::string& key,
                         const trainer::DatasetSpec& ds) {
  const DatasetProblem p = DatasetFilesProblem(ds);
  if (p.why.empty()) return Status::Ok();
  return c.Error(where, p.field.empty() ? key : key + "." + p.field, p.why);
}

// The options every trial shares ([trainer] and the constant parameters), and where the file
// gives the dataset.
struct SharedOptions {
  trainer::TrainOptions merged;
  const toml::node* dataset_node = nullptr;
  std::string dataset_key;
};

// A dataset's paths, checked for their form only (without check_dataset): a stand-in for the
// options.
Status ApplyDataset(bool check_dataset, const json& value, trainer::TrainOptions* merged) {
  if (check_dataset) return trainer::ApplyOption(merged, "dataset", value);
  if (!value.is_string() && !value.is_object()) {
    return trainer::ApplyOption(merged, "dataset", value);  // its type error
  }
  merged->dataset.train_images = merged->dataset.train_labels = "-";
  return Status::Ok();
}

// [trainer]: each option checked by the trainer's own rules, its relative paths made the config
// folder's (`base`).
Status ParseTrainerKeys(const Checker& c, const ParseState& ps, const toml::table& table,
                        const std::filesystem::path& base, SharedOptions* shared,
                        SweepConfig* cfg) {
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(table, "[trainer]", trainer::OptionKeys()));
  for (auto&& [k, v] : table) {
    std::string key(k.str());
    json value = ToJson(v);
    if (key == "checkpoint_path") {
      return c.Error(v, "trainer." + key,
                     "each trial gets a checkpoint file of its own; set [trial] "
                     "checkpoint_dir to choose where they go");
    }
    const bool dataset = key == "dataset";
    if (dataset) value = DatasetRelativeTo(std::move(value), base);
    if (key == "cache_dir") ResolveRelativeTo(value, base);
    if (!dataset || ps.check_dataset) {  // the dataset's check reads its files
      SWEEP_RETURN_IF_ERROR(CheckTrainerValue(c, v, "trainer." + key, key, value));
    }
    Status s = dataset ? ApplyDataset(ps.check_dataset, value, &shared->merged)
                       : trainer::ApplyOption(&shared->merged, key, value);
    if (!s.ok()) return c.Error(v, "trainer." + key, s.message());
    cfg->trainer[key] = value;
    if (key == "dataset") {
      shared->dataset_node = &v;
      shared->dataset_key = "trainer.dataset";
    }
  }
  return Status::Ok();
}

// The parameters the trainer receives, each checked as its option; the constant ones join the
// shared options.
Status ApplyTrainerParameters(const Checker& c, ParseState* ps, const std::filesystem::path& base,
                              SharedOptions* shared) {
  for (ParamEntry& e : ps->params) {
    if (e.parameter.name == "dataset" &&
        e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
      json& value = e.parameter.distribution.values[0];
      value = DatasetRelativeTo(std::move(value), base);
    }
    if (e.parameter.name == "cache_dir" &&
        e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
      ResolveRelativeTo(e.parameter.distribution.values[0], base);
    }
    if (e.parameter.name != "dataset" || ps->check_dataset) {
      SWEEP_RETURN_IF_ERROR(CheckTrainerParameter(c, e, ps->stored));
    }
    if (e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
      const json& value = e.parameter.distribution.values[0];
      (void)(e.parameter.name == "dataset"
                 ? ApplyDataset(ps->check_dataset, value, &shared->merged)
                 : trainer::ApplyOption(&shared->merged, e.parameter.name, value));
      if (e.parameter.name == "dataset") {
        shared->dataset_node = e.node;
        shared->dataset_key = "parameters.dataset";
      }
    } else if (e.parameter.name == "dataset") {
      return c.Error(*e.node, "parameters.dataset",
                     "vary one dataset per sweep; put it in [trainer]");
    }
  }
  return Status::Ok();
}

// What every trial shares: a dataset whose files are here, and options that go together.
Status CheckSharedOptions(const Checker& c, const ParseState& ps, const toml::table* table,
                          const SweepConfig& cfg, SharedOptions* shared) {
  if (shared->dataset_node == nullptr) {
    const std::string msg =
        "[trainer] needs a `dataset` (e.g. dataset = \"/usr/share/datasets/fashion-mnist\", or "
        "{ format = \"idx\", train_images = \"...\", train_labels = \"...\" })";
    return table != nullptr ? c.Error(*table, "trainer.dataset", msg) : c.FileError(msg);
  }
  if (ps.check_dataset) {
    SWEEP_RETURN_IF_ERROR(
        CheckDatasetFiles(c, *shared->dataset_node, shared->dataset_key, shared->merged.dataset));
  }
  // Rules across options (nesterov needs momentum, ...) on what every trial shares: [trainer]
  // and the constant parameters. Varied values are checked per trial when it runs. A trial's
  // replicas are its slots unless the config says otherwise (see TrainerLayoutOf).
  const bool replicas_given =
      cfg.trainer.contains("replicas") ||
      std::any_of(ps.params.begin(), ps.params.end(),
                  [](const ParamEntry& e) { return e.parameter.name == "replicas"; });
  // Only for a new sweep: `sweep train` sets its own layout (--threads, --set replicas=...)
  // after this, and a stored sweep is taken as it was recorded.
  if (!replicas_given && ps.use == ConfigUse::kSweep) shared->merged.replicas = cfg.trial.slots;
  if (Status v = trainer::Validate(shared->merged); !v.ok()) {
    const std::string msg = "the options every trial shares do not go together: " + v.message();
    return table != nullptr ? c.Error(*table, "trainer", msg) : c.FileError(msg);
  }
  return Status::Ok();
}

// The trainer's metric: val_acc (max) by default, one the trainer reports, and a validation
// split (or a test set) to measure it on.
Status CheckTrainerMetric(const Checker& c, ParseState* ps, const toml::table* table,
                          const trainer::TrainOptions& merged) {
  std::optional<std::string>& metric = ps->metric;
  const toml::node* metric_node = ps->metric_node;
  if (!metric) metric = "val_acc", ps->mode = ps->mode.value_or("max");
  const auto names = executor::TrialMetricNames("trainer");
  if (std::find(names.begin(), names.end(), *metric) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    std::string msg = "trainer trials never report '" + *metric + "'; they report " + list;
    std::string hint = DidYouMean(*metric, names);
    if (!hint.empty()) msg += " (did you mean '" + hint + "'?)";
    return c.Error(*metric_node, "sweep.metric", msg);
  }
  // (`sweep train` runs one trial and ranks nothing: it may train on every sample.)
  const bool needs_val = !ps->one_trial && metric->rfind("val_", 0) == 0;
  if (needs_val && merged.validation_fraction <= 0) {
    if (metric_node != nullptr) {
      return c.Error(*metric_node, "sweep.metric",
                     "'" + *metric +
                         "' needs a validation split; set trainer.validation_fraction "
                         "> 0");
    }
    // The metric is the default one: point at the 0 that leaves nothing to measure it on.
    const toml::node* zero = table != nullptr ? table->get("validation_fraction") : nullptr;
    std::string zero_key = "trainer.validation_fraction";
    for (const ParamEntry& e : ps->params) {
      if (e.parameter.name == "validation_fraction") {
        zero = e.node;
        zero_key = "parameters.validation_fraction";
      }
    }
    const std::string msg =
        "0 leaves no validation split to measure the sweep's metric, '" + *metric +
        "' (the default), on; keep it > 0, or set sweep.metric and sweep.mode (e.g. "
        "\"train_loss\" and \"min\")";
    return zero != nullptr ? c.Error(*zero, zero_key, msg) : c.FileError(msg);
  }
  // A varied validation_fraction must give every trial a split to measure the metric on.
  for (const ParamEntry& e : ps->params) {
    if (!needs_val || e.parameter.name != "validation_fraction") continue;
    const auto& d = e.parameter.distribution;
    const bool listed = d.kind == search::Distribution::Kind::kCategorical ||
                        d.kind == search::Distribution::Kind::kConstant;
    bool zero = !listed && d.min <= 0;
    for (const json& v : d.values) zero = zero || (v.is_number() && v.get<double>() <= 0);
    if (zero) {
      return c.Error(*e.node, "parameters.validation_fraction",
                     "a trial with 0 has no validation split to measure '" + *metric +
                         "' on; keep every value > 0");
    }
  }
  if (*metric == "test_acc" && merged.dataset.test_images.empty()) {
    return c.Error(*metric_node, "sweep.metric", "'test_acc' needs a test set in trainer.dataset");
  }
  return Status::Ok();
}

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

}  // namespace

// Rules across a trainer's options (nesterov needs momentum > 0, a sample of each batch per
// replica) on the trials the sweep will run, drawn as it draws them (up to 10,000): a
// combination that breaks one would fail its trial when it starts. [trainer] and the constant
// parameters were checked together already; this finds what a varied value does with them, or
// two varied values with each other.
Status CheckTrainerTrials(const Checker& c, const SweepConfig& cfg, const toml::node* where) {
  trainer::TrainOptions shared;
  shared.dataset.train_images = shared.dataset.train_labels = "-";  // checked on its own
  for (const auto& [key, value] : cfg.trainer.items()) {
    if (key != "dataset") SWEEP_RETURN_IF_ERROR(trainer::ApplyOption(&shared, key, value));
  }
  // The dataset as given, when it reads: a CNN's stages are checked against its images' shape.
  if (cfg.trainer.contains("dataset")) {
    trainer::TrainOptions with_data = shared;
    if (trainer::ApplyOption(&with_data, "dataset", cfg.trainer["dataset"]).ok()) {
      shared.dataset = with_data.dataset;
    }
  }
  // A trial's replicas are its slots unless the config says otherwise (see TrainerLayoutOf).
  if (!cfg.trainer.contains("replicas")) shared.replicas = cfg.trial.slots;
  SWEEP_ASSIGN_OR_RETURN(std::unique_ptr<search::Sampler> sampler, MakeSampler(cfg));
  const int64_t n = std::min<int64_t>(cfg.sweep.max_trials, 10000);
  for (int64_t i = 0; i < n; ++i) {
    std::optional<json> params = sampler->Sample(i);
    if (!params) break;
    trainer::TrainOptions options = shared;
    Status s;
    for (const auto& [key, value] : params->items()) {
      if (key == "dataset") continue;
      s = trainer::ApplyOption(&options, key, value);
      if (!s.ok()) break;
    }
    if (s.ok()) s = trainer::Validate(options);
    if (!s.ok()) {
      const std::string msg = "trial " + std::to_string(i) + " would fail as it starts, with " +
                              executor::Abbreviate(params->dump(), 300) + ": " + s.message();
      return where != nullptr ? c.Error(*where, "parameters", msg) : c.FileError(msg);
    }
  }
  return Status::Ok();
}

Status ParseTrainerTable(const Checker& c, ParseState* ps, SweepConfig* cfg) {
  const toml::table* table = ps->Table("trainer");
  const std::filesystem::path base = std::filesystem::absolute(cfg->path).parent_path();
  SharedOptions shared;
  if (table != nullptr) {
    SWEEP_RETURN_IF_ERROR(ParseTrainerKeys(c, *ps, *table, base, &shared, cfg));
  }
  SWEEP_RETURN_IF_ERROR(ApplyTrainerParameters(c, ps, base, &shared));
  SWEEP_RETURN_IF_ERROR(CheckSharedOptions(c, *ps, table, *cfg, &shared));
  bool epochs_vary = std::any_of(ps->params.begin(), ps->params.end(), [](const ParamEntry& e) {
    return e.parameter.name == "epochs" &&
           e.parameter.distribution.kind != search::Distribution::Kind::kConstant;
  });
  if (!epochs_vary) ps->natural_max_resource = shared.merged.epochs;
  return CheckTrainerMetric(c, ps, table, shared.merged);
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

Status CheckCommandTrial(const Checker& c, const ParseState& ps, const SweepConfig& cfg) {
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

}  // namespace config_internal

Status CheckDatasetHere(const json& value) {
  trainer::TrainOptions scratch;
  SWEEP_RETURN_IF_ERROR(trainer::ApplyOption(&scratch, "dataset", value));
  const config_internal::DatasetProblem p = config_internal::DatasetFilesProblem(scratch.dataset);
  if (p.why.empty()) return Status::Ok();
  return Status::InvalidArgument((p.field.empty() ? "" : p.field + ": ") + p.why);
}

}  // namespace sweep
