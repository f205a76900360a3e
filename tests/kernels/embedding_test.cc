// links: tessera_kernels
// tests/kernels/embedding_test.cc — token/position embeddings: naive reference, finite
// differences, repeated tokens, determinism and thread-count independence, += semantics.
#include <vector>

#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/threads.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {
namespace {

using testing::BitEqual;
using testing::ExpectGradMatches;
using testing::Project;
using testing::RandomVector;

std::vector<int32_t> RandomTokens(size_t n, int32_t V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(gen);
  return t;
}

TEST(Embedding, ForwardMatchesNaive) {
  const int64_t B = 3, T = 5, C = 11, V = 7;
  const auto tokens = RandomTokens(B * T, V, 1);
  auto wte = RandomVector(V * C, 2), wpe = RandomVector(T * C, 3);
  std::vector<float> out(B * T * C);
  EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(out[(b * T + t) * C + c], wte[tokens[b * T + t] * C + c] + wpe[t * C + c]);
  EmbeddingForward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C);  // Llama: no wpe
  for (int64_t i = 0; i < B * T; ++i)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[i * C + c], wte[tokens[i] * C + c]);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 4, C = 6, V = 5;  // V < B*T: tokens repeat
  const auto tokens = RandomTokens(B * T, V, 4);
  auto wte = RandomVector(V * C, 5), wpe = RandomVector(T * C, 6);
  const auto r = RandomVector(B * T * C, 7);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return Project(out.data(), r);
  };
  std::vector<float> d_wte(V * C, 0.0f), d_wpe(T * C, 0.0f);
  EmbeddingBackward(d_wte.data(), d_wpe.data(), r.data(), tokens.data(), B, T, C, V);
  ExpectGradMatches("d_wte", wte, loss, d_wte.data());
  ExpectGradMatches("d_wpe", wpe, loss, d_wpe.data());
}

// GPT-2-like width, few distinct tokens so rows collide often, big enough for threads.
struct Big {
  static constexpr int64_t B = 4, T = 64, C = 768, V = 50;
  std::vector<int32_t> tokens = RandomTokens(B * T, V, 8);
  std::vector<float> d_out = RandomVector(B * T * C, 9);
  std::pair<std::vector<float>, std::vector<float>> Run() {
    std::vector<float> d_wte(V * C, 0.0f), d_wpe(T * C, 0.0f);
    EmbeddingBackward(d_wte.data(), d_wpe.data(), d_out.data(), tokens.data(), B, T, C, V);
    return {d_wte, d_wpe};
  }
};

TEST(Embedding, BackwardSumsInTokenOrderWhateverTheThreads) {
  Big k;
  const auto a = k.Run(), b = k.Run();
  EXPECT_TRUE(BitEqual(a.first, b.first));
  EXPECT_TRUE(BitEqual(a.second, b.second));
  const int threads = NumThreads();
  SetNumThreads(1);
  const auto one = k.Run();
  SetNumThreads(threads);
  EXPECT_TRUE(BitEqual(a.first, one.first));
  EXPECT_TRUE(BitEqual(a.second, one.second));
  // The exact order: d_wte[v] = ((0 + d_out[i1]) + d_out[i2]) + ... over tokens i1 < i2 < ...
  std::vector<float> ref(Big::V * Big::C, 0.0f);
  for (int64_t i = 0; i < Big::B * Big::T; ++i)
    for (int64_t c = 0; c < Big::C; ++c) ref[k.tokens[i] * Big::C + c] += k.d_out[i * Big::C + c];
  EXPECT_TRUE(BitEqual(a.first, ref));
}

TEST(Embedding, BackwardAccumulatesAndSkipsNulls) {
  Big k;
  const auto once = k.Run();
  std::vector<float> d_wpe(Big::T * Big::C, 0.0f);
  for (int i = 0; i < 2; ++i)
    EmbeddingBackward(nullptr, d_wpe.data(), k.d_out.data(), k.tokens.data(), Big::B, Big::T,
                      Big::C, Big::V);
  for (size_t i = 0; i < d_wpe.size(); ++i) ASSERT_EQ(d_wpe[i], 2.0f * once.second[i]);
  std::vector<float> d_wte(Big::V * Big::C, 0.0f);
  for (int i = 0; i < 2; ++i)
    EmbeddingBackward(d_wte.data(), nullptr, k.d_out.data(), k.tokens.data(), Big::B, Big::T,
                      Big::C, Big::V);
  for (size_t i = 0; i < d_wte.size(); ++i)
    ASSERT_NEAR(d_wte[i], 2.0f * once.first[i], 1e-5f * (1.0f + std::fabs(once.first[i])));
}

TEST(EmbeddingDeathTest, RejectsOutOfRangeToken) {
  std::vector<int32_t> tokens = {0, 5};
  std::vector<float> d_out(2 * 3, 1.0f), d_wte(5 * 3, 0.0f);
  EXPECT_DEATH(EmbeddingBackward(d_wte.data(), nullptr, d_out.data(), tokens.data(), 1, 2, 3, 5),
               "outside");
}

}  // namespace
}  // namespace tessera::cpu
