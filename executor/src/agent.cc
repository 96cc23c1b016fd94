// The agent (executor/agent.h): its options checked, its slots found, and its two threads
// started: the session (agent_session.cc, on the calling thread) and the pump (agent_pump.cc).
#include "executor/agent.h"

#include <algorithm>
#include <string>
#include <vector>

#include "agent_session.h"

namespace sweep::executor {

Result<std::vector<Slot>> AgentSlots(const std::optional<std::vector<int>>& gpus, int cpu_slots) {
  if (!gpus) return DiscoverLocalSlots(cpu_slots);
  std::vector<Slot> slots;
  if (gpus->empty()) return CpuSlots(cpu_slots);
  std::vector<Slot> found = DiscoverLocalSlots(1);
  for (int want : *gpus) {
    auto it = std::find_if(found.begin(), found.end(),
                           [&](const Slot& s) { return s.gpu && s.device == want; });
    if (it == found.end()) {
      return Status::InvalidArgument("--gpus: this machine has no GPU " + std::to_string(want) +
                                     " (it has " + std::to_string(CudaDeviceCount()) + ")");
    }
    if (std::any_of(slots.begin(), slots.end(), [&](const Slot& s) { return s.device == want; })) {
      return Status::InvalidArgument("--gpus: GPU " + std::to_string(want) + " is listed twice");
    }
    Slot s = *it;
    s.index = static_cast<int>(slots.size());
    slots.push_back(s);
  }
  return slots;
}

Status RunAgent(const AgentOptions& options, const std::atomic<bool>& stop) {
  if (options.host.empty()) return Status::InvalidArgument("agent: no coordinator host");
  if (options.port < 1 || options.port > 65535) {
    return Status::InvalidArgument("agent: the coordinator port must be in 1..65535, not " +
                                   std::to_string(options.port));
  }
  if (options.slots.empty()) return Status::InvalidArgument("agent: no slots to offer");
  if (options.worker_command.empty()) {
    return Status::InvalidArgument("agent: no worker command");
  }
  if (options.backoff_initial_ms < 1 || options.backoff_max_ms < options.backoff_initial_ms ||
      options.flush_ms < 0 || options.max_batch_reports < 1 || options.stop_grace_ms < 0 ||
      options.handshake_timeout_ms < 1 || options.auth_refusal_window_ms < 0) {
    return Status::InvalidArgument("agent: a backoff, batching or timeout option is out of range");
  }
  return RunSession(options, stop);
}

}  // namespace sweep::executor
