// The coordinator: the loop that ties the sampler, the slots, the worker processes and the
// store together for one sweep. It is the only writer of the store while it runs and commits
// once per loop turn. Runs on the calling thread; `interrupt` may be set from a signal handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/store.h"
#include "sweep/config.h"

namespace sweep {

// `sweep resume NAME --max-trials N --time-budget D`: a new budget, each a total or (`more`) an
// amount added to the budget in force. It is kept with the sweep for its later resumes.
struct BudgetChange {
  std::optional<int64_t> max_trials;
  bool more_trials = false;
  std::optional<double> time_budget_s;  // of running time, over every run of the sweep
  bool more_time = false;
  bool empty() const { return !max_trials && !time_budget_s; }
};

struct RunOptions {
  std::vector<std::string> worker_command;       // argv of `sweep worker`
  std::vector<std::string> worker_env;           // extra "KEY=VALUE" for workers
  bool live_status = false;                      // one rewritten status line (a terminal)
  std::ostream* log = nullptr;                   // progress; nullptr: quiet
  const std::atomic<bool>* interrupt = nullptr;  // set: stop trials, record, return
  // Set too (a second signal): do not wait for the current epoch; end the workers now and
  // record their trials interrupted (they continue from their last checkpoint on resume).
  const std::atomic<bool>* interrupt_again = nullptr;
  // Remote agents (`--listen HOST:PORT`): empty listen_host means none. The caller has checked
  // the address (executor::ValidateListen); listen_port 0 picks a free port (logged).
  std::string listen_host;
  int listen_port = 0;
  std::string token;        // shared secret for the agents' challenge-response
  std::string token_file;   // where it was read (absolute), for the stored resume hint
  bool local_slots = true;  // also run trials on this machine's slots
  // `resume --max-initial-failures N`: this run's own [trial] max_initial_failures (a resumed
  // sweep keeps its config), e.g. 0 to go on whatever fails.
  std::optional<int> max_initial_failures;
  // Resume only: continue with this budget, a completed sweep too (see BudgetChange).
  BudgetChange budget;
  // Run only (`--from NAME`): start from that sweep's trials, where the spaces agree (see
  // sweep/src/carry_over.h).
  std::string from;
};

struct RunSummary {
  int64_t sweep_id = 0;
  store::StatusCounts counts;
  bool interrupted = false;
  double elapsed_s = 0;
  int64_t trials_started = 0;
  bool already_complete = false;  // resume found nothing left to do
  std::string no_budget_helps;    // and why a larger budget would not change that, or ""
  int listen_port = 0;            // the port it took agents on (--listen), else 0
};

// What this machine refuses before anything is recorded (RunSweep refuses it too): a trial
// needing more slots than this machine offers with no agents to come, and a command trial's
// program or folder missing here where trials run here. Discovers the local slots. For `run` to
// call before it opens (and so makes) a store.
Status CheckRunHere(const SweepConfig& config, const RunOptions& options);
// The error listening on options' --listen port would meet now (another program holds it).
Status CheckCanListen(const RunOptions& options);

// How a sweep's writes to the store at `path` wait for another process's write lock (a sqlite3
// shell, a viewer): up to ten minutes, said every half minute on options.log, ended by an
// interrupt. For the store's opening too (store::Store::Open).
store::LockWait SweepLockWait(const RunOptions& options, const std::string& path);

// Why trials here could not use `dir` as trainer.cache_dir (made when missing): a file in
// the way, a read-only folder. Empty when they can, or `dir` is empty (the default is used).
// They go on without it, each decoding the dataset itself.
std::string UnusableCacheDir(const std::string& dir);

// Records the sweep (AlreadyExists if its name is taken) and runs it to the end.
Result<RunSummary> RunSweep(const SweepConfig& config, store::Store& store,
                            const RunOptions& options);

// Continues the stored sweep `name` whose coordinator died or was stopped, from the store
// alone: its config is the stored text; trials left RUNNING become INTERRUPTED; interrupted
// trials run again first (from their checkpoints, when the trainer left one); numbering goes on
// after the highest stored trial. Busy when another process runs the sweep (the message names
// its pid and host); NotFound for an unknown name. With options.budget it goes on to the new
// budget, a completed sweep too: the sampler continues where it stopped and early stopping's
// rungs are replayed; InvalidArgument when the new budget leaves nothing to run (and why).
Result<RunSummary> ResumeSweep(const std::string& name, store::Store& store,
                               const RunOptions& options);

// The store's file as its folders are named after: `db` through links, and however it is
// spelt (`db` itself when that cannot be resolved).
std::string StoreFile(const std::string& db);
// Where a trainer sweep's trials checkpoint on this machine: [trial] checkpoint_dir (the
// config's folder's when relative), else beside the store file, then the sweep's name.
std::string CheckpointDirFor(const SweepConfig& config, const std::string& db_file);
// Where a command sweep's trials get their folders (trial-N inside): [trial] trials_dir (the
// config's folder's when relative), else beside the store file, then the sweep's name.
std::string CommandTrialsDir(const SweepConfig& config, const std::string& db_file);
// A command trial's task settings (see command_trial.h): what its runner reads.
nlohmann::json CommandSettings(const SweepConfig& config, const std::string& trial_dir,
                               const std::string& sweep_key);

// Checks everything `run` checks, then prints the trials it would start at once (at most 10):
// their parameters and slots, and for a command its argv, the program PATH resolves and the
// variables set in its environment. Touches no store and starts nothing.
Status DryRun(const SweepConfig& config, const RunOptions& options, const std::string& db,
              std::ostream& out);

// The seed a trial's trainer gets unless the config sets one: a mix of the sweep seed and the
// trial number, so trials differ but a rerun repeats.
uint64_t TrialSeed(uint64_t sweep_seed, int64_t number);

}  // namespace sweep
