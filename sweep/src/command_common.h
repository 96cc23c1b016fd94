// What the CLI's command groups share: the interface each group implements, the interrupt flags
// that Ctrl-C, SIGTERM and SIGHUP set, this binary's path (to start workers) and the UTF-8 check
// of paths. One process runs one command; nothing here is for several threads but the flags.
#ifndef SWEEP_SWEEP_COMMAND_COMMON_H_
#define SWEEP_SWEEP_COMMAND_COMMON_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace CLI {
class Validator;
}  // namespace CLI

namespace sweep {

// A group of commands registered on the CLI by its Add…Commands function. After parsing, Run()
// executes the one the command line named. The group must outlive the app's parse.
class CommandGroup {
 public:
  virtual ~CommandGroup() = default;
  // The exit code of the group's command given on the command line, or nullopt when it named
  // none of them.
  virtual std::optional<int> Run() = 0;
};

// Set by the first Ctrl-C / SIGTERM / SIGHUP (after StopOnSignals or StopTrainOnSignals).
std::atomic<bool>& InterruptRequested();
// Set by a second Ctrl-C / SIGTERM: stop at once. A hangup never sets it.
std::atomic<bool>& InterruptAgain();
// run, resume, agent: SIGINT, SIGTERM and SIGHUP set the flags above (a closed terminal stops a
// sweep as Ctrl-C does: trials interrupted, resumable).
void StopOnSignals();
// `sweep agent`: as StopOnSignals, and SIGUSR1 too: the warning a batch system sends before a
// time limit or a preemption (Slurm's --signal), so the agent stops at its trials' checkpoints.
void StopAgentOnSignals();
// `sweep train`: the first SIGINT / SIGTERM / SIGHUP sets InterruptRequested (stop after the
// current epoch, or at the next step with a checkpoint_path to keep it); a second SIGINT or
// SIGTERM ends the process at once, by that signal.
void StopTrainOnSignals();

// The path of this binary (/proc/self/exe), else argv0: what workers are started from.
std::string SelfExe(const char* argv0);

// The store, the workers' tasks and --json carry paths as JSON text, which is UTF-8: a path
// (made absolute, as they carry it) that is not is refused where it enters, by name.
Status CheckTextPath(const std::string& what, const std::string& path);

// A check of an option that takes a whole number from `min` to `max` (nullopt: no bound above),
// whose refusal says which rule the value broke: "'abc' is not a whole number", "0 is below
// 1", rather than one range for every mistake.
CLI::Validator WholeNumber(int64_t min, std::optional<int64_t> max = std::nullopt);

}  // namespace sweep

#endif  // SWEEP_SWEEP_COMMAND_COMMON_H_
