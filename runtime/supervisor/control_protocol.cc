// runtime/supervisor/control_protocol.cc — see control_protocol.h for the wire format.
#include "runtime/supervisor/control_protocol.h"

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/core/json.h"

namespace tessera {
namespace {

constexpr std::array<const char*, 7> kPhaseNames = {
    "forward", "backward", "optimizer", "checkpoint", "collective", "eval", "idle"};
constexpr std::array<const char*, 3> kCatalogOpNames = {"put", "status", "event"};
constexpr int kCheckpointStatusCount = 5;  // CheckpointStatus::kWriting .. kDeleted

// Appended to free text cut to fit a frame (UTF-8 ellipsis).
constexpr std::string_view kTruncatedMarker = "\xe2\x80\xa6(truncated)";

// Bodies are tiny; a bound on JSON values keeps a hostile 64 KiB "[[[[..." cheap to reject.
constexpr size_t kMaxJsonValues = 256;

bool IsPrintableAscii(std::string_view s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

Status CheckText(std::string_view field, const std::string& v, size_t max_bytes, bool printable) {
  if (v.empty()) return InvalidArgument(std::string(field) + ": must not be empty");
  if (v.size() > max_bytes) {
    return InvalidArgument(std::string(field) + ": " + std::to_string(v.size()) +
                           " bytes, at most " + std::to_string(max_bytes));
  }
  if (printable && !IsPrintableAscii(v)) {
    return InvalidArgument(std::string(field) + ": must be printable ASCII");
  }
  return Status::Ok();
}

Status CheckRange(std::string_view field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return InvalidArgument(std::string(field) + ": " + std::to_string(v) + " outside [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::Ok();
}

// Reads the fields of one message object. Every key must be consumed: an unknown key means the
// peer speaks another protocol version or is hostile, and either way it is refused.
class FieldReader {
 public:
  explicit FieldReader(const JsonValue& obj) : obj_(obj) {}

  Status String(std::string_view key, std::string& out) {
    ASSIGN_OR_RETURN(const JsonValue* v, Get(key));
    if (!v->is_string()) return DataLoss(std::string(key) + ": expected a string");
    out = v->as_string();
    return Status::Ok();
  }
  Status Int(std::string_view key, int64_t& out) {
    ASSIGN_OR_RETURN(const JsonValue* v, Get(key));
    if (!v->is_integer()) return DataLoss(std::string(key) + ": expected an integer");
    out = v->as_int();
    return Status::Ok();
  }
  Status Object(std::string_view key, const JsonValue*& out) {
    ASSIGN_OR_RETURN(const JsonValue* v, Get(key));
    if (!v->is_object()) return DataLoss(std::string(key) + ": expected an object");
    out = v;
    return Status::Ok();
  }
  Status Int32(std::string_view key, int& out) {
    int64_t v = 0;
    RETURN_IF_ERROR(Int(key, v));
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      return DataLoss(std::string(key) + ": out of range");
    }
    out = static_cast<int>(v);
    return Status::Ok();
  }
  Status NoOtherKeys() const {
    for (const auto& [k, v] : obj_.members()) {
      bool known = false;
      for (const auto& seen : seen_) known = known || seen == k;
      if (!known) return DataLoss("unknown field \"" + k + "\"");
    }
    return Status::Ok();
  }

 private:
  Result<const JsonValue*> Get(std::string_view key) {
    const JsonValue* v = obj_.Find(key);
    if (v == nullptr) return DataLoss("missing field \"" + std::string(key) + "\"");
    seen_.emplace_back(key);
    return v;
  }
  const JsonValue& obj_;
  std::vector<std::string> seen_{"type"};
};

// Validation failures found while decoding are the peer's bytes being wrong: kDataLoss.
Status AsDecodeError(const Status& s) { return s.ok() ? s : DataLoss(s.message()); }

Result<std::string> Frame(JsonWriter& w) { return EncodeFrame(w.str()); }

Status CheckEntryNumber(std::string_view field, double v) {
  if (!std::isfinite(v) || v < 0) {
    return InvalidArgument(std::string(field) + ": must be finite and >= 0");
  }
  return Status::Ok();
}

// The free-text member of a record: the one the encoder may cut.
std::string* FreeText(CatalogRecordMsg& m) {
  switch (m.op) {
    case CatalogOp::kPut: return &m.entry.note;
    case CatalogOp::kStatus: return &m.note;
    case CatalogOp::kEvent: return &m.message;
  }
  return nullptr;
}

std::string CatalogBody(const CatalogRecordMsg& m) {
  JsonWriter w;
  w.BeginObject().Key("type").String("catalog").Key("op").String(CatalogOpName(m.op));
  switch (m.op) {
    case CatalogOp::kPut:
      w.Key("entry").Value(CheckpointEntryToJson(m.entry));
      break;
    case CatalogOp::kStatus:
      w.Key("step").Int(m.step).Key("status").String(CheckpointStatusName(m.status));
      w.Key("note").String(m.note);
      break;
    case CatalogOp::kEvent:
      w.Key("kind").String(m.kind).Key("message").String(m.message);
      break;
  }
  w.EndObject();
  return w.str();
}

// The longest prefix of `text` whose JSON escaping takes at most `budget` bytes, ending on a
// UTF-8 character boundary, followed by the marker. The caller reserved the marker's bytes.
std::string CutToFit(const std::string& text, size_t budget) {
  size_t used = 0, end = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t escaped = JsonQuote(std::string_view(&text[i], 1)).size() - 2;
    if (used + escaped > budget) break;
    used += escaped;
    // Only cut before a byte that starts a character (not a 10xxxxxx continuation byte).
    if (i + 1 == text.size() || (static_cast<unsigned char>(text[i + 1]) & 0xc0) != 0x80) {
      end = i + 1;
    }
  }
  return text.substr(0, end) + std::string(kTruncatedMarker);
}

// The fields of a "catalog" body after "type" (the caller checks for unknown keys).
Status DecodeCatalogRecord(FieldReader& r, CatalogRecordMsg& m) {
  std::string op;
  RETURN_IF_ERROR(r.String("op", op));
  if (op == "put") {
    m.op = CatalogOp::kPut;
    const JsonValue* entry = nullptr;
    RETURN_IF_ERROR(r.Object("entry", entry));
    Result<CheckpointEntry> e = CheckpointEntryFromJson(*entry);
    if (!e.ok()) return DataLoss("entry: " + e.status().message());
    // As strict as the message itself: the entry has exactly the fields the encoder writes.
    const JsonValue known = CheckpointEntryToJson(*e);
    for (const auto& [k, v] : entry->members()) {
      if (known.Find(k) == nullptr) return DataLoss("entry: unknown field \"" + k + "\"");
    }
    m.entry = std::move(e).value();
  } else if (op == "status") {
    m.op = CatalogOp::kStatus;
    std::string status;
    RETURN_IF_ERROR(r.Int("step", m.step));
    RETURN_IF_ERROR(r.String("status", status));
    RETURN_IF_ERROR(r.String("note", m.note));
    Result<CheckpointStatus> s = ParseCheckpointStatus(status);
    if (!s.ok()) return DataLoss("status: " + s.status().message());
    m.status = *s;
  } else if (op == "event") {
    m.op = CatalogOp::kEvent;
    RETURN_IF_ERROR(r.String("kind", m.kind));
    RETURN_IF_ERROR(r.String("message", m.message));
  } else {
    return DataLoss("op: unknown catalog op \"" + op + "\"");
  }
  return Status::Ok();
}

}  // namespace

const char* RankPhaseName(RankPhase phase) { return kPhaseNames[static_cast<size_t>(phase)]; }

Result<RankPhase> ParseRankPhase(std::string_view name) {
  for (size_t i = 0; i < kPhaseNames.size(); ++i) {
    if (name == kPhaseNames[i]) return static_cast<RankPhase>(i);
  }
  return InvalidArgument("unknown phase \"" + std::string(name) + "\"");
}

const char* ControlTransportName(ControlTransport transport) {
  return transport == ControlTransport::kUnix ? "unix" : "tcp";
}

const char* SupervisorCommandName(SupervisorCommand cmd) {
  return cmd == SupervisorCommand::kStop ? "stop" : "checkpoint_now";
}

Status ValidateHello(const HelloMsg& m) {
  RETURN_IF_ERROR(CheckText("run_id", m.run_id, kControlMaxRunIdBytes, true));
  RETURN_IF_ERROR(CheckRange("incarnation", m.incarnation, 0, std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(CheckRange("world_size", m.world_size, 1, kControlMaxWorldSize));
  RETURN_IF_ERROR(CheckRange("rank", m.rank, 0, m.world_size - 1));
  RETURN_IF_ERROR(CheckRange("pid", m.pid, 1, std::numeric_limits<int32_t>::max()));
  RETURN_IF_ERROR(CheckText("host", m.host, kControlMaxHostBytes, true));
  return CheckText("secret", m.secret, kControlMaxSecretBytes, false);
}

Status ValidateHeartbeat(const HeartbeatMsg& m) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (static_cast<size_t>(m.phase) >= kPhaseNames.size()) return InvalidArgument("phase: invalid");
  RETURN_IF_ERROR(CheckRange("step", m.step, 0, kMax));
  RETURN_IF_ERROR(CheckRange("collective_seq", m.collective_seq, 0, kMax));
  RETURN_IF_ERROR(CheckRange("compute_ms", m.compute_ms, -1, kControlMaxComputeMs));
  return CheckRange("unix_ms", m.unix_ms, 0, kMax);
}

Status ValidateCommit(const CommitMsg& m) {
  return CheckRange("step", m.step, 0, std::numeric_limits<int64_t>::max());
}

Status ValidateBye(const ByeMsg& m) { return CheckRange("exit_code", m.exit_code, 0, 255); }

const char* CatalogOpName(CatalogOp op) { return kCatalogOpNames[static_cast<size_t>(op)]; }

Status ValidateCatalogRecord(const CatalogRecordMsg& m) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const auto valid_status = [](CheckpointStatus s) {
    return static_cast<int>(s) >= 0 && static_cast<int>(s) < kCheckpointStatusCount;
  };
  switch (m.op) {
    case CatalogOp::kPut: {
      const CheckpointEntry& e = m.entry;
      RETURN_IF_ERROR(CheckRange("entry.step", e.step, 0, kMax));
      if (!valid_status(e.status)) return InvalidArgument("entry.status: invalid");
      if (e.bytes > static_cast<uint64_t>(kMax)) return InvalidArgument("entry.bytes: too large");
      if (e.dir.size() > kControlMaxCatalogFieldBytes) {
        return InvalidArgument("entry.dir: " + std::to_string(e.dir.size()) + " bytes, at most " +
                               std::to_string(kControlMaxCatalogFieldBytes));
      }
      if (e.layout.size() > kControlMaxCatalogFieldBytes) {
        return InvalidArgument("entry.layout: " + std::to_string(e.layout.size()) +
                               " bytes, at most " + std::to_string(kControlMaxCatalogFieldBytes));
      }
      RETURN_IF_ERROR(CheckEntryNumber("entry.stall_seconds", e.stall_seconds));
      RETURN_IF_ERROR(CheckEntryNumber("entry.write_seconds", e.write_seconds));
      return CheckEntryNumber("entry.commit_unix_s", e.commit_unix_s);
    }
    case CatalogOp::kStatus:
      RETURN_IF_ERROR(CheckRange("step", m.step, 0, kMax));
      if (!valid_status(m.status)) return InvalidArgument("status: invalid");
      return Status::Ok();
    case CatalogOp::kEvent:
      return CheckText("kind", m.kind, kControlMaxCatalogKindBytes, true);
  }
  return InvalidArgument("op: invalid");
}

Result<std::string> EncodeHello(const HelloMsg& m) {
  RETURN_IF_ERROR(ValidateHello(m));
  JsonWriter w;
  w.BeginObject().Key("type").String("hello").Key("run_id").String(m.run_id);
  w.Key("incarnation").Int(m.incarnation).Key("rank").Int(m.rank);
  w.Key("world_size").Int(m.world_size).Key("pid").Int(m.pid).Key("host").String(m.host);
  w.Key("secret").String(m.secret).EndObject();
  return Frame(w);
}

Result<std::string> EncodeHeartbeat(const HeartbeatMsg& m) {
  RETURN_IF_ERROR(ValidateHeartbeat(m));
  JsonWriter w;
  w.BeginObject().Key("type").String("heartbeat").Key("step").Int(m.step);
  w.Key("phase").String(RankPhaseName(m.phase)).Key("collective_seq").Int(m.collective_seq);
  w.Key("compute_ms").Int(m.compute_ms).Key("unix_ms").Int(m.unix_ms).EndObject();
  return Frame(w);
}

Result<std::string> EncodeCommit(const CommitMsg& m) {
  RETURN_IF_ERROR(ValidateCommit(m));
  JsonWriter w;
  w.BeginObject().Key("type").String("commit").Key("step").Int(m.step);
  w.Key("tier").String(m.memory ? "memory" : "disk").EndObject();
  return Frame(w);
}

Result<std::string> EncodeBye(const ByeMsg& m) {
  RETURN_IF_ERROR(ValidateBye(m));
  JsonWriter w;
  w.BeginObject().Key("type").String("bye").Key("exit_code").Int(m.exit_code).EndObject();
  return Frame(w);
}

Result<std::string> EncodeCatalogRecord(const CatalogRecordMsg& m) {
  RETURN_IF_ERROR(ValidateCatalogRecord(m));
  std::string body = CatalogBody(m);
  if (body.size() > kControlMaxFrameBytes) {
    // Diagnostics text is worth less than the record itself: keep what fits, say it was cut.
    CatalogRecordMsg cut = m;
    std::string* text = FreeText(cut);
    const std::string full = std::move(*text);
    text->clear();
    const size_t fixed = CatalogBody(cut).size() + kTruncatedMarker.size();
    // Validation bounds every other field, so the fixed part always leaves room.
    if (fixed > kControlMaxFrameBytes) return InvalidArgument("catalog record does not fit a frame");
    *text = CutToFit(full, kControlMaxFrameBytes - fixed);
    body = CatalogBody(cut);
  }
  return EncodeFrame(body);
}

Status ApplyCatalogRecord(const CatalogRecordMsg& record, CatalogSink& sink) {
  switch (record.op) {
    case CatalogOp::kPut: return sink.Put(record.entry);
    case CatalogOp::kStatus: return sink.SetStatus(record.step, record.status, record.note);
    case CatalogOp::kEvent: return sink.AddEvent(record.kind, record.message);
  }
  return InvalidArgument("catalog record: invalid op");
}

std::string EncodeCommand(SupervisorCommand cmd) {
  JsonWriter w;
  w.BeginObject().Key("cmd").String(SupervisorCommandName(cmd)).EndObject();
  Result<std::string> frame = EncodeFrame(w.str());
  return std::move(frame).value();  // a fixed ~20-byte body always fits
}

Result<size_t> DecodeFrameLength(const unsigned char header[kControlFrameHeaderBytes]) {
  const uint32_t len = static_cast<uint32_t>(header[0]) | (static_cast<uint32_t>(header[1]) << 8) |
                       (static_cast<uint32_t>(header[2]) << 16) |
                       (static_cast<uint32_t>(header[3]) << 24);
  if (len == 0) return DataLoss("empty frame");
  if (len > kControlMaxFrameBytes) {
    return DataLoss("frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                    std::to_string(kControlMaxFrameBytes));
  }
  return static_cast<size_t>(len);
}

Result<std::string> EncodeFrame(std::string_view body) {
  if (body.empty() || body.size() > kControlMaxFrameBytes) {
    return InvalidArgument("frame body of " + std::to_string(body.size()) + " bytes outside [1, " +
                           std::to_string(kControlMaxFrameBytes) + "]");
  }
  const auto len = static_cast<uint32_t>(body.size());
  std::string out;
  out.reserve(kControlFrameHeaderBytes + body.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out.append(body);
  return out;
}

Result<RankMessage> DecodeRankMessage(std::string_view body) {
  ASSIGN_OR_RETURN(JsonValue root, ParseJson(body, kMaxJsonValues));
  if (!root.is_object()) return DataLoss("message is not a JSON object");
  const JsonValue* type = root.Find("type");
  if (type == nullptr || !type->is_string()) return DataLoss("missing string field \"type\"");
  FieldReader r(root);
  RankMessage msg;
  const std::string& t = type->as_string();
  if (t == "hello") {
    msg.type = RankMessageType::kHello;
    HelloMsg& h = msg.hello;
    RETURN_IF_ERROR(r.String("run_id", h.run_id));
    RETURN_IF_ERROR(r.Int("incarnation", h.incarnation));
    RETURN_IF_ERROR(r.Int32("rank", h.rank));
    RETURN_IF_ERROR(r.Int32("world_size", h.world_size));
    RETURN_IF_ERROR(r.Int("pid", h.pid));
    RETURN_IF_ERROR(r.String("host", h.host));
    RETURN_IF_ERROR(r.String("secret", h.secret));
    RETURN_IF_ERROR(r.NoOtherKeys());
    RETURN_IF_ERROR(AsDecodeError(ValidateHello(h)));
  } else if (t == "heartbeat") {
    msg.type = RankMessageType::kHeartbeat;
    HeartbeatMsg& hb = msg.heartbeat;
    std::string phase;
    RETURN_IF_ERROR(r.Int("step", hb.step));
    RETURN_IF_ERROR(r.String("phase", phase));
    RETURN_IF_ERROR(r.Int("collective_seq", hb.collective_seq));
    RETURN_IF_ERROR(r.Int("compute_ms", hb.compute_ms));
    RETURN_IF_ERROR(r.Int("unix_ms", hb.unix_ms));
    RETURN_IF_ERROR(r.NoOtherKeys());
    Result<RankPhase> p = ParseRankPhase(phase);
    if (!p.ok()) return DataLoss(p.status().message());
    hb.phase = *p;
    RETURN_IF_ERROR(AsDecodeError(ValidateHeartbeat(hb)));
  } else if (t == "commit") {
    msg.type = RankMessageType::kCommit;
    RETURN_IF_ERROR(r.Int("step", msg.commit.step));
    std::string tier;
    RETURN_IF_ERROR(r.String("tier", tier));
    if (tier != "disk" && tier != "memory") return DataLoss("tier: \"" + tier + "\" is neither disk nor memory");
    msg.commit.memory = tier == "memory";
    RETURN_IF_ERROR(r.NoOtherKeys());
    RETURN_IF_ERROR(AsDecodeError(ValidateCommit(msg.commit)));
  } else if (t == "bye") {
    msg.type = RankMessageType::kBye;
    RETURN_IF_ERROR(r.Int32("exit_code", msg.bye.exit_code));
    RETURN_IF_ERROR(r.NoOtherKeys());
    RETURN_IF_ERROR(AsDecodeError(ValidateBye(msg.bye)));
  } else if (t == "catalog") {
    msg.type = RankMessageType::kCatalog;
    RETURN_IF_ERROR(DecodeCatalogRecord(r, msg.catalog));
    RETURN_IF_ERROR(r.NoOtherKeys());
    RETURN_IF_ERROR(AsDecodeError(ValidateCatalogRecord(msg.catalog)));
  } else {
    return DataLoss("unknown message type \"" + t + "\"");
  }
  return msg;
}

Result<SupervisorCommand> DecodeCommand(std::string_view body) {
  ASSIGN_OR_RETURN(JsonValue root, ParseJson(body, kMaxJsonValues));
  if (!root.is_object() || root.members().size() != 1) {
    return DataLoss("command is not an object with exactly one field");
  }
  const JsonValue* cmd = root.Find("cmd");
  if (cmd == nullptr || !cmd->is_string()) return DataLoss("missing string field \"cmd\"");
  if (cmd->as_string() == "stop") return SupervisorCommand::kStop;
  if (cmd->as_string() == "checkpoint_now") return SupervisorCommand::kCheckpointNow;
  return DataLoss("unknown command \"" + cmd->as_string() + "\"");
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Walk all of `a` whatever `b` holds; fold every difference into one accumulator.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const unsigned char bc = b.empty() ? 0 : static_cast<unsigned char>(b[i % b.size()]);
    diff = diff | (static_cast<unsigned char>(a[i]) ^ bc);
  }
  return diff == 0;
}

}  // namespace tessera
