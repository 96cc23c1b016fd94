// AgentPump: the agent's worker thread. It owns the LocalExecutor that runs the assigned
// trials; the session thread hands it commands (start / stop / continue / stop all) through a
// queue and an eventfd that wakes LocalExecutor::Poll, and gets worker events back in bulk.
// Private to sweep_executor. Its public methods are safe from any thread; `deliver` and the
// `idle` callbacks run on the pump's thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "executor/local_executor.h"
#include "executor/trial.h"

namespace sweep::executor {

class AgentPump {
 public:
  using Deliver = std::function<void(std::vector<WorkerEvent>)>;
  using Idle = std::function<void()>;

  AgentPump(std::vector<std::string> command, std::vector<std::string> env, Deliver deliver);
  ~AgentPump();
  AgentPump(const AgentPump&) = delete;
  AgentPump& operator=(const AgentPump&) = delete;
  // Starts the thread.
  Status Begin();

  void Start(TrialTask task) {
    Push(Command{Command::Type::kStart, task.number, std::move(task), 0, {}});
  }
  void Stop(int64_t trial) { Push(Command{Command::Type::kStop, trial, {}, 0, {}}); }
  void Continue(int64_t trial) { Push(Command{Command::Type::kContinue, trial, {}, 0, {}}); }
  // Stops every running trial; `idle` runs (on the pump thread) once none is left, after at
  // most grace_ms (then the workers are killed).
  void StopAll(int grace_ms, Idle idle) {
    Push(Command{Command::Type::kStopAll, 0, {}, grace_ms, std::move(idle)});
  }
  // Ends every running trial at once, unsaved (its worker and program killed): what the
  // coordinator can no longer hear (and has requeued) must not go on training and checkpointing.
  // `idle` runs (on the pump thread) once they are gone.
  void AbandonAll(Idle idle) {
    Push(Command{Command::Type::kAbandonAll, 0, {}, 0, std::move(idle)});
  }
  // Ends the thread once no trial runs.
  void Exit() { Push(Command{Command::Type::kExit, 0, {}, 0, {}}); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Command {
    enum class Type { kStart, kStop, kContinue, kStopAll, kAbandonAll, kExit };
    Type type;
    int64_t trial = 0;
    TrialTask task;
    int grace_ms = 0;
    Idle idle;
  };

  void Push(Command c);
  void Loop();

  LocalExecutor executor_;
  Deliver deliver_;
  int wake_fd_ = -1;
  std::mutex mu_;
  std::deque<Command> commands_;
  std::thread thread_;
};

}  // namespace sweep::executor
