// The agent: `sweep agent --connect HOST:PORT --token-file F` serves one coordinator. RunAgent
// connects (retrying with backoff for as long as it runs), authenticates, advertises its slots,
// runs the trials it is assigned in local worker processes (a LocalExecutor), and streams their
// reports back in batches. When the connection drops it stops its trials (the coordinator has
// requeued them) and connects again; it returns once `stop` is set, after saying bye, once the
// coordinator says its sweep is over (unless `stay`), or once it has been without a coordinator
// for `retry_for_ms`.
// RunAgent blocks the calling thread and runs a second one for the workers; `stop` may be set
// from any thread (a signal handler included: it is only loaded).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "executor/net_protocol.h"
#include "executor/slots.h"
#include "executor/transport.h"

namespace sweep::executor {

struct AgentOptions {
  std::string host;  // the coordinator's --listen address
  int port = 0;
  std::string token;  // from net::ReadTokenFile; empty only against a coordinator without one
  std::string name;   // empty: this machine's host name
  // The worker program, as the coordinator runs it: {the sweep binary's path, "worker"}.
  std::vector<std::string> worker_command;
  std::vector<std::string> worker_env;  // "KEY=VALUE" added to the workers' environment
  // What to advertise: AgentSlots() gives them from --gpus / --cpu-slots.
  std::vector<Slot> slots;
  // One entry per GPU slot (Server::link_group); empty: all GPUs in one group.
  std::vector<int> link_group;

  // Reconnecting: the wait starts at backoff_initial_ms and doubles up to backoff_max_ms, each
  // wait drawn at random between half and all of it so agents do not come back in step.
  int backoff_initial_ms = 200;
  int backoff_max_ms = 5000;
  // Without a coordinator (never registered, or lost without its word that the sweep is over)
  // for this long, the agent gives up: RunAgent returns Unavailable. < 0: it never gives up.
  // On a cluster an agent that retried for ever would hold its GPUs to the job's time limit.
  int64_t retry_for_ms = 600'000;
  // When the coordinator says its sweep is over: false, the agent ends (RunAgent returns Ok);
  // true, it stays, connecting again for the next sweep on the same address.
  bool stay = false;
  // Run once, on the calling thread, when the agent ends because the sweep is over (not with
  // `stay`), before RunAgent returns: e.g. to cancel a job array's tasks that have not started.
  std::function<void()> on_sweep_over;
  // Reports go out in batches: at the latest flush_ms after the first one waiting, at once when
  // max_batch_reports wait, and always before the trial's done.
  int flush_ms = 2;
  int max_batch_reports = 2048;
  // When the connection drops, running trials get this long to stop before being killed (a
  // command trial its kill_grace, when that is longer).
  int stop_grace_ms = 10'000;
  // Set (a second Ctrl-C or SIGTERM) while the agent stops: its trials end at once, unsaved
  // (their workers and programs killed), instead of after their epoch or kill_grace; they run
  // again elsewhere from their last checkpoint. nullptr: never.
  const std::atomic<bool>* stop_now = nullptr;
  // Give up a handshake that has not finished in this long.
  int handshake_timeout_ms = 10'000;
  // A token refusal (or a coordinator that cannot prove the token) ends the agent only once
  // such failures, with no registration between them, have gone on this long and numbered at
  // least three: they come before anything is authenticated, so anyone at the address or on
  // the path could send one.
  int auth_refusal_window_ms = 60'000;
  size_t max_frame_bytes = net::kDefaultMaxFrameBytes;
  std::ostream* log = nullptr;      // nullptr: std::cerr
  net::TransportFactory transport;  // empty: TCP
};

// The slots `sweep agent` advertises: the GPUs listed in `gpus` (their CUDA ordinals; each must
// exist: InvalidArgument naming the first that does not), else every GPU, else `cpu_slots` CPU
// shares (<= 0: one per hardware thread). `--cpu-slots N` on a machine with GPUs: pass
// gpus = {} (an empty list, not nullopt) and N to offer CPU shares only.
Result<std::vector<Slot>> AgentSlots(const std::optional<std::vector<int>>& gpus, int cpu_slots);

// Serves until `stop` is set or the sweep is over. InvalidArgument for unusable options (no
// slots, no worker command, a bad port) before connecting; Ok after a clean stop or the end of
// the sweep; Unavailable once it has gone retry_for_ms without a coordinator. Other network
// failures are not returned: they are logged, and the agent tries again.
Status RunAgent(const AgentOptions& options, const std::atomic<bool>& stop);

}  // namespace sweep::executor
