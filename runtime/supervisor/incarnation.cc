// runtime/supervisor/incarnation.cc — one launch, watched (contract in incarnation.h).
#include "runtime/supervisor/incarnation.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "checkpoint/commit.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/file_util.h"
#include "runtime/supervisor/control_server.h"
#include "runtime/supervisor/launcher.h"
#include "runtime/supervisor/process_session.h"
#include "runtime/supervisor/rank_env.h"
#include "runtime/supervisor/text.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(10);

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// 8 * `bytes` random bits as hex: the per-incarnation secret.
std::string RandomHex(int bytes) {
  std::random_device rd;
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xffu;
    out.push_back(kDigits[v >> 4]);
    out.push_back(kDigits[v & 15]);
  }
  return out;
}

// Copies what the job writes to its log (mpirun tees every rank's output there) to `out`, so
// the user sees rank 0's progress lines as if it ran in the foreground.
class LogEcho {
 public:
  LogEcho(const std::string& path, FILE* out) : out_(out) {
    if (out_ != nullptr) in_ = std::fopen(path.c_str(), "rb");
  }
  ~LogEcho() {
    if (in_ != nullptr) std::fclose(in_);
  }
  void Pump() {
    if (in_ == nullptr) return;
    char buf[8192];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, in_)) > 0) std::fwrite(buf, 1, n, out_);
    std::clearerr(in_);  // at end of file for now; the job may write more
    std::fflush(out_);
  }

 private:
  FILE* out_;
  FILE* in_ = nullptr;
};

// Across hosts: LOG_DIR/tasks (rank r's host on line r + 1; srun's SLURM_HOSTFILE) and, for
// mpirun's per-rank logs, LOG_DIR/by_host/<host>/rank.<r> -> ../../1/rank.<r>: one host's
// logs in one place when that host is the question.
Status WritePlacement(const MpirunSpec& spec, const std::string& task_hosts) {
  if (task_hosts.empty()) return Status::Ok();
  RETURN_IF_ERROR(WriteFileAtomic(spec.log_dir + "/tasks", task_hosts));
  if (spec.engine != LaunchEngine::kMpirun) return Status::Ok();
  std::istringstream lines(task_hosts);
  std::string host;
  for (int r = 0; std::getline(lines, host); ++r) {
    const std::string dir = spec.log_dir + "/by_host/" + host;
    RETURN_IF_ERROR(MakeDirs(dir));
    const std::string target = "../../1/rank." + std::to_string(r);
    const std::string link = dir + "/rank." + std::to_string(r);
    // A convenience view: a file system without symlinks loses it, not the launch.
    (void)::symlink(target.c_str(), link.c_str());
  }
  return Status::Ok();
}

class Watch {
 public:
  Watch(int64_t k, RunState& run) : k_(k), run_(run), o_(*run.options), log_(*run.log) {}
  Result<IncarnationEnd> Run();

 private:
  Status Launch();
  // Handles queued events; returns whether a connection closed.
  bool Drain();
  void OnHeartbeat(const ControlEvent& e);
  void OnCatalog(const ControlEvent& e);
  void ForwardRequests(Clock::time_point now);
  // Ends the incarnation; see the attribution rules in incarnation.h.
  // One look at the job; true when the incarnation ended (Finish or Fail was called). In
  // order: a rank's final exit code, a rank's failed exit, mpirun's exit, the stop's deadline,
  // stragglers (reported, never an end), the detector's verdict.
  bool Decide(Clock::time_point now);
  bool DecideFinalBye();
  bool DecideFailedBye(Clock::time_point now);
  bool DecideJobExited(Clock::time_point now);
  StopReport StopJob(const std::string& why, bool mpirun_knows);
  const char* LauncherName() const { return o_.engine == LaunchEngine::kSrun ? "srun" : "mpirun"; }
  void Fail(Failure f, bool mpirun_knows);
  void Finish(IncarnationEnd::Kind kind, int exit_code, std::string detail);

  const int64_t k_;
  RunState& run_;
  const SupervisorOptions& o_;
  RunLog& log_;

  int64_t resume_step_ = 0;
  Clock::time_point launched_at_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<ControlEvent> queue_;
  std::unique_ptr<ControlServer> server_;
  ProcessSession session_;
  std::unique_ptr<LogEcho> echo_;
  std::optional<FailureDetector> detector_;

  IncarnationEnd end_;
  bool ended_ = false;
  int registered_ = 0;
  bool stop_sent_ = false;
  bool checkpoint_pending_ = false;
  Clock::time_point stop_deadline_{};
  int64_t max_step_ = -1;
  bool first_step_seen_ = false;
  // The stepping interval: first completed step seen (after the resume point) and the last.
  int64_t first_timed_step_ = -1, last_timed_step_ = -1;
  Clock::time_point first_timed_at_, last_timed_at_;
  std::optional<ControlEvent> failed_bye_;  // the first bye with a code a restart may cure
  std::optional<ControlEvent> final_bye_;   // the first bye with a code a restart cannot cure
};

Status Watch::Launch() {
  resume_step_ = std::max<int64_t>(run_.newest_committed, 0);
  const std::string secret = RandomHex(16);
  ControlServerOptions so;
  so.bind_address = o_.bind_address;
  so.run_id = log_.run_id();
  so.incarnation = k_;
  so.world_size = run_.num_ranks;
  so.secret = secret;
  so.unix_socket_parent = o_.control_socket_parent;
  ASSIGN_OR_RETURN(server_, ControlServer::Start(so, [this](const ControlEvent& e) {
                     {
                       std::lock_guard<std::mutex> lock(mu_);
                       queue_.push_back(e);
                     }
                     if (e.kind != ControlEventKind::kHeartbeat) wake_.notify_one();
                   }));

  MpirunSpec spec;
  spec.num_ranks = run_.num_ranks;
  spec.hostfile = run_.hostfile.empty() ? o_.hostfile : run_.hostfile;
  spec.log_dir = o_.run_dir + "/logs/" + log_.run_id() + "/incarnation_" + std::to_string(k_);
  spec.program = o_.program;
  spec.program_args = o_.program_args;
  spec.program_args.insert(spec.program_args.end(), run_.extra_args.begin(), run_.extra_args.end());
  spec.mpirun = o_.mpirun;
  spec.engine = o_.engine;
  spec.srun = o_.srun;
  spec.extra_env = {
      {kEnvControlAddress, o_.advertise_address.empty() ? o_.bind_address : o_.advertise_address},
      {kEnvControlPort, std::to_string(server_->port())},
      {kEnvControlSecret, secret},
      {kEnvRunId, log_.run_id()},
      {kEnvIncarnation, std::to_string(k_)},
      {kEnvHeartbeatMs, std::to_string(o_.heartbeat_ms)},
  };
  if (!server_->unix_socket_path().empty()) {
    spec.extra_env.emplace_back(kEnvControlSocket, server_->unix_socket_path());
  }
  // After a failure: this run's seconds per failure so far, the MTBF checkpoint.interval: auto
  // uses unless the config gives one.
  if (const size_t failures = run_.report->failures.size(); failures > 0) {
    spec.extra_env.emplace_back(kEnvMeasuredMtbf,
                                StrFormat("%.6g", log_.At(Clock::now()) / static_cast<double>(failures)));
  }
  spec.extra_env.insert(spec.extra_env.end(), o_.extra_env.begin(), o_.extra_env.end());
  ASSIGN_OR_RETURN(MpirunCommand cmd, BuildMpirunCommand(spec));
  RETURN_IF_ERROR(MakeDirs(spec.log_dir));
  RETURN_IF_ERROR(WritePlacement(spec, cmd.task_hosts));
  end_.job_log = spec.log_dir + (spec.engine == LaunchEngine::kSrun ? "/srun.log" : "/mpirun.log");
  launched_at_ = Clock::now();
  end_.record.incarnation = k_;
  end_.record.launched_s = log_.At(launched_at_);
  end_.record.start_step = resume_step_;
  if (Status s = session_.Start(cmd.argv, cmd.env, end_.job_log); !s.ok()) {
    log_.Emit(k_, "error", std::string("cannot start ") + LauncherName() + ": " + s.ToString());
    return s;
  }
  log_.Emit(k_, "launch",
            StrFormat("incarnation %lld: %s -np %d (pid %d), ", static_cast<long long>(k_),
                      LauncherName(),
                      run_.num_ranks, static_cast<int>(session_.pid())) +
                (run_.newest_committed >= 0 ? "resuming from checkpoint step " + std::to_string(resume_step_)
                                            : std::string("from step 0")));
  echo_ = std::make_unique<LogEcho>(end_.job_log, o_.echo_job_output ? o_.out : nullptr);
  detector_.emplace(o_.detector, run_.num_ranks, launched_at_);
  detector_->SetStartStep(resume_step_);
  detector_->SetTargetStep(o_.target_steps);
  return Status::Ok();
}

void Watch::OnHeartbeat(const ControlEvent& e) {
  if (e.step <= max_step_) return;
  max_step_ = e.step;
  run_.max_step_seen = std::max(run_.max_step_seen, e.step);
  if (e.step > resume_step_) {
    if (first_timed_step_ < 0) {
      first_timed_step_ = e.step;
      first_timed_at_ = e.time;
    }
    last_timed_step_ = e.step;
    last_timed_at_ = e.time;
  }
  if (first_step_seen_ || e.step <= resume_step_) return;
  // The first step this incarnation completed: the end of a recovery.
  first_step_seen_ = true;
  const double t = log_.At(e.time);
  std::string msg = StrFormat("first step done (step %lld), %.2f s after launch",
                              static_cast<long long>(e.step), t - end_.record.launched_s);
  std::vector<FailureRecord>& failures = run_.report->failures;
  if (!failures.empty() && failures.back().resumed_s < 0 && failures.back().incarnation == k_ - 1) {
    FailureRecord& f = failures.back();
    f.resumed_s = t;
    f.load_s = t - end_.record.launched_s;
    f.resume_step = resume_step_;
    msg += StrFormat(", %.2f s after the failure", t - f.failed_s);
  }
  log_.Emit(k_, "progress", msg);
}

void Watch::OnCatalog(const ControlEvent& e) {
  if (log_.catalog() != nullptr) {
    if (Status s = ApplyCatalogRecord(e.catalog, *log_.catalog()); !s.ok()) {
      log_.Emit(k_, "catalog", "could not record: " + s.ToString());
    }
  }
  if (e.catalog.op != CatalogOp::kEvent) return;
  // The checkpointer's own events (save failures, corruption found at resume, the resume
  // point) join the run's event stream; the catalog has them already. Commits have their line.
  if (e.catalog.kind != "commit") {
    log_.Emit(k_, "ckpt_" + e.catalog.kind, e.catalog.message, /*to_catalog=*/false);
  }
  long long held = -1;
  if (e.catalog.kind == "memory_resume" && !first_step_seen_ &&
      std::sscanf(e.catalog.message.c_str(), "resuming from the memory tier: step %lld", &held) == 1) {
    // The ranks resumed from a snapshot in memory, newer than the disk's newest.
    resume_step_ = held;
    end_.record.start_step = resume_step_;
    detector_->SetStartStep(resume_step_);
  }
  if (e.catalog.kind == "corrupt" && !first_step_seen_) {
    // The ranks set the damaged checkpoint aside and fall back to an older one: that is
    // where this incarnation resumes, and what its first step is measured from.
    run_.newest_committed = NewestCommittedStep(o_.checkpoint_root);
    resume_step_ = std::max<int64_t>(run_.newest_committed, 0);
    end_.record.start_step = resume_step_;
    detector_->SetStartStep(resume_step_);
  }
}

bool Watch::Drain() {
  std::vector<ControlEvent> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(queue_);
  }
  bool closed = false;
  for (const ControlEvent& e : batch) {
    detector_->OnEvent(e);
    switch (e.kind) {
      case ControlEventKind::kRegistered:
        // A stop is sticky: a rank that registers after it was sent gets it too.
        if (stop_sent_) server_->Broadcast(SupervisorCommand::kStop);
        ++(e.transport == ControlTransport::kUnix ? end_.record.ranks_over_unix_socket
                                                  : end_.record.ranks_over_tcp);
        if (++registered_ == run_.num_ranks) {
          log_.Emit(k_, "registered",
                    StrFormat("all %d ranks connected in %.2f s (%d over the Unix socket, %d "
                              "over TCP)",
                              run_.num_ranks,
                              std::chrono::duration<double>(e.time - launched_at_).count(),
                              end_.record.ranks_over_unix_socket, end_.record.ranks_over_tcp));
        }
        break;
      case ControlEventKind::kHeartbeat:
        OnHeartbeat(e);
        break;
      case ControlEventKind::kCommit:
        if (e.memory_tier) {  // not a line each: a snapshot every few steps
          run_.newest_in_memory = std::max(run_.newest_in_memory, e.step);
          break;
        }
        run_.newest_committed = std::max(run_.newest_committed, e.step);
        log_.Emit(k_, "commit", "checkpoint step " + std::to_string(e.step) + " committed");
        break;
      case ControlEventKind::kCatalog:
        OnCatalog(e);
        break;
      case ControlEventKind::kBye:
        if (IsFinalExitCode(e.exit_code) && !final_bye_) final_bye_ = e;
        if (e.exit_code != kExitOk && !IsFinalExitCode(e.exit_code) &&
            !(e.exit_code == kExitStopped && stop_sent_) && !failed_bye_) {
          failed_bye_ = e;
        }
        break;
      case ControlEventKind::kDisconnected:
        closed = true;
        break;
      case ControlEventKind::kRejected:
        log_.Rejected(k_, e.peer, e.reason);
        break;
    }
  }
  return closed;
}

void Watch::ForwardRequests(Clock::time_point now) {
  const int stops = run_.stop_requests->load(std::memory_order_relaxed);
  if (stops > run_.stops_handled) {
    run_.stops_handled = stops;
    if (stop_sent_) {
      StopJob("second stop request", /*mpirun_knows=*/false);
      Finish(IncarnationEnd::Kind::kStopped, kExitStopped,
             "stopped at once on a second request (no final checkpoint)");
      return;
    }
    stop_sent_ = true;
    stop_deadline_ = now + Ms(o_.preempt_timeout_s);
    const int n = server_->Broadcast(SupervisorCommand::kStop);
    log_.Emit(k_, "preempt",
              StrFormat("stop requested: asked %d of %d ranks to checkpoint and exit (the others "
                        "when they connect); up to %.0f s",
                        n, run_.num_ranks, o_.preempt_timeout_s));
  }
  const int checkpoints = run_.checkpoint_requests->load(std::memory_order_relaxed);
  if (checkpoints > run_.checkpoints_handled) {
    run_.checkpoints_handled = checkpoints;
    checkpoint_pending_ = true;
  }
  // Every rank must get it: they agree on the step, so one missing rank would never agree.
  if (checkpoint_pending_ && registered_ == run_.num_ranks && !stop_sent_) {
    checkpoint_pending_ = false;
    const int n = server_->Broadcast(SupervisorCommand::kCheckpointNow);
    log_.Emit(k_, "checkpoint", StrFormat("checkpoint requested from %d ranks", n));
  }
}

StopReport Watch::StopJob(const std::string& why, bool mpirun_knows) {
  // mpirun sees a rank die or exit too and is already taking the job down; a TERM in the
  // middle of its own abort crashes it (Open MPI 4.1, PMIx_Finalize), so it gets a moment.
  if (mpirun_knows) (void)session_.WaitFor(std::chrono::milliseconds(500));
  StopReport r = session_.Stop(Ms(o_.stop_grace_s));
  log_.Emit(k_, "stop", why + ": " + r.ToString());
  return r;
}

void Watch::Finish(IncarnationEnd::Kind kind, int exit_code, std::string detail) {
  end_.kind = kind;
  end_.exit_code = exit_code;
  end_.detail = std::move(detail);
  ended_ = true;
}

void Watch::Fail(Failure f, bool mpirun_knows) {
  f.step = std::max(f.step, max_step_);
  if (stop_sent_) {
    // Stopping already: the user's stop stands, and nothing restarts.
    StopJob(std::string(FailureKindName(f.kind)) + " while stopping", mpirun_knows);
    Finish(IncarnationEnd::Kind::kStopped, kExitStopped,
           "a rank failed while the job was stopping (" + f.detail + ")");
    return;
  }
  const StopReport r = StopJob(std::string(FailureKindName(f.kind)) + " detected", mpirun_knows);
  // A rank that ends with a final code (no usable checkpoint, bad input) takes its peers down
  // through MPI_Abort, and their connections may close before its bye arrives: its bye, or
  // mpirun's own exit with that code, decides — no restart can help.
  Drain();
  const bool leader_final = r.leader_outcome && !r.term_sent && r.leader_outcome->exited &&
                            IsFinalExitCode(r.leader_outcome->exit_code);
  if (final_bye_ || leader_final) {
    const int code = final_bye_ ? final_bye_->exit_code : r.leader_outcome->exit_code;
    Finish(IncarnationEnd::Kind::kFinalError, code,
           StrFormat("%s exited with code %d (%s): a restart cannot help; see %s",
                     final_bye_ ? StrFormat("rank %d", final_bye_->rank).c_str() : LauncherName(),
                     code, FinalExitReason(code), end_.job_log.c_str()));
    return;
  }
  end_.failure = std::move(f);
  Finish(IncarnationEnd::Kind::kFailure, 0, "");
}

bool Watch::Decide(Clock::time_point now) {
  if (DecideFinalBye() || DecideFailedBye(now) || DecideJobExited(now)) return true;
  if (stop_sent_ && now >= stop_deadline_) {
    StopJob("the ranks did not stop within the preemption timeout", false);
    Finish(IncarnationEnd::Kind::kStopped, kExitStopped,
           "stopped without a final checkpoint (preemption timeout)");
    return true;
  }
  for (const StragglerReport& s : detector_->TakeStragglers()) {
    run_.report->stragglers.push_back({s.rank, s.detail, log_.At(s.at)});
    log_.Emit(k_, "straggler", s.detail, /*to_catalog=*/true, {s.rank});
  }
  if (auto f = detector_->Check(server_->Snapshot(), now)) {
    // While the ranks save to stop, a slow step is expected: only losses end the stop early.
    if (stop_sent_ && f->kind != FailureKind::kConnectionLost &&
        f->kind != FailureKind::kHeartbeatTimeout) {
      return false;
    }
    const bool mpirun_knows = f->kind == FailureKind::kConnectionLost;
    Fail(std::move(*f), mpirun_knows);
    return true;
  }
  return false;
}

bool Watch::DecideFinalBye() {
  if (final_bye_ && !stop_sent_) {
    // A rank says the job cannot work (bad config or input, no usable checkpoint, training
    // gone non-finite): its peers, killed by mpirun next, are not failures, and no restart can
    // help.
    const int code = final_bye_->exit_code;
    StopJob(StrFormat("rank %d exited with code %d", final_bye_->rank, code), /*mpirun_knows=*/true);
    Finish(IncarnationEnd::Kind::kFinalError, code,
           StrFormat("rank %d exited with code %d (%s): a restart cannot help; see %s", final_bye_->rank,
                     code, FinalExitReason(code),
                     end_.job_log.c_str()));
    return true;
  }
  return false;
}

bool Watch::DecideFailedBye(Clock::time_point now) {
  if (failed_bye_) {
    const ControlEvent& bye = *failed_bye_;
    Failure f;
    f.suspected_at = bye.time;
    f.detected_at = now;
    if (bye.exit_code == kExitCommTimeout) {
      // Its collective timed out: a peer hangs. Blame the ranks that did not reach it.
      HangBlame blame = detector_->BlameHang(server_->Snapshot());
      f.kind = FailureKind::kStall;
      f.ranks = blame.ranks.empty() ? std::vector<int>{bye.rank} : blame.ranks;
      f.exit_code = bye.exit_code;
      f.detail = StrFormat("rank %d's collective timed out (exit %d, comm.timeout_s): %s", bye.rank,
                           bye.exit_code, blame.who.empty() ? "no live rank left to blame" : blame.who.c_str());
    } else {
      f.kind = FailureKind::kRankExit;
      f.ranks = {bye.rank};
      f.exit_code = bye.exit_code;
      f.detail = StrFormat("rank %d exited with code %d", bye.rank, bye.exit_code);
    }
    Fail(std::move(f), /*mpirun_knows=*/true);
    return true;
  }
  return false;
}

bool Watch::DecideJobExited(Clock::time_point now) {
  if (auto exited = session_.Poll()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the last frames
    Drain();
    echo_->Pump();
    const int code = exited->ShellCode();
    // Exit code 0 is a finished job only when every rank said so: a launcher whose ranks never
    // started (srun's "task launch failed") may still exit 0.
    bool every_rank_done = true;
    for (const RankState& r : server_->Snapshot()) {
      every_rank_done = every_rank_done && r.said_bye && r.exit_code == kExitOk;
    }
    // A stop that came after the last step: the run finished, and says so (a requeue or a
    // relaunch would have nothing left to do).
    if (stop_sent_ && !(exited->exited && code == kExitOk && every_rank_done)) {
      StopJob("job ended (" + exited->ToString() + ")", false);  // reaps stragglers, if any
      Finish(IncarnationEnd::Kind::kStopped, kExitStopped,
             code == kExitStopped ? "the ranks saved a checkpoint and stopped"
                                  : "the job ended while stopping (" + exited->ToString() + ")");
      return true;
    }
    if (exited->exited && ((code == kExitOk && every_rank_done) || IsFinalExitCode(code))) {
      StopJob("job ended (" + exited->ToString() + ")", false);
      if (code == kExitOk) {
        Finish(IncarnationEnd::Kind::kFinished, kExitOk, "");
      } else {
        Finish(IncarnationEnd::Kind::kFinalError, code,
               StrFormat("the ranks exited with code %d (%s): a restart cannot help; see %s", code,
                         FinalExitReason(code),
                         end_.job_log.c_str()));
      }
      return true;
    }
    // A failure mpirun saw before the control plane did: blame the ranks without a clean end.
    Failure f;
    f.kind = FailureKind::kRankExit;
    for (const RankState& r : server_->Snapshot()) {
      if (!r.said_bye || r.exit_code != kExitOk) f.ranks.push_back(r.rank);
    }
    f.suspected_at = now - kTick;
    f.detected_at = now;
    f.detail = std::string(LauncherName()) + " ended (" + exited->ToString() + ")" +
               (f.ranks.empty() ? std::string() : " without a clean exit of " + RankWord(f.ranks));
    Fail(std::move(f), /*mpirun_knows=*/false);
    return true;
  }
  return false;
}

Result<IncarnationEnd> Watch::Run() {
  RETURN_IF_ERROR(Launch());
  while (!ended_) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, kTick, [&] {
        return !queue_.empty() && queue_.back().kind != ControlEventKind::kHeartbeat;
      });
    }
    if (Drain()) {
      // Ranks that die together (a lost host) close within microseconds of each other.
      std::this_thread::sleep_for(std::chrono::microseconds(
          static_cast<int64_t>(o_.detector.simultaneous_loss_ms * 1000) + 200));
      Drain();
    }
    echo_->Pump();
    const Clock::time_point now = Clock::now();
    ForwardRequests(now);
    if (ended_) break;
    Decide(now);
  }
  server_->Stop();
  Drain();
  echo_->Pump();
  log_.FlushRejected(k_);
  if (last_timed_step_ > first_timed_step_) {
    run_.stepping_s += std::chrono::duration<double>(last_timed_at_ - first_timed_at_).count();
    run_.steps_stepped += last_timed_step_ - first_timed_step_;
  }
  const std::vector<double> samples = detector_->step_samples_s();
  run_.step_samples_s.insert(run_.step_samples_s.end(), samples.begin(), samples.end());
  // The directories are the ground truth: a commit whose report died with the job (rank 0
  // killed right after its rename) still counts. The job is stopped: nothing commits now.
  if (!o_.checkpoint_root.empty()) {
    // With checkpoint.local this host's root is one host's part: the reports count as well.
    const int64_t here = NewestCommittedStep(o_.checkpoint_root);
    run_.newest_committed = o_.checkpoint_local ? std::max(run_.newest_committed, here) : here;
  }
  end_.record.ended_s = log_.Now();
  end_.record.last_step = max_step_;
  return std::move(end_);
}

}  // namespace

int64_t NewestCommittedStep(const std::string& root) {
  if (root.empty()) return -1;
  auto steps = CommittedSteps(root);
  if (!steps.ok() || steps->empty()) return -1;
  return steps->front();
}

Result<IncarnationEnd> RunIncarnation(int64_t k, RunState& run) {
  Watch watch(k, run);
  return watch.Run();
}

}  // namespace tessera
