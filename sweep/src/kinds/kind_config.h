// A trial kind as the config reader sees it: the [trial] keys and the table it takes, what its
// reports count, and its own checks. config.cc asks these, never a kind's name. Each kind's file
// (kinds/*.cc) defines one beside its TrialKindRules; trial_kind.cc lists them, one line each.
#pragma once

#include <vector>

#include <toml++/toml.h>

#include "base/status.h"
#include "config_parse.h"
#include "sweep/config.h"

namespace sweep::config_internal {

struct KindConfig {
  TrialKind kind = TrialKind::kTrainer;
  // Its own table ("trainer", "function"), or null where [trial] holds its settings.
  const char* table = nullptr;
  const char* unit = "epochs";  // what its reports' resource counts, for messages
  bool whole_units = true;      // that resource comes in whole units (max_resource must be whole)
  bool length_known = true;     // a trial's length can be read from the config and parameters
  bool checkpoints = false;     // [trial] keep_checkpoints and checkpoint_dir apply
  bool work_estimate = false;   // [trial] order = "longest_first" applies
  bool program = false;         // [trial] command, workdir, trials_dir, kill_grace, timeout apply
  // Its table and the parameters it receives, read and checked; the metric's default and
  // checks. Sets ps->natural_max_resource where every trial runs to one known length.
  Status (*parse)(const Checker& c, ParseState* ps, SweepConfig* cfg) = nullptr;
  // Its rules on [early_stopping] (written at `where`) and on sweep.stop_when; null for none.
  Status (*check_early_stopping)(const Checker& c, const toml::node& where,
                                 const SweepConfig& cfg) = nullptr;
  Status (*check_stop_when)(const Checker& c, const toml::node& written,
                            const SweepConfig::Target& target, const ParseState& ps) = nullptr;
  // A new sweep's trials, checked as each would start; null for none.
  Status (*check_trials)(const Checker& c, const SweepConfig& cfg,
                         const toml::node* where) = nullptr;
};

extern const KindConfig kTrainerConfig;
extern const KindConfig kFunctionConfig;
extern const KindConfig kCommandConfig;

const KindConfig& KindConfigOf(TrialKind kind);
// Every kind's, in the order trial_kind.cc lists them.
std::vector<const KindConfig*> AllKindConfigs();

}  // namespace sweep::config_internal
