// runtime/kernels/moe_routing.h — the routing rules of a mixture-of-experts layer, as the
// router kernels of every backend take them (backend.h, cpu/moe.h). Backend-neutral values.
//
// For each token t (one row of logits r_t, E experts):
//   scores      s_t = softmax(r_t) or sigmoid(r_t)                            (kSoftmax / sigmoid)
//   selection   q_t = s_t + bias   (the aux-loss-free balancing bias; selection only)
//   groups      with groups G > 1: the experts form G equal consecutive groups; a group's score
//               is the sum of its top two values of q_t (its one value for groups of one), as
//               DeepSeek-V3 defines it; the token keeps the groups_kept best groups (ties:
//               lower group first) and the other groups' experts cannot be chosen (DeepSeek's
//               device/node-limited routing; Megatron's group top-k sums top k/groups_kept,
//               which is the same rule whenever k/groups_kept = 2, as in DeepSeek-V3)
//   top-k       the k experts of largest q_t, in decreasing q order (ties: lower index first)
//   gates       w_j = s_t[e_j]; with normalize, w_j /= sum_j s_t[e_j] (+ 1e-20 for sigmoid,
//               whose scores may all be tiny); then w_j *= route_scale
// Router maths is fp32 whatever the model's precision.
// Balancing probabilities (for the auxiliary losses): p_t = s_t for softmax, s_t / sum(s_t)
// for sigmoid (DeepSeek-V3's normalised affinities).
#pragma once

#include <cstdint>

namespace tessera {

struct MoeRouterSpec {
  int64_t E = 0;            // routed experts
  int64_t k = 1;            // experts per token
  int64_t groups = 1;       // G, divides E
  int64_t groups_kept = 1;  // 1..G; the kept groups hold at least k experts
  bool sigmoid = false;     // scores: sigmoid (else softmax)
  bool normalize = true;    // gates divided by their sum
  float route_scale = 1.0f;
};

// The auxiliary-loss gradient of one MoE call, for MoeAuxBackward: dL/dp_te =
// switch_coef[e] + seq_coef[(row0 + t) / T][e] (the sequence-wise term; null without), and
// the z-loss, dL/dr_te = z_scale * lse_t * softmax(r_t)_e.
struct MoeAuxGrad {
  const float* switch_coef = nullptr;  // (E) or null
  const float* seq_coef = nullptr;     // (sequences, E) or null; sequence of row t: (row0 + t) / T
  int64_t row0 = 0;                    // the first row's index in the micro-batch
  int64_t T = 1;                       // tokens per sequence
  int64_t seq0 = 0;                    // sequence of seq_coef's first row
  float z_scale = 0.0f;                // 2 * z_loss / tokens, times the micro-batch's scale
};

}  // namespace tessera
