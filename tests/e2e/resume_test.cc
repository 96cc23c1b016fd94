// Resume and reliability, end to end: SIGKILL the coordinator at random moments and resume;
// one owner per sweep; a killed or hung worker's trial runs again; readers during a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e_fixture.h"

namespace {

using nlohmann::json;
using sweep_e2e::E2eTest;
using sweep_e2e::Output;
namespace fs = std::filesystem;

std::string SlowFunctionConfig(const std::string& name, const std::string& algorithm,
                               int max_trials, int steps, int step_ms,
                               const std::string& extra = "") {
  std::string params =
      algorithm == "grid"
          ? "x1 = { values = [0.1, 0.4, 0.7] }\nx2 = { values = [0.2, 0.5] }\nx3 = { values = "
            "[0.3, 0.9] }\nx4 = 0.5\nx5 = { values = [0.1, 0.6] }\nx6 = 0.65\n"
          : "x1 = { distribution = \"uniform\", min = 0, max = 1 }\n"
            "x2 = { distribution = \"uniform\", min = 0, max = 1 }\n"
            "x3 = { distribution = \"uniform\", min = 0, max = 1 }\n"
            "x4 = { distribution = \"uniform\", min = 0, max = 1 }\n"
            "x5 = { distribution = \"uniform\", min = 0, max = 1 }\n"
            "x6 = { distribution = \"uniform\", min = 0, max = 1 }\n";
  return "[sweep]\nname = \"" + name + "\"\nmax_trials = " + std::to_string(max_trials) +
         "\nseed = 9\n[search]\nalgorithm = \"" + algorithm + "\"\n[trial]\nkind = \"function\"\n" +
         extra + "[function]\nname = \"hartmann6\"\nsteps = " + std::to_string(steps) +
         "\nstep_ms = " + std::to_string(step_ms) + "\n[executor]\ncpu_slots = 2\n[parameters]\n" +
         params;
}

// Two command trials (x = 1, 2) of `script` on 2 CPU slots; `trial_extra` adds [trial] lines.
std::string TwoCommandTrials(const std::string& name, const std::string& script,
                             const std::string& trial_extra = "") {
  return "[sweep]\nname = \"" + name +
         "\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 2\n[search]\nalgorithm = "
         "\"grid\"\n[parameters]\nx = { values = [1, 2] }\n[trial]\nkind = \"command\"\n"
         "command = [\"./" +
         script + "\", \"{x}\"]\n" + trial_extra + "[executor]\ncpu_slots = 2\n";
}

class ResumeTest : public E2eTest {
 protected:
  void LostReportsComeBack(const std::string& early_stopping);

  // l.toml: a grid of two trainer trials of 2 epochs on a tiny dataset, one at a time.
  void WriteTwoTinyTrainerTrials(const std::string& name) {
    WriteTinyDataset(800, 200);
    Write("l.toml", "[sweep]\nname = \"" + name +
                        "\"\nseed = 5\n[search]\nalgorithm = \"grid\"\n[parameters]\nlr = { "
                        "values = [0.05, 0.2] }\nepochs = 2\nbatch_size = 32\n[trainer]\n"
                        "dataset = \"" +
                        dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
  }

  // A Branin sweep of 9 steps, one trial at a time, stopped early by `algorithm` on the ladder
  // 1, 3, 9; with x1 narrowed to [0, 10] (a fixed space) when `narrow`.
  static std::string LadderConfig(const std::string& name, int max_trials,
                                  const std::string& algorithm, bool narrow = false) {
    std::string config = sweep_e2e::BraninConfig(
        name, max_trials, "max_concurrent = 1\nseed = 4\n", "steps = 9\n",
        "[early_stopping]\nalgorithm = \"" + algorithm +
            "\"\nmin_resource = 1\nmax_resource = 9\nreduction_factor = 3\n");
    if (narrow) config.replace(config.find("min = -5"), 8, "min = 0");
    return config;
  }

  // Sweep `name`'s trials' parameters, by trial number.
  std::vector<std::string> SweepParams(const std::string& name) {
    std::vector<std::string> out;
    for (auto& row : Query("SELECT t.params FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                           "WHERE s.name = '" +
                           name + "' ORDER BY t.number")) {
      out.push_back(row[0]);
    }
    return out;
  }

  // Waits (up to 5 s) until a coordinator has recorded its sweep and itself as its owner.
  void WaitForTheOwner(const std::string& db = "sweeps.db") {
    for (int i = 0; i < 100; ++i) {
      if (HasTable("sweeps", db) &&
          !Query("SELECT owner FROM sweeps WHERE owner != ''", db).empty()) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  bool WaitForReports(int n) {
    for (int i = 0; i < 400; ++i) {
      if (HasTable("reports") && Query("SELECT count(*) FROM reports")[0][0] == std::to_string(n)) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }

  // Checks the invariants of a finished sweep in `db` against the uninterrupted run in `ref`.
  // With early stopping, which trials are pruned depends on the order reports arrive in, so
  // only the set of trials and the shape of their reports are compared (`exact` = false).
  void ExpectSameAsUninterrupted(const std::string& name, const std::string& db,
                                 const std::string& ref, int steps, bool exact = true) {
    auto params = [&](const std::string& file) {
      std::map<std::string, std::string> out;
      for (auto& row : Query("SELECT number, params FROM trials", file)) out[row[0]] = row[1];
      return out;
    };
    EXPECT_EQ(params(db), params(ref));  // same numbers, same parameters
    EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status NOT IN ('completed', 'pruned', "
                    "'failed')",
                    db)[0][0],
              "0");
    // Reports: steps 1..last once each, and last = steps for every completed trial.
    auto gaps = Query(
        "SELECT trial, count(*), min(step), max(step) FROM reports GROUP BY trial "
        "HAVING count(*) != max(step) OR min(step) != 1",
        db);
    EXPECT_TRUE(gaps.empty()) << "trial " << gaps[0][0] << " has " << gaps[0][1] << " reports";
    gaps = Query(
        "SELECT t.number, 0 FROM trials t WHERE t.status = 'completed' AND (SELECT "
        "max(step) FROM reports r WHERE r.trial = t.number) != " +
            std::to_string(steps),
        db);
    EXPECT_TRUE(gaps.empty()) << "trial " << gaps[0][0] << " has " << gaps[0][1] << " reports";
    EXPECT_EQ(
        Query("SELECT count(*) - count(DISTINCT trial || '/' || step) FROM reports", db)[0][0],
        "0");
    // Same values as the uninterrupted run (function trials are deterministic).
    if (exact) {
      EXPECT_EQ(Query("SELECT number, objective FROM trials ORDER BY number", db),
                Query("SELECT number, objective FROM trials ORDER BY number", ref));
    }
    EXPECT_EQ(Query("PRAGMA integrity_check", db)[0][0], "ok");
    EXPECT_EQ(Query("SELECT status FROM sweeps WHERE name = '" + name + "'", db)[0][0],
              "completed");
  }

  // Whether `db` holds the sweep `name` yet (quietly: the file may not exist or be half made).
  bool SweepRecorded(const std::string& db, const std::string& name) {
    sqlite3* h = nullptr;
    bool found = false;
    if (sqlite3_open_v2((dir_ / db).c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(h, 5000);
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(h, "SELECT 1 FROM sweeps WHERE name = ?", -1, &st, nullptr) ==
          SQLITE_OK) {
        sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
        found = sqlite3_step(st) == SQLITE_ROW;
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(h);
    return found;
  }

  // Runs the sweep to its end, SIGKILLing the coordinator `kills` times at random moments and
  // resuming each time. Returns the number of kills that hit a live coordinator.
  int RunWithKills(const std::string& config, const std::string& name, const std::string& db,
                   int kills, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> delay_ms(60, 450);
    int landed = 0;
    for (int round = 0; round < kills + 50; ++round) {
      // A kill can land before `run` has recorded the sweep: then it is `run` again, not resume.
      std::string args = SweepRecorded(db, name) ? "resume " + name + " --db " + db
                                                 : "run " + config + " --db " + db;
      pid_t pid = Start(args, "chaos.log");
      if (landed < kills) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
        if (::kill(pid, SIGKILL) == 0) {
          int rc = Wait(pid);
          if (rc == -SIGKILL) {
            ++landed;
            continue;
          }
          if (rc == 0) return landed;  // it finished before the kill
          ADD_FAILURE() << "coordinator exited " << rc << ": "
                        << sweep_e2e::Slurp(dir_ / "chaos.log");
          return landed;
        }
      }
      int rc = Wait(pid);
      if (rc == 0) return landed;
      ADD_FAILURE() << "resume exited " << rc << ": " << sweep_e2e::Slurp(dir_ / "chaos.log");
      return landed;
    }
    return landed;
  }
};

TEST_F(ResumeTest, ChaosKillsDuringRandomSearchLoseNothing) {
  Write("c.toml", SlowFunctionConfig("chaos", "random", 60, 8, 15));
  ASSERT_EQ(Sweep("run c.toml --db ref.db").code, 0);
  int landed = RunWithKills("c.toml", "chaos", "sweeps.db", 12, 1234);
  EXPECT_GE(landed, 10);
  std::printf("[ chaos    ] random search survived %d coordinator kills\n", landed);
  if (HasFailure()) return;  // the store may be incomplete; the failure says why
  ExpectSameAsUninterrupted("chaos", "sweeps.db", "ref.db", 8);
}

TEST_F(ResumeTest, ChaosKillsDuringGridSearchLoseNothing) {
  Write("g.toml", SlowFunctionConfig("chaosgrid", "grid", 24, 8, 40));
  ASSERT_EQ(Sweep("run g.toml --db ref.db").code, 0);
  int landed = RunWithKills("g.toml", "chaosgrid", "sweeps.db", 10, 99);
  EXPECT_GE(landed, 10);
  std::printf("[ chaos    ] grid search survived %d coordinator kills\n", landed);
  if (HasFailure()) return;
  ExpectSameAsUninterrupted("chaosgrid", "sweeps.db", "ref.db", 8);
}

TEST_F(ResumeTest, ChaosKillsDuringAshaLoseNothing) {
  Write("a.toml", SlowFunctionConfig("chaosasha", "random", 60, 9, 25) +
                      "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 1\n"
                      "reduction_factor = 3\n");
  ASSERT_EQ(Sweep("run a.toml --db ref.db").code, 0);
  EXPECT_NE(Query("SELECT count(*) FROM trials WHERE status = 'pruned'", "ref.db")[0][0], "0");
  int landed = RunWithKills("a.toml", "chaosasha", "sweeps.db", 10, 7);
  EXPECT_GE(landed, 10);
  std::printf("[ chaos    ] ASHA survived %d coordinator kills\n", landed);
  if (HasFailure()) return;
  ExpectSameAsUninterrupted("chaosasha", "sweeps.db", "ref.db", 9, /*exact=*/false);
  if (HasFailure()) return;
  // Every pruned trial says where and why.
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'pruned' AND error NOT LIKE "
                  "'pruned at rung %'")[0][0],
            "0");
}

// `delete` refuses a sweep another process runs (exit 3, as run and resume do), and removes
// one whose coordinator died.
TEST_F(ResumeTest, DeleteRefusesARunningSweep) {
  Write("s.toml", SlowFunctionConfig("busy", "random", 8, 20, 100));
  pid_t first = Start("run s.toml", "first.log");
  WaitForTheOwner();
  Output refused = Sweep("delete busy --yes");
  EXPECT_EQ(refused.code, 3) << refused.err;
  EXPECT_NE(refused.err.find("sweep 'busy' is being run by pid " + std::to_string(first)),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(Query("SELECT count(*) FROM sweeps")[0][0], "1");
  ::kill(first, SIGKILL);
  Wait(first);
  Output deleted = Sweep("delete busy --yes");
  EXPECT_EQ(deleted.code, 0) << deleted.err;
  EXPECT_NE(deleted.out.find("deleted sweep 'busy' (running) in sweeps.db: "), std::string::npos)
      << deleted.out;
  EXPECT_EQ(Query("SELECT (SELECT count(*) FROM sweeps) + (SELECT count(*) FROM trials) + "
                  "(SELECT count(*) FROM reports) + (SELECT count(*) FROM events)")[0][0],
            "0");
}

TEST_F(ResumeTest, SecondOwnerIsRefusedAndADeadOwnersLockIsTakenOver) {
  Write("s.toml", SlowFunctionConfig("owned", "random", 8, 20, 100));
  pid_t first = Start("run s.toml", "first.log");
  WaitForTheOwner();
  // Running elsewhere: exit 3 from every command that would run it.
  Output second = Sweep("resume owned");
  EXPECT_EQ(second.code, 3);
  EXPECT_NE(second.err.find("sweep 'owned' is being run by pid " + std::to_string(first)),
            std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find(" on host "), std::string::npos);
  Output again = Sweep("run s.toml");
  EXPECT_EQ(again.code, 3);
  EXPECT_EQ(Sweep("run s.toml --resume").code, 3);
  // Not advice to resume, which would be refused: it is running now.
  EXPECT_NE(again.err.find("sweep 'owned' already exists in sweeps.db and pid " +
                           std::to_string(first) + " on host "),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find(" is running it now; follow it with `sweep status owned --watch`"),
            std::string::npos)
      << again.err;
  json alive;
  ASSERT_NO_FATAL_FAILURE(alive = SweepJson("status owned --json"));
  EXPECT_FALSE(alive["coordinator_gone"].get<bool>()) << alive.dump();

  ::kill(first, SIGKILL);
  Wait(first);
  // Readers tell a sweep whose coordinator died from one that runs; its clock stopped with its
  // coordinator's last commit.
  json sj;
  ASSERT_NO_FATAL_FAILURE(sj = SweepJson("status owned --json"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  Output status = Sweep("status owned");
  json later;
  ASSERT_NO_FATAL_FAILURE(later = SweepJson("status owned --json"));
  EXPECT_EQ(later["elapsed_s"], sj["elapsed_s"]) << sj.dump() << later.dump();
  EXPECT_LT(sj["elapsed_s"].get<double>() - sj["running_s"].get<double>(), 1.0) << sj.dump();
  EXPECT_NE(status.out.find("sweep owned (running, but its coordinator is gone: `sweep resume "
                            "owned`)"),
            std::string::npos)
      << status.out;
  json list;
  ASSERT_NO_FATAL_FAILURE(list = SweepJson("list --json"));
  EXPECT_TRUE(list[0]["coordinator_gone"].get<bool>()) << list.dump();
  // A trial left running says nothing runs it, rather than how long it has been "running".
  auto left = Query("SELECT number FROM trials WHERE status = 'running' LIMIT 1");
  if (!left.empty()) {
    Output show = Sweep("show owned " + left[0][0]);
    EXPECT_NE(show.out.find("running (its coordinator is gone: sweep resume owned runs it again)"),
              std::string::npos)
        << show.out;
    EXPECT_EQ(show.out.find("running for"), std::string::npos) << show.out;
    json shown;
    ASSERT_NO_FATAL_FAILURE(shown = SweepJson("show owned " + left[0][0] + " --json"));
    EXPECT_TRUE(shown["coordinator_gone"].get<bool>());
  }
  Output taken = Sweep("resume owned");  // the dead owner's lock is free
  EXPECT_EQ(taken.code, 0) << taken.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "8");
}

// A lock file removed while the sweep runs (a clean-up script, a user tidying the folder) does
// not make its coordinator look dead: readers still see it run, and resume refuses to start a
// second one beside it, naming the process; delete refuses to remove it.
TEST_F(ResumeTest, ARemovedLockFileDoesNotLetASecondOwnerIn) {
  Write("s.toml", SlowFunctionConfig("unlocked", "random", 8, 20, 100));
  pid_t first = Start("run s.toml", "first.log");
  WaitForTheOwner();
  ASSERT_TRUE(fs::remove(dir_ / "sweeps.db.lock"));
  json alive;
  ASSERT_NO_FATAL_FAILURE(alive = SweepJson("status unlocked --json"));
  EXPECT_FALSE(alive["coordinator_gone"].get<bool>()) << alive.dump();
  EXPECT_EQ(Sweep("status unlocked").out.find("coordinator is gone"), std::string::npos);
  Output second = Sweep("resume unlocked");
  EXPECT_EQ(second.code, 3);
  EXPECT_NE(second.err.find("sweep 'unlocked' is being run by pid " + std::to_string(first)),
            std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find("was removed while it ran"), std::string::npos) << second.err;
  // Nor does delete take the running sweep's rows from under it.
  Output deleted = Sweep("delete unlocked --yes");
  EXPECT_EQ(deleted.code, 3) << deleted.out;
  EXPECT_NE(deleted.err.find("sweep 'unlocked' is being run by pid " + std::to_string(first)),
            std::string::npos)
      << deleted.err;
  EXPECT_NE(deleted.err.find("(its lock file sweeps.db.lock was removed while it ran)"),
            std::string::npos)
      << deleted.err;
  EXPECT_NE(deleted.err.find("delete refuses a running sweep"), std::string::npos) << deleted.err;
  EXPECT_EQ(Wait(first), 0) << sweep_e2e::Slurp(dir_ / "first.log");
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "8");
  EXPECT_EQ(Query("SELECT count(*) FROM trials")[0][0], "8");
}

// The lock is the database file's, not the path's: a resume through a symbolic link to the
// store, or a path with `..`, is refused while the sweep runs, as one through its own path is.
TEST_F(ResumeTest, SecondOwnerThroughASymlinkIsRefused) {
  Write("s.toml", SlowFunctionConfig("linked", "random", 8, 20, 100));
  fs::create_directory(dir_ / "sub");
  pid_t first = Start("run s.toml --db real.db", "first.log");
  WaitForTheOwner("real.db");
  fs::create_symlink("real.db", dir_ / "link.db");
  for (const std::string& db :
       std::vector<std::string>{"link.db", "sub/../real.db", (dir_ / "real.db").string()}) {
    Output second = Sweep("resume linked --db " + db);
    EXPECT_EQ(second.code, 3) << db;
    EXPECT_NE(second.err.find("sweep 'linked' is being run by pid " + std::to_string(first)),
              std::string::npos)
        << db << ": " << second.err;
    json alive;
    ASSERT_NO_FATAL_FAILURE(alive = SweepJson("status linked --json --db " + db));
    EXPECT_FALSE(alive["coordinator_gone"].get<bool>()) << db << alive.dump();
  }
  EXPECT_EQ(Wait(first), 0) << sweep_e2e::Slurp(dir_ / "first.log");
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'", "real.db")[0][0], "8");
}

// A sweep committed as running with no owner (its coordinator died before recording one, as
// a full disk could leave it) has no live coordinator: status and list say it is gone rather
// than running forever, and resume takes it over.
TEST_F(ResumeTest, RunningSweepWithNoOwnerIsReportedAsCoordinatorGone) {
  Write("b.toml", sweep_e2e::BraninConfig("ownerless", 4));
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  Exec("UPDATE sweeps SET status = 'running', ended = NULL, owner = ''");
  json status;
  ASSERT_NO_FATAL_FAILURE(status = SweepJson("status ownerless --json"));
  EXPECT_TRUE(status["coordinator_gone"].get<bool>()) << status.dump();
  EXPECT_NE(Sweep("status ownerless").out.find("but its coordinator is gone"), std::string::npos);
  json list;
  ASSERT_NO_FATAL_FAILURE(list = SweepJson("list --json"));
  EXPECT_TRUE(list[0]["coordinator_gone"].get<bool>()) << list.dump();
  Output resumed = Sweep("resume ownerless");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
}

// Whether process `pid` is gone (no longer there, or a zombie nobody reaped yet).
bool Gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z' ||
         line[close + 2] == 'X';
}

// The worker processes of the coordinator `pid`.
std::vector<pid_t> Workers(pid_t coordinator) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    pid_t p = std::atoi(e.path().filename().c_str());
    if (p <= 0) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == coordinator) out.push_back(p);
  }
  return out;
}

// The coordinator's workers, once it has started some (empty after 5 s without any).
std::vector<pid_t> WaitForWorkers(pid_t coordinator) {
  std::vector<pid_t> workers;
  for (int i = 0; i < 100 && workers.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    workers = Workers(coordinator);
  }
  return workers;
}

// A signal to the coordinator's whole process group (what `timeout` and Ctrl-C on a terminal
// send; `systemctl stop` and batch systems signal every process) stops the sweep cleanly: the
// workers ignore it, the coordinator stops the trials after their current step and records them
// interrupted without using a retry; resume finishes them.
TEST_F(ResumeTest, SignalToTheCoordinatorsGroupInterruptsTrialsWithoutRetries) {
  // SIGTERM (a service manager's stop) and SIGHUP (the terminal closed) alike.
  for (int sig : {SIGTERM, SIGHUP}) {
    SCOPED_TRACE(sig);
    const std::string name = "grp" + std::to_string(sig);
    Write(name + ".toml", SlowFunctionConfig(name, "random", 4, 60, 50));
    const std::string db = name + ".db";
    // `env setsid sweep ...`: the coordinator leads a new process group, as under a service
    // manager or a shell's job control.
    pid_t pid = Start("run " + name + ".toml --db " + db, name + ".log", "setsid");
    auto count = [&](const std::string& sql) { return std::stoi(Query(sql, db)[0][0]); };
    bool running = false;
    for (int i = 0; i < 400 && !running; ++i) {
      running = HasTable("reports", db) &&
                count("SELECT count(*) FROM trials WHERE status = 'running'") == 2 &&
                count("SELECT count(*) FROM reports") >= 4;
      if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(running) << sweep_e2e::Slurp(dir_ / (name + ".log"));
    ASSERT_FALSE(Workers(pid).empty());
    ASSERT_EQ(::kill(-pid, sig), 0);  // the coordinator and its workers alike
    // A closing terminal's hangup comes twice (the kernel's, the shell's to its jobs): still
    // the one stop after the current step, not a second interrupt's stop at once.
    if (sig == SIGHUP) {
      ASSERT_EQ(::kill(-pid, sig), 0);
    }
    EXPECT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / (name + ".log"));
    EXPECT_EQ(count("SELECT count(*) FROM trials WHERE status = 'failed'"), 0);
    EXPECT_EQ(count("SELECT count(*) FROM trials WHERE status = 'interrupted'"), 2);
    EXPECT_EQ(count("SELECT max(retries) FROM trials"), 0);
    for (const auto& row : Query("SELECT error FROM trials", db)) {
      EXPECT_EQ(row[0].find("killed by"), std::string::npos) << row[0];
      EXPECT_EQ(row[0].find("at once"), std::string::npos) << row[0];
    }
    Output resumed = Sweep("resume " + name + " --db " + db);
    EXPECT_EQ(resumed.code, 0) << resumed.err;
    EXPECT_EQ(count("SELECT count(*) FROM trials WHERE status = 'completed'"), 4);
  }
}

// `run --resume --dry-run` of an interrupted sweep says what the resume goes on with (read
// without a write), refuses an edited config as the resume would, and of a sweep the store does
// not hold is a new run's dry run.
TEST_F(ResumeTest, ADryRunOfAResumeSaysWhatItWouldGoOnWith) {
  Write("s.toml", SlowFunctionConfig("dry", "random", 6, 40, 30));
  pid_t pid = Start("run s.toml", "s.log");
  auto count = [&](const std::string& sql) { return std::stoi(Query(sql)[0][0]); };
  ASSERT_TRUE(WaitUntil([&] {
    return HasTable("reports") && count("SELECT count(*) FROM reports") >= 4;
  })) << sweep_e2e::Slurp(dir_ / "s.log");
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  ASSERT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "s.log");
  const std::string stored = sweep_e2e::Slurp(dir_ / "sweeps.db");

  Output dry = Sweep("run s.toml --resume --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(dry.out.find("dry run of resuming sweep 'dry' in sweeps.db (interrupted): the config "
                         "is the one it started with; 2 trial(s) so far: 2 interrupted\n"
                         "2 trial(s) not ended would run again first"),
            std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("4 new trial(s) left of max_trials 6\n"), std::string::npos) << dry.out;
  EXPECT_EQ(dry.out.find("trial 0 on"), std::string::npos) << dry.out;  // not a new run's
  EXPECT_EQ(sweep_e2e::Slurp(dir_ / "sweeps.db"), stored);

  Write("edited.toml", SlowFunctionConfig("dry", "random", 6, 40, 30) + "# edited\n");
  Output edited = Sweep("run edited.toml --resume --dry-run");
  EXPECT_EQ(edited.code, 2);
  EXPECT_NE(edited.err.find("was started from another version of this config"), std::string::npos)
      << edited.err;
  Write("new.toml", SlowFunctionConfig("fresh", "random", 6, 40, 30));
  Output fresh = Sweep("run new.toml --resume --dry-run");
  EXPECT_EQ(fresh.code, 0) << fresh.err;
  EXPECT_NE(fresh.out.find("dry run of sweep 'fresh'"), std::string::npos) << fresh.out;
  EXPECT_EQ(sweep_e2e::Slurp(dir_ / "sweeps.db"), stored);

  Output resumed = Sweep("run s.toml --resume");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(count("SELECT count(*) FROM trials WHERE status = 'completed'"), 6);

  // A sweep started --from it: max_trials counts its own trials, not the 6 carried over.
  Write("from.toml", SlowFunctionConfig("from", "random", 6, 40, 30));
  pid = Start("run from.toml --from dry", "from.log");
  ASSERT_TRUE(WaitUntil([&] {
    return count(
               "SELECT count(*) FROM reports r JOIN sweeps s ON s.id = r.sweep_id WHERE "
               "s.name = 'from' AND r.trial >= 6") >= 4;
  })) << sweep_e2e::Slurp(dir_ / "from.log");
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  ASSERT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "from.log");
  Output carried = Sweep("run from.toml --resume --dry-run");
  ASSERT_EQ(carried.code, 0) << carried.err;
  EXPECT_NE(carried.out.find("8 trial(s) so far: 6 completed, 2 interrupted\n"), std::string::npos)
      << carried.out;
  EXPECT_NE(carried.out.find("4 new trial(s) left of max_trials 6\n"), std::string::npos)
      << carried.out;
  // --from on its resume (as a restarted pod's command line has it) names the same sweep, or
  // the resume is refused rather than ignoring it.
  EXPECT_EQ(Sweep("run from.toml --resume --from dry --dry-run").code, 0);
  Output other = Sweep("run from.toml --resume --from drry --dry-run");
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("--from drry: sweep 'from' in sweeps.db was started from 'dry'; "
                           "--resume goes on as it started."),
            std::string::npos)
      << other.err;
  Output plain = Sweep("run s.toml --resume --from from --dry-run");
  EXPECT_EQ(plain.code, 2);
  EXPECT_NE(plain.err.find("--from from: sweep 'dry' in sweeps.db was not started from another "
                           "sweep"),
            std::string::npos)
      << plain.err;
  Output refused = Sweep("run s.toml --resume --from from");
  EXPECT_EQ(refused.code, 2);
  EXPECT_EQ(refused.err, plain.err);
}

// Ctrl-C while a trainer trial is in the middle of a long epoch: the trial stops at its next
// step, not at the epoch's end, and its checkpoint holds that step. Resumed, it ends with the
// reports, test accuracy and objective of the same trial run without a stop.
TEST_F(ResumeTest, AnInterruptStopsATrainerTrialWithinItsEpoch) {
  WriteTinyDataset(20000, 200);  // about 1,100 steps an epoch
  auto config = [&](const std::string& name) {
    return "[sweep]\nname = \"" + name +
           "\"\nseed = 5\n[search]\nalgorithm = \"grid\"\n[parameters]\nlr = 0.05\n"
           "hidden = [1024, 1024]\nepochs = 3\nbatch_size = 16\n[trainer]\ndataset = \"" +
           dir_.string() + "\"\n[executor]\ncpu_slots = 1\n";
  };
  Write("straight.toml", config("straight"));
  Write("stopped.toml", config("stopped"));
  ASSERT_EQ(Sweep("run straight.toml").code, 0);
  const std::string of_sweep = " WHERE sweep_id = (SELECT id FROM sweeps WHERE name = '";
  pid_t pid = Start("run stopped.toml", "stopped.log");
  bool reported = false;
  for (int i = 0; i < 2400 && !reported; ++i) {
    reported = Query("SELECT count(*) FROM reports" + of_sweep + "stopped')")[0][0] == "1";
    if (!reported) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(reported) << sweep_e2e::Slurp(dir_ / "stopped.log");
  // Past the report's verdict (a stop there ends the epoch's report as before), well before
  // the epoch's end (about 1.5 s here).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "stopped.log");
  auto trial = Query("SELECT status, error FROM trials" + of_sweep + "stopped')");
  ASSERT_EQ(trial.size(), 1u);
  EXPECT_EQ(trial[0][0], "interrupted");
  EXPECT_NE(trial[0][1].find("stopped within epoch 2, after step "), std::string::npos)
      << trial[0][1];
  EXPECT_NE(trial[0][1].find("of its 1125: it goes on from there"), std::string::npos)
      << trial[0][1];
  EXPECT_EQ(Query("SELECT count(*) FROM reports" + of_sweep + "stopped')")[0][0], "1");

  Output resumed = Sweep("resume stopped");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  // What training computed, not how long it took.
  auto learned = [&](const std::string& name) {
    std::vector<std::string> out;
    for (const auto& row :
         Query("SELECT step, metrics FROM reports" + of_sweep + name + "') ORDER BY step")) {
      const json m = json::parse(row[1]);
      out.push_back(row[0] + " " + m["train_loss"].dump() + " " + m["val_loss"].dump() + " " +
                    m["val_acc"].dump() + " " + m["lr"].dump());
    }
    const auto end =
        Query("SELECT status, objective, metrics FROM trials" + of_sweep + name + "')");
    out.push_back(end[0][0] + " " + end[0][1] + " " + json::parse(end[0][2])["test_acc"].dump());
    return out;
  };
  const std::vector<std::string> straight = learned("straight");
  ASSERT_EQ(straight.size(), 4u);
  EXPECT_EQ(learned("stopped"), straight);
}

// A coordinator that died after a trial met stop_when, before that trial ended: resume finds
// the target in the stored reports, ends that trial completed (it does not run again) and ends
// the sweep. The state is staged from a finished sweep, as the coordinator would have left it.
TEST_F(ResumeTest, ResumeAfterTheTargetWasMetEndsTheSweep) {
  Write("s.toml", sweep_e2e::BraninConfig("target", 200,
                                          "stop_when = \"value <= 30\"\nmax_concurrent = 1\n"
                                          "seed = 3\n",
                                          "steps = 20\nstep_ms = 10\n"));
  ASSERT_EQ(Sweep("run s.toml").code, 0);
  const std::string winner =
      Query("SELECT number FROM trials WHERE error LIKE 'reached the target%'")[0][0];
  const std::string trials = Query("SELECT count(*) FROM trials")[0][0];
  // Back to the moment of the kill: the sweep and the winner running, the end not recorded.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "sweeps.db").c_str(), &db), SQLITE_OK);
  const std::string undo =
      "UPDATE sweeps SET status = 'running', ended = NULL;"
      "UPDATE trials SET status = 'running', ended = NULL, error = '' WHERE number = " +
      winner +
      ";"
      "DELETE FROM events WHERE (trial IS NULL AND to_state = 'completed') OR (trial = " +
      winner + " AND to_state = 'completed');";
  ASSERT_EQ(sqlite3_exec(db, undo.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);

  Output resumed = Sweep("resume target");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials")[0][0], trials);  // nothing new drawn
  auto row = Query("SELECT status, error FROM trials WHERE number = " + winner);
  EXPECT_EQ(row[0][0], "completed");
  EXPECT_EQ(row[0][1].rfind("reached the target value <= 30", 0), 0u) << row[0][1];
  // It ended from the stored reports: it was not run again.
  EXPECT_EQ(Query("SELECT group_concat(to_state) FROM (SELECT to_state FROM events WHERE trial = " +
                  winner + " ORDER BY id)")[0][0],
            "running,interrupted,completed");
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
  auto end = Query("SELECT detail FROM events WHERE trial IS NULL AND to_state = 'completed'");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_NE(end[0][0].find("target value <= 30 reached by trial " + winner), std::string::npos)
      << end[0][0];
}

// A trial whose last report, sent as it stops for an interrupt, meets stop_when: the target is
// met, so the trial ends completed and the sweep with it (exit 0), as a resume replaying the
// store would have it; the other trial is interrupted, as beside any target.
TEST_F(ResumeTest, TheTargetMetWhileStoppingEndsTheSweepCompleted) {
  WriteProgram(
      "last.sh",
      "#!/bin/sh\ntrap 'echo \"sweep-report {\\\"epoch\\\": 2, \\\"score\\\": $(($1 - 1))}\"; "
      "exit 0' TERM\necho 'sweep-report {\"epoch\": 1, \"score\": 0}'\n"
      "while :; do sleep 0.05; done\n");
  Write("l.toml", "[sweep]\nstop_when = \"score >= 0.5\"\n" +
                      TwoCommandTrials("last", "last.sh").substr(std::string("[sweep]\n").size()));
  pid_t pid = Start("run l.toml", "last.log");
  ASSERT_TRUE(WaitForReports(2)) << sweep_e2e::Slurp(dir_ / "last.log");
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(Wait(pid), 0) << sweep_e2e::Slurp(dir_ / "last.log");
  auto rows = Query("SELECT status, error FROM trials ORDER BY json_extract(params, '$.x')");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][0], "interrupted");
  EXPECT_EQ(rows[1][0], "completed");
  EXPECT_EQ(rows[1][1].rfind("reached the target score >= 0.5", 0), 0u) << rows[1][1];
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
  auto end = Query("SELECT detail FROM events WHERE trial IS NULL AND to_state = 'completed'");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(
      end[0][0].rfind("interrupted by the user; then target score >= 0.5 reached by trial", 0), 0u)
      << end[0][0];
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "4");
}

// Every trial whose last report, sent as it stops, meets the target has met it: each ends
// completed, not only the first to report (the second may be the better one).
TEST_F(ResumeTest, EveryTrialWhoseStoppingReportMeetsTheTargetEndsCompleted) {
  WriteProgram("both.sh",
               "#!/bin/sh\ntrap 'echo \"sweep-report {\\\"epoch\\\": 2, \\\"score\\\": $1}\"; "
               "exit 0' TERM\necho 'sweep-report {\"epoch\": 1, \"score\": 0}'\n"
               "while :; do sleep 0.05; done\n");
  Write("b.toml", "[sweep]\nstop_when = \"score >= 0.5\"\n" +
                      TwoCommandTrials("both", "both.sh").substr(std::string("[sweep]\n").size()));
  pid_t pid = Start("run b.toml", "both.log");
  ASSERT_TRUE(WaitForReports(2)) << sweep_e2e::Slurp(dir_ / "both.log");
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(Wait(pid), 0) << sweep_e2e::Slurp(dir_ / "both.log");
  for (const auto& row : Query("SELECT status, error, objective FROM trials")) {
    EXPECT_EQ(row[0], "completed") << row[1];
    EXPECT_EQ(row[1], "reached the target score >= 0.5; the sweep stopped");
  }
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
}

// A trial whose own last report meets the target (it ends by itself there) says so too.
TEST_F(ResumeTest, ATrialWhoseFinalReportMeetsTheTargetSaysSo) {
  WriteProgram("one.sh",
               "#!/bin/sh\necho \"sweep-report {\\\"epoch\\\": 1, \\\"score\\\": $1}\"\n");
  Write("o.toml", "[sweep]\nstop_when = \"score >= 2\"\nmax_concurrent = 1\n" +
                      TwoCommandTrials("one", "one.sh").substr(std::string("[sweep]\n").size()));
  ASSERT_EQ(Sweep("run o.toml").code, 0);
  auto rows = Query("SELECT status, error FROM trials ORDER BY json_extract(params, '$.x')");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"completed", ""}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"completed",
                                               "reached the target score >= 2; the sweep "
                                               "stopped"}));
}

// A program silent between its reports (a long epoch) gets the stop as it is sent, not at its
// next report: one interrupt ends the sweep in moments, its trials interrupted. (Its one report
// also reaches the store at once, not with the next.)
TEST_F(ResumeTest, AStopReachesAProgramBetweenItsReports) {
  WriteProgram("slow.sh",
               "#!/bin/sh\necho 'sweep-report {\"epoch\": 1, \"score\": 1}'\nexec sleep 300\n");
  Write("s.toml", TwoCommandTrials("slow", "slow.sh"));
  pid_t pid = Start("run s.toml", "slow.log");
  ASSERT_TRUE(WaitForReports(2)) << sweep_e2e::Slurp(dir_ / "slow.log");
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "slow.log");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count(), 20.0);
  for (const auto& row : Query("SELECT status, stderr_log FROM trials")) {
    EXPECT_EQ(row[0], "interrupted");
    EXPECT_NE(sweep_e2e::Slurp(row[1]).find("sent SIGTERM (stopped)"), std::string::npos)
        << sweep_e2e::Slurp(row[1]);
  }
}

// The first interrupt waits for the running trials to stop after their current epoch; a
// second one does not wait (here, programs deaf to SIGTERM with a minute of grace): the
// workers end at once and the trials are recorded interrupted, for resume to continue.
TEST_F(ResumeTest, SecondInterruptStopsAtOnce) {
  WriteProgram("deaf.sh",
               "#!/bin/sh\ntrap '' TERM\necho 'sweep-report {\"epoch\": 1, \"score\": 1}'\n"
               "exec sleep 300\n");
  Write("d.toml", TwoCommandTrials("deaf", "deaf.sh", "kill_grace = \"60s\"\n"));
  pid_t pid = Start("run d.toml", "deaf.log", "setsid");
  ASSERT_TRUE(WaitForReports(2)) << sweep_e2e::Slurp(dir_ / "deaf.log");
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the first interrupt waits for the trials";
  // A command's stop is a signal, said as such.
  EXPECT_NE(sweep_e2e::Slurp(dir_ / "deaf.log")
                .find("sweep: stopping 2 running trial(s): their programs got SIGTERM, and "
                      "SIGKILL follows 60 s later (trial.kill_grace); interrupt again to kill "
                      "them at once"),
            std::string::npos)
      << sweep_e2e::Slurp(dir_ / "deaf.log");
  const auto second = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "deaf.log");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - second).count(), 20.0);
  auto rows = Query("SELECT status, error FROM trials ORDER BY number");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_EQ(row[0], "interrupted");
    EXPECT_EQ(row[1], "stopped at once by a second interrupt");
  }
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "interrupted");
}

// keep_checkpoints = 1: once trials end, only the best completed trial keeps its checkpoint,
// across an interrupt and a resume; what a coordinator stopped before deleting (a file the store
// no longer names, a killed write's temporary) goes on resume.
TEST_F(ResumeTest, KeepCheckpointsKeepsOnlyTheBest) {
  WriteTinyDataset(6000, 200);
  Write("k.toml",
        "[sweep]\nname = \"keep\"\nseed = 5\n[search]\nalgorithm = \"grid\"\n"
        "[parameters]\nlr = { values = [0.003, 0.2, 0.01, 0.05, 0.001] }\nepochs = 4\n"
        "batch_size = 32\n[trial]\nkeep_checkpoints = 1\n[trainer]\ndataset = \"" +
            dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
  const fs::path ckpts = dir_ / "sweeps.db-checkpoints" / "keep";
  auto files = [&] {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(ckpts)) out.insert(e.path().filename().string());
    return out;
  };
  // Which trials the store names a checkpoint for, and the best completed trial.
  auto named = [&] {
    std::set<std::string> out;
    for (auto& row : Query("SELECT number FROM trials WHERE checkpoint != ''")) {
      out.insert("trial-" + row[0] + ".ckpt");
    }
    return out;
  };
  auto best = [&] {
    auto rows = Query(
        "SELECT number FROM trials WHERE status = 'completed' ORDER BY objective DESC, number "
        "LIMIT 1");
    return rows.empty() ? std::string() : "trial-" + rows[0][0] + ".ckpt";
  };

  pid_t pid = Start("run k.toml", "keep.log");
  bool two_done = false;
  for (int i = 0; i < 800 && !two_done; ++i) {
    two_done = HasTable("trials") &&
               Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0] >= "2";
    if (!two_done) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ::kill(pid, SIGINT);
  ASSERT_TRUE(two_done) << sweep_e2e::Slurp(dir_ / "keep.log");
  ASSERT_EQ(Wait(pid), 1) << "interrupted before its end\n" << sweep_e2e::Slurp(dir_ / "keep.log");
  // Ended trials other than the best kept nothing; a running one (now interrupted) keeps its.
  std::set<std::string> expected = {best()};
  for (auto& row : Query("SELECT number FROM trials WHERE status = 'interrupted'")) {
    expected.insert("trial-" + row[0] + ".ckpt");
  }
  EXPECT_EQ(named(), expected);
  EXPECT_EQ(files(), expected);

  // As if the coordinator had died after forgetting a checkpoint but before deleting it.
  auto dropped =
      Query("SELECT number FROM trials WHERE status = 'completed' AND checkpoint = '' LIMIT 1");
  ASSERT_EQ(dropped.size(), 1u) << "two trials completed, one kept";
  Write("sweeps.db-checkpoints/keep/trial-" + dropped[0][0] + ".ckpt", "stale");
  Write("sweeps.db-checkpoints/keep/trial-" + dropped[0][0] + ".ckpt.tmp.1.2.3", "partial");
  Write("sweeps.db-checkpoints/keep/notes.txt", "not ours");

  Output resumed = Sweep("resume keep");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "5");
  EXPECT_EQ(named(), std::set<std::string>{best()});
  EXPECT_EQ(files(), (std::set<std::string>{best(), "notes.txt"}));
  json top;
  ASSERT_NO_FATAL_FAILURE(top = SweepJson("best keep --top 1 --json"));
  EXPECT_EQ(fs::path(top[0]["checkpoint"].get<std::string>()).filename(), best());
}

// A coordinator killed after a trainer trial wrote the checkpoint of its last epoch, but before
// its end was committed: resume runs it again, the trainer has no epoch left to train, and the
// trial ends with the metrics it had reported, ranked as before.
TEST_F(ResumeTest, TrialWhoseCheckpointHoldsItsLastEpochKeepsItsResult) {
  WriteTwoTinyTrainerTrials("last");
  ASSERT_EQ(Sweep("run l.toml").code, 0);
  const std::string rows = "SELECT number, status, objective, epochs FROM trials ORDER BY number";
  const auto before = Query(rows);
  ASSERT_EQ(before.size(), 2u);
  ASSERT_NE(before[0][2], "");
  Exec(
      "UPDATE trials SET status = 'running', ended = NULL; UPDATE sweeps SET status = "
      "'running', ended = NULL");
  Output resumed = Sweep("resume last");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query(rows), before);
  json best;
  ASSERT_NO_FATAL_FAILURE(best = SweepJson("best last --json"));
  EXPECT_EQ(best.size(), 2u);
}

// A store made anew (the old file deleted, its checkpoints left): the new sweep's trials train
// from the start, not from the old sweep's checkpoints of the same names.
TEST_F(ResumeTest, ANewStoreDoesNotResumeFromAnOldSweepsCheckpoints) {
  WriteTwoTinyTrainerTrials("again");
  ASSERT_EQ(Sweep("run l.toml").code, 0);
  ASSERT_TRUE(fs::exists(dir_ / "sweeps.db-checkpoints" / "again" / "trial-0.ckpt"));
  // Stored absolute (the sweep ran in dir_ with a relative --db): readable from anywhere.
  EXPECT_EQ(Query("SELECT checkpoint FROM trials WHERE number = 0")[0][0],
            (fs::canonical(dir_) / "sweeps.db-checkpoints" / "again" / "trial-0.ckpt").string());
  for (const char* f : {"sweeps.db", "sweeps.db-wal", "sweeps.db-shm", "sweeps.db.lock"}) {
    fs::remove(dir_ / f);
  }
  Output again = Sweep("run l.toml");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "4");  // 2 trials x 2 epochs
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed' AND objective IS NOT "
                  "NULL")[0][0],
            "2");
}

// A folder (not empty) where a first run's checkpoint goes is that trial's trouble: it fails,
// naming the path, and the other trial and the sweep go on (the machine is not retired).
TEST_F(ResumeTest, AFolderAtAFirstRunsCheckpointPathFailsThatTrialOnly) {
  WriteTwoTinyTrainerTrials("folder");
  fs::create_directories(dir_ / "sweeps.db-checkpoints" / "folder" / "trial-0.ckpt" / "x");
  Output o = Sweep("run l.toml");
  EXPECT_EQ(o.code, 0) << o.err;
  auto rows = Query("SELECT status, error FROM trials ORDER BY number");
  ASSERT_EQ(rows.size(), 2u) << o.err;
  EXPECT_EQ(rows[0][0], "failed");
  EXPECT_NE(rows[0][1].find("trial-0.ckpt: cannot delete the checkpoint"), std::string::npos)
      << rows[0][1];
  EXPECT_EQ(rows[1][0], "completed");
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
}

// A relative checkpoint_dir is the config's folder's, as the dataset's path is, wherever sweep
// runs: a resume from another folder finds the checkpoints (it looked beside the new folder).
TEST_F(ResumeTest, ARelativeCheckpointDirIsTheConfigsFolders) {
  WriteTwoTinyTrainerTrials("rel");
  fs::create_directories(dir_ / "conf");
  std::string config = sweep_e2e::Slurp(dir_ / "l.toml");
  config.replace(config.find("[trainer]"), 9, "[trial]\ncheckpoint_dir = \"ck\"\n[trainer]");
  Write("conf/l.toml", config);
  ASSERT_EQ(Sweep("run conf/l.toml").code, 0);
  EXPECT_TRUE(fs::exists(dir_ / "conf/ck/rel/trial-0.ckpt"));
  EXPECT_FALSE(fs::exists(dir_ / "ck"));
  EXPECT_EQ(Query("SELECT checkpoint FROM trials WHERE number = 0")[0][0],
            (fs::canonical(dir_) / "conf/ck/rel/trial-0.ckpt").string());
}

// A trial that failed before its first checkpoint names none (it named a file that never was).
TEST_F(ResumeTest, ATrialThatFailedBeforeItsFirstCheckpointNamesNone) {
  WriteTinyDataset(400, 100);
  Write("f.toml",
        "[sweep]\nname = \"nockpt\"\n[search]\nalgorithm = \"grid\"\n[parameters]\n"
        "hidden = { values = [[16], [1048576, 1048576]] }\nepochs = 1\nbatch_size = 32\n"
        "[trainer]\ndataset = \"" +
            dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
  Output o = Sweep("run f.toml");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(Query("SELECT number, status, checkpoint = '' FROM trials ORDER BY number"),
            (std::vector<std::vector<std::string>>{{"0", "completed", "0"}, {"1", "failed", "1"}}));
  Output csv = Sweep("export nockpt --format csv");
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_NE(csv.out.find("trial-0.ckpt"), std::string::npos) << csv.out;
  EXPECT_EQ(csv.out.find("trial-1.ckpt"), std::string::npos) << csv.out;
}

// A coordinator killed with SIGKILL takes its command trials' programs with it, and the helpers
// they started in their process group (a data loader holding memory or a GPU): each worker
// kills its program's group when its parent dies.
TEST_F(ResumeTest, KilledCoordinatorLeavesNoHelperBehind) {
  WriteProgram(
      "h.sh",
      "#!/bin/sh\nsleep 300 &\necho $! > helper.$1\necho 'sweep-report {\"epoch\": 1, \"score\": "
      "1}'\nexec sleep 300\n");
  Write("h.toml", TwoCommandTrials("helpers", "h.sh"));
  pid_t pid = Start("run h.toml", "h.log");
  ASSERT_TRUE(WaitForReports(2)) << sweep_e2e::Slurp(dir_ / "h.log");
  std::vector<pid_t> helpers;
  for (const char* x : {"1", "2"}) {
    helpers.push_back(std::atoi(sweep_e2e::Slurp(dir_ / (std::string("helper.") + x)).c_str()));
    ASSERT_GT(helpers.back(), 0);
    ASSERT_FALSE(Gone(helpers.back()));
  }
  ::kill(pid, SIGKILL);
  Wait(pid);
  for (pid_t helper : helpers) {
    for (int i = 0; i < 500 && !Gone(helper); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(Gone(helper)) << "helper " << helper << " outlived its coordinator";
    if (!Gone(helper)) ::kill(helper, SIGKILL);
  }
}

// Another process holding a write transaction past SQLite's busy timeout (a sqlite3 shell, a
// viewer) makes the sweep wait, and say so, not end: every trial completes.
TEST_F(ResumeTest, ALockHeldByAnotherProcessIsWaitedFor) {
  Write("l.toml", SlowFunctionConfig("locked", "random", 12, 5, 60));
  pid_t pid = Start("run l.toml", "locked.log");
  ASSERT_TRUE(WaitForAReport()) << sweep_e2e::Slurp(dir_ / "locked.log");
  sqlite3* db = HoldWriteLock();
  ASSERT_NE(db, nullptr);
  std::this_thread::sleep_for(std::chrono::seconds(7));  // past the 5 s busy timeout
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_EQ(Wait(pid), 0) << sweep_e2e::Slurp(dir_ / "locked.log");
  EXPECT_NE(sweep_e2e::Slurp(dir_ / "locked.log").find("sweeps.db is locked by another process"),
            std::string::npos)
      << sweep_e2e::Slurp(dir_ / "locked.log");
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "12");
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "60");
  // Times are when things happened, not when the held-up coordinator got to them: a trial
  // runs 5 steps of 60 ms (the ones running when the lock was taken went on meanwhile).
  for (const auto& row : Query("SELECT trial, max(time) - min(time) FROM reports GROUP BY trial")) {
    EXPECT_LT(std::stod(row[1]), 2.0) << "trial " << row[0];
  }
  for (const auto& row : Query("SELECT number, ended - started FROM trials")) {
    EXPECT_LT(std::stod(row[1]), 3.0) << "trial " << row[0];
  }
}

// The same for a new, empty store file another program holds the write lock on: the sweep
// waits to make its schema, says so, and runs once the lock is let go.
TEST_F(ResumeTest, ALockHeldOnANewFileIsWaitedFor) {
  Write("n.toml", SlowFunctionConfig("fresh", "random", 2, 2, 10));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "sweeps.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  pid_t pid = Start("run n.toml", "fresh.log");
  std::this_thread::sleep_for(std::chrono::seconds(7));  // past the 5 s busy timeout
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_EQ(Wait(pid), 0) << sweep_e2e::Slurp(dir_ / "fresh.log");
  EXPECT_NE(sweep_e2e::Slurp(dir_ / "fresh.log").find("sweeps.db is locked by another process"),
            std::string::npos)
      << sweep_e2e::Slurp(dir_ / "fresh.log");
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "2");
}

// A program that keeps its own checkpoint printed its reports and saved past them, but its
// coordinator died (kill -9) before it committed them (here the store was held locked until
// then). Run again, the program finds its work done and prints nothing: the reports come back
// from its stdout log, and the trial ends completed with every epoch, as an uninterrupted run.
// `early_stopping`: config text that makes epoch 1 a decision point, or none.
void ResumeTest::LostReportsComeBack(const std::string& early_stopping) {
  WriteProgram("own.sh", R"(#!/bin/sh
state="$SWEEP_TRIAL_DIR/epoch"
e=$(cat "$state" 2>/dev/null || echo 0)
while [ ! -e go ]; do sleep 0.02; done
while [ "$e" -lt 4 ]; do
  e=$((e + 1))
  echo "sweep-report {\"epoch\": $e, \"score\": $e}"
  echo "$e" > "$state"
done
)");
  Write("o.toml",
        "[sweep]\nname = \"own\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
        "[parameters]\nx = 1\n[trial]\nkind = \"command\"\ncommand = [\"./own.sh\"]\n"
        "[executor]\ncpu_slots = 1\n" +
            early_stopping);
  pid_t pid = Start("run o.toml", "own.log");
  auto wait_for = [](const std::function<bool()>& done) {
    for (int i = 0; i < 800 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return done();
  };
  ASSERT_TRUE(wait_for([&] {
    return HasTable("trials") && Query("SELECT count(*) FROM trials")[0][0] == "1";
  })) << sweep_e2e::Slurp(dir_ / "own.log");
  sqlite3* lock = HoldWriteLock();
  ASSERT_NE(lock, nullptr);
  Write("go", "");
  const fs::path state = dir_ / "sweeps.db-trials" / "own" / "trial-0" / "epoch";
  ASSERT_TRUE(wait_for([&] { return sweep_e2e::Slurp(state) == "4\n"; }));
  // Killed once the worker has logged what the program printed (it had left it in the pipe
  // while it waited for a verdict).
  const fs::path log = state.parent_path() / "stdout.log";
  ASSERT_TRUE(wait_for([&] {
    return sweep_e2e::Slurp(log).find("\"epoch\": 4") != std::string::npos;
  })) << sweep_e2e::Slurp(log);
  ::kill(pid, SIGKILL);
  Wait(pid);
  ASSERT_EQ(sqlite3_exec(lock, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(lock);
  ASSERT_EQ(Query("SELECT count(*) FROM reports")[0][0], "0") << "the store kept them";

  Output resumed = Sweep("resume own");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT status, objective FROM trials"),
            (std::vector<std::vector<std::string>>{{"completed", "4.0"}}));
  EXPECT_EQ(Query("SELECT group_concat(step || ':' || epoch) FROM (SELECT step, epoch FROM "
                  "reports ORDER BY step)")[0][0],
            "1:1.0,2:2.0,3:3.0,4:4.0");
  const std::string err =
      sweep_e2e::Slurp(dir_ / "sweeps.db-trials" / "own" / "trial-0" / "stderr.log");
  EXPECT_NE(err.find("reported again 4 report(s) of an earlier run that the store had not kept"),
            std::string::npos)
      << err;
}

TEST_F(ResumeTest, ReportsTheCoordinatorLostComeBackFromTheProgramsLog) { LostReportsComeBack(""); }

// At a decision point the worker waits for the verdict, but the program runs on: what it prints
// meanwhile still reaches its log (it was left in the pipe, and lost with the coordinator).
TEST_F(ResumeTest, ReportsPrintedWhileAVerdictIsAwaitedComeBackToo) {
  LostReportsComeBack(
      "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 1\nmax_resource = 9\n"
      "reduction_factor = 3\n");
}

// Ctrl-C while the sweep waits for another process's lock stops it then (nothing can be recorded
// meanwhile), not once the lock is let go; resume goes on from what was stored.
TEST_F(ResumeTest, AnInterruptEndsTheWaitForALock) {
  Write("l.toml", SlowFunctionConfig("lockint", "random", 12, 5, 60));
  pid_t pid = Start("run l.toml", "lockint.log");
  ASSERT_TRUE(WaitForAReport()) << sweep_e2e::Slurp(dir_ / "lockint.log");
  sqlite3* db = HoldWriteLock();
  ASSERT_NE(db, nullptr);
  std::this_thread::sleep_for(std::chrono::seconds(6));  // past the 5 s busy timeout
  const auto interrupted = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  const int code = Wait(pid);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - interrupted).count();
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  const std::string log = sweep_e2e::Slurp(dir_ / "lockint.log");
  EXPECT_EQ(code, 1) << log;
  EXPECT_LT(took, 8.0) << "it waited for the lock after Ctrl-C";
  EXPECT_NE(log.find("stopped waiting to write when interrupted"), std::string::npos) << log;
  EXPECT_NE(log.find("sweep resume lockint"), std::string::npos) << log;
  Output resumed = Sweep("resume lockint");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "12");
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "60");
}

// The database removed while the sweep runs: every later commit would go to a file nobody can
// open again, so the sweep stops at once and says so, rather than finishing "done" into nothing.
TEST_F(ResumeTest, ARemovedDatabaseStopsTheSweep) {
  Write("r.toml", SlowFunctionConfig("gone", "random", 40, 5, 60));
  pid_t pid = Start("run r.toml", "gone.log");
  ASSERT_TRUE(WaitForAReport()) << sweep_e2e::Slurp(dir_ / "gone.log");
  for (const char* f : {"sweeps.db", "sweeps.db-wal", "sweeps.db-shm"}) fs::remove(dir_ / f);
  const int code = Wait(pid);
  const std::string log = sweep_e2e::Slurp(dir_ / "gone.log");
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("sweeps.db: the database file was removed or renamed while this sweep wrote"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("done"), std::string::npos) << log;
}

// A sweep started with a config that a later version refuses for new sweeps (here: a varied
// momentum of 0 with nesterov, whose trials fail as they start) is still resumed and shown.
TEST_F(ResumeTest, AStoredConfigIsNotRefusedForWhatOnlyNewSweepsAre) {
  WriteTwoTinyTrainerTrials("older");
  ASSERT_EQ(Sweep("run l.toml").code, 0);
  std::string text = Query("SELECT config_text FROM sweeps")[0][0];
  text.replace(text.find("epochs = 2"), 10, "epochs = 2\nmomentum = { values = [0.0, 0.9] }");
  text.replace(text.find("[trainer]"), 9, "[trainer]\nnesterov = true");
  Write("new.toml", text);
  Output refused = Sweep("run new.toml --db fresh.db");
  ASSERT_EQ(refused.code, 2) << "a new sweep refuses it";
  EXPECT_NE(refused.err.find("nesterov: needs momentum > 0"), std::string::npos) << refused.err;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "sweeps.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "UPDATE sweeps SET config_text = ?, status = 'interrupted'", -1,
                               &stmt, nullptr),
            SQLITE_OK);
  sqlite3_bind_text(stmt, 1, text.c_str(), -1, SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  Output resumed = Sweep("resume older");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials")[0][0], "4");
  // Trials 2 and 3 are new: (lr 0.2, momentum 0) fails as it starts, as it would have then.
  EXPECT_EQ(Query("SELECT number FROM trials WHERE status = 'failed'")[0][0], "2");
  EXPECT_EQ(Sweep("report older -o r.html").code, 0);
  EXPECT_EQ(Sweep("show older 3").code, 0);
}

// The database alone removed (its write-ahead log left) while a sweep writes, then a backup put
// back in its place: the log of the removed file is set aside, not replayed into the backup
// (which it would overwrite with the removed file's pages).
TEST_F(ResumeTest, ALogLeftByARemovedDatabaseDoesNotOverwriteTheOneRestored) {
  Write("k.toml", SlowFunctionConfig("kept", "random", 6, 1, 0));
  ASSERT_EQ(Sweep("run k.toml --db backup.db").code, 0);
  Write("r.toml", SlowFunctionConfig("gone", "random", 40, 5, 60));
  pid_t pid = Start("run r.toml", "gone.log");
  ASSERT_TRUE(WaitForAReport()) << sweep_e2e::Slurp(dir_ / "gone.log");
  fs::remove(dir_ / "sweeps.db");
  EXPECT_EQ(Wait(pid), 1);
  const std::string log = sweep_e2e::Slurp(dir_ / "gone.log");
  EXPECT_NE(log.find("sweeps.db: the database file was removed or renamed while this sweep wrote "
                     "to it; nothing more is written. Its last commits, not yet in that file, "
                     "are in its write-ahead log, set aside as sweeps.db-wal.orphaned-"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("sweep resume"), std::string::npos) << "the sweep is not there to resume";
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db-wal"));
  fs::copy_file(dir_ / "backup.db", dir_ / "sweeps.db");
  json sweeps;
  ASSERT_NO_FATAL_FAILURE(sweeps = SweepJson("list --json"));
  ASSERT_EQ(sweeps.size(), 1u) << sweeps.dump();
  EXPECT_EQ(sweeps[0]["name"], "kept");
  EXPECT_EQ(Query("SELECT count(*) FROM trials")[0][0], "6");
}

// A running trainer trial's checkpoint is never ahead of the store: the coordinator killed the
// moment an epoch's checkpoint appears has committed that epoch's report. (Were it not, and the
// report not in the checkpoint, the rerun would go on from the checkpoint, and the epoch's report
// would be lost for good.) So too for a checkpoint within an epoch, written when told to stop:
// the last whole epoch's report is stored. The resumed sweep ends with every epoch reported once.
TEST_F(ResumeTest, ACheckpointIsNeverAheadOfTheStoredReports) {
  WriteTinyDataset(800, 200);
  Write("k.toml",
        "[sweep]\nname = \"ahead\"\nseed = 5\nmax_trials = 1\n[parameters]\n"
        "lr = 0.05\nepochs = 40\nbatch_size = 32\n[trainer]\ndataset = \"" +
            dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
  const fs::path ckpt = dir_ / "sweeps.db-checkpoints" / "ahead" / "trial-0.ckpt";
  // Where a checkpoint file is, in epochs (a fraction within one); its JSON header follows 8
  // bytes of magic and a length.
  auto checkpoint_epoch = [&]() -> double {
    std::ifstream in(ckpt, std::ios::binary);
    char prefix[12];
    if (!in.read(prefix, sizeof prefix)) return 0;
    uint32_t bytes = 0;
    std::memcpy(&bytes, prefix + 8, 4);
    std::string header(bytes, '\0');
    if (!in.read(header.data(), bytes)) return 0;
    const json h = json::parse(header, nullptr, false);
    const json part = h.value("partial", json::object());
    return h.value("epoch", 0) +
           (part.empty() ? 0.0
                         : part["steps"].get<double>() / part["steps_per_epoch"].get<double>());
  };
  // Waits (up to 2 s) for a checkpoint after `before`: where it is.
  auto next_checkpoint = [&](double before) {
    double seen = before;
    for (int i = 0; i < 4000 && seen <= before; ++i) {
      seen = checkpoint_epoch();
      if (seen <= before) std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    return seen;
  };
  std::string command = "run k.toml";
  for (int round = 0; round < 4; ++round) {
    double before = checkpoint_epoch();
    pid_t pid = Start(command, "run.log");
    // Rounds 2 and 3: Ctrl-C first, so the trial stops at its next step (and checkpoints it).
    if (round >= 2) {
      before = next_checkpoint(before);
      ::kill(pid, SIGINT);
    }
    const double seen = next_checkpoint(before);
    ::kill(pid, SIGKILL);
    Wait(pid);
    // Told to stop before the first step of an epoch, a trial has nothing new to checkpoint.
    // (Whether a stop lands within an epoch here, whose epochs take milliseconds, is timing:
    // AnInterruptStopsATrainerTrialWithinItsEpoch makes sure of it.)
    if (round < 2) {
      ASSERT_GT(seen, before) << sweep_e2e::Slurp(dir_ / "run.log");
    }
    // Told to stop at a report, a trial checkpoints without waiting for it to be stored (the
    // resume reports that epoch again: AReportLostBehindACheckpointComesBackOnResume). Told
    // between reports, it stops within the next epoch, past a stored report.
    const int whole = static_cast<int>(seen);
    if (round < 2 || seen != whole) {
      EXPECT_EQ(Query("SELECT count(*) FROM reports WHERE epoch = " + std::to_string(whole))[0][0],
                "1")
          << "the checkpoint holds epoch " << whole << ", the store has no report of it";
    }
    command = "resume ahead";
  }
  Output resumed = Sweep("resume ahead");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT count(*), count(DISTINCT epoch), min(epoch), max(epoch) FROM reports"),
            (std::vector<std::vector<std::string>>{{"40", "40", "1.0", "40.0"}}));
}

// A trial told to stop checkpoints its epoch without waiting to hear that the epoch's report
// was stored, so a coordinator killed in between leaves a checkpoint one report ahead of the
// store (made here by deleting that report). Going on from the checkpoint, the trial reports
// that epoch again, as it had it: no epoch is missing for good.
TEST_F(ResumeTest, AReportLostBehindACheckpointComesBackOnResume) {
  WriteTinyDataset(800, 200);
  Write("s.toml",
        "[sweep]\nname = \"lost\"\nseed = 5\nmax_trials = 1\n[parameters]\n"
        "lr = 0.05\nepochs = 30\nbatch_size = 32\n[trainer]\ndataset = \"" +
            dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
  pid_t pid = Start("run s.toml", "run.log");
  for (int i = 0; i < 2000; ++i) {
    if (fs::exists(dir_ / "sweeps.db-checkpoints" / "lost" / "trial-0.ckpt")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGINT);
  ASSERT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "run.log");
  const auto last = Query("SELECT epoch, metrics FROM reports ORDER BY epoch DESC LIMIT 1");
  ASSERT_EQ(last.size(), 1u);
  ASSERT_NE(last[0][0], "30.0") << "the trial ended before it was stopped";
  Exec("DELETE FROM reports WHERE epoch = " + last[0][0] +
       "; UPDATE trials SET epochs = epochs - 1");

  Output resumed = Sweep("resume lost");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT count(*), count(DISTINCT epoch), min(epoch), max(epoch) FROM reports"),
            (std::vector<std::vector<std::string>>{{"30", "30", "1.0", "30.0"}}));
  EXPECT_EQ(Query("SELECT metrics FROM reports WHERE epoch = " + last[0][0]),
            (std::vector<std::vector<std::string>>{{last[0][1]}}));
}

// A trainer trial that early stopping pruned, its coordinator killed after the rung report was
// stored but before the trial ended (its test set not yet measured): resume runs it again only
// to measure test_acc at the epoch it was pruned at, and ends it pruned, as an uninterrupted run
// did. From its checkpoint (at that epoch), and without one (trained again up to there).
TEST_F(ResumeTest, APrunedTrainerTrialCaughtByAKillGetsItsTestAccOnResume) {
  WriteTinyDataset(800, 200);
  Write("a.toml",
        "[sweep]\nname = \"prune\"\nseed = 5\nmax_trials = 6\nmax_concurrent = 1\n"
        "metric = \"val_loss\"\nmode = \"min\"\n"
        "[early_stopping]\nalgorithm = \"asha\"\nreduction_factor = 2\n[parameters]\n"
        "lr = { distribution = \"log_uniform\", min = 0.0005, max = 0.5 }\nepochs = 4\n"
        "batch_size = 32\n[trainer]\ndataset = \"" +
            dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
  ASSERT_EQ(Sweep("run a.toml").code, 0);
  const std::string row =
      "SELECT number, status, error, epochs, json_extract(metrics, '$.test_acc') FROM trials "
      "WHERE status = 'pruned' ORDER BY number LIMIT 1";
  const auto pruned = Query(row);
  ASSERT_EQ(pruned.size(), 1u) << "no trial was pruned";
  ASSERT_NE(pruned[0][4], "NULL");
  const std::string n = pruned[0][0];
  for (bool with_checkpoint : {true, false}) {
    // Back to the moment of the kill: the trial running, its reports stored, no test_acc.
    Exec(
        "UPDATE sweeps SET status = 'running', ended = NULL;"
        "UPDATE trials SET status = 'running', ended = NULL, error = '', metrics = "
        "json_remove(metrics, '$.test_acc') WHERE number = " +
        n +
        ";"
        "DELETE FROM events WHERE (trial IS NULL AND to_state = 'completed') OR (trial = " +
        n + " AND to_state = 'pruned');");
    if (!with_checkpoint) {
      ASSERT_TRUE(fs::remove(dir_ / "sweeps.db-checkpoints" / "prune" / ("trial-" + n + ".ckpt")));
    }
    Output resumed = Sweep("resume prune");
    EXPECT_EQ(resumed.code, 0) << resumed.err;
    EXPECT_EQ(Query(row), pruned) << (with_checkpoint ? "from its checkpoint" : "from the start");
    EXPECT_EQ(Query("SELECT group_concat(to_state) FROM (SELECT to_state FROM events WHERE trial "
                    "= " +
                    n + " ORDER BY id DESC LIMIT 3)")[0][0],
              "pruned,running,interrupted");
  }
}

// A trial's own checkpoint damaged while the sweep was stopped: the resumed trial is neither
// failed for good (nothing would run it again) nor stopped with its machine: it says so, deletes
// the file and trains from the start, and ends with every epoch reported once (of `epochs`).
// `early_stopping` is a table for the config, `ended` what the trial's note says before that.
// `grown`: the training set gains samples instead, and the checkpoint is refused for that.
class DamagedCheckpointTest : public ResumeTest {
 protected:
  void TrainsFromTheStart(const std::string& early_stopping, int epochs, const std::string& ended,
                          bool grown = false);
};

void DamagedCheckpointTest::TrainsFromTheStart(const std::string& early_stopping, int epochs,
                                               const std::string& ended, bool grown) {
  WriteTinyDataset(800, 200);
  Write("d.toml",
        "[sweep]\nname = \"dmg\"\nseed = 5\nmax_trials = 1\n[parameters]\n"
        "lr = 0.05\nepochs = 30\nbatch_size = 32\n[trainer]\ndataset = \"" +
            dir_.string() + "\"\n[executor]\ncpu_slots = 1\n" + early_stopping);
  const fs::path ckpt = dir_ / "sweeps.db-checkpoints" / "dmg" / "trial-0.ckpt";
  pid_t pid = Start("run d.toml", "run.log");
  for (int i = 0; i < 2000 && !fs::exists(ckpt); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGINT);
  ASSERT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "run.log");
  ASSERT_EQ(Query("SELECT status FROM trials")[0][0], "interrupted");
  const auto before = Query("SELECT step, metrics FROM reports ORDER BY step");
  if (grown) {
    WriteTinyDataset(804, 200);
  } else {
    fs::resize_file(ckpt, fs::file_size(ckpt) - 10);
  }

  Output resumed = Sweep("resume dmg");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const std::string path =
      (fs::canonical(dir_) / "sweeps.db-checkpoints/dmg/trial-0.ckpt").string();
  std::string note = ended + path +
                     ": checkpoint checksum mismatch (the file is damaged or cut short); deleted "
                     "it and trained the trial from the start";
  if (grown) {
    // Its advice to delete the file is not repeated: the sweep did.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        resumed.err, m,
        std::regex(path + ": checkpoint is (at|within) epoch [0-9]+ of a training set of 800 "
                          "samples[^;]*, and [^;]* has 804[^;]*; deleted it and trained the "
                          "trial from the start")))
        << resumed.err;
    note = m[0].str();
  }
  EXPECT_NE(resumed.err.find("trial 0 completed val_acc="), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find(note), std::string::npos) << resumed.err;
  EXPECT_EQ(Query("SELECT status, retries FROM trials"),
            (std::vector<std::vector<std::string>>{{"completed", "0"}}));
  const std::string error = Query("SELECT error FROM trials")[0][0];
  EXPECT_EQ(error.size() - note.size(), error.find(note)) << error;
  const std::string e = std::to_string(epochs);
  EXPECT_EQ(Query("SELECT count(*), count(DISTINCT epoch), min(epoch), max(epoch) FROM reports"),
            (std::vector<std::vector<std::string>>{{e, e, "1.0", e + ".0"}}));
  // The reports it had are kept as they were.
  const auto after = Query("SELECT step, metrics FROM reports ORDER BY step");
  ASSERT_GE(after.size(), before.size());
  EXPECT_EQ(std::vector<std::vector<std::string>>(after.begin(), after.begin() + before.size()),
            before);
}

TEST_F(DamagedCheckpointTest, ATrialWithADamagedCheckpointTrainsFromTheStart) {
  TrainsFromTheStart("", 30, "");
}

TEST_F(DamagedCheckpointTest, ATrialWhoseTrainingSetGrewTrainsFromTheStart) {
  TrainsFromTheStart("", 30, "", /*grown=*/true);
}

// The note stays when something else ends the run too: here, ASHA stops it at max_resource.
TEST_F(DamagedCheckpointTest, TheNoteStaysWithATrialStoppedAtMaxResource) {
  TrainsFromTheStart("[early_stopping]\nalgorithm = \"asha\"\nmax_resource = 20\n", 20,
                     "ran to early_stopping.max_resource = 20; ");
}

TEST_F(ResumeTest, KilledWorkerTrialRunsAgain) {
  Write("w.toml", SlowFunctionConfig("workers", "random", 4, 10, 60));
  pid_t pid = Start("run w.toml", "run.log");
  std::vector<pid_t> workers = WaitForWorkers(pid);
  ASSERT_FALSE(workers.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(workers[0], SIGKILL);
  ASSERT_EQ(Wait(pid), 0) << sweep_e2e::Slurp(dir_ / "run.log");
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "4");
  auto retried = Query("SELECT number FROM trials WHERE retries = 1");
  ASSERT_EQ(retried.size(), 1u);
  auto events = Query("SELECT detail FROM events WHERE trial = " + retried[0][0] +
                      " AND to_state = 'interrupted'");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0][0].find("killed by signal 9"), std::string::npos) << events[0][0];
  EXPECT_NE(events[0][0].find("running it again (retry 1 of 1)"), std::string::npos);
  // `show` tells that history: the first run, its end, the second run.
  Output show = Sweep("show workers " + retried[0][0]);
  ASSERT_EQ(show.code, 0) << show.err;
  const size_t history = show.out.find("  history ");
  ASSERT_NE(history, std::string::npos) << show.out;
  EXPECT_NE(show.out.find("running -> interrupted: ", history), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("interrupted -> running", history), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("running -> completed", history), std::string::npos) << show.out;
  json shown;
  ASSERT_NO_FATAL_FAILURE(shown = SweepJson("show workers " + retried[0][0] + " --json"));
  ASSERT_EQ(shown["history"].size(), 4u) << shown["history"].dump();
  EXPECT_EQ(shown["history"][1]["to"], "interrupted");
  EXPECT_NE(shown["history"][1]["detail"].get<std::string>().find("killed by signal 9"),
            std::string::npos);
}

TEST_F(ResumeTest, HungWorkerIsKilledAndItsTrialRunsAgain) {
  Write("h.toml", SlowFunctionConfig("hung", "random", 3, 10, 80, "heartbeat_timeout = \"2s\"\n"));
  pid_t pid = Start("run h.toml", "run.log");
  std::vector<pid_t> workers = WaitForWorkers(pid);
  ASSERT_FALSE(workers.empty());
  ::kill(workers[0], SIGSTOP);  // alive, but silent
  ASSERT_EQ(Wait(pid), 0) << sweep_e2e::Slurp(dir_ / "run.log");
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "3");
  auto events = Query("SELECT detail FROM events WHERE to_state = 'interrupted'");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0][0].find("sent no heartbeat for 2 s and was killed"), std::string::npos)
      << events[0][0];
}

TEST_F(ResumeTest, WorkerThatKeepsDyingFailsAfterItsRetries) {
  Write("d.toml", SlowFunctionConfig("dying", "random", 5, 2, 1, "max_retries = 2\n"));
  Output run = Sweep("run d.toml", "SWEEP_TEST_ABORT_TRIAL=2");
  ASSERT_EQ(run.code, 0) << run.err;
  auto failed = Query("SELECT number, retries, error FROM trials WHERE status = 'failed'");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0][0], "2");
  EXPECT_EQ(failed[0][1], "2");
  EXPECT_NE(failed[0][2].find("(after 2 retries)"), std::string::npos) << failed[0][2];
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "4");
}

TEST_F(ResumeTest, ReadersDuringARunNeverSeeALockedDatabase) {
  Write("r.toml", SlowFunctionConfig("busy", "random", 8000, 3, 0));
  // The same sweep alone, for the coordinator's time without readers.
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Sweep("run r.toml --db alone.db").code, 0);
  double alone_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  t0 = std::chrono::steady_clock::now();
  pid_t pid = Start("run r.toml", "run.log");
  int queries = 0, failures = 0;
  double worst_ms = 0;
  std::string first_error;
  const char* commands[] = {"status busy --json", "best busy --top 3 --json",
                            "trials busy --status running --json", "list --json"};
  std::atomic<bool> running{true};
  std::mutex mu;  // the tallies above
  // Two readers at once, as fast as they can go, until the run ends.
  auto reader = [&](int offset) {
    for (int i = offset; running; i += 2) {
      auto q0 = std::chrono::steady_clock::now();
      std::string out = (dir_ / ("reader" + std::to_string(offset) + ".txt")).string();
      std::string cmd = "cd '" + dir_.string() + "' && '" SWEEP_BINARY "' " + commands[i % 4] +
                        " > /dev/null 2> '" + out + "'";
      int rc = std::system(cmd.c_str());
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - q0).count();
      std::string err = sweep_e2e::Slurp(out);
      std::lock_guard lock(mu);
      worst_ms = std::max(worst_ms, ms);
      ++queries;
      // In the first instants the file or the sweep may not exist yet; anything else fails.
      if (rc != 0 && err.find("no sweep named") == std::string::npos &&
          err.find("no sweep recorded yet") == std::string::npos &&
          err.find("no such database") == std::string::npos) {
        ++failures;
        if (first_error.empty()) first_error = err;
      }
    }
  };
  std::thread r0(reader, 0), r1(reader, 1);
  int rc = Wait(pid);
  double with_readers_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  running = false;
  r0.join();
  r1.join();
  ASSERT_EQ(rc, 0) << sweep_e2e::Slurp(dir_ / "run.log");
  EXPECT_EQ(failures, 0) << first_error;
  EXPECT_GT(queries, 10);
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "8000");
  // A reader never waits for the sweep's writes (WAL): each command is a process start and a
  // query. Seconds would mean it waited on a lock.
  EXPECT_LT(worst_ms, 5000.0);
  std::printf(
      "[ readers  ] 8000 trials: %.2f s alone, %.2f s with 2 readers; %d reader "
      "commands, worst %.0f ms, %d failed\n",
      alone_s, with_readers_s, queries, worst_ms, failures);
}

}  // namespace

// `resume --max-trials` continues a completed sweep: the sampler goes on where it stopped and
// early stopping's rungs hold the earlier trials, so the extended sweep is the one a larger
// budget would have run from the start (one trial at a time, so that the order is the same);
// the new budget is kept for later resumes; a budget that leaves nothing to run is refused.
TEST_F(ResumeTest, AResumeWithALargerBudgetContinuesACompletedSweep) {
  const std::string asha =
      "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 1\nmax_resource = 9\n"
      "reduction_factor = 3\n";
  const std::string one_at_a_time = "max_concurrent = 1\nseed = 5\n";
  Write("short.toml", sweep_e2e::BraninConfig("grown", 6, one_at_a_time, "steps = 9\n", asha));
  Write("long.toml", sweep_e2e::BraninConfig("whole", 14, one_at_a_time, "steps = 9\n", asha));
  ASSERT_EQ(Sweep("run short.toml").code, 0);
  ASSERT_EQ(Sweep("run long.toml").code, 0);

  Output done = Sweep("resume grown");
  EXPECT_EQ(done.code, 0) << done.err;
  EXPECT_NE(done.err.find("To continue it with a larger budget: `sweep resume grown --max-trials "
                          "+10`"),
            std::string::npos)
      << done.err;
  Output same = Sweep("resume grown --max-trials 6");
  EXPECT_EQ(same.code, 2);
  EXPECT_NE(same.err.find("--max-trials 6: sweep 'grown' has started 6 trial(s) already"),
            std::string::npos)
      << same.err;
  for (const char* bad : {"--max-trials ten", "--max-trials +0", "--time-budget soon"}) {
    EXPECT_EQ(Sweep(std::string("resume grown ") + bad).code, 2) << bad;
  }

  Output grown = Sweep("resume grown --max-trials 10");
  ASSERT_EQ(grown.code, 0) << grown.err;
  EXPECT_NE(grown.err.find("max_trials 6 -> 10"), std::string::npos) << grown.err;
  Output more = Sweep("resume grown --max-trials +4");
  ASSERT_EQ(more.code, 0) << more.err;
  EXPECT_NE(more.err.find("max_trials 10 -> 14"), std::string::npos) << more.err;
  const std::string by_number =
      "SELECT t.number, t.params, t.status, t.objective FROM trials t JOIN sweeps s ON "
      "s.id = t.sweep_id WHERE s.name = '";
  auto grown_rows = Query(by_number + "grown' ORDER BY t.number");
  auto whole_rows = Query(by_number + "whole' ORDER BY t.number");
  ASSERT_EQ(grown_rows.size(), 14u);
  EXPECT_EQ(grown_rows, whole_rows);
  // Early stopping judged the new trials against the first six: some were pruned.
  EXPECT_NE(Query("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE "
                  "s.name = 'grown' AND t.status = 'pruned' AND t.number >= 6")[0][0],
            "0");
  EXPECT_EQ(Query("SELECT max_trials, status FROM sweeps WHERE name = 'grown'")[0],
            (std::vector<std::string>{"14", "completed"}));
  auto events = Query(
      "SELECT detail FROM events e JOIN sweeps s ON s.id = e.sweep_id WHERE s.name = 'grown' AND "
      "e.trial IS NULL AND e.to_state = 'running' AND e.detail LIKE 'resumed by%' ORDER BY e.id");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_NE(events[1][0].find("; max_trials 10 -> 14"), std::string::npos) << events[1][0];

  // A grid that has run all its points gains nothing from a larger budget.
  Write("grid.toml",
        "[sweep]\nname = \"g\"\n[search]\nalgorithm = \"grid\"\n[trial]\nkind = \"function\"\n"
        "[function]\nname = \"branin\"\n[parameters]\nx1 = { values = [0, 1] }\nx2 = 2\n");
  ASSERT_EQ(Sweep("run grid.toml").code, 0);
  Output grid = Sweep("resume g --max-trials +5");
  EXPECT_EQ(grid.code, 2);
  EXPECT_NE(grid.err.find("sweep 'g' has run all 2 points of its grid search; a larger budget "
                          "adds none"),
            std::string::npos)
      << grid.err;
  // And a plain resume of it does not suggest one.
  Output plain = Sweep("resume g");
  EXPECT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.err.find("nothing to resume. A larger budget would not continue it: sweep 'g' "
                           "has run all 2 points"),
            std::string::npos)
      << plain.err;
  EXPECT_EQ(plain.err.find("--max-trials +10"), std::string::npos) << plain.err;

  // A time budget is the total running time: it must exceed what the sweep has run.
  Write("timed.toml",
        sweep_e2e::BraninConfig("timed", 100000, "time_budget = \"1s\"\nmax_concurrent = 1\n",
                                "steps = 5\nstep_ms = 20\n"));
  ASSERT_EQ(Sweep("run timed.toml").code, 0);
  const int64_t before =
      std::stoll(Query("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = "
                       "t.sweep_id WHERE s.name = 'timed'")[0][0]);
  Output spent = Sweep("resume timed --max-trials +100");
  EXPECT_EQ(spent.code, 2);
  EXPECT_NE(spent.err.find("sweep 'timed' spent its time budget of 1s; give a larger "
                           "--time-budget"),
            std::string::npos)
      << spent.err;
  Output less = Sweep("resume timed --time-budget 0.5s");
  EXPECT_EQ(less.code, 2);
  EXPECT_NE(less.err.find("--time-budget 0.5s: sweep 'timed' has run for 1"), std::string::npos)
      << less.err;
  Output longer = Sweep("resume timed --time-budget +1s");
  ASSERT_EQ(longer.code, 0) << longer.err;
  EXPECT_TRUE(std::regex_search(longer.err, std::regex("time_budget 1s -> 2(\\.[0-9]+)?s")))
      << longer.err;
  EXPECT_GT(std::stoll(Query("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                             "WHERE s.name = 'timed'")[0][0]),
            before);
  EXPECT_GE(std::stod(Query("SELECT active_s FROM sweeps WHERE name = 'timed'")[0][0]), 2.0);
}

// A sweep that met its stop_when target would end at once: extending it is refused, with the
// way to go on.
TEST_F(ResumeTest, AResumeWithALargerBudgetRefusesASweepThatMetItsTarget) {
  Write("s.toml", sweep_e2e::BraninConfig("met", 200, "stop_when = \"value <= 30\"\nseed = 3\n",
                                          "steps = 5\n"));
  ASSERT_EQ(Sweep("run s.toml").code, 0);
  Output more = Sweep("resume met --max-trials +10");
  EXPECT_EQ(more.code, 2);
  EXPECT_NE(more.err.find("sweep 'met' met its target value <= 30"), std::string::npos) << more.err;
  EXPECT_NE(more.err.find("sweep run CONFIG --from met"), std::string::npos) << more.err;
}

// `run --from`: a fixed config starts from the earlier sweep's trials that are points of its
// space. They are copied (with their reports, and an event saying where each came from), early
// stopping's rungs hold them, max_trials counts only the new trials, and what stayed behind is
// said with a reason.
TEST_F(ResumeTest, ARunFromAnEarlierSweepCarriesItsTrialsOver) {
  Write("first.toml", LadderConfig("first", 12, "asha"));
  ASSERT_EQ(Sweep("run first.toml").code, 0);
  // The fix: x1 narrowed to [0, 10].
  const std::string fixed = LadderConfig("fixed", 6, "asha", /*narrow=*/true);
  Write("fixed.toml", fixed);

  Output nosuch = Sweep("run fixed.toml --from frist");
  EXPECT_EQ(nosuch.code, 2);
  EXPECT_NE(nosuch.err.find("no sweep named 'frist'"), std::string::npos) << nosuch.err;
  EXPECT_NE(nosuch.err.find("first"), std::string::npos) << nosuch.err;  // did you mean
  // Refused before the new sweep's folders are made: none is left behind.
  Write("cmd.toml",
        "[sweep]\nname = \"cmdfrom\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
        "[parameters]\n"
        "x = 1\n[trial]\nkind = \"command\"\ncommand = [\"/bin/true\"]\n");
  EXPECT_EQ(Sweep("run cmd.toml --from frist").code, 2);
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db-trials" / "cmdfrom"));
  Output own = Sweep("run first.toml --name again --from again");
  EXPECT_EQ(own.code, 2);
  EXPECT_NE(own.err.find("--from again: that is the new sweep's own name"), std::string::npos)
      << own.err;
  EXPECT_EQ(Query("SELECT count(*) FROM sweeps")[0][0], "1");  // refused before recording
  Output no_db = Sweep("run fixed.toml --db other.db --from first");
  EXPECT_EQ(no_db.code, 2);
  EXPECT_FALSE(fs::exists(dir_ / "other.db"));

  Output run = Sweep("run fixed.toml --from first");
  ASSERT_EQ(run.code, 0) << run.err;
  auto inside = Query(
      "SELECT t.number, t.params, t.status FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
      "WHERE s.name = 'first' AND t.status IN ('completed', 'pruned') AND "
      "json_extract(t.params, '$.x1') >= 0 ORDER BY t.number");
  const size_t carried = inside.size();
  ASSERT_GT(carried, 0u);
  ASSERT_LT(carried, 12u) << "every trial of 'first' lies in the fixed space; the test needs some "
                             "outside";
  EXPECT_NE(
      run.err.find("carried over " + std::to_string(carried) + " of 12 trial(s) from 'first'"),
      std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("outside this space (trial "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(" is below its min 0)"), std::string::npos) << run.err;

  auto fixed_rows = Query(
      "SELECT t.number, t.params, t.status, (SELECT count(*) FROM reports r WHERE r.sweep_id = "
      "t.sweep_id AND r.trial = t.number) FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE "
      "s.name = 'fixed' ORDER BY t.number");
  ASSERT_EQ(fixed_rows.size(), carried + 6);  // max_trials counts the new trials only
  for (size_t i = 0; i < carried; ++i) {
    EXPECT_EQ(fixed_rows[i][0], std::to_string(i));
    EXPECT_EQ(fixed_rows[i][1], inside[i][1]);
    EXPECT_EQ(fixed_rows[i][2], inside[i][2]);
    const auto detail = Query(
        "SELECT e.detail FROM events e JOIN sweeps s ON s.id = e.sweep_id WHERE s.name = 'fixed' "
        "AND e.trial = " +
        std::to_string(i));
    ASSERT_EQ(detail.size(), 1u);
    EXPECT_EQ(detail[0][0], "carried over from sweep 'first' trial " + inside[i][0]);
  }
  Output show = Sweep("show fixed 0");
  EXPECT_NE(show.out.find("completed: carried over from sweep 'first'"), std::string::npos)
      << show.out;
  // A budget below the new trials started is refused, saying the carried ones do not count.
  Output fewer = Sweep("resume fixed --max-trials 5");
  EXPECT_EQ(fewer.code, 2);
  EXPECT_NE(
      fewer.err.find("--max-trials 5: sweep 'fixed' has started 6 trial(s) already "
                     "(besides the " +
                     std::to_string(carried) + " carried over, which max_trials does not count)"),
      std::string::npos)
      << fewer.err;
  // The new trials are drawn from the fixed space, after the earlier sweep's draws.
  std::set<std::string> earlier;
  for (auto& row : Query("SELECT t.params FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                         "WHERE s.name = 'first'")) {
    earlier.insert(row[0]);
  }
  for (size_t i = carried; i < fixed_rows.size(); ++i) {
    EXPECT_GE(json::parse(fixed_rows[i][1])["x1"].get<double>(), 0.0);
    EXPECT_FALSE(earlier.contains(fixed_rows[i][1])) << fixed_rows[i][1];
  }
  // So are TPE's startup trials: no new trial takes an earlier one's draw of x2.
  std::set<double> earlier_x2;
  for (const std::string& p : earlier) earlier_x2.insert(json::parse(p)["x2"].get<double>());
  Write("tpe.toml", fixed.substr(0, fixed.find("[trial]"))
                            .replace(fixed.find("name = \"fixed\""), 14, "name = \"tpefix\"") +
                        "[search]\nalgorithm = \"tpe\"\nn_startup_trials = " +
                        std::to_string(carried + 5) + "\n" + fixed.substr(fixed.find("[trial]")));
  Output tpe = Sweep("run tpe.toml --from first");
  ASSERT_EQ(tpe.code, 0) << tpe.err;
  auto tpe_rows = Query(
      "SELECT json_extract(t.params, '$.x2') FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
      "WHERE s.name = 'tpefix' AND t.number >= " +
      std::to_string(carried) + " AND t.number < " + std::to_string(carried + 5));
  ASSERT_EQ(tpe_rows.size(), 5u);  // the startup trials
  for (const auto& row : tpe_rows) {
    // SQLite gives 15 digits: the same draw is within 1e-9.
    const double x2 = std::stod(row[0]);
    EXPECT_TRUE(std::none_of(earlier_x2.begin(), earlier_x2.end(), [&](double e) {
      return std::abs(e - x2) < 1e-9;
    })) << row[0];
  }
  // Early stopping judged the new trials among the carried ones: at the first rung, one at a
  // time, trial n met n + 1 trials there (itself, every earlier one, carried or new).
  static const std::regex kRung0(
      "pruned at rung 0 \\(resource 1\\): value [^ ]+ not in the top "
      "1/3 of ([0-9]+) trials");
  int checked = 0;
  for (auto& row : Query("SELECT t.number, t.error FROM trials t JOIN sweeps s ON s.id = "
                         "t.sweep_id WHERE s.name = 'fixed' AND t.status = 'pruned' AND t.number "
                         ">= " +
                         std::to_string(carried))) {
    std::smatch m;
    if (!std::regex_search(row[1], m, kRung0)) continue;
    EXPECT_EQ(std::stoll(m[1]), std::stoll(row[0]) + 1) << row[1];
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no new trial was pruned at the first rung";

  // A grid skips the points carried over: only the new value of x1 runs.
  Write("grid.toml",
        "[sweep]\nname = \"g1\"\n[search]\nalgorithm = \"grid\"\n[trial]\nkind = \"function\"\n"
        "[function]\nname = \"branin\"\n[parameters]\nx1 = { values = [0, 1, 2] }\n"
        "x2 = { values = [1, 2] }\n");
  ASSERT_EQ(Sweep("run grid.toml").code, 0);
  Write("grid2.toml",
        "[sweep]\nname = \"g2\"\n[search]\nalgorithm = \"grid\"\n[trial]\nkind = \"function\"\n"
        "[function]\nname = \"branin\"\n[parameters]\nx1 = { values = [0, 1, 2, 3] }\n"
        "x2 = { values = [1, 2] }\n");
  Output grid = Sweep("run grid2.toml --from g1");
  ASSERT_EQ(grid.code, 0) << grid.err;
  EXPECT_NE(grid.err.find("carried over 6 of 6 trial(s) from 'g1' (6 completed, 0 pruned)"),
            std::string::npos)
      << grid.err;
  auto g2 = Query(
      "SELECT json_extract(t.params, '$.x1') FROM trials t JOIN sweeps s ON s.id = "
      "t.sweep_id WHERE s.name = 'g2' AND t.number >= 6");
  EXPECT_EQ(g2, (std::vector<std::vector<std::string>>{{"3"}, {"3"}}));
  EXPECT_EQ(Query("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE "
                  "s.name = 'g2'")[0][0],
            "8");
  // Its points are the same written as floats, or drawn by a stepped range.
  Write("grid3.toml",
        "[sweep]\nname = \"g3\"\n[search]\nalgorithm = \"grid\"\n[trial]\nkind = \"function\"\n"
        "[function]\nname = \"branin\"\n[parameters]\nx1 = { values = [0.0, 1.0, 2.0, 3.0] }\n"
        "x2 = { distribution = \"uniform\", min = 1, max = 2, step = 1 }\n");
  Output floats = Sweep("run grid3.toml --from g1");
  ASSERT_EQ(floats.code, 0) << floats.err;
  EXPECT_NE(floats.err.find("carried over 6 of 6 trial(s) from 'g1'"), std::string::npos)
      << floats.err;
  EXPECT_EQ(Query("SELECT json_extract(t.params, '$.x1') FROM trials t JOIN sweeps s ON s.id = "
                  "t.sweep_id WHERE s.name = 'g3' AND t.number >= 6"),
            (std::vector<std::vector<std::string>>{{"3.0"}, {"3.0"}}));
}

// Results that would not compare stay behind: trials of another length (their last step is not
// this sweep's, nor are their rungs), and no trial of a sweep ranked in the other mode or of
// another function is carried over.
TEST_F(ResumeTest, ARunFromCarriesOnlyTrialsThatRanThisSweepsTrial) {
  Write("nine.toml",
        sweep_e2e::BraninConfig("nine", 6, "max_concurrent = 1\nseed = 4\n", "steps = 9\n"));
  ASSERT_EQ(Sweep("run nine.toml").code, 0);
  Write("three.toml",
        sweep_e2e::BraninConfig("three", 2, "max_concurrent = 1\nseed = 4\n", "steps = 3\n"));
  Output three = Sweep("run three.toml --from nine");
  ASSERT_EQ(three.code, 0) << three.err;
  EXPECT_NE(three.err.find("carried over 0 of 6 trial(s) from 'nine'; not carried: 6 of another "
                           "length (trial 0 ran 9 steps, this config's run 3)"),
            std::string::npos)
      << three.err;
  std::string max = sweep_e2e::BraninConfig("max", 2, "metric = \"value\"\nmode = \"max\"\n");
  Write("max.toml", max);
  Output flipped = Sweep("run max.toml --from nine");
  EXPECT_EQ(flipped.code, 2);
  EXPECT_NE(flipped.err.find("--from nine: its trials were ranked with mode = \"min\" on "
                             "'value', this config's with \"max\""),
            std::string::npos)
      << flipped.err;
  std::string sphere = sweep_e2e::BraninConfig("sphere", 2, "", "steps = 9\n");
  sphere.replace(sphere.find("\"branin\""), 8, "\"sphere\"");
  Write("sphere.toml", sphere);
  Output other = Sweep("run sphere.toml --from nine");
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("--from nine: its trials evaluated branin, this config's sphere"),
            std::string::npos)
      << other.err;
  // TPE counts the carried trials among its startup trials: 6 carried and 2 new make 8.
  auto tpe = [](const std::string& name, int startup) {
    return sweep_e2e::BraninConfig(
        name, 2, "max_concurrent = 1\nseed = 4\n", "steps = 9\n",
        "[search]\nalgorithm = \"tpe\"\nn_startup_trials = " + std::to_string(startup) + "\n");
  };
  Write("tpe.toml", tpe("tpe", 7));
  EXPECT_EQ(Sweep("run tpe.toml").code, 2);  // alone, no trial would be TPE's
  // A dry run draws the startup trials as the run does, and does not guess TPE's.
  Output dry = Sweep("run tpe.toml --from nine --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_TRUE(std::regex_search(dry.out, std::regex("\ntrial 6 on local:cpu0: \\{\"x1\"")))
      << dry.out;
  Write("tpe6.toml", tpe("tpe6", 6));
  dry = Sweep("run tpe6.toml --from nine --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(dry.out.find("\ntrial 6 on local:cpu0: proposed by TPE from the results of the "
                         "trials before it\n"),
            std::string::npos)
      << dry.out;
  Output from = Sweep("run tpe.toml --from nine");
  ASSERT_EQ(from.code, 0) << from.err;
  EXPECT_EQ(Query("SELECT count(*) FROM events e JOIN sweeps s ON s.id = e.sweep_id WHERE "
                  "s.name = 'tpe' AND e.detail LIKE '%proposed by tpe%'")[0][0],
            "1");
  // Its config again with --resume (as a Kubernetes coordinator restarts) counts them too; a new
  // sweep started so, with nothing carried, is refused as a plain run is.
  Output again = Sweep("run tpe.toml --resume");
  EXPECT_EQ(again.code, 0) << again.err;
  Write("tpe7.toml", tpe("tpe7", 7));
  Output fresh = Sweep("run tpe7.toml --resume");
  EXPECT_EQ(fresh.code, 2);
  EXPECT_NE(
      fresh.err.find("tpe7.toml:16:20: search.n_startup_trials: 7 random trials before TPE, and "
                     "max_trials is 2: no trial would be proposed by TPE"),
      std::string::npos)
      << fresh.err;
  // A survivor stops at early stopping's max_resource: the trials of a sweep that ran to 9
  // steps are not this one's, which run to 3.
  Write("cap.toml",
        sweep_e2e::BraninConfig("cap", 2, "max_concurrent = 1\nseed = 4\n", "steps = 9\n",
                                "[early_stopping]\nalgorithm = \"asha\"\nmax_resource = 3\n"));
  Output cap = Sweep("run cap.toml --from nine");
  ASSERT_EQ(cap.code, 0) << cap.err;
  EXPECT_NE(cap.err.find("not carried: 6 of another length (trial 0 ran 9 steps, this config's "
                         "run 3)"),
            std::string::npos)
      << cap.err;
  Write("tpe8.toml", tpe("tpe8", 8));
  Output none = Sweep("run tpe8.toml --from nine");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(
      none.err.find("tpe8.toml:16:20: search.n_startup_trials: 8 random trials before TPE, and "
                    "max_trials is 2 with 6 carried over: no trial would be proposed by "
                    "TPE"),
      std::string::npos)
      << none.err;
}

// A trial is carried over only to a config that would train it the same: a value moved between
// [trainer] and [parameters] still carries, another optimizer, dataset or command does not.
TEST_F(ResumeTest, ARunFromCarriesATrialOnlyToTheSameSettings) {
  WriteTwoTinyTrainerTrials("tiny");  // lr 0.05 and 0.2; epochs and batch_size as parameters
  ASSERT_EQ(Sweep("run l.toml").code, 0);
  auto trainer = [&](const std::string& name, const std::string& parameters,
                     const std::string& fixed, const std::string& dataset) {
    return "[sweep]\nname = \"" + name + "\"\nseed = 5\n[search]\nalgorithm = \"grid\"\n" +
           "[parameters]\n" + parameters + "[trainer]\ndataset = \"" + dataset + "\"\n" + fixed +
           "[executor]\ncpu_slots = 1\n";
  };
  const std::string lr = "lr = { values = [0.05, 0.2] }\n";
  // epochs and batch_size fixed in [trainer] now, epochs varied again: the trials carry, as
  // points of the new space.
  Write("moved.toml", trainer("moved", lr + "epochs = { values = [2, 3] }\n", "batch_size = 32\n",
                              dir_.string()));
  // A dry run reads the trials as the run will: it numbers the new ones after them, and its
  // grid skips their points.
  Output dry = Sweep("run moved.toml --from tiny --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(dry.out.find("check out; carried over 2 of 2 trial(s) from 'tiny' (2 completed, 0 "
                         "pruned); the first 1 trial(s) it would start:\ntrial 2 on local:"),
            std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find(": {\"epochs\":3,\"lr\":0.05}\n"), std::string::npos) << dry.out;
  Output typo = Sweep("run moved.toml --from tinny --dry-run");
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.err.find("no sweep named 'tinny'"), std::string::npos) << typo.err;
  Output moved = Sweep("run moved.toml --from tiny");
  ASSERT_EQ(moved.code, 0) << moved.err;
  EXPECT_NE(moved.err.find("carried over 2 of 2 trial(s) from 'tiny' (2 completed, 0 pruned)"),
            std::string::npos)
      << moved.err;
  const std::vector<std::string> carried = SweepParams("moved");
  ASSERT_EQ(carried.size(), 4u);  // the grid's 2 others ran
  EXPECT_EQ(json::parse(carried[0]), json::parse(R"({"epochs": 2, "lr": 0.05})"));
  EXPECT_EQ(json::parse(carried[1]), json::parse(R"({"epochs": 2, "lr": 0.2})"));
  EXPECT_EQ(json::parse(carried[2])["epochs"], 3);
  EXPECT_EQ(json::parse(carried[3])["epochs"], 3);

  const std::string same = "epochs = 2\nbatch_size = 32\n";
  Write("adamw.toml", trainer("adamw", lr, same + "optimizer = \"adamw\"\n", dir_.string()));
  Output adamw = Sweep("run adamw.toml --from tiny --dry-run");
  ASSERT_EQ(adamw.code, 0) << adamw.err;
  adamw = Sweep("run adamw.toml --from tiny");
  ASSERT_EQ(adamw.code, 0) << adamw.err;
  EXPECT_NE(adamw.err.find("carried over 0 of 2 trial(s) from 'tiny'; not carried: 2 run with "
                           "other settings (trial 0 ran with optimizer = \"sgd\", this config's "
                           "\"adamw\")"),
            std::string::npos)
      << adamw.err;
  // Its trials trained with seeds of their own (it fixes none): another sweep seed carries them,
  // a fixed seed only what trained with it.
  std::string reseeded = trainer("reseeded", lr, same, dir_.string());
  reseeded.replace(reseeded.find("seed = 5"), 8, "seed = 6");
  Write("reseeded.toml", reseeded);
  Output again = Sweep("run reseeded.toml --from tiny");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("carried over 2 of 2 trial(s) from 'tiny'"), std::string::npos)
      << again.err;
  Write("seeded.toml", trainer("seeded", lr, same + "seed = 0\n", dir_.string()));
  Output seeded = Sweep("run seeded.toml --from tiny");
  ASSERT_EQ(seeded.code, 0) << seeded.err;
  EXPECT_TRUE(std::regex_search(
      seeded.err, std::regex("not carried: 2 run with other settings \\(trial 0 ran with seed = "
                             "[1-9][0-9]*, this config's 0\\)")))
      << seeded.err;
  // The same files under another folder are another dataset: they may differ.
  fs::create_directories(dir_ / "copy");
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    fs::copy_file(dir_ / f, dir_ / "copy" / f);
  }
  Write("copy.toml", trainer("copy", lr, same, (dir_ / "copy").string()));
  Output copy = Sweep("run copy.toml --from tiny");
  ASSERT_EQ(copy.code, 0) << copy.err;
  EXPECT_NE(copy.err.find("not carried: 2 run with other settings (trial 0 ran with "
                          "dataset.test_images = "),
            std::string::npos)
      << copy.err;
  EXPECT_NE(copy.err.find("copy/t10k-images-idx3-ubyte\")"), std::string::npos) << copy.err;

  // A command's words decide what its trials ran.
  auto command = [](const std::string& name, const std::string& words) {
    return "[sweep]\nname = \"" + name +
           "\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 2\nseed = 1\n[parameters]\n"
           "x = { distribution = \"uniform\", min = 0, max = 1 }\n[trial]\nkind = \"command\"\n"
           "command = [\"/bin/sh\", \"-c\", \"echo 'sweep-report {{\\\"score\\\": " +
           words + "}}'\", \"{x}\"]\n";
  };
  Write("c1.toml", command("c1", "1"));
  Output c1 = Sweep("run c1.toml");
  ASSERT_EQ(c1.code, 0) << c1.err;
  Write("c2.toml", command("c2", "2"));
  Output c2 = Sweep("run c2.toml --from c1");
  ASSERT_EQ(c2.code, 0) << c2.err;
  EXPECT_NE(c2.err.find("not carried: 2 run with other settings (trial 0 ran with trial.command = "
                        "[\"/bin/sh\",\"-c\",\"echo 'sweep-report {{\\\"score\\\": 1}}'\""),
            std::string::npos)
      << c2.err;
  Write("c3.toml", command("c3", "1"));
  Output c3 = Sweep("run c3.toml --from c1");
  ASSERT_EQ(c3.code, 0) << c3.err;
  EXPECT_NE(c3.err.find("carried over 2 of 2 trial(s) from 'c1' (2 completed, 0 pruned)"),
            std::string::npos)
      << c3.err;
}

// Hyperband's bracket is a function of a trial's number, and carried trials are numbered anew:
// each keeps the bracket it ran in, so its rungs and the trials it was ranked with stay its own.
TEST_F(ResumeTest, ARunFromKeepsTheHyperbandBracketsItsTrialsRanIn) {
  Write("hba.toml", LadderConfig("hba", 40, "hyperband"));
  ASSERT_EQ(Sweep("run hba.toml").code, 0);
  Write("hbb.toml", LadderConfig("hbb", 4, "hyperband", /*narrow=*/true));
  Output run = Sweep("run hbb.toml --from hba");
  ASSERT_EQ(run.code, 0) << run.err;
  std::map<std::string, std::string> old_error;  // old number -> why it was pruned
  for (auto& row : Query("SELECT t.number, t.error FROM trials t JOIN sweeps s ON s.id = "
                         "t.sweep_id WHERE s.name = 'hba'")) {
    old_error[row[0]] = row[1];
  }
  const auto carried = Query(
      "SELECT t.number, ifnull(t.bracket, 'none'), e.detail FROM trials t JOIN sweeps s ON s.id "
      "= t.sweep_id JOIN events e ON e.sweep_id = t.sweep_id AND e.trial = t.number WHERE s.name "
      "= 'hbb' AND e.detail LIKE 'carried over from%' ORDER BY t.number");
  ASSERT_GT(carried.size(), 5u);
  ASSERT_LT(carried.size(), 40u);
  int renumbered_pruned = 0;
  static const std::regex kBracket(
      "pruned at rung [0-9]+ \\(resource [0-9]+\\) of bracket ([0-9])");
  for (const auto& row : carried) {
    EXPECT_NE(row[1], "none") << row[2];
    const std::string old = row[2].substr(row[2].rfind(' ') + 1);
    std::smatch m;
    if (!std::regex_search(old_error[old], m, kBracket)) continue;
    EXPECT_EQ(row[1], m[1].str()) << "trial " << row[0] << ", " << row[2] << ": " << old_error[old];
    if (old != row[0]) ++renumbered_pruned;
  }
  EXPECT_GT(renumbered_pruned, 0);
  EXPECT_EQ(Query("SELECT carried_from FROM sweeps WHERE name = 'hbb'")[0][0], "hba");
  // ASHA has one bracket: nothing to keep.
  Write("hbc.toml", LadderConfig("hbc", 4, "asha", /*narrow=*/true));
  ASSERT_EQ(Sweep("run hbc.toml --from hba").code, 0);
  EXPECT_EQ(Query("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE s.name "
                  "= 'hbc' AND t.bracket IS NOT NULL")[0][0],
            "0");
}

// algorithm = "tpe": its first trials are random search's, the rest TPE's (each start event
// says which); one trial at a time, a run repeats itself, and a sweep resumed with a larger
// budget proposes exactly what an uninterrupted run did from the same history.
TEST_F(ResumeTest, ATpeSweepRepeatsItselfAndAResumeProposesWhatARunWould) {
  auto config = [](const std::string& name, int max_trials, const std::string& algorithm) {
    return sweep_e2e::BraninConfig(name, max_trials, "max_concurrent = 1\nseed = 3\n",
                                   "steps = 1\n",
                                   "[search]\nalgorithm = \"" + algorithm + "\"\n" +
                                       (algorithm == "tpe" ? "n_startup_trials = 5\n" : ""));
  };
  Write("whole.toml", config("whole", 20, "tpe"));
  Write("again.toml", config("again", 20, "tpe"));
  Write("part.toml", config("part", 10, "tpe"));
  Write("rand.toml", config("rand", 5, "random"));
  for (const char* c : {"whole.toml", "again.toml", "part.toml", "rand.toml"}) {
    Output o = Sweep(std::string("run ") + c);
    ASSERT_EQ(o.code, 0) << c << "\n" << o.err;
  }
  Output more = Sweep("resume part --max-trials 20");
  ASSERT_EQ(more.code, 0) << more.err;
  const std::vector<std::string> whole = SweepParams("whole");
  ASSERT_EQ(whole.size(), 20u);
  EXPECT_EQ(SweepParams("again"), whole);
  EXPECT_EQ(SweepParams("part"), whole);
  const std::vector<std::string> random = SweepParams("rand");
  EXPECT_EQ(std::vector<std::string>(whole.begin(), whole.begin() + 5), random);
  auto by = Query(
      "SELECT e.trial, e.detail FROM events e JOIN sweeps s ON s.id = e.sweep_id WHERE s.name = "
      "'whole' AND e.from_state = '' AND e.to_state = 'running' AND e.trial IS NOT NULL ORDER BY "
      "e.trial");
  ASSERT_EQ(by.size(), 20u);
  for (const auto& row : by) {
    const bool startup = std::stoi(row[0]) < 5;
    EXPECT_NE(row[1].find(startup ? "; proposed by startup random" : "; proposed by tpe"),
              std::string::npos)
        << row[0] << ": " << row[1];
  }
  EXPECT_NE(Sweep("show whole 7").out.find("  proposed by tpe\n"), std::string::npos);
  // The store keeps it with each trial, for `trials --json`, `status` and the report.
  const auto kept = Query(
      "SELECT t.number, t.proposed_by FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE "
      "s.name = 'whole' ORDER BY t.number");
  ASSERT_EQ(kept.size(), 20u);
  for (const auto& row : kept) {
    EXPECT_EQ(row[1], std::stoi(row[0]) < 5 ? "startup random" : "tpe") << row[0];
  }
  EXPECT_EQ(Query("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE "
                  "s.name = 'rand' AND t.proposed_by != ''")[0][0],
            "0");
  json listed;
  ASSERT_NO_FATAL_FAILURE(listed = SweepJson("trials whole --json"));
  EXPECT_EQ(listed[0]["proposed_by"], "startup random");
  EXPECT_EQ(listed[7]["proposed_by"], "tpe");
  const Output status = Sweep("status whole");
  EXPECT_NE(status.out.find(" (proposed by "), std::string::npos) << status.out;
  ASSERT_EQ(Sweep("report whole -o whole.html").code, 0);
  const std::string html = sweep_e2e::Slurp(dir_ / "whole.html");
  EXPECT_NE(html.find("\"proposed_by\":\"tpe\""), std::string::npos);
  EXPECT_NE(html.find("Hollow: TPE's startup trials"), std::string::npos);
  // The trials table has a column for it, in text and CSV.
  const std::string table = Sweep("trials whole").out;
  EXPECT_NE(table.find("  proposed by  "), std::string::npos) << table;
  EXPECT_NE(table.find("  startup random  "), std::string::npos) << table;
  EXPECT_NE(Sweep("trials whole --csv").out.find(",proposed_by"), std::string::npos);
  EXPECT_EQ(Sweep("trials rand").out.find("proposed by"), std::string::npos);
}
