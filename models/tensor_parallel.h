// models/tensor_parallel.h — the communication regions of a tensor-parallel model (Megatron's
// "mappings"), each with its forward and its backward dual stated and implemented together.
//
//   region                       forward                    backward (its dual)
//   Enter (into a column-        copy (nothing)             all-reduce the input gradient
//   parallel layer)              SP: all-gather rows        SP: reduce-scatter rows
//   Exit  (out of a row-         all-reduce the partial     copy (nothing)
//   parallel layer / the vocab   outputs
//   embedding)                   SP: reduce-scatter rows    SP: all-gather rows
// "Rows" are tokens of the flattened (B*T, C) micro-batch: under sequence parallelism
// (parallel.sequence_parallel) every rank holds rows [rank * N/tp, (rank+1) * N/tp) of the
// residual stream, so norms, biases, residual adds and dropout-free elementwise work run on
// 1/tp of the tokens and the all-reduces become reduce-scatter + all-gather (the same bytes).
// Plus the small reductions layers need: the vocab-parallel softmax (max and sum) and, under
// SP, the sum of gradients each rank computed from its own rows only (norm weights, biases).
//
// Every reduction is a rank-order fp32 sum (ReduceOrder::kRankOrder), so all tp ranks get the
// same bits and replicated parameters stay identical without ever being synchronised.
// Failures: the first failed or timed-out collective is kept in status(), aborts the group
// (every later wait returns at once) and turns every later call into a no-op (as a measuring
// pass does, set_measuring); the model's
// results are then garbage and the trainer, which checks status() after each micro-batch,
// ends the job (MPI cannot cancel; AbortJob).
// Thread-safety: one thread (the model's driver).
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "runtime/core/status.h"

namespace tessera {

class TensorParallel {
 public:
  // `comm`: the tp group (size >= 2), outliving this object.
  TensorParallel(Communicator* comm, bool sequence_parallel);

  int size() const { return size_; }
  int rank() const { return rank_; }
  bool sequence_parallel() const { return sp_; }
  // Rows of the residual stream this rank holds for a micro-batch of N tokens: N / tp under
  // SP (N must divide; Transformer::Create checks), else N.
  int64_t LocalRows(int64_t N) const { return sp_ ? N / size_ : N; }
  int64_t RowBegin(int64_t N) const { return sp_ ? rank_ * (N / size_) : 0; }

  // Enter, forward: x_local (LocalRows(N), C) -> x_full (N, C). Without SP x_full is x_local
  // (returned as is; `full_buf` unused); under SP it is gathered into full_buf.
  const float* EnterForward(const float* x_local, float* full_buf, int64_t N, int64_t C);
  // Enter, backward: d_full (N, C) holds this rank's partial gradient of the layer input;
  // d_local (LocalRows(N), C) gets the sum over ranks (all-reduce in place into d_full then
  // copied, or SP: reduce-scatter). d_local may equal d_full without SP.
  void EnterBackward(float* d_full, float* d_local, int64_t N, int64_t C);
  // Exit, forward: partial (N, C) outputs -> out (LocalRows(N), C) summed over ranks (all-
  // reduce in place, then copied if out != partial; SP: reduce-scatter).
  void ExitForward(float* partial, float* out, int64_t N, int64_t C);
  // Exit, backward: d_out (LocalRows(N), C) -> the full (N, C) gradient every rank's partial
  // output received. Without SP that is d_out itself (returned); SP gathers into full_buf.
  const float* ExitBackward(const float* d_out, float* full_buf, int64_t N, int64_t C);

  // In place over the tp group: sums (rank order) or maxima of n floats.
  void SumInPlace(float* x, int64_t n);
  void MaxInPlace(float* x, int64_t n);
  // For cpu::VocabParallelClassifier's combine (ctx = this).
  static void Combine(void* ctx, float* values, int64_t n, bool max);

  const Status& status() const { return status_; }

  // A measuring pass (runtime/kernels/measuring_backend.h) runs the model with null buffers:
  // while set, every region and reduction returns at once, communicating nothing (the
  // regions still return the buffer a real pass would use).
  void set_measuring(bool measuring) { measuring_ = measuring; }

 private:
  // Collectives run: no failure so far and not a measuring pass.
  bool active() const { return status_.ok() && !measuring_; }
  void Run(std::unique_ptr<Work> work);

  Communicator* comm_;
  int size_, rank_;
  bool sp_;
  bool measuring_ = false;
  Status status_ = Status::Ok();
};

}  // namespace tessera
