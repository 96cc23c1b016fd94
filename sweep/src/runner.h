// Where trials run: the seam between the coordinator and the processes that run its trials.
// This machine's worker pool (LocalRunner) and the remote agents (HubRunner) both implement
// TrialRunner; the coordinator sees servers joining and leaving and trials reporting, and never
// asks which kind a server is. Tests drive the coordinator through a fake one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "executor/agent_hub.h"
#include "executor/local_executor.h"
#include "executor/slots.h"
#include "executor/trial.h"

namespace sweep {

// A server a runner offers: its slots, where its trials' relative paths are resolved.
struct ServerOffer {
  std::string name;  // what placements show: "local", an agent's name
  std::vector<executor::Slot> slots;
  std::string folder;         // its working folder on its machine (empty: not said)
  bool this_machine = false;  // its files are this process's files (checkpoints are seen here)
};

// What a runner reports: a trial's report or end, or a server joining, stopping or leaving.
struct RunnerEvent {
  enum class Kind { kTrial, kServerJoined, kServerDraining, kServerLost };
  Kind kind = Kind::kTrial;
  size_t runner = 0;            // the runner's index in its RunnerSet (set by RunnerSet::Poll)
  int64_t server = 0;           // the runner's own name for the server (an agent id)
  executor::WorkerEvent trial;  // kTrial
  // kTrial: the trial ended because its server went away (lost, or stopping)...
  bool server_lost = false;
  // ... and the server was stopped on purpose (it said bye or that it is stopping), which the
  // trial cannot have caused.
  bool server_stopped = false;
  ServerOffer offer;  // kServerJoined
};

// Why a trial could not start. kServerGone: the server left before it took the trial (it runs
// elsewhere, its loss still on the way); kRefused: the server would not take it (the trial
// fails); kServerTrouble: the server cannot start workers now (no descriptors or memory left),
// and the trials after it would meet the same.
enum class StartFailure { kServerGone, kRefused, kServerTrouble };

class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  // Hands the trial to `server`; on failure sets *why.
  virtual Status Start(int64_t server, const executor::TrialTask& task, StartFailure* why) = 0;
  // Asks the trial to stop; its end (kStopped) follows.
  virtual Status Stop(int64_t server, int64_t trial) = 0;
  // Lets a trial waiting at a decision point go on.
  virtual Status Continue(int64_t server, int64_t trial) = 0;
  // Appends what has arrived without waiting.
  virtual Status Drain(std::vector<RunnerEvent>* events) = 0;
  // Readable while events wait (Drain empties it); -1 when this runner is waited on by Wait.
  virtual int wake_fd() const { return -1; }
  // Waits up to timeout_ms for an event of this runner, or for `wake_fd` to become readable;
  // appends what arrived. Only one runner of a set waits (RunnerSet).
  virtual Status Wait(int timeout_ms, int wake_fd, std::vector<RunnerEvent>* events) = 0;
  // The sweep ends: `sweep_over` (it completed) lets remote servers go; otherwise they stay for
  // a resume. grace_ms: how long local workers get to exit.
  virtual void Shutdown(bool sweep_over, int grace_ms) = 0;
  // A second interrupt: ends this runner's trials at once where it can (local workers are
  // killed; trials on agents end when the coordinator goes).
  virtual void EndTrialsNow() {}
  // The port agents connect to (0: this runner takes none).
  virtual int port() const { return 0; }
  // Whether servers may still join it (agents connecting): a sweep waits for them.
  virtual bool may_add_servers() const { return false; }
};

// This machine's slots and its pool of `sweep worker` processes.
class LocalRunner final : public TrialRunner {
 public:
  // `slots`: empty when trials are not to run here (only on agents).
  LocalRunner(std::vector<std::string> worker_command, std::vector<std::string> worker_env,
              std::vector<executor::Slot> slots, int64_t heartbeat_timeout_ms);
  Status Start(int64_t server, const executor::TrialTask& task, StartFailure* why) override;
  Status Stop(int64_t server, int64_t trial) override;
  Status Continue(int64_t server, int64_t trial) override;
  Status Drain(std::vector<RunnerEvent>* events) override;
  Status Wait(int timeout_ms, int wake_fd, std::vector<RunnerEvent>* events) override;
  void Shutdown(bool sweep_over, int grace_ms) override;
  void EndTrialsNow() override { executor_.Shutdown(0); }

 private:
  Status Poll(int timeout_ms, std::vector<RunnerEvent>* events);
  executor::LocalExecutor executor_;
  std::vector<executor::Slot> slots_;
  bool offered_ = false;
  std::vector<executor::WorkerEvent> got_;
};

// Remote agents, through the hub that listens for them.
class HubRunner final : public TrialRunner {
 public:
  // Listens on host:port (0: a free one) and says where on `log` (may be null).
  static Result<std::unique_ptr<HubRunner>> Listen(const std::string& host, int port,
                                                   const std::string& token,
                                                   double heartbeat_timeout_s, std::ostream* log);
  Status Start(int64_t server, const executor::TrialTask& task, StartFailure* why) override;
  Status Stop(int64_t server, int64_t trial) override;
  Status Continue(int64_t server, int64_t trial) override;
  Status Drain(std::vector<RunnerEvent>* events) override;
  int wake_fd() const override { return hub_.wake_fd(); }
  Status Wait(int timeout_ms, int wake_fd, std::vector<RunnerEvent>* events) override;
  void Shutdown(bool sweep_over, int grace_ms) override;
  int port() const override { return hub_.port(); }
  bool may_add_servers() const override { return true; }

 private:
  executor::AgentHub hub_;
  std::vector<executor::HubEvent> got_;
  std::set<int64_t> draining_;  // agents that said they are stopping
  // Agents gone, and how (ids are never reused): a trial's end may come after its agent's loss.
  std::map<int64_t, executor::AgentLost::Reason> lost_;
};

// The runners of one sweep, each server named by (runner, its id there).
class RunnerSet {
 public:
  // The first runner added is the one Poll waits on; the others wake it.
  void Add(std::unique_ptr<TrialRunner> runner);
  size_t size() const { return runners_.size(); }
  TrialRunner& at(size_t i) { return *runners_[i]; }
  // Everything that has arrived, each event with its runner's index; when nothing has, waits
  // up to timeout_ms for something.
  Status Poll(int timeout_ms, std::vector<RunnerEvent>* events);
  void Shutdown(bool sweep_over, int grace_ms);
  void EndTrialsNow();
  int port() const;  // the first runner's that takes agents, else 0
  bool may_add_servers() const;

 private:
  std::vector<std::unique_ptr<TrialRunner>> runners_;
};

}  // namespace sweep
