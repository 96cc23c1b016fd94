// A command trial's program on this machine: whether it can run here, said before a sweep
// starts (CheckProgram) and when execve refuses it. Private to sweep_executor. Reads the file
// system only: safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace sweep::executor {

// Why execve of `program` (argv[0] resolved; started in `workdir`, with `env`) failed with
// errno `error`: Unavailable where this machine cannot run it (the trial runs again
// elsewhere), InvalidArgument where the trial's own parameters are too large to pass.
Status ExecFailure(const std::string& program, const std::vector<std::string>& argv,
                   const std::vector<std::string>& env, const std::string& workdir, int error);

}  // namespace sweep::executor
