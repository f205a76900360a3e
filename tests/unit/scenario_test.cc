// links: tessera_chaos
// tests/unit/scenario_test.cc — chaos scenario files (runtime/chaos/scenario.h): every shipped
// scenario loads; bad files fail with "FILE:LINE:COL: key.path: ..."; the fault schedule is
// deterministic, seeded, within its window and restricted to its kinds.
#include "runtime/chaos/scenario.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

namespace tessera {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(TESSERA_SOURCE_DIR) + "/configs/tiny.yaml";

// A scenario file named after the running test, in a fresh folder.
std::string WriteScenario(const std::string& text, const std::string& name = "scenario.yaml") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir =
      fs::path(::testing::TempDir()) /
      (std::string("tessera_scenario_") + info->test_suite_name() + "_" + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// A job section for 4 ranks on the tiny config, then `rest`.
std::string Job(const std::string& rest, const std::string& job_extra = "") {
  return "job:\n  config: " + kTiny + "\n  ranks: 4\n" + job_extra + rest;
}

// Loads `text` and expects an error whose message contains "FILE:LINE:COL: " + `where_what`.
void ExpectError(const std::string& text, int line, int col, const std::string& where_what) {
  const std::string path = WriteScenario(text);
  Result<Scenario> s = LoadScenario(path);
  ASSERT_FALSE(s.ok()) << "loaded:\n" << text;
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  const std::string want =
      path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + where_what;
  EXPECT_NE(s.status().message().find(want), std::string::npos)
      << "message: " << s.status().message() << "\nwanted: " << want;
}

TEST(Scenario, EveryShippedScenarioLoads) {
  // The shipped files name configs/tiny.yaml from the repository root, as a user runs them.
  const fs::path saved = fs::current_path();
  fs::current_path(TESSERA_SOURCE_DIR);
  std::map<std::string, std::set<FaultKind>> kinds_by_file;
  for (const auto& entry : fs::directory_iterator("configs/chaos")) {
    if (entry.path().extension() != ".yaml") continue;
    Result<Scenario> s = LoadScenario(entry.path().string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->config, "configs/tiny.yaml");
    EXPECT_FALSE(s->supervisor.empty()) << entry.path();
    const std::vector<PlannedFault> schedule = BuildSchedule(*s);
    EXPECT_FALSE(schedule.empty()) << entry.path();
    for (const PlannedFault& p : schedule)
      kinds_by_file[entry.path().filename().string()].insert(p.spec.kind);
  }
  fs::current_path(saved);
  // One file per kind, each holding exactly that kind.
  const std::map<std::string, FaultKind> single = {
      {"kill-rank.yaml", FaultKind::kKillRank},
      {"stop-rank.yaml", FaultKind::kStopRank},
      {"slow-rank.yaml", FaultKind::kSlowRank},
      {"kill-in-checkpoint.yaml", FaultKind::kKillInCheckpoint},
      {"corrupt-shard.yaml", FaultKind::kCorruptShard},
      {"truncate-shard.yaml", FaultKind::kTruncateShard},
      {"io-error.yaml", FaultKind::kIoError},
      {"kill-host.yaml", FaultKind::kKillHost},
      {"preempt.yaml", FaultKind::kPreempt},
      {"lose-host.yaml", FaultKind::kLoseHost},
      {"partition.yaml", FaultKind::kPartition},
      {"slow-link.yaml", FaultKind::kSlowLink}};
  for (const auto& [file, kind] : single) {
    EXPECT_EQ(kinds_by_file[file], std::set<FaultKind>{kind}) << file;
  }
}

TEST(Scenario, ShippedMixedCampaignHasAtLeastTenFaults) {
  const fs::path saved = fs::current_path();
  fs::current_path(TESSERA_SOURCE_DIR);
  Result<Scenario> s = LoadScenario("configs/chaos/mixed.yaml");
  fs::current_path(saved);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->has_random);
  EXPECT_EQ(s->seed, 21u);
  EXPECT_EQ(s->random_kinds.size(), 9u);
  EXPECT_GE(BuildSchedule(*s).size(), 10u);
}

TEST(Scenario, ReadsEveryField) {
  const std::string path =
      WriteScenario(Job("supervisor:\n  heartbeat_timeout: 2\n  backoff: 0.2\n  max_restarts: 50\n"
                        "faults:\n"
                        "  - kind: kill_rank\n    at_step: 40\n    rank: 2\n"
                        "  - kind: io_error\n    at_time_s: 12.4\n    rank: -1\n    errno: "
                        "ENOSPC\n    duration_s: 5\n"
                        "  - kind: kill_host\n    at_step: 20\n    host: 1\n"
                        "  - kind: preempt\n    at_step: 60\n"
                        "random:\n  seed: 11\n  mean_time_between_faults_s: 4\n  duration_s: 30\n"
                        "  first_after_s: 2\n  kinds: [kill_rank, stop_rank]\n"
                        "soak_s: 0\nverdict:\n  max_supervisor_rss_growth_mib: 32\n",
                        "  set: [parallel.dp=4, train.steps=120]\n  hosts: [[0, 1], [2, 3]]\n"));
  Result<Scenario> s = LoadScenario(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->path, path);
  EXPECT_EQ(s->config, kTiny);
  EXPECT_EQ(s->ranks, 4);
  EXPECT_EQ(s->sets, (std::vector<std::string>{"parallel.dp=4", "train.steps=120"}));
  EXPECT_EQ(s->hosts, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(s->supervisor,
            (std::map<std::string, std::string>{
                {"heartbeat_timeout", "2"}, {"backoff", "0.2"}, {"max_restarts", "50"}}));
  ASSERT_EQ(s->faults.size(), 4u);
  EXPECT_EQ(s->faults[1].kind, FaultKind::kIoError);
  EXPECT_EQ(s->faults[1].at_step, -1);
  EXPECT_DOUBLE_EQ(s->faults[1].at_time_s, 12.4);
  EXPECT_EQ(s->faults[1].rank, -1);
  EXPECT_EQ(s->faults[1].error_number, 28);
  EXPECT_EQ(s->faults[2].host, 1);
  EXPECT_TRUE(s->has_random);
  EXPECT_EQ(s->seed, 11u);
  EXPECT_DOUBLE_EQ(s->first_after_s, 2);
  EXPECT_EQ(s->random_kinds, (std::vector<FaultKind>{FaultKind::kKillRank, FaultKind::kStopRank}));
  EXPECT_DOUBLE_EQ(s->max_supervisor_rss_growth_mib, 32);

  const std::vector<PlannedFault> schedule = BuildSchedule(*s);
  ASSERT_GE(schedule.size(), 4u);
  EXPECT_EQ(schedule[0].ToString(), "#1 kill_rank rank 2 at step 40");
  EXPECT_EQ(schedule[1].ToString(), "#2 io_error (ENOSPC) all ranks at 12.4 s for 5.0 s");
  EXPECT_EQ(schedule[2].ToString(), "#3 kill_host host 1 at step 20");
  EXPECT_EQ(schedule[3].ToString(), "#4 preempt at step 60");
  for (size_t i = 0; i < schedule.size(); ++i) EXPECT_EQ(schedule[i].id, static_cast<int>(i) + 1);
}

TEST(Scenario, DefaultsOneHostPerRankAndEveryKindButPreempt) {
  Result<Scenario> s = LoadScenario(WriteScenario(
      Job("random:\n  seed: 1\n  mean_time_between_faults_s: 5\n  duration_s: 60\n")));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->hosts, (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(s->random_kinds.size(), 8u);
  for (FaultKind k : s->random_kinds) EXPECT_NE(k, FaultKind::kPreempt);
  EXPECT_DOUBLE_EQ(s->first_after_s, 3);
}

TEST(Scenario, ConfigResolvesBesideTheScenario) {
  const std::string path = WriteScenario("job:\n  config: beside.yaml\n");
  const fs::path beside = fs::path(path).parent_path() / "beside.yaml";
  std::ofstream(beside) << "train:\n  steps: 1\n";
  Result<Scenario> s = LoadScenario(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(fs::path(s->config), beside.lexically_normal());
  EXPECT_EQ(s->ranks, 2);
}

TEST(Scenario, MissingScenarioFileIsNotFound) {
  Result<Scenario> s = LoadScenario("/nonexistent/chaos.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
}

TEST(ScenarioErrors, UnknownKeySuggests) {
  ExpectError(Job("faults:\n  - kind: kill_rank\n    at_step: 4\n    rnak: 1\n"), 7, 5,
              "faults[0].rnak: unknown key (did you mean \"rank\"?)");
  ExpectError(Job("supervisor:\n  heartbeat_timout: 2\n"), 5, 3,
              "supervisor.heartbeat_timout: unknown key (did you mean \"heartbeat_timeout\"?)");
  ExpectError(Job("bogus: 1\n"), 4, 1, "bogus: unknown key");
}

TEST(ScenarioErrors, WrongType) {
  ExpectError("job:\n  config: " + kTiny + "\n  ranks: four\n", 3, 10,
              "job.ranks: expected an integer");
  ExpectError("job:\n  config: " + kTiny + "\n  ranks: \"4\"\n", 3, 10,
              "job.ranks: expected an integer, got the quoted string \"4\"");
  ExpectError(Job("faults: {kind: kill_rank}\n"), 4, 9, "faults: expected a sequence");
  ExpectError(Job("supervisor:\n  backoff: soon\n"), 5, 12,
              "supervisor.backoff: expected a number");
  ExpectError(Job("supervisor:\n  max_restarts: 2.5\n"), 5, 17,
              "supervisor.max_restarts: expected an integer");
  ExpectError(Job("", "  set: [parallel.dp]\n"), 4, 9,
              "job.set[0]: expected an override key=value");
}

TEST(ScenarioErrors, MissingOrAbsentConfig) {
  ExpectError("job:\n  ranks: 2\n", 2, 3, "job.config: required key is missing");
  ExpectError("faults: []\n", 1, 1, "job: required key is missing");
  ExpectError("job:\n  config: no/such/config.yaml\n", 2, 11,
              "job.config: expected an existing config file, got \"no/such/config.yaml\"");
}

TEST(ScenarioErrors, BadKindListsTheKinds) {
  ExpectError(Job("faults:\n  - kind: kill_rnak\n    at_step: 4\n"), 5, 11,
              "faults[0].kind: expected one of kill_rank | stop_rank | slow_rank | "
              "kill_in_checkpoint | corrupt_shard | truncate_shard | io_error | kill_host | "
              "preempt | lose_host | partition | slow_link, got \"kill_rnak\" (did you mean "
              "\"kill_rank\"?)");
  ExpectError(Job("random:\n  seed: 1\n  mean_time_between_faults_s: 1\n  duration_s: 9\n"
                  "  kinds: [kill_rank, reboot]\n"),
              8, 22, "random.kinds[1]: expected one of kill_rank");
}

TEST(ScenarioErrors, ExactlyOneTrigger) {
  ExpectError(Job("faults:\n  - kind: kill_rank\n    at_step: 4\n    at_time_s: 2\n"), 7, 5,
              "faults[0].at_time_s: expected exactly one of at_step / at_time_s, got both");
  ExpectError(Job("faults:\n  - kind: kill_rank\n    rank: 1\n"), 5, 5,
              "faults[0].at_step: expected exactly one of at_step / at_time_s, got neither");
  ExpectError(Job("faults:\n  - kind: kill_rank\n    at_step: 0\n"), 6, 14,
              "faults[0].at_step: must be >= 1, got 0");
}

TEST(ScenarioErrors, RankOutOfRange) {
  ExpectError(Job("faults:\n  - kind: stop_rank\n    at_step: 4\n    rank: 4\n"), 7, 11,
              "faults[0].rank: must be <= 3, got 4");
  ExpectError(Job("faults:\n  - kind: kill_rank\n    at_step: 4\n    rank: -1\n"), 7, 11,
              "faults[0].rank: must be >= 0, got -1");
  ExpectError("job:\n  config: " + kTiny + "\n  ranks: 0\n", 3, 10,
              "job.ranks: must be >= 1, got 0");
}

TEST(ScenarioErrors, HostOutOfRangeOrUnused) {
  ExpectError(Job("faults:\n  - kind: kill_host\n    at_step: 4\n    host: 2\n",
                  "  hosts: [[0, 1], [2, 3]]\n"),
              8, 11, "faults[0].host: must be <= 1, got 2");
  ExpectError(Job("faults:\n  - kind: kill_rank\n    at_step: 4\n    host: 0\n"), 7, 5,
              "faults[0].host: not used by kill_rank");
}

TEST(ScenarioErrors, HostsMustCoverEveryRankOnce) {
  ExpectError(Job("", "  hosts: [[0, 1], [2]]\n"), 4, 10,
              "job.hosts: expected every rank in [0, 4) in one host group, got rank 3 in none");
  ExpectError(Job("", "  hosts: [[0, 1], [1, 2, 3]]\n"), 4, 20,
              "job.hosts[1][0]: expected each rank in one host group, got rank 1 again");
  ExpectError(Job("", "  hosts: [[0, 1], [2, 3, 4]]\n"), 4, 26,
              "job.hosts[1][2]: must be <= 3, got 4");
}

TEST(ScenarioErrors, HostFaultsNeedRealHostsAndNeverHitTheFirst) {
  const std::string hosts = std::string(TESSERA_SOURCE_DIR) + "/configs/chaos/hosts/test-hosts.txt";
  const std::string control = std::string(TESSERA_SOURCE_DIR) + "/tools/dev/test-hosts.sh";
  const std::string real = "  hostfile: " + hosts + "\n  host_control: " + control + "\n";
  ExpectError(Job("faults:\n  - kind: lose_host\n    at_step: 4\n    host: 1\n"), 5, 11,
              "faults[0].kind: lose_host acts on a real host: the job needs job.hostfile and "
              "job.host_control");
  ExpectError(Job("faults:\n  - kind: partition\n    at_step: 4\n    host: 0\n", real), 9, 11,
              "faults[0].host: must be >= 1, got 0");
  ExpectError(Job("faults:\n  - kind: lose_host\n    at_step: 4\n    host: 3\n", real), 9, 11,
              "faults[0].host: must be <= 2, got 3");
  ExpectError(Job("faults:\n  - kind: lose_host\n    at_step: 4\n    host: 1\n    qdisc: x\n", real),
              10, 5, "faults[0].qdisc: not used by lose_host (remove it)");
  ExpectError(Job("random:\n  seed: 1\n  mean_time_between_faults_s: 1\n  duration_s: 9\n"
                  "  kinds: [kill_rank, partition]\n", real),
              10, 22, "random.kinds[1]: expected a fault kind a campaign may draw, got partition");
  ExpectError(Job("", "  hostfile: no/such/hosts\n"), 4, 13,
              "job.hostfile: expected an existing file, got \"no/such/hosts\"");
  Result<Scenario> ok = LoadScenario(WriteScenario(Job(
      "faults:\n  - kind: slow_link\n    at_step: 4\n    host: 2\n    duration_s: 3\n"
      "    qdisc: tbf rate 1mbit burst 32kbit latency 400ms\n",
      real + "  bind: 10.231.0.1\n")));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->hostfile_hosts, (std::vector<std::string>{"10.231.0.1", "10.231.0.2", "10.231.0.3"}));
  EXPECT_EQ(ok->bind, "10.231.0.1");
  ASSERT_EQ(ok->faults.size(), 1u);
  EXPECT_EQ(ok->faults[0].qdisc, "tbf rate 1mbit burst 32kbit latency 400ms");
  EXPECT_EQ(BuildSchedule(*ok)[0].ToString(),
            "#1 slow_link host 2 (tbf rate 1mbit burst 32kbit latency 400ms) at step 4 for 3.0 s");
}

TEST(ScenarioErrors, BadErrnoAndDuration) {
  ExpectError(Job("faults:\n  - kind: io_error\n    at_step: 4\n    errno: EPERM\n"), 7, 12,
              "faults[0].errno: expected one of ENOSPC | EIO, got \"EPERM\"");
  ExpectError(Job("faults:\n  - kind: slow_rank\n    at_step: 4\n    duration_s: 0\n"), 7, 17,
              "faults[0].duration_s: must be > 0, got 0");
}

TEST(ScenarioErrors, RandomSection) {
  ExpectError(Job("random:\n  mean_time_between_faults_s: 1\n  duration_s: 9\n"), 5, 3,
              "random.seed: required key is missing");
  ExpectError(Job("random:\n  seed: 1\n  mean_time_between_faults_s: 0\n  duration_s: 9\n"), 6, 31,
              "random.mean_time_between_faults_s: must be > 0, got 0");
  ExpectError(Job("random:\n  seed: 1\n  mean_time_between_faults_s: 1\n"), 5, 3,
              "random.duration_s: required key is missing");
  ExpectError(Job("soak_s: -1\n"), 4, 9, "soak_s: must be >= 0, got -1");
}

TEST(ScenarioErrors, YamlSyntaxErrorHasItsPosition) {
  const std::string path = WriteScenario("job:\n  config: [a, b\n  ranks: 2\n");
  Result<Scenario> s = LoadScenario(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message().rfind(path + ":", 0), 0u) << s.status().message();
  EXPECT_NE(s.status().message().find("malformed YAML"), std::string::npos) << s.status().message();
  ExpectError("job:\n  config: x\n   ranks: 2\n", 3, 9, "");  // mapping values in a scalar
}

// The scenario reader shares the config's pre-check (runtime/core/yaml_input.h): one document,
// no tags, and nothing but a regular file.
TEST(ScenarioErrors, SecondDocumentsTagsAndFifosAreRefused) {
  ExpectError(Job("---\nfaults: []\n"), 4, 1, "a second YAML document");
  ExpectError(Job("soak_s: !!float 3\n"), 4, 9, "YAML tag \"tag:yaml.org,2002:float\"");
  const std::string fifo = ::testing::TempDir() + "tessera_scenario_fifo.yaml";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<Scenario> s = LoadScenario(fifo);
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.status().message(), fifo + ": cannot read scenario: is a FIFO, not a regular file");
  std::remove(fifo.c_str());
}

// A long campaign for the statistical checks.
Scenario Campaign(uint64_t seed, double mean_s, double duration_s, std::vector<FaultKind> kinds) {
  Scenario s;
  s.ranks = 4;
  s.hosts = {{0, 1}, {2, 3}};
  s.has_random = true;
  s.seed = seed;
  s.mean_time_between_faults_s = mean_s;
  s.duration_s = duration_s;
  s.first_after_s = 3;
  s.random_kinds = std::move(kinds);
  return s;
}

std::vector<std::string> Lines(const std::vector<PlannedFault>& schedule) {
  std::vector<std::string> lines;
  for (const PlannedFault& p : schedule) {
    lines.push_back(p.ToString() + " damage " + std::to_string(p.spec.damage_seed) + " errno " +
                    std::to_string(p.spec.error_number));
  }
  return lines;
}

TEST(Schedule, SameSeedSameScheduleOtherSeedOther) {
  const std::vector<FaultKind> all = {FaultKind::kKillRank, FaultKind::kCorruptShard,
                                      FaultKind::kIoError, FaultKind::kKillHost,
                                      FaultKind::kSlowRank};
  const auto a = Lines(BuildSchedule(Campaign(7, 3, 300, all)));
  const auto b = Lines(BuildSchedule(Campaign(7, 3, 300, all)));
  const auto c = Lines(BuildSchedule(Campaign(8, 3, 300, all)));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Schedule, CountTimesKindsAndFields) {
  const std::vector<FaultKind> kinds = {FaultKind::kStopRank, FaultKind::kIoError,
                                        FaultKind::kKillHost, FaultKind::kTruncateShard};
  const double mean_s = 2, duration_s = 4000;
  const std::vector<PlannedFault> schedule = BuildSchedule(Campaign(42, mean_s, duration_s, kinds));
  // ~ (4000 - 3) / 2 ≈ 2000 exponential gaps: the count's std is ~45.
  EXPECT_GT(schedule.size(), 1800u);
  EXPECT_LT(schedule.size(), 2200u);
  std::map<FaultKind, int> per_kind;
  std::set<int> errnos;
  std::set<uint64_t> damage;
  double last_s = 0;
  for (const PlannedFault& p : schedule) {
    EXPECT_EQ(p.spec.at_step, -1);
    EXPECT_GE(p.spec.at_time_s, 3);
    EXPECT_LT(p.spec.at_time_s, duration_s);
    EXPECT_GE(p.spec.at_time_s, last_s);
    last_s = p.spec.at_time_s;
    ++per_kind[p.spec.kind];
    if (p.spec.kind == FaultKind::kStopRank || p.spec.kind == FaultKind::kIoError) {
      EXPECT_GE(p.spec.rank, 0);
      EXPECT_LT(p.spec.rank, 4);
    }
    if (p.spec.kind == FaultKind::kKillHost) {
      EXPECT_TRUE(p.spec.host == 0 || p.spec.host == 1);
    }
    if (p.spec.kind == FaultKind::kIoError) {
      EXPECT_DOUBLE_EQ(p.spec.duration_s, 1.0);  // min(5, mean / 2)
      errnos.insert(p.spec.error_number);
    }
    if (p.spec.kind == FaultKind::kTruncateShard) damage.insert(p.spec.damage_seed);
  }
  EXPECT_EQ(per_kind.size(), kinds.size());  // only the listed kinds, each drawn
  for (const auto& [kind, n] : per_kind) EXPECT_GT(n, 350) << FaultKindName(kind);
  EXPECT_EQ(errnos, (std::set<int>{5, 28}));
  EXPECT_GT(damage.size(), 300u);
}

TEST(Schedule, ListedFaultsFirstWithDerivedDamageSeeds) {
  Scenario s = Campaign(5, 10, 60, {FaultKind::kKillRank});
  FaultSpec corrupt;
  corrupt.kind = FaultKind::kCorruptShard;
  corrupt.at_step = 10;
  FaultSpec truncate = corrupt;
  truncate.kind = FaultKind::kTruncateShard;
  s.faults = {corrupt, truncate};
  const std::vector<PlannedFault> a = BuildSchedule(s);
  ASSERT_GE(a.size(), 2u);
  EXPECT_EQ(a[0].spec.kind, FaultKind::kCorruptShard);
  EXPECT_EQ(a[1].spec.kind, FaultKind::kTruncateShard);
  EXPECT_NE(a[0].spec.damage_seed, a[1].spec.damage_seed);
  EXPECT_EQ(BuildSchedule(s)[0].spec.damage_seed, a[0].spec.damage_seed);
  s.seed = 6;
  EXPECT_NE(BuildSchedule(s)[0].spec.damage_seed, a[0].spec.damage_seed);
  s.has_random = false;  // no campaign: derived from seed 0, still deterministic
  EXPECT_EQ(BuildSchedule(s).size(), 2u);
  EXPECT_EQ(BuildSchedule(s)[1].spec.damage_seed, BuildSchedule(s)[1].spec.damage_seed);
}

}  // namespace
}  // namespace tessera
