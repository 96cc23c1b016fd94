// The hub serving a registered agent: its reports and results in, the trials and stops sent to
// it, heartbeats both ways, and losing it (its running trials each get their kDone).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "agent_hub_impl.h"
#include "base/clock.h"

namespace sweep::executor {

using net::MessageType;
using nlohmann::json;

namespace {

std::string Seconds(int ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", ms / 1000.0);
  return buf;
}

}  // namespace

void AgentHub::Impl::OnServing(Peer* peer, net::Frame& frame) {
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

void AgentHub::Impl::Send(Peer* peer, json body) {
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

// Ends a connection: for a registered agent, its trials' kDone events and AgentLost.
void AgentHub::Impl::Lose(Peer* peer, AgentLost::Reason reason, const std::string& detail) {
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

void AgentHub::Impl::RunCommands() {
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

void AgentHub::Impl::StartOn(Peer* peer, Command c) {
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

void AgentHub::Impl::ScheduleTick() {
  const int tick_ms = std::clamp(options_.heartbeat_ms / 2, 5, 250);
  tick_.expires_after(std::chrono::milliseconds(tick_ms));
  tick_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || shutting_down_) return;
    Tick();
    ScheduleTick();
  });
}

void AgentHub::Impl::Tick() {
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

}  // namespace sweep::executor
