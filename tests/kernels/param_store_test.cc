// links: tessera_models
// tests/kernels/param_store_test.cc — the unit seam of the Transformer (models/param_store.h)
// and what it rests on: a model reading its weights from a caller's ParamStore gives the loss
// and gradients of the model owning its buffers, bit for bit, under every family, tying and
// recompute policy, calling the store exactly in the documented order (and using no unit it
// has not acquired: released scratch is poisoned with NaN); UnitBounds and InitParameterRange
// agree with the layout and InitRandom; low-precision activations (bf16/f16) change the loss
// slightly, deterministically, and identically under every recompute policy.
#include "models/param_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "models/param_layout.h"
#include "models/transformer.h"
#include "runtime/kernels/cpu/threads.h"
#include "tests/testing/tiny_model.h"

namespace tessera {
namespace {

constexpr int64_t kB = 2, kT = 8;

ModelConfig Tiny(ModelFamily family, bool tied, RecomputePolicy policy) {
  return testing::TinyDense(family, 3, 32, tied, policy);
}

using Batch = testing::TokenBatch;

Batch MakeBatch(int64_t V, uint32_t seed) { return testing::RandomTokens(kB * kT, V, seed, 7, 3); }

std::unique_ptr<Transformer> Make(const ModelConfig& c, const ModelOptions& options = {}) {
  auto r = Transformer::Create(c, kB, kT, nullptr, options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::vector<float> Copy(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

// A store as a ZeRO-3 trainer would have one, made hostile: parameters live in its own flat
// vector (filled by InitParameterRange); Acquire hands out a FRESH copy of the unit, which
// Release poisons with NaN (kept allocated, so a late read yields NaN rather than undefined
// behaviour); gradients go to per-unit buffers that GradsDone moves out and poisons, so a
// write after GradsDone is lost and shows as a gradient mismatch. Every call is recorded.
class TestStore final : public ParamStore {
 public:
  TestStore(const ModelConfig& c, uint64_t seed) : bounds_(UnitBounds(c)) {
    params_.resize(bounds_.back());
    InitParameterRange(c, seed, 0, bounds_.back(), params_.data());
    const int units = static_cast<int>(bounds_.size()) - 1;
    live_grads_.resize(units);
    final_grads_.resize(units);
    in_progress_.assign(units, false);
    acquired_.assign(units, nullptr);
    for (int u = 0; u < units; ++u) final_grads_[u].assign(size(u), 0.0f);
  }

  const float* Acquire(int unit) override {
    Record("A", unit);
    EXPECT_EQ(acquired_[unit], nullptr) << "unit " << unit << " acquired twice";
    auto copy = std::make_unique<float[]>(size(unit));
    std::copy(params_.begin() + bounds_[unit], params_.begin() + bounds_[unit + 1], copy.get());
    acquired_[unit] = copy.get();
    scratch_.push_back(std::move(copy));
    return acquired_[unit];
  }
  void Release(int unit) override {
    Record("R", unit);
    ASSERT_NE(acquired_[unit], nullptr) << "unit " << unit << " released unacquired";
    std::fill(acquired_[unit], acquired_[unit] + size(unit),
              std::numeric_limits<float>::quiet_NaN());
    acquired_[unit] = nullptr;
  }
  void Prefetch(int unit) override { Record("P", unit); }
  float* Grads(int unit) override {
    Record("G", unit);
    if (!in_progress_[unit]) {  // first call of this step: continue accumulating
      live_grads_[unit] = final_grads_[unit];
      in_progress_[unit] = true;
    }
    return live_grads_[unit].data();
  }
  void GradsDone(int unit) override {
    Record("D", unit);
    ASSERT_TRUE(in_progress_[unit]) << "GradsDone(" << unit << ") without Grads";
    final_grads_[unit] = live_grads_[unit];
    std::fill(live_grads_[unit].begin(), live_grads_[unit].end(),
              std::numeric_limits<float>::quiet_NaN());
    in_progress_[unit] = false;
  }

  // The gradients of every finished unit, concatenated: the model's flat gradient layout.
  std::vector<float> FlatGrads() const {
    std::vector<float> g;
    for (const auto& u : final_grads_) g.insert(g.end(), u.begin(), u.end());
    return g;
  }
  std::vector<std::string> TakeCalls() { return std::move(calls_); }
  bool AnyAcquired() const {
    return std::any_of(acquired_.begin(), acquired_.end(), [](float* p) { return p != nullptr; });
  }
  const std::vector<float>& params() const { return params_; }

 private:
  int64_t size(int unit) const { return bounds_[unit + 1] - bounds_[unit]; }
  void Record(const char* what, int unit) {
    calls_.push_back(std::string(what) + std::to_string(unit));
  }

  std::vector<int64_t> bounds_;
  std::vector<float> params_;
  std::vector<std::unique_ptr<float[]>> scratch_;  // every acquired copy, poisoned once released
  std::vector<float*> acquired_;
  std::vector<std::vector<float>> live_grads_, final_grads_;
  std::vector<bool> in_progress_;
  std::vector<std::string> calls_;
};

// The call sequence param_store.h prescribes for one step of a model with L blocks.
std::vector<std::string> ContractCalls(int L, bool tied, bool backward) {
  std::vector<std::string> s;
  auto add = [&](const char* what, int unit) { s.push_back(what + std::to_string(unit)); };
  add("A", 0);
  add("R", 0);
  for (int l = 0; l < L; ++l) {
    add("A", 1 + l);
    add("P", 2 + l);
    add("R", 1 + l);
  }
  add("A", L + 1);
  if (tied) add("A", 0);
  if (backward) add("G", tied ? 0 : L + 1);
  if (tied) add("R", 0);
  if (!backward) {
    add("R", L + 1);
    return s;
  }
  add("G", L + 1);
  add("D", L + 1);
  add("R", L + 1);
  for (int l = L - 1; l >= 0; --l) {
    add("A", 1 + l);
    if (l > 0) add("P", l);
    add("G", 1 + l);
    add("D", 1 + l);
    add("R", 1 + l);
  }
  add("G", 0);
  add("D", 0);
  return s;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

// ---- the store path against the owning model ----------------------------------------------

class StoreSeam
    : public ::testing::TestWithParam<std::tuple<ModelFamily, bool, RecomputePolicy>> {};

TEST_P(StoreSeam, BitIdenticalToOwningModelInContractOrder) {
  const auto [family, tied, policy] = GetParam();
  const ModelConfig c = Tiny(family, tied, policy);
  const int L = static_cast<int>(c.num_layers);
  constexpr uint64_t kSeed = 77;

  auto owner = Make(c);
  owner->InitRandom(kSeed);
  TestStore store(c, kSeed);
  ModelOptions options;
  options.store = &store;
  auto model = Make(c, options);
  EXPECT_TRUE(store.TakeCalls().empty()) << "Create must not call the store";

  // The model owns no parameters but still describes them.
  EXPECT_TRUE(model->flat_params().empty());
  EXPECT_TRUE(model->flat_grads().empty());
  EXPECT_EQ(model->num_params(), owner->num_params());
  ASSERT_EQ(model->parameters().size(), owner->parameters().size());
  for (size_t i = 0; i < owner->parameters().size(); ++i) {
    const Parameter& a = owner->parameters()[i];
    const Parameter& b = model->parameters()[i];
    EXPECT_EQ(a.name(), b.name());
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.hf_transposed, b.hf_transposed);
    EXPECT_EQ(a.value.shape(), b.value.shape());
    EXPECT_EQ(a.numel(), b.numel());
    EXPECT_TRUE(b.value.empty() && b.grad.empty()) << b.name();
  }
  // The store was filled by InitParameterRange: the same values InitRandom gives.
  ASSERT_EQ(store.params().size(), static_cast<size_t>(owner->num_params()));
  EXPECT_EQ(0, std::memcmp(store.params().data(), owner->flat_params().data(),
                           owner->flat_params().nbytes()));

  // Two accumulating micro-batches, then an evaluation.
  const Batch b1 = MakeBatch(c.vocab_size, 1), b2 = MakeBatch(c.vocab_size, 2);
  owner->ZeroGrads();
  model->ZeroGrads();  // no-op with a store
  for (const Batch* b : {&b1, &b2}) {
    const double lo = owner->ForwardBackward(b->inputs.data(), b->targets.data(), 0.5f);
    const double lm = model->ForwardBackward(b->inputs.data(), b->targets.data(), 0.5f);
    EXPECT_EQ(lo, lm);
    EXPECT_TRUE(std::isfinite(lm));
    EXPECT_FALSE(store.AnyAcquired());
    EXPECT_EQ(Join(store.TakeCalls()), Join(ContractCalls(L, tied, /*backward=*/true)));
  }
  const std::vector<float> g_owner = Copy(owner->flat_grads()), g_store = store.FlatGrads();
  ASSERT_EQ(g_owner.size(), g_store.size());
  EXPECT_EQ(0, std::memcmp(g_owner.data(), g_store.data(), g_owner.size() * sizeof(float)))
      << "gradients differ";
  EXPECT_TRUE(std::any_of(g_store.begin(), g_store.end(), [](float x) { return x != 0.0f; }));
  for (const Parameter& p : owner->parameters()) {  // every parameter receives gradient
    const float* g = g_store.data() + p.offset;
    if (p.kind == ParamKind::kBias) continue;  // a bias's gradient may legitimately be tiny
    EXPECT_TRUE(std::any_of(g, g + p.numel(), [](float x) { return x != 0.0f; })) << p.name();
  }

  const double eo = owner->Forward(b1.inputs.data(), b1.targets.data());
  const double em = model->Forward(b1.inputs.data(), b1.targets.data());
  EXPECT_EQ(eo, em);
  EXPECT_EQ(Join(store.TakeCalls()), Join(ContractCalls(L, tied, /*backward=*/false)));
  EXPECT_EQ(0, std::memcmp(g_store.data(), store.FlatGrads().data(),
                           g_store.size() * sizeof(float)))
      << "Forward touched gradients";
}

INSTANTIATE_TEST_SUITE_P(
    Models, StoreSeam,
    ::testing::Combine(::testing::Values(ModelFamily::kGpt2, ModelFamily::kLlama),
                       ::testing::Bool(),
                       ::testing::Values(RecomputePolicy::kNone, RecomputePolicy::kSelective,
                                         RecomputePolicy::kFull)),
    [](const auto& p) {
      return std::string(ModelFamilyName(std::get<0>(p.param))) +
             (std::get<1>(p.param) ? "_tied_" : "_untied_") +
             RecomputePolicyName(std::get<2>(p.param));
    });

TEST(StoreSeamBf16, SameBitsAsOwningModel) {
  const ModelConfig c = Tiny(ModelFamily::kLlama, false, RecomputePolicy::kSelective);
  ModelOptions own_opts;
  own_opts.activation_dtype = DType::kBF16;
  auto owner = Make(c, own_opts);
  owner->InitRandom(3);
  TestStore store(c, 3);
  ModelOptions store_opts = own_opts;
  store_opts.store = &store;
  auto model = Make(c, store_opts);
  EXPECT_EQ(model->activation_dtype(), DType::kBF16);
  const Batch b = MakeBatch(c.vocab_size, 9);
  EXPECT_EQ(owner->ForwardBackward(b.inputs.data(), b.targets.data(), 1.0f),
            model->ForwardBackward(b.inputs.data(), b.targets.data(), 1.0f));
  const std::vector<float> g = store.FlatGrads();
  EXPECT_EQ(0, std::memcmp(g.data(), owner->flat_grads().data(), g.size() * sizeof(float)));
}

TEST(StoreSeamDeathTest, InitAndCallbackRefusedWithStore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ModelConfig c = Tiny(ModelFamily::kGpt2, true, RecomputePolicy::kNone);
  TestStore store(c, 1);
  ModelOptions options;
  options.store = &store;
  auto model = Make(c, options);
  EXPECT_DEATH(model->InitRandom(1), "InitParameterRange");
  EXPECT_DEATH(model->SetGradReadyCallback([](int64_t, int64_t) {}), "GradsDone");
  model->SetGradReadyCallback({});  // turning the hook off is harmless
}

// ---- the default store: grad-ready hook per unit -------------------------------------------

TEST(GradReady, OneRangePerUnitFromTheLast) {
  for (bool tied : {true, false}) {
    const ModelConfig c = Tiny(ModelFamily::kGpt2, tied, RecomputePolicy::kNone);
    auto m = Make(c);
    m->InitRandom(4);
    std::vector<std::pair<int64_t, int64_t>> ranges;
    m->SetGradReadyCallback([&](int64_t b, int64_t e) { ranges.emplace_back(b, e); });
    const Batch b = MakeBatch(c.vocab_size, 5);
    m->ForwardBackward(b.inputs.data(), b.targets.data(), 1.0f);
    m->Forward(b.inputs.data(), b.targets.data());  // never reports
    const std::vector<int64_t> bounds = UnitBounds(c);
    const int units = static_cast<int>(bounds.size()) - 1;
    ASSERT_EQ(ranges.size(), static_cast<size_t>(units));
    for (int k = 0; k < units; ++k) {
      const int u = units - 1 - k;
      EXPECT_EQ(ranges[k].first, bounds[u]) << "unit " << u;
      EXPECT_EQ(ranges[k].second, bounds[u + 1]) << "unit " << u;
    }
  }
}

// ---- units and init ---------------------------------------------------------------------------

// The unit a parameter belongs to, from its name.
int UnitOfName(const std::string& name, int L) {
  for (const std::string prefix : {"h.", "model.layers."}) {
    if (name.rfind(prefix, 0) == 0) return 1 + std::stoi(name.substr(prefix.size()));
  }
  if (name == "wte.weight" || name == "wpe.weight" || name == "model.embed_tokens.weight") {
    return 0;
  }
  return L + 1;  // final norm, lm_head
}

TEST(UnitBounds, CoverTheLayoutAndMatchParameterNames) {
  for (ModelFamily f : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    for (bool tied : {true, false}) {
      const ModelConfig c = Tiny(f, tied, RecomputePolicy::kNone);
      const int L = static_cast<int>(c.num_layers);
      const std::vector<int64_t> bounds = UnitBounds(c);
      auto m = Make(c);
      ASSERT_EQ(bounds.size(), static_cast<size_t>(L + 3));
      EXPECT_EQ(bounds.front(), 0);
      EXPECT_EQ(bounds.back(), m->num_params());
      for (size_t u = 0; u + 1 < bounds.size(); ++u) EXPECT_LT(bounds[u], bounds[u + 1]);
      std::vector<int64_t> covered(L + 2, 0);
      for (const Parameter& p : m->parameters()) {
        const int u = UnitOfName(p.name(), L);
        EXPECT_GE(p.offset, bounds[u]) << p.name();
        EXPECT_LE(p.offset + p.numel(), bounds[u + 1]) << p.name();
        covered[u] += p.numel();
      }
      for (int u = 0; u < L + 2; ++u) EXPECT_EQ(covered[u], bounds[u + 1] - bounds[u]);
      // All blocks have the same size (the same relative layout).
      for (int l = 1; l < L; ++l) EXPECT_EQ(bounds[l + 1] - bounds[l], bounds[2] - bounds[1]);
      if (!tied) {
        const Parameter& head = m->parameters().back();
        EXPECT_EQ(head.name(), "lm_head.weight");
        EXPECT_EQ(head.offset + head.numel(), bounds[L + 2]);
      }
    }
  }
}

TEST(InitParameterRange, AnySubRangeIsTheSliceOfInitRandom) {
  ModelConfig c = Tiny(ModelFamily::kLlama, false, RecomputePolicy::kNone);
  c.vocab_size = 300;  // embeddings of 4800 elements: more than one init chunk
  c.hidden_size = 32;
  auto m = Make(c);
  m->InitRandom(123);
  const float* full = m->flat_params().f32();
  const int64_t P = m->num_params();
  std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, P}, {0, 0}, {P, P}, {0, 1}, {P - 1, P}, {4095, 4097}, {4096, 8192}};
  for (const Parameter& p : m->parameters()) {  // straddling every parameter boundary
    if (p.offset > 0) ranges.emplace_back(p.offset - 1, std::min(P, p.offset + 5));
  }
  std::mt19937_64 gen(9);
  for (int k = 0; k < 40; ++k) {
    int64_t a = static_cast<int64_t>(gen() % (P + 1)), b = static_cast<int64_t>(gen() % (P + 1));
    ranges.emplace_back(std::min(a, b), std::max(a, b));
  }
  const int before = cpu::NumThreads();
  for (int threads : {1, 2}) {
    cpu::SetNumThreads(threads);
    for (const auto& [begin, end] : ranges) {
      std::vector<float> out(end - begin + 1, -7.0f);  // one guard element
      InitParameterRange(c, 123, begin, end, out.data());
      EXPECT_EQ(0, std::memcmp(out.data(), full + begin, (end - begin) * sizeof(float)))
          << "[" << begin << ", " << end << ") threads " << threads;
      EXPECT_EQ(out.back(), -7.0f) << "wrote past the range";
    }
  }
  cpu::SetNumThreads(before);
  // A different seed differs.
  std::vector<float> other(P);
  InitParameterRange(c, 124, 0, P, other.data());
  EXPECT_NE(0, std::memcmp(other.data(), full, P * sizeof(float)));
}

// ---- low-precision activations ----------------------------------------------------------------

struct RunResult {
  double loss;
  std::vector<float> grads;
};

RunResult TrainStep(const ModelConfig& c, DType act, const Batch& b) {
  ModelOptions o;
  o.activation_dtype = act;
  auto m = Make(c, o);
  m->InitRandom(11);
  RunResult r;
  r.loss = m->ForwardBackward(b.inputs.data(), b.targets.data(), 1.0f);
  r.grads = Copy(m->flat_grads());
  EXPECT_EQ(r.loss, m->Forward(b.inputs.data(), b.targets.data()));
  return r;
}

class LowPrecision : public ::testing::TestWithParam<std::tuple<ModelFamily, DType>> {};

TEST_P(LowPrecision, CloseToFp32DeterministicAndSameUnderEveryPolicy) {
  const auto [family, act] = GetParam();
  const bool tied = family == ModelFamily::kGpt2;
  const Batch b = MakeBatch(32, 21);
  const RunResult fp32 = TrainStep(Tiny(family, tied, RecomputePolicy::kNone), DType::kF32, b);
  const RunResult low = TrainStep(Tiny(family, tied, RecomputePolicy::kNone), act, b);
  EXPECT_NE(fp32.loss, low.loss) << "no rounding happened";
  EXPECT_NEAR(low.loss, fp32.loss, 1e-2 * fp32.loss);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < fp32.grads.size(); ++i) {
    diff += std::pow(double(low.grads[i]) - fp32.grads[i], 2);
    norm += std::pow(double(fp32.grads[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 5e-2) << "gradients far from fp32";
  std::printf("%s %s: loss %.6f vs fp32 %.6f, relative gradient difference %.2e\n",
              ModelFamilyName(family), std::string(DTypeName(act)).c_str(), low.loss, fp32.loss,
              std::sqrt(diff / norm));

  const RunResult again = TrainStep(Tiny(family, tied, RecomputePolicy::kNone), act, b);
  EXPECT_EQ(again.loss, low.loss);
  EXPECT_EQ(0, std::memcmp(again.grads.data(), low.grads.data(), low.grads.size() * 4));
  for (RecomputePolicy p : {RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    const RunResult r = TrainStep(Tiny(family, tied, p), act, b);
    EXPECT_EQ(r.loss, low.loss) << RecomputePolicyName(p);
    EXPECT_EQ(0, std::memcmp(r.grads.data(), low.grads.data(), low.grads.size() * 4))
        << RecomputePolicyName(p) << " gradients differ from none";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, LowPrecision,
    ::testing::Combine(::testing::Values(ModelFamily::kGpt2, ModelFamily::kLlama),
                       ::testing::Values(DType::kBF16, DType::kF16)),
    [](const auto& p) {
      return std::string(ModelFamilyName(std::get<0>(p.param))) + "_" +
             std::string(DTypeName(std::get<1>(p.param)));
    });

TEST(ActivationDtype, RejectsNonFloatType) {
  ModelOptions o;
  o.activation_dtype = DType::kI32;
  auto r = Transformer::Create(Tiny(ModelFamily::kGpt2, true, RecomputePolicy::kNone), kB, kT,
                               nullptr, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("i32"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera
