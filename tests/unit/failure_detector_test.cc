// links: tessera_supervisor
// tests/unit/failure_detector_test.cc — FailureDetector on fake times: every detection kind,
// the stall's rank attribution by collective sequence, bye-then-disconnect, derived and fixed
// stall timeouts with the floor, step-time measurement, and straggler reports (compute-time
// outliers: factor, floor, window, once per interval, none at startup).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "runtime/supervisor/failure_detector.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point At(double s) {
  return Clock::time_point{} + std::chrono::hours(1) +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A fake control server: keeps the snapshot the real one would, and forwards each event to the
// detector the way the supervisor loop does.
class FakeJob {
 public:
  FakeJob(int world_size, DetectorOptions options = {})
      : detector(options, world_size, At(0)), ranks(world_size) {
    for (int r = 0; r < world_size; ++r) ranks[r].rank = r;
  }

  void Register(int r, double t) {
    ranks[r].connected = true;
    ranks[r].ever_registered = true;
    ranks[r].said_bye = false;
    ranks[r].registered_at = At(t);
    Send(ControlEventKind::kRegistered, r, t);
  }
  void RegisterAll(double t) {
    for (size_t r = 0; r < ranks.size(); ++r) Register(static_cast<int>(r), t);
  }
  void Heartbeat(int r, int64_t step, RankPhase phase, int64_t seq, double t,
                 int64_t compute_ms = -1) {
    RankState& s = ranks[r];
    s.last_heartbeat = At(t);
    ++s.heartbeats;
    s.step = step;
    s.phase = phase;
    s.collective_seq = seq;
    s.compute_ms = compute_ms;
    ControlEvent e = MakeEvent(ControlEventKind::kHeartbeat, r, t);
    e.step = step;
    e.phase = phase;
    e.collective_seq = seq;
    e.compute_ms = compute_ms;
    detector.OnEvent(e);
  }
  // Every rank heartbeats `step` in phase collective at sequence `seq`.
  void AllHeartbeat(int64_t step, int64_t seq, double t) {
    for (size_t r = 0; r < ranks.size(); ++r) {
      Heartbeat(static_cast<int>(r), step, RankPhase::kCollective, seq, t);
    }
  }
  void Bye(int r, int exit_code, double t) {
    ranks[r].said_bye = true;
    ranks[r].exit_code = exit_code;
    ControlEvent e = MakeEvent(ControlEventKind::kBye, r, t);
    e.exit_code = exit_code;
    detector.OnEvent(e);
  }
  void Disconnect(int r, double t, bool forward_event = true) {
    ranks[r].connected = false;
    ranks[r].disconnected_at = At(t);
    if (!forward_event) return;
    ControlEvent e = MakeEvent(ControlEventKind::kDisconnected, r, t);
    e.reason = "end of file";
    e.exit_code = ranks[r].said_bye ? ranks[r].exit_code : -1;
    detector.OnEvent(e);
  }
  std::optional<Failure> Check(double t) { return detector.Check(ranks, At(t)); }

  FailureDetector detector;
  std::vector<RankState> ranks;

 private:
  ControlEvent MakeEvent(ControlEventKind kind, int r, double t) {
    ControlEvent e;
    e.kind = kind;
    e.rank = r;
    e.time = At(t);
    return e;
  }
  void Send(ControlEventKind kind, int r, double t) { detector.OnEvent(MakeEvent(kind, r, t)); }
};

// Runs `steps` steps of `step_s` each from t0 with one heartbeat per rank per step; returns
// the time of the last heartbeat.
double RunSteps(FakeJob& job, int64_t first_step, int64_t steps, double step_s, double t0) {
  double t = t0;
  for (int64_t i = 0; i <= steps; ++i) {
    t = t0 + i * step_s;
    job.AllHeartbeat(first_step + i, first_step + i, t);
  }
  return t;
}

TEST(FailureDetectorTest, KindNames) {
  EXPECT_STREQ(FailureKindName(FailureKind::kRankExit), "rank_exit");
  EXPECT_STREQ(FailureKindName(FailureKind::kConnectionLost), "connection_lost");
  EXPECT_STREQ(FailureKindName(FailureKind::kHeartbeatTimeout), "heartbeat_timeout");
  EXPECT_STREQ(FailureKindName(FailureKind::kStall), "stall");
  EXPECT_STREQ(FailureKindName(FailureKind::kStartupTimeout), "startup_timeout");
}

TEST(FailureDetectorTest, ValidateNamesTheFlag) {
  DetectorOptions o;
  EXPECT_TRUE(ValidateDetectorOptions(o).ok());
  o.heartbeat_timeout_s = -1;
  Status s = ValidateDetectorOptions(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--heartbeat-timeout must be > 0, got -1");
  o = {};
  o.stall_timeout_s = -2;
  EXPECT_NE(ValidateDetectorOptions(o).message().find("--stall-timeout"), std::string::npos);
  o = {};
  o.stall_floor_s = 0;
  EXPECT_NE(ValidateDetectorOptions(o).message().find("--stall-floor"), std::string::npos);
  o = {};
  o.startup_timeout_s = 0;
  EXPECT_NE(ValidateDetectorOptions(o).message().find("--startup-timeout"), std::string::npos);
  o = {};
  o.straggler_factor = 0.5;
  EXPECT_FALSE(ValidateDetectorOptions(o).ok());
  o = {};
  o.straggler_min_heartbeats = 11;  // above the window
  EXPECT_FALSE(ValidateDetectorOptions(o).ok());
  o = {};
  o.straggler_floor_ms = -1;
  EXPECT_NE(ValidateDetectorOptions(o).message().find("straggler_floor_ms"), std::string::npos);
  o = {};
  o.straggler_window = 1;
  EXPECT_FALSE(ValidateDetectorOptions(o).ok());
}

TEST(FailureDetectorTest, HealthyJobHasNoFailure) {
  FakeJob job(4);
  job.RegisterAll(0.5);
  const double t = RunSteps(job, 0, 200, 0.05, 1.0);
  EXPECT_FALSE(job.Check(t + 0.01).has_value());
  EXPECT_EQ(job.detector.max_step(), 200);
  EXPECT_TRUE(job.detector.first_step_completed());
  EXPECT_NEAR(job.detector.median_step_s(), 0.05, 1e-6);
}

TEST(FailureDetectorTest, ConnectionLostWithoutBye) {
  FakeJob job(4);
  job.RegisterAll(0.5);
  RunSteps(job, 0, 10, 0.1, 1.0);
  job.Disconnect(2, 2.05);
  std::optional<Failure> f = job.Check(2.07);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kConnectionLost);
  EXPECT_EQ(f->ranks, std::vector<int>{2});
  EXPECT_EQ(f->suspected_at, At(2.05));
  EXPECT_EQ(f->detected_at, At(2.07));
  EXPECT_EQ(f->step, 10);
  EXPECT_NE(f->detail.find("rank 2"), std::string::npos) << f->detail;
  EXPECT_NE(f->detail.find("end of file"), std::string::npos) << f->detail;
  // Reported once.
  EXPECT_FALSE(job.Check(2.09).has_value());
  EXPECT_TRUE(job.detector.failed());
}

TEST(FailureDetectorTest, LossesWithinTheWindowAreOneFailureLaterOnesAreTheTakedown) {
  FakeJob job(4);  // simultaneous_loss_ms = 2
  job.RegisterAll(0.5);
  RunSteps(job, 0, 10, 0.1, 1.0);
  job.Disconnect(2, 2.0);
  job.Disconnect(3, 2.001);  // 1 ms later: died with rank 2 (the same "host")
  // Inside the window nothing is decided yet: more ranks of the host may still close.
  EXPECT_FALSE(job.Check(2.0015).has_value());
  job.Disconnect(0, 2.005);  // 5 ms after the first: mpirun taking the job down
  std::optional<Failure> f = job.Check(2.006);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kConnectionLost);
  EXPECT_EQ(f->ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(f->suspected_at, At(2.0));
  EXPECT_NE(f->detail.find("closed later (taken down with the job): ranks 0 (+5.0 ms)"),
            std::string::npos)
      << f->detail;
}

TEST(FailureDetectorTest, ConnectionLostSeenInSnapshotOnly) {
  FakeJob job(2);
  job.RegisterAll(0.5);
  RunSteps(job, 0, 3, 0.1, 1.0);
  job.Disconnect(1, 1.5, /*forward_event=*/false);
  std::optional<Failure> f = job.Check(1.52);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kConnectionLost);
  EXPECT_EQ(f->ranks, std::vector<int>{1});
  EXPECT_EQ(f->suspected_at, At(1.5));
}

TEST(FailureDetectorTest, ByeThenDisconnectIsNotAFailure) {
  FakeJob job(3);
  job.RegisterAll(0.5);
  RunSteps(job, 0, 5, 0.1, 1.0);
  job.Bye(0, 0, 1.6);
  job.Disconnect(0, 1.61);
  job.Bye(1, 3, 1.6);  // a non-zero exit is the process's business, not a lost connection
  job.Disconnect(1, 1.62);
  EXPECT_FALSE(job.Check(1.63).has_value());
  EXPECT_EQ(job.detector.bye_exit_code(0), 0);
  EXPECT_EQ(job.detector.bye_exit_code(1), 3);
  EXPECT_EQ(job.detector.bye_exit_code(2), -1);
  // A later silence of those ranks is not a heartbeat timeout either.
  for (int i = 1; i <= 20; ++i) job.Heartbeat(2, 5 + i, RankPhase::kForward, 5, 1.6 + i);
  EXPECT_FALSE(job.Check(21.7).has_value());
  // The remaining rank losing its connection still is.
  job.Disconnect(2, 22.0);
  std::optional<Failure> f = job.Check(22.01);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks, std::vector<int>{2});
}

TEST(FailureDetectorTest, ReconnectAfterByeForgetsTheBye) {
  FakeJob job(2);
  job.RegisterAll(0.5);
  job.Bye(1, 0, 1.0);
  job.Register(1, 1.1);
  EXPECT_EQ(job.detector.bye_exit_code(1), -1);
  job.Disconnect(1, 1.2);
  std::optional<Failure> f = job.Check(1.21);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kConnectionLost);
}

TEST(FailureDetectorTest, HeartbeatTimeout) {
  FakeJob job(4);
  job.RegisterAll(0.5);
  RunSteps(job, 0, 10, 0.1, 1.0);  // last heartbeats at t = 2.0
  job.Heartbeat(1, 14, RankPhase::kBackward, 10, 2.0);
  // Ranks 0, 2, 3 go on heartbeating (waiting for rank 1), rank 1 is stopped.
  for (int i = 1; i <= 11; ++i) {
    for (int r : {0, 2, 3}) job.Heartbeat(r, 14, RankPhase::kCollective, 11, 2.0 + i);
  }
  EXPECT_FALSE(job.Check(12.0).has_value());  // exactly the timeout: not yet
  std::optional<Failure> f = job.Check(12.2);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kHeartbeatTimeout);
  EXPECT_EQ(f->ranks, std::vector<int>{1});
  EXPECT_EQ(f->suspected_at, At(2.0));
  EXPECT_EQ(f->step, 14);
  EXPECT_NE(f->detail.find("rank 1: no heartbeat for 10.2 s"), std::string::npos) << f->detail;
  EXPECT_NE(f->detail.find("last at step 14, phase backward"), std::string::npos) << f->detail;
}

TEST(FailureDetectorTest, HeartbeatTimeoutWithoutAnyHeartbeatCountsFromRegistration) {
  FakeJob job(2);
  job.Register(0, 1.0);
  job.Register(1, 3.0);
  for (int i = 0; i <= 12; ++i) job.Heartbeat(0, 0, RankPhase::kCollective, 0, 1.0 + i);
  EXPECT_FALSE(job.Check(12.9).has_value());
  std::optional<Failure> f = job.Check(13.1);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kHeartbeatTimeout);
  EXPECT_EQ(f->ranks, std::vector<int>{1});
  EXPECT_EQ(f->suspected_at, At(3.0));
}

TEST(FailureDetectorTest, ConnectionLostComesBeforeHeartbeatTimeout) {
  FakeJob job(3);
  job.RegisterAll(0.5);
  RunSteps(job, 0, 2, 0.1, 1.0);
  job.Disconnect(2, 20.0);  // rank 0 and 1 are silent for 19 s as well
  std::optional<Failure> f = job.Check(20.01);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kConnectionLost);
}

// A job with 0.05 s steps stops at step 100; everybody keeps heartbeating; rank 1 never
// reaches the collective #101 the others wait in.
FakeJob StalledJob(RankPhase rank1_phase, int64_t rank1_seq, double* stalled_at) {
  FakeJob job(4);
  job.RegisterAll(0.5);
  const double t = RunSteps(job, 0, 100, 0.05, 1.0);  // step 100 first seen at t
  *stalled_at = t;
  for (int i = 1; i <= 40; ++i) {
    for (int r : {0, 2, 3}) job.Heartbeat(r, 100, RankPhase::kCollective, 101, t + i);
    job.Heartbeat(1, 100, rank1_phase, rank1_seq, t + i);
  }
  return job;
}

TEST(FailureDetectorTest, StallBlamesTheRankThatDidNotReachTheCollective) {
  double t0 = 0;
  FakeJob job = StalledJob(RankPhase::kBackward, 100, &t0);
  EXPECT_NEAR(job.detector.median_step_s(), 0.05, 1e-6);
  EXPECT_DOUBLE_EQ(job.detector.effective_stall_timeout_s(), 30);  // floor beats 10 x 0.05
  EXPECT_FALSE(job.Check(t0 + 29.9).has_value());
  std::optional<Failure> f = job.Check(t0 + 30.5);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kStall);
  EXPECT_EQ(f->ranks, std::vector<int>{1});
  EXPECT_EQ(f->suspected_at, At(t0));
  EXPECT_EQ(f->step, 100);
  EXPECT_NE(f->detail.find("no step for 30.5 s (timeout 30.0 s, 10 x median step 0.05 s, floor "
                           "30 s) at step 100"),
            std::string::npos)
      << f->detail;
  EXPECT_NE(f->detail.find("ranks 1 did not reach collective #101 (phase backward, #100); "
                           "ranks 0,2,3 wait in it"),
            std::string::npos)
      << f->detail;
}

TEST(FailureDetectorTest, BlameHangWithoutAStallAndNoStallAfterTheLastStep) {
  double t0 = 0;
  FakeJob job = StalledJob(RankPhase::kBackward, 100, &t0);
  // The same attribution on demand (a rank's own collective timed out before the stall).
  HangBlame blame = job.detector.BlameHang(job.ranks);
  EXPECT_EQ(blame.ranks, std::vector<int>{1});
  EXPECT_NE(blame.who.find("ranks 1 did not reach collective #101"), std::string::npos) << blame.who;
  // At the job's last step the ranks save and export: no step advances, and that is no hang.
  job.detector.SetTargetStep(100);
  EXPECT_FALSE(job.Check(t0 + 45).has_value());  // 45 s without a step; beats go on
}

TEST(FailureDetectorTest, StallWithEqualSequenceBlamesRanksOutsideTheCollective) {
  double t0 = 0;
  FakeJob job = StalledJob(RankPhase::kForward, 101, &t0);
  std::optional<Failure> f = job.Check(t0 + 31);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kStall);
  EXPECT_EQ(f->ranks, std::vector<int>{1});
  EXPECT_NE(f->detail.find("rank 1: phase forward"), std::string::npos) << f->detail;
}

TEST(FailureDetectorTest, StallWithEveryRankInTheCollectiveBlamesAll) {
  double t0 = 0;
  FakeJob job = StalledJob(RankPhase::kCollective, 101, &t0);
  std::optional<Failure> f = job.Check(t0 + 31);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kStall);
  EXPECT_EQ(f->ranks, (std::vector<int>{0, 1, 2, 3}));
}

TEST(FailureDetectorTest, DerivedStallTimeoutFollowsTheStepTimeAboveTheFloor) {
  DetectorOptions o;
  o.stall_floor_s = 5;
  o.heartbeat_timeout_s = 100;
  FakeJob job(2, o);
  job.RegisterAll(0.5);
  EXPECT_DOUBLE_EQ(job.detector.median_step_s(), 0);
  EXPECT_DOUBLE_EQ(job.detector.effective_stall_timeout_s(), 5);  // nothing measured: the floor
  // Heartbeats every 2 s reveal 2 steps each time: 1 s per step.
  double t = 1;
  for (int64_t step = 0; step <= 20; step += 2, t += 2) job.AllHeartbeat(step, step, t);
  const double last_advance = t - 2;
  EXPECT_NEAR(job.detector.median_step_s(), 1.0, 1e-6);
  EXPECT_NEAR(job.detector.effective_stall_timeout_s(), 10.0, 1e-6);
  job.AllHeartbeat(20, 20, last_advance + 9);
  EXPECT_FALSE(job.Check(last_advance + 9.5).has_value());
  std::optional<Failure> f = job.Check(last_advance + 10.1);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kStall);
}

TEST(FailureDetectorTest, MedianIgnoresOutliers) {
  FakeJob job(1);
  job.RegisterAll(0.5);
  double t = 1;
  for (int64_t step = 0; step <= 30; ++step) {
    t += (step == 10 ? 20.0 : 0.1);  // one 20 s step (say, a checkpoint)
    job.AllHeartbeat(step, step, t);
  }
  EXPECT_NEAR(job.detector.median_step_s(), 0.1, 1e-6);
}

TEST(FailureDetectorTest, FixedStallTimeoutIgnoresFloorAndStepTime) {
  DetectorOptions o;
  o.stall_timeout_s = 7;
  FakeJob job(2, o);
  job.RegisterAll(0.5);
  const double t = RunSteps(job, 0, 10, 0.05, 1.0);
  EXPECT_DOUBLE_EQ(job.detector.effective_stall_timeout_s(), 7);
  for (int i = 1; i <= 8; ++i) job.AllHeartbeat(10, 10, t + i);
  EXPECT_FALSE(job.Check(t + 6.9).has_value());
  std::optional<Failure> f = job.Check(t + 7.1);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kStall);
  EXPECT_NE(f->detail.find("timeout 7.0 s, fixed"), std::string::npos) << f->detail;
}

TEST(FailureDetectorTest, StartupTimeoutNamesRanksThatNeverRegistered) {
  DetectorOptions o;
  o.startup_timeout_s = 60;
  FakeJob job(4, o);
  job.Register(0, 1.0);
  job.Register(1, 1.0);
  for (int i = 2; i <= 61; ++i) {
    job.Heartbeat(0, 0, RankPhase::kCollective, 1, i);
    job.Heartbeat(1, 0, RankPhase::kCollective, 1, i);
  }
  EXPECT_FALSE(job.Check(59.9).has_value());
  std::optional<Failure> f = job.Check(60.1);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kStartupTimeout);
  EXPECT_EQ(f->ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(f->suspected_at, At(0));
  EXPECT_NE(f->detail.find("ranks 2,3 did not register"), std::string::npos) << f->detail;
}

TEST(FailureDetectorTest, StartupTimeoutWhenNoStepCompletes) {
  DetectorOptions o;
  o.startup_timeout_s = 60;
  FakeJob job(2, o);
  job.RegisterAll(1.0);
  // Step 0 never completes (a long checkpoint load, a hang in the first step). The stall rule
  // does not apply before the first step, even past the stall floor.
  for (int i = 2; i <= 61; ++i) job.AllHeartbeat(0, 0, i);
  EXPECT_FALSE(job.Check(45).has_value());
  std::optional<Failure> f = job.Check(60.5);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FailureKind::kStartupTimeout);
  EXPECT_EQ(f->ranks, (std::vector<int>{0, 1}));
  EXPECT_NE(f->detail.find("still at step 0"), std::string::npos) << f->detail;
}

TEST(FailureDetectorTest, FirstStepCompletesOnAdvanceOrAfterTheStartStep) {
  FakeJob job(1);
  job.RegisterAll(0.5);
  job.AllHeartbeat(100, 0, 1.0);  // resumed at 100: still working on its first step
  EXPECT_FALSE(job.detector.first_step_completed());
  job.AllHeartbeat(101, 1, 2.0);
  EXPECT_TRUE(job.detector.first_step_completed());

  FakeJob resumed(1);
  resumed.detector.SetStartStep(100);
  resumed.RegisterAll(0.5);
  resumed.AllHeartbeat(103, 3, 1.0);  // first heartbeat already past the start step
  EXPECT_TRUE(resumed.detector.first_step_completed());
}

// Steps first_step.. one per heartbeat round, 0.1 s apart from t0: every rank heartbeats the
// step with compute_ms[rank] (the first heartbeat of a connection only sets the step baseline).
void ComputeHeartbeats(FakeJob& job, int64_t first_step, double t0, int count,
                       const std::vector<int64_t>& compute_ms) {
  for (int i = 0; i < count; ++i) {
    const int64_t step = first_step + i;
    for (size_t r = 0; r < compute_ms.size(); ++r) {
      job.Heartbeat(static_cast<int>(r), step, RankPhase::kForward, step, t0 + 0.1 * i,
                    compute_ms[r]);
    }
  }
}

TEST(FailureDetectorTest, StragglerIsTheComputeTimeOutlierReportedOncePerInterval) {
  FakeJob job(4);
  job.RegisterAll(0.5);
  // Rank 2 takes 41 ms per step outside collectives; its peers 6 ms (they wait for it).
  ComputeHeartbeats(job, 0, 1.0, 30, {6, 6, 41, 7});
  EXPECT_FALSE(job.Check(6.0).has_value());
  std::vector<StragglerReport> reports = job.detector.TakeStragglers();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rank, 2);
  EXPECT_EQ(reports[0].at, At(6.0));
  EXPECT_EQ(reports[0].detail,
            "rank 2 is a straggler: its steps take 41.0 ms outside collectives (median of its "
            "last 10) against 6.0 ms for its peers (median), so everybody waits for it (step 29)");
  EXPECT_EQ(reports[0].detail.rfind("rank 2 ", 0), 0u);  // what `tessera chaos` matches
  EXPECT_TRUE(job.detector.TakeStragglers().empty());   // taken

  ComputeHeartbeats(job, 30, 25.2, 30, {6, 6, 41, 7});
  EXPECT_FALSE(job.Check(30.2).has_value());
  EXPECT_TRUE(job.detector.TakeStragglers().empty());  // within 60 s of the last report
  ComputeHeartbeats(job, 60, 62.0, 30, {6, 6, 41, 7});
  EXPECT_FALSE(job.Check(67.0).has_value());
  EXPECT_EQ(job.detector.TakeStragglers().size(), 1u);
}

TEST(FailureDetectorTest, StragglerJudgedOnTheMedianOfRecentSteps) {
  FakeJob job(3);
  job.RegisterAll(0.5);
  // One slow step (a checkpoint, a page-in) in rank 1's window is not an outlier...
  ComputeHeartbeats(job, 0, 1.0, 12, {8, 8, 8});
  job.Heartbeat(0, 12, RankPhase::kForward, 12, 2.2, 8);
  job.Heartbeat(1, 12, RankPhase::kForward, 12, 2.2, 300);
  job.Heartbeat(2, 12, RankPhase::kForward, 12, 2.2, 8);
  EXPECT_FALSE(job.Check(2.3).has_value());
  EXPECT_TRUE(job.detector.TakeStragglers().empty());
  // ...a rank that stays slow is: its median moves once most of its window is slow.
  ComputeHeartbeats(job, 13, 2.4, 6, {8, 30, 8});
  EXPECT_FALSE(job.Check(3.1).has_value());
  std::vector<StragglerReport> reports = job.detector.TakeStragglers();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rank, 1);
}

TEST(FailureDetectorTest, NoStragglerWithSimilarComputeTimes) {
  FakeJob job(4);
  job.RegisterAll(0.5);
  // Rank 0 does a little more (metrics, checkpoint commits): 1.5x, not an outlier.
  ComputeHeartbeats(job, 0, 1.0, 30, {15, 10, 11, 10});
  EXPECT_FALSE(job.Check(4.0).has_value());
  EXPECT_TRUE(job.detector.TakeStragglers().empty());
}

TEST(FailureDetectorTest, NoStragglerUnderTheAbsoluteFloor) {
  FakeJob job(4);
  job.RegisterAll(0.5);
  // 4 ms against 1 ms is 4x, but 3 ms of difference is jitter on a tiny step.
  ComputeHeartbeats(job, 0, 1.0, 30, {1, 1, 4, 1});
  EXPECT_FALSE(job.Check(4.0).has_value());
  EXPECT_TRUE(job.detector.TakeStragglers().empty());
  // 7 ms against 1 ms clears both the factor and the 5 ms floor.
  FakeJob over(4);
  over.RegisterAll(0.5);
  ComputeHeartbeats(over, 0, 1.0, 30, {1, 1, 7, 1});
  EXPECT_FALSE(over.Check(4.0).has_value());
  std::vector<StragglerReport> reports = over.detector.TakeStragglers();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rank, 2);
}

TEST(FailureDetectorTest, NoStragglerBeforeTheFirstStep) {
  FakeJob job(4);
  job.detector.SetStartStep(100);
  job.RegisterAll(0.5);
  // The ranks' steps move (below the resume step 100) and they report compute times with rank 0
  // far above its peers, but no step of this incarnation has completed: nothing is judged.
  ComputeHeartbeats(job, 0, 1.0, 30, {900, 1, 1, 1});
  EXPECT_FALSE(job.detector.first_step_completed());
  EXPECT_FALSE(job.Check(4.0).has_value());
  EXPECT_TRUE(job.detector.TakeStragglers().empty());
  // The same values once a step completed are judged (the guard is what held them back).
  ComputeHeartbeats(job, 101, 4.1, 1, {900, 1, 1, 1});
  EXPECT_TRUE(job.detector.first_step_completed());
  EXPECT_FALSE(job.Check(4.2).has_value());
  std::vector<StragglerReport> reports = job.detector.TakeStragglers();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rank, 0);
}

TEST(FailureDetectorTest, NoStragglerWithTooFewValues) {
  {
    FakeJob job(4);
    job.RegisterAll(0.5);
    // 4 rounds: the first only sets each rank's step baseline, so 3 values < min 5.
    ComputeHeartbeats(job, 0, 1.0, 4, {6, 6, 41, 6});
    EXPECT_TRUE(job.detector.first_step_completed());
    EXPECT_FALSE(job.Check(2.0).has_value());
    EXPECT_TRUE(job.detector.TakeStragglers().empty());
  }
  {
    // Many heartbeats, but the same step again and again: one value, not one per heartbeat.
    FakeJob job(4);
    job.RegisterAll(0.5);
    for (int i = 0; i < 30; ++i) {
      const int64_t step = i < 2 ? i : 1;
      for (int r = 0; r < 4; ++r) {
        job.Heartbeat(r, step, RankPhase::kForward, step, 1 + 0.1 * i, r == 2 ? 41 : 6);
      }
    }
    EXPECT_FALSE(job.Check(4.0).has_value());
    EXPECT_TRUE(job.detector.TakeStragglers().empty());
  }
  {
    // Not measured yet (-1) is no value.
    FakeJob job(4);
    job.RegisterAll(0.5);
    ComputeHeartbeats(job, 0, 1.0, 30, {-1, -1, -1, -1});
    EXPECT_FALSE(job.Check(4.0).has_value());
    EXPECT_TRUE(job.detector.TakeStragglers().empty());
  }
  {
    // A single rank has no peers to be slower than.
    FakeJob job(1);
    job.RegisterAll(0.5);
    ComputeHeartbeats(job, 0, 1.0, 30, {500});
    EXPECT_FALSE(job.Check(4.0).has_value());
    EXPECT_TRUE(job.detector.TakeStragglers().empty());
  }
}

TEST(FailureDetectorTest, ReconnectedRankStartsItsStragglerWindowOver) {
  FakeJob job(2);
  job.RegisterAll(0.5);
  ComputeHeartbeats(job, 0, 1.0, 6, {6, 41});  // 5 values each: rank 1 would be judged...
  job.Register(1, 1.55);                      // ...but a new connection's history starts empty
  ComputeHeartbeats(job, 6, 1.6, 3, {6, 41});
  EXPECT_FALSE(job.Check(2.0).has_value());
  EXPECT_TRUE(job.detector.TakeStragglers().empty());
  ComputeHeartbeats(job, 9, 2.0, 3, {6, 41});  // now rank 1 has 5 values from its new connection
  EXPECT_FALSE(job.Check(2.5).has_value());
  EXPECT_EQ(job.detector.TakeStragglers().size(), 1u);
}

TEST(FailureDetectorTest, EventsForUnknownRanksAreIgnored) {
  FakeJob job(2);
  ControlEvent e;
  e.kind = ControlEventKind::kDisconnected;
  e.rank = -1;
  e.time = At(1);
  job.detector.OnEvent(e);
  e.rank = 7;
  job.detector.OnEvent(e);
  EXPECT_FALSE(job.Check(1.1).has_value());
}

}  // namespace
}  // namespace tessera
