// AgentHub: one io thread owns every connection (Peer) and all protocol state; the coordinator
// thread only touches `mu_`-guarded handoff queues (commands in, events out) and the eventfd.
//
// A connection's life, as the hub sees it:
//   1. accepted: waits for hello (handshake_timeout_ms). hello with another version: bye naming
//      both versions, close. Invalid hello: bye, close.
//   2. hello ok: sends challenge {nonce Nh}; waits for auth.
//   3. auth: proof == HMAC(token, "sweep agent proof v1\nNa\nNh") (constant time)? Otherwise bye
//      "authentication failed", close, and a log line with the peer's address.
//   4. registered: sends welcome {agent_id, heartbeat, HMAC(token, "sweep coordinator ...")};
//      AgentJoined. From here: reports / done / heartbeat / bye in, assign / stop / continue /
//      heartbeat out.
//   5. lost (close, silence, a bad frame, bye): kDone worker_lost for its trials, AgentLost.
#include "executor/agent_hub.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/clock.h"
#include "executor/net_auth.h"

namespace sweep::executor {

namespace asio = boost::asio;

namespace {
// Connections in their handshake at once, in all and from one address (see Accept).
constexpr long kMaxHandshakes = 64;
constexpr long kMaxHandshakesPerAddress = 8;
// Log lines about connections that never registered (see LogBeforeRegistration).
constexpr int kPreRegistrationLines = 10;
constexpr auto kPreRegistrationWindow = std::chrono::seconds(10);

// The peer's machine: "10.0.0.1" of "10.0.0.1:5000" (an address without a port, as it is).
std::string HostOf(const std::string& address) {
  auto host_port = net::ParseHostPort(address);
  return host_port.ok() ? host_port->first : address;
}
}  // namespace
using Clock = std::chrono::steady_clock;
using net::MessageType;
using nlohmann::json;

std::string_view ToString(AgentLost::Reason reason) {
  switch (reason) {
    case AgentLost::Reason::kDisconnected:
      return "disconnected";
    case AgentLost::Reason::kMissedHeartbeats:
      return "missed heartbeats";
    case AgentLost::Reason::kMalformedFrame:
      return "malformed frame";
    case AgentLost::Reason::kBye:
      return "bye";
    case AgentLost::Reason::kShutdown:
      return "shutdown";
  }
  return "?";
}

namespace {

std::string Seconds(int ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", ms / 1000.0);
  return buf;
}

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

struct Command {
  enum class Type { kStart, kStop, kContinue };
  Type type = Type::kStart;
  int64_t agent_id = 0;
  int64_t trial = 0;
  json body;  // kStart: the assign message
};

}  // namespace

class AgentHub::Impl {
 public:
  Impl(std::string token, HubOptions options, int wake_fd)
      : token_(std::move(token)),
        options_(std::move(options)),
        wake_fd_(wake_fd),
        work_(asio::make_work_guard(io_)),
        tick_(io_) {
    if (!options_.log) {
      options_.log = [](std::string_view line) {
        std::string text(line);
        text += '\n';
        std::cerr << text << std::flush;
      };
    }
  }

  Result<int> Listen(const std::string& host, int port) {
    transport_ = options_.transport ? options_.transport(io_) : net::MakeTcpTransport(io_);
    SWEEP_ASSIGN_OR_RETURN(
        int bound, transport_->Listen(host, port, [this](std::shared_ptr<net::Connection> c) {
          Accept(std::move(c));
        }));
    address_ = host + ":" + std::to_string(bound);
    ScheduleTick();
    thread_ = std::thread([this] { io_.run(); });
    return bound;
  }

  // ---- coordinator thread ----

  void Drain(std::vector<HubEvent>* events) {
    std::lock_guard lock(mu_);
    if (events->empty()) {
      events->swap(events_);
    } else {
      std::move(events_.begin(), events_.end(), std::back_inserter(*events));
      events_.clear();
    }
    uint64_t count = 0;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof count);
  }

  Status Enqueue(Command command) {
    std::lock_guard lock(mu_);
    if (!live_.contains(command.agent_id)) {
      return Status::NotFound("agent " + std::to_string(command.agent_id) + " is not connected");
    }
    commands_.push_back(std::move(command));
    if (!command_posted_) {
      command_posted_ = true;
      asio::post(io_, [this] { RunCommands(); });
    }
    return Status::Ok();
  }

  int agents() const {
    std::lock_guard lock(mu_);
    return static_cast<int>(live_.size());
  }

  void Shutdown(bool sweep_over) {
    if (!thread_.joinable()) return;
    std::promise<void> done;
    auto finished = done.get_future();
    asio::post(io_, [this, &done, sweep_over] {
      sweep_over_ = sweep_over;
      CloseAll();
      done.set_value();
    });
    finished.wait();
    work_.reset();
    // The graceful closes flush within about a second; never wait much longer than that.
    std::thread stopper([this] {
      std::unique_lock lock(stop_mu_);
      if (!stop_cv_.wait_for(lock, std::chrono::seconds(3), [this] { return stopped_; })) {
        io_.stop();
      }
    });
    thread_.join();
    {
      std::lock_guard lock(stop_mu_);
      stopped_ = true;
    }
    stop_cv_.notify_all();
    stopper.join();
  }

 private:
  // ---- io thread ----

  // Peers' words (names, reasons, an unknown message type) are part of some lines: their
  // control characters are escaped, so that a peer cannot forge a line of ours.
  void Log(const std::string& line) { options_.log(net::Printable(line)); }

  void Accept(std::shared_ptr<net::Connection> connection) {
    if (shutting_down_) {
      connection->Close();
      return;
    }
    // Connections that have not authenticated cost memory (a frame being received, up to
    // max_frame_bytes each) and anyone who can reach the port can open them: at most
    // kMaxHandshakesPerAddress from one address and kMaxHandshakes in all at once. Past that
    // the oldest of the address that holds the most is closed for the new one: a flood from
    // one machine pushes out only its own connections, and a genuine agent's handshake, a few
    // round trips, is done long before a flood from many machines could push it out.
    const std::string host = HostOf(connection->peer());
    std::map<std::string, std::pair<long, Peer*>> by_host;  // handshaking, oldest
    long handshaking = 0;
    for (const auto& [raw, p] : peers_) {
      if (p->state != Peer::State::kHello && p->state != Peer::State::kAuth) continue;
      ++handshaking;
      auto& [count, oldest] = by_host[HostOf(p->address)];
      ++count;
      if (oldest == nullptr || p->opened < oldest->opened) oldest = p.get();
    }
    const std::pair<long, Peer*>* evict = nullptr;
    if (auto own = by_host.find(host);
        own != by_host.end() && own->second.first >= kMaxHandshakesPerAddress) {
      evict = &own->second;
    } else if (handshaking >= kMaxHandshakes) {
      for (const auto& [h, entry] : by_host) {
        if (evict == nullptr || entry.first > evict->first) evict = &entry;
      }
    }
    if (evict != nullptr && evict->second != nullptr) {
      Peer* oldest = evict->second;
      if (!evicting_) {
        Log("closing the oldest of " + std::to_string(evict->first) + " connections from " +
            HostOf(oldest->address) + " that have not finished their handshake (" +
            std::to_string(handshaking) + " in all) for a new one from " + connection->peer());
      }
      evicting_ = true;
      oldest->state = Peer::State::kClosed;  // not registered: nothing to tell the coordinator
      oldest->connection->Close();
    } else {
      evicting_ = false;
    }
    auto peer = std::make_shared<Peer>(options_.max_frame_bytes);
    peer->connection = connection;
    peer->address = connection->peer();
    peer->opened = peer->last_rx = peer->last_tx = Clock::now();
    Peer* raw = peer.get();
    peers_.emplace(raw, peer);
    connection->Start([this, raw](const char* data, size_t n) { OnData(raw, data, n); },
                      [this, raw](const Status& why) { OnClose(raw, why); });
  }

  void OnData(Peer* peer, const char* data, size_t n) {
    if (peer->state == Peer::State::kClosed) return;
    frames_.clear();
    Status st = peer->decoder.Feed(data, n, &frames_);
    for (;;) {
      for (auto& frame : frames_) {
        if (peer->state == Peer::State::kClosed) break;
        Handle(peer, frame);
      }
      // One frame at a time until the handshake is done (its MAC key set): then the rest.
      if (!st.ok() || !peer->decoder.paused() || peer->state == Peer::State::kClosed) break;
      frames_.clear();
      st = peer->decoder.Feed(nullptr, 0, &frames_);
    }
    if (!st.ok() && peer->state != Peer::State::kClosed) {
      Lose(peer, AgentLost::Reason::kMalformedFrame, st.message());
    }
    Publish();
  }

  void OnClose(Peer* peer, const Status& why) {
    if (peer->state != Peer::State::kClosed) {
      Lose(peer, AgentLost::Reason::kDisconnected,
           why.code() == Status::Code::kAborted ? "connection closed" : why.message());
      Publish();
    }
    // A close can be reported from inside this peer's own handlers (Close() in Lose): free
    // the peer once they have returned.
    asio::post(io_, [this, peer] { peers_.erase(peer); });
  }

  void Handle(Peer* peer, net::Frame& frame) {
    auto seq = net::SeqOf(frame.body);
    if (!seq.ok()) {
      Lose(peer, AgentLost::Reason::kMalformedFrame, seq.status().message());
      return;
    }
    if (*seq <= peer->rx_seq) return;  // a duplicate
    if (*seq != peer->rx_seq + 1) {
      Lose(peer, AgentLost::Reason::kMalformedFrame,
           "frames were lost (frame " + std::to_string(*seq) + " came after " +
               std::to_string(peer->rx_seq) + ")");
      return;
    }
    if (peer->state == Peer::State::kServing && !frame.mac_verified) {
      Lose(peer, AgentLost::Reason::kMalformedFrame,
           "a frame without its MAC after the handshake (not from the agent)");
      return;
    }
    peer->rx_seq = *seq;
    // Alive: a new frame, authenticated once registered (bytes alone, or a duplicate anyone on
    // the path could inject, would keep a dead session looking alive).
    peer->last_rx = Clock::now();
    switch (peer->state) {
      case Peer::State::kHello:
        OnHello(peer, frame);
        return;
      case Peer::State::kAuth:
        OnAuth(peer, frame);
        return;
      case Peer::State::kServing:
        OnServing(peer, frame);
        return;
      case Peer::State::kClosed:
        return;
    }
  }

  void OnHello(Peer* peer, net::Frame& frame) {
    if (frame.type != MessageType::kHello) {
      Refuse(peer, "expected hello, got " + std::string(ToString(frame.type)));
      return;
    }
    auto hello = net::HelloFromJson(frame.body);
    if (!hello.ok()) {
      Refuse(peer, hello.status().message());
      return;
    }
    auto nonce = net::NewNonce();
    if (!nonce.ok()) {
      Refuse(peer, nonce.status().message());
      return;
    }
    peer->hello = std::move(*hello);
    peer->name = peer->hello.name;
    peer->agent_nonce = peer->hello.nonce;
    peer->hub_nonce = *nonce;
    peer->state = Peer::State::kAuth;
    Send(peer, net::ToJson(net::Challenge{peer->hub_nonce}));
  }

  void OnAuth(Peer* peer, net::Frame& frame) {
    if (frame.type != MessageType::kAuth) {
      Refuse(peer, "expected auth, got " + std::string(ToString(frame.type)));
      return;
    }
    auto auth = net::AuthFromJson(frame.body);
    if (!auth.ok()) {
      Refuse(peer, auth.status().message());
      return;
    }
    const std::string transcript = net::HelloTranscript(peer->hello);
    const std::string expected =
        net::AgentProof(token_, peer->agent_nonce, peer->hub_nonce, transcript);
    if (!net::ProofsEqual(auth->proof, expected)) {
      // Which side lacks a token, when one does, says what to fix.
      const bool agent_has_none = net::ProofsEqual(
          auth->proof, net::AgentProof("", peer->agent_nonce, peer->hub_nonce, transcript));
      Refuse(peer, std::string(net::kAuthFailed) + ": " +
                       (token_.empty()   ? "the coordinator runs without a token (no --token-file) "
                                           "but the agent gave one; give both the same token, or "
                                           "neither"
                        : agent_has_none ? "the agent gave no token (--token-file) and the "
                                           "coordinator needs one"
                                         : "the agent's token does not match the coordinator's"));
      return;
    }
    peer->id = next_id_++;
    peer->state = Peer::State::kServing;
    net::Welcome welcome;
    welcome.agent_id = peer->id;
    welcome.heartbeat_ms = options_.heartbeat_ms;
    welcome.heartbeat_timeout_ms = options_.heartbeat_timeout_ms;
    welcome.proof = net::CoordinatorProof(
        token_, peer->agent_nonce, peer->hub_nonce,
        net::WelcomeTranscript(peer->hello, welcome.agent_id, welcome.heartbeat_ms,
                               welcome.heartbeat_timeout_ms));
    Send(peer, net::ToJson(welcome));
    // Every frame after the welcome, both ways, carries a MAC under the session's key.
    const std::string key = net::SessionKey(token_, peer->agent_nonce, peer->hub_nonce);
    peer->tx_mac = net::FrameMac{key, net::kCoordinatorFrameLabel};
    peer->decoder.Authenticate(net::FrameMac{key, net::kAgentFrameLabel});
    by_id_[peer->id] = peer;
    {
      std::lock_guard lock(mu_);
      live_.insert(peer->id);
    }
    AgentJoined joined;
    joined.name = peer->hello.name;
    joined.host = peer->hello.host;
    joined.address = peer->address;
    joined.pid = peer->hello.pid;
    joined.folder = peer->hello.folder;
    joined.slots = peer->hello.slots;
    joined.link_group = peer->hello.link_group;
    const bool gpu = !joined.slots.empty() && joined.slots[0].gpu;
    Log(peer->Describe() + " joined from host " + joined.host + " with " +
        std::to_string(joined.slots.size()) + (gpu ? " GPU" : " CPU") + " slot" +
        (joined.slots.size() == 1 ? "" : "s"));
    pending_.push_back(HubEvent{peer->id, std::move(joined)});
  }

  void OnServing(Peer* peer, net::Frame& frame) {
    switch (frame.type) {
      case MessageType::kReports: {
        scratch_.clear();
        Status st = net::ReportsFromJson(frame.body, &scratch_);
        if (!st.ok()) {
          Lose(peer, AgentLost::Reason::kMalformedFrame, st.message());
          return;
        }
        // Stamped here, as they arrive: the coordinator's clock, not the agent's, and on time
        // while the coordinator's loop is held up (a locked store).
        const double arrived = UnixSeconds();
        int64_t known = -1;
        for (auto& ev : scratch_) {
          ev.time_s = arrived;
          if (ev.trial != known) {
            if (!peer->trials.contains(ev.trial)) {
              ++peer->ignored_events;
              continue;
            }
            known = ev.trial;
          }
          pending_.push_back(HubEvent{peer->id, std::move(ev)});
        }
        return;
      }
      case MessageType::kDone: {
        auto done = net::DoneFromJson(frame.body);
        if (!done.ok()) {
          Lose(peer, AgentLost::Reason::kMalformedFrame, done.status().message());
          return;
        }
        if (peer->trials.erase(done->trial) == 0) {
          ++peer->ignored_events;
          return;
        }
        const bool asked = peer->stops.erase(done->trial) > 0;
        if (peer->draining && !asked && done->outcome == TrialOutcome::Kind::kStopped) {
          // Stopped because its agent is stopping, not by the coordinator: the trial is lost
          // to that agent, as it would be by a bye, only now it has ended there.
          done->outcome = TrialOutcome::Kind::kFailed;  // as a lost agent's trials end
          done->worker_lost = true;
          done->agent_end = WorkerEvent::AgentEnd::kStopping;
          done->error = peer->Describe() + " is stopping (it said so) and stopped the trial";
        } else if (done->worker_lost && !done->error.empty()) {
          // "worker (pid N) killed by signal 9": a pid on the agent's machine, said as such.
          done->error = "on agent '" + peer->name + "': " + done->error;
        }
        done->time_s = UnixSeconds();
        pending_.push_back(HubEvent{peer->id, std::move(*done)});
        return;
      }
      case MessageType::kHeartbeat:
        return;
      case MessageType::kDraining:
        if (!peer->draining) {
          peer->draining = true;
          Log(peer->Describe() + " is stopping: its " + std::to_string(peer->trials.size()) +
              " running trial(s) end there, then it leaves");
          pending_.push_back(HubEvent{peer->id, AgentDraining{}});
        }
        return;
      case MessageType::kBye: {
        auto reason = net::ByeFromJson(frame.body);
        Lose(peer, AgentLost::Reason::kBye,
             "said bye" + (reason.ok() && !reason->empty() ? ": " + *reason : std::string()));
        return;
      }
      default:
        Lose(peer, AgentLost::Reason::kMalformedFrame,
             "unexpected " + std::string(ToString(frame.type)) + " from an agent");
        return;
    }
  }

  void Send(Peer* peer, json body) {
    body["seq"] = ++peer->tx_seq;
    std::string bytes;
    Status st = net::AppendFrame(body, options_.max_frame_bytes, &bytes,
                                 peer->tx_mac.key.empty() ? nullptr : &peer->tx_mac);
    if (!st.ok()) {
      Log("cannot send " + body.value("type", std::string("?")) + " to " + peer->Describe() + ": " +
          st.message());
      --peer->tx_seq;
      return;
    }
    peer->last_tx = Clock::now();
    peer->connection->Send(std::move(bytes));
  }

  // Refuses a connection still in its handshake: bye with the reason, close, log.
  void Refuse(Peer* peer, const std::string& reason) {
    LogBeforeRegistration("refused " + peer->Describe() + ": " + reason);
    Send(peer, net::ByeToJson(reason));
    peer->state = Peer::State::kClosed;
    peer->connection->Close();
  }

  // A line about a connection that has not registered: anyone who reaches the port can cause
  // them, so at most kPreRegistrationLines per kPreRegistrationWindow; past that they are
  // counted, and the next line said says how many were not.
  void LogBeforeRegistration(const std::string& line) {
    const auto now = Clock::now();
    if (now - prereg_window_start_ >= kPreRegistrationWindow) {
      prereg_window_start_ = now;
      prereg_lines_ = 0;
    }
    if (prereg_lines_ >= kPreRegistrationLines) {
      ++prereg_unsaid_;
      return;
    }
    ++prereg_lines_;
    std::string said = line;
    if (prereg_unsaid_ > 0) {
      said += " (and " + std::to_string(prereg_unsaid_) +
              " more connections refused or closed before registering, not logged)";
      prereg_unsaid_ = 0;
    }
    Log(said);
  }

  // Ends a connection: for a registered agent, its trials' kDone events and AgentLost.
  void Lose(Peer* peer, AgentLost::Reason reason, const std::string& detail) {
    if (peer->state == Peer::State::kClosed) return;
    const bool registered = peer->state == Peer::State::kServing;
    const std::string who = peer->Describe();
    // Tell the agent why; after a bad frame the connection carries nothing else.
    if (reason == AgentLost::Reason::kMalformedFrame) {
      Send(peer, net::ByeToJson("closing the connection: " + detail));
    } else if (reason == AgentLost::Reason::kShutdown) {
      Send(peer, net::ByeToJson(sweep_over_ ? std::string(net::kSweepOver) +
                                                  ": the coordinator has finished it"
                                            : std::string("the coordinator is shutting down")));
    }
    peer->state = Peer::State::kClosed;
    if (!registered) {
      LogBeforeRegistration("closed " + who + " before it registered: " + detail);
      peer->connection->Close();
      return;
    }
    Log(who + " lost (" + std::string(ToString(reason)) + "): " + detail);
    by_id_.erase(peer->id);
    {
      std::lock_guard lock(mu_);
      live_.erase(peer->id);
    }
    AgentLost lost;
    lost.reason = reason;
    lost.detail = who + ": " + detail;
    for (int64_t trial : peer->trials) {
      WorkerEvent ev;
      ev.type = WorkerEvent::Type::kDone;
      ev.trial = trial;
      ev.outcome = TrialOutcome::Kind::kFailed;
      ev.worker_lost = true;
      ev.agent_end = WorkerEvent::AgentEnd::kLost;
      ev.error = who + " was lost (" + std::string(ToString(reason)) + "): " + detail;
      pending_.push_back(HubEvent{peer->id, std::move(ev)});
      lost.trials.push_back(trial);
    }
    peer->trials.clear();
    pending_.push_back(HubEvent{peer->id, std::move(lost)});
    peer->connection->Close();
  }

  void RunCommands() {
    std::vector<Command> commands;
    {
      std::lock_guard lock(mu_);
      commands.swap(commands_);
      command_posted_ = false;
    }
    for (auto& c : commands) {
      auto it = by_id_.find(c.agent_id);
      Peer* peer = it == by_id_.end() ? nullptr : it->second;
      switch (c.type) {
        case Command::Type::kStart:
          if (peer == nullptr) {
            // Lost between Start and now: the trial still gets its one kDone.
            WorkerEvent ev;
            ev.type = WorkerEvent::Type::kDone;
            ev.trial = c.trial;
            ev.outcome = TrialOutcome::Kind::kFailed;
            ev.worker_lost = true;
            ev.never_started = true;
            ev.agent_end = WorkerEvent::AgentEnd::kLost;
            ev.error = "agent " + std::to_string(c.agent_id) + " was lost before trial " +
                       std::to_string(c.trial) + " could start";
            pending_.push_back(HubEvent{c.agent_id, std::move(ev)});
          } else {
            StartOn(peer, std::move(c));
          }
          break;
        case Command::Type::kStop:
        case Command::Type::kContinue:
          if (peer != nullptr && peer->trials.contains(c.trial)) {
            if (c.type == Command::Type::kStop) peer->stops.insert(c.trial);
            Send(peer,
                 net::TrialCommandToJson(
                     c.type == Command::Type::kStop ? MessageType::kStop : MessageType::kContinue,
                     c.trial));
          }
          break;
      }
    }
    Publish();
  }

  void StartOn(Peer* peer, Command c) {
    c.body["seq"] = peer->tx_seq + 1;
    std::string bytes;
    Status st = net::AppendFrame(c.body, options_.max_frame_bytes, &bytes,
                                 peer->tx_mac.key.empty() ? nullptr : &peer->tx_mac);
    if (!st.ok()) {
      WorkerEvent ev;
      ev.type = WorkerEvent::Type::kDone;
      ev.trial = c.trial;
      ev.outcome = TrialOutcome::Kind::kFailed;
      ev.error = "trial " + std::to_string(c.trial) + " cannot be sent to " + peer->Describe() +
                 ": " + st.message();
      pending_.push_back(HubEvent{peer->id, std::move(ev)});
      return;
    }
    ++peer->tx_seq;
    peer->trials.insert(c.trial);
    peer->last_tx = Clock::now();
    peer->connection->Send(std::move(bytes));
  }

  void ScheduleTick() {
    const int tick_ms = std::clamp(options_.heartbeat_ms / 2, 5, 250);
    tick_.expires_after(std::chrono::milliseconds(tick_ms));
    tick_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || shutting_down_) return;
      Tick();
      ScheduleTick();
    });
  }

  void Tick() {
    const auto now = Clock::now();
    std::vector<Peer*> silent, slow;
    for (auto& [raw, peer] : peers_) {
      if (raw->state == Peer::State::kClosed) continue;
      if (raw->state != Peer::State::kServing) {
        if (now - raw->opened > std::chrono::milliseconds(options_.handshake_timeout_ms)) {
          slow.push_back(raw);
        }
        continue;
      }
      if (now - raw->last_rx > std::chrono::milliseconds(options_.heartbeat_timeout_ms)) {
        silent.push_back(raw);
      } else if (now - raw->last_tx >= std::chrono::milliseconds(options_.heartbeat_ms)) {
        Send(raw, net::HeartbeatToJson());
      }
    }
    for (Peer* p : silent) {
      Lose(p, AgentLost::Reason::kMissedHeartbeats,
           "nothing received for " + Seconds(options_.heartbeat_timeout_ms));
    }
    for (Peer* p : slow) {
      Lose(p, AgentLost::Reason::kDisconnected,
           "no handshake within " + Seconds(options_.handshake_timeout_ms));
    }
    Publish();
  }

  void CloseAll() {
    shutting_down_ = true;
    tick_.cancel();
    if (transport_) transport_->StopListening();
    std::vector<Peer*> all;
    for (auto& [raw, peer] : peers_) all.push_back(raw);
    for (Peer* p : all) Lose(p, AgentLost::Reason::kShutdown, "the coordinator is shutting down");
    // Starts still queued find no agent: their trials get kDone too.
    RunCommands();
    Publish();
  }

  // Hands the events gathered by this handler to the coordinator, waking it on the first.
  void Publish() {
    if (pending_.empty()) return;
    std::lock_guard lock(mu_);
    const bool was_empty = events_.empty();
    if (was_empty) {
      events_.swap(pending_);
    } else {
      std::move(pending_.begin(), pending_.end(), std::back_inserter(events_));
      pending_.clear();
    }
    if (was_empty) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
    }
  }

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
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::steady_timer tick_;
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

// ---- AgentHub ----

AgentHub::AgentHub() { wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

AgentHub::~AgentHub() {
  Shutdown();
  impl_.reset();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status AgentHub::Listen(const std::string& host, int port, std::string token, HubOptions options) {
  if (impl_) return Status::Internal("AgentHub::Listen called twice");
  if (wake_fd_ < 0) return Status::IoError("cannot create the hub's eventfd");
  if (options.heartbeat_ms <= 0 || options.heartbeat_timeout_ms <= options.heartbeat_ms) {
    return Status::InvalidArgument(
        "agent heartbeats: the timeout must be greater than the interval (both > 0)");
  }
  auto impl = std::make_unique<Impl>(std::move(token), std::move(options), wake_fd_);
  auto bound = impl->Listen(host, port);
  if (!bound.ok()) return bound.status();
  port_ = *bound;
  impl_ = std::move(impl);
  return Status::Ok();
}

void AgentHub::Drain(std::vector<HubEvent>* events) {
  if (impl_) impl_->Drain(events);
}

Status AgentHub::Start(int64_t agent_id, const TrialTask& task) {
  if (!impl_) return Status::NotFound("the agent hub is not listening");
  return impl_->Enqueue(
      Command{Command::Type::kStart, agent_id, task.number, net::AssignToJson(task)});
}

Status AgentHub::Stop(int64_t agent_id, int64_t trial) {
  if (!impl_) return Status::NotFound("the agent hub is not listening");
  return impl_->Enqueue(Command{Command::Type::kStop, agent_id, trial, {}});
}

Status AgentHub::Continue(int64_t agent_id, int64_t trial) {
  if (!impl_) return Status::NotFound("the agent hub is not listening");
  return impl_->Enqueue(Command{Command::Type::kContinue, agent_id, trial, {}});
}

int AgentHub::agents() const { return impl_ ? impl_->agents() : 0; }

void AgentHub::Shutdown() {
  if (impl_) impl_->Shutdown(/*sweep_over=*/false);
}

void AgentHub::ShutdownSweepOver() {
  if (impl_) impl_->Shutdown(/*sweep_over=*/true);
}

}  // namespace sweep::executor
