// comm/activity.h — what this process's communication is doing, for its supervisor.
//
// Owns: two process-wide counters, updated by every backend through Communicator: how many
// collective / point-to-point operations this process has launched (in all groups), and how
// many threads are blocked in Work::Wait right now. A rank's heartbeat samples them: phase
// "collective" while a wait is blocked, and the launched count as the collective sequence
// number. Ranks of an SPMD job launch the same operations in the same order, so a rank whose
// count is below its peers' did not reach the collective they wait in.
// Thread-safety: relaxed atomics; a sample is a consistent-enough snapshot for diagnostics,
// never used for synchronisation.
#pragma once

#include <cstdint>

namespace tessera {

struct CommActivity {
  int64_t ops_launched = 0;  // operations launched by this process since it started
  int waiting = 0;           // threads blocked in Work::Wait now
};

CommActivity SampleCommActivity();

}  // namespace tessera
