// runtime/plan/step_time.cc — see step_time.h.
#include "runtime/plan/step_time.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/param_layout.h"
#include "models/transformer.h"
#include "runtime/train/rank_layout.h"

namespace tessera {
namespace {

struct Link {
  double bandwidth = std::numeric_limits<double>::infinity();
  double latency = 0;
};

// The link a group of `size` ranks `stride` apart spans (mesh order: rank_layout.h).
Link GroupLink(const ClusterSpec& c, int64_t stride, int size) {
  if (size <= 1) return {};
  if (stride * size <= c.devices_per_host) return {c.intra_bandwidth, c.intra_latency};
  return {c.inter_bandwidth, c.inter_latency};
}

double AllReduce(const Link& l, int g, double bytes) {
  if (g <= 1 || bytes <= 0) return 0;
  return 2.0 * (g - 1) / g * bytes / l.bandwidth + 2.0 * (g - 1) * l.latency;
}

// All-gather, reduce-scatter or all-to-all whose whole buffer is `bytes`.
double Exchange(const Link& l, int g, double bytes) {
  if (g <= 1 || bytes <= 0) return 0;
  return (g - 1.0) / g * bytes / l.bandwidth + (g - 1.0) * l.latency;
}

// Bytes of the bandwidth-bound work per token and block, in activation-dtype elements of C:
// Korthikanti et al.'s 34 C + 5 NH T stored per token and layer (fp16 bytes, so 17 C + 2.5
// NH T elements), each written in forward and read again in backward, with as much again for
// the temporaries around them (norm statistics, residual sums, gradient buffers): 4 passes.
constexpr double kPasses = 4.0;

}  // namespace

StageShape ShapeOf(const ModelConfig& m, const ModelPartition& part) {
  StageShape st;
  for (const PipelineChunk& ch : part.chunks()) {
    st.blocks += ch.layer_end - ch.layer_begin;
    st.moe_blocks += m.moe_layers_before(ch.layer_end) - m.moe_layers_before(ch.layer_begin);
    st.first = st.first || ch.first;
    st.last = st.last || ch.last;
  }
  st.params = part.num_local();
  for (int u : part.expert_units()) st.expert_params += part.unit_bounds()[u + 1] - part.unit_bounds()[u];
  return st;
}

Result<std::vector<StageShape>> StageShapes(const Config& c) {
  const ParallelConfig& p = c.parallel;
  std::vector<StageShape> stages;
  for (int s = 0; s < std::max(1, p.pp); ++s) {
    ASSIGN_OR_RETURN(ModelPartition part, RankPartition(c, s * p.dp * p.ep * p.tp));
    stages.push_back(ShapeOf(c.model, part));
  }
  return stages;
}

StepTime PredictStepTime(const Config& c, const ClusterSpec& cl, const std::vector<StageShape>& stages) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  const int tp = std::max(1, p.tp), pp = std::max(1, p.pp), ep = std::max(1, p.ep), dp = std::max(1, p.dp);
  const int v = std::max(1, p.virtual_stages);
  const double B = static_cast<double>(c.train.micro_batch_size), T = static_cast<double>(c.train.seq_len);
  const double micro = static_cast<double>(c.train.grad_accum_steps);
  const double C = static_cast<double>(m.hidden_size), L = static_cast<double>(m.num_layers);
  const double NH = static_cast<double>(m.num_heads), HS = static_cast<double>(m.head_size());
  const double NKV = static_cast<double>(m.kv_heads()), V = static_cast<double>(m.vocab_size);
  const bool low = c.precision != Precision::kFp32;
  const double act = low ? 2.0 : 4.0, pbytes = low ? 2.0 : 4.0;
  const double rbytes = c.mixed_precision.reduce_in_low && low ? 2.0 : 4.0;
  const double tokens = B * T;  // per micro-batch

  // FLOPs per token by block kind and the head, normalised to TrainFlopsPerToken.
  const double Mb = static_cast<double>(m.num_moe_layers());
  const double attn_w = C * (NH + 2 * NKV) * HS + NH * HS * C;
  const double head_w = V * C;
  const double moe_w = static_cast<double>(MoeMatmulParams(m));
  const double dense_mlp_w =
      L > Mb ? std::max(0.0, (static_cast<double>(MatmulParams(m)) - moe_w - head_w - L * attn_w) / (L - Mb)) : 0.0;
  const double w = m.lora.enabled() ? 4.0 : 6.0;
  const double score = 12.0 * NH * HS * T / tp;
  const double f_dense = w * (attn_w + dense_mlp_w) / tp + score;
  const double f_moe = w * attn_w / tp + score + (Mb > 0 ? w * moe_w / Mb : 0.0);
  const double f_head = w * head_w / tp;
  const double f_sum = (L - Mb) * f_dense + Mb * f_moe + f_head;
  const double f_model = TrainFlopsPerToken(m, c.train.seq_len, tp, m.lora.enabled());
  const double norm = f_sum > 0 ? f_model / f_sum : 1.0;
  // Recomputation repeats a forward: the whole block's (a third of its FLOPs) or, selective,
  // the attention scores'.
  const double redo = m.recompute == RecomputePolicy::kFull ? 1.0 / 3.0 : 0.0;
  const double redo_score = m.recompute == RecomputePolicy::kSelective ? score / 3.0 : 0.0;

  // The slowest stage.
  StepTime best;
  const StageShape* slow = nullptr;
  double slow_busy = -1;
  for (const StageShape& st : stages) {
    const double nd = static_cast<double>(st.blocks - st.moe_blocks), nm = static_cast<double>(st.moe_blocks);
    const double flops = norm * (nd * f_dense + nm * f_moe + (st.last ? f_head : 0.0));
    const double extra = norm * ((nd * f_dense + nm * f_moe) * redo + (nd + nm) * redo_score);
    const double per_tok_bytes =
        kPasses * act * (17.0 * C + 2.5 * NH * T / tp) / (p.sequence_parallel ? tp : 1) * (nd + nm);
    const double compute = micro * tokens * (flops + extra) / cl.gemm_flops;
    const double memory = micro * tokens * per_tok_bytes / cl.memory_bandwidth;
    if (compute + memory > slow_busy) {
      slow_busy = compute + memory;
      slow = &st;
      best.compute = compute;
      best.memory = memory;
    }
  }
  if (slow == nullptr) return best;
  const StageShape& st = *slow;
  const double blocks = static_cast<double>(st.blocks), moe_blocks = static_cast<double>(st.moe_blocks);
  // Tensor parallelism: 4 collectives of the block's activations per block and micro-batch.
  const Link tp_link = GroupLink(cl, 1, tp);
  best.tp = micro * blocks * 4.0 * AllReduce(tp_link, tp, tokens * C * act);
  // Expert parallelism: the routed rows there and back, forward and backward.
  const Link ep_link = GroupLink(cl, tp, ep);
  best.ep = micro * moe_blocks * 4.0 * Exchange(ep_link, ep, tokens * m.moe.top_k * C * act);
  // Pipeline: activations out and gradients back at each chunk boundary.
  const Link pp_link = GroupLink(cl, static_cast<int64_t>(tp) * ep * dp, pp);
  const double p2p_bytes = tokens * C * act / (p.sequence_parallel ? tp : 1);
  best.pp = pp > 1 ? micro * v * 2.0 * (p2p_bytes / pp_link.bandwidth + pp_link.latency) : 0.0;
  const double busy = best.compute + best.memory + best.tp + best.ep;
  if (pp > 1) {
    const double stages_idle = p.pipeline_schedule == PipelineSchedule::kInterleaved ? (pp - 1.0) / v : pp - 1.0;
    best.bubble = busy * stages_idle / micro;
  }
  // Data parallelism over the dense group (dp x ep ranks) and the experts' (dp ranks).
  const int dense_g = dp * ep;
  const Link dense_link = GroupLink(cl, tp, dense_g), expert_link = GroupLink(cl, static_cast<int64_t>(tp) * ep, dp);
  const double dense_n = static_cast<double>(st.params - st.expert_params), exp_n = static_cast<double>(st.expert_params);
  const int zero = dense_g > 1 ? p.zero : 0;
  const double backward_last = (best.compute + best.memory) / micro * (2.0 / 3.0);
  auto reduce = [&](const Link& l, int g, double n) {
    if (g <= 1) return 0.0;
    if (zero <= 1) {
      const double all = AllReduce(l, g, n * rbytes);
      const double bucket = AllReduce(l, g, std::min(n, c.comm.bucket_mb * 1048576.0 / 4.0) * rbytes);
      double t = std::max(bucket, all - backward_last);
      if (zero == 1) t += Exchange(l, g, n * pbytes);
      return t;
    }
    // Each micro-batch's unit gradients are reduce-scattered as its backward finishes them.
    const double rs = micro * Exchange(l, g, n * rbytes);
    double t = std::max(rs / std::max(1.0, blocks), rs - backward_last * micro);
    if (zero == 2) return t + Exchange(l, g, n * pbytes);
    // ZeRO 3: every unit gathered before forward and backward in each micro-batch, prefetched
    // behind the previous unit's compute.
    const double gathers = micro * 2.0 * Exchange(l, g, n * pbytes);
    return t + std::max(gathers - (best.compute + best.memory), gathers / std::max(1.0, blocks));
  };
  best.dp = reduce(dense_link, dense_g, dense_n) + reduce(expert_link, dp, exp_n);
  // The optimizer over the rank's pieces.
  const double pieces = (zero >= 1 ? dense_n / dense_g : dense_n) + (zero >= 1 && dp > 1 ? exp_n / dp : exp_n);
  const double adam_bytes = pieces * (28.0 + (low ? 10.0 : 0.0));
  if (c.optimizer.offload == OptimizerOffload::kNvme && cl.nvme_bandwidth > 0) {
    const double file = pieces * 4.0 * (low ? 3.0 : 2.0) * 2.0;  // read and written back
    best.optimizer = std::max(adam_bytes / cl.memory_bandwidth, file / (cl.nvme_bandwidth / cl.devices_per_host));
  } else {
    best.optimizer = adam_bytes / cl.memory_bandwidth;
  }
  if (c.optimizer.offload != OptimizerOffload::kNone && !cl.host_is_device()) {
    best.optimizer += pieces * (4.0 + pbytes) / cl.host_device_bandwidth;
  }
  best.total = busy + best.bubble + best.pp + best.dp + best.optimizer;
  const double global_tokens = tokens * micro * dp * ep;
  best.tokens_per_s = best.total > 0 ? global_tokens / best.total : 0;
  // Model FLOPs of the whole step over every device's peak: TrainFlopsPerToken is one tp
  // rank's share of the whole model, which pp stages divide.
  best.mfu = best.total > 0 ? f_model * tokens * micro / pp / best.total / cl.peak_flops : 0;
  const std::pair<const char*, double> parts[] = {
      {"compute", best.compute}, {"memory-bound work", best.memory}, {"tp", best.tp}, {"ep", best.ep},
      {"pp", best.pp}, {"bubble", best.bubble}, {"dp", best.dp}, {"optimizer", best.optimizer}};
  best.slowest = std::max_element(std::begin(parts), std::end(parts), [](auto& a, auto& b) { return a.second < b.second; })->first;
  return best;
}

}  // namespace tessera
