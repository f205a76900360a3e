// tools/cmd_bench_optimizer.cc — `tessera bench optimizer`: host AdamW and gradient-norm
// throughput (parameters/s) on 1 and 2 threads, each printed beside the memory-bandwidth bound
// measured in the same run, so the figure says how far from the machine's limit the loop is.
//
// The bound: AdamW streams 28 bytes per parameter (reads params, grads, m, v; writes params, m,
// v, all fp32), and the fastest such traffic this machine sustains is the in-place update
// a += s*b (MeasureUpdateBandwidth), so bound = that bandwidth / 28 bytes. The gradient norm only
// reads 4 bytes per parameter; its rate is printed with the bytes it read per second.
// Clip + AdamW (what a training step runs: the norm, then AdamW with the clipping factor folded
// into its read of the gradient) is printed two ways: against the same 28-byte bound, so the
// norm's extra read pass counts against it (at most 28/32 = 87.5% is reachable that way), and
// as memory-bandwidth utilisation: the 32 bytes per parameter it must move (the norm has to be
// known before the first update) per second, beside the in-place bandwidth.
// Owns nothing beyond the buffers of one run. Thread-safety: main thread only.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "optimizer/adamw.h"
#include "optimizer/grad_clip.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/memory.h"
#include "runtime/kernels/cpu/threads.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"

namespace tessera::cli {
namespace {

constexpr int64_t kDefaultParams = int64_t{64} << 20;
constexpr int64_t kMaxParams = int64_t{1} << 30;  // 16 GiB of buffers
constexpr int kDefaultRepeats = 10;
constexpr int kMaxRepeats = 10000;
constexpr double kAdamWBytesPerParam = 28.0;  // 4 fp32 reads + 3 fp32 writes
constexpr double kNormBytesPerParam = 4.0;    // 1 fp32 read
constexpr double kClipAdamWBytesPerParam = kAdamWBytesPerParam + kNormBytesPerParam;

// Times `op` once; seconds.
template <typename Op>
double TimeOnce(Op op) {
  auto t = BenchClock::now();
  op();
  return Since(t);
}

void PrintRate(const char* label, int64_t n, Stats s, double bytes_per_param) {
  const double best = n / s.min / 1e9, median = n / s.median / 1e9;
  std::printf("  %-18s best %5.3f G params/s (%6.1f ms, %5.1f GB/s)   median %5.3f G params/s (%6.1f ms)\n",
              label, best, s.min * 1e3, best * bytes_per_param, median, s.median * 1e3);
}

}  // namespace

int RunBenchOptimizer(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera bench optimizer [--params N] [--repeats R]\n\n"
        "Host AdamW throughput on one flat fp32 buffer of N parameters (all with weight decay),\n"
        "with 1 and then 2 threads: parameters/s of a full step (best and median over R timed\n"
        "steps after one warm-up), printed beside the memory-bandwidth bound measured in the\n"
        "same run at the same thread count. AdamW streams 28 bytes per parameter (reads params,\n"
        "grads, m, v; writes params, m, v), so bound = in-place update bandwidth (a += s*b) / 28.\n"
        "Also the gradient-norm rate (GlobalL2Norm, 4 bytes read per parameter), and clip +\n"
        "AdamW as a training step runs it (the norm, then AdamW reading the gradients times\n"
        "the clipping factor) against the same 28-byte bound, and the memory bandwidth it uses\n"
        "(32 bytes per parameter: the norm's read, then AdamW's) beside the in-place bandwidth.\n"
        "Needs 16 bytes of memory per parameter.\n\n"
        "  --params N    parameters (default %lld = 64 Mi, 1 GiB of buffers; at most %lld)\n"
        "  --repeats R   timed repetitions per figure (default %d, 1 to %d)\n",
        static_cast<long long>(kDefaultParams), static_cast<long long>(kMaxParams),
        kDefaultRepeats, kMaxRepeats);
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench optimizer", {"--params", "--repeats"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  if (!parsed->positional.empty()) {
    std::fprintf(stderr, "tessera bench optimizer: unexpected argument '%s' (see tessera bench optimizer --help)\n",
                 parsed->positional[0].c_str());
    return kExitUsage;
  }
  auto params = ParseIntFlag("--params", parsed->Get("--params", std::to_string(kDefaultParams)));
  auto repeats = ParseIntFlag("--repeats", parsed->Get("--repeats", std::to_string(kDefaultRepeats)));
  for (const auto* r : {&params, &repeats}) {
    if (!r->ok()) {
      std::fprintf(stderr, "tessera bench optimizer: %s\n", r->status().ToString().c_str());
      return kExitUsage;
    }
  }
  if (*params < 1 || *params > kMaxParams) {
    std::fprintf(stderr, "tessera bench optimizer: --params must be between 1 and %lld, got %lld\n",
                 static_cast<long long>(kMaxParams), static_cast<long long>(*params));
    return kExitUsage;
  }
  if (*repeats < 1 || *repeats > kMaxRepeats) {
    std::fprintf(stderr, "tessera bench optimizer: --repeats must be between 1 and %d, got %lld\n",
                 kMaxRepeats, static_cast<long long>(*repeats));
    return kExitUsage;
  }
  const int64_t n = *params;
  const int reps = static_cast<int>(*repeats);
  const int64_t need_bytes = n * 16;
  const int64_t available = MemAvailableBytes();
  if (available >= 0 && need_bytes > available - (int64_t{256} << 20)) {
    std::fprintf(stderr, "tessera bench optimizer: --params %lld needs %s of memory, %s is available\n",
                 static_cast<long long>(n), FormatBytes(need_bytes).c_str(), FormatBytes(available).c_str());
    return kExitUsage;
  }

  // Arenas: 64-byte aligned and zero-filled, so every page is faulted in before timing.
  Arena param_arena(MemoryKind::kParameters, n * sizeof(float), nullptr);
  Arena grad_arena(MemoryKind::kGradients, n * sizeof(float), nullptr);
  float* p = param_arena.Allocate(DType::kF32, {n}).f32();
  float* g = grad_arena.Allocate(DType::kF32, {n}).f32();
  // Values of a trained model's size (|p| <= 0.02, |g| <= 1e-3), none subnormal.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(static_cast<int64_t>((static_cast<uint64_t>(i) * 2654435761u) % 2001) - 1000);
    p[i] = 2e-5f * u;
    g[i] = 1e-6f * u;
  }
  AdamW adamw(AdamWConfig{}, n, {ParamRange{0, n, true, "all"}}, nullptr);

  std::printf("tessera bench optimizer: %lld parameters (%s per fp32 array), %d timed repeats after 1 warm-up\n",
              static_cast<long long>(n), FormatBytes(n * sizeof(float)).c_str(), reps);
  std::printf("bound = in-place update bandwidth a += s*b / 28 bytes per parameter, measured in turn\n"
              "with the AdamW steps (one update pass, one AdamW step, one norm, one clip + AdamW\n"
              "per repeat)\n");
  UpdateBandwidthProbe probe;
  for (int threads : {1, 2}) {
    cpu::SetNumThreads(threads);
    // Round-robin, so the bound and the loops see the same load; round 0 warms up.
    std::vector<double> bandwidth_gbps, adamw_s, norm_s, clip_adamw_s;
    for (int r = 0; r <= reps; ++r) {
      const double gbps = probe.PassGbps();
      const double adamw_one = TimeOnce([&] { adamw.Step(p, g, 1e-4f); });
      const double norm_one = TimeOnce([&] { GlobalL2Norm(g, n); });
      // A max norm below the gradient's, so the factor is below 1 and really applied.
      const double clip_one = TimeOnce([&] {
        const float scale = ClipScale(GlobalL2Norm(g, n), 1e-3);
        adamw.Step(p, g, 1e-4f, scale);
      });
      if (r == 0) continue;
      bandwidth_gbps.push_back(-gbps);  // negated: Summarise's min is then the best
      adamw_s.push_back(adamw_one);
      norm_s.push_back(norm_one);
      clip_adamw_s.push_back(clip_one);
    }
    const Stats bw = Summarise(bandwidth_gbps), adam = Summarise(adamw_s), l2 = Summarise(norm_s);
    const Stats clip = Summarise(clip_adamw_s);
    const double bound_best = -bw.min / kAdamWBytesPerParam, bound_median = -bw.median / kAdamWBytesPerParam;
    std::printf("\n%d thread%s:\n", cpu::NumThreads(), cpu::NumThreads() == 1 ? "" : "s");
    std::printf("  %-18s best %5.3f G params/s (%5.1f GB/s / 28)          median %5.3f G params/s (%5.1f GB/s)\n",
                "bound", bound_best, -bw.min, bound_median, -bw.median);
    PrintRate("AdamW step", n, adam, kAdamWBytesPerParam);
    std::printf("  %-18s best %.0f%% of the best bound, median %.0f%% of the median bound\n", "",
                100.0 * n / adam.min / 1e9 / bound_best, 100.0 * n / adam.median / 1e9 / bound_median);
    PrintRate("grad norm (L2)", n, l2, kNormBytesPerParam);
    PrintRate("clip + AdamW", n, clip, kClipAdamWBytesPerParam);
    std::printf("  %-18s best %.0f%% of the best bound, median %.0f%% of the median bound\n", "",
                100.0 * n / clip.min / 1e9 / bound_best, 100.0 * n / clip.median / 1e9 / bound_median);
    std::printf("  %-18s moves 32 bytes per parameter: best %.0f%% of the best in-place bandwidth, "
                "median %.0f%% of the median\n",
                "", 100.0 * n * kClipAdamWBytesPerParam / clip.min / 1e9 / -bw.min,
                100.0 * n * kClipAdamWBytesPerParam / clip.median / 1e9 / -bw.median);
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace tessera::cli
