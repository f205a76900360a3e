// tools/cmd_bench_parallel.cc — `tessera bench pipeline` and `tessera bench tp`: the figures
// of model parallelism.
//
// pipeline (under mpirun, world size = pp): trains a GPT-2-shaped model for a few steps under
// each schedule (gpipe, 1f1b, interleaved with 2 chunks per rank) with the real trainer and
// pipeline executor, and reports each rank's measured idle share of the pipelined part of the
// step (1 - time inside forward/backward passes / wall time of the passes and their waits,
// steps after the first) beside the schedule's theoretical bubble (p-1)/(m+p-1), or
// (p-1)/(v*m+p-1) interleaved. The measured share also contains the point-to-point transfers
// and the stages' imbalance (the last stage also runs the LM head, twice: its backward
// recomputes it), so it is an upper bound of the bubble itself.
// tp (one process): the activation and workspace memory one tensor-parallel rank reserves for
// a micro-batch (the model's measuring pass, no arithmetic), at tp 1, 2 and 4 with and without
// sequence parallelism and per recompute policy: what sequence parallelism saves per rank.
// Thread-safety: main thread only.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/fake_communicator.h"
#include "comm/mpi.h"
#include "models/transformer.h"
#include "runtime/core/check.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/memory.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/config.h"
#include "runtime/train/grad_sync.h"
#include "runtime/train/memory_plan.h"
#include "runtime/train/pipeline_schedule.h"
#include "runtime/train/trainer.h"
#include "runtime/train/world.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"

namespace tessera::cli {
namespace {

// A store for models that are only created (their measuring pass makes no store calls).
class UnusedStore final : public ParamStore {
 public:
  const float* Acquire(int) override { TESSERA_CHECK_MSG(false, "bench: unexpected Acquire"); return nullptr; }
  void Release(int) override {}
  float* Grads(int) override { TESSERA_CHECK_MSG(false, "bench: unexpected Grads"); return nullptr; }
  void GradsDone(int) override {}
};

double MiB(size_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

}  // namespace

int RunBenchPipeline(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: mpirun -np P tessera bench pipeline [--layers 8] [--hidden 256] [--vocab 1024]\n"
        "                                 [--micro 8] [--batch 2] [--seq 128] [--steps 4]\n\n"
        "Trains a GPT-2-shaped model (--layers blocks, --hidden wide, 64-wide heads, --vocab\n"
        "tokens) split into P pipeline stages for --steps steps of --micro micro-batches of\n"
        "--batch x --seq tokens, under each schedule: gpipe, 1f1b and interleaved (2 chunks per\n"
        "rank). Prints each rank's measured idle share of the pipelined passes (steps after the\n"
        "first) beside the theoretical bubble (p-1)/(m+p-1), interleaved (p-1)/(2m+p-1). The\n"
        "measured share includes transfers and stage imbalance. Needs P >= 2; --layers must\n"
        "divide by 2P and --micro by P for the interleaved run (it is skipped otherwise).\n");
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench pipeline",
                          {"--layers", "--hidden", "--micro", "--batch", "--seq", "--steps",
                           "--vocab"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  int64_t v[7];
  const char* names[7] = {"--layers", "--hidden", "--micro", "--batch", "--seq", "--steps",
                          "--vocab"};
  const char* defaults[7] = {"8", "256", "8", "2", "128", "4", "1024"};
  for (int i = 0; i < 7; ++i) {
    auto x = ParseIntFlag(names[i], parsed->Get(names[i], defaults[i]));
    if (!x.ok() || *x < 1) {
      std::fprintf(stderr, "tessera bench pipeline: %s: expected a positive integer\n", names[i]);
      return kExitUsage;
    }
    v[i] = *x;
  }
  const int64_t layers = v[0], hidden = v[1], micro = v[2], batch = v[3], seq = v[4], steps = v[5];
  const int64_t vocab = v[6];
  const LauncherEnv launcher = ReadLauncherEnv();
  const int p = launcher.size;
  if (p < 2) {
    std::fprintf(stderr,
                 "tessera bench pipeline: needs >= 2 ranks, one per stage: mpirun -np 2 tessera "
                 "bench pipeline\n");
    return kExitUsage;
  }
  const bool root = launcher.rank == 0;
  struct Run {
    const char* schedule;
    int chunks;
  };
  std::vector<Run> runs = {{"gpipe", 1}, {"1f1b", 1}};
  if (layers % (2 * p) == 0 && micro % p == 0) runs.push_back({"interleaved", 2});
  std::unique_ptr<World> world;
  FILE* devnull = std::fopen("/dev/null", "w");
  if (root) {
    std::printf("pipeline bubble: %d stages, %lld layers x %lld wide, vocabulary %lld, %lld "
                "micro-batches of %lld x %lld tokens, %lld steps (first not counted)\n",
                p, static_cast<long long>(layers), static_cast<long long>(hidden),
                static_cast<long long>(vocab),
                static_cast<long long>(micro), static_cast<long long>(batch),
                static_cast<long long>(seq), static_cast<long long>(steps));
    std::printf("  %-12s %8s %10s %10s   %s\n", "schedule", "theory", "measured", "step",
                "idle share per rank");
  }
  for (const Run& run : runs) {
    char yaml[1024];
    std::snprintf(yaml, sizeof yaml,
                  "model: {family: gpt2, vocab_size: %lld, max_seq_len: %lld, num_layers: %lld, "
                  "hidden_size: %lld, num_heads: %lld}\n"
                  "parallel: {pp: %d, pipeline_schedule: %s, virtual_stages: %d}\n"
                  "train: {steps: %lld, micro_batch_size: %lld, seq_len: %lld, "
                  "grad_accum_steps: %lld, log_interval: 1000, threads: 1, "
                  "out_dir: /tmp/tessera-bench-pipeline}\n",
                  static_cast<long long>(vocab), static_cast<long long>(seq),
                  static_cast<long long>(layers), static_cast<long long>(hidden),
                  static_cast<long long>(std::max<int64_t>(1, hidden / 64)),
                  p, run.schedule, run.chunks, static_cast<long long>(steps),
                  static_cast<long long>(batch), static_cast<long long>(seq),
                  static_cast<long long>(micro));
    auto config = LoadConfigFromText(yaml, "bench pipeline");
    if (!config.ok()) {
      if (root) std::fprintf(stderr, "tessera bench pipeline: %s\n", config.status().ToString().c_str());
      return kExitUsage;
    }
    if (!world) {
      auto w = World::Create(*config);
      if (!w.ok()) {
        std::fprintf(stderr, "tessera bench pipeline: %s\n", w.status().ToString().c_str());
        return kExitUsage;
      }
      world = std::move(*w);
    }
    Status fits = CheckMemoryFits(*config, RankMemoryLimit(*config));  // as tessera train does
    auto trainer = fits.ok() ? Trainer::Create(*config, world.get()) : Result<std::unique_ptr<Trainer>>(fits);
    if (!trainer.ok()) {
      std::fprintf(stderr, "tessera bench pipeline: %s\n", trainer.status().ToString().c_str());
      AbortJob(trainer.status(), kExitRestartable);
    }
    auto summary = (*trainer)->Run(devnull);
    if (!summary.ok()) {
      std::fprintf(stderr, "tessera bench pipeline: %s\n", summary.status().ToString().c_str());
      AbortJob(summary.status(), kExitRestartable);
    }
    const PipelineStats* st = (*trainer)->pipeline_stats();
    const double step = st->steps > 1 ? st->total_step_seconds / static_cast<double>(st->steps - 1) : 0;
    auto all = AllGatherDoubles(world->world(), {st->mean_idle_fraction(), step});
    if (!all.ok()) AbortJob(all.status(), kExitRestartable);
    if (root) {
      double mean = 0, slowest = 0;
      std::string per_rank;
      for (int r = 0; r < p; ++r) {
        mean += (*all)[2 * r] / p;
        slowest = std::max(slowest, (*all)[2 * r + 1]);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.1f%%", r ? " " : "", 100 * (*all)[2 * r]);
        per_rank += buf;
      }
      const PipelineSchedule s = config->parallel.pipeline_schedule;
      std::printf("  %-12s %7.1f%% %9.1f%% %8.1f ms   %s\n", run.schedule,
                  100 * TheoreticalBubble(s, p, static_cast<int>(micro), run.chunks), 100 * mean,
                  1e3 * slowest, per_rank.c_str());
      std::fflush(stdout);
    }
  }
  std::fclose(devnull);
  return kExitOk;
}

int RunBenchTp(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera bench tp [--config FILE] [--set key=value ...]\n\n"
        "Activation and workspace memory one tensor-parallel rank reserves for a micro-batch\n"
        "(train.micro_batch_size x train.seq_len) of the model (default: GPT-2 124M at 4 x 256),\n"
        "at tp 1, 2 and 4 (where the heads divide), with and without sequence parallelism, per\n"
        "recompute policy. From the model's measuring pass: no arithmetic, one process.\n");
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench tp", {"--config", "--set"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  Result<Config> config = Status::Ok();
  if (parsed->Has("--config")) {
    config = LoadConfig(parsed->Get("--config", ""), parsed->All("--set"));
  } else {
    config = LoadConfigFromText(
        "model: {family: gpt2, vocab_size: 50257, max_seq_len: 1024, num_layers: 12, "
        "hidden_size: 768, num_heads: 12}\ntrain: {micro_batch_size: 4, seq_len: 256}\n",
        "GPT-2 124M");
  }
  if (!config.ok()) {
    std::fprintf(stderr, "tessera bench tp: %s\n", config.status().ToString().c_str());
    return kExitUsage;
  }
  const ModelConfig base = config->model;
  const int64_t B = config->train.micro_batch_size, T = config->train.seq_len;
  std::printf("tensor-parallel memory per rank: %s, micro-batch %lld x %lld (reserved by the "
              "measuring pass)\n", ModelFamilyName(base.family), static_cast<long long>(B),
              static_cast<long long>(T));
  std::printf("  %-10s %3s %5s %14s %14s %10s\n", "recompute", "tp", "SP", "activations",
              "workspace", "vs tp 1");
  UnusedStore store;
  for (RecomputePolicy policy :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    ModelConfig m = base;
    m.recompute = policy;
    double one = 0;
    for (int tp : {1, 2, 4}) {
      if (m.num_heads % tp != 0 || m.kv_heads() % tp != 0 || m.ffn_size() % tp != 0) continue;
      for (bool sp : {false, true}) {
        if (tp == 1 && sp) continue;
        if (sp && (B * T) % tp != 0) continue;
        auto hub = FakeHub::Create(tp);
        std::unique_ptr<Communicator> comm = hub->Connect(0, CommOptions{});
        MemoryTracker memory;
        ModelOptions o;
        o.store = &store;
        o.tp = tp > 1 ? comm.get() : nullptr;
        o.sequence_parallel = sp;
        auto model = Transformer::Create(m, B, T, &memory, o);
        if (!model.ok()) {
          std::fprintf(stderr, "tessera bench tp: %s\n", model.status().ToString().c_str());
          return kExitUsage;
        }
        const double act = MiB(memory.reserved(MemoryKind::kActivations));
        const double ws = MiB(memory.reserved(MemoryKind::kWorkspace));
        if (tp == 1) one = act;
        std::printf("  %-10s %3d %5s %10.1f MiB %10.1f MiB %9.2fx\n", RecomputePolicyName(policy),
                    tp, sp ? "on" : "off", act, ws, one > 0 ? act / one : 0.0);
      }
    }
  }
  return kExitOk;
}

}  // namespace tessera::cli
