// runtime/train/moe_balance.cc — FinishMoeStep and the MoE report's formatting (contract in
// moe_balance.h).
#include "runtime/train/moe_balance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "runtime/train/grad_sync.h"

namespace tessera {
namespace {

// Per MoE block, in this order: counts (E), assigned, kept, aux-loss sum, calls (summed over
// the data-parallel ranks), then the bias (E, the holder's, after the update).
int64_t Width(int64_t E) { return 2 * E + 4; }

// Sums `v` (same length on every rank of `comm`) over the group, rank order.
Result<std::vector<double>> SumOver(Communicator* comm, const std::vector<double>& v) {
  if (comm == nullptr) return v;
  ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(comm, v));
  std::vector<double> sum(v.size(), 0.0);
  for (size_t r = 0; r < all.size() / v.size(); ++r) {
    for (size_t i = 0; i < v.size(); ++i) sum[i] += all[r * v.size() + i];
  }
  return sum;
}

void MoveBias(MoeLayerState& s, const double* counts, float rate) {
  const size_t E = s.bias.size();
  double mean = 0;
  for (size_t e = 0; e < E; ++e) mean += counts[e];
  mean /= static_cast<double>(E);
  for (size_t e = 0; e < E; ++e) {
    const double diff = mean - counts[e];
    s.bias[e] += rate * static_cast<float>((diff > 0) - (diff < 0));
  }
}

}  // namespace

Result<MoeStepReport> FinishMoeStep(const ModelConfig& model, std::span<const LocalMoeLayer> local,
                                    Communicator* dp, Communicator* pp, bool applied) {
  MoeStepReport report;
  const int64_t M = model.num_moe_layers();
  if (M == 0) return report;
  const int64_t E = model.moe.num_experts, W = Width(E);
  std::vector<double> v(static_cast<size_t>(M * W), 0.0);
  for (const LocalMoeLayer& l : local) {
    double* p = v.data() + model.moe_layers_before(l.layer) * W;
    for (int64_t e = 0; e < E; ++e) p[e] = static_cast<double>(l.state->counts[static_cast<size_t>(e)]);
    p[E] = static_cast<double>(l.state->assigned);
    p[E + 1] = static_cast<double>(l.state->kept);
    p[E + 2] = l.state->aux_loss;
    p[E + 3] = static_cast<double>(l.state->calls);
  }
  ASSIGN_OR_RETURN(v, SumOver(dp, v));
  const float rate = model.moe.bias_update_rate;
  for (const LocalMoeLayer& l : local) {
    double* p = v.data() + model.moe_layers_before(l.layer) * W;
    if (applied && rate > 0) MoveBias(*l.state, p, rate);
    for (int64_t e = 0; e < E; ++e) p[E + 4 + e] = l.state->bias[static_cast<size_t>(e)];
    l.state->ResetStats();
  }
  ASSIGN_OR_RETURN(v, SumOver(pp, v));  // each block is held by one stage: the others add 0
  for (int64_t layer = 0, m = 0; layer < model.num_layers; ++layer) {
    if (!model.is_moe_layer(layer)) continue;
    const double* p = v.data() + m++ * W;
    MoeLayerReport r;
    r.layer = layer;
    double total = 0, top = 0;
    for (int64_t e = 0; e < E; ++e) {
      r.counts.push_back(static_cast<int64_t>(p[e]));
      total += p[e];
      top = std::max(top, p[e]);
    }
    r.imbalance = total > 0 ? top / (total / static_cast<double>(E)) : 0.0;
    r.dropped = p[E] > 0 ? 1.0 - p[E + 1] / p[E] : 0.0;
    r.aux_loss = p[E + 3] > 0 ? p[E + 2] / p[E + 3] : 0.0;
    for (int64_t e = 0; e < E; ++e) r.bias.push_back(static_cast<float>(p[E + 4 + e]));
    const auto [lo, hi] = std::minmax_element(r.bias.begin(), r.bias.end());
    r.bias_min = *lo;
    r.bias_max = *hi;
    report.aux_loss += r.aux_loss;
    if (r.imbalance > report.worst_imbalance) {
      report.worst_imbalance = r.imbalance;
      report.worst_layer = layer;
    }
    report.layers.push_back(std::move(r));
  }
  return report;
}

std::string FormatMoeProgress(const MoeStepReport& r) {
  if (r.layers.empty()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "imbalance %.2f (layer %lld) | aux %.4f", r.worst_imbalance,
                static_cast<long long>(r.worst_layer), r.aux_loss);
  return buf;
}

std::string FormatMoeHistogram(const std::vector<MoeLayerReport>& summed, int64_t steps) {
  if (summed.empty()) return "";
  std::string out = "  experts' share of the tokens, last " + std::to_string(steps) +
                    " step" + (steps == 1 ? "" : "s") + " (# = 2%; a balanced expert gets 1/E):\n";
  char buf[160];
  for (const MoeLayerReport& r : summed) {
    const double total = std::accumulate(r.counts.begin(), r.counts.end(), 0.0);
    const size_t E = r.counts.size();
    std::snprintf(buf, sizeof buf, "    layer %lld (imbalance %.2f, dropped %.1f%%)\n",
                  static_cast<long long>(r.layer), r.imbalance, 100.0 * r.dropped);
    out += buf;
    // Up to 16 experts each; beyond, the 8 hottest and the 8 coldest.
    std::vector<size_t> order(E);
    std::iota(order.begin(), order.end(), size_t{0});
    if (E > 16) {
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return r.counts[a] > r.counts[b]; });
      order.erase(order.begin() + 8, order.end() - 8);
    }
    for (size_t i = 0; i < order.size(); ++i) {
      if (E > 16 && i == 8) out += "      ...\n";
      const size_t e = order[i];
      const double share = total > 0 ? r.counts[e] / total : 0.0;
      const int bars = static_cast<int>(std::lround(share * 50.0));
      std::snprintf(buf, sizeof buf, "      expert %3zu %5.1f%% %s\n", e, 100.0 * share,
                    std::string(static_cast<size_t>(std::min(bars, 50)), '#').c_str());
      out += buf;
    }
  }
  return out;
}

}  // namespace tessera
