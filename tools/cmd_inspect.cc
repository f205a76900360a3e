// tools/cmd_inspect.cc — `tessera inspect HF_DIR`: what Tessera makes of a Hugging Face model
// directory before any training: the model section its config.json maps to, the weights its
// safetensors hold, and — for a model Tessera cannot build as described — everything it lacks.
#include <cstdio>
#include <filesystem>
#include <map>

#include "models/hf_config.h"
#include "models/safetensors.h"
#include "runtime/core/exit_codes.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace tessera::cli {
namespace {

// The safetensors beside config.json: an index (sharded) or one model.safetensors.
Result<std::unique_ptr<SafetensorsCheckpoint>> OpenWeights(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir / "model.safetensors.index.json", ec)) {
    return SafetensorsCheckpoint::OpenIndex((dir / "model.safetensors.index.json").string());
  }
  return SafetensorsCheckpoint::OpenFile((dir / "model.safetensors").string());
}

void PrintWeights(const std::filesystem::path& dir) {
  auto weights = OpenWeights(dir);
  if (!weights.ok()) {
    std::printf("weights: %s\n", weights.status().ToString().c_str());
    return;
  }
  int64_t params = 0;
  std::map<std::string, int64_t> by_dtype;
  for (const auto& [name, e] : (*weights)->entries()) {
    params += e.info->numel();
    by_dtype[std::string(DTypeName(e.info->dtype))] += e.info->numel();
  }
  std::printf("weights: %zu tensors, %lld parameters (%.2f %s) in %zu file(s):",
              (*weights)->entries().size(), static_cast<long long>(params),
              params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M",
              (*weights)->files().size());
  for (const auto& [dtype, n] : by_dtype) std::printf(" %s %lld", dtype.c_str(), static_cast<long long>(n));
  std::printf("\n");
}

}  // namespace

int RunInspect(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera inspect HF_DIR\n\n"
        "Reads a Hugging Face model directory (config.json, model.safetensors or\n"
        "model.safetensors.index.json with its shards) and prints the model section Tessera\n"
        "maps config.json to (each key with the field it came from), the weights (tensors,\n"
        "parameters, dtypes, files) and whether Tessera builds exactly this model. If not, it\n"
        "lists everything missing — each operator or field with what Tessera has instead —\n"
        "and exits 3. Families read: %s.\n\n"
        "Training from it: tessera train configs/finetune.yaml --set init_from=HF_DIR (the\n"
        "YAML then needs no model shape; a model.* key it gives must agree with config.json).\n",
        SupportedHfModelTypes().c_str());
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "inspect", {}, {});
  if (parsed.ok() && parsed->positional.size() != 1) {
    parsed = InvalidArgument("tessera inspect: expected one HF_DIR (see tessera inspect --help)");
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  const std::string dir = parsed->positional[0];
  auto intake = ReadHfConfig(dir);
  if (!intake.ok()) {
    std::fprintf(stderr, "tessera inspect: %s\n", intake.status().ToString().c_str());
    return ExitCodeFor(intake.status(), ExitPhase::kInput);
  }
  std::printf("%s: model_type \"%s\"\n", intake->path.c_str(), intake->model_type.c_str());
  std::printf("%s", DescribeHfFields(*intake).c_str());
  PrintWeights(std::filesystem::path(intake->path).parent_path());
  if (!intake->missing.empty()) {
    std::printf("not supported: Tessera cannot build this model as config.json describes it. Missing:\n");
    for (const std::string& m : intake->missing) std::printf("  - %s\n", m.c_str());
    return kExitBadConfig;
  }
  std::printf("supported: tessera train CONFIG --set init_from=%s builds exactly this model\n",
              dir.c_str());
  return kExitOk;
}

}  // namespace tessera::cli
