// `sweep agent` (serve a coordinator started with --listen) and the hidden `sweep worker` (one
// per running trial, started by a coordinator or an agent). AddAgentCommands registers them on
// the CLI; after parsing, RunWorker() or Run() executes the one the command line named.
// Not thread-safe; one per process.
#ifndef SWEEP_SWEEP_AGENT_COMMANDS_H_
#define SWEEP_SWEEP_AGENT_COMMANDS_H_

#include <memory>
#include <optional>

#include "command_common.h"

namespace CLI {
class App;
}

namespace sweep {

class AgentCommands : public CommandGroup {
 public:
  // The worker's exit code when the command line named `worker`, else nullopt. Called first
  // after parsing: a worker sets up NCCL before any thread starts, and its exit code is
  // returned as it is.
  virtual std::optional<int> RunWorker() = 0;
};

// Adds agent and worker to `app`; `argv0` is this binary as started (for the agent's workers).
// The result must outlive app's parse.
std::unique_ptr<AgentCommands> AddAgentCommands(CLI::App& app, const char* argv0);

}  // namespace sweep

#endif  // SWEEP_SWEEP_AGENT_COMMANDS_H_
