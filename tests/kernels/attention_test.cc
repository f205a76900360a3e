// links: tessera_kernels
// tests/kernels/attention_test.cc — causal attention (MHA and grouped-query, with and without a
// sliding window) against a naive triple loop, finite differences of the backward,
// determinism, and "d_qkv is written".
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu/ops.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {
namespace {

using testing::BitEqual;
using testing::ExpectGradMatches;
using testing::Project;
using testing::RandomVector;
using testing::RelativeError;

struct Shape {
  int64_t B, T, NH, NKV, HS;
  int64_t window = 0;  // 0: causal only
  int64_t R() const { return (NH + 2 * NKV) * HS; }
  // The first key query i may see (Mistral: keys j with i - j < window).
  int64_t First(int64_t i) const { return window > 0 ? std::max<int64_t>(0, i - window + 1) : 0; }
};

// out and att in double, straight from the definition.
void NaiveAttention(std::vector<float>& out, std::vector<float>& att, const std::vector<float>& qkv,
                    const Shape& s) {
  const int64_t R = s.R(), group = s.NH / s.NKV;
  out.assign(s.B * s.T * s.NH * s.HS, 0.0f);
  att.assign(s.B * s.NH * s.T * s.T, 0.0f);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h) {
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < s.T; ++i) {
        const float* q = qkv.data() + (b * s.T + i) * R + h * s.HS;
        std::vector<double> score(i + 1, 0.0);
        double m = -1e300;
        const int64_t lo = s.First(i);
        for (int64_t j = lo; j <= i; ++j) {
          const float* k = qkv.data() + (b * s.T + j) * R + (s.NH + kvh) * s.HS;
          double d = 0;
          for (int64_t c = 0; c < s.HS; ++c) d += static_cast<double>(q[c]) * k[c];
          score[j] = d / std::sqrt(static_cast<double>(s.HS));
          m = std::max(m, score[j]);
        }
        double z = 0;
        for (int64_t j = lo; j <= i; ++j) z += (score[j] = std::exp(score[j] - m));
        for (int64_t c = 0; c < s.HS; ++c) {
          double o = 0;
          for (int64_t j = lo; j <= i; ++j)
            o += score[j] / z * qkv[(b * s.T + j) * R + (s.NH + s.NKV + kvh) * s.HS + c];
          out[(b * s.T + i) * s.NH * s.HS + h * s.HS + c] = static_cast<float>(o);
        }
        for (int64_t j = lo; j <= i; ++j)
          att[((b * s.NH + h) * s.T + i) * s.T + j] = static_cast<float>(score[j] / z);
      }
    }
}

void ExpectForwardMatchesNaive(const Shape& s) {
  const auto qkv = RandomVector(s.B * s.T * s.R(), 1, -2.0f, 2.0f);
  std::vector<float> out(s.B * s.T * s.NH * s.HS), att(s.B * s.NH * s.T * s.T, 5.0f), ref_out, ref_att;
  AttentionForward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.HS, s.window);
  NaiveAttention(ref_out, ref_att, qkv, s);
  EXPECT_LT(RelativeError(out.data(), ref_out.data(), out.size()), 1e-5);
  EXPECT_LT(RelativeError(att.data(), ref_att.data(), att.size()), 1e-5);
  for (int64_t bh = 0; bh < s.B * s.NH; ++bh) {
    for (int64_t i = 0; i < s.T; ++i) {
      for (int64_t j = 0; j < s.T; ++j) {
        if (j < s.First(i) || j > i) {
          ASSERT_EQ(att[(bh * s.T + i) * s.T + j], 0.0f);
        }
      }
    }
  }
}

TEST(Attention, ForwardMatchesNaiveMultiHead) { ExpectForwardMatchesNaive({2, 7, 3, 3, 8}); }
TEST(Attention, ForwardMatchesNaiveGroupedQuery) { ExpectForwardMatchesNaive({2, 6, 4, 2, 8}); }
TEST(Attention, ForwardMatchesNaiveMultiQuery) { ExpectForwardMatchesNaive({1, 9, 4, 1, 4}); }
// Large enough that the (b, h) loop runs on the OpenMP pool, sgemm inside each item.
TEST(Attention, ForwardMatchesNaiveOnThreads) { ExpectForwardMatchesNaive({2, 16, 4, 2, 8}); }
TEST(Attention, ForwardMatchesNaiveSlidingWindow) {
  ExpectForwardMatchesNaive({2, 9, 4, 2, 8, 3});
  ExpectForwardMatchesNaive({1, 5, 2, 2, 4, 1});   // each token sees itself only
  ExpectForwardMatchesNaive({1, 6, 2, 1, 4, 6});   // a window of T: plain causal attention
  ExpectForwardMatchesNaive({2, 16, 4, 2, 8, 5});  // on threads
}

// A window covering the sequence computes the causal attention bit for bit.
TEST(Attention, WindowOfSequenceLengthIsCausal) {
  const Shape s{2, 8, 4, 2, 8};
  const auto qkv = RandomVector(s.B * s.T * s.R(), 9, -2.0f, 2.0f);
  std::vector<float> out[2], att[2];
  for (int run = 0; run < 2; ++run) {
    out[run].assign(s.B * s.T * s.NH * s.HS, 0.0f);
    att[run].assign(s.B * s.NH * s.T * s.T, 0.0f);
    AttentionForward(out[run].data(), att[run].data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.HS,
                     run == 0 ? 0 : s.T);
  }
  EXPECT_TRUE(BitEqual(out[0], out[1]));
  EXPECT_TRUE(BitEqual(att[0], att[1]));
}

void ExpectBackwardMatchesFiniteDifferences(const Shape& s, size_t max_checks = 2000) {
  auto qkv = RandomVector(s.B * s.T * s.R(), 2, -1.5f, 1.5f);
  const auto r = RandomVector(s.B * s.T * s.NH * s.HS, 3);
  std::vector<float> out(r.size()), att(s.B * s.NH * s.T * s.T);
  auto loss = [&] {
    AttentionForward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.HS, s.window);
    return Project(out.data(), r);
  };
  loss();
  std::vector<float> d_qkv(qkv.size(), 123.0f), scratch(att.size(), -7.0f);
  AttentionBackward(d_qkv.data(), scratch.data(), r.data(), qkv.data(), att.data(), s.B, s.T,
                    s.NH, s.NKV, s.HS);
  ExpectGradMatches("d_qkv", qkv, loss, d_qkv.data(), 1e-2, 1e-3f, max_checks);
}

TEST(Attention, BackwardMatchesFiniteDifferencesMultiHead) {
  ExpectBackwardMatchesFiniteDifferences({2, 5, 2, 2, 4});
}
TEST(Attention, BackwardMatchesFiniteDifferencesGroupedQuery) {
  ExpectBackwardMatchesFiniteDifferences({2, 5, 4, 2, 4});
}
TEST(Attention, BackwardMatchesFiniteDifferencesMultiQuery) {
  ExpectBackwardMatchesFiniteDifferences({1, 6, 3, 1, 4});
}

TEST(Attention, BackwardMatchesFiniteDifferencesSlidingWindow) {
  ExpectBackwardMatchesFiniteDifferences({2, 7, 4, 2, 4, 3});
}

TEST(Attention, BackwardMatchesFiniteDifferencesOnThreads) {
  ExpectBackwardMatchesFiniteDifferences({2, 16, 4, 2, 8}, 24);
}

TEST(Attention, DeterministicAndWritesGradient) {
  const Shape s{2, 64, 6, 2, 32};  // parallel path
  const auto qkv = RandomVector(s.B * s.T * s.R(), 4, -2.0f, 2.0f);
  const auto d_out = RandomVector(s.B * s.T * s.NH * s.HS, 5);
  std::vector<float> out[2], att[2], d_qkv[2];
  std::vector<float> scratch(s.B * s.NH * s.T * s.T);
  for (int run = 0; run < 2; ++run) {
    out[run].assign(d_out.size(), 0.0f);
    att[run].assign(scratch.size(), 0.0f);
    d_qkv[run].assign(qkv.size(), run == 0 ? 0.0f : 1e30f);  // garbage must be overwritten
    AttentionForward(out[run].data(), att[run].data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.HS, 0);
    AttentionBackward(d_qkv[run].data(), scratch.data(), d_out.data(), qkv.data(), att[run].data(),
                      s.B, s.T, s.NH, s.NKV, s.HS);
  }
  EXPECT_TRUE(BitEqual(out[0], out[1]));
  EXPECT_TRUE(BitEqual(att[0], att[1]));
  EXPECT_TRUE(BitEqual(d_qkv[0], d_qkv[1]));
}

}  // namespace
}  // namespace tessera::cpu
