// LocalExecutor: runs trials in a pool of worker processes on this machine and turns their
// messages into events. Workers are spawned on demand and reused across trials; a worker that
// dies fails its trial (with its exit status and last output) and is replaced on the next
// Start. Not thread-safe: one coordinator loop owns it. Ignores SIGPIPE process-wide, so that a
// dead worker's pipe gives EPIPE instead of killing the coordinator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "executor/trial.h"

namespace sweep::executor {

struct WorkerEvent {
  enum class Type { kReport, kDone };
  Type type = Type::kReport;
  int64_t trial = 0;
  // kReport
  int64_t step = 0;
  double epoch = 0;
  nlohmann::json metrics;  // kReport: the report; kDone: end-only metrics (test_acc)
  // kDone
  TrialOutcome::Kind outcome = TrialOutcome::Kind::kCompleted;
  std::string error;
  // The worker died or stopped answering (not the trial's own failure): the trial may be rerun.
  bool worker_lost = false;
  // It never reached a worker: its agent was lost, or was stopping, before it could start, or
  // no worker could be started for it.
  bool never_started = false;
  // An agent's trial that its agent's end ended, not the trial itself (set by the coordinator's
  // hub): kStopping, the agent said it is stopping, then stopped the trial or did not start it;
  // kLost, the agent was lost (said bye, crashed, fell silent) with the trial on it. A worker
  // that died there by itself (a crash) is kNone, as anywhere else.
  enum class AgentEnd { kNone, kStopping, kLost };
  AgentEnd agent_end = AgentEnd::kNone;
  // When the worker (or, for an agent's trial, the coordinator's hub) had it: Unix seconds;
  // 0 when not known. A coordinator held up (a locked store) still records when it happened.
  double time_s = 0;
  bool metric_not_number = false;                  // kDone: see TrialOutcome
  nlohmann::json info = nlohmann::json::object();  // kDone: TrialOutcome::info
};

class LocalExecutor {
 public:
  // `worker_command`: argv of the worker program, e.g. {"/usr/bin/sweep", "worker"}.
  // `extra_env`: "KEY=VALUE" entries added to the workers' environment.
  explicit LocalExecutor(std::vector<std::string> worker_command,
                         std::vector<std::string> extra_env = {});
  ~LocalExecutor();  // Shutdown(1000)
  LocalExecutor(const LocalExecutor&) = delete;
  LocalExecutor& operator=(const LocalExecutor&) = delete;

  // Hands the task to an idle worker, spawning one if none is idle.
  Status Start(const TrialTask& task);
  // Asks trial `number` to stop; its kDone (kStopped) event follows.
  Status Stop(int64_t number);
  // Lets trial `number`, waiting at a decision point, go on.
  Status Continue(int64_t number);
  // Waits up to timeout_ms for messages; appends what arrived (possibly nothing). Returns
  // early when the wake fd (set_wake_fd) is readable.
  Status Poll(int timeout_ms, std::vector<WorkerEvent>* events);
  // An fd Poll also waits on, e.g. AgentHub::wake_fd(), so one thread can wait for local
  // workers and something else at once. Poll only watches it: reading it is the owner's job.
  // -1 (the default): none. The executor does not own it.
  void set_wake_fd(int fd) { wake_fd_ = fd; }
  int running() const;
  // A worker running a trial that sends nothing (not even its heartbeat, every
  // kWorkerHeartbeatMs) for this long is killed and its trial reported lost. 0: never.
  void set_heartbeat_timeout_ms(int64_t ms) { heartbeat_timeout_ms_ = ms; }
  int workers() const { return static_cast<int>(workers_.size()); }
  // Tells the workers to exit, waits up to grace_ms, then kills what is left.
  void Shutdown(int grace_ms);

 private:
  struct Worker;
  Result<Worker*> IdleWorker();
  Status Send(int64_t number, const char* op);
  void ReadMessages(Worker& w, std::vector<WorkerEvent>* events);
  void ReadLog(Worker& w);
  void Reap(Worker& w, std::vector<WorkerEvent>* events, const std::string& why = "");

  std::vector<std::string> command_;
  std::vector<std::string> env_;
  std::vector<std::unique_ptr<Worker>> workers_;
  int64_t heartbeat_timeout_ms_ = 60'000;
  int wake_fd_ = -1;
};

}  // namespace sweep::executor
