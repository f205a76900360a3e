// comm/activity_internal.h — how comm/communicator.cc updates the counters of comm/activity.h.
//
// Owns: nothing but the two hooks; only communicator.cc includes this (backends never count
// on their own: every operation of every backend passes through Communicator's entry points,
// so each is counted exactly once). Thread-safety: relaxed atomics, any thread.
#pragma once

namespace tessera::comm_internal {

// One operation launched (collective, Send/Recv, Split; including one that fails validation,
// since it consumes the sequence number its peers use).
void CountLaunch();

// Counts the calling thread as blocked in Work::Wait for its lifetime.
class WaitingGuard {
 public:
  WaitingGuard();
  ~WaitingGuard();
  WaitingGuard(const WaitingGuard&) = delete;
  WaitingGuard& operator=(const WaitingGuard&) = delete;
};

}  // namespace tessera::comm_internal
