// comm/op_state.h — the completion record of one communication operation.
//
// Owns: whether an op is done and with which Status, and the bounded wait on it. Shared (via
// shared_ptr) between the Work the caller holds, the backend that completes it and the
// communicator's pending list that Abort walks. Backends include this; callers use Work.
// Thread-safety: all methods may be called from any thread. Complete() is first-call-wins, so a
// backend finishing and an Abort racing each other leave exactly one outcome.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "comm/communicator.h"
#include "runtime/core/status.h"

namespace tessera {

class OpState {
 public:
  OpState(std::string group, int rank, int size, CommOp op, uint64_t seq,
          std::chrono::milliseconds default_timeout, std::shared_ptr<std::atomic<int>> waiters);
  ~OpState();
  OpState(const OpState&) = delete;
  OpState& operator=(const OpState&) = delete;

  // A device backend's event after the op (Work::ready_event), set once while the op is
  // issued, before its Work reaches the caller; `release(e)` frees it when the last holder of
  // this record (Work, backend) lets go, so the event outlives neither.
  using ReleaseEvent = void (*)(Event e);
  void SetReadyEvent(Event e, ReleaseEvent release);
  Event ready_event() const { return ready_event_; }

  // Records the outcome and wakes every waiter. Later calls are ignored; returns whether this
  // call was the first.
  bool Complete(Status status);
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits at most `timeout`; see Work::Wait.
  Status WaitFor(std::chrono::milliseconds timeout);
  // The outcome; only meaningful once done().
  Status status() const;

  CommOp op() const { return op_; }
  uint64_t seq() const { return seq_; }
  std::chrono::milliseconds default_timeout() const { return default_timeout_; }
  // "group 'dp' rank 1/4 all_reduce #17"
  std::string Describe() const;

 private:
  const std::string group_;
  const int rank_, size_;
  const CommOp op_;
  const uint64_t seq_;
  const std::chrono::milliseconds default_timeout_;
  const std::shared_ptr<std::atomic<int>> waiters_;  // the communicator's count of blocked waiters

  Event ready_event_;
  ReleaseEvent release_event_ = nullptr;

  std::atomic<bool> done_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status status_;
};

}  // namespace tessera
