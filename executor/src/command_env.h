// What a command trial's program is given: the values its command template is filled from,
// and its environment (the trial's GPUs, parameters, folder and seed on top of this process's
// own). Private to sweep_executor. Reads this process's environment: safe from any thread
// that does not change it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/trial.h"

namespace sweep::executor {

// The values a command template is filled from: the parameters and the builtins.
nlohmann::json CommandValues(const TrialTask& task, const std::string& trial_dir);

// What a program's environment gets on top of what it inherits.
std::vector<std::pair<std::string, std::string>> OurEnvironment(const TrialTask& task,
                                                                const std::string& trial_dir);

// The program's whole environment, "KEY=VALUE": this process's, less what is set for this
// process alone, with OurEnvironment over it.
std::vector<std::string> ProgramEnvironment(const TrialTask& task, const std::string& trial_dir);

}  // namespace sweep::executor
