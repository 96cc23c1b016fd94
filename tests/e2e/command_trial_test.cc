// End-to-end tests of command trials: the real `sweep` binary runs a user's program (a shell
// script written by the test, and the shipped Python example) per trial, and the store records
// reports, failures with their exit code and last lines, pruning by SIGTERM/SIGKILL, timeouts,
// and where each trial's logs are.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e_fixture.h"

namespace {

using nlohmann::json;
using sweep_e2e::E2eTest;
using sweep_e2e::Output;
namespace fs = std::filesystem;

// A "training program": reports `epochs` epochs of a curve set by --x; --mode=crash fails after
// one epoch, --mode=stubborn ignores SIGTERM, --mode=hang stops reporting.
const char* kProgram = R"(#!/bin/sh
x=0; mode=ok; epochs=9
for a in "$@"; do
  case "$a" in
    --x=*) x=${a#--x=} ;;
    --mode=*) mode=${a#--mode=} ;;
    --epochs=*) epochs=${a#--epochs=} ;;
  esac
done
echo "params=$SWEEP_PARAMS trial=$SWEEP_TRIAL" >&2
[ "$mode" = stubborn ] && trap '' TERM
e=1
while [ $e -le $epochs ]; do
  echo "epoch $e of $epochs"
  echo "sweep-report {\"epoch\": $e, \"score\": $(awk "BEGIN { print $x * $e / $epochs }")}"
  if [ "$mode" = crash ]; then echo "Traceback: out of memory" >&2; exit 3; fi
  if [ "$mode" = hang ]; then sleep 300; fi
  sleep 0.1
  e=$((e + 1))
done
)";

class CommandTrialE2eTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    WriteProgram("train.sh", kProgram);
  }

  // Reports stored at `epoch` (0 before the store has its reports table).
  int ReportsAtEpoch(int epoch) {
    if (!HasTable("reports")) return 0;
    return std::stoi(
        Query("SELECT count(*) FROM reports WHERE epoch = " + std::to_string(epoch))[0][0]);
  }

  std::map<int, std::vector<std::string>> TrialsByNumber() {
    std::map<int, std::vector<std::string>> out;
    for (auto& row : Query("SELECT number, status, error, stdout_log, stderr_log, objective FROM "
                           "trials ORDER BY number")) {
      out[std::stoi(row[0])] = row;
    }
    return out;
  }
};

TEST_F(CommandTrialE2eTest, ReportsFailuresAndLogsAreStored) {
  Write("c.toml", R"([sweep]
name = "cmd"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[parameters]
x = { values = [1, 2] }
mode = { values = ["ok", "crash"] }
[trial]
kind = "command"
command = ["./train.sh", "--x={x}", "--mode={mode}", "--epochs=3"]
[executor]
cpu_slots = 2
)");
  Output o = Sweep("run c.toml");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 4u);
  // Grid order: x varies slowest (declaration order): (1, ok), (1, crash), (2, ok), (2, crash).
  EXPECT_EQ(trials[0][1], "completed");
  EXPECT_EQ(std::stod(trials[0][5]), 1.0);
  EXPECT_EQ(trials[2][1], "completed");
  EXPECT_EQ(std::stod(trials[2][5]), 2.0);
  for (int n : {1, 3}) {
    EXPECT_EQ(trials[n][1], "failed");
    EXPECT_EQ(trials[n][2].rfind("exited with code 3; last lines of stderr:\n", 0), 0u)
        << trials[n][2];
    EXPECT_NE(trials[n][2].find("Traceback: out of memory"), std::string::npos) << trials[n][2];
  }
  // Logs: stored paths, absolute, holding what the program wrote.
  const std::string out0 = trials[0][3];
  EXPECT_EQ(out0, fs::canonical(dir_).string() + "/sweeps.db-trials/cmd/trial-0/stdout.log");
  EXPECT_NE(sweep_e2e::Slurp(out0).find("epoch 3 of 3\nsweep-report {\"epoch\": 3"),
            std::string::npos);
  std::string err0 = sweep_e2e::Slurp(trials[0][4]);
  EXPECT_NE(err0.find("params={\"mode\":\"ok\",\"x\":1} trial=0"), std::string::npos) << err0;
  // Every report is stored; `best` ranks by the program's metric.
  EXPECT_EQ(Query("SELECT COUNT(*) FROM reports WHERE trial = 2")[0][0], "3");
  json j;
  ASSERT_NO_FATAL_FAILURE(j = SweepJson("best cmd --json"));
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["trial"], 2);
  EXPECT_EQ(j[0]["stdout_log"],
            fs::canonical(dir_).string() + "/sweeps.db-trials/cmd/trial-2/stdout.log");
}

// The default trials folder is beside the store's file itself, however --db names it: a sweep
// run through a link to the file and resumed by its own name finds its trials' folders.
TEST_F(CommandTrialE2eTest, TheTrialsFolderIsBesideTheStoreNotItsLink) {
  WriteProgram("r.sh", "#!/bin/sh\necho 'sweep-report {\"epoch\": 1, \"val_acc\": 1}'\n");
  Write("l.toml",
        "[sweep]\nname = \"linked\"\nmetric = \"val_acc\"\nmode = \"max\"\nmax_trials = 1\n"
        "[trial]\n"
        "kind = \"command\"\n"
        "command = [\"./r.sh\"]\n");
  fs::create_directory(dir_ / "data");
  fs::create_directory(dir_ / "st");
  ASSERT_EQ(Sweep("run l.toml --db data/s.db --name first").code, 0);
  fs::create_symlink("../data/s.db", dir_ / "st/link.db");
  Output o = Sweep("run l.toml --db st/link.db");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_FALSE(fs::exists(dir_ / "st/link.db-trials"));
  EXPECT_EQ(Query("SELECT t.stdout_log FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE "
                  "s.name = 'linked'",
                  "data/s.db")[0][0],
            fs::canonical(dir_).string() + "/data/s.db-trials/linked/trial-0/stdout.log");
}

// A metric reported as NaN or infinity (not the sweep's) is kept as null, which JSON allows,
// and shown as nan, so a diverged loss is told from one never reported.
TEST_F(CommandTrialE2eTest, NonFiniteMetricsShowAsNan) {
  WriteProgram("n.sh",
               "#!/bin/sh\necho 'sweep-report {\"epoch\": 1, \"score\": 1, \"loss\": NaN, \"big\": "
               "Infinity}'\n");
  Write("n.toml",
        "[sweep]\nname = \"nan\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
        "[trial]\nkind = \"command\"\ncommand = [\"./n.sh\"]\n[parameters]\nx = 1\n");
  ASSERT_EQ(Sweep("run n.toml").code, 0);
  Output csv = Sweep("trials nan --csv");
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_NE(csv.out.find(",metric.big,metric.loss,metric.score,"), std::string::npos) << csv.out;
  EXPECT_NE(csv.out.find(",nan,nan,1,"), std::string::npos) << csv.out;
  Output exported = Sweep("export nan --format csv -o -");
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_NE(exported.out.find(",nan,nan,1,"), std::string::npos) << exported.out;
  // One layout for both.
  EXPECT_EQ(csv.out.substr(0, csv.out.find('\n')), exported.out.substr(0, exported.out.find('\n')));
  Output show = Sweep("show nan 0");
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("big nan  loss nan  score 1"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("loss  (no chart: nan, NaN or infinite, in every report)"),
            std::string::npos)
      << show.out;
  json js;
  ASSERT_NO_FATAL_FAILURE(js = SweepJson("trials nan --json"));
  EXPECT_TRUE(js[0]["metrics"]["loss"].is_null()) << js.dump();
}

// `show` charts each metric over the reports that carry it, and in a narrow terminal wraps
// long values rather than cutting them.
TEST_F(CommandTrialE2eTest, ShowCountsTheReportsOfEachMetricAndKeepsLongValues) {
  WriteProgram("m.sh",
               "#!/bin/sh\necho 'sweep-report {\"step\": 0, \"score\": 5, \"early\": 1}'\n"
               "echo 'sweep-report {\"step\": 1, \"score\": 4}'\n");
  Write("m.toml",
        "[sweep]\nname = \"m\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
        "[trial]\nkind = \"command\"\ncommand = [\"./m.sh\"]\n[parameters]\n"
        "tag = \"a-rather-long-value-that-goes-on-and-on-to-its-end\"\n");
  ASSERT_EQ(Sweep("run m.toml").code, 0);
  Output show = Sweep("show m 0", "COLUMNS=72");
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("early  (1 report, last 1)"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("score  (2 reports, last 4)"), std::string::npos) << show.out;
  Output narrow = Sweep("show m 0", "COLUMNS=24");
  ASSERT_EQ(narrow.code, 0) << narrow.err;
  std::string joined;  // the wrapped value, put back together
  std::istringstream lines(narrow.out);
  bool in_params = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  params", 0) == 0) {
      in_params = true;
    } else if (line.rfind(std::string(14, ' '), 0) != 0) {
      in_params = false;
    }
    if (in_params) joined += line.substr(14);
  }
  EXPECT_EQ(joined, "tag = a-rather-long-value-that-goes-on-and-on-to-its-end") << narrow.out;
}

// Some failed trials among good ones leave the exit status 0 (above); a sweep in which every
// trial failed has no result, and `run` says so with exit status 1.
TEST_F(CommandTrialE2eTest, ASweepWhereEveryTrialFailedExitsOne) {
  Write("c.toml", R"([sweep]
name = "broken"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[parameters]
x = { values = [1, 2, 3] }
[trial]
kind = "command"
command = ["./train.sh", "--x={x}", "--mode=crash"]
[executor]
cpu_slots = 2
)");
  Output o = Sweep("run c.toml");
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  EXPECT_NE(o.err.find("0 completed, 0 pruned, 3 failed"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("sweep 'broken': no trial completed (3 failed); their errors: `sweep "
                       "trials broken --status failed`"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
}

// A sweep whose first trials all fail (a broken program, not a bad region of the space) stops
// after [trial] max_initial_failures of them, interrupted, rather than failing trial after trial
// until its time budget is spent. Those trials never had a chance: they end interrupted, and
// run again on resume once the cause is fixed. `resume --max-initial-failures 0`, or 0 in the
// config, goes on whatever fails.
TEST_F(CommandTrialE2eTest, ASweepWhoseFirstTrialsAllFailStops) {
  const std::string broken = "#!/bin/sh\necho 'no GPU here' >&2\nexit 3\n";
  WriteProgram("fails.sh", broken);
  const std::string config = R"([sweep]
name = "NAME"
metric = "score"
mode = "max"
max_trials = 6
[parameters]
x = { distribution = "uniform", min = 0, max = 1 }
[trial]
kind = "command"
command = ["./fails.sh"]
max_initial_failures = LIMIT
[executor]
cpu_slots = 1
)";
  auto make = [&](const std::string& name, const std::string& limit) {
    std::string c = config;
    c.replace(c.find("NAME"), 4, name);
    c.replace(c.find("LIMIT"), 5, limit);
    return c;
  };
  auto statuses = [&](const std::string& name) {
    return Query(
        "SELECT t.status, count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
        "WHERE s.name = '" +
        name + "' GROUP BY t.status ORDER BY t.status");
  };
  using Rows = std::vector<std::vector<std::string>>;
  Write("a.toml", make("broken", "4"));
  Output o = Sweep("run a.toml");
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_NE(o.err.find("sweep: stopping: 4 new trials all failed before reporting anything "
                       "(none of the sweep's has succeeded), the last (trial 3) with: exited with "
                       "code 3; last lines of "
                       "stderr: no GPU here; fix the cause and resume (they run again), or "
                       "resume with --max-initial-failures 0 to go on whatever fails"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(Query("SELECT status FROM sweeps WHERE name = 'broken'")[0][0], "interrupted");
  EXPECT_EQ(statuses("broken"), (Rows{{"interrupted", "4"}}));
  EXPECT_NE(Query("SELECT error FROM trials WHERE number = 0")[0][0].find("no GPU here"),
            std::string::npos);

  // Fixed, it goes on: the four run again, and the rest of the sweep runs.
  Write("fails.sh", "#!/bin/sh\necho 'sweep-report {\"score\": 1}'\n");
  Output resumed = Sweep("resume broken");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT status FROM sweeps WHERE name = 'broken'")[0][0], "completed");
  EXPECT_EQ(statuses("broken"), (Rows{{"completed", "6"}}));

  // Still broken, a resume told to go on whatever fails runs the sweep to its end.
  Write("fails.sh", broken);
  Write("s.toml", make("stuck", "4"));
  EXPECT_EQ(Sweep("run s.toml").code, 1);
  Output anyway = Sweep("resume stuck --max-initial-failures 0");
  EXPECT_EQ(anyway.code, 1) << anyway.err;
  EXPECT_EQ(anyway.err.find("stopping"), std::string::npos) << anyway.err;
  EXPECT_EQ(statuses("stuck"), (Rows{{"failed", "6"}}));

  Write("b.toml", make("on", "0"));
  Output on = Sweep("run b.toml");
  EXPECT_EQ(on.code, 1) << on.err;
  EXPECT_EQ(on.err.find("stopping"), std::string::npos) << on.err;
  EXPECT_EQ(statuses("on"), (Rows{{"failed", "6"}}));
}

// A metric the program never reports (misspelt in the config or in the program) stops the sweep
// at the first trial that ends without it, with the names it did report and a did-you-mean,
// rather than failing every trial. That trial ends interrupted and runs again on resume once the
// program reports the name. A metric that only ever came as text stops it the same way.
TEST_F(CommandTrialE2eTest, AMetricNeverReportedStopsTheSweep) {
  WriteProgram("r.sh",
               "#!/bin/sh\necho 'sweep-report {\"epoch\": 1, \"val_acc\": 0.5, "
               "\"loss\": 1}'\n");
  Write("m.toml", R"([sweep]
name = "misspelt"
metric = "val_accuracy"
mode = "max"
max_trials = 5
[parameters]
x = { distribution = "uniform", min = 0, max = 1 }
[trial]
kind = "command"
command = ["./r.sh"]
[executor]
cpu_slots = 1
)");
  Output o = Sweep("run m.toml");
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_NE(
      o.err.find(
          "sweep: stopping: trial 0 ended without reporting the sweep's metric "
          "'val_accuracy'; it reported 'loss', 'val_acc' (did you mean metric = \"val_acc\"?)"),
      std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("resume"), std::string::npos) << o.err;
  EXPECT_EQ(Query("SELECT status FROM sweeps WHERE name = 'misspelt'")[0][0], "interrupted");
  // One trial ran; it is to run again, and nothing failed.
  EXPECT_EQ(Query("SELECT number, status FROM trials"),
            (std::vector<std::vector<std::string>>{{"0", "interrupted"}}));
  EXPECT_NE(Query("SELECT error FROM trials")[0][0].find("never reported the sweep's metric"),
            std::string::npos);
  // `best` of the stopped sweep says where its trial went, not that one may come.
  Output best = Sweep("best misspelt");
  EXPECT_EQ(best.code, 0) << best.err;
  EXPECT_EQ(best.out,
            "no completed trial with a value of val_accuracy (1 interrupted); why: sweep trials "
            "misspelt --status interrupted\n");

  // The program fixed, the sweep goes on from that trial.
  WriteProgram("r.sh", "#!/bin/sh\necho 'sweep-report {\"epoch\": 1, \"val_accuracy\": 0.5}'\n");
  Output resumed = Sweep("resume misspelt");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "5");

  // Only ever text: stopped too, and said so.
  WriteProgram("t.sh", "#!/bin/sh\necho 'sweep-report {\"epoch\": 1, \"score\": \"high\"}'\n");
  Write("t.toml", R"([sweep]
name = "text"
metric = "score"
mode = "max"
max_trials = 3
[parameters]
x = 1
[trial]
kind = "command"
command = ["./t.sh"]
)");
  Output text = Sweep("run t.toml");
  EXPECT_EQ(text.code, 1) << text.err;
  EXPECT_NE(text.err.find("without reporting the sweep's metric 'score' as a number (it came "
                          "only as text, a bool, null or a list): report it as a JSON number"),
            std::string::npos)
      << text.err;
  // Its name is right: no advice to rename the config's metric.
  EXPECT_EQ(text.err.find("A wrong [sweep] metric"), std::string::npos) << text.err;
}

// --dry-run checks the config, prints the first trials with the argv and environment their
// programs would get, and touches no store; the real run then gives the programs exactly those.
TEST_F(CommandTrialE2eTest, ADryRunShowsWhatTheProgramsWillGet) {
  WriteProgram("p.sh",
               "#!/bin/sh\necho \"args=$* seed=$SWEEP_SEED dir=$SWEEP_TRIAL_DIR\" >&2\n"
               "echo 'sweep-report {\"score\": 1}'\n");
  Write("d.toml", R"([sweep]
name = "dry"
metric = "score"
mode = "max"
max_trials = 3
[parameters]
lr = { distribution = "log_uniform", min = 0.001, max = 0.1 }
[trial]
kind = "command"
command = ["./p.sh", "--lr={lr}", "--trial={trial}"]
[executor]
cpu_slots = 2
)");
  Output dry = Sweep("run d.toml --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db")) << "a dry run made the store";
  EXPECT_NE(dry.out.find("the first 2 trial(s) it would start"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("trial 1 on local:cpu1: {\"lr\":"), std::string::npos) << dry.out;
  ASSERT_EQ(Sweep("run d.toml").code, 0);
  const std::string log =
      sweep_e2e::Slurp(Query("SELECT stderr_log FROM trials WHERE number = 0")[0][0]);
  // What the program got, as the dry run said.
  const size_t args = log.find("args=");
  ASSERT_NE(args, std::string::npos) << log;
  const std::string got = log.substr(args + 5, log.find(" seed=", args) - args - 5);
  EXPECT_NE(dry.out.find("  argv: ./p.sh " + got + "\n"), std::string::npos)
      << got << " in " << dry.out;
  const size_t seed = log.find("seed=");
  const std::string seed_value = log.substr(seed + 5, log.find(" dir=", seed) - seed - 5);
  EXPECT_NE(dry.out.find("  env: SWEEP_SEED=" + seed_value + "\n"), std::string::npos)
      << seed_value << " in " << dry.out;
  const size_t folder = log.find("dir=");
  const std::string dir_value = log.substr(folder + 4, log.find('\n', folder) - folder - 4);
  EXPECT_NE(dry.out.find("  env: SWEEP_TRIAL_DIR=" + dir_value + "\n"), std::string::npos)
      << dir_value << " in " << dry.out;
}

// A trials_dir that cannot be made (a file stands in its path) fails the dry run as it fails the
// run, before the run makes a database; and the dry run makes no folder of a good one.
TEST_F(CommandTrialE2eTest, ADryRunRefusesATrialsDirThatCannotBeMade) {
  WriteProgram("p.sh", "#!/bin/sh\necho 'sweep-report {\"score\": 0.5}'\n");
  Write("afile", "");
  const std::string config =
      "[sweep]\nname = \"dirs\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
      "[parameters]\nx = 1\n[trial]\nkind = \"command\"\ncommand = [\"./p.sh\"]\n";
  Write("bad.toml", config + "trials_dir = \"afile/sub\"\n");
  for (const std::string args : {"run bad.toml --dry-run", "run bad.toml"}) {
    Output o = Sweep(args);
    EXPECT_EQ(o.code, 1) << args << ": " << o.err;
    EXPECT_NE(o.err.find("afile"), std::string::npos) << args << ": " << o.err;
    EXPECT_NE(o.err.find("(trial.trials_dir)"), std::string::npos) << args << ": " << o.err;
    // Nor does the run leave an empty database behind.
    EXPECT_FALSE(fs::exists(dir_ / "sweeps.db")) << args;
  }
  Write("good.toml", config + "trials_dir = \"runs\"\n");
  Output dry = Sweep("run good.toml --dry-run");
  EXPECT_EQ(dry.code, 0) << dry.err;
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}

// `delete` says what it would remove, wants --yes where it cannot ask, then removes the sweep's
// rows and its trials' folders, and leaves the other sweeps alone; `list` shows their sizes.
TEST_F(CommandTrialE2eTest, DeleteRemovesRowsAndFolders) {
  WriteProgram("p.sh", "#!/bin/sh\necho 'sweep-report {\"score\": 0.5}'\n");
  const std::string config = R"([sweep]
name = "NAME"
metric = "score"
mode = "max"
max_trials = 2
[parameters]
x = { distribution = "uniform", min = 0, max = 1 }
[trial]
kind = "command"
command = ["./p.sh"]
)";
  for (const std::string name : {"gone", "kept"}) {
    std::string c = config;
    c.replace(c.find("NAME"), 4, name);
    Write(name + ".toml", c);
    ASSERT_EQ(Sweep("run " + name + ".toml").code, 0);
  }
  Output list = Sweep("list");
  EXPECT_NE(list.out.find("gone  completed  2 trials  best score = 0.5  disk "), std::string::npos)
      << list.out;
  ASSERT_TRUE(fs::exists(dir_ / "sweeps.db-trials/gone/trial-0"));
  Output ask = Sweep("delete gone");  // stdin is not a terminal here
  EXPECT_EQ(ask.code, 2) << ask.err;
  EXPECT_NE(ask.err.find("would delete sweep 'gone' (completed) in sweeps.db: 2 trial(s), 2 "
                         "report(s)"),
            std::string::npos)
      << ask.err;
  EXPECT_NE(ask.err.find("run again with --yes"), std::string::npos) << ask.err;
  ASSERT_TRUE(fs::exists(dir_ / "sweeps.db-trials/gone/trial-0"));
  Output yes = Sweep("delete gone --yes");
  EXPECT_EQ(yes.code, 0) << yes.err;
  EXPECT_NE(yes.out.find("sweeps.db-trials/gone"), std::string::npos) << yes.out;
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db-trials/gone"));
  EXPECT_TRUE(fs::exists(dir_ / "sweeps.db-trials/kept/trial-0"));
  EXPECT_EQ(Query("SELECT name FROM sweeps"), (std::vector<std::vector<std::string>>{{"kept"}}));
  EXPECT_EQ(Query("SELECT count(*) FROM trials")[0][0], "2");
  Output again = Sweep("delete gone --yes");
  EXPECT_EQ(again.code, 2) << again.err;

  // A sweep run under another name (--name) has its folders under that name: `list` counts
  // those, and `delete` removes those, never the folder of the sweep the config names.
  ASSERT_EQ(Sweep("run kept.toml --name renamed").code, 0);
  ASSERT_TRUE(fs::exists(dir_ / "sweeps.db-trials/renamed/trial-0"));
  Write("sweeps.db-trials/renamed/big.bin", std::string(50000, 'x'));
  Output sizes = Sweep("list");
  EXPECT_NE(sizes.out.find("renamed  completed  2 trials  best score = 0.5  disk 5"),
            std::string::npos)
      << sizes.out;
  Output renamed = Sweep("delete renamed --yes");
  EXPECT_EQ(renamed.code, 0) << renamed.err;
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db-trials/renamed"));
  EXPECT_TRUE(fs::exists(dir_ / "sweeps.db-trials/kept/trial-0"));
}

// First trials that fail for their parameters (a region that runs out of memory), not for a
// broken program: the sweep stops once, a resume runs them again once (they fail for good now)
// and goes on to the rest of the space, rather than stopping at them on every resume.
TEST_F(CommandTrialE2eTest, AResumeGetsPastFirstTrialsThatFailForTheirParameters) {
  WriteProgram("oom.sh", R"(#!/bin/sh
case "$1" in big|huge) echo "CUDA out of memory" >&2; exit 1 ;; esac
echo "sweep-report {\"score\": 1}"
)");
  Write("c.toml", R"([sweep]
name = "oom"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[parameters]
batch = { values = ["big", "huge", "small", "tiny"] }
[trial]
kind = "command"
command = ["./oom.sh", "{batch}"]
max_initial_failures = 2
[executor]
cpu_slots = 1
)");
  Output o = Sweep("run c.toml");
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_EQ(Query("SELECT number, status FROM trials ORDER BY number"),
            (std::vector<std::vector<std::string>>{{"0", "interrupted"}, {"1", "interrupted"}}));
  Output resumed = Sweep("resume oom");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(resumed.err.find("stopping"), std::string::npos) << resumed.err;
  EXPECT_EQ(Query("SELECT number, status FROM trials ORDER BY number"),
            (std::vector<std::vector<std::string>>{
                {"0", "failed"}, {"1", "failed"}, {"2", "completed"}, {"3", "completed"}}));
}

// Fast failures of a bad region of the space (an out-of-memory batch size) while a slow trial
// that started before them runs on: it may succeed, so they do not stop the sweep.
TEST_F(CommandTrialE2eTest, FastFailuresBesideASlowerTrialDoNotStopTheSweep) {
  WriteProgram("region.sh", R"(#!/bin/sh
[ "$1" = 9 ] || { echo "out of memory" >&2; exit 3; }
sleep 1.5
echo "sweep-report {\"score\": 1}"
)");
  Write("c.toml", R"([sweep]
name = "region"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[parameters]
x = { values = [9, 1, 2, 3, 4, 5, 6, 7] }
[trial]
kind = "command"
command = ["./region.sh", "{x}"]
max_initial_failures = 3
[executor]
cpu_slots = 2
)");
  Output o = Sweep("run c.toml");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err.find("stopping"), std::string::npos) << o.err;
  EXPECT_EQ(Query("SELECT status, count(*) FROM trials GROUP BY status ORDER BY status"),
            (std::vector<std::vector<std::string>>{{"completed", "1"}, {"failed", "7"}}));
}

// NCCL_RUNTIME_CONNECT, which a training process sets for its own NCCL, never reaches a
// command trial's program: not even when a word of the command line is "worker" or "train".
TEST_F(CommandTrialE2eTest, TheProgramDoesNotSeeOurNcclSetting) {
  if (std::getenv("NCCL_RUNTIME_CONNECT") != nullptr) GTEST_SKIP() << "set in this environment";
  Write("c.toml", R"([sweep]
name = "env"
metric = "score"
mode = "max"
max_trials = 1
[parameters]
x = 1
[trial]
kind = "command"
command = ["sh", "-c", "echo nccl=[${{NCCL_RUNTIME_CONNECT-unset}}] >&2; echo 'sweep-report {{\"score\": 1}}'"]
)");
  Output o = Sweep("run c.toml --name worker");
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string log = Query("SELECT stderr_log FROM trials")[0][0];
  const std::string err = sweep_e2e::Slurp(log);
  EXPECT_NE(err.find("nccl=[unset]"), std::string::npos) << err;
  // The program found on PATH is named in the log.
  EXPECT_NE(err.find("[sweep] sh is /"), std::string::npos) << err;
}

// The report that meets stop_when is its trial's result, whatever the program reports while it
// stops; and a step reported twice keeps its first report, in the stored curve and as the
// trial's result alike.
TEST_F(CommandTrialE2eTest, TheTargetReportAndAStepsFirstReportAreTheResult) {
  Write("p.sh",
        "#!/bin/sh\necho 'sweep-report {\"step\": 1, \"score\": 0.1}'\n"
        "echo 'sweep-report {\"step\": 2, \"score\": 0.9}'\n"
        "echo 'sweep-report {\"step\": 3, \"score\": 0.2}'\n"
        "echo 'sweep-report {\"step\": 4, \"score\": 0.1}'\n");
  Write("twice.sh",
        "#!/bin/sh\necho 'sweep-report {\"step\": 1, \"score\": 0.1}'\n"
        "echo 'sweep-report {\"step\": 1, \"score\": 0.9}'\n");
  for (const char* f : {"p.sh", "twice.sh"}) {
    std::filesystem::permissions(dir_ / f, std::filesystem::perms::owner_all);
  }
  const std::string config =
      "[sweep]\nname = \"NAME\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\nSTOP\n"
      "[trial]\nkind = \"command\"\ncommand = [\"./PROGRAM\"]\n";
  auto make = [&](const std::string& name, const std::string& stop, const std::string& program) {
    std::string c = config;
    c.replace(c.find("NAME"), 4, name);
    c.replace(c.find("STOP"), 4, stop);
    c.replace(c.find("PROGRAM"), 7, program);
    return c;
  };
  Write("t.toml", make("target", "stop_when = \"score >= 0.5\"", "p.sh"));
  Output target = Sweep("run t.toml");
  ASSERT_EQ(target.code, 0) << target.err;
  EXPECT_EQ(Query("SELECT status, objective FROM trials WHERE sweep_id = 1"),
            (std::vector<std::vector<std::string>>{{"completed", "0.9"}}));
  EXPECT_EQ(Query("SELECT group_concat(step) FROM (SELECT step FROM reports WHERE sweep_id = 1 "
                  "ORDER BY step)")[0][0],
            "1,2")
      << "nothing after the report that met the target";

  Write("d.toml", make("twice", "", "twice.sh"));
  Output twice = Sweep("run d.toml");
  ASSERT_EQ(twice.code, 0) << twice.err;
  json shown;
  ASSERT_NO_FATAL_FAILURE(shown = SweepJson("trials twice --json"));
  EXPECT_EQ(shown[0]["metrics"]["score"], 0.1) << shown.dump();
  EXPECT_EQ(Query("SELECT json_extract(metrics, '$.score') FROM reports WHERE sweep_id = 2 AND "
                  "step = 1")[0][0],
            "0.1");
}

// A program that would run past max_resource is stopped once it reports past it; its result is
// its report at max_resource (not the one past it), whether it goes on (stopped) or ended by
// itself soon after.
TEST_F(CommandTrialE2eTest, ResultOfAProgramCappedAtMaxResourceIsItsReportThere) {
  Write("c.toml", R"([sweep]
name = "cap"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[early_stopping]
algorithm = "asha"
min_resource = 1
max_resource = 3
reduction_factor = 3
[parameters]
x = 1
epochs = { values = [9, 4] }
[trial]
kind = "command"
command = ["./train.sh", "--x={x}", "--epochs={epochs}"]
kill_grace = 0.2
[executor]
cpu_slots = 1
)");
  Output o = Sweep("run c.toml");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 2u);
  for (auto& [n, row] : trials) {
    const std::string num = std::to_string(n);
    EXPECT_EQ(row[1], "completed") << "trial " << n;
    EXPECT_EQ(row[2], "ran to early_stopping.max_resource = 3") << "trial " << n;
    EXPECT_EQ(Query("SELECT epochs FROM trials WHERE number = " + num)[0][0], "3.0");
    EXPECT_EQ(Query("SELECT max(epoch) FROM reports WHERE trial = " + num)[0][0], "3.0");
  }
  // score = x * epoch / epochs at epoch 3 (awk prints 6 digits)
  EXPECT_NEAR(std::stod(trials[0][5]), 3.0 / 9, 1e-6);
  EXPECT_NEAR(std::stod(trials[1][5]), 3.0 / 4, 1e-6);
}

// ASHA prunes command trials with SIGTERM; one that ignores it is killed after kill_grace. A
// program that stops reporting fails on its timeout. The sweep ends with every trial accounted
// for.
TEST_F(CommandTrialE2eTest, PrunedStubbornAndHungProgramsAreEnded) {
  Write("c.toml", R"([sweep]
name = "cmd"
metric = "score"
mode = "max"
max_trials = 9
seed = 5
[search]
algorithm = "random"
[early_stopping]
algorithm = "asha"
min_resource = 1
max_resource = 9
reduction_factor = 3
[parameters]
x = { distribution = "uniform", min = 0, max = 1 }
mode = { values = ["stubborn", "hang"] }
[trial]
kind = "command"
command = ["./train.sh", "--x={x}", "--mode={mode}"]
kill_grace = 0.2
timeout = "3s"
[executor]
cpu_slots = 2
)");
  Output o = Sweep("run c.toml");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 9u);
  int pruned = 0, timed_out = 0, completed = 0;
  for (auto& [n, row] : trials) {
    std::string err = sweep_e2e::Slurp(row[4]);
    if (row[1] == "pruned") {
      ++pruned;
      EXPECT_NE(row[2].find("rung"), std::string::npos) << row[2];
      // Its result is what it reported at the rung where it was pruned: the epochs a stubborn
      // program goes on reporting through its grace period are neither its result nor stored.
      const size_t at = row[2].find("(resource ");
      ASSERT_NE(at, std::string::npos) << row[2];
      const double resource = std::stod(row[2].substr(at + 10));
      const std::string num = std::to_string(n);
      EXPECT_EQ(std::stod(Query("SELECT epochs FROM trials WHERE number = " + num)[0][0]), resource)
          << "trial " << n;
      EXPECT_EQ(std::stod(Query("SELECT max(epoch) FROM reports WHERE trial = " + num)[0][0]),
                resource)
          << "trial " << n;
      EXPECT_NE(err.find("sent SIGTERM (stopped)"), std::string::npos) << err;
      if (err.find("--mode=stubborn") != std::string::npos) {
        EXPECT_NE(err.find("sent SIGKILL"), std::string::npos) << "trial " << n << err;
      } else {
        EXPECT_EQ(err.find("sent SIGKILL"), std::string::npos) << "trial " << n << err;
      }
    } else if (row[1] == "failed") {
      ++timed_out;
      EXPECT_EQ(row[2].rfind("timed out after 3 s", 0), 0u) << row[2];
    } else {
      EXPECT_EQ(row[1], "completed") << n << ": " << row[2];
      ++completed;
    }
  }
  EXPECT_GT(pruned, 0);
  EXPECT_GT(timed_out, 0);
  EXPECT_EQ(pruned + timed_out + completed, 9);
  EXPECT_EQ(Query("PRAGMA integrity_check")[0][0], "ok");
}

// Rungs at fractions of an epoch are the decimals the config implies: 0.1 * 3 is
// 0.30000000000000004 in doubles, and a program reporting epoch 0.3 is judged there.
TEST_F(CommandTrialE2eTest, AProgramReportingTenthsOfAnEpochIsJudgedAtEachRung) {
  WriteProgram("tenths.sh", R"(#!/bin/sh
for e in 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1; do
  case "$e" in 0.1|0.2) s=1 ;; *) s=$1 ;; esac
  echo "sweep-report {\"epoch\": $e, \"score\": $s}"
done
)");
  Write("c.toml", R"([sweep]
name = "tenths"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[early_stopping]
algorithm = "asha"
min_resource = 0.1
max_resource = 1
reduction_factor = 3
[parameters]
x = { values = [3, 1, 2] }
[trial]
kind = "command"
command = ["./tenths.sh", "{x}"]
kill_grace = 0.2
[executor]
cpu_slots = 1
)");
  Output o = Sweep("run c.toml");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 3u);
  // Every trial ties at rung 0 (0.1); at rung 1 (0.3) trial 0 is the best, 1 and 2 are not.
  EXPECT_EQ(trials[0][1], "completed");
  for (int n : {1, 2}) {
    EXPECT_EQ(trials[n][1], "pruned") << "trial " << n;
    EXPECT_EQ(trials[n][2].rfind("pruned at rung 1 (resource 0.3)", 0), 0u) << trials[n][2];
    const std::string num = std::to_string(n);
    EXPECT_EQ(Query("SELECT epochs FROM trials WHERE number = " + num)[0][0], "0.3");
    EXPECT_EQ(Query("SELECT max(epoch) FROM reports WHERE trial = " + num)[0][0], "0.3");
  }
}

// A program that prints one step's metrics on two lines (its training loss, then its validation
// score) makes one report of them: the second line's metric is stored, judged by early stopping
// and ranked, where it was once dropped as a repeat of the step. A line a progress bar drew over
// (a carriage return before the report) and one indented are reports too.
TEST_F(CommandTrialE2eTest, AStepsMetricsOnSeveralLinesAreOneReport) {
  WriteProgram("split.sh", R"(#!/bin/sh
for e in 1 2 3 4; do
  echo "sweep-report {\"step\": $e, \"train_loss\": 1}"
  case $e in
    2) printf 'epoch 2: 100%%|####|\rsweep-report {"step": 2, "score": %d}\n' $(($1 * 2)) ;;
    3) echo "   sweep-report {\"step\": 3, \"score\": $(($1 * 3))}" ;;
    *) echo "sweep-report {\"step\": $e, \"score\": $(($1 * e))}" ;;
  esac
done
)");
  Write("c.toml", R"([sweep]
name = "split"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[early_stopping]
algorithm = "asha"
min_resource = 1
max_resource = 4
reduction_factor = 2
[parameters]
x = { values = [4, 3, 2, 1] }
[trial]
kind = "command"
command = ["./split.sh", "{x}"]
kill_grace = 0.2
[executor]
cpu_slots = 1
)");
  Output o = Sweep("run c.toml");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 4u);
  EXPECT_EQ(trials[0][1], "completed");
  EXPECT_EQ(trials[0][5], "16.0");
  EXPECT_EQ(trials[3][1], "pruned") << trials[3][2];
  for (auto& [n, row] : trials) {
    EXPECT_FALSE(row[5].empty()) << "trial " << n << " has no objective";
  }
  // Every stored report holds both lines' metrics.
  EXPECT_EQ(Query("SELECT count(*) FROM reports WHERE json_extract(metrics, '$.train_loss') "
                  "IS NULL OR json_extract(metrics, '$.score') IS NULL")[0][0],
            "0");
  EXPECT_EQ(Query("SELECT json_extract(metrics, '$.score') FROM reports WHERE trial = 0 AND "
                  "step = 2")[0][0],
            "8");
}

// A step's later line without `epoch` takes the epoch its first line gave (not the step, 100
// times larger, which would put the trial past max_resource at once and lose its metric).
TEST_F(CommandTrialE2eTest, ALaterLineOfAStepTakesItsEpoch) {
  WriteProgram("steps.sh", R"(#!/bin/sh
for e in 1 2 3 4; do
  echo "sweep-report {\"step\": $((e * 100)), \"epoch\": $e, \"train_loss\": 1}"
  echo "sweep-report {\"step\": $((e * 100)), \"score\": $(($1 * e))}"
done
)");
  Write("c.toml", R"([sweep]
name = "steps"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[early_stopping]
algorithm = "asha"
max_resource = 4
reduction_factor = 2
[parameters]
x = { values = [4, 1] }
[trial]
kind = "command"
command = ["./steps.sh", "{x}"]
kill_grace = 0.2
[executor]
cpu_slots = 1
)");
  Output o = Sweep("run c.toml");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0][1], "completed");
  EXPECT_EQ(trials[0][5], "16.0");
  EXPECT_EQ(Query("SELECT epochs FROM trials WHERE number = 0")[0][0], "4.0");
  EXPECT_EQ(trials[1][1], "pruned") << trials[1][2];
  EXPECT_EQ(Query("SELECT count(*) FROM reports WHERE epoch > 4 OR "
                  "json_extract(metrics, '$.score') IS NULL")[0][0],
            "0");
}

// A program that reports epochs without steps, an epoch's training line then its validation
// line, stopped between the two (Ctrl-C) and going on from its own checkpoint on resume: the
// epoch's two lines are one report, and its validation metrics, printed again by the resumed
// run, are added to it (they were once dropped as an epoch already reported).
TEST_F(CommandTrialE2eTest, AnEpochCutBetweenItsLinesIsCompletedOnResume) {
  WriteProgram("epochs.sh", R"(#!/bin/sh
ckpt="$1/ckpt"; done=$(cat "$ckpt" 2>/dev/null || echo 0)
e=$((done + 1))
while [ $e -le 4 ]; do
  echo "sweep-report {\"epoch\": $e, \"train_loss\": 0.$e}"
  if [ $e = 3 ] && [ ! -e stopped-once ]; then touch stopped-once; while :; do sleep 0.05; done; fi
  echo "sweep-report {\"epoch\": $e, \"val_acc\": 0.$e}"
  echo $e > "$ckpt"
  e=$((e + 1))
done
)");
  Write("c.toml", R"([sweep]
name = "epochs"
metric = "val_acc"
mode = "max"
max_trials = 1
[parameters]
x = 1
[trial]
kind = "command"
command = ["./epochs.sh", "{trial_dir}"]
kill_grace = 0.2
)");
  const pid_t pid = Start("run c.toml", "run.log");
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(dir_ / "stopped-once"); }));
  ASSERT_TRUE(WaitUntil([&] { return ReportsAtEpoch(3) == 1; }));  // its first line, committed
  ::kill(pid, SIGINT);
  EXPECT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "run.log");
  Output resumed = Sweep("resume epochs");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT step, epoch, json_extract(metrics, '$.train_loss'), "
                  "json_extract(metrics, '$.val_acc') FROM reports ORDER BY step"),
            (std::vector<std::vector<std::string>>{{"1", "1.0", "0.1", "0.1"},
                                                   {"2", "2.0", "0.2", "0.2"},
                                                   {"3", "3.0", "0.3", "0.3"},
                                                   {"4", "4.0", "0.4", "0.4"}}));
  EXPECT_EQ(Query("SELECT status, objective FROM trials"),
            (std::vector<std::vector<std::string>>{{"completed", "0.4"}}));
}

// A program that reported the sweep's metric at max_resource and then hangs in its own end
// (children it waits for) or fails there: its result is its report at max_resource, so it ends
// completed, saying what came after, not failed.
TEST_F(CommandTrialE2eTest, WhatEndsAProgramAfterMaxResourceDoesNotUndoItsResult) {
  WriteProgram("tail.sh", R"(#!/bin/sh
for e in 1 2 3; do echo "sweep-report {\"epoch\": $e, \"score\": $e}"; done
[ "$1" = hang ] && sleep 30
exit 4
)");
  Write("c.toml", R"([sweep]
name = "tail"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[early_stopping]
algorithm = "asha"
max_resource = 3
[parameters]
end = { values = ["hang", "fail"] }
[trial]
kind = "command"
command = ["./tail.sh", "{end}"]
timeout = "1s"
kill_grace = 0.2
[executor]
cpu_slots = 2
)");
  Output o = Sweep("run c.toml");
  ASSERT_EQ(o.code, 0) << o.err;
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 2u);
  for (auto& [n, row] : trials) {
    EXPECT_EQ(row[1], "completed") << n << ": " << row[2];
    EXPECT_EQ(row[5], "3.0") << n;
  }
  EXPECT_EQ(trials[0][2].rfind("ran to early_stopping.max_resource = 3; after that: timed out "
                               "after 1 s",
                               0),
            0u)
      << trials[0][2];
  EXPECT_EQ(trials[1][2].rfind(
                "ran to early_stopping.max_resource = 3; after that: exited with code 4", 0),
            0u)
      << trials[1][2];
}

// The same after kill -9 of the coordinator while the program ran on past its report at
// max_resource: resume finds the result in the store and ends the trial completed, as live.
TEST_F(CommandTrialE2eTest, AResultAtMaxResourceSurvivesACoordinatorKilledAfterIt) {
  WriteProgram("tail.sh", R"(#!/bin/sh
[ -e ran-once ] && exit 4
for e in 1 2 3; do echo "sweep-report {\"epoch\": $e, \"score\": $e}"; done
touch ran-once
sleep 30
)");
  Write("c.toml", R"([sweep]
name = "tailkill"
metric = "score"
mode = "max"
max_trials = 1
[early_stopping]
algorithm = "asha"
max_resource = 3
[parameters]
x = 1
[trial]
kind = "command"
command = ["./tail.sh"]
kill_grace = 0.2
)");
  const pid_t pid = Start("run c.toml", "run.log");
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(dir_ / "ran-once") && ReportsAtEpoch(3) == 1; }))
      << sweep_e2e::Slurp(dir_ / "run.log");
  ::kill(pid, SIGKILL);
  Wait(pid);
  Output resumed = Sweep("resume tailkill");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(Query("SELECT status, error, objective FROM trials"),
            (std::vector<std::vector<std::string>>{
                {"completed", "ran to early_stopping.max_resource = 3", "3.0"}}));
}

// A program stopped with the sweep (Ctrl-C) that reports once more past max_resource as it
// ends: that report is not its result. It had reached max_resource, and ends completed there.
TEST_F(CommandTrialE2eTest, AReportPastMaxResourceWhileTheSweepStopsIsNotItsResult) {
  WriteProgram("late.sh", R"(#!/bin/sh
trap 'echo "sweep-report {\"epoch\": 4, \"score\": 0.4}"; exit 0' TERM
for e in 1 2 3; do echo "sweep-report {\"epoch\": $e, \"score\": 0.$e}"; done
while :; do sleep 0.05; done
)");
  Write("c.toml", R"([sweep]
name = "late"
metric = "score"
mode = "max"
max_trials = 1
[early_stopping]
algorithm = "asha"
max_resource = 3
[parameters]
x = 1
[trial]
kind = "command"
command = ["./late.sh"]
kill_grace = 5
)");
  const pid_t pid = Start("run c.toml", "run.log");
  ASSERT_TRUE(WaitUntil([&] { return ReportsAtEpoch(3) == 1; }));
  ::kill(pid, SIGINT);
  EXPECT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / "run.log");
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0][1], "completed");
  EXPECT_EQ(trials[0][2], "ran to early_stopping.max_resource = 3");
  EXPECT_EQ(trials[0][5], "0.3");
  EXPECT_EQ(Query("SELECT max(epoch) FROM reports")[0][0], "3.0");
}

TEST_F(CommandTrialE2eTest, ShippedExampleRuns) {
  if (std::system("command -v python3 > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not installed";
  }
  const fs::path config = fs::path(SWEEP_SOURCE_DIR) / "configs" / "command_example.toml";
  Output o = Sweep("run '" + config.string() + "'");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE((o.out + o.err).find("0 failed"), std::string::npos) << o.out << o.err;
  auto rows = Query("SELECT COUNT(*), SUM(status = 'completed'), MAX(objective) FROM trials");
  EXPECT_EQ(rows[0][0], "24");
  EXPECT_GE(std::stoi(rows[0][1]), 3);
  EXPECT_GT(std::stod(rows[0][2]), 0.85);
}

// The sweep's metric turning NaN or infinite fails the trial as diverged, wherever the report
// falls: on a rung (where early stopping would have ranked it last and pruned it) or between.
TEST_F(CommandTrialE2eTest, ADivergedMetricFailsTheTrialOnARungToo) {
  WriteProgram("d.sh", R"(#!/bin/sh
echo 'sweep-report {"epoch": 1, "score": 1}'
case "$1" in
  rung) echo 'sweep-report {"epoch": 2, "score": NaN}' ;;
  between) echo 'sweep-report {"epoch": 1.5, "score": Infinity}' ;;
esac
sleep 5
)");
  Write("d.toml", R"([sweep]
name = "div"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[early_stopping]
algorithm = "asha"
min_resource = 1
max_resource = 4
reduction_factor = 2
[parameters]
where = { values = ["rung", "between"] }
[trial]
kind = "command"
command = ["./d.sh", "{where}"]
[executor]
cpu_slots = 2
)");
  Output o = Sweep("run d.toml");
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 2u) << o.out << o.err;
  for (int n : {0, 1}) {
    EXPECT_EQ(trials[n][1], "failed") << n << ": " << trials[n][2];
    EXPECT_NE(trials[n][2].find("the run diverged"), std::string::npos) << trials[n][2];
  }
  EXPECT_EQ(o.code, 1) << "no trial completed or was pruned, and some failed";
}

// A program or folder missing on this machine, where trials run, would fail every trial: the
// sweep is refused before any starts, naming where the key is. (With --no-local, agents have their
// own.)
TEST_F(CommandTrialE2eTest, AProgramOrWorkdirMissingHereIsRefusedBeforeAnyTrial) {
  const std::string head =
      "[sweep]\nname = \"miss\"\nmax_trials = 1\nmetric = \"score\"\nmode = "
      "\"max\"\n[parameters]\nx = 1\n"
      "[trial]\nkind = \"command\"\n";
  const std::pair<std::string, std::string> cases[] = {
      {"command = [\"./train.sh\"]\nworkdir = \"/\"\n",
       "c.toml:10:12: trial.command: './train.sh' (/./train.sh) does not exist; a relative path is "
       "workdir's (/)"},
      {"command = [\"./train.sh\"]\nworkdir = \"nowhere\"\n",
       "c.toml:11:11: trial.workdir: '" + (dir_ / "nowhere").string() + "' is not a folder here"},
      {"command = [\"no-such-program-here\"]\n",
       "c.toml:10:12: trial.command: 'no-such-program-here' is not an executable program on PATH"},
      {"command = [\"./c.toml\"]\n",
       "(" + (dir_ / "./c.toml").string() + ") is not executable; make it executable (`chmod +x " +
           (dir_ / "./c.toml").string() +
           "`), or name its interpreter first: command = [\"python3\", \"./c.toml\", ...]"},
      // A bare name is looked up on PATH only: the file in workdir is "./c.toml".
      {"command = [\"c.toml\"]\n",
       "trial.command: 'c.toml' is not an executable program on PATH; workdir (" + dir_.string() +
           ") has a file of that name: write \"./c.toml\" to run it; it is not executable "
           "either: make it executable (`chmod +x "},
      // The program as it runs: `{{` is one brace.
      {"command = [\"./x{{y}}.sh\"]\n", "'./x{y}.sh' (" + (dir_ / "./x{y}.sh").string() + ")"},
  };
  for (const auto& [trial, message] : cases) {
    Write("c.toml", head + trial);
    Output o = Sweep("run c.toml");
    EXPECT_EQ(o.code, 2) << trial;
    EXPECT_NE(o.err.find(message), std::string::npos) << o.err;
    EXPECT_FALSE(fs::exists(dir_ / "sweeps.db-trials" / "miss")) << trial;
    // Nor is a database left behind that the refused run would have made.
    EXPECT_FALSE(fs::exists(dir_ / "sweeps.db")) << trial;
  }
  // And one that is there, braces and all, runs.
  WriteProgram("x{y}.sh", "#!/bin/sh\necho 'sweep-report {\"score\": 1}'\n");
  Write("c.toml", head + "command = [\"./x{{y}}.sh\"]\n");
  Output o = Sweep("run c.toml");
  EXPECT_EQ(o.code, 0) << o.out << o.err;
}

// A program that keeps its epoch in its trial's directory and reports epochs only: run again
// after its machine was lost (its worker killed), it goes on from there, and what it reports
// follows what the store kept; run again with its work done, it exits 0 reporting nothing and
// the trial ends with the stored reports.
TEST_F(CommandTrialE2eTest, ARunAgainGoesOnFromTheProgramsOwnCheckpoint) {
  WriteProgram("ckpt.sh", R"(#!/bin/sh
state="$SWEEP_TRIAL_DIR/epoch"
e=0; [ -f "$state" ] && e=$(cat "$state")
while [ $e -lt 6 ]; do
  e=$((e + 1))
  echo "sweep-report {\"epoch\": $e, \"loss\": $((10 - e))}"
  echo $e > "$state"
  if [ $e -eq "$1" ] && [ ! -f "$SWEEP_TRIAL_DIR/lost" ]; then
    touch "$SWEEP_TRIAL_DIR/lost"; sleep 0.5; kill -9 $PPID; sleep 30
  fi
done
)");
  Write("c.toml", R"([sweep]
name = "ck"
metric = "loss"
mode = "min"
[search]
algorithm = "grid"
[parameters]
lost_after = { values = [3, 6] }
[trial]
kind = "command"
command = ["./ckpt.sh", "{lost_after}"]
[executor]
cpu_slots = 2
)");
  Output o = Sweep("run c.toml");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  auto trials = TrialsByNumber();
  ASSERT_EQ(trials.size(), 2u);
  for (int n : {0, 1}) {
    EXPECT_EQ(trials[n][1], "completed") << n << ": " << trials[n][2];
    EXPECT_EQ(trials[n][5], "4.0") << n;
    EXPECT_EQ(Query("SELECT group_concat(step || ':' || epoch) FROM (SELECT step, epoch FROM "
                    "reports WHERE trial = " +
                    std::to_string(n) + " ORDER BY step)")[0][0],
              "1:1.0,2:2.0,3:3.0,4:4.0,5:5.0,6:6.0")
        << n;
  }
  EXPECT_NE((o.out + o.err).find("running it again"), std::string::npos) << o.out << o.err;

  // A store made anew: the trials' first runs find their folders empty, not the old sweep's
  // checkpoints to go on from (which would leave them nothing to report), nor its logs.
  fs::remove(dir_ / "sweeps.db");
  fs::remove(dir_ / "sweeps.db-wal");
  fs::remove(dir_ / "sweeps.db-shm");
  const fs::path old_log = dir_ / "sweeps.db-trials" / "ck" / "trial-0" / "stderr.log";
  ASSERT_TRUE(fs::exists(old_log));
  // The old folders are moved aside and deleted off the coordinator's loop; so is what a
  // coordinator that ended while deleting left under its hidden name.
  const fs::path folders = dir_ / "sweeps.db-trials" / "ck";
  fs::create_directories(folders / ".cleared-trial-7-1-2-0" / "sub");
  std::ofstream(folders / ".cleared-trial-7-1-2-0" / "sub" / "model.pt") << "old";
  Output again = Sweep("run c.toml");
  ASSERT_EQ(again.code, 0) << again.out << again.err;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folders)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"trial-0", "trial-1"}));
  trials = TrialsByNumber();
  for (int n : {0, 1}) {
    EXPECT_EQ(trials[n][1], "completed") << n << ": " << trials[n][2];
    EXPECT_EQ(Query("SELECT count(*) FROM reports WHERE trial = " + std::to_string(n))[0][0], "6")
        << n;
  }
  // Its two runs (the first lost its worker) in this sweep, and none of the old sweep's.
  const std::string log = sweep_e2e::Slurp(old_log);
  size_t runs = 0;
  for (size_t at = log.find("[sweep]"); at != std::string::npos; at = log.find("[sweep]", at + 1))
    ++runs;
  EXPECT_EQ(runs, 2u) << log;
}

}  // namespace
