// links: tessera_kernels
// tests/kernels/bf16_gemm_test.cc — bf16 GEMM and Linear on BOTH paths (fp32 compute, oneDNN)
// against a double-precision reference on the same bf16 inputs, the two paths against each
// other, determinism, += / = semantics, odd shapes, and the path decision.
//
// Tolerance: the inputs are bf16, so their products are exact in fp32 and the only error is
// the fp32 accumulation: |C - exact| <= 2 K 2^-24 sum_k |a_ik b_kj| per element (the classic
// bound gamma_K = K u, doubled for slack; an accumulating call adds |C_old| to the sum). A
// bf16 output may add one rounding, 2^-8 of its magnitude.
// The oneDNN path exists only where oneDNN runs bf16 on this CPU (AVX-512 and later); where it
// does not, its tests SKIP and say why, on stderr and in gtest's skip message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/kernels/cpu/bench.h"
#include "runtime/kernels/cpu/bf16_gemm.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/threads.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {

// gtest names the parameter in test listings (ctest shows it for skipped tests).
void PrintTo(Bf16GemmPath p, std::ostream* os) {
  *os << (p == Bf16GemmPath::kOneDnn ? "oneDNN" : "fp32 compute");
}

namespace {

using testing::BitEqual;
using testing::RandomVector;

// A bf16 matrix and its exact fp32 value.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> f32;
};

Bf16Data RandomBf16(size_t n, uint32_t seed) {
  Bf16Data d{std::vector<uint16_t>(n), RandomVector(n, seed)};
  for (size_t i = 0; i < n; ++i) {
    d.bits[i] = F32ToBf16(d.f32[i]);
    d.f32[i] = Bf16ToF32(d.bits[i]);
  }
  return d;
}

std::vector<float> Widen(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16ToF32(bits[i]);
  return out;
}

struct Shape {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0, pad = 0;
  int64_t lda() const { return (ta ? M : K) + pad; }
  int64_t ldb() const { return (tb ? K : N) + pad; }
  int64_t ldc() const { return N + pad; }
  size_t a_size() const { return static_cast<size_t>((ta ? K : M) * lda()); }
  size_t b_size() const { return static_cast<size_t>((tb ? N : K) * ldb()); }
  size_t c_size() const { return static_cast<size_t>(M * ldc()); }
};

// The exact value of each element of (c_old if accumulating) + op(A) op(B) in double, and the
// tolerance the header promises for it.
struct Reference {
  std::vector<double> exact, tol;
};

Reference ExactProduct(const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
                       const std::vector<float>* c_old, bool bf16_out) {
  Reference r{std::vector<double>(s.c_size(), 0.0), std::vector<double>(s.c_size(), 0.0)};
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < s.N; ++j) {
      double sum = 0.0, mag = 0.0;
      for (int64_t k = 0; k < s.K; ++k) {
        const double p = static_cast<double>(s.ta ? a[k * s.lda() + i] : a[i * s.lda() + k]) *
                         (s.tb ? b[j * s.ldb() + k] : b[k * s.ldb() + j]);
        sum += p;
        mag += std::fabs(p);
      }
      const size_t at = static_cast<size_t>(i * s.ldc() + j);
      if (c_old != nullptr) {
        sum += (*c_old)[at];
        mag += std::fabs((*c_old)[at]);
      }
      double tol = 2.0 * static_cast<double>(s.K + 1) * u * mag;
      if (bf16_out) tol += std::ldexp(1.0, -8) * (std::fabs(sum) + tol);
      r.exact[at] = sum;
      r.tol[at] = tol;
    }
  return r;
}

// Every element within its tolerance; reports the first few that are not.
void ExpectWithin(const Shape& s, const std::vector<float>& got, const Reference& ref,
                  const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < s.N; ++j) {
      const size_t at = static_cast<size_t>(i * s.ldc() + j);
      const double err = std::fabs(got[at] - ref.exact[at]);
      if (!(err <= ref.tol[at]) && ++bad <= 5)
        ADD_FAILURE() << what << ": C(" << i << "," << j << ") = " << got[at] << ", exact "
                      << ref.exact[at] << ", error " << err << " > tolerance " << ref.tol[at];
    }
  EXPECT_EQ(bad, 0) << what;
}

const char* PathName(Bf16GemmPath p) { return p == Bf16GemmPath::kOneDnn ? "OneDnn" : "Fp32Compute"; }

// Forces a path; where it cannot be forced, skips loudly (stderr and gtest's message).
#define FORCE_PATH_OR_SKIP(path)                                                              \
  do {                                                                                        \
    const Status forced_ = SetBf16GemmPath(path);                                             \
    if (!forced_.ok()) {                                                                      \
      std::fprintf(stderr, "\n*** %s path NOT TESTED on this CPU: %s\n\n", PathName(path),    \
                   forced_.ToString().c_str());                                               \
      GTEST_SKIP() << PathName(path) << " path NOT TESTED on this CPU: " << forced_.ToString(); \
    }                                                                                         \
  } while (0)

// Every test of this fixture runs once per path.
class Bf16GemmOnPath : public ::testing::TestWithParam<Bf16GemmPath> {
 protected:
  void SetUp() override { FORCE_PATH_OR_SKIP(GetParam()); }
  void TearDown() override { ResetBf16GemmPath(); }
  std::string Name(const Shape& s, const char* what) const {
    return std::string(PathName(GetParam())) + " " + what + (s.ta ? " A^T" : " A") +
           (s.tb ? " B^T" : " B") + " " + std::to_string(s.M) + "x" + std::to_string(s.N) +
           "x" + std::to_string(s.K);
  }
  // Runs one product with fp32 or bf16 C, = or +=, and checks it against the reference.
  void CheckProduct(const Shape& s, bool bf16_out, bool accumulate, uint32_t seed) {
    const Bf16Data a = RandomBf16(s.a_size(), seed), b = RandomBf16(s.b_size(), seed + 1);
    const Bf16Data c0 = RandomBf16(s.c_size(), seed + 2);
    std::vector<float> got;
    if (bf16_out) {
      auto c = c0.bits;
      GemmBf16(s.ta, s.tb, s.M, s.N, s.K, a.bits.data(), s.lda(), b.bits.data(), s.ldb(),
               accumulate, c.data(), s.ldc());
      got = Widen(c);
    } else {
      got = c0.f32;
      GemmBf16(s.ta, s.tb, s.M, s.N, s.K, a.bits.data(), s.lda(), b.bits.data(), s.ldb(),
               accumulate, got.data(), s.ldc());
    }
    const auto ref = ExactProduct(s, a.f32, b.f32, accumulate ? &c0.f32 : nullptr, bf16_out);
    ExpectWithin(s, got, ref,
                 Name(s, bf16_out ? (accumulate ? "bf16 C +=" : "bf16 C =")
                                  : (accumulate ? "fp32 C +=" : "fp32 C =")));
  }
};

TEST_P(Bf16GemmOnPath, MatchesExactProductForAllTransposesAndStrides) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (bool accumulate : {false, true}) {
        const Shape s{ta == 1, tb == 1, 37, 29, 53, 3};  // K = 53: not a multiple of 16
        CheckProduct(s, /*bf16_out=*/false, accumulate, 10 + ta * 2 + tb);
      }
}

TEST_P(Bf16GemmOnPath, Bf16OutputIsTheFp32SumRoundedOnce) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (bool accumulate : {false, true}) {
        const Shape s{ta == 1, tb == 1, 21, 35, 47, 2};
        CheckProduct(s, /*bf16_out=*/true, accumulate, 30 + ta * 2 + tb);
      }
}

TEST_P(Bf16GemmOnPath, OddShapesOneRowOneColumnAndShortK) {
  const Shape shapes[] = {{false, true, 1, 33, 17, 0},  {true, false, 1, 9, 31, 1},
                          {false, false, 5, 1, 31, 0},  {false, true, 3, 7, 1, 0},
                          {true, true, 1, 1, 15, 2},    {false, true, 2, 3, 100, 0}};
  uint32_t seed = 50;
  for (const Shape& s : shapes)
    for (bool bf16_out : {false, true}) CheckProduct(s, bf16_out, /*accumulate=*/true, seed++);
}

// Shrinks the fp32-compute path's scratch budget for one scope, so that small shapes run in
// several blocks of M, N and K (the oneDNN path ignores it: there the shapes are just odd).
class SmallScratch {
 public:
  explicit SmallScratch(int64_t floats) : before_(SetBf16ScratchFloats(floats)) {}
  ~SmallScratch() { SetBf16ScratchFloats(before_); }

 private:
  int64_t before_;
};

TEST_P(Bf16GemmOnPath, ProductsPastTheScratchBudgetRunInBlocks) {
  const SmallScratch small(12288);  // 64 x 64 panels
  // Panels (op(A) mb x kb + op(B) kb x nb, + mb x nb for a bf16 C) must fit 12288 floats, so
  // (M, N, K) = (701, 24, 40) runs in 4 row blocks, the last ragged; (20, 24, 701) in 4
  // K-blocks; (8, 701, 30) in 2-3 column blocks; (130, 170, 129) in 2 blocks of each.
  const int64_t mnk[][3] = {{701, 24, 40}, {20, 24, 701}, {8, 701, 30}, {130, 170, 129}};
  uint32_t seed = 70;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const auto& d : mnk)
        for (bool bf16_out : {false, true})
          for (bool accumulate : {false, true})
            CheckProduct({ta == 1, tb == 1, d[0], d[1], d[2], ta + tb}, bf16_out, accumulate, seed++);
}

TEST_P(Bf16GemmOnPath, WritingIgnoresWhatCHeld) {
  const Shape s{false, true, 12, 20, 24, 0};
  const Bf16Data a = RandomBf16(s.a_size(), 80), b = RandomBf16(s.b_size(), 81);
  std::vector<float> c(s.c_size(), std::numeric_limits<float>::quiet_NaN());
  GemmBf16(false, true, s.M, s.N, s.K, a.bits.data(), s.lda(), b.bits.data(), s.ldb(), false,
           c.data(), s.ldc());
  ExpectWithin(s, c, ExactProduct(s, a.f32, b.f32, nullptr, false), Name(s, "over NaN"));
  std::vector<uint16_t> c16(s.c_size(), F32ToBf16(std::numeric_limits<float>::quiet_NaN()));
  GemmBf16(false, true, s.M, s.N, s.K, a.bits.data(), s.lda(), b.bits.data(), s.ldb(), false,
           c16.data(), s.ldc());
  ExpectWithin(s, Widen(c16), ExactProduct(s, a.f32, b.f32, nullptr, true), Name(s, "bf16 over NaN"));
}

TEST_P(Bf16GemmOnPath, EmptyInnerDimensionWritesZeroOrKeepsC) {
  std::vector<float> c = {1, 2, 3, 4};
  GemmBf16(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, true, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));
  GemmBf16(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, false, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
  std::vector<uint16_t> c16 = {F32ToBf16(1.5f), F32ToBf16(-2.0f)};
  GemmBf16(false, false, 1, 2, 0, nullptr, 1, nullptr, 2, true, c16.data(), 2);
  EXPECT_EQ(Widen(c16), (std::vector<float>{1.5f, -2.0f}));
  GemmBf16(false, false, 1, 2, 0, nullptr, 1, nullptr, 2, false, c16.data(), 2);
  EXPECT_EQ(Widen(c16), (std::vector<float>{0.0f, 0.0f}));
}

TEST_P(Bf16GemmOnPath, RerunsAreBitIdenticalWithTwoThreads) {
  const int before = NumThreads();
  SetNumThreads(2);
  const int64_t N = 300, C = 200, OC = 260;  // big enough for the parallel loops
  const Bf16Data x = RandomBf16(N * C, 90), w = RandomBf16(OC * C, 91), dy = RandomBf16(N * OC, 92);
  const auto bias = RandomVector(OC, 93);
  std::vector<float> out[2], dw[2], db[2];
  std::vector<uint16_t> out16[2], dx16[2];
  for (int run = 0; run < 2; ++run) {
    out[run].assign(N * OC, 0.0f);
    out16[run].assign(N * OC, 0);
    dx16[run].assign(N * C, 0);
    dw[run].assign(OC * C, 0.5f);
    db[run].assign(OC, 0.25f);
    LinearForwardBf16(out[run].data(), x.bits.data(), w.bits.data(), bias.data(), N, C, OC);
    LinearForwardBf16(out16[run].data(), x.bits.data(), w.bits.data(), bias.data(), N, C, OC);
    LinearBackwardBf16(dx16[run].data(), dw[run].data(), db[run].data(), dy.bits.data(),
                       x.bits.data(), w.bits.data(), N, C, OC);
  }
  SetNumThreads(before);
  EXPECT_TRUE(BitEqual(out[0], out[1]));
  EXPECT_EQ(out16[0], out16[1]);
  EXPECT_EQ(dx16[0], dx16[1]);
  EXPECT_TRUE(BitEqual(dw[0], dw[1]));
  EXPECT_TRUE(BitEqual(db[0], db[1]));
}

// ---- Linear ----

TEST_P(Bf16GemmOnPath, LinearForwardIsTheProductPlusBias) {
  const int64_t N = 13, C = 40, OC = 19;
  const Bf16Data x = RandomBf16(N * C, 100), w = RandomBf16(OC * C, 101);
  const auto bias = RandomVector(OC, 102);
  const Shape s{false, true, N, OC, C, 0};
  for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
    // The reference: bias enters as an accumulated "old C".
    std::vector<float> bias_rows(N * OC, 0.0f);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < OC; ++o) bias_rows[i * OC + o] = b ? b[o] : 0.0f;
    std::vector<float> out(N * OC, 7.0f);
    LinearForwardBf16(out.data(), x.bits.data(), w.bits.data(), b, N, C, OC);
    ExpectWithin(s, out, ExactProduct(s, x.f32, w.f32, &bias_rows, false), Name(s, "linear fp32"));
    std::vector<uint16_t> out16(N * OC, 0);
    LinearForwardBf16(out16.data(), x.bits.data(), w.bits.data(), b, N, C, OC);
    ExpectWithin(s, Widen(out16), ExactProduct(s, x.f32, w.f32, &bias_rows, true),
                 Name(s, "linear bf16"));
  }
}

TEST_P(Bf16GemmOnPath, LinearBackwardGradientsAreTheFp32KernelsWithinBound) {
  const int64_t N = 24, C = 36, OC = 20;
  const Bf16Data x = RandomBf16(N * C, 110), w = RandomBf16(OC * C, 111), dy = RandomBf16(N * OC, 112);
  // d_inp = dy @ W (written, over garbage), both output types.
  const Shape sx{false, false, N, C, OC, 0};
  std::vector<float> dx(N * C, 9.0f);
  std::vector<uint16_t> dx16(N * C, F32ToBf16(9.0f));
  std::vector<float> dw(OC * C, 0.0f), db(OC, 0.0f);
  LinearBackwardBf16(dx.data(), dw.data(), db.data(), dy.bits.data(), x.bits.data(), w.bits.data(), N, C, OC);
  LinearBackwardBf16(dx16.data(), nullptr, nullptr, dy.bits.data(), x.bits.data(), w.bits.data(), N, C, OC);
  ExpectWithin(sx, dx, ExactProduct(sx, dy.f32, w.f32, nullptr, false), Name(sx, "d_inp fp32"));
  ExpectWithin(sx, Widen(dx16), ExactProduct(sx, dy.f32, w.f32, nullptr, true), Name(sx, "d_inp bf16"));
  // d_weight = dy^T @ x, accumulated: a second call adds the same again.
  const Shape sw{true, false, OC, C, N, 0};
  ExpectWithin(sw, dw, ExactProduct(sw, dy.f32, x.f32, nullptr, false), Name(sw, "d_weight"));
  const auto dw1 = dw;
  LinearBackwardBf16(static_cast<float*>(nullptr), dw.data(), nullptr, dy.bits.data(),
                     x.bits.data(), w.bits.data(), N, C, OC);
  ExpectWithin(sw, dw, ExactProduct(sw, dy.f32, x.f32, &dw1, false), Name(sw, "d_weight +="));
  // d_bias: the fp32 kernel's row-order sums of the same values, bit for bit.
  std::vector<float> db_ref(OC, 0.0f);
  LinearBackward(nullptr, nullptr, db_ref.data(), dy.f32.data(), x.f32.data(), w.f32.data(), N, C, OC);
  EXPECT_TRUE(BitEqual(db, db_ref));
}

TEST_P(Bf16GemmOnPath, LinearBackwardSkipsNullGradients) {
  const int64_t N = 8, C = 12, OC = 10;
  const Bf16Data x = RandomBf16(N * C, 120), w = RandomBf16(OC * C, 121), dy = RandomBf16(N * OC, 122);
  std::vector<float> dw(OC * C, 0.0f), db(OC, 0.0f);
  LinearBackwardBf16(static_cast<uint16_t*>(nullptr), dw.data(), nullptr, dy.bits.data(),
                     x.bits.data(), w.bits.data(), N, C, OC);
  EXPECT_NE(dw, std::vector<float>(OC * C, 0.0f));
  LinearBackwardBf16(static_cast<uint16_t*>(nullptr), nullptr, db.data(), dy.bits.data(),
                     x.bits.data(), w.bits.data(), N, C, OC);
  EXPECT_NE(db, std::vector<float>(OC, 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Paths, Bf16GemmOnPath,
                         ::testing::Values(Bf16GemmPath::kFp32Compute, Bf16GemmPath::kOneDnn),
                         [](const ::testing::TestParamInfo<Bf16GemmPath>& p) {
                           return std::string(PathName(p.param));
                         });

// ---- The two paths against each other ----

TEST(Bf16GemmPaths, OneDnnAndFp32ComputeAgreeWithinTheirBounds) {
  const Shape s{false, true, 96, 80, 200, 0};
  const Bf16Data a = RandomBf16(s.a_size(), 130), b = RandomBf16(s.b_size(), 131);
  std::vector<float> c[2];
  for (int p = 0; p < 2; ++p) {
    FORCE_PATH_OR_SKIP(p == 0 ? Bf16GemmPath::kFp32Compute : Bf16GemmPath::kOneDnn);
    c[p].assign(s.c_size(), 0.0f);
    GemmBf16(s.ta, s.tb, s.M, s.N, s.K, a.bits.data(), s.lda(), b.bits.data(), s.ldb(), false,
             c[p].data(), s.ldc());
  }
  ResetBf16GemmPath();
  // Each is within tol of the exact value, so they are within 2 tol of each other.
  auto ref = ExactProduct(s, a.f32, b.f32, nullptr, false);
  for (size_t i = 0; i < c[0].size(); ++i) {
    ref.exact[i] = c[0][i];
    ref.tol[i] *= 2.0;
  }
  ExpectWithin(s, c[1], ref, "oneDNN against fp32 compute");
}

// ---- The decision ----

TEST(DecideBf16GemmPath, NoBf16InstructionsMeansFp32ComputeEvenIfOneDnnWould) {
  const auto c = DecideBf16GemmPath(Bf16Isa::kNone, std::string("ref:any"));
  EXPECT_EQ(c.path, Bf16GemmPath::kFp32Compute);
  EXPECT_EQ(c.description, "bf16 GEMM: fp32 compute (no bf16 instructions)");
}

TEST(DecideBf16GemmPath, Bf16InstructionsAndAWillingOneDnnMeanOneDnn) {
  const auto amx = DecideBf16GemmPath(Bf16Isa::kAmxBf16, std::string("brg:avx512_core_amx"));
  EXPECT_EQ(amx.path, Bf16GemmPath::kOneDnn);
  EXPECT_EQ(amx.description, "bf16 GEMM: oneDNN AMX-BF16 (brg:avx512_core_amx)");
  const auto avx = DecideBf16GemmPath(Bf16Isa::kAvx512Bf16, std::string("brg:avx512_core_bf16"));
  EXPECT_EQ(avx.path, Bf16GemmPath::kOneDnn);
  EXPECT_EQ(avx.description, "bf16 GEMM: oneDNN AVX512-BF16 (brg:avx512_core_bf16)");
}

TEST(DecideBf16GemmPath, ARefusingOneDnnFallsBackAndSaysWhy) {
  const auto c = DecideBf16GemmPath(Bf16Isa::kAvx512Core, Result<std::string>(FailedPrecondition("no impl")));
  EXPECT_EQ(c.path, Bf16GemmPath::kFp32Compute);
  EXPECT_EQ(c.description, "bf16 GEMM: fp32 compute (oneDNN refused bf16 on this AVX512-core CPU: no impl)");
}

TEST(Bf16GemmPathState, ThisMachineGetsTheDecisionOfItsOwnFeatures) {
  ResetBf16GemmPath();
  const Bf16Isa isa = ChooseBf16Isa(DetectCpuFeatures());
  const auto active = ActiveBf16GemmPath();
  std::printf("%s\n", active.description.c_str());
  if (isa == Bf16Isa::kNone) {
    EXPECT_EQ(active.path, Bf16GemmPath::kFp32Compute);
    EXPECT_EQ(active.description, "bf16 GEMM: fp32 compute (no bf16 instructions)");
  } else {
    EXPECT_EQ(active.path == Bf16GemmPath::kOneDnn, ProbeOneDnnBf16().ok()) << active.description;
  }
}

TEST(Bf16GemmPathState, ForcingSwitchesPathsAndResetRestoresTheChoice) {
  const auto automatic = ActiveBf16GemmPath();
  ASSERT_TRUE(SetBf16GemmPath(Bf16GemmPath::kFp32Compute).ok());
  EXPECT_EQ(ActiveBf16GemmPath().path, Bf16GemmPath::kFp32Compute);
  EXPECT_EQ(ActiveBf16GemmPath().description, "bf16 GEMM: fp32 compute (forced)");
  const Status onednn = SetBf16GemmPath(Bf16GemmPath::kOneDnn);
  EXPECT_EQ(onednn.ok(), ProbeOneDnnBf16().ok());
  if (onednn.ok()) {
    EXPECT_EQ(ActiveBf16GemmPath().path, Bf16GemmPath::kOneDnn);
  } else {
    // Refused: the path stays where it was, and the message says what and why.
    EXPECT_EQ(onednn.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(onednn.message().find("cannot force the oneDNN path"), std::string::npos) << onednn.message();
    EXPECT_NE(onednn.message().find("oneDNN 2."), std::string::npos) << onednn.message();
    EXPECT_EQ(ActiveBf16GemmPath().path, Bf16GemmPath::kFp32Compute);
    std::fprintf(stderr, "oneDNN bf16 unavailable here: %s\n", onednn.ToString().c_str());
  }
  ResetBf16GemmPath();
  EXPECT_EQ(ActiveBf16GemmPath().description, automatic.description);
}

TEST(Bench, MeasuresPositiveBf16GemmThroughputOnEachPath) {
  for (auto path : {Bf16GemmPath::kFp32Compute, Bf16GemmPath::kOneDnn}) {
    if (!SetBf16GemmPath(path).ok()) continue;  // the oneDNN skip is reported by the tests above
    const double gflops = MeasureBf16GemmGflops(64, 48, 80, 2);
    EXPECT_GT(gflops, 0.0) << PathName(path);
    EXPECT_LT(gflops, 1e6) << PathName(path);  // sanity: no CPU here does a PFLOP/s
  }
  ResetBf16GemmPath();
}

}  // namespace
}  // namespace tessera::cpu
