// runtime/supervisor/supervisor.cc — the supervised run: incarnations, restart decisions,
// the report (contract in supervisor.h; one incarnation is incarnation.h).
#include "runtime/supervisor/supervisor.h"

#include <chrono>
#include <ctime>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "checkpoint/catalog.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/file_util.h"
#include "runtime/supervisor/host_pool.h"
#include "runtime/core/json.h"
#include "runtime/supervisor/incarnation.h"
#include "runtime/supervisor/run_log.h"
#include "runtime/supervisor/text.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

std::string NewRunId() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  std::random_device rd;
  return StrFormat("run-%s-%06x", stamp, rd() & 0xffffffu);
}

bool IsWildcard(const std::string& address) {
  return address == "0.0.0.0" || address == "::" || address == "[::]";
}

std::string CheckpointWord(int64_t step) {
  return step >= 0 ? "checkpoint step " + std::to_string(step) : std::string("none");
}

// Records a failure and asks the policy. Returns the backoff before the next launch, or
// nullopt when the run ends (the report says why).
// The ranks on `host`, "0,1".
std::string RanksOnHost(const HostPool& pool, const std::string& host) {
  std::string ranks;
  for (int r = 0; r < pool.ranks(); ++r) {
    if (pool.HostOfRank(r) == host) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  }
  return ranks;
}

// After a failure: lost hosts that answer again come back (host_pool.h); hosts running a rank
// that no longer answer are lost: each is replaced by a spare when one is left (the same
// layout: the restart ends bit-identical), else dropped in an elastic run (a smaller layout),
// else the restart tries the same hosts (and the restart budget decides). Returns an error
// when an elastic restart cannot go on (too few hosts, no layout fits).
Status ReplaceLostHosts(int64_t k, HostPool& pool, RunState& run) {
  const SupervisorOptions& o = *run.options;
  RunLog& log = *run.log;
  const bool elastic = o.elastic_min_hosts > 0;
  bool relayout = false;  // the hosts changed under an elastic run
  for (const HostPool::Rejoined& r : pool.Rejoin()) {
    log.Emit(k, "host_back",
             StrFormat("host %s answers again: %s", r.host.c_str(),
                       r.active ? "it rejoins the job at this restart" : "held as a spare again"));
    relayout = relayout || r.active;
  }
  for (const std::string& host : pool.LostHosts()) {
    const std::string ranks = RanksOnHost(pool, host);
    const std::string spare = pool.Replace(host);
    if (!spare.empty()) {
      log.Emit(k, "host_lost",
               StrFormat("host %s (ranks %s) does not answer: lost; replaced by spare %s (%d "
                         "spare(s) left)", host.c_str(), ranks.c_str(), spare.c_str(), pool.spares_left()));
    } else if (elastic) {
      pool.Remove(host);
      relayout = true;
      log.Emit(k, "host_lost",
               StrFormat("host %s (ranks %s) does not answer: lost; no spare left, going on "
                         "with the %zu host(s) left", host.c_str(), ranks.c_str(), pool.active().size()));
    } else {
      log.Emit(k, "host_lost",
               StrFormat("host %s (ranks %s) does not answer: lost; no spare left, the restart "
                         "uses the same hosts", host.c_str(), ranks.c_str()));
    }
  }
  if (!relayout) return Status::Ok();
  if (static_cast<int>(pool.active().size()) < o.elastic_min_hosts) {
    return FailedPrecondition(StrFormat("%zu host(s) left, fewer than --elastic %d",
                                        pool.active().size(), o.elastic_min_hosts));
  }
  ASSIGN_OR_RETURN(ElasticLayout layout, o.elastic(pool.slots()));
  pool.set_ranks(layout.ranks);
  run.num_ranks = layout.ranks;
  run.extra_args = layout.args;
  log.Emit(k, "elastic", StrFormat("restarting on %zu host(s) with %d ranks: %s",
                                   pool.active().size(), layout.ranks, layout.description.c_str()));
  return Status::Ok();
}

std::optional<double> OnFailure(int64_t k, const Failure& f, RunState& run, RestartPolicy& policy,
                                SupervisorOutcome& outcome, HostPool* pool) {
  RunLog& log = *run.log;
  RunReport& report = *run.report;
  FailureRecord fr;
  fr.incarnation = k;
  fr.kind = FailureKindName(f.kind);
  fr.ranks = f.ranks;
  fr.detail = f.detail;
  fr.exit_code = f.exit_code;
  fr.failed_s = log.At(f.suspected_at);
  fr.detected_s = log.At(f.detected_at);
  fr.step_at_failure = f.step;
  log.Emit(k, "failure",
           StrFormat("%s (%s) at step %lld: %s; detected after %.3f s", fr.kind.c_str(),
                     RankWord(f.ranks).c_str(), static_cast<long long>(f.step), f.detail.c_str(),
                     fr.detected_s - fr.failed_s));
  Status placed = pool != nullptr ? ReplaceLostHosts(k, *pool, run) : Status::Ok();
  // A snapshot the memory tier holds is progress too (the crash-loop guard's measure).
  const int64_t progress = std::max(run.newest_committed, run.newest_in_memory);
  const RestartDecision d = placed.ok() ? policy.OnFailure(Clock::now(), progress)
                                        : RestartDecision{false, 0.0, "elastic restart: " + placed.message()};
  // Where the next incarnation resumes (corrected if it has to fall back past a damaged one).
  fr.resume_step = d.restart ? std::max<int64_t>(run.newest_committed, 0) : -1;
  report.failures.push_back(fr);
  if (!d.restart) {
    report.outcome = "gave_up";
    report.outcome_detail = d.reason;
    log.Emit(k, "gave_up", d.reason);
    outcome.exit_code = kExitGaveUp;
    return std::nullopt;
  }
  const std::string memory_word =
      run.newest_in_memory > run.newest_committed
          ? StrFormat(" (or memory step %lld, if the surviving hosts hold it)",
                      static_cast<long long>(run.newest_in_memory))
          : std::string();
  log.Emit(k, "restart",
           StrFormat("restart %d in %.1f s from %s%s; %lld steps to redo", policy.restarts(), d.backoff_s,
                     run.newest_committed >= 0 ? CheckpointWord(run.newest_committed).c_str()
                                               : "step 0 (no checkpoint)",
                     memory_word.c_str(),
                     static_cast<long long>(std::max<int64_t>(0, f.step - fr.resume_step))));
  return d.backoff_s;
}

// The options a run cannot start without, checked before anything is created.
Status CheckOptions(const SupervisorOptions& o) {
  if (o.num_ranks < 1) return InvalidArgument("launch: -n must be >= 1");
  if (o.program.empty()) return InvalidArgument("launch: no rank program");
  if (o.run_dir.empty()) return InvalidArgument("launch: no run directory");
  if (o.advertise_address.empty() && IsWildcard(o.bind_address)) {
    return InvalidArgument("launch: --bind " + o.bind_address +
                           " listens on every interface, so the ranks need to be told where to "
                           "connect: add --advertise IP (this host's address as the ranks see it)");
  }
  RETURN_IF_ERROR(ValidateDetectorOptions(o.detector));
  return ValidateRestartPolicyOptions(o.restart);
}

const char* IncarnationOutcomeName(IncarnationEnd::Kind kind) {
  switch (kind) {
    case IncarnationEnd::Kind::kFinished: return "finished";
    case IncarnationEnd::Kind::kStopped: return "stopped";
    case IncarnationEnd::Kind::kFinalError: return "final_error";
    case IncarnationEnd::Kind::kFailure: return "failed";
  }
  return "failed";
}

// An incarnation that ends the run (finished, stopped, or a code no restart can cure): the
// report's outcome and the exit code. False for a failure (the policy decides).
bool EndsRun(const IncarnationEnd& end, const RunState& run, SupervisorOutcome& outcome) {
  RunReport& report = outcome.report;
  switch (end.kind) {
    case IncarnationEnd::Kind::kFinished:
      report.outcome = "finished";
      outcome.exit_code = kExitOk;
      return true;
    case IncarnationEnd::Kind::kStopped:
      report.outcome = "stopped";
      report.outcome_detail = end.detail + "; newest committed: " + CheckpointWord(run.newest_committed) +
                              " (`tessera launch` with the same config resumes from it)";
      outcome.exit_code = kExitStopped;
      return true;
    case IncarnationEnd::Kind::kFinalError:
      report.outcome = FinalOutcome(end.exit_code);
      report.outcome_detail = end.detail;
      outcome.exit_code = end.exit_code;
      return true;
    case IncarnationEnd::Kind::kFailure:
      return false;
  }
  return false;
}

// The backoff before restart `k + 1`, cut short by a stop request (nothing runs: the stop is
// immediate). True when a stop ended it: the run is over, stopped.
bool StoppedDuringBackoff(int64_t k, double backoff_s, const std::atomic<int>& stop_requests,
                          const RunState& run, SupervisorOutcome& outcome) {
  const Clock::time_point until =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(backoff_s * 1e6));
  while (Clock::now() < until && stop_requests.load() == run.stops_handled) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (stop_requests.load() == run.stops_handled) return false;
  RunReport& report = outcome.report;
  report.outcome = "stopped";
  report.outcome_detail = "stop requested during the restart backoff; newest committed: " +
                          CheckpointWord(run.newest_committed);
  run.log->Emit(k, "preempt", report.outcome_detail);
  outcome.exit_code = kExitStopped;
  return true;
}

// The end of the run: the report's totals, the "end" event, the terminal report and
// <run_dir>/report.json.
Status FinishReport(const RunState& run, RunLog& log, const SupervisorOptions& o, RunReport& report) {
  report.wall_s = log.Now();
  // A run that did not finish keeps only what its newest checkpoint holds.
  report.final_step = report.outcome == "finished" ? run.max_step_seen : run.newest_committed;
  report.step_s = run.steps_stepped > 0 ? run.stepping_s / static_cast<double>(run.steps_stepped)
                                        : Median(run.step_samples_s);
  log.Emit(static_cast<int64_t>(report.incarnations.size()) - 1, "end",
           report.outcome + (report.outcome_detail.empty() ? "" : ": " + report.outcome_detail));
  if (o.out != nullptr) {
    std::fputs(FormatRunReport(report).c_str(), o.out);
    std::fflush(o.out);
  }
  return WriteFileAtomic(o.run_dir + "/report.json",
                         JsonWriter().Value(RunReportJson(report)).str() + "\n");
}

}  // namespace

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Result<SupervisorOutcome> Supervisor::Run() {
  const SupervisorOptions& o = options_;
  RETURN_IF_ERROR(CheckOptions(o));
  RETURN_IF_ERROR(MakeDirs(o.run_dir));

  RunLog log(o.out, NewRunId(), Clock::now());
  std::unique_ptr<Catalog> catalog;
  if (!o.checkpoint_root.empty()) {
    // The supervisor is the catalog's single writer for the whole run.
    ASSIGN_OR_RETURN(OpenedCatalog opened, OpenCatalogForWriting(o.checkpoint_root));
    catalog = std::move(opened.catalog);
    if (!opened.recreated.empty() && o.out != nullptr) {
      std::fprintf(o.out, "supervisor: %s\n", opened.recreated.c_str());
    }
  }
  RETURN_IF_ERROR(log.Open(o.run_dir, catalog.get()));

  SupervisorOutcome outcome;
  RunReport& report = outcome.report;
  report.run_id = log.run_id();
  report.target_steps = o.target_steps;
  report.start_unix_s = log.start_unix_s();
  RunState run;
  run.options = &o;
  run.log = &log;
  run.report = &report;
  run.newest_committed = NewestCommittedStep(o.checkpoint_root);
  run.stop_requests = &stop_requests_;
  run.checkpoint_requests = &checkpoint_requests_;
  run.num_ranks = o.num_ranks;
  RestartPolicy policy(o.restart, run.newest_committed);
  std::optional<HostPool> pool;
  if (!o.hostfile.empty()) {
    ASSIGN_OR_RETURN(std::vector<HostfileEntry> hosts, ParseHostfile(o.hostfile));
    ASSIGN_OR_RETURN(HostPool p, HostPool::Create(std::move(hosts), o.spares, o.num_ranks, o.hostfile));
    pool.emplace(std::move(p));
  } else if (o.spares > 0) {
    return InvalidArgument("launch: --spares needs --hostfile (the spares are its last hosts)");
  }

  log.Emit(0, "start",
           StrFormat("run %s: %d ranks, %s, logs in %s/logs/%s", log.run_id().c_str(), o.num_ranks,
                     o.checkpoint_root.empty() ? "no checkpoints (a restart starts over)"
                                               : ("checkpoints in " + o.checkpoint_root).c_str(),
                     o.run_dir.c_str(), log.run_id().c_str()));

  for (int64_t k = 0;; ++k) {
    if (pool) {
      ASSIGN_OR_RETURN(run.hostfile, pool->WriteHostfile(o.run_dir, k));
    }
    ASSIGN_OR_RETURN(IncarnationEnd end, RunIncarnation(k, run));
    end.record.outcome = IncarnationOutcomeName(end.kind);
    report.incarnations.push_back(end.record);
    if (EndsRun(end, run, outcome)) break;
    const std::optional<double> backoff_s =
        OnFailure(k, *end.failure, run, policy, outcome, pool ? &*pool : nullptr);
    if (!backoff_s || StoppedDuringBackoff(k, *backoff_s, stop_requests_, run, outcome)) break;
  }
  RETURN_IF_ERROR(FinishReport(run, log, o, report));
  return outcome;
}

}  // namespace tessera
