// tests/e2e/device_train_test.cc — `tessera train` with train.device: cuda, end to end through
// the real binary. Where no GPU is, the device path runs on the CPU reference dressed as a
// device (TESSERA_DEVICE_ON_HOST=1, runtime/train/compute_device.h): token ids staged into
// the model's arena, parameters and gradients crossing a DeviceMirrorStore at every unit
// boundary, the parameter state and optimizer in host memory. That path must give the cpu
// run's bits (weights and metrics) under fp32 and bf16, with accumulation and CPU offload, for
// GPT-2, Llama, an MoE and LoRA; its memory.json must be what the plan predicts. Without the seam and
// without a GPU the run refuses with the reason; the layouts a GPU run cannot take yet are
// refused at the config's keys. On a machine with a GPU the real backend's run is compared
// with the CPU's within tolerance (tests/kernels/cuda_model_test.cc has the stricter checks).
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "runtime/core/json.h"
#include "runtime/kernels/cuda_backend.h"
#include "runtime/train/config.h"
#include "runtime/train/memory_plan.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

constexpr const char* kOnHost = "TESSERA_DEVICE_ON_HOST=1 ";

CommandResult Train(const std::string& env, const std::string& args) {
  return RunCommand(env + std::string(TESSERA_BINARY) + " train " + args);
}

// The metrics without the timing fields, which differ between any two runs.
std::string LossLines(const std::string& metrics) {
  static const std::regex timing(
      "\"(step_s|tok_per_s|elapsed_s|mfu|[a-z_]*_ms)\":[^,}]*,?");
  return std::regex_replace(metrics, timing, "");
}

struct Variant {
  const char* config;
  const char* sets;
  // The cpu run's environment: the seam is the fp32 reference, so a bf16 cpu run takes the
  // fp32-compute path on bf16 storage too (else it would multiply in bf16 where it can).
  const char* cpu_env = "";
};

TEST(DeviceTrain, TheDevicePathGivesTheCpuRunsBits) {
  TempDir dir("device_bits");
  const Variant variants[] = {
      {"configs/tiny.yaml", "--set train.grad_accum_steps=2"},
      {"configs/llama-tiny.yaml", "--set precision=bf16", "TESSERA_BF16_GEMM=fp32 "},
      {"configs/moe-tiny.yaml", "--set optimizer.offload=cpu"},
      {"configs/tiny.yaml", "--set finetune.lora.rank=4"},  // frozen base: no gradients
  };
  int i = 0;
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.config);
    const std::string base = Repo(v.config) + " " + v.sets +
                             " --set train.steps=6 --set train.eval_interval=3"
                             " --set train.peak_gflops=100 --set train.out_dir=";
    const std::string cpu_dir = dir / ("cpu" + std::to_string(i));
    const std::string dev_dir = dir / ("dev" + std::to_string(i++));
    auto cpu = Train(v.cpu_env, base + cpu_dir);
    ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
    auto dev = Train(kOnHost, base + dev_dir + " --set train.device=cuda");
    ASSERT_EQ(dev.exit_code, 0) << dev.output;
    EXPECT_NE(dev.output.find("compute: cpu-as-device"), std::string::npos) << dev.output;
    const std::string weights = ReadFile(cpu_dir + "/model.safetensors");
    ASSERT_GT(weights.size(), 1000u);
    EXPECT_TRUE(weights == ReadFile(dev_dir + "/model.safetensors")) << "weights differ";
    EXPECT_EQ(LossLines(ReadFile(cpu_dir + "/metrics.jsonl")),
              LossLines(ReadFile(dev_dir + "/metrics.jsonl")));
  }
}

// The mirror's two device copies are in memory.json, as the plan books them.
TEST(DeviceTrain, MemoryJsonIsThePlansPrediction) {
  TempDir dir("device_memory");
  const std::string sets = "--set train.steps=2 --set train.device=cuda --set train.out_dir=" +
                           dir / "run";
  auto r = Train(kOnHost, Repo("configs/llama-tiny.yaml") + " " + sets);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto mem = ParseJson(ReadFile(dir / "run/memory.json"));
  ASSERT_TRUE(mem.ok());
  const JsonValue& rank = mem->Find("ranks")->items()[0];
  auto config = LoadConfig(Repo("configs/llama-tiny.yaml"),
                           {"train.steps=2", "train.device=cuda", "train.out_dir=" + dir / "run"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  // The plan of the backend that ran: under the seam the CPU kernels save T x T attention
  // probabilities, where a GPU's save row statistics (read once per process, so set before).
  setenv("TESSERA_DEVICE_ON_HOST", "1", 1);
  auto plan = PlanRankMemory(*config, 0);
  unsetenv("TESSERA_DEVICE_ON_HOST");  // the later tests' child processes must not inherit it
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const auto& [key, kind] : {std::pair{"parameters_bytes", MemoryKind::kParameters},
                                  std::pair{"gradients_bytes", MemoryKind::kGradients},
                                  std::pair{"activations_bytes", MemoryKind::kActivations},
                                  std::pair{"workspace_bytes", MemoryKind::kWorkspace}}) {
    EXPECT_EQ(static_cast<size_t>(rank.Find(key)->as_double()), plan->of(kind)) << key;
  }
}

TEST(DeviceTrain, WithoutAGpuTheRunRefusesAndSaysWhy) {
  if (CudaAvailable().ok()) GTEST_SKIP() << "a GPU is present";
  TempDir dir("device_refused");
  auto r = Train("", Repo("configs/tiny.yaml") + " --set train.device=cuda --set train.out_dir=" +
                         dir / "run");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(CudaBackendBuilt() ? "no usable CUDA device" : "no CUDA backend"),
            std::string::npos)
      << r.output;
}

TEST(DeviceTrain, LayoutsAGpuRunCannotTakeYetAreRefusedAtTheirKeys) {
  TempDir dir("device_layouts");
  WriteFile(dir / "c.yaml", "train:\n  device: cuda\nparallel:\n  tp: 2\n");
  auto r = Tessera("train " + dir / "c.yaml" + " --set train.out_dir=" + dir / "run");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("c.yaml:2:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("parallel.tp"), std::string::npos) << r.output;
  auto bad = Tessera("train " + Repo("configs/tiny.yaml") + " --set train.device=tpu");
  EXPECT_EQ(bad.exit_code, 3) << bad.output;
  EXPECT_NE(bad.output.find("cpu"), std::string::npos) << bad.output;
}

// `tessera bench gpu` runs the trainer's device path; the seam lets it run here, and without
// either a GPU or the seam it says why.
TEST(DeviceTrain, BenchGpuTimesTheDevicePathOrSaysWhyNot) {
  const std::string args = " bench gpu --config " + Repo("configs/llama-tiny.yaml") +
                           " --seq 16 --steps 1 --gemm 64";
  auto r = RunCommand(kOnHost + std::string(TESSERA_BINARY) + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"training step", "tokens/s", "GEMM 64^3", "host -> device"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  }
  if (!CudaAvailable().ok()) {
    auto no = RunCommand(std::string(TESSERA_BINARY) + args);
    EXPECT_EQ(no.exit_code, 4) << no.output;
  }
}

// With a GPU: the real backend's run follows the CPU's loss closely (fp32, 6 steps).
TEST(DeviceTrain, OnAGpuTheLossTracksTheCpuRun) {
  const Status avail = CudaAvailable();
  if (!avail.ok()) GTEST_SKIP() << avail.ToString();
  TempDir dir("device_gpu");
  const std::string base = Repo("configs/tiny.yaml") +
                           " --set train.steps=6 --set train.peak_gflops=100 --set train.out_dir=";
  auto cpu = Train("", base + dir / "cpu");
  auto gpu = Train("", base + dir / "gpu" + " --set train.device=cuda");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  auto last = [&](const std::string& run) {
    const std::string text = ReadFile(dir / (run + "/metrics.jsonl"));
    const size_t end = text.find_last_not_of('\n');
    const size_t start = text.rfind('\n', end);
    auto j = ParseJson(text.substr(start == std::string::npos ? 0 : start + 1));
    return j.ok() ? j->Find("loss")->as_double() : -1.0;
  };
  EXPECT_NEAR(last("gpu"), last("cpu"), 1e-4 * last("cpu"));
}

}  // namespace
}  // namespace tessera::testing
