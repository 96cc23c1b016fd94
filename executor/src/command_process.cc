// Starting a command trial's program (command_process.h): fork, then execve in the child with
// only async-signal-safe calls, and a pipe on which the child says why execve failed.
#include "command_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "command_program.h"

namespace sweep::executor {

Status SpawnProgram(const std::string& program, const std::vector<std::string>& argv,
                    const std::vector<std::string>& env, const std::string& workdir, int err_log,
                    pid_t* pid, Fd* stdout_pipe) {
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Status::Unavailable(std::string("pipe: ") + std::strerror(errno));
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return Status::Unavailable(std::string("pipe: ") + std::strerror(errno));
  }
  Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const pid_t parent = ::getpid();
  const char* dir = workdir.empty() ? nullptr : workdir.c_str();
  const pid_t child = ::fork();
  if (child == 0) {
    // The child: only async-signal-safe calls until execve.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with its worker
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT}) ::signal(sig, SIG_DFL);
    if (null_in.get() >= 0) ::dup2(null_in.get(), 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_log, 2);
    int stage = 0;  // 0: chdir, 1: execve
    if (dir == nullptr || ::chdir(dir) == 0) {
      stage = 1;
      ::execve(program.c_str(), cargv.data(), cenv.data());
    }
    int report[2] = {stage, errno};
    (void)!::write(err_pipe[1], report, sizeof report);
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  stdout_pipe->Reset(out_pipe[0]);
  Fd exec_status(err_pipe[0]);
  // Out of processes or descriptors: this machine's trouble, as a program it lacks is.
  if (child < 0) return Status::Unavailable(std::string("fork: ") + std::strerror(errno));
  *pid = child;
  ::setpgid(child, child);  // also here, so the group exists before any kill
  int report[2];
  ssize_t n;
  do {
    n = ::read(exec_status.get(), report, sizeof report);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof report)) {
    int status = 0;
    ::waitpid(child, &status, 0);
    *pid = -1;
    if (report[0] == 0) {
      return Status::Unavailable(
          workdir + ": cannot enter the working directory: " + std::strerror(report[1]));
    }
    return ExecFailure(program, argv, env, workdir, report[1]);
  }
  return Status::Ok();
}

std::string SignalName(int sig) {
  const char* d = ::strsignal(sig);
  return "signal " + std::to_string(sig) + (d != nullptr ? std::string(" (") + d + ")" : "");
}

}  // namespace sweep::executor
