// models/parameter.h — a named view of one parameter and its gradient in the flat buffers.
//
// All parameters of a model live in one contiguous buffer (MemoryKind::kParameters) and their
// gradients in a twin buffer at the same offsets (MemoryKind::kGradients), so optimizers,
// bucketed reductions and checkpoint shards work on ranges of two buffers. Parameter names are
// the Hugging Face names of the family (GPT-2: "h.0.attn.c_attn.weight"; Llama:
// "model.layers.0.self_attn.q_proj.weight"), so import/export is a lookup. Views never own.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/sharded_tensor.h"
#include "runtime/core/tensor.h"

namespace tessera {

// Decides weight decay (optimizer.decay_norms / decay_biases / decay_embeddings).
enum class ParamKind { kMatrix, kNorm, kBias, kEmbedding };

struct Parameter {
  ShardedTensor spec;    // what this rank holds of the global tensor (value is its local buffer)
  ParamKind kind = ParamKind::kMatrix;
  Tensor value;          // view into the parameter buffer, shape spec.local_shape
  Tensor grad;           // view into the gradient buffer, same shape
  int64_t offset = 0;    // element offset of value/grad in the flat buffers
  // Hugging Face stores this tensor transposed relative to us. We use the nn.Linear layout
  // (out, in) everywhere; GPT-2's Conv1D weights are (in, out) in HF files.
  bool hf_transposed = false;

  const std::string& name() const { return spec.name; }
  int64_t numel() const { return value.numel(); }
};

}  // namespace tessera
