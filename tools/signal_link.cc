// tools/signal_link.cc — SignalLink (contract in signal_link.h).
#include "tools/signal_link.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace tessera {
namespace {

std::atomic<int> g_stop_signal{0};    // the first SIGTERM/SIGINT, 0 = none
std::atomic<int> g_checkpoints{0};    // SIGUSR1s not yet taken
std::atomic<int> g_last_request{0};   // the latest signal that asked for anything
static_assert(std::atomic<int>::is_always_lock_free, "handlers need lock-free atomics");

struct sigaction g_previous[3];
constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGUSR1};

void OnSignal(int signo) {
  if (signo == SIGUSR1) {
    g_checkpoints.fetch_add(1, std::memory_order_relaxed);
    g_last_request.store(signo, std::memory_order_relaxed);
    return;
  }
  int none = 0;
  if (!g_stop_signal.compare_exchange_strong(none, signo, std::memory_order_relaxed)) {
    // The second stop: at once, by the signal's default action (async-signal-safe calls only).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signo, &dfl, nullptr);
    raise(signo);
    return;
  }
  g_last_request.store(signo, std::memory_order_relaxed);
}

const char* SignalName(int signo) {
  switch (signo) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
  }
  return "another rank's signal";
}

}  // namespace

std::unique_ptr<SignalLink> SignalLink::Install() {
  g_stop_signal.store(0);
  g_checkpoints.store(0);
  g_last_request.store(0);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads, writes and waits go on; the flag is read at a boundary
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &g_previous[i]);
  return std::unique_ptr<SignalLink>(new SignalLink());
}

SignalLink::~SignalLink() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

bool SignalLink::TakeCheckpointRequest() {
  return g_checkpoints.exchange(0, std::memory_order_relaxed) > 0;
}

bool SignalLink::StopRequested() { return g_stop_signal.load(std::memory_order_relaxed) != 0; }

std::string SignalLink::RequestSource() const {
  const int stop = g_stop_signal.load(std::memory_order_relaxed);
  return SignalName(stop != 0 ? stop : g_last_request.load(std::memory_order_relaxed));
}

}  // namespace tessera
