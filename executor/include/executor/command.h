// Command trials: a user's own program as a trial. This header holds the pure parts the config
// loader shares with the runner: the argv template ("--lr={lr}") and the `sweep-report` line
// format. The runner itself (RunTrial with kind "command") is in trial.h. Pure functions: safe
// from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace sweep::executor {

// Placeholders every command may use besides the sweep's parameters.
//   {trial}      the trial number         {seed}   the trial's seed
//   {trial_dir}  its working directory    {gpus}   its CUDA ordinals, "0,1" ("" on CPU)
const std::vector<std::string>& CommandBuiltins();

// Checks a command template: not empty, argv[0] without placeholders, every `{name}` names one
// of `names` or a builtin, braces balanced (`{{` and `}}` are literal braces). The message
// names the argument.
Status CheckCommandTemplate(const std::vector<std::string>& argv,
                            const std::vector<std::string>& names);

// The program to execve: a path with a '/' as it is (a relative one is `workdir`'s), a bare name
// the first executable of that name on PATH; empty when PATH has none.
std::string ResolveProgram(const std::string& name, const std::string& workdir);
// InvalidArgument, naming the key, when `workdir` is not a folder on this machine or `program`
// (a command's argv[0]) is not an executable file there: what every trial run here would meet.
Status CheckProgram(std::string program, const std::string& workdir);

// Fills in a command template from `values` (parameters and builtins): strings as they are,
// numbers in their shortest round-trip form, booleans as true/false, lists and tables as JSON.
// An argument naming a value that is absent (a conditional parameter this trial does not have)
// is left out entirely, so "--momentum={momentum}" disappears with momentum.
Result<std::vector<std::string>> ExpandCommand(const std::vector<std::string>& argv,
                                               const nlohmann::json& values);

// One `sweep-report {...}` line from a program's stdout, read.
struct CommandReport {
  std::optional<int64_t> step;         // "step" when given
  std::optional<double> epoch;         // "epoch" when given
  nlohmann::json metrics;              // every other field with a finite number
  std::vector<std::string> nonfinite;  // NaN or infinite (Python's json writes NaN, Infinity)
  std::vector<std::string> ignored;    // fields that were not metrics (not numbers; no name)
};
inline constexpr std::string_view kReportPrefix = "sweep-report ";
// The longest metric name: a longer one (or an empty one) is not a metric, wherever the trial
// runs (the agent protocol refuses it).
inline constexpr size_t kMaxMetricNameBytes = 256;
// The longest report line read (thousands of metrics fit): one that could not cross from an
// agent to the coordinator in one frame is refused alike wherever the trial runs.
inline constexpr size_t kMaxReportBytes = 256 * 1024;
// nullopt: the line is not a report (no prefix). An error: it is one, but malformed. The line
// is read as a terminal shows it: from its last carriage return (a progress bar redrawn before
// the report), and blanks before the prefix are skipped.
std::optional<Result<CommandReport>> ParseReportLine(std::string_view line);
// Whether a line that is not a report has `sweep-report {` somewhere inside it (a report printed
// after other text on its line), which its program most likely meant as one.
bool MentionsReport(std::string_view line);

// `text` cut to at most about `max_bytes` (at a UTF-8 character boundary), saying how much was
// left out: for quoting a program's output, or its value, in a message.
std::string Abbreviate(std::string_view text, size_t max_bytes);

}  // namespace sweep::executor
