// tools/cmd_bench_moe.cc — `tessera bench moe`: one mixture-of-experts sublayer (models/moe.h)
// forward + backward at typical expert sizes: tokens/s with balanced and with skewed routing,
// and the grouped expert GEMMs alone (one GEMM per expert segment, the routing's real row
// counts) as GFLOP/s beside the sgemm peak measured in the same run (target: >= 70 %).
// Under mpirun with P ranks it runs expert parallelism (ep = P, models/expert_parallel.h):
// each rank routes its own tokens over all experts and holds E/P of them; the layer's time is
// the slowest rank's, tokens/s counts every rank's tokens, and the run also times the
// all-to-all of a balanced dispatch (every rank's N*k rows of C floats) beside raw
// MPI_Alltoallv with the same counts (target: >= 90 %).
//
// Skewed routing: a routing bias of +100 on expert 0, so every token picks it first: it gets
// all N tokens, the others share the remaining N(k-1); under ep the rank holding expert 0 is
// the hot one. Owns nothing beyond one run's buffers. Thread-safety: main thread only.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/bench.h"
#include "comm/mpi.h"
#include "models/block.h"
#include "models/expert_parallel.h"
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
  MoeWeights w() const {
    MoeWeights r;
    r.router = router.data();
    r.fc_w = fc.data();
    r.out_w = out.data();
    return r;
  }
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

// The grouped GEMMs of one forward + backward with the plan's row counts: per local expert
// (s.segment: its rows, from every source under ep), fc and out projections and their backward
// (input and weight gradients).
void GroupedGemms(Backend& be, const MoeDims& d, const std::vector<int64_t>& segment,
                  std::vector<float>& x, std::vector<float>& fc, std::vector<float>& act,
                  std::vector<float>& y, Weights& w) {
  const int64_t C = d.C, Fe = d.Fe, FC = d.fc_dim();
  ForEachExpertRows(segment, [&](int64_t e, int64_t b, int64_t n) {
    be.LinearForward(fc.data() + b * FC, x.data() + b * C, w.fc.data() + e * FC * C, nullptr, n, C, FC);
    be.LinearForward(y.data() + b * C, act.data() + b * Fe, w.out.data() + e * C * Fe, nullptr, n, Fe, C);
    be.LinearBackward(act.data() + b * Fe, w.g_out.data() + e * C * Fe, nullptr, y.data() + b * C,
                      act.data() + b * Fe, w.out.data() + e * C * Fe, n, Fe, C);
    be.LinearBackward(x.data() + b * C, w.g_fc.data() + e * FC * C, nullptr, fc.data() + b * FC,
                      x.data() + b * C, w.fc.data() + e * FC * C, n, C, FC);
  });
}

// In place over the world (null: one process): element-wise maxima or sums of n floats.
void Reduce(Communicator* world, float* x, int64_t n, ReduceOp op) {
  if (world == nullptr) return;
  Tensor t(x, DType::kF32, {n});
  if (Status st = world->AllReduce(t, op)->Wait(); !st.ok()) AbortJob(st);
}

}  // namespace

int RunBenchMoe(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera bench moe [--tokens N] [--hidden C] [--expert-ffn F] [--experts E]\n"
        "                         [--top-k K] [--steps S] [--threads T]\n"
        "       tools/dev/mpirun.sh -np P build/tessera bench moe ...   (expert parallel, ep = P)\n\n"
        "One mixture-of-experts sublayer (SwiGLU experts, softmax top-k routing, dropless):\n"
        "forward + backward time and tokens/s with balanced routing and with skewed routing\n"
        "(every token's first choice is expert 0), and the grouped expert GEMMs alone, as\n"
        "GFLOP/s beside the sgemm peak measured in the same run (min of S timed passes after one\n"
        "warm-up). Under mpirun every rank routes its own N tokens and holds E/P experts; token\n"
        "rows travel by all-to-all, and the run adds the all-to-all of a balanced dispatch beside\n"
        "raw MPI_Alltoallv with the same counts.\n\n"
        "  --tokens N      tokens per call and rank (default 1024)\n"
        "  --hidden C      model width (default 1024)\n"
        "  --expert-ffn F  each expert's MLP width (default 1408: Mixtral's 14336/4096 ratio\n"
        "                  at C=1024, halved like a fine-grained expert)\n"
        "  --experts E     routed experts (default 8)\n"
        "  --top-k K       experts per token (default 2)\n"
        "  --steps S       timed passes (default 5, 1 to 1000)\n"
        "  --threads T     threads per rank (default 2, 1 under mpirun; 0 = all cores)\n");
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
  // Under mpirun: expert parallelism over every rank (MPI only then).
  const LauncherEnv launcher = ReadLauncherEnv();
  const int P = launcher.under_launcher ? launcher.size : 1;
  if (E % P != 0) {
    // Every rank says it: mpirun kills the others as soon as the first one exits, so a message
    // left to rank 0 alone is often never printed.
    std::fprintf(stderr, "tessera bench moe: --experts %lld do not divide among %d ranks (ep)\n",
                 static_cast<long long>(E), P);
    return kExitUsage;
  }
  std::unique_ptr<MpiSession> session;
  std::unique_ptr<Communicator> world;
  std::unique_ptr<ExpertParallel> ep;
  if (P > 1) {
    auto s = MpiSession::Init(nullptr, nullptr);
    if (!s.ok()) AbortJob(s.status());
    session = std::move(*s);
    auto w = session->World(CommOptions{});
    if (!w.ok()) AbortJob(w.status());
    world = std::move(*w);
    ep = std::make_unique<ExpertParallel>(world.get());
  }
  const bool printer = launcher.rank == 0;
  // One thread per rank unless told: the ranks share the cores.
  cpu::SetNumThreads(static_cast<int>(parsed->Has("--threads") || P == 1 ? flags[6].value : 1));

  ModelConfig mc;
  mc.family = ModelFamily::kLlama;
  mc.hidden_size = C;
  mc.num_heads = 1;
  mc.moe.num_experts = E;
  mc.moe.top_k = K;
  mc.moe.expert_ffn_size = Fe;
  MoeDims d = MoeDims::Of(mc, 1, N, DType::kF32);
  d.ep = ep.get();
  const int64_t El = d.local_experts();
  const MoeLayer layer(d);
  Weights w;
  w.router = RandomVector(static_cast<size_t>(E * C), 1, 0.02f);
  w.fc = RandomVector(static_cast<size_t>(El * d.fc_dim() * C), 2, 0.02f);
  w.out = RandomVector(static_cast<size_t>(El * C * Fe), 3, 0.02f);
  w.g_router.assign(w.router.size(), 0.0f);
  w.g_fc.assign(w.fc.size(), 0.0f);
  w.g_out.assign(w.out.size(), 0.0f);
  const std::vector<float> h = RandomVector(static_cast<size_t>(N * C), 4 + launcher.rank, 1.0f);
  const std::vector<float> d_out = RandomVector(static_cast<size_t>(N * C), 5, 1e-3f);
  std::vector<float> out(h.size()), d_h(h.size());

  // The arenas' sizes, from a measuring pass (as a model sizes its own).
  MeasuringBackend measuring;
  Arena m_act = measuring.MakeArena(MemoryKind::kActivations, 0, nullptr);
  Arena m_ws = measuring.MakeArena(MemoryKind::kWorkspace, 0, nullptr);
  MoeLayerState state(E);
  MoeSaved saved;
  if (ep) ep->set_measuring(true);
  Pass(layer, measuring, m_act, m_ws, nullptr, nullptr, nullptr, nullptr, w, state, saved);
  if (ep) ep->set_measuring(false);
  CpuBackend be;
  Arena act = be.MakeArena(MemoryKind::kActivations, m_act.peak(), nullptr);
  Arena ws = be.MakeArena(MemoryKind::kWorkspace, m_ws.peak(), nullptr);

  float peak = static_cast<float>(cpu::MeasurePeakSgemmGflops());
  Reduce(world.get(), &peak, 1, ReduceOp::kSum);  // every rank's, measured at once
  if (printer) {
    std::printf("tessera bench moe: %lld tokens x %lld wide per rank, %lld SwiGLU experts of width "
                "%lld, top-%lld, ep=%d (%lld experts per rank), %d thread%s per rank; sgemm peak "
                "%.1f GFLOP/s (all ranks, measured now)\n",
                static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(E),
                static_cast<long long>(Fe), static_cast<long long>(K), P,
                static_cast<long long>(El), cpu::NumThreads(), cpu::NumThreads() == 1 ? "" : "s",
                peak);
    std::printf("  %-9s %11s %12s %14s %16s %9s\n", "routing", "layer ms", "tokens/s",
                "imbalance", "grouped GEMMs", "of peak");
  }
  const int64_t Mx = d.max_expert_rows();
  for (const bool skewed : {false, true}) {
    std::fill(state.bias.begin(), state.bias.end(), 0.0f);
    if (skewed) state.bias[0] = 100.0f;
    // Per timed pass: the layer's and the GEMMs' seconds (the slowest rank's), then the rows
    // this rank's experts computed (summed over ranks).
    std::vector<float> layer_s, gemm_s;
    std::vector<float> x(static_cast<size_t>(Mx * C), 0.01f);
    std::vector<float> fc(static_cast<size_t>(Mx * d.fc_dim())), a(static_cast<size_t>(Mx * Fe), 0.01f);
    std::vector<float> y(static_cast<size_t>(Mx * C), 0.01f);
    for (int64_t i = 0; i <= steps; ++i) {
      const auto t0 = BenchClock::now();
      Pass(layer, be, act, ws, h.data(), out.data(), d_h.data(), d_out.data(), w, state, saved);
      const double s1 = Since(t0);
      const auto t1 = BenchClock::now();
      GroupedGemms(be, d, saved.segment, x, fc, a, y, w);
      const double s2 = Since(t1);
      if (i == 0) continue;  // warm-up
      layer_s.push_back(static_cast<float>(s1));
      gemm_s.push_back(static_cast<float>(s2));
    }
    Reduce(world.get(), layer_s.data(), steps, ReduceOp::kMax);
    Reduce(world.get(), gemm_s.data(), steps, ReduceOp::kMax);
    // Every expert's rows over the job (this rank's tokens' assignments, summed), and the
    // rows the experts computed (the GEMMs' work).
    std::vector<float> rows(static_cast<size_t>(E) + 1);
    for (int64_t e = 0; e < E; ++e) rows[static_cast<size_t>(e)] = static_cast<float>(saved.offset[e + 1] - saved.offset[e]);
    rows[static_cast<size_t>(E)] = static_cast<float>(saved.segment.back());
    Reduce(world.get(), rows.data(), E + 1, ReduceOp::kSum);
    const double mean = static_cast<double>(N * K * P) / static_cast<double>(E);
    const double imbalance = *std::max_element(rows.begin(), rows.end() - 1) / mean;
    const double layer_min = *std::min_element(layer_s.begin(), layer_s.end());
    const double gemm_min = *std::min_element(gemm_s.begin(), gemm_s.end());
    // FLOPs of all ranks' expert GEMMs: forward 2 * rows * (fc + out) weights, backward twice.
    const double gflops = 6.0 * rows.back() * static_cast<double>(d.fc_dim() * C + C * Fe) /
                          gemm_min / 1e9;
    if (printer) {
      std::printf("  %-9s %11.2f %12.0f %14.2f %10.1f GF/s %8.0f%%\n",
                  skewed ? "skewed" : "balanced", layer_min * 1e3,
                  static_cast<double>(N * P) / layer_min, imbalance, gflops, 100.0 * gflops / peak);
    }
  }
  if (printer) {
    std::printf("  (layer: router, top-k, plan, %sgrouped GEMMs, SwiGLU, combine, forward and\n"
                "   backward; grouped GEMMs: the same per-expert GEMMs alone; min of %lld passes, "
                "the slowest rank's)\n",
                P > 1 ? "gather, dispatch and return all-to-alls, " : "gather, ",
                static_cast<long long>(steps));
  }
  if (P > 1) {
    // The dispatch's all-to-all between two raw MPI_Alltoallv runs with the same counts (the
    // better raw figure is the reference, as in tessera bench comm); 50 iterations each: one
    // is a fraction of a millisecond.
    const int64_t bytes = N * K * C * static_cast<int64_t>(sizeof(float));
    std::vector<CommBenchResult> r;
    for (int k = 0; k < 3; ++k) {
      auto one = k == 1 ? BenchAllToAll(*world, bytes, 50) : BenchRawMpiAllToAll(*world, bytes, 50);
      if (!one.ok()) AbortJob(one.status());
      r.push_back(*one);
    }
    const double raw = std::max(r[0].bus_gbps, r[2].bus_gbps);
    if (printer) {
      std::printf("  all-to-all of a balanced dispatch (%lld rows x %lld floats per rank):\n"
                  "    %s\n    %s\n    %s\n"
                  "    tessera's all-to-all at %.0f%% of raw MPI_Alltoallv's bus bandwidth (the "
                  "better run; target >= 90%%)\n",
                  static_cast<long long>(N * K), static_cast<long long>(C),
                  r[0].ToString().c_str(), r[1].ToString().c_str(), r[2].ToString().c_str(),
                  100.0 * r[1].bus_gbps / raw);
    }
  }
  return kExitOk;
}

}  // namespace tessera::cli
