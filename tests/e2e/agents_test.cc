// Remote agents, end to end: a real coordinator (`sweep run --listen ... --no-local`) and real
// `sweep agent` processes on loopback. A sweep spread over three agents survives one of them
// being killed, and one frozen; a wrong token, garbage and oversized frames are refused without
// harming the sweep; a killed coordinator is resumed on the same port and the agents come back
// on their own; bad start-up options are refused with exit code 2. Where user and network
// namespaces are allowed, agents also run behind their own virtual links with distinct
// addresses. Every wait has a deadline; TearDown kills whatever a failed test left running.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <regex>
#include <set>

#include "agents_fixture.h"
#include "e2e_fixture.h"

namespace {

using sweep_e2e::E2eTest;
using sweep_e2e::Output;
using sweep_e2e::Slurp;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Branin over `steps` steps with ASHA (rungs at steps 3, 9, 27), so trials wait for the
// coordinator's verdict at each rung: the conversation with the agents is two-way.
std::string AshaBranin(const std::string& name, int max_trials, int steps, int step_ms) {
  return sweep_e2e::BraninConfig(
      name, max_trials, "seed = 5\n",
      "steps = " + std::to_string(steps) + "\nstep_ms = " + std::to_string(step_ms) + "\n",
      "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 3\n");
}

class AgentsTest : public sweep_e2e::AgentsFixture {
 protected:
  // The sweep of m.toml (the caller's: command trials of `mytrain`, found on PATH) runs on agent
  // "bad" (its environment `bad_env`) until the coordinator retires it, then on agent "good",
  // whose PATH has bin/, with a `mytrain` that reports, to the sweep's end.
  void RetireBadThenRunOnGood(const std::string& bad_env) {
    fs::create_directories(dir_ / "bin");
    WriteProgram("bin/mytrain", "#!/bin/sh\necho 'sweep-report {\"epoch\": 1, \"score\": 1}'\n");
    int port = 0;
    pid_t coordinator = StartCoordinator("m.toml", &port);
    ASSERT_GT(port, 0) << Log("coordinator.log");
    StartAgent("bad", port, "tok", bad_env);
    ASSERT_TRUE(WaitUntil(
        [&] { return Log("coordinator.log").find("no more trials on bad") != std::string::npos; },
        30))
        << Log("coordinator.log");
    StartAgent("good", port, "tok", "PATH=" + (dir_ / "bin").string() + ":/usr/bin:/bin");
    ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  }

  // A program whose first run sets TRAP, touches `running` and runs until it is ended; a run
  // after that reports at once and exits.
  static std::string RunsOnceThenReports(const std::string& trap) {
    return "#!/bin/sh\nif [ -e ran ]; then echo 'sweep-report {\"epoch\": 1, \"score\": 1}'; exit "
           "0; fi\ntouch ran\n" +
           trap + "\ntouch running\nwhile :; do sleep 0.05; done\n";
  }

  // One command trial of sweep NAME, running SCRIPT (its text; it touches `running` once it
  // runs) with KILL_GRACE, on agent 'first', while agent 'second' has joined and waits.
  // Sets *coordinator and *first; the caller checks HasFatalFailure().
  void OneTrialOnTheFirstOfTwoAgents(const std::string& name, const std::string& script,
                                     const std::string& kill_grace, pid_t* coordinator,
                                     pid_t* first) {
    WriteProgram(name + ".sh", script);
    Write(name + ".toml", "[sweep]\nname = \"" + name +
                              "\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
                              "[trial]\nkind = \"command\"\ncommand = [\"./" +
                              name + ".sh\"]\nkill_grace = \"" + kill_grace + "\"\n");
    int port = 0;
    *coordinator = StartCoordinator(name + ".toml", &port);
    ASSERT_GT(port, 0) << Log("coordinator.log");
    *first = StartAgent("first", port);
    ASSERT_TRUE(WaitUntil([&] { return fs::exists(dir_ / "running"); }, 30))
        << Log("coordinator.log");
    StartAgent("second", port);
    ASSERT_TRUE(
        WaitUntil([&] { return Log("coordinator.log").find("'second'") != std::string::npos; }, 30))
        << Log("coordinator.log");
  }
};

// A connected TCP socket to 127.0.0.1:port, with a receive timeout.
int RawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

std::string LocalAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

std::string LengthPrefix(uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
          static_cast<char>(n)};
}

// Sends `bytes` and reads until the peer closes: true when it does within the socket's receive
// timeout. Whatever the peer says first (a bye) goes to `said`.
bool SendAndExpectClose(int fd, const std::string& bytes, std::string* said) {
  if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    return false;
  }
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;  // orderly close
    if (n < 0) return errno == ECONNRESET;
    said->append(buf, static_cast<size_t>(n));
  }
}

TEST_F(AgentsTest, SweepSpreadOverThreeAgentsSurvivesOneKilled) {
  const int kTrials = 60, kSteps = 30;
  Write("c.toml", AshaBranin("spread", kTrials, kSteps, 20));
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  StartAgent("a", port);
  pid_t b = StartAgent("b", port);
  StartAgent("c", port);
  ASSERT_TRUE(WaitForLine("coordinator.log", "joined from host", 15, 3)) << Log("coordinator.log");

  // Kill b early, once it has finished a trial and holds running ones (it keeps both slots
  // busy while trials remain).
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Scalar(
                   "SELECT count(*) FROM trials WHERE placement LIKE 'b:%' AND status IN "
                   "('completed', 'pruned')") > 0 &&
               Scalar(
                   "SELECT count(*) FROM trials WHERE placement LIKE 'b:%' AND status = "
                   "'running'") > 0;
      },
      30));
  ASSERT_LT(Scalar("SELECT count(*) FROM trials WHERE status IN ('completed', 'pruned')"),
            kTrials / 2)
      << "the sweep ran too fast to kill an agent in the middle of it";
  KillNow(b);
  EXPECT_TRUE(WaitForLine("coordinator.log", "agent 'b' (id", 10)) << Log("coordinator.log");

  EXPECT_EQ(WaitExit(coordinator, 50), 0) << Log("coordinator.log");
  std::string log = Log("coordinator.log");
  EXPECT_TRUE(std::regex_search(
      log, std::regex("agent 'b' \\(id [0-9]+, 127\\.0\\.0\\.1:[0-9]+\\) lost \\(disconnected\\)")))
      << log;
  ExpectEveryTrialAccountedFor(kTrials, kSteps);
  EXPECT_EQ(PlacedOn("SELECT placement FROM trials"), (std::set<std::string>{"a", "b", "c"}));

  // b's running trials were interrupted, then ran again on a or c.
  auto lost = Query(
      "SELECT trial FROM events WHERE from_state = 'running' AND to_state = 'interrupted' AND "
      "detail LIKE '%agent ''b''%'");
  ASSERT_FALSE(lost.empty()) << ::testing::PrintToString(
      Query("SELECT trial, from_state, to_state, detail FROM events WHERE to_state = "
            "'interrupted'"));
  for (auto& row : lost) {
    auto again = Query("SELECT detail FROM events WHERE trial = " + row[0] +
                       " AND from_state = 'interrupted' AND to_state = 'running'");
    ASSERT_EQ(again.size(), 1u) << "trial " << row[0];
    EXPECT_TRUE(again[0][0].rfind("a:", 0) == 0 || again[0][0].rfind("c:", 0) == 0)
        << "trial " << row[0] << " ran again on " << again[0][0];
  }
}

TEST_F(AgentsTest, WrongTokenIsRefusedAndTheSweepGoesOn) {
  WriteToken("wrong");
  Write("c.toml", AshaBranin("tokens", 12, 10, 5));
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  // Token refusals end an agent once they have gone on for a minute; here, half a second.
  ::setenv("SWEEP_TEST_AUTH_REFUSAL_WINDOW_MS", "500", 1);
  pid_t intruder = StartAgent("intruder", port, "wrong");
  ::unsetenv("SWEEP_TEST_AUTH_REFUSAL_WINDOW_MS");
  ASSERT_TRUE(WaitForLine("coordinator.log", "refused agent 'intruder'", 15))
      << Log("coordinator.log");
  EXPECT_TRUE(std::regex_search(
      Log("coordinator.log"),
      std::regex("refused agent 'intruder' at 127\\.0\\.0\\.1:[0-9]+: authentication failed")))
      << Log("coordinator.log");
  EXPECT_TRUE(WaitForLine("agent-intruder.log", "refused this agent: authentication failed", 10))
      << Log("agent-intruder.log");
  // No retry can change a token: the refused agent ends once refusals have gone on for its
  // window and numbered three (one alone is not authenticated), with exit status 2 and the
  // reason: said when it retries, and when it ends.
  EXPECT_EQ(WaitExit(intruder, 10), 2) << Log("agent-intruder.log");
  EXPECT_EQ(Count(Log("agent-intruder.log"), "the coordinator at 127.0.0.1:"), 2)
      << Log("agent-intruder.log");
  EXPECT_TRUE(std::regex_search(
      Log("agent-intruder.log"),
      std::regex("; refused [0-9]+ times over [0-9.]+ s: the agent ends; give it the "
                 "coordinator's token \\(--token-file\\)\n")))
      << Log("agent-intruder.log");
  EXPECT_EQ(Scalar("SELECT count(*) FROM trials"), 0);  // nothing ran on the intruder

  StartAgent("good", port);
  EXPECT_EQ(WaitExit(coordinator, 50), 0) << Log("coordinator.log");
  ExpectEveryTrialAccountedFor(12, 10);
  EXPECT_EQ(PlacedOn("SELECT detail FROM events WHERE to_state = 'running' AND trial IS NOT NULL"),
            std::set<std::string>{"good"});
  EXPECT_EQ(Count(Log("coordinator.log"), "joined from host"), 1);
  EXPECT_GE(Count(Log("coordinator.log"), "refused agent 'intruder'"), 3);
}

TEST_F(AgentsTest, GarbageAndOversizedFramesCloseOnlyTheirConnection) {
  const int kTrials = 40, kSteps = 20;
  Write("c.toml", AshaBranin("garbage", kTrials, kSteps, 20));
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  StartAgent("solo", port);
  ASSERT_TRUE(WaitForLine("coordinator.log", "joined from host", 15)) << Log("coordinator.log");

  const std::string kNotJson = "this is not JSON";
  const std::vector<std::pair<std::string, std::string>> attacks = {
      {"not JSON", LengthPrefix(static_cast<uint32_t>(kNotJson.size())) + kNotJson},
      {"oversized", LengthPrefix(64u << 20) + std::string(1000, 'x')},
      {"HTTP", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"invalid hello", LengthPrefix(28) + R"({"type":"hello","seq":1,"x":)" + "1}"},
      {"empty frame", LengthPrefix(0)},
  };
  for (const auto& [what, bytes] : attacks) {
    int fd = RawConnect(port);
    ASSERT_GE(fd, 0) << what;
    std::string me = LocalAddress(fd), said;
    EXPECT_TRUE(SendAndExpectClose(fd, bytes, &said)) << what << " did not close the connection";
    EXPECT_NE(said.find("\"reason\":\"closing the connection: "), std::string::npos)
        << what << ": " << said;
    ::close(fd);
    EXPECT_TRUE(WaitForLine("coordinator.log", me, 10)) << what << " from " << me << " not logged\n"
                                                        << Log("coordinator.log");
  }
  // The sweep was not disturbed: the agent stayed registered and finished it.
  EXPECT_TRUE(Alive(coordinator)) << "the sweep ended before the attacks were over";
  EXPECT_EQ(WaitExit(coordinator, 50), 0) << Log("coordinator.log");
  std::string log = Log("coordinator.log");
  EXPECT_EQ(Count(log, "joined from host"), 1) << log;
  // Lost once: when the sweep ended and the coordinator said goodbye.
  EXPECT_EQ(Count(log, " lost ("), 1) << log;
  EXPECT_EQ(Count(log, " lost (shutdown)"), 1) << log;
  EXPECT_EQ(Count(Log("agent-solo.log"), "registered with the coordinator"), 1);
  ExpectEveryTrialAccountedFor(kTrials, kSteps);
  EXPECT_EQ(PlacedOn("SELECT placement FROM trials"), std::set<std::string>{"solo"});
}

TEST_F(AgentsTest, AgentsReconnectToAResumedCoordinatorOnTheSamePort) {
  const int kTrials = 80, kSteps = 30;
  Write("c.toml", AshaBranin("restart", kTrials, kSteps, 20));
  pid_t coordinator =
      Spawn("run c.toml --listen 127.0.0.1:0 --token-file tok --no-local", "run.log");
  const int port = ListenPort("run.log");
  ASSERT_GT(port, 0) << Log("run.log");
  pid_t a = StartAgent("a", port);
  pid_t b = StartAgent("b", port);
  ASSERT_TRUE(WaitForLine("run.log", "joined from host", 15, 2)) << Log("run.log");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Scalar("SELECT count(*) FROM trials WHERE status IN ('completed', 'pruned')") >= 8;
      },
      30));
  KillNow(coordinator);
  const int64_t done_before = Scalar("SELECT count(*) FROM trials WHERE status != 'running'");
  ASSERT_LT(done_before, kTrials) << "the sweep ended before the coordinator was killed";
  // What `status` and `list` say to continue it brings its agents back: their flags were
  // stored with the sweep (the token file's path absolute, for a command typed elsewhere).
  const std::string hint = "sweep resume restart --listen 127.0.0.1:" + std::to_string(port) +
                           " --token-file " + (dir_ / "tok").string() + " --no-local";
  Output status = Sweep("status restart");
  EXPECT_NE(status.out.find(hint), std::string::npos) << status.out;
  Output list = Sweep("list");
  EXPECT_NE(list.out.find(hint), std::string::npos) << list.out;

  // The agents notice, stop their trials and keep trying to connect.
  for (const char* name : {"agent-a.log", "agent-b.log"}) {
    EXPECT_TRUE(WaitForLine(name, "connection to the coordinator at 127.0.0.1:", 15)) << Log(name);
    EXPECT_TRUE(WaitForLine(name, "Connection refused; retrying with backoff", 15)) << Log(name);
  }
  pid_t resumed = Spawn(
      "resume restart --listen 127.0.0.1:" + std::to_string(port) + " --token-file tok --no-local",
      "resume.log");
  EXPECT_EQ(WaitExit(resumed, 50), 0) << Log("resume.log");
  // The same two processes served both coordinators, and left once the sweep was over.
  for (const char* name : {"agent-a.log", "agent-b.log"}) {
    EXPECT_EQ(Count(Log(name), "registered with the coordinator"), 2) << Log(name);
  }
  EXPECT_EQ(WaitExit(a, 30), 0) << Log("agent-a.log");
  EXPECT_EQ(WaitExit(b, 30), 0) << Log("agent-b.log");
  EXPECT_EQ(Count(Log("agent-a.log"), "said: the sweep is over"), 1) << Log("agent-a.log");
  EXPECT_EQ(Count(Log("resume.log"), "joined from host"), 2) << Log("resume.log");
  ExpectEveryTrialAccountedFor(kTrials, kSteps);

  // Both agents ran trials for the resumed coordinator, among them the orphans it requeued.
  auto resumed_at = Query("SELECT max(id) FROM events WHERE detail LIKE 'resumed by%'");
  ASSERT_EQ(resumed_at.size(), 1u);
  EXPECT_EQ(PlacedOn("SELECT detail FROM events WHERE to_state = 'running' AND trial IS NOT "
                     "NULL AND id > " +
                     resumed_at[0][0]),
            (std::set<std::string>{"a", "b"}));
  EXPECT_GT(Scalar("SELECT count(*) FROM events WHERE from_state = 'interrupted' AND to_state = "
                   "'running' AND id > " +
                   resumed_at[0][0]),
            0);
}

// An interrupted sweep of agents says how to continue it with its agents: the port they reach
// (the one the system picked for port 0), the token file, and still no local slots.
TEST_F(AgentsTest, TheHintToContinueKeepsTheAgentsFlags) {
  Write("c.toml", AshaBranin("hint", 200, 30, 20));
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  StartAgent("a", port);
  ASSERT_TRUE(WaitUntil([&] { return Scalar("SELECT count(*) FROM reports") > 0; }, 30))
      << Log("coordinator.log");
  ::kill(coordinator, SIGINT);
  EXPECT_EQ(WaitExit(coordinator, 30), 1) << Log("coordinator.log");
  EXPECT_NE(Log("coordinator.log")
                .find("continue with `sweep resume hint --listen 127.0.0.1:" +
                      std::to_string(port) + " --token-file tok --no-local`"),
            std::string::npos)
      << Log("coordinator.log");

  // Resumed without them, it runs on this machine, and says how to bring the agents back.
  pid_t local = Spawn("resume hint", "resume.log");
  const std::string flags = "--listen 127.0.0.1:" + std::to_string(port) + " --token-file " +
                            fs::canonical(dir_ / "tok").string() + " --no-local";
  EXPECT_TRUE(WaitUntil(
      [&] { return Log("resume.log").find("To bring its agents back") != std::string::npos; }, 30))
      << Log("resume.log");
  ::kill(local, SIGINT);
  WaitExit(local, 30);
  EXPECT_NE(Log("resume.log")
                .find("sweep: 'hint' ran with agents (" + flags +
                      "); this resume runs it on this machine's slots. To bring its agents "
                      "back: `sweep resume hint " +
                      flags + "`"),
            std::string::npos)
      << Log("resume.log");
}

TEST_F(AgentsTest, StartUpRefusals) {
  Write("c.toml", AshaBranin("refused", 4, 5, 0));
  Write("open-token", "0123456789abcdef\n");
  ::chmod((dir_ / "open-token").c_str(), 0644);
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"run c.toml --listen 0.0.0.0:0",
       "--listen 0.0.0.0: listening on a non-loopback address needs --token-file"},
      {"run c.toml --listen 127.0.0.1:0 --token-file open-token",
       "token file open-token is accessible by group or others (mode 0644); run: chmod 600 "
       "open-token"},
      {"run c.toml --no-local", "--no-local needs --listen"},
      {"resume refused --no-local", "--no-local needs --listen"},
      {"run c.toml --listen nowhere --token-file tok", "--listen 'nowhere': no port"},
      {"agent --connect nowhere --token-file tok", "--connect 'nowhere': no port"},
      {"agent --connect 127.0.0.1:70000 --token-file tok",
       "--connect '127.0.0.1:70000': the port must be a number in 0..65535"},
      {"agent --connect :7000 --token-file tok", "--connect ':7000': no host"},
      {"agent --connect 127.0.0.1:0 --token-file tok",
       "--connect '127.0.0.1:0': port 0 is a listener's \"any free port\""},
      {"agent --connect 127.0.0.1:7000 --token-file open-token",
       "token file open-token is accessible by group or others"},
      {"agent --connect 192.0.2.1:7000",
       "--connect 192.0.2.1:7000: a coordinator off this machine needs --token-file"},
      {"agent --connect 127.0.0.1:7000 --name caf\xe9", "--name: at most 256 bytes of UTF-8"},
      {"agent --connect 127.0.0.1:7000 --retry-for soon",
       "--retry-for soon: expected a duration such as 90s, 10m or 2h, or 'forever'"},
  };
  for (const Case& c : cases) {
    Output o = Sweep(c.args);
    EXPECT_EQ(o.code, 2) << c.args << "\n" << o.err;
    EXPECT_NE(o.err.find(c.message), std::string::npos) << c.args << "\n" << o.err;
  }
  // A port another program listens on: the machine's (exit 1), but said before the store is made.
  const int busy = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(busy, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(busy, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  ASSERT_EQ(::listen(busy, 1), 0);
  socklen_t len = sizeof at;
  ASSERT_EQ(::getsockname(busy, reinterpret_cast<sockaddr*>(&at), &len), 0);
  const std::string port = std::to_string(ntohs(at.sin_port));
  Output taken = Sweep("run c.toml --listen 127.0.0.1:" + port + " --token-file tok");
  ::close(busy);
  EXPECT_EQ(taken.code, 1) << taken.err;
  EXPECT_NE(taken.err.find("cannot listen on 127.0.0.1:" + port + ": Address already in use"),
            std::string::npos)
      << taken.err;
  // Refused before the store is opened: no sweep recorded, no empty database left behind.
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db")) << "a refused run left a database";
}

// An agent leaves when its coordinator says the sweep is over (on a cluster it would hold its
// GPUs to the job's time limit); one with --stay serves the next sweep on that address; one
// without a coordinator gives up after --retry-for, exit 1, saying so.
TEST_F(AgentsTest, AgentsLeaveWhenTheSweepIsOverUnlessTheyStay) {
  Write("c.toml", AshaBranin("first", 6, 5, 200));  // long enough for both to join
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  pid_t go = StartAgent("go", port);
  pid_t stay = Spawn("agent --connect 127.0.0.1:" + std::to_string(port) +
                         " --token-file tok --cpu-slots 1 --name stay --stay",
                     "agent-stay.log");
  ASSERT_TRUE(WaitForLine("coordinator.log", "joined from host", 15, 2)) << Log("coordinator.log");
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  EXPECT_EQ(WaitExit(go, 30), 0) << Log("agent-go.log");
  EXPECT_NE(Log("agent-go.log")
                .find("said: the sweep is over: the coordinator has finished it; the agent ends "
                      "(--stay keeps it for the next sweep)"),
            std::string::npos)
      << Log("agent-go.log");
  ASSERT_TRUE(WaitForLine("agent-stay.log", "staying for the next sweep on that address", 15))
      << Log("agent-stay.log");
  EXPECT_TRUE(Alive(stay));

  Write("d.toml", AshaBranin("second", 4, 5, 0));
  pid_t next = Spawn(
      "run d.toml --listen 127.0.0.1:" + std::to_string(port) + " --token-file tok --no-local",
      "next.log");
  ASSERT_EQ(WaitExit(next, 60), 0) << Log("next.log");
  EXPECT_EQ(Count(Log("agent-stay.log"), "registered with the coordinator"), 2)
      << Log("agent-stay.log");
  EXPECT_EQ(Scalar("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE "
                   "s.name = 'second' AND t.status IN ('completed', 'pruned')"),
            4);
  ::kill(stay, SIGTERM);
  EXPECT_EQ(WaitExit(stay, 30), 0) << Log("agent-stay.log");

  // Nobody at the address: the agent tries for --retry-for, then ends.
  Output alone = Sweep("agent --connect 127.0.0.1:" + std::to_string(port) +
                       " --token-file tok --cpu-slots 1 --retry-for 1s");
  EXPECT_EQ(alone.code, 1) << alone.err;
  EXPECT_NE(alone.err.find("no coordinator at 127.0.0.1:" + std::to_string(port) +
                           " for 1 s since the agent started (--retry-for); the agent ends"),
            std::string::npos)
      << alone.err;
}

// A --no-local sweep's time_budget counts from its first agent, not while it waits for one (on
// a batch system, agents wait in the queue): it does not end "completed" with nothing run.
TEST_F(AgentsTest, TheTimeBudgetDoesNotCountTheWaitForAnAgent) {
  Write("t.toml", sweep_e2e::BraninConfig("budget", 1000, "seed = 5\ntime_budget = \"2s\"\n",
                                          "steps = 5\nstep_ms = 50\n"));
  int port = 0;
  pid_t coordinator = StartCoordinator("t.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // longer than the budget
  ASSERT_TRUE(Alive(coordinator)) << Log("coordinator.log");
  pid_t agent = StartAgent("late", port);
  EXPECT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  EXPECT_EQ(WaitExit(agent, 30), 0) << Log("agent-late.log");
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
  // 2 s of 0.25 s trials on one slot.
  EXPECT_GE(Scalar("SELECT count(*) FROM trials WHERE status = 'completed'"), 4);
  // The running time stored is the budget's, not the wait's too.
  const double active = std::stod(Query("SELECT active_s FROM sweeps")[0][0]);
  EXPECT_GE(active, 2.0);
  EXPECT_LT(active, 3.0);
}

// A Slurm task given GPUs serves them as GPU slots even where CUDA does not see them from the
// agent (a build without CUDA, no driver): command trials bring their own CUDA, and each gets
// its own GPU of the task's list.
TEST_F(AgentsTest, ASlurmTaskGivenGpusOffersThemAsGpuSlots) {
  WriteGpuSweep("g.toml", 4, "0.3");
  int port = 0;
  pid_t coordinator = StartCoordinator("g.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  Spawn("agent --connect 127.0.0.1:" + std::to_string(port) + " --token-file tok --name task",
        "agent-task.log", "SLURM_JOB_ID=7 SLURM_JOB_GPUS=3,5 CUDA_VISIBLE_DEVICES=3,5");
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log") << Log("agent-task.log");
  EXPECT_NE(Log("coordinator.log").find("with 2 GPU slots"), std::string::npos)
      << Log("coordinator.log");
  std::set<std::string> seen;
  for (auto& row : Query("SELECT json_extract(metrics, '$.gpu') FROM reports")) {
    seen.insert(row[0]);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"3", "5"}));
}

// An agent told to cancel its array's pending tasks at the end of the sweep, where that cannot
// be done (no scancel here), says so and still exits 0: the sweep itself is done.
TEST_F(AgentsTest, AFailedCancelOfPendingArrayTasksIsAWarning) {
  Write("c.toml", AshaBranin("short", 2, 5, 0));
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  fs::create_directories(dir_ / "empty");
  pid_t agent = Spawn("agent --connect 127.0.0.1:" + std::to_string(port) +
                          " --token-file tok --cpu-slots 1 --cancel-pending-array",
                      "agent.log", "SLURM_ARRAY_JOB_ID=4242 PATH=" + (dir_ / "empty").string());
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  EXPECT_EQ(WaitExit(agent, 30), 0) << Log("agent.log");
  EXPECT_NE(Log("agent.log")
                .find("warning: could not cancel the pending tasks of Slurm job "
                      "array 4242: scancel is not installed here"),
            std::string::npos)
      << Log("agent.log");
}

// Resuming a sweep that already completed has nothing to run: it must not open a port and
// register agents only to drop them again.
TEST_F(AgentsTest, ResumeOfACompletedSweepDoesNotListenForAgents) {
  Write("c.toml", AshaBranin("finished", 4, 5, 0));
  Output run = Sweep("run c.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  Output again = Sweep("resume finished --listen 127.0.0.1:0 --token-file tok --no-local");
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("sweep 'finished' is already complete (4 trials)"), std::string::npos)
      << again.err;
  EXPECT_EQ(again.err.find("listening for agents"), std::string::npos) << again.err;
}

// A trial that early stopping has pruned but that has not ended yet (its program ignores
// SIGTERM and has a long grace period) when its agent is lost: the decision stands, so it ends
// pruned, as `sweep resume` records such a trial, and is not run again only to be pruned anew.
TEST_F(AgentsTest, PrunedTrialOfALostAgentEndsPrunedNotRunAgain) {
  WriteProgram("train.sh", R"(#!/bin/sh
trap '' TERM
case $1 in 0.1) n=100 ;; *) n=9 ;; esac
e=1
while [ $e -le $n ]; do
  echo "sweep-report {\"epoch\": $e, \"score\": $(awk "BEGIN { print $1 * $e }")}"
  sleep 0.1
  e=$((e + 1))
done
)");
  Write("c.toml", R"([sweep]
name = "stubborn"
metric = "score"
mode = "max"
[search]
algorithm = "grid"
[early_stopping]
algorithm = "asha"
min_resource = 1
max_resource = 9
[parameters]
x = { values = [1.0, 0.1] }
[trial]
kind = "command"
command = ["./train.sh", "{x}"]
kill_grace = "60s"
)");
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  pid_t a = Spawn("agent --connect 127.0.0.1:" + std::to_string(port) +
                      " --token-file tok --cpu-slots 1 --name a",
                  "agent-a.log");
  // Trial 0 (x = 1) runs first, alone; trial 1 (x = 0.1) is pruned at its first rung (epoch 1)
  // and goes on reporting, deaf to SIGTERM (reports the coordinator now drops). Its stderr log
  // says when the stop has arrived; it then has 60 s of grace and 10 s of program left.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto log = Query("SELECT stderr_log FROM trials WHERE number = 1");
        return !log.empty() && Slurp(log[0][0]).find("sent SIGTERM") != std::string::npos;
      },
      30))
      << Log("coordinator.log");
  EXPECT_EQ(Scalar("SELECT count(*) FROM reports WHERE trial = 1"), 1);
  KillNow(a);
  ASSERT_TRUE(WaitForLine("coordinator.log", "agent 'a' (id", 10, 2)) << Log("coordinator.log");
  StartAgent("b", port);  // where a rerun would go
  EXPECT_EQ(WaitExit(coordinator, 20), 0) << Log("coordinator.log");
  auto trials = Query("SELECT number, status, error FROM trials ORDER BY number");
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[1][1], "pruned") << trials[1][2];
  EXPECT_NE(trials[1][2].find("pruned at rung 0"), std::string::npos) << trials[1][2];
  EXPECT_EQ(PlacedOn("SELECT detail FROM events WHERE trial = 1 AND to_state = 'running'"),
            std::set<std::string>{"a"});
  EXPECT_EQ(Query("PRAGMA integrity_check")[0][0], "ok");
}

// An agent that freezes (SIGSTOP: its connection stays open, only its heartbeats stop) is lost
// after the config's agent_timeout (6 s here; 10 s by default); its trials run again on the
// other agent. Thawed, it finds its connection closed and stops its stale trials; nothing of
// theirs is recorded.
// A trial that takes its agent down (here it kills it; in life, the out-of-memory killer) is
// run again without using up a retry, as any trial of a lost agent, but not for ever: after its
// third lost agent it fails, and the sweep finishes, with agents restarted by a supervisor.
TEST_F(AgentsTest, TrialThatKeepsKillingItsAgentFails) {
  WriteProgram(
      "k.sh",
      "#!/bin/sh\nif [ \"$SWEEP_TRIAL\" = 1 ]; then kill -9 $(awk '{print $4}' /proc/$PPID/stat); "
      "sleep 5; fi\necho 'sweep-report {\"epoch\": 1, \"score\": 1}'\n");
  Write("k.toml",
        "[sweep]\nname = \"poison\"\nmetric = \"score\"\nmode = \"max\"\n[search]\n"
        "algorithm = \"grid\"\n[parameters]\nx = { values = [1, 2, 3] }\n[trial]\n"
        "kind = \"command\"\ncommand = [\"./k.sh\"]\n");
  int port = 0;
  pid_t coordinator = StartCoordinator("k.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  int code = -1000;
  for (int i = 0; i < 8 && code == -1000; ++i) {  // the supervisor
    pid_t agent = Spawn("agent --connect 127.0.0.1:" + std::to_string(port) +
                            " --token-file tok --cpu-slots 1 --name a",
                        "agent-" + std::to_string(i) + ".log");
    while (Alive(agent) && (code = WaitExit(coordinator, 0.1)) == -1000) {
    }
  }
  ASSERT_EQ(code, 0) << Log("coordinator.log");
  auto rows = Query("SELECT number, status, error, retries FROM trials ORDER BY number");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0][1], "completed");
  EXPECT_EQ(rows[2][1], "completed");
  EXPECT_EQ(rows[1][1], "failed");
  EXPECT_EQ(rows[1][2].rfind("its agent was lost 3 times while it ran", 0), 0u) << rows[1][2];
  EXPECT_EQ(rows[1][3], "0");
  EXPECT_EQ(Scalar("SELECT count(*) FROM events WHERE trial = 1 AND to_state = 'interrupted'"), 2);
  // Stored, so a resumed coordinator goes on counting; the third, which failed it, too.
  EXPECT_EQ(Scalar("SELECT agent_losses FROM trials WHERE number = 1"), 3);
}

// An agent stopped with SIGTERM (a batch system's preemption) says goodbye: its trial runs
// again, and however often that happens it is no sign that the trial takes its agent down.
TEST_F(AgentsTest, AStoppedAgentsTrialRunsAgainWithoutCountingALoss) {
  WriteProgram(
      "p.sh",
      "#!/bin/sh\nn=$(cat runs 2>/dev/null || echo 0); n=$((n + 1)); echo $n > runs\n"
      "if [ $n -ge 5 ]; then echo 'sweep-report {\"epoch\": 1, \"score\": 1}'; exit 0; fi\n"
      "touch running\nexec sleep 60\n");
  Write("p.toml",
        "[sweep]\nname = \"preempted\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
        "[trial]\nkind = \"command\"\ncommand = [\"./p.sh\"]\nkill_grace = \"2s\"\n");
  int port = 0;
  pid_t coordinator = StartCoordinator("p.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  for (int i = 0; i < 4; ++i) {
    pid_t agent = StartAgent("a" + std::to_string(i), port);
    ASSERT_TRUE(WaitUntil([&] { return fs::exists(dir_ / "running"); }, 30))
        << Log("coordinator.log");
    fs::remove(dir_ / "running");
    ::kill(agent, SIGTERM);
    ASSERT_EQ(WaitExit(agent, 30), 0) << Log("agent-a" + std::to_string(i) + ".log");
  }
  StartAgent("last", port);
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  auto rows = Query("SELECT status, retries, agent_losses FROM trials");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"completed", "0", "0"}));
  EXPECT_EQ(Scalar("SELECT count(*) FROM events WHERE trial = 0 AND to_state = 'interrupted'"), 4);
}

// A stopped agent's trial ends there before it runs again on another agent: never two copies of
// one trial at once (here the program takes a second to save its state after SIGTERM, as a
// careful one does).
TEST_F(AgentsTest, AStoppedAgentsTrialEndsThereBeforeItRunsElsewhere) {
  pid_t coordinator = 0, first = 0;
  OneTrialOnTheFirstOfTwoAgents("drain", R"sh(#!/bin/sh
now() { date +%s.%N; }
echo "start $(now)" >> spans
if [ -e ran ]; then echo 'sweep-report {"epoch": 2, "score": 2}'; exit 0; fi
touch ran
trap 'sleep 1; echo "end $(now)" >> spans; exit 0' TERM
echo 'sweep-report {"epoch": 1, "score": 1}'
touch running
while :; do sleep 0.05; done
)sh",
                                "5s", &coordinator, &first);
  if (HasFatalFailure()) return;
  ::kill(first, SIGTERM);
  EXPECT_EQ(WaitExit(first, 30), 0) << Log("agent-first.log");
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  std::istringstream spans(sweep_e2e::Slurp(dir_ / "spans"));
  std::vector<std::pair<std::string, double>> marks;
  std::string what;
  double at = 0;
  while (spans >> what >> at) marks.emplace_back(what, at);
  ASSERT_EQ(marks.size(), 3u) << sweep_e2e::Slurp(dir_ / "spans");
  EXPECT_EQ(marks[1].first, "end") << "the rerun started before the first copy ended";
  EXPECT_GE(marks[2].second, marks[1].second);
  auto rows = Query("SELECT status, retries, agent_losses, objective FROM trials");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"completed", "0", "0", "2.0"}));
  EXPECT_EQ(Query("SELECT group_concat(step) FROM reports")[0][0], "1,2");
}

// A worker that crashes while its agent is stopping is a crash like any other: its trial runs
// again on a retry, not for free as the trials the agent itself ends as it goes.
TEST_F(AgentsTest, AWorkerThatCrashesOnAStoppingAgentUsesARetry) {
  pid_t coordinator = 0, first = 0;
  OneTrialOnTheFirstOfTwoAgents(
      "crash", RunsOnceThenReports("trap 'kill -SEGV $PPID; sleep 1; exit 0' TERM"), "5s",
      &coordinator, &first);
  if (HasFatalFailure()) return;
  ::kill(first, SIGTERM);
  EXPECT_EQ(WaitExit(first, 30), 0) << Log("agent-first.log");
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  auto rows = Query("SELECT status, retries, agent_losses FROM trials");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"completed", "1", "0"}));
  const std::string why =
      Query("SELECT detail FROM events WHERE trial = 0 AND to_state = 'interrupted'")[0][0];
  EXPECT_NE(why.find("Segmentation fault"), std::string::npos) << why;
  EXPECT_EQ(why.rfind("on agent 'first': worker (pid ", 0), 0u) << why;
  EXPECT_NE(why.find("retry 1 of 1"), std::string::npos) << why;
}

// Reports and ends that an agent sends while the coordinator is held up (a store locked by
// another program) keep the times they arrived, as a local worker's keep theirs: a 3 s trial
// lasts 3 s in the store, its reports spread over it.
TEST_F(AgentsTest, EventsThatArriveWhileTheStoreIsLockedKeepTheirTimes) {
  Write("h.toml", sweep_e2e::BraninConfig("held", 1, "", "steps = 10\nstep_ms = 300\n"));
  int port = 0;
  pid_t coordinator = StartCoordinator("h.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  StartAgent("a", port);
  ASSERT_TRUE(WaitForAReport()) << Log("coordinator.log");
  sqlite3* lock = HoldWriteLock();
  ASSERT_NE(lock, nullptr);
  std::this_thread::sleep_for(std::chrono::seconds(4));  // past the trial's end
  ASSERT_EQ(sqlite3_exec(lock, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(lock);
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  const auto times = Query("SELECT time FROM reports ORDER BY step");
  ASSERT_EQ(times.size(), 10u);
  for (size_t i = 1; i < times.size(); ++i) {
    // 300 ms apart; a turn held up by the lock stamped them all alike.
    EXPECT_GT(std::stod(times[i][0]) - std::stod(times[i - 1][0]), 0.15) << "step " << i + 1;
  }
  EXPECT_GT(std::stod(Query("SELECT ended - started FROM trials")[0][0]), 2.5);
}

// [trial] heartbeat_timeout holds for an agent's workers as for local ones: a worker that hangs
// (frozen here by its own program) is killed once it has been silent that long, not after the
// agent's default minute, and its trial runs again.
TEST_F(AgentsTest, AnAgentsHungWorkerIsKilledAfterTheSweepsHeartbeatTimeout) {
  WriteProgram(
      "f.sh",
      "#!/bin/sh\nif [ -e ran ]; then echo 'sweep-report {\"epoch\": 1, \"score\": 1}'; exit 0; "
      "fi\ntouch ran\nkill -STOP $PPID\nexec sleep 60\n");
  Write("f.toml",
        "[sweep]\nname = \"hung\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
        "[trial]\nkind = \"command\"\ncommand = [\"./f.sh\"]\nheartbeat_timeout = \"2s\"\n");
  int port = 0;
  pid_t coordinator = StartCoordinator("f.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  StartAgent("a", port);
  ASSERT_EQ(WaitExit(coordinator, 30), 0) << Log("coordinator.log");
  EXPECT_EQ(Query("SELECT status, retries FROM trials")[0],
            (std::vector<std::string>{"completed", "1"}));
  const std::string why =
      Query("SELECT detail FROM events WHERE trial = 0 AND to_state = 'interrupted'")[0][0];
  EXPECT_NE(why.find("sent no heartbeat for 2 s and was killed"), std::string::npos) << why;
}

// A trainer trial on an agent checkpoints where the agent resolves its checkpoint_dir (a
// relative one, and the default, in the agent's own folder), and the store names that file as
// AGENT:PATH, not a path on the coordinator's machine where there is none; an absolute one is
// named as it is.
TEST_F(AgentsTest, AnAgentsCheckpointIsNamedWhereItIs) {
  WriteTinyDataset(200, 50);
  const std::string trainer = "[parameters]\nepochs = 2\n[trainer]\ndataset = \"" + dir_.string() +
                              "\"\nhidden = [8]\nbatch_size = 32\n";
  Write("r.toml",
        "[sweep]\nname = \"rel\"\nmax_trials = 1\n[trial]\ncheckpoint_dir = \"ckpt\"\n" + trainer);
  Write("d.toml", "[sweep]\nname = \"def\"\nmax_trials = 1\n" + trainer);
  Write("a.toml", "[sweep]\nname = \"abs\"\nmax_trials = 1\n[trial]\ncheckpoint_dir = \"" +
                      (dir_ / "shared").string() + "\"\n" + trainer);
  fs::create_directory(dir_ / "a1");
  const fs::path agent_dir = fs::canonical(dir_ / "a1");
  for (const char* config : {"r.toml", "d.toml", "a.toml"}) {
    SCOPED_TRACE(config);
    // --db spelt absolute: the default folder is still the agent's own.
    const std::string log = std::string(config) + ".log";
    pid_t coordinator = Spawn(std::string("run ") + config + " --db " + (dir_ / "s.db").string() +
                                  " --listen 127.0.0.1:0 --token-file tok --no-local",
                              log);
    const int port = ListenPort(log);
    ASSERT_GT(port, 0) << Log(log);
    pid_t agent = Spawn("agent --connect 127.0.0.1:" + std::to_string(port) + " --token-file " +
                            (dir_ / "tok").string() + " --cpu-slots 1 --name a1",
                        "agent-" + log, "-C a1");
    ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log(log);
    ::kill(agent, SIGTERM);
    EXPECT_EQ(WaitExit(agent, 30), 0) << Log("agent-" + log);
  }
  const auto rows = Query(
      "SELECT s.name, t.checkpoint FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
      "ORDER BY s.name",
      "s.db");
  ASSERT_EQ(rows.size(), 3u);
  const std::string rel = (agent_dir / "ckpt/rel/trial-0.ckpt").string();
  const std::string def = (agent_dir / "s.db-checkpoints/def/trial-0.ckpt").string();
  // An absolute checkpoint_dir is the same path everywhere (shared storage): named as it is.
  const std::string abs = (dir_ / "shared/abs/trial-0.ckpt").string();
  EXPECT_EQ(rows[0], (std::vector<std::string>{"abs", abs}));
  EXPECT_TRUE(fs::exists(abs));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"def", "a1:" + def}));
  EXPECT_EQ(rows[2], (std::vector<std::string>{"rel", "a1:" + rel}));
  EXPECT_TRUE(fs::exists(rel));
  EXPECT_TRUE(fs::exists(def));
}

// An agent that lacks the sweep's program (not on its PATH: nothing checked it there before the
// sweep) takes no more trials after the first it cannot start; that one runs again, on an agent
// that has the program, and no trial fails.
TEST_F(AgentsTest, AnAgentWithoutTheProgramIsRetiredNotEveryTrialFailed) {
  Write("m.toml",
        "[sweep]\nname = \"path\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 4\n"
        "[trial]\nkind = \"command\"\ncommand = [\"mytrain\"]\n");
  RetireBadThenRunOnGood("");
  if (HasFatalFailure()) return;
  EXPECT_NE(
      Log("coordinator.log").find("'mytrain' is not an executable program on PATH on this machine"),
      std::string::npos)
      << Log("coordinator.log");
  // Said once, though both of bad's slots had a trial.
  const std::string log = Log("coordinator.log");
  const size_t said = log.find("no server left that can run a trial");
  EXPECT_NE(said, std::string::npos) << log;
  EXPECT_EQ(log.find("no server left", said + 1), std::string::npos) << log;
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed' AND placement LIKE "
                  "'good:%' AND retries = 0")[0][0],
            "4");
}

// An agent whose copy of the program cannot run there (no #! line: what a coordinator refuses
// before a sweep where its own slots would run it) is retired in the same way: its trials run
// again elsewhere, failing none, and it takes no more.
TEST_F(AgentsTest, AnAgentWhoseCopyOfTheProgramCannotRunIsRetiredToo) {
  fs::create_directory(dir_ / "bin-bad");
  WriteProgram("bin-bad/mytrain", "echo 'sweep-report {\"epoch\": 1, \"score\": 1}'\n");
  Write("m.toml",
        "[sweep]\nname = \"copy\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 4\n"
        "[trial]\nkind = \"command\"\ncommand = [\"mytrain\"]\nmax_initial_failures = 1\n");
  RetireBadThenRunOnGood("PATH=" + (dir_ / "bin-bad").string() + ":/usr/bin:/bin");
  if (HasFatalFailure()) return;
  EXPECT_NE(Log("coordinator.log").find("it has no #! line and is not a binary"), std::string::npos)
      << Log("coordinator.log");
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed' AND placement LIKE "
                  "'good:%' AND retries = 0")[0][0],
            "4");
}

// A second SIGTERM (or Ctrl-C) to a stopping agent ends its trials at once, as a second one to
// the coordinator does, instead of waiting out a program's kill_grace; the trial runs again
// elsewhere, counted as neither a retry nor a loss.
TEST_F(AgentsTest, ASecondStopEndsAStoppingAgentsTrialsAtOnce) {
  pid_t coordinator = 0, first = 0;
  OneTrialOnTheFirstOfTwoAgents("deaf", RunsOnceThenReports("trap '' TERM"), "60s", &coordinator,
                                &first);
  if (HasFatalFailure()) return;
  ::kill(first, SIGTERM);
  ASSERT_TRUE(WaitUntil(
      [&] { return Log("agent-first.log").find("stopping: ending 1") != std::string::npos; }, 30))
      << Log("agent-first.log");
  const auto before = Clock::now();
  ::kill(first, SIGTERM);
  EXPECT_EQ(WaitExit(first, 30), 0) << Log("agent-first.log");
  EXPECT_LT(Clock::now() - before, std::chrono::seconds(15)) << "it waited for kill_grace";
  EXPECT_NE(Log("agent-first.log").find("stopping at once"), std::string::npos)
      << Log("agent-first.log");
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  auto rows = Query("SELECT status, retries, agent_losses, placement FROM trials");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"completed", "0", "0", "second:cpu0"}));
}

// An agent that said it is stopping and is then killed before its bye (a batch system's
// SIGKILL after its SIGTERM, sooner than the trial's kill_grace) was stopped, not lost: its
// trial runs again elsewhere without counting a loss.
TEST_F(AgentsTest, AStoppingAgentKilledBeforeItsByeCostsItsTrialNothing) {
  pid_t coordinator = 0, first = 0;
  OneTrialOnTheFirstOfTwoAgents("preempt", RunsOnceThenReports("trap '' TERM"), "60s", &coordinator,
                                &first);
  if (HasFatalFailure()) return;
  ::kill(first, SIGTERM);
  ASSERT_TRUE(WaitUntil(
      [&] { return Log("coordinator.log").find("is stopping: its 1") != std::string::npos; }, 30))
      << Log("coordinator.log");
  KillNow(first);
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  auto rows = Query("SELECT status, retries, agent_losses, placement FROM trials");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"completed", "0", "0", "second:cpu0"}));
}

// Two agents of one name (two on a host, without --name) are told apart in placements.
TEST_F(AgentsTest, AgentsOfOneNameAreToldApart) {
  // 24 trials of 1 s: the second agent has seconds to join before the first runs out of them.
  Write("c.toml", sweep_e2e::BraninConfig("same", 24, "seed = 5\n", "steps = 10\nstep_ms = 100\n"));
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  StartAgent("twin", port);
  ASSERT_TRUE(WaitForLine("coordinator.log", "joined from host", 15)) << Log("coordinator.log");
  StartAgent("twin", port);
  EXPECT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  EXPECT_NE(Log("coordinator.log").find("is 'twin#2' in placements: another server has its name"),
            std::string::npos)
      << Log("coordinator.log");
  EXPECT_EQ(PlacedOn("SELECT placement FROM trials"), (std::set<std::string>{"twin", "twin#2"}));
}

TEST_F(AgentsTest, FrozenAgentIsLostByMissedHeartbeats) {
  const int kTrials = 40, kSteps = 30;
  Write("c.toml",
        AshaBranin("frozen", kTrials, kSteps, 20) + "[executor]\nagent_timeout = \"6s\"\n");
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  StartAgent("a", port);
  pid_t b = StartAgent("b", port);
  ASSERT_TRUE(WaitForLine("coordinator.log", "joined from host", 15, 2)) << Log("coordinator.log");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Scalar(
                   "SELECT count(*) FROM trials WHERE placement LIKE 'b:%' AND status = "
                   "'running'") > 0;
      },
      30));
  ::kill(b, SIGSTOP);
  const auto frozen_at = Clock::now();
  EXPECT_TRUE(WaitForLine("coordinator.log", "lost (missed heartbeats)", 20))
      << Log("coordinator.log");
  const double silent_s = std::chrono::duration<double>(Clock::now() - frozen_at).count();
  EXPECT_GT(silent_s, 5.0);
  EXPECT_LT(silent_s, 9.5);  // the config's 6 s, not the default 10
  EXPECT_NE(Log("coordinator.log").find("nothing received for 6 s"), std::string::npos)
      << Log("coordinator.log");
  ::kill(b, SIGCONT);
  EXPECT_TRUE(WaitForLine("agent-b.log", "connection to the coordinator at 127.0.0.1:", 15))
      << Log("agent-b.log");
  EXPECT_EQ(WaitExit(coordinator, 40), 0) << Log("coordinator.log");
  EXPECT_TRUE(std::regex_search(
      Log("coordinator.log"),
      std::regex("agent 'b' \\(id [0-9]+, 127\\.0\\.0\\.1:[0-9]+\\) lost \\(missed heartbeats\\)")))
      << Log("coordinator.log");
  ExpectEveryTrialAccountedFor(kTrials, kSteps);
  auto lost = Query(
      "SELECT trial FROM events WHERE from_state = 'running' AND to_state = 'interrupted' AND "
      "detail LIKE '%agent ''b''%missed heartbeats%'");
  EXPECT_FALSE(lost.empty());
  for (auto& row : lost) {
    EXPECT_EQ(Scalar("SELECT count(*) FROM events WHERE trial = " + row[0] +
                     " AND from_state = 'interrupted' AND to_state = 'running'"),
              1)
        << "trial " << row[0];
  }
}

// Agents on other hosts, as far as one machine allows: the coordinator listens on 0.0.0.0 in a
// network namespace of its own, and each agent runs in a nested one, joined to it by a veth
// pair with its own subnet (10.77.N.0/24). The coordinator sees three peer addresses.
TEST_F(AgentsTest, AgentsInTheirOwnNetworkNamespaces) {
  if (std::system("unshare -rn sh -c 'ip link add va type veth peer name vb && unshare -n true' "
                  "> /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "user and network namespaces (or veth links) are not available here";
  }
  const int kTrials = 30, kSteps = 20;
  Write("c.toml", AshaBranin("netns", kTrials, kSteps, 20));
  // agent.sh N PORT: runs in a new network namespace; says so, waits for its link, then serves.
  Write("agent.sh", R"(set -u
touch ns$1.ready
for i in $(seq 1 500); do [ -e link$1.ready ] && break; sleep 0.02; done
ip link set lo up && ip addr add 10.77.$1.2/24 dev a$1 && ip link set a$1 up || exit 91
exec "$SWEEP" agent --connect 10.77.$1.1:$2 --token-file tok --cpu-slots 2 --name n$1 \
  > agent-n$1.log 2>&1
)");
  Write("net.sh", R"(set -u
agents=""
trap 'kill $agents 2> /dev/null; wait' EXIT
ip link set lo up
"$SWEEP" run c.toml --listen 0.0.0.0:0 --token-file tok --no-local > coordinator.log 2>&1 &
coordinator=$!
for i in $(seq 1 500); do grep -q 'listening for agents' coordinator.log && break; sleep 0.02; done
port=$(sed -n 's/.*listening for agents on [^ ]*:\([0-9]*\)$/\1/p' coordinator.log)
[ -n "$port" ] || exit 92
for n in 1 2 3; do
  unshare -n sh agent.sh $n $port &
  pid=$!
  agents="$agents $pid"
  for i in $(seq 1 500); do [ -e ns$n.ready ] && break; sleep 0.02; done
  ip link add h$n type veth peer name a$n netns $pid || exit 93
  ip addr add 10.77.$n.1/24 dev h$n && ip link set h$n up || exit 94
  touch link$n.ready
done
wait $coordinator
echo $? > coordinator.rc
)");
  std::string cmd = "cd '" + dir_.string() +
                    "' && SWEEP='" SWEEP_BINARY
                    "' timeout -k 5 50 unshare -rn sh net.sh > "
                    "net.log 2>&1";
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << Log("net.log") << Log("coordinator.log");
  EXPECT_EQ(Log("coordinator.rc"), "0\n") << Log("coordinator.log");
  std::string log = Log("coordinator.log");
  for (int n = 1; n <= 3; ++n) {
    EXPECT_TRUE(std::regex_search(
        log, std::regex("agent 'n" + std::to_string(n) + "' \\(id [0-9]+, 10\\.77\\." +
                        std::to_string(n) + "\\.2:[0-9]+\\) joined")))
        << log;
  }
  ExpectEveryTrialAccountedFor(kTrials, kSteps);
  EXPECT_EQ(PlacedOn("SELECT detail FROM events WHERE to_state = 'running' AND trial IS NOT NULL"),
            (std::set<std::string>{"n1", "n2", "n3"}));
}

}  // namespace
