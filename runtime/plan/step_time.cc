// runtime/plan/step_time.cc — see step_time.h.
#include "runtime/plan/step_time.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/param_layout.h"
#include "models/transformer.h"

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

}  // namespace

// The shape of a stage holding `chunks`, from the unit sizes of the whole model's partition at
// the same tp and ep (models/partition.h's units: 0 embeddings, 1 + l block l, L + 1 the final
// norm and head, L + 2 + m the m-th MoE block's experts, L + 2 + M + l block l's adapters). A
// last stage that is not the first holds a copy of tied embeddings. Equal to what the stage's
// own partition holds (plan_test checks), without building one per layout.
StageShape ShapeFromUnits(const ModelConfig& m, const ModelPartition& whole,
                          const std::vector<PipelineChunk>& chunks) {
  const std::vector<int64_t>& b = whole.unit_bounds();
  auto unit = [&](int64_t u) { return b[static_cast<size_t>(u + 1)] - b[static_cast<size_t>(u)]; };
  const int64_t L = m.num_layers, M = m.num_moe_layers();
  StageShape st;
  for (const PipelineChunk& ch : chunks) {
    for (int64_t l = ch.layer_begin; l < ch.layer_end; ++l) {
      st.params += unit(1 + l);
      if (m.is_moe_layer(l)) {
        const int64_t e = unit(L + 2 + m.moe_layers_before(l));
        st.params += e;
        st.expert_params += e;
        ++st.moe_blocks;
      }
      if (m.lora.enabled()) st.params += unit(L + 2 + M + l);
      if (m.lora.enabled()) st.frozen_params += unit(1 + l);
      ++st.blocks;
    }
    const int64_t ends = (ch.first || (ch.last && m.tie_embeddings) ? unit(0) : 0) + (ch.last ? unit(L + 1) : 0);
    st.params += ends;
    if (m.lora.enabled()) st.frozen_params += ends;
    st.last = st.last || ch.last;
  }
  return st;
}

namespace {

// Seconds of one micro-batch's GEMMs on one rank: forward, backward (input and weight
// gradients) and the forward recomputation repeats, each GEMM at the rate of its shape.
struct GemmSeconds {
  double dense = 0, moe = 0, head = 0;  // per dense block, per MoE block, the LM head
};

GemmSeconds BlockGemmSeconds(const Config& c, const ClusterSpec& cl) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  const bool fp32 = c.precision == Precision::kFp32;
  const double tp = std::max(1, p.tp), ep = std::max(1, p.ep);
  const double B = static_cast<double>(c.train.micro_batch_size), T = static_cast<double>(c.train.seq_len);
  const double N = B * T, C = static_cast<double>(m.hidden_size), NH = static_cast<double>(m.num_heads);
  const double HS = static_cast<double>(m.head_size()), NKV = static_cast<double>(m.kv_heads());
  const double F = static_cast<double>(m.ffn_size()), V = static_cast<double>(m.vocab_size);
  const bool llama = m.family != ModelFamily::kGpt2;
  const bool full = m.recompute == RecomputePolicy::kFull;
  // Passes over a weight GEMM: forward, input gradient, weight gradient (none for a frozen
  // base), and the forward again under full recomputation.
  const double passes = (m.lora.enabled() ? 2.0 : 3.0) + (full ? 1.0 : 0.0);
  auto gemm = [&](double rows, double in, double out, bool in_fp32) {
    return 2.0 * rows * in * out / cl.GemmRate(in_fp32, rows, out, in);
  };
  auto linear = [&](double rows, double in, double out) { return passes * gemm(rows, in, out, fp32); };
  // Attention: per sequence and local head, QK^T and PV forward, four GEMMs backward, the
  // forward's two again under selective or full recomputation (in fp32 on a CPU).
  const double attn_passes = 6.0 + (m.recompute != RecomputePolicy::kNone ? 2.0 : 0.0);
  const double attention = B * NH / tp * attn_passes * gemm(T, HS, T, fp32 || cl.kind == DeviceKind::kCpu);
  const double qkv = linear(N, C, (NH + 2 * NKV) * HS / tp) + linear(N, NH * HS / tp, C);
  auto mlp = [&](double rows, double width) {  // SwiGLU: gate|up then down; GELU: fc then out
    return linear(rows, C, (llama ? 2.0 : 1.0) * width) + linear(rows, width, C);
  };
  GemmSeconds g;
  g.dense = attention + qkv + mlp(N, F / tp);
  if (m.moe.enabled()) {
    const double E = static_cast<double>(m.moe.num_experts), Fe = static_cast<double>(m.expert_ffn());
    // Balanced routing: each of the rank's E / ep experts gets N top_k ep / E rows.
    const double rows = N * static_cast<double>(m.moe.top_k) * ep / E;
    g.moe = attention + qkv + linear(N, C, E) + (E / ep) * mlp(rows, Fe);
    if (m.moe.shared_experts > 0) g.moe += mlp(N, static_cast<double>(m.moe.shared_experts) * Fe);
  }
  // The classifier runs on chunks of at most 256 rows (models/transformer.cc).
  const double rows = std::clamp(std::floor(16.0 * 1048576.0 / V), 64.0, 256.0);
  const double chunks = std::ceil(N / rows), chunk = std::ceil(N / chunks);
  g.head = chunks * (m.lora.enabled() ? 2.0 : 3.0) * gemm(chunk, C, std::ceil(V / tp), fp32);
  return g;
}

}  // namespace

StepTime PredictStepTime(const Config& c, const ClusterSpec& cl, const std::vector<StageShape>& stages,
                         double flops_per_token) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  const int tp = std::max(1, p.tp), pp = std::max(1, p.pp), ep = std::max(1, p.ep), dp = std::max(1, p.dp);
  const int v = std::max(1, p.virtual_stages);
  const double B = static_cast<double>(c.train.micro_batch_size), T = static_cast<double>(c.train.seq_len);
  const double micro = static_cast<double>(c.train.grad_accum_steps);
  const double C = static_cast<double>(m.hidden_size), NH = static_cast<double>(m.num_heads);
  const bool low = c.precision != Precision::kFp32;
  const double act = low ? 2.0 : 4.0, pbytes = low ? 2.0 : 4.0;
  const double rbytes = c.mixed_precision.reduce_in_low && low ? 2.0 : 4.0;
  const double tokens = B * T;  // per micro-batch
  const GemmSeconds gemm = BlockGemmSeconds(c, cl);

  // The slowest stage.
  StepTime best;
  const StageShape* slow = nullptr;
  double slow_busy = -1;
  // Element-wise work per token (cluster.h elementwise_rate: one unit = an activation's
  // forward and backward): the MLP's activation, the causal softmax (T / 2 keys on average per
  // head), the norms and residual adds (1.5 C; divided by tp under sequence parallelism); an
  // MoE block's routed and shared activations and router softmax; the LM head's softmax over
  // the vocabulary. Recomputation repeats the forward half.
  const double T_ = T, F = static_cast<double>(m.ffn_size());
  const double softmax = NH * T_ / 2.0 / tp, norms = 1.5 * C / (p.sequence_parallel ? tp : 1);
  const double redo = m.recompute == RecomputePolicy::kFull ? 0.5 : 0.0;
  const double redo_softmax = m.recompute == RecomputePolicy::kSelective ? 0.5 * softmax : 0.0;
  const double dense_units = (F / tp + softmax + norms) * (1.0 + redo) + redo_softmax;
  double moe_units = 0;
  if (m.moe.enabled()) {
    const double Fe = static_cast<double>(m.expert_ffn());
    moe_units = (static_cast<double>(m.moe.top_k + m.moe.shared_experts) * Fe +
                 static_cast<double>(m.moe.num_experts) + softmax + norms) * (1.0 + redo) + redo_softmax;
  }
  const double head_units = std::ceil(static_cast<double>(m.vocab_size) / tp);
  for (const StageShape& st : stages) {
    const double nd = static_cast<double>(st.blocks - st.moe_blocks), nm = static_cast<double>(st.moe_blocks);
    const double compute = micro * (nd * gemm.dense + nm * gemm.moe + (st.last ? gemm.head : 0.0));
    const double units = nd * dense_units + nm * moe_units + (st.last ? head_units : 0.0);
    const double memory = micro * tokens * units / cl.elementwise_rate;
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
  // What trains: a frozen LoRA base is neither reduced nor stepped (experts are never adapted).
  const double dense_n = static_cast<double>(st.params - st.expert_params - st.frozen_params);
  const double exp_n = m.lora.enabled() ? 0.0 : static_cast<double>(st.expert_params);
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
    // The host's disk is shared by its ranks that offload.
    const double sharing = std::min(cl.devices_per_host, p.world_size());
    best.optimizer = std::max(adam_bytes / cl.memory_bandwidth, file / (cl.nvme_bandwidth / sharing));
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
  const double f_model = flops_per_token >= 0 ? flops_per_token
                                              : TrainFlopsPerToken(m, c.train.seq_len, tp, m.lora.enabled());
  // The denominator: the rated peak for bf16/fp16, the fp32 GEMM rate for fp32 runs (as the
  // trainer's MFU counts against the GEMM path the run takes).
  const double peak = low ? cl.peak_flops : cl.fp32_gemm_flops;
  best.mfu = best.total > 0 ? f_model * tokens * micro / pp / best.total / peak : 0;
  const std::pair<const char*, double> parts[] = {
      {"compute", best.compute}, {"element-wise work", best.memory}, {"tp", best.tp}, {"ep", best.ep},
      {"pp", best.pp}, {"bubble", best.bubble}, {"dp", best.dp}, {"optimizer", best.optimizer}};
  best.slowest = std::max_element(std::begin(parts), std::end(parts), [](auto& a, auto& b) { return a.second < b.second; })->first;
  return best;
}

}  // namespace tessera
