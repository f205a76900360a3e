// models/expert_parallel.cc — the ep token exchange (expert_parallel.h).
#include "models/expert_parallel.h"

#include <algorithm>
#include <utility>

#include "runtime/core/check.h"

namespace tessera {

ExpertParallel::ExpertParallel(Communicator* comm)
    : comm_(comm), size_(comm->size()), rank_(comm->rank()) {
  TESSERA_CHECK(size_ >= 2);
}

void ExpertParallel::Run(std::unique_ptr<Work> work) {
  WaitKeepingFirstFailure(std::move(work), *comm_, status_);
}

void ExpertParallel::ExchangeCounts(const int32_t* send, int32_t* recv, int64_t n) {
  if (!active()) return;
  const std::vector<int64_t> counts(static_cast<size_t>(size_), n);
  Tensor in(const_cast<int32_t*>(send), DType::kI32, {size_ * n});
  Tensor out(recv, DType::kI32, {size_ * n});
  Run(comm_->AllToAll(in, out, counts, counts));
}

void ExpertParallel::ExchangeRows(const float* in, const std::vector<int64_t>& rows_to,
                                  float* out, const std::vector<int64_t>& rows_from, int64_t C) {
  if (!active()) return;
  std::vector<int64_t> send(rows_to.size()), recv(rows_from.size());
  int64_t n_in = 0, n_out = 0;
  for (size_t p = 0; p < send.size(); ++p) n_in += send[p] = rows_to[p] * C;
  for (size_t p = 0; p < recv.size(); ++p) n_out += recv[p] = rows_from[p] * C;
  // A rank with nothing to send or receive still joins (empty tensors), so no peer waits for it.
  Tensor tin(const_cast<float*>(in), DType::kF32, {n_in});
  Tensor tout(out, DType::kF32, {n_out});
  Run(comm_->AllToAll(tin, tout, send, recv));
}

}  // namespace tessera
