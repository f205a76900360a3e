// tools/cmd_train.cc — `tessera train`, `tessera eval` and `tessera export`: the commands that
// load a config and a model.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "models/hf_export.h"
#include "runtime/core/exit_codes.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/supervisor/rank_env.h"
#include "runtime/train/config.h"
#include "runtime/train/memory_plan.h"
#include "runtime/train/trainer.h"
#include "runtime/train/world.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/config_command.h"
#include "tools/output_path.h"
#include "tools/signal_link.h"
#include "tools/supervised_rank.h"

namespace tessera::cli {
namespace {

// Config-time failures happen identically on every rank, and every rank prints them: when the
// first rank exits, mpirun kills the others at once, so a message left to rank 0 alone can be
// lost (seen in tests/multirank). The user may read the same line up to N times.
int FailOnEveryRank(const Status& s, ExitPhase phase) { return Fail("train", s, phase); }

}  // namespace

int RunTrain(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera train CONFIG [--set key.path=value ...] [--strict-env]\n\n"
        "Trains the model CONFIG describes and writes to\n"
        "train.out_dir: metrics.jsonl (one line per step), model.safetensors (final weights,\n"
        "Hugging Face names), config.yaml (the effective config), env.json (the environment),\n"
        "memory.json (each rank's reserved memory by kind) and sgemm_peak.txt (the measured\n"
        "MFU denominator, reused by a resume on the same host).\n\n"
        "  --set key.path=value   override any config key, e.g. --set train.steps=50\n"
        "                         --set model.recompute=full --set optimizer.lr=1e-3 (repeatable)\n\n"
        "Data parallelism: run under mpirun with parallel.dp = number of ranks, e.g.\n"
        "  mpirun -np 4 tessera train configs/tiny.yaml --set parallel.dp=4 --set parallel.zero=1\n"
        "train.micro_batch_size is per rank; the global batch is micro x accum x dp sequences.\n"
        "parallel.zero 0..3 shards optimizer state, gradients and (3) parameters over the dp\n"
        "ranks; precision bf16|fp16 stores parameters and activations in 16 bits with fp32\n"
        "master weights (fp16: dynamic loss scaling, overflowing steps skipped and reported);\n"
        "bf16 GEMMs run through oneDNN where the CPU has bf16 instructions (the banner's\n"
        "'compute:' line says which; TESSERA_BF16_GEMM=fp32 keeps them in fp32):\n"
        "  mpirun -np 2 tessera train configs/tiny.yaml --set parallel.dp=2 \\\n"
        "      --set parallel.zero=3 --set precision=bf16\n\n"
        "Tensor and pipeline parallelism: the world is pp x dp x ep x tp ranks. parallel.tp splits\n"
        "every layer's heads and MLP columns (and the vocabulary) across ranks, with\n"
        "parallel.sequence_parallel=true for 1/tp of the activations; parallel.pp splits the\n"
        "layers into stages fed with train.grad_accum_steps micro-batches per step\n"
        "(parallel.pipeline_schedule 1f1b | gpipe | interleaved with parallel.virtual_stages):\n"
        "  mpirun -np 8 tessera train configs/tiny.yaml --set model.num_layers=4 \\\n"
        "      --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=2 \\\n"
        "      --set parallel.zero=1 --set train.grad_accum_steps=4\n"
        "Mixture of experts (model.moe, configs/moe-*.yaml): parallel.ep splits each MoE\n"
        "block's experts over ep ranks, which dispatch tokens to them with all-to-all:\n"
        "  mpirun -np 4 tessera train configs/moe-tiny.yaml --set parallel.ep=2 \\\n"
        "      --set parallel.dp=2 --set parallel.zero=1\n"
        "Checkpoints load under any layout.\n\n"
        "Optimizer state on disk: optimizer.offload=nvme keeps each rank's AdamW state (m, v\n"
        "and fp32 master weights) in a file under optimizer.offload_dir, streamed through a\n"
        "pool of optimizer.offload_buffer_mb (default 64) with io_uring and O_DIRECT, with any\n"
        "layout and the same bits as in memory:\n"
        "  tessera train configs/gpt2-124m.yaml --set optimizer.offload=nvme \\\n"
        "      --set optimizer.offload_dir=/local/nvme/opt\n\n"
        "Progress lines show step, loss (and its distance to the entropy floor on the built-in\n"
        "corpus), learning rate, gradient norm, tokens/s, MFU against the measured GEMM peak\n"
        "and ETA. Example:\n"
        "  tessera train configs/tiny.yaml --set train.steps=100\n\n"
        "Environment: every checkpoint records the environment fingerprint (`tessera env`:\n"
        "git commit, compiler, BLAS, oneDNN, MPI, NCCL/CUDA, CPU model and features, host).\n"
        "Resuming or init_from a checkpoint prints what differs; --strict-env (or\n"
        "train.strict_env: true) refuses one saved by other code, compiler, libraries or CPU\n"
        "(exit 4). Where it ran (host, cores, threads, kernel) may differ.\n\n"
        "Signals (standalone): SIGTERM or SIGINT saves a checkpoint at the next step boundary\n"
        "(with checkpoint.dir) and exits 7 — resume=auto continues from it; a second one stops at\n"
        "once; SIGUSR1 saves a checkpoint now and training goes on. Slurm and Kubernetes preempt\n"
        "this way.\n\n"
        "Non-finite training: a NaN/Inf loss or gradient norm stops the run before the update\n"
        "(train.on_nonfinite: stop, exit 10; nothing non-finite is ever checkpointed) or skips\n"
        "it (skip, at most train.max_nonfinite_skips in a row). train.spike_zscore > 0 reports\n"
        "loss spikes (and with train.spike_action: skip leaves their update out).\n\n"
        "Exit codes: 0 done, 1 failure a restart may cure (also: the final checkpoint did not\n"
        "commit), 2 bad command line, 3 bad config, 4 bad data/weights/output path, 5 no usable\n"
        "checkpoint, 6 a collective timed out, 7 stopped on request after saving, 10 non-finite.\n\n"
        "Under `tessera launch` (which sets TESSERA_CONTROL_PORT and the other TESSERA_CONTROL_*\n"
        "variables) each rank reports to the supervisor: heartbeats with its step and phase,\n"
        "checkpoint commits and catalog records (the supervisor then writes the catalog, not\n"
        "the rank); it saves when asked to and, asked to stop, saves, waits for the commit and\n"
        "exits with code 7. Without those variables it runs standalone as described above.\n");
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "train", {"--set"}, {"--strict-env"});
  if (!parsed.ok()) return FailUsage("train", parsed.status());
  if (auto bad = PositionalError(*parsed, "train")) return FailUsage("train", *bad);
  // Under mpirun every rank loads the config and checks the layout on its own.
  auto config = LoadFromArgs(*parsed);
  if (!config.ok()) return FailOnEveryRank(config.status(), ExitPhase::kConfig);
  // The layout must fit in what a rank may hold, as the plan books the trainer's own
  // construction (runtime/train/memory_plan.h): checked before any work or collective, a
  // config error (exit 3) naming what fits. The plan is the config's alone; the default limit
  // is this host's (its memory over its ranks), so on unlike hosts a rank that refuses ends
  // the job for all (mpirun stops the rest when one exits).
  if (Status fits = CheckMemoryFits(*config, RankMemoryLimit(*config)); !fits.ok()) {
    return FailOnEveryRank(fits, ExitPhase::kConfig);
  }
  // MPI starts here only if the job needs it (mpirun, or parallel.* > 1); the world-size
  // check runs first, on the launcher's variables, so no rank waits for a peer that quit.
  auto world = World::Create(*config);
  if (!world.ok()) return FailOnEveryRank(world.status(), ExitPhase::kConfig);
  const bool multi = (*world)->size() > 1;
  // Under `tessera launch`: connect to the supervisor (null when standalone). A rank that
  // cannot is told to try again (a launcher race, not the config's fault).
  auto link = SupervisedRank::FromEnvironment((*world)->rank(), (*world)->size());
  if (!link.ok()) {
    std::fprintf(stderr, "tessera train: %s\n", link.status().ToString().c_str());
    if (multi) AbortJob(link.status(), kExitRestartable);
    return kExitRestartable;
  }
  SupervisedRank* supervised = link->get();
  // Standalone: preemption by signal (signal_link.h); under the supervisor it owns preemption.
  std::unique_ptr<SignalLink> signals = supervised == nullptr ? SignalLink::Install() : nullptr;
  RunLink* run_link = supervised != nullptr ? static_cast<RunLink*>(supervised) : signals.get();
  // The supervisor learns the exit code from the bye before the process ends (and before
  // AbortJob, which may kill this rank first).
  auto say_bye = [&](int code) {
    if (supervised != nullptr) (void)supervised->Shutdown(code);
    return code;
  };
  auto trainer = Trainer::Create(*config, world->get(), run_link);
  if (!trainer.ok()) {
    // A rank that fails alone would leave its peers waiting in the next collective.
    const int code = say_bye(ExitCodeFor(trainer.status(), ExitPhase::kInput));
    if (multi) AbortJob(trainer.status(), code);
    return Fail("train", trainer.status(), ExitPhase::kInput);
  }
  auto summary = (*trainer)->Run((*world)->is_root() ? stdout : nullptr);
  if (!summary.ok()) {
    // Ends every rank with the same exit code a single rank would return.
    const int code = say_bye(ExitCodeFor(summary.status(), ExitPhase::kRun));
    if (multi) AbortJob(summary.status(), code);
    return Fail("train", summary.status(), ExitPhase::kRun);
  }
  return say_bye(summary->stopped ? kExitStopped : kExitOk);
}

int RunEval(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera eval CONFIG [--init-from PATH] [--data PATH] [--batches N] [--set k=v ...]\n\n"
        "Prints the mean loss (nats/token) of the model on held-out data.\n\n"
        "  --init-from PATH   weights to evaluate: a .safetensors file, a\n"
        "                     model.safetensors.index.json, or a directory holding either\n"
        "                     (default: the config's init_from, else <train.out_dir>/model.safetensors)\n"
        "  --data PATH        token shards to evaluate on: a file, a directory of *.bin files, or\n"
        "                     a pattern such as data/book/val_*.bin (default: data.val, or the\n"
        "                     built-in corpus's held-out split); their directory needs the\n"
        "                     index.json that `tessera data tokenize` or `data index` writes\n"
        "  --batches N        micro-batches to average over (default: train.eval_batches)\n"
        "  --set key=value    override config keys, as for train\n");
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "eval", {"--set", "--init-from", "--data", "--batches"}, {});
  if (!parsed.ok()) return FailUsage("eval", parsed.status());
  if (auto bad = PositionalError(*parsed, "eval")) return FailUsage("eval", *bad);
  auto config = LoadFromArgs(*parsed);
  if (!config.ok()) return Fail("eval", config.status(), ExitPhase::kConfig);
  Config c = *config;
  c.init_from = parsed->Get("--init-from", c.init_from.empty() ? c.train.out_dir + "/model.safetensors"
                                                              : c.init_from);
  if (parsed->Has("--data")) {
    c.data.source = DataSource::kShards;
    c.data.val_path = parsed->Get("--data");
    if (c.data.train_path.empty()) c.data.train_path = c.data.val_path;
  }
  if (parsed->Has("--batches")) {
    auto b = ParseIntFlag("--batches", parsed->Get("--batches"));
    if (!b.ok() || *b == 0) return FailUsage("eval", InvalidArgument("tessera eval: --batches must be >= 1"));
    c.train.eval_batches = *b;
  }
  (void)cpu::SetThreadsForConfig(c.train.threads);  // same threads, same bits as the eval inside training
  MemoryTracker memory;
  auto model = BuildModel(c, &memory);
  if (!model.ok()) return Fail("eval", model.status(), ExitPhase::kInput);
  if (!DataLoader::HasSplit(c.data, Split::kVal)) {
    return Fail("eval", NotFound("no held-out data: pass --data PATH or set data.val"), ExitPhase::kInput);
  }
  auto data = DataLoader::Open(c.data, Split::kVal, c.model.vocab_size, c.train.seq_len, c.train.seed);
  if (!data.ok()) return Fail("eval", data.status(), ExitPhase::kInput);
  auto loss = EvaluateLoss(**model, **data, c.train.eval_batches);
  if (!loss.ok()) return Fail("eval", loss.status(), ExitPhase::kRun);
  std::printf("eval: weights %s\n", c.init_from.c_str());
  std::printf("eval: %lld batches x %lld x %lld tokens\n", static_cast<long long>(c.train.eval_batches),
              static_cast<long long>(c.train.micro_batch_size), static_cast<long long>(c.train.seq_len));
  std::printf("loss %.6f\n", *loss);
  return kExitOk;
}

int RunExport(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera export CONFIG --init-from PATH --out FILE.safetensors|DIR\n"
        "                      [--dtype f32|bf16|f16] [--max-shard-size SIZE]\n\n"
        "Loads the weights at PATH into the model CONFIG describes (checking every name and\n"
        "shape) and writes them with Hugging Face tensor names and layouts (GPT-2 Conv1D\n"
        "weights transposed back to (in, out)).\n\n"
        "  --init-from PATH   .safetensors file, model.safetensors.index.json, or a directory\n"
        "  --out FILE.safetensors  one file (written to FILE.tmp, fsynced, then renamed)\n"
        "  --out DIR          a model directory as save_pretrained writes it: shards\n"
        "                     model-0000N-of-0000M.safetensors with model.safetensors.index.json\n"
        "                     (one model.safetensors when everything fits) and config.json when\n"
        "                     a Hugging Face model type computes exactly this model (gpt2, llama,\n"
        "                     mistral, qwen2, mixtral, qwen2_moe); DIR must be new or empty,\n"
        "                     and appears\n"
        "                     whole or not at all\n"
        "  --max-shard-size SIZE  largest shard, e.g. 5GB (the default), 500MB, 2GiB\n"
        "  --dtype T          element type of the output (default f32)\n\n"
        "Example:\n"
        "  tessera export configs/finetune.yaml --init-from runs/ft/model.safetensors \\\n"
        "      --set init_from=~/models/Qwen2-0.5B --out ~/models/Qwen2-0.5B-ft --dtype bf16\n");
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "export", {"--set", "--init-from", "--out", "--dtype", "--max-shard-size"}, {});
  if (!parsed.ok()) return FailUsage("export", parsed.status());
  if (!parsed->Has("--init-from") || !parsed->Has("--out")) {
    return FailUsage("export", InvalidArgument("tessera export: --init-from and --out are required "
                                               "(see tessera export --help)"));
  }
  DType dtype = DType::kF32;
  if (parsed->Has("--dtype") && (!ParseDType(parsed->Get("--dtype"), &dtype) || dtype == DType::kI32)) {
    return FailUsage("export", InvalidArgument("tessera export: --dtype must be f32, bf16 or f16"));
  }
  if (auto bad = PositionalError(*parsed, "export")) return FailUsage("export", *bad);
  uint64_t shard_bytes = kHfDefaultShardBytes;
  if (parsed->Has("--max-shard-size")) {
    auto size = ParseShardSize(parsed->Get("--max-shard-size"));
    if (!size.ok()) return FailUsage("export", size.status());
    shard_bytes = *size;
  }
  auto config = LoadFromArgs(*parsed);
  if (!config.ok()) return Fail("export", config.status(), ExitPhase::kConfig);
  std::vector<std::string> inputs = WeightsInputs(parsed->Get("--init-from"));
  inputs.push_back(parsed->positional[0]);  // the config
  if (Status s = CheckExportOutput(parsed->Get("--out"), inputs); !s.ok()) {
    return Fail("export", s, ExitPhase::kInput);
  }
  (void)cpu::SetThreadsForConfig(config->train.threads);
  MemoryTracker memory;
  auto model = BuildModel(*config, &memory, parsed->Get("--init-from"));
  if (!model.ok()) return Fail("export", model.status(), ExitPhase::kInput);
  const std::string out = parsed->Get("--out");
  HfExtras extras;  // the MoE blocks' routing bias, as loaded
  for (const MoeLayerState& layer : (*model)->moe_layers()) extras.moe_bias.push_back(layer.bias);
  auto written = ExportHf(out, (*model)->config(), (*model)->parameters(), dtype, &extras, shard_bytes);
  if (!written.ok()) return Fail("export", written.status(), ExitPhase::kRun);
  std::printf("exported %lld tensors (%.2fM parameters, %s) to %s\n",
              static_cast<long long>((*model)->parameters().size()), (*model)->num_params() / 1e6,
              std::string(DTypeName(dtype)).c_str(), written->c_str());
  return kExitOk;
}

}  // namespace tessera::cli
