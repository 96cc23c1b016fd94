// The agent's session: its connection to one coordinator, kept (reconnecting with backoff)
// until RunAgent's stop, the end of the sweep, or retry_for_ms without a coordinator. Private
// to sweep_executor. RunSession blocks the calling thread and runs the pump's (agent_pump.h).
#pragma once

#include <atomic>

#include "base/status.h"
#include "executor/agent.h"

namespace sweep::executor {

// RunAgent past its checks of `options`: see executor/agent.h for what it returns.
Status RunSession(const AgentOptions& options, const std::atomic<bool>& stop);

}  // namespace sweep::executor
