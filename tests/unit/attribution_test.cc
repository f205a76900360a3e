// links: tessera_chaos
// tests/unit/attribution_test.cc — the chaos verdict's fault attribution (attribution.h) as a
// pure function: each of the nine fault kinds is credited with its own evidence (and its
// recovery and steps lost), evidence of the wrong kind, rank, window or one already claimed
// is not, a fault with no evidence is "not detected" (never a pass by default), and the
// supervisor's own files (events.jsonl through RunLog, report.json through RunReportJson)
// parse into the structured evidence with the fields matching reads.
#include "runtime/chaos/attribution.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/core/exit_codes.h"
#include "runtime/core/json.h"
#include "runtime/supervisor/run_log.h"
#include "runtime/supervisor/run_report.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

constexpr double kStart = 1000;  // the chaos run's start (unix seconds)

InjectedFault Fault(FaultKind kind, double at, std::vector<int> ranks = {}, double window_s = 0) {
  static int next_id = 0;
  InjectedFault f;
  f.id = ++next_id;
  f.kind = kind;
  f.ranks = std::move(ranks);
  f.injected = true;
  f.injected_unix = at;
  f.injected_step = 7;
  f.active_until_unix = at + window_s;
  f.target = "the target";
  return f;
}

ReportedFailure Failed(const std::string& kind, std::vector<int> ranks, double detected,
                       double resumed = -1, int64_t steps_lost = 0, int exit_code = -1) {
  ReportedFailure r;
  r.kind = kind;
  r.ranks = std::move(ranks);
  r.detected_unix = detected;
  r.resumed_unix = resumed;
  r.steps_lost = steps_lost;
  r.exit_code = exit_code;
  return r;
}

SupervisorEvent Event(const std::string& kind, double at, std::vector<int> ranks = {}) {
  return {at, kind, std::move(ranks), "free text the matcher never reads"};
}

Attribution Attribute(const std::vector<InjectedFault>& faults, const std::vector<SupervisorEvent>& events,
                const std::vector<ReportedFailure>& failures, double heartbeat_timeout_s = 10) {
  AttributionOptions o;
  o.start_unix = kStart;
  o.heartbeat_timeout_s = heartbeat_timeout_s;
  return AttributeFaults(faults, events, failures, o);
}

TEST(AttributionTest, KillRankIsDetectedByTheFailureNamingItsRank) {
  Attribution a = Attribute({Fault(FaultKind::kKillRank, 1010, {2})}, {},
                      {Failed("connection_lost", {2}, 1010.5, 1015, 3)});
  ASSERT_EQ(a.faults.size(), 1u);
  const FaultOutcome& o = a.faults[0];
  EXPECT_TRUE(o.detected);
  EXPECT_EQ(o.detected_as, "connection_lost");
  EXPECT_DOUBLE_EQ(o.injected_s, 10);
  EXPECT_EQ(o.injected_step, 7);
  EXPECT_DOUBLE_EQ(o.detection_s, 0.5);
  EXPECT_DOUBLE_EQ(o.recovery_s, 5);
  EXPECT_EQ(o.steps_lost, 3);
  EXPECT_TRUE(a.unexplained.empty());
}

TEST(AttributionTest, KillRankIsNotCreditedWithAFailureOfAnotherRankOrTooLate) {
  Attribution a = Attribute({Fault(FaultKind::kKillRank, 1010, {2})}, {},
                      {Failed("connection_lost", {1}, 1011), Failed("rank_exit", {2}, 1021)});
  EXPECT_FALSE(a.faults[0].detected);
  EXPECT_EQ(a.faults[0].note, "no detection found in the supervisor's events");
  EXPECT_EQ(a.unexplained.size(), 2u);
}

TEST(AttributionTest, AFailureBeforeTheInjectionExplainsNothing) {
  Attribution a = Attribute({Fault(FaultKind::kKillRank, 1010, {2})}, {}, {Failed("rank_exit", {2}, 1009.9)});
  EXPECT_FALSE(a.faults[0].detected);
  ASSERT_EQ(a.unexplained.size(), 1u);
}

TEST(AttributionTest, AFailureNamingNobodyCountsForAKill) {
  // mpirun's own exit may name no rank.
  Attribution a = Attribute({Fault(FaultKind::kKillRank, 1010, {2})}, {}, {Failed("rank_exit", {}, 1011)});
  EXPECT_TRUE(a.faults[0].detected);
  EXPECT_EQ(a.faults[0].detected_as, "rank_exit");
}

TEST(AttributionTest, KillInCheckpointIsDetectedLikeAKill) {
  Attribution a = Attribute({Fault(FaultKind::kKillInCheckpoint, 1020, {1})}, {},
                      {Failed("rank_exit", {1}, 1020.2, 1030, 5)});
  EXPECT_TRUE(a.faults[0].detected);
  EXPECT_EQ(a.faults[0].steps_lost, 5);
}

TEST(AttributionTest, KillHostIsDetectedByAFailureNamingAnyOfItsRanks) {
  Attribution a = Attribute({Fault(FaultKind::kKillHost, 1010, {2, 3})}, {},
                      {Failed("connection_lost", {3}, 1010.1, 1018)});
  EXPECT_TRUE(a.faults[0].detected);
  EXPECT_DOUBLE_EQ(a.faults[0].recovery_s, 8);
}

TEST(AttributionTest, HostFaultsAcrossHosts) {
  // lose_host: the first failure may name the healthy host's rank (every rank is a target).
  Attribution lose = Attribute({Fault(FaultKind::kLoseHost, 1010, {0, 1})}, {},
                               {Failed("connection_lost", {0}, 1010.3, 1014, 2)});
  EXPECT_TRUE(lose.faults[0].detected);
  EXPECT_EQ(lose.faults[0].detected_as, "connection_lost");
  EXPECT_TRUE(lose.unexplained.empty());
  // partition: within the heartbeat timeout plus slack, not later.
  const std::vector<ReportedFailure> hb = {Failed("heartbeat_timeout", {1}, 1012.1)};
  EXPECT_TRUE(Attribute({Fault(FaultKind::kPartition, 1010, {0, 1}, 3)}, {}, hb, 2).faults[0].detected);
  EXPECT_FALSE(Attribute({Fault(FaultKind::kPartition, 1000, {0, 1}, 3)}, {}, hb, 1).faults[0].detected);
  // slow_link: handled when no failure falls in its window (plus slack), not otherwise.
  Attribution rode = Attribute({Fault(FaultKind::kSlowLink, 1010, {0, 1}, 4)}, {}, {});
  EXPECT_TRUE(rode.faults[0].detected);
  EXPECT_EQ(rode.faults[0].detected_as, "ridden through");
  Attribution broke = Attribute({Fault(FaultKind::kSlowLink, 1010, {0, 1}, 4)}, {},
                                {Failed("stall", {1}, 1013)});
  EXPECT_FALSE(broke.faults[0].detected);
  EXPECT_EQ(broke.faults[0].note, "the slow link ended in a failure");
  EXPECT_EQ(broke.unexplained.size(), 1u);
}

TEST(AttributionTest, StopRankIsDetectedWithinTheHeartbeatTimeoutPlusSlack) {
  const std::vector<ReportedFailure> failures = {Failed("heartbeat_timeout", {1}, 1010 + 18)};
  EXPECT_TRUE(Attribute({Fault(FaultKind::kStopRank, 1010, {1})}, {}, failures, 10).faults[0].detected);
  // A kill's 10 s bound would have missed it, and so does a shorter heartbeat timeout.
  EXPECT_FALSE(Attribute({Fault(FaultKind::kStopRank, 1010, {1})}, {}, failures, 5).faults[0].detected);
}

TEST(AttributionTest, SlowRankIsDetectedByAStragglerEventNamingItsRank) {
  Attribution a = Attribute({Fault(FaultKind::kSlowRank, 1010, {1}, 5)},
                      {Event("straggler", 1012, {0}), Event("straggler", 1013, {1})}, {});
  EXPECT_TRUE(a.faults[0].detected);
  EXPECT_EQ(a.faults[0].detected_as, "straggler");
  EXPECT_DOUBLE_EQ(a.faults[0].detection_s, 3);  // the one naming rank 1, not rank 0's
}

TEST(AttributionTest, SlowRankIsNotDetectedByAStragglerEventWithoutRanksOrAfterItsWindow) {
  // An event without the structured ranks (whatever its message says) names nobody.
  SupervisorEvent unnamed = Event("straggler", 1012);
  unnamed.message = "rank 1 is a straggler";
  EXPECT_FALSE(Attribute({Fault(FaultKind::kSlowRank, 1010, {1}, 5)}, {unnamed}, {}).faults[0].detected);
  EXPECT_FALSE(Attribute({Fault(FaultKind::kSlowRank, 1010, {1}, 5)}, {Event("straggler", 1025.5, {1})}, {})
                   .faults[0]
                   .detected);
}

TEST(AttributionTest, CorruptAndTruncateShardAreDetectedByCkptCorruptAndOwnTheirRestart) {
  for (FaultKind kind : {FaultKind::kCorruptShard, FaultKind::kTruncateShard}) {
    Attribution a = Attribute({Fault(kind, 1010)}, {Event("ckpt_corrupt", 1014)},
                        {Failed("connection_lost", {0}, 1010.3, 1020, 9)});
    ASSERT_TRUE(a.faults[0].detected) << FaultKindName(kind);
    EXPECT_EQ(a.faults[0].detected_as, "ckpt_corrupt");
    EXPECT_DOUBLE_EQ(a.faults[0].detection_s, 4);
    EXPECT_DOUBLE_EQ(a.faults[0].recovery_s, 10);
    EXPECT_EQ(a.faults[0].steps_lost, 9);
    EXPECT_TRUE(a.unexplained.empty());
  }
}

TEST(AttributionTest, ShardDamageWithoutACkptCorruptEventIsNotDetectedEvenWithItsRestart) {
  // The forced restart alone proves nothing: the runtime must have found the damage.
  Attribution a = Attribute({Fault(FaultKind::kCorruptShard, 1010)}, {Event("ckpt_save_failed", 1014)},
                      {Failed("connection_lost", {0}, 1010.3, 1020, 9)});
  EXPECT_FALSE(a.faults[0].detected);
  EXPECT_DOUBLE_EQ(a.faults[0].recovery_s, 10);
}

TEST(AttributionTest, IoErrorIsDetectedBySaveFailedAndOwnsTheCheckpointersStops) {
  Attribution a = Attribute({Fault(FaultKind::kIoError, 1010, {}, 6)}, {Event("ckpt_save_failed", 1012)},
                      {Failed("rank_exit", {0}, 1013, 1018, 2, kExitRestartable),
                       Failed("rank_exit", {1}, 1015, 1022, 3, kExitRestartable)});
  EXPECT_TRUE(a.faults[0].detected);
  EXPECT_EQ(a.faults[0].detected_as, "ckpt_save_failed");
  EXPECT_EQ(a.faults[0].steps_lost, 5);
  EXPECT_DOUBLE_EQ(a.faults[0].recovery_s, 12);  // the last one's resumption
  EXPECT_TRUE(a.unexplained.empty());
}

TEST(AttributionTest, IoErrorDoesNotClaimAKillOrAStallInItsWindow) {
  // A kill (no exit code) or a stall (exit 6) in the same seconds is another fault's.
  Attribution a = Attribute({Fault(FaultKind::kIoError, 1010, {}, 6)}, {Event("ckpt_save_failed", 1012)},
                      {Failed("rank_exit", {1}, 1013), Failed("stall", {1}, 1014, -1, 0, kExitCommTimeout),
                       Failed("rank_exit", {0}, 1014.5, -1, 0, kExitBadConfig)});
  EXPECT_TRUE(a.faults[0].detected);
  EXPECT_EQ(a.faults[0].steps_lost, 0);
  EXPECT_EQ(a.unexplained.size(), 3u);
}

TEST(AttributionTest, PreemptIsDetectedAndRecoversAtTheRelaunchsFirstProgress) {
  Attribution a = Attribute({Fault(FaultKind::kPreempt, 1010)},
                      {Event("progress", 1009), Event("preempt", 1010.2), Event("progress", 1011),
                       Event("launch", 1015), Event("progress", 1019)},
                      {});
  EXPECT_TRUE(a.faults[0].detected);
  EXPECT_EQ(a.faults[0].detected_as, "preempt");
  EXPECT_NEAR(a.faults[0].detection_s, 0.2, 1e-9);
  EXPECT_DOUBLE_EQ(a.faults[0].recovery_s, 9);  // not the progress before the relaunch
}

TEST(AttributionTest, PreemptWithoutItsEventIsNotDetected) {
  Attribution a = Attribute({Fault(FaultKind::kPreempt, 1010)}, {Event("launch", 1015), Event("progress", 1019)}, {});
  EXPECT_FALSE(a.faults[0].detected);
  EXPECT_DOUBLE_EQ(a.faults[0].recovery_s, -1);
}

TEST(AttributionTest, EachPieceOfEvidenceExplainsOneFaultOnly) {
  // Two kills of rank 1, one failure: the first fault takes it, the second is not detected.
  Attribution a = Attribute({Fault(FaultKind::kKillRank, 1010, {1}), Fault(FaultKind::kKillRank, 1011, {1})}, {},
                      {Failed("rank_exit", {1}, 1012)});
  EXPECT_TRUE(a.faults[0].detected);
  EXPECT_FALSE(a.faults[1].detected);
  // The same for events: one straggler event, two slow-rank faults.
  Attribution b = Attribute({Fault(FaultKind::kSlowRank, 1010, {1}, 5), Fault(FaultKind::kSlowRank, 1011, {1}, 5)},
                      {Event("straggler", 1012, {1})}, {});
  EXPECT_TRUE(b.faults[0].detected);
  EXPECT_FALSE(b.faults[1].detected);
}

TEST(AttributionTest, AFaultNeverInjectedKeepsItsNoteAndIsNotDetected) {
  InjectedFault f = Fault(FaultKind::kKillRank, 0, {1});
  f.injected = false;
  f.target.clear();
  f.planned = "#1 kill_rank rank 1 at step 40";
  Attribution a = Attribute({f}, {}, {Failed("rank_exit", {1}, 1)});
  EXPECT_FALSE(a.faults[0].detected);
  EXPECT_DOUBLE_EQ(a.faults[0].injected_s, -1);
  EXPECT_EQ(a.faults[0].target, "#1 kill_rank rank 1 at step 40");
  EXPECT_EQ(a.faults[0].note, "not injected: the run ended before it was due");
  f.note = "could not arm: disk full";
  EXPECT_EQ(Attribute({f}, {}, {}).faults[0].note, "could not arm: disk full");
}

TEST(AttributionTest, NoEvidenceAtAllDetectsNothing) {
  std::vector<InjectedFault> all;
  for (FaultKind k : {FaultKind::kKillRank, FaultKind::kStopRank, FaultKind::kSlowRank,
                      FaultKind::kKillInCheckpoint, FaultKind::kCorruptShard, FaultKind::kTruncateShard,
                      FaultKind::kIoError, FaultKind::kKillHost, FaultKind::kPreempt}) {
    all.push_back(Fault(k, 1010, {0}, 5));
  }
  Attribution a = Attribute(all, {}, {});
  ASSERT_EQ(a.faults.size(), 9u);
  for (const FaultOutcome& o : a.faults) {
    EXPECT_FALSE(o.detected) << o.kind;
    EXPECT_EQ(o.note, "no detection found in the supervisor's events") << o.kind;
  }
}

TEST(AttributionTest, EventsWrittenByRunLogParseWithTheirRanks) {
  testing::ScopedTempDir dir("attribution");
  {
    RunLog log(nullptr, "run-1", RunLog::Clock::now());
    ASSERT_TRUE(log.Open(dir.str(), nullptr).ok());
    log.Emit(0, "straggler", "rank 3 is a straggler: ...", /*to_catalog=*/false, {3});
    log.Emit(0, "progress", "step 10");
  }
  std::ifstream in(dir / "events.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  auto straggler = ParseSupervisorEvent(line);
  ASSERT_TRUE(straggler.ok()) << straggler.status().ToString();
  EXPECT_EQ(straggler->kind, "straggler");
  EXPECT_EQ(straggler->ranks, std::vector<int>{3});
  EXPECT_GT(straggler->unix_s, 0);
  ASSERT_TRUE(std::getline(in, line));
  auto progress = ParseSupervisorEvent(line);
  ASSERT_TRUE(progress.ok());
  EXPECT_TRUE(progress->ranks.empty());
  EXPECT_FALSE(ParseSupervisorEvent("{\"kind\":\"progress\"}").ok());
  EXPECT_FALSE(ParseSupervisorEvent("{\"unix_s\":1,\"kind\":\"prog").ok());  // a line being written
}

TEST(AttributionTest, FailuresInTheSupervisorsReportParseWithExitCodeAndAbsoluteTimes) {
  RunReport r;
  r.start_unix_s = 5000;
  r.step_s = 0.25;
  FailureRecord f;
  f.kind = "rank_exit";
  f.ranks = {1};
  f.exit_code = kExitRestartable;
  f.detail = "rank 1 exited with code 1";
  f.failed_s = 10;
  f.detected_s = 10.5;
  f.resumed_s = 14;
  f.step_at_failure = 30;
  f.resume_step = 20;
  r.failures = {f};
  auto parsed = ParseLaunchReport(JsonWriter().Value(RunReportJson(r)).str());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_DOUBLE_EQ(parsed->step_s, 0.25);
  ASSERT_EQ(parsed->failures.size(), 1u);
  const ReportedFailure& p = parsed->failures[0];
  EXPECT_EQ(p.kind, "rank_exit");
  EXPECT_EQ(p.ranks, std::vector<int>{1});
  EXPECT_EQ(p.exit_code, kExitRestartable);
  EXPECT_DOUBLE_EQ(p.detected_unix, 5010.5);
  EXPECT_DOUBLE_EQ(p.resumed_unix, 5014);
  EXPECT_EQ(p.steps_lost, 10);
  // A report of an older supervisor (no exit_code) gives -1: never taken for a checkpointer stop.
  auto old = ParseLaunchReport(R"({"start_unix_s": 1, "failures": [{"kind": "rank_exit", "ranks": [0]}]})");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->failures.at(0).exit_code, -1);
  EXPECT_TRUE(ParseLaunchReport(R"({"step_s": 2})")->failures.empty());
  EXPECT_FALSE(ParseLaunchReport("not json").ok());
}

}  // namespace
}  // namespace tessera
