// The hub and agents over real TCP on loopback, in one process (threads): a function trial end
// to end, and the handshake's refusals (wrong token both ways, a replayed proof, another
// protocol version), an oversized frame, a silent peer. Misbehaving peers are raw sockets.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "executor/agent.h"
#include "executor/agent_hub.h"
#include "executor/functions.h"
#include "executor/net_auth.h"
#include "net_test_util.h"

namespace sweep::executor {
namespace {

using net::MessageType;
using nlohmann::json;
using testing::AgentThread;
using testing::FunctionTask;
using testing::HubEvents;
using testing::RawClient;
using testing::SharedLog;

class AgentTcpTest : public ::testing::Test {
 protected:
  void Listen(const std::string& token = "tcp-token") {
    HubOptions o;
    o.heartbeat_ms = 100;
    o.heartbeat_timeout_ms = 2000;
    o.handshake_timeout_ms = 500;
    o.log = [this](std::string_view line) {
      std::string text(line);
      text += '\n';
      hub_log_.sputn(text.data(), static_cast<std::streamsize>(text.size()));
    };
    ASSERT_TRUE(hub_.Listen("127.0.0.1", 0, token, o).ok());
    ASSERT_GT(hub_.port(), 0);
  }

  AgentOptions Agent(const std::string& token = "tcp-token", int port = 0) {
    AgentOptions o;
    o.host = "127.0.0.1";
    o.port = port != 0 ? port : hub_.port();
    o.token = token;
    o.name = "tcp-agent";
    o.worker_command = {SWEEP_TEST_WORKER};
    o.slots = CpuSlots(2);
    o.backoff_initial_ms = 20;
    o.backoff_max_ms = 200;
    o.auth_refusal_window_ms = 200;  // token refusals end the agent within the test
    return o;
  }

  net::Hello RawHello(const std::string& nonce) {
    net::Hello h;
    h.name = "raw";
    h.host = "raw-host";
    h.pid = 1;
    h.slots = CpuSlots(1);
    h.nonce = nonce;
    return h;
  }

  // Runs the agent side of the handshake by hand; the welcome (or the bye) that comes back.
  std::optional<net::Frame> Handshake(RawClient& c, const std::string& token,
                                      const std::string& nonce, std::string* proof_sent) {
    if (!c.Send(net::ToJson(RawHello(nonce)))) return std::nullopt;
    auto challenge = c.Read();
    if (!challenge || challenge->type != MessageType::kChallenge) return challenge;
    std::string proof = net::AgentProof(token, nonce, challenge->body["nonce"].get<std::string>(),
                                        net::HelloTranscript(RawHello(nonce)));
    if (proof_sent != nullptr) {
      if (proof_sent->empty()) {
        *proof_sent = proof;
      } else {
        proof = *proof_sent;  // replay
      }
    }
    c.Send(net::ToJson(net::Auth{proof}));
    return c.Read();
  }

  // Plays the coordinator's side of the handshake on `c` up to the welcome, proving `token`;
  // from there on its frames carry MACs under that token's session key.
  bool FakeCoordinator(RawClient& c, const std::string& token) {
    auto hello = c.Read();
    if (!hello || hello->type != MessageType::kHello) return false;
    auto parsed = net::HelloFromJson(hello->body);
    if (!parsed.ok()) return false;
    const std::string nh = *net::NewNonce();
    c.Send(net::ToJson(net::Challenge{nh}));
    if (!c.ReadType(MessageType::kAuth)) return false;
    net::Welcome w;
    w.agent_id = 1;
    w.proof = net::CoordinatorProof(
        token, parsed->nonce, nh,
        net::WelcomeTranscript(*parsed, w.agent_id, w.heartbeat_ms, w.heartbeat_timeout_ms));
    c.Send(net::ToJson(w));
    c.Authenticate(net::SessionKey(token, parsed->nonce, nh), net::kCoordinatorFrameLabel,
                   net::kAgentFrameLabel);
    return true;
  }

  SharedLog hub_log_;  // outlives the hub, whose thread writes to it
  AgentHub hub_;
  HubEvents events_{hub_};
};

TEST_F(AgentTcpTest, AgentRunsAFunctionTrial) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  EXPECT_NE(events_.Joined()[0]->address.find("127.0.0.1:"), std::string::npos);
  TrialTask task = FunctionTask(21);
  task.params = {{"x1", 3.14159}, {"x2", 2.275}};
  ASSERT_TRUE(hub_.Start(events_.JoinedId(0), task).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Done(21); }));
  auto reports = events_.Worker(21, WorkerEvent::Type::kReport);
  ASSERT_EQ(reports.size(), 1u);
  auto expected = EvaluateFunction("branin", task.params);
  ASSERT_TRUE(expected.ok());
  EXPECT_DOUBLE_EQ(reports[0].metrics["value"].get<double>(), *expected);
  EXPECT_EQ(events_.Worker(21, WorkerEvent::Type::kDone)[0].outcome,
            TrialOutcome::Kind::kCompleted);
  EXPECT_TRUE(agent.Stop().ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 1; }));
  EXPECT_EQ(events_.Lost()[0].second->reason, AgentLost::Reason::kBye);
}

TEST_F(AgentTcpTest, WrongTokenIsRefused) {
  Listen();
  AgentThread agent(Agent("not-the-token"));
  ASSERT_TRUE(events_.WaitFor([&] { return hub_log_.Count("authentication failed") >= 1; }));
  EXPECT_NE(hub_log_.text().find("at 127.0.0.1:"), std::string::npos) << hub_log_.text();
  EXPECT_TRUE(events_.Joined().empty());
  for (int i = 0; i < 100 && agent.log.Count("refused this agent") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(agent.log.text().find("refused this agent: authentication failed"), std::string::npos)
      << agent.log.text();
  // No retry can change a token: the agent ends by itself, with the refusal as its status.
  for (int i = 0; i < 250 && agent.log.Count("stopped") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Status ended = agent.Stop();
  EXPECT_EQ(ended.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(ended.message().find("authentication failed"), std::string::npos) << ended.message();
  EXPECT_GE(hub_log_.Count("authentication failed"), 3) << hub_log_.text();  // 3 or more in a row
}

TEST_F(AgentTcpTest, ReplayedProofFailsBecauseTheNonceIsNew) {
  Listen();
  auto nonce = net::NewNonce();
  ASSERT_TRUE(nonce.ok());
  std::string proof;
  RawClient first(hub_.port());
  auto welcome = Handshake(first, "tcp-token", *nonce, &proof);
  ASSERT_TRUE(welcome.has_value());
  ASSERT_EQ(welcome->type, MessageType::kWelcome) << welcome->body.dump();
  // The same hello and the recorded proof, on a new connection: the coordinator's nonce
  // differs, so the proof does not match.
  RawClient second(hub_.port());
  auto refused = Handshake(second, "tcp-token", *nonce, &proof);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->type, MessageType::kBye);
  EXPECT_NE(refused->body["reason"].get<std::string>().find("authentication failed"),
            std::string::npos);
  EXPECT_TRUE(second.Closed());
  EXPECT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
}

TEST_F(AgentTcpTest, AnotherProtocolVersionIsRefusedNamingBoth) {
  Listen();
  RawClient c(hub_.port());
  json hello = net::ToJson(RawHello(std::string(64, 'b')));
  hello["version"] = net::kProtocolVersion + 1;
  ASSERT_TRUE(c.Send(hello));
  auto bye = c.Read();
  ASSERT_TRUE(bye.has_value());
  ASSERT_EQ(bye->type, MessageType::kBye);
  const std::string reason = bye->body["reason"];
  EXPECT_NE(reason.find("agent speaks version " + std::to_string(net::kProtocolVersion + 1)),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("coordinator version " + std::to_string(net::kProtocolVersion)),
            std::string::npos)
      << reason;
  EXPECT_TRUE(c.Closed());
}

TEST_F(AgentTcpTest, AgentRefusesACoordinatorThatCannotProveTheToken) {
  testing::RawListener fake;
  AgentThread agent(Agent("tcp-token", fake.port()));
  auto c = fake.Accept();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(FakeCoordinator(*c, "guessed-token"));
  auto bye = c->ReadType(MessageType::kBye);
  ASSERT_TRUE(bye.has_value());
  EXPECT_NE(bye->body["reason"].get<std::string>().find("failed to prove"), std::string::npos);
  EXPECT_TRUE(c->Closed());
  EXPECT_NE(agent.log.text().find("failed to prove that it holds the token"), std::string::npos)
      << agent.log.text();
}

// A task the agent cannot read (a newer coordinator's trial kind) fails that trial, with why;
// the connection stays, so the same task does not come back at every reconnect.
TEST_F(AgentTcpTest, ATaskOfAnUnknownKindFailsThatTrialNotTheConnection) {
  testing::RawListener fake;
  AgentThread agent(Agent("tcp-token", fake.port()));
  auto c = fake.Accept();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(FakeCoordinator(*c, "tcp-token"));
  json assign = net::AssignToJson(FunctionTask(5));
  assign["task"]["kind"] = "notebook";
  c->Send(assign);
  auto done = c->ReadType(MessageType::kDone);
  ASSERT_TRUE(done.has_value()) << agent.log.text();
  EXPECT_EQ(done->body["trial"], 5);
  EXPECT_EQ(done->body["outcome"], "failed");
  EXPECT_NE(done->body.dump().find("unknown trial kind 'notebook'"), std::string::npos)
      << done->body.dump();
  EXPECT_FALSE(c->Closed(300));
}

TEST_F(AgentTcpTest, OversizedFrameClosesOnlyThatConnection) {
  Listen();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
  const int64_t good = events_.JoinedId(0);
  RawClient bad(hub_.port());
  auto welcome = Handshake(bad, "tcp-token", *net::NewNonce(), nullptr);
  ASSERT_TRUE(welcome.has_value() && welcome->type == MessageType::kWelcome);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 2; }));
  const int64_t bad_id = events_.JoinedId(1);
  ASSERT_TRUE(bad.SendBytes(std::string("\x00\x20\x00\x00", 4)));  // 2 MiB announced
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 1; }));
  auto [lost_id, lost] = events_.Lost()[0];
  EXPECT_EQ(lost_id, bad_id);
  EXPECT_EQ(lost->reason, AgentLost::Reason::kMalformedFrame);
  EXPECT_NE(lost->detail.find("exceeds the limit of 1048576 bytes"), std::string::npos)
      << lost->detail;
  EXPECT_TRUE(bad.Closed());
  // The other agent is untouched.
  EXPECT_EQ(hub_.agents(), 1);
  ASSERT_TRUE(hub_.Start(good, FunctionTask(1, {{"steps", 5}})).ok());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Done(1); }));
  EXPECT_EQ(events_.Worker(1, WorkerEvent::Type::kReport).size(), 5u);
}

TEST_F(AgentTcpTest, PeerThatNeverSpeaksIsClosed) {
  Listen();
  RawClient c(hub_.port());
  ASSERT_TRUE(c.connected());
  EXPECT_TRUE(c.Closed(5000));
  EXPECT_NE(hub_log_.text().find("no handshake within"), std::string::npos) << hub_log_.text();
}

// Anyone who reaches the port can open connections that never authenticate, each able to hold
// a frame of up to a MiB: past max_handshakes_per_address in their handshake from one address
// (8 here), the oldest of that address is closed for a new one, so an agent still joins while
// they are held open (and memory stays bounded).
TEST_F(AgentTcpTest, ConnectionsInTheirHandshakeAreCapped) {
  HubOptions o;
  o.handshake_timeout_ms = 60'000;  // they are not timed out during the test
  o.max_handshakes_per_address = 8;
  o.max_handshakes = 64;
  o.log = [this](std::string_view line) {
    std::string text(line);
    text += '\n';
    hub_log_.sputn(text.data(), static_cast<std::streamsize>(text.size()));
  };
  ASSERT_TRUE(hub_.Listen("127.0.0.1", 0, "tcp-token", o).ok());
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 20; ++i) {
    silent.push_back(std::make_unique<RawClient>(hub_.port()));
    ASSERT_TRUE(silent.back()->connected());
    ASSERT_TRUE(silent.back()->SendBytes(std::string("\x00\x0f\xff\xff", 4)));  // ~1 MiB due
  }
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(silent[static_cast<size_t>(i)]->Closed(2000)) << i;
  for (int i = 12; i < 20; ++i) EXPECT_FALSE(silent[static_cast<size_t>(i)]->Closed(50)) << i;
  EXPECT_EQ(hub_log_.Count("closing the oldest of 8 connections from 127.0.0.1 that have not "
                           "finished their handshake"),
            1u)
      << hub_log_.text();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; })) << hub_log_.text();
  EXPECT_TRUE(silent[12]->Closed(2000)) << "the oldest made room for the agent";
}

// Connections that come and go before registering are logged, but at most 10 lines in 10 s:
// anyone who reaches the port could otherwise fill the coordinator's log.
TEST_F(AgentTcpTest, ConnectionsThatNeverRegisterCannotFloodTheLog) {
  Listen();
  for (int i = 0; i < 40; ++i) {
    RawClient c(hub_.port());
    ASSERT_TRUE(c.SendBytes("garbage!"));
    EXPECT_TRUE(c.Closed(2000));
  }
  ASSERT_TRUE(events_.WaitFor([&] { return hub_log_.Count("before it registered") == 10; }))
      << hub_log_.text();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(hub_log_.Count("before it registered"), 10u) << hub_log_.text();
  AgentThread agent(Agent());  // a genuine agent is logged as ever
  ASSERT_TRUE(events_.WaitFor([&] { return hub_log_.Count("joined from host") == 1; }));
}

// What a peer says is logged with its control characters escaped: no forged line of ours.
TEST_F(AgentTcpTest, APeersWordsCannotForgeALogLine) {
  Listen();
  RawClient c(hub_.port());
  ASSERT_TRUE(c.Send(json{{"type", "x\nsweep: agent 'gpu-a' joined"}, {"seq", 1}}));
  EXPECT_TRUE(c.Closed(2000));
  ASSERT_TRUE(events_.WaitFor([&] { return hub_log_.Count("unknown message type") == 1; }));
  EXPECT_NE(hub_log_.text().find("unknown message type 'x\\x0Asweep: agent 'gpu-a' joined'"),
            std::string::npos)
      << hub_log_.text();
  EXPECT_EQ(hub_log_.Count("\nsweep: agent"), 0u) << hub_log_.text();
}

// A frame nested deeper than any message of ours is malformed (a copy of it would recurse as
// deep): closed before it is parsed.
TEST_F(AgentTcpTest, ADeeplyNestedFrameClosesOnlyThatConnection) {
  Listen();
  RawClient c(hub_.port());
  std::string text = "{\"type\":\"hello\",\"seq\":1,\"x\":";
  text += std::string(200000, '[') + std::string(200000, ']') + "}";
  std::string frame(4, '\0');
  frame[1] = static_cast<char>((text.size() >> 16) & 0xff);
  frame[2] = static_cast<char>((text.size() >> 8) & 0xff);
  frame[3] = static_cast<char>(text.size() & 0xff);
  ASSERT_TRUE(c.SendBytes(frame + text));
  EXPECT_TRUE(c.Closed(2000));
  ASSERT_TRUE(events_.WaitFor([&] { return hub_log_.Count("deeper than 64 levels") == 1; }))
      << hub_log_.text();
  AgentThread agent(Agent());
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == 1; }));
}

// A 360-task job array starts its agents together, often many to a node (one address): 360
// connections opened and authenticated at the same moment all finish their handshake within
// the handshake timeout (default) and are registered.
TEST_F(AgentTcpTest, ThreeHundredSixtyAgentsConnectingAtOnceAllRegister) {
  constexpr int kAgents = 360;
  HubOptions o;
  o.log = [this](std::string_view line) {
    std::string text(line);
    text += '\n';
    hub_log_.sputn(text.data(), static_cast<std::streamsize>(text.size()));
  };
  ASSERT_TRUE(hub_.Listen("127.0.0.1", 0, "tcp-token", o).ok());
  std::vector<std::unique_ptr<RawClient>> clients(kAgents);
  std::vector<std::string> nonces(kAgents);
  for (std::string& n : nonces) n = *net::NewNonce();
  std::vector<int> welcomed(kAgents, 0);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kAgents; ++i) {
    threads.emplace_back([&, i] {
      const size_t at = static_cast<size_t>(i);
      ++ready;
      while (!go.load()) std::this_thread::yield();
      clients[at] = std::make_unique<RawClient>(hub_.port());
      if (!clients[at]->connected()) return;
      auto welcome = Handshake(*clients[at], "tcp-token", nonces[at], nullptr);
      welcomed[at] = welcome && welcome->type == MessageType::kWelcome;
    });
  }
  while (ready.load() < kAgents) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  go = true;
  for (std::thread& t : threads) t.join();
  const double handshakes_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d handshakes at once took %.0f ms\n", kAgents, handshakes_ms);
  RecordProperty("handshakes_ms", static_cast<int>(handshakes_ms));
  EXPECT_EQ(std::count(welcomed.begin(), welcomed.end(), 1), kAgents) << hub_log_.text();
  EXPECT_EQ(hub_log_.Count("closing the oldest"), 0u) << hub_log_.text();
  EXPECT_LT(handshakes_ms, o.handshake_timeout_ms);
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Joined().size() == kAgents; }))
      << events_.Joined().size() << " joined\n"
      << hub_log_.text();
  EXPECT_EQ(hub_.agents(), kAgents);
}

// A relay on the path between a real agent and the coordinator, without the token: it passes
// the handshake along and tries to slip frames of its own in.
class RelayTest : public AgentTcpTest {
 protected:
  static std::string Framed(const json& body) {
    std::string out;
    EXPECT_TRUE(net::AppendFrame(body, net::kDefaultMaxFrameBytes, &out).ok());
    return out;
  }

  // Starts the hub and an agent whose connection goes through `relay_`, opens the relay's own
  // connection to the hub (`hub_side_`), and reads the agent's hello (`hello_`).
  void StartRelay() {
    Listen();
    agent_ = std::make_unique<AgentThread>(Agent("tcp-token", relay_.port()));
    agent_side_ = relay_.Accept();
    ASSERT_TRUE(agent_side_);
    hub_side_ = std::make_unique<RawClient>(hub_.port());
    auto hello = agent_side_->Read();
    ASSERT_TRUE(hello && hello->type == MessageType::kHello);
    hello_ = hello->body;
  }

  testing::RawListener relay_;
  std::unique_ptr<AgentThread> agent_;
  std::unique_ptr<RawClient> agent_side_, hub_side_;
  json hello_;
};

// A made-up "duplicate" welcome during the handshake, then the real welcome and an assign in
// one write: the assign is read under the session's key, has no MAC, and never runs.
TEST_F(RelayTest, AnAssignSlippedInAfterTheWelcomeDoesNotRun) {
  ASSERT_NO_FATAL_FAILURE(StartRelay());
  RawClient* a = agent_side_.get();
  RawClient& h = *hub_side_;
  AgentThread& agent = *agent_;
  ASSERT_TRUE(h.SendBytes(Framed(hello_)));
  auto challenge = h.Read();
  ASSERT_TRUE(challenge && challenge->type == MessageType::kChallenge);
  ASSERT_TRUE(
      a->SendBytes(Framed(challenge->body) + Framed(json{{"type", "welcome"}, {"seq", 1}})));
  auto auth = a->Read();
  ASSERT_TRUE(auth && auth->type == MessageType::kAuth);
  ASSERT_TRUE(h.SendBytes(Framed(auth->body)));
  auto welcome = h.Read();
  ASSERT_TRUE(welcome && welcome->type == MessageType::kWelcome);
  const auto marker =
      std::filesystem::temp_directory_path() / ("sweep-relayed-" + std::to_string(::getpid()));
  std::filesystem::remove(marker);
  json assign = net::AssignToJson(testing::TouchingTask(9, marker));
  assign["seq"] = 3;
  ASSERT_TRUE(a->SendBytes(Framed(welcome->body) + Framed(assign)));
  ASSERT_TRUE(events_.WaitFor([&] {
    return agent.log.Count("a frame without its MAC after the handshake") == 1;
  })) << agent.log.text();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(std::filesystem::exists(marker)) << agent.log.text();
}

// The same towards the coordinator: a made-up auth, then the real one and a forged draining.
TEST_F(RelayTest, FramesSlippedInAfterTheAuthAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartRelay());
  RawClient* a = agent_side_.get();
  RawClient& h = *hub_side_;
  ASSERT_TRUE(h.SendBytes(Framed(hello_) + Framed(json{{"type", "auth"}, {"seq", 1}})));
  auto challenge = h.Read();
  ASSERT_TRUE(challenge);
  ASSERT_TRUE(a->SendBytes(Framed(challenge->body)));
  auto auth = a->Read();
  ASSERT_TRUE(auth);
  ASSERT_TRUE(h.SendBytes(Framed(auth->body) + Framed(json{{"type", "draining"}, {"seq", 3}})));
  ASSERT_TRUE(events_.WaitFor([&] { return events_.Lost().size() == 1; })) << hub_log_.text();
  EXPECT_NE(events_.Lost()[0].second->detail.find("a frame without its MAC"), std::string::npos)
      << events_.Lost()[0].second->detail;
  EXPECT_EQ(hub_log_.Count("is stopping"), 0u) << hub_log_.text();
}

// What the hello says is covered by the agent's proof: slots added on the path fail it.
TEST_F(RelayTest, AHelloChangedOnThePathFailsTheProof) {
  ASSERT_NO_FATAL_FAILURE(StartRelay());
  RawClient* a = agent_side_.get();
  RawClient& h = *hub_side_;
  json changed = hello_;
  changed["slots"].push_back(changed["slots"][0]);
  changed["slots"].back()["device"] = 7;
  ASSERT_TRUE(h.SendBytes(Framed(changed)));
  auto challenge = h.Read();
  ASSERT_TRUE(challenge && challenge->type == MessageType::kChallenge);
  ASSERT_TRUE(a->SendBytes(Framed(challenge->body)));
  auto auth = a->Read();
  ASSERT_TRUE(auth);
  ASSERT_TRUE(h.SendBytes(Framed(auth->body)));
  auto refused = h.Read();
  ASSERT_TRUE(refused && refused->type == MessageType::kBye);
  EXPECT_NE(refused->body.value("reason", "").find("authentication failed"), std::string::npos)
      << refused->body.dump();
  EXPECT_TRUE(events_.Joined().empty());
}

}  // namespace
}  // namespace sweep::executor
