// Frames and messages of the agent protocol. Field checks go through FieldReader, which names
// the message and the field in every error ("hello: slots[2].device must be an integer >= 0").
#include "executor/net_protocol.h"

#include "executor/command.h"
#include "executor/net_auth.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

namespace sweep::executor::net {

using nlohmann::json;

namespace {

constexpr std::array<std::string_view, 12> kTypeNames = {
    "hello", "challenge", "auth",     "welcome",   "assign", "reports",
    "done",  "stop",      "continue", "heartbeat", "bye",    "draining"};

constexpr size_t kMaxNameChars = 256;
constexpr size_t kMaxPathChars = 4096;  // PATH_MAX
constexpr size_t kMaxErrorChars = 64 * 1024;
constexpr size_t kMaxSlots = 4096;

json Message(MessageType type) { return json{{"type", ToString(type)}}; }

// Reads fields of one JSON object, naming the message and field in each error.
class FieldReader {
 public:
  // `index` >= 0 names an array element: "what[index]". The name is built only on error.
  FieldReader(const json& j, std::string_view what, int64_t index = -1)
      : j_(j), what_(what), index_(index) {}

  Status CheckObject() const {
    if (!j_.is_object()) return Error("", "must be a JSON object");
    return Status::Ok();
  }
  Result<int64_t> Int(const char* key, int64_t min, int64_t max) const {
    auto it = j_.find(key);
    if (it == j_.end()) return Missing(key);
    if (!it->is_number_integer()) return Range(key, min, max);
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Range(key, min, max);
    }
    int64_t v = it->get<int64_t>();
    if (v < min || v > max) return Range(key, min, max);
    return v;
  }
  Result<double> Number(const char* key, double min) const {
    auto it = j_.find(key);
    if (it == j_.end()) return Missing(key);
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < min) {
      return Error(key, "must be a finite number >= " + Format(min));
    }
    return it->get<double>();
  }
  Result<bool> Bool(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end()) return Missing(key);
    if (!it->is_boolean()) return Error(key, "must be true or false");
    return it->get<bool>();
  }
  Result<std::string> String(const char* key, size_t max_chars, bool allow_empty) const {
    auto it = j_.find(key);
    if (it == j_.end()) return Missing(key);
    if (!it->is_string()) return Error(key, "must be a string");
    const auto& s = it->get_ref<const std::string&>();
    if (s.empty() && !allow_empty) return Error(key, "must not be empty");
    if (s.size() > max_chars) {
      return Error(key, "is longer than " + std::to_string(max_chars) + " bytes");
    }
    return s;
  }
  // A name that is shown in logs and tables: no control characters (a line break or an
  // escape sequence from a peer not yet authenticated would forge log lines or drive the
  // operator's terminal).
  Result<std::string> Name(const char* key, size_t max_chars, bool allow_empty) const {
    SWEEP_ASSIGN_OR_RETURN(std::string s, String(key, max_chars, allow_empty));
    for (unsigned char c : s) {
      if (c < 0x20 || c == 0x7f) return Error(key, "must not hold control characters");
    }
    return s;
  }
  Result<std::string> Hex(const char* key, size_t bytes) const {
    auto it = j_.find(key);
    if (it == j_.end()) return Missing(key);
    if (!it->is_string()) return Error(key, "must be a string of hex digits");
    const auto& s = it->get_ref<const std::string&>();
    bool hex = s.size() == 2 * bytes;
    for (char c : s) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hex) {
      return Error(key, "must be " + std::to_string(2 * bytes) + " lowercase hex digits");
    }
    return s;
  }
  Status Error(std::string_view key, std::string_view problem) const {
    std::string msg(what_);
    if (index_ >= 0) msg += "[" + std::to_string(index_) + "]";
    msg += ": ";
    if (!key.empty()) {
      msg += key;
      msg += ' ';
    }
    msg += problem;
    return Status::InvalidArgument(std::move(msg));
  }

 private:
  Status Missing(const char* key) const { return Error(key, "is missing"); }
  Status Range(const char* key, int64_t min, int64_t max) const {
    std::string range = max == std::numeric_limits<int64_t>::max()
                            ? ">= " + std::to_string(min)
                            : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    return Error(key, "must be an integer " + range);
  }
  static std::string Format(double v) { return json(v).dump(); }

  const json& j_;
  std::string_view what_;
  int64_t index_ = -1;
};

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// Metrics are an object of name -> number (null stands for a value JSON cannot hold, NaN).
Status CheckMetrics(const json& metrics, const FieldReader& r, const char* key) {
  if (!metrics.is_object()) return r.Error(key, "must be an object");
  for (const auto& [name, value] : metrics.items()) {
    if (name.empty() || name.size() > kMaxMetricNameBytes) {
      return r.Error(key, "has a metric name that is empty or longer than " +
                              std::to_string(kMaxMetricNameBytes) + " bytes");
    }
    if (!value.is_number() && !value.is_null()) {
      return r.Error(key, "'" + name + "' must be a number");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view ToString(MessageType type) { return kTypeNames[static_cast<size_t>(type)]; }

std::optional<MessageType> MessageTypeFromString(std::string_view name) {
  for (size_t i = 0; i < kTypeNames.size(); ++i) {
    if (kTypeNames[i] == name) return static_cast<MessageType>(i);
  }
  return std::nullopt;
}

// ---- frames ----

FrameMac::FrameMac(std::string_view session_key, std::string_view label)
    : key(HmacSha256Hex(session_key, label)) {}

Status AppendFrame(const json& message, size_t max_frame_bytes, std::string* out,
                   const FrameMac* mac) {
  const std::string text = message.dump(-1, ' ', false, json::error_handler_t::replace);
  const size_t payload = text.size() + (mac != nullptr ? kFrameMacBytes : 0);
  if (payload > max_frame_bytes) {
    return Status::InvalidArgument("message of " + std::to_string(payload) +
                                   " bytes exceeds the frame limit of " +
                                   std::to_string(max_frame_bytes) + " bytes");
  }
  const auto n = static_cast<uint32_t>(payload);
  const char header[kFrameHeaderBytes] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                                          static_cast<char>(n >> 8), static_cast<char>(n)};
  out->append(header, kFrameHeaderBytes);
  if (mac != nullptr) out->append(HmacSha256Hex(mac->key, text));
  out->append(text);
  return Status::Ok();
}

namespace {

// Whether JSON text nests arrays and objects deeper than `limit` (brackets in strings do not
// count). Checked before parsing: the parser itself does not recurse, but copies of what it
// builds do.
bool NestsDeeperThan(const char* text, size_t n, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

std::string Printable(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    const auto next = [&](size_t k) {
      return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
    };
    char hex[16];
    if (u < 0x20 || u == 0x7f) {
      std::snprintf(hex, sizeof hex, "\\x%02X", u);
      out += hex;
    } else if (u == 0xC2 && next(1) >= 0x80 && next(1) <= 0x9F) {
      // C1 controls (U+0080..U+009F): NEL ends a line, CSI starts a terminal sequence.
      std::snprintf(hex, sizeof hex, "\\u%04X", next(1));
      out += hex;
      i += 1;
    } else if (u == 0xE2 && ((next(1) == 0x80 && next(2) >= 0xA8 && next(2) <= 0xAE) ||
                             (next(1) == 0x81 && next(2) >= 0xA6 && next(2) <= 0xA9))) {
      // Line and paragraph separators (U+2028, U+2029) and the bidirectional overrides and
      // isolates (U+202A..U+202E, U+2066..U+2069), which reorder what a reader sees.
      const unsigned code = ((u & 0x0Fu) << 12) | ((next(1) & 0x3Fu) << 6) | (next(2) & 0x3Fu);
      std::snprintf(hex, sizeof hex, "\\u%04X", code);
      out += hex;
      i += 2;
    } else {
      out += static_cast<char>(u);
    }
  }
  return out;
}

Status FrameDecoder::Fail(Status status) {
  error_ = std::move(status);
  buffer_.clear();
  start_ = 0;
  return error_;
}

Status FrameDecoder::Feed(const char* data, size_t size, std::vector<Frame>* frames) {
  if (!error_.ok()) return error_;
  if (size > 0) buffer_.append(data, size);
  paused_ = false;
  while (!paused_ && buffer_.size() - start_ >= kFrameHeaderBytes) {
    const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + start_);
    const size_t n = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
    if (n > max_frame_bytes_) {
      return Fail(Status::InvalidArgument("frame of " + std::to_string(n) +
                                          " bytes exceeds the limit of " +
                                          std::to_string(max_frame_bytes_) + " bytes"));
    }
    if (n == 0) return Fail(Status::InvalidArgument("empty frame"));
    if (buffer_.size() - start_ < kFrameHeaderBytes + n) break;
    const char* text = buffer_.data() + start_ + kFrameHeaderBytes;
    size_t length = n;                                    // of the JSON text
    const bool unauthenticated = mac_ && text[0] == '{';  // a MAC is hex, a message an object
    if (mac_ && !unauthenticated) {
      // The MAC covers the text under the direction's key: a frame altered, injected by a
      // machine on the path, or reflected from the other direction fails here.
      if (n < kFrameMacBytes ||
          !ProofsEqual(std::string_view(text, kFrameMacBytes),
                       HmacSha256Hex(mac_->key, std::string_view(text + kFrameMacBytes,
                                                                 n - kFrameMacBytes)))) {
        return Fail(Status::InvalidArgument(
            "frame fails its authentication (its MAC does not match the session's key)"));
      }
      text += kFrameMacBytes;
      length -= kFrameMacBytes;
    }
    if (NestsDeeperThan(text, length, kMaxJsonDepth)) {
      return Fail(Status::InvalidArgument("frame nests arrays or objects deeper than " +
                                          std::to_string(kMaxJsonDepth) + " levels"));
    }
    json body = json::parse(text, text + length, nullptr, /*allow_exceptions=*/false);
    start_ += kFrameHeaderBytes + n;
    if (body.is_discarded()) return Fail(Status::InvalidArgument("frame is not valid JSON"));
    if (!body.is_object()) return Fail(Status::InvalidArgument("frame is not a JSON object"));
    auto type = body.find("type");
    if (type == body.end() || !type->is_string()) {
      return Fail(Status::InvalidArgument("frame has no string 'type'"));
    }
    auto known = MessageTypeFromString(type->get_ref<const std::string&>());
    if (!known) {
      std::string name = Printable(type->get<std::string>().substr(0, 64));
      return Fail(Status::InvalidArgument("unknown message type '" + name + "'"));
    }
    frames->push_back(Frame{*known, std::move(body), mac_.has_value() && !unauthenticated});
    if (stepwise_ && !mac_) paused_ = true;
  }
  // Drop consumed bytes once they are most of the buffer, so appends stay amortised O(1).
  if (start_ > 0 && start_ * 2 >= buffer_.size()) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  return Status::Ok();
}

Result<int64_t> SeqOf(const json& j) {
  FieldReader r(j, "frame");
  return r.Int("seq", 1, kMaxInt);
}

// ---- hello ----

json ToJson(const Hello& h) {
  json slots = json::array();
  for (size_t i = 0; i < h.slots.size(); ++i) {
    const Slot& s = h.slots[i];
    slots.push_back({{"gpu", s.gpu},
                     {"device", s.device},
                     {"name", s.name},
                     {"model", s.model},
                     {"memory_bytes", s.memory_bytes},
                     {"link_group", i < h.link_group.size() ? h.link_group[i] : 0}});
  }
  json j = Message(MessageType::kHello);
  j["version"] = h.version;
  j["name"] = h.name;
  j["host"] = h.host;
  j["pid"] = h.pid;
  j["slots"] = std::move(slots);
  j["nonce"] = h.nonce;
  if (!h.folder.empty()) j["folder"] = h.folder;
  return j;
}

std::string HelloTranscript(const Hello& hello) {
  // As AppendFrame writes it (bytes that are not UTF-8 replaced), on both sides.
  return HandshakeDigest(ToJson(hello).dump(-1, ' ', false, json::error_handler_t::replace));
}

std::string WelcomeTranscript(const Hello& hello, int64_t agent_id, int heartbeat_ms,
                              int heartbeat_timeout_ms) {
  return HelloTranscript(hello) + "\n" + std::to_string(agent_id) + "\n" +
         std::to_string(heartbeat_ms) + "\n" + std::to_string(heartbeat_timeout_ms);
}

Result<Hello> HelloFromJson(const json& j) {
  FieldReader r(j, "hello");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  Hello h;
  // The version comes first: an agent of another version may send other fields.
  SWEEP_ASSIGN_OR_RETURN(int64_t version, r.Int("version", 1, kMaxInt32));
  if (version != kProtocolVersion) {
    return Status::InvalidArgument("protocol version mismatch: the agent speaks version " +
                                   std::to_string(version) + ", the coordinator version " +
                                   std::to_string(kProtocolVersion));
  }
  h.version = static_cast<int>(version);
  SWEEP_ASSIGN_OR_RETURN(h.name, r.Name("name", kMaxNameChars, false));
  SWEEP_ASSIGN_OR_RETURN(h.host, r.Name("host", kMaxNameChars, false));
  SWEEP_ASSIGN_OR_RETURN(h.pid, r.Int("pid", 1, kMaxInt32));
  SWEEP_ASSIGN_OR_RETURN(h.nonce, r.Hex("nonce", kNonceBytes));
  auto slots = j.find("slots");
  if (slots == j.end() || !slots->is_array() || slots->empty()) {
    return r.Error("slots", "must be a non-empty array");
  }
  if (slots->size() > kMaxSlots) return r.Error("slots", "has more than 4096 entries");
  std::set<int> devices;
  for (size_t i = 0; i < slots->size(); ++i) {
    FieldReader s((*slots)[i], "hello: slots", static_cast<int64_t>(i));
    SWEEP_RETURN_IF_ERROR(s.CheckObject());
    Slot slot;
    slot.index = static_cast<int>(i);
    SWEEP_ASSIGN_OR_RETURN(slot.gpu, s.Bool("gpu"));
    SWEEP_ASSIGN_OR_RETURN(int64_t device, s.Int("device", 0, kMaxInt32));
    slot.device = static_cast<int>(device);
    SWEEP_ASSIGN_OR_RETURN(slot.name, s.Name("name", kMaxNameChars, false));
    SWEEP_ASSIGN_OR_RETURN(slot.model, s.Name("model", kMaxNameChars, true));
    SWEEP_ASSIGN_OR_RETURN(slot.memory_bytes, s.Int("memory_bytes", 0, kMaxInt));
    SWEEP_ASSIGN_OR_RETURN(int64_t group, s.Int("link_group", 0, kMaxInt32));
    if (slot.gpu != (*slots)[0].value("gpu", false)) {
      return r.Error("slots", "mixes GPU and CPU slots");
    }
    if (!devices.insert(slot.device).second) {
      return s.Error("device", std::to_string(slot.device) + " is listed twice");
    }
    if (slot.gpu) h.link_group.push_back(static_cast<int>(group));
    h.slots.push_back(std::move(slot));
  }
  if (j.contains("folder")) {
    SWEEP_ASSIGN_OR_RETURN(h.folder, r.Name("folder", kMaxPathChars, false));
    if (h.folder.front() != '/') return r.Error("folder", "must be an absolute path");
  }
  return h;
}

// ---- challenge, auth, welcome ----

json ToJson(const Challenge& c) {
  json j = Message(MessageType::kChallenge);
  j["nonce"] = c.nonce;
  return j;
}

Result<Challenge> ChallengeFromJson(const json& j) {
  FieldReader r(j, "challenge");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  Challenge c;
  SWEEP_ASSIGN_OR_RETURN(c.nonce, r.Hex("nonce", kNonceBytes));
  return c;
}

json ToJson(const Auth& a) {
  json j = Message(MessageType::kAuth);
  j["proof"] = a.proof;
  return j;
}

Result<Auth> AuthFromJson(const json& j) {
  FieldReader r(j, "auth");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  Auth a;
  SWEEP_ASSIGN_OR_RETURN(a.proof, r.Hex("proof", 32));
  return a;
}

json ToJson(const Welcome& w) {
  json j = Message(MessageType::kWelcome);
  j["agent_id"] = w.agent_id;
  j["heartbeat_ms"] = w.heartbeat_ms;
  j["heartbeat_timeout_ms"] = w.heartbeat_timeout_ms;
  j["proof"] = w.proof;
  return j;
}

Result<Welcome> WelcomeFromJson(const json& j) {
  FieldReader r(j, "welcome");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  Welcome w;
  SWEEP_ASSIGN_OR_RETURN(w.agent_id, r.Int("agent_id", 1, kMaxInt));
  SWEEP_ASSIGN_OR_RETURN(int64_t hb, r.Int("heartbeat_ms", 1, 3'600'000));
  SWEEP_ASSIGN_OR_RETURN(int64_t timeout, r.Int("heartbeat_timeout_ms", 1, 86'400'000));
  if (timeout <= hb) {
    return r.Error("heartbeat_timeout_ms", "must be greater than heartbeat_ms");
  }
  w.heartbeat_ms = static_cast<int>(hb);
  w.heartbeat_timeout_ms = static_cast<int>(timeout);
  SWEEP_ASSIGN_OR_RETURN(w.proof, r.Hex("proof", 32));
  return w;
}

// ---- assign ----

json AssignToJson(const TrialTask& task) {
  json j = Message(MessageType::kAssign);
  j["task"] = ToJson(task);
  return j;
}

Result<TrialTask> AssignFromJson(const json& j) {
  FieldReader r(j, "assign");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  auto t = j.find("task");
  if (t == j.end() || !t->is_object()) return r.Error("task", "must be an object");
  auto parsed = TrialTaskFromJson(*t);
  if (!parsed.ok()) return parsed.status().WithContext("assign");
  TrialTask& task = *parsed;
  FieldReader tr(*t, "assign: task");
  if (task.number < 0) return tr.Error("number", "must be >= 0");
  if (!task.params.is_object()) return tr.Error("params", "must be an object");
  if (!task.settings.is_object()) return tr.Error("settings", "must be an object");
  if (task.threads < 1) return tr.Error("threads", "must be >= 1");
  for (int g : task.gpus) {
    if (g < 0) return tr.Error("gpus", "must hold device ordinals >= 0");
  }
  for (double p : task.decision_points) {
    if (!std::isfinite(p)) return tr.Error("decide.at", "must hold finite numbers");
  }
  return std::move(*parsed);
}

// ---- reports ----

void ReportBatchWriter::Add(int64_t trial, int64_t step, double epoch, const json& metrics) {
  reports_.push_back(
      json{{"trial", trial}, {"step", step}, {"epoch", epoch}, {"metrics", metrics}});
}

json ReportBatchWriter::Take() {
  json j = Message(MessageType::kReports);
  j["reports"] = std::move(reports_);
  reports_ = json::array();
  return j;
}

Status ReportsFromJson(json& j, std::vector<WorkerEvent>* events) {
  FieldReader r(j, "reports");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  auto list = j.find("reports");
  if (list == j.end() || !list->is_array()) return r.Error("reports", "must be an array");
  const size_t first = events->size();
  events->reserve(first + list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    json& item = (*list)[i];
    FieldReader f(item, "reports", static_cast<int64_t>(i));
    Status st = f.CheckObject();
    WorkerEvent ev;
    ev.type = WorkerEvent::Type::kReport;
    if (st.ok()) {
      auto trial = f.Int("trial", 0, kMaxInt);
      auto step = f.Int("step", 0, kMaxInt);
      auto epoch = f.Number("epoch", 0);
      st = !trial.ok() ? trial.status() : !step.ok() ? step.status() : epoch.status();
      if (st.ok()) {
        ev.trial = *trial;
        ev.step = *step;
        ev.epoch = *epoch;
        auto m = item.find("metrics");
        st = m == item.end() ? f.Error("metrics", "is missing") : CheckMetrics(*m, f, "metrics");
        if (st.ok()) ev.metrics = std::move(*m);
      }
    }
    if (!st.ok()) {
      events->resize(first);
      return st;
    }
    events->push_back(std::move(ev));
  }
  return Status::Ok();
}

// ---- done ----

json DoneToJson(const WorkerEvent& done) {
  json j = Message(MessageType::kDone);
  j["trial"] = done.trial;
  j["outcome"] = ToString(done.outcome);
  j["error"] = Abbreviate(done.error, kMaxErrorChars - 64);
  j["end_metrics"] = done.metrics.is_object() ? done.metrics : json::object();
  j["worker_lost"] = done.worker_lost;
  if (done.never_started) j["never_started"] = true;          // optional: absent means false
  if (done.metric_not_number) j["metric_not_number"] = true;  // optional too
  // Optional too (an older agent sends none); dropped when it would not fit a frame.
  if (done.info.is_object() && !done.info.empty() &&
      done.info.dump().size() <= static_cast<size_t>(kMaxErrorChars)) {
    j["info"] = done.info;
  }
  return j;
}

Result<WorkerEvent> DoneFromJson(json& j) {
  FieldReader r(j, "done");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  WorkerEvent ev;
  ev.type = WorkerEvent::Type::kDone;
  SWEEP_ASSIGN_OR_RETURN(ev.trial, r.Int("trial", 0, kMaxInt));
  SWEEP_ASSIGN_OR_RETURN(std::string outcome, r.String("outcome", 16, false));
  const std::optional<TrialOutcome::Kind> kind = OutcomeFromString(outcome);
  if (!kind) {
    return r.Error("outcome",
                   "must be completed, stopped, failed or interrupted, not '" + outcome + "'");
  }
  ev.outcome = *kind;
  SWEEP_ASSIGN_OR_RETURN(ev.error, r.String("error", kMaxErrorChars, true));
  SWEEP_ASSIGN_OR_RETURN(ev.worker_lost, r.Bool("worker_lost"));
  if (j.contains("never_started")) {
    SWEEP_ASSIGN_OR_RETURN(ev.never_started, r.Bool("never_started"));
  }
  if (j.contains("metric_not_number")) {
    SWEEP_ASSIGN_OR_RETURN(ev.metric_not_number, r.Bool("metric_not_number"));
  }
  if (auto info = j.find("info"); info != j.end()) {
    if (!info->is_object()) return r.Error("info", "must be an object");
    ev.info = std::move(*info);
  }
  auto m = j.find("end_metrics");
  if (m == j.end()) return r.Error("end_metrics", "is missing");
  SWEEP_RETURN_IF_ERROR(CheckMetrics(*m, r, "end_metrics"));
  ev.metrics = std::move(*m);
  return ev;
}

// ---- stop, continue, heartbeat, bye ----

json TrialCommandToJson(MessageType type, int64_t trial) {
  json j = Message(type);
  j["trial"] = trial;
  return j;
}

Result<int64_t> TrialCommandFromJson(const json& j) {
  FieldReader r(j, "trial command");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  return r.Int("trial", 0, kMaxInt);
}

json HeartbeatToJson() { return Message(MessageType::kHeartbeat); }

json DrainingToJson() { return Message(MessageType::kDraining); }

json ByeToJson(std::string_view reason) {
  json j = Message(MessageType::kBye);
  j["reason"] = std::string(reason.substr(0, kMaxErrorChars));
  return j;
}

Result<std::string> ByeFromJson(const json& j) {
  FieldReader r(j, "bye");
  SWEEP_RETURN_IF_ERROR(r.CheckObject());
  return r.String("reason", kMaxErrorChars, true);
}

}  // namespace sweep::executor::net
