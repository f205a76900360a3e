// runtime/supervisor/supervisor.cc — the supervised run's loop (contract in supervisor.h).
#include "runtime/supervisor/supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cinttypes>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/supervisor/control_server.h"
#include "runtime/supervisor/process_session.h"
#include "runtime/supervisor/rank_env.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(10);

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// 128 random bits as hex: the per-incarnation secret and the run id's suffix.
std::string RandomHex(int bytes) {
  std::random_device rd;
  std::string out;
  static const char* kDigits = "0123456789abcdef";
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xffu;
    out.push_back(kDigits[v >> 4]);
    out.push_back(kDigits[v & 15]);
  }
  return out;
}

std::string NewRunId() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return std::string("run-") + stamp + "-" + RandomHex(3);
}

// Newest committed checkpoint under `root` (-1: none, or no root). Listing only: the ranks
// verify every byte when they load and fall back past a damaged one by themselves.
int64_t NewestCommitted(const std::string& root) {
  if (root.empty()) return -1;
  auto steps = CommittedSteps(root);
  if (!steps.ok() || steps->empty()) return -1;
  return steps->front();
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// Copies what the job writes to its log (mpirun tees every rank's output there) to `out`, so
// the user sees rank 0's progress lines as if it ran in the foreground.
class LogEcho {
 public:
  LogEcho(std::string path, FILE* out) : path_(std::move(path)), out_(out) {}
  void Pump() {
    if (out_ == nullptr) return;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return;
    in.seekg(static_cast<std::streamoff>(offset_));
    char buf[8192];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
      const std::streamsize n = in.gcount();
      std::fwrite(buf, 1, static_cast<size_t>(n), out_);
      offset_ += static_cast<uint64_t>(n);
    }
    std::fflush(out_);
  }

 private:
  std::string path_;
  FILE* out_;
  uint64_t offset_ = 0;
};

}  // namespace

// How one incarnation ended.
struct Supervisor::Incarnation {
  enum class End { kFinished, kStopped, kFinalError, kFailure, kLaunchError };
  End end = End::kFailure;
  int exit_code = 0;
  std::optional<Failure> failure;
  std::string detail;
};

namespace {

// Everything one Run() shares between incarnations: the event sinks and the report.
class RunLog {
 public:
  RunLog(const SupervisorOptions& o, std::string run_id, Clock::time_point start)
      : o_(o), run_id_(std::move(run_id)), start_(start) {}

  Status Open(Catalog* catalog) {
    catalog_ = catalog;
    events_ = std::fopen((o_.run_dir + "/events.jsonl").c_str(), "a");
    if (events_ == nullptr) return IoError(o_.run_dir + "/events.jsonl: cannot open for appending");
    return Status::Ok();
  }
  ~RunLog() {
    if (events_ != nullptr) std::fclose(events_);
  }

  double Now() const { return SecondsBetween(start_, Clock::now()); }
  double At(Clock::time_point t) const { return SecondsBetween(start_, t); }

  // One event: a line for the user, a JSON line in events.jsonl, a catalog event.
  void Emit(int64_t incarnation, const std::string& kind, const std::string& message) {
    const double t = Now();
    if (o_.out != nullptr) {
      std::fprintf(o_.out, "supervisor: [%7.2f s] %-10s %s\n", t, kind.c_str(), message.c_str());
      std::fflush(o_.out);
    }
    if (events_ != nullptr) {
      JsonWriter w;
      w.BeginObject();
      w.Key("unix_s").Double(UnixNow());
      w.Key("t_s").Double(t);
      w.Key("run_id").String(run_id_);
      w.Key("incarnation").Int(incarnation);
      w.Key("kind").String(kind);
      w.Key("message").String(message);
      w.EndObject();
      std::fprintf(events_, "%s\n", w.str().c_str());
      std::fflush(events_);
    }
    if (catalog_ != nullptr) (void)catalog_->AddEvent("supervisor_" + kind, message);
  }

  Catalog* catalog() { return catalog_; }
  const std::string& run_id() const { return run_id_; }

 private:
  const SupervisorOptions& o_;
  std::string run_id_;
  Clock::time_point start_;
  FILE* events_ = nullptr;
  Catalog* catalog_ = nullptr;
};

bool IsFinalExitCode(int code) {
  return code == kExitUsage || code == kExitBadConfig || code == kExitBadInput ||
         code == kExitCorruptCheckpoint;
}

}  // namespace

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Result<SupervisorOutcome> Supervisor::Run() {
  const SupervisorOptions& o = options_;
  if (o.num_ranks < 1) return InvalidArgument("launch: -n must be >= 1");
  if (o.program.empty()) return InvalidArgument("launch: no rank program");
  if (o.run_dir.empty()) return InvalidArgument("launch: no run directory");
  RETURN_IF_ERROR(ValidateDetectorOptions(o.detector));
  RETURN_IF_ERROR(ValidateRestartPolicyOptions(o.restart));
  RETURN_IF_ERROR(MakeDirs(o.run_dir));

  const Clock::time_point start = Clock::now();
  RunLog log(o, NewRunId(), start);
  std::unique_ptr<Catalog> catalog;
  if (!o.checkpoint_root.empty()) {
    RETURN_IF_ERROR(MakeDirs(o.checkpoint_root));
    ASSIGN_OR_RETURN(OpenedCatalog opened, OpenCatalogForWriting(o.checkpoint_root));
    catalog = std::move(opened.catalog);
    if (!opened.recreated.empty() && o.out != nullptr) {
      std::fprintf(o.out, "supervisor: %s\n", opened.recreated.c_str());
    }
  }
  RETURN_IF_ERROR(log.Open(catalog.get()));

  SupervisorOutcome outcome;
  RunReport& report = outcome.report;
  report.run_id = log.run_id();
  report.target_steps = o.target_steps;
  std::vector<double> step_seconds;  // every measured step, for the median
  int stops_handled = 0, checkpoints_handled = 0;
  int64_t newest_committed = NewestCommitted(o.checkpoint_root);
  RestartPolicy policy(o.restart, newest_committed);
  int64_t max_step_seen = -1;

  log.Emit(0, "start",
           "run " + log.run_id() + ": " + std::to_string(o.num_ranks) + " ranks, " +
               (o.checkpoint_root.empty() ? std::string("no checkpoints (a restart starts over)")
                                          : "checkpoints in " + o.checkpoint_root) +
               ", logs in " + o.run_dir + "/logs/" + log.run_id());

  for (int64_t k = 0;; ++k) {
    // ---- launch -------------------------------------------------------------------------
    const int64_t resume_step = std::max<int64_t>(newest_committed, 0);
    const std::string secret = RandomHex(16);
    // Events from the server's io thread; the loop wakes on each (a crash is seen at once) or
    // every tick.
    std::mutex mu;
    std::condition_variable wake;
    std::vector<ControlEvent> queue;
    ControlServerOptions so;
    so.bind_address = o.bind_address;
    so.run_id = log.run_id();
    so.incarnation = k;
    so.world_size = o.num_ranks;
    so.secret = secret;
    auto server = ControlServer::Start(so, [&](const ControlEvent& e) {
      {
        std::lock_guard<std::mutex> lock(mu);
        queue.push_back(e);
      }
      if (e.kind != ControlEventKind::kHeartbeat) wake.notify_one();
    });
    if (!server.ok()) return server.status();

    MpirunSpec spec;
    spec.num_ranks = o.num_ranks;
    spec.hostfile = o.hostfile;
    spec.log_dir = o.run_dir + "/logs/" + log.run_id() + "/incarnation_" + std::to_string(k);
    spec.program = o.program;
    spec.program_args = o.program_args;
    spec.mpirun = o.mpirun;
    spec.extra_env = {
        {kEnvControlAddress, o.bind_address == "0.0.0.0" ? "127.0.0.1" : o.bind_address},
        {kEnvControlPort, std::to_string((*server)->port())},
        {kEnvControlSecret, secret},
        {kEnvRunId, log.run_id()},
        {kEnvIncarnation, std::to_string(k)},
        {kEnvHeartbeatMs, std::to_string(o.heartbeat_ms)},
    };
    spec.extra_env.insert(spec.extra_env.end(), o.extra_env.begin(), o.extra_env.end());
    ASSIGN_OR_RETURN(MpirunCommand cmd, BuildMpirunCommand(spec));
    RETURN_IF_ERROR(MakeDirs(spec.log_dir));
    const std::string job_log = spec.log_dir + "/mpirun.log";
    ProcessSession session;
    const Clock::time_point launched_at = Clock::now();
    IncarnationRecord rec;
    rec.incarnation = k;
    rec.launched_s = log.At(launched_at);
    rec.start_step = resume_step;
    if (Status s = session.Start(cmd.argv, cmd.env, job_log); !s.ok()) {
      log.Emit(k, "error", "cannot start mpirun: " + s.ToString());
      return s;
    }
    log.Emit(k, "launch",
             "incarnation " + std::to_string(k) + ": mpirun -np " + std::to_string(o.num_ranks) +
                 " (pid " + std::to_string(session.pid()) + "), " +
                 (newest_committed >= 0 ? "resuming from checkpoint step " + std::to_string(resume_step)
                                        : std::string("from step 0")));
    LogEcho echo(job_log, o.echo_job_output ? o.out : nullptr);
    FailureDetector detector(o.detector, o.num_ranks, launched_at);
    detector.SetStartStep(resume_step);

    // ---- watch --------------------------------------------------------------------------
    Incarnation end;
    int registered = 0;
    bool stop_sent = false, first_step_seen = false;
    Clock::time_point stop_deadline{};
    int64_t inc_max_step = -1;
    Clock::time_point last_advance{};
    std::optional<int> bye_failure_rank;
    int bye_failure_code = 0;
    std::vector<int> bye_code(o.num_ranks, -1);
    // Returns whether a connection closed (the caller lets the simultaneity window pass).
    auto drain = [&]() {
      bool closed = false;
      std::vector<ControlEvent> batch;
      {
        std::lock_guard<std::mutex> lock(mu);
        batch.swap(queue);
      }
      for (const ControlEvent& e : batch) {
        detector.OnEvent(e);
        closed |= e.kind == ControlEventKind::kDisconnected;
        switch (e.kind) {
          case ControlEventKind::kRegistered:
            if (++registered == o.num_ranks) {
              log.Emit(k, "registered", "all " + std::to_string(o.num_ranks) + " ranks connected in " +
                                            Fixed(SecondsBetween(launched_at, e.time), 2) + " s");
            }
            break;
          case ControlEventKind::kHeartbeat:
            if (e.step > inc_max_step) {
              // Step time from the max step's advances (several steps may pass between beats).
              if (inc_max_step >= 0 && last_advance != Clock::time_point{} && inc_max_step > resume_step) {
                const double dt = SecondsBetween(last_advance, e.time) / static_cast<double>(e.step - inc_max_step);
                step_seconds.push_back(dt);
              }
              inc_max_step = e.step;
              last_advance = e.time;
              max_step_seen = std::max(max_step_seen, e.step);
              if (!first_step_seen && e.step > resume_step) {
                first_step_seen = true;
                const double t = log.At(e.time);
                std::string msg = "step " + std::to_string(e.step) + " done, " +
                                  Fixed(t - rec.launched_s, 2) + " s after launch";
                if (!report.failures.empty() && report.failures.back().resumed_s < 0) {
                  FailureRecord& f = report.failures.back();
                  f.resumed_s = t;
                  f.load_s = t - rec.launched_s;
                  msg += ", " + Fixed(t - f.failed_s, 2) + " s after the failure";
                }
                log.Emit(k, "progress", msg);
              }
            }
            break;
          case ControlEventKind::kCommit:
            if (e.step > newest_committed) newest_committed = e.step;
            log.Emit(k, "commit", "checkpoint step " + std::to_string(e.step) + " committed");
            break;
          case ControlEventKind::kCatalog:
            if (log.catalog() != nullptr) {
              if (Status s = ApplyCatalogRecord(e.catalog, *log.catalog()); !s.ok()) {
                log.Emit(k, "catalog", "could not record: " + s.ToString());
              }
            }
            if (e.catalog.op == CatalogOp::kEvent && e.catalog.kind == "corrupt") {
              // The ranks set the damaged checkpoint aside and fall back to an older one.
              log.Emit(k, "corrupt", e.catalog.message);
              newest_committed = NewestCommitted(o.checkpoint_root);
              rec.start_step = std::max<int64_t>(newest_committed, 0);
            }
            break;
          case ControlEventKind::kBye:
            if (e.rank >= 0 && e.rank < o.num_ranks) bye_code[e.rank] = e.exit_code;
            if (e.exit_code != kExitOk && !IsFinalExitCode(e.exit_code) &&
                !(e.exit_code == kExitStopped && stop_sent) && !bye_failure_rank) {
              bye_failure_rank = e.rank;
              bye_failure_code = e.exit_code;
            }
            break;
          case ControlEventKind::kRejected:
            log.Emit(k, "rejected", "connection from " + e.peer + " refused: " + e.reason);
            break;
          default:
            break;
        }
      }
      return closed;
    };

    auto stop_job = [&](const std::string& why) {
      const StopReport r = session.Stop(std::chrono::milliseconds(static_cast<int64_t>(o.stop_grace_s * 1000)));
      log.Emit(k, "stop", why + ": " + r.ToString());
    };

    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait_for(lock, kTick, [&] { return !queue.empty() && queue.back().kind != ControlEventKind::kHeartbeat; });
      }
      if (drain()) {
        // Ranks that die together (a lost host) close within microseconds of each other.
        std::this_thread::sleep_for(std::chrono::microseconds(
            static_cast<int64_t>(o.detector.simultaneous_loss_ms * 1000) + 200));
        drain();
      }
      echo.Pump();
      const Clock::time_point now = Clock::now();

      // User requests (signals).
      const int stops = stop_requests_.load(std::memory_order_relaxed);
      if (stops > stops_handled) {
        stops_handled = stops;
        if (!stop_sent) {
          stop_sent = true;
          stop_deadline = now + std::chrono::milliseconds(static_cast<int64_t>(o.preempt_timeout_s * 1000));
          const int n = (*server)->Broadcast(SupervisorCommand::kStop);
          log.Emit(k, "preempt", "stop requested: asked " + std::to_string(n) +
                                     " ranks to checkpoint and exit (up to " +
                                     Fixed(o.preempt_timeout_s, 0) + " s)");
        } else {
          stop_job("second stop request");
          end.end = Incarnation::End::kStopped;
          end.exit_code = kExitStopped;
          end.detail = "stopped at once on a second request (no final checkpoint)";
          break;
        }
      }
      const int ckpts = checkpoint_requests_.load(std::memory_order_relaxed);
      if (ckpts > checkpoints_handled) {
        checkpoints_handled = ckpts;
        const int n = (*server)->Broadcast(SupervisorCommand::kCheckpointNow);
        log.Emit(k, "checkpoint", "checkpoint requested from " + std::to_string(n) + " ranks");
      }

      // A rank that reported its own failure before exiting: it is the failure, not the
      // peers mpirun kills after it.
      if (bye_failure_rank) {
        Failure f;
        f.kind = FailureKind::kRankExit;
        f.ranks = {*bye_failure_rank};
        f.detail = "rank " + std::to_string(*bye_failure_rank) + " exited with code " +
                   std::to_string(bye_failure_code);
        f.suspected_at = now;
        f.detected_at = now;
        f.step = inc_max_step;
        end.failure = f;
        end.end = Incarnation::End::kFailure;
        stop_job("rank failure");
        break;
      }

      if (auto exited = session.Poll()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the last frames
        drain();
        echo.Pump();
        const int code = exited->ShellCode();
        if (exited->exited && code == kExitOk) {
          end.end = Incarnation::End::kFinished;
        } else if (exited->exited && code == kExitStopped) {
          end.end = stop_sent ? Incarnation::End::kStopped : Incarnation::End::kFailure;
          end.exit_code = kExitStopped;
          end.detail = "the ranks stopped after their checkpoint";
        } else if (exited->exited && IsFinalExitCode(code)) {
          end.end = Incarnation::End::kFinalError;
          end.exit_code = code;
        } else {
          end.end = Incarnation::End::kFailure;
        }
        if (end.end == Incarnation::End::kFailure) {
          Failure f;
          f.kind = FailureKind::kRankExit;
          for (int r = 0; r < o.num_ranks; ++r) {
            if (bye_code[r] != kExitOk) f.ranks.push_back(r);
          }
          f.detail = "mpirun ended (" + exited->ToString() + ")" +
                     (f.ranks.empty() ? std::string() : " without a clean exit of ranks " + RankList(f.ranks));
          f.suspected_at = now;
          f.detected_at = now;
          f.step = inc_max_step;
          end.failure = f;
        }
        stop_job("job ended (" + exited->ToString() + ")");  // reaps stragglers, if any
        break;
      }

      if (stop_sent) {
        if (now >= stop_deadline) {
          stop_job("the ranks did not stop within the preemption timeout");
          end.end = Incarnation::End::kStopped;
          end.exit_code = kExitStopped;
          end.detail = "stopped without a final checkpoint (timeout)";
          break;
        }
        continue;  // ranks are saving: a slow step is expected now
      }

      for (const StragglerReport& s : detector.TakeStragglers()) {
        report.stragglers.push_back({s.rank, s.detail, log.At(s.at)});
        log.Emit(k, "straggler", s.detail);
      }
      if (auto f = detector.Check((*server)->Snapshot(), now)) {
        end.failure = *f;
        end.end = Incarnation::End::kFailure;
        stop_job(std::string(FailureKindName(f->kind)) + " detected");
        break;
      }
    }
    (*server)->Stop();
    echo.Pump();
    rec.ended_s = log.Now();
    rec.last_step = inc_max_step;

    // ---- decide ---------------------------------------------------------------------------
    switch (end.end) {
      case Incarnation::End::kFinished:
        rec.outcome = "finished";
        report.incarnations.push_back(rec);
        report.outcome = "finished";
        outcome.exit_code = kExitOk;
        break;
      case Incarnation::End::kStopped:
        rec.outcome = "stopped";
        report.incarnations.push_back(rec);
        report.outcome = "stopped";
        report.outcome_detail = end.detail + "; newest committed checkpoint: " +
                                (newest_committed >= 0 ? "step " + std::to_string(newest_committed) : "none") +
                                " (`tessera launch` with the same config resumes from it)";
        outcome.exit_code = kExitStopped;
        break;
      case Incarnation::End::kFinalError:
        rec.outcome = "final_error";
        report.incarnations.push_back(rec);
        report.outcome = end.exit_code == kExitCorruptCheckpoint ? "failed" : "bad_config";
        report.outcome_detail = "the ranks exited with code " + std::to_string(end.exit_code) +
                                (end.exit_code == kExitCorruptCheckpoint
                                     ? " (no usable checkpoint): a restart cannot help"
                                     : " (bad config or input): a restart cannot help") +
                                "; see " + job_log;
        outcome.exit_code = end.exit_code;
        break;
      case Incarnation::End::kFailure:
      case Incarnation::End::kLaunchError: {
        rec.outcome = "failed";
        report.incarnations.push_back(rec);
        const Failure& f = *end.failure;
        FailureRecord fr;
        fr.incarnation = k;
        fr.kind = FailureKindName(f.kind);
        fr.ranks = f.ranks;
        fr.detail = f.detail;
        fr.failed_s = log.At(f.suspected_at);
        fr.detected_s = log.At(f.detected_at);
        fr.step_at_failure = std::max<int64_t>(f.step, inc_max_step);
        log.Emit(k, "failure",
                 fr.kind + " (ranks " + RankList(f.ranks) + ") at step " +
                     std::to_string(fr.step_at_failure) + ": " + f.detail + "; detected after " +
                     Fixed(fr.detected_s - fr.failed_s, 3) + " s");
        const RestartDecision d = policy.OnFailure(Clock::now(), newest_committed);
        fr.resume_step = d.restart ? std::max<int64_t>(newest_committed, 0) : -1;
        report.failures.push_back(fr);
        if (!d.restart) {
          report.outcome = "gave_up";
          report.outcome_detail = d.reason;
          log.Emit(k, "gave_up", d.reason);
          outcome.exit_code = kExitGaveUp;
          break;
        }
        log.Emit(k, "restart",
                 "restart " + std::to_string(policy.restarts()) + " in " + Fixed(d.backoff_s, 1) +
                     " s from " +
                     (newest_committed >= 0 ? "checkpoint step " + std::to_string(newest_committed)
                                            : std::string("step 0 (no checkpoint)")) +
                     "; " + std::to_string(fr.step_at_failure - fr.resume_step) + " steps to redo");
        // Backoff, cut short by a stop request (nothing runs: stopping is immediate).
        const Clock::time_point until =
            Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(d.backoff_s * 1000));
        while (Clock::now() < until && stop_requests_.load() == stops_handled) {
          std::this_thread::sleep_for(kTick);
        }
        if (stop_requests_.load() != stops_handled) {
          report.outcome = "stopped";
          report.outcome_detail = "stop requested during the restart backoff; newest committed checkpoint: " +
                                  (newest_committed >= 0 ? "step " + std::to_string(newest_committed) : "none");
          log.Emit(k, "preempt", report.outcome_detail);
          outcome.exit_code = kExitStopped;
          break;
        }
        continue;
      }
    }
    break;
  }

  report.wall_s = log.Now();
  report.final_step = max_step_seen;
  if (!step_seconds.empty()) {
    std::vector<double> sorted = step_seconds;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    report.median_step_s = sorted[sorted.size() / 2];
  }
  log.Emit(static_cast<int64_t>(report.incarnations.size()) - 1, "end",
           report.outcome + (report.outcome_detail.empty() ? "" : ": " + report.outcome_detail));
  if (o.out != nullptr) {
    std::fputs(FormatRunReport(report).c_str(), o.out);
    std::fflush(o.out);
  }
  RETURN_IF_ERROR(WriteFileAtomic(o.run_dir + "/report.json", JsonWriter().Value(RunReportJson(report)).str() + "\n"));
  return outcome;
}

}  // namespace tessera
