// tools/cmd_bench_gpu.cc — `tessera bench gpu`: training steps of GPT-2 124M (or a config's
// model) on one GPU as `tessera train --set train.device=cuda` runs them, beside the GPU's
// limits measured in the same run (cuBLAS GEMM, device memory copy, the host link) and its
// rated peak, so MFU can be judged against both.
//
// A step: forward and backward on the GPU with the parameters and gradients crossing a
// DeviceMirrorStore (runtime/train/device_mirror.h) from and to host buffers, then the global
// gradient norm and AdamW on the host, as the trainer does. Times are wall clock: every step
// ends with the gradients back on the host, so nothing is still queued when it is read.
// Needs a GPU; without one it says why and exits 4.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "models/param_layout.h"
#include "models/param_store.h"
#include "models/transformer.h"
#include "optimizer/adamw.h"
#include "optimizer/grad_clip.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/random.h"
#include "runtime/kernels/cuda_backend.h"
#include "runtime/train/compute_device.h"
#include "runtime/train/config.h"
#include "runtime/train/device_mirror.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"

namespace tessera::cli {
namespace {

// The rank's parameters and gradients in host memory, as the trainer's state holds them.
class HostFlatStore final : public ParamStore {
 public:
  HostFlatStore(float* params, float* grads, const std::vector<int64_t>& bounds)
      : params_(params), grads_(grads), bounds_(bounds) {}
  const float* Acquire(int u) override { return params_ + bounds_[static_cast<size_t>(u)]; }
  void Release(int) override {}
  float* Grads(int u) override { return grads_ + bounds_[static_cast<size_t>(u)]; }
  void GradsDone(int) override {}

 private:
  float* params_;
  float* grads_;
  const std::vector<int64_t>& bounds_;
};

// Best of `repeats` timings of `op` after one warm-up, the device drained each time.
template <typename Op>
double BestSeconds(Backend& gpu, int repeats, Op op) {
  double best = 1e30;
  for (int r = 0; r <= repeats; ++r) {
    auto t = BenchClock::now();
    op();
    gpu.Synchronize(gpu.Record(gpu.stream()));
    if (r > 0) best = std::min(best, Since(t));
  }
  return best;
}

// cuBLAS through the backend's Linear layer (its GEMM dtype), n x n x n; TFLOP/s.
double GemmTflops(Backend& gpu, int64_t n) {
  MemoryTracker t;
  Arena a = gpu.MakeArena(MemoryKind::kWorkspace, static_cast<size_t>(3 * n * n) * 4 + 1024, &t);
  float* x = a.Allocate(DType::kF32, {n * n}).f32();
  float* w = a.Allocate(DType::kF32, {n * n}).f32();
  float* y = a.Allocate(DType::kF32, {n * n}).f32();
  const double s = BestSeconds(gpu, 5, [&] { gpu.LinearForward(y, x, w, nullptr, n, n, n); });
  return 2.0 * n * n * n / s / 1e12;
}

// Device-to-device copy (bytes read + written) and host-to-device upload, GB/s.
std::pair<double, double> CopyGbps(Backend& gpu, size_t bytes) {
  MemoryTracker t;
  Arena a = gpu.MakeArena(MemoryKind::kWorkspace, 2 * bytes + 1024, &t);
  void* src = a.Allocate(DType::kF32, {static_cast<int64_t>(bytes / 4)}).data();
  void* dst = a.Allocate(DType::kF32, {static_cast<int64_t>(bytes / 4)}).data();
  std::vector<float> host(bytes / 4, 1.0f);
  const double d2d = BestSeconds(gpu, 5, [&] { gpu.Copy(dst, src, bytes); });
  const double h2d = BestSeconds(gpu, 3, [&] { gpu.Upload(dst, host.data(), bytes); });
  return {2.0 * bytes / d2d / 1e9, bytes / h2d / 1e9};
}

// The timed steps of one run: forward+backward (GPU, through the mirror) and clip + AdamW
// (host), each step's gradients from zero, after one warm-up step (allocations, cuBLAS plans).
struct StepTimes {
  Stats total, forward_backward, optimizer;
};

StepTimes TimeSteps(Transformer& model, AdamW& adamw, std::vector<float>& params,
                    std::vector<float>& grads, const std::vector<int32_t>& in,
                    const std::vector<int32_t>& tgt, int steps) {
  const int64_t n = static_cast<int64_t>(params.size());
  std::vector<double> fb, opt, total;
  for (int s = 0; s <= steps; ++s) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    auto t0 = BenchClock::now();
    model.ForwardBackward(in.data(), tgt.data(), 1.0f);
    const double f = Since(t0);
    auto t1 = BenchClock::now();
    const float clip = ClipScale(GlobalL2Norm(grads.data(), n), 1.0);
    adamw.Step(params.data(), grads.data(), 1e-4f, clip);
    if (s == 0) continue;
    fb.push_back(f);
    opt.push_back(Since(t1));
    total.push_back(f + opt.back());
  }
  return {Summarise(total), Summarise(fb), Summarise(opt)};
}

struct RunShape {
  std::string label;
  int64_t B = 0, T = 0, params = 0;
  int steps = 0;
  bool bf16 = false;
};

void PrintReport(const RunShape& r, const StepTimes& t, double gflop, double gemm_tflops,
                 int64_t gemm_n, const CudaDeviceInfo& info, const Backend& gpu,
                 const MemoryTracker& memory) {
  const double achieved = gflop / t.total.min / 1e3;  // TFLOP/s
  const double rated = RatedPeakFlops(info.name, r.bf16) / 1e12;
  const char* type = r.bf16 ? "bf16" : "fp32";
  std::printf("\n%s (%.1fM params), %s on %s (%s), batch %lld x seq %lld, %d timed steps\n",
              r.label.c_str(), r.params / 1e6, type, info.name.c_str(), gpu.name(),
              static_cast<long long>(r.B), static_cast<long long>(r.T), r.steps);
  std::printf("  training step      min %7.1f ms   median %7.1f ms\n", t.total.min * 1e3,
              t.total.median * 1e3);
  std::printf("    forward+backward min %7.1f ms   median %7.1f ms   (GPU; parameters up, "
              "gradients down)\n", t.forward_backward.min * 1e3, t.forward_backward.median * 1e3);
  std::printf("    clip + AdamW     min %7.1f ms   median %7.1f ms   (host)\n",
              t.optimizer.min * 1e3, t.optimizer.median * 1e3);
  std::printf("  tokens/s           %.0f (best step)\n", static_cast<double>(r.B * r.T) / t.total.min);
  std::printf("  achieved           %.1f TFLOP/s (%.1f GFLOP per step)\n", achieved, gflop);
  if (rated > 0) {
    std::printf("  MFU                %.1f%% of the rated %s peak (%.0f TFLOP/s)\n",
                100.0 * achieved / rated, type, rated);
  }
  std::printf("  GEMM %lld^3         %.1f TFLOP/s (%s operands, the backend's Linear): the step "
              "reaches %.1f%% of it\n", static_cast<long long>(gemm_n), gemm_tflops, type,
              100.0 * achieved / gemm_tflops);
  std::printf("  device memory      params %s, grads %s, activations %s, workspace %s\n",
              FormatBytes(memory.peak(MemoryKind::kParameters)).c_str(),
              FormatBytes(memory.peak(MemoryKind::kGradients)).c_str(),
              FormatBytes(memory.peak(MemoryKind::kActivations)).c_str(),
              FormatBytes(memory.peak(MemoryKind::kWorkspace)).c_str());
  std::fflush(stdout);
}

// One precision: the model on the device through a DeviceMirrorStore over host buffers, as
// the trainer runs it, timed and reported.
int BenchPrecision(const RunShape& shape, const ModelConfig& mc, const CudaDeviceInfo& info,
                   int64_t gemm_n) {
  CudaBackendOptions o;
  o.gemm_dtype = shape.bf16 ? DType::kBF16 : DType::kF32;
  auto made = CreateDeviceBackend(o);
  if (!made.ok()) {
    std::fprintf(stderr, "tessera bench gpu: %s\n", made.status().ToString().c_str());
    return kExitBadInput;
  }
  Backend& gpu = *made->backend;
  const double gemm = GemmTflops(gpu, gemm_n);
  const std::vector<int64_t> bounds = UnitBounds(mc);
  RunShape r = shape;
  r.params = bounds.back();
  std::vector<float> params(static_cast<size_t>(r.params)), grads(params.size());
  InitParameterRange(mc, 1, 0, r.params, params.data());
  HostFlatStore host(params.data(), grads.data(), bounds);
  MemoryTracker memory;
  DeviceMirrorStore mirror(host, gpu, bounds, &memory);
  ModelOptions mo;
  mo.backend = &gpu;
  mo.store = &mirror;
  mo.activation_dtype = o.gemm_dtype;
  auto model = Transformer::Create(mc, r.B, r.T, &memory, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "tessera bench gpu: %s\n", model.status().ToString().c_str());
    return ExitCodeFor(model.status());
  }
  std::vector<ParamRange> ranges;
  for (const Parameter& p : (*model)->parameters()) {
    ranges.push_back({p.offset, p.numel(), true, p.name()});
  }
  AdamW adamw(AdamWConfig{}, r.params, ranges, &memory);
  std::vector<int32_t> in(static_cast<size_t>(r.B * r.T)), tgt(in.size());
  Rng rng(StreamKey(7, 1));
  for (auto& t : in) t = static_cast<int32_t>(rng.NextBelow(mc.vocab_size));
  for (auto& t : tgt) t = static_cast<int32_t>(rng.NextBelow(mc.vocab_size));
  const StepTimes t = TimeSteps(**model, adamw, params, grads, in, tgt, r.steps);
  const double gflop = (*model)->TrainFlopsPerToken() * static_cast<double>(r.B * r.T) / 1e9;
  PrintReport(r, t, gflop, gemm, gemm_n, info, gpu, memory);
  return kExitOk;
}

void PrintHelp() {
  std::printf(
    "usage: tessera bench gpu [--precision fp32,bf16] [--batch 4] [--seq 1024] [--steps 10]\n"
    "                         [--config FILE] [--set key=value]\n\n"
    "GPT-2 124M training steps on GPU 0 as `tessera train --set train.device=cuda` runs\n"
    "them: forward and backward on the GPU (parameters uploaded and gradients downloaded\n"
    "at each unit), then the gradient norm and AdamW on the host. Prints each step's time\n"
    "(min and median), tokens/s and MFU against the GPU's rated peak, beside the limits\n"
    "measured in the same run: a cuBLAS 8192^3 GEMM through the backend, the device\n"
    "memory copy bandwidth and the host-to-device bandwidth. Needs a GPU (exit 4 without;\n"
    "TESSERA_DEVICE_ON_HOST=1 runs the same path on the CPU, for testing).\n\n"
    "  --precision P,... fp32, bf16 (default fp32,bf16): bf16 stores activations in bf16\n"
    "                    and multiplies Linear layers and the LM head in bf16\n"
    "  --batch B         sequences per step (default 4)\n"
    "  --seq T           tokens per sequence (default 1024)\n"
    "  --steps N         timed steps after one warm-up (default 10)\n"
    "  --gemm N          the GEMM probe's size, N x N x N (default 8192)\n"
    "  --config FILE     the model of FILE instead of GPT-2 124M\n");
}

// The limits a step's figures are judged against, measured now.
void PrintGpuLimits(Backend& gpu, const CudaDeviceInfo& info) {
  const auto [d2d, h2d] = CopyGbps(gpu, size_t{256} << 20);
  std::printf("GPU limits (%s, %d SMs, %.0f GiB; measured now):\n", info.name.c_str(),
              info.multiprocessors, info.memory_bytes / double(1 << 30));
  std::printf("  device memory copy   %.0f GB/s (read + write)\n", d2d);
  std::printf("  host -> device       %.1f GB/s (pageable source, through pinned staging)\n", h2d);
  std::printf("  rated dense peaks    bf16 %.0f TFLOP/s, fp32 %.0f TFLOP/s%s\n",
              RatedPeakFlops(info.name, true) / 1e12, RatedPeakFlops(info.name, false) / 1e12,
              RatedPeakFlops(info.name, true) > 0 ? "" : " (unknown part: 0)");
}

}  // namespace

int RunBenchGpu(const Args& args) {
  if (WantsHelp(args)) {
    PrintHelp();
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench gpu", {"--precision", "--batch", "--seq", "--steps",
                                              "--gemm", "--config", "--set"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  auto batch = ParseIntFlag("--batch", parsed->Get("--batch", "4"));
  auto seq = ParseIntFlag("--seq", parsed->Get("--seq", "1024"));
  auto steps = ParseIntFlag("--steps", parsed->Get("--steps", "10"));
  auto gemm_n = ParseIntFlag("--gemm", parsed->Get("--gemm", "8192"));
  for (const auto* r : {&batch, &seq, &steps, &gemm_n}) {
    if (!r->ok() || **r < 1) {
      std::fprintf(stderr, "tessera bench gpu: --batch, --seq, --steps and --gemm take integers "
                           ">= 1\n");
      return kExitUsage;
    }
  }
  std::vector<DType> precisions;
  std::stringstream list(parsed->Get("--precision", "fp32,bf16"));
  for (std::string p; std::getline(list, p, ',');) {
    if (p != "fp32" && p != "bf16") {
      std::fprintf(stderr, "tessera bench gpu: --precision: '%s' (fp32 or bf16)\n", p.c_str());
      return kExitUsage;
    }
    precisions.push_back(p == "bf16" ? DType::kBF16 : DType::kF32);
  }
  ModelConfig mc = Gpt2Small();
  if (parsed->Has("--set") && !parsed->Has("--config")) {
    std::fprintf(stderr, "tessera bench gpu: --set overrides keys of --config FILE, and no "
                         "--config was given\n");
    return kExitUsage;
  }
  if (parsed->Has("--config")) {
    auto c = LoadConfig(parsed->Get("--config"), parsed->All("--set"));
    if (!c.ok()) {
      std::fprintf(stderr, "tessera bench gpu: %s\n", c.status().ToString().c_str());
      return ExitCodeFor(c.status());
    }
    mc = c->model;
  }
  if (*seq > mc.max_seq_len) {
    std::fprintf(stderr, "tessera bench gpu: --seq %lld exceeds the model's max_seq_len %lld\n",
                 static_cast<long long>(*seq), static_cast<long long>(mc.max_seq_len));
    return kExitUsage;
  }
  auto probe = CreateDeviceBackend({});
  if (!probe.ok()) {
    std::fprintf(stderr, "tessera bench gpu: %s\n", probe.status().ToString().c_str());
    return kExitBadInput;
  }
  const CudaDeviceInfo* info = &probe->info;
  PrintGpuLimits(*probe->backend, *info);
  for (DType d : precisions) {
    const RunShape shape{parsed->Get("--config", "GPT-2 124M"), *batch, *seq, 0,
                         static_cast<int>(*steps), d == DType::kBF16};
    const int rc = BenchPrecision(shape, mc, *info, *gemm_n);
    if (rc != kExitOk) return rc;
  }
  return kExitOk;
}

}  // namespace tessera::cli
