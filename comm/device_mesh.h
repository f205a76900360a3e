// comm/device_mesh.h — the rank grid: world rank <-> (pp, dp, ep, tp) coordinates and the
// ranks of every process group. Pure arithmetic, no communication.
//
// Layout: world ranks fill pp x dp x ep x tp with tp fastest and pp slowest:
//   rank = ((pp_i * dp + dp_i) * ep + ep_i) * tp + tp_i
// so a tp group is a run of consecutive ranks (one node, fastest links) and pipeline stages are
// the coarsest blocks.
// Groups (all ranks that differ only along the named axes, listed in increasing axis order,
// which is also increasing rank order):
//   kTp      varies tp                tensor-parallel collectives
//   kPp      varies pp                pipeline send/recv between stages
//   kEp      varies ep                expert all-to-all (token dispatch)
//   kDp      varies dp                = the expert-data-parallel group: replicas of one expert
//                                     shard (expert-data-parallel groups are carved from dp)
//   kDpEp    varies dp and ep         replicas of the dense (non-expert) parameters: the group
//                                     that reduces dense gradients and partitions ZeRO state
// With ep = 1, kDpEp == kDp.
// Thread-safety: immutable after Create; copyable value.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

// parallel: {dp, tp, pp, ep}. Absent axes are 1; each must be >= 1.
struct ParallelLayout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int ep = 1;
  int product() const { return dp * tp * pp * ep; }
  // "dp=2 tp=2 pp=1 ep=1"
  std::string ToString() const;
};

struct MeshCoord {
  int pp = 0, dp = 0, ep = 0, tp = 0;
  bool operator==(const MeshCoord&) const = default;
};

enum class MeshGroup : uint8_t { kTp, kPp, kEp, kDp, kDpEp };
const char* MeshGroupName(MeshGroup g);  // "tp", "pp", "ep", "dp", "dp_ep"
inline constexpr std::array<MeshGroup, 5> kAllMeshGroups = {
    MeshGroup::kTp, MeshGroup::kPp, MeshGroup::kEp, MeshGroup::kDp, MeshGroup::kDpEp};

class DeviceMesh {
 public:
  // InvalidArgument naming the numbers if an axis is < 1 or the product is not world_size.
  static Result<DeviceMesh> Create(const ParallelLayout& layout, int world_size);

  const ParallelLayout& layout() const { return layout_; }
  int world_size() const { return layout_.product(); }

  MeshCoord Coord(int rank) const;
  int RankOf(const MeshCoord& c) const;
  // The ranks of `rank`'s group of kind g, in increasing order; `rank` is among them.
  std::vector<int> GroupRanks(MeshGroup g, int rank) const;
  int GroupSize(MeshGroup g) const;
  // Position of `rank` inside its group (its rank in the group's communicator).
  int IndexInGroup(MeshGroup g, int rank) const;
  // Which group of kind g holds `rank`: 0 .. world_size/GroupSize(g)-1, equal for exactly the
  // ranks of one group (the color for Communicator::Split).
  int GroupId(MeshGroup g, int rank) const;

 private:
  explicit DeviceMesh(const ParallelLayout& l) : layout_(l) {}
  // Whether axis (0=pp,1=dp,2=ep,3=tp) varies inside groups of kind g.
  static bool Varies(MeshGroup g, int axis);

  ParallelLayout layout_;
};

}  // namespace tessera
