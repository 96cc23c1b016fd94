// AgentHub and RunAgent together over the in-memory network, with faults: delays, duplicate
// frames, drops, garbage, disconnects in the middle of a trial. Trials run in real worker
// processes (the test worker), so what reaches the hub is what a coordinator would see.
#include "executor/agent_hub.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "executor/agent.h"
#include "executor/memory_transport.h"
#include "net_test_util.h"

namespace sweep::executor {
namespace {

using net::Direction;
using net::Faults;
using nlohmann::json;
using testing::AgentThread;
using testing::FunctionTask;
using testing::HubEvents;
using testing::SharedLog;

class AgentHubTest : public ::testing::Test {
 protected:
  void Listen(const std::string& token = "tok") {
    HubOptions o;
    o.heartbeat_ms = 50;
    o.heartbeat_timeout_ms = 500;
    o.handshake_timeout_ms = 2000;
    o.transport = network_.Factory();
    o.log = [this](std::string_view line) {
      std::string text(line);
      text += '\n';
      hub_log_.sputn(text.data(), static_cast<std::streamsize>(text.size()));
    };
    ASSERT_TRUE(hub_.Listen("hub", 0, token, o).ok());
  }

  AgentOptions Agent(const std::string& token = "tok", const std::string& name = "a1") {
    AgentOptions o;
    o.host = "hub";
    o.port = hub_.port();
    o.token = token;
    o.name = name;
    o.worker_command = {SWEEP_TEST_WORKER};
    o.slots = CpuSlots(2);
    o.transport = network_.Factory();
    o.backoff_initial_ms = 10;
    o.backoff_max_ms = 100;
    o.stop_grace_ms = 2000;
    o.handshake_timeout_ms = 1000;
    o.auth_refusal_window_ms = 200;  // token refusals end the agent within the test
    return o;
  }

  // Trial 4: a command trial running `trap '<on_term>' TERM` then looping, in a fresh folder
  // (*dir), which it marks with a file "running" once it runs; kill_grace 5 s.
  static TrialTask SavingCommandTrial(const std::string& on_term, std::filesystem::path* dir) {
    *dir = std::filesystem::temp_directory_path() /
           ("sweep-cmd-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
    std::filesystem::create_directories(*dir);
    std::ofstream(*dir / "p.sh") << "#!/bin/sh\ntrap '" << on_term
                                 << "' TERM\ntouch running\nwhile :; do sleep 0.05; done\n";
    std::filesystem::permissions(*dir / "p.sh", std::filesystem::perms::owner_all);
    TrialTask task;
    task.number = 4;
    task.kind = TrialKind::kCommand;
    task.params = json::object();
    task.settings = {{"command", {(*dir / "p.sh").string()}},
                     {"workdir", dir->string()},
                     {"trial_dir", (*dir / "t4").string()},
                     {"metric", "score"},
                     {"kill_grace_s", 5.0}};
    return task;
  }

  size_t Reports(int64_t trial) const {
    return events_.Worker(trial, WorkerEvent::Type::kReport).size();
  }

  SharedLog hub_log_;  // outlives the hub, whose thread writes to it
  net::MemoryNetwork network_{7};
  AgentHub hub_;
  HubEvents events_{hub_};
};

TEST_F(AgentHubTest, AgentJoinsAndRunsATrial) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const AgentJoined& joined = *events_.Joined()[0];
  EXPECT_EQ(joined.name, "a1");
  EXPECT_EQ(joined.slots.size(), 2u);
  EXPECT_FALSE(joined.slots[0].gpu);
  EXPECT_TRUE(joined.link_group.empty());
  EXPECT_GT(joined.pid, 0);
  const int64_t id = events_.JoinedId(0);
  EXPECT_EQ(hub_.agents(), 1);

  ASSERT_TRUE(hub_.Start(id, FunctionTask(3, {{"steps", 20}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Done(3); }));
  EXPECT_EQ(Reports(3), 20u);
  auto done = events_.Worker(3, WorkerEvent::Type::kDone);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, TrialOutcome::Kind::kCompleted);
  // Reports arrive in order.
  auto reports = events_.Worker(3, WorkerEvent::Type::kReport);
  for (size_t i = 0; i < reports.size(); ++i) EXPECT_EQ(reports[i].step, int64_t(i + 1));

  EXPECT_TRUE(agent.Stop().ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 1; }));
  EXPECT_EQ(events_.Lost()[0].second->reason, AgentLost::Reason::kBye);
  EXPECT_NE(agent.log.text().find("registered with the coordinator"), std::string::npos);
}

TEST_F(AgentHubTest, StartOnAnUnknownAgentIsNotFound) {
  Listen();
  EXPECT_EQ(hub_.Start(99, FunctionTask(1)).code(), Status::Code::kNotFound);
  EXPECT_EQ(hub_.Stop(99, 1).code(), Status::Code::kNotFound);
}

TEST_F(AgentHubTest, DecisionPointsWaitForContinueAndStopEndsTheTrial) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const int64_t id = events_.JoinedId(0);
  TrialTask task = FunctionTask(5, {{"steps", 50}});
  task.decide_every_report = true;
  ASSERT_TRUE(hub_.Start(id, task).ok());
  for (size_t n = 1; n <= 3; ++n) {
    ASSERT_TRUE(events_.WaitFor([&] { return Reports(5) == n; }));
    // The trial waits: no second report without a go.
    EXPECT_FALSE(events_.WaitFor([&] { return Reports(5) > n; }, 100));
    if (n < 3) {
      ASSERT_TRUE(hub_.Continue(id, 5).ok());
    }
  }
  ASSERT_TRUE(hub_.Stop(id, 5).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Done(5); }));
  EXPECT_EQ(events_.Worker(5, WorkerEvent::Type::kDone)[0].outcome, TrialOutcome::Kind::kStopped);
  EXPECT_EQ(Reports(5), 3u);
}

TEST_F(AgentHubTest, DelayedFramesKeepTheirOrder) {
  network_.SetFaults(Direction::kToListener, Faults{0, 0, 30});
  network_.SetFaults(Direction::kToConnector, Faults{0, 0, 30});
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  ASSERT_TRUE(hub_.Start(events_.JoinedId(0), FunctionTask(1, {{"steps", 30}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Done(1); }));
  auto reports = events_.Worker(1, WorkerEvent::Type::kReport);
  ASSERT_EQ(reports.size(), 30u);
  for (size_t i = 0; i < reports.size(); ++i) EXPECT_EQ(reports[i].step, int64_t(i + 1));
  EXPECT_TRUE(events_.Lost().empty());
}

TEST_F(AgentHubTest, DuplicateFramesAreDroppedBothWays) {
  network_.SetFaults(Direction::kToListener, Faults{0, 0.5, 0});
  network_.SetFaults(Direction::kToConnector, Faults{0, 0.5, 0});
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const int64_t id = events_.JoinedId(0);
  for (int t = 0; t < 4; ++t) {
    ASSERT_TRUE(hub_.Start(id, FunctionTask(t, {{"steps", 25}, {"step_ms", 1}})).ok());
  }
  ASSERT_TRUE(events_.WaitFor(
      [&] { return events_.Done(0) && events_.Done(1) && events_.Done(2) && events_.Done(3); }));
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(Reports(t), 25u) << "trial " << t;
    EXPECT_EQ(events_.Worker(t, WorkerEvent::Type::kDone).size(), 1u) << "trial " << t;
  }
  EXPECT_EQ(events_.Joined().size(), 1u);
  EXPECT_TRUE(events_.Lost().empty());
}

TEST_F(AgentHubTest, SilentAgentIsLostAndComesBackAsANewAgent) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const int64_t first = events_.JoinedId(0);
  ASSERT_TRUE(hub_.Start(first, FunctionTask(8, {{"steps", 100000}, {"step_ms", 5}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return Reports(8) > 0; }));
  network_.SetFaults(Direction::kToListener, Faults{1.0, 0, 0});  // the agent goes silent
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 1; }));
  auto [lost_id, lost] = events_.Lost()[0];
  EXPECT_EQ(lost_id, first);
  EXPECT_EQ(lost->reason, AgentLost::Reason::kMissedHeartbeats);
  EXPECT_EQ(lost->trials, (std::vector<int64_t>{8}));
  auto done = events_.Worker(8, WorkerEvent::Type::kDone);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].worker_lost);
  EXPECT_NE(done[0].error.find("missed heartbeats"), std::string::npos) << done[0].error;
  EXPECT_EQ(hub_.agents(), 0);

  network_.SetFaults(Direction::kToListener, Faults{});
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 2; }));
  const int64_t second = events_.JoinedId(1);
  EXPECT_NE(second, first);
  // The old trial was ended on the agent before it registered again.
  EXPECT_NE(agent.log.text().find("ending 1 running trial"), std::string::npos) << agent.log.text();
  EXPECT_EQ(hub_.Stop(first, 8).code(), Status::Code::kNotFound);
  ASSERT_TRUE(hub_.Start(second, FunctionTask(9, {{"steps", 3}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Done(9); }));
  EXPECT_EQ(events_.Worker(9, WorkerEvent::Type::kDone)[0].outcome, TrialOutcome::Kind::kCompleted);
  // No stray events for the old trial after its lost kDone.
  EXPECT_EQ(events_.Worker(8, WorkerEvent::Type::kDone).size(), 1u);
}

TEST_F(AgentHubTest, LostFramesCloseTheConnectionAndTheAgentRejoins) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  ASSERT_TRUE(
      hub_.Start(events_.JoinedId(0), FunctionTask(2, {{"steps", 100000}, {"step_ms", 2}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return Reports(2) > 0; }));
  network_.SetFaults(Direction::kToListener, Faults{0.3, 0, 0});
  ASSERT_TRUE(events_.WaitFor([&] { return !events_.Lost().empty(); }));
  network_.SetFaults(Direction::kToListener, Faults{});
  const AgentLost* lost = events_.Lost()[0].second;
  EXPECT_EQ(lost->reason, AgentLost::Reason::kMalformedFrame);
  EXPECT_NE(lost->detail.find("frames were lost"), std::string::npos) << lost->detail;
  EXPECT_TRUE(events_.Worker(2, WorkerEvent::Type::kDone)[0].worker_lost);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() >= 2; }));
}

TEST_F(AgentHubTest, GarbageClosesOnlyThatConnection) {
  Listen();
  AgentThread a1(Agent("tok", "a1"));
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  AgentThread a2(Agent("tok", "a2"));
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 2; }));
  // Garbage on every connection towards the hub: both are closed, as malformed; each agent
  // comes back.
  ASSERT_EQ(network_.InjectGarbage(Direction::kToListener, std::string("\0\0\0\x05hello", 9)), 2);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 2; }));
  for (auto [id, lost] : events_.Lost()) {
    EXPECT_EQ(lost->reason, AgentLost::Reason::kMalformedFrame);
    // After the handshake every frame must carry the session's MAC.
    EXPECT_NE(lost->detail.find("frame fails its authentication"), std::string::npos)
        << lost->detail;
  }
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 4; }));
  EXPECT_EQ(hub_.agents(), 2);
}

// After the handshake every frame carries a MAC under the session's key: a machine on the path
// (here, frames injected into the connection) cannot make an agent run a command, nor feed the
// coordinator reports. Each side closes the connection instead, and the agent joins again.
TEST_F(AgentHubTest, FramesInjectedAfterTheHandshakeAreRefused) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const auto marker =
      std::filesystem::temp_directory_path() / ("sweep-injected-" + std::to_string(::getpid()));
  std::filesystem::remove(marker);
  json assign = net::AssignToJson(testing::TouchingTask(9, marker));
  assign["seq"] = 3;  // the next after challenge and welcome
  const std::string text = assign.dump();
  auto framed = [](const std::string& payload) {
    const auto n = static_cast<uint32_t>(payload.size());
    return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)} +
           payload;
  };
  // Without a MAC, and with one made up: neither runs.
  ASSERT_EQ(network_.InjectGarbage(Direction::kToConnector, framed(text)), 1);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 2; })) << agent.log.text();
  EXPECT_EQ(agent.log.Count("a frame without its MAC after the handshake"), 1u) << agent.log.text();
  ASSERT_EQ(network_.InjectGarbage(Direction::kToConnector, framed(std::string(64, '0') + text)),
            1);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 3; })) << agent.log.text();
  EXPECT_EQ(agent.log.Count("frame fails its authentication"), 1u) << agent.log.text();
  EXPECT_FALSE(std::filesystem::exists(marker));
  // Towards the coordinator: a forged report batch closes that connection.
  json reports = {{"type", "reports"}, {"seq", 2}, {"reports", json::array()}};
  ASSERT_EQ(
      network_.InjectGarbage(Direction::kToListener, framed(std::string(64, 'a') + reports.dump())),
      1);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 3; }));
  EXPECT_NE(events_.Lost().back().second->detail.find("frame fails its authentication"),
            std::string::npos)
      << events_.Lost().back().second->detail;
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 4; }));
}

TEST_F(AgentHubTest, DisconnectMidTrialLosesTheAgentWhichReconnects) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const int64_t first = events_.JoinedId(0);
  ASSERT_TRUE(hub_.Start(first, FunctionTask(4, {{"steps", 100000}, {"step_ms", 5}})).ok());
  ASSERT_TRUE(hub_.Start(first, FunctionTask(6, {{"steps", 100000}, {"step_ms", 5}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return Reports(4) > 0 && Reports(6) > 0; }));
  ASSERT_EQ(network_.DisconnectAll(), 1);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 1; }));
  const AgentLost* lost = events_.Lost()[0].second;
  EXPECT_EQ(lost->reason, AgentLost::Reason::kDisconnected);
  EXPECT_EQ(std::set<int64_t>(lost->trials.begin(), lost->trials.end()), (std::set<int64_t>{4, 6}));
  EXPECT_TRUE(events_.Done(4) && events_.Done(6));
  // Each lost trial's kDone comes before the AgentLost.
  size_t lost_at = 0, done_at = 0;
  for (size_t i = 0; i < events_.all.size(); ++i) {
    if (std::holds_alternative<AgentLost>(events_.all[i].event)) lost_at = i;
    if (auto* w = std::get_if<WorkerEvent>(&events_.all[i].event);
        w && w->type == WorkerEvent::Type::kDone) {
      done_at = i;
    }
  }
  EXPECT_LT(done_at, lost_at);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 2; }));
  EXPECT_NE(agent.log.text().find("ending 2 running trials (they rerun from their last "
                                  "checkpoint)"),
            std::string::npos)
      << agent.log.text();
}

TEST_F(AgentHubTest, StartRacingALostAgentStillGetsItsDone) {
  Listen();
  auto agent = std::make_unique<AgentThread>(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const int64_t id = events_.JoinedId(0);
  network_.DisconnectAll();
  // Whether the hub has noticed yet or not: Ok means a kDone will come, NotFound that none will.
  Status st = hub_.Start(id, FunctionTask(11, {{"steps", 1000}, {"step_ms", 5}}));
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 1; }));
  if (st.ok()) {
    ASSERT_TRUE(events_.WaitFor([&] { return events_.Done(11); }));
    EXPECT_TRUE(events_.Worker(11, WorkerEvent::Type::kDone)[0].worker_lost);
  } else {
    EXPECT_EQ(st.code(), Status::Code::kNotFound);
  }
}

TEST_F(AgentHubTest, WrongTokenIsRefusedAndLoggedWithTheAddress) {
  Listen("right");
  AgentThread agent(Agent("wrong"));
  ASSERT_TRUE(events_.WaitFor([&] { return agent.log.Count("stopped") >= 1; }));
  EXPECT_TRUE(events_.Joined().empty());
  EXPECT_NE(hub_log_.text().find("at memory-peer-"), std::string::npos) << hub_log_.text();
  // A token no retry can change: the agent ends with the refusal once refusals have gone on for
  // its window (here 0.2 s) and numbered three (one alone is not authenticated: anyone on the
  // path could send it). It says so twice: retrying, then ending.
  EXPECT_EQ(agent.log.Count("refused this agent: authentication failed"), 2u) << agent.log.text();
  EXPECT_EQ(agent.log.Count("retrying with backoff"), 1u) << agent.log.text();
  EXPECT_EQ(agent.log.Count("it ends (status 2) if its token is still refused 0.2 s after the "
                            "first refusal"),
            1u)
      << agent.log.text();
  EXPECT_GE(hub_log_.Count("authentication failed"), 3u) << hub_log_.text();
  Status ended = agent.Stop();
  EXPECT_EQ(ended.code(), Status::Code::kInvalidArgument) << ended.message();
}

// When one side has no token at all, the refusal says which, not only that they differ.
class TokenRefusalTest : public AgentHubTest,
                         public ::testing::WithParamInterface<std::array<const char*, 3>> {};

TEST_P(TokenRefusalTest, SaysWhichSideHasNoToken) {
  const auto& [hub_token, agent_token, says] = GetParam();
  Listen(hub_token);
  AgentThread agent(Agent(agent_token));
  ASSERT_TRUE(events_.WaitFor([&] { return agent.log.Count("stopped") >= 1; }));
  EXPECT_EQ(agent.log.Count(says), 2u) << agent.log.text();  // retrying, then ending
  (void)agent.Stop();
}

INSTANTIATE_TEST_SUITE_P(
    Tokens, TokenRefusalTest,
    ::testing::Values(std::array<const char*, 3>{"", "tok", "the coordinator runs without a token"},
                      std::array<const char*, 3>{"tok", "",
                                                 "the agent gave no token (--token-file) and the "
                                                 "coordinator needs one"},
                      std::array<const char*, 3>{"right", "wrong",
                                                 "the agent's token does not match"}));

TEST_F(AgentHubTest, AgentRetriesUntilTheHubListensAndLogsTheFailureOnce) {
  AgentOptions o = Agent();
  o.port = 40000;  // the port the network gives the first listener
  AgentThread agent(o);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(agent.log.Count("Connection refused"), 1u) << agent.log.text();
  Listen();
  ASSERT_EQ(hub_.port(), 40000);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
}

TEST_F(AgentHubTest, ShutdownLosesRunningTrialsAndSaysBye) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  ASSERT_TRUE(
      hub_.Start(events_.JoinedId(0), FunctionTask(1, {{"steps", 100000}, {"step_ms", 5}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return Reports(1) > 0; }));
  hub_.Shutdown();
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 1; }));
  EXPECT_EQ(events_.Lost()[0].second->reason, AgentLost::Reason::kShutdown);
  EXPECT_TRUE(events_.Worker(1, WorkerEvent::Type::kDone)[0].worker_lost);
  EXPECT_EQ(hub_.Start(events_.JoinedId(0), FunctionTask(2)).code(), Status::Code::kNotFound);
  for (int i = 0; i < 100 && agent.log.Count("the coordinator is shutting down") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(agent.log.Count("the coordinator is shutting down"), 1u) << agent.log.text();
}

// A sweep that is over lets its agents go: they end with Ok, saying why and how to stay.
TEST_F(AgentHubTest, AnAgentEndsWhenTheSweepIsOver) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  hub_.ShutdownSweepOver();
  ASSERT_TRUE(events_.WaitFor([&] { return agent.Finished(); })) << agent.log.text();
  EXPECT_TRUE(agent.Stop().ok());
  EXPECT_EQ(agent.log.Count("said: the sweep is over"), 1u) << agent.log.text();
  EXPECT_EQ(agent.log.Count("the agent ends (--stay keeps it for the next sweep)"), 1u);
}

// With `stay` it serves the next coordinator on that address, and does not give up meanwhile.
TEST_F(AgentHubTest, AnAgentThatStaysServesTheNextSweep) {
  Listen();
  AgentOptions o = Agent();
  o.stay = true;
  o.retry_for_ms = -1;
  AgentThread agent(o);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const int port = hub_.port();
  hub_.ShutdownSweepOver();
  ASSERT_TRUE(events_.WaitFor([&] { return agent.log.Count("(--stay)") == 1; }))
      << agent.log.text();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(agent.Finished());
  AgentHub next;
  HubEvents next_events{next};
  HubOptions ho;
  ho.transport = network_.Factory();
  ASSERT_TRUE(next.Listen("hub", port, "tok", ho).ok());
  ASSERT_TRUE(next_events.WaitFor([&] { return next_events.Joined().size() == 1; }));
  // The agent says so once the hub's welcome arrives, which may be after the hub's event.
  next_events.WaitFor([&] { return agent.log.Count("registered with the coordinator") == 2; });
  EXPECT_EQ(agent.log.Count("registered with the coordinator"), 2u) << agent.log.text();
  next.Shutdown();
  EXPECT_TRUE(agent.Stop().ok());
}

// Without a coordinator for retry_for_ms (none ever, or one lost without the word that the
// sweep is over) the agent gives up, Unavailable, naming the address and the flag.
TEST_F(AgentHubTest, AnAgentGivesUpAfterRetryForWithoutACoordinator) {
  AgentOptions o = Agent();
  o.port = 40000;
  o.retry_for_ms = 300;
  AgentThread never(o);
  ASSERT_TRUE(events_.WaitFor([&] { return never.Finished(); })) << never.log.text();
  Status st = never.Stop();
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("no coordinator at hub:40000 for 0.3 s since the agent started "
                              "(--retry-for)"),
            std::string::npos)
      << st.message();

  Listen();
  o.port = hub_.port();
  AgentThread lost(o);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  hub_.Shutdown();  // not over: the agent waits for a resume, but not for ever
  ASSERT_TRUE(events_.WaitFor([&] { return lost.Finished(); })) << lost.log.text();
  st = lost.Stop();
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("since the connection was lost"), std::string::npos) << st.message();
  EXPECT_EQ(lost.log.Count("the coordinator is shutting down"), 1u) << lost.log.text();
}

// An agent that stops (SIGTERM, its coordinator gone) gives a command trial its kill_grace to
// save its state, when that is longer than the agent's own stop_grace_ms.
TEST_F(AgentHubTest, AStoppingAgentGivesACommandTrialItsKillGrace) {
  Listen();
  std::filesystem::path dir;
  // On SIGTERM it takes 0.8 s to save, then says so.
  const TrialTask task = SavingCommandTrial("sleep 0.8; touch saved; exit 0", &dir);
  AgentOptions options = Agent();
  options.stop_grace_ms = 200;
  AgentThread agent(options);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  ASSERT_TRUE(hub_.Start(events_.JoinedId(0), task).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return std::filesystem::exists(dir / "running"); }, 10000))
      << (events_.Done(4) ? events_.Worker(4, WorkerEvent::Type::kDone)[0].error : "not ended");
  EXPECT_TRUE(agent.Stop().ok());
  EXPECT_TRUE(std::filesystem::exists(dir / "saved")) << agent.log.text();
  std::filesystem::remove_all(dir);
}

// The connection lost, the agent's trials end at once, unsaved: their reports no longer reach
// the store, so a trial must not write a checkpoint past them (its rerun would skip them). A
// program that would save on SIGTERM never gets the chance; its rerun goes on from its last
// checkpoint.
TEST_F(AgentHubTest, ALostConnectionEndsTrialsAtOnceUnsaved) {
  Listen();
  std::filesystem::path dir;
  const TrialTask task = SavingCommandTrial("touch saved; exit 0", &dir);
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  ASSERT_TRUE(hub_.Start(events_.JoinedId(0), task).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return std::filesystem::exists(dir / "running"); }, 10000));
  ASSERT_EQ(network_.DisconnectAll(), 1);
  // Ended (not stopped after its kill_grace): the agent is back well within the 5 s.
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 2; }, 4000))
      << agent.log.text();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(std::filesystem::exists(dir / "saved")) << agent.log.text();
  std::filesystem::remove_all(dir);
}

// An agent that cannot start a worker ends the trial interrupted (the machine's trouble: the
// coordinator runs it elsewhere and places nothing more there), not failed.
TEST_F(AgentHubTest, AWorkerThatCannotStartEndsItsTrialInterrupted) {
  Listen();
  AgentOptions options = Agent();
  options.worker_command = {"/nonexistent/sweep-worker"};
  AgentThread agent(options);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  ASSERT_TRUE(hub_.Start(events_.JoinedId(0), FunctionTask(3, {{"steps", 2}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Done(3); }));
  const auto done = events_.Worker(3, WorkerEvent::Type::kDone);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, TrialOutcome::Kind::kInterrupted);
  EXPECT_TRUE(done[0].never_started);  // its rerun elsewhere is still its first run
  EXPECT_NE(done[0].error.find("cannot start worker '/nonexistent/sweep-worker'"),
            std::string::npos)
      << done[0].error;
}

}  // namespace
}  // namespace sweep::executor
