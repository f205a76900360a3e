// models/block_lora.cc — a block's LoRA adapters (block.h, models/lora.h): every adapter is
// four small GEMMs on the backend, strided into the site's fused output, so the base GEMM and
// its kernels stay as they are.
//   forward    u = x A^T                     (N, r)
//              y[:, rows] += s u B^T
//   backward   dB += s dy[:, rows]^T u       (rows, r)
//              du  = s dy[:, rows] B         (N, r)
//              dA += du^T x                  (r, in)
//              dx += du A
// With a frozen base the base GEMM's weight gradient is skipped (a null gradient view) and
// these are the only parameter gradients of the projection. finetune.lora.dropout replaces x by
// drop(x) (a mask per adapter, redrawn from its key in backward: nothing more is kept).
#include "models/block.h"

#include "runtime/core/random.h"

namespace tessera {

Tensor DecoderBlock::LoraAlloc(Arena& a, const LoraSiteWeights& lora) const {
  if (lora.n == 0) return Tensor();
  return a.Allocate(DType::kF32, {d_.N(), lora.n * d_.lora_rank});
}

// A row-parallel site's input is this rank's columns of the one-rank input: the dropout mask
// is indexed by the one-rank column, so every layout draws the same mask.
static void InputColumns(const BlockDims& d, int site, int64_t K, int64_t* col0, int64_t* ld) {
  const bool row_site = site == 1 || site == 3;
  const int t = d.tp != nullptr && row_site ? d.tp->size() : 1;
  *col0 = t > 1 ? d.tp->rank() * K : 0;
  *ld = K * t;
}

const float* DecoderBlock::LoraInput(StepContext& step, int site, int j, const float* x,
                                     int64_t K) const {
  if (d_.lora_dropout <= 0) return x;
  // Allocated whether or not this pass drops (evaluation does not), so the measuring pass
  // sizes the workspace of a training one.
  Tensor xd = step.workspace->Allocate(DType::kF32, {d_.N(), K});
  if (step.dropout_key == 0) return x;
  int64_t col0 = 0, ld = 0;
  InputColumns(d_, site, K, &col0, &ld);
  step.backend->Dropout(xd.f32(), x, d_.N(), K, col0, ld, d_.lora_dropout,
                        StreamKey(step.dropout_key, static_cast<uint64_t>(site), static_cast<uint64_t>(j)));
  return xd.f32();
}

void DecoderBlock::LoraInputBackward(StepContext& step, int site, int j, float* d_x,
                                     float* dx_drop, int64_t K) const {
  if (step.dropout_key != 0) {
    int64_t col0 = 0, ld = 0;
    InputColumns(d_, site, K, &col0, &ld);
    step.backend->Dropout(dx_drop, dx_drop, d_.N(), K, col0, ld, d_.lora_dropout,
                          StreamKey(step.dropout_key, static_cast<uint64_t>(site), static_cast<uint64_t>(j)));
  }
  step.backend->AddInPlace(d_x, dx_drop, d_.N() * K);
}

void DecoderBlock::LoraColumnForward(StepContext& step, int site, float* y, int64_t ldy,
                                     const float* x, int64_t K, const LoraSiteWeights& lora,
                                     float* u) const {
  Backend& be = *step.backend;
  const int64_t N = d_.N(), r = d_.lora_rank, ld_u = lora.n * r;
  for (int j = 0; j < lora.n; ++j) {
    const size_t mark = step.workspace->Mark();
    const float* xd = LoraInput(step, site, j, x, K);
    float* uj = u == nullptr ? nullptr : u + j * r;
    be.Gemm(false, true, N, r, K, 1.0f, xd, K, lora.A[j], K, 0.0f, uj, ld_u);
    float* yj = y == nullptr ? nullptr : y + lora.row0[j];
    be.Gemm(false, true, N, lora.rows[j], r, d_.lora_scale, uj, ld_u, lora.B[j], r, 1.0f, yj, ldy);
    step.workspace->Release(mark);
  }
}

void DecoderBlock::LoraColumnBackward(StepContext& step, int site, float* d_x, const float* dy,
                                      int64_t ldy, const float* x, int64_t K,
                                      const LoraSiteWeights& lora, const LoraSiteGrads& lg,
                                      const float* u) const {
  if (lora.n == 0) return;
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  const int64_t N = d_.N(), r = d_.lora_rank, ld_u = lora.n * r;
  const float s = d_.lora_scale;
  const bool drop = d_.lora_dropout > 0;
  Tensor du = ws.Allocate(DType::kF32, {N, r});
  Tensor dx_drop = drop ? ws.Allocate(DType::kF32, {N, K}) : Tensor();
  for (int j = 0; j < lora.n; ++j) {
    const size_t inner = ws.Mark();
    const float* dyj = dy == nullptr ? nullptr : dy + lora.row0[j];
    const float* uj = u == nullptr ? nullptr : u + j * r;
    const int64_t rows = lora.rows[j];
    be.Gemm(true, false, rows, r, N, s, dyj, ldy, uj, ld_u, 1.0f, lg.B[j], r);
    be.Gemm(false, false, N, r, rows, s, dyj, ldy, lora.B[j], r, 0.0f, du.f32(), r);
    be.Gemm(true, false, r, K, N, 1.0f, du.f32(), r, LoraInput(step, site, j, x, K), K, 1.0f,
            lg.A[j], K);
    if (drop) {
      be.Gemm(false, false, N, K, r, 1.0f, du.f32(), r, lora.A[j], K, 0.0f, dx_drop.f32(), K);
      LoraInputBackward(step, site, j, d_x, dx_drop.f32(), K);
    } else {
      be.Gemm(false, false, N, K, r, 1.0f, du.f32(), r, lora.A[j], K, 1.0f, d_x, K);
    }
    ws.Release(inner);
  }
  ws.Release(mark);
}

void DecoderBlock::LoraRowInput(StepContext& step, int site, float* u, const float* x, int64_t K,
                                const LoraSiteWeights& lora) const {
  if (lora.n == 0) return;
  const int64_t N = d_.N(), r = d_.lora_rank;
  const size_t mark = step.workspace->Mark();
  const float* xd = LoraInput(step, site, 0, x, K);
  step.backend->Gemm(false, true, N, r, K, 1.0f, xd, K, lora.A[0], K, 0.0f, u, r);
  step.workspace->Release(mark);
  // Each rank's columns give a partial x A^T: the adapter needs the whole one.
  if (d_.tp != nullptr) d_.tp->SumInPlace(u, N * r);
}

void DecoderBlock::LoraRowForward(Backend& be, float* y, const float* u,
                                  const LoraSiteWeights& lora) const {
  // The site's tp sum adds every rank's partial: the adapter's term is added by one.
  if (lora.n == 0 || (d_.tp != nullptr && d_.tp->rank() != 0)) return;
  const int64_t N = d_.N(), C = d_.C, r = d_.lora_rank;
  be.Gemm(false, true, N, C, r, d_.lora_scale, u, r, lora.B[0], r, 1.0f, y, C);
}

void DecoderBlock::LoraRowBackward(StepContext& step, int site, float* d_x, const float* d_full,
                                   const float* x, int64_t K, const LoraSiteWeights& lora,
                                   const LoraSiteGrads& lg, const float* u) const {
  if (lora.n == 0) return;
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  const int64_t N = d_.N(), C = d_.C, r = d_.lora_rank;
  const float s = d_.lora_scale;
  Tensor du = ws.Allocate(DType::kF32, {N, r});
  // d_full and u are whole and equal on every tp rank: so are B's gradient and du; A's
  // gradient and d_x are this rank's columns.
  be.Gemm(true, false, C, r, N, s, d_full, C, u, r, 1.0f, lg.B[0], r);
  be.Gemm(false, false, N, r, C, s, d_full, C, lora.B[0], r, 0.0f, du.f32(), r);
  be.Gemm(true, false, r, K, N, 1.0f, du.f32(), r, LoraInput(step, site, 0, x, K), K, 1.0f,
          lg.A[0], K);
  if (d_.lora_dropout > 0) {
    Tensor dx_drop = ws.Allocate(DType::kF32, {N, K});
    be.Gemm(false, false, N, K, r, 1.0f, du.f32(), r, lora.A[0], K, 0.0f, dx_drop.f32(), K);
    LoraInputBackward(step, site, 0, d_x, dx_drop.f32(), K);
  } else {
    be.Gemm(false, false, N, K, r, 1.0f, du.f32(), r, lora.A[0], K, 1.0f, d_x, K);
  }
  ws.Release(mark);
}

Tensor DecoderBlock::LoraPartials(StepContext& step, const BlockWeights& w,
                                  BlockGrads& gs) const {
  // Column sites (qkv, fc) read the whole input: A (r, C) each.
  const int parts = w.lora[0].n + w.lora[2].n;
  if (d_.tp == nullptr || parts == 0) return Tensor();
  const int64_t r = d_.lora_rank, C = d_.C;
  Tensor partial = step.workspace->Allocate(DType::kF32, {parts * r * C});
  step.backend->Zero(partial.f32(), partial.nbytes());
  float* p = partial.f32();
  for (int site : {0, 2}) {
    for (int j = 0; j < w.lora[site].n; ++j) {
      gs.lora[site].A[j] = p;
      p = p == nullptr ? nullptr : p + r * C;
    }
  }
  return partial;
}

void DecoderBlock::LoraSumPartials(StepContext& step, const BlockWeights& w,
                                   const Tensor& partial, const BlockGrads& g) const {
  if (d_.tp == nullptr || w.lora[0].n + w.lora[2].n == 0) return;
  const int64_t r = d_.lora_rank, C = d_.C;
  d_.tp->SumInPlace(partial.f32(), partial.numel());
  const float* p = partial.f32();
  for (int site : {0, 2}) {
    for (int j = 0; j < w.lora[site].n; ++j) {
      if (g.lora[site].A[j] != nullptr) step.backend->AddInPlace(g.lora[site].A[j], p, r * C);
      p = p == nullptr ? nullptr : p + r * C;
    }
  }
}

}  // namespace tessera
