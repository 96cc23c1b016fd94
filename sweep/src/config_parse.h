// What the config parser's files share (config.cc, config_space.cc, config_values.cc and each
// trial kind's file in kinds/): the TOML helpers, the Checker that words every error, and
// ParseState, what the tables wrote that checks across tables need. Private to sweep_core; pure
// functions of their arguments, safe from several threads.
#ifndef SWEEP_SWEEP_CONFIG_PARSE_H_
#define SWEEP_SWEEP_CONFIG_PARSE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "search/space.h"
#include "sweep/config.h"

namespace sweep::config_internal {

// Converts a TOML node to JSON; dates and times become strings.
nlohmann::json ToJson(const toml::node& node);

// The first nan or inf in `node` (itself, or inside its arrays and tables), else null: JSON, in
// which parameters are stored and passed on, has no such numbers.
const toml::node* NonFinite(const toml::node& node);

// "a table", "an integer", ...: a node's type as a message names it.
std::string TypeName(const toml::node& node);

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
        if (!v.is_table() && !v.is_array_of_tables()) {
          return Error(k.source(), key,
                       "'" + key +
                           "' is a key outside any table: put it under the table it belongs "
                           "to, such as [sweep]");
        }
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
  // A duration written "90s", "5m", "1h30m" or as a number of seconds, within [lo, hi];
  // `range` says the bounds in the error.
  Result<double> Duration(const toml::node& n, const std::string& key, double lo, double hi,
                          const char* range) const {
    std::optional<double> secs;
    if (auto written = n.value_exact<std::string>()) {
      secs = ParseDuration(*written);
    } else if (n.is_number()) {
      secs = n.value<double>();
    }
    if (!secs || !std::isfinite(*secs) || *secs < lo || *secs > hi) {
      return Error(n, key, std::string("expected a duration ") + range);
    }
    return *secs;
  }

 private:
  std::string path_;
};

// True when (line, column) is the end of a line: where a string that lacks its closing quote
// runs into the newline.
bool AtLineEnd(std::string_view text, const toml::source_position& at);
// The key of the `key = value` line that (line, column) falls in, as written ("x1", "\"x1\""):
// what the line has before the last '=' ahead of that column; empty when none.
std::string KeyBefore(std::string_view text, const toml::source_position& at);

// Finds a byte >= 0x80 outside strings and comments (where TOML forbids it).
Status CheckNonAsciiPlacement(const Checker& c, std::string_view text);

// A parameter as written, with where it was written, before the trial kind is known.
struct ParamEntry {
  search::Parameter parameter;
  const toml::node* node = nullptr;
  toml::source_region key_source;
};

// What the tables wrote that the checks across tables need, gathered as ParseConfig reads the
// file table by table. A node or table is null where the file does not write it.
struct ParseState {
  explicit ParseState(ConfigUse read_for)
      : use(read_for),
        check_dataset(use != ConfigUse::kView && use != ConfigUse::kOneTrialOtherDataset &&
                      use != ConfigUse::kSweepElsewhere),
        one_trial(use == ConfigUse::kOneTrial || use == ConfigUse::kOneTrialOtherDataset),
        stored(use == ConfigUse::kView || use == ConfigUse::kResume),
        new_sweep(use == ConfigUse::kSweep || use == ConfigUse::kSweepElsewhere ||
                  use == ConfigUse::kSweepFrom) {}

  const ConfigUse use;
  const bool check_dataset;  // the config's dataset is read here (its files found and checked)
  const bool one_trial;      // `sweep train`
  const bool stored;         // a stored config: kView or kResume
  const bool new_sweep;      // a sweep to start: kSweep, kSweepElsewhere or kSweepFrom

  const toml::table* root = nullptr;
  // [sweep]: metric and mode as written, before the trial kind's defaults.
  const toml::table* sweep = nullptr;
  const toml::node* metric_node = nullptr;
  std::optional<std::string> metric;
  std::optional<std::string> mode;
  std::optional<int64_t> max_trials;
  // [search]
  const toml::table* search_table = nullptr;
  const toml::node* algorithm_node = nullptr;
  // [early_stopping]
  const toml::table* es = nullptr;
  const toml::node* max_resource_node = nullptr;
  // [trial]
  const toml::node* kind_node = nullptr;
  const toml::node* command_node = nullptr;
  const toml::node* order_node = nullptr;
  // [parameters], in the order written.
  std::vector<ParamEntry> params;
  // What every trial runs to (epochs or steps), when it is fixed: set by the trial kind's table.
  std::optional<double> natural_max_resource;

  // The table `name` of the file, or null.
  const toml::table* Table(const char* name) const { return (*root)[name].as_table(); }
};

// ---- config_space.cc: [parameters] and the trial count ----

// [parameters], each checked on its own, in the order the file writes them.
Result<std::vector<ParamEntry>> ParseParameters(const Checker& c, const ParseState& ps);
// The search space from the parameters, and the sweep's trial count (grid size, max_trials, or
// unbounded), with the search algorithm's rules on both.
Status BuildSpace(const Checker& c, const ParseState& ps, SweepConfig* cfg);

}  // namespace sweep::config_internal

#endif  // SWEEP_SWEEP_CONFIG_PARSE_H_
