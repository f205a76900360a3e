// tools/cmd_bench_moe.cc — `tessera bench moe`: one mixture-of-experts sublayer (models/moe.h)
// forward + backward at typical expert sizes, on this process (ep = 1): tokens/s with balanced
// and with skewed routing, and the grouped expert GEMMs alone (one GEMM per expert over its
// rows, the routing's real row counts) as GFLOP/s beside the sgemm peak measured in the same
// run (target: >= 70 %). The all-to-all that expert parallelism will dispatch tokens with is
// measured by `tessera bench comm` (beside raw MPI_Alltoallv).
//
// Skewed routing: a routing bias of +100 on expert 0, so every token picks it first: it gets
// all N tokens, the others share the remaining N(k-1). Owns nothing beyond one run's buffers.
// Thread-safety: main thread only.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "models/block.h"
#include "models/moe.h"
#include "runtime/core/exit_codes.h"
#include "runtime/kernels/cpu/bench.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/kernels/cpu_backend.h"
#include "runtime/kernels/measuring_backend.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"

namespace tessera::cli {
namespace {

std::vector<float> RandomVector(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// One sublayer's weights and gradients in host buffers.
struct Weights {
  std::vector<float> router, fc, out, g_router, g_fc, g_out;
  MoeWeights w() const { return {router.data(), nullptr, nullptr, nullptr, nullptr, fc.data(), nullptr, out.data(), nullptr}; }
  MoeGrads g() {
    MoeGrads r;
    r.router = g_router.data();
    r.fc_w = g_fc.data();
    r.out_w = g_out.data();
    return r;
  }
};

// Forward + backward of the sublayer on `be` with the given arenas.
void Pass(const MoeLayer& layer, Backend& be, Arena& act, Arena& ws, const float* h,
          float* out, float* d_h, const float* d_out, Weights& w, MoeLayerState& state,
          MoeSaved& saved) {
  act.Release(0);
  ws.Release(0);
  StepContext step{&be, &act, &ws, 1.0f};
  layer.Forward(step, act, act, h, out, saved, w.w(), state, false);
  layer.Backward(step, h, d_out, d_h, saved, saved.act_out, saved.shared_act_out, w.w(), w.g());
}

// The grouped GEMMs of one forward + backward with the plan's row counts: per expert, fc and
// out projections and their backward (input and weight gradients).
void GroupedGemms(Backend& be, const MoeDims& d, const std::vector<int64_t>& offset,
                  std::vector<float>& x, std::vector<float>& fc, std::vector<float>& act,
                  std::vector<float>& y, Weights& w) {
  const int64_t C = d.C, Fe = d.Fe, FC = d.fc_dim();
  ForEachExpertRows(offset, [&](int64_t e, int64_t b, int64_t n) {
    be.LinearForward(fc.data() + b * FC, x.data() + b * C, w.fc.data() + e * FC * C, nullptr, n, C, FC);
    be.LinearForward(y.data() + b * C, act.data() + b * Fe, w.out.data() + e * C * Fe, nullptr, n, Fe, C);
    be.LinearBackward(act.data() + b * Fe, w.g_out.data() + e * C * Fe, nullptr, y.data() + b * C,
                      act.data() + b * Fe, w.out.data() + e * C * Fe, n, Fe, C);
    be.LinearBackward(x.data() + b * C, w.g_fc.data() + e * FC * C, nullptr, fc.data() + b * FC,
                      x.data() + b * C, w.fc.data() + e * FC * C, n, C, FC);
  });
}

}  // namespace

int RunBenchMoe(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera bench moe [--tokens N] [--hidden C] [--expert-ffn F] [--experts E]\n"
        "                         [--top-k K] [--steps S] [--threads T]\n\n"
        "One mixture-of-experts sublayer (SwiGLU experts, softmax top-k routing, dropless) on\n"
        "this process: forward + backward time and tokens/s with balanced routing and with\n"
        "skewed routing (every token's first choice is expert 0), and the grouped expert GEMMs\n"
        "alone, as GFLOP/s beside the sgemm peak measured in the same run (min of S timed\n"
        "passes after one warm-up). The all-to-all of expert parallelism: tessera bench comm.\n\n"
        "  --tokens N      tokens per call (default 1024)\n"
        "  --hidden C      model width (default 1024)\n"
        "  --expert-ffn F  each expert's MLP width (default 1408: Mixtral's 14336/4096 ratio\n"
        "                  at C=1024, halved like a fine-grained expert)\n"
        "  --experts E     routed experts (default 8)\n"
        "  --top-k K       experts per token (default 2)\n"
        "  --steps S       timed passes (default 5, 1 to 1000)\n"
        "  --threads T     threads (default 2; 0 = all cores)\n");
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench moe",
                          {"--tokens", "--hidden", "--expert-ffn", "--experts", "--top-k", "--steps", "--threads"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  if (!parsed->positional.empty()) {
    std::fprintf(stderr, "tessera bench moe: unexpected argument '%s'\n", parsed->positional[0].c_str());
    return kExitUsage;
  }
  struct Flag {
    const char* name;
    const char* fallback;
    int64_t min, max;
    int64_t value = 0;
  } flags[] = {{"--tokens", "1024", 1, 1 << 20},   {"--hidden", "1024", 8, 1 << 16},
               {"--expert-ffn", "1408", 8, 1 << 17}, {"--experts", "8", 2, 1024},
               {"--top-k", "2", 1, 1024},           {"--steps", "5", 1, 1000},
               {"--threads", "2", 0, 4096}};
  for (Flag& f : flags) {
    auto v = ParseIntFlag(f.name, parsed->Get(f.name, f.fallback));
    if (!v.ok() || *v < f.min || *v > f.max) {
      std::fprintf(stderr, "tessera bench moe: %s must be an integer in [%lld, %lld]\n", f.name,
                   static_cast<long long>(f.min), static_cast<long long>(f.max));
      return kExitUsage;
    }
    f.value = *v;
  }
  const int64_t N = flags[0].value, C = flags[1].value, Fe = flags[2].value, E = flags[3].value;
  const int64_t K = flags[4].value, steps = flags[5].value;
  if (K > E) {
    std::fprintf(stderr, "tessera bench moe: --top-k %lld exceeds --experts %lld\n",
                 static_cast<long long>(K), static_cast<long long>(E));
    return kExitUsage;
  }
  cpu::SetNumThreads(static_cast<int>(flags[6].value));

  ModelConfig mc;
  mc.family = ModelFamily::kLlama;
  mc.hidden_size = C;
  mc.num_heads = 1;
  mc.moe.num_experts = E;
  mc.moe.top_k = K;
  mc.moe.expert_ffn_size = Fe;
  const MoeDims d = MoeDims::Of(mc, 1, N, DType::kF32);
  const MoeLayer layer(d);
  Weights w;
  w.router = RandomVector(static_cast<size_t>(E * C), 1, 0.02f);
  w.fc = RandomVector(static_cast<size_t>(E * d.fc_dim() * C), 2, 0.02f);
  w.out = RandomVector(static_cast<size_t>(E * C * Fe), 3, 0.02f);
  w.g_router.assign(w.router.size(), 0.0f);
  w.g_fc.assign(w.fc.size(), 0.0f);
  w.g_out.assign(w.out.size(), 0.0f);
  const std::vector<float> h = RandomVector(static_cast<size_t>(N * C), 4, 1.0f);
  const std::vector<float> d_out = RandomVector(static_cast<size_t>(N * C), 5, 1e-3f);
  std::vector<float> out(h.size()), d_h(h.size());

  // The arenas' sizes, from a measuring pass (as a model sizes its own).
  MeasuringBackend measuring;
  Arena m_act = measuring.MakeArena(MemoryKind::kActivations, 0, nullptr);
  Arena m_ws = measuring.MakeArena(MemoryKind::kWorkspace, 0, nullptr);
  MoeLayerState state(E);
  MoeSaved saved;
  Pass(layer, measuring, m_act, m_ws, nullptr, nullptr, nullptr, nullptr, w, state, saved);
  CpuBackend be;
  Arena act = be.MakeArena(MemoryKind::kActivations, m_act.peak(), nullptr);
  Arena ws = be.MakeArena(MemoryKind::kWorkspace, m_ws.peak(), nullptr);

  const double peak = cpu::MeasurePeakSgemmGflops();
  std::printf("tessera bench moe: %lld tokens x %lld wide, %lld SwiGLU experts of width %lld, "
              "top-%lld, %d thread%s; sgemm peak %.1f GFLOP/s (measured now)\n",
              static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(E),
              static_cast<long long>(Fe), static_cast<long long>(K), cpu::NumThreads(),
              cpu::NumThreads() == 1 ? "" : "s", peak);
  // The expert GEMMs' FLOPs per pass: forward 2 * rows * (fc + out) weights, backward twice that.
  const double gemm_flops = 6.0 * static_cast<double>(N * K) *
                            static_cast<double>(d.fc_dim() * C + C * Fe);
  std::printf("  %-9s %11s %12s %14s %16s %9s\n", "routing", "layer ms", "tokens/s",
              "imbalance", "grouped GEMMs", "of peak");
  for (const bool skewed : {false, true}) {
    std::fill(state.bias.begin(), state.bias.end(), 0.0f);
    if (skewed) state.bias[0] = 100.0f;
    std::vector<double> layer_s, gemm_s;
    std::vector<float> x(static_cast<size_t>(d.max_rows() * C), 0.01f);
    std::vector<float> fc(static_cast<size_t>(d.max_rows() * d.fc_dim())), a(static_cast<size_t>(d.max_rows() * Fe), 0.01f);
    std::vector<float> y(static_cast<size_t>(d.max_rows() * C), 0.01f);
    for (int64_t i = 0; i <= steps; ++i) {
      const auto t0 = BenchClock::now();
      Pass(layer, be, act, ws, h.data(), out.data(), d_h.data(), d_out.data(), w, state, saved);
      const double s1 = Since(t0);
      const auto t1 = BenchClock::now();
      GroupedGemms(be, d, saved.offset, x, fc, a, y, w);
      const double s2 = Since(t1);
      if (i == 0) continue;  // warm-up
      layer_s.push_back(s1);
      gemm_s.push_back(s2);
    }
    std::vector<int64_t> rows(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) rows[static_cast<size_t>(e)] = saved.offset[e + 1] - saved.offset[e];
    const double mean = static_cast<double>(N * K) / static_cast<double>(E);
    const double imbalance = static_cast<double>(*std::max_element(rows.begin(), rows.end())) / mean;
    const Stats ls = Summarise(layer_s), gs = Summarise(gemm_s);
    const double gflops = gemm_flops / gs.min / 1e9;
    std::printf("  %-9s %11.2f %12.0f %14.2f %10.1f GF/s %8.0f%%\n", skewed ? "skewed" : "balanced",
                ls.min * 1e3, static_cast<double>(N) / ls.min, imbalance, gflops,
                100.0 * gflops / peak);
  }
  std::printf("  (layer: router, top-k, plan, gather, grouped GEMMs, SwiGLU, combine, forward and\n"
              "   backward; grouped GEMMs: the same per-expert GEMMs alone, min of %lld passes)\n",
              static_cast<long long>(steps));
  return kExitOk;
}

}  // namespace tessera::cli
