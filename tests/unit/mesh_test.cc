// links: tessera_comm
// tests/unit/mesh_test.cc — DeviceMesh arithmetic, exhaustively for every layout of up to 16
// ranks: coordinates round-trip, tp is fastest and pp slowest, every group kind partitions the
// world, groups vary exactly their axes, and ids/indices are consistent; bad layouts name the
// numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "comm/device_mesh.h"

namespace tessera {
namespace {

std::vector<ParallelLayout> AllLayouts(int world) {
  std::vector<ParallelLayout> out;
  for (int dp = 1; dp <= world; ++dp)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; pp <= world; ++pp)
        for (int ep = 1; ep <= world; ++ep)
          if (dp * tp * pp * ep == world) out.push_back({dp, tp, pp, ep});
  return out;
}

bool Differs(MeshGroup g, const MeshCoord& a, const MeshCoord& b) {
  // True if a and b differ on an axis that groups of kind g keep fixed.
  bool pp = a.pp != b.pp, dp = a.dp != b.dp, ep = a.ep != b.ep, tp = a.tp != b.tp;
  switch (g) {
    case MeshGroup::kTp: return pp || dp || ep;
    case MeshGroup::kPp: return dp || ep || tp;
    case MeshGroup::kEp: return pp || dp || tp;
    case MeshGroup::kDp: return pp || ep || tp;
    case MeshGroup::kDpEp: return pp || tp;
  }
  return true;
}

TEST(DeviceMesh, ExhaustiveSmallWorlds) {
  for (int world = 1; world <= 16; ++world) {
    for (const ParallelLayout& l : AllLayouts(world)) {
      SCOPED_TRACE(l.ToString());
      auto mesh = DeviceMesh::Create(l, world);
      ASSERT_TRUE(mesh.ok()) << mesh.status().ToString();
      for (int r = 0; r < world; ++r) {
        MeshCoord c = mesh->Coord(r);
        ASSERT_EQ(mesh->RankOf(c), r);
        // tp fastest, pp slowest.
        ASSERT_EQ(c.tp, r % l.tp);
        ASSERT_EQ(c.pp, r / (l.tp * l.ep * l.dp));
      }
      for (MeshGroup g : kAllMeshGroups) {
        std::set<int> covered;
        std::set<int> ids;
        for (int r = 0; r < world; ++r) {
          std::vector<int> ranks = mesh->GroupRanks(g, r);
          ASSERT_EQ(static_cast<int>(ranks.size()), mesh->GroupSize(g));
          ASSERT_TRUE(std::is_sorted(ranks.begin(), ranks.end()));
          ASSERT_EQ(ranks[mesh->IndexInGroup(g, r)], r);
          for (int q = 0; q < world; ++q) {
            bool same_group = std::find(ranks.begin(), ranks.end(), q) != ranks.end();
            ASSERT_EQ(same_group, !Differs(g, mesh->Coord(r), mesh->Coord(q)))
                << MeshGroupName(g) << " r=" << r << " q=" << q;
            ASSERT_EQ(same_group, mesh->GroupId(g, r) == mesh->GroupId(g, q));
          }
          covered.insert(ranks.begin(), ranks.end());
          ids.insert(mesh->GroupId(g, r));
        }
        ASSERT_EQ(static_cast<int>(covered.size()), world);
        ASSERT_EQ(static_cast<int>(ids.size()), world / mesh->GroupSize(g));
        ASSERT_EQ(*ids.rbegin(), world / mesh->GroupSize(g) - 1);
      }
      EXPECT_EQ(mesh->GroupSize(MeshGroup::kDpEp), l.dp * l.ep);
    }
  }
}

TEST(DeviceMesh, KnownLayout) {
  // pp=2 dp=2 ep=1 tp=2 on 8 ranks: tp groups are consecutive pairs, pp stages are halves.
  auto mesh = DeviceMesh::Create({/*dp=*/2, /*tp=*/2, /*pp=*/2, /*ep=*/1}, 8);
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(mesh->GroupRanks(MeshGroup::kTp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh->GroupRanks(MeshGroup::kDp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh->GroupRanks(MeshGroup::kPp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(mesh->Coord(6), (MeshCoord{1, 1, 0, 0}));
  // dp=2 ep=2 on 4 ranks: experts split across ep; dense replicas across dp x ep.
  auto moe = DeviceMesh::Create({/*dp=*/2, /*tp=*/1, /*pp=*/1, /*ep=*/2}, 4);
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(moe->GroupRanks(MeshGroup::kEp, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(moe->GroupRanks(MeshGroup::kDp, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(moe->GroupRanks(MeshGroup::kDpEp, 2), (std::vector<int>{0, 1, 2, 3}));
}

TEST(DeviceMesh, InvalidLayoutsNameTheNumbers) {
  auto bad = DeviceMesh::Create({/*dp=*/2, /*tp=*/3, /*pp=*/1, /*ep=*/1}, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "parallel: dp=2 x tp=3 x pp=1 x ep=1 = 6 ranks, but the world size is 4");
  auto zero = DeviceMesh::Create({/*dp=*/1, /*tp=*/0, /*pp=*/1, /*ep=*/1}, 1);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(), "parallel.tp must be >= 1, got 0");
  auto neg = DeviceMesh::Create({/*dp=*/1, /*tp=*/1, /*pp=*/1, /*ep=*/-2}, 1);
  EXPECT_EQ(neg.status().message(), "parallel.ep must be >= 1, got -2");
}

}  // namespace
}  // namespace tessera
