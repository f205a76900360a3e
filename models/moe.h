// models/moe.h — the mixture-of-experts sublayer of an MoE block (model.moe), with explicit
// forward and backward: it takes the place of the MLP, after the block's second norm.
//
//   logits = h @ router^T                 (R, E), fp32 whatever the precision
//   scores, top-k experts and gates       routing rules of runtime/kernels/moe_routing.h, the
//                                         selection biased by the layer's routing bias (zero
//                                         unless balancing moved it or a file set it)
//   plan                                  dropless, or each expert keeps its ceil(R*k/E*factor)
//                                         assignments of highest score s_t[e] (the router
//                                         probability); a dropped assignment
//                                         adds nothing (the token keeps its residual)
//   x_rows = h gathered in expert order   (rows, C)
//   per expert e: y_e = out_e(act(fc_e(x_e)))   one GEMM per expert over its rows (grouped)
//   out = sum_j gate_j * y[row(t, j)] + shared(h)   [* sigmoid(h . w_gate): shared_gate]
// act is GELU (gpt2, with biases) or SwiGLU (llama); the shared experts are one MLP of width
// shared_experts * expert_ffn applied to every token.
// Auxiliary losses (added to the training loss, reported apart from it; all per micro-batch
// of R tokens, k experts per token, E experts, balancing probabilities p of moe_routing.h):
//   switch     aux_loss * E / (R^2 k) * sum_e count_e * sum_t p_te       (Switch / Megatron)
//   sequence   seq_aux_loss * mean over sequences b of sum_e f_be P_be, f_be = E/(k T) *
//              count_be, P_be = mean_t p_te over b's T tokens              (DeepSeek-V3)
//   z-loss     z_loss * mean_t (logsumexp_e r_te)^2                        (ST-MoE)
// counts are the tokens choosing each expert (before capacity drops) and are constants.
//
// Owns: nothing across steps but the layer's MoeLayerState (the balancing bias and the step's
// routing statistics), which the model keeps per MoE block. Tensors come from the step's arenas
// as the block's do (block.h): what backward needs is kept by the policy, the rest in
// workspace. Sizes are the worst case (every token's k assignments kept), so the measuring pass
// (which routes nothing) sizes the arenas for any routing.
// Precision: the experts' activations are stored in the activation dtype like the MLP's
// (activation_store.h); router logits, scores and gates stay fp32.
// Tensor parallelism: the router and every expert are whole on each tp rank, which computes
// the sublayer on the full micro-batch (the same bits on every rank, so nothing is reduced);
// sequence parallelism with experts is refused by the config.
// Expert parallelism (MoeDims::ep): the rank holds E/ep of the experts. It routes and plans
// its own tokens over all E experts as above; the planned rows (in expert order, so each
// peer's are contiguous) are dispatched to the experts' ranks (expert_parallel.h). What
// arrives (by source rank, then local expert) is regrouped by local expert, sources in rank
// order, so each local expert runs one GEMM over all its rows (dropless, the rows and their
// order are those one rank computes for the same global batch; a capacity applies to each
// source's micro-batch, as without ep). The outputs go back to source order and
// return to their tokens' rank for the combine. The backward is the dual.
// Thread-safety: const methods, one thread drives a step; kernels parallelise inside.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_config.h"
#include "runtime/core/memory.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/backend.h"

namespace tessera {

struct StepContext;
class ExpertParallel;

struct MoeDims {
  bool gpt2 = true;
  int64_t B = 0, T = 0;  // micro-batch: R = B * T token rows
  int64_t C = 0;         // hidden size
  int64_t Fe = 0;        // each expert's MLP width
  int64_t S = 0;         // shared experts' width (shared_experts * Fe); 0 = none
  bool shared_gate = false;  // their output scaled by sigmoid(h . w_gate) (Qwen2-MoE)
  MoeRouterSpec spec;    // E, k, groups, score, normalisation, scale
  float capacity_factor = 0.0f;  // 0: dropless
  float aux_loss = 0.0f, seq_aux_loss = 0.0f, z_loss = 0.0f;
  DType act_dtype = DType::kF32;
  ExpertParallel* ep = nullptr;  // expert parallelism (ep >= 2), else null

  static MoeDims Of(const ModelConfig& c, int64_t B, int64_t T, DType act_dtype);
  int64_t R() const { return B * T; }
  int64_t E() const { return spec.E; }
  int64_t k() const { return spec.k; }
  int64_t fc_dim() const { return gpt2 ? Fe : 2 * Fe; }         // expert fc output width
  int64_t shared_fc_dim() const { return gpt2 ? S : 2 * S; }
  // The most rows this rank's tokens can send to experts: every assignment kept.
  int64_t max_rows() const { return R() * k(); }
  int ep_size() const;
  int64_t local_experts() const { return E() / ep_size(); }  // experts this rank holds
  // The most rows this rank's experts can get: max_rows(), or under ep every rank's tokens
  // choosing min(k, local experts) of them (at most each source's capacity per expert).
  int64_t max_expert_rows() const;
  // Per-expert capacity of one call, ceil(R * k / E * capacity_factor), or -1 for dropless.
  int64_t capacity() const;
};

// Views of the sublayer's weights: the router and shared experts in the block's unit, the
// routed experts in its expert unit. Null where absent (gpt2 biases, shared experts).
struct MoeWeights {
  const float* router = nullptr;     // (E, C)
  const float* shared_fc_w = nullptr;   // (shared_fc_dim, C)  llama [gate | up] rows
  const float* shared_fc_b = nullptr;   // (S)
  const float* shared_out_w = nullptr;  // (C, S)
  const float* shared_out_b = nullptr;  // (C)
  const float* shared_gate = nullptr;   // (1, C) Qwen2-MoE's gate of the shared experts
  const float* fc_w = nullptr;       // (E, fc_dim, C)  llama: each expert's [gate | up] rows
  const float* fc_b = nullptr;       // (E, Fe)
  const float* out_w = nullptr;      // (E, C, Fe)
  const float* out_b = nullptr;      // (E, C)
};

struct MoeGrads {
  float* router = nullptr;
  float* shared_fc_w = nullptr;
  float* shared_fc_b = nullptr;
  float* shared_out_w = nullptr;
  float* shared_out_b = nullptr;
  float* shared_gate = nullptr;
  float* fc_w = nullptr;
  float* fc_b = nullptr;
  float* out_w = nullptr;
  float* out_b = nullptr;
};

// What one MoE block keeps across steps and reports.
struct MoeLayerState {
  std::vector<float> bias;        // (E) balancing bias, selection only; zero when off
  // Routing statistics since the trainer last took them (every training forward;
  // recomputation and evaluation excluded):
  std::vector<int64_t> counts;    // (E) tokens that chose each expert, before capacity drops
  int64_t assigned = 0;           // token-expert assignments made
  int64_t kept = 0;               // of which kept (assigned - kept were dropped by capacity)
  double aux_loss = 0.0;          // sum of the auxiliary losses' values
  int64_t calls = 0;              // forwards counted (micro-batches)
  double last_aux_loss = 0.0;     // the auxiliary losses of the latest forward (any kind)

  explicit MoeLayerState(int64_t E = 0) : bias(E, 0.0f), counts(E, 0) {}
  void ResetStats();
};

// What the sublayer's backward needs. Tensors in the activations arena hold the activation
// dtype, the router's are fp32 (activation_store.h).
struct MoeSaved {
  Tensor logits;        // (R, E) fp32 router logits
  Tensor scores;        // (R, E) fp32 softmax / sigmoid scores
  Tensor expert;        // (R, k) i32 chosen experts
  Tensor gate;          // (R, k) fp32 gates
  Tensor row_of;        // (R, k) i32 row of each assignment, -1 dropped
  Tensor token_of_row;  // (max_rows) i32
  Tensor x_rows;        // (max_expert_rows, C)      the experts' inputs (received under ep)
  Tensor fc_out;        // (max_expert_rows, fc_dim) pre-activation
  Tensor act_out;       // (max_expert_rows, Fe)     [selective: recomputed]
  Tensor y;             // (max_rows, C)  the experts' outputs for this rank's rows (the gates'
                        //                gradient), returned from their ranks under ep
  Tensor shared_fc_out;   // (R, shared_fc_dim)
  Tensor shared_act_out;  // (R, S)           [selective: recomputed]
  Tensor shared_logit;    // (R, 1) fp32 the shared experts' gate logit (shared_gate only)
  Tensor shared_proj;     // (R, C) fp32 the shared experts' output before the gate
  std::vector<int64_t> offset;  // (E + 1) each expert's first row of this rank's (host)
  // The rows the experts compute, in segments of one local expert each (segment i is local
  // expert i): = offset without ep; under ep (E/ep + 1) offsets, each expert's rows from
  // every source in rank order, and the rows exchanged with each peer.
  std::vector<int64_t> segment;
  std::vector<int64_t> rows_to, rows_from;
  // Under ep, the regrouping of what arrived: expert-ordered row r is arrived row
  // by_expert[r]; arrived row a is expert-ordered row by_source[a] (both (rows) i32, host).
  std::vector<int32_t> by_expert, by_source;
  // The auxiliary losses' gradient, unscaled (the backward multiplies by the step's scale).
  std::vector<float> switch_coef;  // (E) or empty
  std::vector<float> seq_coef;     // (B, E) or empty
  float z_scale = 0.0f;
};

// Calls fn(e, first_row, rows) for every expert e the plan gave rows (offset: E + 1 values).
template <typename Fn>
void ForEachExpertRows(const std::vector<int64_t>& offset, Fn fn) {
  for (size_t e = 0; e + 1 < offset.size(); ++e) {
    const int64_t b = offset[e], n = offset[e + 1] - b;
    if (n > 0) fn(static_cast<int64_t>(e), b, n);
  }
}

// Expert e's block of a stacked (E, stride) tensor; null for an absent one (a bias).
template <typename T>
T* ExpertSlice(T* stacked, int64_t e, int64_t stride) {
  return stacked == nullptr ? nullptr : stacked + e * stride;
}

class MoeLayer {
 public:
  explicit MoeLayer(const MoeDims& dims) : d_(dims) {}

  // out(R,C) = the sublayer of h(R,C) (both fp32, out written). Kept tensors go to `kept`,
  // recomputable ones to `dropped` (block.h's policy arenas); `state` supplies the bias and,
  // with `record`, collects the statistics (a recomputation passes false).
  void Forward(StepContext& step, Arena& kept, Arena& dropped, const float* h, float* out,
               MoeSaved& s, const MoeWeights& w, MoeLayerState& state, bool record) const;

  // d_h(R,C) = dL/dh (written) from d_out(R,C) = dL/d(out), plus the auxiliary losses'
  // gradient scaled by step.loss_grad_scale. `act_out` / `shared_act_out`: the saved ones, or
  // recomputed by RecomputeActivations under selective. Gradients accumulate into g.
  void Backward(StepContext& step, const float* h, const float* d_out, float* d_h,
                const MoeSaved& s, const Tensor& act_out, const Tensor& shared_act_out,
                const MoeWeights& w, const MoeGrads& g) const;

  // The activation outputs selective recomputation drops, from the saved pre-activations,
  // into workspace tensors (routed rows, shared).
  void RecomputeActivations(StepContext& step, const MoeSaved& s, Tensor& act_out,
                            Tensor& shared_act_out) const;

  const MoeDims& dims() const { return d_; }

 private:
  void Experts(StepContext& step, const MoeSaved& s, const MoeWeights& w, const float* x,
               float* y) const;
  // Under ep: the counts exchange and the segments, rows_to, rows_from and the regrouping
  // it gives.
  void PlanExchange(MoeSaved& s) const;
  // x (the gathered rows, fp32) through the experts into y's working copy (fp32, returned
  // committed to s.y's storage by the caller): locally, or dispatched and returned under ep.
  void RunExperts(StepContext& step, MoeSaved& s, const MoeWeights& w, const float* x,
                  float* y) const;
  // The experts' backward from d_y (this rank's rows) into d_x (this rank's rows).
  void ExpertsBackward(StepContext& step, const MoeSaved& s, const Tensor& act_out,
                       const MoeWeights& w, const MoeGrads& g, const float* d_y,
                       float* d_x) const;
  void Shared(StepContext& step, const float* h, float* out, const MoeSaved& s,
              const MoeWeights& w) const;
  // act_out = act(fc_out) for n rows of the given width, committed to act_out's storage.
  float* Activation(const StepContext& step, const Tensor& act_out, const float* fc_out,
                    int64_t n, int64_t F) const;
  void AuxLosses(StepContext& step, MoeSaved& s, MoeLayerState& state, bool record) const;

  MoeDims d_;
};

}  // namespace tessera
