// The commands that look at a sweep's results: `show` (one trial, with its curves drawn in the
// terminal), `export` (CSV / JSON for pandas and spreadsheets), `report` (one self-contained
// HTML page) and `status --watch`. AddViewCommands registers them on the CLI; after parsing,
// Run() executes the one the command line named. Not thread-safe; one per process.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace sweep {

class ViewCommands {
 public:
  virtual ~ViewCommands() = default;
  // The exit code of the view command given on the command line (0 success, 1 runtime failure,
  // 2 usage error or an unknown sweep or trial), or nullopt when it named none of them.
  virtual std::optional<int> Run() = 0;
};

// Adds show, export and report to `app`, and --watch / --interval to its `status` command
// (which must be registered already). The result must outlive app's parse.
std::unique_ptr<ViewCommands> AddViewCommands(CLI::App& app);

// Adds `--db PATH` to `sub`, every command's store option. An empty PATH (a shell variable left
// unset) is a usage error, never taken to mean the default file; `show_default` shows db's
// value as the default in --help.
void AddDbOption(CLI::App& sub, std::string& db, const std::string& help, bool show_default);

}  // namespace sweep
