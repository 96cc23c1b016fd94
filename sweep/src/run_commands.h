// The commands that run a sweep: `run` (with --dry-run, --resume and --from) and `resume`, with
// their remote-agent options (--listen, --token-file, --no-local). AddRunCommands registers them
// on the CLI; after parsing, Run() executes the one the command line named. Ctrl-C, SIGTERM and
// SIGHUP stop the sweep's trials, resumable. Not thread-safe; one per process.
#ifndef SWEEP_SWEEP_RUN_COMMANDS_H_
#define SWEEP_SWEEP_RUN_COMMANDS_H_

#include <memory>

#include "command_common.h"

namespace CLI {
class App;
}

namespace sweep {

// Adds run and resume to `app`; `argv0` is this binary as started (for its workers). The result
// must outlive app's parse.
std::unique_ptr<CommandGroup> AddRunCommands(CLI::App& app, const char* argv0);

}  // namespace sweep

#endif  // SWEEP_SWEEP_RUN_COMMANDS_H_
