#include "runner.h"

#include <poll.h>
#include <string_view>
#include <utility>
#include <variant>

#include "executor/net_auth.h"

namespace sweep {

LocalRunner::LocalRunner(std::vector<std::string> worker_command,
                         std::vector<std::string> worker_env, std::vector<executor::Slot> slots,
                         int64_t heartbeat_timeout_ms)
    : executor_(std::move(worker_command), std::move(worker_env)), slots_(std::move(slots)) {
  executor_.set_heartbeat_timeout_ms(heartbeat_timeout_ms);
}

Status LocalRunner::Start(int64_t, const executor::TrialTask& task, StartFailure* why) {
  Status s = executor_.Start(task);
  // No worker process could be started here: the machine's trouble, not the trial's.
  if (!s.ok()) *why = StartFailure::kServerTrouble;
  return s;
}

Status LocalRunner::Stop(int64_t, int64_t trial) { return executor_.Stop(trial); }

Status LocalRunner::Continue(int64_t, int64_t trial) { return executor_.Continue(trial); }

Status LocalRunner::Poll(int timeout_ms, std::vector<RunnerEvent>* events) {
  if (!offered_) {
    offered_ = true;
    if (!slots_.empty()) {
      RunnerEvent joined;
      joined.kind = RunnerEvent::Kind::kServerJoined;
      joined.offer = {"local", slots_, "", /*this_machine=*/true};
      events->push_back(std::move(joined));
    }
  }
  got_.clear();
  SWEEP_RETURN_IF_ERROR(executor_.Poll(timeout_ms, &got_));
  for (executor::WorkerEvent& ev : got_) {
    RunnerEvent e;
    e.trial = std::move(ev);
    events->push_back(std::move(e));
  }
  return Status::Ok();
}

Status LocalRunner::Drain(std::vector<RunnerEvent>* events) { return Poll(0, events); }

Status LocalRunner::Wait(int timeout_ms, int wake_fd, std::vector<RunnerEvent>* events) {
  executor_.set_wake_fd(wake_fd);
  return Poll(timeout_ms, events);
}

void LocalRunner::Shutdown(bool, int grace_ms) { executor_.Shutdown(grace_ms); }

Result<std::unique_ptr<HubRunner>> HubRunner::Listen(const std::string& host, int port,
                                                     const std::string& token,
                                                     double heartbeat_timeout_s,
                                                     std::ostream* log) {
  auto runner = std::unique_ptr<HubRunner>(new HubRunner());
  executor::HubOptions options;
  options.heartbeat_timeout_ms = static_cast<int>(heartbeat_timeout_s * 1000);
  options.log = [log](std::string_view line) {
    if (log != nullptr) *log << "sweep: " << line << "\n";
  };
  SWEEP_RETURN_IF_ERROR(runner->hub_.Listen(host, port, token, options));
  if (log != nullptr) {
    *log << "sweep: listening for agents on "
         << executor::net::FormatHostPort(host, runner->hub_.port()) << "\n";
  }
  return runner;
}

Status HubRunner::Start(int64_t server, const executor::TrialTask& task, StartFailure* why) {
  Status s = hub_.Start(server, task);
  if (!s.ok()) {
    *why = s.code() == Status::Code::kNotFound ? StartFailure::kServerGone : StartFailure::kRefused;
  }
  return s;
}

Status HubRunner::Stop(int64_t server, int64_t trial) { return hub_.Stop(server, trial); }

Status HubRunner::Continue(int64_t server, int64_t trial) { return hub_.Continue(server, trial); }

Status HubRunner::Drain(std::vector<RunnerEvent>* events) {
  got_.clear();
  hub_.Drain(&got_);
  // A lost agent's trials get their end just before its AgentLost, in the same batch (and one
  // started there as it went, in a later one): the loss is known before they are handled.
  for (const executor::HubEvent& e : got_) {
    if (auto* gone = std::get_if<executor::AgentLost>(&e.event)) lost_[e.agent_id] = gone->reason;
  }
  for (executor::HubEvent& e : got_) {
    RunnerEvent out;
    out.server = e.agent_id;
    if (auto* ev = std::get_if<executor::WorkerEvent>(&e.event)) {
      // An agent that said it is stopping, or said bye: the trials it ended as it went are not
      // at fault. Nor is a trial started there as the agent went (its end comes after the
      // loss). A worker there that died by itself meanwhile (a crash) is lost as anywhere.
      using End = executor::WorkerEvent::AgentEnd;
      const auto gone = lost_.find(e.agent_id);
      const bool lost = ev->agent_end == End::kLost;
      // One that had said it is stopping and was then killed (a batch system's SIGKILL after
      // its SIGTERM) is stopped as much as one that said bye.
      const bool bye =
          lost && ((gone != lost_.end() && gone->second == executor::AgentLost::Reason::kBye) ||
                   draining_.contains(e.agent_id));
      const bool stopping = ev->agent_end == End::kStopping;
      out.server_lost = lost || stopping;
      out.server_stopped = bye || stopping;
      out.trial = std::move(*ev);
    } else if (std::holds_alternative<executor::AgentDraining>(e.event)) {
      draining_.insert(e.agent_id);
      out.kind = RunnerEvent::Kind::kServerDraining;
    } else if (auto* joined = std::get_if<executor::AgentJoined>(&e.event)) {
      out.kind = RunnerEvent::Kind::kServerJoined;
      out.offer = {joined->name, joined->slots, joined->folder, /*this_machine=*/false};
      if (joined->link_group.size() == out.offer.slots.size()) {
        for (size_t i = 0; i < out.offer.slots.size(); ++i) {
          out.offer.slots[i].link_group = joined->link_group[i];
        }
      }
    } else {
      draining_.erase(e.agent_id);
      out.kind = RunnerEvent::Kind::kServerLost;
    }
    events->push_back(std::move(out));
  }
  return Status::Ok();
}

Status HubRunner::Wait(int timeout_ms, int, std::vector<RunnerEvent>* events) {
  pollfd p{hub_.wake_fd(), POLLIN, 0};
  (void)::poll(&p, 1, timeout_ms);
  return Drain(events);
}

void HubRunner::Shutdown(bool sweep_over, int) {
  // A completed sweep lets its agents go; an interrupted one keeps them for its resume.
  if (sweep_over) {
    hub_.ShutdownSweepOver();
  } else {
    hub_.Shutdown();
  }
}

void RunnerSet::Add(std::unique_ptr<TrialRunner> runner) { runners_.push_back(std::move(runner)); }

Status RunnerSet::Poll(int timeout_ms, std::vector<RunnerEvent>* events) {
  auto take = [&](size_t i, bool wait, int wake_fd) -> Status {
    const size_t before = events->size();
    SWEEP_RETURN_IF_ERROR(wait ? runners_[i]->Wait(timeout_ms, wake_fd, events)
                               : runners_[i]->Drain(events));
    for (size_t k = before; k < events->size(); ++k) (*events)[k].runner = i;
    return Status::Ok();
  };
  for (size_t i = 0; i < runners_.size(); ++i) SWEEP_RETURN_IF_ERROR(take(i, false, -1));
  if (!events->empty() || timeout_ms <= 0 || runners_.empty()) return Status::Ok();
  // The first runner waits, woken by another's events (one other can wake it: the hub).
  int wake_fd = -1;
  for (size_t i = 1; i < runners_.size() && wake_fd < 0; ++i) wake_fd = runners_[i]->wake_fd();
  SWEEP_RETURN_IF_ERROR(take(0, true, wake_fd));
  for (size_t i = 1; i < runners_.size(); ++i) SWEEP_RETURN_IF_ERROR(take(i, false, -1));
  return Status::Ok();
}

void RunnerSet::Shutdown(bool sweep_over, int grace_ms) {
  for (auto& r : runners_) r->Shutdown(sweep_over, grace_ms);
}

void RunnerSet::EndTrialsNow() {
  for (auto& r : runners_) r->EndTrialsNow();
}

bool RunnerSet::may_add_servers() const {
  for (const auto& r : runners_) {
    if (r->may_add_servers()) return true;
  }
  return false;
}

int RunnerSet::port() const {
  for (const auto& r : runners_) {
    if (r->port() != 0) return r->port();
  }
  return 0;
}

}  // namespace sweep
