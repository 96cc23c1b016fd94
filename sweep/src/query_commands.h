// The commands that read a sweep's trials from the store and print them: `best`, `trials`,
// `status` (without --watch, which view_commands.h adds) and `list`. AddQueryCommands registers
// them on the CLI; after parsing, Run() executes the one the command line named.
// Not thread-safe; one per process.
#ifndef SWEEP_SWEEP_QUERY_COMMANDS_H_
#define SWEEP_SWEEP_QUERY_COMMANDS_H_

#include <memory>

#include "command_common.h"

namespace CLI {
class App;
}

namespace sweep {

// Adds best, trials, status and list to `app`, in that order. The result must outlive app's parse.
std::unique_ptr<CommandGroup> AddQueryCommands(CLI::App& app);

}  // namespace sweep

#endif  // SWEEP_SWEEP_QUERY_COMMANDS_H_
