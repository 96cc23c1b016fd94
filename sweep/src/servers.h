// The servers a sweep places trials on (this machine, agents): their slots in the packer, the
// names placements show, and which runner each belongs to.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"
#include "executor/packer.h"
#include "runner.h"

namespace sweep {

struct ServerInfo {
  std::string name;                   // what placements show: "local", an agent's name
  std::vector<executor::Slot> slots;  // by the packer's slot index
  std::string folder;                 // its folder on its machine (empty: not said)
  bool this_machine = false;
  size_t runner = 0;  // index in the sweep's RunnerSet
  int64_t key = 0;    // the runner's name for it
};

class Servers {
 public:
  static Result<Servers> Create();

  executor::Packer& packer() { return *packer_; }
  const executor::Packer& packer() const { return *packer_; }
  const ServerInfo* Find(int id) const;
  const ServerInfo& at(int id) const { return servers_.at(id); }

  // A runner's server joined: its slots go to the packer (GPUs grouped by their fastest link).
  // Placements must tell servers apart: a second one of a name gets a suffix ("name#2"), said
  // on `log`. `gpus_per_trial`: a server too small for a trial is said to wait for another.
  Status Join(size_t runner, int64_t key, ServerOffer offer, int gpus_per_trial, std::ostream* log);
  // It is stopping: nothing more is placed there; its trials end there, then run again
  // elsewhere.
  void Draining(size_t runner, int64_t key);
  // It is gone: its slots and its name go.
  void Lost(size_t runner, int64_t key);
  // Its machine failed a trial (its disk is full): its slots leave the packer, so no trial is
  // placed there again, while those still running there go on (their release is void). Its
  // agent stays connected; one that connects again comes back as a new server.
  void Retire(int id, const std::string& why, std::ostream* log, bool live_status);
  // Drops it from the packer only (its agent is gone; the loss is on its way).
  void Forget(int id) { (void)packer_->RemoveServer(id); }

  // "local:cpu0,cpu1": the server and the slots a placement holds.
  std::string Describe(const executor::Placement& where) const;

  // Said once until a server joins: no server left can run a trial.
  bool TakeNoServerNotice();

 private:
  std::optional<executor::Packer> packer_;
  std::map<int, ServerInfo> servers_;  // by packer server id
  int next_id_ = 0;
  bool said_no_server_ = false;
};

}  // namespace sweep
