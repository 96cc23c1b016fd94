// AgentHub: the coordinator's side of remote agents. It listens, authenticates and registers
// agents, and turns their frames into HubEvents; the coordinator assigns trials to an agent's
// slots with Start and steers them with Stop / Continue, as it does with LocalExecutor.
//
// Threads: the hub runs its own Boost.Asio thread. Every public method is thread-safe; the
// intended use is one coordinator thread that waits on wake_fd() (with poll(2), or through
// LocalExecutor::set_wake_fd) and then calls Drain. Commands are handed to the hub's thread and
// sent in order; events come back in the order they happened for each agent.
//
// Trials and lost agents: for every Start that returned Ok the hub reports exactly one kDone
// for that trial, from the agent or, when the agent is lost first, one of its own with
// worker_lost = true. A lost agent's running trials get those kDone events before its
// AgentLost. An agent that comes back registers again under a new agent id.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "executor/local_executor.h"
#include "executor/net_protocol.h"
#include "executor/slots.h"
#include "executor/transport.h"
#include "executor/trial.h"

namespace sweep::executor {

struct HubOptions {
  // Both sides send a heartbeat this often (the agent learns it in the welcome).
  int heartbeat_ms = 1000;
  // An agent that sends nothing (not even a heartbeat) for this long is lost.
  int heartbeat_timeout_ms = 10'000;
  // A connection that has not finished the handshake in this long is closed.
  int handshake_timeout_ms = 10'000;
  // Connections in their handshake at once, in all and from one address. Past the bound per
  // address, its oldest is closed for the new one; past the bound in all, the oldest of the
  // address holding the most. Each may hold a frame of up to max_frame_bytes before it is
  // authenticated: these bound that memory. A job array starts many agents at once, many to a
  // node (or behind one NAT address): the bound per address must let such a burst in (in
  // agent_tcp_test, 360 at once from one address peak at about 25 in their handshake).
  int max_handshakes = 256;
  int max_handshakes_per_address = 128;
  size_t max_frame_bytes = net::kDefaultMaxFrameBytes;
  // Receives log lines (an agent joined or was lost, a refused peer with its address), on the
  // hub's thread. Empty: lines go to stderr.
  std::function<void(std::string_view line)> log;
  // Empty: TCP (net::MakeTcpTransport). Tests pass a MemoryNetwork's factory.
  net::TransportFactory transport;
};

// An agent registered (authenticated, its hello valid). Its slots become a packer Server:
// link_group (one entry per GPU, empty for CPU slots) is Server::link_group, and
// slots.size() is its cpu_slots when it has no GPU. TrialTask::gpus for a trial placed there
// holds the chosen slots' Slot::device values (the agent's own CUDA ordinals).
struct AgentJoined {
  std::string name;     // the agent's name (--name, default its host name)
  std::string host;     // the host name the agent reported
  std::string address;  // the peer address the connection came from, "10.0.0.7:51234"
  int64_t pid = 0;      // the agent process on its host
  std::vector<Slot> slots;
  std::vector<int> link_group;
  std::string folder;  // the folder it runs in (absolute; empty: not said)
};

struct AgentLost {
  enum class Reason {
    kDisconnected,      // the connection closed or failed
    kMissedHeartbeats,  // nothing received for heartbeat_timeout_ms
    kMalformedFrame,    // an oversized, malformed or out-of-order frame, or an invalid message
    kBye,               // the agent said goodbye (stopping)
    kShutdown,          // the hub shut down
  };
  Reason reason = Reason::kDisconnected;
  std::string detail;           // the cause in words, naming the agent and its address
  std::vector<int64_t> trials;  // trials that were running there (each already got its kDone)
};
std::string_view ToString(AgentLost::Reason reason);

// The agent is stopping (SIGTERM: a batch system's preemption): place nothing more on it. Its
// running trials end there first (each gets its kDone; one the agent stopped on its own, not
// at a Stop, comes with worker_lost set), then it says bye (AgentLost kBye). So a trial runs
// again elsewhere only once it has ended here, never twice at once.
struct AgentDraining {};

struct HubEvent {
  int64_t agent_id = 0;
  // A WorkerEvent means what LocalExecutor's does, for a trial started on this agent.
  std::variant<AgentJoined, AgentLost, WorkerEvent, AgentDraining> event;
};

class AgentHub {
 public:
  AgentHub();
  ~AgentHub();  // Shutdown()
  AgentHub(const AgentHub&) = delete;
  AgentHub& operator=(const AgentHub&) = delete;

  // Listens on host:port (port 0 picks a free one: see port()) and starts the hub's thread.
  // `token` is the shared secret (ReadTokenFile); empty means no token, which only
  // ValidateListen's loopback case allows — the hub itself does not re-check. Fails with the
  // address in the message; call once.
  Status Listen(const std::string& host, int port, std::string token, HubOptions options = {});
  int port() const { return port_; }

  // Readable (an eventfd) while events wait in the hub; Drain empties it.
  int wake_fd() const { return wake_fd_; }
  // Moves every waiting event to the end of `events`, at once, without blocking.
  void Drain(std::vector<HubEvent>* events);

  // Sends the trial to the agent. NotFound when the agent is not registered (never was, or was
  // already reported lost); then no event will come for the trial.
  Status Start(int64_t agent_id, const TrialTask& task);
  // Asks the trial to stop / lets it go on from a decision point, as LocalExecutor does.
  // NotFound when the agent is not registered. A trial that already ended ignores them.
  Status Stop(int64_t agent_id, int64_t trial);
  Status Continue(int64_t agent_id, int64_t trial);

  // Registered agents now (as the hub's thread knows them).
  int agents() const;
  // Says bye to every agent, closes every connection and the listener, joins the thread.
  // Events not yet drained stay drainable (running trials get worker_lost kDone events, agents
  // AgentLost kShutdown). Idempotent.
  void Shutdown();
  // Shutdown, telling the agents that the sweep is over (net::kSweepOver): they exit, where a
  // plain Shutdown has them reconnect for a resume.
  void ShutdownSweepOver();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  int wake_fd_ = -1;
};

}  // namespace sweep::executor
