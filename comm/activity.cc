// comm/activity.cc — the process-wide communication counters of comm/activity.h.
//
// Owns: the two counters and the functions communicator.cc calls to update them. Relaxed
// atomics throughout: the values feed a heartbeat (diagnostics), never a decision that needs
// ordering with other memory.
#include "comm/activity.h"

#include <atomic>

#include "comm/activity_internal.h"

namespace tessera {
namespace {

std::atomic<int64_t> g_ops_launched{0};
std::atomic<int> g_waiting{0};

}  // namespace

CommActivity SampleCommActivity() {
  CommActivity a;
  a.ops_launched = g_ops_launched.load(std::memory_order_relaxed);
  a.waiting = g_waiting.load(std::memory_order_relaxed);
  return a;
}

namespace comm_internal {

void CountLaunch() { g_ops_launched.fetch_add(1, std::memory_order_relaxed); }

WaitingGuard::WaitingGuard() { g_waiting.fetch_add(1, std::memory_order_relaxed); }
WaitingGuard::~WaitingGuard() { g_waiting.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace comm_internal
}  // namespace tessera
