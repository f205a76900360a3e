// runtime/train/data/markov_chain.h — the synthetic corpus: a random sparse Markov chain over
// the vocabulary whose entropy rate (the loss floor of a perfect model) is known exactly.
//
// Owns: the transition table of an order-1 or order-2 chain, its stationary distribution, the
// exact entropy rate, and stream generation. Everything is a pure function of the config
// (chain) and of (seed, split) (streams), through runtime/core/random.h.
//
// Construction (SyntheticDataConfig: branching b, order k, concentration a, seed):
//  - A context state s is the last k tokens (s = token for k = 1, s = prev * V + last for
//    k = 2), so there are S = V^k states. Each state has exactly b distinct successor tokens:
//    (last + 1) mod V always; token 0 also when last == 0 and b >= 2 (a self-loop on token 0);
//    the rest drawn uniformly without replacement from the other tokens.
//  - Probabilities: d ~ Dirichlet(a, ..., a) over the b successors (Gamma(a) draws, in log
//    space so tiny a cannot underflow), then p = 0.99 d + 0.01 / b. The 1% uniform mix keeps
//    every listed edge at >= 0.01 / b, so the chain stays irreducible in floating point and the
//    power iteration converges in reasonable time even for very peaky a.
//  - Irreducibility: the +1 successor makes every state reach the cycle 0 -> 1 -> ... -> V-1,
//    so there is exactly one closed class and one stationary distribution (unreachable order-2
//    states get probability 0). Aperiodicity (b >= 2): the token-0 self-loop adds a cycle of
//    length 1 (order 1) or V + 1 (order 2) next to the length-V cycle. With b = 1 the chain is
//    the deterministic cycle (entropy 0), periodic but still with a unique stationary law.
//  - Stationary distribution: power iteration pi <- pi P in double from the uniform vector
//    (exactly stationary after one step when b = 1), until the L1 change is below
//    max(1e-12, 8e-16 * S) (the second term is the rounding floor of summing S entries).
//  - Entropy rate H = sum_s pi(s) H(P(.|s)), nats. The probabilities used by every query are
//    the differences of the stored cumulative table, i.e. exactly the ones generation samples.
//
// Limits: order 2 needs V <= 4096; S * b <= 2^24 transitions (about 200 MiB of tables).
// Thread-safety: immutable after Build; all const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/train/config.h"

namespace tessera {

// The settings checks of Build, without building: order, branching, concentration and the
// table-size limits (order 2 needs V <= MarkovChain::kMaxOrder2Vocab; states x branching
// <= MarkovChain::kMaxTransitions).
// Config validation calls it too, so a too-large chain is a config error with a position.
Status ValidateChainShape(const SyntheticDataConfig& config, int64_t vocab_size);

class MarkovChain {
 public:
  static constexpr int64_t kMaxOrder2Vocab = 4096;
  static constexpr int64_t kMaxTransitions = int64_t{1} << 24;

  // Builds the chain over `vocab_size` tokens (ValidateChainShape first). kInvalidArgument for out-of-range settings or
  // tables past the limits above; kFailedPrecondition if the power iteration does not converge
  // (only for pathological, extremely slowly mixing chains).
  static Result<std::unique_ptr<MarkovChain>> Build(const SyntheticDataConfig& config,
                                                    int64_t vocab_size);

  int64_t vocab_size() const { return vocab_size_; }
  int64_t order() const { return order_; }
  int64_t branching() const { return branching_; }
  int64_t num_states() const { return num_states_; }
  // Iterations the power iteration used (for logs and tests).
  int64_t power_iterations() const { return power_iterations_; }

  // The state reached after seeing `context`: its last order() tokens (context[0] oldest).
  int64_t StateOf(std::span<const int32_t> context) const;
  // Successor tokens of `state`, ascending; exactly branching() of them.
  std::span<const int32_t> Successors(int64_t state) const;
  // P(next | state); 0 for tokens that are not successors.
  double TransitionProb(int64_t state, int32_t next) const;
  // The state after `state` emits `next`.
  int64_t NextState(int64_t state, int32_t next) const;

  // Stationary distribution over states (sums to 1).
  const std::vector<double>& stationary() const { return stationary_; }
  // Exact entropy rate H = sum_s pi(s) H(P(.|s)), nats/token.
  double entropy_rate() const { return entropy_rate_; }
  // Exact expected cross-entropy (nats/token) of the best possible predictor, averaged over
  // the seq_len target positions of a window of seq_len + 1 tokens whose first token comes from
  // the stationary stream and whose context is only the window itself. Order 1: H. Order 2:
  // (H(X1 | X0) + (seq_len - 1) H) / seq_len, the first target having one token of context.
  double EntropyFloor(int64_t seq_len) const;
  // H(X1 | X0) under stationarity (equals entropy_rate() for order 1).
  double FirstPositionEntropy() const { return first_position_entropy_; }

  // Fills `out` with a stream of out.size() tokens keyed by (chain seed, split): its first
  // order() tokens are a stationary draw, the rest follow the chain. Split 0 = train, 1 = val.
  void Generate(uint64_t split, std::span<int32_t> out) const;

  // "V=64 order 1 branching 4 concentration 1"
  std::string Describe() const;

 private:
  MarkovChain() = default;
  void BuildTransitions(float concentration);
  Status ComputeStationary();
  void ComputeEntropies();
  int32_t Sample(int64_t state, double u) const;

  int64_t vocab_size_ = 0;
  int64_t order_ = 1;
  int64_t branching_ = 1;
  int64_t num_states_ = 0;
  float concentration_ = 1.0f;
  uint64_t seed_ = 0;
  int64_t power_iterations_ = 0;
  std::vector<int32_t> successors_;  // [S * b] successor tokens, ascending per state
  std::vector<double> cdf_;          // [S * b] cumulative probabilities; last of each state 1.0
  std::vector<double> stationary_;   // [S]
  double entropy_rate_ = 0.0;
  double first_position_entropy_ = 0.0;
};

}  // namespace tessera
