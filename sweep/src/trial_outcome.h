// How a trial's run ends: its status and note from what its worker said and what the sweep
// knows about it. A pure function; the rules, in the order they are tried:
//
// The run completed (its program or trainer ended by itself):
//   C1. early stopping had pruned it (it ran on while the verdict travelled): pruned.
//   C2. it had been stopped at max_resource: completed, with the cap's note.
//   C3. it met stop_when: completed, with the target's note.
//   C4. otherwise: completed.
// The run was stopped (the coordinator asked), or the machine interrupted it:
//   S1. pruned; S2. met stop_when: completed; S3. reached max_resource: completed;
//   S4. otherwise interrupted: by the sweep's stop, or by the machine (its checkpoint could not
//       be written), which is the server's trouble (kServerTrouble), unless the sweep stops.
// The run failed:
//   F1. it had been stopped at max_resource: completed, with the cap's note.
//   F2. a command that had reported the metric at max_resource: completed, the failure said.
//   F3. pruned: pruned (the decision stands). F4. met stop_when: completed.
//   F5. its worker was lost while the sweep stops, or a signal came: interrupted (resume).
//   F6. its server was stopped on purpose (said bye): interrupted, run again, nothing counted.
//   F7. its server was lost for the kMaxAgentLosses-th time while it ran: failed.
//   F8. its server was lost: interrupted, run again, the loss counted if it ran there.
//   F9. its worker was lost with retries left: interrupted, run again, a retry used.
//   F10. otherwise failed (after its retries, said).
// A note the worker gave a run that completed or was stopped goes after the status's own.
#pragma once

#include <optional>
#include <string>

#include "executor/trial.h"
#include "store/store.h"

namespace sweep {

// A trial whose agent is lost this many times is failed: it is likely what takes the agent
// down (out of memory), and would otherwise be run again for ever.
inline constexpr int kMaxAgentLosses = 3;

// What the sweep knows of a trial as its run ends.
struct TrialFacts {
  std::string prune_reason;      // set when early stopping pruned it
  bool at_max_resource = false;  // stopped on reaching max_resource
  bool reached_cap = false;      // a command that reported the metric at max_resource
  bool met_target = false;       // its report met stop_when
  int retries = 0;
  int agent_losses = 0;
  bool first_run = false;
  // The sweep: stopping, or a signal came; its stop's reason; the notes of C2/C3.
  bool stopping = false;
  bool signalled = false;
  std::string stop_reason;
  int max_retries = 1;
  std::string cap_note;
  std::string target_note;
};

// What its worker said, and what became of its server.
struct RunEnd {
  executor::TrialOutcome::Kind outcome = executor::TrialOutcome::Kind::kCompleted;
  std::string error;
  bool worker_lost = false;
  bool never_started = false;
  bool server_lost = false;
  bool server_stopped = false;
};

struct TrialEnd {
  store::TrialStatus status = store::TrialStatus::kCompleted;
  std::string note;
  enum class Then { kNothing, kRunAgain, kServerTrouble };
  Then then = Then::kNothing;
  // kRunAgain and kServerTrouble (if it runs again elsewhere): how it runs again.
  int retries = 0;
  int agent_losses = 0;
  bool never_ran = false;
  // What the store's row must say now.
  std::optional<int> store_retries;
  std::optional<int> store_agent_losses;
};

TrialEnd DecideEnd(const TrialFacts& trial, const RunEnd& run);

// The status of a trial that was stopped (rules S1-S4), `why` its note when interrupted.
TrialEnd StoppedEnd(const TrialFacts& trial, const std::string& why);

}  // namespace sweep
