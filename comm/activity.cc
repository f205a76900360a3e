// comm/activity.cc — the process-wide communication counters of comm/activity.h.
//
// Owns: the three counters, the per-thread stall tally, and the functions communicator.cc calls
// to update them. Relaxed
// atomics throughout: the values feed a heartbeat (diagnostics), never a decision that needs
// ordering with other memory.
#include "comm/activity.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "comm/activity_internal.h"

namespace tessera {
namespace {

std::atomic<int64_t> g_ops_launched{0};
std::atomic<int> g_waiting{0};
std::atomic<int64_t> g_wait_ns{0};
// Stalls counted by this thread's waits (only the thread itself touches it).
thread_local int64_t t_stalled_ns = 0;

}  // namespace

CommActivity SampleCommActivity() {
  CommActivity a;
  a.ops_launched = g_ops_launched.load(std::memory_order_relaxed);
  a.waiting = g_waiting.load(std::memory_order_relaxed);
  a.wait_ns = g_wait_ns.load(std::memory_order_relaxed);
  return a;
}

namespace comm_internal {

void CountLaunch() { g_ops_launched.fetch_add(1, std::memory_order_relaxed); }

void CountStall(std::chrono::steady_clock::duration d) {
  t_stalled_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

int64_t StalledNsOfThisThread() { return t_stalled_ns; }

WaitingGuard::WaitingGuard()
    : start_(std::chrono::steady_clock::now()), stalled_ns_at_start_(t_stalled_ns) {
  g_waiting.fetch_add(1, std::memory_order_relaxed);
}
WaitingGuard::~WaitingGuard() {
  const int64_t blocked_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_)
          .count();
  const int64_t stalled_ns = t_stalled_ns - stalled_ns_at_start_;
  g_wait_ns.fetch_add(std::max<int64_t>(0, blocked_ns - stalled_ns), std::memory_order_relaxed);
  g_waiting.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace comm_internal
}  // namespace tessera
