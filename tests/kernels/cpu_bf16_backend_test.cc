// links: tessera_models
// tests/kernels/cpu_bf16_backend_test.cc — the CPU bf16 backend (runtime/kernels/
// cpu_bf16_backend.h) on every bf16 GEMM path this machine has: fp32 compute everywhere, and
// oneDNN where the CPU has bf16 instructions (AMX-BF16, AVX512-BF16); the oneDNN runs are
// reported as not run, with oneDNN's reason, on CPUs without them. Checks: its Linear layers
// and LM head are the bf16 kernels on narrowed operands, within bf16 bounds of fp32; a bf16 model on it tracks the fp32 backend within
// the bf16 GEMM bounds and reruns bit-identically; and ChooseComputeBackend's choice and
// banner line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "runtime/kernels/cpu/bf16_gemm.h"
#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu_backend.h"
#include "runtime/kernels/cpu_bf16_backend.h"

namespace tessera {
namespace {

// The bf16 GEMM paths that run here; oneDNN's absence is printed with its reason.
std::vector<cpu::Bf16GemmPath> Paths() {
  std::vector<cpu::Bf16GemmPath> paths = {cpu::Bf16GemmPath::kFp32Compute};
  Status s = cpu::SetBf16GemmPath(cpu::Bf16GemmPath::kOneDnn);
  if (s.ok()) {
    paths.push_back(cpu::Bf16GemmPath::kOneDnn);
  } else {
    std::printf("oneDNN bf16 path not run on this CPU: %s\n", s.ToString().c_str());
  }
  cpu::ResetBf16GemmPath();
  return paths;
}

const char* PathName(cpu::Bf16GemmPath p) {
  return p == cpu::Bf16GemmPath::kOneDnn ? "onednn" : "fp32-compute";
}

class PathGuard {
 public:
  explicit PathGuard(cpu::Bf16GemmPath p) { EXPECT_TRUE(cpu::SetBf16GemmPath(p).ok()); }
  ~PathGuard() { cpu::ResetBf16GemmPath(); }
};

std::vector<float> Random(int64_t n, uint32_t seed, bool bf16_valued) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  if (bf16_valued) cpu::RoundTo(DType::kBF16, v.data(), n);
  return v;
}

std::vector<uint16_t> Narrowed(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  cpu::ConvertFromF32(DType::kBF16, v.data(), out.data(), static_cast<int64_t>(v.size()));
  return out;
}

TEST(CpuBf16Backend, LinearLayersAreTheBf16KernelsOnNarrowedOperands) {
  const int64_t N = 48, C = 80, OC = 72;
  const std::vector<float> inp = Random(N * C, 1, true), w = Random(OC * C, 2, true);
  const std::vector<float> bias = Random(OC, 3, false), d_out = Random(N * OC, 4, false);
  for (cpu::Bf16GemmPath path : Paths()) {
    SCOPED_TRACE(PathName(path));
    PathGuard guard(path);
    CpuBf16Backend be;
    std::vector<float> out(N * OC), ref(N * OC);
    be.LinearForward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    cpu::LinearForwardBf16(ref.data(), Narrowed(inp).data(), Narrowed(w).data(), bias.data(), N,
                           C, OC);
    EXPECT_EQ(0, std::memcmp(out.data(), ref.data(), out.size() * 4));
    // Within the bf16 GEMM bound of the fp32 product of the same (bf16-valued) operands.
    std::vector<float> f32(N * OC);
    cpu::LinearForward(f32.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    for (int64_t i = 0; i < N * OC; ++i) ASSERT_NEAR(out[i], f32[i], 1e-4f * C) << i;

    std::vector<float> d_inp(N * C), g_w(OC * C, 0.5f), g_b(OC, 0.25f);
    std::vector<float> r_inp(N * C), r_w(OC * C, 0.5f), r_b(OC, 0.25f);
    be.LinearBackward(d_inp.data(), g_w.data(), g_b.data(), d_out.data(), inp.data(), w.data(),
                      N, C, OC);
    cpu::LinearBackwardBf16(r_inp.data(), r_w.data(), r_b.data(), Narrowed(d_out).data(),
                            Narrowed(inp).data(), Narrowed(w).data(), N, C, OC);
    EXPECT_EQ(0, std::memcmp(d_inp.data(), r_inp.data(), d_inp.size() * 4));
    EXPECT_EQ(0, std::memcmp(g_w.data(), r_w.data(), g_w.size() * 4));
    EXPECT_EQ(0, std::memcmp(g_b.data(), r_b.data(), g_b.size() * 4));
  }
}

// The LM head in bf16: the bf16 classifier kernel on narrowed x and weight, within the bf16
// bounds of the fp32 head on the same (bf16-valued) operands.
TEST(CpuBf16Backend, ClassifierIsTheBf16KernelAndTracksFp32) {
  const int64_t N = 40, C = 48, V = 300, chunk = 16;
  const std::vector<float> x = Random(N * C, 5, true), w = Random(V * C, 6, true);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = i % 9 == 4 ? -1 : static_cast<int32_t>(i * 31 % V);
  for (cpu::Bf16GemmPath path : Paths()) {
    SCOPED_TRACE(PathName(path));
    PathGuard guard(path);
    CpuBf16Backend be;
    std::vector<float> losses(N), d_x(N * C), d_w(V * C, 0.125f), logits(chunk * V);
    const double sum = be.ClassifierForwardBackward(losses.data(), d_x.data(), d_w.data(),
                                                    x.data(), w.data(), targets.data(), N, C, V,
                                                    0.5f, logits.data(), chunk);
    std::vector<float> r_losses(N), r_dx(N * C), r_dw(V * C, 0.125f);
    std::vector<uint16_t> d_logits(chunk * V);
    const double r_sum = cpu::ClassifierForwardBackwardBf16(
        r_losses.data(), r_dx.data(), r_dw.data(), Narrowed(x).data(), Narrowed(w).data(),
        targets.data(), N, C, V, 0.5f, logits.data(), d_logits.data(), chunk);
    EXPECT_EQ(sum, r_sum);
    EXPECT_EQ(0, std::memcmp(d_x.data(), r_dx.data(), d_x.size() * 4));
    EXPECT_EQ(0, std::memcmp(d_w.data(), r_dw.data(), d_w.size() * 4));

    std::vector<float> f_losses(N), f_dx(N * C), f_dw(V * C, 0.125f);
    const double f_sum = cpu::ClassifierForwardBackward(f_losses.data(), f_dx.data(),
                                                        f_dw.data(), x.data(), w.data(),
                                                        targets.data(), N, C, V, 0.5f,
                                                        logits.data(), chunk);
    EXPECT_NEAR(sum, f_sum, 1e-4 * std::fabs(f_sum));
    // d_logits rounded to bf16 (relative 2^-9 each): within 2^-8 of the largest gradient.
    auto max_abs = [](const std::vector<float>& v) {
      float m = 0;
      for (float e : v) m = std::max(m, std::fabs(e));
      return m;
    };
    const float tol_x = max_abs(f_dx) / 256, tol_w = max_abs(f_dw) / 256;
    for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(d_x[i], f_dx[i], tol_x) << i;
    for (int64_t i = 0; i < V * C; ++i) ASSERT_NEAR(d_w[i], f_dw[i], tol_w) << i;
  }
}

ModelConfig Small(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 256;
  c.max_seq_len = 32;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_heads = 4;
  c.num_kv_heads = family == ModelFamily::kLlama ? 2 : 0;
  c.tie_embeddings = family == ModelFamily::kGpt2;
  c.init_std = 0.05f;
  c.recompute = RecomputePolicy::kSelective;
  return c;
}

struct StepOut {
  double loss = 0;
  std::vector<float> grads;
};

StepOut BfStep(const ModelConfig& c, Backend* backend) {
  const int64_t B = 2, T = 32;
  ModelOptions mo;
  mo.activation_dtype = DType::kBF16;
  mo.backend = backend;
  auto made = Transformer::Create(c, B, T, nullptr, mo);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  Transformer& m = **made;
  m.InitRandom(3);
  cpu::RoundTo(DType::kBF16, m.flat_params().f32(), m.num_params());
  std::vector<int32_t> in(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    in[i] = static_cast<int32_t>((i * 37 + 11) % c.vocab_size);
    tgt[i] = static_cast<int32_t>((i * 53 + 7) % c.vocab_size);
  }
  m.ZeroGrads();
  StepOut r;
  r.loss = m.ForwardBackward(in.data(), tgt.data(), 1.0f);
  const Tensor g = m.flat_grads();
  r.grads.assign(g.f32(), g.f32() + g.numel());
  return r;
}

TEST(CpuBf16Backend, ModelTracksTheFp32BackendAndRerunsBitIdentically) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    const ModelConfig c = Small(family);
    CpuBackend fp32;
    const StepOut ref = BfStep(c, &fp32);
    for (cpu::Bf16GemmPath path : Paths()) {
      SCOPED_TRACE(std::string(ModelFamilyName(family)) + " " + PathName(path));
      PathGuard guard(path);
      CpuBf16Backend be;
      const StepOut a = BfStep(c, &be);
      const StepOut b = BfStep(c, &be);
      EXPECT_EQ(a.loss, b.loss);
      EXPECT_EQ(0, std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4));
      double d = 0, n = 0;
      for (size_t i = 0; i < a.grads.size(); ++i) {
        d += (static_cast<double>(a.grads[i]) - ref.grads[i]) * (a.grads[i] - ref.grads[i]);
        n += static_cast<double>(ref.grads[i]) * ref.grads[i];
      }
      std::printf("%s %s: loss %.6f (fp32 backend %.6f), gradient rel. RMS %.2e\n",
                  ModelFamilyName(family), PathName(path), a.loss, ref.loss, std::sqrt(d / n));
      // Output gradients rounded to bf16 before each GEMM (relative 2^-9 each).
      EXPECT_NEAR(a.loss, ref.loss, 1e-3 * std::fabs(ref.loss));
      EXPECT_LT(std::sqrt(d / n), 2e-2);
    }
  }
}

TEST(ChooseComputeBackend, NamesTheStorageAndTheGemmPath) {
  ComputeBackendChoice f32 = ChooseComputeBackend(DType::kF32);
  EXPECT_STREQ(f32.backend->name(), "cpu-fp32");
  EXPECT_EQ(f32.description, "cpu-fp32");
  ComputeBackendChoice f16 = ChooseComputeBackend(DType::kF16);
  EXPECT_STREQ(f16.backend->name(), "cpu-fp32");
  EXPECT_EQ(f16.description, "cpu-fp32: f16 storage, fp32 compute");
  {
    PathGuard guard(cpu::Bf16GemmPath::kFp32Compute);
    ComputeBackendChoice bf = ChooseComputeBackend(DType::kBF16);
    EXPECT_STREQ(bf.backend->name(), "cpu-fp32");
    EXPECT_EQ(bf.description.rfind("cpu-fp32: bf16 storage, fp32 compute (bf16 GEMM: fp32 compute", 0),
              0u) << bf.description;
  }
  for (cpu::Bf16GemmPath path : Paths()) {
    if (path != cpu::Bf16GemmPath::kOneDnn) continue;
    PathGuard guard(path);
    ComputeBackendChoice bf = ChooseComputeBackend(DType::kBF16);
    EXPECT_STREQ(bf.backend->name(), "cpu-bf16");
    EXPECT_EQ(bf.description.rfind("cpu-bf16: bf16 storage, bf16 GEMMs (bf16 GEMM: oneDNN", 0), 0u)
        << bf.description;
  }
}

}  // namespace
}  // namespace tessera
