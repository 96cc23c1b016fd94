// The trial worker: a child process (`sweep worker`, hidden) that runs trials one after another
// for the local executor, so a trial that crashes takes down only its worker.
//
// Protocol: one JSON object per line.
//   1. The executor writes {"op":"run", "task": TrialTask} on the worker's stdin.
//   2. The worker writes {"op":"report","trial":N,"step":S,"epoch":E,"metrics":{...}} on fd 3
//      for each report, then {"op":"done","trial":N,"outcome":"completed|stopped|failed",
//      "error":"...","metrics":{...}}.
//   3. {"op":"stop","trial":N} asks the running trial N to stop after its current epoch/step.
//      At a decision point of the task (see TrialTask::IsDecisionPoint) the worker waits after
//      writing the report until {"op":"go","trial":N} or the stop arrives.
//   4. {"op":"exit"} or end of input ends the worker.
//   5. While a trial runs the worker writes {"op":"hb"} every kWorkerHeartbeatMs, from a thread
//      of its own, so the executor can tell a stopped or wedged worker from a slow trial.
// stdout and stderr carry only logs; the executor keeps their tail for error messages.
#pragma once

namespace sweep::executor {

inline constexpr int kWorkerCommandFd = 0;
inline constexpr int kWorkerMessageFd = 3;
inline constexpr int kWorkerHeartbeatMs = 1000;

// Serves the protocol until told to exit. Returns the process exit code.
int RunWorker(int command_fd, int message_fd);

}  // namespace sweep::executor
