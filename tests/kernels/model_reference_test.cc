// links: tessera_models
// tests/kernels/model_reference_test.cc — the model's loss against an independent, naive
// double-precision forward written straight from the Hugging Face definitions (GPT2Model with
// tied head and gelu_new; LlamaForCausalLM with rotate_half RoPE and repeat_kv GQA), reading
// the same weights by name. Finite-difference checks prove forward and backward agree; this
// proves the forward is the model users expect (wiring, positions, head grouping, RoPE).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/transformer.h"

namespace tessera {
namespace {

using Vec = std::vector<double>;
using Mat = std::vector<Vec>;  // rows: tokens

class Weights {
 public:
  explicit Weights(Transformer& m) {
    for (const Parameter& p : m.parameters()) by_name_[p.name()] = &p;
  }
  bool Has(const std::string& n) const { return by_name_.count(n) > 0; }
  // Element (r, c) of a (rows, cols) parameter in our (nn.Linear) layout.
  double At(const std::string& n, int64_t r, int64_t c = 0) const {
    const Parameter* p = by_name_.at(n);
    const int64_t cols = p->value.shape().rank() > 1 ? p->value.dim(1) : 1;
    return p->value.f32()[r * cols + c];
  }
  int64_t Rows(const std::string& n) const { return by_name_.at(n)->value.dim(0); }

 private:
  std::unordered_map<std::string, const Parameter*> by_name_;
};

// y = W x (+ b), W (out, in).
Mat Linear(const Weights& w, const Mat& x, const std::string& weight, const std::string& bias) {
  const int64_t out = w.Rows(weight);
  Mat y(x.size(), Vec(out));
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = bias.empty() ? 0.0 : w.At(bias, o);
      for (size_t i = 0; i < x[t].size(); ++i) s += w.At(weight, o, i) * x[t][i];
      y[t][o] = s;
    }
  return y;
}

Mat LayerNorm(const Weights& w, const Mat& x, const std::string& prefix, double eps) {
  Mat y = x;
  for (size_t t = 0; t < x.size(); ++t) {
    const size_t C = x[t].size();
    double mean = 0, var = 0;
    for (double v : x[t]) mean += v;
    mean /= C;
    for (double v : x[t]) var += (v - mean) * (v - mean);
    var /= C;
    for (size_t c = 0; c < C; ++c)
      y[t][c] = (x[t][c] - mean) / std::sqrt(var + eps) * w.At(prefix + ".weight", c) +
                w.At(prefix + ".bias", c);
  }
  return y;
}

Mat RmsNorm(const Weights& w, const Mat& x, const std::string& weight, double eps) {
  Mat y = x;
  for (size_t t = 0; t < x.size(); ++t) {
    double ms = 0;
    for (double v : x[t]) ms += v * v;
    ms /= x[t].size();
    for (size_t c = 0; c < x[t].size(); ++c)
      y[t][c] = x[t][c] / std::sqrt(ms + eps) * w.At(weight, c);
  }
  return y;
}

// HF LlamaRotaryEmbedding + apply_rotary_pos_emb: inv_freq_i = theta^(-2i/HS), and
// rotate_half pairs element i with element i + HS/2 of the same head.
void Rope(Vec& head, int64_t pos, double theta) {
  const size_t HS = head.size(), half = HS / 2;
  Vec out(HS);
  for (size_t i = 0; i < half; ++i) {
    const double inv_freq = 1.0 / std::pow(theta, static_cast<double>(2 * i) / HS);
    const double a = pos * inv_freq;
    out[i] = head[i] * std::cos(a) - head[i + half] * std::sin(a);
    out[i + half] = head[i + half] * std::cos(a) + head[i] * std::sin(a);
  }
  head = out;
}

// Causal attention of one sequence: q (T, NH*HS), k and v (T, NKV*HS); query head h reads kv
// head h / (NH/NKV) (repeat_kv repeats each kv head NH/NKV times, consecutively).
Mat Attention(const Mat& q, const Mat& k, const Mat& v, int64_t NH, int64_t NKV, int64_t HS) {
  const size_t T = q.size();
  Mat out(T, Vec(NH * HS, 0.0));
  for (int64_t h = 0; h < NH; ++h) {
    const int64_t kvh = h / (NH / NKV);
    for (size_t t = 0; t < T; ++t) {
      Vec s(t + 1);
      double mx = -1e300;
      for (size_t u = 0; u <= t; ++u) {
        double dot = 0;
        for (int64_t i = 0; i < HS; ++i) dot += q[t][h * HS + i] * k[u][kvh * HS + i];
        s[u] = dot / std::sqrt(static_cast<double>(HS));
        mx = std::max(mx, s[u]);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (size_t u = 0; u <= t; ++u)
        for (int64_t i = 0; i < HS; ++i) out[t][h * HS + i] += s[u] / z * v[u][kvh * HS + i];
    }
  }
  return out;
}

void AddTo(Mat& a, const Mat& b) {
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t c = 0; c < a[t].size(); ++c) a[t][c] += b[t][c];
}

// Mean cross-entropy of one sequence's hidden states against the head; adds to sum/count.
void Loss(const Weights& w, const Mat& h, const std::string& head, const int32_t* targets,
          double& sum, int64_t& count) {
  const Mat logits = Linear(w, h, head, "");
  for (size_t t = 0; t < h.size(); ++t) {
    if (targets[t] < 0) continue;
    double mx = -1e300, z = 0;
    for (double l : logits[t]) mx = std::max(mx, l);
    for (double l : logits[t]) z += std::exp(l - mx);
    sum += std::log(z) + mx - logits[t][targets[t]];
    ++count;
  }
}

double ReferenceLoss(Transformer& m, const ModelConfig& c, int64_t B, int64_t T,
                     const int32_t* inputs, const int32_t* targets) {
  const Weights w(m);
  const bool gpt2 = c.family == ModelFamily::kGpt2;
  const int64_t C = c.hidden_size, NH = c.num_heads, NKV = c.kv_heads(), HS = c.head_size();
  double sum = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* tok = inputs + b * T;
    Mat x(T, Vec(C));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < C; ++i)
        x[t][i] = gpt2 ? w.At("wte.weight", tok[t], i) + w.At("wpe.weight", t, i)
                       : w.At("model.embed_tokens.weight", tok[t], i);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      if (gpt2) {
        const std::string p = "h." + std::to_string(l) + ".";
        const Mat qkv = Linear(w, LayerNorm(w, x, p + "ln_1", c.norm_eps),
                               p + "attn.c_attn.weight", p + "attn.c_attn.bias");
        Mat q(T), k(T), v(T);
        for (int64_t t = 0; t < T; ++t) {
          q[t].assign(qkv[t].begin(), qkv[t].begin() + C);
          k[t].assign(qkv[t].begin() + C, qkv[t].begin() + 2 * C);
          v[t].assign(qkv[t].begin() + 2 * C, qkv[t].end());
        }
        AddTo(x, Linear(w, Attention(q, k, v, NH, NH, HS), p + "attn.c_proj.weight",
                        p + "attn.c_proj.bias"));
        Mat f = Linear(w, LayerNorm(w, x, p + "ln_2", c.norm_eps), p + "mlp.c_fc.weight",
                       p + "mlp.c_fc.bias");
        for (Vec& row : f)
          for (double& u : row)  // gelu_new
            u = 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
        AddTo(x, Linear(w, f, p + "mlp.c_proj.weight", p + "mlp.c_proj.bias"));
      } else {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const Mat n = RmsNorm(w, x, p + "input_layernorm.weight", c.norm_eps);
        Mat q = Linear(w, n, p + "self_attn.q_proj.weight", "");
        Mat k = Linear(w, n, p + "self_attn.k_proj.weight", "");
        const Mat v = Linear(w, n, p + "self_attn.v_proj.weight", "");
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t h = 0; h < NH + NKV; ++h) {
            Vec& row = h < NH ? q[t] : k[t];
            const int64_t hh = h < NH ? h : h - NH;
            Vec head(row.begin() + hh * HS, row.begin() + (hh + 1) * HS);
            Rope(head, t, c.rope_theta);
            std::copy(head.begin(), head.end(), row.begin() + hh * HS);
          }
        }
        AddTo(x, Linear(w, Attention(q, k, v, NH, NKV, HS), p + "self_attn.o_proj.weight", ""));
        const Mat n2 = RmsNorm(w, x, p + "post_attention_layernorm.weight", c.norm_eps);
        const Mat gate = Linear(w, n2, p + "mlp.gate_proj.weight", "");
        Mat up = Linear(w, n2, p + "mlp.up_proj.weight", "");
        for (int64_t t = 0; t < T; ++t)
          for (size_t j = 0; j < up[t].size(); ++j)
            up[t][j] *= gate[t][j] / (1 + std::exp(-gate[t][j]));  // silu(gate) * up
        AddTo(x, Linear(w, up, p + "mlp.down_proj.weight", ""));
      }
    }
    const Mat h = gpt2 ? LayerNorm(w, x, "ln_f", c.norm_eps)
                       : RmsNorm(w, x, "model.norm.weight", c.norm_eps);
    const std::string head = w.Has("lm_head.weight") ? "lm_head.weight"
                             : gpt2                  ? "wte.weight"
                                                     : "model.embed_tokens.weight";
    Loss(w, h, head, targets + b * T, sum, count);
  }
  return sum / count;
}

struct Case {
  const char* name;
  ModelConfig config;
};

ModelConfig Base(ModelFamily f) {
  ModelConfig c;
  c.family = f;
  c.vocab_size = 40;
  c.max_seq_len = 12;
  c.num_layers = 2;
  c.hidden_size = 24;
  c.num_heads = f == ModelFamily::kGpt2 ? 3 : 4;  // Llama head size 6
  c.num_kv_heads = f == ModelFamily::kGpt2 ? 0 : 2;
  c.init_std = 0.3f;
  c.norm_eps = f == ModelFamily::kGpt2 ? 1e-5f : 1e-6f;
  c.rope_theta = 500.0f;  // large angles within a short sequence
  c.tie_embeddings = f == ModelFamily::kGpt2;
  return c;
}

class Reference : public ::testing::TestWithParam<int> {};

TEST_P(Reference, LossMatchesNaiveHuggingFaceDefinition) {
  ModelConfig c = Base(GetParam() % 2 == 0 ? ModelFamily::kGpt2 : ModelFamily::kLlama);
  if (GetParam() >= 2) {  // the other head choice, and multi-query attention for Llama
    c.tie_embeddings = !c.tie_embeddings;
    if (c.family == ModelFamily::kLlama) c.num_kv_heads = 1;
  }
  const int64_t B = 2, T = 10;
  auto r = Transformer::Create(c, B, T, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Transformer& m = **r;
  m.InitRandom(17);
  // Non-trivial norm weights and biases, so that mixing them up shows.
  std::mt19937 gen(2);
  std::uniform_real_distribution<float> u(0.5f, 1.5f), ub(-0.3f, 0.3f);
  for (Parameter& p : m.parameters()) {
    if (p.kind == ParamKind::kNorm)
      for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] = u(gen);
    if (p.kind == ParamKind::kBias)
      for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] = ub(gen);
  }
  std::vector<int32_t> inputs(B * T), targets(B * T);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  for (int64_t i = 0; i < B * T; ++i) {
    inputs[i] = tok(gen);
    targets[i] = i % 5 == 2 ? -1 : tok(gen);
  }
  const double ref = ReferenceLoss(m, c, B, T, inputs.data(), targets.data());
  const double got = m.Forward(inputs.data(), targets.data());
  std::printf("%s tie=%d kv=%ld: loss %.7f, reference %.7f\n", ModelFamilyName(c.family),
              c.tie_embeddings, static_cast<long>(c.kv_heads()), got, ref);
  EXPECT_NEAR(got, ref, 1e-5 * ref);
  EXPECT_EQ(got, m.ForwardBackward(inputs.data(), targets.data(), 1.0f));
}

INSTANTIATE_TEST_SUITE_P(Models, Reference, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace tessera
