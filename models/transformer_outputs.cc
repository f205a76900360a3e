// models/transformer_outputs.cc — TransformerImpl::LayerOutputs (transformer.h): what the last
// Forward computed, layer by layer, read back from the activation context (`tessera
// validate` compares it with an independent implementation).
#include "models/activation_store.h"
#include "models/transformer_impl.h"

namespace tessera::transformer_internal {

std::vector<Transformer::LayerOutput> TransformerImpl::LayerOutputs() {
  TESSERA_CHECK_MSG(chunk_.first && chunk_.last && tp_ == nullptr,
                    "LayerOutputs needs the whole model on one rank");
  TESSERA_CHECK_MSG(backend_->device() == Device::kCpu,
                    "LayerOutputs reads activations on the host: a CPU backend's model only");
  TESSERA_CHECK_MSG(!ctx_.empty() && !ctx_[0].resid.empty(), "LayerOutputs before a Forward");
  Context& x = ctx_[0];
  StepContext step{pass_backend_, &x.act, &ws_};
  const ActivationStore store(act_dtype_);
  const int64_t R = Rows(), C = config_.hidden_size, V = config_.vocab_size;
  std::vector<LayerOutput> out;
  auto add = [&](std::string name, const Tensor& t) {
    LayerOutput& o = out.emplace_back(LayerOutput{std::move(name), R, C, {}});
    o.values.resize(static_cast<size_t>(R * C));
    store.Load(step, t, o.values.data());
  };
  add("embeddings", x.resid[0]);
  for (int64_t l = 0; l < n_blocks_; ++l) {
    const std::string p = "layers." + std::to_string(chunk_.layer_begin + l) + ".";
    if (x.saved[l].mid.numel() > 0) add(p + "attention", x.saved[l].mid);
    add(p + "mlp", x.resid[l + 1]);
  }
  add("final_norm", x.final.out);
  // logits = h head^T: the products the fused classifier makes chunk by chunk.
  const std::vector<float> h = out.back().values;
  const bool tied = config_.tie_embeddings;
  const int head_unit = tied ? 0 : final_unit();
  const float* head = At(Acquire(head_unit), head_off_);
  LayerOutput& logits = out.emplace_back(LayerOutput{"logits", R, V, {}});
  logits.values.resize(static_cast<size_t>(R * V));
  pass_backend_->LinearForward(logits.values.data(), h.data(), head, nullptr, R, C, V);
  Release(head_unit);
  return out;
}

}  // namespace tessera::transformer_internal
