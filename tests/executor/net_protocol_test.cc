// The agent protocol's frames and messages: the decoder against split reads, oversized and
// garbage input; every message's validation.
#include "executor/net_protocol.h"
#include "executor/net_auth.h"

#include <gtest/gtest.h>

namespace sweep::executor::net {
namespace {

using nlohmann::json;

std::string Framed(const json& j, size_t max = kDefaultMaxFrameBytes) {
  std::string out;
  EXPECT_TRUE(AppendFrame(j, max, &out).ok());
  return out;
}

std::string RawFrame(const std::string& text) {
  const auto n = static_cast<uint32_t>(text.size());
  std::string out = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
  return out + text;
}

Hello GoodHello() {
  Hello h;
  h.name = "gpu-box";
  h.host = "gpu-box.example";
  h.pid = 4242;
  for (int i = 0; i < 2; ++i) {
    Slot s;
    s.gpu = true;
    s.device = i;
    s.name = "gpu" + std::to_string(i);
    s.model = "H100";
    s.memory_bytes = int64_t{80} << 30;
    h.slots.push_back(s);
  }
  h.link_group = {0, 0};
  h.nonce = std::string(64, 'a');
  return h;
}

// ---- frames ----

TEST(FrameDecoderTest, DecodesFramesFedOneByteAtATime) {
  std::string bytes = Framed(HeartbeatToJson()) + Framed(ByeToJson("done"));
  FrameDecoder d;
  std::vector<Frame> frames;
  for (char c : bytes) ASSERT_TRUE(d.Feed(&c, 1, &frames).ok());
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].type, MessageType::kHeartbeat);
  EXPECT_EQ(frames[1].type, MessageType::kBye);
  EXPECT_EQ(frames[1].body["reason"], "done");
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameDecoderTest, DecodesManyFramesInOneRead) {
  std::string bytes;
  for (int i = 0; i < 100; ++i) bytes += Framed(TrialCommandToJson(MessageType::kStop, i));
  FrameDecoder d;
  std::vector<Frame> frames;
  ASSERT_TRUE(d.Feed(bytes.data(), bytes.size() - 3, &frames).ok());
  EXPECT_EQ(frames.size(), 99u);
  ASSERT_TRUE(d.Feed(bytes.data() + bytes.size() - 3, 3, &frames).ok());
  ASSERT_EQ(frames.size(), 100u);
  EXPECT_EQ(frames[99].body["trial"], 99);
}

TEST(FrameDecoderTest, RefusesAnOversizedLengthBeforeReadingIt) {
  FrameDecoder d(1024);
  std::vector<Frame> frames;
  const char header[] = {0, 0, 4, 1};  // 1025 bytes announced
  Status st = d.Feed(header, 4, &frames);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("1025 bytes exceeds the limit of 1024"), std::string::npos)
      << st.message();
  // The error is final.
  std::string ok = Framed(HeartbeatToJson());
  EXPECT_FALSE(d.Feed(ok.data(), ok.size(), &frames).ok());
  EXPECT_TRUE(frames.empty());
}

TEST(FrameDecoderTest, AppendFrameRefusesAMessageOverTheLimit) {
  std::string out;
  Status st = AppendFrame(ByeToJson(std::string(2000, 'x')), 1024, &out);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(out.empty());
}

TEST(FrameDecoderTest, RefusesGarbage) {
  struct Case {
    std::string bytes;
    std::string message;
  };
  std::vector<Case> cases = {
      {RawFrame("{not json"), "not valid JSON"},
      {RawFrame("[1,2]"), "not a JSON object"},
      {RawFrame("{\"seq\":1}"), "no string 'type'"},
      {RawFrame("{\"type\":7}"), "no string 'type'"},
      {RawFrame("{\"type\":\"launch\"}"), "unknown message type 'launch'"},
      {std::string(4, '\0'), "empty frame"},
      {RawFrame("{\"type\":\"heartbeat\",\"x\":" + std::string(64, '[') + std::string(64, ']') +
                "}"),
       "nests arrays or objects deeper than 64 levels"},
      {std::string("\xff\xff\xff\xff", 4), "exceeds the limit"},
  };
  for (const auto& c : cases) {
    FrameDecoder d;
    std::vector<Frame> frames;
    std::string bytes = Framed(HeartbeatToJson()) + c.bytes;
    Status st = d.Feed(bytes.data(), bytes.size(), &frames);
    ASSERT_FALSE(st.ok()) << c.message;
    EXPECT_NE(st.message().find(c.message), std::string::npos) << st.message();
    EXPECT_EQ(frames.size(), 1u) << "the good frame before the garbage is still decoded";
  }
}

// After the handshake: frames carry a MAC of their direction under the session key; until
// then the decoder yields one frame at a time, so that what follows is read under it.
TEST(FrameDecoderTest, AuthenticatedFramesAfterThePause) {
  const std::string key = SessionKey("tok", "na", "nh");
  EXPECT_NE(key, AgentProof("tok", "na", "nh"));
  EXPECT_NE(key, CoordinatorProof("tok", "na", "nh"));
  const FrameMac from_agent{key, kAgentFrameLabel}, from_hub{key, kCoordinatorFrameLabel};
  std::string bytes = Framed(ToJson(Auth{std::string(64, 'a')}));
  ASSERT_TRUE(AppendFrame(HeartbeatToJson(), kDefaultMaxFrameBytes, &bytes, &from_agent).ok());
  FrameDecoder d;
  d.StepUntilAuthenticated();
  std::vector<Frame> frames;
  ASSERT_TRUE(d.Feed(bytes.data(), bytes.size(), &frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_TRUE(d.paused());
  d.Authenticate(from_agent);
  ASSERT_TRUE(d.Feed(nullptr, 0, &frames).ok());
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1].type, MessageType::kHeartbeat);
  EXPECT_TRUE(frames[1].mac_verified);
  // A frame with no MAC comes out unauthenticated (the session drops or refuses it) ...
  std::string plain = Framed(HeartbeatToJson());
  ASSERT_TRUE(d.Feed(plain.data(), plain.size(), &frames).ok());
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_FALSE(frames[2].mac_verified);
  // ... and one with the other direction's MAC (reflected) is malformed.
  std::string reflected;
  ASSERT_TRUE(AppendFrame(HeartbeatToJson(), kDefaultMaxFrameBytes, &reflected, &from_hub).ok());
  Status st = d.Feed(reflected.data(), reflected.size(), &frames);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fails its authentication"), std::string::npos) << st.message();
}

TEST(FrameDecoderTest, BracketsInStringsAreNotNesting) {
  FrameDecoder d;
  std::vector<Frame> frames;
  std::string bytes =
      RawFrame("{\"type\":\"bye\",\"seq\":1,\"reason\":\"" + std::string(100, '[') +
               "\\\"{{\",\"x\":" + std::string(63, '[') + std::string(63, ']') + "}");
  ASSERT_TRUE(d.Feed(bytes.data(), bytes.size(), &frames).ok());
  EXPECT_EQ(frames.size(), 1u);
  EXPECT_EQ(Printable("a\nb\x1b[31mc\td"), "a\\x0Ab\\x1B[31mc\\x09d");
  // C1 controls, line separators and bidirectional overrides too; other UTF-8 stays.
  EXPECT_EQ(Printable("x\u0085y\u009B1m\u2028z\u202Eq\u2066w caf\u00e9 \u20ac"),
            "x\\u0085y\\u009B1m\\u2028z\\u202Eq\\u2066w caf\u00e9 \u20ac");
}

// ---- messages ----

TEST(MessageTest, HelloRoundTrips) {
  json j = ToJson(GoodHello());
  auto h = HelloFromJson(j);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->name, "gpu-box");
  ASSERT_EQ(h->slots.size(), 2u);
  EXPECT_TRUE(h->slots[1].gpu);
  EXPECT_EQ(h->slots[1].device, 1);
  EXPECT_EQ(h->slots[1].model, "H100");
  EXPECT_EQ(h->slots[1].memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(h->link_group, (std::vector<int>{0, 0}));
  EXPECT_TRUE(h->folder.empty());  // optional: an agent that does not say
  Hello with = GoodHello();
  with.folder = "/home/u/runs";
  h = HelloFromJson(ToJson(with));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->folder, "/home/u/runs");
  for (const char* bad : {"runs", "", "/a\nb"}) {
    j = ToJson(with);
    j["folder"] = bad;
    EXPECT_FALSE(HelloFromJson(j).ok()) << bad;
  }
}

TEST(MessageTest, CpuHelloHasNoLinkGroups) {
  Hello h = GoodHello();
  for (auto& s : h.slots) {
    s.gpu = false;
    s.model.clear();
    s.memory_bytes = 0;
  }
  auto parsed = HelloFromJson(ToJson(h));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->link_group.empty());
}

TEST(MessageTest, VersionMismatchNamesBothVersions) {
  json j = ToJson(GoodHello());
  j["version"] = 7;
  j.erase("slots");  // a newer agent may send other fields: the version is checked first
  auto h = HelloFromJson(j);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("agent speaks version 7"), std::string::npos);
  EXPECT_NE(h.status().message().find("coordinator version " + std::to_string(kProtocolVersion)),
            std::string::npos)
      << h.status().message();
}

TEST(MessageTest, HelloFieldsAreChecked) {
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](json& j) { j["pid"] = 0; }, "pid must be an integer in [1,"},
      {[](json& j) { j["pid"] = "12"; }, "pid must be an integer"},
      {[](json& j) { j["name"] = ""; }, "name must not be empty"},
      {[](json& j) { j["name"] = std::string(300, 'n'); }, "name is longer than 256"},
      {[](json& j) { j.erase("host"); }, "host is missing"},
      // Names reach logs and tables: no forged lines, no terminal escapes.
      {[](json& j) { j["name"] = "evil\nsweep: agent 'root' joined"; },
       "name must not hold control characters"},
      {[](json& j) { j["host"] = "h\x1b[2J"; }, "host must not hold control characters"},
      {[](json& j) { j["slots"][0]["name"] = "gpu\r0"; }, "name must not hold control characters"},
      {[](json& j) { j["nonce"] = "abc"; }, "nonce must be 64 lowercase hex digits"},
      {[](json& j) { j["slots"] = json::array(); }, "slots must be a non-empty array"},
      {[](json& j) { j["slots"][1]["device"] = -1; }, "slots[1]: device must be an integer"},
      {[](json& j) { j["slots"][1]["device"] = 0; }, "device 0 is listed twice"},
      {[](json& j) { j["slots"][1]["gpu"] = false; }, "mixes GPU and CPU slots"},
      {[](json& j) { j["slots"][0]["memory_bytes"] = -5; }, "memory_bytes must be an integer"},
      {[](json& j) { j["slots"][0]["gpu"] = 1; }, "gpu must be true or false"},
      {[](json& j) { j["slots"][0] = 3; }, "slots[0]: must be a JSON object"},
      {[](json& j) { j["version"] = 1.5; }, "version must be an integer"},
  };
  for (const auto& c : cases) {
    json j = ToJson(GoodHello());
    c.edit(j);
    auto h = HelloFromJson(j);
    ASSERT_FALSE(h.ok()) << c.message;
    EXPECT_NE(h.status().message().find(c.message), std::string::npos) << h.status().message();
  }
}

TEST(MessageTest, WelcomeNeedsATimeoutAboveTheInterval) {
  Welcome w;
  w.agent_id = 3;
  w.proof = std::string(64, '0');
  ASSERT_TRUE(WelcomeFromJson(ToJson(w)).ok());
  w.heartbeat_timeout_ms = w.heartbeat_ms;
  auto bad = WelcomeFromJson(ToJson(w));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("heartbeat_timeout_ms"), std::string::npos);
  w.heartbeat_timeout_ms = 5000;
  w.agent_id = 0;
  EXPECT_FALSE(WelcomeFromJson(ToJson(w)).ok());
}

TEST(MessageTest, AssignCarriesTheTrialTask) {
  TrialTask t;
  t.number = 12;
  t.kind = TrialKind::kFunction;
  t.params = {{"x1", 1.0}, {"x2", 2.0}};
  t.settings = {{"name", "branin"}};
  t.gpus = {1, 3};
  t.decision_points = {1, 3, 9};
  t.stored_step = 40;
  t.stored_epoch = 4;
  t.stored_metric = true;
  auto parsed = AssignFromJson(AssignToJson(t));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_FALSE(parsed->replay_checkpoint_report);  // absent: a sender from before it
  t.replay_checkpoint_report = true;
  parsed = AssignFromJson(AssignToJson(t));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->number, 12);
  EXPECT_EQ(parsed->gpus, (std::vector<int>{1, 3}));
  EXPECT_EQ(parsed->decision_points, (std::vector<double>{1, 3, 9}));
  EXPECT_EQ(parsed->stored_step, 40);
  EXPECT_EQ(parsed->stored_epoch, 4.0);
  EXPECT_TRUE(parsed->stored_metric);
  EXPECT_TRUE(parsed->replay_checkpoint_report);
  EXPECT_EQ(parsed->heartbeat_timeout_s, 0.0);  // absent: the agent's own
  t.heartbeat_timeout_s = 2.5;
  parsed = AssignFromJson(AssignToJson(t));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->heartbeat_timeout_s, 2.5);
  for (double bad : {-1.0, 1e300}) {
    json j = AssignToJson(t);
    j["task"]["heartbeat_timeout_s"] = bad;
    EXPECT_FALSE(AssignFromJson(j).ok()) << bad;
  }
  t.heartbeat_timeout_s = 0;

  t.threads = 0;
  EXPECT_FALSE(AssignFromJson(AssignToJson(t)).ok());
  json j = AssignToJson(t);
  j["task"].erase("kind");
  auto missing = AssignFromJson(j);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("assign"), std::string::npos);
  // A kind this worker does not know (a newer coordinator's) is named, not run as another.
  j = AssignToJson(t);
  j["task"]["threads"] = 1;
  j["task"]["kind"] = "notebook";
  auto unknown = AssignFromJson(j);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown trial kind 'notebook'"), std::string::npos)
      << unknown.status().message();
}

TEST(MessageTest, ReportBatchRoundTrips) {
  ReportBatchWriter w;
  w.Add(4, 1, 0.5, {{"loss", 0.7}});
  w.Add(4, 2, 1.0, {{"loss", 0.6}, {"val_acc", 0.8}});
  w.Add(5, 1, 1.0, {{"value", nullptr}});  // a NaN, as JSON carries it
  json message = w.Take();
  EXPECT_TRUE(w.empty());
  std::vector<WorkerEvent> events;
  ASSERT_TRUE(ReportsFromJson(message, &events).ok());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].trial, 4);
  EXPECT_EQ(events[1].step, 2);
  EXPECT_DOUBLE_EQ(events[1].epoch, 1.0);
  EXPECT_DOUBLE_EQ(events[1].metrics["val_acc"].get<double>(), 0.8);
  EXPECT_EQ(events[2].type, WorkerEvent::Type::kReport);
}

TEST(MessageTest, ABadReportRefusesTheWholeBatch) {
  struct Case {
    json report;
    std::string message;
  };
  std::vector<Case> cases = {
      {{{"trial", -1}, {"step", 1}, {"epoch", 1}, {"metrics", json::object()}}, "trial"},
      {{{"trial", 1}, {"step", 1}, {"epoch", -1}, {"metrics", json::object()}}, "epoch"},
      {{{"trial", 1}, {"step", 1}, {"epoch", "1"}, {"metrics", json::object()}}, "epoch"},
      {{{"trial", 1}, {"step", 1}, {"epoch", 1}, {"metrics", 3}}, "metrics must be an object"},
      {{{"trial", 1}, {"step", 1}, {"epoch", 1}, {"metrics", {{"loss", "low"}}}},
       "'loss' must be a number"},
      {{{"trial", 1}, {"epoch", 1}, {"metrics", json::object()}}, "step is missing"},
  };
  for (const auto& c : cases) {
    json message = {
        {"type", "reports"},
        {"reports",
         {{{"trial", 1}, {"step", 1}, {"epoch", 1}, {"metrics", {{"loss", 1}}}}, c.report}}};
    std::vector<WorkerEvent> events;
    Status st = ReportsFromJson(message, &events);
    ASSERT_FALSE(st.ok()) << c.message;
    EXPECT_NE(st.message().find(c.message), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("reports[1]"), std::string::npos) << st.message();
    EXPECT_TRUE(events.empty());
  }
}

TEST(MessageTest, DoneRoundTripsAndChecksTheOutcome) {
  WorkerEvent done;
  done.type = WorkerEvent::Type::kDone;
  done.trial = 9;
  done.outcome = TrialOutcome::Kind::kStopped;
  done.metrics = {{"test_acc", 0.9}};
  json j = DoneToJson(done);
  auto parsed = DoneFromJson(j);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->outcome, TrialOutcome::Kind::kStopped);
  EXPECT_EQ(parsed->metrics["test_acc"], 0.9);
  EXPECT_FALSE(parsed->worker_lost);
  // info is optional (an older agent sends none), and an object when sent.
  EXPECT_FALSE(j.contains("info"));
  EXPECT_TRUE(parsed->info.empty());
  WorkerEvent with_info = done;
  with_info.info = {{"classes", {"cat", "dog"}}, {"skipped_files", 1}};
  json ji = DoneToJson(with_info);
  auto info_back = DoneFromJson(ji);
  ASSERT_TRUE(info_back.ok()) << info_back.status().message();
  EXPECT_EQ(info_back->info, with_info.info);
  ji["info"] = "cat, dog";
  EXPECT_FALSE(DoneFromJson(ji).ok());

  json bad = DoneToJson(done);
  bad["outcome"] = "exploded";
  auto refused = DoneFromJson(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'exploded'"), std::string::npos);
  json no_flag = DoneToJson(done);
  no_flag.erase("worker_lost");
  EXPECT_FALSE(DoneFromJson(no_flag).ok());
  // never_started is optional (absent: false), and travels when set.
  EXPECT_FALSE(j.contains("never_started"));
  EXPECT_FALSE(parsed->never_started);
  done.never_started = true;
  json never = DoneToJson(done);
  auto never_back = DoneFromJson(never);
  ASSERT_TRUE(never_back.ok()) << never_back.status().message();
  EXPECT_TRUE(never_back->never_started);
  never["never_started"] = "yes";
  EXPECT_FALSE(DoneFromJson(never).ok());
  done.never_started = false;

  // Every outcome travels, the machine's trouble (kInterrupted) with its error.
  for (TrialOutcome::Kind kind : {TrialOutcome::Kind::kCompleted, TrialOutcome::Kind::kStopped,
                                  TrialOutcome::Kind::kFailed, TrialOutcome::Kind::kInterrupted}) {
    done.outcome = kind;
    done.error = "ckpt: write failed: No space left on device";
    json each = DoneToJson(done);
    auto back = DoneFromJson(each);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->outcome, kind) << ToString(kind);
    EXPECT_EQ(back->error, done.error);
  }
  // An error quoting a program's output at length is cut, not a frame the coordinator refuses.
  done.error = std::string(100'000, 'e');
  json long_error = DoneToJson(done);
  auto cut = DoneFromJson(long_error);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  EXPECT_LT(cut->error.size(), 65'536u);
  EXPECT_NE(cut->error.find("bytes more)"), std::string::npos);
}

TEST(MessageTest, SeqMustBePositive) {
  EXPECT_TRUE(SeqOf(json{{"seq", 1}}).ok());
  EXPECT_FALSE(SeqOf(json{{"seq", 0}}).ok());
  EXPECT_FALSE(SeqOf(json{{"seq", "1"}}).ok());
  EXPECT_FALSE(SeqOf(json::object()).ok());
  EXPECT_FALSE(TrialCommandFromJson(json{{"trial", -3}}).ok());
  EXPECT_EQ(*TrialCommandFromJson(TrialCommandToJson(MessageType::kContinue, 8)), 8);
}

}  // namespace
}  // namespace sweep::executor::net
