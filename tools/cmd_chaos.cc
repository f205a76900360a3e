// tools/cmd_chaos.cc — `tessera chaos SCENARIO.yaml`: run a chaos scenario (runtime/chaos) and
// print its verdict. The command line only picks files and overrides; everything else is in
// the scenario.
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "runtime/chaos/campaign.h"
#include "runtime/chaos/chaos_report.h"
#include "runtime/chaos/scenario.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace tessera::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessera chaos SCENARIO.yaml [--out DIR] [--reference DIR] [--seed N] [--soak S]\n"
    "                     [--dry-run] [--echo]\n\n"
    "Runs the scenario's job under the supervisor (tessera launch) while injecting its faults\n"
    "from outside — SIGKILL or SIGSTOP a rank, slow one down, kill a rank in the middle of a\n"
    "checkpoint write, corrupt or truncate a committed shard, make checkpoint writes fail\n"
    "(ENOSPC, EIO) for a while, kill every rank of a host, SIGTERM the supervisor — then runs\n"
    "the same job without faults and prints the verdict. PASS (exit 0) only if the final\n"
    "weights are bit-identical to the fault-free run, no committed checkpoint was lost, every\n"
    "fault was detected and the run finished; otherwise exit 9.\n\n"
    "  --out DIR        where everything goes (default runs/chaos/<scenario name>): run/,\n"
    "                   reference/, launch logs, chaos_report.json, chaos_report.svg\n"
    "                   (loss against time with every fault and recovery marked)\n"
    "  --reference DIR  compare with this finished run's model.safetensors instead of running\n"
    "                   (or reusing) DIR/reference\n"
    "  --seed N         the random campaign's seed (same seed = same fault schedule)\n"
    "  --soak S         soak mode: train S seconds under the campaign, stop, compare at the\n"
    "                   step reached, and report the supervisor's and ranks' memory over time\n"
    "  --dry-run        print the fault schedule and exit\n"
    "  --echo           copy the job's output (the supervisor's lines and rank 0's progress)\n\n"
    "Scenarios ship in configs/chaos/: one per fault kind and mixed.yaml (a seeded random\n"
    "campaign). The file format is documented in runtime/chaos/scenario.h. Example:\n"
    "  tessera chaos configs/chaos/kill-rank.yaml\n";

int Usage(const Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return kExitUsage;
}

}  // namespace

int RunChaos(const Args& args) {
  if (WantsHelp(args)) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "chaos", {"--out", "--reference", "--seed", "--soak"}, {"--dry-run", "--echo"});
  if (!parsed.ok()) return Usage(parsed.status());
  const ParsedArgs& p = *parsed;
  if (p.positional.size() != 1) {
    return Usage(InvalidArgument("tessera chaos: expected exactly one SCENARIO.yaml (see tessera chaos --help)"));
  }
  auto scenario = LoadScenario(p.positional[0]);
  if (!scenario.ok()) {
    std::fprintf(stderr, "tessera chaos: %s\n", scenario.status().ToString().c_str());
    return kExitBadConfig;
  }
  if (p.Has("--seed")) {
    auto seed = ParseIntFlag("--seed", p.Get("--seed"));
    if (!seed.ok()) return Usage(seed.status());
    if (!scenario->has_random) {
      return Usage(InvalidArgument("tessera chaos: --seed needs a scenario with a random: section"));
    }
    scenario->seed = static_cast<uint64_t>(*seed);
  }
  if (p.Has("--soak")) {
    auto soak = ParseNumberFlag("--soak", p.Get("--soak"));
    if (!soak.ok() || *soak <= 0) return Usage(InvalidArgument("--soak: expected seconds > 0"));
    scenario->soak_s = *soak;
    if (scenario->has_random) scenario->duration_s = *soak;
  }
  const std::vector<PlannedFault> schedule = BuildSchedule(*scenario);
  std::printf("chaos: %s: %zu fault(s)\n", scenario->path.c_str(), schedule.size());
  for (const PlannedFault& f : schedule) std::printf("  %s\n", f.ToString().c_str());
  if (p.Has("--dry-run")) return kExitOk;

  auto self = SelfPath("chaos");
  if (!self.ok()) return Usage(self.status());
  CampaignOptions o;
  o.tessera = *self;
  o.out_dir = p.Get("--out", "runs/chaos/" + std::filesystem::path(scenario->path).stem().string());
  o.reference_dir = p.Get("--reference");
  o.echo_job = p.Has("--echo");
  auto report = RunCampaign(*scenario, schedule, o);
  if (!report.ok()) {
    std::fprintf(stderr, "tessera chaos: %s\n", report.status().ToString().c_str());
    return kExitRestartable;
  }
  const std::string json_path = o.out_dir + "/chaos_report.json";
  const std::string svg_path = o.out_dir + "/chaos_report.svg";
  Status w1 = WriteFileAtomic(json_path, JsonWriter().Value(ChaosReportJson(*report)).str() + "\n");
  Status w2 = WriteFileAtomic(svg_path, ChaosReportSvg(*report));
  std::fputs(FormatChaosReport(*report).c_str(), stdout);
  std::printf("report: %s, %s\n", json_path.c_str(), svg_path.c_str());
  if (!w1.ok() || !w2.ok()) {
    std::fprintf(stderr, "tessera chaos: %s\n", (!w1.ok() ? w1 : w2).ToString().c_str());
  }
  return report->verdict.passed() ? kExitOk : kExitChaosFailed;
}

}  // namespace tessera::cli
