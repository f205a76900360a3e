// runtime/chaos/scenario.cc — see scenario.h.
//
// Owns: the scenario's schema. The tree and the strict reader are the config's
// (runtime/core/yaml_tree.h, yaml_reader.h): each map is read key by key, every key a reader
// did not ask for is an error, and every error names "FILE:LINE:COL: dotted.path". The
// schedule is built with std::mt19937_64 (whose output the standard fixes) and our own
// conversions to [0, 1), to integers and to exponential gaps, so the same seed gives the same
// schedule everywhere.
// Thread-safety: no shared state.
#include "runtime/chaos/scenario.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include "runtime/core/file_util.h"
#include "runtime/core/yaml_reader.h"
#include "runtime/core/yaml_tree.h"
#include "runtime/supervisor/launcher.h"

namespace tessera {
namespace {

struct KindName {
  FaultKind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {
    {FaultKind::kKillRank, "kill_rank"},
    {FaultKind::kStopRank, "stop_rank"},
    {FaultKind::kSlowRank, "slow_rank"},
    {FaultKind::kKillInCheckpoint, "kill_in_checkpoint"},
    {FaultKind::kCorruptShard, "corrupt_shard"},
    {FaultKind::kTruncateShard, "truncate_shard"},
    {FaultKind::kIoError, "io_error"},
    {FaultKind::kKillHost, "kill_host"},
    {FaultKind::kPreempt, "preempt"},
    {FaultKind::kLoseHost, "lose_host"},
    {FaultKind::kPartition, "partition"},
    {FaultKind::kSlowLink, "slow_link"},
};

constexpr int kEio = 5;
constexpr int kEnospc = 28;
constexpr int kMaxRanks = 4096;
// A scenario is a few KiB; the bound keeps /dev/zero or a huge file out of memory.
constexpr uint64_t kMaxScenarioBytes = uint64_t{1} << 20;

// `tessera launch` options a scenario may set; the integer ones are cast to int there.
const std::vector<std::string> kSupervisorKeys = {
    "heartbeat_timeout", "stall_timeout",   "stall_floor", "startup_timeout",
    "max_restarts",      "restart_window",  "crash_loop",  "backoff",
    "stop_grace",        "preempt_timeout", "heartbeat_ms", "spares", "elastic"};
const std::set<std::string> kSupervisorIntegerKeys = {"max_restarts", "crash_loop", "heartbeat_ms",
                                                      "spares", "elastic"};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Result<FaultKind> Kind(const YamlContext& ctx, const YamlNode& node, const std::string& dotted) {
  std::vector<std::pair<std::string, FaultKind>> names;
  for (const KindName& k : kKindNames) names.emplace_back(k.name, k.kind);
  return ReadYamlEnum(ctx, node, dotted, names);
}

// The config path as the runner will use it: as written if it names a file from the current
// directory, else relative to the scenario's folder or one of its parents (the shipped
// scenarios say "configs/tiny.yaml", which resolves from configs/chaos/ up to the repo root,
// wherever `tessera chaos` runs from).
Result<std::string> ResolvePath(const YamlMap& job, const std::string& key, const std::string& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path written(config);
  if (fs::is_regular_file(written, ec)) return config;
  const fs::path folder = fs::absolute(fs::path(job.context().file()), ec).parent_path();
  if (written.is_relative()) {
    for (fs::path dir = folder; !dir.empty(); dir = dir.parent_path()) {
      const fs::path candidate = dir / written;
      if (fs::is_regular_file(candidate, ec)) return candidate.lexically_normal().string();
      if (dir == dir.parent_path()) break;
    }
  }
  const std::string looked =
      written.is_relative()
          ? " (looked in the current directory and in " + folder.lexically_normal().string() +
                " and its parents)"
          : "";
  return job.ValueError(key, std::string("expected an existing ") +
                                 (key == "config" ? "config file" : "file") + ", got \"" + config +
                                 "\"" + looked);
}

// job.hosts: a list of rank groups, every rank in exactly one (default: one rank per host).
Status ReadHosts(YamlMap& job, Scenario* s) {
  const YamlContext& ctx = job.context();
  const std::string hosts_dotted = job.Dotted("hosts");
  ASSIGN_OR_RETURN(std::vector<const YamlNode*> groups, job.Sequence("hosts", "rank groups"));
  if (groups.empty()) {
    for (int r = 0; r < s->ranks; ++r) s->hosts.push_back({r});
    return Status::Ok();
  }
  std::vector<int> group_of(s->ranks, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string dotted = hosts_dotted + "[" + std::to_string(g) + "]";
    ASSIGN_OR_RETURN(std::vector<const YamlNode*> members,
                     ReadYamlSequence(ctx, *groups[g], dotted, "ranks"));
    if (members.empty()) return ctx.Expected(*groups[g], dotted, "a non-empty list of ranks");
    std::vector<int> group;
    for (size_t m = 0; m < members.size(); ++m) {
      const std::string member = dotted + "[" + std::to_string(m) + "]";
      ASSIGN_OR_RETURN(int64_t rank, ReadYamlInt(ctx, *members[m], member, 0, s->ranks - 1));
      if (group_of[rank] >= 0) {
        return ctx.At(*members[m], member,
                      "expected each rank in one host group, got rank " + std::to_string(rank) +
                          " again (already in " + hosts_dotted + "[" +
                          std::to_string(group_of[rank]) + "])");
      }
      group_of[rank] = static_cast<int>(g);
      group.push_back(static_cast<int>(rank));
    }
    s->hosts.push_back(std::move(group));
  }
  for (int r = 0; r < s->ranks; ++r) {
    if (group_of[r] < 0) {
      return job.ValueError("hosts", "expected every rank in [0, " + std::to_string(s->ranks) +
                                         ") in one host group, got rank " + std::to_string(r) +
                                         " in none");
    }
  }
  return Status::Ok();
}

// job.hostfile, job.host_control, job.bind: a job across real hosts.
Status ReadRealHosts(YamlMap& job, Scenario* s) {
  std::string path;
  RETURN_IF_ERROR(job.String("hostfile", &path));
  if (!path.empty()) {
    ASSIGN_OR_RETURN(s->hostfile, ResolvePath(job, "hostfile", path));
    Result<std::vector<HostfileEntry>> entries = ParseHostfile(s->hostfile);
    if (!entries.ok()) return job.ValueError("hostfile", entries.status().message());
    for (const HostfileEntry& e : *entries) s->hostfile_hosts.push_back(e.host);
  }
  RETURN_IF_ERROR(job.String("host_control", &path));
  if (!path.empty()) {
    ASSIGN_OR_RETURN(s->host_control, ResolvePath(job, "host_control", path));
  }
  return job.String("bind", &s->bind);
}

Status ReadJob(YamlMap& job, Scenario* s) {
  RETURN_IF_ERROR(job.Require("config"));
  std::string config;
  RETURN_IF_ERROR(job.NonEmptyString("config", &config));
  ASSIGN_OR_RETURN(s->config, ResolvePath(job, "config", config));
  RETURN_IF_ERROR(job.Int("ranks", 1, kMaxRanks, &s->ranks));

  const YamlContext& ctx = job.context();
  ASSIGN_OR_RETURN(std::vector<const YamlNode*> sets, job.Sequence("set", "key=value overrides"));
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::string dotted = job.Dotted("set") + "[" + std::to_string(i) + "]";
    if (!sets[i]->IsScalar()) return ctx.Expected(*sets[i], dotted, "an override key=value");
    ASSIGN_OR_RETURN(std::string text, ReadYamlString(ctx, *sets[i], dotted));
    if (text.find('=') == std::string::npos || text.front() == '=') {
      return ctx.Expected(*sets[i], dotted, "an override key=value");
    }
    s->sets.push_back(text);
  }
  RETURN_IF_ERROR(ReadHosts(job, s));
  RETURN_IF_ERROR(ReadRealHosts(job, s));
  return job.Finish();
}

Status ReadSupervisor(YamlMap& sup, Scenario* s) {
  for (const std::string& key : kSupervisorKeys) {
    const YamlNode* v = sup.Get(key);
    if (v == nullptr) continue;
    if (kSupervisorIntegerKeys.count(key)) {
      RETURN_IF_ERROR(ReadYamlInt(sup.context(), *v, sup.Dotted(key), 0,
                                  std::numeric_limits<int>::max())
                          .status());
    } else {
      RETURN_IF_ERROR(ReadYamlNumber(sup.context(), *v, sup.Dotted(key), kNonNegative).status());
    }
    s->supervisor[key] = v->scalar;
  }
  return sup.Finish();
}

// Which of the optional fault keys each kind uses (the others are errors, not silently unused).
struct KindKeys {
  bool rank, host, duration, error_number, qdisc = false;
};
KindKeys KeysOf(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKillRank:
    case FaultKind::kStopRank:
    case FaultKind::kKillInCheckpoint: return {true, false, false, false};
    case FaultKind::kSlowRank: return {true, false, true, false};
    case FaultKind::kIoError: return {true, false, true, true};
    case FaultKind::kKillHost:
    case FaultKind::kLoseHost: return {false, true, false, false};
    case FaultKind::kPartition: return {false, true, true, false};
    case FaultKind::kSlowLink: return {false, true, true, false, true};
    case FaultKind::kCorruptShard:
    case FaultKind::kTruncateShard:
    case FaultKind::kPreempt: return {false, false, false, false};
  }
  return {false, false, false, false};
}

Status ReadFault(YamlMap& f, const Scenario& s, FaultSpec* fault) {
  RETURN_IF_ERROR(f.Require("kind"));
  ASSIGN_OR_RETURN(fault->kind, Kind(f.context(), *f.Get("kind"), f.Dotted("kind")));
  const char* kind_name = FaultKindName(fault->kind);

  RETURN_IF_ERROR(f.Int("at_step", 1, std::numeric_limits<int64_t>::max(), &fault->at_step));
  RETURN_IF_ERROR(f.Number("at_time_s", kNonNegative, &fault->at_time_s));
  if (f.Has("at_step") && f.Has("at_time_s")) {
    return f.KeyError("at_time_s", "expected exactly one of at_step / at_time_s, got both");
  }
  if (!f.Has("at_step") && !f.Has("at_time_s")) {
    return f.ValueError("at_step", "expected exactly one of at_step / at_time_s, got neither");
  }

  const KindKeys keys = KeysOf(fault->kind);
  const struct {
    const char* key;
    bool used;
  } optional[] = {{"rank", keys.rank},
                  {"host", keys.host},
                  {"duration_s", keys.duration},
                  {"errno", keys.error_number},
                  {"qdisc", keys.qdisc}};
  for (const auto& o : optional) {
    if (!o.used && f.Has(o.key)) {
      return f.KeyError(o.key, std::string("not used by ") + kind_name + " (remove it)");
    }
  }
  if (keys.rank) {
    const int64_t min = fault->kind == FaultKind::kIoError ? -1 : 0;
    RETURN_IF_ERROR(f.Int("rank", min, s.ranks - 1, &fault->rank));
  }
  if (IsHostKind(fault->kind)) {
    if (s.hostfile.empty() || s.host_control.empty()) {
      return f.ValueError("kind", std::string(kind_name) +
                                      " acts on a real host: the job needs job.hostfile and "
                                      "job.host_control");
    }
    if (s.hostfile_hosts.size() < 2) {
      return f.ValueError("kind", std::string(kind_name) + " needs a hostfile of at least 2 hosts");
    }
    // Host 0 runs tessera launch and this chaos run: losing it is not a fault they can survive.
    RETURN_IF_ERROR(f.Require("host"));
    RETURN_IF_ERROR(f.Int("host", 1, static_cast<int64_t>(s.hostfile_hosts.size()) - 1, &fault->host));
  } else if (keys.host) {
    RETURN_IF_ERROR(f.Int("host", 0, static_cast<int64_t>(s.hosts.size()) - 1, &fault->host));
  }
  if (keys.qdisc) RETURN_IF_ERROR(f.NonEmptyString("qdisc", &fault->qdisc));
  if (keys.duration) RETURN_IF_ERROR(f.Number("duration_s", kPositive, &fault->duration_s));
  if (keys.error_number) {
    RETURN_IF_ERROR(
        f.Enum<int>("errno", {{"ENOSPC", kEnospc}, {"EIO", kEio}}, &fault->error_number));
  }
  return f.Finish();
}

Status ReadRandom(YamlMap& r, Scenario* s) {
  RETURN_IF_ERROR(r.Require("seed"));
  RETURN_IF_ERROR(r.Uint("seed", &s->seed));
  RETURN_IF_ERROR(r.Require("mean_time_between_faults_s"));
  RETURN_IF_ERROR(r.Number("mean_time_between_faults_s", kPositive, &s->mean_time_between_faults_s));
  RETURN_IF_ERROR(r.Require("duration_s"));
  RETURN_IF_ERROR(r.Number("duration_s", kPositive, &s->duration_s));
  RETURN_IF_ERROR(r.Number("first_after_s", kNonNegative, &s->first_after_s));
  if (s->first_after_s >= s->duration_s) {
    return r.ValueError("first_after_s", "expected a time below duration_s (" +
                                             Num(s->duration_s) + "), got " +
                                             Num(s->first_after_s));
  }
  ASSIGN_OR_RETURN(std::vector<const YamlNode*> kinds, r.Sequence("kinds", "fault kinds"));
  if (r.Has("kinds") && kinds.empty()) {
    return r.ValueError("kinds", "expected at least one fault kind, got none");
  }
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string dotted = r.Dotted("kinds") + "[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(FaultKind kind, Kind(r.context(), *kinds[i], dotted));
    if (IsHostKind(kind)) {
      return r.context().At(*kinds[i], dotted,
                            std::string("expected a fault kind a campaign may draw, got ") +
                                FaultKindName(kind) + " (host faults are listed faults only)");
    }
    s->random_kinds.push_back(kind);
  }
  if (kinds.empty()) {
    for (const KindName& k : kKindNames) {
      if (k.kind != FaultKind::kPreempt && !IsHostKind(k.kind)) s->random_kinds.push_back(k.kind);
    }
  }
  s->has_random = true;
  return r.Finish();
}

Status ReadFaults(YamlMap& top, Scenario* s) {
  const YamlContext& ctx = top.context();
  ASSIGN_OR_RETURN(std::vector<const YamlNode*> faults, top.Sequence("faults", "faults (maps)"));
  for (size_t i = 0; i < faults.size(); ++i) {
    const std::string dotted = "faults[" + std::to_string(i) + "]";
    if (!faults[i]->IsMap()) return ctx.Expected(*faults[i], dotted, "a map (one fault)");
    ASSIGN_OR_RETURN(YamlMap f, YamlMap::Make(&top.context(), faults[i], dotted));
    FaultSpec fault;
    RETURN_IF_ERROR(ReadFault(f, *s, &fault));
    s->faults.push_back(fault);
  }
  return Status::Ok();
}

Result<Scenario> ParseScenario(const std::string& text, const std::string& path) {
  ASSIGN_OR_RETURN(const YamlNode root, ParseYaml(text, path));  // strict: yaml_tree.h
  YamlContext ctx(path);
  if (!root.IsMap()) {
    return InvalidArgument(ctx.Where(root) +
                           ": expected a map with keys job, supervisor, faults, random, soak_s, "
                           "verdict at the top level, got " +
                           DescribeYaml(root));
  }
  Scenario s;
  s.path = path;
  ASSIGN_OR_RETURN(YamlMap top, YamlMap::Make(&ctx, &root, "", &root));
  RETURN_IF_ERROR(top.Require("job"));
  ASSIGN_OR_RETURN(YamlMap job, top.Child("job"));
  RETURN_IF_ERROR(ReadJob(job, &s));
  ASSIGN_OR_RETURN(YamlMap sup, top.Child("supervisor"));
  RETURN_IF_ERROR(ReadSupervisor(sup, &s));
  RETURN_IF_ERROR(ReadFaults(top, &s));
  if (top.Has("random")) {
    ASSIGN_OR_RETURN(YamlMap r, top.Child("random"));
    RETURN_IF_ERROR(ReadRandom(r, &s));
  }
  RETURN_IF_ERROR(top.Number("soak_s", kNonNegative, &s.soak_s));
  ASSIGN_OR_RETURN(YamlMap verdict, top.Child("verdict"));
  RETURN_IF_ERROR(verdict.Number("max_supervisor_rss_growth_mib", kPositive,
                                 &s.max_supervisor_rss_growth_mib));
  RETURN_IF_ERROR(verdict.Finish());
  RETURN_IF_ERROR(top.Finish());
  return s;
}

// The schedule's randomness: raw 64-bit words from std::mt19937_64 (fixed by the standard)
// and our own conversions, so no implementation-defined distribution is involved.
class Draws {
 public:
  explicit Draws(uint64_t seed) : gen_(seed) {}
  uint64_t Bits() { return gen_(); }
  double Unit() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }     // [0, 1)
  int Below(int n) { return std::min(n - 1, static_cast<int>(Unit() * n)); }  // [0, n)
  double Exponential(double mean) { return -mean * std::log(1.0 - Unit()); }

 private:
  std::mt19937_64 gen_;
};

// SplitMix64's finaliser: a listed fault's damage seed from (seed, its index).
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

bool IsHostKind(FaultKind kind) {
  return kind == FaultKind::kLoseHost || kind == FaultKind::kPartition || kind == FaultKind::kSlowLink;
}

const char* FaultKindName(FaultKind kind) {
  for (const KindName& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

Result<FaultKind> ParseFaultKind(const std::string& name) {
  std::string all;
  for (const KindName& k : kKindNames) {
    if (name == k.name) return k.kind;
    all += (all.empty() ? "" : " | ") + std::string(k.name);
  }
  return InvalidArgument("unknown fault kind \"" + name + "\" (expected " + all + ")");
}

std::string PlannedFault::ToString() const {
  char buf[64];
  std::string out = "#" + std::to_string(id) + " " + FaultKindName(spec.kind);
  if (spec.kind == FaultKind::kIoError) {
    out += spec.error_number == kEnospc ? " (ENOSPC)"
           : spec.error_number == kEio  ? " (EIO)"
                                        : " (errno " + std::to_string(spec.error_number) + ")";
  }
  if (KeysOf(spec.kind).rank) {
    out += spec.rank < 0 ? " all ranks" : " rank " + std::to_string(spec.rank);
  }
  if (KeysOf(spec.kind).host) out += " host " + std::to_string(spec.host);
  if (KeysOf(spec.kind).qdisc) out += " (" + spec.qdisc + ")";
  if (spec.at_step >= 0) {
    out += " at step " + std::to_string(spec.at_step);
  } else {
    std::snprintf(buf, sizeof(buf), " at %.1f s", spec.at_time_s);
    out += buf;
  }
  if (KeysOf(spec.kind).duration) {
    std::snprintf(buf, sizeof(buf), " for %.1f s", spec.duration_s);
    out += buf;
  }
  return out;
}

Result<Scenario> LoadScenario(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, kMaxScenarioBytes, "scenario"));
  try {  // nothing below should throw, but a scenario must never take the process down
    return ParseScenario(text, path);
  } catch (const std::exception& e) {
    return Internal(path + ": error while reading scenario: " + e.what());
  }
}

std::vector<PlannedFault> BuildSchedule(const Scenario& scenario) {
  std::vector<PlannedFault> schedule;
  const uint64_t seed = scenario.has_random ? scenario.seed : 0;
  for (size_t i = 0; i < scenario.faults.size(); ++i) {
    PlannedFault p;
    p.id = static_cast<int>(schedule.size()) + 1;
    p.spec = scenario.faults[i];
    if (p.spec.kind == FaultKind::kCorruptShard || p.spec.kind == FaultKind::kTruncateShard) {
      p.spec.damage_seed = Mix(seed ^ Mix(i));
    }
    schedule.push_back(p);
  }
  if (!scenario.has_random || scenario.random_kinds.empty() ||
      !(scenario.mean_time_between_faults_s > 0)) {
    return schedule;
  }
  // Every fault takes the same draws in the same order, whatever its kind, so that a fault's
  // time depends only on the seed and its position in the campaign.
  Draws draws(scenario.seed);
  const double mean_s = scenario.mean_time_between_faults_s;
  const int num_kinds = static_cast<int>(scenario.random_kinds.size());
  const int num_hosts = std::max<int>(1, static_cast<int>(scenario.hosts.size()));
  double t_s = scenario.first_after_s;
  while (true) {
    t_s += draws.Exponential(mean_s);
    const FaultKind kind = scenario.random_kinds[draws.Below(num_kinds)];
    const int rank = draws.Below(std::max(1, scenario.ranks));
    const int host = draws.Below(num_hosts);
    const int error_number = draws.Unit() < 0.5 ? kEio : kEnospc;
    const uint64_t damage_seed = draws.Bits();
    if (!(t_s < scenario.duration_s)) break;
    PlannedFault p;
    p.id = static_cast<int>(schedule.size()) + 1;
    p.spec.kind = kind;
    p.spec.at_time_s = t_s;
    const KindKeys keys = KeysOf(kind);
    p.spec.rank = keys.rank ? rank : 0;
    p.spec.host = keys.host ? host : 0;
    // A straggler needs a few seconds of heartbeats to stand out (the detector judges a rank
    // on its last ~20); an I/O error window only needs to cover one checkpoint write.
    if (keys.duration) p.spec.duration_s = kind == FaultKind::kSlowRank ? 4.0 : std::min(5.0, mean_s / 2);
    if (keys.error_number) p.spec.error_number = error_number;
    if (kind == FaultKind::kCorruptShard || kind == FaultKind::kTruncateShard) {
      p.spec.damage_seed = damage_seed;
    }
    schedule.push_back(p);
  }
  return schedule;
}

}  // namespace tessera
