// runtime/chaos/scenario.cc — see scenario.h.
#include "runtime/chaos/scenario.h"

namespace tessera {
namespace {

struct KindName {
  FaultKind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {
    {FaultKind::kKillRank, "kill_rank"},
    {FaultKind::kStopRank, "stop_rank"},
    {FaultKind::kSlowRank, "slow_rank"},
    {FaultKind::kKillInCheckpoint, "kill_in_checkpoint"},
    {FaultKind::kCorruptShard, "corrupt_shard"},
    {FaultKind::kTruncateShard, "truncate_shard"},
    {FaultKind::kIoError, "io_error"},
    {FaultKind::kKillHost, "kill_host"},
    {FaultKind::kPreempt, "preempt"},
};

}  // namespace

const char* FaultKindName(FaultKind kind) {
  for (const KindName& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

Result<FaultKind> ParseFaultKind(const std::string& name) {
  std::string all;
  for (const KindName& k : kKindNames) {
    if (name == k.name) return k.kind;
    all += (all.empty() ? "" : " | ") + std::string(k.name);
  }
  return InvalidArgument("unknown fault kind \"" + name + "\" (expected " + all + ")");
}

}  // namespace tessera
