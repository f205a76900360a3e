// comm/bench.h — bandwidth figures for `tessera bench comm`.
//
// Owns: timing of a Communicator's all-reduce / reduce-scatter / all-to-all and of raw
// MPI_Allreduce / MPI_Alltoallv on the same sizes, reported as algorithm and bus bandwidth
// (NCCL-tests definitions: all-reduce bus = alg x 2(n-1)/n, reduce-scatter and all-to-all bus =
// alg x (n-1)/n). Collective over the communicator;
// every rank returns the same figures (the slowest rank's time per iteration).
// Thread-safety: call from the thread that issues the communicator's ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tessera {

struct CommBenchResult {
  std::string what;           // "all_reduce(backend)", "mpi_allreduce", ...
  int ranks = 0;
  int64_t bytes = 0;          // per rank
  int iters = 0;              // timed iterations (after one warm-up)
  double min_s = 0;           // fastest iteration (max over ranks)
  double median_s = 0;        // median iteration (max over ranks)
  double alg_gbps = 0;        // bytes / median_s / 1e9
  double bus_gbps = 0;        // alg_gbps x the collective's traffic factor
  double best_bus_gbps = 0;   // same from min_s
  std::string ToString() const;  // one line for a report
};

// fp32 all-reduce (sum) of `bytes` per rank, `iters` timed iterations. Host buffers
// (device() == kCpu). Errors (timeouts) come back as the Status.
Result<CommBenchResult> BenchAllReduce(Communicator& comm, int64_t bytes, int iters,
                                       ReduceOrder order = ReduceOrder::kBackend);
// fp32 reduce-scatter (sum): `bytes` is the input size per rank.
Result<CommBenchResult> BenchReduceScatter(Communicator& comm, int64_t bytes, int iters);
// fp32 all-to-all (the MoE token dispatch): `bytes` per rank, in equal blocks for every rank
// (bus = alg x (n-1)/n, NCCL-tests' definition).
Result<CommBenchResult> BenchAllToAll(Communicator& comm, int64_t bytes, int iters);
// Plain blocking MPI_Alltoallv on MPI_COMM_WORLD with the same counts: its reference figure.
Result<CommBenchResult> BenchRawMpiAllToAll(Communicator& comm, int64_t bytes, int iters);
// Plain blocking MPI_Allreduce on MPI_COMM_WORLD with the same buffer: the reference figure.
// Requires an MpiSession; `comm` is only used to agree on timings.
Result<CommBenchResult> BenchRawMpiAllReduce(Communicator& comm, int64_t bytes, int iters);
// The distinct hosts (MPI_Get_processor_name) of the world's ranks, in rank order of first
// appearance: says whether a figure crossed a network. Requires an MpiSession.
Result<std::vector<std::string>> WorldHosts(Communicator& comm);

}  // namespace tessera
