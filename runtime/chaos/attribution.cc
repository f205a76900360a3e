// runtime/chaos/attribution.cc — see attribution.h for the rules.
#include "runtime/chaos/attribution.h"

#include <algorithm>
#include <set>

#include "runtime/core/exit_codes.h"
#include "runtime/core/json.h"

namespace tessera {
namespace {

constexpr double kForever = 1e300;
// A kill is seen at once (allowing for a restart in progress); a stopped rank after the
// heartbeat timeout.
constexpr double kKillWithinS = 10;
constexpr double kStopSlackS = 10;
constexpr double kStragglerAfterWindowS = 10;
constexpr double kSaveFailedAfterWindowS = 30;
constexpr double kCheckpointerStopAfterWindowS = 5;

bool Names(const std::vector<int>& named, const std::vector<int>& hit) {
  for (int r : named) {
    if (std::find(hit.begin(), hit.end(), r) != hit.end()) return true;
  }
  return false;
}

// The evidence, each piece claimable once.
class Evidence {
 public:
  Evidence(const std::vector<SupervisorEvent>& events, const std::vector<ReportedFailure>& failures)
      : events_(events), failures_(failures), failure_claimed_(failures.size(), false) {}

  // The first unclaimed event of `kind` in [after, before] that names `rank` (any rank when
  // rank < 0); claims it.
  const SupervisorEvent* TakeEvent(const std::string& kind, double after, double before, int rank = -1) {
    for (size_t i = 0; i < events_.size(); ++i) {
      const SupervisorEvent& e = events_[i];
      if (e.kind != kind || e.unix_s < after || e.unix_s > before || events_claimed_.count(i)) continue;
      if (rank >= 0 && !Names(e.ranks, {rank})) continue;
      events_claimed_.insert(i);
      return &e;
    }
    return nullptr;
  }

  // The failure a fault caused: the first unclaimed one in [after, after + within_s] that
  // names one of `hit` or names nobody (mpirun's own exit may not); claims it.
  const ReportedFailure* TakeFailure(double after, const std::vector<int>& hit, double within_s) {
    for (size_t i = 0; i < failures_.size(); ++i) {
      const ReportedFailure& r = failures_[i];
      if (failure_claimed_[i] || r.detected_unix < after || r.detected_unix > after + within_s) continue;
      if (!r.ranks.empty() && !Names(r.ranks, hit)) continue;
      failure_claimed_[i] = true;
      return &r;
    }
    return nullptr;
  }

  // Whether any failure was detected in [after, before] (claimed or not).
  bool AnyFailure(double after, double before) const {
    for (const ReportedFailure& r : failures_) {
      if (r.detected_unix >= after && r.detected_unix <= before) return true;
    }
    return false;
  }

  // Every unclaimed checkpointer stop (rank_exit with the restartable code) in [after,
  // before]; claims them.
  std::vector<const ReportedFailure*> TakeCheckpointerStops(double after, double before) {
    std::vector<const ReportedFailure*> taken;
    for (size_t i = 0; i < failures_.size(); ++i) {
      const ReportedFailure& r = failures_[i];
      if (failure_claimed_[i] || r.kind != "rank_exit" || r.exit_code != kExitRestartable ||
          r.detected_unix < after || r.detected_unix > before) {
        continue;
      }
      failure_claimed_[i] = true;
      taken.push_back(&r);
    }
    return taken;
  }

  std::vector<ReportedFailure> Unclaimed() const {
    std::vector<ReportedFailure> out;
    for (size_t i = 0; i < failures_.size(); ++i) {
      if (!failure_claimed_[i]) out.push_back(failures_[i]);
    }
    return out;
  }

 private:
  const std::vector<SupervisorEvent>& events_;
  const std::vector<ReportedFailure>& failures_;
  std::set<size_t> events_claimed_;
  std::vector<bool> failure_claimed_;
};

void DetectedBy(const ReportedFailure* r, const InjectedFault& f, FaultOutcome& out) {
  if (r == nullptr) return;
  out.detected = true;
  out.detected_as = r->kind;
  out.detection_s = std::max(0.0, r->detected_unix - f.injected_unix);
  out.recovery_s = r->resumed_unix >= 0 ? r->resumed_unix - f.injected_unix : -1;
  out.steps_lost = r->steps_lost;
}

void DetectedByEvent(const SupervisorEvent* e, const InjectedFault& f, FaultOutcome& out) {
  if (e == nullptr) return;
  out.detected = true;
  out.detected_as = e->kind;
  out.detection_s = e->unix_s - f.injected_unix;
}

// The evidence of one injected fault, by kind (the rules of attribution.h).
void Attribute(const InjectedFault& f, const AttributionOptions& o, Evidence& ev, FaultOutcome& out) {
  const double t0 = f.injected_unix;
  switch (f.kind) {
    case FaultKind::kKillRank:
    case FaultKind::kKillInCheckpoint:
    case FaultKind::kKillHost:
    case FaultKind::kLoseHost:
      DetectedBy(ev.TakeFailure(t0, f.ranks, kKillWithinS), f, out);
      break;
    case FaultKind::kPartition:
      // Seen when a connection breaks or the heartbeats stop, at the latest one heartbeat
      // timeout after the link went down.
      DetectedBy(ev.TakeFailure(t0, f.ranks, o.heartbeat_timeout_s + kStopSlackS), f, out);
      break;
    case FaultKind::kSlowLink:
      // Not a failure: handled when the job rides through the window without one.
      if (!ev.AnyFailure(t0, f.active_until_unix + kStragglerAfterWindowS)) {
        out.detected = true;
        out.detected_as = "ridden through";
        out.detection_s = 0;
      } else {
        out.note = "the slow link ended in a failure";
      }
      break;
    case FaultKind::kStopRank:
      DetectedBy(ev.TakeFailure(t0, f.ranks, o.heartbeat_timeout_s + kStopSlackS), f, out);
      break;
    case FaultKind::kSlowRank:
      DetectedByEvent(ev.TakeEvent("straggler", t0, f.active_until_unix + kStragglerAfterWindowS,
                                   f.ranks.empty() ? -1 : f.ranks.front()),
                      f, out);
      break;
    case FaultKind::kCorruptShard:
    case FaultKind::kTruncateShard:
      DetectedByEvent(ev.TakeEvent("ckpt_corrupt", t0, kForever), f, out);
      // The restart it forced (the campaign killed rank 0): its recovery is this fault's.
      if (const ReportedFailure* r = ev.TakeFailure(t0, {0}, kKillWithinS)) {
        out.recovery_s = r->resumed_unix >= 0 ? r->resumed_unix - t0 : -1;
        out.steps_lost = r->steps_lost;
      }
      break;
    case FaultKind::kIoError:
      DetectedByEvent(ev.TakeEvent("ckpt_save_failed", t0, f.active_until_unix + kSaveFailedAfterWindowS),
                      f, out);
      // checkpoint.max_failures failed saves in a row stop the run (exit 1) and the
      // supervisor restarts it: those restarts are this fault's doing.
      for (const ReportedFailure* r :
           ev.TakeCheckpointerStops(t0, f.active_until_unix + kCheckpointerStopAfterWindowS)) {
        out.steps_lost += r->steps_lost;
        if (r->resumed_unix >= 0) out.recovery_s = r->resumed_unix - t0;
      }
      break;
    case FaultKind::kPreempt:
      if (const SupervisorEvent* e = ev.TakeEvent("preempt", t0, kForever)) {
        DetectedByEvent(e, f, out);
        // Recovery: the relaunch's first step.
        if (const SupervisorEvent* launch = ev.TakeEvent("launch", e->unix_s, kForever)) {
          if (const SupervisorEvent* p = ev.TakeEvent("progress", launch->unix_s, kForever)) {
            out.recovery_s = p->unix_s - t0;
          }
        }
      }
      break;
  }
}

std::vector<int> IntArray(const JsonValue* v) {
  std::vector<int> out;
  if (v == nullptr || !v->is_array()) return out;
  for (const JsonValue& x : v->items()) {
    if (x.is_number()) out.push_back(static_cast<int>(x.as_double()));
  }
  return out;
}

}  // namespace

Attribution AttributeFaults(const std::vector<InjectedFault>& faults,
                            const std::vector<SupervisorEvent>& events,
                            const std::vector<ReportedFailure>& failures,
                            const AttributionOptions& options) {
  Attribution a;
  Evidence ev(events, failures);
  for (const InjectedFault& f : faults) {
    FaultOutcome out;
    out.id = f.id;
    out.kind = FaultKindName(f.kind);
    out.target = f.target.empty() ? f.planned : f.target;
    out.note = f.note;
    if (!f.injected) {
      if (out.note.empty()) out.note = "not injected: the run ended before it was due";
      a.faults.push_back(out);
      continue;
    }
    out.injected_s = f.injected_unix - options.start_unix;
    out.injected_step = f.injected_step;
    Attribute(f, options, ev, out);
    if (!out.detected && out.note.empty()) out.note = "no detection found in the supervisor's events";
    a.faults.push_back(out);
  }
  a.unexplained = ev.Unclaimed();
  return a;
}

Result<SupervisorEvent> ParseSupervisorEvent(std::string_view line) {
  ASSIGN_OR_RETURN(JsonValue v, ParseJson(line));
  const JsonValue* t = v.Find("unix_s");
  const JsonValue* kind = v.Find("kind");
  const JsonValue* msg = v.Find("message");
  if (t == nullptr || kind == nullptr || msg == nullptr || !t->is_number() || !kind->is_string() ||
      !msg->is_string()) {
    return InvalidArgument("events.jsonl line without unix_s, kind and message: " + std::string(line));
  }
  SupervisorEvent e;
  e.unix_s = t->as_double();
  e.kind = kind->as_string();
  e.message = msg->as_string();
  e.ranks = IntArray(v.Find("ranks"));
  return e;
}

Result<LaunchReport> ParseLaunchReport(std::string_view json) {
  ASSIGN_OR_RETURN(JsonValue v, ParseJson(json, 1 << 20));
  LaunchReport report;
  const JsonValue* start = v.Find("start_unix_s");
  const JsonValue* failures = v.Find("failures");
  if (const JsonValue* median = v.Find("step_s"); median != nullptr && median->is_number() && median->as_double() > 0) {
    report.step_s = median->as_double();
  }
  if (start == nullptr || !start->is_number() || failures == nullptr || !failures->is_array()) return report;
  for (const JsonValue& f : failures->items()) {
    ReportedFailure r;
    auto num = [&](const char* key, double fallback) {
      const JsonValue* x = f.Find(key);
      return x != nullptr && x->is_number() ? x->as_double() : fallback;
    };
    if (const JsonValue* k = f.Find("kind"); k != nullptr && k->is_string()) r.kind = k->as_string();
    if (const JsonValue* d = f.Find("detail"); d != nullptr && d->is_string()) r.detail = d->as_string();
    r.ranks = IntArray(f.Find("ranks"));
    r.exit_code = static_cast<int>(num("exit_code", -1));
    r.detected_unix = start->as_double() + num("detected_s", 0);
    const double resumed = num("resumed_s", -1);
    r.resumed_unix = resumed >= 0 ? start->as_double() + resumed : -1;
    r.steps_lost = static_cast<int64_t>(num("steps_lost", 0));
    report.failures.push_back(r);
  }
  return report;
}

}  // namespace tessera
