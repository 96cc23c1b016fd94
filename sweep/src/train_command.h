// `sweep train`: one trial of a config run in this process, no store, with its metrics printed
// per epoch (or one JSON object at the end). AddTrainCommand registers it on the CLI; after
// parsing, Run() executes it when the command line named it. Not thread-safe; one per process.
#ifndef SWEEP_SWEEP_TRAIN_COMMAND_H_
#define SWEEP_SWEEP_TRAIN_COMMAND_H_

#include <memory>

#include "command_common.h"

namespace CLI {
class App;
}

namespace sweep {

// Adds train to `app`. The result must outlive app's parse.
std::unique_ptr<CommandGroup> AddTrainCommand(CLI::App& app);

}  // namespace sweep

#endif  // SWEEP_SWEEP_TRAIN_COMMAND_H_
