// The runner behind RunTrial for kind "command" (see executor/command.h for the template and
// report format). Private to sweep_executor.
#pragma once

#include <atomic>
#include <functional>

#include "executor/trial.h"

namespace sweep::executor {

// Settings it reads from task.settings: command (argv template), workdir, trial_dir (stdout.log
// and stderr.log go there; created when missing), metric (a NaN in it fails the trial),
// kill_grace_s (SIGTERM to SIGKILL, default 10), timeout_s (0 or absent: none), sweep_key (tells
// the sweep from another of its name: a folder of a run again that another sweep's runs left is
// cleared, not gone on from). trial_dir/.sweep-runs records each run (where its output starts
// in stdout.log, the stored reports it followed): a run again first reports, from stdout.log,
// what earlier runs printed that the store lacks (past task.stored_step).
// `hooks.idle` (when set) is called about every 100 ms while the program runs, between its
// reports: where the caller reads its own messages (a stop) during a long silent epoch;
// `hooks.started` gets the program's process group as soon as it runs.
TrialOutcome RunCommandTrial(const TrialTask& task, const ReportSink& sink,
                             const std::atomic<bool>& stop, const TrialHooks& hooks);

}  // namespace sweep::executor
