// runtime/kernels/cpu/moe.h — the CPU kernels of a mixture-of-experts layer: routing, the
// dispatch plan (capacity), the gather of tokens into expert order and the weighted combine
// back, each with its backward. The routing rules are runtime/kernels/moe_routing.h's.
//
// Layout: R token rows of C channels; a token's k choices are (R, k) arrays `expert` (int32)
// and `gate` (fp32), slot j = the token's j-th best expert. The dispatch plan puts the kept
// assignments in rows grouped by expert (expert 0's first), within an expert in token order:
// row_of(R, k) maps an assignment to its row (-1: dropped by capacity), token_of_row its token,
// offset(E + 1) each expert's first row (offset[E] = rows kept).
// Contract as cpu/ops.h: fp32, row-major; backward kernels WRITE input gradients unless they
// say they accumulate; deterministic: every sum over a token's slots runs in slot order, every
// sum over tokens in token order, so the bits do not depend on thread timing.
#pragma once

#include <cstdint>

#include "runtime/kernels/moe_routing.h"

namespace tessera::cpu {

// scores(R,E) and the top-k `expert`(R,k) / `gate`(R,k) of logits(R,E); bias(E) may be null.
void MoeRoute(const MoeRouterSpec& spec, const float* logits, const float* bias, float* scores,
              int32_t* expert, float* gate, int64_t R);

// d_logits(R,E) = the gradient of the gates d_gate(R,k) through the normalisation, the scale
// and the score function (written; zero where no gate depends on the logit).
void MoeRouteBackward(const MoeRouterSpec& spec, const float* scores, const int32_t* expert,
                      const float* d_gate, float* d_logits, int64_t R);

// The dispatch plan of expert(R,k) (see the file comment). capacity < 0: dropless; else each
// expert keeps its `capacity` assignments of highest router probability scores(R,E) (the
// score, before normalisation, scaling or the balancing bias; ties: lower token first) and
// drops the rest. counts(E) += assignments per expert before dropping. Returns the rows kept.
int64_t MoePlan(const int32_t* expert, const float* scores, int64_t R, int64_t k, int64_t E,
                int64_t capacity, int32_t* row_of, int32_t* token_of_row, int64_t* offset,
                int64_t* counts);

// rows(n,C) = x[token_of_row[i]] for i < n.
void MoeGather(float* rows, const float* x, const int32_t* token_of_row, int64_t n, int64_t C);
// d_x(R,C) += sum over the token's kept slots, in slot order, of d_rows[row_of[t, j]].
void MoeGatherBackward(float* d_x, const float* d_rows, const int32_t* row_of, int64_t R,
                       int64_t k, int64_t C);

// out(R,C) = sum over the token's kept slots, in slot order, of gate[t,j] * y[row_of[t,j]]
// (written; a token with every slot dropped gets 0).
void MoeCombine(float* out, const float* y, const float* gate, const int32_t* row_of,
                int64_t R, int64_t k, int64_t C);
// d_y[row_of[t,j]] = gate[t,j] * d_out[t] (written for kept rows) and d_gate[t,j] =
// <d_out[t], y[row_of[t,j]]> (written; 0 for dropped slots).
void MoeCombineBackward(float* d_y, float* d_gate, const float* d_out, const float* y,
                        const float* gate, const int32_t* row_of, int64_t R, int64_t k,
                        int64_t C);

// out(R,C) += sigmoid(logit[t]) * x[t]; backward: d_x[t] = sigmoid(logit[t]) * d_out[t] and
// d_logit[t] = s(1 - s) <d_out[t], x[t]> (both written; the dot in double, in column order).
void GatedAddForward(float* out, const float* x, const float* logit, int64_t R, int64_t C);
void GatedAddBackward(float* d_x, float* d_logit, const float* d_out, const float* x,
                      const float* logit, int64_t R, int64_t C);

// Balancing statistics of R rows for the auxiliary losses, in token order: probs_sum(E) +=
// sum_t p_te (the balancing probabilities, moe_routing.h), counts(E) += the tokens choosing each
// expert, and, with z_sum non-null, *z_sum += sum_t lse_t^2.
void MoeBalanceStats(const MoeRouterSpec& spec, const float* logits, const float* scores,
                     const int32_t* expert, int64_t R, double* probs_sum, double* counts,
                     double* z_sum);
// d_logits(R,E) += the auxiliary losses' gradient (moe_routing.h, MoeAuxGrad).
void MoeAuxBackward(const MoeRouterSpec& spec, const float* logits, const float* scores,
                    const MoeAuxGrad& aux, float* d_logits, int64_t R);

}  // namespace tessera::cpu
