// models/transformer_stage.cc — the parts of the Transformer (transformer_impl.h) that tensor
// and pipeline parallelism add: the embedding, final-norm backward and LM head in their
// vocab-parallel / sequence-parallel forms (each the one-rank kernel when tp is off), and the
// pipeline stage passes ForwardStage / BackwardStage over activation contexts.
// Thread-safety: one thread drives a model (transformer.h).
#include <algorithm>
#include <cstring>

#include "models/activation_store.h"
#include "models/transformer_impl.h"

namespace tessera::transformer_internal {

// x0 = embed[tokens] (+ wpe[t]) into the context's resid[0]. Under tp each rank looks up the tokens of its
// vocabulary rows (zeros elsewhere), the Exit region sums the partial rows over tp (SP:
// reduce-scatter to this rank's rows), then the positions are added once.
void TransformerImpl::EmbedForward(StepContext& step, const int32_t* inputs,
                                   const float* embed) {
  Backend& be = *step.backend;
  const int64_t N = B_ * T_, C = config_.hidden_size, R = Rows();
  const ActivationStore store(act_dtype_);
  const size_t mark = ws_.Mark();
  float* x0 = store.Working(step, cur_->resid[0]);
  if (!tp_) {
    be.EmbeddingForward(x0, inputs, At(embed, wte_off_), At(embed, wpe_off_), B_, T_, C);
  } else {
    float* partial = tp_->sequence_parallel() ? ws_.Allocate(DType::kF32, {N, C}).f32() : x0;
    be.VocabEmbeddingForward(partial, inputs, At(embed, wte_off_), partition_->vocab_begin(),
                             partition_->vocab_per_rank(), N, C);
    tp_->ExitForward(partial, x0, N, C);
    if (wpe_off_ >= 0) be.AddPositions(x0, At(embed, wpe_off_), tp_->RowBegin(N), R, T_, C);
  }
  store.Commit(step, cur_->resid[0], x0);
  ws_.Release(mark);
}

// Backward of EmbedForward from d_res (Rows(), C): needs no weights. Under tp the Exit
// region's dual gathers the rows (SP), each rank scatters into its vocabulary rows, and every
// rank computes the (replicated) position gradient from all rows.
void TransformerImpl::EmbedBackward(StepContext& step, const int32_t* inputs,
                                    const float* d_res, float* embed_grads) {
  Backend& be = *step.backend;
  const int64_t N = B_ * T_, C = config_.hidden_size, V = config_.vocab_size;
  if (!tp_) {
    be.EmbeddingBackward(At(embed_grads, wte_off_), At(embed_grads, wpe_off_), d_res, inputs,
                         B_, T_, C, V);
    return;
  }
  const size_t mark = ws_.Mark();
  Tensor full = tp_->sequence_parallel() ? ws_.Allocate(DType::kF32, {N, C}) : Tensor();
  const float* d_full = tp_->ExitBackward(d_res, full.f32(), N, C);
  be.VocabEmbeddingBackward(At(embed_grads, wte_off_), d_full, inputs, partition_->vocab_begin(),
                            partition_->vocab_per_rank(), N, C);
  if (wpe_off_ >= 0) {
    be.EmbeddingBackward(nullptr, At(embed_grads, wpe_off_), d_full, inputs, B_, T_, C, V);
  }
  ws_.Release(mark);
}

// h = final_norm(x_L) backward: d_res (Rows(), C) written from d_h. Under sequence
// parallelism the norm's gradients of this rank's rows are summed over tp before they are
// accumulated into `grads` (unit L + 1).
void TransformerImpl::FinalNormBackward(StepContext& step, float* d_res, const float* d_h,
                                        float* grads) {
  Backend& be = *step.backend;
  const int64_t R = Rows(), C = config_.hidden_size, L = n_blocks_;
  const bool sp = tp_ && tp_->sequence_parallel();
  const size_t mark = ws_.Mark();
  Tensor partial = sp ? ws_.Allocate(DType::kF32, {2 * C}) : Tensor();
  float* g_w = At(grads, lnf_w_off_);
  float* g_b = At(grads, lnf_b_off_);
  if (sp) {
    be.Zero(partial.f32(), partial.nbytes());
    g_w = At(partial.f32(), 0);
    g_b = At(partial.f32(), C);
  }
  const float* w = At(final_base_, lnf_w_off_);
  const float* x_L = ActivationStore(act_dtype_).Read(step, cur_->resid[L]);
  if (config_.family == ModelFamily::kGpt2) {
    be.LayerNormBackward(d_res, g_w, g_b, d_h, x_L, w, cur_->final.mean.f32(),
                         cur_->final.rstd.f32(), R, C);
  } else {
    be.RmsNormBackward(d_res, g_w, d_h, x_L, w, cur_->final.rstd.f32(), R, C);
  }
  if (sp) {
    tp_->SumInPlace(partial.f32(), 2 * C);
    if (grads != nullptr) {  // null: a frozen final norm (finetune.lora)
      be.AddInPlace(At(grads, lnf_w_off_), partial.f32(), C);
      if (lnf_b_off_ >= 0) be.AddInPlace(At(grads, lnf_b_off_), At(partial.f32(), C), C);
    }
  }
  Round(be, d_res, R * C);
  ws_.Release(mark);
}

// LM head + cross-entropy over all N rows, fused with its backward when d_h is non-null
// (d_h (Rows(), C) = dL/dh). Returns the loss sum. Under tp the head is vocab-parallel: the
// norm output enters through the Enter region (SP: gathered), the classifier reduces its
// softmax statistics over tp, and the partial d_h is summed by the Enter region's dual.
// `losses` (N) and `logits` (the chunk scratch) are the caller's workspace tensors.
double TransformerImpl::Head(StepContext& step, const int32_t* targets, float loss_scale,
                             const float* head_w, float* head_grads, float* d_h,
                             Tensor& losses, Tensor& logits) {
  Backend& be = *step.backend;
  const int64_t N = B_ * T_, C = config_.hidden_size, V = config_.vocab_size;
  const float* h_local = ActivationStore(act_dtype_).Read(step, cur_->final.out);
  if (!tp_) {
    return be.ClassifierForwardBackward(losses.f32(), d_h, At(head_grads, head_off_), h_local,
                                        At(head_w, head_off_), targets, N, C, V, loss_scale,
                                        logits.f32(), chunk_rows_);
  }
  const bool sp = tp_->sequence_parallel();
  Tensor h_full = sp ? ws_.Allocate(DType::kF32, {N, C}) : Tensor();
  Tensor d_full = sp && d_h != nullptr ? ws_.Allocate(DType::kF32, {N, C}) : Tensor();
  const float* h = tp_->EnterForward(h_local, h_full.f32(), N, C);
  float* d_partial = d_h == nullptr ? nullptr : sp ? d_full.f32() : d_h;
  const int64_t vp = partition_->vocab_per_rank(), vb = partition_->vocab_begin();
  const int64_t real = std::clamp<int64_t>(V - vb, 0, vp);
  const double sum = be.VocabParallelClassifier(
      losses.f32(), d_partial, At(head_grads, head_off_), h, At(head_w, head_off_), targets, N,
      C, vp, real, vb, loss_scale, logits.f32(), chunk_rows_, &TensorParallel::Combine,
      tp_.get());
  if (d_h != nullptr) tp_->EnterBackward(d_partial, d_h, N, C);
  return sum;
}

// The LM head + cross-entropy over the context's h for the `counted` tokens: the loss sum.
// With d_h it is fused with its backward: d_h = dL/dh scaled for the mean over counted tokens
// and the caller's grad_scale, the head's weight gradient accumulated. The head's weights:
// unit 0's token table when tied (acquired here), else in the final unit (acquired already).
double TransformerImpl::HeadPass(StepContext& step, const int32_t* targets, float grad_scale,
                                 int64_t counted, float* d_h) {
  const int64_t N = B_ * T_, V = config_.vocab_size;
  const size_t head_mark = ws_.Mark();
  Tensor losses = ws_.Allocate(DType::kF32, {N});
  Tensor logits =
      ws_.Allocate(DType::kF32, {chunk_rows_, tp_ ? partition_->vocab_per_rank() : V});
  const float loss_scale =
      counted > 0 ? static_cast<float>(static_cast<double>(grad_scale) / counted) : 0.0f;
  const bool tied = config_.tie_embeddings;
  const int head_unit = tied ? 0 : final_unit();
  const float* head_base = tied ? Acquire(0) : final_base_;
  float* head_grads = d_h != nullptr ? Grads(head_unit) : nullptr;
  const double loss_sum = Head(step, targets, loss_scale, head_base, head_grads, d_h, losses,
                               logits);
  if (tied) Release(0);
  ws_.Release(head_mark);
  return loss_sum;
}

// A pipeline stage's forward: the activations stay in context ctx for BackwardStage. The last
// chunk computes the loss (forward only: its backward recomputes the head, so the store sees
// gradient requests only inside BackwardStage, whatever the schedule).
double TransformerImpl::ForwardStage(int ctx, const int32_t* inputs, const int32_t* targets,
                                     const float* x_in, float* x_out) {
  StepContext step = Begin(ctx);
  record_moe_ = record_routing_;
  const int64_t counted = Counted(inputs, targets);
  const TokenIds ids = StageTokens(step, inputs, targets);
  cur_->inputs = ids.inputs;
  cur_->targets = ids.targets;
  cur_->counted = counted;
  ForwardBody(step, ids.inputs, x_in);
  double loss_sum = 0.0;
  if (chunk_.last) {
    loss_sum = HeadPass(step, ids.targets, 0.0f, counted, nullptr);
    Release(final_unit());
    final_base_ = nullptr;
  } else {
    ActivationStore(act_dtype_).Load(step, cur_->resid[n_blocks_], x_out);
  }
  ws_.Release(0);
  return counted > 0 ? loss_sum / static_cast<double>(counted) : 0.0;
}

void TransformerImpl::BackwardStage(int ctx, const float* d_out, float* d_in, float grad_scale) {
  TESSERA_CHECK(ctx >= 0 && ctx < static_cast<int>(ctx_.size()));
  cur_ = &ctx_[static_cast<size_t>(ctx)];
  ws_.Release(0);
  StepContext step{pass_backend_, &cur_->act, &ws_};
  step.loss_grad_scale = grad_scale;
  Backend& be = *step.backend;
  const int64_t R = Rows(), C = config_.hidden_size;
  Tensor d_res = ws_.Allocate(DType::kF32, {R, C});
  const size_t d_h_mark = ws_.Mark();
  Tensor d_h;
  if (chunk_.last) {
    // The head again, now fused with its backward (the same bits as the forward's loss).
    final_base_ = Acquire(final_unit());
    d_h = ws_.Allocate(DType::kF32, {R, C});
    HeadPass(step, cur_->targets, grad_scale, cur_->counted, d_h.f32());
  } else {
    be.Copy(d_res.f32(), d_out, static_cast<size_t>(R * C) * sizeof(float));
  }
  BackwardBody(step, cur_->inputs, d_h, d_h_mark, d_res);
  if (!chunk_.first) be.Copy(d_in, d_res.f32(), static_cast<size_t>(R * C) * sizeof(float));
  ws_.Release(0);
}

}  // namespace tessera::transformer_internal
