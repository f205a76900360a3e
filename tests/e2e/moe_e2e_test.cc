// tests/e2e/moe_e2e_test.cc — the shipped mixture-of-experts configs through the CLI: each
// trains to the built-in corpus's entropy floor like the dense configs, and a user sees the
// routing (metrics.jsonl per block and expert, the progress line's worst imbalance, the
// summary's histogram); MoE config errors name the numbers; `tessera bench moe` runs.
#include <gtest/gtest.h>

#include <string>

#include "runtime/core/json.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

std::string LastLine(const std::string& text) {
  const size_t end = text.find_last_not_of('\n');
  const size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

class MoeConfigs : public ::testing::TestWithParam<const char*> {};

TEST_P(MoeConfigs, TrainsToTheEntropyFloorAndReportsTheRouting) {
  const std::string name = GetParam();
  TempDir dir("moe_" + name);
  auto r = Tessera("train " + Repo("configs/" + name + ".yaml") + " --set train.out_dir=" + dir / "run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto last = ParseJson(LastLine(ReadFile(dir / "run/metrics.jsonl")));
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  const JsonValue* val = last->Find("val_loss");
  const JsonValue* gap = last->Find("floor_gap");
  const JsonValue* loss = last->Find("loss");
  ASSERT_TRUE(val && gap && loss) << r.output;
  const double floor = loss->as_double() - gap->as_double();
  EXPECT_LT(val->as_double() - floor, 0.1) << r.output;
  EXPECT_GT(val->as_double(), floor - 0.05);
  // What a user watches: every MoE block with per-expert counts, drops, imbalance, aux, bias.
  const JsonValue* moe = last->Find("moe");
  ASSERT_TRUE(moe != nullptr && moe->is_array() && !moe->items().empty()) << r.output;
  for (const JsonValue& layer : moe->items()) {
    for (const char* key : {"layer", "counts", "dropped", "imbalance", "aux_loss", "bias_min", "bias_max"}) {
      EXPECT_NE(layer.Find(key), nullptr) << key;
    }
    const JsonValue* imbalance = layer.Find("imbalance");
    ASSERT_NE(imbalance, nullptr);
    EXPECT_GE(imbalance->as_double(), 1.0);
    EXPECT_LT(imbalance->as_double(), 2.0) << "a balanced config ends badly imbalanced";
  }
  EXPECT_NE(last->Find("moe_aux_loss"), nullptr);
  EXPECT_NE(r.output.find("| imbalance "), std::string::npos) << "progress line";
  EXPECT_NE(r.output.find("experts' share of the tokens"), std::string::npos) << "summary";
}

INSTANTIATE_TEST_SUITE_P(Shipped, MoeConfigs,
                         ::testing::Values("moe-tiny", "moe-mixtral-tiny", "moe-deepseek-tiny"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string n = p.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(MoeConfigErrors, NameTheNumbersAndTheFix) {
  const std::string cfg = Repo("configs/moe-tiny.yaml");
  struct Case {
    std::string set, want;
  } cases[] = {
      {"model.moe.top_k=5", "model.moe.top_k: top_k=5 must be in [1, num_experts=4]"},
      {"model.moe.groups=3", "model.moe.groups: groups=3 must divide num_experts=4"},
      {"model.moe.capacity_factor=0", "capacity_factor: must be > 0, got 0 (a factor > 0, e.g. 1.25, or dropless"},
      {"model.moe.num_experts=1", "model.moe.num_experts: must be 0 (a dense model) or >= 2, got 1"},
      {"parallel.ep=3", "parallel.ep: ep=3 does not divide num_experts=4 (every expert-parallel "
                        "rank holds the same number of experts; use an ep that divides 4)"},
  };
  for (const Case& c : cases) {
    auto r = Tessera("train " + cfg + " --set " + c.set + " --set train.steps=1");
    EXPECT_EQ(r.exit_code, 3) << c.set << "\n" << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << c.set << "\n" << r.output;
  }
}

TEST(MoeBench, RunsAndRefusesBadFlags) {
  auto r = Tessera("bench moe --tokens 64 --hidden 32 --expert-ffn 32 --experts 4 --steps 1 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("balanced"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("skewed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of peak"), std::string::npos) << r.output;
  auto bad = Tessera("bench moe --top-k 9 --experts 4");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--top-k 9 exceeds --experts 4"), std::string::npos) << bad.output;
}

TEST(MoeBench, UnderMpirunRunsExpertParallelWithTheAllToAllBesideRawMpi) {
  CommandResult r = RunCommand(Repo("tools/dev/mpirun.sh") + " -np 2 " + std::string(TESSERA_BINARY) +
                               " bench moe --tokens 64 --hidden 32 --expert-ffn 32 --experts 4 "
                               "--steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ep=2 (2 experts per rank), 1 thread per rank"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("dispatch and return all-to-alls"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of raw MPI_Alltoallv's bus bandwidth"), std::string::npos) << r.output;
  CommandResult bad = RunCommand(Repo("tools/dev/mpirun.sh") + " -np 3 " + std::string(TESSERA_BINARY) +
                                 " bench moe --experts 4 --steps 1");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("--experts 4 do not divide among 3 ranks"), std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace tessera::testing
