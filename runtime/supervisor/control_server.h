// runtime/supervisor/control_server.h — the supervisor's end of the control plane.
//
// Owns: a TCP listener and, when asked for, a Unix domain socket listener (Boost.Asio, hidden
// behind a pimpl so this header stays Asio-free), one io thread, every rank connection, and
// the per-rank state table of one incarnation of a run.
//
// Listeners: TCP on bind_address:port, for ranks on other hosts; and, when
// unix_socket_parent is set, a Unix domain socket at <parent>/tessera-XXXXXX/control.sock in a
// directory the server creates with mkdtemp (mode 0700, owned by the server's user) and
// removes, socket included, when it stops or fails to start. The directory's mode is the
// protection: another local user cannot even connect, so a flood of idle connections from one
// cannot delay the registration of the local ranks, which use the socket. Both listeners feed
// the same connection code; what follows holds for both.
//
// Connections: a peer must send a valid hello as its first frame within hello_timeout_ms. The
// hello is checked against the run (secret compared in constant time, run_id, incarnation,
// world_size, rank range, and no live connection already holding that rank); a peer that fails
// any check, sends a malformed or oversized frame, or stays silent is closed and reported as a
// kRejected event with the reason. Unregistered connections are capped per listener
// (max_pending_connections); at the cap the OLDEST unregistered connection of that listener is
// closed (kRejected) to admit the new one: a real rank sends its hello right after connecting,
// so idle sockets held open cannot keep it out, and a flood over TCP never touches the Unix
// socket's count. The ranks already registered are never affected by any of it.
// After hello the connection belongs to its rank: heartbeats, commits and bye update the
// rank's state. A protocol error on a registered connection closes it (kDisconnected with the
// reason), because a rank that sends garbage cannot be trusted to keep working. A catalog
// frame becomes a kCatalog event carrying the record; the server touches no catalog itself
// (the event's consumer, the catalog's single writer, performs it: ApplyCatalogRecord).
//
// Crash detection: a rank process that dies has its socket closed by the kernel; the pending
// read completes at once and kDisconnected is reported with the steady-clock time it was seen
// (milliseconds on loopback; control_plane_test measures it).
//
// Threading: Start() spawns the io thread; all socket work happens there. The event callback
// runs ON THE IO THREAD, with no internal lock held: it may call Snapshot() and Broadcast(),
// must return quickly (it delays every other connection), and must not call Stop() or destroy
// the server. Snapshot(), Broadcast(), port(), unix_socket_path(), rejected_connections() and
// Stop() are thread-safe. Stop() is idempotent; the destructor calls it. No events are
// reported after Stop() returns. A server killed with SIGKILL leaves its socket directory
// behind (nothing runs to remove it); it holds no secret.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/supervisor/control_protocol.h"

namespace tessera {

struct ControlServerOptions {
  // IPv4/IPv6 literal to listen on. Default loopback: the control plane carries a secret in
  // clear text, so exposing it beyond the host is an explicit choice (multi-host runs).
  std::string bind_address = "127.0.0.1";
  // TCP port; 0 (default) lets the OS pick a free one, read it back with port().
  uint16_t port = 0;
  // Identity of the run and of this launch; hellos must match both. run_id non-empty.
  std::string run_id;
  int64_t incarnation = 0;  // >= 0; a hello from another incarnation is rejected as stale
  int world_size = 1;       // [1, kControlMaxWorldSize]; ranks are [0, world_size)
  // Shared secret handed to the ranks by the launcher; non-empty, <= kControlMaxSecretBytes.
  std::string secret;
  // Existing directory in which to create the Unix socket's private directory
  // (<parent>/tessera-XXXXXX/control.sock). Empty (default): no Unix socket, TCP only. The
  // whole path must fit a sockaddr_un (kSocketPathMax bytes, else kInvalidArgument;
  // ControlSocketParent in private_socket.h picks a parent that fits); a parent where the
  // directory cannot be made is a kIoError from Start.
  std::string unix_socket_parent;
  // Time a new connection has to deliver its hello, ms. Default 5000, range [1, 600000].
  int hello_timeout_ms = 5000;
  // Connections accepted but not yet registered, at most, per listener (TCP and the Unix
  // socket each). At the cap the oldest of them is closed to admit a new one (bounds what a
  // flood of idle sockets can hold, and keeps a fresh connection's hello from being shut out).
  // Default 256, >= 1.
  int max_pending_connections = 256;
};

enum class ControlEventKind { kRegistered, kHeartbeat, kCommit, kBye, kDisconnected, kRejected, kCatalog };
const char* ControlEventKindName(ControlEventKind kind);

struct ControlEvent {
  ControlEventKind kind = ControlEventKind::kRejected;
  // Rank concerned; -1 for a rejection before a hello naming a rank could be read.
  int rank = -1;
  // When the server saw it (steady clock; compare with steady_clock::now()).
  std::chrono::steady_clock::time_point time;
  ControlTransport transport = ControlTransport::kTcp;  // the listener it came through
  // TCP: remote "address:port"; Unix: "unix:pid=P,uid=U" (the kernel's word for the peer).
  std::string peer;
  std::string reason;                  // kRejected: why; kDisconnected: how the connection ended
  int64_t step = -1;                   // kHeartbeat, kCommit: the step reported
  bool memory_tier = false;            // kCommit: held in memory, not committed on disk
  RankPhase phase = RankPhase::kIdle;  // kHeartbeat
  int64_t collective_seq = -1;         // kHeartbeat
  int64_t compute_ms = -1;             // kHeartbeat: last step's time outside waits; -1 unknown
  int exit_code = -1;                  // kBye, and kDisconnected after a bye; else -1
  CatalogRecordMsg catalog;            // kCatalog: the write the rank asks for
};

// What the server knows of one rank. Times are steady-clock; default-constructed = never.
struct RankState {
  int rank = 0;
  bool connected = false;  // a registered connection is open now
  bool ever_registered = false;
  int64_t pid = 0;
  std::string host;
  ControlTransport transport = ControlTransport::kTcp;  // of the newest registration
  std::chrono::steady_clock::time_point registered_at;
  std::chrono::steady_clock::time_point last_heartbeat;
  std::chrono::steady_clock::time_point disconnected_at;
  int64_t heartbeats = 0;  // heartbeats received over all connections of this rank
  int64_t step = -1;       // from the last heartbeat; -1 before the first
  RankPhase phase = RankPhase::kIdle;
  int64_t collective_seq = -1;
  int64_t compute_ms = -1;  // from the last heartbeat (HeartbeatMsg::compute_ms); -1 unknown
  int64_t last_commit_step = -1;  // newest commit reported; -1 if none
  bool said_bye = false;          // the last connection ended with a bye
  int exit_code = -1;             // from that bye
};

class ControlServer {
 public:
  using EventCallback = std::function<void(const ControlEvent&)>;

  // Binds, listens and starts the io thread. kInvalidArgument for bad options, kIoError when
  // the address cannot be bound or the socket directory not made (nothing is left behind).
  // `on_event` may be empty.
  static Result<std::unique_ptr<ControlServer>> Start(const ControlServerOptions& options,
                                                      EventCallback on_event);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  uint16_t port() const;  // the bound port (the OS's choice when options.port was 0)
  // The Unix socket's path; empty when options.unix_socket_parent was empty. The path stays
  // readable after Stop; the socket and its directory are gone by then.
  const std::string& unix_socket_path() const;
  // A copy of every rank's state, indexed by rank (size world_size).
  std::vector<RankState> Snapshot() const;
  // Queues `cmd` to every registered connection; returns how many it was queued to.
  int Broadcast(SupervisorCommand cmd);
  // Connections rejected so far (wrong secret, garbage, silence, ...).
  int64_t rejected_connections() const;
  // Closes the listeners and every connection, joins the io thread and removes the socket's
  // directory. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
