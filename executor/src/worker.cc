// The worker process: a reader thread takes commands off the command pipe (so a stop request
// reaches a trial while it runs), the main thread runs trials one at a time and writes their
// reports and outcomes on the message pipe.
#include "executor/worker.h"

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "executor/trial.h"
#include "line_io.h"

namespace sweep::executor {

using nlohmann::json;

namespace {

struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<json> runs;
  bool closed = false;
  std::atomic<int64_t> current{-1};  // trial being run, -1 when idle
  std::atomic<bool> stop{false};
};

void ReadCommands(int fd, Inbox* inbox) {
  LineReader reader;
  std::vector<std::string> lines;
  bool open = true;
  while (open) {
    lines.clear();
    open = reader.ReadSome(fd, &lines);
    for (const std::string& line : lines) {
      json msg = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!msg.is_object()) continue;
      std::string op = msg.value("op", "");
      if (op == "run") {
        std::lock_guard lock(inbox->mu);
        inbox->runs.push_back(std::move(msg));
        inbox->cv.notify_one();
      } else if (op == "stop") {
        if (msg.value("trial", int64_t{-2}) == inbox->current.load()) inbox->stop = true;
      } else if (op == "exit") {
        open = false;
      }
    }
  }
  std::lock_guard lock(inbox->mu);
  inbox->closed = true;
  inbox->cv.notify_one();
}

// A test hook: SWEEP_TEST_ABORT_TRIAL=N makes the worker abort when it starts trial N, the way a
// crashing native library would. It is how the end-to-end tests prove a crash stays contained.
int64_t AbortTrialFromEnv() {
  const char* v = std::getenv("SWEEP_TEST_ABORT_TRIAL");
  return v == nullptr ? -1 : std::atoll(v);
}

}  // namespace

int RunWorker(int command_fd, int message_fd) {
  Inbox inbox;
  std::thread reader(ReadCommands, command_fd, &inbox);
  reader.detach();  // it ends with the command pipe; the process may exit before that
  const int64_t abort_trial = AbortTrialFromEnv();

  for (;;) {
    json msg;
    {
      std::unique_lock lock(inbox.mu);
      inbox.cv.wait(lock, [&] { return !inbox.runs.empty() || inbox.closed; });
      if (inbox.runs.empty()) return 0;
      msg = std::move(inbox.runs.front());
      inbox.runs.pop_front();
    }
    auto task_or = TrialTaskFromJson(msg.value("task", json::object()));
    if (!task_or.ok()) {
      WriteAll(message_fd,
               json{{"op", "error"}, {"error", task_or.status().message()}}.dump() + "\n");
      continue;
    }
    const TrialTask& task = *task_or;
    inbox.stop = false;
    inbox.current = task.number;
    if (task.number == abort_trial) std::abort();

    auto sink = [&](int64_t step, double epoch, const json& metrics) {
      json report = {{"op", "report"},
                     {"trial", task.number},
                     {"step", step},
                     {"epoch", epoch},
                     {"metrics", metrics}};
      WriteAll(message_fd, report.dump() + "\n");
    };
    TrialOutcome outcome = RunTrial(task, sink, inbox.stop);
    inbox.current = -1;
    json done = {{"op", "done"},
                 {"trial", task.number},
                 {"outcome", ToString(outcome.kind)},
                 {"error", outcome.error},
                 {"metrics", outcome.end_metrics}};
    if (!WriteAll(message_fd, done.dump(-1, ' ', false, json::error_handler_t::replace) + "\n")) {
      return 1;  // the executor is gone
    }
  }
}

}  // namespace sweep::executor
