// Config loading: TOML text -> validated SweepConfig.
// toml++ exceptions stop here; every refusal is an InvalidArgument whose message begins with
// "file:line:column: " and names the key. Validation that needs other libraries (trainer option
// types, function parameter names, search distributions) asks those libraries, so the rules
// live in one place.
#include "sweep/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "executor/command.h"
#include "executor/functions.h"
#include "executor/trial.h"
#include "trainer/trainer.h"

namespace sweep {

using nlohmann::json;

std::string_view ToString(TrialKind kind) {
  switch (kind) {
    case TrialKind::kTrainer:
      return "trainer";
    case TrialKind::kFunction:
      return "function";
    case TrialKind::kCommand:
      return "command";
  }
  return "trainer";
}

// ---- small helpers ----

std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      }
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    size_t d = distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // What other tools (PyTorch, Keras, Optuna examples) call our trainer's keys: a word near one
  // of those names points to ours, where ours is a candidate.
  static const std::pair<std::string_view, std::string_view> kOtherNames[] = {
      {"learning_rate", "lr"},
      {"batch", "batch_size"},
      {"hidden_sizes", "hidden"},
      {"hidden_layers", "hidden"},
      {"layers", "hidden"},
      {"num_epochs", "epochs"},
      {"n_epochs", "epochs"},
      {"max_epochs", "epochs"},
      {"optim", "optimizer"},
      {"wd", "weight_decay"},
      {"warmup", "warmup_epochs"},
      {"act", "activation"},
      {"scheduler", "lr_schedule"},
      {"lr_scheduler", "lr_schedule"},
      {"dropout_rate", "dropout"},
      {"val_fraction", "validation_fraction"},
      // Optuna's words, for a config written by its users.
      {"low", "min"},
      {"high", "max"},
      {"choices", "values"},
      {"direction", "mode"},
      {"n_trials", "max_trials"},
      {"timeout", "time_budget"},
      {"int", "int_uniform"},
      {"float", "uniform"},
      {"sampler", "algorithm"},
      {"pruner", "early_stopping"},
      {"maximize", "max"},
      {"minimize", "min"},
  };
  for (const auto& [other, ours] : kOtherNames) {
    if (std::find(candidates.begin(), candidates.end(), ours) == candidates.end()) continue;
    const size_t d = distance(word, other);
    if (d < best_d && d <= other.size() / 4) {
      best_d = d;
      best = std::string(ours);
    }
  }
  return best;
}

Result<std::unique_ptr<search::Sampler>> MakeSampler(const SweepConfig& cfg) {
  if (cfg.algorithm == "grid") return search::MakeGridSampler(cfg.space);
  // TPE's first trials are exactly these; the coordinator asks TPE for the rest.
  return search::MakeRandomSampler(cfg.space, cfg.seed);
}

std::optional<double> ParseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
      ++i;
    if (i == start) return std::nullopt;
    // The whole token is the number: "1.2.3" is not 1.2.
    const std::string token(text.substr(start, i - start));
    char* end = nullptr;
    const double number = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size()) return std::nullopt;
    double unit = 1;
    if (i < text.size()) {
      char u = text[i++];
      if (u == 'h') {
        unit = 3600;
      } else if (u == 'm') {
        unit = 60;
      } else if (u == 's') {
        unit = 1;
      } else if (u == 'd') {
        unit = 86400;
      } else {
        return std::nullopt;
      }
    } else if (any) {
      return std::nullopt;  // "1h30" is ambiguous
    }
    total += number * unit;
    any = true;
  }
  if (!std::isfinite(total)) return std::nullopt;
  return total;
}

bool IsValidSweepName(std::string_view name) {
  return !name.empty() && name.size() <= 128 && name != "." && name != ".." && name[0] != '-' &&
         std::all_of(name.begin(), name.end(), [](char ch) {
           return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                  ch == '.';
         });
}

Status CheckTrainerOption(std::string_view key, const json& value) {
  trainer::TrainOptions scratch;
  // A stand-in dataset, so that checking one option does not trip over the absent others.
  scratch.dataset.train_images = scratch.dataset.train_labels = "-";
  Status s = trainer::ApplyOption(&scratch, key, value);
  if (s.ok()) s = trainer::Validate(scratch, trainer::ValidateScope::kEachOption);
  return s;
}

std::string FormatNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

namespace {

// Converts a TOML node to JSON; dates and times become strings.
json ToJson(const toml::node& node) {
  if (auto* t = node.as_table()) {
    json out = json::object();
    for (auto&& [k, v] : *t) out[std::string(k.str())] = ToJson(v);
    return out;
  }
  if (auto* a = node.as_array()) {
    json out = json::array();
    for (auto&& v : *a) out.push_back(ToJson(v));
    return out;
  }
  if (auto v = node.value_exact<int64_t>()) return *v;
  if (auto v = node.value_exact<double>()) return *v;
  if (auto v = node.value_exact<bool>()) return *v;
  if (auto v = node.value_exact<std::string>()) return *v;
  std::ostringstream os;
  node.visit([&](auto&& n) { os << n; });
  return os.str();
}

// The first nan or inf in `node` (itself, or inside its arrays and tables), else null: JSON, in
// which parameters are stored and passed on, has no such numbers.
const toml::node* NonFinite(const toml::node& node) {
  if (auto v = node.value_exact<double>()) return std::isfinite(*v) ? nullptr : &node;
  if (auto* a = node.as_array()) {
    for (auto&& v : *a) {
      if (const toml::node* bad = NonFinite(v)) return bad;
    }
  }
  if (auto* t = node.as_table()) {
    for (auto&& [k, v] : *t) {
      if (const toml::node* bad = NonFinite(v)) return bad;
    }
  }
  return nullptr;
}

std::string TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date/time";
  }
}

// Builds the "file:line:column: key: message" errors and does the common checks.
class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}

  // "file:line:column" of a node.
  std::string Where(const toml::source_region& where) const {
    return path_ + ":" + std::to_string(where.begin.line) + ":" +
           std::to_string(where.begin.column);
  }
  Status Error(const toml::source_region& where, std::string_view key,
               std::string_view message) const {
    std::string out = Where(where) + ": ";
    if (!key.empty()) out += std::string(key) + ": ";
    out += message;
    return Status::InvalidArgument(out);
  }
  Status Error(const toml::node& node, std::string_view key, std::string_view message) const {
    return Error(node.source(), key, message);
  }
  Status FileError(std::string_view message) const {
    return Status::InvalidArgument(path_ + ": " + std::string(message));
  }

  // Refuses keys of `table` not in `known`, with a suggestion.
  Status KnownKeys(const toml::table& table, std::string_view section,
                   const std::vector<std::string>& known) const {
    for (auto&& [k, v] : table) {
      std::string key(k.str());
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string hint = DidYouMean(key, known);
      if (section.empty()) {  // the top level holds tables
        std::string msg = "unknown table [" + key + "]";
        if (!hint.empty()) msg += "; did you mean [" + hint + "]?";
        return Error(k.source(), key, msg);
      }
      std::string msg = "unknown key '" + key + "' in " + std::string(section);
      if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
      return Error(k.source(), Dotted(section, key), msg);
    }
    return Status::Ok();
  }

  static std::string Dotted(std::string_view section, std::string_view key) {
    std::string s(section);
    if (!s.empty() && s.front() == '[') s = s.substr(1, s.size() - 2);
    return s.empty() ? std::string(key) : s + "." + std::string(key);
  }

  Result<std::string> String(const toml::node& node, std::string_view key) const {
    if (auto v = node.value_exact<std::string>()) return *v;
    return Error(node, key, "expected a string, got " + TypeName(node));
  }
  Result<int64_t> Integer(const toml::node& node, std::string_view key, int64_t min,
                          int64_t max) const {
    auto v = node.value_exact<int64_t>();
    if (!v) return Error(node, key, "expected an integer, got " + TypeName(node));
    if (*v < min || *v > max) {
      return Error(node, key,
                   "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                       " (got " + std::to_string(*v) + ")");
    }
    return *v;
  }
  Result<double> Number(const toml::node& node, std::string_view key) const {
    if (auto v = node.value_exact<int64_t>()) return static_cast<double>(*v);
    if (auto v = node.value_exact<double>()) {
      if (!std::isfinite(*v)) return Error(node, key, "must be a finite number");
      return *v;
    }
    return Error(node, key, "expected a number, got " + TypeName(node));
  }
  Result<std::string> OneOf(const toml::node& node, std::string_view key,
                            const std::vector<std::string>& allowed) const {
    SWEEP_ASSIGN_OR_RETURN(std::string v, String(node, key));
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return v;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + ("\"" + a + "\"");
    std::string msg = "unknown value \"" + v + "\"; expected one of " + list;
    std::string hint = DidYouMean(v, allowed);
    if (!hint.empty()) msg += " (did you mean \"" + hint + "\"?)";
    return Error(node, key, msg);
  }

 private:
  std::string path_;
};

const std::vector<std::string> kTopLevel = {"sweep",      "search",   "early_stopping",
                                            "parameters", "trial",    "trainer",
                                            "function",   "executor", "store"};

// A parameter as written, with where it was written, before the trial kind is known.
struct ParamEntry {
  search::Parameter parameter;
  const toml::node* node = nullptr;
  toml::source_region key_source;
};

Result<search::Parameter> ParseParameter(const Checker& c, const std::string& name,
                                         const toml::node& node) {
  const std::string key = "parameters." + name;
  search::Parameter p;
  p.name = name;
  auto finite = [&](const toml::node& given, const std::string& at) -> Status {
    if (const toml::node* bad = NonFinite(given)) {
      return c.Error(*bad, at, "nan and inf are not values a trial can be given (JSON has none)");
    }
    return Status::Ok();
  };
  const toml::table* t = node.as_table();
  if (t == nullptr) {
    SWEEP_RETURN_IF_ERROR(finite(node, key));
    p.distribution.kind = search::Distribution::Kind::kConstant;
    p.distribution.values = {ToJson(node)};
    return p;
  }
  SWEEP_RETURN_IF_ERROR(
      c.KnownKeys(*t, key, {"distribution", "min", "max", "step", "values", "when"}));
  if (const toml::node* when = t->get("when")) {
    // when = { parent = value } or { parent = [value, ...] }: active only for those values.
    const toml::table* w = when->as_table();
    if (w == nullptr || w->size() != 1) {
      return c.Error(*when, key + ".when",
                     "expected one parent parameter and its values, e.g. when = { optimizer = "
                     "[\"sgd\"] }");
    }
    SWEEP_RETURN_IF_ERROR(finite(*when, key + ".when"));
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
    p.condition = std::move(cond);
  }
  const toml::node* dist = t->get("distribution");
  const toml::node* values = t->get("values");
  if (values != nullptr) {
    if (dist != nullptr) {
      SWEEP_ASSIGN_OR_RETURN(std::string d, c.String(*dist, key + ".distribution"));
      if (d != "categorical" && d != "values") {
        // A distribution samples from min..max; `values` lists the choices: one or the other.
        return c.Error(*dist, key + ".distribution",
                       "\"" + d +
                           "\" with `values`: give either `values = [...]` (the choices) or " +
                           "a distribution with `min` and `max`, not both");
      }
    }
    for (const char* k : {"min", "max", "step"}) {
      if (const toml::node* extra = t->get(k)) {
        return c.Error(*extra, key + "." + k,
                       std::string("'values' lists its choices; ") + k + " does not apply");
      }
    }
    const toml::array* a = values->as_array();
    if (a == nullptr) {
      return c.Error(*values, key + ".values", "expected an array, got " + TypeName(*values));
    }
    if (a->empty()) return c.Error(*values, key + ".values", "empty `values`: give at least one");
    SWEEP_RETURN_IF_ERROR(finite(*values, key + ".values"));
    p.distribution.kind = search::Distribution::Kind::kCategorical;
    for (auto&& v : *a) p.distribution.values.push_back(ToJson(v));
    return p;
  }
  if (dist == nullptr) {
    return c.Error(node, key,
                   "expected a value, `{ values = [...] }` or `{ distribution = \"uniform\", min "
                   "= ..., max = ... }`");
  }
  SWEEP_ASSIGN_OR_RETURN(std::string d, c.OneOf(*dist, key + ".distribution",
                                                {"uniform", "log_uniform", "int_uniform",
                                                 "log_int_uniform", "categorical"}));
  if (d == "categorical") return c.Error(*dist, key, "a categorical parameter needs `values`");
  using Kind = search::Distribution::Kind;
  p.distribution.kind = d == "uniform"       ? Kind::kUniform
                        : d == "log_uniform" ? Kind::kLogUniform
                        : d == "int_uniform" ? Kind::kIntUniform
                                             : Kind::kLogIntUniform;
  const toml::node* min = t->get("min");
  const toml::node* max = t->get("max");
  if (min == nullptr) return c.Error(node, key, d + " needs `min`");
  if (max == nullptr) return c.Error(node, key, d + " needs `max`");
  SWEEP_ASSIGN_OR_RETURN(p.distribution.min, c.Number(*min, key + ".min"));
  SWEEP_ASSIGN_OR_RETURN(p.distribution.max, c.Number(*max, key + ".max"));
  bool integral = d == "int_uniform" || d == "log_int_uniform";
  if (integral) {
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
  }
  if (p.distribution.min > p.distribution.max) {
    return c.Error(*min, key,
                   "min > max (" + FormatNumber(p.distribution.min) + " > " +
                       FormatNumber(p.distribution.max) + ")");
  }
  if ((d == "log_uniform" || d == "log_int_uniform") && p.distribution.min <= 0) {
    return c.Error(*min, key + ".min",
                   d + " needs min > 0 (got " + FormatNumber(p.distribution.min) + ")");
  }
  if (const toml::node* step = t->get("step")) {
    if (d != "uniform" && d != "int_uniform") {
      return c.Error(*step, key + ".step",
                     d + " takes no step (its values are spaced by ratio, not difference); a "
                         "step applies to uniform and int_uniform");
    }
    if (integral && !step->is_integer()) {
      return c.Error(*step, key + ".step", d + " needs an integer step, got " + TypeName(*step));
    }
    SWEEP_ASSIGN_OR_RETURN(p.distribution.step, c.Number(*step, key + ".step"));
    if (!(p.distribution.step > 0)) {
      return c.Error(*step, key + ".step",
                     "step must be > 0 (got " + FormatNumber(p.distribution.step) + ")");
    }
    Status s = search::Validate(p);
    if (!s.ok()) return c.Error(*step, "", "parameters." + s.message());
  }
  Status s = search::Validate(p);
  if (!s.ok()) return c.Error(node, "", "parameters." + s.message());
  return p;
}

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
  if (!cfg.trainer.contains("replicas")) shared.replicas = cfg.gpus;
  SWEEP_ASSIGN_OR_RETURN(std::unique_ptr<search::Sampler> sampler, MakeSampler(cfg));
  const int64_t n = std::min<int64_t>(cfg.max_trials, 10000);
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

// True when (line, column) is the end of a line: where a string that lacks its closing quote
// runs into the newline.
bool AtLineEnd(std::string_view text, const toml::source_position& at) {
  size_t i = 0;
  for (toml::source_index line = 1; line < at.line && i < text.size(); ++i) {
    if (text[i] == '\n') ++line;
  }
  i += at.column - 1;
  return i >= text.size() || text[i] == '\n' || text[i] == '\r';
}

// Finds a byte >= 0x80 outside strings and comments (where TOML forbids it).
Status CheckNonAsciiPlacement(const Checker& c, std::string_view text) {
  if (text.starts_with("\xff\xfe") || text.starts_with("\xfe\xff")) {
    return c.Error(toml::source_region{{1, 1}, {1, 1}, nullptr}, "",
                   "the file is UTF-16; save it as UTF-8");
  }
  enum class In { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral };
  In in = In::kCode;
  int line = 1, column = 1;
  auto advance = [&](size_t& i, size_t n) {  // skips n - 1 more ASCII bytes of a token
    i += n - 1;
    column += static_cast<int>(n - 1);
  };
  // A UTF-8 byte order mark (some editors write one) is not content; toml++ skips it too.
  const size_t first = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  for (size_t i = first; i < text.size(); ++i) {
    const char ch = text[i];
    auto starts = [&](std::string_view token) { return text.substr(i, token.size()) == token; };
    switch (in) {
      case In::kCode:
        if (ch == '#') {
          in = In::kComment;
        } else if (starts("\"\"\"")) {
          in = In::kMultiBasic;
          advance(i, 3);
        } else if (starts("'''")) {
          in = In::kMultiLiteral;
          advance(i, 3);
        } else if (ch == '"') {
          in = In::kBasic;
        } else if (ch == '\'') {
          in = In::kLiteral;
        } else if (static_cast<unsigned char>(ch) >= 0x80) {
          toml::source_region where;
          where.begin = {static_cast<toml::source_index>(line),
                         static_cast<toml::source_index>(column)};
          return c.Error(where, "",
                         "non-ASCII character outside a string (TOML allows it only in quoted "
                         "strings and comments; quote a key that needs it: \"clé\" = ...)");
        }
        break;
      case In::kComment:
        if (ch == '\n') in = In::kCode;
        break;
      case In::kBasic:
        if (ch == '\\') {
          advance(i, 2);
        } else if (ch == '"' || ch == '\n') {
          in = In::kCode;  // an unterminated string is the parser's to report
        }
        break;
      case In::kLiteral:
        if (ch == '\'' || ch == '\n') in = In::kCode;
        break;
      case In::kMultiBasic:
        if (ch == '\\') {
          // After a backslash toml++ 3.3 skips whitespace with a check that is undefined
          // behaviour on non-ASCII: refuse what would reach it (valid TOML only after a
          // line-ending backslash, and rare).
          size_t j = i + 1;
          while (j < text.size() &&
                 (text[j] == ' ' || text[j] == '\t' || text[j] == '\r' || text[j] == '\n')) {
            ++j;
          }
          if (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x80) {
            toml::source_region where;
            where.begin = {static_cast<toml::source_index>(line),
                           static_cast<toml::source_index>(column)};
            return c.Error(where, "",
                           "a non-ASCII character right after a backslash in a multi-line "
                           "string cannot be read; write it as \\uXXXX or move it before the "
                           "backslash");
          }
          advance(i, 2);
        } else if (starts("\"\"\"")) {
          in = In::kCode;
          advance(i, 3);
        }
        break;
      case In::kMultiLiteral:
        if (starts("'''")) {
          in = In::kCode;
          advance(i, 3);
        }
        break;
    }
    if (i < text.size() && text[i] == '\n') {
      ++line;
      column = 1;
    } else if (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;  // columns count characters, not UTF-8 continuation bytes
    }
  }
  return Status::Ok();
}

// "val_acc >= 0.9" -> {val_acc, >=, 0.9}.
std::optional<SweepConfig::Target> ParseTarget(std::string_view text) {
  SweepConfig::Target t;
  size_t op = text.find_first_of("<>");
  if (op == std::string_view::npos) return std::nullopt;
  auto trim = [](std::string_view v) {
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
    return v;
  };
  t.metric = std::string(trim(text.substr(0, op)));
  size_t rest = op + 1;
  t.op = std::string(1, text[op]);
  if (rest < text.size() && text[rest] == '=') {
    t.op += '=';
    ++rest;
  }
  std::string number(trim(text.substr(rest)));
  char* end = nullptr;
  t.value = std::strtod(number.c_str(), &end);
  // A metric name holds no space or comparison sign: "score => 1" is a typo, not metric
  // "score =".
  if (t.metric.empty() || t.metric.find_first_of(" \t=!<>") != std::string::npos ||
      number.empty() || end != number.c_str() + number.size() || !std::isfinite(t.value)) {
    return std::nullopt;
  }
  return t;
}

// Fills in what [early_stopping] leaves to the rest of the config, and validates it.
Status FinishEarlyStopping(const Checker& c, const toml::table* es,
                           const toml::node* max_resource_node, std::optional<double> natural_max,
                           bool stored, SweepConfig* cfg) {
  auto& sc = cfg->early_stopping;
  sc.maximize = cfg->maximize;
  sc.metric = cfg->metric;
  sc.grid_order = cfg->algorithm == "grid";
  if (sc.algorithm == search::EarlyStopping::kNone) return Status::Ok();
  const toml::node& where = *es;  // an algorithm other than none was set in [early_stopping]
  if (cfg->kind == TrialKind::kFunction && cfg->function.value("steps", int64_t{0}) < 2) {
    return c.Error(where, "early_stopping",
                   "early stopping needs trials that report a curve: set function.steps");
  }
  // The trainer measures test_acc once, after its last epoch: no rung or median ever sees it.
  if (cfg->kind == TrialKind::kTrainer && cfg->metric == "test_acc") {
    return c.Error(where, "early_stopping",
                   "early stopping compares trials on a metric they report every epoch; the "
                   "trainer reports 'test_acc' only at the end: use metric = \"val_acc\" or "
                   "\"val_loss\"");
  }
  const bool rungs = sc.algorithm != search::EarlyStopping::kMedian;
  if (!rungs && natural_max && static_cast<double>(sc.grace_period) >= *natural_max && !stored) {
    const toml::node* grace = es->get("grace_period");
    return c.Error(grace != nullptr ? *grace : where, "early_stopping.grace_period",
                   "is " + std::to_string(sc.grace_period) + " but every trial runs " +
                       FormatNumber(*natural_max) +
                       (cfg->kind == TrialKind::kTrainer ? " epochs" : " steps") +
                       ", one report each: the median rule could never stop one");
  }
  if (rungs) {
    if (max_resource_node == nullptr) {
      if (!natural_max) {
        return c.Error(where, "early_stopping.max_resource",
                       cfg->kind == TrialKind::kCommand
                           ? "set it: the epochs (or steps) a command trial runs are not known "
                             "in advance"
                           : "set it: the epochs of a trial vary, so it cannot be taken from them");
      }
      sc.max_resource = *natural_max;
      // max_resource was not written: the key to blame is min_resource, if it was.
      const toml::node* min_node = es->get("min_resource");
      if (min_node != nullptr && sc.min_resource >= sc.max_resource) {
        return c.Error(*min_node, "early_stopping.min_resource",
                       "is " + FormatNumber(sc.min_resource) + " but the trials run to " +
                           FormatNumber(sc.max_resource) +
                           " (max_resource defaults to that): the first rung must come before");
      }
    } else if (cfg->kind != TrialKind::kCommand && sc.max_resource != std::floor(sc.max_resource)) {
      return c.Error(*max_resource_node, "early_stopping.max_resource",
                     "is " + FormatNumber(sc.max_resource) + " but " +
                         std::string(ToString(cfg->kind)) + " trials report whole " +
                         (cfg->kind == TrialKind::kTrainer ? "epochs" : "steps") +
                         ": give a whole number");
    } else if (natural_max && sc.max_resource > *natural_max) {
      return c.Error(*max_resource_node, "early_stopping.max_resource",
                     "is " + FormatNumber(sc.max_resource) + " but every trial stops at " +
                         FormatNumber(*natural_max) + "; rungs above that would never be reached");
    }
  }
  Status s = search::Validate(sc);
  if (!s.ok()) {
    // The message starts with the key it is about; point at that key when it was written.
    for (auto&& [k, v] : *es) {
      if (s.message().rfind("early_stopping." + std::string(k.str()), 0) == 0) {
        return c.Error(v, "", s.message());
      }
    }
    return c.Error(where, "", s.message());
  }
  return Status::Ok();
}

}  // namespace

Status CheckDatasetHere(const json& value) {
  trainer::TrainOptions scratch;
  SWEEP_RETURN_IF_ERROR(trainer::ApplyOption(&scratch, "dataset", value));
  const DatasetProblem p = DatasetFilesProblem(scratch.dataset);
  if (p.why.empty()) return Status::Ok();
  return Status::InvalidArgument((p.field.empty() ? "" : p.field + ": ") + p.why);
}

bool SweepConfig::Target::Reached(double v) const {
  if (op == ">=") return v >= value;
  if (op == ">") return v > value;
  if (op == "<=") return v <= value;
  return v < value;
}

std::string SweepConfig::Target::ToString() const {
  return metric + " " + op + " " + FormatNumber(value);
}

// [search]'s TPE knobs (see search/tpe.h): only with algorithm = "tpe", where a knob set for
// another algorithm would silently do nothing.
Status ParseTpeKnobs(const Checker& c, const toml::table& search, SweepConfig* cfg) {
  search::TpeOptions& o = cfg->tpe;
  const std::vector<std::pair<std::string, const toml::node*>> knobs = {
      {"n_startup_trials", search.get("n_startup_trials")},
      {"n_ei_candidates", search.get("n_ei_candidates")},
      {"gamma", search.get("gamma")},
      {"gamma_max", search.get("gamma_max")},
      {"prior_weight", search.get("prior_weight")},
      {"multivariate", search.get("multivariate")},
      {"consider_endpoints", search.get("consider_endpoints")},
      {"magic_clip", search.get("magic_clip")}};
  for (const auto& [name, node] : knobs) {
    if (node == nullptr) continue;
    const std::string key = "search." + name;
    if (cfg->algorithm != "tpe") {
      return c.Error(*node, key,
                     "only for algorithm = \"tpe\" (this search is \"" + cfg->algorithm + "\")");
    }
    if (name == "multivariate" || name == "consider_endpoints" || name == "magic_clip") {
      auto v = node->value_exact<bool>();
      if (!v) return c.Error(*node, key, "expected true or false, got " + TypeName(*node));
      (name == "multivariate"         ? o.multivariate
       : name == "consider_endpoints" ? o.consider_endpoints
                                      : o.magic_clip) = *v;
    } else if (name == "gamma" || name == "prior_weight") {
      SWEEP_ASSIGN_OR_RETURN(double v, c.Number(*node, key));
      (name == "gamma" ? o.gamma : o.prior_weight) = v;
    } else {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*node, key, INT64_MIN, INT64_MAX));
      (name == "n_startup_trials"  ? o.n_startup_trials
       : name == "n_ei_candidates" ? o.n_ei_candidates
                                   : o.gamma_max) = v;
    }
  }
  if (Status s = search::Validate(o); !s.ok()) {
    // "search.gamma: must be in (0, 1] (got 0)": said at the key's place in the file.
    const std::string& m = s.message();
    const size_t colon = m.find(": ");
    const std::string key = colon == std::string::npos ? "" : m.substr(0, colon);
    const toml::node* at = key.size() > 7 ? search.get(key.substr(7)) : nullptr;
    if (at != nullptr) return c.Error(*at, key, m.substr(colon + 2));
    return c.Error(search, "search", m);
  }
  return Status::Ok();
}

Result<SweepConfig> ParseConfig(std::string_view text, const std::string& path, ConfigUse use) {
  Checker c(path);
  // TOML allows non-ASCII only inside strings and comments; refusing it elsewhere here also keeps
  // such bytes away from a toml++ 3.3 code path that is undefined behaviour on them.
  SWEEP_RETURN_IF_ERROR(CheckNonAsciiPlacement(c, text));
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::string what(e.description());
    if (what.find("unescaped control characters") != std::string::npos &&
        AtLineEnd(text, e.source().begin)) {
      what = "unterminated string (a closing quote is missing): " + what;
    }
    return c.Error(e.source(), "", what);
  }

  SweepConfig cfg;
  cfg.path = path;
  cfg.text = std::string(text);
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(root, "", kTopLevel));
  for (auto&& [k, v] : root) {
    if (!v.is_table()) {
      return c.Error(k.source(), std::string(k.str()),
                     "expected a table ([" + std::string(k.str()) + "]), got " + TypeName(v));
    }
  }
  auto table = [&](const char* name) -> const toml::table* { return root[name].as_table(); };

  // ---- [sweep] ----
  const toml::table* sweep = table("sweep");
  if (sweep == nullptr) return c.FileError("missing [sweep] table (it needs at least `name`)");
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(*sweep, "[sweep]",
                                    {"name", "metric", "mode", "max_trials", "max_concurrent",
                                     "time_budget", "seed", "stop_when"}));
  const toml::node* name = sweep->get("name");
  if (name == nullptr) return c.Error(*sweep, "sweep.name", "missing: every sweep needs a name");
  SWEEP_ASSIGN_OR_RETURN(cfg.name, c.String(*name, "sweep.name"));
  // A sweep stored before names could not start with '-' still opens.
  const bool stored_dash_name = (use == ConfigUse::kView || use == ConfigUse::kResume) &&
                                cfg.name.starts_with('-') &&
                                IsValidSweepName("_" + cfg.name.substr(1));
  if (!IsValidSweepName(cfg.name) && !stored_dash_name) {
    return c.Error(*name, "sweep.name",
                   std::string(kSweepNameRule) + " (got \"" + cfg.name + "\")");
  }
  std::optional<std::string> metric, mode;
  const toml::node* metric_node = sweep->get("metric");
  if (metric_node != nullptr) {
    SWEEP_ASSIGN_OR_RETURN(metric, c.String(*metric_node, "sweep.metric"));
    if (metric->empty()) {
      return c.Error(*metric_node, "sweep.metric", "empty: name the metric to optimise");
    }
  }
  if (const toml::node* n = sweep->get("mode")) {
    SWEEP_ASSIGN_OR_RETURN(mode, c.OneOf(*n, "sweep.mode", {"max", "min"}));
  }
  std::optional<int64_t> max_trials;
  const toml::node* max_trials_node = sweep->get("max_trials");
  if (max_trials_node != nullptr) {
    SWEEP_ASSIGN_OR_RETURN(max_trials,
                           c.Integer(*max_trials_node, "sweep.max_trials", 1, int64_t{1} << 40));
  }
  if (const toml::node* n = sweep->get("max_concurrent")) {
    SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "sweep.max_concurrent", 1, 1 << 20));
    cfg.max_concurrent = static_cast<int>(v);
  }
  if (const toml::node* n = sweep->get("time_budget")) {
    if (auto s = n->value_exact<std::string>()) {
      cfg.time_budget_s = ParseDuration(*s);
      if (!cfg.time_budget_s) {
        return c.Error(*n, "sweep.time_budget",
                       "cannot read \"" + *s +
                           "\" as a duration; write e.g. \"2h\", \"30m\", "
                           "\"1h30m\" or a number of seconds");
      }
    } else {
      SWEEP_ASSIGN_OR_RETURN(double secs, c.Number(*n, "sweep.time_budget"));
      cfg.time_budget_s = secs;
    }
    if (*cfg.time_budget_s <= 0) return c.Error(*n, "sweep.time_budget", "must be > 0");
  }
  if (const toml::node* n = sweep->get("seed")) {
    SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "sweep.seed", 0, INT64_MAX));
    cfg.seed = static_cast<uint64_t>(v);
  }

  // ---- [search] ----
  const toml::node* algorithm_node = nullptr;
  const toml::table* search_table = table("search");
  if (search_table != nullptr) {
    SWEEP_RETURN_IF_ERROR(
        c.KnownKeys(*search_table, "[search]",
                    {"algorithm", "n_startup_trials", "n_ei_candidates", "gamma", "gamma_max",
                     "prior_weight", "multivariate", "consider_endpoints", "magic_clip"}));
    if ((algorithm_node = search_table->get("algorithm"))) {
      SWEEP_ASSIGN_OR_RETURN(
          cfg.algorithm, c.OneOf(*algorithm_node, "search.algorithm", {"grid", "random", "tpe"}));
    }
    SWEEP_RETURN_IF_ERROR(ParseTpeKnobs(c, *search_table, &cfg));
  }

  // ---- [early_stopping] ----
  const toml::table* es = table("early_stopping");
  const toml::node* max_resource_node = nullptr;
  if (es != nullptr) {
    SWEEP_RETURN_IF_ERROR(c.KnownKeys(*es, "[early_stopping]",
                                      {"algorithm", "min_resource", "max_resource",
                                       "reduction_factor", "grace_period", "min_trials"}));
    auto& sc = cfg.early_stopping;
    if (const toml::node* n = es->get("algorithm")) {
      SWEEP_ASSIGN_OR_RETURN(std::string a, c.OneOf(*n, "early_stopping.algorithm",
                                                    {"none", "median", "asha", "hyperband"}));
      sc.algorithm = *search::EarlyStoppingFromName(a);
    }
    const bool rungs = sc.algorithm == search::EarlyStopping::kAsha ||
                       sc.algorithm == search::EarlyStopping::kHyperband;
    const bool median = sc.algorithm == search::EarlyStopping::kMedian;
    // Keys the chosen algorithm ignores are refused: a setting that silently does nothing misleads.
    const std::pair<std::string_view, bool> applies[] = {{"min_resource", rungs},
                                                         {"max_resource", rungs},
                                                         {"reduction_factor", rungs},
                                                         {"grace_period", median},
                                                         {"min_trials", median}};
    for (auto [key, ok] : applies) {
      const toml::node* n = es->get(key);
      if (n == nullptr) continue;
      std::string k = "early_stopping." + std::string(key);
      if (!ok) {
        return c.Error(*n, k,
                       "does not apply to algorithm \"" +
                           std::string(search::EarlyStoppingName(sc.algorithm)) + "\"");
      }
      if (key == "grace_period" || key == "min_trials") {
        SWEEP_ASSIGN_OR_RETURN(int64_t v,
                               c.Integer(*n, k, key == "min_trials" ? 1 : 0, int64_t{1} << 40));
        (key == "grace_period" ? sc.grace_period : sc.min_trials) = v;
      } else {
        SWEEP_ASSIGN_OR_RETURN(double v, c.Number(*n, k));
        if (key == "min_resource") sc.min_resource = v;
        if (key == "reduction_factor") sc.reduction_factor = v;
        if (key == "max_resource") {
          sc.max_resource = v;
          max_resource_node = n;
        }
      }
    }
  }

  // A duration written "90s", "5m", "1h30m" or as a number of seconds, within [lo, hi].
  auto duration = [&](const toml::node& n, const std::string& key, double lo, double hi,
                      const char* range) -> Result<double> {
    std::optional<double> secs;
    if (auto written = n.value_exact<std::string>()) {
      secs = ParseDuration(*written);
    } else if (n.is_number()) {
      secs = n.value<double>();
    }
    if (!secs || !std::isfinite(*secs) || *secs < lo || *secs > hi) {
      return c.Error(n, key, std::string("expected a duration ") + range);
    }
    return *secs;
  };

  // ---- [trial] ----
  const toml::node* kind_node = nullptr;
  const toml::node* command_node = nullptr;
  const toml::node* order_node = nullptr;
  if (const toml::table* trial = table("trial")) {
    SWEEP_RETURN_IF_ERROR(
        c.KnownKeys(*trial, "[trial]",
                    {"kind", "gpus", "command", "max_retries", "max_initial_failures",
                     "heartbeat_timeout", "checkpoint_dir", "keep_checkpoints", "workdir",
                     "trials_dir", "kill_grace", "timeout", "gpu_share", "order"}));
    if (const toml::node* n = trial->get("checkpoint_dir")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.checkpoint_dir, c.String(*n, "trial.checkpoint_dir"));
    }
    if (const toml::node* n = trial->get("max_retries")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "trial.max_retries", 0, 100));
      cfg.max_retries = static_cast<int>(v);
    }
    if (const toml::node* n = trial->get("max_initial_failures")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "trial.max_initial_failures", 0, 1000000000));
      cfg.max_initial_failures = static_cast<int>(v);
    }
    if (const toml::node* n = trial->get("heartbeat_timeout")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.heartbeat_timeout_s,
                             duration(*n, "trial.heartbeat_timeout", 2, 7 * 86400,
                                      "between 2 s and 7 days, e.g. \"60s\" or \"5m\""));
    }
    if ((kind_node = trial->get("kind"))) {
      SWEEP_ASSIGN_OR_RETURN(std::string kind,
                             c.OneOf(*kind_node, "trial.kind", {"trainer", "function", "command"}));
      cfg.kind = kind == "trainer"    ? TrialKind::kTrainer
                 : kind == "function" ? TrialKind::kFunction
                                      : TrialKind::kCommand;
    }
    if (const toml::node* n = trial->get("keep_checkpoints")) {
      if (cfg.kind != TrialKind::kTrainer) {
        return c.Error(*n, "trial.keep_checkpoints",
                       "only for kind = \"trainer\" (a command trial's program keeps its own "
                       "files, in its trial directory; a function trial has none)");
      }
      if (n->is_string()) {
        if (n->value_or(std::string()) != "all") {
          return c.Error(*n, "trial.keep_checkpoints",
                         "expected \"all\" or a number of trials (the N best completed trials "
                         "keep their checkpoints)");
        }
      } else {
        SWEEP_ASSIGN_OR_RETURN(cfg.keep_checkpoints,
                               c.Integer(*n, "trial.keep_checkpoints", 0, 1'000'000));
      }
    }
    if (const toml::node* n = trial->get("checkpoint_dir"); n && cfg.kind != TrialKind::kTrainer) {
      return c.Error(*n, "trial.checkpoint_dir",
                     "only for kind = \"trainer\" (a command trial's program keeps its own "
                     "files, in its trial directory; a function trial has none)");
    }
    if (const toml::node* n = trial->get("order")) {
      order_node = n;
      SWEEP_ASSIGN_OR_RETURN(std::string order,
                             c.OneOf(*n, "trial.order", {"sampled", "longest_first"}));
      cfg.longest_first = order == "longest_first";
      if (cfg.longest_first && cfg.kind != TrialKind::kTrainer) {
        return c.Error(*n, "trial.order",
                       "\"longest_first\" ranks trials by the work their [trainer] options and "
                       "parameters imply; kind = \"" +
                           std::string(ToString(cfg.kind)) + "\" trials have no such estimate");
      }
    }
    if (const toml::node* n = trial->get("gpus")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "trial.gpus", 1, 64));
      cfg.gpus = static_cast<int>(v);
      cfg.gpus_where = c.Where(n->source());
    }
    if (const toml::node* n = trial->get("gpu_share")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "trial.gpu_share", 1, 64));
      cfg.gpu_share = static_cast<int>(v);
      if (cfg.gpu_share > 1 && cfg.gpus > 1) {
        return c.Error(*n, "trial.gpu_share",
                       "only 1-GPU trials share a GPU (this sweep has trial.gpus = " +
                           std::to_string(cfg.gpus) + ")");
      }
    }
    for (const char* key : {"command", "workdir", "trials_dir", "kill_grace", "timeout"}) {
      const toml::node* n = trial->get(key);
      if (n != nullptr && cfg.kind != TrialKind::kCommand) {
        return c.Error(*n, std::string("trial.") + key, "only for kind = \"command\"");
      }
    }
    if (const toml::node* n = trial->get("command")) {
      const toml::array* argv = n->as_array();
      if (argv == nullptr) {
        return c.Error(*n, "trial.command",
                       "expected a list of strings, e.g. [\"python3\", \"train.py\", "
                       "\"--lr={lr}\"]");
      }
      for (const toml::node& arg : *argv) {
        SWEEP_ASSIGN_OR_RETURN(std::string a, c.String(arg, "trial.command"));
        if (cfg.command.empty()) cfg.command_where = c.Where(arg.source());
        cfg.command.push_back(std::move(a));
      }
      command_node = n;
    } else if (cfg.kind == TrialKind::kCommand) {
      return c.Error(*kind_node, "trial.command",
                     "kind = \"command\" needs the program to run: command = [\"python3\", "
                     "\"train.py\", \"--lr={lr}\"]");
    }
    if (const toml::node* n = trial->get("workdir")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.workdir, c.String(*n, "trial.workdir"));
      cfg.workdir_where = c.Where(n->source());
      if (cfg.workdir.empty()) return c.Error(*n, "trial.workdir", "must not be empty");
    }
    if (const toml::node* n = trial->get("trials_dir")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.trials_dir, c.String(*n, "trial.trials_dir"));
      if (cfg.trials_dir.empty()) return c.Error(*n, "trial.trials_dir", "must not be empty");
    }
    if (const toml::node* n = trial->get("kill_grace")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.kill_grace_s, duration(*n, "trial.kill_grace", 0, 3600,
                                                        "between 0 s and 1 hour, e.g. \"10s\""));
    }
    if (const toml::node* n = trial->get("timeout")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.trial_timeout_s, duration(*n, "trial.timeout", 1, 30 * 86400,
                                                           "between 1 s and 30 days, e.g. \"2h\""));
    }
  }
  if (cfg.kind == TrialKind::kCommand) {
    // Relative paths in the config are relative to the config's folder, wherever sweep runs.
    std::filesystem::path base = std::filesystem::absolute(cfg.path).parent_path();
    cfg.workdir =
        cfg.workdir.empty() ? base.string() : (base / cfg.workdir).lexically_normal().string();
  }

  // ---- [executor], [store] ----
  if (const toml::table* ex = table("executor")) {
    SWEEP_RETURN_IF_ERROR(c.KnownKeys(*ex, "[executor]", {"cpu_slots", "agent_timeout"}));
    if (const toml::node* n = ex->get("cpu_slots")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "executor.cpu_slots", 1, 4096));
      cfg.cpu_slots = static_cast<int>(v);
    }
    if (const toml::node* n = ex->get("agent_timeout")) {
      // Agents send a heartbeat every second: the timeout must leave room for a few.
      SWEEP_ASSIGN_OR_RETURN(cfg.agent_timeout_s, duration(*n, "executor.agent_timeout", 3, 3600,
                                                           "between 3 s and 1 hour, e.g. \"30s\""));
    }
  }
  if (const toml::table* st = table("store")) {
    SWEEP_RETURN_IF_ERROR(c.KnownKeys(*st, "[store]", {"path"}));
    if (const toml::node* n = st->get("path")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.store_path, c.String(*n, "store.path"));
      if (cfg.store_path.empty()) return c.Error(*n, "store.path", "must not be empty");
    }
  }

  // ---- [parameters] ----
  std::vector<ParamEntry> params;
  if (const toml::table* ps = table("parameters")) {
    for (auto&& [k, v] : *ps) {
      SWEEP_ASSIGN_OR_RETURN(search::Parameter p, ParseParameter(c, std::string(k.str()), v));
      params.push_back({std::move(p), &v, k.source()});
    }
  }
  // toml++ keeps keys sorted; declaration order is what users expect for grid order.
  std::stable_sort(params.begin(), params.end(), [](const ParamEntry& a, const ParamEntry& b) {
    return std::pair(a.key_source.begin.line, a.key_source.begin.column) <
           std::pair(b.key_source.begin.line, b.key_source.begin.column);
  });

  // ---- the trial kind's own table ----
  const toml::table* trainer_table = table("trainer");
  const toml::table* function_table = table("function");
  if (cfg.kind != TrialKind::kTrainer && trainer_table != nullptr) {
    return c.Error(root["trainer"].node()->source(), "trainer",
                   "[trainer] applies to kind = \"trainer\" only (this sweep's trial.kind is \"" +
                       std::string(ToString(cfg.kind)) + "\")");
  }
  if (cfg.kind != TrialKind::kFunction && function_table != nullptr) {
    return c.Error(root["function"].node()->source(), "function",
                   "[function] applies to kind = \"function\" only");
  }

  std::optional<double> natural_max_resource;  // what every trial runs to, when it is fixed
  // Whether the config's dataset is read here (its files found and checked).
  const bool check_dataset = use != ConfigUse::kView && use != ConfigUse::kOneTrialOtherDataset;
  const bool one_trial = use == ConfigUse::kOneTrial || use == ConfigUse::kOneTrialOtherDataset;
  const bool stored = use == ConfigUse::kView || use == ConfigUse::kResume;
  if (cfg.kind == TrialKind::kTrainer) {
    trainer::TrainOptions merged;
    const toml::node* dataset_node = nullptr;
    std::string dataset_key;
    const std::filesystem::path base = std::filesystem::absolute(cfg.path).parent_path();
    // A dataset's paths, checked for their form only (kView): a stand-in for the options.
    auto apply_dataset = [&](const json& value) -> Status {
      if (check_dataset) return trainer::ApplyOption(&merged, "dataset", value);
      if (!value.is_string() && !value.is_object()) {
        return trainer::ApplyOption(&merged, "dataset", value);  // its type error
      }
      merged.dataset.train_images = merged.dataset.train_labels = "-";
      return Status::Ok();
    };
    if (trainer_table != nullptr) {
      SWEEP_RETURN_IF_ERROR(c.KnownKeys(*trainer_table, "[trainer]", trainer::OptionKeys()));
      for (auto&& [k, v] : *trainer_table) {
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
        if (!dataset || check_dataset) {  // the dataset's check reads its files
          SWEEP_RETURN_IF_ERROR(CheckTrainerValue(c, v, "trainer." + key, key, value));
        }
        Status s = dataset ? apply_dataset(value) : trainer::ApplyOption(&merged, key, value);
        if (!s.ok()) return c.Error(v, "trainer." + key, s.message());
        cfg.trainer[key] = value;
        if (key == "dataset") {
          dataset_node = &v;
          dataset_key = "trainer.dataset";
        }
      }
    }
    for (ParamEntry& e : params) {
      if (e.parameter.name == "dataset" &&
          e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
        json& value = e.parameter.distribution.values[0];
        value = DatasetRelativeTo(std::move(value), base);
      }
      if (e.parameter.name == "cache_dir" &&
          e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
        ResolveRelativeTo(e.parameter.distribution.values[0], base);
      }
      if (e.parameter.name != "dataset" || check_dataset) {
        SWEEP_RETURN_IF_ERROR(CheckTrainerParameter(c, e, stored));
      }
      if (e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
        const json& value = e.parameter.distribution.values[0];
        (void)(e.parameter.name == "dataset"
                   ? apply_dataset(value)
                   : trainer::ApplyOption(&merged, e.parameter.name, value));
        if (e.parameter.name == "dataset") {
          dataset_node = e.node;
          dataset_key = "parameters.dataset";
        }
      } else if (e.parameter.name == "dataset") {
        return c.Error(*e.node, "parameters.dataset",
                       "vary one dataset per sweep; put it in [trainer]");
      }
    }
    if (dataset_node == nullptr) {
      const std::string msg =
          "[trainer] needs a `dataset` (e.g. dataset = \"/usr/share/datasets/fashion-mnist\", or "
          "{ format = \"idx\", train_images = \"...\", train_labels = \"...\" })";
      return trainer_table != nullptr ? c.Error(*trainer_table, "trainer.dataset", msg)
                                      : c.FileError(msg);
    }
    if (check_dataset) {
      SWEEP_RETURN_IF_ERROR(CheckDatasetFiles(c, *dataset_node, dataset_key, merged.dataset));
    }
    // Rules across options (nesterov needs momentum, ...) on what every trial shares: [trainer]
    // and the constant parameters. Varied values are checked per trial when it runs. A trial's
    // replicas are its slots unless the config says otherwise (see TrainerLayoutOf).
    const bool replicas_given = cfg.trainer.contains("replicas") ||
                                std::any_of(params.begin(), params.end(), [](const ParamEntry& e) {
                                  return e.parameter.name == "replicas";
                                });
    // Only for a new sweep: `sweep train` sets its own layout (--threads, --set replicas=...)
    // after this, and a stored sweep is taken as it was recorded.
    if (!replicas_given && use == ConfigUse::kSweep) merged.replicas = cfg.gpus;
    if (Status v = trainer::Validate(merged); !v.ok()) {
      const std::string msg = "the options every trial shares do not go together: " + v.message();
      return trainer_table != nullptr ? c.Error(*trainer_table, "trainer", msg) : c.FileError(msg);
    }
    bool epochs_vary = std::any_of(params.begin(), params.end(), [](const ParamEntry& e) {
      return e.parameter.name == "epochs" &&
             e.parameter.distribution.kind != search::Distribution::Kind::kConstant;
    });
    if (!epochs_vary) natural_max_resource = merged.epochs;
    if (!metric) metric = "val_acc", mode = mode.value_or("max");
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
    const bool needs_val = !one_trial && metric->rfind("val_", 0) == 0;
    if (needs_val && merged.validation_fraction <= 0) {
      if (metric_node != nullptr) {
        return c.Error(*metric_node, "sweep.metric",
                       "'" + *metric +
                           "' needs a validation split; set trainer.validation_fraction "
                           "> 0");
      }
      // The metric is the default one: point at the 0 that leaves nothing to measure it on.
      const toml::node* zero =
          trainer_table != nullptr ? trainer_table->get("validation_fraction") : nullptr;
      std::string zero_key = "trainer.validation_fraction";
      for (const ParamEntry& e : params) {
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
    for (const ParamEntry& e : params) {
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
      return c.Error(*metric_node, "sweep.metric",
                     "'test_acc' needs a test set in trainer.dataset");
    }
  } else if (cfg.kind == TrialKind::kFunction) {
    if (function_table == nullptr) {
      const std::string msg = "kind = \"function\" needs a [function] table with `name`";
      return kind_node != nullptr ? c.Error(*kind_node, "trial.kind", msg) : c.FileError(msg);
    }
    SWEEP_RETURN_IF_ERROR(c.KnownKeys(*function_table, "[function]", {"name", "steps", "step_ms"}));
    std::vector<std::string> fnames;
    for (const auto& f : executor::Functions()) fnames.push_back(f.name);
    const toml::node* fname = function_table->get("name");
    if (fname == nullptr) return c.Error(*function_table, "function.name", "missing");
    SWEEP_ASSIGN_OR_RETURN(std::string fn, c.OneOf(*fname, "function.name", fnames));
    cfg.function["name"] = fn;
    if (const toml::node* n = function_table->get("steps")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.function["steps"], c.Integer(*n, "function.steps", 0, 1'000'000));
    }
    if (const toml::node* n = function_table->get("step_ms")) {
      SWEEP_ASSIGN_OR_RETURN(cfg.function["step_ms"],
                             c.Integer(*n, "function.step_ms", 0, 3'600'000));
    }
    natural_max_resource = std::max<int64_t>(1, cfg.function.value("steps", int64_t{0}));
    std::vector<std::string> names;
    for (const ParamEntry& e : params) {
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
      for (const ParamEntry& e : params) {
        if (s.message().find("'" + e.parameter.name + "'") != std::string::npos) {
          return c.Error(*e.node, "parameters." + e.parameter.name, s.message());
        }
      }
      const toml::node* where = table("parameters") ? root["parameters"].node() : fname;
      return c.Error(*where, "parameters", s.message());
    }
    for (const ParamEntry& e : params) {
      const auto& d = e.parameter.distribution;
      for (const json& v : d.values) {
        if (!v.is_number()) {
          return c.Error(*e.node, "parameters." + e.parameter.name,
                         "function parameters are numbers, got " + v.dump());
        }
      }
    }
    if (!metric) metric = "value", mode = mode.value_or("min");
    if (*metric != "value") {
      return c.Error(*metric_node, "sweep.metric",
                     "function trials report only 'value' (got '" + *metric + "')");
    }
  } else if (cfg.kind == TrialKind::kCommand) {
    if (!metric) {
      return c.Error(*sweep, "sweep.metric",
                     "missing: name the metric to optimise, as the program reports it in its "
                     "`sweep-report {...}` lines");
    }
    if (*metric == "step" || *metric == "epoch") {
      return c.Error(*metric_node, "sweep.metric",
                     "'" + *metric +
                         "' is where a report stands, not a metric: name a value the program "
                         "reports");
    }
    std::vector<std::string> names;
    for (const ParamEntry& e : params) names.push_back(e.parameter.name);
    Status s = executor::CheckCommandTemplate(cfg.command, names);
    if (!s.ok()) return c.Error(*command_node, "trial.command", s.message());
  }
  if (!mode) {
    return c.Error(*metric_node, "sweep.mode",
                   "say whether to maximise or minimise '" + *metric +
                       "': add mode = \"max\" or mode = \"min\" to [sweep]");
  }
  cfg.metric = *metric;
  cfg.maximize = *mode == "max";
  SWEEP_RETURN_IF_ERROR(
      FinishEarlyStopping(c, es, max_resource_node, natural_max_resource, stored, &cfg));
  if (const toml::node* n = sweep->get("stop_when")) {
    SWEEP_ASSIGN_OR_RETURN(std::string written, c.String(*n, "sweep.stop_when"));
    auto target = ParseTarget(written);
    if (!target) {
      return c.Error(
          *n, "sweep.stop_when",
          "cannot read \"" + written + "\"; write METRIC OP NUMBER, e.g. \"val_acc >= 0.9\"");
    }
    const auto names = executor::TrialMetricNames(ToString(cfg.kind));
    if (cfg.kind == TrialKind::kCommand &&
        (target->metric == "step" || target->metric == "epoch")) {
      return c.Error(*n, "sweep.stop_when",
                     "'" + target->metric +
                         "' is where a report stands, not a metric: to bound a trial's length, "
                         "use early_stopping.max_resource or the program's own setting");
    }
    if (cfg.kind != TrialKind::kCommand &&  // a program may report any metric
        std::find(names.begin(), names.end(), target->metric) == names.end()) {
      return c.Error(
          *n, "sweep.stop_when",
          std::string(ToString(cfg.kind)) + " trials never report '" + target->metric + "'");
    }
    // stop_when is checked on each report; test_acc comes once, after a trial's last epoch.
    if (cfg.kind == TrialKind::kTrainer && target->metric == "test_acc" && !stored) {
      return c.Error(*n, "sweep.stop_when",
                     "stop_when is checked on every report, and the trainer measures 'test_acc' "
                     "only after a trial's last epoch: use \"val_acc\" or \"val_loss\"");
    }
    cfg.stop_when = target;
  }

  // ---- search space and trial count ----
  for (ParamEntry& e : params) {
    Status s = cfg.space.Add(e.parameter);
    if (!s.ok()) return c.Error(*e.node, "parameters." + e.parameter.name, s.message());
  }
  if (cfg.algorithm == "grid") {
    for (const ParamEntry& e : params) {
      auto k = e.parameter.distribution.kind;
      if (search::StepCount(e.parameter.distribution) > 0) continue;  // distinct by design
      if (k != search::Distribution::Kind::kConstant &&
          k != search::Distribution::Kind::kCategorical) {
        const bool steppable = k == search::Distribution::Kind::kUniform ||
                               k == search::Distribution::Kind::kIntUniform;
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
    auto grid = search::MakeGridSampler(cfg.space);
    if (!grid.ok()) {
      return algorithm_node != nullptr
                 ? c.Error(*algorithm_node, "search.algorithm", grid.status().message())
                 : c.FileError(grid.status().message());
    }
    int64_t size = (*grid)->size().value_or(1);
    // A grid of fine steps can be billions of points: each run writes rows, reports and
    // folders until the disk fills. Past this size, max_trials must say how much of it to run.
    constexpr int64_t kMaxUncappedGrid = 1'000'000;
    if (!max_trials && size > kMaxUncappedGrid) {
      std::vector<std::pair<int64_t, std::string>> axes;
      for (const ParamEntry& e : params) {
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
      return c.Error(*sweep, "sweep.max_trials",
                     "the grid has " + std::to_string(size) + " points (" + list + "), more than " +
                         std::to_string(kMaxUncappedGrid) +
                         " to run without a cap; make the steps larger or list fewer values, "
                         "set max_trials to run the grid's first N points, or use "
                         "search.algorithm = \"random\" with max_trials");
    }
    cfg.max_trials = max_trials ? std::min(*max_trials, size) : size;
  } else {
    // Without max_trials a random search draws until its time budget is spent or its target
    // is reached (as Optuna's timeout); with neither it would never end.
    if (max_trials) {
      cfg.max_trials = *max_trials;
    } else if (cfg.longest_first && (use == ConfigUse::kSweep || use == ConfigUse::kResume) &&
               order_node != nullptr) {
      // It starts the heaviest of the trials drawn ahead: with no end to the draw, it would
      // start only the heaviest the sampler can give.
      return c.Error(*order_node, "trial.order",
                     "\"longest_first\" orders a sweep of known size; set sweep.max_trials");
    } else if (cfg.time_budget_s || cfg.stop_when || one_trial) {
      cfg.max_trials = kUnboundedTrials;
      cfg.unbounded_trials = true;
    } else {
      return c.Error(*sweep, "sweep.max_trials",
                     "random search needs max_trials (how many trials to draw), or time_budget "
                     "or stop_when to end it");
    }
  }
  if (cfg.algorithm == "tpe") {
    // TPE proposes each trial from the results before it: it cannot draw the sweep ahead.
    if (cfg.longest_first && order_node != nullptr) {
      return c.Error(*order_node, "trial.order",
                     "\"longest_first\" draws the whole sweep ahead to start the longest trials "
                     "first, and TPE proposes each trial from the results before it; use order "
                     "= \"sampled\" (the default) with algorithm = \"tpe\"");
    }
    // Every trial would be a startup trial: random search under another name.
    if (!cfg.unbounded_trials && cfg.tpe.n_startup_trials >= cfg.max_trials &&
        (use == ConfigUse::kSweep || use == ConfigUse::kResume)) {
      const toml::node* at = search_table->get("n_startup_trials");
      return c.Error(at != nullptr ? *at : *algorithm_node, "search.n_startup_trials",
                     std::to_string(cfg.tpe.n_startup_trials) +
                         " random trials before TPE, and "
                         "max_trials is " +
                         std::to_string(cfg.max_trials) +
                         ": no trial would be proposed by TPE; lower n_startup_trials or raise "
                         "max_trials");
    }
  }
  if (cfg.kind == TrialKind::kTrainer && use == ConfigUse::kSweep) {
    const toml::node* where = table("parameters") ? root["parameters"].node() : nullptr;
    SWEEP_RETURN_IF_ERROR(CheckTrainerTrials(c, cfg, where));
  }
  return cfg;
}

Result<SweepConfig> LoadConfig(const std::string& path, ConfigUse use) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status::NotFound(path + ": no such config file");
  }
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument(path + ": is a directory, not a config file");
  }
  // A config the user points at but that cannot be read is a usage error (exit 2), and a read
  // that fails half-way must not be parsed as if the file were shorter.
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status::InvalidArgument(path + ": cannot read: " + std::strerror(errno));
  }
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  bool failed = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  if (failed) return Status::InvalidArgument(path + ": cannot read: " + std::strerror(err));
  return ParseConfig(text, path, use);
}

json ParseSetValue(std::string_view text) {
  // `--set "lr_schedule= cosine"`: the spaces around a value are not part of it.
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  const std::string doc = "v = " + std::string(text);
  // Non-ASCII outside a string is not TOML (and toml++ 3.3 mishandles it): a bare word.
  if (!CheckNonAsciiPlacement(Checker("--set"), doc).ok()) return std::string(text);
  try {
    toml::table t = toml::parse(doc);
    if (const toml::node* v = t.get("v")) return ToJson(*v);
  } catch (const toml::parse_error&) {
  }
  // Numbers TOML does not write but a command line does: .5, 5., 1.e-3, and whole numbers
  // past int64 (a seed as printed: seeds span uint64).
  const std::string word(text);
  if (!word.empty() && word.size() <= 20 &&
      word.find_first_not_of("0123456789") == std::string::npos) {
    uint64_t big = 0;
    auto [at, ec] = std::from_chars(word.data(), word.data() + word.size(), big);
    if (ec == std::errc() && at == word.data() + word.size()) return big;
  }
  if (!word.empty() && word.find_first_not_of("0123456789+-.eE") == std::string::npos) {
    char* end = nullptr;
    const double v = std::strtod(word.c_str(), &end);
    if (end == word.c_str() + word.size() && std::isfinite(v)) return v;
  }
  return word;
}

}  // namespace sweep
