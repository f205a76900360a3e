// links: tessera_train
// runtime/train/validate: the layer file round trip, the comparison (relative to the layer's
// scale, the worst element located, NaN the worst error, a missing tensor reported not judged,
// a tensor of another shape refused) and the report's first divergence.
#include "runtime/train/validate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

using Output = Transformer::LayerOutput;

std::vector<Output> Outputs() {
  // B = 1, T = 3: "embeddings" (3, 2) and "logits" (3, 4).
  return {Output{"embeddings", 3, 2, {1, 2, 3, 4, 5, 6}},
          Output{"logits", 3, 4, {0.5f, -1, 2, 0, 1, 1, 1, 1, -8, 3, 2, 1}}};
}

class LayerCompare : public ::testing::Test {
 protected:
  std::string Write(const std::vector<Output>& outputs, const std::string& name) {
    const std::string path = tmp_ / name;
    EXPECT_TRUE(WriteLayerFile(path, ids_, 1, 3, outputs, "test").ok());
    return path;
  }
  testing::ScopedTempDir tmp_{"layer_compare"};
  std::vector<int32_t> ids_ = {3, 1, 4};
};

TEST_F(LayerCompare, IdenticalFilesAgreeAndTheInputReadsBack) {
  const std::string path = Write(Outputs(), "same.safetensors");
  int64_t B = 0, T = 0;
  auto ids = ReadValidationInput(path, 8, &B, &T);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, ids_);
  EXPECT_EQ(B, 1);
  EXPECT_EQ(T, 3);
  EXPECT_FALSE(ReadValidationInput(path, 4, &B, &T).ok());  // token 4 outside a vocabulary of 4
  auto diffs = CompareWithReference(Outputs(), path, 1e-6);
  ASSERT_TRUE(diffs.ok());
  for (const LayerDiff& d : *diffs) EXPECT_TRUE(d.compared && d.within && d.max_abs == 0) << d.name;
  EXPECT_NE(DescribeLayerDiffs(*diffs, 3, 1e-6).find("all 2 layers within"), std::string::npos);
}

TEST_F(LayerCompare, TheWorstElementIsLocatedRelativeToTheLayersScale) {
  std::vector<Output> ref = Outputs();
  ref.erase(ref.begin());  // the embeddings are absent
  ref[0].values[6] = 1.25f;  // logits row 1 (position 1), column 2: off by 0.25 of a max of 8
  const std::string path = Write(ref, "ref.safetensors");
  auto diffs = CompareWithReference(Outputs(), path, 1e-2);
  ASSERT_TRUE(diffs.ok()) << diffs.status().ToString();
  EXPECT_FALSE((*diffs)[0].compared);
  const LayerDiff& d = (*diffs)[1];
  EXPECT_DOUBLE_EQ(d.max_abs, 0.25);
  EXPECT_DOUBLE_EQ(d.rel, 0.25 / 8);
  EXPECT_EQ(d.worst, 6);
  EXPECT_FALSE(d.within);
  const std::string report = DescribeLayerDiffs(*diffs, 3, 1e-2);
  EXPECT_NE(report.find("embeddings              (not in the reference)"), std::string::npos) << report;
  EXPECT_NE(report.find("first divergence: logits: max abs 2.500e-01 (rel 3.125e-02 > 1.0e-02) at "
                        "batch 0, position 1, column 2: tessera 1 vs reference 1.25"),
            std::string::npos) << report;
}

TEST_F(LayerCompare, NanIsTheWorstErrorAndAnotherShapeIsRefused) {
  std::vector<Output> ours = Outputs();
  ours[1].values[3] = NAN;
  const std::string path = Write(Outputs(), "ref.safetensors");
  auto diffs = CompareWithReference(ours, path, 1e-2);
  ASSERT_TRUE(diffs.ok());
  EXPECT_TRUE(std::isinf((*diffs)[1].max_abs));
  EXPECT_EQ((*diffs)[1].worst, 3);
  EXPECT_FALSE((*diffs)[1].within);

  std::vector<Output> wide = Outputs();
  wide[1] = Output{"logits", 2, 6, std::vector<float>(12, 0.0f)};  // same count, rows of 6
  auto refused = CompareWithReference(wide, path, 1e-2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find("logits has 12 elements in rows of 4"), std::string::npos)
      << refused.status().message();
  auto none = CompareWithReference({Output{"other", 1, 1, {0}}}, path, 1e-2);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
}

TEST(FixedValidationInput, IsAFunctionOfTheSeedInsideTheVocabulary) {
  const std::vector<int32_t> a = FixedValidationInput(2, 16, 50, 7);
  EXPECT_EQ(a, FixedValidationInput(2, 16, 50, 7));
  EXPECT_NE(a, FixedValidationInput(2, 16, 50, 8));
  for (int32_t id : a) EXPECT_TRUE(id >= 0 && id < 50);
}

}  // namespace
}  // namespace tessera
