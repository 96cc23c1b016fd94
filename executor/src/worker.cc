// The worker process: one thread reads commands and runs trials one at a time, writing their
// reports and outcomes on the message pipe. A stop request reaches a running trial because the
// worker looks for new commands (without waiting) at each report, which is exactly where a
// trial can stop. Messages written within a few milliseconds go out in one write, so a cheap
// trial costs one round trip, not one per message. A worker whose GPU context a failed trial
// broke (trainer::GpuContextFault) says so with "retire" before the trial's "done" and exits, so
// the executor replaces it instead of failing every later GPU trial in a broken process.
#include "executor/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "executor/command.h"
#include "executor/trial.h"
#include "line_io.h"
#include "trainer/trainer.h"

namespace sweep::executor {

using nlohmann::json;

namespace {

// Sent to the worker when the process that started it (the coordinator or agent) dies.
constexpr int kParentDeathSignal = SIGUSR1;
// The longest error a trial's "done" carries (a program's output quoted at length is cut).
constexpr size_t kMaxTrialErrorBytes = 16 * 1024;

// The process group of the command program the worker runs now; 0: none. Read by
// OnParentDeath, which may run at any moment.
volatile sig_atomic_t g_program_group = 0;
// The process that started this worker.
volatile sig_atomic_t g_parent = 0;

// The parent died (even by SIGKILL): the program would die with this worker (its own
// PR_SET_PDEATHSIG), but helpers it started in its group would be orphaned, holding memory
// and GPUs. Only async-signal-safe calls here.
extern "C" void OnParentDeath(int) {
  // The same signal sent for another reason (a batch system's warning to every process of a
  // job) while the parent lives is not its death.
  if (::getppid() == g_parent) return;
  const pid_t group = g_program_group;
  if (group > 0) ::kill(-group, SIGKILL);
  ::_exit(1);
}

constexpr auto kFlushInterval = std::chrono::milliseconds(5);
constexpr auto kPendingCheck = std::chrono::milliseconds(50);

class Worker {
 public:
  Worker(int command_fd, int message_fd) : command_fd_(command_fd), message_fd_(message_fd) {}

  int Serve() {
    // Die with the coordinator (or agent): a worker has no use once nobody reads its
    // messages. It takes its command program's process group with it.
    g_parent = ::getppid();
    struct sigaction on_death {};
    on_death.sa_handler = OnParentDeath;
    ::sigemptyset(&on_death.sa_mask);
    ::sigaction(kParentDeathSignal, &on_death, nullptr);
    ::prctl(PR_SET_PDEATHSIG, kParentDeathSignal);
    // Deaf to SIGINT, SIGTERM and SIGHUP: Ctrl-C, `timeout`, `systemctl stop`, a batch
    // system's cancel or a closed terminal signal the coordinator's whole group (or cgroup),
    // and the coordinator stops the trials after their current epoch and records them
    // interrupted. A worker killed by that signal would read as a crash. The coordinator ends a
    // worker with its stop message, or SIGKILL; a command trial's program gets the default
    // actions back before it starts.
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    if (::getppid() == 1) return 1;
    // Not inherited by a command trial's program: its helpers, outliving this worker, would
    // hold the message pipe open and hide the worker's end from the executor.
    ::fcntl(message_fd_, F_SETFD, FD_CLOEXEC);
    std::thread heartbeat([this] { Heartbeat(); });
    int rc = ServeCommands();
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    heartbeat.join();
    return rc;
  }

 private:
  int ServeCommands() {
    const int64_t abort_trial = TrialFromEnv("SWEEP_TEST_ABORT_TRIAL");
    const int64_t retire_after = TrialFromEnv("SWEEP_TEST_RETIRE_AFTER_TRIAL");
    for (;;) {
      while (runs_.empty() && !closed_) Pump(-1);
      if (runs_.empty()) return Flush() ? 0 : 1;
      json msg = std::move(runs_.front());
      runs_.pop_front();
      auto task = TrialTaskFromJson(msg.value("task", json::object()));
      if (!task.ok()) {
        Send(json{{"op", "error"}, {"error", task.status().message()}});
        if (!Flush()) return 1;
        continue;
      }
      current_ = task->number;
      stop_ = false;
      if (stopped_early_.erase(task->number) > 0) {
        // Stopped before it began (the stop overtook the start): it ends without running.
        current_ = -1;
        Send(json{{"op", "done"},
                  {"trial", task->number},
                  {"outcome", ToString(TrialOutcome::Kind::kStopped)},
                  {"error", ""},
                  {"metrics", json::object()}});
        if (!Flush()) return 1;
        continue;
      }
      if (task->number == abort_trial) {
        Flush();
        std::abort();
      }
      size_t next_point = 0;
      std::function<void()> while_waiting;  // a command trial's, while its program runs
      auto sink = [&](int64_t step, double epoch, const json& metrics) {
        Send(json{{"op", "report"},
                  {"trial", task->number},
                  {"step", step},
                  {"epoch", epoch},
                  {"metrics", metrics},
                  {"t", UnixSeconds()}});
        if (task->IsDecisionPoint(step, epoch, &next_point) && !stop_) {
          // Early stopping judges this report: wait for its verdict.
          Flush();
          verdict_ = false;
          while (!verdict_ && !closed_) {
            if (!while_waiting) {
              Pump(-1);
              continue;
            }
            Pump(20);
            if (!verdict_) while_waiting();
          }
          return;
        }
        FlushIfDue();
        Pump(0);  // a stop request takes effect at this report
      };
      TrialHooks hooks;
      hooks.while_waiting = &while_waiting;
      // Between reports (a command trial's silent epoch), a stop is read as it arrives.
      hooks.idle = [&] { Pump(0); };
      // The executor kills this group if it has to kill this worker (see TrialHooks).
      // The program's group, or 0 once it is gone, for OnParentDeath and for the executor.
      auto tell_group = [&](int pgid) {
        g_program_group = pgid;
        Send(json{{"op", "group"}, {"trial", task->number}, {"pgid", pgid}});
        Flush();
      };
      hooks.started = tell_group;
      hooks.ended = [&] { tell_group(0); };
      TrialOutcome outcome;
      try {
        outcome = RunTrial(*task, sink, stop_, hooks);
      } catch (const std::exception& e) {
        // A task whose settings are not what its kind reads (a string where a number goes:
        // only a coordinator of another build, or a forged one, sends such): the trial fails,
        // not the worker.
        if (g_program_group > 0) ::kill(-g_program_group, SIGKILL);
        outcome = TrialOutcome();
        outcome.kind = TrialOutcome::Kind::kFailed;
        outcome.error = std::string("the task could not be read: ") + e.what();
        outcome.end_metrics = json::object();
      }
      g_program_group = 0;  // ended, or the program never ran
      current_ = -1;
      std::string fault;
      if (task->number == retire_after) {
        fault = "test hook SWEEP_TEST_RETIRE_AFTER_TRIAL";
      } else if (outcome.kind == TrialOutcome::Kind::kFailed) {
        fault = trainer::GpuContextFault();
      }
      if (!fault.empty()) {
        // First, so the executor gives this worker nothing more once it reads the "done".
        Send(json{{"op", "retire"}, {"trial", task->number}, {"why", fault}});
      }
      json done{{"op", "done"},
                {"trial", task->number},
                {"outcome", ToString(outcome.kind)},
                // A program's output quoted at length is cut: the store keeps a message.
                {"error", Abbreviate(outcome.error, kMaxTrialErrorBytes)},
                {"metrics", outcome.end_metrics},
                {"t", UnixSeconds()}};
      if (outcome.metric_not_number) done["metric_not_number"] = true;
      if (outcome.info.is_object() && !outcome.info.empty()) done["info"] = outcome.info;
      Send(done);
      if (!Flush()) return 1;  // the executor is gone
      if (!fault.empty()) return 0;
    }
  }

  // Writes a heartbeat every kWorkerHeartbeatMs while a trial runs, and sends what the trial
  // thread has left unsent for kFlushInterval (it checks every kPendingCheck): a report followed
  // by a long silence (a command trial's next epoch) reaches the coordinator now, not with the
  // next report. It polls rather than being woken per message, which would cost every short
  // trial a context switch.
  void Heartbeat() {
    std::unique_lock lock(mu_);
    auto beat = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWorkerHeartbeatMs);
    while (!cv_.wait_for(lock, kPendingCheck, [this] { return done_; })) {
      const auto now = std::chrono::steady_clock::now();
      if (!out_.empty() && now - last_flush_ >= kFlushInterval) WritePending();
      if (now >= beat) {
        if (current_ >= 0) WriteAll(message_fd_, "{\"op\":\"hb\"}\n");
        beat = now + std::chrono::milliseconds(kWorkerHeartbeatMs);
      }
    }
  }

  // Test hooks: SWEEP_TEST_ABORT_TRIAL=N makes the worker abort when it starts trial N, the way
  // a crashing native library would; SWEEP_TEST_RETIRE_AFTER_TRIAL=N makes it retire after trial
  // N as if a GPU fault had broken its CUDA context. The tests use them to prove a crash is
  // contained and a broken worker replaced.
  static int64_t TrialFromEnv(const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr ? -1 : std::atoll(v);
  }

  // Reads the commands that are available (waiting up to timeout_ms; -1: until one arrives).
  // Told to exit (or its executor gone) while a trial runs: the trial is abandoned on the spot.
  // Nobody will store its reports any more, so it does not go on to train and checkpoint epochs
  // nobody records (its rerun, perhaps already started elsewhere, writes the same checkpoint). It
  // reruns from its last checkpoint instead.
  void Pump(int timeout_ms) {
    if (closed_) return;
    pollfd p{command_fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return;
    std::vector<std::string> lines;
    if (!reader_.ReadSome(command_fd_, &lines)) closed_ = true;
    for (const std::string& line : lines) {
      json msg = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!msg.is_object()) continue;
      std::string op = msg.value("op", "");
      if (op == "run") {
        runs_.push_back(std::move(msg));
      } else if (op == "stop") {
        const int64_t trial = msg.value("trial", int64_t{-2});
        if (trial == current_) {
          stop_ = verdict_ = true;
        } else {
          for (const json& run : runs_) {
            if (run.value("task", json::object()).value("number", int64_t{-3}) == trial) {
              stopped_early_.insert(trial);
            }
          }
        }
      } else if (op == "go") {
        if (msg.value("trial", int64_t{-2}) == current_) verdict_ = true;
      } else if (op == "exit") {
        closed_ = true;
      }
    }
    if (closed_ && current_ >= 0) Abandon();
  }

  // Ends the process now, with the program's process group (a command trial's), unsaved.
  [[noreturn]] static void Abandon() {
    const pid_t group = g_program_group;
    if (group > 0) ::kill(-group, SIGKILL);
    ::_exit(1);
  }

  void Send(const json& msg) {
    std::string line = msg.dump(-1, ' ', false, json::error_handler_t::replace);
    line += '\n';
    std::lock_guard lock(mu_);
    out_ += line;  // the heartbeat thread sends it if no Flush comes first
  }

  bool Flush() {
    std::lock_guard lock(mu_);  // whole lines: never interleaved with a heartbeat
    return WritePending();
  }

  // Flush, when kFlushInterval has passed since the last write of pending messages.
  void FlushIfDue() {
    std::lock_guard lock(mu_);
    if (std::chrono::steady_clock::now() - last_flush_ >= kFlushInterval) WritePending();
  }

  // Writes out_ and empties it; mu_ held.
  bool WritePending() {
    last_flush_ = std::chrono::steady_clock::now();
    if (out_.empty()) return true;
    bool ok = WriteAll(message_fd_, out_);
    out_.clear();
    return ok;
  }

  int command_fd_;
  int message_fd_;
  LineReader reader_;
  std::deque<json> runs_;
  std::set<int64_t> stopped_early_;  // queued runs stopped before they began
  bool closed_ = false;
  std::atomic<int64_t> current_{-1};
  std::mutex mu_;  // the message pipe, out_, last_flush_ and done_
  std::condition_variable cv_;
  bool done_ = false;
  std::atomic<bool> stop_{false};
  bool verdict_ = false;  // the go or stop awaited at a decision point arrived
  std::string out_;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
};

}  // namespace

int RunWorker(int command_fd, int message_fd) { return Worker(command_fd, message_fd).Serve(); }

}  // namespace sweep::executor
