// comm/bench.cc — see bench.h.
#include "comm/bench.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <functional>
#include <vector>

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// Times `op` (one warm-up + iters), then takes each iteration's maximum over the ranks, since a
// collective is as slow as its slowest rank.
Result<CommBenchResult> Measure(Communicator& comm, const std::string& what, int64_t bytes,
                                int iters, double bus_factor,
                                const std::function<Status()>& op) {
  if (iters < 1) return InvalidArgument("bench iterations must be >= 1");
  RETURN_IF_ERROR(op());
  RETURN_IF_ERROR(comm.Barrier()->Wait());
  std::vector<float> times(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    RETURN_IF_ERROR(op());
    times[i] = std::chrono::duration<float>(Clock::now() - t0).count();
  }
  Tensor t(times.data(), DType::kF32, {iters});
  RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kMax)->Wait());
  std::sort(times.begin(), times.end());
  CommBenchResult r;
  r.what = what;
  r.ranks = comm.size();
  r.bytes = bytes;
  r.iters = iters;
  r.min_s = times.front();
  r.median_s = times[times.size() / 2];
  r.alg_gbps = static_cast<double>(bytes) / r.median_s / 1e9;
  r.bus_gbps = r.alg_gbps * bus_factor;
  r.best_bus_gbps = static_cast<double>(bytes) / r.min_s / 1e9 * bus_factor;
  return r;
}

}  // namespace

std::string CommBenchResult::ToString() const {
  char line[256];
  std::snprintf(line, sizeof(line),
                "%-22s ranks=%d bytes=%lld iters=%d  median %.3f ms  min %.3f ms  alg %.2f GB/s  "
                "bus %.2f GB/s (best %.2f)",
                what.c_str(), ranks, static_cast<long long>(bytes), iters, median_s * 1e3,
                min_s * 1e3, alg_gbps, bus_gbps, best_bus_gbps);
  return line;
}

Result<CommBenchResult> BenchAllReduce(Communicator& comm, int64_t bytes, int iters,
                                       ReduceOrder order) {
  std::vector<float> buf(static_cast<size_t>(bytes / 4), 1.0f);
  Tensor t(buf.data(), DType::kF32, {static_cast<int64_t>(buf.size())});
  const int n = comm.size();
  const std::string what = order == ReduceOrder::kBackend ? "all_reduce(backend)" : "all_reduce(rank_order)";
  return Measure(comm, what, bytes, iters, 2.0 * (n - 1) / n,
                 [&] { return comm.AllReduce(t, ReduceOp::kSum, order)->Wait(); });
}

Result<CommBenchResult> BenchReduceScatter(Communicator& comm, int64_t bytes, int iters) {
  const int n = comm.size();
  const int64_t m = bytes / 4 / n;
  std::vector<float> in(static_cast<size_t>(m * n), 1.0f), out(static_cast<size_t>(m));
  Tensor tin(in.data(), DType::kF32, {m * n});
  Tensor tout(out.data(), DType::kF32, {m});
  return Measure(comm, "reduce_scatter(backend)", m * n * 4, iters, 1.0 * (n - 1) / n,
                 [&] { return comm.ReduceScatter(tin, tout, ReduceOp::kSum)->Wait(); });
}

Result<CommBenchResult> BenchAllToAll(Communicator& comm, int64_t bytes, int iters) {
  const int n = comm.size();
  const int64_t block = bytes / 4 / n;
  std::vector<float> in(static_cast<size_t>(block * n), 1.0f), out(in.size());
  Tensor tin(in.data(), DType::kF32, {block * n});
  Tensor tout(out.data(), DType::kF32, {block * n});
  const std::vector<int64_t> counts(static_cast<size_t>(n), block);
  return Measure(comm, "all_to_all(backend)", block * n * 4, iters, 1.0 * (n - 1) / n,
                 [&] { return comm.AllToAll(tin, tout, counts, counts)->Wait(); });
}

namespace {

// The world communicator is the only one raw MPI calls can be compared with.
Status CheckRawMpi(Communicator& comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return FailedPrecondition("raw MPI benchmark needs an MpiSession");
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != comm.size()) {
    return InvalidArgument("raw MPI benchmark runs on the world; pass the world communicator");
  }
  return Status::Ok();
}

}  // namespace

Result<CommBenchResult> BenchRawMpiAllToAll(Communicator& comm, int64_t bytes, int iters) {
  RETURN_IF_ERROR(CheckRawMpi(comm));
  const int n = comm.size();
  const int block = static_cast<int>(bytes / 4 / n);
  std::vector<float> in(static_cast<size_t>(block) * n, 1.0f), out(in.size());
  std::vector<int> counts(static_cast<size_t>(n), block), displs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) displs[static_cast<size_t>(r)] = r * block;
  return Measure(comm, "mpi_alltoallv(raw)", static_cast<int64_t>(block) * n * 4, iters,
                 1.0 * (n - 1) / n, [&] {
    int rc = MPI_Alltoallv(in.data(), counts.data(), displs.data(), MPI_FLOAT, out.data(),
                           counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? Status::Ok() : Internal("MPI_Alltoallv failed");
  });
}

Result<CommBenchResult> BenchRawMpiAllReduce(Communicator& comm, int64_t bytes, int iters) {
  RETURN_IF_ERROR(CheckRawMpi(comm));
  std::vector<float> buf(static_cast<size_t>(bytes / 4), 1.0f);
  const int n = comm.size();
  return Measure(comm, "mpi_allreduce(raw)", bytes, iters, 2.0 * (n - 1) / n, [&] {
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT,
                           MPI_SUM, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? Status::Ok() : Internal("MPI_Allreduce failed");
  });
}

Result<std::vector<std::string>> WorldHosts(Communicator& comm) {
  RETURN_IF_ERROR(CheckRawMpi(comm));
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<size_t>(comm.size()) * MPI_MAX_PROCESSOR_NAME);
  if (MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                    MPI_CHAR, MPI_COMM_WORLD) != MPI_SUCCESS) {
    return Internal("MPI_Allgather of the host names failed");
  }
  std::vector<std::string> hosts;
  for (int r = 0; r < comm.size(); ++r) {
    const char* p = all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    std::string h(p, strnlen(p, MPI_MAX_PROCESSOR_NAME));
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  return hosts;
}

}  // namespace tessera
