// tools/cmd_bench.h — what the `tessera bench` subcommands share: timing helpers and the
// in-place update bandwidth that bounds every optimizer-like loop. Defined in cmd_bench.cc.
// The subcommands themselves (cmd_bench_optimizer.cc, cmd_bench_comm.cc, cmd_bench_ckpt.cc)
// are dispatched from RunBench; their entry points are declared here, not in commands.h, since
// only RunBench calls them. Thread-safety: call from the main thread, outside OpenMP regions.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "models/model_config.h"
#include "tools/commands.h"

namespace tessera::cli {

using BenchClock = std::chrono::steady_clock;

// Seconds since `t`.
double Since(BenchClock::time_point t);

struct Stats {
  double min = 0, median = 0;
};

// min and median (upper median) of a non-empty list.
Stats Summarise(std::vector<double> v);

// The in-place update a += s*b over two 64 MiB fp32 arrays: 3 x 64 MiB streamed per pass (read
// a, read b, write a), the access pattern of an optimizer step and the fastest such traffic
// this machine sustains. A probe keeps its arrays, so passes can be interleaved with the loop
// being judged and both see the same load on a shared machine.
class UpdateBandwidthProbe {
 public:
  UpdateBandwidthProbe();  // allocates and faults in the arrays
  // One timed pass with the current OpenMP thread count; GB/s.
  double PassGbps();

 private:
  std::vector<float> a_, b_;
};

// Best GB/s of 5 passes of a fresh probe (about 0.3 s).
double MeasureUpdateBandwidth();

// MemAvailable from /proc/meminfo in bytes, or -1 when it cannot be read: what a bench may
// allocate without pushing the machine into swap or the OOM killer.
int64_t MemAvailableBytes();

// `tessera bench optimizer ...`, `tessera bench comm ...` and `tessera bench ckpt ...`
// (cmd_bench_ckpt.cc); args exclude the subcommand name.
int RunBenchOptimizer(const Args& args);
int RunBenchComm(const Args& args);
int RunBenchCkpt(const Args& args);
// `tessera bench pipeline ...` and `tessera bench tp ...` (cmd_bench_parallel.cc).
int RunBenchPipeline(const Args& args);
int RunBenchTp(const Args& args);
// `tessera bench diverged ...` (cmd_bench_diverged.cc).
int RunBenchDiverged(const Args& args);
// `tessera bench moe ...` (cmd_bench_moe.cc).
int RunBenchMoe(const Args& args);
// `tessera bench offload ...` (cmd_bench_offload.cc).
int RunBenchOffload(const Args& args);
// GPT-2 124M (12 layers, 768 wide, 12 heads, vocab 50257, tied): the benchmarks' default model.
ModelConfig Gpt2Small();
// `tessera bench gpu` (cmd_bench_gpu.cc).
int RunBenchGpu(const Args& args);

}  // namespace tessera::cli
