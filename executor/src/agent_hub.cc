// AgentHub (executor/agent_hub.h): the hub's thread started and stopped, and where the
// coordinator's thread meets it: commands in (Enqueue), events out (Publish, Drain).
#include "executor/agent_hub.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <chrono>
#include <future>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent_hub_impl.h"

namespace sweep::executor {

namespace asio = boost::asio;

std::string_view ToString(AgentLost::Reason reason) {
  switch (reason) {
    case AgentLost::Reason::kDisconnected:
      return "disconnected";
    case AgentLost::Reason::kMissedHeartbeats:
      return "missed heartbeats";
    case AgentLost::Reason::kMalformedFrame:
      return "malformed frame";
    case AgentLost::Reason::kBye:
      return "bye";
    case AgentLost::Reason::kShutdown:
      return "shutdown";
  }
  return "?";
}

AgentHub::Impl::Impl(std::string token, HubOptions options, int wake_fd)
    : token_(std::move(token)),
      options_(std::move(options)),
      wake_fd_(wake_fd),
      work_(asio::make_work_guard(io_)),
      tick_(io_) {
  if (!options_.log) {
    options_.log = [](std::string_view line) {
      std::string text(line);
      text += '\n';
      std::cerr << text << std::flush;
    };
  }
}

Result<int> AgentHub::Impl::Listen(const std::string& host, int port) {
  transport_ = options_.transport ? options_.transport(io_) : net::MakeTcpTransport(io_);
  SWEEP_ASSIGN_OR_RETURN(int bound,
                         transport_->Listen(host, port, [this](std::shared_ptr<net::Connection> c) {
                           Accept(std::move(c));
                         }));
  address_ = host + ":" + std::to_string(bound);
  ScheduleTick();
  thread_ = std::thread([this] { io_.run(); });
  return bound;
}

void AgentHub::Impl::Drain(std::vector<HubEvent>* events) {
  std::lock_guard lock(mu_);
  if (events->empty()) {
    events->swap(events_);
  } else {
    std::move(events_.begin(), events_.end(), std::back_inserter(*events));
    events_.clear();
  }
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof count);
}

Status AgentHub::Impl::Enqueue(Command command) {
  std::lock_guard lock(mu_);
  if (!live_.contains(command.agent_id)) {
    return Status::NotFound("agent " + std::to_string(command.agent_id) + " is not connected");
  }
  commands_.push_back(std::move(command));
  if (!command_posted_) {
    command_posted_ = true;
    asio::post(io_, [this] { RunCommands(); });
  }
  return Status::Ok();
}

int AgentHub::Impl::agents() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(live_.size());
}

void AgentHub::Impl::Shutdown(bool sweep_over) {
  if (!thread_.joinable()) return;
  std::promise<void> done;
  auto finished = done.get_future();
  asio::post(io_, [this, &done, sweep_over] {
    sweep_over_ = sweep_over;
    CloseAll();
    done.set_value();
  });
  finished.wait();
  work_.reset();
  // The graceful closes flush within about a second; never wait much longer than that.
  std::thread stopper([this] {
    std::unique_lock lock(stop_mu_);
    if (!stop_cv_.wait_for(lock, std::chrono::seconds(3), [this] { return stopped_; })) {
      io_.stop();
    }
  });
  thread_.join();
  {
    std::lock_guard lock(stop_mu_);
    stopped_ = true;
  }
  stop_cv_.notify_all();
  stopper.join();
}

// ---- io thread ----

// Peers' words (names, reasons, an unknown message type) are part of some lines: their
// control characters are escaped, so that a peer cannot forge a line of ours.
void AgentHub::Impl::Log(const std::string& line) { options_.log(net::Printable(line)); }

void AgentHub::Impl::CloseAll() {
  shutting_down_ = true;
  tick_.cancel();
  if (transport_) transport_->StopListening();
  std::vector<Peer*> all;
  for (auto& [raw, peer] : peers_) all.push_back(raw);
  for (Peer* p : all) Lose(p, AgentLost::Reason::kShutdown, "the coordinator is shutting down");
  // Starts still queued find no agent: their trials get kDone too.
  RunCommands();
  Publish();
}

// Hands the events gathered by this handler to the coordinator, waking it on the first.
void AgentHub::Impl::Publish() {
  if (pending_.empty()) return;
  std::lock_guard lock(mu_);
  const bool was_empty = events_.empty();
  if (was_empty) {
    events_.swap(pending_);
  } else {
    std::move(pending_.begin(), pending_.end(), std::back_inserter(events_));
    pending_.clear();
  }
  if (was_empty) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }
}

// ---- AgentHub ----

AgentHub::AgentHub() { wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

AgentHub::~AgentHub() {
  Shutdown();
  impl_.reset();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status AgentHub::Listen(const std::string& host, int port, std::string token, HubOptions options) {
  if (impl_) return Status::Internal("AgentHub::Listen called twice");
  if (wake_fd_ < 0) return Status::IoError("cannot create the hub's eventfd");
  if (options.heartbeat_ms <= 0 || options.heartbeat_timeout_ms <= options.heartbeat_ms) {
    return Status::InvalidArgument(
        "agent heartbeats: the timeout must be greater than the interval (both > 0)");
  }
  if (options.handshake_timeout_ms <= 0 || options.max_handshakes < 1 ||
      options.max_handshakes_per_address < 1) {
    return Status::InvalidArgument(
        "agent handshakes: the timeout and the bounds on handshakes at once must be > 0");
  }
  auto impl = std::make_unique<Impl>(std::move(token), std::move(options), wake_fd_);
  auto bound = impl->Listen(host, port);
  if (!bound.ok()) return bound.status();
  port_ = *bound;
  impl_ = std::move(impl);
  return Status::Ok();
}

void AgentHub::Drain(std::vector<HubEvent>* events) {
  if (impl_) impl_->Drain(events);
}

Status AgentHub::Start(int64_t agent_id, const TrialTask& task) {
  if (!impl_) return Status::NotFound("the agent hub is not listening");
  return impl_->Enqueue(
      Impl::Command{Impl::Command::Type::kStart, agent_id, task.number, net::AssignToJson(task)});
}

Status AgentHub::Stop(int64_t agent_id, int64_t trial) {
  if (!impl_) return Status::NotFound("the agent hub is not listening");
  return impl_->Enqueue(Impl::Command{Impl::Command::Type::kStop, agent_id, trial, {}});
}

Status AgentHub::Continue(int64_t agent_id, int64_t trial) {
  if (!impl_) return Status::NotFound("the agent hub is not listening");
  return impl_->Enqueue(Impl::Command{Impl::Command::Type::kContinue, agent_id, trial, {}});
}

int AgentHub::agents() const { return impl_ ? impl_->agents() : 0; }

void AgentHub::Shutdown() {
  if (impl_) impl_->Shutdown(/*sweep_over=*/false);
}

void AgentHub::ShutdownSweepOver() {
  if (impl_) impl_->Shutdown(/*sweep_over=*/true);
}

}  // namespace sweep::executor
