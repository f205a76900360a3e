// runtime/kernels/cuda/moe.cu — the mixture-of-experts kernels of the CUDA backend (launch.h):
// routing and its backward, the auxiliary losses' gradient, the gather of tokens into expert
// order and the gated combine back, each with its backward. Contracts: cpu/moe.h, whose
// moe.cc is the reference these kernels port; routing rules: moe_routing.h.
//
// Parallel structure: the per-row router kernels (route, route backward, aux backward) give
// one warp to a token's row of E experts, each lane the experts lane, lane + 32, ...; the
// data-movement kernels give one block to a row of C channels, one thread to a channel.
// Determinism: no atomics. A row's sum over experts or channels is a fixed per-lane stride
// then the fixed shuffle tree of device_util.cuh, accumulated in double; a sum over a
// token's slots runs in slot order inside one thread, as on the CPU. The top-k selection is
// exact: an expert is ranked by one 64-bit key (its q, then its index), so the warp's
// maximum is the CPU's choice whatever the tree, and the CPU's tie rule (lower index first)
// is part of the key.
#include <cstdint>

#include "runtime/kernels/cuda/cuda_check.h"
#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

constexpr int kRowWarps = 4;                // rows (one per warp) per block of the router kernels
constexpr size_t kMaxShared = 48 * 1024;    // dynamic shared memory without an opt-in
constexpr unsigned kFullMask = 0xffffffffu;

// ---- launch geometry ----------------------------------------------------------------------

// The router kernels: warp w of the grid takes rows w, w + warps in grid, ...
__device__ inline int64_t WarpRowStart() {
  return static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
}
__device__ inline int64_t WarpRowStride() {
  return static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
}

// The channel kernels: one block per row of C channels.
inline int ChannelThreads(int64_t C) { return RowBlockThreads(C, kThreads); }
inline unsigned RowBlocks(int64_t rows) { return BlocksFor(rows, 1); }

// ---- ranking keys: the CPU's "largest value, ties lower index" as one unsigned order -------

// Bits of v that order as v does. NaN ranks as -inf (the CPU's comparisons have no order for
// it); -0 as +0, which the CPU's `>` treats as equal.
__device__ inline uint32_t OrderedBits(float v) {
  if (v != v) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Larger key = ranked first: larger value, then lower index. Never 0 (the lowest value,
// -inf, has nonzero ordered bits), so 0 means "no candidate".
__device__ inline uint64_t RankKey(float v, int64_t index) {
  return (static_cast<uint64_t>(OrderedBits(v)) << 32) |
         (0xffffffffu - static_cast<uint32_t>(index));
}
__device__ inline int64_t KeyIndex(uint64_t key) {
  return static_cast<int64_t>(0xffffffffu - static_cast<uint32_t>(key & 0xffffffffu));
}

__device__ inline uint64_t WarpMaxKey(uint64_t v) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const uint64_t other = __shfl_xor_sync(kFullMask, v, o);
    if (other > v) v = other;
  }
  return v;
}

// ---- routing ------------------------------------------------------------------------------

// The selection value q_e = s_e + bias_e (the balancing bias steers selection only).
__device__ inline float SelectionValue(const float* s, const float* bias, int64_t e) {
  return s[e] + (bias ? bias[e] : 0.0f);
}

// s = sigmoid(r) or softmax(r) of one row, lane-strided; the softmax sum in double.
__device__ void WriteScores(const MoeRouterSpec& spec, const float* r, float* s, int lane) {
  const int64_t E = spec.E;
  if (spec.sigmoid) {
    for (int64_t e = lane; e < E; e += kWarp) s[e] = 1.0f / (1.0f + expf(-r[e]));
    return;
  }
  float m = -INFINITY;
  for (int64_t e = lane; e < E; e += kWarp) m = fmaxf(m, r[e]);
  m = WarpMax(m);
  double sum = 0.0;
  for (int64_t e = lane; e < E; e += kWarp) {
    s[e] = expf(r[e] - m);
    sum += s[e];
  }
  const float inv = 1.0f / static_cast<float>(WarpSum(sum));
  for (int64_t e = lane; e < E; e += kWarp) s[e] *= inv;  // each lane rescales its own writes
}

// group_score[g] = the sum of group g's two largest q (its one q for groups of one), added
// largest first from 0 as the CPU does, so the bits are the CPU's. Lane-strided over groups.
__device__ void WriteGroupScores(const MoeRouterSpec& spec, const float* s, const float* bias,
                                 float* group_score, int lane) {
  const int64_t G = spec.groups, size = spec.E / G;
  for (int64_t g = lane; g < G; g += kWarp) {
    float top0 = -INFINITY, top1 = -INFINITY;
    for (int64_t e = g * size; e < (g + 1) * size; ++e) {
      const float q = SelectionValue(s, bias, e);
      if (q > top0) {
        top1 = top0;
        top0 = q;
      } else if (q > top1) {
        top1 = q;
      }
    }
    float sum = 0.0f;
    sum += top0;
    if (size >= 2) sum += top1;
    group_score[g] = sum;
  }
}

// The key of the groups_kept-th best group: group g is kept iff its key is >= this one. Each
// round takes the best group ranked below the previous pick, so no "kept" set is stored.
__device__ uint64_t KeptGroupThreshold(const MoeRouterSpec& spec, const float* group_score,
                                       int lane) {
  uint64_t prev = ~0ull;
  for (int64_t round = 0; round < spec.groups_kept; ++round) {
    uint64_t best = 0;
    for (int64_t g = lane; g < spec.groups; g += kWarp) {
      const uint64_t key = RankKey(group_score[g], g);
      if (key < prev && key > best) best = key;
    }
    prev = WarpMaxKey(best);
  }
  return prev;
}

// ex[j] = the j-th best allowed expert by q, for j < k. Round j takes the best expert ranked
// below round j - 1's pick: the CPU's repeated argmax with a `taken` set, without the set.
__device__ void SelectExperts(const MoeRouterSpec& spec, const float* s, const float* bias,
                              const float* group_score, uint64_t group_threshold, int32_t* ex,
                              int lane) {
  const int64_t E = spec.E, size = E / spec.groups;
  uint64_t prev = ~0ull;
  for (int64_t j = 0; j < spec.k; ++j) {
    uint64_t best = 0;
    for (int64_t e = lane; e < E; e += kWarp) {
      if (spec.groups > 1) {
        const int64_t g = e / size;
        if (RankKey(group_score[g], g) < group_threshold) continue;  // group not kept
      }
      const uint64_t key = RankKey(SelectionValue(s, bias, e), e);
      if (key < prev && key > best) best = key;
    }
    prev = WarpMaxKey(best);  // the host checks leave at least k allowed experts: never 0
    if (lane == 0) ex[j] = static_cast<int32_t>(KeyIndex(prev));
  }
}

// The denominator of normalised gates, summed in slot order with the CPU's guard (cpu/moe.cc
// GateSum: keeps it positive when every chosen score has underflowed).
__device__ inline float GateSum(int64_t k, const float* s, const int32_t* ex) {
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += s[ex[j]];
  return sum + 1e-20f;
}

// w_j = s[e_j] (/ GateSum) * route_scale, lane-strided over slots. Every lane computes the
// same sum (the loads are broadcasts), so no shuffle is needed.
__device__ void WriteGates(const MoeRouterSpec& spec, const float* s, const int32_t* ex,
                           float* w, int lane) {
  const float inv = spec.normalize ? 1.0f / GateSum(spec.k, s, ex) : 1.0f;
  for (int64_t j = lane; j < spec.k; j += kWarp) w[j] = s[ex[j]] * inv * spec.route_scale;
}

// One warp per token row. The scores output doubles as the working copy of s; the warp's
// shared slice holds the group scores. __syncwarp orders each phase's global and shared
// writes before other lanes read them.
__global__ void MoeRouteKernel(MoeRouterSpec spec, const float* logits, const float* bias,
                               float* scores, int32_t* expert, float* gate, int64_t R) {
  extern __shared__ float group_shared[];
  const int lane = threadIdx.x % kWarp;
  float* group_score = group_shared + (threadIdx.x / kWarp) * spec.groups;
  for (int64_t t = WarpRowStart(); t < R; t += WarpRowStride()) {
    float* s = scores + t * spec.E;
    int32_t* ex = expert + t * spec.k;
    WriteScores(spec, logits + t * spec.E, s, lane);
    __syncwarp();
    uint64_t threshold = 0;  // every group kept
    if (spec.groups > 1) {
      WriteGroupScores(spec, s, bias, group_score, lane);
      __syncwarp();
      threshold = KeptGroupThreshold(spec, group_score, lane);
    }
    SelectExperts(spec, s, bias, group_score, threshold, ex, lane);
    __syncwarp();
    WriteGates(spec, s, ex, gate + t * spec.k, lane);
    __syncwarp();  // the next row rewrites group_score
  }
}

// d_s of the gates, scattered into the row dr (zeroed first) by lane 0 in slot order, as the
// CPU's `+=` into d_s: w_i = c s_i / D, D = sum_j s_j (+ eps):
// d s_m = c (dw_m / D - sum_i dw_i s_i / D^2); unnormalised, d s_m = c dw_m.
__device__ void ScatterGateGrad(const MoeRouterSpec& spec, const float* s, const int32_t* ex,
                                const float* dw, float* dr) {
  const float c = spec.route_scale;
  if (!spec.normalize) {
    for (int64_t j = 0; j < spec.k; ++j) dr[ex[j]] += c * dw[j];
    return;
  }
  const float D = GateSum(spec.k, s, ex);
  float dot = 0.0f;
  for (int64_t j = 0; j < spec.k; ++j) dot += dw[j] * s[ex[j]];
  for (int64_t j = 0; j < spec.k; ++j) dr[ex[j]] += c * (dw[j] / D - dot / (D * D));
}

// One warp per token row: the row of d_logits holds d_s, then becomes d_logits in place.
__global__ void MoeRouteBackwardKernel(MoeRouterSpec spec, const float* scores,
                                       const int32_t* expert, const float* d_gate,
                                       float* d_logits, int64_t R) {
  const int lane = threadIdx.x % kWarp;
  const int64_t E = spec.E;
  for (int64_t t = WarpRowStart(); t < R; t += WarpRowStride()) {
    const float* s = scores + t * E;
    float* dr = d_logits + t * E;
    for (int64_t e = lane; e < E; e += kWarp) dr[e] = 0.0f;
    __syncwarp();
    if (lane == 0) ScatterGateGrad(spec, s, expert + t * spec.k, d_gate + t * spec.k, dr);
    __syncwarp();
    if (spec.sigmoid) {
      for (int64_t e = lane; e < E; e += kWarp) dr[e] = dr[e] * s[e] * (1.0f - s[e]);
      continue;
    }
    double part = 0.0;  // softmax: dr = s (d_s - <d_s, s>)
    for (int64_t e = lane; e < E; e += kWarp) part += static_cast<double>(dr[e] * s[e]);
    const float dot = static_cast<float>(WarpSum(part));
    for (int64_t e = lane; e < E; e += kWarp) dr[e] = s[e] * (dr[e] - dot);
  }
}

// ---- auxiliary losses ---------------------------------------------------------------------

// dL/dp_e = switch_coef[e] + seq[e] (either may be absent).
__device__ inline float ProbGrad(const float* switch_coef, const float* seq, int64_t e) {
  return (switch_coef ? switch_coef[e] : 0.0f) + (seq ? seq[e] : 0.0f);
}

// One warp per token row; d_logits += the balancing term, then += the z-loss term, per
// element in that order as on the CPU. The row's reductions come first, then one pass writes.
__global__ void MoeAuxBackwardKernel(MoeRouterSpec spec, const float* logits,
                                     const float* scores, MoeAuxGrad aux, float* d_logits,
                                     int64_t R) {
  const int lane = threadIdx.x % kWarp;
  const int64_t E = spec.E;
  const bool balance = aux.switch_coef != nullptr || aux.seq_coef != nullptr;
  const bool z = aux.z_scale != 0.0f;
  for (int64_t t = WarpRowStart(); t < R; t += WarpRowStride()) {
    const float* s = scores + t * E;
    const float* r = logits + t * E;
    float* dr = d_logits + t * E;
    const float* seq =
        aux.seq_coef != nullptr ? aux.seq_coef + ((aux.row0 + t) / aux.T - aux.seq0) * E : nullptr;
    // Balancing: p = s (softmax) or s / S (sigmoid); dot = sum_e d_p_e p_e.
    float S = 1.0f, dot = 0.0f;
    if (balance) {
      if (spec.sigmoid) {
        double part = 0.0;
        for (int64_t e = lane; e < E; e += kWarp) part += s[e];
        S = static_cast<float>(WarpSum(part));
      }
      double part = 0.0;
      for (int64_t e = lane; e < E; e += kWarp) {
        const float term = ProbGrad(aux.switch_coef, seq, e) * s[e];
        part += spec.sigmoid ? term / S : term;
      }
      dot = static_cast<float>(WarpSum(part));
    }
    // z-loss: lse = m + log(sum_e exp(r_e - m)).
    float m = -INFINITY, sum = 1.0f, lse = 0.0f;
    if (z) {
      for (int64_t e = lane; e < E; e += kWarp) m = fmaxf(m, r[e]);
      m = WarpMax(m);
      double part = 0.0;
      for (int64_t e = lane; e < E; e += kWarp) part += expf(r[e] - m);
      sum = static_cast<float>(WarpSum(part));
      lse = m + logf(sum);
    }
    for (int64_t e = lane; e < E; e += kWarp) {
      float v = dr[e];
      if (balance) {
        const float dp = ProbGrad(aux.switch_coef, seq, e);
        if (spec.sigmoid) {
          const float ds = (dp - dot) / S;  // p = s / S, then through the sigmoid
          v += ds * s[e] * (1.0f - s[e]);
        } else {
          v += s[e] * (dp - dot);
        }
      }
      if (z) v += aux.z_scale * lse * expf(r[e] - m) / sum;  // 2 and the mean are in z_scale
      dr[e] = v;
    }
  }
}

// ---- gather and combine: one block per row, one thread per channel -----------------------

__global__ void MoeGatherKernel(float* rows, const float* x, const int32_t* token_of_row,
                                int64_t n, int64_t C) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* src = x + static_cast<int64_t>(token_of_row[i]) * C;
    float* dst = rows + i * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
  }
}

// d_x[t] += the kept slots' rows, added one at a time in slot order (the CPU's bits).
__global__ void MoeGatherBackwardKernel(float* d_x, const float* d_rows, const int32_t* row_of,
                                        int64_t R, int64_t k, int64_t C) {
  for (int64_t t = blockIdx.x; t < R; t += gridDim.x) {
    const int32_t* rows = row_of + t * k;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = d_x[t * C + c];
      for (int64_t j = 0; j < k; ++j) {
        if (rows[j] < 0) continue;  // dropped by capacity
        acc += d_rows[static_cast<int64_t>(rows[j]) * C + c];
      }
      d_x[t * C + c] = acc;
    }
  }
}

// out[t] = sum over kept slots, in slot order, of gate * y[row] (0 when all are dropped).
__global__ void MoeCombineKernel(float* out, const float* y, const float* gate,
                                 const int32_t* row_of, int64_t R, int64_t k, int64_t C) {
  for (int64_t t = blockIdx.x; t < R; t += gridDim.x) {
    const int32_t* rows = row_of + t * k;
    const float* g = gate + t * k;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        if (rows[j] < 0) continue;
        acc += g[j] * y[static_cast<int64_t>(rows[j]) * C + c];
      }
      out[t * C + c] = acc;
    }
  }
}

// One block per assignment a = t * k + j: d_y[row] = gate * d_out[t] and d_gate[a] =
// <d_out[t], y[row]> in double (0 when dropped). The branch on row is uniform in the block,
// so BlockSum's barriers are reached by all threads or none.
__global__ void MoeCombineBackwardKernel(float* d_y, float* d_gate, const float* d_out,
                                         const float* y, const float* gate,
                                         const int32_t* row_of, int64_t R, int64_t k,
                                         int64_t C) {
  __shared__ double shared[kWarp];
  for (int64_t a = blockIdx.x; a < R * k; a += gridDim.x) {
    const int64_t row = row_of[a];
    if (row < 0) {
      if (threadIdx.x == 0) d_gate[a] = 0.0f;
      continue;
    }
    const float g = gate[a];
    const float* dout = d_out + (a / k) * C;
    const float* yr = y + row * C;
    float* dy = d_y + row * C;
    double part = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      dy[c] = g * dout[c];
      part += static_cast<double>(dout[c]) * yr[c];
    }
    const double dot = BlockSum(part, shared);
    if (threadIdx.x == 0) d_gate[a] = static_cast<float>(dot);
  }
}

// ---- gated add (a gated shared expert) ----------------------------------------------------

// sigmoid in double, rounded once: cpu/moe.cc's Sigmoid.
__device__ inline float SigmoidD(float z) {
  return static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(z))));
}

__global__ void GatedAddForwardKernel(float* out, const float* x, const float* logit, int64_t R,
                                      int64_t C) {
  for (int64_t t = blockIdx.x; t < R; t += gridDim.x) {
    const float g = SigmoidD(logit[t]);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[t * C + c] += g * x[t * C + c];
  }
}

// d_x = g d_out; d_logit = g (1 - g) <d_out, x>, the dot and the product in double.
__global__ void GatedAddBackwardKernel(float* d_x, float* d_logit, const float* d_out,
                                       const float* x, const float* logit, int64_t R,
                                       int64_t C) {
  __shared__ double shared[kWarp];
  for (int64_t t = blockIdx.x; t < R; t += gridDim.x) {
    const float g = SigmoidD(logit[t]);
    double part = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      d_x[t * C + c] = g * d_out[t * C + c];
      part += static_cast<double>(d_out[t * C + c]) * x[t * C + c];
    }
    const double dot = BlockSum(part, shared);
    if (threadIdx.x == 0) d_logit[t] = static_cast<float>(dot * g * (1.0 - g));
  }
}

// The spec's invariants (model_config.cc enforces them for configs): a bad spec here would
// make the selection run out of candidates, so it is a bug.
void CheckSpec(const MoeRouterSpec& spec) {
  TESSERA_CHECK_MSG(spec.E >= 1 && spec.E <= INT32_MAX, "E=%lld", static_cast<long long>(spec.E));
  TESSERA_CHECK_MSG(spec.groups >= 1 && spec.E % spec.groups == 0, "groups=%lld E=%lld",
                    static_cast<long long>(spec.groups), static_cast<long long>(spec.E));
  TESSERA_CHECK_MSG(spec.groups_kept >= 1 && spec.groups_kept <= spec.groups,
                    "groups_kept=%lld groups=%lld", static_cast<long long>(spec.groups_kept),
                    static_cast<long long>(spec.groups));
  TESSERA_CHECK_MSG(spec.k >= 1 && spec.k <= spec.groups_kept * (spec.E / spec.groups),
                    "k=%lld exceeds the kept groups' experts", static_cast<long long>(spec.k));
}

// Blocks of `warps` warps covering R rows at one row per warp (grid-stride beyond the cap).
inline unsigned RouterBlocks(int64_t R, int warps) { return BlocksFor(R, warps); }

}  // namespace

void MoeRoute(cudaStream_t s, const MoeRouterSpec& spec, const float* logits, const float* bias,
              float* scores, int32_t* expert, float* gate, int64_t R) {
  if (R == 0) return;
  CheckSpec(spec);
  // Each warp holds its row's group scores in shared memory; fewer warps when G is large.
  const size_t group_bytes = spec.groups > 1 ? spec.groups * sizeof(float) : 0;
  TESSERA_CHECK_MSG(group_bytes <= kMaxShared, "groups=%lld: too many for shared memory",
                    static_cast<long long>(spec.groups));
  int warps = kRowWarps;
  while (warps > 1 && warps * group_bytes > kMaxShared) --warps;
  MoeRouteKernel<<<RouterBlocks(R, warps), warps * kWarp, warps * group_bytes, s>>>(
      spec, logits, bias, scores, expert, gate, R);
  CUDA_CHECK_LAUNCH();
}

void MoeRouteBackward(cudaStream_t s, const MoeRouterSpec& spec, const float* scores,
                      const int32_t* expert, const float* d_gate, float* d_logits, int64_t R) {
  if (R == 0 || spec.E == 0) return;
  MoeRouteBackwardKernel<<<RouterBlocks(R, kRowWarps), kRowWarps * kWarp, 0, s>>>(
      spec, scores, expert, d_gate, d_logits, R);
  CUDA_CHECK_LAUNCH();
}

void MoeGather(cudaStream_t s, float* rows, const float* x, const int32_t* token_of_row,
               int64_t n, int64_t C) {
  if (n == 0 || C == 0) return;
  MoeGatherKernel<<<RowBlocks(n), ChannelThreads(C), 0, s>>>(rows, x, token_of_row, n, C);
  CUDA_CHECK_LAUNCH();
}

void MoeGatherBackward(cudaStream_t s, float* d_x, const float* d_rows, const int32_t* row_of,
                       int64_t R, int64_t k, int64_t C) {
  if (R == 0 || C == 0) return;
  MoeGatherBackwardKernel<<<RowBlocks(R), ChannelThreads(C), 0, s>>>(d_x, d_rows, row_of, R, k,
                                                                     C);
  CUDA_CHECK_LAUNCH();
}

void MoeCombine(cudaStream_t s, float* out, const float* y, const float* gate,
                const int32_t* row_of, int64_t R, int64_t k, int64_t C) {
  if (R == 0 || C == 0) return;
  MoeCombineKernel<<<RowBlocks(R), ChannelThreads(C), 0, s>>>(out, y, gate, row_of, R, k, C);
  CUDA_CHECK_LAUNCH();
}

void MoeCombineBackward(cudaStream_t s, float* d_y, float* d_gate, const float* d_out,
                        const float* y, const float* gate, const int32_t* row_of, int64_t R,
                        int64_t k, int64_t C) {
  if (R == 0 || k == 0) return;  // C == 0 still writes d_gate (zeros), as the CPU does
  MoeCombineBackwardKernel<<<RowBlocks(R * k), ChannelThreads(C), 0, s>>>(
      d_y, d_gate, d_out, y, gate, row_of, R, k, C);
  CUDA_CHECK_LAUNCH();
}

void GatedAddForward(cudaStream_t s, float* out, const float* x, const float* logit, int64_t R,
                     int64_t C) {
  if (R == 0 || C == 0) return;
  GatedAddForwardKernel<<<RowBlocks(R), ChannelThreads(C), 0, s>>>(out, x, logit, R, C);
  CUDA_CHECK_LAUNCH();
}

void GatedAddBackward(cudaStream_t s, float* d_x, float* d_logit, const float* d_out,
                      const float* x, const float* logit, int64_t R, int64_t C) {
  if (R == 0) return;  // C == 0 still writes d_logit (zeros), as the CPU does
  GatedAddBackwardKernel<<<RowBlocks(R), ChannelThreads(C), 0, s>>>(d_x, d_logit, d_out, x,
                                                                    logit, R, C);
  CUDA_CHECK_LAUNCH();
}

void MoeAuxBackward(cudaStream_t s, const MoeRouterSpec& spec, const float* logits,
                    const float* scores, const MoeAuxGrad& aux, float* d_logits, int64_t R) {
  if (R == 0 || spec.E == 0) return;
  if (aux.switch_coef == nullptr && aux.seq_coef == nullptr && aux.z_scale == 0.0f) return;
  MoeAuxBackwardKernel<<<RouterBlocks(R, kRowWarps), kRowWarps * kWarp, 0, s>>>(
      spec, logits, scores, aux, d_logits, R);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
