// models/block.cc — forward, backward and recomputation of one decoder block (block.h).
//
// Every kernel call is guarded by arenas.live(): a measuring step runs the same allocation
// sequence with null tensors and no arithmetic. Backward code quotes the forward line it
// differentiates.
#include "models/block.h"

#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/ops.h"

namespace tessera {
namespace {

Tensor Alloc(Arena& a, Shape s) { return a.Allocate(DType::kF32, s); }

template <typename T>
T* At(T* base, int64_t offset) {
  return base == nullptr || offset < 0 ? nullptr : base + offset;
}

}  // namespace

BlockWeights BlockLayout::Weights(const float* base) const {
  BlockWeights w;
  w.norm1_w = At(base, norm1_w);
  w.norm1_b = At(base, norm1_b);
  w.qkv_w = At(base, qkv_w);
  w.qkv_b = At(base, qkv_b);
  w.proj_w = At(base, proj_w);
  w.proj_b = At(base, proj_b);
  w.norm2_w = At(base, norm2_w);
  w.norm2_b = At(base, norm2_b);
  w.fc_w = At(base, fc_w);
  w.fc_b = At(base, fc_b);
  w.out_w = At(base, out_w);
  w.out_b = At(base, out_b);
  return w;
}

BlockGrads BlockLayout::Grads(float* base) const {
  BlockGrads g;
  g.norm1_w = At(base, norm1_w);
  g.norm1_b = At(base, norm1_b);
  g.qkv_w = At(base, qkv_w);
  g.qkv_b = At(base, qkv_b);
  g.proj_w = At(base, proj_w);
  g.proj_b = At(base, proj_b);
  g.norm2_w = At(base, norm2_w);
  g.norm2_b = At(base, norm2_b);
  g.fc_w = At(base, fc_w);
  g.fc_b = At(base, fc_b);
  g.out_w = At(base, out_w);
  g.out_b = At(base, out_b);
  return g;
}

void DecoderBlock::Round(float* x, int64_t n) const {
  if (d_.act_dtype != DType::kF32) cpu::RoundTo(d_.act_dtype, x, n);
}

void DecoderBlock::Round(const Tensor& t) const { Round(t.f32(), t.numel()); }

void DecoderBlock::AllocNorm(Arena& a, Tensor& out, Tensor& mean, Tensor& rstd) const {
  out = Alloc(a, {d_.N(), d_.C});
  mean = d_.gpt2() ? Alloc(a, {d_.N()}) : Tensor();
  rstd = Alloc(a, {d_.N()});
}

void DecoderBlock::NormForward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                               const float* x, const float* w, const float* b) const {
  if (d_.gpt2()) {
    cpu::LayerNormForward(out.f32(), mean.f32(), rstd.f32(), x, w, b, d_.N(), d_.C, d_.eps);
  } else {
    cpu::RmsNormForward(out.f32(), rstd.f32(), x, w, d_.N(), d_.C, d_.eps);
  }
}

void DecoderBlock::NormBackward(float* d_x, float* d_w, float* d_b, const float* d_out,
                                const float* x, const float* w, const Tensor& mean,
                                const Tensor& rstd) const {
  if (d_.gpt2()) {
    cpu::LayerNormBackward(d_x, d_w, d_b, d_out, x, w, mean.f32(), rstd.f32(), d_.N(), d_.C);
  } else {
    cpu::RmsNormBackward(d_x, d_w, d_out, x, w, rstd.f32(), d_.N(), d_.C);
  }
}

void DecoderBlock::Activation(const Tensor& act_out, const Tensor& fc_out) const {
  if (d_.gpt2()) {
    cpu::GeluForward(act_out.f32(), fc_out.f32(), d_.N() * d_.F);
  } else {
    cpu::SwigluForward(act_out.f32(), fc_out.f32(), d_.N(), d_.F);
  }
  Round(act_out);
}

void DecoderBlock::AttentionCore(const Tensor& att_out, const Tensor& att,
                                 const Tensor& qkv) const {
  cpu::AttentionForward(att_out.f32(), att.f32(), qkv.f32(), d_.B, d_.T, d_.NH, d_.NKV, d_.HS);
  Round(att);
  Round(att_out);
}

void DecoderBlock::Compute(StepArenas& arenas, Arena& kept, Arena& dropped, const float* x,
                           float* out, BlockSaved& s, const BlockWeights& w) const {
  const bool live = arenas.live();
  const int64_t N = d_.N(), C = d_.C, QKV = d_.qkv_dim(), A = d_.attn_dim();
  AttentionSaved& at = s.attn;
  MlpSaved& m = s.mlp;

  // ---- attention sublayer: mid = x + proj(attn(qkv(norm1(x))))
  AllocNorm(kept, at.norm_out, at.norm_mean, at.norm_rstd);
  at.qkv = Alloc(kept, {N, QKV});
  at.att = Alloc(dropped, {d_.B, d_.NH, d_.T, d_.T});
  at.att_out = Alloc(dropped, {N, A});
  s.mid = Alloc(kept, {N, C});
  if (live) {
    NormForward(at.norm_out, at.norm_mean, at.norm_rstd, x, w.norm1_w, w.norm1_b);
    Round(at.norm_out);
    cpu::LinearForward(at.qkv.f32(), at.norm_out.f32(), w.qkv_w, w.qkv_b, N, C, QKV);
    if (!d_.gpt2()) {
      cpu::RopeForward(at.qkv.f32(), d_.B, d_.T, d_.NH, d_.NKV, d_.HS, d_.rope_theta, 0);
    }
    Round(at.qkv);
    AttentionCore(at.att_out, at.att, at.qkv);
    cpu::LinearForward(s.mid.f32(), at.att_out.f32(), w.proj_w, w.proj_b, N, A, C);
    Round(s.mid);  // the projection's output
    cpu::AddInPlace(s.mid.f32(), x, N * C);
    Round(s.mid);  // the residual sum
  }

  // ---- MLP sublayer: out = mid + out_proj(act(fc(norm2(mid))))
  AllocNorm(kept, m.norm_out, m.norm_mean, m.norm_rstd);
  m.fc_out = Alloc(kept, {N, d_.fc_dim()});
  m.act_out = Alloc(dropped, {N, d_.F});
  if (live) {
    NormForward(m.norm_out, m.norm_mean, m.norm_rstd, s.mid.f32(), w.norm2_w, w.norm2_b);
    Round(m.norm_out);
    cpu::LinearForward(m.fc_out.f32(), m.norm_out.f32(), w.fc_w, w.fc_b, N, C, d_.fc_dim());
    Round(m.fc_out);
    Activation(m.act_out, m.fc_out);
    if (out != nullptr) {
      cpu::LinearForward(out, m.act_out.f32(), w.out_w, w.out_b, N, d_.F, C);
      Round(out, N * C);  // the projection's output
      cpu::AddInPlace(out, s.mid.f32(), N * C);
      Round(out, N * C);  // the block's output
    }
  }
}

void DecoderBlock::Forward(StepArenas& arenas, RecomputePolicy keep, const float* x, float* out,
                           BlockSaved& saved, const BlockWeights& w) const {
  Arena& act = *arenas.activations;
  Arena& ws = *arenas.workspace;
  const size_t mark = ws.Mark();
  Arena& kept = keep == RecomputePolicy::kFull ? ws : act;
  Arena& dropped = keep == RecomputePolicy::kNone ? act : ws;
  Compute(arenas, kept, dropped, x, out, saved, w);
  ws.Release(mark);
  if (keep == RecomputePolicy::kFull) saved = BlockSaved();  // nothing of it survives
}

void DecoderBlock::MlpBackward(StepArenas& arenas, float* d_res, const BlockSaved& s,
                               const Tensor& act_out, const BlockWeights& w,
                               const BlockGrads& g) const {
  Arena& ws = *arenas.workspace;
  const size_t mark = ws.Mark();
  const int64_t N = d_.N(), C = d_.C, F = d_.F, FC = d_.fc_dim();
  const MlpSaved& m = s.mlp;
  // GELU backward may write in place (elementwise), so d_act and d_fc share a buffer there;
  // SwiGLU's input gradient is twice as wide as its output gradient.
  Tensor d_act = Alloc(ws, {N, F});
  Tensor d_fc = d_.gpt2() ? d_act : Alloc(ws, {N, FC});
  Tensor d_norm = Alloc(ws, {N, C});
  Tensor d_mid = Alloc(ws, {N, C});
  if (arenas.live()) {
    // out = mid + out_proj(act_out): the residual passes d_res through unchanged.
    cpu::LinearBackward(d_act.f32(), g.out_w, g.out_b, d_res, act_out.f32(), w.out_w, N, F, C);
    // act_out = act(fc_out)
    if (d_.gpt2()) {
      cpu::GeluBackward(d_fc.f32(), d_act.f32(), m.fc_out.f32(), N * F);
    } else {
      cpu::SwigluBackward(d_fc.f32(), d_act.f32(), m.fc_out.f32(), N, F);
    }
    // fc_out = fc(norm_out)
    cpu::LinearBackward(d_norm.f32(), g.fc_w, g.fc_b, d_fc.f32(), m.norm_out.f32(), w.fc_w, N,
                        C, FC);
    // norm_out = norm2(mid); d_res becomes dL/d(mid)
    NormBackward(d_mid.f32(), g.norm2_w, g.norm2_b, d_norm.f32(), s.mid.f32(), w.norm2_w,
                 m.norm_mean, m.norm_rstd);
    cpu::AddInPlace(d_res, d_mid.f32(), N * C);
  }
  ws.Release(mark);
}

void DecoderBlock::AttentionBackward(StepArenas& arenas, float* d_res, const float* x,
                                     const BlockSaved& s, const Tensor& att,
                                     const Tensor& att_out, const BlockWeights& w,
                                     const BlockGrads& g) const {
  Arena& ws = *arenas.workspace;
  const size_t mark = ws.Mark();
  const int64_t N = d_.N(), C = d_.C, QKV = d_.qkv_dim(), A = d_.attn_dim();
  const AttentionSaved& at = s.attn;
  Tensor d_att_out = Alloc(ws, {N, A});
  Tensor d_qkv = Alloc(ws, {N, QKV});
  Tensor scratch = Alloc(ws, {d_.B, d_.NH, d_.T, d_.T});
  Tensor d_norm = Alloc(ws, {N, C});
  Tensor d_x = Alloc(ws, {N, C});
  if (arenas.live()) {
    // mid = x + proj(att_out)
    cpu::LinearBackward(d_att_out.f32(), g.proj_w, g.proj_b, d_res, att_out.f32(), w.proj_w, N,
                        A, C);
    // att_out = attention(qkv)
    cpu::AttentionBackward(d_qkv.f32(), scratch.f32(), d_att_out.f32(), at.qkv.f32(), att.f32(),
                           d_.B, d_.T, d_.NH, d_.NKV, d_.HS);
    // qkv = rope(qkv): the gradient goes back through the inverse rotation
    if (!d_.gpt2()) {
      cpu::RopeBackward(d_qkv.f32(), d_.B, d_.T, d_.NH, d_.NKV, d_.HS, d_.rope_theta, 0);
    }
    // qkv = qkv_proj(norm_out)
    cpu::LinearBackward(d_norm.f32(), g.qkv_w, g.qkv_b, d_qkv.f32(), at.norm_out.f32(), w.qkv_w,
                        N, C, QKV);
    // norm_out = norm1(x); d_res becomes dL/dx
    NormBackward(d_x.f32(), g.norm1_w, g.norm1_b, d_norm.f32(), x, w.norm1_w, at.norm_mean,
                 at.norm_rstd);
    cpu::AddInPlace(d_res, d_x.f32(), N * C);
  }
  ws.Release(mark);
}

void DecoderBlock::Backward(StepArenas& arenas, RecomputePolicy keep, float* d_res,
                            const float* x, const BlockSaved& saved, const BlockWeights& w,
                            const BlockGrads& g) const {
  Arena& ws = *arenas.workspace;
  const size_t mark = ws.Mark();
  const bool live = arenas.live();
  const BlockSaved* s = &saved;
  BlockSaved recomputed;
  if (keep == RecomputePolicy::kFull) {
    // Rerun the block's forward (all but its output projection) into workspace.
    Compute(arenas, ws, ws, x, nullptr, recomputed, w);
    s = &recomputed;
  }

  // MLP: the activation output is recomputed from the saved pre-activation under selective.
  Tensor act_out = s->mlp.act_out;
  const size_t mlp_mark = ws.Mark();
  if (keep == RecomputePolicy::kSelective) {
    act_out = Alloc(ws, {d_.N(), d_.F});
    if (live) Activation(act_out, s->mlp.fc_out);
  }
  MlpBackward(arenas, d_res, *s, act_out, w, g);
  ws.Release(mlp_mark);

  // Attention: probabilities and output are recomputed from the saved qkv under selective.
  Tensor att = s->attn.att, att_out = s->attn.att_out;
  if (keep == RecomputePolicy::kSelective) {
    att = Alloc(ws, {d_.B, d_.NH, d_.T, d_.T});
    att_out = Alloc(ws, {d_.N(), d_.attn_dim()});
    if (live) AttentionCore(att_out, att, s->attn.qkv);
  }
  AttentionBackward(arenas, d_res, x, *s, att, att_out, w, g);
  if (live) Round(d_res, d_.N() * d_.C);
  ws.Release(mark);
}

}  // namespace tessera
