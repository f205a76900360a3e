// models/param_store.h — where a Transformer finds its parameters and puts its gradients, one
// "unit" at a time: the seam that lets a trainer keep parameters sharded (ZeRO-3), stored in a
// low-precision type (mixed precision) or replicated, without the model knowing which.
//
// Units (FSDP's "wrapping units"): contiguous ranges of the flat parameter layout
// (param_layout.h) that are gathered, used and released together:
//   unit 0        embeddings (wte [+ wpe] / embed_tokens)
//   unit 1 + l    decoder block l, l = 0 .. num_layers-1
//   unit L + 1    final norm [+ lm_head when untied]
// UnitBounds(config) in param_layout.h gives their flat offsets. With tied embeddings the LM
// head reads unit 0's weights and its gradient goes to unit 0's gradient buffer.
//
// Call order within Transformer::ForwardBackward (Forward makes the same Acquire/Release/
// Prefetch calls and never asks for gradients):
//   forward:  Acquire(0) embed Release(0); for l: Acquire(1+l) Prefetch(2+l) block Release(1+l);
//             Acquire(L+1) final norm; [tied: Acquire(0)] LM head + loss and its backward
//             (Grads(L+1) or, tied, Grads(0)); [tied: Release(0)]; final-norm backward;
//             GradsDone(L+1); Release(L+1)
//   backward: for l = L-1 .. 0: Acquire(1+l) Prefetch(l) [recompute] block backward into
//             Grads(1+l); GradsDone(1+l); Release(1+l). Then embedding backward into Grads(0)
//             (it needs no weights, so unit 0 is not acquired); GradsDone(0).
// Concretely, with L blocks (A = Acquire, P = Prefetch, R = Release, G = Grads, D = GradsDone;
// tests/kernels/param_store_test.cc checks this sequence call for call):
//   A0 R0, (A(1+l) P(2+l) R(1+l)) for l = 0..L-1, A(L+1),
//   untied: G(L+1) [head], G(L+1) [final norm] D(L+1) R(L+1)
//   tied:   A0 G0 [head] R0, G(L+1) [final norm] D(L+1) R(L+1)
//   (A(1+l) [P(l) if l > 0] G(1+l) D(1+l) R(1+l)) for l = L-1..0, G0 D0.
// Forward (evaluation): the same up to the head, then [tied: A0 R0] R(L+1).
// Transformer::Create makes no calls (its measuring pass reads no weights), so a store may
// become ready after Create. Prefetch is only made for the unit acquired next (never Prefetch(0)
// in backward: unit 0 is not acquired there); a store should ignore an out-of-range u. Acquire
// of a unit that is still acquired is not made. A unit's gradient buffer is asked for possibly
// several times (tied embeddings: the head, then the embedding backward) before its one
// GradsDone; nothing reads or writes it after GradsDone.
// Thread-safety: called on the thread driving the model.
#pragma once

#include <cstdint>

namespace tessera {

class ParamStore {
 public:
  virtual ~ParamStore() = default;

  // Unit u's fp32 parameter values (unit-relative: element i is flat element begin(u) + i),
  // valid and unchanged until Release(u).
  virtual const float* Acquire(int unit) = 0;
  virtual void Release(int unit) = 0;
  // Hint that `unit` is acquired next: a sharded store starts gathering it now.
  virtual void Prefetch(int unit) {}

  // The fp32 buffer (unit-relative) unit u's gradients of this micro-batch are ACCUMULATED
  // into (+=). The store decides what it holds on the first call of a ForwardBackward (zero
  // for a micro-batch computed from zero). The same buffer is returned until GradsDone(u).
  virtual float* Grads(int unit) = 0;
  // Unit u's gradients for this ForwardBackward are final (after the last write to Grads(u)).
  virtual void GradsDone(int unit) = 0;
};

// The store of a measuring pass (Transformer's MeasureArenas) and of a dry construction
// (runtime/train/memory_plan.h): no weights, no gradients, nothing reported.
class MeasuringStore final : public ParamStore {
 public:
  const float* Acquire(int unit) override { return nullptr; }
  void Release(int unit) override {}
  float* Grads(int unit) override { return nullptr; }
  void GradsDone(int unit) override {}
};

}  // namespace tessera
