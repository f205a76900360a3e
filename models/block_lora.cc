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
// these are the only parameter gradients of the projection.
#include "models/block.h"

namespace tessera {

Tensor DecoderBlock::LoraAlloc(Arena& a, const LoraSiteWeights& lora) const {
  if (lora.n == 0) return Tensor();
  return a.Allocate(DType::kF32, {d_.N(), lora.n * d_.lora_rank});
}

void DecoderBlock::LoraColumnForward(Backend& be, float* y, int64_t ldy, const float* x,
                                     int64_t K, const LoraSiteWeights& lora, float* u) const {
  const int64_t N = d_.N(), r = d_.lora_rank, ld_u = lora.n * r;
  for (int j = 0; j < lora.n; ++j) {
    float* uj = u == nullptr ? nullptr : u + j * r;
    be.Gemm(false, true, N, r, K, 1.0f, x, K, lora.A[j], K, 0.0f, uj, ld_u);
    float* yj = y == nullptr ? nullptr : y + lora.row0[j];
    be.Gemm(false, true, N, lora.rows[j], r, d_.lora_scale, uj, ld_u, lora.B[j], r, 1.0f, yj, ldy);
  }
}

void DecoderBlock::LoraColumnBackward(StepContext& step, float* d_x, const float* dy,
                                      int64_t ldy, const float* x, int64_t K,
                                      const LoraSiteWeights& lora, const LoraSiteGrads& lg,
                                      const float* u) const {
  if (lora.n == 0) return;
  Backend& be = *step.backend;
  Arena& ws = *step.workspace;
  const size_t mark = ws.Mark();
  const int64_t N = d_.N(), r = d_.lora_rank, ld_u = lora.n * r;
  const float s = d_.lora_scale;
  Tensor du = ws.Allocate(DType::kF32, {N, r});
  for (int j = 0; j < lora.n; ++j) {
    const float* dyj = dy == nullptr ? nullptr : dy + lora.row0[j];
    const float* uj = u == nullptr ? nullptr : u + j * r;
    const int64_t rows = lora.rows[j];
    be.Gemm(true, false, rows, r, N, s, dyj, ldy, uj, ld_u, 1.0f, lg.B[j], r);
    be.Gemm(false, false, N, r, rows, s, dyj, ldy, lora.B[j], r, 0.0f, du.f32(), r);
    be.Gemm(true, false, r, K, N, 1.0f, du.f32(), r, x, K, 1.0f, lg.A[j], K);
    be.Gemm(false, false, N, K, r, 1.0f, du.f32(), r, lora.A[j], K, 1.0f, d_x, K);
  }
  ws.Release(mark);
}

void DecoderBlock::LoraRowInput(Backend& be, float* u, const float* x, int64_t K,
                                const LoraSiteWeights& lora) const {
  if (lora.n == 0) return;
  const int64_t N = d_.N(), r = d_.lora_rank;
  be.Gemm(false, true, N, r, K, 1.0f, x, K, lora.A[0], K, 0.0f, u, r);
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

void DecoderBlock::LoraRowBackward(StepContext& step, float* d_x, const float* d_full,
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
  be.Gemm(true, false, r, K, N, 1.0f, du.f32(), r, x, K, 1.0f, lg.A[0], K);
  be.Gemm(false, false, N, K, r, 1.0f, du.f32(), r, lora.A[0], K, 1.0f, d_x, K);
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
