// runtime/train/world.cc — MPI setup on demand, the world-size check, process groups.
#include "runtime/train/world.h"

#include <algorithm>
#include <string>

#include "comm/device_mesh.h"

namespace tessera {
Status CheckWorldSize(const Config& config, const LauncherEnv& launcher) {
  const ParallelConfig& p = config.parallel;
  if (p.world_size() == launcher.size) return Status::Ok();
  std::string how = launcher.under_launcher
                        ? "mpirun started " + std::to_string(launcher.size) + " rank" +
                              (launcher.size == 1 ? "" : "s")
                        : "this is a single process (not started by mpirun)";
  return InvalidArgument(config.path + ": parallel: dp=" + std::to_string(p.dp) +
                         " x tp=" + std::to_string(p.tp) + " x pp=" + std::to_string(p.pp) +
                         " x ep=" + std::to_string(p.ep) + " needs " +
                         std::to_string(p.world_size()) + " ranks, but " + how + " (run it as " +
                         "`mpirun -np " + std::to_string(p.world_size()) +
                         " tessera train ...` or set parallel.dp=" +
                         std::to_string(launcher.size / std::max(1, p.tp * p.pp * p.ep)) +
                         ")");
}

Result<std::unique_ptr<World>> World::Create(const Config& config) {
  const LauncherEnv launcher = ReadLauncherEnv();
  RETURN_IF_ERROR(CheckWorldSize(config, launcher));
  std::unique_ptr<World> w(new World());
  if (!launcher.under_launcher && config.parallel.world_size() == 1) return w;  // no MPI at all

  ASSIGN_OR_RETURN(w->session_, MpiSession::Init(nullptr, nullptr));
  w->rank_ = w->session_->world_rank();
  w->size_ = w->session_->world_size();
  if (w->size_ != config.parallel.world_size()) {  // the launcher variables lied
    LauncherEnv actual{true, w->rank_, w->size_};
    return CheckWorldSize(config, actual);
  }
  CommOptions options;
  options.name = "world";
  options.timeout_s = config.comm.timeout_s;
  ASSIGN_OR_RETURN(w->world_, w->session_->World(options));
  ParallelLayout layout;
  layout.dp = config.parallel.dp;
  layout.tp = config.parallel.tp;
  layout.pp = config.parallel.pp;
  layout.ep = config.parallel.ep;
  ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(layout, w->size_));
  ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Build(*w->world_, mesh));
  w->groups_.emplace(std::move(groups));
  return w;
}

World::~World() {
  groups_.reset();
  world_.reset();
  session_.reset();
}

Communicator* World::dense_dp() const {
  return groups_ ? &groups_->Get(MeshGroup::kDpEp) : nullptr;
}

Communicator* World::ep() const { return groups_ ? &groups_->Get(MeshGroup::kEp) : nullptr; }

Communicator* World::expert_dp() const {
  return groups_ ? &groups_->Get(MeshGroup::kDp) : nullptr;
}

Communicator* World::tp() const { return groups_ ? &groups_->Get(MeshGroup::kTp) : nullptr; }

Communicator* World::pp() const { return groups_ ? &groups_->Get(MeshGroup::kPp) : nullptr; }

}  // namespace tessera
