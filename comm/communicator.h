// comm/communicator.h — collectives over one process group, every one asynchronous, every
// wait bounded.
//
// Owns: the Communicator interface (one object per process group per rank), Work (the handle an
// operation returns) and the option struct. Backends (mpi_communicator.cc, fake_communicator.h,
// nccl_communicator.cc) implement the protected Do* hooks; this base validates arguments,
// numbers operations and implements Abort, so every backend fails the same way.
//
// Sequence numbers: every collective (including Split) takes the next number of the group's
// counter, so the k-th collective has the same number on every rank of the group — a mismatch in
// an error message exposes a desync. Send/Recv count separately per peer and direction (the k-th
// Send to peer p has the same number as the k-th Recv from us on p).
//
// Buffers: Tensors are views; they must stay valid and untouched until the Work completes. After
// a kTimeout or kAborted the backend may still write to them (MPI cannot cancel a collective), so
// the caller stops using the buffers and ends the process (AbortJob in comm/mpi.h).
//
// Streams and events (runtime/core/stream.h), for overlapping communication with compute on a
// device: After(event) makes the ops issued next wait, on the device, for work a compute
// backend recorded (their inputs are ready); Work::ready_event() is the point after the op a
// compute stream waits on (runtime/kernels/backend.h Backend::Wait) to read its output without
// blocking the host. Host backends (MPI, fake) run on the host: their events are null, and
// Work::Wait is how to order after them. A Work must still be waited on for its Status.
//
// Thread-safety: issue operations on one Communicator from one thread at a time (collectives
// must be issued in the same order on every rank anyway). Work::Wait/IsCompleted and
// Communicator::Abort may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/core/stream.h"
#include "runtime/core/tensor.h"

namespace tessera {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax };

// How a reduction combines the ranks' contributions.
enum class ReduceOrder : uint8_t {
  // The backend's fastest algorithm; deterministic for a given group size, count and backend,
  // but not necessarily a rank-order sum. MPI: below 256 KiB per rank Open MPI's own algorithm
  // (bf16 and f16 sums round after every pairwise add, so an f16 sum, and with it an avg, is
  // inf once a partial sum passes 65504); from 256 KiB the same gather-to-owner exchange as
  // kRankOrder. NCCL: NCCL's ring/tree order.
  kBackend,
  // Every element is ((x_0 + x_1) + x_2) + ... in rank order, accumulated in fp32, then divided
  // by size() for kAvg; bf16 and f16 round once, at the very end (so an f16 avg whose fp32 sum
  // passes 65504 stays finite, and an f16 sum overflows to inf only if the final value does).
  // Bit-identical on every rank and equal to a serial loop over the contributions, whatever the
  // group size: the bit-reproducible choice.
  // MPI: each rank receives its 1/n chunk from every peer, sums the rows in rank order, then
  // sends the result to everyone (bandwidth-optimal, one scratch row per peer).
  // NCCL: not supported.
  kRankOrder,
};

enum class CommOp : uint8_t {
  kAllReduce, kReduceScatter, kAllGather, kAllToAll, kBroadcast, kSend, kRecv, kBarrier, kSplit,
};

const char* ReduceOpName(ReduceOp op);  // "sum", "avg", "max"
const char* CommOpName(CommOp op);      // "all_reduce", "reduce_scatter", ...

struct CommOptions {
  // Group name used in every error message ("world", "dp", "tp.0"). Default "world".
  std::string name = "world";
  // comm.timeout_s: the longest Work::Wait() (no argument) and Split block. Seconds, > 0.
  // Default 300: long enough for a first NCCL/MPI connection setup on a large job, short
  // enough that a hung peer is reported within minutes.
  double timeout_s = 300.0;

  std::chrono::milliseconds timeout() const;
};

class OpState;  // comm/op_state.h: the completion record shared by Work and the backend

// The handle of one asynchronous operation. Move-only; destroying it does not cancel the op.
class Work {
 public:
  explicit Work(std::shared_ptr<OpState> state);
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  bool IsCompleted() const;
  // Waits at most `timeout`. OK when done; the op's error if it failed; kTimeout (message names
  // group, rank, op and sequence number) if the time passed — the op may still write its
  // output; kAborted if the communicator was aborted.
  Status Wait(std::chrono::milliseconds timeout);
  // Waits at most the communicator's comm.timeout_s.
  Status Wait();
  uint64_t sequence_number() const;
  CommOp op() const;
  // The event after this op on the communicator's device stream (valid while this Work
  // lives): a compute stream that waits on it reads the op's output in order, the host not
  // blocked. Null on host backends and for an op that failed before it was enqueued.
  Event ready_event() const;
  // "group 'dp' rank 1/4 all_reduce #17"
  std::string Describe() const;

 private:
  std::shared_ptr<OpState> state_;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return options_.name; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const CommOptions& options() const { return options_; }
  // Where buffers must live: kCpu for MPI and fake, kCuda for NCCL.
  virtual Device device() const = 0;

  // In place: buf (n) becomes the reduction over all ranks. Reductions accept f32, bf16 and f16
  // (sum/avg/max) and i32 (sum/max); other ops and dtypes fail with kInvalidArgument.
  std::unique_ptr<Work> AllReduce(Tensor& buf, ReduceOp op,
                                  ReduceOrder order = ReduceOrder::kBackend);
  // in (size()*m) -> out (m): rank r gets the reduction of everyone's chunk r.
  std::unique_ptr<Work> ReduceScatter(const Tensor& in, Tensor& out, ReduceOp op,
                                      ReduceOrder order = ReduceOrder::kBackend);
  // in (m) -> out (size()*m), rank r's input at offset r*m.
  std::unique_ptr<Work> AllGather(const Tensor& in, Tensor& out);
  // send_counts[p] elements of `in` (packed in peer order) go to peer p; recv_counts[p] elements
  // from peer p land in `out` (packed in peer order). Counts may differ per peer and be zero;
  // they must agree pairwise across ranks.
  std::unique_ptr<Work> AllToAll(const Tensor& in, Tensor& out,
                                 std::span<const int64_t> send_counts,
                                 std::span<const int64_t> recv_counts);
  // buf on `root` is copied into buf on every other rank.
  std::unique_ptr<Work> Broadcast(Tensor& buf, int root);
  std::unique_ptr<Work> Send(const Tensor& t, int peer);
  std::unique_ptr<Work> Recv(Tensor& t, int peer);
  std::unique_ptr<Work> Barrier();

  // Collective over this group, blocking at most timeout(): ranks passing the same color form a
  // new group, ranked by (key, rank here). `options.name` names the new group.
  Result<std::unique_ptr<Communicator>> Split(int color, int key, const CommOptions& options);

  // Ops issued after this call start only once `e` (recorded by a compute backend on this
  // communicator's device) has completed; the host does not block. Host backends take only the
  // null event (host work is complete when recorded): anything else is a CHECK failure.
  void After(Event e);

  // Fails every pending and future operation with kAborted naming `reason` and wakes their
  // waiters. Idempotent, any thread. The first reason wins.
  void Abort(const Status& reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 protected:
  Communicator(int rank, int size, CommOptions options);

  // Hooks, called with validated arguments and a fresh OpState already registered as pending.
  // A backend completes `state` (OpState::Complete) when the op is done or has failed; it may
  // leave it to Abort if the op never finishes.
  virtual void DoAllReduce(Tensor& buf, ReduceOp op, ReduceOrder order,
                           std::shared_ptr<OpState> state) = 0;
  virtual void DoReduceScatter(const Tensor& in, Tensor& out, ReduceOp op, ReduceOrder order,
                               std::shared_ptr<OpState> state) = 0;
  virtual void DoAllGather(const Tensor& in, Tensor& out, std::shared_ptr<OpState> state) = 0;
  virtual void DoAllToAll(const Tensor& in, Tensor& out, std::vector<int64_t> send_counts,
                          std::vector<int64_t> recv_counts, std::shared_ptr<OpState> state) = 0;
  virtual void DoBroadcast(Tensor& buf, int root, std::shared_ptr<OpState> state) = 0;
  virtual void DoSend(const Tensor& t, int peer, std::shared_ptr<OpState> state) = 0;
  virtual void DoRecv(Tensor& t, int peer, std::shared_ptr<OpState> state) = 0;
  virtual void DoBarrier(std::shared_ptr<OpState> state) = 0;
  // Builds this rank's communicator for the new group. `members` are the parent ranks of the
  // group in new-rank order (this rank is members[new_rank]); `split_seq` is the parent's
  // sequence number of the exchange that agreed on them (equal on all ranks). Device backends
  // get empty `members` and new_rank -1 and agree on membership themselves.
  virtual Result<std::unique_ptr<Communicator>> DoSplit(int color, int key,
                                                        std::vector<int> members, int new_rank,
                                                        uint64_t split_seq,
                                                        const CommOptions& options) = 0;
  // Backend part of After: a device backend makes its stream wait for `e`. Default (host
  // backends): only the null event is valid.
  virtual void DoAfter(Event e);
  // Backend part of Abort (wake a progress thread, ncclCommAbort). Called once, after every
  // pending OpState has been completed with the abort status.
  virtual void OnAbort(const Status& reason) {}
  // Some waiter is blocked in Work::Wait on this group: a progress thread should poll eagerly.
  bool HasWaiters() const { return waiters_->load(std::memory_order_relaxed) > 0; }
  // A registered OpState for an op of this group (used by backends that run internal ops).
  std::shared_ptr<OpState> NewOp(CommOp op, uint64_t seq);
  uint64_t NextCollectiveSeq();

 private:
  std::unique_ptr<Work> Launch(CommOp op, uint64_t seq, const Status& valid);
  std::unique_ptr<Work> Failed(CommOp op, uint64_t seq, const Status& status);
  Status CheckTensor(const Tensor& t, const char* what) const;
  Status CheckReducible(const Tensor& t, ReduceOp op) const;
  Status CheckPeer(int peer) const;

  const int rank_;
  const int size_;
  const CommOptions options_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<std::atomic<int>> waiters_;
  std::atomic<bool> aborted_{false};

  std::mutex mu_;  // guards everything below
  Status abort_status_;
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> send_seq_, recv_seq_;  // per peer
  std::vector<std::weak_ptr<OpState>> pending_;
};

// Waits for `work` (bounded by the group's timeout). The first failure a caller sees is kept
// in `first` and aborts `comm`, so later ops of the group fail at once instead of timing out
// again; later failures leave `first` as it is. For callers that keep going after a failure
// and report it at a checkpoint of their own (the model's tensor / expert parallel regions).
void WaitKeepingFirstFailure(std::unique_ptr<Work> work, Communicator& comm, Status& first);

}  // namespace tessera
