// `sweep slurm submit|status|cancel` (agents as a Slurm job array) and `sweep k8s render`
// (manifests for a sweep on Kubernetes). AddClusterCommands registers them on the CLI; after
// parsing, Run() executes the one the command line named. Not thread-safe; one per process.
#ifndef SWEEP_SWEEP_CLUSTER_COMMANDS_H_
#define SWEEP_SWEEP_CLUSTER_COMMANDS_H_

#include <memory>

#include "command_common.h"

namespace CLI {
class App;
}

namespace sweep {

// Adds slurm and k8s to `app`; `argv0` is this binary as started (what the nodes run). The
// result must outlive app's parse.
std::unique_ptr<CommandGroup> AddClusterCommands(CLI::App& app, const char* argv0);

}  // namespace sweep

#endif  // SWEEP_SWEEP_CLUSTER_COMMANDS_H_
