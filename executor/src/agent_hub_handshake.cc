// The hub accepting and authenticating a connection: at most so many handshakes at once (a
// flood pushes out its own), then hello, challenge and auth until the agent is registered.
//
// A connection's life, as the hub sees it:
//   1. accepted: waits for hello (handshake_timeout_ms). hello with another version: bye naming
//      both versions, close. Invalid hello: bye, close.
//   2. hello ok: sends challenge {nonce Nh}; waits for auth.
//   3. auth: proof == HMAC(token, "sweep agent proof v1\nNa\nNh") (constant time)? Otherwise bye
//      "authentication failed", close, and a log line with the peer's address.
//   4. registered: sends welcome {agent_id, heartbeat, HMAC(token, "sweep coordinator ...")};
//      AgentJoined. From here: reports / done / heartbeat / bye in, assign / stop / continue /
//      heartbeat out.
//   5. lost (close, silence, a bad frame, bye): kDone worker_lost for its trials, AgentLost.
#include <boost/asio/post.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "agent_hub_impl.h"
#include "executor/net_auth.h"

namespace sweep::executor {

namespace asio = boost::asio;
using net::MessageType;

namespace {
// Log lines about connections that never registered (see LogBeforeRegistration).
constexpr int kPreRegistrationLines = 10;
constexpr auto kPreRegistrationWindow = std::chrono::seconds(10);

// The peer's machine: "10.0.0.1" of "10.0.0.1:5000" (an address without a port, as it is).
std::string HostOf(const std::string& address) {
  auto host_port = net::ParseHostPort(address);
  return host_port.ok() ? host_port->first : address;
}
}  // namespace

void AgentHub::Impl::Accept(std::shared_ptr<net::Connection> connection) {
  if (shutting_down_) {
    connection->Close();
    return;
  }
  // Connections that have not authenticated cost memory (a frame being received, up to
  // max_frame_bytes each) and anyone who can reach the port can open them: at most
  // max_handshakes_per_address from one address and max_handshakes in all at once. Past that
  // the oldest of the address that holds the most is closed for the new one: a flood from
  // one machine pushes out only its own connections, and a genuine agent's handshake, a few
  // round trips, is done long before a flood from many machines could push it out.
  const std::string host = HostOf(connection->peer());
  std::map<std::string, std::pair<long, Peer*>> by_host;  // handshaking, oldest
  long handshaking = 0;
  for (const auto& [raw, p] : peers_) {
    if (p->state != Peer::State::kHello && p->state != Peer::State::kAuth) continue;
    ++handshaking;
    auto& [count, oldest] = by_host[HostOf(p->address)];
    ++count;
    if (oldest == nullptr || p->opened < oldest->opened) oldest = p.get();
  }
  const std::pair<long, Peer*>* evict = nullptr;
  if (auto own = by_host.find(host);
      own != by_host.end() && own->second.first >= options_.max_handshakes_per_address) {
    evict = &own->second;
  } else if (handshaking >= options_.max_handshakes) {
    for (const auto& [h, entry] : by_host) {
      if (evict == nullptr || entry.first > evict->first) evict = &entry;
    }
  }
  if (evict != nullptr && evict->second != nullptr) {
    Peer* oldest = evict->second;
    if (!evicting_) {
      Log("closing the oldest of " + std::to_string(evict->first) + " connections from " +
          HostOf(oldest->address) + " that have not finished their handshake (" +
          std::to_string(handshaking) + " in all) for a new one from " + connection->peer());
    }
    evicting_ = true;
    oldest->state = Peer::State::kClosed;  // not registered: nothing to tell the coordinator
    oldest->connection->Close();
  } else {
    evicting_ = false;
  }
  auto peer = std::make_shared<Peer>(options_.max_frame_bytes);
  peer->connection = connection;
  peer->address = connection->peer();
  peer->opened = peer->last_rx = peer->last_tx = Clock::now();
  Peer* raw = peer.get();
  peers_.emplace(raw, peer);
  connection->Start([this, raw](const char* data, size_t n) { OnData(raw, data, n); },
                    [this, raw](const Status& why) { OnClose(raw, why); });
}

void AgentHub::Impl::OnData(Peer* peer, const char* data, size_t n) {
  if (peer->state == Peer::State::kClosed) return;
  frames_.clear();
  Status st = peer->decoder.Feed(data, n, &frames_);
  for (;;) {
    for (auto& frame : frames_) {
      if (peer->state == Peer::State::kClosed) break;
      Handle(peer, frame);
    }
    // One frame at a time until the handshake is done (its MAC key set): then the rest.
    if (!st.ok() || !peer->decoder.paused() || peer->state == Peer::State::kClosed) break;
    frames_.clear();
    st = peer->decoder.Feed(nullptr, 0, &frames_);
  }
  if (!st.ok() && peer->state != Peer::State::kClosed) {
    Lose(peer, AgentLost::Reason::kMalformedFrame, st.message());
  }
  Publish();
}

void AgentHub::Impl::OnClose(Peer* peer, const Status& why) {
  if (peer->state != Peer::State::kClosed) {
    Lose(peer, AgentLost::Reason::kDisconnected,
         why.code() == Status::Code::kAborted ? "connection closed" : why.message());
    Publish();
  }
  // A close can be reported from inside this peer's own handlers (Close() in Lose): free
  // the peer once they have returned.
  asio::post(io_, [this, peer] { peers_.erase(peer); });
}

void AgentHub::Impl::Handle(Peer* peer, net::Frame& frame) {
  auto seq = net::SeqOf(frame.body);
  if (!seq.ok()) {
    Lose(peer, AgentLost::Reason::kMalformedFrame, seq.status().message());
    return;
  }
  if (*seq <= peer->rx_seq) return;  // a duplicate
  if (*seq != peer->rx_seq + 1) {
    Lose(peer, AgentLost::Reason::kMalformedFrame,
         "frames were lost (frame " + std::to_string(*seq) + " came after " +
             std::to_string(peer->rx_seq) + ")");
    return;
  }
  if (peer->state == Peer::State::kServing && !frame.mac_verified) {
    Lose(peer, AgentLost::Reason::kMalformedFrame,
         "a frame without its MAC after the handshake (not from the agent)");
    return;
  }
  peer->rx_seq = *seq;
  // Alive: a new frame, authenticated once registered (bytes alone, or a duplicate anyone on
  // the path could inject, would keep a dead session looking alive).
  peer->last_rx = Clock::now();
  switch (peer->state) {
    case Peer::State::kHello:
      OnHello(peer, frame);
      return;
    case Peer::State::kAuth:
      OnAuth(peer, frame);
      return;
    case Peer::State::kServing:
      OnServing(peer, frame);
      return;
    case Peer::State::kClosed:
      return;
  }
}

void AgentHub::Impl::OnHello(Peer* peer, net::Frame& frame) {
  if (frame.type != MessageType::kHello) {
    Refuse(peer, "expected hello, got " + std::string(ToString(frame.type)));
    return;
  }
  auto hello = net::HelloFromJson(frame.body);
  if (!hello.ok()) {
    Refuse(peer, hello.status().message());
    return;
  }
  auto nonce = net::NewNonce();
  if (!nonce.ok()) {
    Refuse(peer, nonce.status().message());
    return;
  }
  peer->hello = std::move(*hello);
  peer->name = peer->hello.name;
  peer->agent_nonce = peer->hello.nonce;
  peer->hub_nonce = *nonce;
  peer->state = Peer::State::kAuth;
  Send(peer, net::ToJson(net::Challenge{peer->hub_nonce}));
}

void AgentHub::Impl::OnAuth(Peer* peer, net::Frame& frame) {
  if (frame.type != MessageType::kAuth) {
    Refuse(peer, "expected auth, got " + std::string(ToString(frame.type)));
    return;
  }
  auto auth = net::AuthFromJson(frame.body);
  if (!auth.ok()) {
    Refuse(peer, auth.status().message());
    return;
  }
  const std::string transcript = net::HelloTranscript(peer->hello);
  const std::string expected =
      net::AgentProof(token_, peer->agent_nonce, peer->hub_nonce, transcript);
  if (!net::ProofsEqual(auth->proof, expected)) {
    // Which side lacks a token, when one does, says what to fix.
    const bool agent_has_none = net::ProofsEqual(
        auth->proof, net::AgentProof("", peer->agent_nonce, peer->hub_nonce, transcript));
    Refuse(peer, std::string(net::kAuthFailed) + ": " +
                     (token_.empty()   ? "the coordinator runs without a token (no --token-file) "
                                         "but the agent gave one; give both the same token, or "
                                         "neither"
                      : agent_has_none ? "the agent gave no token (--token-file) and the "
                                         "coordinator needs one"
                                       : "the agent's token does not match the coordinator's"));
    return;
  }
  peer->id = next_id_++;
  peer->state = Peer::State::kServing;
  net::Welcome welcome;
  welcome.agent_id = peer->id;
  welcome.heartbeat_ms = options_.heartbeat_ms;
  welcome.heartbeat_timeout_ms = options_.heartbeat_timeout_ms;
  welcome.proof = net::CoordinatorProof(
      token_, peer->agent_nonce, peer->hub_nonce,
      net::WelcomeTranscript(peer->hello, welcome.agent_id, welcome.heartbeat_ms,
                             welcome.heartbeat_timeout_ms));
  Send(peer, net::ToJson(welcome));
  // Every frame after the welcome, both ways, carries a MAC under the session's key.
  const std::string key = net::SessionKey(token_, peer->agent_nonce, peer->hub_nonce);
  peer->tx_mac = net::FrameMac{key, net::kCoordinatorFrameLabel};
  peer->decoder.Authenticate(net::FrameMac{key, net::kAgentFrameLabel});
  by_id_[peer->id] = peer;
  {
    std::lock_guard lock(mu_);
    live_.insert(peer->id);
  }
  AgentJoined joined;
  joined.name = peer->hello.name;
  joined.host = peer->hello.host;
  joined.address = peer->address;
  joined.pid = peer->hello.pid;
  joined.folder = peer->hello.folder;
  joined.slots = peer->hello.slots;
  joined.link_group = peer->hello.link_group;
  const bool gpu = !joined.slots.empty() && joined.slots[0].gpu;
  Log(peer->Describe() + " joined from host " + joined.host + " with " +
      std::to_string(joined.slots.size()) + (gpu ? " GPU" : " CPU") + " slot" +
      (joined.slots.size() == 1 ? "" : "s"));
  // Built in place: GCC 12 takes a moved temporary's variant for uninitialized (a false
  // -Wmaybe-uninitialized).
  HubEvent& event = pending_.emplace_back();
  event.agent_id = peer->id;
  event.event = std::move(joined);
}

// Refuses a connection still in its handshake: bye with the reason, close, log.
void AgentHub::Impl::Refuse(Peer* peer, const std::string& reason) {
  LogBeforeRegistration("refused " + peer->Describe() + ": " + reason);
  Send(peer, net::ByeToJson(reason));
  peer->state = Peer::State::kClosed;
  peer->connection->Close();
}

// A line about a connection that has not registered: anyone who reaches the port can cause
// them, so at most kPreRegistrationLines per kPreRegistrationWindow; past that they are
// counted, and the next line said says how many were not.
void AgentHub::Impl::LogBeforeRegistration(const std::string& line) {
  const auto now = Clock::now();
  if (now - prereg_window_start_ >= kPreRegistrationWindow) {
    prereg_window_start_ = now;
    prereg_lines_ = 0;
  }
  if (prereg_lines_ >= kPreRegistrationLines) {
    ++prereg_unsaid_;
    return;
  }
  ++prereg_lines_;
  std::string said = line;
  if (prereg_unsaid_ > 0) {
    said += " (and " + std::to_string(prereg_unsaid_) +
            " more connections refused or closed before registering, not logged)";
    prereg_unsaid_ = 0;
  }
  Log(said);
}

}  // namespace sweep::executor
