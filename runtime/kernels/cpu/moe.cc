// runtime/kernels/cpu/moe.cc — the mixture-of-experts kernels of cpu/moe.h.
//
// Per-token work (routing, its backward, combine, gather backward) runs in parallel over
// tokens: each token's arithmetic is sequential in a fixed order, so the bits do not depend on
// the thread count. Sums over tokens (the plan, the balancing statistics) run in token order on
// one thread: they are O(R * E) and O(R * k), small beside the expert GEMMs.
#include "runtime/kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

// scores of one token: softmax or sigmoid of its logits.
void Scores(const MoeRouterSpec& spec, const float* r, float* s) {
  const int64_t E = spec.E;
  if (spec.sigmoid) {
    for (int64_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-r[e]));
    return;
  }
  float m = r[0];
  for (int64_t e = 1; e < E; ++e) m = std::max(m, r[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < E; ++e) {
    s[e] = std::exp(r[e] - m);
    sum += s[e];
  }
  const float inv = 1.0f / sum;
  for (int64_t e = 0; e < E; ++e) s[e] *= inv;
}

// The index of the largest q among the experts `allowed` and not `taken` (ties: lower index).
int64_t ArgMax(const float* q, const uint8_t* allowed, const uint8_t* taken, int64_t E) {
  int64_t best = -1;
  for (int64_t e = 0; e < E; ++e) {
    if (!allowed[e] || taken[e]) continue;
    if (best < 0 || q[e] > q[best]) best = e;
  }
  return best;
}

// allowed[e] = 1 for the experts of the token's groups_kept best groups (all with one group).
void AllowedExperts(const MoeRouterSpec& spec, const float* q, uint8_t* allowed,
                    std::vector<float>& group_score, std::vector<float>& top) {
  const int64_t E = spec.E, G = spec.groups;
  if (G <= 1) {
    std::fill(allowed, allowed + E, uint8_t{1});
    return;
  }
  const int64_t size = E / G, per = std::min<int64_t>(2, size);
  for (int64_t g = 0; g < G; ++g) {
    // The sum of the group's two largest q (DeepSeek-V3's group score), largest first.
    top.assign(q + g * size, q + (g + 1) * size);
    std::partial_sort(top.begin(), top.begin() + per, top.end(), std::greater<float>());
    float sum = 0.0f;
    for (int64_t i = 0; i < per; ++i) sum += top[static_cast<size_t>(i)];
    group_score[static_cast<size_t>(g)] = sum;
  }
  std::fill(allowed, allowed + E, uint8_t{0});
  for (int64_t kept = 0; kept < spec.groups_kept; ++kept) {
    int64_t best = -1;
    for (int64_t g = 0; g < G; ++g) {
      if (allowed[g * size]) continue;  // already kept
      if (best < 0 || group_score[static_cast<size_t>(g)] > group_score[static_cast<size_t>(best)]) best = g;
    }
    std::fill(allowed + best * size, allowed + (best + 1) * size, uint8_t{1});
  }
}

// The denominator of normalised gates. The guard keeps it positive when every chosen score
// has underflowed (sigmoid scores, or softmax scores of experts a large bias chose); any
// healthy sum is far above it, so it changes no bits there.
float GateSum(const MoeRouterSpec& spec, const float* s, const int32_t* expert) {
  float sum = 0.0f;
  for (int64_t j = 0; j < spec.k; ++j) sum += s[expert[j]];
  return sum + 1e-20f;
}

}  // namespace

void MoeRoute(const MoeRouterSpec& spec, const float* logits, const float* bias, float* scores,
              int32_t* expert, float* gate, int64_t R) {
  const int64_t E = spec.E, k = spec.k;
#pragma omp parallel
  {
    std::vector<float> q(static_cast<size_t>(E)), group_score(static_cast<size_t>(spec.groups)),
        top;
    std::vector<uint8_t> allowed(static_cast<size_t>(E)), taken(static_cast<size_t>(E));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < R; ++t) {
      float* s = scores + t * E;
      Scores(spec, logits + t * E, s);
      for (int64_t e = 0; e < E; ++e) q[static_cast<size_t>(e)] = s[e] + (bias ? bias[e] : 0.0f);
      AllowedExperts(spec, q.data(), allowed.data(), group_score, top);
      std::fill(taken.begin(), taken.end(), uint8_t{0});
      int32_t* ex = expert + t * k;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = ArgMax(q.data(), allowed.data(), taken.data(), E);
        taken[static_cast<size_t>(e)] = 1;
        ex[j] = static_cast<int32_t>(e);
      }
      float* w = gate + t * k;
      const float inv = spec.normalize ? 1.0f / GateSum(spec, s, ex) : 1.0f;
      for (int64_t j = 0; j < k; ++j) w[j] = s[ex[j]] * inv * spec.route_scale;
    }
  }
}

void MoeRouteBackward(const MoeRouterSpec& spec, const float* scores, const int32_t* expert,
                      const float* d_gate, float* d_logits, int64_t R) {
  const int64_t E = spec.E, k = spec.k;
  const float c = spec.route_scale;
#pragma omp parallel
  {
    std::vector<float> d_s(static_cast<size_t>(E));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < R; ++t) {
      const float* s = scores + t * E;
      const int32_t* ex = expert + t * k;
      const float* dw = d_gate + t * k;
      std::fill(d_s.begin(), d_s.end(), 0.0f);
      if (spec.normalize) {
        // w_i = c s_i / D, D = sum_j s_j (+ eps): d s_m = c (dw_m / D - sum_i dw_i s_i / D^2).
        const float D = GateSum(spec, s, ex);
        float dot = 0.0f;
        for (int64_t j = 0; j < k; ++j) dot += dw[j] * s[ex[j]];
        for (int64_t j = 0; j < k; ++j) d_s[static_cast<size_t>(ex[j])] += c * (dw[j] / D - dot / (D * D));
      } else {
        for (int64_t j = 0; j < k; ++j) d_s[static_cast<size_t>(ex[j])] += c * dw[j];
      }
      float* dr = d_logits + t * E;
      if (spec.sigmoid) {
        for (int64_t e = 0; e < E; ++e) dr[e] = d_s[static_cast<size_t>(e)] * s[e] * (1.0f - s[e]);
      } else {
        float dot = 0.0f;
        for (int64_t e = 0; e < E; ++e) dot += d_s[static_cast<size_t>(e)] * s[e];
        for (int64_t e = 0; e < E; ++e) dr[e] = s[e] * (d_s[static_cast<size_t>(e)] - dot);
      }
    }
  }
}

int64_t MoePlan(const int32_t* expert, const float* scores, int64_t R, int64_t k, int64_t E,
                int64_t capacity, int32_t* row_of, int32_t* token_of_row, int64_t* offset,
                int64_t* counts) {
  // Each expert's assignments (flat index t * k + j), in token order.
  std::vector<std::vector<int64_t>> of(static_cast<size_t>(E));
  for (int64_t a = 0; a < R * k; ++a) of[static_cast<size_t>(expert[a])].push_back(a);
  for (int64_t a = 0; a < R * k; ++a) row_of[a] = -1;
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t>& list = of[static_cast<size_t>(e)];
    counts[e] += static_cast<int64_t>(list.size());
    offset[e] = row;
    if (capacity >= 0 && static_cast<int64_t>(list.size()) > capacity) {
      // Keep the highest probabilities (stable: equal ones keep token order), then back to
      // token order. Assignment a is token a / k's choice of expert e.
      auto prob = [&](int64_t a) { return scores[(a / k) * E + e]; };
      std::stable_sort(list.begin(), list.end(),
                       [&](int64_t a, int64_t b) { return prob(a) > prob(b); });
      list.resize(static_cast<size_t>(capacity));
      std::sort(list.begin(), list.end());
    }
    for (int64_t a : list) {
      row_of[a] = static_cast<int32_t>(row);
      token_of_row[row] = static_cast<int32_t>(a / k);
      ++row;
    }
  }
  offset[E] = row;
  return row;
}

void MoeGather(float* rows, const float* x, const int32_t* token_of_row, int64_t n, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(rows + i * C, x + static_cast<int64_t>(token_of_row[i]) * C, C * sizeof(float));
  }
}

void MoeGatherBackward(float* d_x, const float* d_rows, const int32_t* row_of, int64_t R,
                       int64_t k, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < R; ++t) {
    float* dx = d_x + t * C;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = row_of[t * k + j];
      if (row < 0) continue;
      const float* dr = d_rows + row * C;
      for (int64_t c = 0; c < C; ++c) dx[c] += dr[c];
    }
  }
}

void MoeCombine(float* out, const float* y, const float* gate, const int32_t* row_of,
                int64_t R, int64_t k, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < R; ++t) {
    float* o = out + t * C;
    std::fill(o, o + C, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = row_of[t * k + j];
      if (row < 0) continue;
      const float g = gate[t * k + j];
      const float* yr = y + row * C;
      for (int64_t c = 0; c < C; ++c) o[c] += g * yr[c];
    }
  }
}

void MoeCombineBackward(float* d_y, float* d_gate, const float* d_out, const float* y,
                        const float* gate, const int32_t* row_of, int64_t R, int64_t k,
                        int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < R; ++t) {
    const float* dout = d_out + t * C;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = row_of[t * k + j];
      if (row < 0) {
        d_gate[t * k + j] = 0.0f;
        continue;
      }
      const float g = gate[t * k + j];
      const float* yr = y + row * C;
      float* dy = d_y + row * C;
      double dot = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        dy[c] = g * dout[c];
        dot += static_cast<double>(dout[c]) * yr[c];
      }
      d_gate[t * k + j] = static_cast<float>(dot);
    }
  }
}

namespace {
float Sigmoid(float z) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z)))); }
}  // namespace

void GatedAddForward(float* out, const float* x, const float* logit, int64_t R, int64_t C) {
#pragma omp parallel for schedule(static) if (R * C >= vec::kMinParallelElems)
  for (int64_t t = 0; t < R; ++t) {
    const float g = Sigmoid(logit[t]);
    for (int64_t c = 0; c < C; ++c) out[t * C + c] += g * x[t * C + c];
  }
}

void GatedAddBackward(float* d_x, float* d_logit, const float* d_out, const float* x,
                      const float* logit, int64_t R, int64_t C) {
#pragma omp parallel for schedule(static) if (R * C >= vec::kMinParallelElems)
  for (int64_t t = 0; t < R; ++t) {
    const float g = Sigmoid(logit[t]);
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      d_x[t * C + c] = g * d_out[t * C + c];
      dot += static_cast<double>(d_out[t * C + c]) * x[t * C + c];
    }
    d_logit[t] = static_cast<float>(dot * g * (1.0 - g));
  }
}

void MoeBalanceStats(const MoeRouterSpec& spec, const float* logits, const float* scores,
                     const int32_t* expert, int64_t R, double* probs_sum, double* counts,
                     double* z_sum) {
  const int64_t E = spec.E;
  for (int64_t a = 0; a < R * spec.k; ++a) counts[expert[a]] += 1.0;
  for (int64_t t = 0; t < R; ++t) {
    const float* s = scores + t * E;
    double norm = 1.0;
    if (spec.sigmoid) {
      double sum = 0.0;
      for (int64_t e = 0; e < E; ++e) sum += s[e];
      norm = 1.0 / sum;
    }
    for (int64_t e = 0; e < E; ++e) probs_sum[e] += s[e] * norm;
    if (z_sum != nullptr) {
      const float* r = logits + t * E;
      double m = r[0];
      for (int64_t e = 1; e < E; ++e) m = std::max(m, static_cast<double>(r[e]));
      double sum = 0.0;
      for (int64_t e = 0; e < E; ++e) sum += std::exp(r[e] - m);
      const double lse = m + std::log(sum);
      *z_sum += lse * lse;
    }
  }
}

void MoeAuxBackward(const MoeRouterSpec& spec, const float* logits, const float* scores,
                    const MoeAuxGrad& aux, float* d_logits, int64_t R) {
  const int64_t E = spec.E;
  const bool balance = aux.switch_coef != nullptr || aux.seq_coef != nullptr;
#pragma omp parallel
  {
    std::vector<float> d_p(static_cast<size_t>(E));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < R; ++t) {
      const float* s = scores + t * E;
      const float* r = logits + t * E;
      float* dr = d_logits + t * E;
      if (balance) {
        const float* seq = aux.seq_coef != nullptr
                               ? aux.seq_coef + ((aux.row0 + t) / aux.T - aux.seq0) * E
                               : nullptr;
        for (int64_t e = 0; e < E; ++e) {
          d_p[static_cast<size_t>(e)] =
              (aux.switch_coef ? aux.switch_coef[e] : 0.0f) + (seq ? seq[e] : 0.0f);
        }
        if (spec.sigmoid) {
          // p = s / S: d s_e = (d p_e - sum_m d p_m p_m) / S; then through the sigmoid.
          float S = 0.0f;
          for (int64_t e = 0; e < E; ++e) S += s[e];
          float dot = 0.0f;
          for (int64_t e = 0; e < E; ++e) dot += d_p[static_cast<size_t>(e)] * s[e] / S;
          for (int64_t e = 0; e < E; ++e) {
            const float ds = (d_p[static_cast<size_t>(e)] - dot) / S;
            dr[e] += ds * s[e] * (1.0f - s[e]);
          }
        } else {
          // p = s = softmax(r).
          float dot = 0.0f;
          for (int64_t e = 0; e < E; ++e) dot += d_p[static_cast<size_t>(e)] * s[e];
          for (int64_t e = 0; e < E; ++e) dr[e] += s[e] * (d_p[static_cast<size_t>(e)] - dot);
        }
      }
      if (aux.z_scale != 0.0f) {
        // z = lse^2: d r_e = 2 lse softmax(r)_e (the 2 and the mean are in z_scale).
        float m = r[0];
        for (int64_t e = 1; e < E; ++e) m = std::max(m, r[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) sum += std::exp(r[e] - m);
        const float lse = m + std::log(sum);
        for (int64_t e = 0; e < E; ++e) dr[e] += aux.z_scale * lse * std::exp(r[e] - m) / sum;
      }
    }
  }
}

}  // namespace tessera::cpu
