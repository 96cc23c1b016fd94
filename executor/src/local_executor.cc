// LocalExecutor: worker processes over pipes, multiplexed with poll(2).
// Each worker has three pipes: commands (its stdin), messages (its fd 3) and logs (its stdout
// and stderr). The log tail is kept so that a crashed worker's trial records what it printed.
#include "executor/local_executor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "executor/worker.h"
#include "line_io.h"

extern char** environ;

namespace sweep::executor {

using nlohmann::json;

namespace {
constexpr size_t kLogTailBytes = 2048;

// Moves fd above the range the child's dup2 targets use, with close-on-exec set; -1 (errno
// set, fd left open) when no descriptor is free there.
int MoveHigh(int fd) {
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (moved >= 0) ::close(fd);
  return moved;
}

std::string DescribeExit(int wstatus) {
  if (WIFEXITED(wstatus)) return "exited with code " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    const char* name = ::strsignal(sig);
    return "killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "ended (status " + std::to_string(wstatus) + ")";
}
}  // namespace

struct LocalExecutor::Worker {
  pid_t pid = -1;
  int command_fd = -1;  // we write
  int message_fd = -1;  // we read
  int log_fd = -1;      // we read
  LineReader messages;
  LineReader logs;
  std::string log_tail;
  std::optional<int64_t> trial;  // running trial, if any
  pid_t program_group = -1;      // its command program's process group, while it runs
  bool alive = true;
  bool retiring = false;  // said "retire": it exits after its trial and takes no other
  bool messages_open = true;
  std::chrono::steady_clock::time_point last_message = std::chrono::steady_clock::now();
  int64_t heartbeat_timeout_ms = 0;  // its trial's (0: none)

  // After the worker died: its command program died with it (PR_SET_PDEATHSIG), not the
  // program's helpers in the program's group.
  void KillProgramGroup() {
    if (program_group > 0) ::kill(-program_group, SIGKILL);
    program_group = -1;
  }

  // Kills the worker, its command program and everything in the program's group.
  void Kill() {
    KillProgramGroup();
    ::kill(pid, SIGKILL);
  }

  void CloseFds() {
    for (int* fd : {&command_fd, &message_fd, &log_fd}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }
};

LocalExecutor::LocalExecutor(std::vector<std::string> worker_command,
                             std::vector<std::string> extra_env)
    : command_(std::move(worker_command)), env_(std::move(extra_env)) {
  ::signal(SIGPIPE, SIG_IGN);
}

LocalExecutor::~LocalExecutor() { Shutdown(1000); }

int LocalExecutor::running() const {
  int n = 0;
  for (const auto& w : workers_) n += (w->alive && w->trial) ? 1 : 0;
  return n;
}

Result<LocalExecutor::Worker*> LocalExecutor::IdleWorker() {
  for (auto& w : workers_) {
    if (w->alive && !w->trial && !w->retiring) return w.get();
  }
  // Replace dead workers' entries rather than letting the vector grow.
  std::erase_if(workers_, [](const auto& w) { return !w->alive; });

  // Three pipes, each end moved above the child's dup2 targets. Out of descriptors (EMFILE)
  // or memory, the worker cannot start: what was opened is closed, and the error says why.
  int fds[6] = {-1, -1, -1, -1, -1, -1};
  auto fail = [&fds](int error) {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    return Status::IoError(std::string("cannot start a worker: ") + std::strerror(error) +
                           (error == EMFILE || error == ENFILE
                                ? " (the open-file limit is reached: raise `ulimit -n`)"
                                : ""));
  };
  for (int i = 0; i < 3; ++i) {
    if (::pipe2(fds + 2 * i, O_CLOEXEC) != 0) {
      fds[2 * i] = fds[2 * i + 1] = -1;
      return fail(errno);
    }
  }
  for (int& fd : fds) {
    const int moved = MoveHigh(fd);
    if (moved < 0) return fail(errno);
    fd = moved;
  }
  int* cmd = fds;
  int* msg = fds + 2;
  int* log = fds + 4;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, cmd[0], kWorkerCommandFd);
  posix_spawn_file_actions_adddup2(&actions, msg[1], kWorkerMessageFd);
  posix_spawn_file_actions_adddup2(&actions, log[1], 1);
  posix_spawn_file_actions_adddup2(&actions, log[1], 2);

  std::vector<char*> argv;
  for (auto& a : command_) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) env_storage.emplace_back(*e);
  for (const auto& e : env_) env_storage.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(cmd[0]);
  ::close(msg[1]);
  ::close(log[1]);
  if (rc != 0) {
    for (int fd : {cmd[1], msg[0], log[0]}) ::close(fd);
    return Status::IoError("cannot start worker '" + command_[0] + "': " + std::strerror(rc));
  }
  auto w = std::make_unique<Worker>();
  w->pid = pid;
  w->command_fd = cmd[1];
  w->message_fd = msg[0];
  w->log_fd = log[0];
  ::fcntl(w->message_fd, F_SETFL, O_NONBLOCK);
  ::fcntl(w->log_fd, F_SETFL, O_NONBLOCK);
  workers_.push_back(std::move(w));
  return workers_.back().get();
}

Status LocalExecutor::Start(const TrialTask& task) {
  SWEEP_ASSIGN_OR_RETURN(Worker * w, IdleWorker());
  json msg = {{"op", "run"}, {"task", ToJson(task)}};
  w->trial = task.number;
  w->last_message = std::chrono::steady_clock::now();
  w->heartbeat_timeout_ms =
      task.heartbeat_timeout_s > 0
          ? std::max<int64_t>(1, std::llround(task.heartbeat_timeout_s * 1000))
          : heartbeat_timeout_ms_;
  // A failed write means the worker just died; Poll() reaps it and fails the trial.
  WriteAll(w->command_fd, msg.dump() + "\n");
  return Status::Ok();
}

Status LocalExecutor::Send(int64_t number, const char* op) {
  for (auto& w : workers_) {
    if (w->alive && w->trial == number) {
      WriteAll(w->command_fd, json{{"op", op}, {"trial", number}}.dump() + "\n");
      return Status::Ok();
    }
  }
  return Status::NotFound("trial " + std::to_string(number) + " is not running");
}

Status LocalExecutor::Stop(int64_t number) { return Send(number, "stop"); }

Status LocalExecutor::Continue(int64_t number) { return Send(number, "go"); }

void LocalExecutor::ReadLog(Worker& w) {
  std::vector<std::string> lines;
  if (!w.logs.ReadSome(w.log_fd, &lines)) {
    ::close(w.log_fd);
    w.log_fd = -1;
  }
  for (const auto& line : lines) {
    w.log_tail += line;
    w.log_tail += '\n';
  }
  if (w.log_tail.size() > kLogTailBytes) w.log_tail.erase(0, w.log_tail.size() - kLogTailBytes);
}

void LocalExecutor::ReadMessages(Worker& w, std::vector<WorkerEvent>* events) {
  std::vector<std::string> lines;
  w.messages_open = w.messages.ReadSome(w.message_fd, &lines);
  w.last_message = std::chrono::steady_clock::now();
  for (const auto& line : lines) {
    json msg = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!msg.is_object()) continue;
    std::string op = msg.value("op", "");
    WorkerEvent ev;
    ev.trial = msg.value("trial", int64_t{-1});
    if (op == "report") {
      ev.type = WorkerEvent::Type::kReport;
      ev.step = msg.value("step", int64_t{0});
      ev.epoch = msg.value("epoch", 0.0);
      ev.metrics = msg.value("metrics", json::object());
      ev.time_s = msg.value("t", 0.0);
    } else if (op == "done") {
      ev.type = WorkerEvent::Type::kDone;
      ev.outcome =
          OutcomeFromString(msg.value("outcome", "failed")).value_or(TrialOutcome::Kind::kFailed);
      ev.error = msg.value("error", "");
      ev.metrics = msg.value("metrics", json::object());
      ev.time_s = msg.value("t", 0.0);
      ev.metric_not_number = msg.value("metric_not_number", false);
      ev.info = msg.value("info", json::object());
      if (!ev.info.is_object()) ev.info = json::object();
      w.trial.reset();
      w.program_group = -1;  // the program's group ended with it
    } else if (op == "hb") {
      continue;
    } else if (op == "group") {
      // 0: the group is gone (its id may be reused).
      if (w.trial && ev.trial == *w.trial) w.program_group = msg.value("pgid", -1);
      continue;
    } else if (op == "retire") {
      // Its GPU context is broken (trainer::GpuContextFault): the next trial gets a new worker.
      w.retiring = true;
      std::fprintf(stderr, "sweep: worker (pid %d) exits after trial %lld: %s\n",
                   static_cast<int>(w.pid), static_cast<long long>(ev.trial),
                   msg.value("why", std::string("no reason given")).c_str());
      continue;
    } else if (op == "error" && w.trial) {
      ev.type = WorkerEvent::Type::kDone;
      ev.trial = *w.trial;
      ev.outcome = TrialOutcome::Kind::kFailed;
      ev.error = msg.value("error", "worker error");
      w.trial.reset();
    } else {
      continue;
    }
    events->push_back(std::move(ev));
  }
}

void LocalExecutor::Reap(Worker& w, std::vector<WorkerEvent>* events, const std::string& why) {
  // The message pipe closed: the worker exited or is exiting. Collect its last words.
  while (w.log_fd >= 0) {
    pollfd p{w.log_fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) break;
    ReadLog(w);
  }
  int wstatus = 0;
  pid_t r = 0;
  for (int i = 0; i < 50 && (r = ::waitpid(w.pid, &wstatus, WNOHANG)) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (r == 0) {
    w.Kill();
    ::waitpid(w.pid, &wstatus, 0);
  }
  w.KillProgramGroup();
  w.alive = false;
  w.CloseFds();
  if (w.trial) {
    WorkerEvent ev;
    ev.type = WorkerEvent::Type::kDone;
    ev.trial = *w.trial;
    ev.outcome = TrialOutcome::Kind::kFailed;
    ev.worker_lost = true;
    ev.error =
        "worker (pid " + std::to_string(w.pid) + ") " + (why.empty() ? DescribeExit(wstatus) : why);
    std::string tail = w.log_tail + w.logs.partial();
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    if (!tail.empty()) ev.error += "; last output: " + tail;
    events->push_back(std::move(ev));
    w.trial.reset();
  }
}

Status LocalExecutor::Poll(int timeout_ms, std::vector<WorkerEvent>* events) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, bool>> owners;  // (worker, is_log)
  for (auto& w : workers_) {
    if (!w->alive) continue;
    fds.push_back({w->message_fd, POLLIN, 0});
    owners.emplace_back(w.get(), false);
    if (w->log_fd >= 0) {
      fds.push_back({w->log_fd, POLLIN, 0});
      owners.emplace_back(w.get(), true);
    }
  }
  if (wake_fd_ >= 0) {
    fds.push_back({wake_fd_, POLLIN, 0});
    owners.emplace_back(nullptr, false);
  }
  if (fds.empty()) {
    if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return Status::Ok();
  }
  int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return Status::Ok();
    return Status::IoError(std::string("poll: ") + std::strerror(errno));
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    auto [w, is_log] = owners[i];
    if (w == nullptr) continue;  // the wake fd: the caller reads it
    if (is_log) {
      if (w->log_fd >= 0) ReadLog(*w);
    } else {
      ReadMessages(*w, events);
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (auto& w : workers_) {
    if (!w->alive) continue;
    if (!w->messages_open) {
      Reap(*w, events);
    } else if (w->trial && w->heartbeat_timeout_ms > 0 &&
               now - w->last_message > std::chrono::milliseconds(w->heartbeat_timeout_ms)) {
      w->Kill();
      char why[96];
      std::snprintf(why, sizeof why, "sent no heartbeat for %.3g s and was killed",
                    static_cast<double>(w->heartbeat_timeout_ms) / 1000.0);
      Reap(*w, events, why);
    }
  }
  return Status::Ok();
}

void LocalExecutor::Shutdown(int grace_ms) {
  for (auto& w : workers_) {
    if (!w->alive) continue;
    WriteAll(w->command_fd, "{\"op\":\"exit\"}\n");
    ::close(w->command_fd);
    w->command_fd = -1;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  for (auto& w : workers_) {
    if (!w->alive) continue;
    int wstatus = 0;
    while (::waitpid(w->pid, &wstatus, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::vector<WorkerEvent> unread;  // a program group it reported since the last Poll
        if (w->message_fd >= 0) ReadMessages(*w, &unread);
        w->Kill();
        ::waitpid(w->pid, &wstatus, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    w->alive = false;
    w->CloseFds();
  }
  workers_.clear();
}

}  // namespace sweep::executor
