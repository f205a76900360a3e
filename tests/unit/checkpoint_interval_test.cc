// tests/unit/checkpoint_interval_test.cc — checkpoint.interval: auto (Young/Daly), by hand.
#include "runtime/train/checkpoint_interval.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/train/config.h"

namespace tessera {
namespace {

TEST(CheckpointInterval, YoungsRuleInStepsNeverShorterThanTheWrite) {
  // sqrt(2 x 0.5 s x 3600 s) = 60 s; 60 / 0.25 s = 240 steps.
  EXPECT_EQ(YoungDalySteps({0.5, 1.0, 0.25, 3600}), 240);
  // A cheap save (2 ms stall) and a day: sqrt(2 x 0.002 x 86400) = 18.59 s -> 19 steps of 1 s.
  EXPECT_EQ(YoungDalySteps({0.002, 0.1, 1.0, 86400}), 19);
  // The write (30 s) is longer than Young's period (0.13 s): a save cannot start earlier.
  EXPECT_EQ(YoungDalySteps({0.002, 30.0, 0.5, 4}), 60);
  // Degenerate inputs still give a usable interval: free saves every step; no step time yet
  // as after the first save; a practically infinite MTBF, practically never.
  EXPECT_EQ(YoungDalySteps({0, 0, 0.1, 3600}), 1);
  EXPECT_EQ(YoungDalySteps({1, 1, 0, 3600}), kFirstAutoSaveSteps);
  EXPECT_EQ(YoungDalySteps({1, 1, std::nan(""), 3600}), kFirstAutoSaveSteps);
  EXPECT_EQ(YoungDalySteps({1, 1, 1, 1e308}), int64_t{1000000000000000});
  EXPECT_EQ(DescribeAutoInterval({0.5, 1.0, 0.25, 3600}, 240),
            "every 240 steps: sqrt(2 x cost 500.0 ms x MTBF 3600 s) = 60.0 s (write 1.00 s), "
            "0.250 s a step");
}

TEST(CheckpointInterval, MtbfConfiguredElseMeasuredElseADay) {
  EXPECT_EQ(ChooseMtbf(600, 50).seconds, 600);
  EXPECT_EQ(ChooseMtbf(600, 50).source, "configured (checkpoint.mtbf_s)");
  EXPECT_EQ(ChooseMtbf(0, 50).seconds, 50);
  EXPECT_EQ(ChooseMtbf(0, 50).source, "measured by tessera launch over this run's failures");
  EXPECT_EQ(ChooseMtbf(0, 0).seconds, kDefaultMtbfSeconds);
  EXPECT_EQ(ChooseMtbf(0, std::nan("")).seconds, kDefaultMtbfSeconds);
}

TEST(CheckpointInterval, ConfigKeys) {
  auto c = LoadConfig(std::string(TESSERA_SOURCE_DIR) + "/configs/tiny.yaml",
                      {"checkpoint.interval=auto", "checkpoint.mtbf_s=7200"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->checkpoint.interval, CheckpointInterval::kAuto);
  EXPECT_EQ(c->checkpoint.mtbf_s, 7200);
  auto bad = LoadConfig(std::string(TESSERA_SOURCE_DIR) + "/configs/tiny.yaml", {"checkpoint.interval=often"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("checkpoint.interval"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(LoadConfig(std::string(TESSERA_SOURCE_DIR) + "/configs/tiny.yaml", {"checkpoint.mtbf_s=-1"}).ok());
}

}  // namespace
}  // namespace tessera
