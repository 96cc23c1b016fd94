// LocalExecutor against real worker processes: reports, reuse, stops, and crash containment.
#include "executor/local_executor.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "executor/functions.h"

namespace sweep::executor {
namespace {

using nlohmann::json;

TrialTask BraninTask(int64_t number, double x1, double x2, json settings = json::object()) {
  TrialTask t;
  t.number = number;
  t.kind = TrialKind::kFunction;
  t.params = {{"x1", x1}, {"x2", x2}};
  settings["name"] = "branin";
  t.settings = settings;
  return t;
}

// Polls until `n` trials are done or 20 s pass; returns every event.
std::vector<WorkerEvent> RunUntilDone(LocalExecutor& ex, int n) {
  std::vector<WorkerEvent> all;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int done = 0;
  while (done < n && std::chrono::steady_clock::now() < deadline) {
    std::vector<WorkerEvent> events;
    EXPECT_TRUE(ex.Poll(100, &events).ok());
    for (auto& e : events) {
      if (e.type == WorkerEvent::Type::kDone) ++done;
      all.push_back(std::move(e));
    }
  }
  EXPECT_EQ(done, n);
  return all;
}

TEST(LocalExecutorTest, FunctionTrialReportsItsValue) {
  LocalExecutor ex({SWEEP_TEST_WORKER});
  ASSERT_TRUE(ex.Start(BraninTask(7, 3.14159, 2.275)).ok());
  auto events = RunUntilDone(ex, 1);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, WorkerEvent::Type::kReport);
  EXPECT_EQ(events[0].trial, 7);
  auto expected = EvaluateFunction("branin", json{{"x1", 3.14159}, {"x2", 2.275}});
  ASSERT_TRUE(expected.ok());
  EXPECT_DOUBLE_EQ(events[0].metrics["value"].get<double>(), *expected);
  EXPECT_EQ(events[1].type, WorkerEvent::Type::kDone);
  EXPECT_EQ(events[1].outcome, TrialOutcome::Kind::kCompleted);
}

// A trainer trial on a small CSV dataset (two features, two classes) in `dir`, checkpointing
// every epoch to dir/t.ckpt and waiting for a verdict at every report, as a sweep's trials do.
TrialTask CheckpointingTrainerTask(const std::filesystem::path& dir) {
  std::ofstream csv(dir / "train.csv");
  for (int i = 0; i < 4000; ++i) {
    const int label = i % 2;
    csv << label << "," << (label * 2 - 1) + (i % 7) * 0.1 << "," << (i % 5) * 0.2 << "\n";
  }
  csv.close();
  TrialTask t;
  t.number = 5;
  t.kind = TrialKind::kTrainer;
  t.settings = {{"dataset", {{"format", "csv"}, {"train_images", (dir / "train.csv").string()}}},
                {"hidden", {256, 256}},
                {"batch_size", 8},
                {"epochs", 50},
                {"checkpoint_path", (dir / "t.ckpt").string()},
                {"checkpoint_every", 1},
                {"cache_dir", (dir / "cache").string()}};
  t.params = json::object();
  t.decide_every_report = true;
  return t;
}

// Told to exit while its trial waits for a verdict (the coordinator is ending on an error): the
// trial is abandoned there. Going on would checkpoint epochs whose reports nobody stored, and a
// rerun from that checkpoint would leave them missing for good.
TEST(LocalExecutorTest, ExitWhileATrialWaitsAbandonsItWithoutACheckpoint) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sweep-abandon-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  LocalExecutor ex({SWEEP_TEST_WORKER});
  ASSERT_TRUE(ex.Start(CheckpointingTrainerTask(dir)).ok());
  std::vector<WorkerEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (events.empty() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(ex.Poll(100, &events).ok());
  }
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events[0].type, WorkerEvent::Type::kReport) << events[0].error;
  EXPECT_EQ(events[0].epoch, 1.0);
  // Epoch 1 awaits its verdict; none comes. The grace is long enough for several epochs.
  const auto start = std::chrono::steady_clock::now();
  ex.Shutdown(5000);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  EXPECT_FALSE(std::filesystem::exists(dir / "t.ckpt"));
  std::filesystem::remove_all(dir);
}

TEST(LocalExecutorTest, ReusesIdleWorkers) {
  LocalExecutor ex({SWEEP_TEST_WORKER});
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(ex.Start(BraninTask(i, 1.0, 2.0)).ok());
    RunUntilDone(ex, 1);
  }
  EXPECT_EQ(ex.workers(), 1);
}

TEST(LocalExecutorTest, RunsTrialsConcurrentlyInSeparateWorkers) {
  LocalExecutor ex({SWEEP_TEST_WORKER});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ex.Start(BraninTask(i, 1.0, 2.0, {{"steps", 5}, {"step_ms", 20}})).ok());
  }
  EXPECT_EQ(ex.running(), 3);
  EXPECT_EQ(ex.workers(), 3);
  auto events = RunUntilDone(ex, 3);
  std::map<int64_t, int> reports;
  for (const auto& e : events) reports[e.trial] += e.type == WorkerEvent::Type::kReport;
  EXPECT_EQ(reports, (std::map<int64_t, int>{{0, 5}, {1, 5}, {2, 5}}));
}

TEST(LocalExecutorTest, StopEndsACurveEarly) {
  LocalExecutor ex({SWEEP_TEST_WORKER});
  ASSERT_TRUE(ex.Start(BraninTask(1, 1.0, 2.0, {{"steps", 1000}, {"step_ms", 5}})).ok());
  std::vector<WorkerEvent> events;
  while (events.empty()) ASSERT_TRUE(ex.Poll(100, &events).ok());
  ASSERT_TRUE(ex.Stop(1).ok());
  auto rest = RunUntilDone(ex, 1);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().outcome, TrialOutcome::Kind::kStopped);
  EXPECT_LT(rest.size(), 500u);
}

TEST(LocalExecutorTest, AbortingWorkerFailsOnlyItsTrial) {
  LocalExecutor ex({SWEEP_TEST_WORKER}, {"SWEEP_TEST_ABORT_TRIAL=2"});
  ASSERT_TRUE(ex.Start(BraninTask(1, 1.0, 2.0, {{"steps", 3}, {"step_ms", 20}})).ok());
  ASSERT_TRUE(ex.Start(BraninTask(2, 1.0, 2.0)).ok());
  auto events = RunUntilDone(ex, 2);
  std::map<int64_t, WorkerEvent> done;
  for (auto& e : events) {
    if (e.type == WorkerEvent::Type::kDone) done[e.trial] = e;
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].outcome, TrialOutcome::Kind::kCompleted);
  EXPECT_EQ(done[2].outcome, TrialOutcome::Kind::kFailed);
  EXPECT_NE(done[2].error.find("killed by signal 6"), std::string::npos) << done[2].error;
  // The executor replaces the dead worker.
  ASSERT_TRUE(ex.Start(BraninTask(3, 1.0, 2.0)).ok());
  auto after = RunUntilDone(ex, 1);
  EXPECT_EQ(after.back().outcome, TrialOutcome::Kind::kCompleted);
}

// A worker whose GPU context broke retires after its trial: the executor starts the next trial
// on a fresh worker instead of handing it to the one that is exiting (where it would fail as a
// lost worker).
TEST(LocalExecutorTest, RetiringWorkerIsReplacedNotReused) {
  LocalExecutor ex({SWEEP_TEST_WORKER}, {"SWEEP_TEST_RETIRE_AFTER_TRIAL=1"});
  ASSERT_TRUE(ex.Start(BraninTask(1, 1.0, 2.0)).ok());
  auto first = RunUntilDone(ex, 1);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.back().outcome, TrialOutcome::Kind::kCompleted);
  for (int64_t trial : {2, 3}) {
    ASSERT_TRUE(ex.Start(BraninTask(trial, 1.0, 2.0)).ok());
    auto next = RunUntilDone(ex, 1);
    ASSERT_FALSE(next.empty());
    EXPECT_EQ(next.back().trial, trial);
    EXPECT_EQ(next.back().outcome, TrialOutcome::Kind::kCompleted) << next.back().error;
    EXPECT_FALSE(next.back().worker_lost);
  }
}

TEST(LocalExecutorTest, BadTaskFailsWithItsError) {
  LocalExecutor ex({SWEEP_TEST_WORKER});
  TrialTask t = BraninTask(4, 1.0, 2.0);
  t.params = {{"x1", 1.0}};  // x2 missing
  ASSERT_TRUE(ex.Start(t).ok());
  auto events = RunUntilDone(ex, 1);
  EXPECT_EQ(events.back().outcome, TrialOutcome::Kind::kFailed);
  EXPECT_NE(events.back().error.find("x2"), std::string::npos) << events.back().error;
}

// Settings of the wrong type (only a forged or foreign coordinator sends them) fail the trial,
// not the worker, which goes on to the next.
TEST(LocalExecutorTest, SettingsOfTheWrongTypeFailTheTrialNotTheWorker) {
  LocalExecutor ex({SWEEP_TEST_WORKER});
  TrialTask t;
  t.number = 5;
  t.kind = TrialKind::kCommand;
  t.params = json::object();
  t.settings = {{"command", {"/bin/true"}}, {"kill_grace_s", "soon"}};
  ASSERT_TRUE(ex.Start(t).ok());
  auto events = RunUntilDone(ex, 1);
  EXPECT_EQ(events.back().outcome, TrialOutcome::Kind::kFailed);
  EXPECT_FALSE(events.back().worker_lost) << events.back().error;
  EXPECT_EQ(events.back().error.rfind("the task could not be read: ", 0), 0u)
      << events.back().error;
  ASSERT_TRUE(ex.Start(BraninTask(6, 1.0, 2.0)).ok());
  EXPECT_EQ(RunUntilDone(ex, 1).back().outcome, TrialOutcome::Kind::kCompleted);
}

TEST(LocalExecutorTest, MissingWorkerProgramIsAnError) {
  LocalExecutor ex({"/nonexistent/sweep-worker"});
  Status s = ex.Start(BraninTask(1, 1.0, 2.0));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/sweep-worker"), std::string::npos);
}

// A stop sent right after the start can reach the worker before the trial begins (a fresh
// worker is still starting): the trial then ends stopped at once instead of running to its end.
TEST(LocalExecutorTest, StopThatOvertakesTheStartIsKept) {
  LocalExecutor ex({SWEEP_TEST_WORKER});
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(ex.Start(BraninTask(4, 1.0, 2.0, {{"steps", 1000}, {"step_ms", 20}})).ok());
  ASSERT_TRUE(ex.Stop(4).ok());
  auto events = RunUntilDone(ex, 1);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().type, WorkerEvent::Type::kDone);
  EXPECT_EQ(events.back().outcome, TrialOutcome::Kind::kStopped);
  EXPECT_LT(events.size(), 10u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(LocalExecutorTest, PollReturnsEarlyWhenTheWakeFdIsReadable) {
  LocalExecutor ex({SWEEP_TEST_WORKER});
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ex.set_wake_fd(fd);
  // With a trial running (workers to poll) and with none.
  ASSERT_TRUE(ex.Start(BraninTask(1, 1.0, 2.0, {{"steps", 1000}, {"step_ms", 50}})).ok());
  for (int round = 0; round < 2; ++round) {
    std::thread waker([fd] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      uint64_t one = 1;
      EXPECT_EQ(::write(fd, &one, sizeof one), 8);
    });
    const auto start = std::chrono::steady_clock::now();
    std::vector<WorkerEvent> events;
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      ASSERT_TRUE(ex.Poll(10'000, &events).ok());
      uint64_t count = 0;
      if (::read(fd, &count, sizeof count) == 8) break;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    waker.join();
    if (round == 0) {
      ASSERT_TRUE(ex.Stop(1).ok());
      RunUntilDone(ex, 1);
    }
  }
  ::close(fd);
}

// Whether the process is gone (no longer exists, or is a zombie nobody reaped yet).
bool Gone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  return stat[paren + 2] == 'Z' || stat[paren + 2] == 'X';
}

bool GoneWithin(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!Gone(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

pid_t ReadPid(const std::filesystem::path& file) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::ifstream in(file);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    if (std::chrono::steady_clock::now() > deadline) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A fresh folder for one test, removed at its end.
struct ScratchDir {
  explicit ScratchDir(const std::string& name)
      : path(::testing::TempDir() + name + "_" + std::to_string(::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

// Trial `number` running `sh -c SCRIPT` in `dir` (braces doubled, as in a command template).
TrialTask ShellTrial(int64_t number, const std::filesystem::path& dir, const std::string& script) {
  TrialTask task;
  task.number = number;
  task.kind = TrialKind::kCommand;
  task.settings = {{"command", {"sh", "-c", script}},
                   {"workdir", dir.string()},
                   {"trial_dir", (dir / ("trial-" + std::to_string(number))).string()}};
  return task;
}

enum class WorkerEnd { kShutdown, kKilled, kHung };

// A worker that ends outright (the sweep's second interrupt, a crash, a missed heartbeat)
// takes its command program's helpers with it. The program dies with its worker
// (PR_SET_PDEATHSIG), but a data loader it started in the background would live on, holding
// its memory and GPU: the executor kills the program's whole process group.
class WorkerEndTest : public ::testing::TestWithParam<WorkerEnd> {};

TEST_P(WorkerEndTest, TakesTheProgramsHelpersWithIt) {
  const ScratchDir scratch("worker_end_" + std::to_string(static_cast<int>(GetParam())));
  const std::filesystem::path& dir = scratch.path;
  const TrialTask task =
      ShellTrial(7, dir,
                 "echo $PPID > worker.pid; sleep 300 & echo $! > helper.pid; "
                 "echo 'sweep-report {{\"epoch\": 1, \"score\": 1}}'; exec sleep 300");
  LocalExecutor ex({SWEEP_TEST_WORKER});
  // Above the worker's heartbeat interval (1 s), with room for a slow start.
  ex.set_heartbeat_timeout_ms(GetParam() == WorkerEnd::kHung ? 3000 : 60'000);
  ASSERT_TRUE(ex.Start(task).ok());
  std::vector<WorkerEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (events.empty() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(ex.Poll(100, &events).ok());
  }
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].type, WorkerEvent::Type::kReport);
  const pid_t worker = ReadPid(dir / "worker.pid");
  const pid_t helper = ReadPid(dir / "helper.pid");
  ASSERT_GT(worker, 0);
  ASSERT_GT(helper, 0);
  ASSERT_FALSE(Gone(helper));

  switch (GetParam()) {
    case WorkerEnd::kShutdown:
      ex.Shutdown(0);
      break;
    case WorkerEnd::kKilled:
    case WorkerEnd::kHung: {
      ASSERT_EQ(::kill(worker, GetParam() == WorkerEnd::kKilled ? SIGKILL : SIGSTOP), 0);
      auto done = RunUntilDone(ex, 1);
      ASSERT_FALSE(done.empty());
      EXPECT_EQ(done.back().outcome, TrialOutcome::Kind::kFailed);
      EXPECT_TRUE(done.back().worker_lost);
      break;
    }
  }
  EXPECT_TRUE(GoneWithin(helper, std::chrono::seconds(5))) << "helper " << helper;
  if (!Gone(helper)) ::kill(helper, SIGKILL);
  ex.Shutdown(0);
}

INSTANTIATE_TEST_SUITE_P(Ends, WorkerEndTest,
                         ::testing::Values(WorkerEnd::kShutdown, WorkerEnd::kKilled,
                                           WorkerEnd::kHung),
                         [](const auto& param_info) {
                           switch (param_info.param) {
                             case WorkerEnd::kShutdown:
                               return "Shutdown";
                             case WorkerEnd::kKilled:
                               return "Killed";
                             case WorkerEnd::kHung:
                               return "Hung";
                           }
                           return "";
                         });

// The signal a worker takes as its parent's death, sent for another reason while the parent
// lives (a batch system warns every process of a job with SIGUSR1), is ignored: the trial
// goes on.
TEST(LocalExecutorTest, AStraySignalIsNotTheParentsDeath) {
  const ScratchDir scratch("stray");
  LocalExecutor ex({SWEEP_TEST_WORKER});
  ASSERT_TRUE(ex.Start(ShellTrial(1, scratch.path,
                                  "echo $PPID > worker.pid; sleep 0.5; echo 'sweep-report "
                                  "{{\"epoch\": 1, \"score\": 1}}'"))
                  .ok());
  const pid_t worker = ReadPid(scratch.path / "worker.pid");
  ASSERT_GT(worker, 0);
  ASSERT_EQ(::kill(worker, SIGUSR1), 0);
  auto events = RunUntilDone(ex, 1);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().outcome, TrialOutcome::Kind::kCompleted) << events.back().error;
  EXPECT_FALSE(events.back().worker_lost);
}

}  // namespace
}  // namespace sweep::executor
