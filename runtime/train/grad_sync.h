// runtime/train/grad_sync.h — data-parallel communication of the training step: bucketed
// gradient all-reduce overlapped with backward, the ZeRO-2 reduce-scatter into partitions,
// the partitioned gradient norm, the ZeRO parameter all-gather, and small scalar gathers.
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
#include "optimizer/zero.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"

namespace tessera {

// All-reduces (sum, rank order) a flat fp32 buffer in place, in buckets of bucket_elems
// elements cut from the END of the buffer (backward finishes the last parameters first).
// A bucket is launched the moment OnReady has covered all of it, so its reduction overlaps
// the rest of backward.
class BucketedAllReduce {
 public:
  BucketedAllReduce(Communicator* comm, float* grads, int64_t n, int64_t bucket_elems);

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
  float* grads_;
  int64_t n_;
  int64_t bucket_;
  std::vector<int64_t> remaining_;  // per bucket: elements not reported yet
  std::vector<std::unique_ptr<Work>> work_;  // per bucket, null until launched
  int64_t launched_early_ = 0;
};

// ZeRO-2: out (P = part.padded_size() elements) = this rank's partition of the rank-order sum
// of every rank's grads (n = part.num_params() elements; elements past n count as zero).
// Packs dp pieces of piece_elems per rank into one of two scratch buffers (a
// ReduceScatter needs its input contiguous by destination rank) so that the extra memory is
// bounded by 2 * dp * piece_elems floats whatever the model size; accounted as kWorkspace.
class PartitionReduceScatter {
 public:
  PartitionReduceScatter(Communicator* comm, const Partitioning& part, int64_t piece_elems,
                         MemoryTracker* tracker);
  Status Run(const float* grads, float* out);

 private:
  Communicator* comm_;
  Partitioning part_;
  int64_t piece_;
  Arena scratch_;
  Tensor pack_[2];  // (dp * piece)
};

// The sum of squares of the full (virtual) gradient buffer when each rank holds only its
// partition `part_grads` (P elements), bit-identical to SumOfSquares over the whole buffer on
// one rank: part.padded_size() is a multiple of kNormBlock, so each rank computes exactly the
// per-block partials one rank would, and every rank adds all partials in block order.
Result<double> PartitionedSumOfSquares(Communicator* comm, const Partitioning& part,
                                       const float* part_grads);

// ZeRO-1/2 parameter all-gather, in place: every rank's real partition of params (the full
// flat buffer) is broadcast from its owner. No staging buffer; ranks with an all-padding
// partition send nothing.
Status GatherPartitions(Communicator* comm, const Partitioning& part, float* params);

// Every rank's `mine` (same length on all ranks), concatenated in rank order. Doubles travel
// bit for bit (as pairs of int32).
Result<std::vector<double>> AllGatherDoubles(Communicator* comm, const std::vector<double>& mine);

}  // namespace tessera
