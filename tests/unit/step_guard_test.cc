// links: tessera_train
// tests/unit/step_guard_test.cc — the per-step verdict (runtime/train/step_guard.h) and the
// saved trainer state it travels in (runtime/train/saved_state.h): non-finite steps stop or are
// skipped within their bound, fp16's planned overflows are left to the loss scaler, loss
// spikes are found by z-score over the window (and the window follows a lasting change), and
// the state written into a checkpoint reads back exactly and refuses what no run could save.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/train/saved_state.h"
#include "runtime/train/step_guard.h"

namespace tessera {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
using Verdict = StepGuard::Verdict;

TrainConfig Guarded(NonFinitePolicy policy, int64_t max_skips = 2, float zscore = 0,
                    int64_t window = 4, SpikeAction action = SpikeAction::kReport) {
  TrainConfig t;
  t.on_nonfinite = policy;
  t.max_nonfinite_skips = max_skips;
  t.spike_zscore = zscore;
  t.spike_window = window;
  t.spike_action = action;
  return t;
}

TEST(StepGuard, AFiniteStepIsApplied) {
  StepGuard g(Guarded(NonFinitePolicy::kStop));
  EXPECT_EQ(g.Decide(2.5, 1.0, false).verdict, Verdict::kApply);
}

TEST(StepGuard, StopPolicyStopsAtTheFirstNaNOrInf) {
  for (auto [loss, norm] : {std::pair{kNaN, 1.0}, {2.0, kNaN}, {kInf, 1.0}, {2.0, -kInf}}) {
    StepGuard g(Guarded(NonFinitePolicy::kStop));
    StepGuard::Decision d = g.Decide(loss, norm, false);
    EXPECT_EQ(d.verdict, Verdict::kStop);
    EXPECT_NE(d.reason.find("(train.on_nonfinite: stop)"), std::string::npos) << d.reason;
  }
}

TEST(StepGuard, SkipPolicySkipsAtMostMaxSkipsInARowAndAFiniteStepResetsTheCount) {
  StepGuard g(Guarded(NonFinitePolicy::kSkip, 2));
  EXPECT_EQ(g.Decide(kNaN, kNaN, false).verdict, Verdict::kSkipNonFinite);
  EXPECT_EQ(g.Decide(kNaN, kNaN, false).verdict, Verdict::kSkipNonFinite);
  EXPECT_EQ(g.nonfinite_streak(), 2);
  EXPECT_EQ(g.Decide(2.0, 1.0, false).verdict, Verdict::kApply);
  EXPECT_EQ(g.nonfinite_streak(), 0);
  EXPECT_EQ(g.Decide(kNaN, 1.0, false).verdict, Verdict::kSkipNonFinite);
  EXPECT_EQ(g.Decide(kNaN, 1.0, false).verdict, Verdict::kSkipNonFinite);
  StepGuard::Decision third = g.Decide(kNaN, 1.0, false);
  EXPECT_EQ(third.verdict, Verdict::kStop);
  EXPECT_NE(third.reason.find("3 non-finite steps in a row, more than train.max_nonfinite_skips=2"),
            std::string::npos) << third.reason;
}

TEST(StepGuard, Fp16OverflowWithAFiniteLossIsTheLossScalersBusiness) {
  StepGuard g(Guarded(NonFinitePolicy::kStop));
  EXPECT_EQ(g.Decide(2.0, kInf, /*planned_overflow_possible=*/true).verdict, Verdict::kSkipPlanned);
  // Not when the scale cannot back off any more, and never for a non-finite loss.
  EXPECT_EQ(g.Decide(2.0, kInf, false).verdict, Verdict::kStop);
  StepGuard h(Guarded(NonFinitePolicy::kStop));
  EXPECT_EQ(h.Decide(kNaN, kInf, true).verdict, Verdict::kStop);
}

TEST(StepGuard, ASpikeIsReportedOnceTheWindowIsFull) {
  StepGuard g(Guarded(NonFinitePolicy::kStop, 2, /*zscore=*/3, /*window=*/4));
  for (double loss : {2.0, 2.2, 1.8, 2.0}) {
    StepGuard::Decision d = g.Decide(loss, 1.0, false);
    EXPECT_FALSE(d.has_zscore);  // the window fills first
    EXPECT_EQ(d.verdict, Verdict::kApply);
  }
  // mean 2.0, population std sqrt(0.02) = 0.1414: 2.1 is z = 0.707; 3.0 is z = 7.07.
  StepGuard::Decision calm = g.Decide(2.1, 1.0, false);
  EXPECT_TRUE(calm.has_zscore);
  EXPECT_NEAR(calm.zscore, 0.1 / std::sqrt(0.02), 1e-9);
  EXPECT_FALSE(calm.spike);
  StepGuard::Decision spike = g.Decide(3.0, 1.0, false);
  EXPECT_TRUE(spike.spike);
  EXPECT_EQ(spike.verdict, Verdict::kApply);  // report only
  EXPECT_NE(spike.reason.find("standard deviations above the mean"), std::string::npos);
}

TEST(StepGuard, SkippingSpikesFollowsALastingChangeOfLevel) {
  StepGuard g(Guarded(NonFinitePolicy::kStop, 2, /*zscore=*/2, /*window=*/3, SpikeAction::kSkip));
  for (double loss : {1.0, 1.1, 0.9}) EXPECT_EQ(g.Decide(loss, 1.0, false).verdict, Verdict::kApply);
  EXPECT_EQ(g.Decide(5.0, 1.0, false).verdict, Verdict::kSkipSpike);
  // The new level joins the window: within spike_window steps it is the normal.
  int skipped = 0;
  Verdict last = Verdict::kSkipSpike;
  for (int i = 0; i < 6; ++i) {
    last = g.Decide(5.0 + 0.01 * (i % 2), 1.0, false).verdict;
    skipped += last == Verdict::kSkipSpike;
  }
  EXPECT_EQ(last, Verdict::kApply);
  EXPECT_LE(skipped, 3);
}

TEST(StepGuard, ConstantLossesMakeAnyHigherLossASpike) {
  StepGuard g(Guarded(NonFinitePolicy::kStop, 2, 1, 2));
  g.Decide(1.0, 1.0, false);
  g.Decide(1.0, 1.0, false);
  EXPECT_TRUE(g.Decide(1.5, 1.0, false).spike);
  EXPECT_FALSE(g.Decide(1.0, 1.0, false).spike);
}

TEST(StepGuard, RestoreReproducesTheDecisions) {
  StepGuard a(Guarded(NonFinitePolicy::kSkip, 5, 1, 3, SpikeAction::kSkip));
  const double losses[] = {1.0, 1.2, 0.9, 1.5, kNaN, 1.1, 2.0, 0.8, 1.3, 1.9};
  for (int i = 0; i < 5; ++i) a.Decide(losses[i], 1.0, false);
  StepGuard b(Guarded(NonFinitePolicy::kSkip, 5, 1, 3, SpikeAction::kSkip));
  b.Restore(a.nonfinite_streak(), a.loss_window());
  for (int i = 5; i < 10; ++i) {
    StepGuard::Decision da = a.Decide(losses[i], 1.0, false), db = b.Decide(losses[i], 1.0, false);
    EXPECT_EQ(da.verdict, db.verdict) << i;
    EXPECT_EQ(da.zscore, db.zscore) << i;
  }
  // A shorter configured window keeps the newest values.
  StepGuard c(Guarded(NonFinitePolicy::kSkip, 5, 1, 2));
  c.Restore(0, {1.0, 2.0, 3.0});
  EXPECT_EQ(c.loss_window(), (std::vector<double>{2.0, 3.0}));
}

// ---- saved state --------------------------------------------------------------------------

SavedTrainerState Sample() {
  SavedTrainerState s;
  s.step = 12;
  s.seed = 18446744073709551615ull;  // the largest seed: stored as an int64 with the same bits
  s.data_epoch = 1;
  s.data_index = 37;
  s.adamw_step = 11;
  s.nonfinite_streak = 1;
  s.loss_scale = SavedLossScale{1024.0, 3, 1};
  s.loss_window = {2.5, 0.1 + 0.2, 1.0 / 3.0};
  return s;
}

TEST(SavedState, RoundTripsEveryFieldExactly) {
  const SavedTrainerState s = Sample();
  const std::string text = JsonWriter().Value(SavedStateJson(s)).str();
  Result<JsonValue> json = ParseJson(text);
  ASSERT_TRUE(json.ok());
  Result<SavedTrainerState> back = ParseSavedState(*json, 12, "m");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->seed, s.seed);
  EXPECT_EQ(back->data_epoch, 1);
  EXPECT_EQ(back->data_index, 37);
  EXPECT_EQ(back->adamw_step, 11);
  EXPECT_EQ(back->nonfinite_streak, 1);
  ASSERT_TRUE(back->loss_scale.has_value());
  EXPECT_EQ(back->loss_scale->scale, 1024.0);
  EXPECT_EQ(back->loss_window, s.loss_window);  // bit for bit
}

// What no run could have saved is damage (kDataLoss, naming the field).
TEST(SavedState, RefusesWhatNoRunCouldHaveSaved) {
  auto with = [](const std::string& key, JsonValue v) {
    JsonValue j = SavedStateJson(Sample());
    std::vector<std::pair<std::string, JsonValue>> m = j.members();
    bool found = false;
    for (auto& [k, val] : m) {
      if (k == key) {
        val = v;
        found = true;
      }
    }
    if (!found) m.push_back({key, v});
    return JsonValue::Object(std::move(m));
  };
  auto refused = [](const JsonValue& state, const std::string& needle) {
    Result<SavedTrainerState> r = ParseSavedState(state, 12, "dir/manifest.json");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  refused(with("step", JsonValue::Integer(13)), "state.step: 13 disagrees with the manifest's step 12");
  refused(with("step", JsonValue::Number(12.5)), "state.step: not an integer");
  refused(with("data_index", JsonValue::Integer(-1)), "state.data_index: -1 is outside");
  refused(with("data_epoch", JsonValue::Integer(int64_t{1} << 50)), "state.data_epoch");
  refused(with("adamw_step", JsonValue::Integer(int64_t{1} << 60)), "state.adamw_step");
  refused(with("nonfinite_streak", JsonValue::Integer(13)), "state.nonfinite_streak");
  refused(with("loss_scale", JsonValue::Number(1000.0)), "state.loss_scale: not a positive, finite power of two");
  refused(with("loss_scale", JsonValue::Number(-2.0)), "state.loss_scale");
  refused(with("loss_scale_skipped", JsonValue::Integer(99)), "state.loss_scale_skipped");
  refused(with("loss_window", JsonValue::Array({JsonValue::Null()})), "state.loss_window");
  refused(with("learning_rate", JsonValue::Number(1.0)), "state: unknown key \"learning_rate\"");
  JsonValue no_seed = JsonValue::Object({{"step", JsonValue::Integer(12)}});
  refused(no_seed, "state.seed");
}

// Healthy but not for this run: kOutOfRange (skipped); another seed is a config error.
TEST(SavedState, FitsTheRunOrSaysWhyNot) {
  Config c;
  c.train.steps = 100;
  c.train.seed = Sample().seed;
  c.precision = Precision::kFp16;
  EXPECT_TRUE(CheckStateFitsRun(Sample(), c, 1000, "m").ok());
  c.train.steps = 10;
  Status st = CheckStateFitsRun(Sample(), c, 1000, "m");
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("beyond this run's train.steps=10"), std::string::npos);
  c.train.steps = 100;
  st = CheckStateFitsRun(Sample(), c, 37, "m");
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("outside this run's 37 training windows"), std::string::npos);
  c.mixed_precision.min_scale = 4096;
  st = CheckStateFitsRun(Sample(), c, 1000, "m");
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("fp16 loss scale"), std::string::npos);
  c.mixed_precision.min_scale = 1;
  c.train.seed = 7;
  EXPECT_EQ(CheckStateFitsRun(Sample(), c, 1000, "m").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
