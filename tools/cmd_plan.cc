// tools/cmd_plan.cc — `tessera plan MODEL [CLUSTER]`: which layout (dp x tp x pp x ep, ZeRO,
// recompute, offload, micro-batch) trains MODEL fastest on CLUSTER and fits, with each rank's
// memory by kind as the trainer would reserve it (runtime/train/memory_plan.h) and the
// predicted step time (runtime/plan/step_time.h). `--layout` predicts the config's own layout
// instead; `--emit FILE` writes the chosen layout as a config `tessera train` takes.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "models/param_layout.h"
#include "runtime/core/file_util.h"
#include "runtime/kernels/cpu_bf16_backend.h"
#include "runtime/core/json.h"
#include "runtime/kernels/cpu/bench.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/plan/search.h"
#include "runtime/train/config_emit.h"
#include "tools/cmd_bench.h"
#include "tools/commands.h"
#include "tools/config_command.h"

namespace tessera::cli {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

constexpr double kGiB = 1073741824.0;

// The disk under `dir` as the optimizer's offload file uses it: 64 MiB written and read back
// with O_DIRECT in 4 MiB blocks (falling back to buffered I/O where O_DIRECT is refused);
// bytes/s of the write and the read together (0 when the directory is not writable).
double MeasureDiskBandwidth(const std::string& dir) {
  const std::string path = dir + "/.tessera-plan-probe";
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
  if (fd < 0) fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
  if (fd < 0) return 0;
  constexpr size_t kBlock = size_t{4} << 20;
  constexpr int kBlocks = 16;
  void* buf = std::aligned_alloc(4096, kBlock);
  std::memset(buf, 1, kBlock);
  const auto t0 = std::chrono::steady_clock::now();
  bool ok = true;
  for (int i = 0; i < kBlocks && ok; ++i) ok = ::pwrite(fd, buf, kBlock, static_cast<off_t>(i * kBlock)) == static_cast<ssize_t>(kBlock);
  for (int i = 0; i < kBlocks && ok; ++i) ok = ::pread(fd, buf, kBlock, static_cast<off_t>(i * kBlock)) == static_cast<ssize_t>(kBlock);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::free(buf);
  ::close(fd);
  ::unlink(path.c_str());
  return ok && s > 0 ? 2.0 * kBlocks * kBlock / s : 0;
}

// FLOP/s of the backend's linear layer forward and backward (input and weight gradients, 6 N
// C OC FLOPs) at N x C -> OC, best of 3 after a warm-up: what a training step's GEMMs get on
// that path, operand conversions and transposed products included.
double LinearRate(Backend& be, int64_t N, int64_t C, int64_t OC) {
  std::vector<float> inp(N * C, 0.5f), w(OC * C, 0.01f), b(OC, 0.0f), out(N * OC), d_out(N * OC, 1e-3f);
  std::vector<float> d_inp(N * C), d_w(OC * C), d_b(OC);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    be.LinearForward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    be.LinearBackward(d_inp.data(), d_w.data(), d_b.data(), d_out.data(), inp.data(), w.data(), N, C, OC);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0 && s > 0) best = std::max(best, 6.0 * N * C * OC / s);
  }
  return best;
}

// The large-shape rate and the half-rate size (cluster.h GemmRate) of one GEMM path: its GEMM
// rate at 2048^3 and its linear layer's rate at the config's own MLP shape (micro-batch tokens
// x hidden x MLP width); r(s) = R s / (s + h) at both sizes gives R and h.
void MeasureGemmCurve(bool bf16, const ModelConfig& m, int64_t tokens, double* rate, double* half) {
  const double big = (bf16 ? cpu::MeasureBf16GemmGflops(2048, 2048, 2048, 2)
                           : cpu::MeasureSgemmGflops(2048, 2048, 2048, 2)) * 1e9;
  const int64_t N = std::clamp<int64_t>(tokens, 16, 8192), C = std::clamp<int64_t>(m.hidden_size, 16, 8192);
  const int64_t F = std::clamp<int64_t>(m.ffn_size(), 16, 8192);
  ComputeBackendChoice be = ChooseComputeBackend(bf16 ? DType::kBF16 : DType::kF32);
  const double size = std::cbrt(static_cast<double>(N) * C * F);
  const double ratio = LinearRate(*be.backend, N, C, F) / big;  // = size (2048 + h) / (2048 (size + h))
  const double h = ratio < 1.0 && ratio * 2048.0 > size ? 2048.0 * size * (1.0 - ratio) / (ratio * 2048.0 - size) : 0.0;
  *half = std::max(0.0, h);
  *rate = big * (2048.0 + *half) / 2048.0;
}

// Elements/s of GELU forward + backward on 1M elements, best of 5 (cluster.h elementwise_rate).
double MeasureElementwiseRate() {
  constexpr int64_t n = int64_t{1} << 20;
  std::vector<float> x(n, 0.5f), y(n), dy(n, 1.0f), dx(n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::GeluForward(y.data(), x.data(), n);
    cpu::GeluBackward(dx.data(), dy.data(), x.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, static_cast<double>(n) / s);
  }
  return best;
}

// This machine as a cluster of one host whose devices are its cores, one rank each with one
// thread (how the multirank runs place ranks): the GEMM paths' rates by size, the memory
// bandwidth and GELU's element rate measured on one thread (the bench's probes), a shared-memory message copied twice
// (half the bandwidth), the disk's O_DIRECT bandwidth and free space for NVMe offload.
ClusterSpec MeasureThisMachine(const Config& c) {
  ClusterSpec cl;
  cl.name = "this machine";
  cl.kind = DeviceKind::kCpu;
  cl.hosts = 1;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  cl.devices_per_host = static_cast<int>(std::max(1L, cores));
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  cl.host_memory = ram;
  cl.device_memory = ram / cl.devices_per_host;
  const int before = cpu::NumThreads();
  cpu::SetNumThreads(1);
  const int64_t tokens = c.train.micro_batch_size * c.train.seq_len;
  MeasureGemmCurve(false, c.model, tokens, &cl.fp32_gemm_flops, &cl.fp32_gemm_half_size);
  cl.gemm_flops = cl.fp32_gemm_flops;
  cl.gemm_half_size = cl.fp32_gemm_half_size;
  // bf16 runs use bf16 GEMMs only where the CPU has them (ChooseComputeBackend).
  if (ChooseComputeBackend(DType::kBF16).description.rfind("cpu-bf16", 0) == 0) {
    MeasureGemmCurve(true, c.model, tokens, &cl.gemm_flops, &cl.gemm_half_size);
  }
  cl.peak_flops = cl.gemm_flops;
  cl.memory_bandwidth = MeasureUpdateBandwidth() * 1e9;
  cl.elementwise_rate = MeasureElementwiseRate();
  cpu::SetNumThreads(before);
  cl.intra_bandwidth = cl.inter_bandwidth = cl.memory_bandwidth / 2;
  cl.intra_latency = cl.inter_latency = 5e-6;
  const std::string dir = c.optimizer.offload_dir.empty() ? std::filesystem::temp_directory_path().string()
                                                          : c.optimizer.offload_dir;
  cl.nvme_bandwidth = MeasureDiskBandwidth(dir);
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) == 0) cl.nvme_capacity = static_cast<double>(fs.f_bavail) * fs.f_frsize;
  return cl;
}

// MODEL: a Tessera config, or a Hugging Face config.json (or its directory), read as a
// config whose init_from is that directory (the model section comes from config.json).
Result<Config> LoadModel(const ParsedArgs& p) {
  const std::string& model = p.positional[0];
  std::filesystem::path path(model);
  std::error_code ec;
  const bool hf = path.filename() == "config.json" ||
                  (std::filesystem::is_directory(path, ec) && std::filesystem::exists(path / "config.json", ec));
  if (!hf) return LoadFromArgs(p);
  const std::filesystem::path dir = path.filename() == "config.json" ? path.parent_path() : path;
  const std::string yaml = (std::filesystem::temp_directory_path() /
                            ("tessera-plan-" + std::to_string(getpid()) + ".yaml")).string();
  RETURN_IF_ERROR(WriteFileAtomic(yaml, "# tessera plan: the model of " + dir.string() +
                                            "\ninit_from: " + std::filesystem::absolute(dir).string() + "\n"));
  Result<Config> c = LoadConfig(yaml, p.All("--set"));
  std::filesystem::remove(yaml, ec);
  return c;
}

double TotalParams(const ModelConfig& m) {
  double n = 0;
  for (const ParamDecl& d : DeclareParameters(m)) n += static_cast<double>(d.shape.numel());
  return n;
}

std::string Gb(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", bytes / kGiB);
  return bytes >= kGiB ? b : FormatBytes(bytes);
}

void PrintTimeParts(const StepTime& t) {
  std::printf("    step %.3f s = compute %.3f + element-wise %.3f + tp %.3f + ep %.3f + bubble %.3f + pp %.3f "
              "+ dp %.3f + optimizer %.3f (largest: %s)\n",
              t.total, t.compute, t.memory, t.tp, t.ep, t.bubble, t.pp, t.dp, t.optimizer, t.slowest.c_str());
}

void PrintEntry(int index, const PlanEntry& e) {
  std::printf("%2d  %s\n", index, DescribeLayout(e.config).c_str());
  std::printf("    %.3f s/step, %.0f tokens/s, MFU %.1f%%; %s per device (stage %d: %s)\n", e.time.total,
              e.time.tokens_per_s, 100 * e.time.mfu, Gb(e.device_bytes).c_str(), e.worst_stage,
              DescribeRankMemory(e.stages[static_cast<size_t>(e.worst_stage)]).c_str());
  if (e.host_bytes > 0) {
    std::printf("    the optimizer state is in host memory (not counted per device): %s per host\n",
                Gb(e.host_bytes).c_str());
  }
  if (e.nvme_bytes > 0) std::printf("    NVMe for offloaded optimizer state: %s per host\n", Gb(e.nvme_bytes).c_str());
  PrintTimeParts(e.time);
}

std::string LayoutJson(const PlanEntry& e) {
  JsonWriter w;
  w.BeginObject();
  w.Key("layout").String(DescribeLayout(e.config));
  w.Key("stages").BeginArray();
  for (const RankMemory& m : e.stages) {
    w.BeginObject().Key("stage").Int(m.stage).Key("rank").Int(m.rank);
    for (int k = 0; k < static_cast<int>(MemoryKind::kCount); ++k) {
      std::string name = MemoryKindName(static_cast<MemoryKind>(k));
      std::replace(name.begin(), name.end(), ' ', '_');
      w.Key(name + "_bytes").Int(static_cast<int64_t>(m.bytes[static_cast<size_t>(k)]));
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("step_seconds").Double(e.time.total);
  w.Key("tokens_per_s").Double(e.time.tokens_per_s);
  w.Key("mfu").Double(e.time.mfu);
  w.Key("fits").Bool(e.fits);
  w.EndObject();
  return w.str() + "\n";
}

int PrintLayout(const Config& c, const ClusterSpec& cl, bool json) {
  Result<PlanEntry> e = PlanLayout(c, cl);
  if (!e.ok()) return Fail("plan", e.status(), ExitPhase::kConfig);
  if (json) {
    std::printf("%s", LayoutJson(*e).c_str());
    return kExitOk;
  }
  std::printf("%s\n", DescribeLayout(c).c_str());
  for (const RankMemory& m : e->stages) {
    std::printf("  stage %d (rank %d): %s resident: %s\n", m.stage, m.rank, Gb(m.resident()).c_str(),
                DescribeRankMemory(m).c_str());
  }
  std::printf("  %.3f s/step, %.0f tokens/s, MFU %.1f%% on %s\n", e->time.total, e->time.tokens_per_s,
              100 * e->time.mfu, DescribeCluster(cl).c_str());
  std::printf("  %s\n", e->fits ? "fits the cluster" : ("does not fit: " + e->why).c_str());
  PrintTimeParts(e->time);
  return kExitOk;
}

}  // namespace

int RunPlan(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera plan MODEL [CLUSTER] [--set key=value]... [--top N] [--ranks N]\n"
        "                    [--global-batch N] [--offload LIST] [--emit FILE] [--save-cluster FILE]\n"
        "                    [--layout [--json]]\n\n"
        "Finds the layouts that train MODEL fastest on CLUSTER and fit: every tp x pp (with\n"
        "virtual stages and a layer split) x ep x dp over the cluster's devices, ZeRO 0-3,\n"
        "recompute none/selective/full, sequence parallelism, micro-batch size (accumulation\n"
        "keeps the global batch) and optimizer offload none/cpu/nvme, at MODEL's precision.\n"
        "Prints the best N with each rank's memory by kind (exactly as the trainer reserves it:\n"
        "its own construction, dry), the predicted step time by part, tokens/s and MFU, and how\n"
        "many layouts were rejected and why.\n\n"
        "  MODEL           a Tessera config (its model, precision, sequence length, optimizer and\n"
        "                  global batch), or a Hugging Face config.json or its directory\n"
        "  CLUSTER         (or --cluster CLUSTER) a cluster YAML (hosts, devices per host, device memory and GEMM rate,\n"
        "                  link bandwidths and latencies, host memory, NVMe; see README), or\n"
        "                  'this' (default): this machine, one device per core, its GEMM rate\n"
        "                  and memory bandwidth measured now with the bench's probes\n"
        "  --set k=v       override MODEL's config (e.g. train.seq_len=4096)\n"
        "  --top N         layouts to show (default 5)\n"
        "  --ranks N       devices the job uses (default: the whole cluster)\n"
        "  --global-batch N  sequences per step (default: MODEL's micro_batch_size x\n"
        "                  grad_accum_steps x dp x ep)\n"
        "  --offload LIST  optimizer offloads to consider, of none,cpu,nvme (default all three)\n"
        "  --emit FILE     write the best layout as a config tessera train / launch take as is\n"
        "  --save-cluster FILE  write CLUSTER (e.g. the measured 'this') as a cluster YAML\n"
        "  --layout        no search: MODEL's own layout, each pipeline stage's memory by kind\n"
        "                  and the step time (--json: as JSON, the kinds as memory.json names them)\n\n"
        "The same memory plan is the trainer's check: a run whose layout does not fit in\n"
        "train.memory_limit_mb (default: physical memory / ranks on the host) is refused before\n"
        "it reserves anything, naming the largest kind and settings that fit.\n");
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "plan", {"--set", "--top", "--ranks", "--global-batch", "--emit", "--save-cluster", "--offload", "--cluster"},
                          {"--layout", "--json", "--strict-env"});
  if (parsed.ok() && (parsed->positional.empty() || parsed->positional.size() > 2)) {
    parsed = InvalidArgument("tessera plan: expected MODEL [CLUSTER] (see tessera plan --help)");
  }
  if (!parsed.ok()) return FailUsage("plan", parsed.status());
  PlanOptions o;
  for (auto [flag, out] : {std::pair{"--top", &o.top}, std::pair{"--ranks", &o.ranks}}) {
    if (!parsed->Has(flag)) continue;
    Result<int64_t> v = ParseIntFlag(flag, parsed->Get(flag));
    if (!v.ok() || *v < 1 || *v > (1 << 20)) {
      return FailUsage("plan", InvalidArgument(std::string("tessera plan: ") + flag + " must be 1 .. 1048576"));
    }
    *out = static_cast<int>(*v);
  }
  if (parsed->Has("--global-batch")) {
    Result<int64_t> v = ParseIntFlag("--global-batch", parsed->Get("--global-batch"));
    if (!v.ok() || *v < 1) return FailUsage("plan", InvalidArgument("tessera plan: --global-batch must be >= 1"));
    o.global_batch = *v;
  }
  if (parsed->Has("--offload")) {
    o.offloads.clear();
    for (const std::string& v : Split(parsed->Get("--offload"), ',')) {
      if (v == "none") o.offloads.push_back(OptimizerOffload::kNone);
      else if (v == "cpu") o.offloads.push_back(OptimizerOffload::kCpu);
      else if (v == "nvme") o.offloads.push_back(OptimizerOffload::kNvme);
      else return FailUsage("plan", InvalidArgument("tessera plan: --offload takes none, cpu and nvme, got \"" + v + "\""));
    }
  }
  Result<Config> config = LoadModel(*parsed);
  if (!config.ok()) return Fail("plan", config.status(), ExitPhase::kConfig);
  if (parsed->Has("--cluster") && parsed->positional.size() == 2) {
    return FailUsage("plan", InvalidArgument("tessera plan: CLUSTER given twice (positional and --cluster)"));
  }
  const std::string cluster_arg = parsed->positional.size() == 2 ? parsed->positional[1]
                                                                 : parsed->Get("--cluster", "this");
  Result<ClusterSpec> cluster = cluster_arg == "this" ? Result<ClusterSpec>(MeasureThisMachine(*config))
                                                      : LoadCluster(cluster_arg);
  if (!cluster.ok()) return Fail("plan", cluster.status(), ExitPhase::kConfig);
  if (parsed->Has("--save-cluster")) {  // measured once, reused: the same numbers every plan
    Status s = WriteFileAtomic(parsed->Get("--save-cluster"), ClusterYaml(*cluster));
    if (!s.ok()) return Fail("plan", s, ExitPhase::kRun);
  }
  if (parsed->Has("--layout")) return PrintLayout(*config, *cluster, parsed->Has("--json"));

  Result<PlanReport> report = PlanLayouts(*config, *cluster, o);
  if (!report.ok()) return Fail("plan", report.status(), ExitPhase::kConfig);
  const double n = TotalParams(config->model);
  const double unit = n >= 1e12 ? 1e12 : n >= 1e9 ? 1e9 : 1e6;
  std::printf("tessera plan: %s (%.3g%s parameters) on %s\n", parsed->positional[0].c_str(),
              n / unit, unit == 1e12 ? "T" : unit == 1e9 ? "B" : "M", DescribeCluster(*cluster).c_str());
  std::printf("searched %lld layouts in %.2f s (%lld dry constructions of a rank's state or model)\n\n",
              static_cast<long long>(report->candidates), report->seconds,
              static_cast<long long>(report->memory_checked));
  for (size_t i = 0; i < report->best.size(); ++i) PrintEntry(static_cast<int>(i + 1), report->best[i]);
  if (report->best.empty()) std::printf("no layout fits this cluster\n");
  std::printf("\nnot chosen:\n");
  for (const auto& [why, count] : report->rejected) std::printf("  %10lld  %s\n", static_cast<long long>(count), why.c_str());
  if (parsed->Has("--emit")) {
    if (report->best.empty()) return Fail("plan", InvalidArgument("--emit: no layout fits"), ExitPhase::kConfig);
    const std::string file = parsed->Get("--emit");
    Status s = WriteFileAtomic(file, EmitResolvedYaml(report->best.front().config, {}));
    if (!s.ok()) return Fail("plan", s, ExitPhase::kRun);
    std::printf("\nwrote the best layout to %s (tessera launch %s -n %d)\n", file.c_str(), file.c_str(),
                report->best.front().config.parallel.world_size());
  }
  return report->best.empty() ? kExitBadConfig : kExitOk;
}

}  // namespace tessera::cli
