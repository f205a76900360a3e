// tests/fuzz/control_frame_fuzz.cc — the control-protocol decoder
// (runtime/supervisor/control_protocol.h) on arbitrary bytes taken as what a peer sent over
// one connection: frames (4-byte little-endian length, JSON body) back to back.
//
// Each frame is decoded both ways a process reads one: as a rank's message
// (DecodeRankMessage, the supervisor's side) and as a supervisor command (DecodeCommand, the
// rank's side). A bad length ends the stream, as the server then closes the connection; a
// frame cut short by the end of the input is dropped.
//
// Properties: no crash, hang or unbounded allocation; DecodeFrameLength accepts exactly
// [1, kControlMaxFrameBytes]; a refusal is kDataLoss with a message; every decoded message
// re-encodes (the encoder accepts whatever the decoder accepted: "a frame that leaves a
// process always decodes on the other side", read backwards), and that frame decodes and
// re-encodes to the same bytes.
#include <string>

#include "runtime/supervisor/control_protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace tessera {
namespace {

Result<std::string> Encode(const RankMessage& m) {
  switch (m.type) {
    case RankMessageType::kHello: return EncodeHello(m.hello);
    case RankMessageType::kHeartbeat: return EncodeHeartbeat(m.heartbeat);
    case RankMessageType::kCommit: return EncodeCommit(m.commit);
    case RankMessageType::kBye: return EncodeBye(m.bye);
    case RankMessageType::kCatalog: return EncodeCatalogRecord(m.catalog);
  }
  return Internal("unknown message type");
}

// The body of a frame the encoder produced (its header checked).
std::string_view BodyOf(const std::string& frame) {
  FUZZ_CHECK(frame.size() > kControlFrameHeaderBytes, "encoded frame of %zu bytes", frame.size());
  const auto* header = reinterpret_cast<const unsigned char*>(frame.data());
  Result<size_t> len = DecodeFrameLength(header);
  FUZZ_CHECK(len.ok() && *len == frame.size() - kControlFrameHeaderBytes,
             "encoded frame header does not match its body");
  return std::string_view(frame).substr(kControlFrameHeaderBytes);
}

void CheckRankMessage(std::string_view body) {
  Result<RankMessage> m = DecodeRankMessage(body);
  if (!m.ok()) {
    fuzz::CheckRefusal(m.status(), StatusCode::kDataLoss, "DecodeRankMessage");
    return;
  }
  Result<std::string> frame = Encode(*m);
  FUZZ_CHECK(frame.ok(), "a decoded message does not re-encode: %s",
             frame.status().message().c_str());
  Result<RankMessage> again = DecodeRankMessage(BodyOf(*frame));
  FUZZ_CHECK(again.ok(), "a re-encoded message does not decode: %s",
             again.status().message().c_str());
  FUZZ_CHECK(again->type == m->type, "the message type changed in a round trip");
  Result<std::string> frame2 = Encode(*again);
  FUZZ_CHECK(frame2.ok() && *frame2 == *frame, "a round trip changed the message");
}

void CheckCommand(std::string_view body) {
  Result<SupervisorCommand> cmd = DecodeCommand(body);
  if (!cmd.ok()) {
    fuzz::CheckRefusal(cmd.status(), StatusCode::kDataLoss, "DecodeCommand");
    return;
  }
  const std::string frame = EncodeCommand(*cmd);
  Result<SupervisorCommand> again = DecodeCommand(BodyOf(frame));
  FUZZ_CHECK(again.ok() && *again == *cmd, "a command changed in a round trip");
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  size_t pos = 0;
  while (size - pos >= kControlFrameHeaderBytes) {
    Result<size_t> len = DecodeFrameLength(data + pos);
    const uint32_t raw = static_cast<uint32_t>(data[pos]) | (uint32_t{data[pos + 1]} << 8) |
                         (uint32_t{data[pos + 2]} << 16) | (uint32_t{data[pos + 3]} << 24);
    FUZZ_CHECK(len.ok() == (raw >= 1 && raw <= kControlMaxFrameBytes),
               "frame length %u %s", raw, len.ok() ? "accepted" : "refused");
    if (!len.ok()) {
      fuzz::CheckRefusal(len.status(), StatusCode::kDataLoss, "DecodeFrameLength");
      return 0;
    }
    pos += kControlFrameHeaderBytes;
    if (*len > size - pos) return 0;
    const std::string_view body = fuzz::AsText(data + pos, *len);
    CheckRankMessage(body);
    CheckCommand(body);
    pos += *len;
  }
  return 0;
}
