// tools/cmd_bench.cc — `tessera bench`: measured training speed with this machine's limits
// printed beside it (sgemm and bf16 GEMM peaks, memory bandwidth), so a figure can be judged,
// not just read.
// Also the helpers shared with the subcommands (cmd_bench.h) and their dispatch:
// `tessera bench optimizer` (cmd_bench_optimizer.cc), `tessera bench comm` (cmd_bench_comm.cc),
// `tessera bench ckpt` (cmd_bench_ckpt.cc), `tessera bench diverged` (cmd_bench_diverged.cc),
// `tessera bench offload` (cmd_bench_offload.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "models/transformer.h"
#include "optimizer/adamw.h"
#include "optimizer/grad_clip.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/random.h"
#include "runtime/kernels/cpu/bench.h"
#include "runtime/kernels/cpu/bf16_gemm.h"
#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/kernels/cpu_bf16_backend.h"
#include "runtime/train/config.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"
#include "tools/commands.h"

namespace tessera::cli {

double Since(BenchClock::time_point t) {
  return std::chrono::duration<double>(BenchClock::now() - t).count();
}

Stats Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2]};
}

UpdateBandwidthProbe::UpdateBandwidthProbe() : a_(int64_t{16} << 20, 1.0f), b_(a_.size(), 2.0f) {}

double UpdateBandwidthProbe::PassGbps() {
  const int64_t n = static_cast<int64_t>(a_.size());
  float* a = a_.data();
  const float* b = b_.data();
  auto t = BenchClock::now();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] += 0.5f * b[i];
  return 3.0 * n * sizeof(float) / Since(t) / 1e9;
}

double MeasureUpdateBandwidth() {
  UpdateBandwidthProbe probe;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) best = std::max(best, probe.PassGbps());
  return best;
}

int64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

ModelConfig Gpt2Small() {
  ModelConfig m;
  m.family = ModelFamily::kGpt2;
  m.vocab_size = 50257;
  m.max_seq_len = 1024;
  m.num_layers = 12;
  m.hidden_size = 768;
  m.num_heads = 12;
  m.tie_embeddings = true;
  return m;
}

namespace {

using Clock = BenchClock;

std::vector<ParamRange> AllDecay(Transformer& model) {
  std::vector<ParamRange> r;
  for (const Parameter& p : model.parameters()) r.push_back({p.offset, p.numel(), true, p.name()});
  return r;
}

// The GEMM peaks measured at the start of the run, GFLOP/s.
struct Peaks {
  double sgemm = 0, bf16 = 0;
};

// One shape's figures, for the fp32 / bf16 comparison.
struct ShapeResult {
  double step_s = 0;        // best training step
  size_t activations = 0;   // bytes kept from forward to backward
  size_t workspace = 0;     // bytes of temporaries
};

// Trains `steps` (+1 warm-up) steps of `mc` at (B, T) with activations in `act` on the
// backend a run in that precision gets (ChooseComputeBackend) and prints the figures.
Result<ShapeResult> BenchShape(const std::string& label, const ModelConfig& mc, int64_t B,
                               int64_t T, int steps, const Peaks& peaks, DType act) {
  const double peak_gflops = peaks.sgemm;
  MemoryTracker memory;
  ComputeBackendChoice compute = ChooseComputeBackend(act);
  ModelOptions mo;
  mo.activation_dtype = act;
  mo.backend = compute.backend.get();
  ASSIGN_OR_RETURN(std::unique_ptr<Transformer> made, Transformer::Create(mc, B, T, &memory, mo));
  Transformer& model = *made;
  model.InitRandom(1);
  float* params = model.flat_params().f32();
  float* grads = model.flat_grads().f32();
  // As a bf16 run's shards give it, the model reads bf16 values of the fp32 master weights.
  if (act != DType::kF32) cpu::RoundTo(act, params, model.num_params());
  AdamW adamw(AdamWConfig{}, model.num_params(), AllDecay(model), &memory);
  std::vector<int32_t> in(B * T), tgt(B * T);
  Rng rng(StreamKey(7, 1));
  for (auto& t : in) t = static_cast<int32_t>(rng.NextBelow(mc.vocab_size));
  for (auto& t : tgt) t = static_cast<int32_t>(rng.NextBelow(mc.vocab_size));

  std::vector<double> fwd, fwdbwd, opt, total;
  for (int s = 0; s < steps + 1; ++s) {  // the first step warms caches and pages; not counted
    auto t0 = Clock::now();
    model.Forward(in.data(), tgt.data());
    double f = Since(t0);
    auto t1 = Clock::now();
    model.ZeroGrads();
    model.ForwardBackward(in.data(), tgt.data(), 1.0f);
    double fb = Since(t1);
    auto t2 = Clock::now();
    // As the trainer does: the clipping factor is folded into AdamW's read of the gradients.
    const float clip = ClipScale(GlobalL2Norm(grads, model.num_params()), 1.0);
    adamw.Step(params, grads, 1e-4f, clip);
    double o = Since(t2);
    if (s == 0) continue;
    fwd.push_back(f);
    fwdbwd.push_back(fb);
    opt.push_back(o);
    total.push_back(fb + o);
  }
  const double tokens = static_cast<double>(B * T);
  const double gflop = model.TrainFlopsPerToken() * tokens / 1e9;
  Stats st = Summarise(total), sf = Summarise(fwd), sfb = Summarise(fwdbwd), so = Summarise(opt);
  std::printf("\n%s (%.1fM params, %s recompute), %s, batch %lld x seq %lld, %d threads, %d timed steps\n",
              label.c_str(), model.num_params() / 1e6, RecomputePolicyName(mc.recompute),
              std::string(DTypeName(act)).c_str(), static_cast<long long>(B),
              static_cast<long long>(T), cpu::NumThreads(), steps);
  std::printf("  compute            %s\n", compute.description.c_str());
  std::printf("  training step      min %7.0f ms   median %7.0f ms   (forward+backward+clip+AdamW)\n",
              st.min * 1e3, st.median * 1e3);
  std::printf("    forward          min %7.0f ms   median %7.0f ms\n", sf.min * 1e3, sf.median * 1e3);
  std::printf("    backward         min %7.0f ms   median %7.0f ms   (forward+backward minus forward)\n",
              (sfb.min - sf.min) * 1e3, (sfb.median - sf.median) * 1e3);
  std::printf("    clip + AdamW     min %7.0f ms   median %7.0f ms\n", so.min * 1e3, so.median * 1e3);
  std::printf("  work per step      %.1f GFLOP (6N + 12LCT per token)\n", gflop);
  std::printf("  tokens/s           %.0f (best step)\n", tokens / st.min);
  std::printf("  achieved           %.1f GFLOP/s = MFU %.1f%% of the measured sgemm peak\n",
              gflop / st.min, 100.0 * gflop / st.min / peak_gflops);
  std::printf("  limit              %.2f s/step at the sgemm peak\n", gflop / peak_gflops);
  if (std::string_view(compute.backend->name()) == "cpu-bf16") {
    std::printf("  bf16 GEMMs         MFU %.1f%% of the measured bf16 GEMM peak; limit %.2f s/step "
                "there\n", 100.0 * gflop / st.min / peaks.bf16, gflop / peaks.bf16);
  }
  ShapeResult r{st.min, memory.peak(MemoryKind::kActivations), memory.peak(MemoryKind::kWorkspace)};
  std::printf("  memory             params %s, grads %s, AdamW %s, activations %s, workspace %s\n",
              FormatBytes(memory.peak(MemoryKind::kParameters)).c_str(),
              FormatBytes(memory.peak(MemoryKind::kGradients)).c_str(),
              FormatBytes(memory.peak(MemoryKind::kOptimizerState)).c_str(),
              FormatBytes(r.activations).c_str(), FormatBytes(r.workspace).c_str());
  std::fflush(stdout);
  return r;
}

// The low-precision run of a shape beside its fp32 run.
void PrintComparison(DType low, int64_t T, const ShapeResult& fp32, const ShapeResult& r) {
  const std::string name(DTypeName(low));
  std::printf("\n  %s vs fp32 at seq %lld: step %.2fx as fast; activations %.0f%% of fp32's "
              "(%s vs %s), workspace %.0f%% (%s vs %s)\n",
              name.c_str(), static_cast<long long>(T), fp32.step_s / r.step_s,
              100.0 * static_cast<double>(r.activations) / static_cast<double>(fp32.activations),
              FormatBytes(r.activations).c_str(), FormatBytes(fp32.activations).c_str(),
              100.0 * static_cast<double>(r.workspace) / static_cast<double>(fp32.workspace),
              FormatBytes(r.workspace).c_str(), FormatBytes(fp32.workspace).c_str());
  std::fflush(stdout);
}

// "fp32,bf16" -> {kF32, kBF16}: fp32 first (the others are compared with it), each once.
Result<std::vector<DType>> ParsePrecisions(const std::string& list) {
  std::vector<DType> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    DType d;
    if (item == "fp32") {
      d = DType::kF32;
    } else if (item == "bf16") {
      d = DType::kBF16;
    } else if (item == "fp16") {
      d = DType::kF16;
    } else {
      return InvalidArgument("--precision: '" + item + "' is not fp32, bf16 or fp16");
    }
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  if (out.empty()) return InvalidArgument("--precision: expected fp32, bf16 and/or fp16");
  std::stable_partition(out.begin(), out.end(), [](DType d) { return d == DType::kF32; });
  return out;
}

// Each precision at each sequence length, fp32 first, then each other beside it.
int BenchShapes(const std::string& label, const ModelConfig& mc, int64_t B,
                const std::vector<int64_t>& seqs, const std::vector<DType>& precisions,
                int steps, const Peaks& peaks) {
  for (int64_t T : seqs) {
    std::optional<ShapeResult> fp32;
    for (DType act : precisions) {
      Result<ShapeResult> r = BenchShape(label, mc, B, T, steps, peaks, act);
      if (!r.ok()) {
        std::fprintf(stderr, "tessera bench: %s\n", r.status().ToString().c_str());
        return ExitCodeFor(r.status());
      }
      if (act == DType::kF32) {
        fp32 = *r;
      } else if (fp32) {
        PrintComparison(act, T, *fp32, *r);
      }
    }
  }
  return kExitOk;
}

}  // namespace

int RunBench(const Args& args) {
  // A subcommand is the first argument; everything else is the training benchmark.
  if (!args.empty() && args[0] == "optimizer") return RunBenchOptimizer(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "comm") return RunBenchComm(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "ckpt") return RunBenchCkpt(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "pipeline") return RunBenchPipeline(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "tp") return RunBenchTp(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "diverged") return RunBenchDiverged(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "moe") return RunBenchMoe(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "offload") return RunBenchOffload(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "gpu") return RunBenchGpu(Args(args.begin() + 1, args.end()));
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera bench [--seq 64,256] [--precision fp32,bf16] [--batch 4] [--steps 3]\n"
        "                     [--threads 2] [--config FILE]\n"
        "       tessera bench optimizer [--params N] [--repeats R]\n"
        "       tessera bench comm [--bytes 64MiB] [--iters N]     (under mpirun, >= 2 ranks)\n"
        "       tessera bench ckpt [--config FILE] [--repeats R] [--step-ms MS]\n"
        "       tessera bench pipeline [--layers 8] [--micro 8] ...   (under mpirun, P stages)\n"
        "       tessera bench tp [--config FILE]\n"
        "       tessera bench diverged [--config FILE] [--steps N] [--lr LR] ...\n"
        "       tessera bench moe [--tokens N] [--experts E] [--top-k K] ...\n"
        "       tessera bench offload [--dir DIR] [--params N] [--pool-mb M] [--no-train] ...\n"
        "       tessera bench gpu [--precision fp32,bf16] [--batch 4] [--seq 1024] ...\n\n"
        "Measures this machine's limits, then GPT-2 124M training steps (12 layers, 768 wide,\n"
        "12 heads, vocab 50257) at each sequence length and precision: milliseconds per step\n"
        "split into forward, backward and clip+AdamW (min and median over the timed steps),\n"
        "tokens/s, MFU against the sgemm peak measured in the same run, and the activation and\n"
        "workspace memory. bf16 stores activations in bf16 and runs its GEMMs on the bf16 path\n"
        "this CPU takes (oneDNN where it has bf16 instructions, else fp32 compute on bf16\n"
        "storage), named on its 'compute' line and beside the bf16 GEMM peak; each low\n"
        "precision is then compared with fp32 (speed-up, activation memory).\n\n"
        "  --seq L1,L2,...   sequence lengths (default 64,256)\n"
        "  --precision P,... fp32, bf16, fp16 (default fp32,bf16)\n"
        "  --batch B         sequences per step (default 4)\n"
        "  --steps N         timed steps per shape after one warm-up step (default 3, at most 1000)\n"
        "  --threads N       threads for OpenBLAS and kernels (default 2; 0 = all cores)\n"
        "  --config FILE     benchmark the model of FILE instead of GPT-2 124M\n"
        "                    (model.recompute is honoured, so policies can be compared)\n"
        "  --set key=value   override keys of --config, e.g. --set model.recompute=full\n\n"
        "subcommands (each has its own --help):\n"
        "  optimizer   host AdamW and grad-norm parameters/s on 1 and 2 threads beside the\n"
        "              memory-bandwidth bound measured in the same run\n"
        "  comm        all-reduce and reduce-scatter bus bandwidth beside raw MPI_Allreduce\n"
        "  ckpt        checkpoint save stall, write and verified load throughput beside the\n"
        "              disk's sequential bandwidth measured in the same run\n"
        "  pipeline    measured pipeline bubble of gpipe, 1f1b and interleaved beside the\n"
        "              theoretical (p-1)/(m+p-1)\n"
        "  tp          activation memory per tensor-parallel rank with and without sequence\n"
        "              parallelism\n"
        "  diverged    step time of a diverged model beside the healthy one, with subnormal\n"
        "              floats flushed (as training runs) and kept (IEEE)\n"
        "  moe         a mixture-of-experts sublayer's tokens/s with balanced and skewed routing,\n"
        "              and its grouped expert GEMMs beside the sgemm peak\n"
        "  offload     AdamW parameters/s with the optimizer state on disk (optimizer.offload:\n"
        "              nvme) beside the disk's O_DIRECT bandwidth through the same pipeline,\n"
        "              measured in the same run, and GPT-2 training steps and peak RSS with the\n"
        "              state on disk and in memory\n"
        "  gpu         GPT-2 124M training steps on a GPU (train.device: cuda) with tokens/s and\n"
        "              MFU against its rated peak, beside its measured GEMM, memory and host-link\n"
        "              bandwidths\n");
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench",
                          {"--seq", "--batch", "--steps", "--threads", "--precision", "--config", "--set"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  if (!parsed->positional.empty()) {
    std::fprintf(stderr, "tessera bench: unknown subcommand '%s' (optimizer, comm, ckpt, pipeline, tp, diverged, moe, offload, gpu; see tessera bench --help)\n",
                 parsed->positional[0].c_str());
    return kExitUsage;
  }
  auto batch = ParseIntFlag("--batch", parsed->Get("--batch", "4"));
  auto steps = ParseIntFlag("--steps", parsed->Get("--steps", "3"));
  auto threads = ParseIntFlag("--threads", parsed->Get("--threads", "2"));
  for (const auto* r : {&batch, &steps, &threads}) {
    if (!r->ok()) {
      std::fprintf(stderr, "tessera bench: %s\n", r->status().ToString().c_str());
      return kExitUsage;
    }
  }
  auto precisions = ParsePrecisions(parsed->Get("--precision", "fp32,bf16"));
  if (!precisions.ok()) {
    std::fprintf(stderr, "tessera bench: %s\n", precisions.status().ToString().c_str());
    return kExitUsage;
  }
  std::vector<int64_t> seqs;
  std::stringstream ss(parsed->Get("--seq", "64,256"));
  for (std::string item; std::getline(ss, item, ',');) {
    auto v = ParseIntFlag("--seq", item);
    if (!v.ok() || *v == 0) {
      std::fprintf(stderr, "tessera bench: --seq: expected comma-separated positive integers\n");
      return kExitUsage;
    }
    seqs.push_back(*v);
  }
  ModelConfig mc = Gpt2Small();
  if (parsed->Has("--config")) {
    auto c = LoadConfig(parsed->Get("--config"), parsed->All("--set"));
    if (!c.ok()) {
      std::fprintf(stderr, "tessera bench: %s\n", c.status().ToString().c_str());
      return ExitCodeFor(c.status());
    }
    mc = c->model;
  }
  cpu::SetNumThreads(static_cast<int>(*threads));
  std::printf("machine limits (measured now, %d threads):\n", cpu::NumThreads());
  const double peak = cpu::MeasurePeakSgemmGflops();
  std::printf("  sgemm 2048^3                 %.1f GFLOP/s  (the MFU denominator, as in train)\n", peak);
  for (auto [m, n, k] : {std::tuple{256, 768, 3072}, {256, 3072, 768}, {256, 50257, 768}}) {
    std::printf("  sgemm %4d x %5d x %4d     %.1f GFLOP/s\n", m, n, k,
                cpu::MeasureSgemmGflops(m, n, k, 3));
  }
  // bf16 A, B and fp32 C on the path bf16 GEMMs take here (its line says which and why).
  std::printf("  %s\n", cpu::ActiveBf16GemmPath().description.c_str());
  const double bf16_peak = cpu::MeasurePeakBf16GemmGflops();
  std::printf("  bf16 GEMM 2048^3             %.1f GFLOP/s\n", bf16_peak);
  for (auto [m, n, k] : {std::tuple{256, 768, 3072}, {256, 3072, 768}, {1024, 768, 3072}}) {
    std::printf("  bf16 GEMM %4d x %5d x %4d %.1f GFLOP/s\n", m, n, k,
                cpu::MeasureBf16GemmGflops(m, n, k, 3));
  }
  std::printf("  memory, a += s*b             %.1f GB/s\n", MeasureUpdateBandwidth());
  const int timed = static_cast<int>(std::clamp<int64_t>(*steps, 1, 1000));
  return BenchShapes(parsed->Get("--config", "GPT-2 124M"), mc, *batch, seqs, *precisions,
                     timed, Peaks{peak, bf16_peak});
}

}  // namespace tessera::cli
