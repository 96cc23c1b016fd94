// Helpers for the hub and agent tests: an event collector around AgentHub, an agent on its own
// thread with a log the test can read while it runs, and a blocking TCP client that speaks raw
// frames (to play a misbehaving agent or coordinator).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <ostream>
#include <streambuf>
#include <string>
#include <thread>
#include <vector>

#include "executor/agent.h"
#include "executor/agent_hub.h"
#include "executor/net_protocol.h"

namespace sweep::executor::testing {

using nlohmann::json;

// A command trial that touches `marker` if it ever runs (for tests that it must not).
inline TrialTask TouchingTask(int64_t number, const std::filesystem::path& marker) {
  TrialTask task;
  task.number = number;
  task.kind = TrialKind::kCommand;
  task.params = json::object();
  task.settings = {{"command", {"/bin/sh", "-c", "touch " + marker.string()}}};
  return task;
}

inline TrialTask FunctionTask(int64_t number, json settings = json::object()) {
  TrialTask t;
  t.number = number;
  t.kind = TrialKind::kFunction;
  t.params = {{"x1", 1.0}, {"x2", 2.0}};
  settings["name"] = "branin";
  t.settings = settings;
  return t;
}

// Collects a hub's events as they come.
class HubEvents {
 public:
  explicit HubEvents(AgentHub& hub) : hub_(hub) {}

  // Drains until pred() holds or timeout_ms pass; returns pred().
  bool WaitFor(const std::function<bool()>& pred, int timeout_ms = 10'000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return false;
      pollfd p{hub_.wake_fd(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      std::vector<HubEvent> batch;
      hub_.Drain(&batch);
      for (auto& e : batch) all.push_back(std::move(e));
    }
    return true;
  }

  std::vector<const AgentJoined*> Joined() const {
    std::vector<const AgentJoined*> out;
    for (const auto& e : all) {
      if (auto* j = std::get_if<AgentJoined>(&e.event)) out.push_back(j);
    }
    return out;
  }
  std::vector<std::pair<int64_t, const AgentLost*>> Lost() const {
    std::vector<std::pair<int64_t, const AgentLost*>> out;
    for (const auto& e : all) {
      if (auto* l = std::get_if<AgentLost>(&e.event)) out.emplace_back(e.agent_id, l);
    }
    return out;
  }
  // The agent id of the n-th join (0-based), or 0.
  int64_t JoinedId(size_t n) const {
    size_t seen = 0;
    for (const auto& e : all) {
      if (std::holds_alternative<AgentJoined>(e.event) && seen++ == n) return e.agent_id;
    }
    return 0;
  }
  std::vector<WorkerEvent> Worker(int64_t trial, WorkerEvent::Type type) const {
    std::vector<WorkerEvent> out;
    for (const auto& e : all) {
      if (auto* w = std::get_if<WorkerEvent>(&e.event); w && w->trial == trial && w->type == type) {
        out.push_back(*w);
      }
    }
    return out;
  }
  bool Done(int64_t trial) const { return !Worker(trial, WorkerEvent::Type::kDone).empty(); }

  std::vector<HubEvent> all;

 private:
  AgentHub& hub_;
};

// A log that one thread writes and another reads.
class SharedLog : public std::streambuf {
 public:
  std::string text() const {
    std::lock_guard lock(mu_);
    return text_;
  }
  size_t Count(const std::string& needle) const {
    std::string t = text();
    size_t n = 0;
    for (size_t p = t.find(needle); p != std::string::npos; p = t.find(needle, p + 1)) ++n;
    return n;
  }

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      std::lock_guard lock(mu_);
      text_ += static_cast<char>(c);
    }
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard lock(mu_);
    text_.append(s, static_cast<size_t>(n));
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::string text_;
};

// RunAgent on a thread of its own; the destructor stops it.
class AgentThread {
 public:
  explicit AgentThread(AgentOptions options) : options_(std::move(options)), stream_(&log) {
    options_.log = &stream_;
    thread_ = std::thread([this] {
      status_ = RunAgent(options_, stop_);
      finished_ = true;
    });
  }
  ~AgentThread() { Stop(); }
  Status Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  // Whether RunAgent has returned without being stopped (the sweep over, or given up).
  bool Finished() const { return finished_.load(); }
  SharedLog log;

 private:
  AgentOptions options_;
  std::ostream stream_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  Status status_;
  std::thread thread_;
};

// A blocking TCP client on 127.0.0.1 that writes and reads raw frames.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  explicit RawClient(int fd, bool) : fd_(fd), connected_(true) {}
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  bool SendBytes(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool Send(json message) {
    message["seq"] = ++seq_;
    std::string bytes;
    const net::FrameMac* mac = send_mac_.key.empty() ? nullptr : &send_mac_;
    if (!net::AppendFrame(message, net::kDefaultMaxFrameBytes, &bytes, mac).ok()) return false;
    return SendBytes(bytes);
  }
  // From here on frames carry a MAC both ways, under the session's key and each direction's
  // label, as after a welcome.
  void Authenticate(const std::string& session_key, const char* send_label,
                    const char* receive_label) {
    send_mac_ = net::FrameMac(session_key, send_label);
    decoder_.Authenticate(net::FrameMac(session_key, receive_label));
  }
  // The next frame, or nullopt after timeout_ms or when the peer closed.
  std::optional<net::Frame> Read(int timeout_ms = 5000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (pending_.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return std::nullopt;
      if (!decoder_.Feed(buf, static_cast<size_t>(n), &pending_).ok()) return std::nullopt;
    }
    net::Frame f = std::move(pending_.front());
    pending_.erase(pending_.begin());
    return f;
  }
  // Reads until a frame of `type` arrives (skipping heartbeats and others).
  std::optional<net::Frame> ReadType(net::MessageType type, int timeout_ms = 5000) {
    for (;;) {
      auto f = Read(timeout_ms);
      if (!f || f->type == type) return f;
    }
  }
  // True when the peer has closed (reads end of stream within timeout_ms).
  bool Closed(int timeout_ms = 5000) {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return false;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  net::FrameMac send_mac_;
  int64_t seq_ = 0;
  net::FrameDecoder decoder_;
  std::vector<net::Frame> pending_;
};

// A listening socket on 127.0.0.1 (any port), for a fake coordinator.
class RawListener {
 public:
  RawListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 8);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~RawListener() { ::close(fd_); }
  int port() const { return port_; }
  // The next connection, or nullptr after timeout_ms.
  std::unique_ptr<RawClient> Accept(int timeout_ms = 10'000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return nullptr;
    int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return nullptr;
    return std::make_unique<RawClient>(c, true);
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace sweep::executor::testing
