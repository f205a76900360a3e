// runtime/supervisor/rank_env.h — the environment the supervisor hands to every rank.
//
// Owns: the names only. The supervisor (incarnation.cc) sets them for each incarnation; a rank
// (tools/supervised_rank.cc) that finds kEnvControlPort set connects to the control plane and
// is supervised; without it `tessera train` runs standalone and writes its own catalog.
//
// Which way a rank connects: to kEnvControlSocket, the supervisor's Unix socket, when it is set
// and usable on the rank's host (a socket in a directory of the rank's own user that no other
// user can enter, and connect succeeds: control_client.h); else over TCP to
// kEnvControlAddress:kEnvControlPort. Every rank gets both; on the supervisor's host the socket
// is there, on other hosts it is not and the rank uses TCP.
//
// The secret travels in the environment: readable only by the same user (and root) through
// /proc/PID/environ, never on a command line (visible to everyone in ps).
//
// Fault hooks (tests and `tessera chaos` only; the supervisor passes them through when its own
// environment has them, nothing sets them by default): "RANK:STEP" — that rank, on reaching
// that step (steps completed == STEP), in every incarnation that reaches it:
//   kEnvFaultHang   blocks its training thread for good right before the step's first
//                   collective; its heartbeats go on (a hang the stall detector must catch).
//   kEnvFaultCrash  kills itself with SIGKILL (a crash that repeats on every restart).
// kEnvChaosHooks = path of a chaos hook plan (tools/chaos_hooks.h): checkpoint writes that
// fail or kill the rank midway, armed from outside by `tessera chaos` while the job runs.
#pragma once

namespace tessera {

inline constexpr char kEnvControlAddress[] = "TESSERA_CONTROL_ADDRESS";  // IP literal
inline constexpr char kEnvControlPort[] = "TESSERA_CONTROL_PORT";        // 1..65535
inline constexpr char kEnvControlSocket[] = "TESSERA_CONTROL_SOCKET";    // optional, a path
inline constexpr char kEnvControlSecret[] = "TESSERA_CONTROL_SECRET";
inline constexpr char kEnvRunId[] = "TESSERA_RUN_ID";
inline constexpr char kEnvIncarnation[] = "TESSERA_INCARNATION";          // >= 0
inline constexpr char kEnvHeartbeatMs[] = "TESSERA_HEARTBEAT_MS";         // optional, default 200
// Seconds of this run per failure so far (after the first failure): the MTBF that
// checkpoint.interval: auto uses when checkpoint.mtbf_s is 0 (runtime/train/checkpoint_interval.h).
inline constexpr char kEnvMeasuredMtbf[] = "TESSERA_MTBF_S";             // optional, > 0
inline constexpr char kEnvFaultHang[] = "TESSERA_FAULT_HANG";
inline constexpr char kEnvFaultCrash[] = "TESSERA_FAULT_CRASH";
inline constexpr char kEnvChaosHooks[] = "TESSERA_CHAOS_HOOKS";

}  // namespace tessera
