// Config loading: TOML text -> validated SweepConfig, one function per table, then the checks
// across tables. toml++ exceptions stop here; every refusal is an InvalidArgument whose message
// begins with "file:line:column: " and names the key. Validation that needs other libraries
// (trainer option types, function parameter names, search distributions) asks those libraries,
// so the rules live in one place. [parameters]: config_space.cc; each trial kind's table and
// checks: its file in kinds/ (kind_config.h); durations, names and TOML helpers:
// config_values.cc.
#include "sweep/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <toml++/toml.h>

#include "config_parse.h"
#include "executor/trial.h"
#include "kinds/kind_config.h"

namespace sweep {

using nlohmann::json;

Result<std::unique_ptr<search::Sampler>> MakeSampler(const SweepConfig& cfg) {
  if (cfg.search.algorithm == "grid") return search::MakeGridSampler(cfg.search.space);
  // TPE's first trials are exactly these; the coordinator asks TPE for the rest.
  return search::MakeRandomSampler(cfg.search.space, cfg.sweep.seed);
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

namespace config_internal {

namespace {

const std::vector<std::string> kTopLevel = {"sweep",      "search",   "early_stopping",
                                            "parameters", "trial",    "trainer",
                                            "function",   "executor", "store"};

// The text as TOML; a syntax error said at its place, with what it most likely is.
Result<toml::table> ParseToml(const Checker& c, std::string_view text, const std::string& path) {
  // TOML allows non-ASCII only inside strings and comments; refusing it elsewhere here also keeps
  // such bytes away from a toml++ 3.3 code path that is undefined behaviour on them.
  SWEEP_RETURN_IF_ERROR(CheckNonAsciiPlacement(c, text));
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::string what(e.description());
    if (what.find("unescaped control characters") != std::string::npos &&
        AtLineEnd(text, e.source().begin)) {
      what = "unterminated string (a closing quote is missing): " + what;
    }
    // toml++ 3.3 garbles a quoted key's name here ('"x1x1" ' for "x1" after x1): the key is
    // named as its line writes it.
    if (const size_t at = what.find("cannot redefine existing "); at != std::string::npos) {
      const std::string key = KeyBefore(text, e.source().begin);
      const size_t quote = what.find('\'', at);
      if (!key.empty() && quote != std::string::npos) {
        what = what.substr(0, quote) + "'" + key + "' (a key defined twice in its table)";
      }
    }
    return c.Error(e.source(), "", what);
  }
}

// The top level holds the known tables only.
Status CheckTopLevel(const Checker& c, const toml::table& root) {
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(root, "", kTopLevel));
  for (auto&& [k, v] : root) {
    if (!v.is_table()) {
      return c.Error(k.source(), std::string(k.str()),
                     "expected a table ([" + std::string(k.str()) + "]), got " + TypeName(v));
    }
  }
  return Status::Ok();
}

// [sweep] but stop_when, which needs the trial kind (ParseStopWhen). Metric and mode stay in
// `ps` until the trial kind gives their defaults.
Status ParseSweepTable(const Checker& c, ParseState* ps, SweepConfig* cfg) {
  const toml::table* sweep = ps->sweep = ps->Table("sweep");
  if (sweep == nullptr) return c.FileError("missing [sweep] table (it needs at least `name`)");
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(*sweep, "[sweep]",
                                    {"name", "metric", "mode", "max_trials", "max_concurrent",
                                     "time_budget", "seed", "stop_when"}));
  const toml::node* name = sweep->get("name");
  if (name == nullptr) return c.Error(*sweep, "sweep.name", "missing: every sweep needs a name");
  SWEEP_ASSIGN_OR_RETURN(cfg->sweep.name, c.String(*name, "sweep.name"));
  // A sweep stored before names could not start with '-' still opens.
  const bool stored_dash_name = (ps->use == ConfigUse::kView || ps->use == ConfigUse::kResume) &&
                                cfg->sweep.name.starts_with('-') &&
                                IsValidSweepName("_" + cfg->sweep.name.substr(1));
  if (!IsValidSweepName(cfg->sweep.name) && !stored_dash_name) {
    return c.Error(*name, "sweep.name",
                   std::string(kSweepNameRule) + " (got \"" + cfg->sweep.name + "\")");
  }
  ps->metric_node = sweep->get("metric");
  if (ps->metric_node != nullptr) {
    SWEEP_ASSIGN_OR_RETURN(ps->metric, c.String(*ps->metric_node, "sweep.metric"));
    if (ps->metric->empty()) {
      return c.Error(*ps->metric_node, "sweep.metric", "empty: name the metric to optimise");
    }
  }
  if (const toml::node* n = sweep->get("mode")) {
    SWEEP_ASSIGN_OR_RETURN(ps->mode, c.OneOf(*n, "sweep.mode", {"max", "min"}));
  }
  if (const toml::node* n = sweep->get("max_trials")) {
    SWEEP_ASSIGN_OR_RETURN(ps->max_trials, c.Integer(*n, "sweep.max_trials", 1, int64_t{1} << 40));
  }
  if (const toml::node* n = sweep->get("max_concurrent")) {
    SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "sweep.max_concurrent", 1, 1 << 20));
    cfg->sweep.max_concurrent = static_cast<int>(v);
  }
  if (const toml::node* n = sweep->get("time_budget")) {
    std::optional<double>& budget = cfg->sweep.time_budget_s;
    if (auto s = n->value_exact<std::string>()) {
      budget = ParseDuration(*s);
      if (!budget) {
        return c.Error(*n, "sweep.time_budget",
                       "cannot read \"" + *s +
                           "\" as a duration; write e.g. \"2h\", \"30m\", "
                           "\"1h30m\" or a number of seconds");
      }
    } else {
      SWEEP_ASSIGN_OR_RETURN(double secs, c.Number(*n, "sweep.time_budget"));
      budget = secs;
    }
    if (*budget <= 0) return c.Error(*n, "sweep.time_budget", "must be > 0");
  }
  if (const toml::node* n = sweep->get("seed")) {
    SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "sweep.seed", 0, INT64_MAX));
    cfg->sweep.seed = static_cast<uint64_t>(v);
  }
  return Status::Ok();
}

// [search]'s TPE knobs (see search/tpe.h): only with algorithm = "tpe", where a knob set for
// another algorithm would silently do nothing.
Status ParseTpeKnobs(const Checker& c, const toml::table& search, SweepConfig* cfg) {
  search::TpeOptions& o = cfg->search.tpe;
  // For the startup rule checked once a run knows the trials carried over (--from).
  if (const toml::node* at = search.get("n_startup_trials") ? search.get("n_startup_trials")
                                                            : search.get("algorithm")) {
    cfg->where.startup = c.Where(at->source());
  }
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
    if (cfg->search.algorithm != "tpe") {
      return c.Error(
          *node, key,
          "only for algorithm = \"tpe\" (this search is \"" + cfg->search.algorithm + "\")");
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

Status ParseSearchTable(const Checker& c, ParseState* ps, SweepConfig* cfg) {
  const toml::table* search_table = ps->search_table = ps->Table("search");
  if (search_table == nullptr) return Status::Ok();
  SWEEP_RETURN_IF_ERROR(
      c.KnownKeys(*search_table, "[search]",
                  {"algorithm", "n_startup_trials", "n_ei_candidates", "gamma", "gamma_max",
                   "prior_weight", "multivariate", "consider_endpoints", "magic_clip"}));
  if ((ps->algorithm_node = search_table->get("algorithm"))) {
    SWEEP_ASSIGN_OR_RETURN(cfg->search.algorithm, c.OneOf(*ps->algorithm_node, "search.algorithm",
                                                          {"grid", "random", "tpe"}));
  }
  return ParseTpeKnobs(c, *search_table, cfg);
}

// [early_stopping] as written; FinishEarlyStopping fills in and checks the rest once the trial
// kind is known.
Status ParseEarlyStoppingTable(const Checker& c, ParseState* ps, SweepConfig* cfg) {
  const toml::table* es = ps->es = ps->Table("early_stopping");
  if (es == nullptr) return Status::Ok();
  SWEEP_RETURN_IF_ERROR(
      c.KnownKeys(*es, "[early_stopping]",
                  {"algorithm", "min_resource", "max_resource", "reduction_factor",
                   "bootstrap_count", "grace_period", "min_trials"}));
  auto& sc = cfg->early_stopping;
  if (const toml::node* n = es->get("algorithm")) {
    SWEEP_ASSIGN_OR_RETURN(std::string a, c.OneOf(*n, "early_stopping.algorithm",
                                                  {"none", "median", "asha", "hyperband"}));
    sc.algorithm = *search::EarlyStoppingFromName(a);
  }
  const bool rungs = sc.algorithm == search::EarlyStopping::kAsha ||
                     sc.algorithm == search::EarlyStopping::kHyperband;
  const bool median = sc.algorithm == search::EarlyStopping::kMedian;
  // Keys the chosen algorithm ignores are refused: a setting that silently does nothing misleads.
  const std::pair<std::string_view, bool> applies[] = {
      {"min_resource", rungs},    {"max_resource", rungs},  {"reduction_factor", rungs},
      {"bootstrap_count", rungs}, {"grace_period", median}, {"min_trials", median}};
  for (auto [key, ok] : applies) {
    const toml::node* n = es->get(key);
    if (n == nullptr) continue;
    std::string k = "early_stopping." + std::string(key);
    if (!ok) {
      return c.Error(*n, k,
                     "does not apply to algorithm \"" +
                         std::string(search::EarlyStoppingName(sc.algorithm)) + "\"");
    }
    if (key == "grace_period" || key == "min_trials" || key == "bootstrap_count") {
      SWEEP_ASSIGN_OR_RETURN(int64_t v,
                             c.Integer(*n, k, key == "min_trials" ? 1 : 0, int64_t{1} << 40));
      (key == "grace_period" ? sc.grace_period
       : key == "min_trials" ? sc.min_trials
                             : sc.bootstrap_count) = v;
    } else {
      SWEEP_ASSIGN_OR_RETURN(double v, c.Number(*n, k));
      if (key == "min_resource") sc.min_resource = v;
      if (key == "reduction_factor") sc.reduction_factor = v;
      if (key == "max_resource") {
        sc.max_resource = v;
        ps->max_resource_node = n;
      }
    }
  }
  return Status::Ok();
}

// [trial]'s keys for command trials: the program, where it starts, its folders and time limits.
Status ParseCommandKeys(const Checker& c, const toml::table& trial, ParseState* ps,
                        SweepConfig* cfg) {
  SweepConfig::Trial& t = cfg->trial;
  const KindConfig& kind = KindConfigOf(t.kind);
  for (const char* key : {"command", "workdir", "trials_dir", "kill_grace", "timeout"}) {
    const toml::node* n = trial.get(key);
    if (n != nullptr && !kind.program) {
      return c.Error(*n, std::string("trial.") + key, "only for kind = \"command\"");
    }
  }
  if (const toml::node* n = trial.get("command")) {
    const toml::array* argv = n->as_array();
    if (argv == nullptr) {
      return c.Error(*n, "trial.command",
                     "expected a list of strings, e.g. [\"python3\", \"train.py\", "
                     "\"--lr={lr}\"]");
    }
    for (const toml::node& arg : *argv) {
      SWEEP_ASSIGN_OR_RETURN(std::string a, c.String(arg, "trial.command"));
      if (t.command.empty()) cfg->where.command = c.Where(arg.source());
      t.command.push_back(std::move(a));
    }
    ps->command_node = n;
  } else if (kind.program) {
    return c.Error(*ps->kind_node, "trial.command",
                   "kind = \"command\" needs the program to run: command = [\"python3\", "
                   "\"train.py\", \"--lr={lr}\"]");
  }
  if (const toml::node* n = trial.get("workdir")) {
    SWEEP_ASSIGN_OR_RETURN(t.workdir, c.String(*n, "trial.workdir"));
    cfg->where.workdir = c.Where(n->source());
    if (t.workdir.empty()) return c.Error(*n, "trial.workdir", "must not be empty");
  }
  if (const toml::node* n = trial.get("trials_dir")) {
    SWEEP_ASSIGN_OR_RETURN(t.trials_dir, c.String(*n, "trial.trials_dir"));
    if (t.trials_dir.empty()) return c.Error(*n, "trial.trials_dir", "must not be empty");
  }
  if (const toml::node* n = trial.get("kill_grace")) {
    SWEEP_ASSIGN_OR_RETURN(t.kill_grace_s, c.Duration(*n, "trial.kill_grace", 0, 3600,
                                                      "between 0 s and 1 hour, e.g. \"10s\""));
  }
  if (const toml::node* n = trial.get("timeout")) {
    SWEEP_ASSIGN_OR_RETURN(t.timeout_s, c.Duration(*n, "trial.timeout", 1, 30 * 86400,
                                                   "between 1 s and 30 days, e.g. \"2h\""));
  }
  return Status::Ok();
}

// [trial]'s keys for trainer trials: their checkpoints, and the order they start in.
Status ParseTrainerTrialKeys(const Checker& c, const toml::table& trial, ParseState* ps,
                             SweepConfig::Trial* t) {
  const KindConfig& kind = KindConfigOf(t->kind);
  if (const toml::node* n = trial.get("keep_checkpoints")) {
    if (!kind.checkpoints) {
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
      SWEEP_ASSIGN_OR_RETURN(t->keep_checkpoints,
                             c.Integer(*n, "trial.keep_checkpoints", 0, 1'000'000));
    }
  }
  if (const toml::node* n = trial.get("checkpoint_dir"); n && !kind.checkpoints) {
    return c.Error(*n, "trial.checkpoint_dir",
                   "only for kind = \"trainer\" (a command trial's program keeps its own "
                   "files, in its trial directory; a function trial has none)");
  }
  if (const toml::node* n = trial.get("order")) {
    ps->order_node = n;
    SWEEP_ASSIGN_OR_RETURN(std::string order,
                           c.OneOf(*n, "trial.order", {"sampled", "longest_first"}));
    t->longest_first = order == "longest_first";
    if (t->longest_first && !kind.work_estimate) {
      return c.Error(*n, "trial.order",
                     "\"longest_first\" ranks trials by the work their [trainer] options and "
                     "parameters imply; kind = \"" +
                         std::string(ToString(t->kind)) + "\" trials have no such estimate");
    }
  }
  return Status::Ok();
}

Status ParseTrialTable(const Checker& c, ParseState* ps, SweepConfig* cfg) {
  SweepConfig::Trial& t = cfg->trial;
  if (const toml::table* trial = ps->Table("trial")) {
    SWEEP_RETURN_IF_ERROR(
        c.KnownKeys(*trial, "[trial]",
                    {"kind", "gpus", "command", "max_retries", "max_initial_failures",
                     "heartbeat_timeout", "checkpoint_dir", "keep_checkpoints", "workdir",
                     "trials_dir", "kill_grace", "timeout", "gpu_share", "order"}));
    if (const toml::node* n = trial->get("checkpoint_dir")) {
      SWEEP_ASSIGN_OR_RETURN(t.checkpoint_dir, c.String(*n, "trial.checkpoint_dir"));
    }
    if (const toml::node* n = trial->get("max_retries")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "trial.max_retries", 0, 100));
      t.max_retries = static_cast<int>(v);
    }
    if (const toml::node* n = trial->get("max_initial_failures")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "trial.max_initial_failures", 0, 1000000000));
      t.max_initial_failures = static_cast<int>(v);
    }
    if (const toml::node* n = trial->get("heartbeat_timeout")) {
      SWEEP_ASSIGN_OR_RETURN(t.heartbeat_timeout_s,
                             c.Duration(*n, "trial.heartbeat_timeout", 2, 7 * 86400,
                                        "between 2 s and 7 days, e.g. \"60s\" or \"5m\""));
    }
    if ((ps->kind_node = trial->get("kind"))) {
      SWEEP_ASSIGN_OR_RETURN(std::string kind,
                             c.OneOf(*ps->kind_node, "trial.kind", executor::TrialKindNames()));
      t.kind = *executor::TrialKindFromString(kind);
    }
    SWEEP_RETURN_IF_ERROR(ParseTrainerTrialKeys(c, *trial, ps, &t));
    if (const toml::node* n = trial->get("gpus")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "trial.gpus", 1, 64));
      t.slots = static_cast<int>(v);
      cfg->where.slots = c.Where(n->source());
    }
    if (const toml::node* n = trial->get("gpu_share")) {
      SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "trial.gpu_share", 1, 64));
      t.gpu_share = static_cast<int>(v);
      if (t.gpu_share > 1 && t.slots > 1) {
        return c.Error(*n, "trial.gpu_share",
                       "only 1-GPU trials share a GPU (this sweep has trial.gpus = " +
                           std::to_string(t.slots) + ")");
      }
    }
    SWEEP_RETURN_IF_ERROR(ParseCommandKeys(c, *trial, ps, cfg));
  }
  if (KindConfigOf(t.kind).program) {
    // Relative paths in the config are relative to the config's folder, wherever sweep runs.
    std::filesystem::path base = std::filesystem::absolute(cfg->path).parent_path();
    t.workdir = t.workdir.empty() ? base.string() : (base / t.workdir).lexically_normal().string();
  }
  return Status::Ok();
}

Status ParseExecutorTable(const Checker& c, const ParseState& ps, SweepConfig* cfg) {
  const toml::table* ex = ps.Table("executor");
  if (ex == nullptr) return Status::Ok();
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(*ex, "[executor]", {"cpu_slots", "agent_timeout"}));
  if (const toml::node* n = ex->get("cpu_slots")) {
    SWEEP_ASSIGN_OR_RETURN(int64_t v, c.Integer(*n, "executor.cpu_slots", 1, 4096));
    cfg->executor.cpu_slots = static_cast<int>(v);
  }
  if (const toml::node* n = ex->get("agent_timeout")) {
    // Agents send a heartbeat every second: the timeout must leave room for a few.
    SWEEP_ASSIGN_OR_RETURN(
        cfg->executor.agent_timeout_s,
        c.Duration(*n, "executor.agent_timeout", 3, 3600, "between 3 s and 1 hour, e.g. \"30s\""));
  }
  return Status::Ok();
}

Status ParseStoreTable(const Checker& c, const ParseState& ps, SweepConfig* cfg) {
  const toml::table* st = ps.Table("store");
  if (st == nullptr) return Status::Ok();
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(*st, "[store]", {"path"}));
  if (const toml::node* n = st->get("path")) {
    SWEEP_ASSIGN_OR_RETURN(cfg->store.path, c.String(*n, "store.path"));
    if (cfg->store.path.empty()) return c.Error(*n, "store.path", "must not be empty");
  }
  return Status::Ok();
}

// The trial kind's own table ([trainer] or [function]; a command's is [trial]), which gives the
// metric its default; the table of another kind is refused.
Status ParseKindTable(const Checker& c, ParseState* ps, SweepConfig* cfg) {
  const TrialKind kind = cfg->trial.kind;
  for (const KindConfig* other : AllKindConfigs()) {
    if (other->kind == kind || other->table == nullptr || !ps->Table(other->table)) continue;
    const std::string name = other->table;
    return c.Error((*ps->root)[name].node()->source(), name,
                   "[" + name + "] applies to kind = \"" + std::string(ToString(other->kind)) +
                       "\" only (this sweep's trial.kind is \"" + std::string(ToString(kind)) +
                       "\")");
  }
  return KindConfigOf(kind).parse(c, ps, cfg);
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
  sc.maximize = cfg->sweep.maximize;
  sc.metric = cfg->sweep.metric;
  sc.grid_order = cfg->search.algorithm == "grid";
  if (sc.algorithm == search::EarlyStopping::kNone) return Status::Ok();
  const toml::node& where = *es;  // an algorithm other than none was set in [early_stopping]
  const KindConfig& kind = KindConfigOf(cfg->trial.kind);
  if (kind.check_early_stopping != nullptr) {
    SWEEP_RETURN_IF_ERROR(kind.check_early_stopping(c, where, *cfg));
  }
  const bool rungs = sc.algorithm != search::EarlyStopping::kMedian;
  if (!rungs && natural_max && static_cast<double>(sc.grace_period) >= *natural_max && !stored) {
    const toml::node* grace = es->get("grace_period");
    return c.Error(grace != nullptr ? *grace : where, "early_stopping.grace_period",
                   "is " + std::to_string(sc.grace_period) + " but every trial runs " +
                       FormatNumber(*natural_max) + " " + kind.unit +
                       ", one report each: the median rule could never stop one");
  }
  if (rungs) {
    if (max_resource_node == nullptr) {
      if (!natural_max) {
        return c.Error(where, "early_stopping.max_resource",
                       kind.length_known
                           ? "set it: the epochs of a trial vary, so it cannot be taken from them"
                           : "set it: the epochs (or steps) a " + std::string(ToString(kind.kind)) +
                                 " trial runs are not known in advance");
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
    } else if (kind.whole_units && sc.max_resource != std::floor(sc.max_resource)) {
      return c.Error(*max_resource_node, "early_stopping.max_resource",
                     "is " + FormatNumber(sc.max_resource) + " but " +
                         std::string(ToString(kind.kind)) + " trials report whole " + kind.unit +
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

// [sweep] stop_when: a metric the trial kind reports on every report.
Status ParseStopWhen(const Checker& c, const ParseState& ps, SweepConfig* cfg) {
  const toml::node* n = ps.sweep->get("stop_when");
  if (n == nullptr) return Status::Ok();
  const TrialKind kind = cfg->trial.kind;
  SWEEP_ASSIGN_OR_RETURN(std::string written, c.String(*n, "sweep.stop_when"));
  auto target = ParseTarget(written);
  if (!target) {
    return c.Error(
        *n, "sweep.stop_when",
        "cannot read \"" + written + "\"; write METRIC OP NUMBER, e.g. \"val_acc >= 0.9\"");
  }
  const KindConfig& rules = KindConfigOf(kind);
  if (rules.check_stop_when != nullptr) {
    SWEEP_RETURN_IF_ERROR(rules.check_stop_when(c, *n, *target, ps));
  }
  // A kind whose metrics are not known in advance (a program's) may report any.
  const auto names = executor::TrialMetricNames(kind);
  if (!names.empty() && std::find(names.begin(), names.end(), target->metric) == names.end()) {
    return c.Error(*n, "sweep.stop_when",
                   std::string(ToString(kind)) + " trials never report '" + target->metric + "'");
  }
  cfg->sweep.stop_when = target;
  return Status::Ok();
}

// What needs more than one table, once each is read: the objective (metric and mode), early
// stopping's rungs against what trials run to, stop_when, the search space and the trial count,
// and, for a new trainer sweep, the trials it would run.
Status CheckAcrossTables(const Checker& c, const ParseState& ps, SweepConfig* cfg) {
  if (!ps.mode) {
    return c.Error(*ps.metric_node, "sweep.mode",
                   "say whether to maximise or minimise '" + *ps.metric +
                       "': add mode = \"max\" or mode = \"min\" to [sweep]");
  }
  cfg->sweep.metric = *ps.metric;
  cfg->sweep.maximize = *ps.mode == "max";
  SWEEP_RETURN_IF_ERROR(
      FinishEarlyStopping(c, ps.es, ps.max_resource_node, ps.natural_max_resource, ps.stored, cfg));
  SWEEP_RETURN_IF_ERROR(ParseStopWhen(c, ps, cfg));
  SWEEP_RETURN_IF_ERROR(BuildSpace(c, ps, cfg));
  const KindConfig& kind = KindConfigOf(cfg->trial.kind);
  if (kind.check_trials != nullptr && ps.new_sweep) {
    const toml::node* where = ps.Table("parameters") ? (*ps.root)["parameters"].node() : nullptr;
    SWEEP_RETURN_IF_ERROR(kind.check_trials(c, *cfg, where));
  }
  return Status::Ok();
}

// ParseConfig: the file table by table, in this order (a later table's checks need what the
// earlier ones say), then the checks across tables.
Result<SweepConfig> ParseTables(std::string_view text, const std::string& path, ConfigUse use) {
  Checker c(path);
  SWEEP_ASSIGN_OR_RETURN(const toml::table root, ParseToml(c, text, path));
  SweepConfig cfg;
  cfg.path = path;
  cfg.text = std::string(text);
  SWEEP_RETURN_IF_ERROR(CheckTopLevel(c, root));
  ParseState ps(use);
  ps.root = &root;
  SWEEP_RETURN_IF_ERROR(ParseSweepTable(c, &ps, &cfg));
  SWEEP_RETURN_IF_ERROR(ParseSearchTable(c, &ps, &cfg));
  SWEEP_RETURN_IF_ERROR(ParseEarlyStoppingTable(c, &ps, &cfg));
  SWEEP_RETURN_IF_ERROR(ParseTrialTable(c, &ps, &cfg));
  SWEEP_RETURN_IF_ERROR(ParseExecutorTable(c, ps, &cfg));
  SWEEP_RETURN_IF_ERROR(ParseStoreTable(c, ps, &cfg));
  SWEEP_ASSIGN_OR_RETURN(ps.params, ParseParameters(c, ps));
  SWEEP_RETURN_IF_ERROR(ParseKindTable(c, &ps, &cfg));
  SWEEP_RETURN_IF_ERROR(CheckAcrossTables(c, ps, &cfg));
  return cfg;
}

}  // namespace

}  // namespace config_internal

Result<SweepConfig> ParseConfig(std::string_view text, const std::string& path, ConfigUse use) {
  return config_internal::ParseTables(text, path, use);
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

}  // namespace sweep
