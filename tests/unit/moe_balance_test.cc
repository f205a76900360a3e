// tests/unit/moe_balance_test.cc — the step's MoE bookkeeping (runtime/train/moe_balance.h):
// the aux-loss-free bias follows bias += rate * sign(mean - count) over several steps, a
// skipped step moves nothing, the report's imbalance / dropped / aux figures, statistics reset,
// and the same figures summed over data-parallel ranks of the fake communicator.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "comm/fake_communicator.h"
#include "runtime/train/moe_balance.h"

namespace tessera {
namespace {

ModelConfig TwoBlocks(float rate) {
  ModelConfig c;
  c.num_layers = 3;
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.first_dense_layers = 1;  // blocks 1 and 2 are MoE
  c.moe.bias_update_rate = rate;
  return c;
}

void Record(MoeLayerState& s, std::vector<int64_t> counts, int64_t kept, double aux) {
  int64_t total = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    s.counts[e] += counts[e];
    total += counts[e];
  }
  s.assigned += total;
  s.kept += kept;
  s.aux_loss += aux;
  s.calls += 1;
}

TEST(MoeBalance, TheBiasFollowsTheFormulaStepAfterStep) {
  const ModelConfig c = TwoBlocks(0.5f);
  MoeLayerState a(4), b(4);
  std::vector<LocalMoeLayer> local = {{1, &a}, {2, &b}};
  // Step 1: counts {6, 2, 4, 4}: mean 4 -> signs {-1, +1, 0, 0}.
  Record(a, {6, 2, 4, 4}, 16, 0.25);
  Record(b, {4, 4, 4, 4}, 12, 0.5);
  Result<MoeStepReport> r = FinishMoeStep(c, local, nullptr, nullptr, /*applied=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(a.bias, (std::vector<float>{-0.5f, 0.5f, 0.0f, 0.0f}));
  EXPECT_EQ(b.bias, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
  ASSERT_EQ(r->layers.size(), 2u);
  EXPECT_EQ(r->layers[0].layer, 1);
  EXPECT_EQ(r->layers[0].counts, (std::vector<int64_t>{6, 2, 4, 4}));
  EXPECT_DOUBLE_EQ(r->layers[0].imbalance, 1.5);
  EXPECT_DOUBLE_EQ(r->layers[1].dropped, 0.25);
  EXPECT_DOUBLE_EQ(r->layers[0].aux_loss, 0.25);
  EXPECT_DOUBLE_EQ(r->aux_loss, 0.75);
  EXPECT_EQ(r->worst_layer, 1);
  EXPECT_EQ(r->layers[0].bias, a.bias);
  EXPECT_FLOAT_EQ(r->layers[0].bias_min, -0.5f);
  EXPECT_EQ(a.calls, 0) << "statistics reset for the next step";
  // Step 2: counts {1, 7, 4, 4}: signs {+1, -1, 0, 0}, added to the bias.
  Record(a, {1, 7, 4, 4}, 16, 0.0);
  ASSERT_TRUE(FinishMoeStep(c, local, nullptr, nullptr, true).ok());
  EXPECT_EQ(a.bias, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
  // A skipped step reports but moves nothing.
  Record(a, {8, 0, 4, 4}, 16, 0.0);
  ASSERT_TRUE(FinishMoeStep(c, local, nullptr, nullptr, /*applied=*/false).ok());
  EXPECT_EQ(a.bias, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
}

TEST(MoeBalance, NoRateNoBiasAndADenseModelReportsNothing) {
  MoeLayerState a(4);
  std::vector<LocalMoeLayer> local = {{1, &a}};
  Record(a, {8, 0, 4, 4}, 16, 0.0);
  ASSERT_TRUE(FinishMoeStep(TwoBlocks(0.0f), local, nullptr, nullptr, true).ok());
  EXPECT_EQ(a.bias, (std::vector<float>(4, 0.0f)));
  ModelConfig dense;
  Result<MoeStepReport> r = FinishMoeStep(dense, {}, nullptr, nullptr, true);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->layers.empty());
  EXPECT_EQ(FormatMoeProgress(*r), "");
}

TEST(MoeBalance, CountsAreSummedOverTheDataParallelRanksBeforeTheBiasMoves) {
  const ModelConfig c = TwoBlocks(1.0f);
  auto hub = FakeHub::Create(2);
  std::vector<MoeLayerState> a(2, MoeLayerState(4)), b(2, MoeLayerState(4));
  std::vector<Result<MoeStepReport>> reports(2, Result<MoeStepReport>(Internal("unset")));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      // Rank 0 alone would give signs {-1, +1, +1, -1}; summed, {5, 3, 4, 4}: {-1, +1, 0, 0}.
      Record(a[r], r == 0 ? std::vector<int64_t>{3, 1, 1, 3} : std::vector<int64_t>{2, 2, 3, 1}, 8, 0.1);
      Record(b[r], {2, 2, 2, 2}, 8, 0.1);
      std::vector<LocalMoeLayer> local = {{1, &a[r]}, {2, &b[r]}};
      CommOptions co;
      co.name = "dp";
      co.timeout_s = 30;
      auto comm = hub->Connect(r, co);
      reports[r] = FinishMoeStep(c, local, comm.get(), nullptr, true);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(a[r].bias, (std::vector<float>{-1.0f, 1.0f, 0.0f, 0.0f})) << "rank " << r;
    EXPECT_EQ(reports[r]->layers[0].counts, (std::vector<int64_t>{5, 3, 4, 4}));
    EXPECT_DOUBLE_EQ(reports[r]->layers[0].aux_loss, 0.1);  // mean over the 2 calls
  }
}

TEST(MoeBalance, TheHistogramShowsEachExpertsShare) {
  MoeLayerReport l;
  l.layer = 3;
  l.counts = {30, 10, 40, 20};
  l.imbalance = 1.6;
  const std::string h = FormatMoeHistogram({l}, 7);
  EXPECT_NE(h.find("last 7 steps"), std::string::npos) << h;
  EXPECT_NE(h.find("layer 3 (imbalance 1.60"), std::string::npos) << h;
  EXPECT_NE(h.find("expert   2  40.0% " + std::string(20, '#') + "\n"), std::string::npos) << h;
}

}  // namespace
}  // namespace tessera
