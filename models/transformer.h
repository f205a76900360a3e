// models/transformer.h — a decoder-only transformer (GPT-2 or Llama family) with explicit
// forward and backward, built from a ModelConfig for a fixed micro-batch shape (B, T).
//
// Owns: the parameter and gradient buffers (one contiguous buffer each), the activation and
// workspace arenas sized by a measuring pass for (B, T) and the recomputation policy.
// Thread-safety: one thread drives a model; kernels parallelise inside.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "models/model_config.h"
#include "models/parameter.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"

namespace tessera {

class Transformer {
 public:
  // Validates the config (heads divide hidden, kv heads divide heads, T <= max_seq_len) and
  // allocates every buffer. Parameters are zero until InitRandom or a weights load.
  static Result<std::unique_ptr<Transformer>> Create(const ModelConfig& config, int64_t B,
                                                     int64_t T, MemoryTracker* tracker);
  virtual ~Transformer() = default;

  // GPT-2-style init: weights ~ N(0, init_std), residual output projections scaled by
  // 1/sqrt(2 * num_layers), biases 0, norm weights 1. Deterministic from `seed`.
  virtual void InitRandom(uint64_t seed) = 0;

  // One micro-batch: inputs(B,T) and targets(B,T) token ids (targets < 0 are ignored).
  // Runs forward and backward, ACCUMULATES parameter gradients scaled by grad_scale (the
  // trainer passes 1/grad_accum_steps), returns the mean loss over counted tokens.
  virtual double ForwardBackward(const int32_t* inputs, const int32_t* targets,
                                 float grad_scale) = 0;
  // Forward only (evaluation): mean loss over counted tokens.
  virtual double Forward(const int32_t* inputs, const int32_t* targets) = 0;

  virtual void ZeroGrads() = 0;

  // Data-parallel hook: during ForwardBackward, called with an element range [begin, end) of
  // the flat gradient buffer as soon as the gradients in it are final for this micro-batch,
  // so a trainer can start reducing them while backward goes on. Order: the untied LM head
  // (after the classifier), the final norm, each block from the last to the first, then the
  // embeddings (last: a tied embedding also collects the LM head's gradient). The ranges of
  // one ForwardBackward cover [0, num_params) exactly once. Called on the driving thread; an
  // empty function turns it off. Forward() never calls it.
  using GradReadyCallback = std::function<void(int64_t begin, int64_t end)>;
  virtual void SetGradReadyCallback(GradReadyCallback callback) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual int64_t batch_size() const = 0;  // B of every micro-batch this model was built for
  virtual int64_t seq_len() const = 0;     // T of every micro-batch
  virtual std::span<Parameter> parameters() = 0;
  virtual Tensor flat_params() = 0;   // (num_params) all parameters, contiguous
  virtual Tensor flat_grads() = 0;    // (num_params) gradients at the same offsets
  virtual int64_t num_params() const = 0;
  // Training FLOPs per token (forward + backward) for MFU: 6 * matmul params + attention.
  virtual double TrainFlopsPerToken() const = 0;
};

}  // namespace tessera
