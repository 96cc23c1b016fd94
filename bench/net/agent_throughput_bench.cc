// Reports per second that an AgentHub ingests from 3 agents over loopback TCP.
//
// 1. Network path: 3 sender threads each play an agent (the real handshake, on plain blocking
//    sockets), wait for the trial the hub assigns them, then push report batches as fast as the
//    socket takes them and end with the trial's done. The batches are encoded before the clock
//    starts, so the figure is the hub's side: reads, frame decoding, JSON parsing, validation,
//    and the handoff to the coordinator thread, which drains events in bulk through wake_fd().
// 2. End to end: 3 real agents (RunAgent, in threads) with 2 CPU slots each run function trials
//    in `sweep worker` processes; reports travel worker -> pipe -> agent -> batch -> TCP -> hub.
//    On a small machine the workers and agents share the cores with the hub, so this is the
//    whole system's rate, not the hub's.
// The clock runs from the first Start to the last done; reports/s = reports ingested / that.
//
// Usage: agent_throughput_bench [reports_per_agent=200000] [batch=256] [e2e_steps=20000]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "executor/agent.h"
#include "executor/agent_hub.h"
#include "executor/net_auth.h"
#include "executor/net_protocol.h"

namespace {

namespace ex = sweep::executor;
namespace net = sweep::executor::net;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kAgents = 3;
const char* kToken = "bench-token";

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "agent_throughput_bench: %s\n", why.c_str());
  std::exit(1);
}

// ---- a blocking agent that speaks raw frames ----

class Sender {
 public:
  explicit Sender(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Die("connect");
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Sender() { ::close(fd_); }

  void Write(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) Die("send failed");
      off += static_cast<size_t>(n);
    }
  }
  std::string Frame(json message) {
    message["seq"] = ++seq_;
    std::string out;
    if (!net::AppendFrame(message, net::kDefaultMaxFrameBytes, &out,
                          mac_.key.empty() ? nullptr : &mac_)
             .ok()) {
      Die("frame too big");
    }
    return out;
  }
  // The next frame that is not a heartbeat.
  net::Frame Read() {
    for (;;) {
      while (frames_.empty()) {
        if (decoder_.paused()) {  // in the handshake: one frame at a time
          if (!decoder_.Feed(nullptr, 0, &frames_).ok()) Die("bad frame");
          continue;
        }
        char buf[65536];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) Die("the hub closed the connection");
        if (!decoder_.Feed(buf, static_cast<size_t>(n), &frames_).ok()) Die("bad frame");
      }
      net::Frame f = std::move(frames_.front());
      frames_.erase(frames_.begin());
      if (f.type != net::MessageType::kHeartbeat) return f;
    }
  }
  void Register(const std::string& name) {
    net::Hello hello;
    hello.name = name;
    hello.host = "bench";
    hello.pid = ::getpid();
    ex::Slot slot;
    slot.name = "cpu0";
    hello.slots = {slot};
    hello.nonce = *net::NewNonce();
    decoder_.StepUntilAuthenticated();
    Write(Frame(net::ToJson(hello)));
    net::Frame challenge = Read();
    if (challenge.type != net::MessageType::kChallenge) Die("no challenge");
    const std::string hub_nonce = challenge.body["nonce"].get<std::string>();
    Write(Frame(net::ToJson(
        net::Auth{net::AgentProof(kToken, hello.nonce, hub_nonce, net::HelloTranscript(hello))})));
    if (Read().type != net::MessageType::kWelcome) Die("not welcomed");
    // From here every frame carries the session's MAC, both ways (the hub checks each).
    const std::string key = net::SessionKey(kToken, hello.nonce, hub_nonce);
    mac_ = net::FrameMac{key, net::kAgentFrameLabel};
    decoder_.Authenticate(net::FrameMac{key, net::kCoordinatorFrameLabel});
  }

 private:
  int fd_ = -1;
  int64_t seq_ = 0;
  net::FrameMac mac_;
  net::FrameDecoder decoder_;
  std::vector<net::Frame> frames_;
};

// The coordinator's side: drains the hub until `dones` trials ended; counts what came.
struct Tally {
  int64_t reports = 0;
  int64_t drains = 0;
  int dones = 0;
};

void DrainUntil(ex::AgentHub& hub, int dones, Tally* t) {
  std::vector<ex::HubEvent> events;
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (t->dones < dones) {
    if (Clock::now() > deadline) Die("timed out waiting for the trials");
    pollfd p{hub.wake_fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    events.clear();
    hub.Drain(&events);
    if (events.empty()) continue;
    ++t->drains;
    for (const auto& e : events) {
      if (auto* w = std::get_if<ex::WorkerEvent>(&e.event)) {
        if (w->type == ex::WorkerEvent::Type::kReport) {
          ++t->reports;
        } else {
          ++t->dones;
          if (w->outcome != ex::TrialOutcome::Kind::kCompleted) Die("trial failed: " + w->error);
        }
      } else if (auto* l = std::get_if<ex::AgentLost>(&e.event)) {
        Die("agent lost: " + l->detail);
      }
    }
  }
}

std::vector<int64_t> WaitForAgents(ex::AgentHub& hub, int n) {
  std::vector<int64_t> ids;
  std::vector<ex::HubEvent> events;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (static_cast<int>(ids.size()) < n) {
    if (Clock::now() > deadline) Die("agents did not join");
    pollfd p{hub.wake_fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    events.clear();
    hub.Drain(&events);
    for (const auto& e : events) {
      if (std::holds_alternative<ex::AgentJoined>(e.event)) ids.push_back(e.agent_id);
    }
  }
  return ids;
}

void Print(const char* what, int64_t reports, int64_t frames, double seconds, const Tally& t) {
  std::string per_frame = "";
  if (frames > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", %8.0f frames/s", static_cast<double>(frames) / seconds);
    per_frame = buf;
  }
  std::printf("%-13s %9lld reports in %6.3f s: %9.0f reports/s%s, %6.1f events per drain\n", what,
              static_cast<long long>(reports), seconds, static_cast<double>(reports) / seconds,
              per_frame.c_str(),
              t.drains > 0 ? static_cast<double>(t.reports) / static_cast<double>(t.drains) : 0.0);
}

// ---- 1: the network path ----

void NetworkPath(int64_t per_agent, int batch) {
  ex::AgentHub hub;
  ex::HubOptions options;
  options.log = [](std::string_view) {};
  if (auto st = hub.Listen("127.0.0.1", 0, kToken, options); !st.ok()) Die(st.message());

  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> senders;
  std::vector<int64_t> bytes(kAgents, 0);
  for (int a = 0; a < kAgents; ++a) {
    senders.emplace_back([&, a] {
      Sender s(hub.port());
      s.Register("sender" + std::to_string(a));
      net::Frame assign = s.Read();
      if (assign.type != net::MessageType::kAssign) Die("no assign");
      const int64_t trial = assign.body["task"]["number"].get<int64_t>();
      // Encode everything first: the clock measures the hub.
      std::vector<std::string> frames;
      net::ReportBatchWriter w;
      for (int64_t step = 1; step <= per_agent; ++step) {
        w.Add(trial, step, static_cast<double>(step) / 100.0,
              json{{"loss", 1.0 / static_cast<double>(step)}, {"val_acc", 0.5}});
        if (static_cast<int>(w.size()) == batch || step == per_agent) {
          frames.push_back(s.Frame(w.Take()));
        }
      }
      ex::WorkerEvent done;
      done.type = ex::WorkerEvent::Type::kDone;
      done.trial = trial;
      frames.push_back(s.Frame(net::DoneToJson(done)));
      for (const auto& f : frames) bytes[a] += static_cast<int64_t>(f.size());
      ++ready;
      while (!go) std::this_thread::yield();
      for (const auto& f : frames) s.Write(f);
      // Stay connected until the hub has read everything (the main thread ends the hub).
      while (go) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  }
  std::vector<int64_t> ids = WaitForAgents(hub, kAgents);
  for (int a = 0; a < kAgents; ++a) {
    ex::TrialTask task;
    task.number = a;
    task.kind = ex::TrialKind::kFunction;
    task.params = json::object();
    task.settings = json::object();
    if (auto st = hub.Start(ids[a], task); !st.ok()) Die(st.message());
  }
  while (ready < kAgents) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Tally t;
  const auto start = Clock::now();
  go = true;
  DrainUntil(hub, kAgents, &t);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  go = false;
  for (auto& s : senders) s.join();
  if (t.reports != per_agent * kAgents) Die("reports went missing");
  const int64_t frames = kAgents * ((per_agent + batch - 1) / batch + 1);
  int64_t total_bytes = 0;
  for (int64_t b : bytes) total_bytes += b;
  std::printf("network path: 3 agents x %lld reports, %d reports per frame, %.1f MB on the wire\n",
              static_cast<long long>(per_agent), batch, total_bytes / 1e6);
  Print("network path", t.reports, frames, seconds, t);
  hub.Shutdown();
}

// ---- 2: end to end, through worker processes ----

void EndToEnd(int steps) {
  ex::AgentHub hub;
  ex::HubOptions options;
  options.log = [](std::string_view) {};
  if (auto st = hub.Listen("127.0.0.1", 0, kToken, options); !st.ok()) Die(st.message());
  std::atomic<bool> stop{false};
  std::vector<std::thread> agents;
  std::vector<std::ostringstream> logs(kAgents);
  for (int a = 0; a < kAgents; ++a) {
    agents.emplace_back([&, a] {
      ex::AgentOptions o;
      o.host = "127.0.0.1";
      o.port = hub.port();
      o.token = kToken;
      o.name = "agent" + std::to_string(a);
      o.worker_command = {SWEEP_BINARY, "worker"};
      for (int i = 0; i < 2; ++i) {
        ex::Slot s;
        s.index = s.device = i;
        s.name = "cpu" + std::to_string(i);
        o.slots.push_back(s);
      }
      o.log = &logs[a];
      if (auto st = ex::RunAgent(o, stop); !st.ok()) Die(st.message());
    });
  }
  std::vector<int64_t> ids = WaitForAgents(hub, kAgents);
  const int trials = 2 * kAgents;
  Tally t;
  const auto start = Clock::now();
  for (int i = 0; i < trials; ++i) {
    ex::TrialTask task;
    task.number = i;
    task.kind = ex::TrialKind::kFunction;
    task.params = {{"x1", 1.0 + i}, {"x2", 2.0}};
    task.settings = {{"name", "branin"}, {"steps", steps}};
    if (auto st = hub.Start(ids[i % kAgents], task); !st.ok()) Die(st.message());
  }
  DrainUntil(hub, trials, &t);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  for (auto& a : agents) a.join();
  if (t.reports != int64_t{steps} * trials) Die("reports went missing");
  std::printf("end to end:   3 agents x 2 worker processes, %d function trials of %d steps\n",
              trials, steps);
  Print("end to end", t.reports, 0, seconds, t);
  hub.Shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t per_agent = argc > 1 ? std::atoll(argv[1]) : 200'000;
  const int batch = argc > 2 ? std::atoi(argv[2]) : 256;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 20'000;
  if (per_agent < 1 || batch < 1 || steps < 1)
    Die("usage: [reports_per_agent] [batch] [e2e_steps]");
  NetworkPath(per_agent, batch);
  EndToEnd(steps);
  return 0;
}
