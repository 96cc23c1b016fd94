// The coordinator <-> agent wire protocol: frames and the messages they carry
// (docs/agent-protocol.md describes the whole exchange). Pure: no I/O, no clocks. Encoders and
// parsers are free functions safe from any thread; a FrameDecoder is one connection's state and is
// not thread-safe. Every parser validates every field (types and ranges) and names the field that
// is wrong, so a peer's bad message becomes a Status, never an exception.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "executor/local_executor.h"
#include "executor/slots.h"
#include "executor/trial.h"

namespace sweep::executor::net {

// Both sides must speak the same version; a mismatch is refused in the handshake. Version 5:
// a trainer trial's checkpoint may hold a partial epoch, which an agent of version 4 would take
// for a damaged file and delete, training the trial from its start.
inline constexpr int kProtocolVersion = 5;
// How a coordinator's bye to an agent whose token does not match begins: a refusal that no retry
// can change, so the agent ends rather than retry forever.
inline constexpr std::string_view kAuthFailed = "authentication failed";
// How a coordinator's bye begins when its sweep has ended for good (completed, not interrupted):
// its agents exit rather than wait for a resume that will not come.
inline constexpr std::string_view kSweepOver = "the sweep is over";
inline constexpr size_t kDefaultMaxFrameBytes = size_t{1} << 20;  // 1 MiB of payload
// Arrays and objects nested deeper than this make a frame malformed: no message of ours nests
// past a few levels, and copying a deeper one would recurse as deep.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kFrameHeaderBytes = 4;  // big-endian payload length
inline constexpr size_t kNonceBytes = 32;       // sent as 64 hex digits

// ---- frames ----

enum class MessageType {
  kHello,      // agent -> coordinator, first frame
  kChallenge,  // coordinator -> agent
  kAuth,       // agent -> coordinator
  kWelcome,    // coordinator -> agent: registered
  kAssign,     // coordinator -> agent: run a trial
  kReports,    // agent -> coordinator: a batch of reports
  kDone,       // agent -> coordinator: a trial ended
  kStop,       // coordinator -> agent: stop a trial
  kContinue,   // coordinator -> agent: a trial waiting at a decision point goes on
  kHeartbeat,  // both ways
  kBye,        // both ways: closing, with a reason
  kDraining,   // agent -> coordinator: it is stopping; its trials end, then it says bye
};
std::string_view ToString(MessageType type);
std::optional<MessageType> MessageTypeFromString(std::string_view name);

// One decoded frame: its type and its whole JSON object (type and seq included).
struct Frame {
  MessageType type = MessageType::kHeartbeat;
  nlohmann::json body;
  // True only for a frame whose MAC the decoder checked (FrameDecoder::Authenticate). After the
  // handshake a session takes no other: a frame without one is a repeat of a handshake frame,
  // dropped as any duplicate is, or else closes the connection unread.
  bool mac_verified = false;
};

// Text from a peer, for a log line: control characters (a line break that would forge a line
// of our own, a terminal escape) as \xNN; C1 controls, U+2028/U+2029 and the bidirectional
// overrides as \uNNNN.
std::string Printable(std::string_view text);

// How one direction of a session authenticates its frames after the handshake: each payload
// starts with the HMAC-SHA256 (64 hex digits) of the JSON text that follows it, under that
// direction's key: HMAC(session key (SessionKey, net_auth.h), the direction's label).
struct FrameMac {
  FrameMac() = default;
  FrameMac(std::string_view session_key, std::string_view label);
  std::string key;  // empty: frames carry no MAC
};
inline constexpr const char* kAgentFrameLabel = "sweep frame from the agent v1\n";
inline constexpr const char* kCoordinatorFrameLabel = "sweep frame from the coordinator v1\n";
inline constexpr size_t kFrameMacBytes = 64;

// Appends `message` (a JSON object) framed: 4-byte big-endian length, then its JSON text, after
// its MAC when `mac` is given. InvalidArgument when the payload is longer than max_frame_bytes
// (nothing is appended).
Status AppendFrame(const nlohmann::json& message, size_t max_frame_bytes, std::string* out,
                   const FrameMac* mac = nullptr);

// Takes bytes as they arrive, in pieces of any size, and yields whole frames. The first error
// (a length over the limit, a zero length, text that is not JSON, not an object, or without a
// known string `type`) is final: the stream cannot be trusted after it, so Feed keeps
// returning it. Frames decoded before the error in the same Feed are still appended.
class FrameDecoder {
 public:
  explicit FrameDecoder(size_t max_frame_bytes = kDefaultMaxFrameBytes)
      : max_frame_bytes_(max_frame_bytes) {}
  Status Feed(const char* data, size_t size, std::vector<Frame>* frames);
  // Until Authenticate, Feed yields one frame at a time, leaving what follows buffered:
  // paused() says so, and a Feed with no new data goes on. The session handles each frame of
  // its handshake before the next is decoded, so the first frame after the handshake's last is
  // decoded under the key (and no frame can be slipped in to be decoded before it is set).
  void StepUntilAuthenticated() { stepwise_ = true; }
  bool paused() const { return paused_; }
  // From now on every frame must carry a valid MAC; one whose MAC is wrong is malformed
  // (final), and one with none (its text right after the length) comes out unauthenticated.
  void Authenticate(FrameMac mac) { mac_ = std::move(mac); }
  size_t buffered() const { return buffer_.size() - start_; }

 private:
  Status Fail(Status status);
  size_t max_frame_bytes_;
  bool stepwise_ = false;
  bool paused_ = false;
  std::optional<FrameMac> mac_;
  std::string buffer_;
  size_t start_ = 0;  // first unconsumed byte of buffer_
  Status error_;
};

// ---- messages ----
// Every message is a JSON object {"type": ..., "seq": N, ...}. seq counts the frames a side has
// sent on this connection, from 1; the sessions use it to drop duplicates and to notice loss.
// The ToJson functions leave seq out (the session adds it); the FromJson functions ignore it.

// hello: the agent introduces itself and its slots (all GPUs or all CPU shares).
struct Hello {
  int version = kProtocolVersion;
  std::string name;  // the agent's name (default: its host name)
  std::string host;  // the agent machine's host name
  int64_t pid = 0;   // the agent process
  std::vector<Slot> slots;
  // One entry per GPU slot: equal values share the fastest link (Server::link_group).
  // Empty for CPU slots.
  std::vector<int> link_group;
  std::string nonce;  // the agent's challenge to the coordinator: kNonceBytes, hex
  // The folder the agent runs in, absolute: where a relative path in a task lands on its
  // machine. Optional (empty: not said).
  std::string folder;
};
nlohmann::json ToJson(const Hello& hello);
// Checks the version first, so an agent of another version gets the message naming both
// versions, whatever else it sent.
Result<Hello> HelloFromJson(const nlohmann::json& json);

// What both proofs of the handshake cover (net_auth.h): the digest of the hello's JSON text
// (as ToJson writes it: each side from its Hello), and for the coordinator's proof the
// welcome's fields after it.
std::string HelloTranscript(const Hello& hello);
std::string WelcomeTranscript(const Hello& hello, int64_t agent_id, int heartbeat_ms,
                              int heartbeat_timeout_ms);

// challenge: the coordinator's nonce.
struct Challenge {
  std::string nonce;
};
nlohmann::json ToJson(const Challenge& challenge);
Result<Challenge> ChallengeFromJson(const nlohmann::json& json);

// auth: the agent's proof that it holds the token (AgentProof, net_auth.h).
struct Auth {
  std::string proof;  // hex
};
nlohmann::json ToJson(const Auth& auth);
Result<Auth> AuthFromJson(const nlohmann::json& json);

// welcome: the agent is registered. Carries the coordinator's own proof.
struct Welcome {
  int64_t agent_id = 0;              // >= 1, new for every registration
  int heartbeat_ms = 1000;           // each side sends a heartbeat this often
  int heartbeat_timeout_ms = 10000;  // silence for this long means the peer is gone
  std::string proof;                 // CoordinatorProof, hex
};
nlohmann::json ToJson(const Welcome& welcome);
Result<Welcome> WelcomeFromJson(const nlohmann::json& json);

// assign: run this trial (the TrialTask as executor::ToJson gives it).
nlohmann::json AssignToJson(const TrialTask& task);
Result<TrialTask> AssignFromJson(const nlohmann::json& json);

// reports: [{trial, step, epoch, metrics}, ...]. Parsing appends kReport WorkerEvents.
// Builds a batch incrementally, so the agent can add reports as they come.
class ReportBatchWriter {
 public:
  void Add(int64_t trial, int64_t step, double epoch, const nlohmann::json& metrics);
  size_t size() const { return reports_.size(); }
  bool empty() const { return reports_.empty(); }
  // The message, leaving the writer empty.
  nlohmann::json Take();

 private:
  nlohmann::json reports_ = nlohmann::json::array();
};
// Appends one WorkerEvent per report; on error appends nothing. Moves metrics out of `json`.
Status ReportsFromJson(nlohmann::json& json, std::vector<WorkerEvent>* events);

// done: a trial ended (WorkerEvent kDone: outcome, error, end metrics in `metrics`, worker_lost).
nlohmann::json DoneToJson(const WorkerEvent& done);
Result<WorkerEvent> DoneFromJson(nlohmann::json& json);

// stop / continue: {trial}.
nlohmann::json TrialCommandToJson(MessageType type, int64_t trial);
Result<int64_t> TrialCommandFromJson(const nlohmann::json& json);

// heartbeat: no fields.
nlohmann::json HeartbeatToJson();

// bye: the sender is closing; `reason` says why ("agent stopping", "authentication failed").
nlohmann::json ByeToJson(std::string_view reason);
// draining: the agent was told to stop (SIGTERM: a batch system's preemption). It takes no new
// trial, stops those it runs, sends their reports and `done`, then says bye.
nlohmann::json DrainingToJson();
Result<std::string> ByeFromJson(const nlohmann::json& json);

// The seq of a frame: a positive integer. InvalidArgument otherwise.
Result<int64_t> SeqOf(const nlohmann::json& json);

}  // namespace sweep::executor::net
