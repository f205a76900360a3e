// models/moe.cc — forward and backward of the mixture-of-experts sublayer (moe.h).
//
// Every kernel runs on the step's backend; a measuring step routes nothing (an empty plan),
// so the per-expert GEMM loops make no calls there while every tensor is still allocated at
// its worst-case size. Backward code quotes the forward line it differentiates.
#include "models/moe.h"

#include <algorithm>
#include <cmath>

#include "models/activation_store.h"
#include "models/block.h"
#include "models/expert_parallel.h"
#include "runtime/core/check.h"

namespace tessera {

MoeDims MoeDims::Of(const ModelConfig& c, int64_t B, int64_t T, DType act_dtype) {
  MoeDims d;
  d.gpt2 = c.family == ModelFamily::kGpt2;
  d.B = B;
  d.T = T;
  d.C = c.hidden_size;
  d.Fe = c.expert_ffn();
  d.S = c.moe.shared_experts * c.expert_ffn();
  d.shared_gate = c.moe.shared_expert_gate;
  d.spec.E = c.moe.num_experts;
  d.spec.k = c.moe.top_k;
  d.spec.groups = c.moe.groups;
  d.spec.groups_kept = c.moe.groups_kept;
  d.spec.sigmoid = c.moe.score == RouterScore::kSigmoid;
  d.spec.normalize = c.moe.normalize_gates;
  d.spec.route_scale = c.moe.route_scale;
  d.capacity_factor = c.moe.capacity_factor;
  d.aux_loss = c.moe.aux_loss;
  d.seq_aux_loss = c.moe.seq_aux_loss;
  d.z_loss = c.moe.z_loss;
  d.act_dtype = act_dtype;
  return d;
}

int64_t MoeDims::capacity() const {
  if (!(capacity_factor > 0)) return -1;
  // ceil(tokens * k / E * factor), in double. The factor is the 32-bit float nearest to what
  // the config wrote (1.1 is 1.10000002f): a product that is an integer for the written
  // factor comes out a few ulps above it, so a relative 1e-7 below is taken first (far
  // smaller than the step between two products of distinct written factors).
  const double x = static_cast<double>(R()) * static_cast<double>(k()) /
                   static_cast<double>(E()) * static_cast<double>(capacity_factor);
  return static_cast<int64_t>(std::ceil(x * (1.0 - 1e-7)));
}

int MoeDims::ep_size() const { return ep != nullptr ? ep->size() : 1; }

int64_t MoeDims::max_expert_rows() const {
  if (ep == nullptr) return max_rows();
  // Every rank's tokens choosing min(k, E/ep) of this rank's experts; with a capacity, no
  // source sends an expert more than its capacity.
  const int64_t rows = ep_size() * R() * std::min(k(), local_experts());
  const int64_t cap = capacity();
  return cap < 0 ? rows : std::min(rows, ep_size() * local_experts() * cap);
}

void MoeLayerState::ResetStats() {
  std::fill(counts.begin(), counts.end(), 0);
  assigned = kept = calls = 0;
  aux_loss = 0.0;
}

float* MoeLayer::Activation(const StepContext& step, const Tensor& act_out, const float* fc_out,
                            int64_t n, int64_t F) const {
  const ActivationStore store(d_.act_dtype);
  float* out = store.Working(step, act_out);
  if (d_.gpt2) {
    step.backend->GeluForward(out, fc_out, n * F);
  } else {
    step.backend->SwigluForward(out, fc_out, n, F);
  }
  store.CommitRows(step, act_out, out, n);
  return out;
}

// The routed experts on their rows x (fp32, x_rows's values; s.segment): fc, activation,
// out projection, one GEMM per local expert over all its rows (s.segment). Fills fc_out and
// act_out; writes the outputs, fp32, to y.
void MoeLayer::Experts(StepContext& step, const MoeSaved& s, const MoeWeights& w,
                       const float* x, float* y) const {
  Backend& be = *step.backend;
  const ActivationStore store(d_.act_dtype);
  const int64_t C = d_.C, Fe = d_.Fe, FC = d_.fc_dim();
  const int64_t rows = s.segment.empty() ? 0 : s.segment.back();
  float* fc = store.Working(step, s.fc_out);
  ForEachExpertRows(s.segment, [&](int64_t e, int64_t b, int64_t n) {
    be.LinearForward(fc + b * FC, x + b * C, ExpertSlice(w.fc_w, e, FC * C),
                     ExpertSlice(w.fc_b, e, Fe), n, C, FC);
  });
  store.CommitRows(step, s.fc_out, fc, rows);
  const float* act = Activation(step, s.act_out, fc, rows, Fe);
  ForEachExpertRows(s.segment, [&](int64_t e, int64_t b, int64_t n) {
    be.LinearForward(y + b * C, act + b * Fe, ExpertSlice(w.out_w, e, C * Fe),
                     ExpertSlice(w.out_b, e, C), n, Fe, C);
  });
}

void MoeLayer::PlanExchange(MoeSaved& s) const {
  const int P = d_.ep->size();
  const int64_t E = d_.E(), El = d_.local_experts();
  std::vector<int32_t> send(static_cast<size_t>(E)), recv(static_cast<size_t>(E), 0);
  for (int64_t e = 0; e < E; ++e) {
    send[static_cast<size_t>(e)] = static_cast<int32_t>(s.offset[e + 1] - s.offset[e]);
  }
  d_.ep->ExchangeCounts(send.data(), recv.data(), El);
  // After a failed exchange the counts may be partial: nothing arrives (the trainer ends the
  // job at the micro-batch's end).
  if (!d_.ep->status().ok()) std::fill(recv.begin(), recv.end(), 0);
  s.rows_to.assign(static_cast<size_t>(P), 0);
  s.rows_from.assign(static_cast<size_t>(P), 0);
  // recv[p * El + le]: rows source p sends local expert le, arriving in that order.
  s.segment.assign(static_cast<size_t>(El + 1), 0);
  for (int p = 0; p < P; ++p) {
    for (int64_t le = 0; le < El; ++le) {
      const int32_t n = recv[static_cast<size_t>(p * El + le)];
      s.rows_to[static_cast<size_t>(p)] += send[static_cast<size_t>(p * El + le)];
      s.rows_from[static_cast<size_t>(p)] += n;
      s.segment[static_cast<size_t>(le + 1)] += n;
    }
  }
  for (int64_t le = 0; le < El; ++le) s.segment[le + 1] += s.segment[le];
  const int64_t rows = s.segment.back();
  // Peers run the same config, so no rank can be sent more than the worst case.
  TESSERA_CHECK(rows <= d_.max_expert_rows());
  // Regrouped: expert le's rows from source 0, then 1, ...
  s.by_expert.resize(static_cast<size_t>(rows));
  s.by_source.resize(static_cast<size_t>(rows));
  std::vector<int64_t> next(s.segment.begin(), s.segment.end() - 1);
  int32_t arrived = 0;
  for (int p = 0; p < P; ++p) {
    for (int64_t le = 0; le < El; ++le) {
      for (int32_t j = 0; j < recv[static_cast<size_t>(p * El + le)]; ++j, ++arrived) {
        const int64_t r = next[static_cast<size_t>(le)]++;
        s.by_expert[static_cast<size_t>(r)] = arrived;
        s.by_source[static_cast<size_t>(arrived)] = static_cast<int32_t>(r);
      }
    }
  }
}

void MoeLayer::RunExperts(StepContext& step, MoeSaved& s, const MoeWeights& w, const float* x,
                          float* y) const {
  const ActivationStore store(d_.act_dtype);
  const int64_t C = d_.C;
  if (d_.ep == nullptr) {
    s.segment = s.offset;
    store.CommitRows(step, s.x_rows, const_cast<float*>(x), s.offset.back());
    Experts(step, s, w, x, y);
    return;
  }
  Arena& ws = *step.workspace;
  PlanExchange(s);
  const int64_t Mx = d_.max_expert_rows(), rows = s.segment.back();
  float* arrived = ws.Allocate(DType::kF32, {Mx, C}).f32();
  d_.ep->ExchangeRows(x, s.rows_to, arrived, s.rows_from, C);
  float* x_in = store.Working(step, s.x_rows);
  step.backend->MoeGather(x_in, arrived, s.by_expert.data(), rows, C);
  store.CommitRows(step, s.x_rows, x_in, rows);
  float* y_out = ws.Allocate(DType::kF32, {Mx, C}).f32();
  Experts(step, s, w, x_in, y_out);
  step.backend->MoeGather(arrived, y_out, s.by_source.data(), rows, C);
  d_.ep->ExchangeRows(arrived, s.rows_from, y, s.rows_to, C);
}

// out += shared(h): fc, activation, out projection over all R tokens (the projection's output
// rounded to the activation dtype before it is added); under shared_gate the projection (kept)
// is scaled per token by sigmoid(h . w_gate) (the logit kept) as it is added.
void MoeLayer::Shared(StepContext& step, const float* h, float* out, const MoeSaved& s,
                      const MoeWeights& w) const {
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const ActivationStore store(d_.act_dtype);
  const int64_t R = d_.R(), C = d_.C, S = d_.S;
  float* fc = store.Working(step, s.shared_fc_out);
  be.LinearForward(fc, h, w.shared_fc_w, w.shared_fc_b, R, C, d_.shared_fc_dim());
  store.Commit(step, s.shared_fc_out, fc);
  const float* act = Activation(step, s.shared_act_out, fc, R, S);
  Tensor proj = d_.shared_gate ? s.shared_proj : ws.Allocate(DType::kF32, {R, C});
  be.LinearForward(proj.f32(), act, w.shared_out_w, w.shared_out_b, R, S, C);
  if (d_.act_dtype != DType::kF32) be.Round(d_.act_dtype, proj.f32(), R * C);
  if (!d_.shared_gate) {
    be.AddInPlace(out, proj.f32(), R * C);
    return;
  }
  be.LinearForward(s.shared_logit.f32(), h, w.shared_gate, nullptr, R, C, 1);
  be.GatedAddForward(out, proj.f32(), s.shared_logit.f32(), R, C);
}

void MoeLayer::Forward(StepContext& step, Arena& kept, Arena& dropped, const float* h,
                       float* out, MoeSaved& s, const MoeWeights& w, MoeLayerState& state,
                       bool record) const {
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const ActivationStore store(d_.act_dtype);
  const int64_t R = d_.R(), E = d_.E(), k = d_.k(), C = d_.C, M = d_.max_rows();
  s.logits = kept.Allocate(DType::kF32, {R, E});
  s.scores = kept.Allocate(DType::kF32, {R, E});
  s.expert = kept.Allocate(DType::kI32, {R, k});
  s.gate = kept.Allocate(DType::kF32, {R, k});
  s.row_of = kept.Allocate(DType::kI32, {R, k});
  s.token_of_row = kept.Allocate(DType::kI32, {M});
  const int64_t Mx = d_.max_expert_rows();
  s.x_rows = store.Keep(step, kept, {Mx, C});
  s.fc_out = store.Keep(step, kept, {Mx, d_.fc_dim()});
  s.act_out = store.Keep(step, dropped, {Mx, d_.Fe});
  s.y = store.Keep(step, kept, {M, C});
  if (d_.S > 0) {
    s.shared_fc_out = store.Keep(step, kept, {R, d_.shared_fc_dim()});
    s.shared_act_out = store.Keep(step, dropped, {R, d_.S});
    if (d_.shared_gate) {
      s.shared_logit = kept.Allocate(DType::kF32, {R, 1});
      s.shared_proj = kept.Allocate(DType::kF32, {R, C});
    }
  }
  const size_t mark = ws.Mark();

  // logits = h @ router^T (fp32); scores, experts and gates; the plan.
  be.Gemm(false, true, R, E, C, 1.0f, h, C, w.router, C, 0.0f, s.logits.f32(), E);
  be.MoeRoute(d_.spec, s.logits.f32(), state.bias.data(),
              s.scores.f32(), s.expert.i32(), s.gate.f32(), R);
  s.offset.assign(static_cast<size_t>(E + 1), 0);
  std::vector<int64_t> counts(static_cast<size_t>(E), 0);
  const int64_t rows = be.MoePlan(s.expert.i32(), s.scores.f32(), R, k, E, d_.capacity(),
                                  s.row_of.i32(), s.token_of_row.i32(), s.offset.data(),
                                  counts.data());
  if (record) {
    for (int64_t e = 0; e < E; ++e) state.counts[static_cast<size_t>(e)] += counts[static_cast<size_t>(e)];
    state.assigned += R * k;
    state.kept += rows;
    ++state.calls;
  }

  // x = h in expert order; the experts (on their ranks under ep); out = sum_j gate_j *
  // y[row(t, j)]
  float* x = d_.ep == nullptr ? store.Working(step, s.x_rows)
                              : ws.Allocate(DType::kF32, {M, C}).f32();
  be.MoeGather(x, h, s.token_of_row.i32(), rows, C);
  float* y = store.Working(step, s.y);
  RunExperts(step, s, w, x, y);
  store.CommitRows(step, s.y, y, rows);
  be.MoeCombine(out, y, s.gate.f32(), s.row_of.i32(), R, k, C);
  // out += shared(h)
  if (d_.S > 0) Shared(step, h, out, s, w);
  AuxLosses(step, s, state, record);
  ws.Release(mark);
}

// The auxiliary losses' values (into the state) and their unscaled gradient coefficients
// (into s) for this micro-batch (moe.h has the formulas).
void MoeLayer::AuxLosses(StepContext& step, MoeSaved& s, MoeLayerState& state,
                         bool record) const {
  s.switch_coef.clear();
  s.seq_coef.clear();
  s.z_scale = 0.0f;
  const int64_t R = d_.R(), E = d_.E(), k = d_.k(), T = d_.T;
  if (s.logits.data() == nullptr) return;  // a measuring step: no values
  Backend& be = *step.backend;
  const float* logits = s.logits.f32();
  const float* scores = s.scores.f32();
  const int32_t* expert = s.expert.i32();
  double value = 0.0;
  if (d_.aux_loss > 0 || d_.z_loss > 0) {
    std::vector<double> probs(static_cast<size_t>(E), 0.0), counts(static_cast<size_t>(E), 0.0);
    double z = 0.0;
    be.MoeBalanceStats(d_.spec, logits, scores, expert, R, probs.data(), counts.data(),
                       d_.z_loss > 0 ? &z : nullptr);
    if (d_.aux_loss > 0) {
      s.switch_coef.resize(static_cast<size_t>(E));
      const double scale = d_.aux_loss * static_cast<double>(E) / (double(R) * double(R) * double(k));
      for (int64_t e = 0; e < E; ++e) {
        const double coef = scale * counts[static_cast<size_t>(e)];
        s.switch_coef[static_cast<size_t>(e)] = static_cast<float>(coef);
        value += coef * probs[static_cast<size_t>(e)];
      }
    }
    if (d_.z_loss > 0) {
      value += d_.z_loss * z / static_cast<double>(R);
      s.z_scale = static_cast<float>(2.0 * d_.z_loss / static_cast<double>(R));
    }
  }
  if (d_.seq_aux_loss > 0) {
    s.seq_coef.assign(static_cast<size_t>(d_.B * E), 0.0f);
    std::vector<double> probs(static_cast<size_t>(E)), counts(static_cast<size_t>(E));
    for (int64_t b = 0; b < d_.B; ++b) {
      std::fill(probs.begin(), probs.end(), 0.0);
      std::fill(counts.begin(), counts.end(), 0.0);
      be.MoeBalanceStats(d_.spec, logits + b * T * E, scores + b * T * E, expert + b * T * k, T,
                         probs.data(), counts.data(), nullptr);
      for (int64_t e = 0; e < E; ++e) {
        const double f = static_cast<double>(E) / (double(k) * double(T)) * counts[static_cast<size_t>(e)];
        const double P = probs[static_cast<size_t>(e)] / static_cast<double>(T);
        value += d_.seq_aux_loss / static_cast<double>(d_.B) * f * P;
        s.seq_coef[static_cast<size_t>(b * E + e)] =
            static_cast<float>(d_.seq_aux_loss / static_cast<double>(d_.B) * f / static_cast<double>(T));
      }
    }
  }
  state.last_aux_loss = value;
  if (record) state.aux_loss += value;
}

void MoeLayer::RecomputeActivations(StepContext& step, const MoeSaved& s, Tensor& act_out,
                                    Tensor& shared_act_out) const {
  const ActivationStore store(d_.act_dtype);
  Arena& ws = *step.workspace;
  const int64_t rows = s.segment.empty() ? 0 : s.segment.back();
  act_out = ws.Allocate(DType::kF32, {d_.max_expert_rows(), d_.Fe});
  Activation(step, act_out, store.ReadRows(step, s.fc_out, rows), rows, d_.Fe);
  if (d_.S > 0) {
    shared_act_out = ws.Allocate(DType::kF32, {d_.R(), d_.S});
    Activation(step, shared_act_out, store.Read(step, s.shared_fc_out), d_.R(), d_.S);
  }
}

void MoeLayer::Backward(StepContext& step, const float* h, const float* d_out, float* d_h,
                        const MoeSaved& s, const Tensor& act_out, const Tensor& shared_act_out,
                        const MoeWeights& w, const MoeGrads& g) const {
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  const ActivationStore store(d_.act_dtype);
  const int64_t R = d_.R(), E = d_.E(), k = d_.k(), C = d_.C, M = d_.max_rows();
  const int64_t rows = s.offset.empty() ? 0 : s.offset.back();

  // out += shared(h): d_h is written here (zero without shared experts).
  if (d_.S > 0) {
    const int64_t S = d_.S;
    Tensor d_act = ws.Allocate(DType::kF32, {R, S});
    Tensor d_fc = d_.gpt2 ? d_act : ws.Allocate(DType::kF32, {R, 2 * S});
    // Gated: out += sigmoid(logit) * proj; d_proj = sigmoid(logit) * d_out.
    Tensor d_proj = d_.shared_gate ? ws.Allocate(DType::kF32, {R, C}) : Tensor();
    Tensor d_logit = d_.shared_gate ? ws.Allocate(DType::kF32, {R, 1}) : Tensor();
    if (d_.shared_gate) {
      be.GatedAddBackward(d_proj.f32(), d_logit.f32(), d_out, s.shared_proj.f32(),
                          s.shared_logit.f32(), R, C);
    }
    const float* d_shared = d_.shared_gate ? d_proj.f32() : d_out;
    be.LinearBackward(d_act.f32(), g.shared_out_w, g.shared_out_b, d_shared,
                      store.Read(step, shared_act_out), w.shared_out_w, R, S, C);
    const float* fc = store.Read(step, s.shared_fc_out);
    if (d_.gpt2) {
      be.GeluBackward(d_fc.f32(), d_act.f32(), fc, R * S);
    } else {
      be.SwigluBackward(d_fc.f32(), d_act.f32(), fc, R, S);
    }
    be.LinearBackward(d_h, g.shared_fc_w, g.shared_fc_b, d_fc.f32(), h, w.shared_fc_w, R, C,
                      d_.shared_fc_dim());
    if (d_.shared_gate) {  // logit = h . w_gate
      Tensor d_h_gate = ws.Allocate(DType::kF32, {R, C});
      be.LinearBackward(d_h_gate.f32(), g.shared_gate, nullptr, d_logit.f32(), h, w.shared_gate,
                        R, C, 1);
      be.AddInPlace(d_h, d_h_gate.f32(), R * C);
    }
  } else {
    be.Zero(d_h, static_cast<size_t>(R * C) * sizeof(float));
  }

  // out = sum_j gate_j * y[row(t, j)]
  Tensor d_y = ws.Allocate(DType::kF32, {M, C});
  Tensor d_gate = ws.Allocate(DType::kF32, {R, k});
  be.MoeCombineBackward(d_y.f32(), d_gate.f32(), d_out, store.ReadRows(step, s.y, rows),
                        s.gate.f32(), s.row_of.i32(), R, k, C);
  Tensor d_x = ws.Allocate(DType::kF32, {M, C});
  ExpertsBackward(step, s, act_out, w, g, d_y.f32(), d_x.f32());
  // x = h[token_of_row]
  be.MoeGatherBackward(d_h, d_x.f32(), s.row_of.i32(), R, k, C);

  // gates and scores from logits, plus the auxiliary losses
  Tensor d_logits = ws.Allocate(DType::kF32, {R, E});
  be.MoeRouteBackward(d_.spec, s.scores.f32(), s.expert.i32(), d_gate.f32(), d_logits.f32(), R);
  const float scale = step.loss_grad_scale;
  std::vector<float> switch_coef(s.switch_coef), seq_coef(s.seq_coef);
  for (float& c : switch_coef) c *= scale;
  for (float& c : seq_coef) c *= scale;
  if (!switch_coef.empty() || !seq_coef.empty() || s.z_scale != 0.0f) {
    MoeAuxGrad aux;
    aux.switch_coef = switch_coef.empty() ? nullptr : switch_coef.data();
    aux.seq_coef = seq_coef.empty() ? nullptr : seq_coef.data();
    aux.T = d_.T;
    aux.z_scale = s.z_scale * scale;
    be.MoeAuxBackward(d_.spec, s.logits.f32(), s.scores.f32(), aux, d_logits.f32(), R);
  }
  // logits = h @ router^T
  be.Gemm(false, false, R, C, E, 1.0f, d_logits.f32(), E, w.router, C, 1.0f, d_h, C);
  if (g.router != nullptr) {  // null: frozen (finetune.lora)
    be.Gemm(true, false, E, C, R, 1.0f, d_logits.f32(), E, h, C, 1.0f, g.router, C);
  }
  ws.Release(mark);
}

// The experts' backward on their rows (dispatched there and back under ep), dual of
// RunExperts: d_x (this rank's rows) from d_y (this rank's rows); weight gradients accumulate
// one GEMM per local expert.
void MoeLayer::ExpertsBackward(StepContext& step, const MoeSaved& s, const Tensor& act_out,
                               const MoeWeights& w, const MoeGrads& g, const float* d_y,
                               float* d_x) const {
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const ActivationStore store(d_.act_dtype);
  const int64_t C = d_.C, Fe = d_.Fe, FC = d_.fc_dim();
  const int64_t Mx = d_.max_expert_rows();
  const int64_t rows = s.segment.empty() ? 0 : s.segment.back();
  const float* dy = d_y;
  float* dx = d_x;
  float* arrived = nullptr;  // under ep: rows in the order they arrive (by source)
  if (d_.ep != nullptr) {
    arrived = ws.Allocate(DType::kF32, {Mx, C}).f32();
    d_.ep->ExchangeRows(d_y, s.rows_to, arrived, s.rows_from, C);
    float* by_expert = ws.Allocate(DType::kF32, {Mx, C}).f32();
    be.MoeGather(by_expert, arrived, s.by_expert.data(), rows, C);
    dy = by_expert;
    dx = ws.Allocate(DType::kF32, {Mx, C}).f32();
  }
  // y_e = out_e(act_e)
  Tensor d_act = ws.Allocate(DType::kF32, {Mx, Fe});
  const float* act = store.ReadRows(step, act_out, rows);
  ForEachExpertRows(s.segment, [&](int64_t e, int64_t b, int64_t n) {
    be.LinearBackward(d_act.f32() + b * Fe, ExpertSlice(g.out_w, e, C * Fe),
                      ExpertSlice(g.out_b, e, C), dy + b * C, act + b * Fe,
                      ExpertSlice(w.out_w, e, C * Fe), n, Fe, C);
  });
  // act_e = act(fc_out_e)
  Tensor d_fc = d_.gpt2 ? d_act : ws.Allocate(DType::kF32, {Mx, FC});
  const float* fc = store.ReadRows(step, s.fc_out, rows);
  if (d_.gpt2) {
    be.GeluBackward(d_fc.f32(), d_act.f32(), fc, rows * Fe);
  } else {
    be.SwigluBackward(d_fc.f32(), d_act.f32(), fc, rows, Fe);
  }
  // fc_out_e = fc_e(x_e)
  const float* x = store.ReadRows(step, s.x_rows, rows);
  ForEachExpertRows(s.segment, [&](int64_t e, int64_t b, int64_t n) {
    be.LinearBackward(dx + b * C, ExpertSlice(g.fc_w, e, FC * C), ExpertSlice(g.fc_b, e, Fe),
                      d_fc.f32() + b * FC, x + b * C, ExpertSlice(w.fc_w, e, FC * C), n, C, FC);
  });
  if (d_.ep != nullptr) {
    be.MoeGather(arrived, dx, s.by_source.data(), rows, C);
    d_.ep->ExchangeRows(arrived, s.rows_from, d_x, s.rows_to, C);
  }
}

}  // namespace tessera
