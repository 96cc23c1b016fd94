#include "trial_paths.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <vector>

#include "sweep/coordinator.h"

namespace sweep {

std::string StoreFile(const std::string& db) {
  std::error_code ec;
  std::string file = std::filesystem::weakly_canonical(db, ec).string();
  return ec || file.empty() ? db : file;
}

std::string CheckpointDirFor(const SweepConfig& config, const std::string& db_file) {
  return config.trial.checkpoint_dir.empty()
             ? db_file + "-checkpoints/" + config.sweep.name
             : (std::filesystem::absolute(config.path).parent_path() / config.trial.checkpoint_dir /
                config.sweep.name)
                   .string();
}

std::string CommandTrialsDir(const SweepConfig& config, const std::string& db_file) {
  const std::string dir =
      config.trial.trials_dir.empty()
          ? db_file + "-trials"
          : (std::filesystem::absolute(config.path).parent_path() / config.trial.trials_dir)
                .string();
  return std::filesystem::absolute(dir).lexically_normal().string() + "/" + config.sweep.name;
}

Result<TrialPaths> TrialPaths::Make(const SweepConfig& config, const std::string& db_file) {
  TrialPaths paths;
  std::error_code ec;
  if (config.trial.kind == TrialKind::kTrainer) {
    // Each trainer trial checkpoints into a file of its own, so an interrupted trial goes on
    // from its last epoch. The default is beside the store here, and in the agent's folder on
    // an agent, however --db was spelt (an absolute one names a folder an agent may not have).
    const std::string db_name = std::filesystem::path(db_file).filename().string();
    paths.agent_checkpoint_dir_ =
        (config.trial.checkpoint_dir.empty() ? db_name + "-checkpoints"
                                             : config.trial.checkpoint_dir) +
        "/" + config.sweep.name;
    paths.checkpoint_dir_ = CheckpointDirFor(config, db_file);
    paths.stored_checkpoint_dir_ =
        std::filesystem::absolute(paths.checkpoint_dir_).lexically_normal().string();
    std::filesystem::create_directories(paths.checkpoint_dir_, ec);
    if (ec) {
      return Status::IoError(
          paths.checkpoint_dir_ +
          ": cannot create the checkpoint directory (trial.checkpoint_dir): " + ec.message());
    }
  }
  if (config.trial.kind == TrialKind::kCommand) {
    // Each command trial gets a directory of its own: its logs, and room for its files.
    paths.trials_dir_ = CommandTrialsDir(config, db_file);
    std::filesystem::create_directories(paths.trials_dir_, ec);
    if (ec) {
      return Status::IoError(
          paths.trials_dir_ +
          ": cannot create the trials directory (trial.trials_dir): " + ec.message());
    }
  }
  return paths;
}

namespace {

// Whether create_directories(dir) could succeed, and files be made in it: its nearest existing
// ancestor (or itself) is a folder this process may write in.
Status CheckFolderCanBeMade(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::path at = std::filesystem::absolute(dir, ec).lexically_normal();
  if (ec) return Status::IoError(dir + ": cannot make the " + what + ": " + ec.message());
  while (!std::filesystem::exists(at, ec) && at.has_parent_path() && at != at.parent_path()) {
    at = at.parent_path();
  }
  if (!std::filesystem::is_directory(at, ec)) {
    return Status::IoError(dir + ": cannot make the " + what + ": " + at.string() +
                           " is not a folder");
  }
  if (::access(at.c_str(), W_OK | X_OK) != 0) {
    return Status::IoError(dir + ": cannot make the " + what + ": " + at.string() + ": " +
                           std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

Status TrialPaths::CheckCanMake(const SweepConfig& config, const std::string& db_file) {
  if (config.trial.kind == TrialKind::kTrainer) {
    return CheckFolderCanBeMade(CheckpointDirFor(config, db_file),
                                "checkpoint directory (trial.checkpoint_dir)");
  }
  if (config.trial.kind == TrialKind::kCommand) {
    return CheckFolderCanBeMade(CommandTrialsDir(config, db_file),
                                "trials directory (trial.trials_dir)");
  }
  return Status::Ok();
}

std::string TrialPaths::TrialDir(int64_t number) const {
  if (trials_dir_.empty()) return "";
  return trials_dir_ + "/trial-" + std::to_string(number);
}

std::string TrialPaths::StoredCheckpoint(int64_t number) const {
  if (stored_checkpoint_dir_.empty()) return "";
  return stored_checkpoint_dir_ + "/trial-" + std::to_string(number) + ".ckpt";
}

std::string TrialPaths::RunCheckpoint(int64_t number, const ServerInfo& server) const {
  if (server.this_machine) return StoredCheckpoint(number);
  std::filesystem::path path = WorkerCheckpoint(number, /*this_machine=*/false);
  if (path.empty()) return "";
  // An absolute checkpoint_dir is the same path on every server (storage they share, as a
  // trial that runs again elsewhere needs): named as it is.
  if (path.is_absolute()) return path.lexically_normal().string();
  if (!server.folder.empty()) path = server.folder / path;
  return server.name + ":" + path.lexically_normal().string();
}

std::string TrialPaths::WorkerCheckpoint(int64_t number, bool this_machine) const {
  const std::string& dir = this_machine ? checkpoint_dir_ : agent_checkpoint_dir_;
  if (dir.empty()) return "";
  return dir + "/trial-" + std::to_string(number) + ".ckpt";
}

void TrialPaths::DeleteDoomed(std::ostream* log) {
  if (doomed_.empty()) return;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (auto it = std::filesystem::directory_iterator(checkpoint_dir_, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const auto trial = CheckpointTrial(it->path().filename().string());
    if (trial && doomed_.count(*trial)) files.push_back(it->path());
  }
  for (const auto& f : files) {
    if (!std::filesystem::remove(f, ec) && ec && log != nullptr) {
      *log << "sweep: cannot delete " << f.string() << ": " << ec.message() << "\n";
    }
  }
  doomed_.clear();
}

std::optional<int64_t> TrialPaths::CheckpointTrial(const std::string& name) {
  constexpr std::string_view kPrefix = "trial-", kSuffix = ".ckpt";
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  size_t end = kPrefix.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == kPrefix.size() || end - kPrefix.size() > 18) return std::nullopt;
  const std::string rest = name.substr(end);
  if (rest != kSuffix && rest.rfind(std::string(kSuffix) + ".tmp.", 0) != 0) return std::nullopt;
  return std::stoll(name.substr(kPrefix.size(), end - kPrefix.size()));
}

}  // namespace sweep
