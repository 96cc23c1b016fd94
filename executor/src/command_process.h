// Starting a command trial's program in a process group of its own (so that a stop reaches
// whatever it started too), its stdout on a pipe and its stderr in the trial's log. Private to
// sweep_executor; called on the worker's thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "line_io.h"

namespace sweep::executor {

// Starts `program` (argv[0], resolved) with `argv` and `env` ("KEY=VALUE") in `workdir` (empty:
// this process's): stdin /dev/null, stdout a pipe (its read end in *stdout_pipe), stderr
// `err_log`; it is killed if its worker dies. *pid is its pid once it runs. An error says why
// it could not start: Unavailable, this machine's trouble (no pipe or process, no working
// directory, a program this machine cannot run); InvalidArgument, the trial's parameters are
// too large to pass.
Status SpawnProgram(const std::string& program, const std::vector<std::string>& argv,
                    const std::vector<std::string>& env, const std::string& workdir, int err_log,
                    pid_t* pid, Fd* stdout_pipe);

// "signal 9 (Killed)".
std::string SignalName(int sig);

}  // namespace sweep::executor
