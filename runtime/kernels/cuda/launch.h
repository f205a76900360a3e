// runtime/kernels/cuda/launch.h — the CUDA kernels of the CUDA backend (cuda_backend.h), one
// host launcher per op, each defined in the .cu file that owns the op.
//
// Contract: that of the op of the same name in runtime/kernels/cpu/ops.h and cpu/moe.h
// (shapes, `+=` into parameter gradients, `=` into input gradients, null gradient pointers
// skip work), on device memory, enqueued on stream `s`; a launcher returns once the work is
// enqueued and never synchronises. Launch errors surface through CUDA_CHECK_LAUNCH
// (cuda_check.h) after each launch.
// Determinism: no atomics anywhere. Every sum runs in an order fixed by the shapes alone
// (a row's sum: a fixed per-thread stride then a fixed shuffle tree; a column's sum over rows:
// fixed row blocks, then the blocks in order), so a rerun gives the same bits. The bits differ
// from the CPU reference's, whose orders differ: tests/kernels/cuda_backend_test.cc states the
// tolerances.
// `scratch` arguments are device memory the backend lends for the call (sizes beside them);
// the kernel may overwrite it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/kernels/moe_routing.h"

namespace tessera::cuda {

// ---- convert.cu: rounding and conversions (bits of runtime/core/dtype.h's scalar ones) ----
void RoundTo(cudaStream_t s, DType dtype, float* x, int64_t n);
void ConvertFromF32(cudaStream_t s, DType dtype, const float* src, void* dst, int64_t n);
void ConvertToF32(cudaStream_t s, DType dtype, const void* src, float* dst, int64_t n);

// ---- reduce.cu: acc(C) += sum over rows of x(N, C), column_sum.cuh's deterministic order -----
constexpr int64_t kColumnSumBlocks = 64;
int64_t ColumnSumScratchFloats(int64_t C);  // kColumnSumBlocks * C
void ColumnSumAccumulate(cudaStream_t s, float* acc, const float* x, int64_t N, int64_t C,
                         float* scratch);

// ---- elementwise.cu ---------------------------------------------------------------------
void GeluForward(cudaStream_t s, float* out, const float* inp, int64_t n);
void GeluBackward(cudaStream_t s, float* d_inp, const float* d_out, const float* inp, int64_t n);
void SwigluForward(cudaStream_t s, float* out, const float* inp, int64_t N, int64_t H);
void SwigluBackward(cudaStream_t s, float* d_inp, const float* d_out, const float* inp, int64_t N,
                    int64_t H);
void Add(cudaStream_t s, float* out, const float* a, const float* b, int64_t n);
void AddInPlace(cudaStream_t s, float* acc, const float* x, int64_t n);
void Dropout(cudaStream_t s, float* out, const float* x, int64_t rows, int64_t cols, int64_t col0,
             int64_t ld_index, float p, uint64_t key);
void AddBias(cudaStream_t s, float* out, const float* bias, int64_t N, int64_t OC);
void AddPositions(cudaStream_t s, float* out, const float* wpe, int64_t row_begin, int64_t rows,
                  int64_t T, int64_t C);

// ---- embedding.cu -------------------------------------------------------------------------
void EmbeddingForward(cudaStream_t s, float* out, const int32_t* tokens, const float* wte,
                      const float* wpe, int64_t B, int64_t T, int64_t C);
// d_wte rows in token order per column (the CPU's order); d_wpe summed over the batch.
void EmbeddingBackward(cudaStream_t s, float* d_wte, float* d_wpe, const float* d_out,
                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V);
void VocabEmbeddingForward(cudaStream_t s, float* out, const int32_t* tokens,
                           const float* wte_local, int64_t vocab_begin, int64_t vocab_rows,
                           int64_t N, int64_t C);
void VocabEmbeddingBackward(cudaStream_t s, float* d_wte_local, const float* d_out,
                            const int32_t* tokens, int64_t vocab_begin, int64_t vocab_rows,
                            int64_t N, int64_t C);

// ---- norm.cu ------------------------------------------------------------------------------
// Row layout as cpu::NormRows: row i of C elements starts at (i / per) * stride + (i % per) * C
// (stride 0: i * C).
struct Rows {
  int64_t per = 1, stride = 0;
};
void LayerNormForward(cudaStream_t s, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int64_t N, int64_t C, float eps);
// scratch: 2 * ColumnSumScratchFloats(C) floats (the weight's and the bias's partial sums).
void LayerNormBackward(cudaStream_t s, float* d_inp, float* d_weight, float* d_bias,
                       const float* d_out, const float* inp, const float* weight,
                       const float* mean, const float* rstd, int64_t N, int64_t C,
                       float* scratch);
void RmsNormForward(cudaStream_t s, float* out, Rows out_rows, float* rstd, const float* inp,
                    Rows in_rows, const float* weight, int64_t N, int64_t C, float eps);
// scratch: ColumnSumScratchFloats(C) floats.
void RmsNormBackward(cudaStream_t s, float* d_inp, Rows d_inp_rows, float* d_weight,
                     const float* d_out, Rows d_out_rows, const float* inp, Rows in_rows,
                     const float* weight, const float* rstd, int64_t N, int64_t C,
                     float* scratch);

// ---- rope.cu: inv_freq(HS / 2) is HOST memory (RopeInverseFrequencies), passed to the kernel
// by value (HS <= 2 * kMaxRopeHalf), so no upload stands between the host and the launch.
constexpr int64_t kMaxRopeHalf = 256;
void RopeForward(cudaStream_t s, float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                 int64_t HS, const float* inv_freq, int64_t pos_offset);
void RopeBackward(cudaStream_t s, float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                  int64_t HS, const float* inv_freq, int64_t pos_offset);

// ---- attention.cu: tiled online-softmax attention, no T x T matrix ------------------------
// Forward saves in `lse` the log-sum-exp of each query row's scaled scores, (B, NH, T) floats,
// followed by one float holding the window (0 = causal), so that backward needs no window
// argument (the CPU contract's att(B, NH, T, T) is larger, so the saved set fits in it).
int64_t AttentionSavedFloats(int64_t B, int64_t NH, int64_t T);  // B * NH * T + 1
void AttentionForward(cudaStream_t s, float* out, float* lse, const float* qkv, int64_t B,
                      int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t window);
// scratch: AttentionBackwardScratchFloats floats (each query row's D = <dO, O> = sum_j P dP).
int64_t AttentionBackwardScratchFloats(int64_t B, int64_t NH, int64_t T);  // B * NH * T
void AttentionBackward(cudaStream_t s, float* d_qkv, float* scratch, const float* d_out,
                       const float* qkv, const float* lse, int64_t B, int64_t T, int64_t NH,
                       int64_t NKV, int64_t HS);

// ---- classifier.cu: the per-row pieces of the chunked LM head + cross-entropy --------------
// The GEMMs are cuBLAS calls in cuda_backend.cc; per chunk of `rows` rows of logits(rows, V_ld)
// of which the first V_real columns are real:
// row maxima over the real columns (-inf when V_real == 0).
void RowMax(cudaStream_t s, float* maxima, const float* logits, int64_t rows, int64_t V_ld,
            int64_t V_real);
// pairs[2r] = sum_j exp(l_j - maxima[r]) over the real columns, with the row overwritten by
// those exponentials and its padding columns zeroed; pairs[2r+1] = the target's logit when the
// target t = targets[r] - vocab_begin is in [0, V_real), else 0. An ignored row (target < 0):
// pairs 0, row zeroed.
void ExpSumAndTarget(cudaStream_t s, float* pairs, float* logits, const float* maxima,
                     const int32_t* targets, int64_t rows, int64_t V_ld, int64_t V_real,
                     int64_t vocab_begin);
// losses[r] = log(pairs[2r]) + maxima[r] - pairs[2r+1] in double, 0 for ignored rows.
void RowLoss(cudaStream_t s, float* losses, const float* pairs, const float* maxima,
             const int32_t* targets, int64_t rows);
// The rows (already exp(l - m)) become loss_scale * (softmax - onehot) on the real columns.
void SoftmaxGrad(cudaStream_t s, float* logits, const float* pairs, const int32_t* targets,
                 int64_t rows, int64_t V_ld, int64_t V_real, int64_t vocab_begin,
                 float loss_scale);

// ---- moe.cu: routing and dispatch (contracts in cpu/moe.h) --------------------------------
void MoeRoute(cudaStream_t s, const MoeRouterSpec& spec, const float* logits, const float* bias,
              float* scores, int32_t* expert, float* gate, int64_t R);
void MoeRouteBackward(cudaStream_t s, const MoeRouterSpec& spec, const float* scores,
                      const int32_t* expert, const float* d_gate, float* d_logits, int64_t R);
void MoeGather(cudaStream_t s, float* rows, const float* x, const int32_t* token_of_row,
               int64_t n, int64_t C);
void MoeGatherBackward(cudaStream_t s, float* d_x, const float* d_rows, const int32_t* row_of,
                       int64_t R, int64_t k, int64_t C);
void MoeCombine(cudaStream_t s, float* out, const float* y, const float* gate,
                const int32_t* row_of, int64_t R, int64_t k, int64_t C);
void MoeCombineBackward(cudaStream_t s, float* d_y, float* d_gate, const float* d_out,
                        const float* y, const float* gate, const int32_t* row_of, int64_t R,
                        int64_t k, int64_t C);
void GatedAddForward(cudaStream_t s, float* out, const float* x, const float* logit, int64_t R,
                     int64_t C);
void GatedAddBackward(cudaStream_t s, float* d_x, float* d_logit, const float* d_out,
                      const float* x, const float* logit, int64_t R, int64_t C);
// aux's switch_coef and seq_coef are device pointers here (the backend uploads them).
void MoeAuxBackward(cudaStream_t s, const MoeRouterSpec& spec, const float* logits,
                    const float* scores, const MoeAuxGrad& aux, float* d_logits, int64_t R);

}  // namespace tessera::cuda
