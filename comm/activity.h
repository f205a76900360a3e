// comm/activity.h — what this process's communication is doing, for its supervisor.
//
// Owns: three process-wide counters, updated by every backend through Communicator: how many
// collective / point-to-point operations this process has launched (in all groups), how many
// threads are blocked in Work::Wait right now, and how long threads have been blocked there in
// all (added when each wait ends). A rank's heartbeat samples them: phase "collective" while a
// wait is blocked, and the launched count as the collective sequence number. Ranks of an SPMD
// job launch the same operations in the same order, so a rank whose count is below its peers'
// did not reach the collective they wait in. The wait total, differenced over a training step,
// splits the step's wall time into waiting for peers and everything else (the straggler signal:
// tools/supervised_rank.cc, runtime/supervisor/failure_detector.h).
// Thread-safety: relaxed atomics; a sample is a consistent-enough snapshot for diagnostics,
// never used for synchronisation.
#pragma once

#include <cstdint>

namespace tessera {

struct CommActivity {
  int64_t ops_launched = 0;  // operations launched by this process since it started
  int waiting = 0;           // threads blocked in Work::Wait now
  // Nanoseconds threads have spent blocked in Work::Wait, summed over every wait that has ended
  // (a wait still blocked is not in it yet; concurrent waits each add their own time). Stretches
  // in which a waiting thread evidently did not run (it woke > 10 ms late: the process was
  // stopped or starved) are left out: a rank stopped inside a collective is slow itself, its
  // peers are the ones waiting.
  int64_t wait_ns = 0;
};

CommActivity SampleCommActivity();

}  // namespace tessera
