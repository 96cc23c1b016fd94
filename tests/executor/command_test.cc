// Tests for command trials: the argv template, `sweep-report` lines, and the runner against
// real /bin/sh programs (reports, environment, exit codes, signals, stop with SIGTERM then
// SIGKILL, timeouts, divergence, programs that cannot start). Single-threaded.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "executor/command.h"
#include "executor/trial.h"
#include "trainer/trainer.h"

namespace sweep::executor {
namespace {

using nlohmann::json;

// ---- template ----

TEST(CommandTemplateTest, AcceptsParametersBuiltinsAndLiteralBraces) {
  EXPECT_TRUE(CheckCommandTemplate({"python3", "train.py", "--lr={lr}", "--out={trial_dir}/m",
                                    "{{not a placeholder}}", "--seed={seed}"},
                                   {"lr"})
                  .ok());
}

TEST(CommandTemplateTest, RefusesUnknownPlaceholderNamingIt) {
  Status s = CheckCommandTemplate({"python3", "train.py", "--lr={learning_rate}"}, {"lr"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("argument 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("{learning_rate}"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("lr, trial"), std::string::npos) << s.message();
}

// A parameter named like a builtin ({seed}): the program would get one value and the store
// record the other. Refused when the command uses it; unused, the name is harmless.
TEST(CommandTemplateTest, RefusesAPlaceholderThatIsBothAParameterAndABuiltin) {
  for (const char* name : {"seed", "gpus", "trial", "trial_dir"}) {
    Status s = CheckCommandTemplate({"p", std::string("--x={") + name + "}"}, {"lr", name});
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find(std::string("{") + name +
                               "} names both a parameter and a value every trial gets"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("rename the parameter"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(CheckCommandTemplate({"p", "--lr={lr}"}, {"lr", "seed"}).ok());
}

TEST(CommandTemplateTest, RefusesMalformedTemplates) {
  EXPECT_FALSE(CheckCommandTemplate({}, {}).ok());
  EXPECT_FALSE(CheckCommandTemplate({""}, {}).ok());
  EXPECT_FALSE(CheckCommandTemplate({"{lr}"}, {"lr"}).ok());  // the program itself
  EXPECT_FALSE(CheckCommandTemplate({"p", "--lr={lr"}, {"lr"}).ok());
  EXPECT_FALSE(CheckCommandTemplate({"p", "a}b"}, {}).ok());
  EXPECT_FALSE(CheckCommandTemplate({"p", "{}"}, {}).ok());
}

TEST(CommandTemplateTest, ExpandsValuesByType) {
  json values = {{"lr", 0.001},    {"layers", json::array({256, 128})},
                 {"opt", "adamw"}, {"nesterov", true},
                 {"batch", 64},    {"trial", 7}};
  auto argv = ExpandCommand({"p", "--lr={lr}", "--layers={layers}", "{opt}", "--n={nesterov}",
                             "b{batch}x{trial}", "{{{opt}}}"},
                            values);
  ASSERT_TRUE(argv.ok()) << argv.status().message();
  EXPECT_EQ(*argv, (std::vector<std::string>{"p", "--lr=0.001", "--layers=[256,128]", "adamw",
                                             "--n=true", "b64x7", "{adamw}"}));
}

// A conditional parameter the trial does not have takes its whole argument with it.
TEST(CommandTemplateTest, LeavesOutArgumentsOfAbsentParameters) {
  auto argv = ExpandCommand({"p", "--opt={opt}", "--momentum={momentum}"}, json{{"opt", "adamw"}});
  ASSERT_TRUE(argv.ok());
  EXPECT_EQ(*argv, (std::vector<std::string>{"p", "--opt=adamw"}));
}

// ---- report lines ----

TEST(ReportLineTest, ReadsStepEpochAndMetrics) {
  auto r = ParseReportLine(R"(sweep-report {"epoch": 2, "step": 40, "val_acc": 0.91, "loss": 1})");
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->ok()) << r->status().message();
  EXPECT_EQ((*r)->step, 40);
  EXPECT_EQ((*r)->epoch, 2.0);
  EXPECT_EQ((*r)->metrics, (json{{"val_acc", 0.91}, {"loss", 1}}));
}

// A report line too long to cross from an agent in one frame is refused wherever it runs.
TEST(ReportLineTest, OverlongLinesAreRefused) {
  std::string line = "sweep-report {\"epoch\": 1";
  for (int i = 0; line.size() <= kMaxReportBytes; ++i)
    line += ", \"m" + std::to_string(i) + "\": 1";
  line += "}";
  auto r = ParseReportLine(line);
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->status().message(),
            "it is longer than a report line may be (262144 bytes): report fewer metrics per "
            "line");
}

TEST(ReportLineTest, OtherLinesAreNotReports) {
  EXPECT_FALSE(ParseReportLine("epoch 1 loss 0.3").has_value());
  EXPECT_FALSE(ParseReportLine("sweep-reportx {}").has_value());
  EXPECT_FALSE(ParseReportLine("sweep-reports follow").has_value());
  EXPECT_FALSE(ParseReportLine("sweep-report").has_value());
  // A tab, or no space at all, still makes a report.
  for (const char* line : {"sweep-report\t{\"loss\": 1}", "sweep-report{\"loss\": 1}"}) {
    auto r = ParseReportLine(line);
    ASSERT_TRUE(r.has_value() && r->ok()) << line;
    EXPECT_EQ((*r)->metrics, (json{{"loss", 1}})) << line;
  }
}

// A line is read as a terminal shows it: a progress bar drawn over and over before the report
// (tqdm on stdout), blanks before it, a CRLF end.
TEST(ReportLineTest, ALineIsReadAsATerminalShowsIt) {
  for (const char* line :
       {"epoch 1: 100%|####|\rsweep-report {\"loss\": 1}", "  sweep-report {\"loss\": 1}",
        "\t sweep-report {\"loss\": 1}\r", "a\rb\r sweep-report {\"loss\": 1}\r",
        "sweep-report {\"loss\": 1}\r\r"}) {
    auto r = ParseReportLine(line);
    ASSERT_TRUE(r.has_value() && r->ok()) << line;
    EXPECT_EQ((*r)->metrics, (json{{"loss", 1}})) << line;
  }
  // What the terminal shows last is what counts: a report drawn over is gone.
  EXPECT_FALSE(ParseReportLine("sweep-report {\"loss\": 1}\rdone").has_value());
}

TEST(ReportLineTest, AReportAfterOtherTextIsMentionedNotRead) {
  EXPECT_FALSE(ParseReportLine("loss 1 sweep-report {\"loss\": 1}").has_value());
  EXPECT_TRUE(MentionsReport("loss 1 sweep-report {\"loss\": 1}"));
  EXPECT_TRUE(MentionsReport("[INFO] sweep-report\t{}"));
  EXPECT_FALSE(MentionsReport("printing sweep-report lines from now on"));
  EXPECT_FALSE(MentionsReport("sweep-reports {"));
}

TEST(ReportLineTest, MalformedReportsSayWhy) {
  for (const char* line : {"sweep-report [1, 2]", "sweep-report {\"a\": ", "sweep-report 3",
                           "sweep-report {\"step\": -1}", "sweep-report {\"step\": 1.5}",
                           "sweep-report {\"epoch\": \"one\"}"}) {
    auto r = ParseReportLine(line);
    ASSERT_TRUE(r.has_value()) << line;
    EXPECT_FALSE(r->ok()) << line;
  }
  // Text that is not JSON: the parser's words say where and what.
  auto word = ParseReportLine(R"(sweep-report {"epoch": 1, "score": high})");
  ASSERT_TRUE(word.has_value());
  ASSERT_FALSE(word->ok());
  EXPECT_NE(word->status().message().find("parse error at line 1, column"), std::string::npos)
      << word->status().message();
  auto cut = ParseReportLine(R"(sweep-report {"a": )");
  ASSERT_TRUE(cut.has_value());
  EXPECT_NE(cut->status().message().find("parse error at line 1, column"), std::string::npos)
      << cut->status().message();
}

// A metric name the agent protocol could not carry (empty, over 256 bytes) is no metric on any
// machine; a bad token quoted by the parser, or a huge bad epoch, is cut in the message.
TEST(ReportLineTest, NamesTooLongOrEmptyAreNotMetricsAndMessagesStayShort) {
  const std::string longest(kMaxMetricNameBytes, 'm');
  const std::string too_long(kMaxMetricNameBytes + 1, 'm');
  auto r = ParseReportLine("sweep-report {\"epoch\": 1, \"" + longest + "\": 1, \"" + too_long +
                           "\": 2, \"\": 3, \"acc\": 0.5}");
  ASSERT_TRUE(r.has_value() && r->ok());
  EXPECT_EQ((*r)->metrics, (json{{longest, 1}, {"acc", 0.5}}));
  ASSERT_EQ((*r)->ignored.size(), 2u);
  EXPECT_LT((*r)->ignored[0].size() + (*r)->ignored[1].size(), 200u);

  const std::string huge(100'000, 'x');
  auto bad = ParseReportLine("sweep-report {\"acc\": " + huge + "}");
  ASSERT_TRUE(bad.has_value() && !bad->ok());
  EXPECT_LT(bad->status().message().size(), 600u);
  auto epoch = ParseReportLine("sweep-report {\"epoch\": \"" + huge + "\"}");
  ASSERT_TRUE(epoch.has_value() && !epoch->ok());
  EXPECT_LT(epoch->status().message().size(), 300u);
  EXPECT_NE(epoch->status().message().find("bytes more)"), std::string::npos);
}

TEST(AbbreviateTest, CutsAtACharacterBoundaryAndSaysHowMuchIsLeft) {
  EXPECT_EQ(Abbreviate("short", 10), "short");
  EXPECT_EQ(Abbreviate("abcdefghij", 4), "abcd... (6 bytes more)");
  // "é" is two bytes: a cut inside it backs up to before it.
  EXPECT_EQ(Abbreviate("ab\xc3\xa9z", 3), "ab... (3 bytes more)");
}

// Python's json.dumps writes NaN and Infinity; they are read as not finite, and strings inside
// values are left alone.
TEST(ReportLineTest, ReadsPythonNonFiniteValues) {
  auto r = ParseReportLine(
      R"(sweep-report {"loss": NaN, "val": -Infinity, "note": "NaN here", "acc": 0.5})");
  ASSERT_TRUE(r.has_value() && r->ok());
  EXPECT_EQ((*r)->nonfinite, (std::vector<std::string>{"loss", "val"}));
  EXPECT_EQ((*r)->ignored, (std::vector<std::string>{"note"}));
  EXPECT_EQ((*r)->metrics, (json{{"acc", 0.5}}));
  // null (Python's None) is no value, not a diverged one: not a metric.
  auto none = ParseReportLine(R"(sweep-report {"loss": null, "acc": 0.5})");
  ASSERT_TRUE(none.has_value() && none->ok());
  EXPECT_TRUE((*none)->nonfinite.empty());
  EXPECT_EQ((*none)->ignored, (std::vector<std::string>{"loss"}));
  auto epoch = ParseReportLine(R"(sweep-report {"epoch": Infinity, "acc": 0.5})");
  ASSERT_TRUE(epoch.has_value() && !epoch->ok());
  EXPECT_EQ(epoch->status().message(), "\"epoch\" must be a non-negative number, got Infinity");
  // A number past a double's range is an infinity (as Python reads it), not a lost line; one
  // within it, and the exponents of ordinary numbers, are read as written.
  auto over = ParseReportLine(
      R"(sweep-report {"loss": 1e400, "val": -2.5E+999, "acc": 1e-5, "step": 3, "lr": -0.5e2})");
  ASSERT_TRUE(over.has_value() && over->ok()) << over->status().message();
  EXPECT_EQ((*over)->nonfinite, (std::vector<std::string>{"loss", "val"}));
  EXPECT_EQ((*over)->metrics, (json{{"acc", 1e-5}, {"lr", -50.0}}));
  EXPECT_EQ((*over)->step, 3);
}

// ---- the runner ----

class CommandTrialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "command_trial_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Braces doubled, so the script is taken literally rather than as a template.
  static std::string Literal(const std::string& text) {
    std::string out;
    for (char c : text) {
      out += c;
      if (c == '{' || c == '}') out += c;
    }
    return out;
  }

  // A task running `sh -c SCRIPT` (with "$@" = extra, which may hold placeholders).
  TrialTask ShellTask(const std::string& script, std::vector<std::string> extra = {}) {
    TrialTask task;
    task.number = 3;
    task.kind = TrialKind::kCommand;
    task.params = json{{"lr", 0.05}, {"opt", "sgd"}};
    task.seed = 99;
    task.threads = 2;
    std::vector<std::string> argv = {"sh", "-c", Literal(script), "sh"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    task.settings = {{"command", argv},
                     {"workdir", dir_},
                     {"trial_dir", dir_ + "/trial-3"},
                     {"metric", "val_acc"},
                     {"kill_grace_s", 0.3}};
    return task;
  }

  struct Run {
    TrialOutcome outcome;
    std::vector<std::tuple<int64_t, double, json>> reports;
    double seconds = 0;
  };
  Run RunIt(const TrialTask& task, std::atomic<bool>* stop = nullptr, int stop_after_reports = -1) {
    std::atomic<bool> own_stop{false};
    std::atomic<bool>& flag = stop != nullptr ? *stop : own_stop;
    Run run;
    auto sink = [&](int64_t step, double epoch, const json& metrics) {
      run.reports.emplace_back(step, epoch, metrics);
      if (static_cast<int>(run.reports.size()) == stop_after_reports) flag = true;
    };
    auto start = std::chrono::steady_clock::now();
    run.outcome = RunTrial(task, sink, flag);
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return run;
  }

  std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::string dir_;
};

TEST_F(CommandTrialTest, ReportsLinesAndCompletes) {
  Run run = RunIt(ShellTask(
      "echo starting; "
      "echo 'sweep-report {\"epoch\": 1, \"val_acc\": 0.5}'; "
      "echo 'sweep-report {\"val_acc\": 0.7, \"loss\": 0.2}'; "
      "printf 'sweep-report {\"step\": 10, \"epoch\": 3, \"val_acc\": 0.8}'"));  // no newline
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  ASSERT_EQ(run.reports.size(), 3u);
  EXPECT_EQ(run.reports[0], std::make_tuple(int64_t{1}, 1.0, json{{"val_acc", 0.5}}));
  EXPECT_EQ(run.reports[1],
            std::make_tuple(int64_t{2}, 2.0, json{{"val_acc", 0.7}, {"loss", 0.2}}));
  EXPECT_EQ(run.reports[2], std::make_tuple(int64_t{10}, 3.0, json{{"val_acc", 0.8}}));
  std::string out = Read(dir_ + "/trial-3/stdout.log");
  EXPECT_EQ(out.rfind("starting\nsweep-report", 0), 0u) << out;
}

// NCCL_RUNTIME_CONNECT set for this process's own NCCL (trainer::ConnectNcclAtInit) is not the
// program's; one the user set is.
TEST_F(CommandTrialTest, TheProgramDoesNotInheritOurNcclSetting) {
  const char* user = std::getenv("NCCL_RUNTIME_CONNECT");
  if (user != nullptr) GTEST_SKIP() << "NCCL_RUNTIME_CONNECT is set in this environment";
  trainer::ConnectNcclAtInit();
  ASSERT_STREQ(std::getenv("NCCL_RUNTIME_CONNECT"), "0");
  ASSERT_TRUE(trainer::NcclEnvironmentIsOurs());
  TrialTask task = ShellTask(
      "echo \"nccl=[${NCCL_RUNTIME_CONNECT-unset}]\" >&2; echo 'sweep-report {\"val_acc\": 1}'");
  Run run = RunIt(task);
  ::unsetenv("NCCL_RUNTIME_CONNECT");
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  const std::string err = Read(dir_ + "/trial-3/stderr.log");
  EXPECT_NE(err.find("nccl=[unset]"), std::string::npos) << err;
}

TEST_F(CommandTrialTest, GivesTheProgramItsEnvironmentAndArguments) {
  TrialTask task = ShellTask(
      "echo \"$SWEEP_PARAMS|$SWEEP_TRIAL|$SWEEP_SEED|$SWEEP_TRIAL_DIR|$CUDA_VISIBLE_DEVICES|"
      "$OMP_NUM_THREADS|$PWD|$1|$2\" >&2; echo 'sweep-report {\"val_acc\": 1}'",
      {"--lr={lr}", "{opt}-{trial}"});
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  std::string err = Read(dir_ + "/trial-3/stderr.log");
  std::string expected =
      "{\"lr\":0.05,\"opt\":\"sgd\"}|3|99|" + dir_ + "/trial-3||2|" + dir_ + "|--lr=0.05|sgd-3\n";
  EXPECT_NE(err.find(expected), std::string::npos) << err;

  // A 64-bit trial seed reaches the program folded to 32 bits (NumPy's seed takes no more).
  task.seed = 0x123456789abcdef0;
  task.settings["command"] = {"sh", "-c",
                              "echo \"seed=$SWEEP_SEED arg=$0\" >&2; "
                              "echo 'sweep-report {{\"val_acc\": 1}}'",
                              "{seed}"};
  run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  EXPECT_NE(Read(dir_ + "/trial-3/stderr.log").find("seed=2290649224 arg=2290649224\n"),
            std::string::npos)
      << Read(dir_ + "/trial-3/stderr.log");

  task.gpus = {2, 5};
  task.settings["command"] = {"sh", "-c",
                              "echo \"gpus=$CUDA_VISIBLE_DEVICES arg=$0\" >&2; "
                              "echo 'sweep-report {{\"val_acc\": 1}}'",
                              "{gpus}"};
  run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  EXPECT_NE(Read(dir_ + "/trial-3/stderr.log").find("gpus=2,5 arg=2,5\n"), std::string::npos);

  // Started with some devices only (a batch system's allocation): the trial's ordinals are
  // positions in that list, and its program sees the devices they stand for, in its environment
  // and in `{gpus}` alike (a program that sets CUDA_VISIBLE_DEVICES from it gets its own devices).
  ::setenv("CUDA_VISIBLE_DEVICES", "4, 6,GPU-abc,7", 1);
  task.gpus = {1, 2};
  run = RunIt(task);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  EXPECT_NE(Read(dir_ + "/trial-3/stderr.log").find("gpus=6,GPU-abc arg=6,GPU-abc\n"),
            std::string::npos)
      << Read(dir_ + "/trial-3/stderr.log");
}

TEST_F(CommandTrialTest, NonZeroExitFailsWithCodeAndLastLines) {
  Run run = RunIt(ShellTask(
      "echo 'sweep-report {\"val_acc\": 0.1}'; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "
      "\"line $i\" >&2; done; printf '\\033[31mTraceback:\\a boom\\033[0m\\n' >&2; exit 3"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_EQ(run.outcome.error.rfind("exited with code 3; last lines of stderr:\n", 0), 0u)
      << run.outcome.error;
  // Its colours and bell become blanks: the error reaches terminals.
  EXPECT_NE(run.outcome.error.find(" [31mTraceback:  boom [0m"), std::string::npos)
      << run.outcome.error;
  EXPECT_NE(run.outcome.error.find("line 12"), std::string::npos);
  EXPECT_EQ(run.outcome.error.find("line 2\n"), std::string::npos) << "only the last lines";
  EXPECT_EQ(run.reports.size(), 1u);
}

TEST_F(CommandTrialTest, CrashBySignalIsNamed) {
  Run run = RunIt(ShellTask("echo 'sweep-report {\"val_acc\": 0.1}'; kill -SEGV $$"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_NE(run.outcome.error.find("killed by signal 11"), std::string::npos) << run.outcome.error;
}

TEST_F(CommandTrialTest, ExitingWithoutAReportIsAFailureThatSaysHow) {
  Run run = RunIt(ShellTask("echo hello"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_NE(run.outcome.error.find("sweep-report"), std::string::npos) << run.outcome.error;
  EXPECT_NE(run.outcome.error.find("val_acc"), std::string::npos) << run.outcome.error;
}

// A run again first reports what its earlier runs printed from the last stored report on,
// each with the step that run gave it (Line's numbering after the stored reports it started
// from, in .sweep-runs): an epoch's two lines (one step, as they were live), and a line cut
// short by a kill, all number as they did live.
TEST_F(CommandTrialTest, ARunAgainReportsWhatTheStoreLostAsNumberedLive) {
  const std::string folder = dir_ + "/trial-3";
  std::filesystem::create_directories(folder);
  const std::string first =
      "hello\n"
      "sweep-report {\"epoch\": 0, \"loss\": 4}\n"
      "sweep-report {\"epoch\": 0, \"val_acc\": 0.1}\n"
      "sweep-report {\"epoch\": 1, \"loss\": 3}\n"
      "sweep-report {\"epoch\": 1, \"val_acc\": 0.2}\n"
      "sweep-report {\"epo\n";  // killed mid-line; the next run starts a line of its own
  const std::string second =
      "sweep-report {\"epoch\": 2, \"loss\": 2}\n"
      "sweep-report {\"epoch\": 2, \"val_acc\": 0.3}\n";
  {
    std::ofstream(folder + "/stdout.log") << first << second;
    std::ofstream(folder + "/.sweep-runs")
        << "{\"sweep\":\"s@1\",\"stdout_offset\":0,\"stored_step\":0,\"stored_epoch\":0,"
           "\"numbering\":2}\n"
        << "{\"sweep\":\"s@1\",\"stdout_offset\":" << first.size()
        << ",\"stored_step\":2,\"stored_epoch\":1,\"numbering\":2}\n";
  }
  TrialTask task = ShellTask("exit 0");  // it finds its work done in its own checkpoint
  task.settings["sweep_key"] = "s@1";
  task.stored_step = 1;  // the store kept epoch 0 only
  task.stored_epoch = 0;
  task.stored_metric = true;
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  // The last stored step goes again too (the store adds what it lacks of it: a step's later
  // lines may not have reached it), then the steps past it.
  ASSERT_EQ(run.reports.size(), 6u);
  const std::vector<std::pair<int64_t, double>> expected = {{1, 0}, {1, 0}, {2, 1},
                                                            {2, 1}, {3, 2}, {3, 2}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(std::get<0>(run.reports[i]), expected[i].first) << i;
    EXPECT_EQ(std::get<1>(run.reports[i]), expected[i].second) << i;
  }
  EXPECT_EQ(std::get<2>(run.reports[5]), json({{"val_acc", 0.3}}));
  const std::string err = Read(folder + "/stderr.log");
  EXPECT_NE(err.find("reported again 2 report(s) of an earlier run"), std::string::npos) << err;
  // This run is recorded after the reports given again, for the next run to number from.
  const std::string runs = Read(folder + "/.sweep-runs");
  EXPECT_NE(runs.find("\"stored_epoch\":2.0,\"stored_step\":3"), std::string::npos) << runs;
}

// A run again whose program goes on from its own state past reports the store and stdout.log
// lost (still in the pipe when its worker died) says that its epochs have a gap; one that goes
// on where the kept reports end says nothing.
TEST_F(CommandTrialTest, ARunAgainSaysWhenItsEpochsSkipPastTheKeptOnes) {
  for (const int next : {225, 221}) {
    const std::string folder = dir_ + "/trial-" + std::to_string(next);
    std::filesystem::create_directories(folder);
    TrialTask task = ShellTask("echo 'sweep-report {\"epoch\": " + std::to_string(next) +
                               ", \"val_acc\": 0.5}'");
    task.number = next;
    task.settings["trial_dir"] = folder;
    task.stored_step = 220;
    task.stored_epoch = 220;
    task.stored_metric = true;
    task.fresh = false;
    Run run = RunIt(task);
    ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
    ASSERT_EQ(run.reports.size(), 1u);
    EXPECT_EQ(std::get<0>(run.reports[0]), 221);
    const std::string err = Read(folder + "/stderr.log");
    const bool said = err.find(
                          "this run's first new report is epoch 225, and the last kept one "
                          "(step 220) epoch 220") != std::string::npos;
    EXPECT_EQ(said, next == 225) << err;
  }
}

// Runs recorded by an earlier version, which numbered every line as a report of its own, are
// read back as they were numbered live: two lines of one epoch are two steps there.
TEST_F(CommandTrialTest, ARunAgainNumbersAnEarlierVersionsRunsAsItDid) {
  const std::string folder = dir_ + "/trial-3";
  std::filesystem::create_directories(folder);
  {
    std::ofstream(folder + "/stdout.log") << "sweep-report {\"epoch\": 1, \"loss\": 2}\n"
                                             "sweep-report {\"epoch\": 1, \"val_acc\": 0.1}\n"
                                             "sweep-report {\"epoch\": 2, \"loss\": 1}\n"
                                             "sweep-report {\"epoch\": 2, \"val_acc\": 0.2}\n";
    std::ofstream(folder + "/.sweep-runs")
        << "{\"sweep\":\"s@1\",\"stdout_offset\":0,\"stored_step\":0,\"stored_epoch\":0}\n";
  }
  TrialTask task = ShellTask("exit 0");
  task.settings["sweep_key"] = "s@1";
  task.stored_step = 2;  // that version stored epoch 1's two lines as steps 1 and 2
  task.stored_epoch = 1;
  task.stored_metric = true;
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  const std::vector<std::pair<int64_t, double>> expected = {{2, 1}, {3, 2}, {4, 2}};
  ASSERT_EQ(run.reports.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(std::get<0>(run.reports[i]), expected[i].first) << i;
    EXPECT_EQ(std::get<1>(run.reports[i]), expected[i].second) << i;
  }
  EXPECT_EQ(std::get<2>(run.reports[2]), json({{"val_acc", 0.2}}));
}

// Run again after the store kept two of epoch 3's three loss lines (steps 7 and 8): the epoch
// printed again maps onto those steps in order, then goes on (step 9, with the epoch's
// validation line), as an uninterrupted run numbered it: nothing is reported twice.
TEST_F(CommandTrialTest, ARunAgainMapsAnEpochsLinesOntoItsStoredSteps) {
  TrialTask task = ShellTask(
      "for e in 3 4; do for b in 1 2 3; do "
      "printf 'sweep-report {\"epoch\": %s, \"loss\": 0.%s%s}\\n' $e $e $b; done; "
      "printf 'sweep-report {\"epoch\": %s, \"val_acc\": 0.%s}\\n' $e $e; done");
  task.stored_step = 8;
  task.stored_epoch = 3;
  task.stored_epoch_steps = 2;
  task.stored_metric = true;
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  const std::vector<std::pair<int64_t, json>> expected = {
      {7, {{"loss", 0.31}}},   {8, {{"loss", 0.32}}},   {9, {{"loss", 0.33}}},
      {9, {{"val_acc", 0.3}}}, {10, {{"loss", 0.41}}},  {11, {{"loss", 0.42}}},
      {12, {{"loss", 0.43}}},  {12, {{"val_acc", 0.4}}}};
  ASSERT_EQ(run.reports.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(std::get<0>(run.reports[i]), expected[i].first) << i;
    EXPECT_EQ(std::get<2>(run.reports[i]), expected[i].second) << i;
  }
}

// A program logging several times an epoch without a step: a line that repeats a metric of the
// epoch's report is a report of its own, so none is dropped; a line that adds the metrics the
// report lacks joins it.
TEST_F(CommandTrialTest, LinesOfAnEpochJoinOnlyWhenTheyAddMetrics) {
  Run run = RunIt(ShellTask(
      "for b in 1 2 3; do printf 'sweep-report {\"epoch\": 1, \"loss\": 0.%s}\\n' $b; done; "
      "echo 'sweep-report {\"epoch\": 1, \"val_acc\": 0.5}'; "
      "echo 'sweep-report {\"epoch\": 2, \"loss\": 0.1, \"val_acc\": 0.6}'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  const std::vector<std::pair<int64_t, json>> expected = {{1, {{"loss", 0.1}}},
                                                          {2, {{"loss", 0.2}}},
                                                          {3, {{"loss", 0.3}}},
                                                          {3, {{"val_acc", 0.5}}},
                                                          {4, {{"loss", 0.1}, {"val_acc", 0.6}}}};
  ASSERT_EQ(run.reports.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(std::get<0>(run.reports[i]), expected[i].first) << i;
    EXPECT_EQ(std::get<2>(run.reports[i]), expected[i].second) << i;
  }
}

// What a run again must not read back: a run's output past its timeout (not recorded live
// either), and runs recorded before the log was emptied (their offsets mean nothing now).
TEST_F(CommandTrialTest, ARunAgainReadsBackOnlyWhatWasRecordedLive) {
  TrialTask timed = ShellTask(
      "trap 'echo \"sweep-report {\\\"epoch\\\": 9, \\\"val_acc\\\": 99}\"; exit 0' TERM; "
      "echo 'sweep-report {\"epoch\": 1, \"val_acc\": 0.1}'; while :; do sleep 0.05; done");
  timed.settings["timeout_s"] = 0.5;
  timed.settings["sweep_key"] = "s@1";
  timed.fresh = true;
  Run first = RunIt(timed);
  ASSERT_EQ(first.outcome.kind, TrialOutcome::Kind::kFailed);
  ASSERT_NE(Read(dir_ + "/trial-3/stdout.log").find("99"), std::string::npos);
  // Run again as if the failure had not reached the store (its coordinator killed meanwhile).
  TrialTask again = ShellTask("exit 0");
  again.settings["sweep_key"] = "s@1";
  Run second = RunIt(again);
  ASSERT_EQ(second.outcome.kind, TrialOutcome::Kind::kCompleted) << second.outcome.error;
  ASSERT_EQ(second.reports.size(), 1u);
  EXPECT_EQ(std::get<2>(second.reports[0]), json({{"val_acc", 0.1}}));

  // The log emptied by hand: nothing is read back, and the runs recorded from now on count.
  std::ofstream(dir_ + "/trial-3/stdout.log", std::ios::trunc) << "sweep-report {\"val_acc\": 7}\n";
  Run third = RunIt(again);
  EXPECT_TRUE(third.reports.empty());
}

// A record of the run that cannot be written (a full disk; here a folder in its place) is the
// machine's trouble: the trial does not run there (a later run could not number its reports),
// and it is not failed for good.
TEST_F(CommandTrialTest, ARunThatCannotBeRecordedIsInterrupted) {
  std::filesystem::create_directories(dir_ + "/trial-3/.sweep-runs");
  TrialTask task = ShellTask("echo 'sweep-report {\"val_acc\": 1}'");
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kInterrupted) << run.outcome.error;
  EXPECT_NE(run.outcome.error.find(".sweep-runs: cannot record the run"), std::string::npos)
      << run.outcome.error;
  EXPECT_TRUE(run.reports.empty());
}

// A run again in a folder another sweep of the same name left (a store made anew; this trial
// never ran here in this sweep): nothing of it is reported or gone on from, the folder is
// cleared as on a first run.
TEST_F(CommandTrialTest, AFolderOfAnotherSweepIsClearedNotReplayed) {
  const std::string folder = dir_ + "/trial-3";
  std::filesystem::create_directories(folder);
  {
    std::ofstream(folder + "/stdout.log") << "sweep-report {\"epoch\": 1, \"val_acc\": 0.9}\n";
    std::ofstream(folder + "/.sweep-runs")
        << "{\"sweep\":\"s@1\",\"stdout_offset\":0,\"stored_step\":0,\"stored_epoch\":0}\n";
    std::ofstream(folder + "/ckpt") << "old";
  }
  TrialTask task = ShellTask(
      "if [ -e \"$SWEEP_TRIAL_DIR/ckpt\" ]; then v=0.9; else v=0.5; fi; "
      "echo \"sweep-report {\\\"epoch\\\": 1, \\\"val_acc\\\": $v}\"");
  task.settings["sweep_key"] = "s@2";
  task.stored_step = 0;
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  ASSERT_EQ(run.reports.size(), 1u);
  EXPECT_EQ(std::get<2>(run.reports[0]), json({{"val_acc", 0.5}}));
  EXPECT_NE(Read(folder + "/stderr.log").find("held another sweep's run of this trial"),
            std::string::npos)
      << Read(folder + "/stderr.log");
  EXPECT_EQ(Read(folder + "/stdout.log"), "sweep-report {\"epoch\": 1, \"val_acc\": 0.5}\n");
}

// Our notes in the stderr log start a line of their own, even after a program's output that
// did not end its line.
TEST_F(CommandTrialTest, ANoteAfterAnUnfinishedLineStartsOnANewLine) {
  Run run =
      RunIt(ShellTask("printf 'half a line' >&2; echo 'sweep-report {bad'; echo "
                      "'sweep-report {\"val_acc\": 1}'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  const std::string err = Read(dir_ + "/trial-3/stderr.log");
  EXPECT_NE(err.find("\nhalf a line\n[sweep] stdout line 1 is not a report"), std::string::npos)
      << err;
}

// A stop (pruning) sends SIGTERM; a program that ends on it is stopped at once.
TEST_F(CommandTrialTest, StopSendsSigtermToTheProgram) {
  std::atomic<bool> stop{false};
  Run run = RunIt(ShellTask("trap 'echo got-term >&2; exit 0' TERM; i=0; while true; do "
                            "i=$((i+1)); echo \"sweep-report {\\\"val_acc\\\": 0.$i}\"; sleep "
                            "0.05; done"),
                  &stop, 2);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kStopped) << run.outcome.error;
  EXPECT_GE(run.reports.size(), 2u);
  std::string err = Read(dir_ + "/trial-3/stderr.log");
  EXPECT_NE(err.find("sent SIGTERM (stopped)"), std::string::npos) << err;
  EXPECT_NE(err.find("got-term"), std::string::npos) << err;
  EXPECT_EQ(err.find("SIGKILL"), std::string::npos) << err;
}

// A program that ignores SIGTERM gets SIGKILL after kill_grace; its whole process group goes.
TEST_F(CommandTrialTest, HungProgramIgnoringSigtermIsKilledAfterTheGrace) {
  std::atomic<bool> stop{false};
  TrialTask task = ShellTask(
      "trap '' TERM; (trap '' TERM; sleep 300) & echo $! > child.pid; "
      "echo 'sweep-report {\"val_acc\": 0.1}'; while true; do sleep 1; done");
  Run run = RunIt(task, &stop, 1);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kStopped) << run.outcome.error;
  EXPECT_GE(run.seconds, 0.3);
  EXPECT_LT(run.seconds, 20);
  std::string err = Read(dir_ + "/trial-3/stderr.log");
  EXPECT_NE(err.find("sent SIGKILL"), std::string::npos) << err;
  pid_t child = std::stoi(Read(dir_ + "/child.pid"));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = ::kill(child, 0) != 0 ||
           Read("/proc/" + std::to_string(child) + "/stat").find(") Z ") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the program's background process " << child << " survived";
}

TEST_F(CommandTrialTest, TimeoutFailsTheTrial) {
  TrialTask task = ShellTask("echo 'sweep-report {\"val_acc\": 0.1}'; sleep 300");
  task.settings["timeout_s"] = 0.5;
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_EQ(run.outcome.error.rfind("timed out after 0.5 s", 0), 0u) << run.outcome.error;
  EXPECT_LT(run.seconds, 20);
  // Its last lines are the program's (its stdout here: it wrote nothing to stderr), not our
  // notes in its stderr log.
  EXPECT_EQ(run.outcome.error,
            "timed out after 0.5 s; last lines of stdout:\nsweep-report "
            "{\"val_acc\": 0.1}");
}

// NaN in the sweep's metric ends the program and fails the trial, naming the metric and step.
TEST_F(CommandTrialTest, NanInTheMetricFailsTheTrial) {
  Run run =
      RunIt(ShellTask("echo 'sweep-report {\"val_acc\": 0.3, \"loss\": NaN}'; "
                      "echo 'sweep-report {\"val_acc\": NaN}'; sleep 300"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_EQ(run.outcome.error.rfind("reported val_acc = NaN or infinity at step 2", 0), 0u)
      << run.outcome.error;
  ASSERT_EQ(run.reports.size(), 2u);
  EXPECT_TRUE(std::get<2>(run.reports[0])["loss"].is_null());  // another metric: kept as null
  EXPECT_LT(run.seconds, 20);
}

// Once the trial is failed (its metric diverged, or it timed out), what the program reports
// while it stops is not passed on: a report after the NaN, printed before the signal landed or
// by a program that finishes its epoch on SIGTERM, would otherwise reach early stopping or meet
// the sweep's target and turn a diverged trial into the best.
TEST_F(CommandTrialTest, ReportsAfterTheTrialFailedAreNotPassedOn) {
  Run run = RunIt(
      ShellTask("trap 'echo \"sweep-report {\\\"val_acc\\\": 0.97}\"; exit 0' TERM; "
                "echo 'sweep-report {\"val_acc\": 0.3}'; echo 'sweep-report {\"val_acc\": NaN}'; "
                "echo 'sweep-report {\"val_acc\": 0.99}'; while :; do sleep 0.05; done"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_EQ(run.outcome.error.rfind("reported val_acc = NaN or infinity at step 2", 0), 0u)
      << run.outcome.error;
  EXPECT_EQ(run.reports.size(), 2u);
  const std::string err = Read(dir_ + "/trial-3/stderr.log");
  EXPECT_NE(err.find("reports after the trial failed are not recorded"), std::string::npos) << err;
  EXPECT_NE(Read(dir_ + "/trial-3/stdout.log").find("0.97"), std::string::npos);
}

// Parameters too large for one environment string: the failure names SWEEP_PARAMS and its size,
// not the kernel's "argument list too long".
TEST_F(CommandTrialTest, ParametersTooLargeForTheEnvironmentAreNamed) {
  TrialTask task = ShellTask("echo 'sweep-report {\"val_acc\": 1}'");
  task.params["text"] = std::string(200000, 'x');
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_NE(run.outcome.error.find("its environment variable SWEEP_PARAMS is 2000"),
            std::string::npos)
      << run.outcome.error;
  EXPECT_NE(run.outcome.error.find("over the 128 KiB Linux passes in one"), std::string::npos)
      << run.outcome.error;
}

// A line of 600 KiB is one line: the notes about the lines after it give their own numbers, and
// a report line that long is refused once.
TEST_F(CommandTrialTest, AnOverlongLineCountsAsOneLine) {
  Run run = RunIt(ShellTask(
      "printf 'sweep-report {\"epoch\": 1, \"pad\": \"'; head -c 614400 /dev/zero | tr '\\0' x; "
      "printf '\"}\\n'; echo 'sweep-report {bad'; echo 'sweep-report {\"val_acc\": 1}'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  EXPECT_EQ(run.reports.size(), 1u);
  const std::string err = Read(dir_ + "/trial-3/stderr.log");
  EXPECT_NE(err.find("stdout line 1 is not a report: it is "), std::string::npos) << err;
  EXPECT_NE(err.find("stdout line 2 is not a report"), std::string::npos) << err;
  EXPECT_EQ(err.find("stdout line 3 is not"), std::string::npos) << err;
  EXPECT_EQ(err.find("stdout line 4"), std::string::npos) << err;
}

TEST_F(CommandTrialTest, MalformedReportLinesAreLoggedNotFatal) {
  Run run =
      RunIt(ShellTask("echo 'sweep-report {oops'; echo 'sweep-report {\"val_acc\": 1, "
                      "\"tag\": \"x\"}'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  EXPECT_EQ(run.reports.size(), 1u);
  std::string err = Read(dir_ + "/trial-3/stderr.log");
  EXPECT_NE(err.find("stdout line 1 is not a report"), std::string::npos) << err;
  EXPECT_NE(err.find("not metrics (tag)"), std::string::npos) << err;
}

// A program whose every report is unreadable fails with the first reason, not as silent.
TEST_F(CommandTrialTest, OnlyUnreadableReportsFailWithTheFirstReason) {
  Run run = RunIt(ShellTask("echo 'sweep-report {\"val_acc\": 1.2.3}'; echo 'sweep-report 3'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_EQ(
      run.outcome.error.rfind("the program exited 0 without a report that could be read: 2 "
                              "sweep-report line(s) could not be read; the first: stdout line 1 "
                              "is not a report: ",
                              0),
      0u)
      << run.outcome.error;
  EXPECT_NE(run.outcome.error.find("parse error at line 1, column"), std::string::npos)
      << run.outcome.error;
}

// A program that reports, but never the sweep's metric (a misspelt name), fails: a sweep of
// such trials would be all successes with nothing to rank.
TEST_F(CommandTrialTest, ProgramThatNeverReportsTheMetricFails) {
  Run run = RunIt(ShellTask("echo 'sweep-report {\"loss\": 1, \"val_accuracy\": 0.5}'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_EQ(run.outcome.error,
            "the program exited 0 but never reported the sweep's metric 'val_acc' (its reports "
            "had: loss, val_accuracy)");
  EXPECT_EQ(run.reports.size(), 1u);  // still stored
}

// A report printed after other text on its line (no newline before it) is not read; the trial's
// failure says where it was.
TEST_F(CommandTrialTest, AReportAfterOtherTextIsNamedInTheFailure) {
  Run run =
      RunIt(ShellTask("echo starting; printf 'loading... '; "
                      "echo 'sweep-report {\"val_acc\": 0.5}'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_NE(
      run.outcome.error.find("(stdout line 2 has one after other text; a report starts its line)"),
      std::string::npos)
      << run.outcome.error;
  EXPECT_NE(Read(dir_ + "/trial-3/stderr.log")
                .find("stdout line 2 has `sweep-report {` after other text, so it is not a report"),
            std::string::npos);
}

// One step on several lines: a line without `epoch` takes the epoch the step's first line gave;
// a later line that gives another epoch is noted (the first line's stands).
TEST_F(CommandTrialTest, TheLinesOfAStepShareItsFirstLinesEpoch) {
  Run run =
      RunIt(ShellTask("echo 'sweep-report {\"step\": 100, \"epoch\": 1, \"loss\": 2}'; "
                      "echo 'sweep-report {\"step\": 100, \"val_acc\": 0.5}'; "
                      "echo 'sweep-report {\"step\": 200, \"loss\": 1}'; "
                      "echo 'sweep-report {\"step\": 200, \"epoch\": 2, \"val_acc\": 0.6}'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  ASSERT_EQ(run.reports.size(), 4u);
  const std::vector<std::pair<int64_t, double>> expected = {
      {100, 1}, {100, 1}, {200, 200}, {200, 200}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(std::get<0>(run.reports[i]), expected[i].first) << i;
    EXPECT_EQ(std::get<1>(run.reports[i]), expected[i].second) << i;
  }
  EXPECT_NE(Read(dir_ + "/trial-3/stderr.log")
                .find("stdout line 4 gives step 200 epoch 2, but the step's first line made it "
                      "epoch 200, which stands: give `epoch` on a step's first line (or on none)"),
            std::string::npos)
      << Read(dir_ + "/trial-3/stderr.log");
}

// A progress bar redrawn with \r for longer than a report line may be (256 KiB), then the
// report: what the bar drew over is gone, and the report is read, live and by a run again.
TEST_F(CommandTrialTest, AReportAfterALongProgressBarIsRead) {
  TrialTask task = ShellTask(
      "i=0; while [ $i -lt 4000 ]; do printf '\\rtraining %5d |##################################"
      "##############################################|' $i; i=$((i + 1)); done; "
      "printf '\\rsweep-report {\"step\": 1, \"val_acc\": 0.5}\\n'");
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  ASSERT_EQ(run.reports.size(), 1u);
  EXPECT_EQ(std::get<2>(run.reports[0]), json({{"val_acc", 0.5}}));
  const std::string folder = dir_ + "/trial-3";
  ASSERT_GT(std::filesystem::file_size(folder + "/stdout.log"), 300000u);

  // Run again with nothing stored: the report is given again from the log.
  task.settings["command"] = {"sh", "-c", "exit 0"};
  task.settings["sweep_key"] = "s@1";
  {
    std::ofstream(folder + "/.sweep-runs", std::ios::trunc)
        << "{\"sweep\":\"s@1\",\"stdout_offset\":0,\"stored_step\":0,\"stored_epoch\":0}\n";
  }
  Run again = RunIt(task);
  ASSERT_EQ(again.outcome.kind, TrialOutcome::Kind::kCompleted) << again.outcome.error;
  ASSERT_EQ(again.reports.size(), 1u);
  EXPECT_EQ(std::get<2>(again.reports[0]), json({{"val_acc", 0.5}}));
}

// The sweep's metric reported, but as a string: the failure says so rather than that it was
// never reported (which reads as a misspelt name).
TEST_F(CommandTrialTest, AMetricThatIsNotANumberIsNamedSo) {
  Run run = RunIt(ShellTask("echo 'sweep-report {\"val_acc\": \"0.5\", \"loss\": 1}'"));
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_EQ(run.outcome.error,
            "the program exited 0 but its reports' 'val_acc' was never a number (a string, a "
            "bool, null, a list?): report it as a JSON number, e.g. \"val_acc\": 0.9");
}

// Before any trial: a program execve cannot run for its content is refused, saying why.
TEST_F(CommandTrialTest, CheckProgramRefusesWhatCannotRunByItself) {
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
    std::filesystem::permissions(dir_ + "/" + name, std::filesystem::perms::owner_all);
  };
  write("bare.sh", "echo 'sweep-report {\"val_acc\": 1}'\n");
  write("py4.sh", "#!/usr/bin/no-such-python4 -u\nprint(1)\n");
  write("dir.sh", "#!/tmp\n");
  write("ok.sh", "#! /bin/sh -e\necho hi\n");
  write("crlf.sh", "#!/bin/sh\r\necho hi\r\n");
  write("env.sh", "#!/usr/bin/env no-such-python4\nprint(1)\n");
  write("envok.sh", "#!/usr/bin/env sh\necho hi\n");
  write("relative.sh", "#!python3\nprint(1)\n");
  write("local.sh", "#!ok.sh\n");  // relative to the working directory, as the kernel reads it
  Status bare = CheckProgram("./bare.sh", dir_);
  EXPECT_EQ(bare.message(), "trial.command: './bare.sh' (" + dir_ +
                                "/./bare.sh): it has no #! line and is not a binary, so it "
                                "cannot be run by itself: start it with #!/bin/sh (or the "
                                "interpreter it needs), or put that interpreter first in "
                                "`command`");
  EXPECT_NE(CheckProgram("./py4.sh", dir_)
                .message()
                .find("its #! line names the interpreter '/usr/bin/no-such-python4', which is "
                      "not on this machine"),
            std::string::npos);
  EXPECT_NE(CheckProgram("./dir.sh", dir_).message().find("which is not an executable file"),
            std::string::npos);
  EXPECT_TRUE(CheckProgram("./ok.sh", dir_).ok()) << CheckProgram("./ok.sh", dir_).message();
  EXPECT_NE(CheckProgram("./crlf.sh", dir_)
                .message()
                .find("its #! line ends in a carriage return (the file has Windows line ends)"),
            std::string::npos);
  EXPECT_NE(CheckProgram("./env.sh", dir_)
                .message()
                .find("its #! line runs 'no-such-python4' through env, which finds no "
                      "'no-such-python4' on PATH"),
            std::string::npos);
  EXPECT_TRUE(CheckProgram("./envok.sh", dir_).ok()) << CheckProgram("./envok.sh", dir_).message();
  EXPECT_NE(CheckProgram("./relative.sh", dir_)
                .message()
                .find("names the interpreter 'python3', which is not a file in its working "
                      "directory (" +
                      dir_ +
                      "; the kernel does not look it up on PATH): use #!/usr/bin/env "
                      "python3"),
            std::string::npos);
  EXPECT_TRUE(CheckProgram("./local.sh", dir_).ok()) << CheckProgram("./local.sh", dir_).message();
  EXPECT_TRUE(CheckProgram("true", dir_).ok());  // a binary from PATH
  // Running it anyway (on an agent, nothing checked it): this machine's trouble, saying the
  // same; the trial runs again elsewhere.
  TrialTask task = ShellTask("true");
  task.settings["command"] = {"./bare.sh"};
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kInterrupted);
  EXPECT_NE(run.outcome.error.find("it has no #! line and is not a binary"), std::string::npos)
      << run.outcome.error;
}

// A program or workdir this machine lacks (on an agent: nothing checked them there before the
// sweep) is the machine's trouble, not the trial's: interrupted, it runs again on a server that
// has them. A program that starts but cannot be given its arguments fails.
TEST_F(CommandTrialTest, ProgramThatCannotStartSaysWhy) {
  TrialTask task = ShellTask("true");
  task.settings["command"] = {"no-such-program-here", "x"};
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kInterrupted);
  EXPECT_NE(run.outcome.error.find(
                "'no-such-program-here' is not an executable program on PATH on this machine"),
            std::string::npos)
      << run.outcome.error;

  task.settings["command"] = {"./missing.sh"};
  run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kInterrupted);
  EXPECT_NE(run.outcome.error.find("cannot run './missing.sh'"), std::string::npos)
      << run.outcome.error;

  EXPECT_NE(run.outcome.error.find("it is not on this machine"), std::string::npos)
      << run.outcome.error;

  // One that is there but this machine's copy cannot run (a #! line naming an interpreter it
  // lacks, a binary for another processor) is this machine's trouble too: a local one is
  // refused before a sweep starts, so this is an agent's copy, or a file changed since.
  std::ofstream(dir_ + "/py4.sh") << "#!/usr/bin/no-such-python4\nprint(1)\n";
  std::ofstream(dir_ + "/bare.sh") << "\x7f"
                                   << "ELF but not really\n";
  for (const char* script : {"/py4.sh", "/bare.sh"}) {
    std::filesystem::permissions(dir_ + script, std::filesystem::perms::owner_all);
    task.settings["command"] = {dir_ + script};
    run = RunIt(task);
    ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kInterrupted) << script;
    EXPECT_NE(run.outcome.error.find("cannot run"), std::string::npos) << run.outcome.error;
  }

  task.settings["command"] = {"sh", "-c", "true"};
  task.settings["workdir"] = dir_ + "/nowhere";
  run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kInterrupted);
  EXPECT_NE(run.outcome.error.find("cannot enter the working directory"), std::string::npos)
      << run.outcome.error;

  task.settings["workdir"] = dir_;
  task.settings["command"] = {"sh", "-c", "true", std::string(200 * 1024, 'x')};
  run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_NE(run.outcome.error.find("over the 128 KiB Linux passes in one"), std::string::npos)
      << run.outcome.error;
}

// A rerun appends to the same logs, so the first attempt's output is kept.
TEST_F(CommandTrialTest, RerunAppendsToTheLogs) {
  TrialTask task = ShellTask("echo \"run-$$\"; echo 'sweep-report {\"val_acc\": 1}'");
  ASSERT_EQ(RunIt(task).outcome.kind, TrialOutcome::Kind::kCompleted);
  ASSERT_EQ(RunIt(task).outcome.kind, TrialOutcome::Kind::kCompleted);
  std::string out = Read(dir_ + "/trial-3/stdout.log");
  size_t first = out.find("run-");
  ASSERT_NE(first, std::string::npos);
  EXPECT_NE(out.find("run-", first + 1), std::string::npos) << out;
}

// Run again after its earlier runs stored epochs 1-3 (steps 1-3): a program that starts over
// reports those epochs again, and those before the last are not passed on (the stored ones
// stand, noted in its log); the last stored epoch is its step again (the store adds what it
// lacks of it); its later epochs are numbered after the stored steps. Explicit steps are its
// own.
TEST_F(CommandTrialTest, ARerunNumbersItsEpochsAfterTheStoredOnes) {
  TrialTask task = ShellTask(
      "for e in 1 2 3 4 5; do "
      "printf 'sweep-report {\"epoch\": %s, \"val_acc\": 0.%s}\\n' $e $e; done; "
      "echo 'sweep-report {\"step\": 2, \"epoch\": 9, \"val_acc\": 0.9}'");
  task.stored_step = 3;
  task.stored_epoch = 3;
  task.stored_metric = true;
  Run run = RunIt(task);
  ASSERT_EQ(run.outcome.kind, TrialOutcome::Kind::kCompleted) << run.outcome.error;
  ASSERT_EQ(run.reports.size(), 4u);
  EXPECT_EQ(run.reports[0], std::make_tuple(int64_t{3}, 3.0, json{{"val_acc", 0.3}}));
  EXPECT_EQ(run.reports[1], std::make_tuple(int64_t{4}, 4.0, json{{"val_acc", 0.4}}));
  EXPECT_EQ(run.reports[2], std::make_tuple(int64_t{5}, 5.0, json{{"val_acc", 0.5}}));
  EXPECT_EQ(run.reports[3], std::make_tuple(int64_t{2}, 9.0, json{{"val_acc", 0.9}}));
  EXPECT_NE(Read(dir_ + "/trial-3/stderr.log")
                .find("epochs before 3 were reported by an earlier run of this trial; they are "
                      "kept, and this run's reports of them are not recorded (of epoch 3, what "
                      "the store lacks is added)"),
            std::string::npos);

  // With its work done, it reports nothing and exits 0: the stored reports are its result.
  TrialTask done = ShellTask("echo nothing left to do");
  done.stored_step = 6;
  done.stored_epoch = 6;
  done.stored_metric = true;
  EXPECT_EQ(RunIt(done).outcome.kind, TrialOutcome::Kind::kCompleted);
  // One whose report lines all fail to read has not found its work done: it failed.
  TrialTask garbled = ShellTask("echo 'sweep-report {epoch: 7}'");
  garbled.stored_step = 6;
  garbled.stored_epoch = 6;
  garbled.stored_metric = true;
  Run unread = RunIt(garbled);
  EXPECT_EQ(unread.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_NE(unread.outcome.error.find("without a report that could be read"), std::string::npos)
      << unread.outcome.error;
  done.stored_metric = false;  // ... unless none of them had the sweep's metric
  Run without = RunIt(done);
  EXPECT_EQ(without.outcome.kind, TrialOutcome::Kind::kFailed);
  EXPECT_NE(without.outcome.error.find("never reported the sweep's metric 'val_acc'"),
            std::string::npos)
      << without.outcome.error;
}

}  // namespace
}  // namespace sweep::executor
