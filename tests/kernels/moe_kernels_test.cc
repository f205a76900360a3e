// links: tessera_kernels
// tests/kernels/moe_kernels_test.cc — the mixture-of-experts kernels (runtime/kernels/cpu/
// moe.h) against the routing rules written out by hand (moe_routing.h): softmax and sigmoid
// scores, the balancing bias, group-limited top-k, gate normalisation and scale, the plan with
// and without capacity, gather/combine and their backward, finite differences of the router
// and of the auxiliary losses, and every op through the backend bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels/cpu/moe.h"
#include "runtime/kernels/cpu_backend.h"

namespace tessera {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

struct Routed {
  std::vector<float> scores, gate;
  std::vector<int32_t> expert;
};

Routed Route(const MoeRouterSpec& spec, const std::vector<float>& logits, const float* bias,
             int64_t R) {
  Routed r;
  r.scores.resize(static_cast<size_t>(R * spec.E));
  r.gate.resize(static_cast<size_t>(R * spec.k));
  r.expert.resize(static_cast<size_t>(R * spec.k));
  cpu::MoeRoute(spec, logits.data(), bias, r.scores.data(), r.expert.data(), r.gate.data(), R);
  return r;
}

TEST(MoeRoute, SoftmaxTopTwoNormalisedIsMixtrals) {
  MoeRouterSpec spec;
  spec.E = 4;
  spec.k = 2;
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f};
  const Routed r = Route(spec, logits, nullptr, 1);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x));
  EXPECT_NEAR(r.scores[1], std::exp(2.0) / sum, 1e-6);
  EXPECT_EQ(r.expert[0], 1);
  EXPECT_EQ(r.expert[1], 3);
  // Normalised: softmax over the chosen logits.
  const double w1 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.5));
  EXPECT_NEAR(r.gate[0], w1, 1e-6);
  EXPECT_NEAR(r.gate[1], 1.0 - w1, 1e-6);
}

TEST(MoeRoute, BiasChangesTheChoiceButNotTheGates) {
  MoeRouterSpec spec;
  spec.E = 4;
  spec.k = 1;
  spec.sigmoid = true;
  spec.normalize = false;
  spec.route_scale = 2.0f;
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f, -1.0f};
  const float bias[4] = {0.0f, 0.0f, 0.2f, 0.0f};  // sigmoid(0.5) + 0.2 > sigmoid(1)
  const Routed r = Route(spec, logits, bias, 1);
  EXPECT_EQ(r.expert[0], 2);
  EXPECT_NEAR(r.gate[0], 2.0 / (1.0 + std::exp(-0.5)), 1e-6);  // the unbiased score, scaled
}

TEST(MoeRoute, GroupLimitedRoutingKeepsTheBestGroups) {
  // Six experts in three groups of two; keep one group; top 2 inside it. Group scores (the
  // sum of each group's top two scores): {0,1}: 0.9+0.1, {2,3}: 0.8+0.7, {4,5}: 0.95+0.
  MoeRouterSpec spec;
  spec.E = 6;
  spec.k = 2;
  spec.groups = 3;
  spec.groups_kept = 1;
  spec.sigmoid = true;
  auto logit = [](double p) { return static_cast<float>(std::log(p / (1 - p))); };
  const std::vector<float> logits = {logit(0.9), logit(0.1), logit(0.8), logit(0.7),
                                     logit(0.95), logit(0.001)};
  const Routed r = Route(spec, logits, nullptr, 1);
  EXPECT_EQ(r.expert[0], 2);  // expert 4 (0.95) is best alone, but its group is not kept
  EXPECT_EQ(r.expert[1], 3);
  EXPECT_NEAR(r.gate[0] + r.gate[1], 1.0, 1e-6);
}

TEST(MoeRoute, TiesGoToTheLowerIndex) {
  MoeRouterSpec spec;
  spec.E = 4;
  spec.k = 2;
  const Routed r = Route(spec, {1.0f, 1.0f, 1.0f, 1.0f}, nullptr, 1);
  EXPECT_EQ(r.expert[0], 0);
  EXPECT_EQ(r.expert[1], 1);
}

// Finite differences of sum_j c_j * gate_j through the router, for every kind.
TEST(MoeRoute, BackwardMatchesFiniteDifferences) {
  for (bool sigmoid : {false, true}) {
    for (bool normalize : {false, true}) {
      MoeRouterSpec spec;
      spec.E = 6;
      spec.k = 3;
      spec.sigmoid = sigmoid;
      spec.normalize = normalize;
      spec.route_scale = 1.7f;
      const int64_t R = 5;
      std::vector<float> logits = Random(static_cast<size_t>(R * spec.E), 1, 2.0f);
      const std::vector<float> c = Random(static_cast<size_t>(R * spec.k), 2);
      const Routed base = Route(spec, logits, nullptr, R);
      std::vector<float> d_logits(logits.size());
      cpu::MoeRouteBackward(spec, base.scores.data(), base.expert.data(), c.data(),
                            d_logits.data(), R);
      for (size_t i = 0; i < logits.size(); ++i) {
        auto f = [&](float delta) {
          std::vector<float> l = logits;
          l[i] += delta;
          const Routed r = Route(spec, l, nullptr, R);
          EXPECT_EQ(r.expert, base.expert);  // a small step keeps the choice
          double s = 0;
          for (size_t j = 0; j < c.size(); ++j) s += double(c[j]) * r.gate[j];
          return s;
        };
        const float h = 1e-2f;
        const double numeric = (f(h) - f(-h)) / (2 * h);
        EXPECT_NEAR(d_logits[i], numeric, 2e-3 + 2e-3 * std::abs(numeric))
            << "sigmoid " << sigmoid << " normalize " << normalize << " logit " << i;
      }
    }
  }
}

TEST(MoePlan, DroplessGroupsByExpertInTokenOrder) {
  // Three tokens, k = 2, three experts.
  const std::vector<int32_t> expert = {2, 0, 0, 1, 2, 1};
  const std::vector<float> scores(9, 0.3f);
  std::vector<int32_t> row_of(6), token_of_row(6);
  std::vector<int64_t> offset(4), counts(3, 0);
  EXPECT_EQ(cpu::MoePlan(expert.data(), scores.data(), 3, 2, 3, -1, row_of.data(),
                         token_of_row.data(), offset.data(), counts.data()),
            6);
  EXPECT_EQ(offset, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(counts, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(token_of_row, (std::vector<int32_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(row_of, (std::vector<int32_t>{4, 0, 1, 2, 5, 3}));
}

TEST(MoePlan, CapacityKeepsTheHighestProbabilitiesAndCountsBeforeDropping) {
  // Four tokens choose experts 0 and 1 (k = 2 of E = 3); capacity 2. Scores (R, E):
  //   token 0: 0.60 0.30 0.10   gates after normalisation 0.67 0.33
  //   token 1: 0.45 0.05 0.50   (its top two are 2 and 0; it does not choose expert 1)
  //   token 2: 0.20 0.10 0.70
  //   token 3: 0.50 0.40 0.10
  const std::vector<float> scores = {0.60f, 0.30f, 0.10f, 0.45f, 0.05f, 0.50f,
                                     0.20f, 0.10f, 0.70f, 0.50f, 0.40f, 0.10f};
  const std::vector<int32_t> expert = {0, 1, 2, 0, 2, 0, 0, 1};
  std::vector<int32_t> row_of(8), token_of_row(8);
  std::vector<int64_t> offset(4), counts(3, 0);
  const int64_t rows = cpu::MoePlan(expert.data(), scores.data(), 4, 2, 3, 2, row_of.data(),
                                    token_of_row.data(), offset.data(), counts.data());
  // Expert 0 is chosen by all four tokens (probabilities 0.60, 0.45, 0.20, 0.50): tokens 0
  // and 3 stay, tokens 1 and 2 are dropped; the counts are taken before dropping.
  EXPECT_EQ(counts, (std::vector<int64_t>{4, 2, 2}));
  EXPECT_EQ(rows, 6);
  EXPECT_EQ(offset, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(row_of[0], 0);   // token 0, expert 0
  EXPECT_EQ(row_of[3], -1);  // token 1, expert 0: dropped
  EXPECT_EQ(row_of[5], -1);  // token 2, expert 0: dropped
  EXPECT_EQ(row_of[6], 1);   // token 3, expert 0
  EXPECT_EQ(row_of[1], 2);   // expert 1: tokens 0 and 3, both kept
  EXPECT_EQ(row_of[7], 3);
  EXPECT_EQ(row_of[2], 4);   // expert 2: tokens 1 and 2
  EXPECT_EQ(row_of[4], 5);
}

TEST(MoePlan, CapacityRanksByProbabilityNotByNormalisedGate) {
  // Two tokens on expert 0 with capacity 1. Token 0's probability is higher (0.6 > 0.45),
  // token 1's normalised gate is higher (0.45 / 0.5 = 0.9 > 0.6 / 0.9 = 0.67): token 0 stays.
  const std::vector<float> scores = {0.60f, 0.30f, 0.45f, 0.05f};
  const std::vector<int32_t> expert = {0, 1, 0, 1};
  std::vector<int32_t> row_of(4), token_of_row(4);
  std::vector<int64_t> offset(3), counts(2, 0);
  cpu::MoePlan(expert.data(), scores.data(), 2, 2, 2, 1, row_of.data(), token_of_row.data(),
               offset.data(), counts.data());
  EXPECT_EQ(row_of[0], 0);
  EXPECT_EQ(row_of[2], -1);
  // Expert 1: probabilities 0.30 and 0.05: token 0 stays.
  EXPECT_EQ(row_of[1], 1);
  EXPECT_EQ(row_of[3], -1);
}

TEST(MoeCombine, BackwardsAreTheDuals) {
  const int64_t R = 4, k = 2, C = 3, E = 3;
  const std::vector<int32_t> expert = {0, 1, 2, 0, 1, 2, 0, 2};
  const std::vector<float> gate = Random(R * k, 5), scores = Random(R * E, 9);
  std::vector<int32_t> row_of(R * k), token_of_row(R * k);
  std::vector<int64_t> offset(E + 1), counts(E, 0);
  const int64_t rows = cpu::MoePlan(expert.data(), scores.data(), R, k, E, 2, row_of.data(),
                                    token_of_row.data(), offset.data(), counts.data());
  const std::vector<float> x = Random(R * C, 6), y = Random(rows * C, 7), d_out = Random(R * C, 8);
  // <d_out, combine(y)> = <d_y, y> + ...: check d_y and d_gate against the definitions.
  std::vector<float> out(R * C), d_y(rows * C), d_gate(R * k);
  cpu::MoeCombine(out.data(), y.data(), gate.data(), row_of.data(), R, k, C);
  cpu::MoeCombineBackward(d_y.data(), d_gate.data(), d_out.data(), y.data(), gate.data(),
                          row_of.data(), R, k, C);
  for (int64_t t = 0; t < R; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = row_of[t * k + j];
      double dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        if (row >= 0) dot += double(d_out[t * C + c]) * y[row * C + c];
      }
      EXPECT_NEAR(d_gate[t * k + j], dot, 1e-6);
      if (row < 0) continue;
      for (int64_t c = 0; c < C; ++c) {
        EXPECT_FLOAT_EQ(d_y[row * C + c], gate[t * k + j] * d_out[t * C + c]);
      }
    }
  }
  // gather's backward adds each row's gradient back to its token.
  std::vector<float> rows_x(rows * C), d_x(R * C, 0.0f);
  cpu::MoeGather(rows_x.data(), x.data(), token_of_row.data(), rows, C);
  cpu::MoeGatherBackward(d_x.data(), y.data(), row_of.data(), R, k, C);
  std::vector<double> want(R * C, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(rows_x[r * C + c], x[token_of_row[r] * C + c]);
      want[token_of_row[r] * C + c] += y[r * C + c];
    }
  }
  for (int64_t i = 0; i < R * C; ++i) EXPECT_NEAR(d_x[i], want[i], 1e-6);
}

// L = sum_e a_e sum_t p_te + z * mean_t lse_t^2, through softmax and normalised sigmoid.
TEST(MoeAux, BackwardMatchesFiniteDifferences) {
  for (bool sigmoid : {false, true}) {
    MoeRouterSpec spec;
    spec.E = 5;
    spec.k = 2;
    spec.sigmoid = sigmoid;
    const int64_t R = 4;
    std::vector<float> logits = Random(R * spec.E, 9, 1.5f);
    const std::vector<float> a = Random(spec.E, 10);
    const float z = 0.3f;
    auto loss = [&](const std::vector<float>& l) {
      const Routed r = Route(spec, l, nullptr, R);
      std::vector<double> probs(spec.E, 0.0), counts(spec.E, 0.0);
      double zsum = 0;
      cpu::MoeBalanceStats(spec, l.data(), r.scores.data(), r.expert.data(), R, probs.data(),
                           counts.data(), &zsum);
      double s = z * zsum / R;
      for (int64_t e = 0; e < spec.E; ++e) s += a[e] * probs[e];
      return s;
    };
    const Routed base = Route(spec, logits, nullptr, R);
    std::vector<float> d_logits(logits.size(), 0.0f);
    MoeAuxGrad aux;
    aux.switch_coef = a.data();
    aux.z_scale = 2.0f * z / R;
    cpu::MoeAuxBackward(spec, logits.data(), base.scores.data(), aux, d_logits.data(), R);
    for (size_t i = 0; i < logits.size(); ++i) {
      std::vector<float> p = logits, m = logits;
      p[i] += 1e-2f;
      m[i] -= 1e-2f;
      const double numeric = (loss(p) - loss(m)) / 2e-2;
      EXPECT_NEAR(d_logits[i], numeric, 1e-3 + 1e-3 * std::abs(numeric)) << "sigmoid " << sigmoid;
    }
  }
}

TEST(MoeBackend, TheCpuBackendIsTheKernelsBitForBit) {
  CpuBackend be;
  MoeRouterSpec spec;
  spec.E = 8;
  spec.k = 3;
  spec.groups = 4;
  spec.groups_kept = 3;
  spec.sigmoid = true;
  const int64_t R = 16;
  const std::vector<float> logits = Random(R * spec.E, 20);
  const Routed want = Route(spec, logits, nullptr, R);
  Routed got;
  got.scores.resize(want.scores.size());
  got.gate.resize(want.gate.size());
  got.expert.resize(want.expert.size());
  be.MoeRoute(spec, logits.data(), nullptr, got.scores.data(), got.expert.data(), got.gate.data(), R);
  EXPECT_EQ(std::memcmp(got.scores.data(), want.scores.data(), want.scores.size() * 4), 0);
  EXPECT_EQ(std::memcmp(got.gate.data(), want.gate.data(), want.gate.size() * 4), 0);
  EXPECT_EQ(got.expert, want.expert);
}

}  // namespace
}  // namespace tessera
