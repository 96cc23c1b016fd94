// `sweep devices`: the GPUs (or CPU slots) trials would run on here. AddDevicesCommand registers
// it on the CLI; after parsing, Run() executes it when the command line named it.
// Not thread-safe; one per process.
#ifndef SWEEP_SWEEP_DEVICES_COMMAND_H_
#define SWEEP_SWEEP_DEVICES_COMMAND_H_

#include <memory>

#include "command_common.h"

namespace CLI {
class App;
}

namespace sweep {

// Adds devices to `app`. The result must outlive app's parse.
std::unique_ptr<CommandGroup> AddDevicesCommand(CLI::App& app);

}  // namespace sweep

#endif  // SWEEP_SWEEP_DEVICES_COMMAND_H_
