// runtime/core/sharded_tensor.h: the slice arithmetic (whole tensors, row and column splits,
// the fused [q | k | v] block view, vocabulary padding, empty slices), Validate's refusals, the
// replica rule, and a tp x pp x dp layout that round-trips: every rank's local buffers filled
// from a global tensor, and the main replicas' runs put back, rebuild it with every global
// element written exactly once.
// links: tessera_core
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/core/sharded_tensor.h"

namespace tessera {
namespace {

using LocalRun = std::tuple<int64_t, int64_t, int64_t>;  // local, global, length

std::vector<LocalRun> Runs(const ShardedTensor& t) {
  std::vector<LocalRun> runs;
  t.ForEachRun([&](int64_t l, int64_t g, int64_t n) { runs.emplace_back(l, g, n); });
  return runs;
}

TEST(ShardedTensor, WholeTensorIsOneRunCoveringEveryElement) {
  const ShardedTensor t = ShardedTensor::Whole("w", {6, 4});
  EXPECT_TRUE(t.IsWhole());
  EXPECT_TRUE(t.IsMainReplica());
  EXPECT_TRUE(t.Validate().ok());
  EXPECT_EQ(Runs(t), (std::vector<LocalRun>{{0, 0, 24}}));
}

TEST(ShardedTensor, RowSplitIsOneRunStartingAtItsFirstRow) {
  // Rows [3, 6) of (6, 4): global elements [12, 24).
  const ShardedTensor t =
      ShardedTensor::Split("w", {6, 4}, {6, 4}, 0, ShardGroup::kTp, 3, 3, {3, 4});
  ASSERT_TRUE(t.Validate().ok());
  EXPECT_FALSE(t.IsWhole());
  EXPECT_EQ(t.slice_numel(), 12);
  EXPECT_EQ(Runs(t), (std::vector<LocalRun>{{0, 12, 12}}));
}

TEST(ShardedTensor, ColumnSplitIsOneStridedRunPerRow) {
  // Columns [2, 4) of (3, 4).
  const ShardedTensor t =
      ShardedTensor::Split("w", {3, 4}, {3, 4}, 1, ShardGroup::kTp, 2, 2, {3, 2});
  ASSERT_TRUE(t.Validate().ok());
  EXPECT_EQ(Runs(t), (std::vector<LocalRun>{{0, 2, 2}, {2, 6, 2}, {4, 10, 2}}));
}

TEST(ShardedTensor, FusedBlockViewHoldsOneRowRangeOfEveryBlockInBlockOrder) {
  // A (3*4, 2) [q | k | v] tensor seen as (3, 4, 2), rows [2, 4) of each block: locally
  // [q_1 | k_1 | v_1], globally rows 2-3, 6-7, 10-11.
  const ShardedTensor t =
      ShardedTensor::Split("qkv", {12, 2}, {3, 4, 2}, 1, ShardGroup::kTp, 2, 2, {6, 2});
  ASSERT_TRUE(t.Validate().ok());
  EXPECT_EQ(Runs(t), (std::vector<LocalRun>{{0, 4, 4}, {4, 12, 4}, {8, 20, 4}}));
}

TEST(ShardedTensor, PaddingRowsFollowTheSliceAndMapToNothing) {
  // Vocabulary 5 over 2 ranks, 3 rows each: rank 1 holds rows 3, 4 and one padding row.
  const ShardedTensor t =
      ShardedTensor::Split("wte", {5, 2}, {5, 2}, 0, ShardGroup::kTp, 3, 2, {3, 2});
  ASSERT_TRUE(t.Validate().ok());
  EXPECT_EQ(t.padding(), 2);
  EXPECT_EQ(Runs(t), (std::vector<LocalRun>{{0, 6, 4}}));
}

TEST(ShardedTensor, EmptySliceHasNoRuns) {
  const ShardedTensor t =
      ShardedTensor::Split("wte", {2, 2}, {2, 2}, 0, ShardGroup::kTp, 2, 0, {1, 2});
  ASSERT_TRUE(t.Validate().ok());
  EXPECT_TRUE(Runs(t).empty());
}

TEST(ShardedTensor, ValidateRefusesInconsistentDescriptionsNamingTheTensor) {
  ShardedTensor outside =
      ShardedTensor::Split("h.0.w", {6, 4}, {6, 4}, 0, ShardGroup::kTp, 4, 3, {3, 4});
  Status s = outside.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("h.0.w"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("leaves the view"), std::string::npos) << s.ToString();

  ShardedTensor small = ShardedTensor::Split("w", {6, 4}, {6, 4}, 0, ShardGroup::kTp, 0, 3, {2, 4});
  EXPECT_NE(small.Validate().message().find("smaller than the slice"), std::string::npos);

  ShardedTensor view = ShardedTensor::Split("w", {6, 4}, {3, 3, 4}, 1, ShardGroup::kTp, 0, 1, {3, 4});
  EXPECT_NE(view.Validate().message().find("elements of the global shape"), std::string::npos);
}

TEST(ShardedTensor, OnlyTheCopyWithEveryReplicaIdZeroIsMain) {
  ShardedTensor t = ShardedTensor::Whole("ln.weight", {4});
  EXPECT_TRUE(t.IsMainReplica());
  for (ReplicaId r : {ReplicaId{1, 0, 0}, ReplicaId{0, 1, 0}, ReplicaId{0, 0, 1}}) {
    t.replica = r;
    EXPECT_FALSE(t.IsMainReplica());
  }
}

// One rank's tensors under tp = 2, pp = 2 (stage 1 keeps a copy of the tied embedding), dp = 2
// (the state replicated over dp): a column-split matrix, a norm every tp rank holds whole, and
// a vocab-parallel embedding with a padding row.
std::vector<ShardedTensor> RankTensors(int tp, int pp, int dp) {
  std::vector<ShardedTensor> ts;
  ShardedTensor w = ShardedTensor::Split("w", {3, 4}, {3, 4}, 1, ShardGroup::kTp, 2 * tp, 2, {3, 2});
  ShardedTensor norm = ShardedTensor::Whole("norm", {4});
  norm.replica.tp = tp;
  const int64_t real = tp == 0 ? 3 : 2;  // 5 rows over 2 ranks of 3
  ShardedTensor emb = ShardedTensor::Split("emb", {5, 2}, {5, 2}, 0, ShardGroup::kTp, 3 * tp, real, {3, 2});
  emb.replica.pp = pp;  // stage 0 holds it; stage 1's is the copy
  if (pp == 0) ts.push_back(w);
  if (pp == 1) ts.push_back(norm);
  ts.push_back(emb);
  for (ShardedTensor& t : ts) t.replica.dp = dp;
  return ts;
}

TEST(ShardedTensor, TpPpDpLayoutRoundTripsWithEveryElementSavedOnce) {
  const std::vector<std::pair<std::string, int64_t>> globals = {{"w", 12}, {"norm", 4}, {"emb", 10}};
  auto value = [](const std::string& name, int64_t i) { return float(name.size() * 100 + i); };
  std::map<std::string, std::vector<float>> rebuilt;
  std::map<std::string, std::vector<int>> writes;
  for (const auto& [name, n] : globals) {
    rebuilt[name].assign(static_cast<size_t>(n), -1.0f);
    writes[name].assign(static_cast<size_t>(n), 0);
  }
  for (int tp = 0; tp < 2; ++tp) {
    for (int pp = 0; pp < 2; ++pp) {
      for (int dp = 0; dp < 2; ++dp) {
        for (const ShardedTensor& t : RankTensors(tp, pp, dp)) {
          ASSERT_TRUE(t.Validate().ok()) << t.ToString();
          // Load: the local buffer from the global tensor; padding stays 0.
          std::vector<float> local(static_cast<size_t>(t.local_shape.numel()), 0.0f);
          t.ForEachRun([&](int64_t l, int64_t g, int64_t len) {
            for (int64_t i = 0; i < len; ++i) local[l + i] = value(t.name, g + i);
          });
          for (int64_t i = t.slice_numel(); i < t.local_shape.numel(); ++i) EXPECT_EQ(local[i], 0.0f);
          if (!t.IsMainReplica()) continue;
          // Save: only the main replica writes back.
          t.ForEachRun([&](int64_t l, int64_t g, int64_t len) {
            for (int64_t i = 0; i < len; ++i) {
              rebuilt[t.name][g + i] = local[l + i];
              ++writes[t.name][g + i];
            }
          });
        }
      }
    }
  }
  for (const auto& [name, n] : globals) {
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(writes[name][i], 1) << name << "[" << i << "]";
      EXPECT_EQ(rebuilt[name][i], value(name, i)) << name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace tessera
