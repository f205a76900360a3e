// optimizer/loss_scale.h: backoff on overflow (the step is skipped), growth after
// growth_interval consecutive good steps, clamping at min_scale / max_scale, static scaling
// that never changes the scale, Restore, and config validation.
// links: tessera_optimizer
#include <gtest/gtest.h>

#include "optimizer/loss_scale.h"

namespace tessera {
namespace {

LossScaleConfig Cfg() {
  LossScaleConfig c;
  c.initial = 1024.0;
  c.growth_interval = 3;
  c.min_scale = 64.0;
  c.max_scale = 4096.0;
  return c;
}

TEST(LossScaler, OverflowSkipsAndBacksOff) {
  LossScaler s(Cfg());
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.good_steps(), 1);
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.good_steps(), 0);  // the run of good steps restarts
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, GrowsAfterGrowthIntervalGoodSteps) {
  LossScaler s(Cfg());
  EXPECT_FALSE(s.Update(false));
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_FALSE(s.Update(false));  // third good step in a row
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.good_steps(), 0);
  // An overflow in the middle resets the count: two good, overflow, two good -> no growth.
  s.Update(false);
  s.Update(false);
  s.Update(true);
  EXPECT_EQ(s.scale(), 1024.0);
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 1024.0);
  s.Update(false);
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, ClampsAtMinAndMax) {
  LossScaler s(Cfg());
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 64.0);  // 1024 / 2^4, then held at min_scale
  EXPECT_EQ(s.skipped_steps(), 10);
  for (int i = 0; i < 30; ++i) EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 4096.0);  // 64 * 2^6, then held at max_scale
}

TEST(LossScaler, StaticScaleNeverChangesButOverflowStillSkips) {
  LossScaleConfig c = Cfg();
  c.dynamic = false;
  c.initial = 128.0;
  LossScaler s(c);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, RestoreResumesTheSameSequence) {
  LossScaler a(Cfg());
  a.Update(false);
  a.Update(true);
  a.Update(false);
  a.Update(false);
  LossScaler b(Cfg());
  b.Restore(a.scale(), a.good_steps(), a.skipped_steps());
  EXPECT_EQ(b.scale(), 512.0);
  EXPECT_EQ(b.good_steps(), 2);
  EXPECT_EQ(b.skipped_steps(), 1);
  for (bool overflow : {false, false, false, true, false}) {
    EXPECT_EQ(a.Update(overflow), b.Update(overflow));
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.good_steps(), b.good_steps());
  }
  EXPECT_EQ(b.skipped_steps(), 2);
}

TEST(LossScaleConfig, DefaultsValidAndBadValuesRejected) {
  EXPECT_TRUE(ValidateLossScaleConfig(LossScaleConfig{}).ok());
  EXPECT_EQ(LossScaler(LossScaleConfig{}).scale(), 65536.0);
  auto bad = [](auto mutate) {
    LossScaleConfig c;
    mutate(c);
    return !ValidateLossScaleConfig(c).ok();
  };
  EXPECT_TRUE(bad([](LossScaleConfig& c) { c.initial = 0.0; }));
  EXPECT_TRUE(bad([](LossScaleConfig& c) { c.growth_factor = 1.0; }));
  EXPECT_TRUE(bad([](LossScaleConfig& c) { c.backoff_factor = 1.0; }));
  EXPECT_TRUE(bad([](LossScaleConfig& c) { c.backoff_factor = 0.0; }));
  EXPECT_TRUE(bad([](LossScaleConfig& c) { c.growth_interval = 0; }));
  EXPECT_TRUE(bad([](LossScaleConfig& c) { c.min_scale = 0.0; }));
  EXPECT_TRUE(bad([](LossScaleConfig& c) { c.max_scale = 0.5; }));
  EXPECT_TRUE(bad([](LossScaleConfig& c) { c.initial = 1e9; }));  // above max_scale
  EXPECT_FALSE(bad([](LossScaleConfig& c) {
    c.dynamic = false;
    c.initial = 1e9;  // static: the bounds do not apply
  }));
}

}  // namespace
}  // namespace tessera
