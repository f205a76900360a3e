// runtime/supervisor/process_session.cc — see process_session.h for the contract.
#include "runtime/supervisor/process_session.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <thread>

#include "runtime/core/file_util.h"

extern char** environ;

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// How often Stop looks again while waiting; small against the 0.5 s detection target.
constexpr auto kPollInterval = std::chrono::milliseconds(5);
// How long Stop keeps killing after the grace period before it reports stragglers.
constexpr auto kKillPhaseLimit = std::chrono::seconds(5);

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

ProcessOutcome Decode(int wait_status) {
  ProcessOutcome o;
  if (WIFEXITED(wait_status)) {
    o.exited = true;
    o.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    o.term_signal = WTERMSIG(wait_status);
  }
  return o;
}

// The child's environment: ours, with `env` replacing or adding entries.
std::vector<std::string> MergedEnvironment(const EnvList& env) {
  std::vector<std::string> out;
  std::set<std::string> overridden;
  for (const auto& [name, value] : env) overridden.insert(name);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string name(entry.substr(0, entry.find('=')));
    if (overridden.count(name) == 0) out.emplace_back(entry);
  }
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Signals a member that is not our child. The pid is pinned with a pidfd and its session
// checked again afterwards, so a pid that died and was reused since the /proc scan is never
// signalled. Falls back to kill() on kernels without pidfds.
void SignalMember(pid_t pid, pid_t sid, int sig) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    if (errno != ENOSYS) return;  // ESRCH: already gone
    std::optional<ProcStat> st = ReadProcStat(pid);
    if (st && st->session == sid) kill(pid, sig);
    return;
  }
  std::optional<ProcStat> st = ReadProcStat(pid);
  if (st && st->session == sid) syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0);
  close(fd);
}

}  // namespace

std::string ProcessOutcome::ToString() const {
  if (exited) {
    if (exit_code < 0) return "exit status lost";
    return "exit code " + std::to_string(exit_code);
  }
  return "killed by signal " + std::to_string(term_signal) + " (" + strsignal(term_signal) + ")";
}

std::string StopReport::ToString() const {
  std::string s = "stopped " + std::to_string(members_at_start) + " process(es) in " +
                  std::to_string(elapsed_ms.count()) + " ms";
  if (term_sent) s += "; TERM to the leader";
  s += "; " + std::to_string(processes_signalled) + " signalled";
  if (kill_needed) {
    s += "; KILL after the grace period (" + std::to_string(kill_rounds) + " round(s))";
  }
  if (leader_outcome) s += "; leader: " + leader_outcome->ToString();
  if (!stragglers.empty()) s += "; " + std::to_string(stragglers.size()) + " straggler(s) left";
  return s;
}

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and ')': parse after the last ')'.
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr) return std::nullopt;
  ProcStat st;
  int ppid = 0, pgrp = 0, session = 0;
  if (std::sscanf(close_paren + 1, " %c %d %d %d", &st.state, &ppid, &pgrp, &session) != 4) {
    return std::nullopt;
  }
  st.ppid = ppid;
  st.pgrp = pgrp;
  st.session = session;
  return st;
}

ProcessSession::~ProcessSession() {
  if (pid_ > 0 && (!outcome_ || !Members().empty())) (void)Stop(std::chrono::milliseconds(0));
}

Status ProcessSession::Start(const std::vector<std::string>& argv, const EnvList& env,
                             const std::string& log_path) {
  if (pid_ > 0) return FailedPrecondition("process session already started (pid " +
                                          std::to_string(pid_) + ")");
  if (argv.empty() || argv[0].empty()) return InvalidArgument("process session: empty argv");
  RETURN_IF_ERROR(MakeDirs(ParentDir(log_path)));
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return IoError(Errno("cannot open log " + log_path));

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // The supervisor's sockets and files must not leak into mpirun and the ranks.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  sigset_t empty_mask, all_signals;
  sigemptyset(&empty_mask);
  sigfillset(&all_signals);
  sigdelset(&all_signals, SIGKILL);
  sigdelset(&all_signals, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &empty_mask);
  posix_spawnattr_setsigdefault(&attr, &all_signals);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> args = argv;
  std::vector<std::string> envs = MergedEnvironment(env);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_envs = CStrings(envs);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, c_args[0], &actions, &attr, c_args.data(), c_envs.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(log_fd);
  if (rc != 0) {
    const std::string msg = "cannot run " + argv[0] + ": " + std::strerror(rc);
    return rc == ENOENT ? NotFound(msg) : IoError(msg);
  }
  pid_ = pid;
  outcome_.reset();
  return Status::Ok();
}

std::optional<ProcessOutcome> ProcessSession::Poll() {
  if (outcome_ || pid_ <= 0) return outcome_;
  int wait_status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &wait_status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    outcome_ = Decode(wait_status);
  } else if (r < 0) {
    // ECHILD: reaped elsewhere (SIGCHLD ignored by someone); the process is gone either way.
    outcome_ = ProcessOutcome{true, -1, 0};
  }
  return outcome_;
}

std::optional<ProcessOutcome> ProcessSession::WaitFor(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!Poll() && Clock::now() < deadline) std::this_thread::sleep_for(kPollInterval);
  return outcome_;
}

std::vector<pid_t> ProcessSession::Members() const {
  std::vector<pid_t> members;
  if (pid_ <= 0) return members;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return members;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    std::optional<ProcStat> st = ReadProcStat(static_cast<pid_t>(pid));
    // A zombie is already dead; whoever its parent is (maybe init) reaps it.
    if (st && st->session == pid_ && st->state != 'Z' && st->state != 'X') {
      members.push_back(static_cast<pid_t>(pid));
    }
  }
  closedir(proc);
  return members;
}

Status ProcessSession::Signal(int sig) {
  if (pid_ <= 0) return FailedPrecondition("process session not started");
  if (Poll()) {
    return FailedPrecondition("process " + std::to_string(pid_) + " already ended (" +
                              outcome_->ToString() + ")");
  }
  // Safe without a pidfd: an unreaped child's pid cannot be reused.
  if (kill(pid_, sig) != 0) return IoError(Errno("kill " + std::to_string(pid_)));
  return Status::Ok();
}

StopReport ProcessSession::Stop(std::chrono::milliseconds grace) {
  StopReport report;
  if (pid_ <= 0) return report;
  const auto start = Clock::now();
  const auto grace_end = start + grace;
  const auto give_up = grace_end + kKillPhaseLimit;
  std::set<pid_t> signalled;
  report.members_at_start = static_cast<int>(Members().size());

  if (!Poll()) {
    kill(pid_, SIGTERM);
    kill(pid_, SIGCONT);  // a stopped leader must run to act on TERM
    report.term_sent = true;
    signalled.insert(pid_);
  }
  // Grace: mpirun terminates its ranks itself and exits; wait for the session to empty.
  while (Clock::now() < grace_end) {
    if (Poll() && Members().empty()) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  // Then KILL everything of the session until nothing is left. Repeated because a member can
  // fork between a scan and its kill.
  while (true) {
    Poll();
    std::vector<pid_t> members = Members();
    if (outcome_ && members.empty()) break;
    if (Clock::now() >= give_up) {
      report.stragglers = members;
      break;
    }
    report.kill_needed = true;
    ++report.kill_rounds;
    if (!outcome_) {
      kill(pid_, SIGKILL);
      signalled.insert(pid_);
    }
    for (pid_t m : members) {
      if (m == pid_) continue;
      SignalMember(m, pid_, SIGKILL);
      SignalMember(m, pid_, SIGCONT);
      signalled.insert(m);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  report.processes_signalled = static_cast<int>(signalled.size());
  report.leader_outcome = outcome_;
  report.elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return report;
}

}  // namespace tessera
