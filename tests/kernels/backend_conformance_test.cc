// links: tessera_kernels
// tests/kernels/backend_conformance_test.cc — every op of the CPU fp32 backend (cpu_backend.h)
// gives the bits of the cpu/ function it forwards to, on the same inputs (outputs, saved
// statistics, accumulated gradients and returned loss sums alike), and the measuring backend
// (measuring_backend.h) leaves every buffer untouched.
//
// Each case is one op called through a Backend on buffers filled with fixed random values;
// the reference runs the cpu/ call on a copy of the same buffers. Accumulating outputs start
// non-zero, so `+=` and `=` semantics are compared too.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu_backend.h"
#include "runtime/kernels/measuring_backend.h"

namespace tessera {
namespace {

constexpr int64_t B = 2, T = 5, C = 8, NH = 4, NKV = 2, HS = 4, V = 11, OC = 6;
constexpr int64_t N = B * T, QKV = (NH + 2 * NKV) * HS;

// Named float buffers of one case; `ints` are token ids / targets.
struct Buffers {
  std::vector<std::vector<float>> f;
  std::vector<int32_t> tokens, targets;
  float* operator[](int i) { return f[static_cast<size_t>(i)].data(); }
};

Buffers Fill(const std::vector<int64_t>& sizes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Buffers b;
  for (int64_t n : sizes) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(gen);
    b.f.push_back(std::move(v));
  }
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  for (int64_t i = 0; i < N; ++i) {
    b.tokens.push_back(tok(gen));
    b.targets.push_back(i % 4 == 1 ? -1 : tok(gen));
  }
  return b;
}

// Inputs need not be meaningful (attention probabilities that are no softmax): the same
// arithmetic runs on any values, which is all a bit comparison needs.
struct Case {
  std::string name;
  std::vector<int64_t> sizes;
  // Runs the op through `be` (or, with be == nullptr, the cpu/ function) on `b`; returns the
  // op's scalar result (0 for void ops).
  std::function<double(Backend* be, Buffers& b)> run;
};

// One tp rank: the reduction over the group is the identity.
void CombineOneRank(void*, float*, int64_t, bool) {}

std::vector<Case> Cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, std::vector<int64_t> sizes,
                 std::function<double(Backend*, Buffers&)> run) {
    c.push_back({std::move(name), std::move(sizes), std::move(run)});
  };
  add("Gemm", {N * C, OC * C, N * OC}, [](Backend* be, Buffers& b) {
    be ? be->Gemm(false, true, N, OC, C, 0.5f, b[0], C, b[1], C, 1.0f, b[2], OC)
       : cpu::Gemm(false, true, N, OC, C, 0.5f, b[0], C, b[1], C, 1.0f, b[2], OC);
    return 0.0;
  });
  add("LinearForward", {N * OC, N * C, OC * C, OC}, [](Backend* be, Buffers& b) {
    be ? be->LinearForward(b[0], b[1], b[2], b[3], N, C, OC)
       : cpu::LinearForward(b[0], b[1], b[2], b[3], N, C, OC);
    return 0.0;
  });
  add("LinearBackward", {N * C, OC * C, OC, N * OC, N * C, OC * C}, [](Backend* be, Buffers& b) {
    be ? be->LinearBackward(b[0], b[1], b[2], b[3], b[4], b[5], N, C, OC)
       : cpu::LinearBackward(b[0], b[1], b[2], b[3], b[4], b[5], N, C, OC);
    return 0.0;
  });
  add("EmbeddingForward", {N * C, V * C, T * C}, [](Backend* be, Buffers& b) {
    be ? be->EmbeddingForward(b[0], b.tokens.data(), b[1], b[2], B, T, C)
       : cpu::EmbeddingForward(b[0], b.tokens.data(), b[1], b[2], B, T, C);
    return 0.0;
  });
  add("EmbeddingBackward", {V * C, T * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->EmbeddingBackward(b[0], b[1], b[2], b.tokens.data(), B, T, C, V)
       : cpu::EmbeddingBackward(b[0], b[1], b[2], b.tokens.data(), B, T, C, V);
    return 0.0;
  });
  add("LayerNormForward", {N * C, N, N, N * C, C, C}, [](Backend* be, Buffers& b) {
    be ? be->LayerNormForward(b[0], b[1], b[2], b[3], b[4], b[5], N, C, 1e-5f)
       : cpu::LayerNormForward(b[0], b[1], b[2], b[3], b[4], b[5], N, C, 1e-5f);
    return 0.0;
  });
  add("LayerNormBackward", {N * C, C, C, N * C, N * C, C, N, N}, [](Backend* be, Buffers& b) {
    be ? be->LayerNormBackward(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], N, C)
       : cpu::LayerNormBackward(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], N, C);
    return 0.0;
  });
  add("RmsNormForward", {N * C, N, N * C, C}, [](Backend* be, Buffers& b) {
    be ? be->RmsNormForward(b[0], b[1], b[2], b[3], N, C, 1e-5f)
       : cpu::RmsNormForward(b[0], b[1], b[2], b[3], N, C, 1e-5f);
    return 0.0;
  });
  add("RmsNormBackward", {N * C, C, N * C, N * C, C, N}, [](Backend* be, Buffers& b) {
    be ? be->RmsNormBackward(b[0], b[1], b[2], b[3], b[4], b[5], N, C)
       : cpu::RmsNormBackward(b[0], b[1], b[2], b[3], b[4], b[5], N, C);
    return 0.0;
  });
  add("GeluForward", {N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->GeluForward(b[0], b[1], N * C) : cpu::GeluForward(b[0], b[1], N * C);
    return 0.0;
  });
  add("GeluBackward", {N * C, N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->GeluBackward(b[0], b[1], b[2], N * C) : cpu::GeluBackward(b[0], b[1], b[2], N * C);
    return 0.0;
  });
  add("SwigluForward", {N * C, 2 * N * C}, [](Backend* be, Buffers& b) {
    be ? be->SwigluForward(b[0], b[1], N, C) : cpu::SwigluForward(b[0], b[1], N, C);
    return 0.0;
  });
  add("SwigluBackward", {2 * N * C, N * C, 2 * N * C}, [](Backend* be, Buffers& b) {
    be ? be->SwigluBackward(b[0], b[1], b[2], N, C) : cpu::SwigluBackward(b[0], b[1], b[2], N, C);
    return 0.0;
  });
  add("Add", {N * C, N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->Add(b[0], b[1], b[2], N * C) : cpu::Add(b[0], b[1], b[2], N * C);
    return 0.0;
  });
  add("AddInPlace", {N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->AddInPlace(b[0], b[1], N * C) : cpu::AddInPlace(b[0], b[1], N * C);
    return 0.0;
  });
  add("RopeForward", {N * QKV}, [](Backend* be, Buffers& b) {
    be ? be->RopeForward(b[0], B, T, NH, NKV, HS, PlainRope(10000.0f), 3)
       : cpu::RopeForward(b[0], B, T, NH, NKV, HS, PlainRope(10000.0f), 3);
    return 0.0;
  });
  add("RopeBackward", {N * QKV}, [](Backend* be, Buffers& b) {
    be ? be->RopeBackward(b[0], B, T, NH, NKV, HS, PlainRope(10000.0f), 3)
       : cpu::RopeBackward(b[0], B, T, NH, NKV, HS, PlainRope(10000.0f), 3);
    return 0.0;
  });
  add("AttentionForward", {N * NH * HS, B * NH * T * T, N * QKV}, [](Backend* be, Buffers& b) {
    be ? be->AttentionForward(b[0], b[1], b[2], B, T, NH, NKV, HS, 3)
       : cpu::AttentionForward(b[0], b[1], b[2], B, T, NH, NKV, HS, 3);
    return 0.0;
  });
  add("AttentionBackward", {N * QKV, B * NH * T * T, N * NH * HS, N * QKV, B * NH * T * T},
      [](Backend* be, Buffers& b) {
        be ? be->AttentionBackward(b[0], b[1], b[2], b[3], b[4], B, T, NH, NKV, HS)
           : cpu::AttentionBackward(b[0], b[1], b[2], b[3], b[4], B, T, NH, NKV, HS);
        return 0.0;
      });
  add("ClassifierForwardBackward", {N, N * C, V * C, N * C, V * C, 3 * V},
      [](Backend* be, Buffers& b) {
        return be ? be->ClassifierForwardBackward(b[0], b[1], b[2], b[3], b[4], b.targets.data(),
                                                  N, C, V, 0.125f, b[5], 3)
                  : cpu::ClassifierForwardBackward(b[0], b[1], b[2], b[3], b[4], b.targets.data(),
                                                   N, C, V, 0.125f, b[5], 3);
      });
  add("AddBias", {N * OC, OC}, [](Backend* be, Buffers& b) {
    be ? be->AddBias(b[0], b[1], N, OC) : cpu::AddBias(b[0], b[1], N, OC);
    return 0.0;
  });
  add("AddPositions", {4 * C, T * C}, [](Backend* be, Buffers& b) {
    be ? be->AddPositions(b[0], b[1], 3, 4, T, C) : cpu::AddPositions(b[0], b[1], 3, 4, T, C);
    return 0.0;
  });
  add("VocabEmbeddingForward", {N * C, 5 * C}, [](Backend* be, Buffers& b) {
    be ? be->VocabEmbeddingForward(b[0], b.tokens.data(), b[1], 4, 5, N, C)
       : cpu::VocabEmbeddingForward(b[0], b.tokens.data(), b[1], 4, 5, N, C);
    return 0.0;
  });
  add("VocabEmbeddingBackward", {5 * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->VocabEmbeddingBackward(b[0], b[1], b.tokens.data(), 4, 5, N, C)
       : cpu::VocabEmbeddingBackward(b[0], b[1], b.tokens.data(), 4, 5, N, C);
    return 0.0;
  });
  // One tp rank holding the whole (padded) vocabulary: V real rows of V + 1.
  add("VocabParallelClassifier", {N, N * C, (V + 1) * C, N * C, (V + 1) * C, 4 * (V + 1)},
      [](Backend* be, Buffers& b) {
        return be ? be->VocabParallelClassifier(b[0], b[1], b[2], b[3], b[4], b.targets.data(),
                                                N, C, V + 1, V, 0, 0.125f, b[5], 4,
                                                &CombineOneRank, nullptr)
                  : cpu::VocabParallelClassifier(b[0], b[1], b[2], b[3], b[4], b.targets.data(),
                                                 N, C, V + 1, V, 0, 0.125f, b[5], 4,
                                                 &CombineOneRank, nullptr);
      });
  add("Round", {N * C}, [](Backend* be, Buffers& b) {
    be ? be->Round(DType::kBF16, b[0], N * C) : cpu::RoundTo(DType::kBF16, b[0], N * C);
    return 0.0;
  });
  // Half-precision results land in the second buffer's bytes (N*C halves fit in N*C floats).
  add("ConvertFromF32", {N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->ConvertFromF32(DType::kF16, b[0], b[1], N * C)
       : cpu::ConvertFromF32(DType::kF16, b[0], b[1], N * C);
    return 0.0;
  });
  add("ConvertToF32", {N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->ConvertToF32(DType::kBF16, b[0], b[1], N * C)
       : cpu::ConvertToF32(DType::kBF16, b[0], b[1], N * C);
    return 0.0;
  });
  add("Copy", {N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->Copy(b[0], b[1], N * C * sizeof(float))
       : void(std::memcpy(b[0], b[1], N * C * sizeof(float)));
    return 0.0;
  });
  add("Upload", {N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->Upload(b[0], b[1], N * C * sizeof(float))
       : void(std::memcpy(b[0], b[1], N * C * sizeof(float)));
    return 0.0;
  });
  add("Download", {N * C, N * C}, [](Backend* be, Buffers& b) {
    be ? be->Download(b[0], b[1], N * C * sizeof(float))
       : void(std::memcpy(b[0], b[1], N * C * sizeof(float)));
    return 0.0;
  });
  add("Zero", {N * C}, [](Backend* be, Buffers& b) {
    be ? be->Zero(b[0], N * C * sizeof(float)) : void(std::memset(b[0], 0, N * C * sizeof(float)));
    return 0.0;
  });
  return c;
}

bool SameBits(const Buffers& a, const Buffers& b) {
  for (size_t i = 0; i < a.f.size(); ++i) {
    if (std::memcmp(a.f[i].data(), b.f[i].data(), a.f[i].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

TEST(CpuBackend, EveryOpGivesTheBitsOfTheCpuFunctionItForwardsTo) {
  CpuBackend cpu_backend;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Buffers ref = Fill(c.sizes, 17), got = Fill(c.sizes, 17);
    const double ref_sum = c.run(nullptr, ref);
    const double got_sum = c.run(&cpu_backend, got);
    EXPECT_TRUE(SameBits(ref, got));
    EXPECT_EQ(std::memcmp(&ref_sum, &got_sum, sizeof ref_sum), 0);
    // The op did something, or the comparison would prove nothing.
    EXPECT_FALSE(SameBits(ref, Fill(c.sizes, 17))) << "op left every buffer unchanged";
  }
}

TEST(MeasuringBackend, EveryOpLeavesEveryBufferUntouchedAndSumsNoLoss) {
  MeasuringBackend measuring;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Buffers b = Fill(c.sizes, 23);
    EXPECT_EQ(c.run(&measuring, b), 0.0);
    EXPECT_TRUE(SameBits(b, Fill(c.sizes, 23)));
  }
}

TEST(CpuBackend, ArenasAreZeroedHostMemoryAndStreamsAreTheCallingThread) {
  CpuBackend be;
  MemoryTracker tracker;
  Arena a = be.MakeArena(MemoryKind::kWorkspace, 256, &tracker);
  EXPECT_EQ(a.device(), Device::kCpu);
  EXPECT_FALSE(a.measuring());
  EXPECT_EQ(tracker.reserved(MemoryKind::kWorkspace), 256u);
  Tensor t = a.Allocate(DType::kF32, {64});
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(t.f32()[i], 0.0f);
  // Everything has completed when an op returns: the recorded event is already complete.
  EXPECT_TRUE(be.stream().is_default());
  const Event e = be.Record(be.stream());
  EXPECT_TRUE(e.is_null());
  be.Wait(be.stream(), e);
  be.Synchronize(e);
}

TEST(MeasuringBackend, ArenasOnlyCountAndBelongToTheMeasuredDevice) {
  MeasuringBackend be(Device::kCuda);
  MemoryTracker tracker;
  Arena a = be.MakeArena(MemoryKind::kActivations, 1 << 20, &tracker);
  EXPECT_TRUE(a.measuring());
  EXPECT_EQ(a.device(), Device::kCuda);
  EXPECT_EQ(tracker.reserved(MemoryKind::kActivations), 0u);
  Tensor t = a.Allocate(DType::kF32, {100});
  EXPECT_EQ(t.data(), nullptr);
  EXPECT_GE(a.peak(), 400u);
}

}  // namespace
}  // namespace tessera
