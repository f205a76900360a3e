// runtime/train/grad_sync.h — data-parallel communication helpers of the training step: the
// bucketed gradient all-reduce overlapped with backward (ZeRO 0/1), bounded waits over many
// handles, and small scalar gathers. The per-unit ZeRO collectives live in param_shards.h.
//
// Owns: the bucket bookkeeping and the pack buffers; never the gradients or parameters.
// Bit-reproducibility: every reduction is ReduceOrder::kRankOrder with kSum, i.e. per element
// ((g_0 + g_1) + g_2) + ... in fp32 in rank order — the same additions a single rank makes
// when it accumulates the same micro-batches one after the other (trainer.cc). Scaling by the
// global batch happens before (each rank's loss scale is 1/(accum*dp)), never after.
// Failures: every wait is bounded by the communicator's comm.timeout_s; a failed or timed-out
// op is returned as Status and the caller must end the job (AbortJob): MPI cannot cancel.
// Thread-safety: one driving thread (the trainer's); the backend's progress thread moves data.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"
#include "runtime/kernels/backend.h"

namespace tessera {

// All-reduces (sum, rank order) a flat fp32 buffer in place, in buckets of bucket_elems
// elements cut from the END of the buffer (backward finishes the last parameters first).
// A bucket is launched the moment OnReady has covered all of it, so its reduction overlaps
// the rest of backward.
// With wire = kBF16 or kF16 (mixed_precision.reduce_dtype: low) each bucket is converted
// into a staging buffer of that type (n elements, accounted as kGradients) when it launches,
// reduced there (rank order, fp32 accumulation, one rounding: comm/communicator.h) and
// converted back in Finish.
class BucketedAllReduce {
 public:
  // `backend` (null: the CPU reference) owns the grads' memory: it converts to and from the
  // wire type and provides the staging arena.
  BucketedAllReduce(Communicator* comm, float* grads, int64_t n, int64_t bucket_elems,
                    DType wire = DType::kF32, MemoryTracker* tracker = nullptr,
                    Backend* backend = nullptr);

  // Starts a step: no bucket covered or launched.
  void Begin();
  // grads[begin, end) are final: launches every bucket this completes. Each element must be
  // reported at most once per step (the model's hook reports each range once).
  void OnReady(int64_t begin, int64_t end);
  // Launches whatever was not reported, then waits for every bucket (bounded).
  Status Finish();

  int64_t num_buckets() const { return static_cast<int64_t>(remaining_.size()); }
  // Buckets launched from inside OnReady in the last step (i.e. overlapped with backward).
  int64_t launched_early() const { return launched_early_; }

 private:
  void Launch(int64_t k);
  int64_t BucketBegin(int64_t k) const { return std::max<int64_t>(0, n_ - (k + 1) * bucket_); }
  int64_t BucketEnd(int64_t k) const { return n_ - k * bucket_; }

  Communicator* comm_;
  Backend* backend_;
  float* grads_;
  int64_t n_;
  int64_t bucket_;
  DType wire_;
  Arena staging_arena_{Arena::Measuring(MemoryKind::kGradients)};
  Tensor staging_;  // (n) in wire_, when wire_ != kF32
  std::vector<int64_t> remaining_;  // per bucket: elements not reported yet
  std::vector<std::unique_ptr<Work>> work_;  // per bucket, null until launched
  int64_t launched_early_ = 0;
};

// Waits for every handle, bounded by ONE comm timeout in all: after the first failure (a hung
// peer makes every later op of the group time out too) the rest are only polled, so a job
// with many outstanding ops still fails after comm.timeout_s, not after n x timeout_s.
// Clears `work`. Returns the first failure.
Status WaitAll(std::vector<std::unique_ptr<Work>>& work);

// Every rank's `mine` (same length on all ranks), concatenated in rank order. Doubles travel
// bit for bit (as pairs of int32).
Result<std::vector<double>> AllGatherDoubles(Communicator* comm, const std::vector<double>& mine);

}  // namespace tessera
