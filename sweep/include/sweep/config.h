// SweepConfig: a sweep's TOML file, parsed and validated before anything runs.
// Every error names the file, line and column and the key ("quickstart.toml:12:7: parameters.lr:
// log_uniform needs min > 0 (got 0)"). Returned values are plain data owned by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "executor/trial.h"
#include "search/early_stopping.h"
#include "search/space.h"
#include "search/tpe.h"

namespace sweep {

// The kind of the config's trials ([trial] kind), named as the wire names it.
using executor::TrialKind;

// Nested as the file is: config.sweep.metric is [sweep] metric, config.trial.slots is [trial]
// gpus. Durations are in seconds.
struct SweepConfig {
  std::string path;  // the file it was read from
  std::string text;  // its contents, as stored with the sweep

  // [sweep] stop_when: end the sweep once a report reaches a target, e.g. "val_acc >= 0.9".
  struct Target {
    std::string metric;
    std::string op;  // ">=", ">", "<=", "<"
    double value = 0;
    bool Reached(double v) const;
    std::string ToString() const;
  };

  // [sweep]
  struct Sweep {
    std::string name;
    std::string metric;
    bool maximize = true;
    int64_t max_trials = 0;
    bool unbounded_trials = false;        // random search ended by time_budget or stop_when alone
    int max_concurrent = 0;               // 0: as many as the slots allow
    std::optional<double> time_budget_s;  // wall-clock budget
    uint64_t seed = 0;
    std::optional<Target> stop_when;
  };
  Sweep sweep;

  // [search]
  struct Search {
    std::string algorithm = "random";  // grid | random | tpe
    search::SearchSpace space;         // [parameters]
    search::TpeOptions tpe;            // algorithm = "tpe": its knobs, the other [search] keys
  };
  Search search;

  // [early_stopping]; maximize and metric copied from [sweep]
  search::SchedulerConfig early_stopping;

  // [trial]
  struct Trial {
    TrialKind kind = TrialKind::kTrainer;
    // Slots per trial: GPUs, or CPU slots where there is no GPU (the TOML key is trial.gpus).
    int slots = 1;
    int gpu_share = 1;  // k > 1: up to k 1-GPU trials share one GPU (opt-in)
    // order = "longest_first": draw the whole sweep from the sampler ahead and start the trials
    // with the most work first (trainer trials only), so no long one runs alone at the end.
    bool longest_first = false;
    int max_retries = 1;  // reruns of a trial whose worker died or hung
    // The sweep stops (interrupted, for resume) when this many trials of a run have failed
    // before reporting anything, none of the sweep's has completed or been pruned, and no
    // running trial may yet succeed: a broken program or setting, not a bad region of the space.
    // 0: never.
    int max_initial_failures = 10;
    double heartbeat_timeout_s = 60;  // a running worker silent this long is killed
    std::string checkpoint_dir;       // trainer trials' checkpoints; "": "<db>-checkpoints"
    // Only the checkpoints of this many best completed trials are kept (see CheckpointKeeper);
    // unset: every trial's.
    std::optional<int64_t> keep_checkpoints;
    // kind = "command": the program and its arguments, a template ("--lr={lr}").
    std::vector<std::string> command;
    std::string workdir;       // where the program starts: absolute (default: the config's folder)
    std::string trials_dir;    // each trial's directory and logs: "<trials_dir>/<sweep>/trial-N";
                               // "": "<db>-trials"
    double kill_grace_s = 10;  // SIGTERM, then SIGKILL this much later
    std::optional<double> timeout_s;  // a run of one trial longer than this fails
  };
  Trial trial;

  // [trainer] (defaults for trainer trials; [parameters] override them) or [function].
  nlohmann::json trainer = nlohmann::json::object();
  nlohmann::json function = nlohmann::json::object();

  // [executor]
  struct Executor {
    int cpu_slots = 0;            // 0: one per hardware thread
    double agent_timeout_s = 10;  // a remote agent silent this long is lost
  };
  Executor executor;

  // [store]
  struct Store {
    std::string path = "sweeps.db";
  };
  Store store;

  // "file:line:column" of the settings checked after parsing (when trials are placed, when the
  // program starts), for their errors; empty: not written.
  struct Where {
    std::string slots;    // trial.gpus
    std::string command;  // the program: trial.command's first string
    std::string workdir;  // trial.workdir
    std::string backend;  // trainer.backend, or the parameter
    std::string startup;  // search.n_startup_trials, or search.algorithm = "tpe"
  };
  Where where;
};

// max_trials of a random search with no max_trials, which its time_budget or stop_when ends.
inline constexpr int64_t kUnboundedTrials = int64_t{1} << 40;

// What a config is read for: a sweep needs to know when its search ends; one trial
// (`sweep train`) does not; a stored config read to show a sweep's results (kView) is checked
// as a sweep's, but not against this machine's files (its dataset may be elsewhere, or gone).
// kOneTrialOtherDataset: one trial whose dataset is given elsewhere (`sweep train --set
// dataset=...`), so the config's is not looked for. kResume: a stored config a sweep goes on
// with, checked as a sweep's. A stored config (kView, kResume) is not refused for what only
// later versions refuse in a new config (a sweep started before must still be resumed, shown).
// kSweepElsewhere: a new sweep whose coordinator runs on another machine (`k8s render`),
// checked as a new sweep's, but not against this machine's files. kSweepFrom: a new sweep that
// starts from another's trials (`run --from`), checked as kSweep but for what depends on how
// many it carries over.
enum class ConfigUse {
  kSweep,
  kOneTrial,
  kView,
  kOneTrialOtherDataset,
  kResume,
  kSweepElsewhere,
  kSweepFrom
};

// Reads and validates `path`. InvalidArgument (with file:line:column) for every user error;
// NotFound/IoError when the file cannot be read.
Result<SweepConfig> LoadConfig(const std::string& path, ConfigUse use = ConfigUse::kSweep);
// Same, from text already in memory; `path` is used in messages.
Result<SweepConfig> ParseConfig(std::string_view text, const std::string& path,
                                ConfigUse use = ConfigUse::kSweep);

// Why TPE would propose none of the sweep's trials, its `n_startup_trials` (the `carried` ones
// among them) leaving nothing of max_trials; empty when it proposes some, or is not the search.
std::string TpeStartupProblem(const SweepConfig& config, int64_t carried);

// Parses a `--set KEY=VALUE` value: a TOML value (0.05, [256, 128], "sgd", true), or, when the
// text is not valid TOML, the text itself as a string.
nlohmann::json ParseSetValue(std::string_view text);

// 1-128 letters, digits, '-', '_' or '.', but not "." or ".." (a name is also a folder's name,
// under the checkpoint and trial folders), and not starting with '-' (which reads as an option).
bool IsValidSweepName(std::string_view name);
inline constexpr std::string_view kSweepNameRule =
    "use 1-128 letters, digits, '-', '_' or '.', not \".\" or \"..\", not starting with '-'";

// Checks one trainer hyperparameter value by the trainer's own rules (type and range); the
// message names the option.
Status CheckTrainerOption(std::string_view key, const nlohmann::json& value);

// Checks that a `dataset` value names files that are there and readable here (after
// CheckTrainerOption has checked its form); the message names the file's key.
Status CheckDatasetHere(const nlohmann::json& value);

std::string FormatNumber(double v);  // shortest readable form: 0, 0.5, 1e-05

// "2h", "30m", "90s", "1h30m", "1.5h" or a bare number of seconds.
std::optional<double> ParseDuration(std::string_view text);
// Whole seconds as ParseDuration reads them back: "1s", "90m" is "1h30m", 0 is "0s".
std::string FormatDuration(double seconds);

// An agent's --retry-for: a duration of at most a year, in milliseconds, or -1 for "forever".
// The error names the flag. For `sweep agent`, and `slurm submit` before it writes one.
Result<int64_t> ParseRetryFor(const std::string& text);

// The closest of `candidates` to `word` within a small edit distance, or "".
std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates);

// The sweep's sampler: grid or random (seeded by the sweep's seed), as its run draws trials;
// for tpe, the random sampler its startup trials come from (the coordinator asks TPE after).
Result<std::unique_ptr<search::Sampler>> MakeSampler(const SweepConfig& cfg);

}  // namespace sweep
