// runtime/supervisor/control_protocol.h — the wire format between ranks and the supervisor.
//
// Owns: message structs, their validation, and pure encode/decode functions. No sockets here.
//
// Wire format: a frame is a 4-byte little-endian body length followed by a JSON object body
// (runtime/core/json.h). A length of 0 or above kControlMaxFrameBytes is a protocol error; the
// receiver closes the connection rather than trying to resynchronise (a peer that sent one bad
// frame is not trusted with the next).
//
// Rank -> supervisor, every body has "type":
//   hello     {run_id, incarnation, rank, world_size, pid, host, secret}  first frame, once
//   heartbeat {step, phase, collective_seq, compute_ms, unix_ms}          from a side thread
//   commit    {step, tier: "disk" | "memory"}                               a checkpoint committed, or a
//                                                                         snapshot held in memory
//   catalog   {op, ...}: a catalog write the supervisor performs for the coordinator, which
//             does not open the catalog itself under a supervisor (single writer):
//             op "put"    {entry: CheckpointEntry as CheckpointEntryToJson writes it}
//             op "status" {step, status, note}
//             op "event"  {kind, message}
//             The free text (a put's entry.note, a status's note, an event's message) is
//             diagnostics: EncodeCatalogRecord cuts it so the frame fits kControlMaxFrameBytes,
//             ending it with "…(truncated)", rather than losing the record.
//   bye       {exit_code}                                                 clean shutdown
// Supervisor -> rank: {"cmd": "checkpoint_now"} | {"cmd": "stop"}.
//
// Transports: the same frames, byte for byte, over TCP or a Unix domain socket (the
// supervisor's local ranks use the socket, ranks on other hosts TCP; control_server.h).
//
// Decoding is strict: unknown keys, missing keys, wrong JSON types, out-of-range values and
// unknown phase names are kDataLoss errors naming the field. Encoding validates the same rules
// (kInvalidArgument), so a frame that leaves a process always decodes on the other side.
// Thread-safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "checkpoint/catalog.h"
#include "runtime/core/status.h"

namespace tessera {

// Hard upper bound on one frame's body, bytes. Real frames are < 1 KiB; the bound caps what a
// hostile client can make the supervisor allocate per connection.
inline constexpr size_t kControlMaxFrameBytes = 64 * 1024;
inline constexpr size_t kControlFrameHeaderBytes = 4;
// Field limits (bytes) enforced by validation.
inline constexpr size_t kControlMaxRunIdBytes = 128;
inline constexpr size_t kControlMaxHostBytes = 255;
inline constexpr size_t kControlMaxSecretBytes = 256;
inline constexpr int kControlMaxWorldSize = 1 << 20;
// Upper bound on a heartbeat's compute_ms (about 11.6 days: far above any real step).
inline constexpr int64_t kControlMaxComputeMs = 1'000'000'000;
inline constexpr size_t kControlMaxCatalogKindBytes = 64;
// A catalog entry's dir and layout (short names; the bound keeps a put within one frame).
inline constexpr size_t kControlMaxCatalogFieldBytes = 4096;

// The stream a connection runs over.
enum class ControlTransport { kTcp, kUnix };
const char* ControlTransportName(ControlTransport transport);  // "tcp" | "unix"

// What a rank is doing at the moment of a heartbeat.
enum class RankPhase { kForward, kBackward, kOptimizer, kCheckpoint, kCollective, kEval, kIdle };
const char* RankPhaseName(RankPhase phase);
// "forward" | "backward" | "optimizer" | "checkpoint" | "collective" | "eval" | "idle".
Result<RankPhase> ParseRankPhase(std::string_view name);

struct HelloMsg {
  std::string run_id;       // non-empty, printable ASCII, <= kControlMaxRunIdBytes
  int64_t incarnation = 0;  // >= 0; bumped by the supervisor at every (re)launch
  int rank = 0;             // [0, world_size)
  int world_size = 1;       // [1, kControlMaxWorldSize]
  int64_t pid = 0;          // [1, 2^31)
  std::string host;         // non-empty, printable ASCII, <= kControlMaxHostBytes
  std::string secret;       // non-empty, <= kControlMaxSecretBytes
};

struct HeartbeatMsg {
  int64_t step = 0;  // >= 0: the step the rank is working on
  RankPhase phase = RankPhase::kIdle;
  int64_t collective_seq = 0;  // >= 0: sequence number of the last collective entered
  int64_t unix_ms = 0;         // >= 0: the rank's wall clock (diagnostics only; never compared)
  // [-1, kControlMaxComputeMs]: how long the rank's recent steps took outside waits for
  // collectives (per step: wall time minus the time its threads were blocked in Work::Wait;
  // the rank sends the mean of its last few completed steps), ms; -1 until the rank has
  // completed a step in this incarnation. The straggler signal.
  int64_t compute_ms = -1;
};

struct CommitMsg {
  int64_t step = 0;  // >= 0: step of the checkpoint that was committed
  bool memory = false;  // "tier": "memory" — held by the memory tier (host_tier.h), not on disk
};

struct ByeMsg {
  int exit_code = 0;  // [0, 255]: the exit code the rank is about to return (exit_codes.h)
};

// A catalog write relayed by the coordinator (catalog.h names the fields and their meaning).
enum class CatalogOp { kPut, kStatus, kEvent };
const char* CatalogOpName(CatalogOp op);  // "put" | "status" | "event"
struct CatalogRecordMsg {
  CatalogOp op = CatalogOp::kEvent;
  CheckpointEntry entry;  // kPut: step >= 0, numbers finite and >= 0, dir and layout
                          //   <= kControlMaxCatalogFieldBytes
  int64_t step = 0;       // kStatus: >= 0
  CheckpointStatus status = CheckpointStatus::kCommitted;  // kStatus
  std::string note;       // kStatus (cut to fit by the encoder)
  std::string kind;       // kEvent: non-empty, printable ASCII, <= kControlMaxCatalogKindBytes
  std::string message;    // kEvent (cut to fit by the encoder)
};

enum class RankMessageType { kHello, kHeartbeat, kCommit, kBye, kCatalog };

// One decoded rank->supervisor message; only the member named by `type` is meaningful.
struct RankMessage {
  RankMessageType type = RankMessageType::kHeartbeat;
  HelloMsg hello;
  HeartbeatMsg heartbeat;
  CommitMsg commit;
  ByeMsg bye;
  CatalogRecordMsg catalog;
};

enum class SupervisorCommand { kCheckpointNow, kStop };
const char* SupervisorCommandName(SupervisorCommand cmd);

// Validation shared by encoders and decoders (kInvalidArgument naming the field).
Status ValidateHello(const HelloMsg& m);
Status ValidateHeartbeat(const HeartbeatMsg& m);
Status ValidateCommit(const CommitMsg& m);
Status ValidateBye(const ByeMsg& m);
// Fields in range; with that, the encoding fits a frame once the free text is cut.
Status ValidateCatalogRecord(const CatalogRecordMsg& m);

// Encoders return a complete frame (header + body), ready to write.
Result<std::string> EncodeHello(const HelloMsg& m);
Result<std::string> EncodeHeartbeat(const HeartbeatMsg& m);
Result<std::string> EncodeCommit(const CommitMsg& m);
Result<std::string> EncodeBye(const ByeMsg& m);
// Cuts the free text to fit (see the wire format above); the rest is sent as it is.
Result<std::string> EncodeCatalogRecord(const CatalogRecordMsg& m);
std::string EncodeCommand(SupervisorCommand cmd);

// Frame header -> body length. kDataLoss if the length is 0 or > kControlMaxFrameBytes.
Result<size_t> DecodeFrameLength(const unsigned char header[kControlFrameHeaderBytes]);
// Wraps `body` in a frame. kInvalidArgument if empty or larger than kControlMaxFrameBytes.
Result<std::string> EncodeFrame(std::string_view body);

// Body (without header) -> message. kDataLoss on any malformed or out-of-range content.
Result<RankMessage> DecodeRankMessage(std::string_view body);
Result<SupervisorCommand> DecodeCommand(std::string_view body);

// Performs a relayed catalog write on `sink` (the supervisor's catalog): put -> Put,
// status -> SetStatus, event -> AddEvent. Returns the sink's status.
Status ApplyCatalogRecord(const CatalogRecordMsg& record, CatalogSink& sink);

// Equal contents, in time that depends only on the lengths, never on where the first
// difference is (secret checks must not leak a prefix through timing).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace tessera
