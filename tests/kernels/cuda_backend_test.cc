// links: tessera_kernels
// tests/kernels/cuda_backend_test.cc — every op of the CUDA backend (cuda_backend.h) against the
// CPU fp32 reference (cpu_backend.h) on odd shapes (rows 257, channels 259, heads of 12, a
// vocabulary of 131 padded to 133), within stated tolerances, and bit-identical across reruns.
// Skips itself, naming why, where the backend is not built or no GPU is usable.
//
// Tolerances, in the style of Transformer Engine's C++ tests: an element passes when
// |gpu - cpu| <= atol * max|cpu| + rtol * |cpu| (atol scaled by the buffer's largest value, so
// a value that cancels to near zero is judged against the buffer's scale).
//   kElementwise  (1e-6, 1e-6)   one expf per element, as the CPU's a few ulp apart
//   kReduction    (1e-5, 1e-5)   sums over <= 259 terms in another order
//   kGemm         (1e-5, 1e-4)   cuBLAS fp32 (no TF32) against OpenBLAS: sums over 259 terms
//   kBf16Gemm     (2e-2, 2e-2)   bf16 operands, fp32 accumulation, against the fp32 reference
//   exact         (0, 0)         conversions, copies, gathers, embeddings (same sums in the
//                                same order as the CPU)
#include "runtime/kernels/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels/cpu_backend.h"

namespace tessera {
namespace {

constexpr int64_t B = 1, T = 257, C = 259, NH = 4, NKV = 2, HS = 12, V = 131, OC = 67;
constexpr int64_t N = B * T, QKV = (NH + 2 * NKV) * HS, E = 9, K = 2;

struct Tolerance {
  double atol = 0, rtol = 0;
};
constexpr Tolerance kExact{0, 0}, kElementwise{1e-6, 1e-6}, kReduction{1e-5, 1e-5},
    kGemm{1e-5, 1e-4}, kBf16Gemm{2e-2, 2e-2};

// A case's buffers where one backend reads them: float buffers f[i], int32 buffers n[i]
// (n[0] token ids, n[1] targets with some ignored; the rest start at zero).
struct Ptrs {
  std::vector<float*> f;
  std::vector<int32_t*> n;
  float* operator[](int i) const { return f[static_cast<size_t>(i)]; }
};

struct Case {
  std::string name;
  std::vector<int64_t> floats, ints;  // buffer sizes
  Tolerance tol;
  // Buffers not compared: backend-private contents (the CPU's attention probabilities
  // against the GPU's log-sum-exps, scratch).
  std::vector<int> private_floats;
  std::function<double(Backend& be, const Ptrs& p)> run;
};

// Host contents of a case's buffers, filled from `seed`.
struct HostBuffers {
  std::vector<std::vector<float>> f;
  std::vector<std::vector<int32_t>> n;
};

HostBuffers Fill(const Case& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  HostBuffers h;
  for (int64_t size : c.floats) {
    std::vector<float> v(static_cast<size_t>(size));
    for (float& x : v) x = u(gen);
    h.f.push_back(std::move(v));
  }
  for (size_t i = 0; i < c.ints.size(); ++i) {
    std::vector<int32_t> v(static_cast<size_t>(c.ints[i]), 0);
    for (size_t j = 0; j < v.size() && i < 2; ++j) {
      v[j] = i == 1 && j % 5 == 2 ? -1 : tok(gen);  // n[1]: targets, every fifth ignored
    }
    h.n.push_back(std::move(v));
  }
  return h;
}

// Runs the case on the CPU reference over host memory.
double RunCpu(const Case& c, HostBuffers& h) {
  CpuBackend cpu;
  Ptrs p;
  for (auto& v : h.f) p.f.push_back(v.data());
  for (auto& v : h.n) p.n.push_back(v.data());
  return c.run(cpu, p);
}

// Runs the case on the GPU: buffers uploaded into one device arena, run, downloaded.
double RunGpu(Backend& gpu, const Case& c, HostBuffers& h) {
  int64_t bytes = 0;
  for (auto& v : h.f) bytes += static_cast<int64_t>(v.size() * sizeof(float)) + 256;
  for (auto& v : h.n) bytes += static_cast<int64_t>(v.size() * sizeof(int32_t)) + 256;
  MemoryTracker tracker;
  Arena arena = gpu.MakeArena(MemoryKind::kWorkspace, static_cast<size_t>(bytes), &tracker);
  Ptrs p;
  for (auto& v : h.f) {
    float* d = arena.Allocate(DType::kF32, {static_cast<int64_t>(v.size())}).f32();
    gpu.Upload(d, v.data(), v.size() * sizeof(float));
    p.f.push_back(d);
  }
  for (auto& v : h.n) {
    auto* d = static_cast<int32_t*>(arena.Allocate(DType::kI32, {static_cast<int64_t>(v.size())}).data());
    gpu.Upload(d, v.data(), v.size() * sizeof(int32_t));
    p.n.push_back(d);
  }
  const double result = c.run(gpu, p);
  for (size_t i = 0; i < h.f.size(); ++i) gpu.Download(h.f[i].data(), p.f[i], h.f[i].size() * sizeof(float));
  for (size_t i = 0; i < h.n.size(); ++i) gpu.Download(h.n[i].data(), p.n[i], h.n[i].size() * sizeof(int32_t));
  return result;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol,
                 const std::string& what) {
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = (std::isnan(g) && std::isnan(w)) ||
                    std::fabs(g - w) <= tol.atol * scale + tol.rtol * std::fabs(w);
    if (!ok && ++bad <= 3) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << g << ", cpu " << w << " (scale " << scale
                    << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements off";
}

// Every float buffer of a case but its private ones.
void ExpectCaseClose(const Case& c, const HostBuffers& got, const HostBuffers& want,
                     Tolerance tol) {
  for (size_t i = 0; i < want.f.size(); ++i) {
    if (std::find(c.private_floats.begin(), c.private_floats.end(), static_cast<int>(i)) ==
        c.private_floats.end()) {
      ExpectClose(got.f[i], want.f[i], tol, c.name + " f" + std::to_string(i));
    }
  }
}

MoeRouterSpec Router() {
  MoeRouterSpec s;
  s.E = E;
  s.k = K;
  s.groups = 3;
  s.groups_kept = 2;
  s.sigmoid = true;
  s.normalize = true;
  s.route_scale = 2.5f;
  return s;
}

// Fills n[2] (expert) and f[...] routing outputs with a real routing of f[0]'s logits, so
// MoE cases run on valid plans: route, then the plan on the host (offset / counts).
struct Plan {
  std::vector<int64_t> offset = std::vector<int64_t>(E + 1), counts = std::vector<int64_t>(E);
  int64_t kept = 0;
};

void AddCases(std::vector<Case>& cs) {
  auto add = [&](std::string name, std::vector<int64_t> floats, std::vector<int64_t> ints,
                 Tolerance tol, std::vector<int> priv,
                 std::function<double(Backend&, const Ptrs&)> run) {
    cs.push_back({std::move(name), std::move(floats), std::move(ints), tol, std::move(priv),
                  std::move(run)});
  };
  add("Gemm", {N * C, OC * C, N * OC}, {}, kGemm, {}, [](Backend& be, const Ptrs& b) {
    be.Gemm(false, true, N, OC, C, 0.5f, b[0], C, b[1], C, 1.0f, b[2], OC);
    be.Gemm(true, false, C, OC, N, 1.0f, b[0], C, b[2], OC, 0.0f, b[1], OC);
    return 0.0;
  });
  add("LinearForward", {N * OC, N * C, OC * C, OC}, {}, kGemm, {}, [](Backend& be, const Ptrs& b) {
    be.LinearForward(b[0], b[1], b[2], b[3], N, C, OC);
    return 0.0;
  });
  add("LinearBackward", {N * C, OC * C, OC, N * OC, N * C, OC * C}, {}, kGemm, {},
      [](Backend& be, const Ptrs& b) {
        be.LinearBackward(b[0], b[1], b[2], b[3], b[4], b[5], N, C, OC);
        return 0.0;
      });
  add("EmbeddingForward", {N * C, V * C, T * C}, {N}, kExact, {}, [](Backend& be, const Ptrs& b) {
    be.EmbeddingForward(b[0], b.n[0], b[1], b[2], B, T, C);
    return 0.0;
  });
  add("EmbeddingBackward", {V * C, T * C, N * C}, {N}, kExact, {}, [](Backend& be, const Ptrs& b) {
    be.EmbeddingBackward(b[0], b[1], b[2], b.n[0], B, T, C, V);
    return 0.0;
  });
  add("LayerNorm", {N * C, N, N, N * C, C, C, N * C, C, C}, {}, kReduction, {},
      [](Backend& be, const Ptrs& b) {
        be.LayerNormForward(b[0], b[1], b[2], b[3], b[4], b[5], N, C, 1e-5f);
        be.LayerNormBackward(b[6], b[7], b[8], b[0], b[3], b[4], b[1], b[2], N, C);
        return 0.0;
      });
  add("RmsNorm", {N * C, N, N * C, C, N * C, C}, {}, kReduction, {}, [](Backend& be, const Ptrs& b) {
    be.RmsNormForward(b[0], b[1], b[2], b[3], N, C, 1e-6f);
    be.RmsNormBackward(b[4], b[5], b[0], b[2], b[3], b[1], N, C);
    return 0.0;
  });
  add("HeadRmsNorm", {N * QKV, N * (NH + NKV) * HS, N * (NH + NKV), HS, HS, HS, HS}, {}, kReduction,
      {}, [](Backend& be, const Ptrs& b) {
        be.HeadRmsNormForward(b[0], b[1], b[2], b[3], b[4], N, NH, NKV, HS, 1e-6f);
        be.HeadRmsNormBackward(b[0], b[5], b[6], b[1], b[3], b[4], b[2], N, NH, NKV, HS);
        return 0.0;
      });
  add("Gelu", {N * C, N * C, N * C}, {}, kElementwise, {}, [](Backend& be, const Ptrs& b) {
    be.GeluForward(b[0], b[1], N * C);
    be.GeluBackward(b[2], b[0], b[1], N * C);
    return 0.0;
  });
  add("Swiglu", {N * C, 2 * N * C, 2 * N * C}, {}, kElementwise, {}, [](Backend& be, const Ptrs& b) {
    be.SwigluForward(b[0], b[1], N, C);
    be.SwigluBackward(b[2], b[0], b[1], N, C);
    return 0.0;
  });
  add("AddAndAddInPlace", {N * C, N * C, N * C}, {}, kExact, {}, [](Backend& be, const Ptrs& b) {
    be.Add(b[0], b[1], b[2], N * C);
    be.AddInPlace(b[1], b[0], N * C);
    return 0.0;
  });
  add("Dropout", {N * C, N * C}, {}, kExact, {}, [](Backend& be, const Ptrs& b) {
    be.Dropout(b[0], b[1], N, C - 5, 5, C, 0.3f, 0x5eedull);
    return 0.0;
  });
  add("Rope", {N * QKV, N * QKV}, {}, kElementwise, {}, [](Backend& be, const Ptrs& b) {
    RopeParams p = PlainRope(500000.0f);
    be.RopeForward(b[0], B, T, NH, NKV, HS, p, 3);
    be.RopeBackward(b[1], B, T, NH, NKV, HS, p, 3);
    return 0.0;
  });
  for (int64_t window : {int64_t{0}, int64_t{37}}) {
    add("Attention_window" + std::to_string(window),
        {N * NH * HS, B * NH * T * T, N * QKV, N * QKV, B * NH * T * T, N * NH * HS}, {},
        kReduction, {1, 4}, [window](Backend& be, const Ptrs& b) {
          be.AttentionForward(b[0], b[1], b[2], B, T, NH, NKV, HS, window);
          be.AttentionBackward(b[3], b[4], b[5], b[2], b[1], B, T, NH, NKV, HS);
          return 0.0;
        });
  }
  add("ClassifierForwardBackward", {N, N * C, V * C, N * C, V * C, 40 * V}, {N, N}, kGemm, {5},
      [](Backend& be, const Ptrs& b) {
        return be.ClassifierForwardBackward(b[0], b[1], b[2], b[3], b[4], b.n[1], N, C, V,
                                            0.125f, b[5], 40);
      });
  add("ClassifierForward", {N, N * C, V * C, 64 * V}, {N, N}, kGemm, {3},
      [](Backend& be, const Ptrs& b) {
        return be.ClassifierForwardBackward(b[0], nullptr, nullptr, b[1], b[2], b.n[1], N, C, V,
                                            1.0f, b[3], 64);
      });
  add("AddBiasAndPositions", {N * OC, OC, 4 * C, T * C}, {}, kExact, {},
      [](Backend& be, const Ptrs& b) {
        be.AddBias(b[0], b[1], N, OC);
        be.AddPositions(b[2], b[3], 250, 4, T, C);  // wraps past the sequence's end
        return 0.0;
      });
  add("VocabEmbedding", {N * C, 50 * C, 50 * C, N * C}, {N}, kExact, {},
      [](Backend& be, const Ptrs& b) {
        be.VocabEmbeddingForward(b[0], b.n[0], b[1], 40, 50, N, C);
        be.VocabEmbeddingBackward(b[2], b[3], b.n[0], 40, 50, N, C);
        return 0.0;
      });
  // One tp rank holding the whole vocabulary padded by 2 rows; the reduction is the identity.
  add("VocabParallelClassifier", {N, N * C, (V + 2) * C, N * C, (V + 2) * C, 33 * (V + 2)},
      {N, N}, kGemm, {5}, [](Backend& be, const Ptrs& b) {
        return be.VocabParallelClassifier(
            b[0], b[1], b[2], b[3], b[4], b.n[1], N, C, V + 2, V, 0, 0.125f, b[5], 33,
            [](void*, float*, int64_t, bool) {}, nullptr);
      });
  add("Conversions", {N * C, N * C, N * C, N * C}, {}, kExact, {}, [](Backend& be, const Ptrs& b) {
    be.Round(DType::kBF16, b[0], N * C);
    be.ConvertFromF32(DType::kF16, b[1], b[2], N * C);  // N*C halves in N*C floats' bytes
    be.ConvertToF32(DType::kF16, b[2], b[3], N * C);
    return 0.0;
  });
  add("CopyAndZero", {N * C, N * C, N * C}, {}, kExact, {}, [](Backend& be, const Ptrs& b) {
    be.Copy(b[0], b[1], N * C * sizeof(float));
    be.Zero(b[2], N * C * sizeof(float));
    return 0.0;
  });
  // Routing of N tokens over E experts in 3 groups (2 kept), sigmoid scores, a balancing
  // bias, normalised and scaled gates; then the plan (capacity 60: some assignments dropped),
  // gather, combine and every backward, and the auxiliary losses' gradient.
  add("MoeLayer",
      {N * E, E, N * E, N * K, N * C, N * K * C, N * K * C, N * C, N * K * C, N * K, N * C,
       N * K, N * E, N, N},
      {N * K, N * K, N * K}, kReduction, {}, [](Backend& be, const Ptrs& b) {
        const MoeRouterSpec spec = Router();
        const std::vector<float> bias = {0.05f, -0.1f, 0.0f, 0.2f, -0.05f,
                                         0.1f, 0.0f, -0.2f, 0.15f};  // host memory
        be.MoeRoute(spec, b[0], bias.data(), b[2], b.n[0], b[3], N);
        Plan plan;
        plan.kept = be.MoePlan(b.n[0], b[2], N, K, E, 60, b.n[1], b.n[2], plan.offset.data(),
                               plan.counts.data());
        be.MoeGather(b[5], b[4], b.n[2], plan.kept, C);
        be.MoeCombine(b[7], b[6], b[3], b.n[1], N, K, C);
        be.MoeCombineBackward(b[8], b[9], b[10], b[6], b[3], b.n[1], N, K, C);
        be.MoeGatherBackward(b[4], b[8], b.n[1], N, K, C);
        be.MoeRouteBackward(spec, b[2], b.n[0], b[11], b[12], N);
        const std::vector<float> switch_coef = {0.1f, -0.2f, 0.3f, 0.05f, 0.0f,
                                                0.7f, -0.4f, 0.2f, 0.15f};  // host memory
        MoeAuxGrad aux;
        aux.switch_coef = switch_coef.data();
        const std::vector<float> seq_coef = {0.3f, 0.1f, -0.1f, 0.2f, 0.4f, 0.0f, 0.1f, 0.2f, 0.3f};
        aux.seq_coef = seq_coef.data();  // one sequence of T rows
        aux.T = T;
        aux.z_scale = 0.01f;
        be.MoeAuxBackward(spec, b[0], b[2], aux, b[12], N);
        be.GatedAddForward(b[7], b[4], b[13], N, C);
        be.GatedAddBackward(b[10], b[14], b[7], b[4], b[13], N, C);
        double probs[E] = {}, counts[E] = {}, z = 0;
        be.MoeBalanceStats(spec, b[0], b[2], b.n[0], N, probs, counts, &z);
        double summary = static_cast<double>(plan.kept) + z;
        for (int64_t e = 0; e < E; ++e) summary += probs[e] + 1000.0 * counts[e] + plan.offset[e];
        return summary;
      });
}

std::vector<Case> Cases() {
  std::vector<Case> cs;
  AddCases(cs);
  return cs;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = CudaAvailable();
    if (!s.ok()) GTEST_SKIP() << s.ToString();
  }
  std::unique_ptr<Backend> Make(DType gemm = DType::kF32) {
    CudaBackendOptions o;
    o.gemm_dtype = gemm;
    auto r = CreateCudaBackend(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }
};

TEST(CudaBackendAvailability, IsAStatusNotACrash) {
  const Status s = CudaAvailable();
  if (!CudaBackendBuilt()) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  }
  if (!s.ok()) {
    EXPECT_FALSE(s.message().empty());
    EXPECT_FALSE(CreateCudaBackend({}).ok());
  }
}

// cuBLAS is loaded, not linked: where the backend is built, every entry point it calls
// resolves (no GPU needed); where it is not, the answer says so.
TEST(CudaBackendAvailability, CublasLoadsWithEveryEntryPoint) {
  const Status s = CublasLoadable();
  if (CudaBackendBuilt()) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  } else {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  }
}

// The cases themselves, on the reference alone (so they are sound where no GPU runs them):
// every case runs and changes some buffer, or its comparison would prove nothing.
TEST(CudaBackendCases, EveryCaseRunsOnTheCpuReferenceAndChangesABuffer) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    HostBuffers h = Fill(c, 17);
    RunCpu(c, h);
    const HostBuffers before = Fill(c, 17);
    bool changed = false;
    for (size_t i = 0; i < h.f.size(); ++i) changed |= h.f[i] != before.f[i];
    for (size_t i = 0; i < h.n.size(); ++i) changed |= h.n[i] != before.n[i];
    EXPECT_TRUE(changed);
  }
}

TEST_F(CudaBackendTest, EveryOpMatchesTheCpuReferenceWithinItsTolerance) {
  auto gpu = Make();
  ASSERT_NE(gpu, nullptr);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    HostBuffers want = Fill(c, 17), got = Fill(c, 17);
    const double want_sum = RunCpu(c, want);
    const double got_sum = RunGpu(*gpu, c, got);
    ExpectCaseClose(c, got, want, c.tol);
    for (size_t i = 0; i < want.n.size(); ++i) EXPECT_EQ(got.n[i], want.n[i]) << "n" << i;
    EXPECT_NEAR(got_sum, want_sum, 1e-5 * std::max(1.0, std::fabs(want_sum)));
  }
}

TEST_F(CudaBackendTest, EveryOpGivesTheSameBitsOnARerun) {
  auto gpu = Make();
  ASSERT_NE(gpu, nullptr);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    HostBuffers first = Fill(c, 29), second = Fill(c, 29);
    const double a = RunGpu(*gpu, c, first), b = RunGpu(*gpu, c, second);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
    for (size_t i = 0; i < first.f.size(); ++i) {
      EXPECT_EQ(std::memcmp(first.f[i].data(), second.f[i].data(), first.f[i].size() * 4), 0)
          << "f" << i;
    }
  }
}

// bf16 GEMMs: the Linear layers and the LM head with bf16 operands, fp32 accumulation.
TEST_F(CudaBackendTest, Bf16GemmsStayWithinBf16ToleranceOfTheFp32Reference) {
  auto gpu = Make(DType::kBF16);
  ASSERT_NE(gpu, nullptr);
  EXPECT_STREQ(gpu->name(), "cuda-bf16");
  for (const Case& c : Cases()) {
    if (c.name != "LinearForward" && c.name != "LinearBackward" &&
        c.name != "ClassifierForwardBackward") {
      continue;
    }
    SCOPED_TRACE(c.name);
    HostBuffers want = Fill(c, 31), got = Fill(c, 31);
    RunCpu(c, want);
    RunGpu(*gpu, c, got);
    ExpectCaseClose(c, got, want, kBf16Gemm);
  }
}

// The kernels save fp32 row statistics, never T x T probabilities, and their needs fit the
// sizes backend.h gives such a backend (the model allocates exactly those; CudaBackend checks).
TEST_F(CudaBackendTest, AttentionSavesRowStatisticsThatFitTheContract) {
  auto gpu = Make();
  ASSERT_NE(gpu, nullptr);
  EXPECT_FALSE(gpu->AttentionSavesProbabilities());
  EXPECT_EQ(gpu->AttentionSavedFloats(B, NH, T), B * NH * T + 1);
  EXPECT_EQ(gpu->AttentionScratchFloats(B, NH, T), B * NH * T);
}

TEST_F(CudaBackendTest, ArenasAreZeroedDeviceMemoryCountedByKindAndStreamsOrderWork) {
  auto gpu = Make();
  ASSERT_NE(gpu, nullptr);
  MemoryTracker tracker;
  {
    Arena a = gpu->MakeArena(MemoryKind::kActivations, 1 << 20, &tracker);
    EXPECT_EQ(a.device(), Device::kCuda);
    EXPECT_EQ(tracker.reserved(MemoryKind::kActivations), size_t{1} << 20);
    Tensor t = a.Allocate(DType::kF32, {1000});
    std::vector<float> host(1000, 1.0f);
    gpu->Download(host.data(), t.f32(), host.size() * sizeof(float));
    for (float v : host) ASSERT_EQ(v, 0.0f);
    // Work enqueued, an event after it, the host waits on the event: the result is there.
    std::vector<float> ones(1000, 1.0f);
    gpu->Upload(t.f32(), ones.data(), ones.size() * sizeof(float));
    gpu->AddInPlace(t.f32(), t.f32(), 1000);
    const Event e = gpu->Record(gpu->stream());
    EXPECT_FALSE(e.is_null());
    gpu->Synchronize(e);
    gpu->Download(host.data(), t.f32(), host.size() * sizeof(float));
    for (float v : host) ASSERT_EQ(v, 2.0f);
  }
  EXPECT_EQ(tracker.current(MemoryKind::kActivations), 0u);
}

}  // namespace
}  // namespace tessera
