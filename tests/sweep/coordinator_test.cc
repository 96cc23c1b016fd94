// The coordinator's decisions against a fake runner and a fake clock: no worker processes, no
// waiting, each test in milliseconds. The store is a real SQLite file. The end-to-end tests
// (tests/e2e) prove the same through the real binary.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator_loop.h"
#include "executor/slots.h"
#include "search/early_stopping.h"
#include "sweep/config.h"

namespace sweep {
namespace {

using executor::TrialOutcome;
using store::TrialStatus;

class FakeClock final : public Clock {
 public:
  double Now() const override { return now; }
  double now = 1.0e9;
};

// How the fake runs one trial: its metric at each step (one report a step), then its end.
struct Plan {
  std::vector<double> values;
  TrialOutcome::Kind end = TrialOutcome::Kind::kCompleted;
  bool worker_lost = false;  // with kFailed: the worker died, not the trial
  std::string error;
};
Plan Values(std::vector<double> values) {
  Plan plan;
  plan.values = std::move(values);
  return plan;
}

// The plan of a trial's run (`run` 0 is its first).
using Planner = std::function<Plan(const executor::TrialTask& task, int run)>;

// One server of `slots` CPU slots. Each turn every trial takes one step (a report, or its
// end), and the clock moves `step_s`; a trial waiting at a decision point waits for Continue.
class FakeRunner final : public TrialRunner {
 public:
  FakeRunner(FakeClock* clock, int slots, Planner planner, double step_s)
      : clock_(clock), slots_(slots), planner_(std::move(planner)), step_s_(step_s) {}

  Status Start(int64_t, const executor::TrialTask& task, StartFailure*) override {
    starts->push_back(task.number);
    Live& live = live_[task.number];
    live = Live{};
    live.task = task;
    live.plan = planner_(task, runs_[task.number]++);
    return Status::Ok();
  }
  Status Stop(int64_t, int64_t trial) override {
    if (auto it = live_.find(trial); it != live_.end()) it->second.stop = true;
    return Status::Ok();
  }
  Status Continue(int64_t, int64_t trial) override {
    if (auto it = live_.find(trial); it != live_.end()) it->second.waiting = false;
    return Status::Ok();
  }
  Status Drain(std::vector<RunnerEvent>* events) override {
    if (!offered_) {
      offered_ = true;
      RunnerEvent joined;
      joined.kind = RunnerEvent::Kind::kServerJoined;
      joined.offer = {"fake", executor::CpuSlots(slots_), "", true};
      events->push_back(std::move(joined));
    }
    const size_t before = events->size();
    for (auto it = live_.begin(); it != live_.end();) {
      Live& live = it->second;
      RunnerEvent e;
      e.trial.trial = it->first;
      e.trial.time_s = clock_->now;
      if (live.stop || live.step >= static_cast<int64_t>(live.plan.values.size())) {
        e.trial.type = executor::WorkerEvent::Type::kDone;
        e.trial.outcome = live.stop ? TrialOutcome::Kind::kStopped : live.plan.end;
        e.trial.worker_lost = !live.stop && live.plan.worker_lost;
        e.trial.error = live.stop ? "" : live.plan.error;
        e.trial.metrics = nlohmann::json::object();
        events->push_back(std::move(e));
        it = live_.erase(it);
        continue;
      }
      if (!live.waiting) {
        e.trial.step = ++live.step;
        e.trial.epoch = static_cast<double>(live.step);
        e.trial.metrics = {{"value", live.plan.values[live.step - 1]}};
        live.waiting = live.task.IsDecisionPoint(e.trial.step, e.trial.epoch, &live.next_point);
        events->push_back(std::move(e));
      }
      ++it;
    }
    if (events->size() > before) clock_->now += step_s_;
    return Status::Ok();
  }
  Status Wait(int timeout_ms, int, std::vector<RunnerEvent>* events) override {
    clock_->now += timeout_ms / 1000.0;
    return Drain(events);
  }
  void Shutdown(bool, int) override { live_.clear(); }

  std::vector<int64_t>* starts = nullptr;

 private:
  struct Live {
    executor::TrialTask task;
    Plan plan;
    int64_t step = 0;
    size_t next_point = 0;
    bool waiting = false;
    bool stop = false;
  };
  FakeClock* clock_;
  int slots_;
  Planner planner_;
  double step_s_;
  bool offered_ = false;
  std::map<int64_t, Live> live_;
  std::map<int64_t, int> runs_;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sweep-coordinator-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A function sweep ("value", minimised) of `max_trials` on `slots` slots; `extra` adds lines
  // to [sweep], `trial` to [trial], `tables` whole tables.
  SweepConfig Config(int max_trials, int steps, const std::string& extra = "",
                     const std::string& trial = "", const std::string& tables = "") {
    const std::string text =
        "[sweep]\nname = \"s\"\nmax_trials = " + std::to_string(max_trials) + "\nseed = 3\n" +
        extra + "[search]\nalgorithm = \"random\"\n[trial]\nkind = \"function\"\n" + trial +
        "[function]\nname = \"hartmann6\"\nsteps = " + std::to_string(steps) + "\n" + tables +
        "[parameters]\n"
        "x1 = { distribution = \"uniform\", min = 0, max = 1 }\n"
        "x2 = { distribution = \"uniform\", min = 0, max = 1 }\n"
        "x3 = { distribution = \"uniform\", min = 0, max = 1 }\n"
        "x4 = { distribution = \"uniform\", min = 0, max = 1 }\n"
        "x5 = { distribution = \"uniform\", min = 0, max = 1 }\n"
        "x6 = { distribution = \"uniform\", min = 0, max = 1 }\n";
    auto config = ParseConfig(text, (dir_ / "s.toml").string());
    EXPECT_TRUE(config.ok()) << config.status().message();
    return config.ok() ? *config : SweepConfig{};
  }

  std::unique_ptr<store::Store> OpenStore(const std::string& name = "sweeps.db") {
    auto st = store::Store::Open((dir_ / name).string(), store::OpenMode::kReadWrite);
    EXPECT_TRUE(st.ok()) << st.status().message();
    return std::move(st).value();
  }

  CoordinatorSeams Seams(Planner planner, int slots = 2, double step_s = 1.0) {
    CoordinatorSeams seams;
    seams.clock = &clock_;
    seams.runners = [this, planner, slots, step_s](const SweepConfig&, const RunOptions&) {
      RunnerSet set;
      auto runner = std::make_unique<FakeRunner>(&clock_, slots, planner, step_s);
      runner->starts = &starts_;
      set.Add(std::move(runner));
      return Result<RunnerSet>(std::move(set));
    };
    return seams;
  }

  std::vector<store::TrialRecord> Trials(store::Store& st) {
    auto sweep = st.FindSweep("s");
    EXPECT_TRUE(sweep.ok());
    auto trials = st.Trials(sweep->id, store::TrialQuery{});
    EXPECT_TRUE(trials.ok());
    return *trials;
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::vector<int64_t> starts_;
  RunOptions options_;
};

// Every trial reports `value` = its number + 1, for every step.
Plan Steady(const executor::TrialTask& task, int steps) {
  return Values(std::vector<double>(static_cast<size_t>(steps), task.number + 1.0));
}

TEST_F(CoordinatorTest, PlacesTrialsInNumberOrderAndRerunsFirst) {
  auto st = OpenStore();
  // Trial 1's first worker dies at once: it runs again before any new trial starts.
  Planner planner = [](const executor::TrialTask& task, int run) {
    if (task.number == 1 && run == 0) {
      return Plan{{}, TrialOutcome::Kind::kFailed, true, "worker died"};
    }
    return Steady(task, 3);
  };
  auto summary = RunSweepWith(Config(5, 3), *st, options_, Seams(planner));
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(starts_, (std::vector<int64_t>{0, 1, 1, 2, 3, 4}));
  EXPECT_EQ(summary->counts.completed, 5);
  const auto trials = Trials(*st);
  ASSERT_EQ(trials.size(), 5u);
  EXPECT_EQ(trials[1].retries, 1);
  EXPECT_EQ(trials[1].status, TrialStatus::kCompleted);
  EXPECT_EQ(*trials[1].objective, 2.0);
  // Two slots: trials 0 and 1 ran side by side on different slots.
  EXPECT_NE(trials[0].placement, trials[1].placement);
}

TEST_F(CoordinatorTest, ALostWorkerWithNoRetryLeftFailsItsTrial) {
  auto st = OpenStore();
  Planner planner = [](const executor::TrialTask& task, int) {
    if (task.number == 0) return Plan{{5.0}, TrialOutcome::Kind::kFailed, true, "worker died"};
    return Steady(task, 2);
  };
  auto summary = RunSweepWith(Config(3, 2, "", "max_retries = 0\n"), *st, options_, Seams(planner));
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  const auto trials = Trials(*st);
  ASSERT_EQ(trials.size(), 3u);
  EXPECT_EQ(trials[0].status, TrialStatus::kFailed);
  EXPECT_EQ(trials[0].error, "worker died");
  EXPECT_EQ(trials[0].retries, 0);
  EXPECT_EQ(starts_, (std::vector<int64_t>{0, 1, 2}));
}

TEST_F(CoordinatorTest, AshaPrunesExactlyWhereTheSchedulerDecides) {
  auto st = OpenStore();
  // Trial n's value at step s: a spread of good and bad trials.
  auto value = [](int64_t n, int64_t s) { return static_cast<double>((n * 7) % 9) + 0.1 * s; };
  constexpr int kSteps = 9, kTrials = 12;
  Planner planner = [&](const executor::TrialTask& task, int) {
    Plan plan;
    for (int s = 1; s <= kSteps; ++s) plan.values.push_back(value(task.number, s));
    return plan;
  };
  const SweepConfig config =
      Config(kTrials, kSteps, "max_concurrent = 1\n", "",
             "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 1\nmax_resource = 9\n"
             "reduction_factor = 3\n");
  auto summary = RunSweepWith(config, *st, options_, Seams(planner));
  ASSERT_TRUE(summary.ok()) << summary.status().message();

  // One trial at a time: the scheduler sees each trial's reports in turn.
  auto scheduler = search::MakeScheduler(config.early_stopping);
  ASSERT_TRUE(scheduler.ok());
  std::map<int64_t, std::pair<TrialStatus, int64_t>> want;  // status, reports
  for (int64_t n = 0; n < kTrials; ++n) {
    want[n] = {TrialStatus::kCompleted, kSteps};
    for (int64_t s = 1; s <= kSteps; ++s) {
      if ((*scheduler)->OnReport(n, static_cast<double>(s), value(n, s)).stop()) {
        want[n] = {TrialStatus::kPruned, s};
        break;
      }
    }
  }
  int pruned = 0;
  auto sweep = st->FindSweep("s");
  for (const auto& t : Trials(*st)) {
    auto reports = st->Reports(sweep->id, t.number);
    ASSERT_TRUE(reports.ok());
    EXPECT_EQ(t.status, want[t.number].first) << "trial " << t.number;
    EXPECT_EQ(static_cast<int64_t>(reports->size()), want[t.number].second) << "trial " << t.number;
    if (t.status == TrialStatus::kPruned) {
      ++pruned;
      EXPECT_FALSE(t.error.empty());
    }
  }
  EXPECT_GT(pruned, 0);
  EXPECT_EQ(summary->counts.pruned, pruned);
}

// The median rule with a grace period of two reports judges a trial of three steps only at its
// last report, when stopping it saves nothing: trial 1, worse than trial 0 there, ends
// completed with its value. So it does after a coordinator killed just after that report is
// resumed: the replay of its last report does not prune it.
TEST_F(CoordinatorTest, ATrialsLastReportNeverPrunesItLiveOrOnResume) {
  auto plan_of = [](const executor::TrialTask& task) {
    if (task.number == 1) return Values({5.0, 5.0, 5.0});
    if (task.number == 2) return Values({2.0, 2.0});  // ends first, and trial 3 starts
    return Steady(task, 3);
  };
  const std::string median =
      "[early_stopping]\nalgorithm = \"median\"\ngrace_period = 2\nmin_trials = 1\n";
  const SweepConfig config = Config(4, 3, "max_concurrent = 3\n", "", median);
  auto planner = [&](const executor::TrialTask& t, int) { return plan_of(t); };
  auto ref = OpenStore("ref.db");
  auto whole = RunSweepWith(config, *ref, options_, Seams(planner, 3));
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  std::vector<store::TrialRecord> trials = Trials(*ref);
  ASSERT_EQ(trials.size(), 4u);
  EXPECT_EQ(trials[1].status, TrialStatus::kCompleted) << trials[1].error;
  EXPECT_EQ(trials[1].objective, 5.0);
  EXPECT_EQ(whole->counts.pruned, 0);

  // Ctrl-C as trial 3 starts; then trial 1 is left running, as a kill -9 of its coordinator
  // after its last report would leave it.
  auto st = OpenStore();
  std::atomic<bool> interrupt{false};
  RunOptions stop_options;
  stop_options.interrupt = &interrupt;
  auto first = RunSweepWith(config, *st, stop_options,
                            Seams(
                                [&](const executor::TrialTask& t, int) {
                                  if (t.number == 3) interrupt = true;
                                  return plan_of(t);
                                },
                                3));
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_TRUE(first->interrupted);
  auto sweep = st->FindSweep("s");
  ASSERT_TRUE(sweep.ok());
  auto reports = st->Reports(sweep->id, 1);
  ASSERT_TRUE(reports.ok());
  ASSERT_EQ(reports->size(), 3u);
  ASSERT_TRUE(st->UpdateTrialStatus(sweep->id, 1, TrialStatus::kRunning, "fake", 1.0e9).ok());
  auto resumed = ResumeSweepWith("s", *st, options_, Seams(planner, 3));
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  trials = Trials(*st);
  ASSERT_EQ(trials.size(), 4u);
  EXPECT_EQ(trials[1].status, TrialStatus::kCompleted) << trials[1].error;
  EXPECT_EQ(trials[1].objective, 5.0);
  EXPECT_EQ(resumed->counts.pruned, 0);
}

TEST_F(CoordinatorTest, StopWhenEndsTheSweepAtTheTrialThatMetIt) {
  auto st = OpenStore();
  Planner planner = [](const executor::TrialTask& task, int) {
    if (task.number == 2) return Values({3.0, 0.4, 0.2, 0.1});
    return Steady(task, 4);
  };
  auto summary = RunSweepWith(Config(10, 4, "max_concurrent = 1\nstop_when = \"value <= 0.5\"\n"),
                              *st, options_, Seams(planner));
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_FALSE(summary->interrupted);
  EXPECT_EQ(starts_, (std::vector<int64_t>{0, 1, 2}));
  const auto trials = Trials(*st);
  ASSERT_EQ(trials.size(), 3u);
  EXPECT_EQ(trials[2].status, TrialStatus::kCompleted);
  EXPECT_EQ(*trials[2].objective, 0.4);  // the report that met it, not a later one
  EXPECT_NE(trials[2].error.find("reached the target value <= 0.5"), std::string::npos);
  auto sweep = st->FindSweep("s");
  EXPECT_EQ(sweep->status, store::SweepStatus::kCompleted);
}

TEST_F(CoordinatorTest, TheTimeBudgetStopsTheRunningTrials) {
  auto st = OpenStore();
  Planner planner = [](const executor::TrialTask& task, int) { return Steady(task, 4); };
  // Two trials at a time, four reports and an end of one (fake) second each: the budget of
  // 12 s ends the sweep in its third pair of trials.
  auto summary =
      RunSweepWith(Config(20, 4, "time_budget = 12\n"), *st, options_, Seams(planner, 2, 1.0));
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_FALSE(summary->interrupted);  // a budget spent ends a sweep completed
  EXPECT_GE(summary->elapsed_s, 12.0);
  EXPECT_LT(summary->elapsed_s, 15.0);
  EXPECT_EQ(summary->counts.completed, 4);
  EXPECT_EQ(summary->counts.interrupted, 2);
  for (const auto& t : Trials(*st)) {
    if (t.status == TrialStatus::kInterrupted) {
      EXPECT_EQ(t.error, "stopped: time budget of 12 s spent");
    }
  }
}

TEST_F(CoordinatorTest, FirstTrialsThatAllFailStopTheSweep) {
  auto st = OpenStore();
  Planner planner = [](const executor::TrialTask&, int) {
    return Plan{{}, TrialOutcome::Kind::kFailed, false, "no such file: data.csv"};
  };
  auto summary = RunSweepWith(Config(20, 3, "max_concurrent = 1\n", "max_initial_failures = 3\n"),
                              *st, options_, Seams(planner));
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_TRUE(summary->interrupted);
  EXPECT_EQ(starts_, (std::vector<int64_t>{0, 1, 2}));
  // They never had a chance: they run again on resume.
  for (const auto& t : Trials(*st)) EXPECT_EQ(t.status, TrialStatus::kInterrupted);
  auto sweep = st->FindSweep("s");
  auto events = st->TrialEvents(sweep->id, 2);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->back().to, "interrupted");
}

TEST_F(CoordinatorTest, AResumeReplaysTheStoreAndEndsAsAnUninterruptedRun) {
  auto value = [](int64_t n, int64_t s) {
    return static_cast<double>((n * 5) % 7) + 0.1 * s - 0.01 * n;
  };
  auto plan_of = [&](const executor::TrialTask& task) {
    Plan plan;
    for (int s = 1; s <= 9; ++s) plan.values.push_back(value(task.number, s));
    return plan;
  };
  const std::string asha =
      "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 1\nmax_resource = 9\n";
  const SweepConfig config = Config(10, 9, "max_concurrent = 1\n", "", asha);

  auto ref = OpenStore("ref.db");
  auto whole = RunSweepWith(config, *ref, options_,
                            Seams([&](const executor::TrialTask& t, int) { return plan_of(t); }));
  ASSERT_TRUE(whole.ok()) << whole.status().message();

  // Interrupted (Ctrl-C) as trial 7, the best at the first rung, starts; then resumed.
  auto st = OpenStore();
  std::atomic<bool> interrupt{false};
  RunOptions stop_options;
  stop_options.interrupt = &interrupt;
  auto first =
      RunSweepWith(config, *st, stop_options, Seams([&](const executor::TrialTask& t, int) {
                     if (t.number == 7) interrupt = true;
                     return plan_of(t);
                   }));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(first->interrupted);
  EXPECT_EQ(first->counts.interrupted, 1);
  auto resumed = ResumeSweepWith(
      "s", *st, options_, Seams([&](const executor::TrialTask& t, int) { return plan_of(t); }));
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_FALSE(resumed->interrupted);

  auto rows = [&](store::Store& s) {
    std::vector<std::tuple<int64_t, TrialStatus, std::optional<double>, std::string>> out;
    for (const auto& t : Trials(s))
      out.emplace_back(t.number, t.status, t.objective, t.params_json);
    return out;
  };
  EXPECT_EQ(rows(*st), rows(*ref));
}

}  // namespace
}  // namespace sweep
