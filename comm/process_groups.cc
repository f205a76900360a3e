// comm/process_groups.cc — see process_groups.h.
#include "comm/process_groups.h"

namespace tessera {

Result<ProcessGroups> ProcessGroups::Build(Communicator& world, const DeviceMesh& mesh) {
  if (mesh.world_size() != world.size()) {
    return InvalidArgument("parallel: " + mesh.layout().ToString() + " needs " +
                           std::to_string(mesh.world_size()) + " ranks, but group '" +
                           world.name() + "' has " + std::to_string(world.size()));
  }
  ProcessGroups groups(mesh);
  for (MeshGroup g : kAllMeshGroups) {
    CommOptions options = world.options();
    const int id = mesh.GroupId(g, world.rank());
    options.name = std::string(MeshGroupName(g)) + "." + std::to_string(id);
    ASSIGN_OR_RETURN(auto comm, world.Split(id, mesh.IndexInGroup(g, world.rank()), options));
    groups.groups_[static_cast<size_t>(g)] = std::move(comm);
  }
  return groups;
}

}  // namespace tessera
