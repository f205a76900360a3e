// links: tessera_supervisor
// tests/unit/restart_policy_test.cc — RestartPolicy on fake times: restart budget within a
// sliding window, crash-loop guard and its reset by a new commit, backoff growth, cap and
// reset, option validation naming the CLI flags.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "runtime/supervisor/restart_policy.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point At(double s) {
  return Clock::time_point{} + std::chrono::hours(1) +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

RestartPolicyOptions NoCrashLoopGuard() {
  RestartPolicyOptions o;
  o.crash_loop_restarts = 0;
  return o;
}

TEST(RestartPolicyTest, ValidateNamesTheFlag) {
  EXPECT_TRUE(ValidateRestartPolicyOptions({}).ok());
  RestartPolicyOptions o;
  o.max_restarts = -1;
  Status s = ValidateRestartPolicyOptions(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--max-restarts must be >= 0, got -1");
  o = {};
  o.restart_window_s = 0;
  EXPECT_NE(ValidateRestartPolicyOptions(o).message().find("--restart-window"), std::string::npos);
  o = {};
  o.crash_loop_restarts = 1;
  EXPECT_NE(ValidateRestartPolicyOptions(o).message().find("--crash-loop"), std::string::npos);
  o.crash_loop_restarts = 0;  // off
  EXPECT_TRUE(ValidateRestartPolicyOptions(o).ok());
  o = {};
  o.backoff_initial_s = -1;
  EXPECT_NE(ValidateRestartPolicyOptions(o).message().find("--backoff"), std::string::npos);
  o = {};
  o.backoff_factor = 0.5;
  EXPECT_FALSE(ValidateRestartPolicyOptions(o).ok());
  o = {};
  o.backoff_max_s = 0.5;  // below the initial backoff
  EXPECT_FALSE(ValidateRestartPolicyOptions(o).ok());
}

TEST(RestartPolicyTest, BudgetExhaustedWithinTheWindow) {
  RestartPolicyOptions o = NoCrashLoopGuard();
  o.max_restarts = 3;
  o.restart_window_s = 100;
  RestartPolicy policy(o);
  // Progress between failures: only the budget can stop it.
  for (int i = 0; i < 3; ++i) {
    RestartDecision d = policy.OnFailure(At(10.0 * i), 10 * (i + 1));
    EXPECT_TRUE(d.restart) << i;
    EXPECT_TRUE(d.reason.empty());
  }
  EXPECT_EQ(policy.restarts(), 3);
  RestartDecision d = policy.OnFailure(At(30), 40);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(policy.restarts(), 3);
  EXPECT_NE(d.reason.find("3 restarts already in the last 100 s"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("--max-restarts 3"), std::string::npos) << d.reason;
}

TEST(RestartPolicyTest, WindowSlides) {
  RestartPolicyOptions o = NoCrashLoopGuard();
  o.max_restarts = 3;
  o.restart_window_s = 100;
  RestartPolicy policy(o);
  EXPECT_TRUE(policy.OnFailure(At(0), 1).restart);
  EXPECT_TRUE(policy.OnFailure(At(10), 2).restart);
  EXPECT_TRUE(policy.OnFailure(At(20), 3).restart);
  EXPECT_EQ(policy.restarts_in_window(At(20)), 3);
  // The restart at t=0 left the window [1, 101].
  EXPECT_TRUE(policy.OnFailure(At(101), 4).restart);
  EXPECT_EQ(policy.restarts_in_window(At(101)), 3);
  // [5, 105] holds 10, 20 and 101.
  EXPECT_FALSE(policy.OnFailure(At(105), 5).restart);
  // [111, 211] holds only 101 (the refused failure granted nothing).
  EXPECT_TRUE(policy.OnFailure(At(200), 6).restart);
  EXPECT_EQ(policy.restarts(), 5);
}

TEST(RestartPolicyTest, ZeroBudgetNeverRestarts) {
  RestartPolicyOptions o = NoCrashLoopGuard();
  o.max_restarts = 0;
  RestartPolicy policy(o);
  RestartDecision d = policy.OnFailure(At(5), 10);
  EXPECT_FALSE(d.restart);
  EXPECT_FALSE(d.reason.empty());
}

TEST(RestartPolicyTest, CrashLoopGivesUpWithoutNewCommit) {
  RestartPolicyOptions o;
  o.crash_loop_restarts = 3;
  RestartPolicy policy(o, /*initial_committed_step=*/100);
  // The run resumes from 100 and dies each time before committing anything newer.
  EXPECT_TRUE(policy.OnFailure(At(10), 100).restart);
  EXPECT_EQ(policy.failures_without_progress(), 1);
  EXPECT_TRUE(policy.OnFailure(At(20), 100).restart);
  RestartDecision d = policy.OnFailure(At(30), 100);
  EXPECT_FALSE(d.restart);
  EXPECT_NE(d.reason.find("crash loop: 3 failures in a row without a new committed checkpoint"),
            std::string::npos)
      << d.reason;
  EXPECT_NE(d.reason.find("newest committed step 100"), std::string::npos) << d.reason;
  EXPECT_EQ(policy.restarts(), 2);
}

TEST(RestartPolicyTest, NewCommitResetsTheCrashLoopGuard) {
  RestartPolicyOptions o;
  o.crash_loop_restarts = 3;
  RestartPolicy policy(o);
  EXPECT_TRUE(policy.OnFailure(At(10), 100).restart);  // 100 > none at start: progress
  EXPECT_TRUE(policy.OnFailure(At(20), 100).restart);
  EXPECT_EQ(policy.failures_without_progress(), 2);
  EXPECT_TRUE(policy.OnFailure(At(30), 150).restart);  // new commit: streak starts again
  EXPECT_EQ(policy.failures_without_progress(), 1);
  EXPECT_TRUE(policy.OnFailure(At(40), 150).restart);
  // A fallback to an older checkpoint (corrupt newest) is not progress either.
  EXPECT_FALSE(policy.OnFailure(At(50), 120).restart);
}

TEST(RestartPolicyTest, BackoffGrowsWithoutProgressCapsAndResets) {
  RestartPolicyOptions o = NoCrashLoopGuard();
  o.backoff_initial_s = 1;
  o.backoff_factor = 2;
  o.backoff_max_s = 5;
  RestartPolicy policy(o);
  std::vector<double> backoff_s;
  for (int i = 0; i < 5; ++i) backoff_s.push_back(policy.OnFailure(At(i), 7).backoff_s);
  EXPECT_EQ(backoff_s, (std::vector<double>{1, 2, 4, 5, 5}));
  EXPECT_DOUBLE_EQ(policy.OnFailure(At(10), 8).backoff_s, 1);  // progress: back to initial
  EXPECT_DOUBLE_EQ(policy.OnFailure(At(11), 8).backoff_s, 2);
}

TEST(RestartPolicyTest, CrashLoopIsCheckedBeforeTheBudget) {
  RestartPolicyOptions o;
  o.crash_loop_restarts = 2;
  o.max_restarts = 1;
  RestartPolicy policy(o);
  EXPECT_TRUE(policy.OnFailure(At(1), 5).restart);
  RestartDecision d = policy.OnFailure(At(2), 5);
  EXPECT_FALSE(d.restart);
  EXPECT_NE(d.reason.find("crash loop"), std::string::npos) << d.reason;
}

}  // namespace
}  // namespace tessera
