// comm/process_groups.h — this rank's communicators for every group of the device mesh.
//
// Owns: one Communicator per MeshGroup, each a Split of the world communicator (color =
// DeviceMesh::GroupId, key = IndexInGroup, so a group's ranks are numbered in mesh order).
// Named "<kind>.<group id>" ("dp.1", "tp.0") so a timeout says which group hung.
// Thread-safety: build once on the main thread; then per communicator.h.
#pragma once

#include <array>
#include <memory>

#include "comm/communicator.h"
#include "comm/device_mesh.h"

namespace tessera {

class ProcessGroups {
 public:
  // Collective over `world` (every rank calls it with the same mesh); each split is bounded by
  // world.timeout(). InvalidArgument if the mesh does not match world.size().
  static Result<ProcessGroups> Build(Communicator& world, const DeviceMesh& mesh);

  Communicator& Get(MeshGroup g) const { return *groups_[static_cast<size_t>(g)]; }
  const DeviceMesh& mesh() const { return mesh_; }

 private:
  explicit ProcessGroups(const DeviceMesh& mesh) : mesh_(mesh) {}
  DeviceMesh mesh_;
  std::array<std::unique_ptr<Communicator>, kAllMeshGroups.size()> groups_;
};

}  // namespace tessera
