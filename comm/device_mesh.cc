// comm/device_mesh.cc — rank grid arithmetic; see device_mesh.h.
#include "comm/device_mesh.h"

#include "runtime/core/check.h"

namespace tessera {
namespace {

// Axes in layout order, slowest first: pp, dp, ep, tp.
std::array<int, 4> Sizes(const ParallelLayout& l) { return {l.pp, l.dp, l.ep, l.tp}; }
std::array<int, 4> Coords(const MeshCoord& c) { return {c.pp, c.dp, c.ep, c.tp}; }

}  // namespace

std::string ParallelLayout::ToString() const {
  return "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
         " ep=" + std::to_string(ep);
}

const char* MeshGroupName(MeshGroup g) {
  switch (g) {
    case MeshGroup::kTp: return "tp";
    case MeshGroup::kPp: return "pp";
    case MeshGroup::kEp: return "ep";
    case MeshGroup::kDp: return "dp";
    case MeshGroup::kDpEp: return "dp_ep";
  }
  return "?";
}

Result<DeviceMesh> DeviceMesh::Create(const ParallelLayout& layout, int world_size) {
  const std::pair<const char*, int> axes[] = {
      {"dp", layout.dp}, {"tp", layout.tp}, {"pp", layout.pp}, {"ep", layout.ep}};
  for (auto [name, v] : axes) {
    if (v < 1) {
      return InvalidArgument("parallel." + std::string(name) + " must be >= 1, got " +
                             std::to_string(v));
    }
  }
  if (world_size < 1) return InvalidArgument("world size must be >= 1, got " + std::to_string(world_size));
  const int64_t product = static_cast<int64_t>(layout.dp) * layout.tp * layout.pp * layout.ep;
  if (product != world_size) {
    return InvalidArgument("parallel: dp=" + std::to_string(layout.dp) + " x tp=" +
                           std::to_string(layout.tp) + " x pp=" + std::to_string(layout.pp) +
                           " x ep=" + std::to_string(layout.ep) + " = " + std::to_string(product) +
                           " ranks, but the world size is " + std::to_string(world_size));
  }
  return DeviceMesh(layout);
}

bool DeviceMesh::Varies(MeshGroup g, int axis) {
  switch (g) {
    case MeshGroup::kPp: return axis == 0;
    case MeshGroup::kDp: return axis == 1;
    case MeshGroup::kEp: return axis == 2;
    case MeshGroup::kTp: return axis == 3;
    case MeshGroup::kDpEp: return axis == 1 || axis == 2;
  }
  return false;
}

MeshCoord DeviceMesh::Coord(int rank) const {
  TESSERA_CHECK(rank >= 0 && rank < world_size());
  MeshCoord c;
  c.tp = rank % layout_.tp;
  rank /= layout_.tp;
  c.ep = rank % layout_.ep;
  rank /= layout_.ep;
  c.dp = rank % layout_.dp;
  c.pp = rank / layout_.dp;
  return c;
}

int DeviceMesh::RankOf(const MeshCoord& c) const {
  TESSERA_CHECK(c.pp >= 0 && c.pp < layout_.pp && c.dp >= 0 && c.dp < layout_.dp && c.ep >= 0 &&
                c.ep < layout_.ep && c.tp >= 0 && c.tp < layout_.tp);
  return ((c.pp * layout_.dp + c.dp) * layout_.ep + c.ep) * layout_.tp + c.tp;
}

int DeviceMesh::GroupSize(MeshGroup g) const {
  auto sizes = Sizes(layout_);
  int n = 1;
  for (int a = 0; a < 4; ++a) {
    if (Varies(g, a)) n *= sizes[a];
  }
  return n;
}

std::vector<int> DeviceMesh::GroupRanks(MeshGroup g, int rank) const {
  const auto sizes = Sizes(layout_);
  const auto fixed = Coords(Coord(rank));
  // Enumerate the varying axes as a mixed-radix counter, slowest axis first, so ranks come out
  // in increasing order.
  std::vector<int> ranks;
  std::array<int, 4> c = fixed;
  for (int a = 0; a < 4; ++a) {
    if (Varies(g, a)) c[a] = 0;
  }
  while (true) {
    ranks.push_back(RankOf({c[0], c[1], c[2], c[3]}));
    int a = 3;
    for (; a >= 0; --a) {
      if (!Varies(g, a)) continue;
      if (++c[a] < sizes[a]) break;
      c[a] = 0;
    }
    if (a < 0) break;
  }
  return ranks;
}

int DeviceMesh::IndexInGroup(MeshGroup g, int rank) const {
  const auto sizes = Sizes(layout_);
  const auto c = Coords(Coord(rank));
  int index = 0;
  for (int a = 0; a < 4; ++a) {
    if (Varies(g, a)) index = index * sizes[a] + c[a];
  }
  return index;
}

int DeviceMesh::GroupId(MeshGroup g, int rank) const {
  const auto sizes = Sizes(layout_);
  const auto c = Coords(Coord(rank));
  int id = 0;
  for (int a = 0; a < 4; ++a) {
    if (!Varies(g, a)) id = id * sizes[a] + c[a];
  }
  return id;
}

}  // namespace tessera
