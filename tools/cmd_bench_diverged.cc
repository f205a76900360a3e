// tools/cmd_bench_diverged.cc — `tessera bench diverged`: the step time of a model whose
// training diverged, beside the same model healthy, each with subnormal floats flushed (what
// training does, runtime/kernels/cpu/threads.h) and kept (IEEE gradual underflow, as before
// the flushing), so the cost of subnormals on this CPU is measured, not assumed.
//
// The diverged weights are made the way a user makes them: AdamW steps at a too-large learning
// rate from the same init. A timed step is forward + backward + clip + AdamW at lr 0 (so the
// weights never move and every round does the same work); the four variants run interleaved,
// one step each per round, so they share the machine's load. Printed beside each: the loss and
// the share of subnormal gradients after the step, the evidence of what the CPU had to handle.
// Owns the buffers of one run. Thread-safety: main thread only.
#include <algorithm>
#include <time.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "optimizer/adamw.h"
#include "optimizer/grad_clip.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/random.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/config.h"
#include "runtime/train/env_info.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"

namespace tessera::cli {
namespace {

constexpr int kMaxRounds = 1000;
constexpr int kMaxDivergeSteps = 100000;

// configs/tiny.yaml's model and micro-batch, the default job (the binary knows no repo path).
struct Shape {
  ModelConfig model;
  int64_t B = 16, T = 64;
  AdamWConfig adamw;
};

Shape TinyShape() {
  Shape s;
  s.model.family = ModelFamily::kGpt2;
  s.model.vocab_size = 256;
  s.model.max_seq_len = 64;
  s.model.num_layers = 2;
  s.model.hidden_size = 128;
  s.model.num_heads = 4;
  s.model.tie_embeddings = true;
  s.adamw.weight_decay = 0.0f;
  return s;
}

struct Variant {
  const char* weights;            // "healthy" | "diverged"
  bool flush;                     // subnormals flushed (the default) or kept (IEEE)
  const std::vector<float>* params;
  std::unique_ptr<AdamW> adamw;   // its own moments, which subnormals reach too
  std::vector<double> step_s;
  std::vector<double> cpu_s;      // process CPU time of the step: steadier on a shared machine
  double loss = 0;
  double subnormal_grads = 0;     // share of the gradient buffer after the first step
};

double SubnormalShare(const float* x, int64_t n) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(x[i]);
    count += ((b & 0x7f800000u) == 0 && (b & 0x007fffffu) != 0) ? 1 : 0;
  }
  return static_cast<double>(count) / static_cast<double>(n);
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string CpuName() {
  for (const auto& [key, value] : EnvironmentFingerprint())
    if (key == "cpu") return value;
  return "unknown";
}

// One training step without moving the weights; returns the mean loss.
double Step(Transformer& model, AdamW& adamw, const std::vector<int32_t>& in,
            const std::vector<int32_t>& tgt, float clip, float lr) {
  model.ZeroGrads();
  const double loss = model.ForwardBackward(in.data(), tgt.data(), 1.0f);
  float* grads = model.flat_grads().f32();
  if (clip > 0) ClipGradNorm(grads, model.num_params(), clip);
  adamw.Step(model.flat_params().f32(), grads, lr);
  return loss;
}

std::vector<ParamRange> WholeModel(Transformer& model) {
  std::vector<ParamRange> r;
  for (const Parameter& p : model.parameters()) r.push_back({p.offset, p.numel(), false, p.name()});
  return r;
}

void PrintTable(std::vector<Variant>& variants) {
  // The ratio uses the CPU median: on a shared machine the wall time mostly measures the load.
  std::printf("  %-9s %-18s %10s %10s %11s %10s %12s %11s\n", "weights", "subnormals", "loss",
              "subn grads", "step min", "median", "CPU median", "CPU ratio");
  double healthy_cpu[2] = {0, 0};
  for (Variant& v : variants) {
    const Stats s = Summarise(v.step_s), c = Summarise(v.cpu_s);
    if (std::strcmp(v.weights, "healthy") == 0) healthy_cpu[v.flush] = c.median;
    const double ratio = healthy_cpu[v.flush] > 0 ? c.median / healthy_cpu[v.flush] : 0.0;
    std::printf("  %-9s %-18s %10.2f %9.2f%% %8.1f ms %7.1f ms %9.1f ms %10.2fx\n", v.weights,
                v.flush ? "flushed (default)" : "IEEE (kept)", v.loss, 100.0 * v.subnormal_grads,
                s.min * 1e3, s.median * 1e3, c.median * 1e3, ratio);
  }
}

}  // namespace

int RunBenchDiverged(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera bench diverged [--config FILE] [--set key=value] [--steps N] [--threads N]\n"
        "                              [--lr LR] [--diverge-steps K]\n\n"
        "Step time of a diverged model beside the same model healthy, each with subnormal floats\n"
        "flushed to zero (what training does) and kept (IEEE gradual underflow, as before). The\n"
        "diverged weights come from K AdamW steps at learning rate LR from the same init; a timed\n"
        "step is forward + backward + clip + AdamW at lr 0 (the weights stay), the four variants\n"
        "interleaved round by round: wall time (min, median), process CPU time (median, all\n"
        "threads: steadier on a shared machine) and its ratio to the healthy model's in the same\n"
        "mode. Also printed: each variant's loss and its share of subnormal gradients, i.e. what\n"
        "the CPU had to compute with.\n\n"
        "  --config FILE      the model, micro-batch and AdamW settings of FILE (default: those of\n"
        "                     configs/tiny.yaml)\n"
        "  --set key=value    override keys of --config\n"
        "  --steps N          timed rounds after one warm-up round (default 10, at most %d)\n"
        "  --threads N        threads for OpenBLAS and kernels (default 2; 0 = all cores)\n"
        "  --lr LR            learning rate of the diverging steps (default 10)\n"
        "  --diverge-steps K  diverging AdamW steps (default 40)\n",
        kMaxRounds);
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench diverged",
                          {"--config", "--set", "--steps", "--threads", "--lr", "--diverge-steps"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  if (!parsed->positional.empty()) {
    std::fprintf(stderr, "tessera bench diverged: unexpected argument '%s' (see tessera bench diverged --help)\n",
                 parsed->positional[0].c_str());
    return kExitUsage;
  }
  auto rounds = ParseIntFlag("--steps", parsed->Get("--steps", "10"));
  auto threads = ParseIntFlag("--threads", parsed->Get("--threads", "2"));
  auto diverge_steps = ParseIntFlag("--diverge-steps", parsed->Get("--diverge-steps", "40"));
  auto lr = ParseNumberFlag("--lr", parsed->Get("--lr", "10"));
  for (const auto* r : {&rounds, &threads, &diverge_steps}) {
    if (!r->ok()) {
      std::fprintf(stderr, "tessera bench diverged: %s\n", r->status().ToString().c_str());
      return kExitUsage;
    }
  }
  if (!lr.ok()) {
    std::fprintf(stderr, "tessera bench diverged: %s\n", lr.status().ToString().c_str());
    return kExitUsage;
  }
  if (*rounds < 1 || *rounds > kMaxRounds || *diverge_steps > kMaxDivergeSteps) {
    std::fprintf(stderr, "tessera bench diverged: --steps must be 1..%d and --diverge-steps 0..%d\n",
                 kMaxRounds, kMaxDivergeSteps);
    return kExitUsage;
  }
  if (parsed->Has("--set") && !parsed->Has("--config")) {
    std::fprintf(stderr, "tessera bench diverged: --set overrides keys of --config, and there is "
                         "no --config\n");
    return kExitUsage;
  }
  Shape shape = TinyShape();
  std::string label = "configs/tiny.yaml's model";
  if (parsed->Has("--config")) {
    auto c = LoadConfig(parsed->Get("--config"), parsed->All("--set"));
    if (!c.ok()) {
      std::fprintf(stderr, "tessera bench diverged: %s\n", c.status().ToString().c_str());
      return ExitCodeFor(c.status());
    }
    shape.model = c->model;
    shape.B = c->train.micro_batch_size;
    shape.T = c->train.seq_len;
    shape.adamw = c->optimizer;
    label = parsed->Get("--config");
  }
  cpu::SetNumThreads(static_cast<int>(*threads));

  MemoryTracker memory;
  auto made = Transformer::Create(shape.model, shape.B, shape.T, &memory);
  if (!made.ok()) {
    std::fprintf(stderr, "tessera bench diverged: %s\n", made.status().ToString().c_str());
    return kExitBadConfig;
  }
  Transformer& model = **made;
  const int64_t n = model.num_params();
  model.InitRandom(1234);
  std::vector<int32_t> in(shape.B * shape.T), tgt(in.size());
  Rng rng(StreamKey(7, 2));
  for (auto& t : in) t = static_cast<int32_t>(rng.NextBelow(shape.model.vocab_size));
  for (auto& t : tgt) t = static_cast<int32_t>(rng.NextBelow(shape.model.vocab_size));
  float* params = model.flat_params().f32();
  const std::vector<float> healthy(params, params + n);

  // Diverge in the default (flushing) mode, as `tessera train` would.
  AdamW diverging(shape.adamw, n, WholeModel(model), nullptr);
  double loss = 0;
  for (int64_t k = 0; k < *diverge_steps; ++k)
    loss = Step(model, diverging, in, tgt, shape.adamw.grad_clip, static_cast<float>(*lr));
  const std::vector<float> diverged(params, params + n);

  std::printf("tessera bench diverged: %s (%.2fM params), batch %lld x seq %lld, %d threads\n",
              label.c_str(), n / 1e6, static_cast<long long>(shape.B),
              static_cast<long long>(shape.T), cpu::NumThreads());
  std::printf("  CPU: %s\n", CpuName().c_str());
  std::printf("  diverged weights: %lld AdamW steps at lr %g (grad clip %g), last loss %.2f\n",
              static_cast<long long>(*diverge_steps), *lr, shape.adamw.grad_clip, loss);
  std::printf("  step = forward + backward + clip + AdamW at lr 0; min and median of %lld rounds "
              "after one warm-up, variants interleaved\n", static_cast<long long>(*rounds));

  std::vector<Variant> variants;
  for (const auto* w : {&healthy, &diverged})
    for (bool flush : {true, false})
      variants.push_back({w == &healthy ? "healthy" : "diverged", flush, w,
                          std::make_unique<AdamW>(shape.adamw, n, WholeModel(model), nullptr),
                          {}, {}, 0.0, 0.0});
  for (int64_t r = 0; r <= *rounds; ++r) {
    for (Variant& v : variants) {
      std::memcpy(params, v.params->data(), n * sizeof(float));
      cpu::SetFlushSubnormals(v.flush);
      const double cpu0 = ProcessCpuSeconds();
      const auto t = BenchClock::now();
      v.loss = Step(model, *v.adamw, in, tgt, shape.adamw.grad_clip, 0.0f);
      const double s = Since(t), cpu = ProcessCpuSeconds() - cpu0;
      if (r == 0) {
        v.subnormal_grads = SubnormalShare(model.flat_grads().f32(), n);
      } else {
        v.step_s.push_back(s);
        v.cpu_s.push_back(cpu);
      }
    }
  }
  cpu::SetFlushSubnormals(true);
  PrintTable(variants);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace tessera::cli
