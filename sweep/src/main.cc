// The `sweep` command line: main() sets up the CLI, registers each group of commands (one file
// each: run_commands, train_command, query_commands, manage_commands, devices_command,
// agent_commands, cluster_commands, view_commands) and runs the one the command line names.
// Exit codes: 0 success; 1 runtime failure; 2 usage or config error. Errors go to stderr as one
// line naming the file, key, sweep or trial at fault.
#include <algorithm>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "agent_commands.h"
#include "build_info.h"
#include "cluster_commands.h"
#include "devices_command.h"
#include "manage_commands.h"
#include "output.h"
#include "query_commands.h"
#include "run_commands.h"
#include "sweep/config.h"
#include "train_command.h"
#include "view_commands.h"

namespace {

using sweep::Fail;
using sweep::kExitUsage;
using sweep::Status;

const char* kExamples = R"(
Examples:
  sweep run configs/quickstart.toml          run a sweep (results in ./sweeps.db)
  sweep best quickstart --top 5              the best trials so far
  sweep resume quickstart                    continue after a crash or Ctrl-C
  sweep trials quickstart --status failed    trials by state, with their errors
  sweep status quickstart --json             counts, running trials, best so far
  sweep train configs/quickstart.toml --set lr=0.1 --set hidden=[512,256]
                                             one trial, no store, per-epoch metrics
)";

// argv with a leading `--db PATH` (or `--db=PATH`) moved after the command that follows it.
std::vector<char*> DbFlagAfterCommand(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  if (argc < 3) return args;
  const std::string_view first = argv[1];
  const size_t taken = first == "--db" ? 2 : first.starts_with("--db=") ? 1 : 0;
  if (taken == 0 || argc < 1 + static_cast<int>(taken) + 1) return args;
  char* command = argv[1 + taken];
  if (command[0] == '-') return args;
  args.erase(args.begin() + 1, args.begin() + 1 + static_cast<ptrdiff_t>(taken));
  args.insert(args.begin() + 2, argv + 1, argv + 1 + taken);
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then fails the write that passes it, with a message naming the
  // file (EFBIG), instead of ending the process; workers inherit this.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"sweep: hyperparameter sweeps with an embedded data-parallel trainer"};
  app.footer(kExamples);
  // What was built and from which commit: the first thing a bug report needs.
  app.set_version_flag("--version", sweep::VersionText(),
                       "the version, its commit, and what was compiled in");
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");

  // In the order --help lists them. show, export, report and status --watch come last:
  // view_commands adds --watch to the `status` that query_commands registers.
  std::vector<std::unique_ptr<sweep::CommandGroup>> groups;
  groups.push_back(sweep::AddRunCommands(app, argv[0]));
  groups.push_back(sweep::AddTrainCommand(app));
  groups.push_back(sweep::AddQueryCommands(app));
  groups.push_back(sweep::AddManageCommands(app));
  groups.push_back(sweep::AddDevicesCommand(app));
  std::unique_ptr<sweep::AgentCommands> agents = sweep::AddAgentCommands(app, argv[0]);
  groups.push_back(sweep::AddClusterCommands(app, argv[0]));
  std::unique_ptr<sweep::ViewCommands> views = sweep::AddViewCommands(app);

  // `sweep --db PATH list` (the global-option habit of git -C or docker -H): --db before the
  // command moves after it, where each command that reads a store takes it.
  std::vector<char*> args = DbFlagAfterCommand(argc, argv);
  if (args[1] != argv[1]) {
    const std::vector<CLI::App*> subs = app.get_subcommands(
        [&](const CLI::App* sub) { return sub->get_name() == std::string_view(args[1]); });
    if (!subs.empty() && subs.front()->get_option_no_throw("--db") == nullptr) {
      return Fail(
          Status::InvalidArgument(std::string("--db: `sweep ") + args[1] + "` reads no store"));
    }
  }
  argc = static_cast<int>(args.size());
  argv = args.data();
  // CLI11 says only "A subcommand is required" for a misspelt command: name it and suggest one.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (!sub->get_group().empty()) commands.push_back(sub->get_name());
    }
    if (std::find(commands.begin(), commands.end(), argv[1]) == commands.end() &&
        std::string_view(argv[1]) != "worker") {
      std::string msg = std::string("unknown command '") + argv[1] + "'";
      std::string hint = sweep::DidYouMean(argv[1], commands);
      if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
      return Fail(Status::InvalidArgument(msg + " (sweep --help lists them)"));
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return sweep::CheckStandardOutput(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return sweep::CheckStandardOutput(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return sweep::CheckStandardOutput(app.exit(e));
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (std::optional<int> worker = agents->RunWorker()) return *worker;
  const int code = [&] {
    // First: `status --watch` is a view, `status` alone a query.
    if (std::optional<int> view = views->Run()) return *view;
    if (std::optional<int> agent = agents->Run()) return *agent;
    for (const auto& group : groups) {
      if (std::optional<int> done = group->Run()) return *done;
    }
    return kExitUsage;
  }();
  return sweep::CheckStandardOutput(code);
}
