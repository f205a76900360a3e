// tools/cmd_bench_comm.cc — `tessera bench comm`: the MPI backend's all-reduce (both reduction
// orders), reduce-scatter and all-to-all bus bandwidth beside plain blocking MPI_Allreduce /
// MPI_Alltoallv, measured in the same run on the same buffer size, and the ratio to it (target:
// >= 90 %).
//
// The only place the CLI initialises MPI (MpiSession), so other commands never pay for it.
// Needs >= 2 ranks: under a plain launch (world size 1) it explains how to run it and exits
// with kExitUsage. Raw MPI is measured first and last; the ratio is taken against the better of
// the two medians, so drift on a shared machine cannot flatter the backend. Every rank runs the
// same ops; rank 0 prints. A failed or timed-out collective ends the job through AbortJob
// (MPI cannot cancel it). Thread-safety: main thread only.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/bench.h"
#include "comm/mpi.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/memory.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"

namespace tessera::cli {
namespace {

constexpr int64_t kDefaultBytes = int64_t{64} << 20;
constexpr int64_t kMaxBytes = int64_t{4} << 30;  // MPI counts are int: 1 Gi floats
constexpr int kDefaultIters = 15;
constexpr int kMaxIters = 10000;

// "67108864", "64MiB", "64M", "1GiB", "512KiB": binary units. Error names --bytes.
Result<int64_t> ParseByteSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string suffix = text.substr(digits);
  int shift = -1;
  if (suffix.empty() || suffix == "B") shift = 0;
  if (suffix == "K" || suffix == "KiB") shift = 10;
  if (suffix == "M" || suffix == "MiB") shift = 20;
  if (suffix == "G" || suffix == "GiB") shift = 30;
  if (digits == 0 || digits > 12 || shift < 0) {
    return InvalidArgument("--bytes: expected a size such as 67108864, 64MiB or 1GiB, got \"" + text + "\"");
  }
  const int64_t value = std::stoll(text.substr(0, digits));  // <= 12 digits: fits
  if (value > (kMaxBytes >> shift)) {  // checked before shifting: no overflow
    return InvalidArgument("--bytes: at most 4GiB, got \"" + text + "\"");
  }
  return value << shift;
}

// Usage errors are printed by every rank: mpirun kills the others as soon as the first one
// exits, so a message left to rank 0 alone may never be printed.
int UsageError(const std::string& message) {
  std::fprintf(stderr, "tessera bench comm: %s\n", message.c_str());
  return kExitUsage;
}

CommBenchResult OrAbort(Result<CommBenchResult> r) {
  if (!r.ok()) AbortJob(r.status());
  return *r;
}

void PrintRow(const CommBenchResult& r, const char* label, double reference_gbps) {
  std::printf("  %-28s %7.2f %7.2f %10.2f", label, r.bus_gbps, r.best_bus_gbps, r.median_s * 1e3);
  if (reference_gbps > 0) std::printf("   %5.0f%%", 100.0 * r.bus_gbps / reference_gbps);
  std::printf("\n");
}

}  // namespace

int RunBenchComm(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera bench comm [--bytes 64MiB] [--iters N]\n"
        "       run under mpirun, e.g. tools/dev/mpirun.sh -np 2 build/tessera bench comm\n\n"
        "Bus bandwidth (GB/s, NCCL-tests definitions: all-reduce = alg x 2(n-1)/n, reduce-scatter\n"
        "and all-to-all = alg x (n-1)/n) of the MPI backend's fp32 all-reduce with ReduceOrder\n"
        "kBackend and kRankOrder, its reduce-scatter and its all-to-all (MoE token dispatch, equal\n"
        "blocks), beside plain blocking MPI_Allreduce / MPI_Alltoallv on the same size measured in\n"
        "the same run (before and after), with each op's median as a percentage of the better raw\n"
        "median. Each iteration counts as long as its slowest rank.\n"
        "Must run under mpirun with at least 2 ranks; rank 0 prints.\n\n"
        "  --bytes SIZE   fp32 buffer per rank: bytes, or with KiB / MiB / GiB (default 64MiB,\n"
        "                 a positive multiple of 4 bytes, at most 4GiB); reduce-scatter uses the\n"
        "                 largest multiple of 4 x ranks bytes that fits\n"
        "  --iters N      timed iterations per op after one warm-up (default %d, 1 to %d)\n",
        kDefaultIters, kMaxIters);
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench comm", {"--bytes", "--iters"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  if (!parsed->positional.empty()) {
    return UsageError("unexpected argument '" + parsed->positional[0] + "' (see tessera bench comm --help)");
  }
  auto bytes = ParseByteSize(parsed->Get("--bytes", std::to_string(kDefaultBytes)));
  if (!bytes.ok()) return UsageError(bytes.status().message());
  if (*bytes < 4 || *bytes % 4 != 0 || *bytes > kMaxBytes) {
    return UsageError("--bytes must be a positive multiple of 4 bytes, at most 4GiB; got " +
                      std::to_string(*bytes));
  }
  auto iters = ParseIntFlag("--iters", parsed->Get("--iters", std::to_string(kDefaultIters)));
  if (!iters.ok()) return UsageError(iters.status().message());
  if (*iters < 1 || *iters > kMaxIters) {
    return UsageError("--iters must be between 1 and " + std::to_string(kMaxIters) + ", got " +
                      std::to_string(*iters));
  }

  auto session = MpiSession::Init(nullptr, nullptr);
  if (!session.ok()) {
    std::fprintf(stderr, "tessera bench comm: %s\n", session.status().ToString().c_str());
    return ExitCodeFor(session.status());
  }
  const int ranks = (*session)->world_size();
  const bool printer = (*session)->world_rank() == 0;
  if (ranks < 2) {
    return UsageError("needs at least 2 ranks, but the world has 1; run it under mpirun with\n"
                      "-np 2 or more, e.g.  tools/dev/mpirun.sh -np 2 build/tessera bench comm");
  }
  if (*bytes < 4 * ranks) {
    if (printer) std::fprintf(stderr, "tessera bench comm: --bytes must be at least 4 x ranks = %d\n", 4 * ranks);
    return kExitUsage;
  }
  auto world = (*session)->World(CommOptions{});
  if (!world.ok()) AbortJob(world.status());
  Communicator& comm = **world;
  const int n = static_cast<int>(*iters);

  auto hosts = WorldHosts(comm);
  if (!hosts.ok()) AbortJob(hosts.status());
  CommBenchResult raw_before = OrAbort(BenchRawMpiAllReduce(comm, *bytes, n));
  CommBenchResult backend = OrAbort(BenchAllReduce(comm, *bytes, n, ReduceOrder::kBackend));
  CommBenchResult rank_order = OrAbort(BenchAllReduce(comm, *bytes, n, ReduceOrder::kRankOrder));
  CommBenchResult scatter = OrAbort(BenchReduceScatter(comm, *bytes, n));
  CommBenchResult raw_after = OrAbort(BenchRawMpiAllReduce(comm, *bytes, n));
  // All-to-all (the MoE token dispatch), between two raw MPI_Alltoallv figures as well.
  CommBenchResult a2a_raw_before = OrAbort(BenchRawMpiAllToAll(comm, *bytes, n));
  CommBenchResult a2a = OrAbort(BenchAllToAll(comm, *bytes, n));
  CommBenchResult a2a_raw_after = OrAbort(BenchRawMpiAllToAll(comm, *bytes, n));
  if (!printer) return kExitOk;

  const double reference = std::max(raw_before.bus_gbps, raw_after.bus_gbps);
  std::string host_list;
  for (const std::string& h : *hosts) host_list += (host_list.empty() ? "" : ", ") + h;
  std::printf("tessera bench comm: %d ranks on %zu host(s) (%s), %s fp32 per rank, %d timed "
              "iterations after 1 warm-up\n",
              ranks, hosts->size(), host_list.c_str(), FormatBytes(*bytes).c_str(), n);
  std::printf("bus bandwidth in GB/s; %% = median bus bandwidth / better raw MPI_Allreduce median "
              "(%.2f GB/s); target >= 90%%\n\n", reference);
  std::printf("  %-28s %7s %7s %10s   %6s\n", "op", "median", "best", "median ms", "vs raw");
  PrintRow(raw_before, "MPI_Allreduce raw (first)", 0);
  PrintRow(backend, "all_reduce kBackend", reference);
  PrintRow(rank_order, "all_reduce kRankOrder", reference);
  PrintRow(scatter, "reduce_scatter kBackend", reference);
  PrintRow(raw_after, "MPI_Allreduce raw (last)", 0);
  const double a2a_reference = std::max(a2a_raw_before.bus_gbps, a2a_raw_after.bus_gbps);
  std::printf("\n  all-to-all (%% of the better raw MPI_Alltoallv median, %.2f GB/s; target >= 90%%):\n",
              a2a_reference);
  PrintRow(a2a_raw_before, "MPI_Alltoallv raw (first)", 0);
  PrintRow(a2a, "all_to_all kBackend", a2a_reference);
  PrintRow(a2a_raw_after, "MPI_Alltoallv raw (last)", 0);
  if (scatter.bytes != *bytes) {
    std::printf("  (reduce-scatter input: %lld bytes, a multiple of 4 x ranks)\n",
                static_cast<long long>(scatter.bytes));
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace tessera::cli
