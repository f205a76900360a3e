// tests/unit/pipeline_schedule_test.cc — pipeline schedules (runtime/train/pipeline_schedule.h):
// the hand-written pass orders of 1F1B and interleaved 1F1B, every pass exactly once with the
// backward after the forward, no deadlock and the textbook bubble in simulation for gpipe /
// 1f1b / interleaved over p in 1..4, the activation sets each stage holds, deadlocks and
// malformed lists reported by the simulator, and CheckPipelineSchedule's errors.
// links: tessera_train
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <utility>
#include <vector>

#include "runtime/train/pipeline_schedule.h"

namespace tessera {

// Readable failures: "F3.1" is the forward of micro 3 on chunk 1 (found by gtest through ADL).
void PrintTo(const PipeOp& op, std::ostream* os) {
  *os << (op.kind == PipeOp::Kind::kForward ? "F" : "B") << op.micro << "." << op.chunk;
}

namespace {

using Kind = PipeOp::Kind;

PipeOp F(int micro, int chunk = 0) { return {Kind::kForward, micro, chunk}; }
PipeOp B(int micro, int chunk = 0) { return {Kind::kBackward, micro, chunk}; }

// The micro-batch counts to try for p stages: p, 2p, 3p, and p + 1 where allowed.
std::vector<int> MicroCounts(int p, bool multiples_only) {
  std::vector<int> ms = {p, 2 * p, 3 * p};
  if (!multiples_only && p > 1) ms.push_back(p + 1);
  return ms;
}

// Every (micro, chunk) forward and backward exactly once on the rank, backward after forward.
void ExpectEachPassOnce(const std::vector<PipeOp>& ops, int m, int v) {
  std::map<std::pair<int, int>, int> forward_at, backward_at;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    auto& where = ops[i].kind == Kind::kForward ? forward_at : backward_at;
    EXPECT_TRUE(where.emplace(std::make_pair(ops[i].micro, ops[i].chunk), i).second)
        << "pass " << i << " repeated";
  }
  ASSERT_EQ(ops.size(), 2u * m * v);
  for (int k = 0; k < m; ++k) {
    for (int c = 0; c < v; ++c) {
      const std::pair<int, int> id(k, c);
      ASSERT_TRUE(forward_at.count(id) && backward_at.count(id));
      EXPECT_LT(forward_at[id], backward_at[id]) << "micro " << k << " chunk " << c;
    }
  }
}

// Simulates with forward 1, backward 2 per stage (split over the chunks) and checks the
// bubble against the textbook value.
void ExpectTextbookBubble(PipelineSchedule s, int p, int m, int v) {
  SCOPED_TRACE(std::string(PipelineScheduleName(s)) + " p=" + std::to_string(p) +
               " m=" + std::to_string(m) + " v=" + std::to_string(v));
  const PipeSimulation sim = SimulatePipeline(s, p, m, v, 1.0 / v, 2.0 / v);
  ASSERT_FALSE(sim.deadlock) << sim.problem;
  EXPECT_EQ(sim.problem, "");
  EXPECT_NEAR(sim.busy_per_rank, 3.0 * m, 1e-12);
  EXPECT_NEAR(sim.bubble_fraction, TheoreticalBubble(s, p, m, v), 1e-9);
}

TEST(PipelineSchedule, OneFOneBStage0HandWritten) {
  // p=4: stage 0 warms up with 3 forwards, alternates 5 times, cools down with 3 backwards.
  const std::vector<PipeOp> want = {F(0), F(1), F(2), F(3), B(0), F(4), B(1), F(5),
                                    B(2), F(6), B(3), F(7), B(4), B(5), B(6), B(7)};
  EXPECT_EQ(BuildPipelineSchedule(PipelineSchedule::k1F1B, 4, 8, 1, 0), want);
}

TEST(PipelineSchedule, OneFOneBLastStageHandWritten) {
  // The last stage has no warm-up: each forward is followed by its own backward.
  const std::vector<PipeOp> want = {F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3),
                                    F(4), B(4), F(5), B(5), F(6), B(6), F(7), B(7)};
  EXPECT_EQ(BuildPipelineSchedule(PipelineSchedule::k1F1B, 4, 8, 1, 3), want);
}

TEST(PipelineSchedule, GpipeHandWritten) {
  const std::vector<PipeOp> want = {F(0), F(1), F(2), B(0), B(1), B(2)};
  EXPECT_EQ(BuildPipelineSchedule(PipelineSchedule::kGpipe, 2, 3, 1, 1), want);
}

TEST(PipelineSchedule, InterleavedHandWritten) {
  // p=2 m=4 v=2. Forward order: group 0 {m0 m1} on chunk 0 then chunk 1, group 1 {m2 m3}
  // likewise; backward order: the same groups with chunk 1 first.
  // Stage 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards, 4 steady pairs, 4 backwards.
  const std::vector<PipeOp> stage0 = {F(0, 0), F(1, 0), F(0, 1), F(1, 1),  // warm-up
                                      F(2, 0), B(0, 1), F(3, 0), B(1, 1),  // steady
                                      F(2, 1), B(0, 0), F(3, 1), B(1, 0),
                                      B(2, 1), B(3, 1), B(2, 0), B(3, 0)};  // cool-down
  EXPECT_EQ(BuildPipelineSchedule(PipelineSchedule::kInterleaved, 2, 4, 2, 0), stage0);
  // Stage 1: warm-up 0*2 + 2 = 2 forwards, 6 steady pairs, 2 backwards.
  const std::vector<PipeOp> stage1 = {F(0, 0), F(1, 0),                    // warm-up
                                      F(0, 1), B(0, 1), F(1, 1), B(1, 1),  // steady
                                      F(2, 0), B(0, 0), F(3, 0), B(1, 0),
                                      F(2, 1), B(2, 1), F(3, 1), B(3, 1),
                                      B(2, 0), B(3, 0)};                   // cool-down
  EXPECT_EQ(BuildPipelineSchedule(PipelineSchedule::kInterleaved, 2, 4, 2, 1), stage1);
}

TEST(PipelineSchedule, InterleavedOneGroupRunsAllForwardsFirst) {
  // m == p: every forward before any backward, each order in its group / chunk sequence.
  const std::vector<PipeOp> want = {F(0, 0), F(1, 0), F(0, 1), F(1, 1),
                                    B(0, 1), B(1, 1), B(0, 0), B(1, 0)};
  EXPECT_EQ(BuildPipelineSchedule(PipelineSchedule::kInterleaved, 2, 2, 2, 1), want);
}

TEST(PipelineSchedule, GpipeAndOneFOneBEachPassOnceNoDeadlockTextbookBubble) {
  for (PipelineSchedule s : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B}) {
    for (int p = 1; p <= 4; ++p) {
      for (int m : MicroCounts(p, /*multiples_only=*/false)) {
        ASSERT_TRUE(CheckPipelineSchedule(s, p, m, 1).ok());
        for (int stage = 0; stage < p; ++stage) {
          SCOPED_TRACE(std::string(PipelineScheduleName(s)) + " p=" + std::to_string(p) +
                       " m=" + std::to_string(m) + " stage " + std::to_string(stage));
          ExpectEachPassOnce(BuildPipelineSchedule(s, p, m, 1, stage), m, 1);
          const int held = MaxInFlight(s, p, m, 1, stage);
          EXPECT_EQ(held, s == PipelineSchedule::kGpipe ? m : std::min(p - stage, m));
        }
        ExpectTextbookBubble(s, p, m, 1);
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBMakespanIsExact) {
  // Equal stages: (m + p - 1) slots of one forward plus one backward, whatever tf : tb.
  for (int p = 1; p <= 4; ++p) {
    for (int m : MicroCounts(p, false)) {
      const PipeSimulation sim = SimulatePipeline(PipelineSchedule::k1F1B, p, m, 1, 1.0, 2.5);
      ASSERT_FALSE(sim.deadlock) << sim.problem;
      EXPECT_DOUBLE_EQ(sim.makespan, (m + p - 1) * 3.5) << "p=" << p << " m=" << m;
      EXPECT_NEAR(sim.bubble_fraction, (p - 1.0) / (m + p - 1.0), 1e-12);
    }
  }
}

TEST(PipelineSchedule, InterleavedEachPassOnceNoDeadlockTextbookBubble) {
  for (int v = 2; v <= 3; ++v) {
    for (int p = 1; p <= 4; ++p) {
      for (int m : MicroCounts(p, /*multiples_only=*/true)) {
        ASSERT_TRUE(CheckPipelineSchedule(PipelineSchedule::kInterleaved, p, m, v).ok());
        for (int stage = 0; stage < p; ++stage) {
          SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                       " v=" + std::to_string(v) + " stage " + std::to_string(stage));
          ExpectEachPassOnce(BuildPipelineSchedule(PipelineSchedule::kInterleaved, p, m, v, stage),
                             m, v);
          const int warmup =
              m == p ? m * v : std::min((p - stage - 1) * 2 + (v - 1) * p, m * v);
          const int held = MaxInFlight(PipelineSchedule::kInterleaved, p, m, v, stage);
          EXPECT_LE(held, std::min(warmup + 1, m * v));
          // Nothing is freed during the warm-up, so its forwards are all held at once.
          EXPECT_GE(held, std::min(warmup, m * v));
        }
        ExpectTextbookBubble(PipelineSchedule::kInterleaved, p, m, v);
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedBeatsOneFOneBBubble) {
  for (int p : {2, 4}) {
    const PipeSimulation plain = SimulatePipeline(PipelineSchedule::k1F1B, p, 8, 1, 1.0, 2.0);
    const PipeSimulation inter =
        SimulatePipeline(PipelineSchedule::kInterleaved, p, 8, 2, 0.5, 1.0);
    ASSERT_FALSE(plain.deadlock || inter.deadlock);
    EXPECT_LT(inter.bubble_fraction, plain.bubble_fraction);
    EXPECT_LT(inter.makespan, plain.makespan);
  }
}

TEST(PipelineSchedule, SimulatorReportsDeadlock) {
  // Rank 0 wants micro 0's gradient before sending micro 1's forward; rank 1 wants micro 1's
  // forward before sending micro 0's gradient.
  const std::vector<std::vector<PipeOp>> lists = {{F(0), B(0), F(1), B(1)},
                                                  {F(0), F(1), B(0), B(1)}};
  const PipeSimulation sim = SimulatePipelineLists(lists, 2, 2, 1, 1.0, 2.0);
  EXPECT_TRUE(sim.deadlock);
  EXPECT_NE(sim.problem.find("rank 0 waits forever at pass 1 (B micro 0 chunk 0)"),
            std::string::npos)
      << sim.problem;
  EXPECT_NE(sim.problem.find("rank 1 waits forever at pass 1 (F micro 1 chunk 0)"),
            std::string::npos)
      << sim.problem;
}

TEST(PipelineSchedule, SimulatorRejectsMalformedLists) {
  const std::vector<PipeOp> good = {F(0), F(1), B(0), B(1)};
  struct Case {
    std::vector<PipeOp> rank1;
    const char* want;
  };
  const std::vector<Case> cases = {
      {{F(0), F(1), B(0)}, "rank 1: B micro 1 chunk 0 missing"},
      {{F(0), B(1), F(1), B(0)}, "rank 1 pass 1 (B micro 1 chunk 0): backward before its forward"},
      {{F(0), F(0), F(1), B(0), B(1)}, "rank 1 pass 1 (F micro 0 chunk 0): forward repeated"},
      {{F(0), F(1), B(0), B(1), B(1)}, "rank 1 pass 4 (B micro 1 chunk 0): backward repeated"},
      {{F(0), F(2), B(0), B(1)}, "rank 1 pass 1 (F micro 2 chunk 0): micro or chunk out of range"},
  };
  for (const Case& c : cases) {
    const PipeSimulation sim = SimulatePipelineLists({good, c.rank1}, 2, 2, 1, 1.0, 2.0);
    EXPECT_FALSE(sim.deadlock);
    EXPECT_NE(sim.problem.find(c.want), std::string::npos) << sim.problem;
  }
  // The same lists with the good one on both ranks simulate cleanly.
  const PipeSimulation ok = SimulatePipelineLists({good, good}, 2, 2, 1, 1.0, 2.0);
  EXPECT_FALSE(ok.deadlock);
  EXPECT_EQ(ok.problem, "");
}

void ExpectInvalid(PipelineSchedule s, int p, int m, int v, std::vector<std::string> parts) {
  const Status st = CheckPipelineSchedule(s, p, m, v);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  for (const std::string& part : parts) {
    EXPECT_NE(st.message().find(part), std::string::npos) << st.message() << " lacks " << part;
  }
}

TEST(PipelineSchedule, CheckRejectsImpossibleCombinations) {
  ExpectInvalid(PipelineSchedule::k1F1B, 4, 2, 1,
                {"parallel.pp=4", "train.grad_accum_steps", "got 2",
                 "use train.grad_accum_steps >= 4", "gpipe"});
  ExpectInvalid(PipelineSchedule::kInterleaved, 4, 6, 2,
                {"parallel.pipeline_schedule=interleaved", "train.grad_accum_steps",
                 "m=6", "multiple of parallel.pp=4", "use 4 or 8"});
  ExpectInvalid(PipelineSchedule::kInterleaved, 2, 4, 1,
                {"parallel.virtual_stages >= 2", "got 1", "1f1b"});
  ExpectInvalid(PipelineSchedule::k1F1B, 2, 4, 2,
                {"parallel.virtual_stages=2", "parallel.pipeline_schedule=interleaved",
                 "got 1f1b", "parallel.virtual_stages=1"});
  ExpectInvalid(PipelineSchedule::kGpipe, 0, 4, 1, {"parallel.pp=0", ">= 1"});
  ExpectInvalid(PipelineSchedule::kGpipe, 2, 0, 1, {"train.grad_accum_steps=0", ">= 1"});
  ExpectInvalid(PipelineSchedule::kGpipe, 2, 4, 0, {"parallel.virtual_stages=0", ">= 1"});
  // gpipe fills no pipeline ahead of time, so fewer micro-batches than stages is fine.
  EXPECT_TRUE(CheckPipelineSchedule(PipelineSchedule::kGpipe, 4, 2, 1).ok());
  const PipeSimulation bad = SimulatePipeline(PipelineSchedule::k1F1B, 4, 2, 1, 1.0, 2.0);
  EXPECT_NE(bad.problem.find("parallel.pp=4"), std::string::npos) << bad.problem;
}

TEST(PipelineSchedule, GpipeWithFewMicrosHasTextbookBubble) {
  for (int p = 2; p <= 4; ++p) ExpectTextbookBubble(PipelineSchedule::kGpipe, p, 1, 1);
}

TEST(PipelineSchedule, NamesAndTheory) {
  EXPECT_STREQ(PipelineScheduleName(PipelineSchedule::kGpipe), "gpipe");
  EXPECT_STREQ(PipelineScheduleName(PipelineSchedule::k1F1B), "1f1b");
  EXPECT_STREQ(PipelineScheduleName(PipelineSchedule::kInterleaved), "interleaved");
  EXPECT_DOUBLE_EQ(TheoreticalBubble(PipelineSchedule::k1F1B, 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(PipelineSchedule::kGpipe, 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(PipelineSchedule::kInterleaved, 4, 8, 2), 3.0 / 19.0);
}

}  // namespace
}  // namespace tessera
