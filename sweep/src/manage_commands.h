// Commands that change what the store holds beyond running a sweep: `sweep delete`.
// AddManageCommands registers them on the CLI; after parsing, Run() executes the one the command
// line named. Not thread-safe; one per process.
#ifndef SWEEP_SWEEP_MANAGE_COMMANDS_H_
#define SWEEP_SWEEP_MANAGE_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "command_common.h"
#include "store/store.h"

namespace CLI {
class App;
}

namespace sweep {

// Adds delete to `app`. The result must outlive app's parse.
std::unique_ptr<CommandGroup> AddManageCommands(CLI::App& app);

// What a sweep holds on this machine's disk besides its rows: its checkpoint folder (trainer
// trials) and its trials' folders (command trials), where they exist, and their bytes.
struct SweepFootprint {
  std::vector<std::string> folders;
  int64_t bytes = 0;
};
SweepFootprint FootprintOf(const store::SweepRecord& sweep, const std::string& db);

// `sweep delete NAME`: refuses a sweep another process runs (exit 3); says what it would
// remove, asks on a terminal unless `yes`, refuses elsewhere without `yes`; then removes the
// sweep's rows and folders and prints what it removed.
int CmdDelete(const std::string& db, const std::string& name, bool yes);

// "12.3 MB": bytes for people.
std::string HumanBytes(int64_t bytes);

}  // namespace sweep

#endif  // SWEEP_SWEEP_MANAGE_COMMANDS_H_
