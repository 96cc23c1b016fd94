// CLI output: the stable JSON shape of a trial, tables.
#include "output.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

namespace sweep {
namespace {

TEST(OutputTest, TrialJsonHasTheStableKeys) {
  store::TrialRecord t;
  t.number = 3;
  t.status = store::TrialStatus::kCompleted;
  t.params_json = R"({"lr":0.1})";
  t.metrics_json = R"({"val_acc":0.9})";
  t.epochs = 2;
  t.started_s = 10;
  t.ended_s = 12.5;
  auto j = TrialJson(t);
  EXPECT_EQ(j["trial"], 3);
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["params"]["lr"], 0.1);
  EXPECT_EQ(j["metrics"]["val_acc"], 0.9);
  EXPECT_EQ(j["epochs"], 2.0);
  EXPECT_EQ(j["duration_s"], 2.5);
  EXPECT_FALSE(j.contains("error"));
}

// One trial per line: a program's last lines in an error, or a carriage return in a value,
// neither break the table nor move the cursor.
TEST(OutputTest, TableKeepsEachTrialOnOneLine) {
  store::TrialRecord t;
  t.number = 4;
  t.status = store::TrialStatus::kFailed;
  t.params_json = R"({"tag":"a\rb"})";
  t.error = "exited with code 3; last lines of stderr:\nboom\n";
  std::ostringstream out;
  PrintTrialsTable(out, {t}, "score");
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;  // header and the trial
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("tag=a b  [exited with code 3; last lines of stderr: | boom | ]"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace sweep

namespace sweep {
namespace {

store::SweepRecord Named(const std::string& name, const std::string& run_options = "") {
  store::SweepRecord sweep;
  sweep.name = name;
  sweep.run_options = run_options;
  return sweep;
}

// The resume advice names the store unless it is the default, quoted for a shell when needed.
TEST(OutputTest, ResumeCommandNamesAStoreThatIsNotTheDefault) {
  EXPECT_EQ(ResumeCommand(Named("s"), "sweeps.db"), "sweep resume s");
  EXPECT_EQ(ResumeCommand(Named("s"), "./sweeps.db"), "sweep resume s");
  EXPECT_EQ(ResumeCommand(Named("s"), "runs/m.db"), "sweep resume s --db runs/m.db");
  EXPECT_EQ(ResumeCommand(Named("-s"), "runs/m.db"), "sweep resume --db runs/m.db -- -s");
  EXPECT_EQ(SweepCommand("trials", "s", "runs/m.db", "--status failed"),
            "sweep trials s --db runs/m.db --status failed");
  EXPECT_EQ(SweepCommand("trials", "-s", "sweeps.db", "--status failed"),
            "sweep trials --status failed -- -s");
  EXPECT_EQ(ResumeCommand(Named("s"), "my runs/it's.db"),
            "sweep resume s --db 'my runs/it'\\''s.db'");
}

// A sweep run with agents is resumed with their flags (stored with its owner), so that they
// reconnect and no trial runs here that was kept off this machine.
TEST(OutputTest, ResumeCommandCarriesTheAgentFlagsOfItsLastRun) {
  const std::string flags = AgentFlags("127.0.0.1", 7000, "/etc/sweep/my token", true);
  EXPECT_EQ(flags, "--listen 127.0.0.1:7000 --token-file '/etc/sweep/my token' --no-local");
  EXPECT_EQ(ResumeCommand(Named("s", flags), "runs/m.db"),
            "sweep resume s --db runs/m.db " + flags);
  EXPECT_EQ(AgentFlags("::1", 7000, "", false), "--listen '[::1]:7000'");
  EXPECT_EQ(AgentFlags("", 7000, "t", true), "");
}

// A word a shell would read back as itself stays bare; anything else (a glob's brackets and
// stars, spaces, quotes, an empty word) is single-quoted.
TEST(OutputTest, ShellQuoteKeepsOnlyWhatAShellReadsBackBare) {
  EXPECT_EQ(ShellQuote("127.0.0.1:7000"), "127.0.0.1:7000");
  EXPECT_EQ(ShellQuote("runs/a-b_c+d,e@f%g.db"), "runs/a-b_c+d,e@f%g.db");
  EXPECT_EQ(ShellQuote("--lr=0.1"), "--lr=0.1");
  EXPECT_EQ(ShellQuote("[::1]:7000"), "'[::1]:7000'");
  EXPECT_EQ(ShellQuote("*.db"), "'*.db'");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ResumeCommand(Named("s"), "[x].db"), "sweep resume s --db '[x].db'");
}

}  // namespace
}  // namespace sweep
