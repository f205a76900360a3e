// models/block.cc — forward, backward and recomputation of one decoder block (block.h).
//
// Every kernel runs on the step's backend; a measuring step (MeasuringBackend, measuring
// arenas) makes the same calls with null tensors and no arithmetic, so no call is guarded.
// Backward code quotes the forward line it differentiates.
#include "models/block.h"

#include "models/activation_store.h"


namespace tessera {
namespace {

Tensor Alloc(Arena& a, Shape s) { return a.Allocate(DType::kF32, s); }

template <typename T>
T* At(T* base, int64_t offset) {
  return base == nullptr || offset < 0 ? nullptr : base + offset;
}

}  // namespace

BlockWeights BlockLayout::Weights(const float* base, const float* expert_base,
                                  const float* adapter_base) const {
  BlockWeights w;
  for (int site = 0; site < kLoraSites; ++site) {
    const LoraSiteLayout& l = lora[site];
    LoraSiteWeights& v = w.lora[site];
    v.n = l.n;
    for (int j = 0; j < l.n; ++j) {
      v.A[j] = At(adapter_base, l.A[j]);
      v.B[j] = At(adapter_base, l.B[j]);
      v.row0[j] = l.row0[j];
      v.rows[j] = l.rows[j];
    }
  }
  w.norm1_w = At(base, norm1_w);
  w.norm1_b = At(base, norm1_b);
  w.qkv_w = At(base, qkv_w);
  w.qkv_b = At(base, qkv_b);
  w.q_norm_w = At(base, q_norm_w);
  w.k_norm_w = At(base, k_norm_w);
  w.proj_w = At(base, proj_w);
  w.proj_b = At(base, proj_b);
  w.norm2_w = At(base, norm2_w);
  w.norm2_b = At(base, norm2_b);
  w.fc_w = At(base, fc_w);
  w.fc_b = At(base, fc_b);
  w.out_w = At(base, out_w);
  w.out_b = At(base, out_b);
  w.moe.router = At(base, router);
  w.moe.shared_fc_w = At(base, shared_fc_w);
  w.moe.shared_fc_b = At(base, shared_fc_b);
  w.moe.shared_out_w = At(base, shared_out_w);
  w.moe.shared_out_b = At(base, shared_out_b);
  w.moe.shared_gate = At(base, shared_gate);
  w.moe.fc_w = At(expert_base, experts_fc_w);
  w.moe.fc_b = At(expert_base, experts_fc_b);
  w.moe.out_w = At(expert_base, experts_out_w);
  w.moe.out_b = At(expert_base, experts_out_b);
  return w;
}

BlockGrads BlockLayout::Grads(float* base, float* expert_base, float* adapter_base) const {
  BlockGrads g;
  for (int site = 0; site < kLoraSites; ++site) {
    for (int j = 0; j < lora[site].n; ++j) {
      g.lora[site].A[j] = At(adapter_base, lora[site].A[j]);
      g.lora[site].B[j] = At(adapter_base, lora[site].B[j]);
    }
  }
  g.norm1_w = At(base, norm1_w);
  g.norm1_b = At(base, norm1_b);
  g.qkv_w = At(base, qkv_w);
  g.qkv_b = At(base, qkv_b);
  g.q_norm_w = At(base, q_norm_w);
  g.k_norm_w = At(base, k_norm_w);
  g.proj_w = At(base, proj_w);
  g.proj_b = At(base, proj_b);
  g.norm2_w = At(base, norm2_w);
  g.norm2_b = At(base, norm2_b);
  g.fc_w = At(base, fc_w);
  g.fc_b = At(base, fc_b);
  g.out_w = At(base, out_w);
  g.out_b = At(base, out_b);
  g.moe.router = At(base, router);
  g.moe.shared_fc_w = At(base, shared_fc_w);
  g.moe.shared_fc_b = At(base, shared_fc_b);
  g.moe.shared_out_w = At(base, shared_out_w);
  g.moe.shared_out_b = At(base, shared_out_b);
  g.moe.shared_gate = At(base, shared_gate);
  g.moe.fc_w = At(expert_base, experts_fc_w);
  g.moe.fc_b = At(expert_base, experts_fc_b);
  g.moe.out_w = At(expert_base, experts_out_w);
  g.moe.out_b = At(expert_base, experts_out_b);
  return g;
}

void DecoderBlock::Round(Backend& be, float* x, int64_t n) const {
  if (d_.act_dtype != DType::kF32) be.Round(d_.act_dtype, x, n);
}

void DecoderBlock::AllocNorm(const StepContext& step, Arena& a, Tensor& out, Tensor& mean,
                             Tensor& rstd) const {
  out = ActivationStore(d_.act_dtype).Keep(step, a, {d_.rows(), d_.C});
  mean = d_.gpt2() ? Alloc(a, {d_.rows()}) : Tensor();
  rstd = Alloc(a, {d_.rows()});
}

void DecoderBlock::NormForward(Backend& be, float* out, const Tensor& mean, const Tensor& rstd,
                               const float* x, const float* w, const float* b) const {
  if (d_.gpt2()) {
    be.LayerNormForward(out, mean.f32(), rstd.f32(), x, w, b, d_.rows(), d_.C, d_.eps);
  } else {
    be.RmsNormForward(out, rstd.f32(), x, w, d_.rows(), d_.C, d_.eps);
  }
}

void DecoderBlock::NormBackward(Backend& be, float* d_x, float* d_w, float* d_b,
                                const float* d_out, const float* x, const float* w,
                                const Tensor& mean, const Tensor& rstd) const {
  if (d_.gpt2()) {
    be.LayerNormBackward(d_x, d_w, d_b, d_out, x, w, mean.f32(), rstd.f32(), d_.rows(),
                           d_.C);
  } else {
    be.RmsNormBackward(d_x, d_w, d_out, x, w, rstd.f32(), d_.rows(), d_.C);
  }
}

float* DecoderBlock::Activation(const StepContext& step, const Tensor& act_out,
                                const float* fc_out) const {
  const ActivationStore store(d_.act_dtype);
  Backend& be = *step.backend;
  float* out = store.Working(step, act_out);
  if (d_.gpt2()) {
    be.GeluForward(out, fc_out, d_.N() * d_.F);
  } else {
    be.SwigluForward(out, fc_out, d_.N(), d_.F);
  }
  store.Commit(step, act_out, out);
  return out;
}

// What the attention forward saves for backward, in `arena`: the probabilities, stored in the
// activation dtype, or (a device backend) its log-sum-exps, which rounding would corrupt: fp32.
Tensor DecoderBlock::SavedAttention(const StepContext& step, Arena& arena) const {
  if (step.backend->AttentionSavesProbabilities()) {
    return ActivationStore(d_.act_dtype).Keep(step, arena, {d_.B, d_.NH, d_.T, d_.T});
  }
  return Alloc(arena, {step.backend->AttentionSavedFloats(d_.B, d_.NH, d_.T)});
}

float* DecoderBlock::AttentionCore(const StepContext& step, const Tensor& att_out,
                                   const Tensor& att, const float* qkv) const {
  const ActivationStore store(d_.act_dtype);
  // A backend's own statistics are fp32 and never rounded (SavedAttention).
  const bool probabilities = step.backend->AttentionSavesProbabilities();
  float* o = store.Working(step, att_out);
  float* p = probabilities ? store.Working(step, att) : att.f32();
  step.backend->AttentionForward(o, p, qkv, d_.B, d_.T, d_.NH, d_.NKV, d_.HS, d_.window);
  if (probabilities) store.Commit(step, att, p);
  store.Commit(step, att_out, o);
  return o;
}

// The input of a column-parallel layer: the norm output itself, or (sequence parallel) its
// rows gathered from every tp rank into a workspace buffer.
const float* DecoderBlock::Gathered(Arena& ws, const float* norm_out) const {
  if (d_.tp == nullptr || !d_.tp->sequence_parallel()) return norm_out;
  Tensor full = Alloc(ws, {d_.N(), d_.C});
  return d_.tp->EnterForward(norm_out, full.f32(), d_.N(), d_.C);
}

// out(rows, C) = linear(inp(N, K)) + b: one GEMM with the bias fused; under tp the partial
// products of this rank's K columns are summed over tp (Exit region) before the bias is added.
void DecoderBlock::RowParallel(StepContext& step, float* out, const float* inp, const float* w,
                               const float* b, int64_t K, int lora_site,
                               const LoraSiteWeights& lora, float* u) const {
  Backend& be = *step.backend;
  const int64_t N = d_.N(), C = d_.C;
  LoraRowInput(step, lora_site, u, inp, K, lora);
  if (d_.tp == nullptr) {
    be.LinearForward(out, inp, w, b, N, K, C);
    LoraRowForward(be, out, u, lora);
    return;
  }
  const bool sp = d_.tp->sequence_parallel();
  Tensor partial = sp ? Alloc(*step.workspace, {N, C}) : Tensor();
  float* p = sp ? partial.f32() : out;  // without SP the output holds all N rows
  be.LinearForward(p, inp, w, nullptr, N, K, C);
  LoraRowForward(be, p, u, lora);
  d_.tp->ExitForward(p, out, N, C);
  if (b != nullptr) be.AddBias(out, b, d_.rows(), C);
}

void DecoderBlock::Compute(StepContext& step, Arena& kept, Arena& dropped, const Tensor& x_in,
                           const Tensor* out, BlockSaved& s, const BlockWeights& w,
                           MoeLayerState* moe, bool record_moe) const {
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const ActivationStore store(d_.act_dtype);
  const int64_t N = d_.N(), R = d_.rows(), C = d_.C, QKV = d_.qkv_dim(), A = d_.attn_dim();
  AttentionSaved& at = s.attn;
  MlpSaved& m = s.mlp;
  const float* x = store.Read(step, x_in);

  // ---- attention sublayer: mid = x + proj(attn(qkv(norm1(x))))
  AllocNorm(step, kept, at.norm_out, at.norm_mean, at.norm_rstd);
  at.qkv = store.Keep(step, kept, {N, QKV});
  if (d_.qk_norm) {
    at.qk_in = Alloc(kept, {N, d_.NH + d_.NKV, d_.HS});
    at.qk_rstd = Alloc(kept, {N * (d_.NH + d_.NKV)});
  }
  at.lora_qkv = LoraAlloc(kept, w.lora[0]);
  at.lora_proj = LoraAlloc(kept, w.lora[1]);
  at.att = SavedAttention(step, dropped);
  at.att_out = store.Keep(step, dropped, {N, A});
  s.mid = store.Keep(step, kept, {R, C});
  float* mid = store.Working(step, s.mid);  // the MLP's input: lives to the end
  const size_t attention_mark = ws.Mark();  // the attention's fp32 copies end with it
  float* norm1 = store.Working(step, at.norm_out);
  NormForward(be, norm1, at.norm_mean, at.norm_rstd, x, w.norm1_w, w.norm1_b);
  store.Commit(step, at.norm_out, norm1);
  const float* qkv_in = Gathered(ws, norm1);
  float* qkv = store.Working(step, at.qkv);
  be.LinearForward(qkv, qkv_in, w.qkv_w, w.qkv_b, N, C, QKV);
  LoraColumnForward(step, 0, qkv, QKV, qkv_in, C, w.lora[0], at.lora_qkv.f32());
  if (d_.qk_norm) {
    be.HeadRmsNormForward(qkv, at.qk_in.f32(), at.qk_rstd.f32(), w.q_norm_w, w.k_norm_w, N, d_.NH,
                          d_.NKV, d_.HS, d_.eps);
  }
  if (!d_.gpt2()) be.RopeForward(qkv, d_.B, d_.T, d_.NH, d_.NKV, d_.HS, d_.rope, 0);
  store.Commit(step, at.qkv, qkv);
  const float* att_out = AttentionCore(step, at.att_out, at.att, qkv);
  RowParallel(step, mid, att_out, w.proj_w, w.proj_b, A, 1, w.lora[1], at.lora_proj.f32());
  Round(be, mid, R * C);  // the projection's output
  be.AddInPlace(mid, x, R * C);
  store.Commit(step, s.mid, mid);  // the residual sum
  ws.Release(attention_mark);
  if (d_.has_moe) {
    TESSERA_CHECK_MSG(moe != nullptr, "an MoE block runs with its layer's MoeLayerState");
    MoeSublayer(step, kept, dropped, mid, out, s, w, *moe, record_moe);
    return;
  }

  // ---- MLP sublayer: out = mid + out_proj(act(fc(norm2(mid))))
  AllocNorm(step, kept, m.norm_out, m.norm_mean, m.norm_rstd);
  m.fc_out = store.Keep(step, kept, {N, d_.fc_dim()});
  m.act_out = store.Keep(step, dropped, {N, d_.F});
  m.lora_fc = LoraAlloc(kept, w.lora[2]);
  m.lora_out = LoraAlloc(kept, w.lora[3]);
  float* norm2 = store.Working(step, m.norm_out);
  NormForward(be, norm2, m.norm_mean, m.norm_rstd, mid, w.norm2_w, w.norm2_b);
  store.Commit(step, m.norm_out, norm2);
  const float* fc_in = Gathered(ws, norm2);
  float* fc_out = store.Working(step, m.fc_out);
  be.LinearForward(fc_out, fc_in, w.fc_w, w.fc_b, N, C, d_.fc_dim());
  LoraColumnForward(step, 2, fc_out, d_.fc_dim(), fc_in, C, w.lora[2], m.lora_fc.f32());
  store.Commit(step, m.fc_out, fc_out);
  const float* act_out = Activation(step, m.act_out, fc_out);
  if (out == nullptr) {  // full recompute: backward needs the out adapter's x A^T
    LoraRowInput(step, 3, m.lora_out.f32(), act_out, d_.F, w.lora[3]);
  } else {
    float* y = store.Working(step, *out);
    RowParallel(step, y, act_out, w.out_w, w.out_b, d_.F, 3, w.lora[3], m.lora_out.f32());
    Round(be, y, R * C);  // the projection's output
    be.AddInPlace(y, mid, R * C);
    store.Commit(step, *out, y);  // the block's output
  }
}

// ---- MoE sublayer: out = mid + moe(norm2(mid)) (moe.h). The router and experts are whole on
// every tp rank, which all compute it on the same rows: no tp region.
void DecoderBlock::MoeSublayer(StepContext& step, Arena& kept, Arena& dropped, const float* mid,
                               const Tensor* out, BlockSaved& s, const BlockWeights& w,
                               MoeLayerState& moe, bool record) const {
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const ActivationStore store(d_.act_dtype);
  const int64_t R = d_.rows(), C = d_.C;
  MlpSaved& m = s.mlp;
  AllocNorm(step, kept, m.norm_out, m.norm_mean, m.norm_rstd);
  float* norm2 = store.Working(step, m.norm_out);
  NormForward(be, norm2, m.norm_mean, m.norm_rstd, mid, w.norm2_w, w.norm2_b);
  store.Commit(step, m.norm_out, norm2);
  // A full-recompute pass (out null) still routes and runs the experts: backward needs them.
  float* y = out != nullptr ? store.Working(step, *out) : ws.Allocate(DType::kF32, {R, C}).f32();
  moe_.Forward(step, kept, dropped, norm2, y, s.moe, w.moe, moe, record);
  if (out == nullptr) return;
  Round(be, y, R * C);  // the sublayer's output
  be.AddInPlace(y, mid, R * C);
  store.Commit(step, *out, y);  // the block's output
}

void DecoderBlock::Forward(StepContext& step, RecomputePolicy keep, const Tensor& x,
                           const Tensor& out, BlockSaved& saved, const BlockWeights& w,
                           MoeLayerState* moe, bool record_moe) const {
  Arena& act = *step.activations;
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  Arena& kept = keep == RecomputePolicy::kFull ? ws : act;
  Arena& dropped = keep == RecomputePolicy::kNone ? act : ws;
  Compute(step, kept, dropped, x, &out, saved, w, moe, record_moe);
  ws.Release(mark);
  if (keep == RecomputePolicy::kFull) saved = BlockSaved();  // nothing of it survives
}

// Backward of a row-parallel layer out(rows, C) = linear(inp(N, K)) + b: d_inp (N, K) written,
// weight and bias gradients accumulated. Under tp the bias gradient comes from this rank's
// rows of d_out (all of them without SP) and d_out reaches the GEMMs through the Exit
// region's dual (SP: gathered into workspace).
void DecoderBlock::RowParallelBackward(StepContext& step, float* d_inp, float* g_w, float* g_b,
                                       const float* d_out, const float* inp, const float* w,
                                       int64_t K, int lora_site, const LoraSiteWeights& lora,
                                       const LoraSiteGrads& lg, const float* u) const {
  Backend& be = *step.backend;
  const int64_t N = d_.N(), C = d_.C;
  if (d_.tp == nullptr) {
    be.LinearBackward(d_inp, g_w, g_b, d_out, inp, w, N, K, C);
    LoraRowBackward(step, lora_site, d_inp, d_out, inp, K, lora, lg, u);
    return;
  }
  Tensor full = d_.tp->sequence_parallel() ? Alloc(*step.workspace, {N, C}) : Tensor();
  const float* d_full = d_.tp->ExitBackward(d_out, full.f32(), N, C);
  be.LinearBackward(d_inp, g_w, nullptr, d_full, inp, w, N, K, C);
  LoraRowBackward(step, lora_site, d_inp, d_full, inp, K, lora, lg, u);
  if (g_b != nullptr) {
    be.LinearBackward(nullptr, nullptr, g_b, d_out, nullptr, nullptr, d_.rows(), 1, C);
  }
}

// Backward of a column-parallel layer fed through the Enter region: the layer's input
// gradient d_full (N, C) (this rank's partial) becomes d_local (rows, C), summed over tp.
void DecoderBlock::EnterBackward(float* d_full, float* d_local) const {
  if (d_.tp != nullptr) d_.tp->EnterBackward(d_full, d_local, d_.N(), d_.C);
}

void DecoderBlock::MlpBackward(StepContext& step, float* d_res, const BlockSaved& s,
                               const Tensor& act_out, const BlockWeights& w,
                               const BlockGrads& g) const {
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  Backend& be = *step.backend;
  const int64_t N = d_.N(), R = d_.rows(), C = d_.C, F = d_.F, FC = d_.fc_dim();
  const bool sp = d_.tp != nullptr && d_.tp->sequence_parallel();
  const MlpSaved& m = s.mlp;
  // GELU backward may write in place (elementwise), so d_act and d_fc share a buffer there;
  // SwiGLU's input gradient is twice as wide as its output gradient.
  Tensor d_act = Alloc(ws, {N, F});
  Tensor d_fc = d_.gpt2() ? d_act : Alloc(ws, {N, FC});
  Tensor d_norm = Alloc(ws, {N, C});                   // fc's input gradient (partial under tp)
  Tensor d_norm_local = sp ? Alloc(ws, {R, C}) : d_norm;  // summed over tp, this rank's rows
  Tensor d_mid = Alloc(ws, {R, C});
  const ActivationStore store(d_.act_dtype);
  // out = mid + out_proj(act_out): the residual passes d_res through unchanged.
  RowParallelBackward(step, d_act.f32(), g.out_w, g.out_b, d_res, store.Read(step, act_out),
                      w.out_w, F, 3, w.lora[3], g.lora[3], m.lora_out.f32());
  // act_out = act(fc_out)
  const float* fc_out = store.Read(step, m.fc_out);
  if (d_.gpt2()) {
    be.GeluBackward(d_fc.f32(), d_act.f32(), fc_out, N * F);
  } else {
    be.SwigluBackward(d_fc.f32(), d_act.f32(), fc_out, N, F);
  }
  // fc_out = fc(norm_out)
  const float* fc_in = Gathered(ws, store.Read(step, m.norm_out));
  be.LinearBackward(d_norm.f32(), g.fc_w, g.fc_b, d_fc.f32(), fc_in, w.fc_w, N, C, FC);
  LoraColumnBackward(step, 2, d_norm.f32(), d_fc.f32(), FC, fc_in, C, w.lora[2], g.lora[2],
                     m.lora_fc.f32());
  EnterBackward(d_norm.f32(), d_norm_local.f32());
  // norm_out = norm2(mid); d_res becomes dL/d(mid)
  NormBackward(be, d_mid.f32(), g.norm2_w, g.norm2_b, d_norm_local.f32(),
               store.Read(step, s.mid), w.norm2_w, m.norm_mean, m.norm_rstd);
  be.AddInPlace(d_res, d_mid.f32(), R * C);
  ws.Release(mark);
}

void DecoderBlock::AttentionBackward(StepContext& step, float* d_res, const float* x,
                                     const float* qkv, const BlockSaved& s, const Tensor& att,
                                     const Tensor& att_out, const BlockWeights& w,
                                     const BlockGrads& g) const {
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  Backend& be = *step.backend;
  const int64_t N = d_.N(), R = d_.rows(), C = d_.C, QKV = d_.qkv_dim(), A = d_.attn_dim();
  const bool sp = d_.tp != nullptr && d_.tp->sequence_parallel();
  const AttentionSaved& at = s.attn;
  Tensor d_att_out = Alloc(ws, {N, A});
  Tensor d_qkv = Alloc(ws, {N, QKV});
  Tensor scratch = Alloc(ws, {be.AttentionScratchFloats(d_.B, d_.NH, d_.T)});
  Tensor d_norm = Alloc(ws, {N, C});
  Tensor d_norm_local = sp ? Alloc(ws, {R, C}) : d_norm;
  Tensor d_x = Alloc(ws, {R, C});
  const ActivationStore store(d_.act_dtype);
  // mid = x + proj(att_out)
  RowParallelBackward(step, d_att_out.f32(), g.proj_w, g.proj_b, d_res,
                      store.Read(step, att_out), w.proj_w, A, 1, w.lora[1], g.lora[1],
                      at.lora_proj.f32());
  // att_out = attention(qkv)
  const float* saved = be.AttentionSavesProbabilities() ? store.Read(step, att) : att.f32();
  be.AttentionBackward(d_qkv.f32(), scratch.f32(), d_att_out.f32(), qkv, saved,
                       d_.B, d_.T, d_.NH, d_.NKV, d_.HS);
  // qkv = rope(qkv): the gradient goes back through the inverse rotation
  if (!d_.gpt2()) {
    be.RopeBackward(d_qkv.f32(), d_.B, d_.T, d_.NH, d_.NKV, d_.HS, d_.rope, 0);
  }
  // q, k heads = head_norm(q, k heads of qkv_proj's output)
  if (d_.qk_norm) {
    be.HeadRmsNormBackward(d_qkv.f32(), g.q_norm_w, g.k_norm_w, at.qk_in.f32(), w.q_norm_w,
                           w.k_norm_w, at.qk_rstd.f32(), N, d_.NH, d_.NKV, d_.HS);
  }
  // qkv = qkv_proj(norm_out)
  const float* qkv_in = Gathered(ws, store.Read(step, at.norm_out));
  be.LinearBackward(d_norm.f32(), g.qkv_w, g.qkv_b, d_qkv.f32(), qkv_in, w.qkv_w, N, C, QKV);
  LoraColumnBackward(step, 0, d_norm.f32(), d_qkv.f32(), QKV, qkv_in, C, w.lora[0], g.lora[0],
                     at.lora_qkv.f32());
  EnterBackward(d_norm.f32(), d_norm_local.f32());
  // norm_out = norm1(x); d_res becomes dL/dx
  NormBackward(be, d_x.f32(), g.norm1_w, g.norm1_b, d_norm_local.f32(), x, w.norm1_w,
               at.norm_mean, at.norm_rstd);
  be.AddInPlace(d_res, d_x.f32(), R * C);
  ws.Release(mark);
}

// The MoE sublayer's backward: d_res (rows, C) = dL/d(out) on entry, += dL/d(mid) on return.
void DecoderBlock::MoeBackward(StepContext& step, RecomputePolicy keep, float* d_res,
                               const BlockSaved& s, const BlockWeights& w,
                               const BlockGrads& g) const {
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  Backend& be = *step.backend;
  const int64_t R = d_.rows(), C = d_.C;
  const ActivationStore store(d_.act_dtype);
  const MlpSaved& m = s.mlp;
  Tensor act_out = s.moe.act_out, shared_act_out = s.moe.shared_act_out;
  if (keep == RecomputePolicy::kSelective) {
    moe_.RecomputeActivations(step, s.moe, act_out, shared_act_out);
  }
  Tensor d_norm = Alloc(ws, {R, C});
  Tensor d_mid = Alloc(ws, {R, C});
  // out = mid + moe(norm_out): the residual passes d_res through unchanged.
  moe_.Backward(step, store.Read(step, m.norm_out), d_res, d_norm.f32(), s.moe, act_out,
                shared_act_out, w.moe, g.moe);
  // norm_out = norm2(mid); d_res becomes dL/d(mid)
  NormBackward(be, d_mid.f32(), g.norm2_w, g.norm2_b, d_norm.f32(), store.Read(step, s.mid),
               w.norm2_w, m.norm_mean, m.norm_rstd);
  be.AddInPlace(d_res, d_mid.f32(), R * C);
  ws.Release(mark);
}

void DecoderBlock::Backward(StepContext& step, RecomputePolicy keep, float* d_res,
                            const Tensor& x_in, const BlockSaved& saved, const BlockWeights& w,
                            const BlockGrads& g, MoeLayerState* moe) const {
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  Backend& be = *step.backend;
  const BlockSaved* s = &saved;
  BlockSaved recomputed;
  // Sequence parallel: the norm and row-parallel bias gradients of this micro-batch are
  // computed from this rank's rows into `partial` (zeroed), summed over tp once at the end,
  // then accumulated into g.
  BlockGrads gs = g;
  Tensor partial;
  const bool sp = d_.tp != nullptr && d_.tp->sequence_parallel();
  if (sp) {
    partial = Alloc(ws, {6 * d_.C});
    be.Zero(partial.f32(), partial.nbytes());
    float* p = partial.f32();
    float** fields[6] = {&gs.norm1_w, &gs.norm1_b, &gs.proj_b, &gs.norm2_w, &gs.norm2_b, &gs.out_b};
    for (int i = 0; i < 6; ++i) {
      if (*fields[i] != nullptr) *fields[i] = p + i * d_.C;
    }
  }
  // Under tp each rank's q/k norm gradients come from its own heads only: computed into
  // `qk_partial` (zeroed), summed over tp at the end, then accumulated into g.
  const bool qk_partial_sum = d_.qk_norm && d_.tp != nullptr;
  Tensor qk_partial;
  if (qk_partial_sum) {
    qk_partial = Alloc(ws, {2 * d_.HS});
    be.Zero(qk_partial.f32(), qk_partial.nbytes());
    gs.q_norm_w = qk_partial.f32();
    gs.k_norm_w = qk_partial.f32() + d_.HS;
  }
  // Under tp each rank's gradients of the column sites' adapter A come from its own rows of
  // B only: computed into `lora_partial`, summed over tp at the end (block_lora.cc).
  const Tensor lora_partial = LoraPartials(step, w, gs);
  if (keep == RecomputePolicy::kFull) {
    // Rerun the block's forward (all but its output projection) into workspace.
    Compute(step, ws, ws, x_in, nullptr, recomputed, w, moe, /*record_moe=*/false);
    s = &recomputed;
  }

  if (d_.has_moe) {
    MoeBackward(step, keep, d_res, *s, w, gs);
  } else {
    // MLP: the activation output is recomputed from the saved pre-activation under selective.
    Tensor act_out = s->mlp.act_out;
    const size_t mlp_mark = ws.Mark();
    if (keep == RecomputePolicy::kSelective) {
      act_out = Alloc(ws, {d_.N(), d_.F});
      Activation(step, act_out, ActivationStore(d_.act_dtype).Read(step, s->mlp.fc_out));
    }
    MlpBackward(step, d_res, *s, act_out, w, gs);
    ws.Release(mlp_mark);
  }

  // Attention: probabilities and output are recomputed from the saved qkv under selective.
  const ActivationStore store(d_.act_dtype);
  const float* x = store.Read(step, x_in);
  const float* qkv = store.Read(step, s->attn.qkv);
  Tensor att = s->attn.att, att_out = s->attn.att_out;
  if (keep == RecomputePolicy::kSelective) {
    // Recomputed in fp32 whatever the activation dtype: the backend's saved set (the T x T
    // probabilities, or a device's row statistics).
    att = Alloc(ws, {step.backend->AttentionSavedFloats(d_.B, d_.NH, d_.T)});
    att_out = Alloc(ws, {d_.N(), d_.attn_dim()});
    AttentionCore(step, att_out, att, qkv);
  }
  AttentionBackward(step, d_res, x, qkv, *s, att, att_out, w, gs);
  if (sp) {
    d_.tp->SumInPlace(partial.f32(), 6 * d_.C);
    const float* sums[6] = {gs.norm1_w, gs.norm1_b, gs.proj_b, gs.norm2_w, gs.norm2_b, gs.out_b};
    float* dst[6] = {g.norm1_w, g.norm1_b, g.proj_b, g.norm2_w, g.norm2_b, g.out_b};
    for (int i = 0; i < 6; ++i) {
      if (dst[i] != nullptr) be.AddInPlace(dst[i], sums[i], d_.C);
    }
  }
  if (qk_partial_sum) {
    d_.tp->SumInPlace(qk_partial.f32(), 2 * d_.HS);
    if (g.q_norm_w != nullptr) be.AddInPlace(g.q_norm_w, gs.q_norm_w, d_.HS);
    if (g.k_norm_w != nullptr) be.AddInPlace(g.k_norm_w, gs.k_norm_w, d_.HS);
  }
  LoraSumPartials(step, w, lora_partial, g);
  Round(be, d_res, d_.rows() * d_.C);
  ws.Release(mark);
}

}  // namespace tessera
