// links: tessera_train
// The environment fingerprint (runtime/train/env_info.h): the keys that trace a result to its
// code, compiler, libraries and CPU are present, and a saved fingerprint is compared key by
// key, placement keys told apart.
#include "runtime/train/env_info.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/core/json.h"

namespace tessera {
namespace {

TEST(EnvironmentFingerprint, NamesCodeCompilerLibrariesAndCpu) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : EnvironmentFingerprint()) {
    keys.push_back(key);
    EXPECT_FALSE(value.empty()) << key;
  }
  for (const char* want : {"git_commit", "compiler", "openblas", "onednn", "bf16_gemm", "mpi",
                           "nccl", "cuda_backend", "cpu", "cpu_features", "hostname"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), want), keys.end()) << want;
  }
  auto parsed = ParseJson(EnvironmentFingerprintJson());
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(CompareEnvironment(*parsed).empty());  // this process against itself
}

TEST(EnvironmentFingerprint, DifferencesSayWhichKeysAndWhetherOnlyThePlacementMoved) {
  auto parsed = ParseJson(EnvironmentFingerprintJson());
  ASSERT_TRUE(parsed.ok());
  std::vector<std::pair<std::string, JsonValue>> members = parsed->members();
  for (auto& [key, value] : members) {
    if (key == "git_commit") value = JsonValue::String("0000000000ab");
    if (key == "hostname") value = JsonValue::String("another-host");
  }
  members.erase(std::remove_if(members.begin(), members.end(),
                               [](const auto& kv) { return kv.first == "mpi"; }),
                members.end());
  members.emplace_back("gpu", JsonValue::String("H200"));
  const std::vector<EnvironmentDifference> d = CompareEnvironment(JsonValue::Object(members));
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].key, "git_commit");
  EXPECT_FALSE(d[0].placement);
  EXPECT_EQ(DescribeDifference(d[0]).rfind("git_commit: 0000000000ab -> ", 0), 0u);
  EXPECT_EQ(d[1].key, "mpi");  // missing from the saved one
  EXPECT_EQ(DescribeDifference(d[1]).rfind("mpi: (none) -> ", 0), 0u);
  EXPECT_EQ(d[2].key, "hostname");
  EXPECT_TRUE(d[2].placement);
  EXPECT_EQ(d[3].key, "gpu");  // only the saved one has it
  EXPECT_EQ(DescribeDifference(d[3]), "gpu: H200 -> (none)");
  // Not an object (a damaged or foreign manifest's field): every key differs.
  EXPECT_EQ(CompareEnvironment(JsonValue::String("x")).size(), EnvironmentFingerprint().size());
}

}  // namespace
}  // namespace tessera
