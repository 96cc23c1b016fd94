// The agent's session with its coordinator, on the calling thread's io_context: the
// connection, the handshake, heartbeats, report batching, reconnecting with backoff, and the
// stop flag (checked on a short tick, since a flag cannot wake anyone). Trials run on the
// pump's thread (agent_pump.h).
//
// The session's steps, from its point of view:
//   1. connect (on failure: wait with backoff, log the error when it changed, go to 1);
//   2. send hello {version, name, host, pid, slots, nonce Na};
//   3. challenge {Nh} -> send auth {HMAC(token, "sweep agent proof v1\nNa\nNh")};
//   4. welcome -> check its proof HMAC(token, "sweep coordinator proof v1\nNa\nNh"); a bye
//      instead means refused (wrong token, another version): log it, go to 1 after backoff;
//   5. serve; when the connection ends, stop the running trials, wait until they have, go to 1,
//      unless the coordinator's bye said the sweep is over (then end, or go to 1 with `stay`) or
//      the agent has been without a coordinator for retry_for_ms (then end, Unavailable).
#include "agent_session.h"

#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "agent_pump.h"
#include "executor/net_auth.h"

namespace sweep::executor {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using net::MessageType;
using nlohmann::json;

namespace {

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", ms / 1000.0);
  return buf;
}

class Session {
 public:
  Session(const AgentOptions& options, const std::atomic<bool>& stop)
      : options_(options),
        stop_(stop),
        log_(options.log ? *options.log : std::cerr),
        work_(asio::make_work_guard(io_)),
        tick_(io_),
        backoff_timer_(io_),
        flush_timer_(io_),
        pump_(options.worker_command, options.worker_env,
              [this](std::vector<WorkerEvent> events) {
                asio::post(
                    io_, [this, events = std::move(events)]() mutable { OnWorkerEvents(events); });
              }),
        rng_(std::random_device{}()),
        backoff_ms_(options.backoff_initial_ms) {
    hello_.name = options.name.empty() ? HostName() : options.name;
    hello_.host = HostName();
    hello_.pid = ::getpid();
    // Said when the coordinator can take it (a name it shows: no control characters).
    std::error_code cwd_error;
    hello_.folder = std::filesystem::current_path(cwd_error).string();
    if (cwd_error || hello_.folder.size() > 4096 ||
        std::any_of(hello_.folder.begin(), hello_.folder.end(),
                    [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
      hello_.folder.clear();
    }
    hello_.slots = options.slots;
    for (size_t i = 0; i < hello_.slots.size(); ++i) hello_.slots[i].index = static_cast<int>(i);
    if (!hello_.slots.empty() && hello_.slots[0].gpu) {
      hello_.link_group = options.link_group;
      hello_.link_group.resize(hello_.slots.size(), 0);
    }
    where_ = net::FormatHostPort(options.host, options.port);
  }

  Status Run() {
    transport_ = options_.transport ? options_.transport(io_) : net::MakeTcpTransport(io_);
    SWEEP_RETURN_IF_ERROR(pump_.Begin());
    Log("agent '" + hello_.name + "' with " + std::to_string(hello_.slots.size()) +
        (hello_.link_group.empty() ? " CPU" : " GPU") + " slot" +
        (hello_.slots.size() == 1 ? "" : "s") + ", coordinator " + where_);
    ScheduleTick();
    Connect();
    io_.run();
    pump_.Join();
    if (sweep_over_ && options_.on_sweep_over) options_.on_sweep_over();
    if (!refusal_.empty()) return Status::InvalidArgument(refusal_);
    if (!gave_up_.empty()) return Status::Unavailable(gave_up_);
    return Status::Ok();
  }

 private:
  enum class State { kBackoff, kConnecting, kChallenge, kWelcome, kServing, kDraining, kDone };

  void Log(const std::string& line) {
    std::string text = line;
    text += '\n';
    log_ << text << std::flush;
  }
  // Connection failures repeat every few seconds while a coordinator is down: say each once.
  void LogFailure(const std::string& line) {
    if (line == last_failure_) return;
    last_failure_ = line;
    Log(line + "; retrying with backoff up to " + Seconds(options_.backoff_max_ms));
  }

  // ---- connecting ----

  void Connect() {
    if (stopping_) return;
    state_ = State::kConnecting;
    const uint64_t gen = ++generation_;
    transport_->Connect(options_.host, options_.port,
                        [this, gen](Result<std::shared_ptr<net::Connection>> c) {
                          if (gen != generation_) return;
                          if (!c.ok()) {
                            // No coordinator there: the next one to come up may hold the
                            // agent's token, and its refusals count afresh.
                            auth_refusals_ = 0;
                            LogFailure(c.status().message());
                            Backoff();
                            return;
                          }
                          Opened(std::move(*c));
                        });
  }

  void Backoff() {
    state_ = State::kBackoff;
    if (!stopping_ && options_.retry_for_ms >= 0 &&
        Clock::now() - alone_since_ >= std::chrono::milliseconds(options_.retry_for_ms)) {
      gave_up_ =
          "no coordinator at " + where_ + " for " + Seconds(options_.retry_for_ms) +
          (ever_registered_ ? " since the connection was lost" : " since the agent started") +
          " (--retry-for); the agent ends";
      Log(gave_up_);
      stopping_ = true;
    }
    if (stopping_) {
      Finish();
      return;
    }
    std::uniform_int_distribution<int> wait(std::max(1, backoff_ms_ / 2), backoff_ms_);
    backoff_timer_.expires_after(std::chrono::milliseconds(wait(rng_)));
    backoff_ms_ = std::min(backoff_ms_ * 2, options_.backoff_max_ms);
    backoff_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && state_ == State::kBackoff) Connect();
    });
  }

  void Opened(std::shared_ptr<net::Connection> connection) {
    if (stopping_) {
      connection->Close();
      Backoff();
      return;
    }
    const uint64_t gen = generation_;
    connection_ = std::move(connection);
    decoder_ = net::FrameDecoder(options_.max_frame_bytes);
    decoder_.StepUntilAuthenticated();
    tx_mac_ = net::FrameMac();
    rx_seq_ = tx_seq_ = 0;
    opened_ = last_rx_ = last_tx_ = Clock::now();
    auto nonce = net::NewNonce();
    if (!nonce.ok()) {
      Drop(nonce.status().message());
      return;
    }
    hello_.nonce = *nonce;
    state_ = State::kChallenge;
    connection_->Start(
        [this, gen](const char* data, size_t n) {
          if (gen == generation_) OnData(data, n);
        },
        [this, gen](const Status& why) {
          if (gen == generation_) Drop(why.message());
        });
    Send(net::ToJson(hello_));
  }

  // ---- receiving ----

  void OnData(const char* data, size_t n) {
    frames_.clear();
    Status st = decoder_.Feed(data, n, &frames_);
    const uint64_t gen = generation_;
    for (;;) {
      for (auto& frame : frames_) {
        if (gen != generation_ || state_ == State::kDraining) return;
        Handle(frame);
      }
      // One frame at a time until the handshake is done (its MAC key set): then the rest.
      if (!st.ok() || !decoder_.paused() || gen != generation_) break;
      frames_.clear();
      st = decoder_.Feed(nullptr, 0, &frames_);
    }
    if (!st.ok() && gen == generation_ && state_ != State::kDraining) {
      Send(net::ByeToJson("closing the connection: " + st.message()));
      Drop("bad frame from the coordinator: " + st.message());
    }
  }

  void Handle(net::Frame& frame) {
    auto seq = net::SeqOf(frame.body);
    if (!seq.ok()) {
      Drop("bad frame from the coordinator: " + seq.status().message());
      return;
    }
    if (*seq <= rx_seq_) return;  // a duplicate
    if (*seq != rx_seq_ + 1) {
      Drop("frames from the coordinator were lost (frame " + std::to_string(*seq) + " came after " +
           std::to_string(rx_seq_) + ")");
      return;
    }
    if (state_ == State::kServing && !frame.mac_verified) {
      Send(net::ByeToJson("closing the connection: a frame without its MAC"));
      Drop("a frame without its MAC after the handshake (not from the coordinator)");
      return;
    }
    rx_seq_ = *seq;
    // Alive: a new frame, authenticated once registered (not bytes alone, nor a duplicate).
    last_rx_ = Clock::now();
    if (frame.type == MessageType::kBye) {
      auto reason = net::ByeFromJson(frame.body);
      std::string why = reason.ok() ? *reason : reason.status().message();
      if (state_ == State::kServing && why.rfind(net::kSweepOver, 0) == 0) {
        SweepOver(why);
      } else if (state_ == State::kServing) {
        Drop("the coordinator said bye: " + why);
      } else if (why.rfind(net::kAuthFailed, 0) == 0) {
        // The tokens differ: no retry can change that, so the agent ends and says why (the
        // coordinator's reason says which side has no token, if one has none). Not at the
        // first refusal, though: that bye is not authenticated, and anyone on the path (or
        // at the address while the coordinator is down) could send one.
        AuthFailed("the coordinator at " + where_ + " refused this agent: " + net::Printable(why));
      } else {
        // Refused in the handshake (another version, a coordinator shutting down): try again.
        LogFailure("the coordinator at " + where_ + " refused this agent: " + net::Printable(why));
        Drop("", /*log=*/false);
      }
      return;
    }
    switch (state_) {
      case State::kChallenge:
        return OnChallenge(frame);
      case State::kWelcome:
        return OnWelcome(frame);
      case State::kServing:
        return OnServing(frame);
      default:
        return;
    }
  }

  void OnChallenge(net::Frame& frame) {
    if (frame.type != MessageType::kChallenge) {
      return Refused("expected challenge, got " + std::string(ToString(frame.type)));
    }
    auto challenge = net::ChallengeFromJson(frame.body);
    if (!challenge.ok()) return Refused(challenge.status().message());
    coordinator_nonce_ = challenge->nonce;
    state_ = State::kWelcome;
    Send(net::ToJson(net::Auth{net::AgentProof(options_.token, hello_.nonce, coordinator_nonce_,
                                               net::HelloTranscript(hello_))}));
  }

  void OnWelcome(net::Frame& frame) {
    if (frame.type != MessageType::kWelcome) {
      return Refused("expected welcome, got " + std::string(ToString(frame.type)));
    }
    auto welcome = net::WelcomeFromJson(frame.body);
    if (!welcome.ok()) return Refused(welcome.status().message());
    const std::string expected = net::CoordinatorProof(
        options_.token, hello_.nonce, coordinator_nonce_,
        net::WelcomeTranscript(hello_, welcome->agent_id, welcome->heartbeat_ms,
                               welcome->heartbeat_timeout_ms));
    if (!net::ProofsEqual(welcome->proof, expected)) {
      const std::string why =
          "it failed to prove that it holds the token (the tokens differ, or it is not a sweep "
          "coordinator)";
      Send(net::ByeToJson(why));
      return AuthFailed("cannot register with the coordinator at " + where_ + ": " + why);
    }
    // Every frame after the welcome, both ways, carries a MAC under the session's key: a
    // machine on the path can no longer inject or alter one.
    const std::string key = net::SessionKey(options_.token, hello_.nonce, coordinator_nonce_);
    tx_mac_ = net::FrameMac{key, net::kAgentFrameLabel};
    decoder_.Authenticate(net::FrameMac{key, net::kCoordinatorFrameLabel});
    agent_id_ = welcome->agent_id;
    heartbeat_ms_ = welcome->heartbeat_ms;
    heartbeat_timeout_ms_ = welcome->heartbeat_timeout_ms;
    state_ = State::kServing;
    ever_registered_ = true;
    backoff_ms_ = options_.backoff_initial_ms;
    auth_refusals_ = 0;
    last_failure_.clear();
    Log("registered with the coordinator at " + where_ + " (" + connection_->peer() +
        ") as agent " + std::to_string(agent_id_));
  }

  // The coordinator has finished its sweep: nothing will come back to this address for it.
  void SweepOver(const std::string& why) {
    if (options_.stay) {
      Log("the coordinator at " + where_ + " said: " + net::Printable(why) +
          "; staying for the next sweep on that address (--stay)");
    } else {
      Log("the coordinator at " + where_ + " said: " + net::Printable(why) +
          "; the agent ends (--stay keeps it for the next sweep)");
      stopping_ = true;
      sweep_over_ = true;
    }
    Drop("", /*log=*/false);
  }

  // The tokens differ, it seems: no retry changes that, so the agent ends, but only once the
  // failures have gone on for auth_refusal_window_ms and numbered kAuthRefusalsToEnd (nothing
  // is authenticated yet: one forged refusal, or a few, must not end it). Until then it
  // retries with backoff.
  void AuthFailed(const std::string& why) {
    const auto now = Clock::now();
    if (auth_refusals_++ == 0) first_auth_refusal_ = now;
    if (auth_refusals_ >= kAuthRefusalsToEnd &&
        now - first_auth_refusal_ >= std::chrono::milliseconds(options_.auth_refusal_window_ms)) {
      const auto refused_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - first_auth_refusal_);
      return EndRefused(why + "; refused " + std::to_string(auth_refusals_) + " times over " +
                        Seconds(refused_ms.count()) +
                        ": the agent ends; give it the coordinator's token (--token-file)");
    }
    LogFailure(why + "; it ends (status 2) if its token is still refused " +
               Seconds(options_.auth_refusal_window_ms) + " after the first refusal");
    Drop("", /*log=*/false);
  }

  // A refusal no retry can change: log it, stop, and have Run() return it.
  void EndRefused(const std::string& why) {
    refusal_ = why;
    Log(why);
    stopping_ = true;
    Drop("", /*log=*/false);
  }

  void Refused(const std::string& why) {
    Send(net::ByeToJson(why));
    LogFailure("cannot register with the coordinator at " + where_ + ": " + why);
    Drop("", /*log=*/false);
  }

  // A task this agent cannot read but whose number it can (a newer coordinator's trial kind)
  // fails that trial, saying why. Dropping the connection instead would bring the same task
  // back at every reconnect, for ever.
  bool FailUnreadableTask(const nlohmann::json& body, const std::string& why) {
    if (!body.is_object() || !body.contains("task") || !body["task"].is_object()) return false;
    const nlohmann::json& number = body["task"].value("number", nlohmann::json());
    if (!number.is_number_integer() || number.get<int64_t>() < 0) return false;
    WorkerEvent ev;
    ev.type = WorkerEvent::Type::kDone;
    ev.trial = number.get<int64_t>();
    ev.outcome = TrialOutcome::Kind::kFailed;
    ev.error = "this agent cannot run it: " + why;
    Send(net::DoneToJson(ev));
    return true;
  }

  void OnServing(net::Frame& frame) {
    switch (frame.type) {
      case MessageType::kAssign: {
        auto task = net::AssignFromJson(frame.body);
        if (!task.ok() && FailUnreadableTask(frame.body, task.status().message())) return;
        if (!task.ok()) {
          Send(net::ByeToJson("closing the connection: " + task.status().message()));
          Drop("bad assign from the coordinator: " + task.status().message());
          return;
        }
        if (stopping_) {
          // Placed before the coordinator read that this agent is stopping: not started.
          WorkerEvent ev;
          ev.type = WorkerEvent::Type::kDone;
          ev.trial = task->number;
          ev.outcome = TrialOutcome::Kind::kStopped;
          ev.error = "the agent is stopping";
          ev.never_started = true;
          Send(net::DoneToJson(ev));
          return;
        }
        if (!assigned_.insert(task->number).second) return;  // already running here
        pump_.Start(std::move(*task));
        return;
      }
      case MessageType::kStop:
      case MessageType::kContinue: {
        auto trial = net::TrialCommandFromJson(frame.body);
        if (!trial.ok()) {
          Drop("bad frame from the coordinator: " + trial.status().message());
          return;
        }
        if (!assigned_.contains(*trial)) return;
        if (frame.type == MessageType::kStop) {
          pump_.Stop(*trial);
        } else {
          pump_.Continue(*trial);
        }
        return;
      }
      case MessageType::kHeartbeat:
        return;
      default:
        Send(net::ByeToJson("unexpected " + std::string(ToString(frame.type))));
        Drop("unexpected " + std::string(ToString(frame.type)) + " from the coordinator");
        return;
    }
  }

  // ---- sending ----

  void Send(json body) {
    if (!connection_) return;
    body["seq"] = ++tx_seq_;
    std::string bytes;
    Status st = net::AppendFrame(body, options_.max_frame_bytes, &bytes,
                                 tx_mac_.key.empty() ? nullptr : &tx_mac_);
    if (!st.ok()) {
      --tx_seq_;
      Log("cannot send " + body.value("type", std::string("?")) + ": " + st.message());
      return;
    }
    last_tx_ = Clock::now();
    connection_->Send(std::move(bytes));
  }

  void OnWorkerEvents(std::vector<WorkerEvent>& events) {
    if (state_ != State::kServing) return;  // trials of a lost connection: already requeued
    for (auto& ev : events) {
      if (!assigned_.contains(ev.trial)) continue;
      if (ev.type == WorkerEvent::Type::kReport) {
        batch_.Add(ev.trial, ev.step, ev.epoch, ev.metrics);
        if (batch_.size() >= static_cast<size_t>(options_.max_batch_reports)) Flush();
      } else {
        Flush();
        assigned_.erase(ev.trial);
        Send(net::DoneToJson(ev));
      }
    }
    if (!batch_.empty() && !flush_armed_) {
      flush_armed_ = true;
      flush_timer_.expires_after(std::chrono::milliseconds(options_.flush_ms));
      flush_timer_.async_wait([this](const boost::system::error_code& ec) {
        flush_armed_ = false;
        if (!ec) Flush();
      });
    }
  }

  void Flush() {
    if (batch_.empty()) return;
    json message = batch_.Take();
    if (state_ != State::kServing) return;
    SendReports(message);
  }

  // A batch too big for one frame (very many or very large metrics) goes out in halves.
  void SendReports(json& message) {
    json& reports = message["reports"];
    std::string probe;
    // Room for the seq the send adds, and the MAC.
    if (reports.size() <= 1 ||
        net::AppendFrame(message, options_.max_frame_bytes - 32, &probe, &tx_mac_).ok()) {
      Send(std::move(message));
      return;
    }
    const size_t half = reports.size() / 2;
    json first = json{{"type", message["type"]}, {"reports", json::array()}};
    json second = first;
    for (size_t i = 0; i < reports.size(); ++i) {
      (i < half ? first : second)["reports"].push_back(std::move(reports[i]));
    }
    SendReports(first);
    SendReports(second);
  }

  // ---- losing the connection, stopping ----

  // Ends the connection: the running trials are stopped, then the agent connects again (or
  // finishes, when stopping).
  void Drop(const std::string& why, bool log = true) {
    if (state_ == State::kDraining || state_ == State::kDone || state_ == State::kBackoff) return;
    const bool was_serving = state_ == State::kServing;
    if (was_serving) alone_since_ = Clock::now();  // the wait for a coordinator starts again
    ++generation_;                                 // late callbacks of this connection are ignored
    if (connection_) connection_->Close();
    connection_.reset();
    const size_t running = assigned_.size();
    assigned_.clear();
    batch_.Take();
    state_ = State::kDraining;
    if (log && !why.empty()) {
      if (was_serving) {
        Log("connection to the coordinator at " + where_ + " lost: " + why +
            (running > 0
                 ? "; ending " + std::to_string(running) + " running trial" +
                       (running == 1 ? "" : "s") + " (they rerun from their last checkpoint)"
                 : std::string()));
      } else {
        LogFailure("cannot register with the coordinator at " + where_ + ": " + why);
      }
    }
    // Their reports no longer reach the store, and the coordinator has requeued them: a trial
    // left to finish its epoch would train for nobody and write a checkpoint its rerun (perhaps
    // already running elsewhere, on a shared checkpoint_dir) also writes.
    pump_.AbandonAll([this] { asio::post(io_, [this] { AfterDrain(); }); });
  }

  void AfterDrain() {
    if (state_ != State::kDraining) return;
    if (stopping_) {
      Finish();
    } else {
      Backoff();
    }
  }

  void BeginStop() {
    stopping_ = true;
    switch (state_) {
      case State::kServing: {
        // Its trials end here before the coordinator runs them elsewhere (never twice at once):
        // it says it is draining, stops them, sends their reports and ends, then says bye.
        // The connection's heartbeats go on meanwhile; if it is lost, the trials are ended at
        // once, as on any lost connection (Drop).
        Log("stopping: ending " + std::to_string(assigned_.size()) +
            " running trial(s), then saying bye to the coordinator");
        Flush();
        Send(net::DrainingToJson());
        const uint64_t generation = generation_;
        pump_.StopAll(options_.stop_grace_ms, [this, generation] {
          asio::post(io_, [this, generation] {
            if (generation != generation_ || state_ != State::kServing) return;
            Flush();
            Send(net::ByeToJson("the agent is stopping"));
            Drop("", /*log=*/false);
          });
        });
        return;
      }
      case State::kChallenge:
      case State::kWelcome:
        Drop("", /*log=*/false);
        return;
      case State::kBackoff:
        backoff_timer_.cancel();
        Finish();
        return;
      case State::kConnecting:  // Opened() or the failure sees stopping_
      case State::kDraining:    // AfterDrain() sees it
      case State::kDone:
        return;
    }
  }

  void Finish() {
    if (state_ == State::kDone) return;
    state_ = State::kDone;
    ++generation_;
    tick_.cancel();
    backoff_timer_.cancel();
    flush_timer_.cancel();
    pump_.Exit();
    work_.reset();
    Log("stopped");
  }

  void ScheduleTick() {
    tick_.expires_after(std::chrono::milliseconds(20));
    tick_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || state_ == State::kDone) return;
      Tick();
      if (state_ != State::kDone) ScheduleTick();
    });
  }

  void Tick() {
    if (stop_.load() && !stopping_) {
      BeginStop();
      return;
    }
    if (stopping_ && !stopped_now_ && state_ == State::kServing && options_.stop_now != nullptr &&
        options_.stop_now->load()) {
      // The stop's own wait (StopAll) then ends, and the agent says bye.
      stopped_now_ = true;
      Log("stopping at once: ending " + std::to_string(assigned_.size()) +
          " running trial(s) without waiting for them");
      pump_.AbandonAll({});
      return;
    }
    const auto now = Clock::now();
    if (state_ == State::kChallenge || state_ == State::kWelcome) {
      if (now - opened_ > std::chrono::milliseconds(options_.handshake_timeout_ms)) {
        Drop("no answer to the handshake within " + Seconds(options_.handshake_timeout_ms));
      }
    } else if (state_ == State::kServing) {
      if (now - last_rx_ > std::chrono::milliseconds(heartbeat_timeout_ms_)) {
        Drop("nothing received for " + Seconds(heartbeat_timeout_ms_));
      } else if (now - last_tx_ >= std::chrono::milliseconds(heartbeat_ms_)) {
        Send(net::HeartbeatToJson());
      }
    }
  }

  const AgentOptions& options_;
  const std::atomic<bool>& stop_;
  std::string refusal_;  // why the coordinator refused this agent for good (EndRefused)
  std::string gave_up_;  // why the agent ended without a coordinator (Backoff)
  std::ostream& log_;
  std::string where_;

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::steady_timer tick_;
  asio::steady_timer backoff_timer_;
  asio::steady_timer flush_timer_;
  std::unique_ptr<net::Transport> transport_;
  AgentPump pump_;
  std::mt19937 rng_;

  State state_ = State::kConnecting;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  bool stopped_now_ = false;  // options_.stop_now was acted on
  bool sweep_over_ = false;   // ending because the coordinator's sweep is over
  bool flush_armed_ = false;
  int backoff_ms_;
  std::string last_failure_;
  // Since when the agent has had no coordinator (start, or the last lost connection).
  Clock::time_point alone_since_ = Clock::now();
  bool ever_registered_ = false;

  net::Hello hello_;
  std::shared_ptr<net::Connection> connection_;
  net::FrameDecoder decoder_;
  net::FrameMac tx_mac_;  // once registered: what this agent's frames carry
  // Token failures since the last registration (AuthFailed).
  static constexpr int kAuthRefusalsToEnd = 3;
  int auth_refusals_ = 0;
  Clock::time_point first_auth_refusal_;
  std::vector<net::Frame> frames_;
  int64_t rx_seq_ = 0;
  int64_t tx_seq_ = 0;
  Clock::time_point opened_, last_rx_, last_tx_;
  std::string coordinator_nonce_;
  int64_t agent_id_ = 0;
  int heartbeat_ms_ = 1000;
  int heartbeat_timeout_ms_ = 10'000;
  std::set<int64_t> assigned_;  // trials of this connection not yet done
  net::ReportBatchWriter batch_;
};

}  // namespace

Status RunSession(const AgentOptions& options, const std::atomic<bool>& stop) {
  Session session(options, stop);
  return session.Run();
}

}  // namespace sweep::executor
