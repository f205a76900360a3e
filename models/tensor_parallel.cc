// models/tensor_parallel.cc — the tp communication regions of tensor_parallel.h over a
// Communicator: every collective is waited for at once (bounded by comm.timeout_s) because
// the next kernel needs its result; rank-order sums keep replicas bit-identical.
#include "models/tensor_parallel.h"

#include <cstring>
#include <memory>

#include "runtime/core/check.h"

namespace tessera {

TensorParallel::TensorParallel(Communicator* comm, bool sequence_parallel)
    : comm_(comm), size_(comm->size()), rank_(comm->rank()), sp_(sequence_parallel) {
  TESSERA_CHECK(size_ >= 2);
}

void TensorParallel::Run(std::unique_ptr<Work> work) {
  WaitKeepingFirstFailure(std::move(work), *comm_, status_);
}

const float* TensorParallel::EnterForward(const float* x_local, float* full_buf, int64_t N,
                                          int64_t C) {
  if (!sp_) return x_local;
  if (!active()) return full_buf;
  const int64_t shard = LocalRows(N) * C;
  Tensor in(const_cast<float*>(x_local), DType::kF32, {shard});
  Tensor out(full_buf, DType::kF32, {N * C});
  Run(comm_->AllGather(in, out));
  return full_buf;
}

void TensorParallel::EnterBackward(float* d_full, float* d_local, int64_t N, int64_t C) {
  if (!active()) return;
  if (sp_) {
    Tensor in(d_full, DType::kF32, {N * C});
    Tensor out(d_local, DType::kF32, {LocalRows(N) * C});
    Run(comm_->ReduceScatter(in, out, ReduceOp::kSum, ReduceOrder::kRankOrder));
    return;
  }
  SumInPlace(d_full, N * C);
  if (d_local != d_full) std::memcpy(d_local, d_full, N * C * sizeof(float));
}

void TensorParallel::ExitForward(float* partial, float* out, int64_t N, int64_t C) {
  // Same collective as the Enter backward: a sum of partial (N, C) contributions.
  EnterBackward(partial, out, N, C);
}

const float* TensorParallel::ExitBackward(const float* d_out, float* full_buf, int64_t N,
                                          int64_t C) {
  return EnterForward(d_out, full_buf, N, C);  // the same gather of row shards
}

void TensorParallel::SumInPlace(float* x, int64_t n) {
  if (!active() || n == 0) return;
  Tensor t(x, DType::kF32, {n});
  Run(comm_->AllReduce(t, ReduceOp::kSum, ReduceOrder::kRankOrder));
}

void TensorParallel::MaxInPlace(float* x, int64_t n) {
  if (!active() || n == 0) return;
  Tensor t(x, DType::kF32, {n});
  Run(comm_->AllReduce(t, ReduceOp::kMax, ReduceOrder::kRankOrder));
}

void TensorParallel::Combine(void* ctx, float* values, int64_t n, bool max) {
  auto* tp = static_cast<TensorParallel*>(ctx);
  if (max) {
    tp->MaxInPlace(values, n);
  } else {
    tp->SumInPlace(values, n);
  }
}

}  // namespace tessera
