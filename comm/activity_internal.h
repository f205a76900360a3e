// comm/activity_internal.h — how comm/communicator.cc updates the counters of comm/activity.h.
//
// Owns: nothing but the hooks; only communicator.cc includes this (and comm_fake_test, which
// reads StalledNsOfThisThread) (backends never count
// on their own: every operation of every backend passes through Communicator's entry points,
// so each is counted exactly once). Thread-safety: relaxed atomics, any thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace tessera::comm_internal {

// One operation launched (collective, Send/Recv, Split; including one that fails validation,
// since it consumes the sequence number its peers use).
void CountLaunch();

// A blocked wait wakes at least this often to look at the clock (OpState::WaitFor).
inline constexpr std::chrono::milliseconds kWaitSlice{5};
// A wakeup later than its slice's end by more than this means the process did not run for that
// long (stopped by SIGSTOP, a frozen VM, starved of a core): ordinary wakeup latency is well
// under a millisecond, so 10 ms is never mistaken for it.
inline constexpr std::chrono::milliseconds kStallThreshold{10};

// The calling thread, inside a wait, did not run for `d` (a late wakeup, see kStallThreshold).
void CountStall(std::chrono::steady_clock::duration d);

// The stalls the calling thread has counted so far, in nanoseconds (tests: a wait's share of
// the total is its lifetime less this growth).
int64_t StalledNsOfThisThread();

// Counts the calling thread as blocked in Work::Wait for its lifetime, and adds that lifetime
// (steady clock) less the stalls the thread counted meanwhile to the wait total when it ends:
// time this process was stopped is its own slowness, not waiting for its peers.
class WaitingGuard {
 public:
  WaitingGuard();
  ~WaitingGuard();
  WaitingGuard(const WaitingGuard&) = delete;
  WaitingGuard& operator=(const WaitingGuard&) = delete;

 private:
  const std::chrono::steady_clock::time_point start_;
  const int64_t stalled_ns_at_start_;
};

}  // namespace tessera::comm_internal
