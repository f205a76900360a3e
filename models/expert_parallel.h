// models/expert_parallel.h — the token exchange of expert parallelism (parallel.ep): an MoE
// block's routed experts are split over the ep ranks (models/partition.h), and each rank's
// routed token rows travel to the rank that holds their expert and back.
//
//   dispatch   counts first: each rank tells every peer how many of its rows go to each of
//              the peer's experts (one all-to-all of ep x E/ep integers), then the rows
//              themselves (an all-to-all of variable sizes; a peer may get none)
//   return     the experts' outputs go back the same way, reversed
// The backward is the dual: the outputs' gradients are dispatched like the inputs and the
// inputs' gradients returned like the outputs (models/moe.cc).
// Rows arrive grouped by source rank, then by the receiver's local expert (the order the
// sender's plan put them in); models/moe.cc regroups them by local expert, so each expert
// runs one GEMM over all its rows.
// Failures: as tensor_parallel.h — every wait is bounded by the group's comm.timeout_s (a hung
// ep peer is a named timeout); the first failure is kept in status(), aborts the group and
// turns every later exchange into a no-op; the trainer checks status() after each
// micro-batch and ends the job. A measuring pass (set_measuring) exchanges nothing.
// Thread-safety: one thread (the model's driver).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "runtime/core/status.h"

namespace tessera {

class ExpertParallel {
 public:
  // `comm`: the ep group (size >= 2), outliving this object.
  explicit ExpertParallel(Communicator* comm);

  int size() const { return size_; }
  int rank() const { return rank_; }

  // send[p * n + i] -> peer p; recv[p * n + i] <- peer p's send[rank * n + i]. The counts
  // exchange of a dispatch (n = local experts).
  void ExchangeCounts(const int32_t* send, int32_t* recv, int64_t n);
  // Rows of width C: rows_to[p] consecutive rows of `in` (in peer order) go to peer p;
  // rows_from[p] rows from peer p land in `out`, in peer order. Zero counts are fine.
  void ExchangeRows(const float* in, const std::vector<int64_t>& rows_to, float* out,
                    const std::vector<int64_t>& rows_from, int64_t C);

  const Status& status() const { return status_; }
  void set_measuring(bool measuring) { measuring_ = measuring; }
  bool active() const { return status_.ok() && !measuring_; }

 private:
  void Run(std::unique_ptr<Work> work);

  Communicator* comm_;
  int size_, rank_;
  bool measuring_ = false;
  Status status_ = Status::Ok();
};

}  // namespace tessera
