// runtime/supervisor/process_session.h — one launched process tree, in its own session.
//
// Owns: ProcessSession (start a program as the leader of a new process session, reap it, list
// and signal every process of that session, stop it all within a bounded time) and the small
// value types that report what happened (ProcessOutcome, StopReport).
//
// Why a session: mpirun's ranks each get their own process group, so killpg(mpirun) does not
// reach them, but they keep mpirun's session id (PLATFORM.md, "How an MPI job fails"). The
// session id is therefore the one handle that names the whole job. Linux does not hand out a
// pid while it is still some process's session id, so the id stays unambiguous while members
// live, including after the leader has been reaped.
//
// Invariants: Start spawns at most once per object (posix_spawn with POSIX_SPAWN_SETSID, so
// the child is a session leader before it runs a single instruction of its own; default
// signal dispositions and an empty signal mask; descriptors >= 3 closed; stdin /dev/null;
// stdout and stderr appended to the log file). After Stop returns with stragglers() empty, no
// live process of the session remains and the leader is reaped: no zombie, no straggler. The
// destructor calls Stop with no grace if anything is left. A member that calls setsid() itself
// leaves the session and is out of reach; mpirun and its ranks do not.
// Thread-safety: none; one owner drives a session (the supervisor's launch thread). Members()
// only reads /proc and may run concurrently with Poll().
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/supervisor/launcher.h"

namespace tessera {

// How the leader ended (decoded wait status).
struct ProcessOutcome {
  bool exited = false;  // true: exit_code is valid; false: killed by term_signal
  int exit_code = 0;    // -1: the status was lost (the leader was reaped by someone else)
  int term_signal = 0;
  // "exit code 3" / "killed by signal 9 (Killed)".
  std::string ToString() const;
  // The shell's convention: exit_code, or 128 + term_signal.
  int ShellCode() const { return exited ? exit_code : 128 + term_signal; }
};

// What Stop did.
struct StopReport {
  int members_at_start = 0;         // live processes of the session when Stop was called
  int processes_signalled = 0;      // distinct pids that received TERM or KILL (leader included)
  bool term_sent = false;           // the leader was alive and got SIGTERM
  bool kill_needed = false;         // something outlived the grace period and got SIGKILL
  int kill_rounds = 0;              // passes over the session's members with SIGKILL
  std::chrono::milliseconds elapsed_ms{0};
  std::optional<ProcessOutcome> leader_outcome;  // empty only if the leader could not be reaped
  std::vector<pid_t> stragglers;    // alive when Stop gave up (D-state); empty on success
  std::string ToString() const;
};

class ProcessSession {
 public:
  ProcessSession() = default;
  ~ProcessSession();
  ProcessSession(const ProcessSession&) = delete;
  ProcessSession& operator=(const ProcessSession&) = delete;

  // Spawns argv (argv[0] looked up in PATH when it has no '/') with the supervisor's own
  // environment plus `env` (same name: `env` wins), as the leader of a new session. Its stdout
  // and stderr are appended to `log_path` (created with missing parent directories).
  // kFailedPrecondition if already started; kInvalidArgument for an empty argv; kIoError for
  // a log file that cannot be opened; kNotFound / kIoError when the program cannot be run.
  Status Start(const std::vector<std::string>& argv, const EnvList& env,
               const std::string& log_path);

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }  // the leader; 0 before Start
  pid_t sid() const { return pid_; }  // the session id equals the leader's pid

  // Non-blocking: reaps the leader if it has ended and returns its outcome (the same one on
  // every later call); nullopt while it runs. Members may outlive the leader briefly.
  std::optional<ProcessOutcome> Poll();
  // Blocks until the leader ends or `timeout` passes (polling); the outcome or nullopt.
  std::optional<ProcessOutcome> WaitFor(std::chrono::milliseconds timeout);

  // Pids of every live (not zombie) process whose session id is sid(), from /proc; the leader
  // included while it runs. Empty before Start.
  std::vector<pid_t> Members() const;

  // Sends `sig` to the leader (mpirun forwards SIGUSR1/SIGUSR2 to the ranks).
  // kFailedPrecondition when not started or the leader was already reaped.
  Status Signal(int sig);

  // SIGTERM to the leader; waits up to `grace` for the whole session to end; then SIGKILL
  // (and SIGCONT, so stopped ones run to their death) to every member, repeatedly, until none
  // is left; reaps the leader. Bounded: gives up `grace` + 5 s after the call, listing the
  // stragglers. Safe to call more than once and before Start (reports nothing done).
  StopReport Stop(std::chrono::milliseconds grace);

 private:
  pid_t pid_ = 0;
  std::optional<ProcessOutcome> outcome_;  // set once the leader is reaped
};

// Reads /proc/<pid>/stat; the session id and whether the process is a zombie. nullopt when
// the process is gone. Exposed for tests that check a pid is really gone.
struct ProcStat {
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
};
std::optional<ProcStat> ReadProcStat(pid_t pid);

}  // namespace tessera
