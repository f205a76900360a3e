// runtime/supervisor/failure_detector.cc — see failure_detector.h for the rules.
#include "runtime/supervisor/failure_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/core/check.h"
#include "runtime/supervisor/text.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool Finite(double x) { return std::isfinite(x); }

}  // namespace

const char* FailureKindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::kRankExit: return "rank_exit";
    case FailureKind::kConnectionLost: return "connection_lost";
    case FailureKind::kHeartbeatTimeout: return "heartbeat_timeout";
    case FailureKind::kStall: return "stall";
    case FailureKind::kStartupTimeout: return "startup_timeout";
  }
  return "unknown";
}

Status ValidateDetectorOptions(const DetectorOptions& o) {
  auto positive = [](const char* name, double v) -> Status {
    if (!Finite(v) || v <= 0) return InvalidArgument(StrFormat("%s must be > 0, got %g", name, v));
    return Status::Ok();
  };
  RETURN_IF_ERROR(positive("--heartbeat-timeout", o.heartbeat_timeout_s));
  if (!Finite(o.stall_timeout_s) || o.stall_timeout_s < 0) {
    return InvalidArgument(StrFormat(
        "--stall-timeout must be >= 0 (0: derived from the step time), got %g", o.stall_timeout_s));
  }
  RETURN_IF_ERROR(positive("--stall-floor", o.stall_floor_s));
  RETURN_IF_ERROR(positive("stall_factor", o.stall_factor));
  RETURN_IF_ERROR(positive("--startup-timeout", o.startup_timeout_s));
  if (!Finite(o.straggler_factor) || o.straggler_factor < 1) {
    return InvalidArgument(StrFormat("straggler_factor must be >= 1, got %g", o.straggler_factor));
  }
  if (!Finite(o.straggler_floor_ms) || o.straggler_floor_ms < 0) {
    return InvalidArgument(StrFormat("straggler_floor_ms must be >= 0, got %g", o.straggler_floor_ms));
  }
  if (o.straggler_window < 2) {
    return InvalidArgument(StrFormat("straggler_window must be >= 2, got %d", o.straggler_window));
  }
  if (o.straggler_min_heartbeats < 1 || o.straggler_min_heartbeats > o.straggler_window) {
    return InvalidArgument(StrFormat("straggler_min_heartbeats must be in [1, %d], got %d",
                                  o.straggler_window, o.straggler_min_heartbeats));
  }
  if (!Finite(o.straggler_report_interval_s) || o.straggler_report_interval_s < 0) {
    return InvalidArgument(StrFormat("straggler_report_interval_s must be >= 0, got %g",
                                  o.straggler_report_interval_s));
  }
  return Status::Ok();
}

FailureDetector::FailureDetector(const DetectorOptions& options, int world_size,
                                 Clock::time_point launched_at)
    : options_(options), world_size_(world_size), launched_at_(launched_at), ranks_(world_size) {
  TESSERA_CHECK(world_size >= 1);
  TESSERA_CHECK(ValidateDetectorOptions(options).ok());
  last_advance_ = launched_at;
}

void FailureDetector::SetStartStep(int64_t step) {
  start_step_ = step;
  start_step_given_ = true;
  if (max_step_ > start_step_) first_step_done_ = true;
}

int FailureDetector::bye_exit_code(int rank) const {
  if (rank < 0 || rank >= world_size_) return -1;
  return ranks_[rank].said_bye ? ranks_[rank].bye_exit_code : -1;
}

double FailureDetector::median_step_s() const {
  return Median(std::vector<double>(step_samples_s_.begin(), step_samples_s_.end()));
}

double FailureDetector::effective_stall_timeout_s() const {
  if (options_.stall_timeout_s > 0) return options_.stall_timeout_s;
  return std::max(options_.stall_floor_s, options_.stall_factor * median_step_s());
}

void FailureDetector::ObserveStep(int64_t step, Clock::time_point t) {
  if (step < 0) return;
  if (max_step_ < 0) {
    max_step_ = step;
    last_advance_ = t;
    if (!start_step_given_) start_step_ = step;
    if (step > start_step_) first_step_done_ = true;
    return;
  }
  if (step <= max_step_) return;
  // Heartbeats can arrive slightly out of order across ranks; never let time run backwards.
  const double dt_s = std::max(0.0, Seconds(t - last_advance_));
  step_samples_s_.push_back(dt_s / static_cast<double>(step - max_step_));
  while (step_samples_s_.size() > static_cast<size_t>(kStepSamples)) step_samples_s_.pop_front();
  max_step_ = step;
  last_advance_ = std::max(last_advance_, t);
  if (step > start_step_) first_step_done_ = true;
}

void FailureDetector::OnEvent(const ControlEvent& e) {
  if (e.rank < 0 || e.rank >= world_size_) return;
  PerRank& r = ranks_[e.rank];
  switch (e.kind) {
    case ControlEventKind::kRegistered:
      // A new connection of this rank: what the previous one said no longer applies.
      r.said_bye = false;
      r.bye_exit_code = -1;
      r.compute_ms.clear();
      r.last_heartbeat_step = -1;
      break;
    case ControlEventKind::kHeartbeat:
      ObserveStep(e.step, e.time);
      // One value per completed step at most: a heartbeat that repeats the step repeats the
      // value too (the rank publishes it with the step).
      if (e.compute_ms >= 0 && r.last_heartbeat_step >= 0 && e.step > r.last_heartbeat_step) {
        r.compute_ms.push_back(e.compute_ms);
        while (r.compute_ms.size() > static_cast<size_t>(options_.straggler_window)) {
          r.compute_ms.pop_front();
        }
      }
      r.last_heartbeat_step = std::max(r.last_heartbeat_step, e.step);
      break;
    case ControlEventKind::kBye:
      r.said_bye = true;
      r.bye_exit_code = e.exit_code;
      break;
    case ControlEventKind::kDisconnected:
      // The server also stamps exit_code on a disconnect that followed a bye.
      if (r.said_bye || e.exit_code >= 0) break;
      if (!r.lost) {
        r.lost = true;
        r.lost_at = e.time;
        r.lost_reason = e.reason;
      }
      break;
    case ControlEventKind::kCommit:
    case ControlEventKind::kRejected:
    case ControlEventKind::kCatalog:
      break;
  }
}

std::optional<Failure> FailureDetector::Check(const std::vector<RankState>& ranks,
                                              Clock::time_point now) {
  if (reported_) return std::nullopt;
  // Fold in steps the snapshot knows, in case a heartbeat event was not forwarded.
  const RankState* newest = nullptr;
  for (const RankState& s : ranks) {
    if (s.heartbeats > 0 && s.step > max_step_ && (newest == nullptr || s.step > newest->step)) {
      newest = &s;
    }
  }
  if (newest != nullptr) ObserveStep(newest->step, newest->last_heartbeat);

  std::optional<Failure> f = CheckConnectionLost(ranks, now);
  if (!f) f = CheckHeartbeats(ranks, now);
  if (!f) f = CheckStall(ranks, now);
  if (!f) f = CheckStartup(ranks, now);
  if (f) {
    f->detected_at = now;
    f->step = max_step_;
    reported_ = true;
    return f;
  }
  if (world_size_ >= 2) CheckStragglers(now);
  return std::nullopt;
}

std::optional<Failure> FailureDetector::CheckConnectionLost(const std::vector<RankState>& ranks,
                                                            Clock::time_point now) {
  struct Lost {
    int rank;
    Clock::time_point at;
    std::string reason;
  };
  std::vector<Lost> lost;
  for (int r = 0; r < world_size_; ++r) {
    const PerRank& pr = ranks_[r];
    if (pr.lost) {
      lost.push_back({r, pr.lost_at, pr.lost_reason});
    } else if (r < static_cast<int>(ranks.size()) && ranks[r].ever_registered &&
               !ranks[r].connected && !ranks[r].said_bye && !pr.said_bye) {
      // The snapshot shows a closed connection whose event has not reached us (yet).
      lost.push_back({r, ranks[r].disconnected_at, "connection closed"});
    }
  }
  if (lost.empty()) return std::nullopt;
  // The first loss is the failure. mpirun kills the surviving ranks a few milliseconds after
  // it notices a death, so later closes are its doing — except those within the
  // simultaneity window: ranks that died together (a lost host).
  Clock::time_point first = lost[0].at;
  for (const Lost& l : lost) first = std::min(first, l.at);
  const auto window = std::chrono::microseconds(static_cast<int64_t>(options_.simultaneous_loss_ms * 1000));
  // Wait out the window so every rank that died with the first one is in the same failure.
  if (now - first < window) return std::nullopt;
  Failure f;
  f.kind = FailureKind::kConnectionLost;
  f.suspected_at = first;
  std::string reasons, later;
  for (const Lost& l : lost) {
    const double after_ms = std::chrono::duration<double, std::milli>(l.at - first).count();
    if (l.at - first > window) {
      later += StrFormat("%s%d (+%.1f ms)", later.empty() ? "" : ", ", l.rank, after_ms);
      continue;
    }
    f.ranks.push_back(l.rank);
    if (!reasons.empty()) reasons += "; ";
    reasons += StrFormat("rank %d: %s, +%.2f ms", l.rank, l.reason.empty() ? "closed" : l.reason.c_str(),
                      after_ms);
  }
  f.detail = StrFormat("%s: control connection closed without a bye (%s) at step %lld",
                    RankWord(f.ranks).c_str(), reasons.c_str(),
                    static_cast<long long>(max_step_));
  if (!later.empty()) f.detail += "; closed later (taken down with the job): ranks " + later;
  return f;
}

std::optional<Failure> FailureDetector::CheckHeartbeats(const std::vector<RankState>& ranks,
                                                        Clock::time_point now) {
  Failure f;
  f.kind = FailureKind::kHeartbeatTimeout;
  std::string parts;
  bool any = false;
  double longest_s = 0;
  for (const RankState& s : ranks) {
    if (s.rank < 0 || s.rank >= world_size_) continue;
    if (!s.ever_registered || !s.connected || s.said_bye || ranks_[s.rank].said_bye) continue;
    const Clock::time_point last = s.heartbeats > 0 ? s.last_heartbeat : s.registered_at;
    const double silent_s = Seconds(now - last);
    if (silent_s <= options_.heartbeat_timeout_s) continue;
    if (!any || last < f.suspected_at) f.suspected_at = last;
    any = true;
    longest_s = std::max(longest_s, silent_s);
    f.ranks.push_back(s.rank);
    if (!parts.empty()) parts += "; ";
    if (s.heartbeats > 0) {
      parts += StrFormat("rank %d last at step %lld, phase %s", s.rank,
                      static_cast<long long>(s.step), RankPhaseName(s.phase));
    } else {
      parts += StrFormat("rank %d none since it registered", s.rank);
    }
  }
  if (!any) return std::nullopt;
  std::sort(f.ranks.begin(), f.ranks.end());
  f.detail = StrFormat("%s: no heartbeat for %.1f s (timeout %.1f s; %s)", RankWord(f.ranks).c_str(),
                    longest_s, options_.heartbeat_timeout_s, parts.c_str());
  return f;
}

HangBlame FailureDetector::BlameHang(const std::vector<RankState>& ranks) const {
  HangBlame blame;
  Failure f;  // its ranks collect the blamed ones
  // Only a job whose ranks are still there can stall; ranks that left are another story.
  std::vector<const RankState*> live;
  for (const RankState& s : ranks) {
    if (s.rank < 0 || s.rank >= world_size_) continue;
    if (s.ever_registered && s.connected && !s.said_bye && !ranks_[s.rank].said_bye) {
      live.push_back(&s);
    }
  }
  if (live.empty()) return blame;
  int64_t max_seq = -1;
  for (const RankState* s : live) max_seq = std::max(max_seq, s->collective_seq);
  std::vector<const RankState*> behind, waiting;
  for (const RankState* s : live) (s->collective_seq < max_seq ? behind : waiting).push_back(s);
  std::string who;
  if (!behind.empty()) {
    std::string phases;
    for (const RankState* s : behind) {
      f.ranks.push_back(s->rank);
      if (!phases.empty()) phases += "; ";
      if (behind.size() > 1) phases += StrFormat("rank %d: ", s->rank);
      phases += StrFormat("phase %s, #%lld", RankPhaseName(s->phase),
                       static_cast<long long>(s->collective_seq));
    }
    std::vector<int> waiting_ranks;
    for (const RankState* s : waiting) waiting_ranks.push_back(s->rank);
    who = StrFormat("ranks %s did not reach collective #%lld (%s); ranks %s wait in it",
                 JoinRanks(f.ranks).c_str(), static_cast<long long>(max_seq), phases.c_str(),
                 JoinRanks(waiting_ranks).c_str());
  } else {
    std::vector<int> in_collective;
    std::string phases;
    for (const RankState* s : live) {
      if (s->phase == RankPhase::kCollective) {
        in_collective.push_back(s->rank);
        continue;
      }
      f.ranks.push_back(s->rank);
      if (!phases.empty()) phases += "; ";
      phases += StrFormat("rank %d: phase %s", s->rank, RankPhaseName(s->phase));
    }
    if (!f.ranks.empty() && !in_collective.empty()) {
      who = StrFormat("ranks %s are not in collective #%lld (%s); ranks %s wait in it",
                   JoinRanks(f.ranks).c_str(), static_cast<long long>(max_seq), phases.c_str(),
                   JoinRanks(in_collective).c_str());
    } else if (!f.ranks.empty()) {
      who = StrFormat("no rank is in a collective (%s; last collective #%lld)", phases.c_str(),
                   static_cast<long long>(max_seq));
    } else {
      for (const RankState* s : live) f.ranks.push_back(s->rank);
      who = StrFormat("ranks %s all wait in collective #%lld", JoinRanks(f.ranks).c_str(),
                   static_cast<long long>(max_seq));
    }
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  blame.ranks = std::move(f.ranks);
  blame.who = std::move(who);
  return blame;
}

std::optional<Failure> FailureDetector::CheckStall(const std::vector<RankState>& ranks,
                                                   Clock::time_point now) {
  if (!first_step_done_) return std::nullopt;
  // After the last step the ranks save, gather and export: no step advances by design.
  if (target_step_ > 0 && max_step_ >= target_step_) return std::nullopt;
  const double timeout_s = effective_stall_timeout_s();
  const double idle_s = Seconds(now - last_advance_);
  if (idle_s < timeout_s) return std::nullopt;
  HangBlame blame = BlameHang(ranks);
  if (blame.ranks.empty()) return std::nullopt;  // only live ranks can stall

  Failure f;
  f.kind = FailureKind::kStall;
  f.suspected_at = last_advance_;
  f.ranks = std::move(blame.ranks);
  const std::string& who = blame.who;
  std::string how;
  if (options_.stall_timeout_s > 0) {
    how = StrFormat("timeout %.1f s, fixed", timeout_s);
  } else {
    how = StrFormat("timeout %.1f s, %g x median step %.3g s, floor %g s", timeout_s,
                 options_.stall_factor, median_step_s(), options_.stall_floor_s);
  }
  f.detail = StrFormat("no step for %.1f s (%s) at step %lld: %s", idle_s, how.c_str(),
                    static_cast<long long>(max_step_), who.c_str());
  return f;
}

std::optional<Failure> FailureDetector::CheckStartup(const std::vector<RankState>& ranks,
                                                     Clock::time_point now) {
  if (first_step_done_) return std::nullopt;
  const double since_launch_s = Seconds(now - launched_at_);
  if (since_launch_s <= options_.startup_timeout_s) return std::nullopt;
  Failure f;
  f.kind = FailureKind::kStartupTimeout;
  f.suspected_at = launched_at_;
  for (int r = 0; r < world_size_; ++r) {
    const bool registered = r < static_cast<int>(ranks.size()) && ranks[r].ever_registered;
    if (!registered) f.ranks.push_back(r);
  }
  if (!f.ranks.empty()) {
    f.detail = StrFormat("%s did not register within %.1f s of the launch (startup timeout %.1f s)",
                      RankWord(f.ranks).c_str(), since_launch_s, options_.startup_timeout_s);
    return f;
  }
  for (int r = 0; r < world_size_; ++r) f.ranks.push_back(r);
  std::string steps = max_step_ < 0 ? std::string("no heartbeat with a step yet")
                                    : StrFormat("still at step %lld", static_cast<long long>(max_step_));
  f.detail = StrFormat("all %d ranks registered but no step completed within %.1f s of the launch "
                    "(startup timeout %.1f s; %s)",
                    world_size_, since_launch_s, options_.startup_timeout_s, steps.c_str());
  return f;
}

void FailureDetector::CheckStragglers(Clock::time_point now) {
  // Startup is no evidence: rank 0 measures the sgemm peak before step 0 while the others wait.
  if (!first_step_done_) return;
  auto judged = [&](int r) {
    return static_cast<int>(ranks_[r].compute_ms.size()) >= options_.straggler_min_heartbeats;
  };
  for (int r = 0; r < world_size_; ++r) {
    if (!judged(r)) continue;
    PerRank& pr = ranks_[r];
    std::vector<double> peers_ms;
    for (int o = 0; o < world_size_; ++o) {
      if (o == r || !judged(o)) continue;
      peers_ms.insert(peers_ms.end(), ranks_[o].compute_ms.begin(), ranks_[o].compute_ms.end());
    }
    if (peers_ms.empty()) continue;
    const double mine = Median(std::vector<double>(pr.compute_ms.begin(), pr.compute_ms.end()));
    const double peers = Median(peers_ms);
    if (mine <= options_.straggler_factor * peers || mine - peers < options_.straggler_floor_ms) {
      continue;
    }
    if (pr.reported_straggler &&
        Seconds(now - pr.last_straggler_report) < options_.straggler_report_interval_s) {
      continue;
    }
    pr.reported_straggler = true;
    pr.last_straggler_report = now;
    StragglerReport rep;
    rep.rank = r;
    rep.at = now;
    rep.detail = StrFormat(
        "rank %d is a straggler: its steps take %.1f ms outside collectives (median of its last "
        "%zu) against %.1f ms for its peers (median), so everybody waits for it (step %lld)",
        r, mine, pr.compute_ms.size(), peers, static_cast<long long>(max_step_));
    stragglers_.push_back(std::move(rep));
  }
}

std::vector<StragglerReport> FailureDetector::TakeStragglers() {
  std::vector<StragglerReport> out;
  out.swap(stragglers_);
  return out;
}

}  // namespace tessera
