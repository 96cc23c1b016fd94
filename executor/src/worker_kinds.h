// The kinds a worker runs, one file each (trainer_trial.cc, function_trial.cc,
// command_trial.cc), and the table RunTrial finds them in (trial.cc): a new kind is one file and
// one line there. Private to sweep_executor.
#pragma once

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "executor/trial.h"

namespace sweep::executor {

struct WorkerKind {
  TrialKind kind;
  TrialOutcome (*run)(const TrialTask& task, const ReportSink& sink, const std::atomic<bool>& stop,
                      const TrialHooks& hooks);
  std::vector<std::string> (*metrics)();  // what it reports, where known in advance
};

extern const WorkerKind kTrainerKind;
extern const WorkerKind kFunctionKind;
extern const WorkerKind kCommandKind;

// A failed outcome with `error`; kInterrupted where the machine, not the trial, stopped it.
TrialOutcome Failed(std::string error);
TrialOutcome Interrupted(std::string error);

}  // namespace sweep::executor
