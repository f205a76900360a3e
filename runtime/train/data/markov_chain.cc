// runtime/train/data/markov_chain.cc — building, solving and sampling the synthetic chain.
// The construction and its guarantees are described in markov_chain.h.
#include "runtime/train/data/markov_chain.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/core/check.h"
#include "runtime/core/random.h"

namespace tessera {
namespace {

// Stream ids (second StreamKey argument) of the chain's two uses of randomness.
constexpr uint64_t kChainTableStream = 0x7473722d63686169ull;   // per-state transition rows
constexpr uint64_t kChainSampleStream = 0x7473722d73616d70ull;  // generated token streams

// Weight of the uniform mix that keeps every listed edge at probability >= kUniformMix / b.
constexpr double kUniformMix = 0.01;

// Uniform in (0, 1]: never 0, so its log is finite.
double NextOpenUnit(Rng& rng) {
  return (static_cast<double>(rng.NextU64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

// log of a Gamma(shape, 1) draw (Marsaglia-Tsang; shape < 1 through the boost
// Gamma(a) = Gamma(a + 1) * U^(1/a), kept in log space so U^(1/a) cannot underflow).
double LogGammaDraw(double shape, Rng& rng) {
  if (shape < 1.0) return LogGammaDraw(shape + 1.0, rng) + std::log(NextOpenUnit(rng)) / shape;
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    const double x = rng.NextNormal();
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double log_u = std::log(NextOpenUnit(rng));
    if (log_u < 0.5 * x * x + d - d * v + d * std::log(v)) return std::log(d) + std::log(v);
  }
}

}  // namespace

Status ValidateChainShape(const SyntheticDataConfig& config, int64_t vocab_size) {
  if (vocab_size < 1) {
    return InvalidArgument("synthetic data: vocab_size=" + std::to_string(vocab_size) +
                           " must be >= 1");
  }
  if (config.order < 1 || config.order > 2) {
    return InvalidArgument("data.synthetic.order=" + std::to_string(config.order) +
                           " must be 1 or 2");
  }
  if (config.branching < 1 || config.branching > vocab_size) {
    return InvalidArgument("data.synthetic.branching=" + std::to_string(config.branching) +
                           " must be in [1, vocab_size=" + std::to_string(vocab_size) + "]");
  }
  if (!(config.concentration > 0.0f) || !std::isfinite(config.concentration)) {
    return InvalidArgument("data.synthetic.concentration must be a finite number > 0");
  }
  if (config.order == 2 && vocab_size > MarkovChain::kMaxOrder2Vocab) {
    return InvalidArgument("data.synthetic.order=2 needs vocab_size <= " +
                           std::to_string(MarkovChain::kMaxOrder2Vocab) + " (V^2 context states), got " +
                           std::to_string(vocab_size));
  }
  const int64_t num_states = config.order == 1 ? vocab_size : vocab_size * vocab_size;
  if (num_states > MarkovChain::kMaxTransitions / config.branching) {
    return InvalidArgument(
        "synthetic data: " + std::to_string(num_states) + " states x branching " +
        std::to_string(config.branching) + " exceeds the limit of " +
        std::to_string(MarkovChain::kMaxTransitions) +
        " transitions (lower vocab_size, data.synthetic.order or data.synthetic.branching)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<MarkovChain>> MarkovChain::Build(const SyntheticDataConfig& config,
                                                         int64_t vocab_size) {
  RETURN_IF_ERROR(ValidateChainShape(config, vocab_size));
  const int64_t num_states = config.order == 1 ? vocab_size : vocab_size * vocab_size;
  std::unique_ptr<MarkovChain> chain(new MarkovChain());
  chain->vocab_size_ = vocab_size;
  chain->order_ = config.order;
  chain->branching_ = config.branching;
  chain->num_states_ = num_states;
  chain->concentration_ = config.concentration;
  chain->seed_ = config.seed;
  chain->BuildTransitions(config.concentration);
  RETURN_IF_ERROR(chain->ComputeStationary());
  chain->ComputeEntropies();
  return chain;
}

void MarkovChain::BuildTransitions(float concentration) {
  const int64_t V = vocab_size_, b = branching_;
  successors_.resize(static_cast<size_t>(num_states_ * b));
  cdf_.resize(successors_.size());
  // stamp[i] == state + 1 marks pool index i as taken for `state` (Floyd's sampling).
  std::vector<uint32_t> stamp(static_cast<size_t>(V), 0);
  std::vector<double> log_w(static_cast<size_t>(b));
  for (int64_t s = 0; s < num_states_; ++s) {
    Rng rng(StreamKey(seed_, kChainTableStream, static_cast<uint64_t>(s)));
    const int32_t last = static_cast<int32_t>(s % V);
    int32_t forced[2];
    int num_forced = 0;
    forced[num_forced++] = static_cast<int32_t>((last + 1) % V);
    if (b >= 2 && last == 0) forced[num_forced++] = 0;  // the self-loop that breaks periodicity
    if (num_forced == 2 && forced[0] > forced[1]) std::swap(forced[0], forced[1]);

    int32_t* succ = &successors_[static_cast<size_t>(s * b)];
    int64_t n = 0;
    for (int i = 0; i < num_forced; ++i) succ[n++] = forced[i];
    // Floyd: m distinct indices from the pool of the V - num_forced other tokens, O(m) draws.
    const int64_t pool = V - num_forced, m = b - num_forced;
    const uint32_t mark = static_cast<uint32_t>(s + 1);
    for (int64_t j = pool - m; j < pool; ++j) {
      int64_t t = static_cast<int64_t>(rng.NextBelow(static_cast<uint64_t>(j + 1)));
      if (stamp[static_cast<size_t>(t)] == mark) t = j;
      stamp[static_cast<size_t>(t)] = mark;
      int32_t token = static_cast<int32_t>(t);  // pool index -> token, skipping forced ones
      for (int i = 0; i < num_forced; ++i) token += token >= forced[i] ? 1 : 0;
      succ[n++] = token;
    }
    std::sort(succ, succ + b);

    // Dirichlet(concentration) via normalised Gamma draws, in log space.
    double max_log = -INFINITY;
    for (int64_t j = 0; j < b; ++j) {
      log_w[static_cast<size_t>(j)] = LogGammaDraw(concentration, rng);
      max_log = std::max(max_log, log_w[static_cast<size_t>(j)]);
    }
    double total = 0.0;
    for (double& w : log_w) total += (w = std::exp(w - max_log));
    double* cdf = &cdf_[static_cast<size_t>(s * b)];
    double acc = 0.0;
    for (int64_t j = 0; j < b; ++j) {
      const double p = (1.0 - kUniformMix) * log_w[static_cast<size_t>(j)] / total +
                       kUniformMix / static_cast<double>(b);
      acc += p;
      cdf[j] = acc;
    }
    cdf[b - 1] = 1.0;  // sampling compares u < cdf with u < 1, so the last edge always exists
  }
}

int64_t MarkovChain::NextState(int64_t state, int32_t next) const {
  return order_ == 1 ? next : (state % vocab_size_) * vocab_size_ + next;
}

int64_t MarkovChain::StateOf(std::span<const int32_t> context) const {
  TESSERA_CHECK(static_cast<int64_t>(context.size()) >= order_);
  const size_t n = context.size();
  return order_ == 1 ? context[n - 1]
                     : static_cast<int64_t>(context[n - 2]) * vocab_size_ + context[n - 1];
}

std::span<const int32_t> MarkovChain::Successors(int64_t state) const {
  return {successors_.data() + state * branching_, static_cast<size_t>(branching_)};
}

double MarkovChain::TransitionProb(int64_t state, int32_t next) const {
  std::span<const int32_t> succ = Successors(state);
  auto it = std::lower_bound(succ.begin(), succ.end(), next);
  if (it == succ.end() || *it != next) return 0.0;
  const size_t j = static_cast<size_t>(state * branching_ + (it - succ.begin()));
  return it == succ.begin() ? cdf_[j] : cdf_[j] - cdf_[j - 1];
}

Status MarkovChain::ComputeStationary() {
  const int64_t S = num_states_, b = branching_;
  const double tolerance = std::max(1e-12, 8e-16 * static_cast<double>(S));
  // About 2^33 edge updates at most: seconds for the largest tables, far more iterations than
  // any chain with default-like settings needs (typically tens to a few hundred).
  const int64_t max_iterations = std::max<int64_t>(20000, (int64_t{1} << 33) / (S * b));
  std::vector<double> pi(static_cast<size_t>(S), 1.0 / static_cast<double>(S));
  std::vector<double> next(static_cast<size_t>(S));
  double change = INFINITY;
  int64_t it = 0;
  while (it < max_iterations && !(change < tolerance)) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int64_t s = 0; s < S; ++s) {
      const double mass = pi[static_cast<size_t>(s)];
      if (mass == 0.0) continue;
      const int32_t* succ = &successors_[static_cast<size_t>(s * b)];
      const double* cdf = &cdf_[static_cast<size_t>(s * b)];
      double prev = 0.0;
      for (int64_t j = 0; j < b; ++j) {
        next[static_cast<size_t>(NextState(s, succ[j]))] += mass * (cdf[j] - prev);
        prev = cdf[j];
      }
    }
    double total = 0.0;
    for (double x : next) total += x;
    change = 0.0;
    for (int64_t s = 0; s < S; ++s) {
      const double x = next[static_cast<size_t>(s)] / total;
      change += std::fabs(x - pi[static_cast<size_t>(s)]);
      pi[static_cast<size_t>(s)] = x;
    }
    ++it;
  }
  power_iterations_ = it;
  if (!(change < tolerance)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g", change);
    return FailedPrecondition(
        "synthetic data: the stationary distribution did not converge after " +
        std::to_string(it) + " power iterations (L1 change " + buf +
        "); the chain mixes too slowly: raise data.synthetic.concentration or branching");
  }
  stationary_ = std::move(pi);
  return Status::Ok();
}

void MarkovChain::ComputeEntropies() {
  const int64_t S = num_states_, b = branching_, V = vocab_size_;
  double rate = 0.0;
  for (int64_t s = 0; s < S; ++s) {
    const double* cdf = &cdf_[static_cast<size_t>(s * b)];
    double h = 0.0, prev = 0.0;
    for (int64_t j = 0; j < b; ++j) {
      const double p = cdf[j] - prev;
      prev = cdf[j];
      if (p > 0.0) h -= p * std::log(p);
    }
    rate += stationary_[static_cast<size_t>(s)] * h;
  }
  entropy_rate_ = rate;
  if (order_ == 1) {
    first_position_entropy_ = rate;
    return;
  }
  // Order 2: pi over (prev, last) is the stationary joint law of (X0, X1);
  // H(X1 | X0) = -sum pi(a, c) log(pi(a, c) / m(a)) with m the marginal of X0.
  double h = 0.0;
  for (int64_t a = 0; a < V; ++a) {
    const double* row = &stationary_[static_cast<size_t>(a * V)];
    double m = 0.0;
    for (int64_t c = 0; c < V; ++c) m += row[c];
    if (m == 0.0) continue;
    for (int64_t c = 0; c < V; ++c) {
      if (row[c] > 0.0) h -= row[c] * std::log(row[c] / m);
    }
  }
  first_position_entropy_ = h;
}

double MarkovChain::EntropyFloor(int64_t seq_len) const {
  TESSERA_CHECK(seq_len >= 1);
  if (order_ == 1) return entropy_rate_;
  return (first_position_entropy_ + static_cast<double>(seq_len - 1) * entropy_rate_) /
         static_cast<double>(seq_len);
}

int32_t MarkovChain::Sample(int64_t state, double u) const {
  const double* cdf = &cdf_[static_cast<size_t>(state * branching_)];
  const int32_t* succ = &successors_[static_cast<size_t>(state * branching_)];
  if (branching_ <= 16) {
    int64_t j = 0;
    while (!(u < cdf[j])) ++j;  // terminates: cdf[b - 1] == 1 > u
    return succ[j];
  }
  return succ[std::upper_bound(cdf, cdf + branching_, u) - cdf];
}

void MarkovChain::Generate(uint64_t split, std::span<int32_t> out) const {
  if (out.empty()) return;
  Rng rng(StreamKey(seed_, kChainSampleStream, split));
  // Stationary start: invert the CDF of pi (one linear pass per stream).
  const double u0 = rng.NextDouble();
  int64_t state = -1;
  double acc = 0.0;
  for (int64_t s = 0; s < num_states_; ++s) {
    if (stationary_[static_cast<size_t>(s)] == 0.0) continue;
    state = s;  // the last state with mass, if rounding leaves u0 above the total
    acc += stationary_[static_cast<size_t>(s)];
    if (u0 < acc) break;
  }
  TESSERA_CHECK(state >= 0);
  size_t i = 0;
  if (order_ == 2) out[i++] = static_cast<int32_t>(state / vocab_size_);
  if (i < out.size()) out[i++] = static_cast<int32_t>(state % vocab_size_);
  for (; i < out.size(); ++i) {
    const int32_t token = Sample(state, rng.NextDouble());
    out[i] = token;
    state = NextState(state, token);
  }
}

std::string MarkovChain::Describe() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "V=%lld order %lld branching %lld concentration %g",
                static_cast<long long>(vocab_size_), static_cast<long long>(order_),
                static_cast<long long>(branching_), static_cast<double>(concentration_));
  return buf;
}

}  // namespace tessera
