// Where a sweep's trials keep their files: trainer trials' checkpoints (as this machine, an
// agent's workers and the store name them) and command trials' folders; and the deletion of
// checkpoints no longer kept.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <set>
#include <string>

#include "base/status.h"
#include "servers.h"
#include "sweep/config.h"

namespace sweep {

class TrialPaths {
 public:
  // Makes the folders the config's trials need: checkpoints for trainer trials, trial folders
  // for commands. Relative [trial] folders are the config's folder's, as its other paths are;
  // the defaults are beside the store's file (`db_file`, see StoreFile).
  static Result<TrialPaths> Make(const SweepConfig& config, const std::string& db_file);
  // What Make would refuse, found without making anything (`run --dry-run`): a folder it needs
  // where a file stands in its path, or one it cannot write in.
  static Status CheckCanMake(const SweepConfig& config, const std::string& db_file);

  // A command trial's folder ("" for other kinds).
  std::string TrialDir(int64_t number) const;
  // Where the coordinator records trial `number`'s checkpoint: absolute ("" without one).
  std::string StoredCheckpoint(int64_t number) const;
  // Where a run of it on `server` checkpoints, as the store names it: on this machine,
  // StoredCheckpoint; on an agent, its absolute checkpoint_dir's path, or for a relative one
  // (the agent's own folder's) "AGENT:PATH", PATH on that agent's machine.
  std::string RunCheckpoint(int64_t number, const ServerInfo& server) const;
  // Where its worker writes it: on this machine, relative to this process's folder; on an
  // agent, as configured (an agent resolves a relative path in its own working folder).
  std::string WorkerCheckpoint(int64_t number, bool this_machine) const;

  const std::string& trials_dir() const { return trials_dir_; }

  // Trial `number`'s checkpoint files go at the next DeleteDoomed (after the store commits).
  void Doom(int64_t number) { doomed_.insert(number); }
  // Deletes the doomed trials' checkpoint files, with the temporary files of a write that a
  // killed worker left behind. What cannot be deleted is said, not fatal.
  void DeleteDoomed(std::ostream* log);

  // The trial whose checkpoint (or temporary checkpoint) file `name` is: "trial-N.ckpt" or
  // "trial-N.ckpt.tmp.*".
  static std::optional<int64_t> CheckpointTrial(const std::string& name);

 private:
  std::string trials_dir_;             // command trials' folders; else empty
  std::string checkpoint_dir_;         // trainer trials' checkpoints; else empty
  std::string agent_checkpoint_dir_;   // the same, as agents' workers get it
  std::string stored_checkpoint_dir_;  // the same, absolute
  std::set<int64_t> doomed_;
};

}  // namespace sweep
