// tools/cmd_validate.cc — `tessera validate CONFIG`: one fixed input through the model, every
// layer's output written to a safetensors file, and (--reference) compared layer by layer
// with the same file from an independent implementation (runtime/train/validate.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "runtime/core/dtype.h"
#include "models/hf_weights.h"
#include "models/lora.h"
#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/kernels/cpu_bf16_backend.h"
#include "runtime/train/trainer.h"
#include "runtime/train/validate.h"
#include "tools/commands.h"
#include "tools/config_command.h"
#include "tools/output_path.h"

namespace tessera::cli {
namespace {

void PrintHelp() {
  std::printf(
      "usage: tessera validate CONFIG [--init-from PATH] [--out FILE.safetensors]\n"
      "                        [--reference REF.safetensors] [--tolerance REL]\n"
      "                        [--batch B] [--seq T] [--seed S] [--set key=value ...]\n\n"
      "Runs one fixed input through the model CONFIG describes, with the weights at PATH\n"
      "(default: the config's init_from), in the config's precision, and records every\n"
      "layer's output: embeddings, each block's residual stream after attention\n"
      "(layers.N.attention) and after its MLP or experts (layers.N.mlp), the final norm and\n"
      "the logits. --out writes them, with the input_ids, to a safetensors file an independent\n"
      "implementation can read and answer in kind (tests/e2e/reference/hf_reference.py\n"
      "--layers). --reference compares with such a file, on ITS input_ids: per layer the\n"
      "largest error relative to the layer's largest value, and the first layer beyond\n"
      "--tolerance, by how much and where (batch, position, column, both values). Exit 0\n"
      "when every layer agrees, 11 when one diverges.\n\n"
      "  --tolerance REL  default 1e-4 in fp32, 2e-2 in bf16/fp16 (activations rounded)\n"
      "  --batch B, --seq T  the input's shape without --reference (default 2 x min(32,\n"
      "                   model.max_seq_len)); --seed S its tokens (default 1234)\n\n"
      "Example:\n"
      "  tessera validate configs/finetune.yaml --set init_from=~/models/Qwen2-0.5B --out t.st\n"
      "  python3 tests/e2e/reference/hf_reference.py --family llama --weights ~/models/Qwen2-0.5B \\\n"
      "      --heads 14 --kv-heads 2 --eps 1e-6 --rope-theta 1e6 --layers t.st --layers-out ref.st\n"
      "  tessera validate configs/finetune.yaml --set init_from=~/models/Qwen2-0.5B --reference ref.st\n");
}

struct ValidateArgs {
  int64_t B = 2, T = 0;
  uint64_t seed = 1234;
  double tolerance = 0;
};

Result<ValidateArgs> ParseNumbers(const ParsedArgs& p, const Config& c) {
  ValidateArgs v;
  v.T = std::min<int64_t>(32, c.model.max_seq_len);
  if (p.Has("--batch")) {
    ASSIGN_OR_RETURN(v.B, ParseIntFlag("--batch", p.Get("--batch")));
  }
  if (p.Has("--seq")) {
    ASSIGN_OR_RETURN(v.T, ParseIntFlag("--seq", p.Get("--seq")));
  }
  if (p.Has("--seed")) {
    ASSIGN_OR_RETURN(int64_t s, ParseIntFlag("--seed", p.Get("--seed")));
    v.seed = static_cast<uint64_t>(s);
  }
  if (v.B < 1 || v.T < 1 || v.T > c.model.max_seq_len) {
    return InvalidArgument("tessera validate: --batch must be >= 1 and --seq in [1, "
                           "model.max_seq_len=" + std::to_string(c.model.max_seq_len) + "]");
  }
  v.tolerance = c.precision == Precision::kFp32 ? 1e-4 : 2e-2;
  if (p.Has("--tolerance")) {
    char* end = nullptr;
    const std::string text = p.Get("--tolerance");
    v.tolerance = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(v.tolerance > 0)) {
      return InvalidArgument("tessera validate: --tolerance must be a positive number, got '" +
                             text + "'");
    }
  }
  return v;
}

}  // namespace

int RunValidate(const Args& args) {
  if (WantsHelp(args)) {
    PrintHelp();
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "validate", {"--set", "--init-from", "--out", "--reference",
                                             "--tolerance", "--batch", "--seq", "--seed"}, {});
  if (!parsed.ok()) return FailUsage("validate", parsed.status());
  if (auto bad = PositionalError(*parsed, "validate")) return FailUsage("validate", *bad);
  auto config = LoadFromArgs(*parsed);
  if (!config.ok()) return Fail("validate", config.status(), ExitPhase::kConfig);
  Config c = *config;
  auto numbers = ParseNumbers(*parsed, c);
  if (!numbers.ok()) return FailUsage("validate", numbers.status());
  ValidateArgs v = *numbers;
  const std::string weights = parsed->Get("--init-from", c.init_from);
  if (weights.empty()) {
    return Fail("validate", InvalidArgument("no weights: pass --init-from PATH or set init_from "
                                            "(random weights validate nothing)"),
                ExitPhase::kInput);
  }
  if (!parsed->Has("--out") && !parsed->Has("--reference")) {
    return FailUsage("validate", InvalidArgument("tessera validate: give --out, --reference or "
                                                 "both (see tessera validate --help)"));
  }
  std::vector<int32_t> ids;
  if (parsed->Has("--reference")) {  // the reference's input, whatever --batch / --seq say
    auto read = ReadValidationInput(parsed->Get("--reference"), c.model.vocab_size, &v.B, &v.T);
    if (!read.ok()) return Fail("validate", read.status(), ExitPhase::kInput);
    ids = *read;
  } else {
    ids = FixedValidationInput(v.B, v.T, c.model.vocab_size, v.seed);
  }
  if (parsed->Has("--out")) {
    Status s = CheckOutputPath(parsed->Get("--out"), WeightsInputs(weights));
    if (!s.ok()) return Fail("validate", s, ExitPhase::kInput);
  }

  (void)cpu::SetThreadsForConfig(c.train.threads);
  const DType dtype = PrecisionDType(c.precision);
  ComputeBackendChoice compute = ChooseComputeBackend(dtype);
  ModelOptions mo;
  mo.backend = compute.backend.get();
  mo.activation_dtype = dtype;
  c.model = BaseModelConfig(c.model);  // a LoRA run's weights file is its merged model
  c.model.recompute = RecomputePolicy::kNone;  // every sublayer's output kept
  c.train.micro_batch_size = v.B;
  c.train.seq_len = v.T;
  MemoryTracker memory;
  auto model = Transformer::Create(c.model, v.B, v.T, &memory, mo);
  if (!model.ok()) return Fail("validate", model.status(), ExitPhase::kConfig);
  HfExtras extras;
  Status loaded = LoadHfWeights(weights, c.model, (*model)->parameters(), &extras);
  if (!loaded.ok()) return Fail("validate", loaded, ExitPhase::kInput);
  SetMoeBias(c.model, **model, extras.moe_bias);
  if (dtype != DType::kF32) {  // stored in the precision, as training stores them
    Tensor flat = (*model)->flat_params();
    cpu::RoundTo(dtype, flat.f32(), flat.numel());
  }
  std::vector<int32_t> targets(ids.size(), -1);
  (*model)->Forward(ids.data(), targets.data());
  const std::vector<Transformer::LayerOutput> outputs = (*model)->LayerOutputs();
  std::printf("validate: %s, %s, %lld x %lld tokens, %zu layer outputs (%s)\n", weights.c_str(),
              std::string(DTypeName(dtype)).c_str(), static_cast<long long>(v.B),
              static_cast<long long>(v.T), outputs.size(), compute.description.c_str());
  if (parsed->Has("--out")) {
    Status s = WriteLayerFile(parsed->Get("--out"), ids, v.B, v.T, outputs, "tessera validate");
    if (!s.ok()) return Fail("validate", s, ExitPhase::kRun);
    std::printf("validate: wrote %s\n", parsed->Get("--out").c_str());
  }
  if (!parsed->Has("--reference")) return kExitOk;
  auto diffs = CompareWithReference(outputs, parsed->Get("--reference"), v.tolerance);
  if (!diffs.ok()) return Fail("validate", diffs.status(), ExitPhase::kInput);
  std::printf("%s", DescribeLayerDiffs(*diffs, v.T, v.tolerance).c_str());
  for (const LayerDiff& d : *diffs) {
    if (!d.within) return kExitDiverged;
  }
  return kExitOk;
}

}  // namespace tessera::cli
