// tests/unit/expert_split_state_test.cc — ExpertSplitState (runtime/train/expert_split_state.h)
// on the in-process fake backend, 4 ranks = dp 2 x ep 2 of a tiny MoE model: under every ZeRO
// stage the ranks' checkpoint shares (SaveSpans, mapped through each rank's partition) cover
// every global element exactly once with the values Load put there, the moments round-trip,
// GatherFull gives every dp-0 rank its whole local model, and the gradient norm counts each
// dense element once and each expert once.
// links: tessera_train
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "comm/fake_communicator.h"
#include "models/param_layout.h"
#include "models/partition.h"
#include "runtime/train/expert_split_state.h"
#include "runtime/train/rank_layout.h"

namespace tessera {
namespace {

constexpr int kDp = 2, kEp = 2;

ModelConfig TinyMoe() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 32;
  c.max_seq_len = 16;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.ffn_hidden_size = 24;
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_ffn_size = 8;
  return c;
}

// A global element's test value.
float ValueOf(int64_t global) { return 0.5f + static_cast<float>(global); }

struct RankOutcome {
  std::vector<std::pair<int64_t, float>> saved;     // (global element, value) of its spans
  std::vector<std::pair<int64_t, float>> saved_m;   // the same for exp_avg
  std::vector<float> gathered;                       // GatherFull (dp 0 ranks)
  std::vector<float> expected_local;                 // the partition's values
  double sum_sq = 0;
  Status status = Status::Ok();
};

void RunRank(int rank, int zero, FakeHub& dense, FakeHub& expert_dp, FakeHub& ep,
             RankOutcome& out) {
  const int dp_i = rank / kEp, ep_i = rank % kEp;
  CommOptions o;
  o.timeout_s = 30;
  o.name = "dp_ep";
  auto c_dense = dense.Connect(rank, o);
  o.name = "dp";
  auto c_expert = expert_dp.Connect(dp_i, o);
  o.name = "ep";
  auto c_ep = ep.Connect(ep_i, o);
  const ModelConfig config = TinyMoe();
  auto part = ModelPartition::Create(config, 1, 0, {}, kEp, ep_i);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  ParamShardsOptions po;
  po.zero = zero;
  po.expert_units = part->expert_units();
  AdamWConfig adamw;
  std::vector<ParamRange> ranges;
  for (const TpParam& p : part->params()) ranges.push_back({p.local_offset, p.local.shape.numel(), true, p.local.name});
  auto state = ExpertSplitState::Create(po, adamw, part->unit_bounds(), ranges, c_dense.get(),
                                        c_expert.get(), c_ep.get(), nullptr);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  ExpertSplitState& s = **state;
  // The local element -> global element map of this rank.
  std::vector<int64_t> global(static_cast<size_t>(part->num_local()), -1);
  part->ForEachGlobalPiece(0, part->num_local(), [&](const TpParam& p, int64_t gb, int64_t n, int64_t local) {
    for (int64_t i = 0; i < n; ++i) global[static_cast<size_t>(local + i)] = p.global_offset + gb + i;
  });
  auto fill = [&](int64_t b, int64_t e, float* x) {
    for (int64_t i = b; i < e; ++i) x[i - b] = ValueOf(global[static_cast<size_t>(i)]);
  };
  auto fill_m = [&](int64_t b, int64_t e, float* x) {
    for (int64_t i = b; i < e; ++i) x[i - b] = -ValueOf(global[static_cast<size_t>(i)]);
  };
  EXPECT_TRUE(s.Load(fill).ok());
  EXPECT_TRUE(s.LoadMoments(fill_m, fill_m, 7).ok());
  EXPECT_EQ(s.adamw_step(), 7);
  for (const ParamState::SaveSpan& span : s.SaveSpans()) {
    for (int64_t i = span.begin; i < span.end; ++i) {
      out.saved.emplace_back(global[static_cast<size_t>(i)], span.values[i - span.begin]);
      out.saved_m.emplace_back(global[static_cast<size_t>(i)], span.exp_avg[i - span.begin]);
    }
  }
  auto full = s.GatherFull(0);
  if (!full.ok()) {
    out.status = full.status();
    return;
  }
  out.gathered = *full;
  out.expected_local.resize(global.size());
  fill(0, part->num_local(), out.expected_local.data());

  // Gradients: 1 in every dense element and 2 in every expert element on every rank. Dense
  // ones are summed over the 4 dense ranks (4 each), experts over the 2 dp ranks (4 each), so
  // every global element's reduced gradient is 4: the norm's square is 16 x num_params.
  s.BeginStep();
  s.BeginMicroBatch(0);
  const std::vector<int64_t>& bounds = part->unit_bounds();
  const std::vector<int> experts = part->expert_units();
  for (int u = static_cast<int>(bounds.size()) - 2; u >= 0; --u) {
    const bool expert = std::find(experts.begin(), experts.end(), u) != experts.end();
    s.Acquire(u);
    float* g = s.Grads(u);
    for (int64_t i = 0; i < bounds[u + 1] - bounds[u]; ++i) g[i] = expert ? 2.0f : 1.0f;
    s.GradsDone(u);
    s.Release(u);
  }
  out.status = s.FinishGradients();
  if (!out.status.ok()) return;
  auto sum_sq = s.GradSumOfSquares();
  if (!sum_sq.ok()) {
    out.status = sum_sq.status();
    return;
  }
  out.sum_sq = *sum_sq;
}

TEST(ExpertSplitState, SharesCoverEveryElementOnceAndTheNormCountsEachOnce) {
  const int64_t n = UnitBounds(TinyMoe()).back();
  for (int zero : {0, 1, 2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    auto dense = FakeHub::Create(kDp * kEp);
    std::vector<std::shared_ptr<FakeHub>> expert_dp, ep;
    for (int i = 0; i < kEp; ++i) expert_dp.push_back(FakeHub::Create(kDp));
    for (int i = 0; i < kDp; ++i) ep.push_back(FakeHub::Create(kEp));
    std::vector<RankOutcome> out(kDp * kEp);
    std::vector<std::thread> threads;
    for (int r = 0; r < kDp * kEp; ++r) {
      threads.emplace_back([&, r] { RunRank(r, zero, *dense, *expert_dp[r % kEp], *ep[r / kEp], out[r]); });
    }
    for (auto& t : threads) t.join();
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (int r = 0; r < kDp * kEp; ++r) {
      ASSERT_TRUE(out[r].status.ok()) << r << ": " << out[r].status.ToString();
      for (size_t i = 0; i < out[r].saved.size(); ++i) {
        const auto [g, v] = out[r].saved[i];
        ASSERT_GE(g, 0);
        ++seen[static_cast<size_t>(g)];
        EXPECT_EQ(v, ValueOf(g)) << "element " << g;
        EXPECT_EQ(out[r].saved_m[i].second, -ValueOf(g)) << "element " << g;
      }
      if (r / kEp == 0) {
        EXPECT_EQ(out[r].gathered, out[r].expected_local) << "rank " << r;
      } else {
        EXPECT_TRUE(out[r].gathered.empty()) << "rank " << r;
      }
      EXPECT_EQ(out[r].sum_sq, 16.0 * static_cast<double>(n)) << "rank " << r;
    }
    for (int64_t g = 0; g < n; ++g) ASSERT_EQ(seen[static_cast<size_t>(g)], 1) << "element " << g;
  }
}

}  // namespace
}  // namespace tessera
