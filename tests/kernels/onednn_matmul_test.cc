// links: tessera_kernels
// tests/kernels/onednn_matmul_test.cc — the oneDNN plumbing of the bf16 path (memory layouts
// of transposed and strided operands, +=, bias, the primitive cache), run with fp32 operands,
// which oneDNN accepts on every x86-64 CPU: so a machine where oneDNN refuses bf16 still checks
// everything of that path but the data type. The bf16 type itself is tested in
// bf16_gemm_test.cc where the CPU allows.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/kernels/cpu/onednn_matmul.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu::onednn {
namespace {

using testing::RandomVector;

// C = (c_old if accumulate) + op(A) op(B) + bias, in double.
std::vector<double> Naive(const MatmulSpec& s, const std::vector<float>& a,
                          const std::vector<float>& b, const float* bias,
                          const std::vector<float>& c_old) {
  std::vector<double> c(c_old.begin(), c_old.end());
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < s.N; ++j) {
      double sum = s.accumulate ? c_old[i * s.ldc + j] : 0.0;
      if (bias) sum += bias[j];
      for (int64_t k = 0; k < s.K; ++k)
        sum += static_cast<double>(s.trans_a ? a[k * s.lda + i] : a[i * s.lda + k]) *
               (s.trans_b ? b[j * s.ldb + k] : b[k * s.ldb + j]);
      c[i * s.ldc + j] = sum;
    }
  return c;
}

MatmulSpec F32Spec(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t pad) {
  MatmulSpec s;
  s.trans_a = ta;
  s.trans_b = tb;
  s.M = M;
  s.N = N;
  s.K = K;
  s.lda = (ta ? M : K) + pad;
  s.ldb = (tb ? K : N) + pad;
  s.ldc = N + pad;
  s.ab_dtype = DType::kF32;
  s.c_dtype = DType::kF32;
  return s;
}

TEST(OneDnnMatmul, LayoutsOfEveryTransposeStrideAccumulateAndBias) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (bool accumulate : {false, true})
        for (bool with_bias : {false, true}) {
          MatmulSpec s = F32Spec(ta, tb, 11, 7, 19, 2);
          s.accumulate = accumulate;
          s.has_bias = with_bias;
          const auto a = RandomVector((ta ? s.K : s.M) * s.lda, 1);
          const auto b = RandomVector((tb ? s.N : s.K) * s.ldb, 2);
          const auto bias = RandomVector(s.N, 3);
          auto c = RandomVector(s.M * s.ldc, 4);
          const auto expected = Naive(s, a, b, with_bias ? bias.data() : nullptr, c);
          const Status st = Matmul(s, a.data(), b.data(), bias.data(), c.data());
          ASSERT_TRUE(st.ok()) << st.ToString();
          const std::string what = std::string(ta ? "A^T" : "A") + (tb ? " B^T" : " B") +
                                   (accumulate ? " +=" : " =") + (with_bias ? " bias" : "");
          for (int64_t i = 0; i < s.M; ++i)
            for (int64_t j = 0; j < s.N; ++j)
              EXPECT_NEAR(c[i * s.ldc + j], expected[i * s.ldc + j], 1e-5) << what << " at " << i << "," << j;
          // Padding between rows is never written.
          for (int64_t i = 0; i < s.M; ++i)
            for (int64_t j = s.N; j < s.ldc; ++j)
              EXPECT_EQ(c[i * s.ldc + j], static_cast<float>(expected[i * s.ldc + j])) << what;
        }
}

TEST(OneDnnMatmul, PrimitivesAreCachedPerShape) {
  const MatmulSpec s = F32Spec(false, true, 5, 6, 7, 0);
  const auto a = RandomVector(5 * 7, 5), b = RandomVector(6 * 7, 6);
  std::vector<float> c(5 * 6);
  ASSERT_TRUE(Matmul(s, a.data(), b.data(), nullptr, c.data()).ok());
  const size_t after_first = CachedPrimitives();
  ASSERT_TRUE(Matmul(s, a.data(), b.data(), nullptr, c.data()).ok());
  EXPECT_EQ(CachedPrimitives(), after_first);  // the same shape again: no new primitive
  MatmulSpec other = s;
  other.accumulate = true;
  ASSERT_TRUE(Matmul(other, a.data(), b.data(), nullptr, c.data()).ok());
  EXPECT_EQ(CachedPrimitives(), after_first + 1);  // += is a different primitive
  auto name = ImplementationName(s);
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_FALSE(name.value().empty());
  EXPECT_EQ(CachedPrimitives(), after_first + 1);
}

TEST(OneDnnMatmul, RefusalNamesTheSpecAndIsNotCached) {
  // bf16 where this CPU has no bf16 support in oneDNN: an error that says which product.
  MatmulSpec s = F32Spec(false, true, 4, 4, 4, 0);
  s.ab_dtype = DType::kBF16;
  const size_t before = CachedPrimitives();
  auto name = ImplementationName(s);
  if (name.ok()) GTEST_SKIP() << "oneDNN runs bf16 on this CPU (" << name.value() << "): no refusal to test";
  EXPECT_EQ(name.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(name.status().message().find("bf16->f32 A B^T M=4 N=4 K=4"), std::string::npos)
      << name.status().message();
  EXPECT_EQ(CachedPrimitives(), before);
}

TEST(OneDnnMatmul, VersionSaysOpenMpRuntime) {
  const std::string v = VersionString();
  EXPECT_EQ(v.rfind("oneDNN ", 0), 0u) << v;
  EXPECT_NE(v.find("OpenMP"), std::string::npos) << v;  // one libgomp pool with OpenBLAS
}

}  // namespace
}  // namespace tessera::cpu::onednn
