// AgentHub::Impl: the hub's state. One io thread owns every connection (Peer) and all protocol
// state; the coordinator thread only touches `mu_`-guarded handoff queues (commands in, events
// out) and the eventfd. Private to sweep_executor. Where its methods live: agent_hub.cc (the
// coordinator's side, the events queue, shutdown), agent_hub_handshake.cc (accepting and
// authenticating a connection), agent_hub_serving.cc (serving a registered agent).
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "executor/agent_hub.h"
#include "executor/net_protocol.h"
#include "executor/transport.h"

namespace sweep::executor {

class AgentHub::Impl {
 public:
  // What the coordinator thread asks of an agent, run on the io thread.
  struct Command {
    enum class Type { kStart, kStop, kContinue };
    Type type = Type::kStart;
    int64_t agent_id = 0;
    int64_t trial = 0;
    nlohmann::json body;  // kStart: the assign message
  };

  Impl(std::string token, HubOptions options, int wake_fd);
  Result<int> Listen(const std::string& host, int port);

  // ---- coordinator thread ----
  void Drain(std::vector<HubEvent>* events);
  Status Enqueue(Command command);
  int agents() const;
  void Shutdown(bool sweep_over);

 private:
  using Clock = std::chrono::steady_clock;

  // One connection, from its accept to its loss.
  struct Peer {
    enum class State { kHello, kAuth, kServing, kClosed };
    std::shared_ptr<net::Connection> connection;
    net::FrameDecoder decoder;
    State state = State::kHello;
    int64_t id = 0;
    std::string address;
    std::string name;  // from the hello
    int64_t rx_seq = 0;
    int64_t tx_seq = 0;
    Clock::time_point opened;
    Clock::time_point last_rx;
    Clock::time_point last_tx;
    std::string agent_nonce;
    std::string hub_nonce;
    net::Hello hello;
    std::set<int64_t> trials;  // running here
    std::set<int64_t> stops;   // of those, the ones the coordinator asked to stop
    bool draining = false;     // the agent is stopping: its trials end, then it says bye
    int64_t ignored_events = 0;

    net::FrameMac tx_mac;  // once registered: what the hub's frames to it carry
    explicit Peer(size_t max_frame_bytes) : decoder(max_frame_bytes) {
      decoder.StepUntilAuthenticated();
    }

    std::string Describe() const {
      if (state == State::kServing) {
        return "agent '" + name + "' (id " + std::to_string(id) + ", " + address + ")";
      }
      return name.empty() ? "peer " + address : "agent '" + name + "' at " + address;
    }
  };

  // ---- io thread ----
  void Log(const std::string& line);

  // Accepting and authenticating (agent_hub_handshake.cc).
  void Accept(std::shared_ptr<net::Connection> connection);
  void OnData(Peer* peer, const char* data, size_t n);
  void OnClose(Peer* peer, const Status& why);
  void Handle(Peer* peer, net::Frame& frame);
  void OnHello(Peer* peer, net::Frame& frame);
  void OnAuth(Peer* peer, net::Frame& frame);
  void Refuse(Peer* peer, const std::string& reason);
  void LogBeforeRegistration(const std::string& line);

  // Serving a registered agent (agent_hub_serving.cc).
  void OnServing(Peer* peer, net::Frame& frame);
  void Send(Peer* peer, nlohmann::json body);
  void Lose(Peer* peer, AgentLost::Reason reason, const std::string& detail);
  void RunCommands();
  void StartOn(Peer* peer, Command c);
  void ScheduleTick();
  void Tick();

  // Shutting down, and the events queue (agent_hub.cc).
  void CloseAll();
  void Publish();

  const std::string token_;
  HubOptions options_;
  const int wake_fd_;
  std::string address_;

  // Shared with the coordinator thread.
  mutable std::mutex mu_;
  std::vector<HubEvent> events_;
  std::vector<Command> commands_;
  bool command_posted_ = false;
  std::unordered_set<int64_t> live_;

  // The io thread's.
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::steady_timer tick_;
  std::unique_ptr<net::Transport> transport_;
  std::unordered_map<Peer*, std::shared_ptr<Peer>> peers_;
  std::unordered_map<int64_t, Peer*> by_id_;
  std::vector<HubEvent> pending_;
  std::vector<net::Frame> frames_;
  std::vector<WorkerEvent> scratch_;
  int64_t next_id_ = 1;
  bool shutting_down_ = false;
  Clock::time_point prereg_window_start_{};
  int prereg_lines_ = 0;
  int64_t prereg_unsaid_ = 0;
  bool evicting_ = false;  // the last accept closed the oldest handshake (said once a burst)
  std::thread thread_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopped_ = false;
  bool sweep_over_ = false;  // what the shutdown's byes say (io thread)

  friend class AgentHub;
};

}  // namespace sweep::executor
