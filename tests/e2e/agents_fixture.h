// A fixture for tests of a coordinator and its agents as separate processes: a token, the
// processes it started (killed at TearDown if a test left them), waits with deadlines, the
// coordinator's port, and the checks every finished sweep must pass.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "e2e_fixture.h"

namespace sweep_e2e {

class AgentsFixture : public E2eTest {
 protected:
  using Clock = std::chrono::steady_clock;

  void SetUp() override {
    E2eTest::SetUp();
    WriteToken("tok");
  }

  // Leftover processes (a failed test's agents, a coordinator that did not end) are killed.
  void TearDown() override {
    for (pid_t pid : pids_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    pids_.clear();
    E2eTest::TearDown();
  }

  void WriteToken(const std::string& name) {
    std::string bytes(32, '\0');
    std::ifstream("/dev/urandom", std::ios::binary).read(bytes.data(), 32);
    std::string hex;
    for (unsigned char c : bytes) {
      const char* digits = "0123456789abcdef";
      hex += digits[c >> 4];
      hex += digits[c & 15];
    }
    Write(name, hex + "\n");
    ::chmod((dir_ / name).c_str(), 0600);
  }

  // Starts `sweep ARGS` in the background (`env`: as Start's); TearDown kills it if the test
  // does not reap it.
  pid_t Spawn(const std::string& args, const std::string& log, const std::string& env = "") {
    pid_t pid = Start(args, log, env);
    pids_.push_back(pid);
    return pid;
  }

  // Starts `sweep run CONFIG` listening for agents on a free loopback port, with no local
  // slots, logging to coordinator.log; `*port` is the port (0 if it never said).
  pid_t StartCoordinator(const std::string& config, int* port) {
    pid_t pid = Spawn("run " + config + " --listen 127.0.0.1:0 --token-file tok --no-local",
                      "coordinator.log");
    *port = ListenPort("coordinator.log");
    return pid;
  }

  pid_t StartAgent(const std::string& name, int port, const std::string& token = "tok",
                   const std::string& env = "") {
    return Spawn("agent --connect 127.0.0.1:" + std::to_string(port) + " --token-file " + token +
                     " --cpu-slots 2 --name " + name,
                 "agent-" + name + ".log", env);
  }

  // Waits up to `timeout_s` for the process to exit: its exit code, -signal, or -1000 when it
  // is still running (then it is left for TearDown).
  int WaitExit(pid_t pid, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      int status = 0;
      pid_t got = ::waitpid(pid, &status, WNOHANG);
      if (got == pid) {
        pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      if (Clock::now() > deadline) return -1000;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // A sweep `config` of `trials` one-GPU command trials: each sleeps `sleep_s` and reports the
  // CUDA_VISIBLE_DEVICES it was given as its metric, `gpu`.
  void WriteGpuSweep(const std::string& config, int trials, const std::string& sleep_s) {
    WriteProgram("gpu.sh", "#!/bin/sh\nsleep " + sleep_s +
                               "\necho \"sweep-report {\\\"epoch\\\": 1, \\\"gpu\\\": "
                               "$CUDA_VISIBLE_DEVICES}\"\n");
    std::string values;
    for (int i = 1; i <= trials; ++i) values += (i == 1 ? "" : ", ") + std::to_string(i);
    Write(config, "[sweep]\nname = \"gpus\"\nmetric = \"gpu\"\nmode = \"max\"\nmax_trials = " +
                      std::to_string(trials) + "\n[parameters]\nx = { values = [" + values +
                      "] }\n[trial]\nkind = \"command\"\ngpus = 1\ncommand = [\"./gpu.sh\"]\n");
  }

  void KillNow(pid_t pid) {
    ::kill(pid, SIGKILL);
    EXPECT_EQ(WaitExit(pid, 10), -SIGKILL);
  }

  static bool Alive(pid_t pid) {
    int status = 0;
    return ::waitpid(pid, &status, WNOHANG) == 0;
  }

  // Polls `done` every 20 ms until it holds or `timeout_s` passes.
  static bool WaitUntil(const std::function<bool()>& done, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done();
  }

  std::string Log(const std::string& name) { return Slurp(dir_ / name); }

  static int Count(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

  // Waits until LOG holds `what` at least `times` times.
  bool WaitForLine(const std::string& log, const std::string& what, double timeout_s,
                   int times = 1) {
    return WaitUntil([&] { return Count(Log(log), what) >= times; }, timeout_s);
  }

  // The port the coordinator logging to LOG listens on; 0 if it never says.
  int ListenPort(const std::string& log) {
    static const std::regex kListening("listening for agents on [^ ]*:([0-9]+)\n");
    std::smatch m;
    std::string text;
    WaitUntil(
        [&] {
          text = Log(log);
          return std::regex_search(text, m, kListening);
        },
        15);
    return m.empty() ? 0 : std::stoi(m[1]);
  }

  int64_t Scalar(const std::string& sql) {
    auto rows = Query(sql);
    return rows.empty() ? -1 : std::stoll(rows[0][0]);
  }

  // What every finished sweep here must hold: max_trials terminal trials numbered 0..n-1 once
  // each, nothing left running or interrupted, completed trials with all their steps, reports
  // without gaps or duplicates, and a sound file.
  void ExpectEveryTrialAccountedFor(int max_trials, int steps) {
    EXPECT_EQ(Scalar("SELECT count(*) FROM trials"), max_trials);
    EXPECT_EQ(Scalar("SELECT count(DISTINCT number) FROM trials"), max_trials);
    EXPECT_EQ(Scalar("SELECT min(number) FROM trials"), 0);
    EXPECT_EQ(Scalar("SELECT max(number) FROM trials"), max_trials - 1);
    EXPECT_EQ(Scalar("SELECT count(*) FROM trials WHERE status NOT IN ('completed', 'pruned')"), 0)
        << ::testing::PrintToString(
               Query("SELECT number, status, error FROM trials WHERE status NOT IN "
                     "('completed', 'pruned')"));
    EXPECT_GT(Scalar("SELECT count(*) FROM trials WHERE status = 'completed'"), 0);
    auto gaps = Query(
        "SELECT trial, count(*), min(step), max(step) FROM reports GROUP BY trial "
        "HAVING count(*) != max(step) OR min(step) != 1");
    EXPECT_TRUE(gaps.empty()) << ::testing::PrintToString(gaps);
    EXPECT_EQ(Scalar("SELECT count(*) FROM trials t WHERE NOT EXISTS (SELECT 1 FROM reports r "
                     "WHERE r.trial = t.number)"),
              0);
    EXPECT_EQ(Scalar("SELECT count(*) FROM trials t WHERE t.status = 'completed' AND (SELECT "
                     "max(step) FROM reports r WHERE r.trial = t.number) != " +
                     std::to_string(steps)),
              0);
    EXPECT_EQ(Scalar("SELECT count(*) - count(DISTINCT trial || '/' || step) FROM reports"), 0);
    EXPECT_EQ(Query("PRAGMA integrity_check"), (std::vector<std::vector<std::string>>{{"ok"}}));
  }

  // The servers named in the placements of `table` (trials or events).
  std::set<std::string> PlacedOn(const std::string& sql) {
    std::set<std::string> names;
    for (auto& row : Query(sql)) names.insert(row[0].substr(0, row[0].find(':')));
    return names;
  }

  std::vector<pid_t> pids_;
};

}  // namespace sweep_e2e
