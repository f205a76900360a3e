// runtime/supervisor/control_client.h — a rank's end of the control plane.
//
// Owns: one connection to the supervisor (Boost.Asio behind a pimpl) and a side thread
// that sends heartbeats every heartbeat_interval_ms, built from values the trainer publishes
// through atomics (SetStep, SetPhase, SetCollectiveSeq, SetComputeMs), forwards commit reports, and receives
// commands (checkpoint_now, stop), exposed as atomic flags plus an optional callback.
//
// Never blocks training: the setters are relaxed atomic stores, ReportCommit only hands a
// frame to the side thread, and the flags are atomic loads. If the supervisor goes away
// (connection closed, write error, garbage from it), the client records it in
// supervisor_lost(), closes the socket and stops trying; it does not reconnect, because a
// supervisor that lost this rank is already tearing the job down. Heartbeats are coalesced:
// while a write is still in flight the next tick is skipped, so a slow supervisor never makes
// frames pile up.
//
// Transport: the supervisor's Unix domain socket when unix_socket_path is set and the socket is
// usable here, else TCP to address:port. Usable = CheckPrivateSocket passes (a socket in a
// directory of this user's that no other user can enter: private_socket.h) and connect and
// hello succeed on it. A rank on another host normally finds no such path and a rank whose
// socket fails takes TCP the same way; unix_socket_status() says why. The frames are the same
// on both.
//
// Threading: all public methods are thread-safe. on_command runs on the side thread; it must
// be quick and must not call Shutdown() or destroy the client. Shutdown(code) sends bye and
// closes (bounded by its timeout); the destructor closes WITHOUT bye, so a rank torn down any
// other way looks to the supervisor like the abnormal exit it is.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/core/status.h"
#include "runtime/supervisor/control_protocol.h"

namespace tessera {

struct ControlClientOptions {
  // The supervisor's Unix socket (rank_env.h kEnvControlSocket); empty (default): TCP only.
  std::string unix_socket_path;
  // Supervisor address (IP literal or host name) and port, as handed out by the launcher; the
  // fallback when the Unix socket is not set or not usable. port 0: no TCP (then the socket
  // must work).
  std::string address = "127.0.0.1";
  uint16_t port = 0;
  // This rank's identity and the run's secret; validated by EncodeHello.
  HelloMsg hello;
  // Bound on connect + sending hello, ms, per transport tried (a host name's lookup runs in the
  // system resolver and is not interrupted by it: launchers pass IP literals). Default 5000,
  // range [1, 600000].
  int connect_timeout_ms = 5000;
  // Time between heartbeats, ms. Default 200, range [1, 60000]. The supervisor's
  // heartbeat_timeout_s must be several intervals long.
  int heartbeat_interval_ms = 200;
  // Called on the side thread for every command received (after the flags are set). Optional.
  std::function<void(SupervisorCommand)> on_command;
  // Called on the side thread just before each heartbeat is encoded, with the values from the
  // setters already filled in; it may overwrite them (the rank's adapter samples the comm
  // layer's activity here: phase kCollective while a wait is blocked, the collective count).
  // Must be quick and thread-safe. Optional.
  std::function<void(HeartbeatMsg&)> before_heartbeat;
};

class ControlClient {
 public:
  // Connects (Unix socket first, see above) and sends hello, or fails with kInvalidArgument
  // (bad options), kTimeout or kIoError. Success means hello was sent, not that it was
  // accepted: a rejected client sees its connection closed and supervisor_lost() turn true.
  static Result<std::unique_ptr<ControlClient>> Connect(const ControlClientOptions& options);

  // The transport the connection runs over.
  ControlTransport transport() const;
  // OK when the connection runs over the Unix socket; else why not: kNotFound (no path set,
  // or none on this host: the normal case on another host), or the check or connect failure.
  const Status& unix_socket_status() const;
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Published in the next heartbeat. Negative values are clamped to 0.
  void SetStep(int64_t step);
  void SetPhase(RankPhase phase);
  void SetCollectiveSeq(int64_t seq);
  // The rank's recent step time outside waits for collectives, ms (HeartbeatMsg::compute_ms;
  // -1 = not measured yet, the initial value). Clamped to [-1, kControlMaxComputeMs]. Call it
  // BEFORE the SetStep that starts the next step: a heartbeat that carries the new step then
  // carries this value too.
  void SetComputeMs(int64_t compute_ms);
  // Queues a commit report for checkpoint `step` (>= 0). Dropped if the supervisor is lost.
  void ReportCommit(int64_t step, bool memory_tier = false);
  // Queues a catalog write for the supervisor to perform (validated; an invalid record is
  // dropped and reported through the return value). Dropped if the supervisor is lost.
  Status SendCatalogRecord(const CatalogRecordMsg& record);
  // Waits until everything queued so far is written to the socket (a SIGKILL after that still
  // delivers it). kAborted when the supervisor is lost or the queue did not drain in time.
  Status Flush(int timeout_ms);

  // Set by checkpoint_now; stays set until ConsumeCheckpointRequest() clears it.
  bool checkpoint_requested() const;
  // Returns whether a request was pending and clears it (the trainer calls it when it starts
  // the checkpoint, so a request arriving during that save is not lost).
  bool ConsumeCheckpointRequest();
  // Set by stop; sticky.
  bool stop_requested() const;
  // True once the connection to the supervisor is gone; lost_reason() says why.
  bool supervisor_lost() const;
  std::string lost_reason() const;

  // Sends bye {exit_code} (0..255), closes, joins the side thread; waits at most timeout_ms
  // for the bye to be written. kAborted if the supervisor was already lost or the bye could
  // not be written in time (closed anyway). Idempotent: later calls return OK.
  Status Shutdown(int exit_code, int timeout_ms = 1000);

 private:
  struct Impl;
  explicit ControlClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
