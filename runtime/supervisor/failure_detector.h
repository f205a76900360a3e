// runtime/supervisor/failure_detector.h — decides, from control-plane events and state
// snapshots, that one incarnation of a job has failed, and how.
//
// Owns: the detection rules (connection lost, heartbeat timeout, stall, startup timeout), the
// job's step-time measurement and the straggler statistics. Pure: no sockets, no processes and
// no clock reads; every time is passed in, so tests drive it with fake times. kRankExit is never
// produced here: the supervisor learns a rank's exit from the process (it is in the enum so one
// Failure type describes every failure).
//
// Rules (the supervisor calls OnEvent for every ControlEvent and Check ~every 20 ms):
// - Connection lost: a rank's connection closed (kDisconnected) without a bye before it. A rank
//   that said bye (any exit code) and then disconnected is not a failure: its exit code comes
//   from the process. suspected_at = the disconnect time.
// - Heartbeat timeout: a registered, connected rank that has not said bye sent no heartbeat for
//   more than heartbeat_timeout_s (registered_at counts when no heartbeat yet): SIGSTOP, node
//   gone. suspected_at = its last heartbeat.
// - Stall: heartbeats go on but the job's progress (max over ranks of the heartbeat step) has
//   not advanced for effective_stall_timeout_s since it last advanced; only after the first step
//   completed (before it, the startup timeout applies). ranks = the ranks that did not reach the
//   collective their peers wait in (collective_seq below the maximum; if all equal, the ranks
//   not in phase collective; if none, all). suspected_at = the time the step last advanced.
//   Known limit: checkpoint and eval phases count as no progress, so a job whose eval or
//   checkpoint takes longer than the derived timeout needs a fixed --stall-timeout.
// - Startup timeout: the job has not completed its first step within startup_timeout_s of the
//   launch (covers ranks that never register). suspected_at = the launch time.
// Check returns the first failure in that order, once; after it, Check returns nullopt.
//
// Step time: each time the max step advances, Δt / Δsteps since the previous advance is one
// sample (Δt measured between the heartbeats that revealed the advances, so heartbeat spacing
// cancels out over many steps); the median of the last kStepSamples samples is the step time.
//
// Stragglers (step-time outliers; world_size >= 2, reported, never a failure): each heartbeat
// carries compute_ms, the rank's recent time per step outside waits for collectives (mean of
// its last few steps; tools/supervised_rank.cc). Per rank the detector keeps the last straggler_window values, one
// per heartbeat whose compute_ms >= 0 and whose step is above the step of that rank's previous
// heartbeat (a value is not counted twice for the same step). Once the first step completed, a
// rank with >= straggler_min_heartbeats values whose median exceeds straggler_factor x the
// median of its peers' values (all of them pooled, from peers that have enough values too) AND
// exceeds it by >= straggler_floor_ms is the one everybody waits for: slowed down, it spends the
// extra time outside waits, while its peers spend it waiting for it and their compute stays
// small. The floor keeps millisecond jitter of tiny steps from counting. Why not the fraction of
// heartbeats in phase collective: a rank slowed by being stopped (SIGSTOP duty cycle, a
// descheduled VM) is stopped at random points, inside collectives too, and shows the same
// waiting fraction as its peers. Each rank is reported at most once per
// straggler_report_interval_s.
//
// Thread-safety: none; one thread (the supervisor loop) owns a detector. Invariants: ranks
// outside [0, world_size) in events are ignored; max_step() never decreases.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/supervisor/control_server.h"

namespace tessera {

enum class FailureKind { kRankExit, kConnectionLost, kHeartbeatTimeout, kStall, kStartupTimeout };
// "rank_exit" | "connection_lost" | "heartbeat_timeout" | "stall" | "startup_timeout".
const char* FailureKindName(FailureKind kind);

struct DetectorOptions {
  // No heartbeat from a registered rank for this long -> kHeartbeatTimeout. Seconds, default
  // 10, > 0. Must exceed the ranks' heartbeat interval by a wide margin.
  double heartbeat_timeout_s = 10;
  // Max step unchanged this long -> kStall. Seconds; 0 (default): derived as
  // max(stall_floor_s, stall_factor * median step time); > 0: fixed.
  double stall_timeout_s = 0;
  double stall_floor_s = 30;  // seconds, default 30, > 0: lower bound of the derived timeout
  double stall_factor = 10;   // default 10, > 0: derived timeout in median step times
  // Every rank must register and the job complete its first step within this many seconds of
  // the launch (includes checkpoint load). Default 300, > 0.
  double startup_timeout_s = 300;
  // A rank whose recent compute_ms (median) exceeds straggler_factor x its peers' median and
  // exceeds it by >= straggler_floor_ms is a straggler. Factor default 2, >= 1; floor ms,
  // default 5, >= 0.
  double straggler_factor = 2;
  double straggler_floor_ms = 5;
  // compute_ms values per rank considered (at most one per heartbeat); default 10, >= 2.
  int straggler_window = 10;
  // Connection losses within this many ms of the first one are one failure (ranks that died
  // together: a lost host); later ones are the job being taken down after it.
  double simultaneous_loss_ms = 2;
  int straggler_min_heartbeats = 5;      // a rank is judged once it has this many values; [1, window]
  double straggler_report_interval_s = 60;  // per rank, at most one report per this; >= 0
};

// kInvalidArgument naming the CLI flag (--heartbeat-timeout, --stall-timeout, --stall-floor,
// --startup-timeout) or the option, e.g. "--heartbeat-timeout must be > 0, got -1".
Status ValidateDetectorOptions(const DetectorOptions& options);

struct Failure {
  FailureKind kind = FailureKind::kRankExit;
  std::vector<int> ranks;  // ranks blamed, ascending
  std::string detail;      // one human sentence, e.g. "rank 2: no heartbeat for 10.2 s (...)"
  // Best estimate of when it happened: disconnect time; last heartbeat; time the step last
  // advanced; launch time (see the rules above).
  std::chrono::steady_clock::time_point suspected_at;
  std::chrono::steady_clock::time_point detected_at;
  int64_t step = -1;  // highest step any rank reported when it was detected
  int exit_code = -1;  // the blamed rank's own exit code (its bye), -1 when it said none
};

struct StragglerReport {
  int rank = 0;
  std::string detail;
  std::chrono::steady_clock::time_point at;
};

// Who a hang is on: the ranks that did not reach the collective the others wait in (by the
// collective counts of their last heartbeats; see CheckStall's rules) and a sentence saying so.
struct HangBlame {
  std::vector<int> ranks;  // ascending; empty when no rank is live
  std::string who;
};

class FailureDetector {
 public:
  static constexpr int kStepSamples = 64;  // step-time samples kept for the median

  // `options` must pass ValidateDetectorOptions; world_size >= 1.
  FailureDetector(const DetectorOptions& options, int world_size,
                  std::chrono::steady_clock::time_point launched_at);

  // Optional: the step this incarnation resumes at (its ranks' first heartbeats report it). With
  // it, a heartbeat step above it completes the first step even if the first heartbeat a rank
  // sends already reports a later step. Without it, the first step observed plays that role.
  void SetStartStep(int64_t step);

  // The job's last step (train.steps): once reached, no stall is reported (the ranks save,
  // gather and export the final weights, and no step advances by design). 0: unknown.
  void SetTargetStep(int64_t step) { target_step_ = step; }

  // Every event of the control server, in order.
  void OnEvent(const ControlEvent& e);

  // Called ~every 20 ms with the server's Snapshot(). Returns the first failure found, once.
  std::optional<Failure> Check(const std::vector<RankState>& ranks,
                               std::chrono::steady_clock::time_point now);

  std::vector<StragglerReport> TakeStragglers();  // new reports since the last call
  // The hang attribution of a stall, also for a hang a rank reported itself (its collective
  // timed out): from the live ranks of `ranks` (a Snapshot()).
  HangBlame BlameHang(const std::vector<RankState>& ranks) const;
  // The recent step-time samples behind median_step_s(), oldest first.
  std::vector<double> step_samples_s() const {
    return std::vector<double>(step_samples_s_.begin(), step_samples_s_.end());
  }

  double effective_stall_timeout_s() const;
  double median_step_s() const;  // 0 until measured
  int64_t max_step() const { return max_step_; }  // highest step reported (-1 none)
  bool first_step_completed() const { return first_step_done_; }
  bool failed() const { return reported_; }
  // Exit code a rank announced in its bye on the current connection, -1 if it said none.
  int bye_exit_code(int rank) const;

 private:
  struct PerRank {
    bool said_bye = false;
    int bye_exit_code = -1;
    bool lost = false;  // closed without bye, not yet reported
    std::chrono::steady_clock::time_point lost_at;
    std::string lost_reason;
    std::deque<int64_t> compute_ms;  // last compute_ms values, oldest first (<= window)
    int64_t last_heartbeat_step = -1;  // step of this connection's previous heartbeat
    bool reported_straggler = false;
    std::chrono::steady_clock::time_point last_straggler_report;
  };

  void ObserveStep(int64_t step, std::chrono::steady_clock::time_point t);
  std::optional<Failure> CheckConnectionLost(const std::vector<RankState>& ranks,
                                             std::chrono::steady_clock::time_point now);
  std::optional<Failure> CheckHeartbeats(const std::vector<RankState>& ranks,
                                         std::chrono::steady_clock::time_point now);
  std::optional<Failure> CheckStall(const std::vector<RankState>& ranks,
                                    std::chrono::steady_clock::time_point now);
  std::optional<Failure> CheckStartup(const std::vector<RankState>& ranks,
                                      std::chrono::steady_clock::time_point now);
  void CheckStragglers(std::chrono::steady_clock::time_point now);

  DetectorOptions options_;
  int world_size_;
  std::chrono::steady_clock::time_point launched_at_;
  std::vector<PerRank> ranks_;
  int64_t start_step_ = -1;  // SetStartStep, or the first step observed
  bool start_step_given_ = false;
  int64_t max_step_ = -1;
  int64_t target_step_ = 0;
  std::chrono::steady_clock::time_point last_advance_;  // when max_step_ last changed
  bool first_step_done_ = false;
  std::deque<double> step_samples_s_;
  bool reported_ = false;
  std::vector<StragglerReport> stragglers_;
};

}  // namespace tessera
