// A trial kind (trainer, function, command) as the coordinator sees it: its resource unit, its
// length, its work, the settings its worker needs, its folders, and what this machine must have
// for it. One file per kind; a new kind is one file and one line in trial_kind.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "sweep/config.h"

namespace sweep {

// Where a trial's run keeps its files, and which sweep it belongs to.
struct TrialPlace {
  std::string trial_dir;   // a command trial's folder
  std::string checkpoint;  // where its worker writes its checkpoint
  std::string sweep_key;   // tells this sweep from another of its name
};

class TrialKindRules {
 public:
  virtual ~TrialKindRules() = default;
  virtual TrialKind kind() const = 0;
  // Early stopping's resource of a report: epochs (a program that does not say its epoch gets
  // one per report); a function counts steps.
  virtual double Resource(int64_t /*step*/, double epoch) const { return epoch; }
  // The resource a trial runs to on its own; none when not known in advance (a command).
  virtual std::optional<double> Length(const nlohmann::json& /*params*/) { return std::nullopt; }
  // What decides a trial's results beside its length, as one object whose keys name the
  // settings (a trainer's options, a command's words) and its parameters; none when they do not
  // apply. Two trials with equal ones compare (`run --from`). A "seed" of null: the config fixes
  // none, so each trial trains with its own (TrialSeed).
  virtual std::optional<nlohmann::json> Computes(const nlohmann::json& params) { return params; }
  // The work its parameters make, for order = "longest_first"; 0 when unknown.
  virtual double Work(const nlohmann::json& /*params*/) { return 0; }
  // The settings its worker gets beside the parameters.
  virtual nlohmann::json Settings(const TrialPlace& place) const = 0;
  // Its worker checkpoints each epoch into a file the store names, and a rerun goes on from it
  // (reporting that epoch again from the checkpoint).
  virtual bool checkpoints() const { return false; }
  // Each trial gets a folder of its own (its logs, room for its files).
  virtual bool folders() const { return false; }
  // What this machine refuses where trials run here (a command's program missing, the GPU
  // backend where the slots are CPU cores); `gpus`: its slots are GPUs.
  virtual Status CheckHere(bool /*gpus*/) const { return Status::Ok(); }
  // Said once before trials run here, when something will cost every trial (an unusable
  // dataset cache).
  virtual void WarnHere(std::ostream& /*log*/) const {}
  // Said once when agents may serve the sweep, when trials moved between them lose something
  // (a checkpoint folder each agent has for itself).
  virtual void WarnRemote(std::ostream& /*log*/) const {}
  // How a stop reaches its running trials, for the interrupt's message ("stopping 2 running
  // trial(s)" and these words).
  virtual std::string HowTrialsStop() const {
    return " after their current step; interrupt again to stop them at once";
  }
};

// The rules of the config's kind. `config` outlives them.
std::unique_ptr<TrialKindRules> MakeTrialKindRules(const SweepConfig& config);

// One per kind (kinds/*.cc).
std::unique_ptr<TrialKindRules> MakeTrainerKind(const SweepConfig& config);
std::unique_ptr<TrialKindRules> MakeFunctionKind(const SweepConfig& config);
std::unique_ptr<TrialKindRules> MakeCommandKind(const SweepConfig& config);

}  // namespace sweep
