// links: tessera_supervisor
// tests/unit/run_report_test.cc — run report totals on a hand-computed example (detection,
// recovery, steps lost, productive time, goodput), the text form and the JSON keys.
#include <gtest/gtest.h>

#include <string>

#include "runtime/supervisor/run_report.h"

namespace tessera {
namespace {

// Three incarnations, three failures; numbers chosen so the totals are easy to check by hand.
RunReport Example() {
  RunReport r;
  r.run_id = "run-7";
  r.outcome = "gave_up";
  r.outcome_detail = "crash loop: 2 failures in a row without a new committed checkpoint";
  r.wall_s = 100;
  r.final_step = 100;
  r.target_steps = 200;
  r.step_s = 0.5;
  r.incarnations = {{0, 0, 20, 0, 40, "failed: rank_exit"},
                    {1, 22, 50, 30, 80, "failed: stall"},
                    {2, 82, 90, 70, 100, "failed: rank_exit"}};
  FailureRecord a;
  a.incarnation = 0; a.kind = "rank_exit"; a.ranks = {2}; a.detail = "rank 2 killed by signal 9";
  a.failed_s = 20.0; a.detected_s = 20.25; a.resumed_s = 25.0;
  a.step_at_failure = 40; a.resume_step = 30; a.load_s = 2.5;
  FailureRecord b;
  b.incarnation = 1; b.kind = "stall"; b.ranks = {1}; b.detail = "no step for 30.5 s";
  b.failed_s = 50.0; b.detected_s = 80.5; b.resumed_s = 84.5;
  b.step_at_failure = 80; b.resume_step = 70;
  FailureRecord c;
  c.incarnation = 2; c.kind = "rank_exit"; c.ranks = {0, 3}; c.detail = "ranks 0,3 exited 1";
  c.failed_s = 90.0; c.detected_s = 90.125;  // never resumed, resume step unknown
  c.step_at_failure = 100;
  r.failures = {a, b, c};
  r.stragglers = {{3, "rank 3 is a straggler", 60.0}};
  return r;
}

TEST(RunReportTest, TotalsOnAHandComputedExample) {
  RunTotals t = ComputeTotals(Example());
  EXPECT_EQ(t.failures, 3);
  EXPECT_EQ(t.recovered, 2);
  EXPECT_EQ(t.failures_by_kind.size(), 2u);
  EXPECT_EQ(t.failures_by_kind["rank_exit"], 2);
  EXPECT_EQ(t.failures_by_kind["stall"], 1);
  // Detection latencies 0.25, 30.5, 0.125.
  EXPECT_DOUBLE_EQ(t.detection_median_s, 0.25);
  EXPECT_DOUBLE_EQ(t.detection_max_s, 30.5);
  // Recoveries 5.0 and 34.5 (the third never resumed): median of two is their mean.
  EXPECT_DOUBLE_EQ(t.recovery_median_s, 19.75);
  EXPECT_DOUBLE_EQ(t.recovery_max_s, 34.5);
  // 40-30 + 80-70 + 0 (unknown resume step).
  EXPECT_EQ(t.steps_lost, 20);
  // (100 - 0) steps x 0.5 s over 100 s wall.
  EXPECT_DOUBLE_EQ(t.productive_s, 50);
  EXPECT_DOUBLE_EQ(t.goodput, 0.5);
}

TEST(RunReportTest, GoodputIsClampedAndEmptyReportIsZero) {
  RunReport r = Example();
  r.wall_s = 10;  // 50 s of productive step time cannot fit: clamp
  EXPECT_DOUBLE_EQ(ComputeTotals(r).goodput, 1.0);
  r.incarnations[0].start_step = 60;  // resumed at 60 from an older run: 40 steps were ours
  r.wall_s = 100;
  EXPECT_DOUBLE_EQ(ComputeTotals(r).productive_s, 20);

  RunTotals empty = ComputeTotals(RunReport{});
  EXPECT_EQ(empty.failures, 0);
  EXPECT_DOUBLE_EQ(empty.detection_median_s, 0);
  EXPECT_DOUBLE_EQ(empty.recovery_max_s, 0);
  EXPECT_EQ(empty.steps_lost, 0);
  EXPECT_DOUBLE_EQ(empty.goodput, 0);
}

TEST(RunReportTest, StepsLostNeverNegative) {
  RunReport r;
  FailureRecord f;
  f.step_at_failure = 10;
  f.resume_step = 12;  // resumed past the failure step (committed during the stop)
  r.failures = {f};
  EXPECT_EQ(ComputeTotals(r).steps_lost, 0);
}

TEST(RunReportTest, TextNamesOutcomeFailuresKindsAndGoodput) {
  const std::string text = FormatRunReport(Example());
  for (const char* want :
       {"run run-7: gave_up at step 100/200 after 100.0 s, 3 incarnations, 3 failures",
        "crash loop: 2 failures", "rank_exit", "stall", "0,3", "never",
        "all 3 failures detected (rank_exit 2, stall 1)", "detection median 0.250 s, max 30.500 s",
        "2/3 resumed", "median 19.75 s, max 34.50 s", "steps lost 20",
        "goodput 50.0%: productive 50.0 s (100 steps x 0.5000 s per step) over wall 100.0 s",
        "straggler at 60.0 s: rank 3 is a straggler"}) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing '" << want << "' in\n" << text;
  }
  EXPECT_EQ(text.back(), '\n');
  RunReport clean;
  clean.run_id = "ok";
  clean.outcome = "finished";
  EXPECT_NE(FormatRunReport(clean).find("no failures"), std::string::npos);
}

TEST(RunReportTest, JsonKeysRoundTrip) {
  const JsonValue j = RunReportJson(Example());
  Result<JsonValue> parsed = ParseJson(JsonWriter().Value(j).str());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const JsonValue& v = *parsed;
  for (const char* key : {"run_id", "outcome", "outcome_detail", "wall_s", "final_step",
                          "target_steps", "step_s", "incarnations", "failures",
                          "stragglers", "totals"}) {
    EXPECT_NE(v.Find(key), nullptr) << key;
  }
  EXPECT_EQ(v.Find("outcome")->as_string(), "gave_up");
  ASSERT_EQ(v.Find("failures")->items().size(), 3u);
  const JsonValue& f0 = v.Find("failures")->items()[0];
  for (const char* key : {"incarnation", "kind", "ranks", "detail", "failed_s", "detected_s",
                          "resumed_s", "step_at_failure", "resume_step", "load_s", "detection_s",
                          "recovery_s", "steps_lost"}) {
    EXPECT_NE(f0.Find(key), nullptr) << key;
  }
  EXPECT_EQ(f0.Find("steps_lost")->as_int(), 10);
  EXPECT_TRUE(v.Find("failures")->items()[2].Find("recovery_s")->is_null());
  const JsonValue& inc = v.Find("incarnations")->items()[1];
  EXPECT_EQ(inc.Find("start_step")->as_int(), 30);
  EXPECT_EQ(inc.Find("outcome")->as_string(), "failed: stall");
  // How its ranks registered (set on the copy of the example below).
  RunReport with_transports = Example();
  with_transports.incarnations[1].ranks_over_unix_socket = 3;
  with_transports.incarnations[1].ranks_over_tcp = 1;
  const JsonValue t = RunReportJson(with_transports).Find("incarnations")->items()[1];
  EXPECT_EQ(t.Find("ranks_over_unix_socket")->as_int(), 3);
  EXPECT_EQ(t.Find("ranks_over_tcp")->as_int(), 1);
  const JsonValue& totals = *v.Find("totals");
  for (const char* key : {"failures", "recovered", "failures_by_kind", "detection_median_s",
                          "detection_max_s", "recovery_median_s", "recovery_max_s", "steps_lost",
                          "productive_s", "goodput"}) {
    EXPECT_NE(totals.Find(key), nullptr) << key;
  }
  EXPECT_EQ(totals.Find("failures_by_kind")->Find("rank_exit")->as_int(), 2);
  EXPECT_DOUBLE_EQ(totals.Find("goodput")->as_double(), 0.5);
  EXPECT_EQ(v.Find("stragglers")->items()[0].Find("rank")->as_int(), 3);
}

}  // namespace
}  // namespace tessera
