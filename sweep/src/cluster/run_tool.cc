#include "run_tool.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace sweep::cluster {

namespace {

struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void Close(int end) {
    if (fd[end] >= 0) ::close(fd[end]);
    fd[end] = -1;
  }
};

}  // namespace

Result<ToolResult> RunTool(const std::vector<std::string>& argv, const std::string& input,
                           int timeout_ms) {
  Pipe in, out, err;
  for (Pipe* p : {&in, &out, &err}) {
    if (::pipe2(p->fd, O_CLOEXEC) != 0) {
      return Status::Internal(std::string("pipe: ") + std::strerror(errno));
    }
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.fd[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT) {
    return Status::NotFound(argv[0] + " is not installed here (not found on PATH)");
  }
  if (rc != 0) return Status::Internal("cannot start " + argv[0] + ": " + std::strerror(rc));
  in.Close(0);
  out.Close(1);
  err.Close(1);
  // The tool may write before it has read all of its input: feed and drain together.
  ToolResult result;
  size_t written = 0;
  if (input.empty()) in.Close(1);
  std::signal(SIGPIPE, SIG_IGN);  // a tool that exits without reading must not end sweep
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false;
  while (out.fd[0] >= 0 || err.fd[0] >= 0) {
    pollfd fds[3];
    int n = 0;
    if (in.fd[1] >= 0) fds[n++] = {in.fd[1], POLLOUT, 0};
    if (out.fd[0] >= 0) fds[n++] = {out.fd[0], POLLIN, 0};
    if (err.fd[0] >= 0) fds[n++] = {err.fd[0], POLLIN, 0};
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(left.count());
    }
    if (::poll(fds, static_cast<nfds_t>(n), wait_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in.fd[1]) {
        const ssize_t w = ::write(in.fd[1], input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 || written == input.size()) in.Close(1);
        continue;
      }
      char buf[4096];
      const ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      const bool is_out = fds[i].fd == out.fd[0];
      if (r <= 0) {
        (is_out ? out : err).Close(0);
      } else {
        (is_out ? result.out : result.err).append(buf, static_cast<size_t>(r));
      }
    }
  }
  in.Close(1);
  // A tool that hangs (a controller that does not answer) must not hang its caller with it,
  // even once it has closed its output.
  int status = 0;
  for (;;) {
    if (timed_out) ::kill(pid, SIGKILL);
    const bool wait = timed_out || timeout_ms < 0;
    const pid_t got = ::waitpid(pid, &status, wait ? 0 : WNOHANG);
    if (got == pid || (got < 0 && errno != EINTR)) break;
    if (got == 0) {
      timed_out = std::chrono::steady_clock::now() >= deadline;
      if (!timed_out) ::usleep(10'000);
    }
  }
  if (timed_out) {
    char waited[32];
    std::snprintf(waited, sizeof waited, "%.3g s", timeout_ms / 1000.0);
    return Status::Unavailable(argv[0] + " did not finish within " + waited + "; it was killed");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace sweep::cluster
