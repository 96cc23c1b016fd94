// Runs a cluster's command-line tool (sbatch, squeue, scancel) and collects what it says.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace sweep::cluster {

struct ToolResult {
  int exit_code = 0;  // 128 + N when killed by signal N
  std::string out;
  std::string err;
};

// Runs argv (found on PATH) with `input` on its standard input, to its end. NotFound, naming the
// tool, when it is not installed. With timeout_ms >= 0, a tool still running after that long is
// killed (SIGKILL) and the result is Unavailable, naming the tool and the wait.
Result<ToolResult> RunTool(const std::vector<std::string>& argv, const std::string& input = "",
                           int timeout_ms = -1);

}  // namespace sweep::cluster
