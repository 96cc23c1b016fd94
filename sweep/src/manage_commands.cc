#include "manage_commands.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "output.h"
#include "sweep/config.h"
#include "sweep/coordinator.h"
#include "sweep_lock.h"
#include "view_commands.h"

namespace sweep {

namespace fs = std::filesystem;

std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

SweepFootprint FootprintOf(const store::SweepRecord& sweep, const std::string& db) {
  SweepFootprint out;
  auto cfg = ParseConfig(sweep.config_text, sweep.config_path, ConfigUse::kView);
  if (!cfg.ok()) return out;
  // The name it ran under (`run --name` overrides the config's): its folders are named so, and
  // the config's name may be another sweep's.
  cfg->sweep.name = sweep.name;
  const std::string db_file = StoreFile(db);
  std::error_code ec;
  std::vector<std::string> candidates;
  if (cfg->trial.kind == TrialKind::kTrainer) candidates.push_back(CheckpointDirFor(*cfg, db_file));
  if (cfg->trial.kind == TrialKind::kCommand) candidates.push_back(CommandTrialsDir(*cfg, db_file));
  for (const std::string& dir : candidates) {
    if (!fs::is_directory(dir, ec)) continue;
    out.folders.push_back(dir);
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code size_ec;
      if (it->is_regular_file(size_ec)) {
        const auto size = it->file_size(size_ec);
        if (!size_ec) out.bytes += static_cast<int64_t>(size);
      }
    }
  }
  return out;
}

int CmdDelete(const std::string& db, const std::string& name, bool yes) {
  std::error_code ec;
  if (!fs::exists(db, ec)) return Fail(NoSuchDatabase(db));
  auto st = store::Store::Open(db, store::OpenMode::kReadWrite);
  if (!st.ok()) return Fail(st.status());
  auto sw = FindSweepOrSuggest(**st, name);
  if (!sw.ok()) return Fail(sw.status());
  // Held while it deletes: no resume can start the sweep meanwhile.
  auto lock = SweepLock::Acquire(db, sw->id);
  if (!lock.ok()) {
    if (lock.status().code() != Status::Code::kBusy) return Fail(lock.status());
    return Fail(Status::Busy("sweep '" + name + "' is being run by " + DescribeOwner(sw->owner) +
                             "; stop it first (delete refuses a running sweep)"));
  }
  if (Status s = RefuseOwnerWithoutLockFile((*st)->path(), *sw, name,
                                            "stop it first (delete refuses a running sweep)");
      !s.ok()) {
    return Fail(s);
  }
  auto rows = (*st)->CountRows(sw->id);
  if (!rows.ok()) return Fail(rows.status());
  const SweepFootprint disk = FootprintOf(*sw, db);
  std::string what = "sweep '" + name + "' (" + std::string(store::ToString(sw->status)) + ") in " +
                     db + ": " + std::to_string(rows->trials) + " trial(s), " +
                     std::to_string(rows->reports) + " report(s), " + std::to_string(rows->events) +
                     " event(s)";
  for (const std::string& f : disk.folders) what += "; " + f;
  if (!disk.folders.empty()) what += " (" + HumanBytes(disk.bytes) + ")";
  if (!yes) {
    if (::isatty(STDIN_FILENO) == 0) {
      return Fail(
          Status::InvalidArgument("would delete " + what + "; run again with --yes to delete it"));
    }
    std::cerr << "delete " << what << "? [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      std::cerr << "sweep: nothing deleted\n";
      return kExitRuntime;
    }
  }
  if (Status s = (*st)->DeleteSweep(sw->id); !s.ok()) return Fail(s);
  std::string left;
  for (const std::string& f : disk.folders) {
    fs::remove_all(f, ec);
    if (ec) left += "; " + f + " could not be removed: " + ec.message();
  }
  std::cout << "deleted " << what << "\n";
  if (!left.empty()) {
    std::cerr << "sweep: its rows are gone" << left << "\n";
    return kExitRuntime;
  }
  return kExitOk;
}

namespace {

class ManageCommandsImpl final : public CommandGroup {
 public:
  explicit ManageCommandsImpl(CLI::App& app) {
    delete_cmd_ = app.add_subcommand("delete", "remove a sweep: its rows, checkpoints and folders");
    delete_cmd_->add_option("NAME", delete_name_, "sweep name")->required();
    AddDbOption(*delete_cmd_, db_, "SQLite file", true);
    delete_cmd_->add_flag("--yes", delete_yes_,
                          "do not ask (needed where stdin is not a terminal)");
  }

  std::optional<int> Run() override {
    if (delete_cmd_->parsed()) return CmdDelete(db_, delete_name_, delete_yes_);
    return std::nullopt;
  }

 private:
  CLI::App* delete_cmd_ = nullptr;
  std::string db_ = "sweeps.db";
  std::string delete_name_;
  bool delete_yes_ = false;
};

}  // namespace

std::unique_ptr<CommandGroup> AddManageCommands(CLI::App& app) {
  return std::make_unique<ManageCommandsImpl>(app);
}

}  // namespace sweep
