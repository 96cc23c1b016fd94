// The agent's worker thread (agent_pump.h): one loop that polls the LocalExecutor, applies the
// session's commands, and delivers worker events; stops wait out each trial's kill_grace.
#include "agent_pump.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <utility>

namespace sweep::executor {

using Clock = std::chrono::steady_clock;

AgentPump::AgentPump(std::vector<std::string> command, std::vector<std::string> env,
                     Deliver deliver)
    : executor_(std::move(command), std::move(env)), deliver_(std::move(deliver)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  executor_.set_wake_fd(wake_fd_);
}

AgentPump::~AgentPump() {
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status AgentPump::Begin() {
  if (wake_fd_ < 0) return Status::IoError("cannot create the agent's eventfd");
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void AgentPump::Push(Command c) {
  {
    std::lock_guard lock(mu_);
    commands_.push_back(std::move(c));
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void AgentPump::Loop() {
  std::vector<WorkerEvent> events;
  std::deque<Command> commands;
  std::set<int64_t> running;
  // What each running trial's own stop may take: a command trial's kill_grace (its program
  // may be saving its state), plus a moment for its worker to say it ended.
  std::map<int64_t, int> grace_ms;
  std::vector<Idle> waiting;  // StopAll callers
  Clock::time_point deadline{};
  bool exiting = false;
  for (;;) {
    const bool busy = !running.empty();
    Status st = executor_.Poll(busy ? 20 : 200, &events);
    if (!st.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    uint64_t count = 0;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof count);
    {
      std::lock_guard lock(mu_);
      commands.swap(commands_);
    }
    for (auto& c : commands) {
      switch (c.type) {
        case Command::Type::kStart: {
          Status started = executor_.Start(c.task);
          if (started.ok()) {
            running.insert(c.trial);
            // The worker checks the task's settings; here only a number counts.
            const auto grace = c.task.settings.find("kill_grace_s");
            const double kill_grace_s =
                grace != c.task.settings.end() && grace->is_number() ? grace->get<double>() : 0.0;
            grace_ms[c.trial] =
                kill_grace_s > 0 ? static_cast<int>(std::min(kill_grace_s, 86400.0) * 1000) + 1000
                                 : 0;
          } else {
            // No worker could be started here (no descriptors or memory left, the worker
            // program gone): this machine's trouble, not the trial's. Interrupted, it runs
            // again elsewhere and nothing more is placed here, as for a full disk.
            WorkerEvent ev;
            ev.type = WorkerEvent::Type::kDone;
            ev.trial = c.trial;
            ev.outcome = TrialOutcome::Kind::kInterrupted;
            ev.error = started.message();
            ev.never_started = true;
            events.push_back(std::move(ev));
          }
          break;
        }
        case Command::Type::kStop:
          (void)executor_.Stop(c.trial);  // NotFound: it just ended
          break;
        case Command::Type::kContinue:
          (void)executor_.Continue(c.trial);
          break;
        case Command::Type::kAbandonAll:
          executor_.Shutdown(0);  // kills every worker and its program; new ones as needed
          running.clear();
          grace_ms.clear();
          if (c.idle) waiting.push_back(std::move(c.idle));
          break;
        case Command::Type::kStopAll:
        case Command::Type::kExit:
          for (int64_t t : running) (void)executor_.Stop(t);
          if (waiting.empty()) {
            int grace = c.grace_ms;
            for (int64_t t : running) grace = std::max(grace, grace_ms[t]);
            deadline = Clock::now() + std::chrono::milliseconds(grace);
          }
          if (c.idle) waiting.push_back(std::move(c.idle));
          exiting = exiting || c.type == Command::Type::kExit;
          break;
      }
    }
    commands.clear();
    for (const auto& ev : events) {
      if (ev.type == WorkerEvent::Type::kDone) {
        running.erase(ev.trial);
        grace_ms.erase(ev.trial);
      }
    }
    if (!events.empty()) {
      deliver_(std::move(events));
      events = {};
    }
    if (!running.empty() && (!waiting.empty() || exiting) && Clock::now() >= deadline) {
      executor_.Shutdown(0);  // kills what did not stop in time
      running.clear();
      grace_ms.clear();
    }
    if (running.empty()) {
      for (auto& idle : waiting) idle();
      waiting.clear();
      if (exiting) break;
    }
  }
  executor_.Shutdown(1000);
}
}  // namespace sweep::executor
