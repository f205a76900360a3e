// runtime/chaos/audit.h — the two checks of a chaos verdict that read files: are the final
// weights the reference's, bit for bit; and did every checkpoint the run committed survive.
//
// Owns: CompareWeightFiles and AuditCheckpoints. Both only read.
// Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "runtime/core/status.h"

namespace tessera {

struct WeightComparison {
  bool identical = false;
  std::string detail;  // "bit-identical (1.7 MiB)" / "DIFFERENT: 1234 of 1780000 bytes differ ..."
};
// Byte comparison of two safetensors files (the trainer writes them deterministically: same
// header, same order). kNotFound / kIoError when either cannot be read.
Result<WeightComparison> CompareWeightFiles(const std::string& reference, const std::string& candidate);

struct CheckpointAudit {
  int64_t committed = 0;  // checkpoints the catalog (or the disk) knows to have committed
  int64_t lost = 0;
  std::string detail;     // what was lost and why, or a summary when nothing was
};
// Every checkpoint the catalog under `root` records as committed must still be on disk and
// verify (every byte against its CRC); one recorded as deleted must have been deleted by
// retention; one recorded (or set aside) as corrupt must be among `damaged_steps` (the ones
// the scenario damaged on purpose). Committed directories the catalog does not know are
// verified too. Opens the catalog read-only (the run must be over).
Result<CheckpointAudit> AuditCheckpoints(const std::string& root, const std::set<int64_t>& damaged_steps);

}  // namespace tessera
