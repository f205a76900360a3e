// runtime/kernels/cuda/attention.cu — causal self-attention with grouped-query heads (and an
// optional sliding window), tiled with an online softmax so that no T x T matrix exists.
//
// Owns: AttentionSavedFloats, AttentionForward, AttentionBackwardScratchFloats,
// AttentionBackward (launch.h); the contract is cpu::AttentionForward / AttentionBackward
// (cpu/ops.h) except for what is saved.
// Layout: qkv(B*T, R), R = (NH + 2*NKV)*HS, holds [q heads | k heads | v heads] per token;
// query head h reads kv head h / (NH/NKV). Query i sees keys First(i) .. i, First(i) = 0, or
// i - window + 1 under a sliding window. Scores are scale * q.k with scale = 1/sqrt(HS).
//
// Geometry (all three kernels): a block of kWarps = 8 warps owns kTile = 32 rows of one head,
// kRowsPerWarp = 4 per warp; the other side of the product streams through shared memory in
// tiles of kTile = 32 rows, lane j taking row j of a tile for the dot products, and lane d
// holding output dims d, d + 32, ... (kChunks = ceil(HS/32) registers, HS <= kMaxHS = 256).
// Tiles that every row of the block masks out are never loaded.
//   Forward (query-major): per query row, running max m and sum l over key tiles, the output
//     accumulator rescaled by exp(m_old - m_new) whenever m grows; out = acc / l.
//   Backward kernel 1 (query-major): pass A sums D_i = sum_j P_ij dP_ij over the key tiles
//     (P_ij = exp(s_ij - lse_i), dP_ij = dO_i . V_j) and stores it in `scratch`; pass B sums
//     dQ_i = scale * sum_j P_ij (dP_ij - D_i) K_j into d_qkv's q part.
//   Backward kernel 2 (key-major, after kernel 1 on the same stream, which orders them): a
//     block owns 32 keys of one kv head; it walks that head's query heads in increasing h and,
//     per head, the query tiles that see its keys in increasing i, summing
//     dV_j = sum P_ij dO_i and dK_j = scale * sum dS_ij Q_i into d_qkv's k and v parts.
// Determinism: no atomics; every output element is summed by one thread in an order fixed by
// the shapes (tiles in order, rows of a tile in order, then a fixed shuffle tree where a sum
// spans lanes), so reruns give the same bits. The scores s_ij are computed by one helper
// (DotRows: a sequential fmaf chain over the head dims) in all three kernels, so backward
// recomputes exactly the forward's scores.
// Saved: lse(B, NH, T) = m + log(l) per query row, then one float holding the window (0 =
// causal) at index B*NH*T, which backward reads on the device (no host round trip).
// Numerics vs the CPU: fp32 throughout like the CPU, but a different summation order, the
// online rescaling and P rebuilt from lse make results differ by a few ulp (~1e-6 relative).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "runtime/core/check.h"
#include "runtime/kernels/cuda/cuda_check.h"
#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

constexpr int kTile = 32;  // rows per block = rows per streamed tile = lanes of a warp
constexpr int kWarps = 8;
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kBlock = kWarps * kWarp;
constexpr int kMaxHS = 256;
constexpr int kMaxChunks = kMaxHS / kWarp;
constexpr size_t kDefaultSharedBytes = 48 * 1024;
static_assert(kTile == kWarp, "lane j of a warp takes row j of a tile");
static_assert(kTile % kWarps == 0, "the block's rows split evenly over its warps");

// Blocks per SM each kernel is compiled for: two caps registers at 128, which small heads
// need (left alone, ptxas picks 64 and spills); large heads get the whole register file,
// since their shared memory allows about one block per SM anyway.
constexpr int MinBlocks(int chunks) { return chunks > 4 ? 1 : 2; }

// Shapes every kernel needs. Heads, HS and the block's rows fit in int; token indices and
// offsets into qkv stay int64_t.
struct Shape {
  int64_t B, T, NH, NKV;
  int HS;
  int64_t R;      // row length of qkv and d_qkv
  int64_t group;  // query heads per kv head
  float scale;
};

// The first key query i sees.
__host__ __device__ inline int64_t FirstKey(int64_t i, int64_t window) {
  return window > 0 && i >= window ? i - window + 1 : 0;
}

// Whether query i (< T) sees key j.
__device__ inline bool Sees(int64_t i, int64_t j, int64_t window) {
  return j <= i && j >= FirstKey(i, window);
}

// Odd row stride for tiles whose rows lanes read in parallel at the same column: lane j at
// word j * stride + d falls in bank (j * stride + d) % 32, all distinct when stride is odd.
__host__ __device__ inline int OddStride(int HS) { return HS | 1; }

// dst(kTile, stride) <- rows t0 .. t0 + kTile - 1 of a (T, HS) matrix at src with leading
// dimension ld; rows at or past t_end become zeros (they are masked, but stale or unwritten
// shared memory could hold NaN, and 0 * NaN would leak into the sums). A warp copies whole
// rows, so global reads are coalesced.
__device__ inline void LoadTile(float* dst, int stride, const float* __restrict__ src,
                                int64_t ld, int64_t t0, int64_t t_end, int HS) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int r = warp; r < kTile; r += kWarps) {
    const int64_t t = t0 + r;
    const float* row = src + t * ld;
    for (int d = lane; d < HS; d += kWarp) dst[r * stride + d] = t < t_end ? row[d] : 0.0f;
  }
}

// s[r] = rows[r] . mine for N rows of length HS (stride HS) that every lane reads alike
// (broadcast) against this lane's own row. One sequential fmaf chain per score, the same
// order in every kernel, so forward and backward scores are bit-identical.
template <int N>
__device__ inline void DotRows(float (&s)[N], const float* rows, const float* mine, int HS) {
#pragma unroll
  for (int r = 0; r < N; ++r) s[r] = 0.0f;
#pragma unroll 4
  for (int d = 0; d < HS; ++d) {
    const float x = mine[d];
#pragma unroll
    for (int r = 0; r < N; ++r) s[r] = fmaf(rows[r * HS + d], x, s[r]);
  }
}

// acc[r][c] += sum_{j < n} w_j[r] * tile[j][lane + 32c], where w_j[r] is lane j's w[r]: the
// weights of a tile's rows come from the lanes that scored them. n is warp-uniform.
template <int N, int C>
__device__ inline void AccumulateRows(float (&acc)[N][C], const float (&w)[N], const float* tile,
                                      int stride, int n, int HS) {
  const int lane = threadIdx.x % kWarp;
  for (int j = 0; j < n; ++j) {
    float wj[N];
#pragma unroll
    for (int r = 0; r < N; ++r) wj[r] = __shfl_sync(0xffffffffu, w[r], j);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int d = lane + c * kWarp;
      if (d < HS) {
        const float x = tile[j * stride + d];
#pragma unroll
        for (int r = 0; r < N; ++r) acc[r][c] = fmaf(wj[r], x, acc[r][c]);
      }
    }
  }
}

// dst[d] = factor * acc[c] for this lane's dims d = lane + 32c < HS.
template <int C>
__device__ inline void StoreRow(float* dst, const float (&acc)[C], float factor, int HS) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int d = lane + c * kWarp;
    if (d < HS) dst[d] = factor * acc[c];
  }
}

// One tile of the online softmax for one query row: x is this lane's scaled score (-inf when
// masked). Updates the running max m and sum l, returns this lane's weight exp(x - m) and
// sets alpha, the factor that rescales the accumulator to the new max. Warp-uniform.
__device__ inline float OnlineSoftmaxStep(float x, float& m, float& l, float& alpha) {
  const float m_new = fmaxf(m, WarpMax(x));
  if (m_new == -INFINITY) {  // nothing seen yet (a window can mask a whole tile for a row)
    alpha = 1.0f;
    return 0.0f;
  }
  alpha = expf(m - m_new);          // 0 on the first tile with a key (m = -inf)
  const float p = expf(x - m_new);  // 0 where masked
  l = l * alpha + WarpSum(p);
  m = m_new;
  return p;
}

// ---- forward ---------------------------------------------------------------------------
// Shared: q(kTile, HS) of the block's rows, k(kTile, odd) and v(kTile, HS) of a key tile.
size_t ForwardSharedBytes(int HS) {
  return sizeof(float) * kTile * (2 * HS + OddStride(HS));
}

// Block x: (query tile, b*NH + h); the tiles with the most keys (last rows) go first.
template <int C>
__global__ void __launch_bounds__(kBlock, MinBlocks(C))
    ForwardKernel(float* __restrict__ out, float* __restrict__ lse,
                  const float* __restrict__ qkv, Shape sh, int64_t window, int64_t tiles) {
  extern __shared__ float smem[];
  const int HS = sh.HS, ks = OddStride(HS);
  float* q_tile = smem;
  float* k_tile = q_tile + kTile * HS;
  float* v_tile = k_tile + kTile * ks;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;

  const int64_t BH = sh.B * sh.NH;
  const int64_t bh = blockIdx.x % BH, tile = tiles - 1 - blockIdx.x / BH;
  const int64_t b = bh / sh.NH, h = bh % sh.NH, kvh = h / sh.group;
  const int64_t i0 = tile * kTile, i_end = i0 + kTile < sh.T ? i0 + kTile : sh.T;
  const float* base = qkv + b * sh.T * sh.R;
  LoadTile(q_tile, HS, base + h * HS, sh.R, i0, i_end, HS);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][C];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
  }
  const int64_t row0 = i0 + warp * kRowsPerWarp;  // this warp's first query

  // Keys First(i0) .. i_end - 1 cover every row of the block (First is nondecreasing in i).
  for (int64_t k0 = FirstKey(i0, window); k0 < i_end; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    LoadTile(k_tile, ks, base + (sh.NH + kvh) * HS, sh.R, k0, i_end, HS);
    LoadTile(v_tile, HS, base + (sh.NH + sh.NKV + kvh) * HS, sh.R, k0, i_end, HS);
    __syncthreads();

    float s[kRowsPerWarp], p[kRowsPerWarp];
    DotRows(s, q_tile + warp * kRowsPerWarp * HS, k_tile + lane * ks, HS);
    const int64_t j = k0 + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = row0 + r;
      const float x = i < sh.T && Sees(i, j, window) ? sh.scale * s[r] : -INFINITY;
      float alpha;
      p[r] = OnlineSoftmaxStep(x, m[r], l[r], alpha);
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] *= alpha;
    }
    const int n = static_cast<int>(i_end - k0 < kTile ? i_end - k0 : kTile);
    AccumulateRows(acc, p, v_tile, HS, n, HS);
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + r;
    if (i >= sh.T) continue;  // every row < T saw key i, so l > 0 and m is finite
    StoreRow(out + (b * sh.T + i) * sh.NH * HS + h * HS, acc[r], 1.0f / l[r], HS);
    if (lane == 0) lse[bh * sh.T + i] = m[r] + logf(l[r]);
  }
  // The window travels with lse; exact as a float up to 2^24.
  if (blockIdx.x == 0 && threadIdx.x == 0) lse[BH * sh.T] = static_cast<float>(window);
}

// ---- backward kernel 1: D and dQ, query-major -------------------------------------------
// Shared: q(kTile, HS) and dO(kTile, HS) of the block's rows, k(kTile, odd) and v(kTile, odd)
// of a key tile (odd: lanes read their own key rows for both q.k and dO.v).
size_t QueryGradSharedBytes(int HS) {
  return sizeof(float) * kTile * (2 * HS + 2 * OddStride(HS));
}

// For one key tile: p[r] = P_ij and dp[r] = dP_ij of this warp's rows i against this lane's
// key j (0 where masked), after loading the tile. Called by every thread of the block.
struct KeyTileArgs {
  const float* k_src;  // kv head's K at token 0 of the sequence, leading dimension R
  const float* v_src;
  const float* q_rows;   // this warp's N query rows in shared memory
  const float* do_rows;  // this warp's N dO rows in shared memory
  float* k_tile;
  float* v_tile;
};

template <int N>
__device__ inline void KeyTileProbs(const KeyTileArgs& a, const Shape& sh, int64_t window,
                                    int64_t k0, int64_t k_end, int64_t row0,
                                    const float (&row_lse)[N], float (&p)[N], float (&dp)[N]) {
  const int HS = sh.HS, ks = OddStride(HS);
  const int lane = threadIdx.x % kWarp;
  __syncthreads();  // the previous tile is no longer read
  LoadTile(a.k_tile, ks, a.k_src, sh.R, k0, k_end, HS);
  LoadTile(a.v_tile, ks, a.v_src, sh.R, k0, k_end, HS);
  __syncthreads();
  float s[N];
  DotRows(s, a.q_rows, a.k_tile + lane * ks, HS);
  DotRows(dp, a.do_rows, a.v_tile + lane * ks, HS);
  const int64_t j = k0 + lane;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    const int64_t i = row0 + r;
    const bool seen = i < sh.T && Sees(i, j, window);
    p[r] = seen ? expf(sh.scale * s[r] - row_lse[r]) : 0.0f;
    if (!seen) dp[r] = 0.0f;
  }
}

// Block x: (query tile, b*NH + h), the tiles with the most keys first.
template <int C>
__global__ void __launch_bounds__(kBlock, MinBlocks(C))
    QueryGradKernel(float* __restrict__ d_qkv, float* __restrict__ d_sum,
                    const float* __restrict__ d_out, const float* __restrict__ qkv,
                    const float* __restrict__ lse, Shape sh, int64_t tiles) {
  extern __shared__ float smem[];
  const int HS = sh.HS, ks = OddStride(HS);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t BH = sh.B * sh.NH;
  const int64_t window = static_cast<int64_t>(lse[BH * sh.T]);
  const int64_t bh = blockIdx.x % BH, tile = tiles - 1 - blockIdx.x / BH;
  const int64_t b = bh / sh.NH, h = bh % sh.NH, kvh = h / sh.group;
  const int64_t i0 = tile * kTile, i_end = i0 + kTile < sh.T ? i0 + kTile : sh.T;
  const float* base = qkv + b * sh.T * sh.R;
  const int64_t ldo = sh.NH * HS;

  float* q_tile = smem;
  float* do_tile = q_tile + kTile * HS;
  KeyTileArgs a;
  a.k_src = base + (sh.NH + kvh) * HS;
  a.v_src = base + (sh.NH + sh.NKV + kvh) * HS;
  a.q_rows = q_tile + warp * kRowsPerWarp * HS;
  a.do_rows = do_tile + warp * kRowsPerWarp * HS;
  a.k_tile = do_tile + kTile * HS;
  a.v_tile = a.k_tile + kTile * ks;
  LoadTile(q_tile, HS, base + h * HS, sh.R, i0, i_end, HS);
  LoadTile(do_tile, HS, d_out + b * sh.T * ldo + h * HS, ldo, i0, i_end, HS);

  const int64_t row0 = i0 + warp * kRowsPerWarp;
  float row_lse[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
    row_lse[r] = row0 + r < sh.T ? lse[bh * sh.T + row0 + r] : 0.0f;
  const int64_t k_begin = FirstKey(i0, window);

  // Pass A: D_i = sum_j P_ij dP_ij, per lane over the tiles, then across lanes.
  float part[kRowsPerWarp] = {};
  for (int64_t k0 = k_begin; k0 < i_end; k0 += kTile) {
    float p[kRowsPerWarp], dp[kRowsPerWarp];
    KeyTileProbs(a, sh, window, k0, i_end, row0, row_lse, p, dp);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) part[r] = fmaf(p[r], dp[r], part[r]);
  }
  float D[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    D[r] = WarpSum(part[r]);
    if (lane == 0 && row0 + r < sh.T) d_sum[bh * sh.T + row0 + r] = D[r];
  }

  // Pass B: dQ_i = scale * sum_j P_ij (dP_ij - D_i) K_j.
  float dq[kRowsPerWarp][C];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) dq[r][c] = 0.0f;
  for (int64_t k0 = k_begin; k0 < i_end; k0 += kTile) {
    float p[kRowsPerWarp], dp[kRowsPerWarp], ds[kRowsPerWarp];
    KeyTileProbs(a, sh, window, k0, i_end, row0, row_lse, p, dp);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) ds[r] = p[r] * (dp[r] - D[r]);  // 0 where masked
    const int n = static_cast<int>(i_end - k0 < kTile ? i_end - k0 : kTile);
    AccumulateRows(dq, ds, a.k_tile, ks, n, HS);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + r;
    if (i < sh.T) StoreRow(d_qkv + (b * sh.T + i) * sh.R + h * HS, dq[r], sh.scale, HS);
  }
}

// ---- backward kernel 2: dK and dV, key-major --------------------------------------------
// Shared: k(kTile, HS) and v(kTile, HS) of the block's keys, q(kTile, odd) and dO(kTile, odd)
// of a query tile (odd: lanes read their own query rows for both k.q and v.dO).
size_t KeyGradSharedBytes(int HS) { return QueryGradSharedBytes(HS); }

// Block x: (key tile, b*NKV + kv head); the first key tiles, seen by the most queries, first.
template <int C>
__global__ void __launch_bounds__(kBlock, MinBlocks(C))
    KeyGradKernel(float* __restrict__ d_qkv, const float* __restrict__ d_sum,
                  const float* __restrict__ d_out, const float* __restrict__ qkv,
                  const float* __restrict__ lse, Shape sh) {
  extern __shared__ float smem[];
  const int HS = sh.HS, qs = OddStride(HS);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t window = static_cast<int64_t>(lse[sh.B * sh.NH * sh.T]);
  const int64_t BKV = sh.B * sh.NKV;
  const int64_t bg = blockIdx.x % BKV, tile = blockIdx.x / BKV;
  const int64_t b = bg / sh.NKV, kvh = bg % sh.NKV;
  const int64_t j0 = tile * kTile, j_end = j0 + kTile < sh.T ? j0 + kTile : sh.T;
  const float* base = qkv + b * sh.T * sh.R;
  const int64_t ldo = sh.NH * HS;

  float* k_tile = smem;
  float* v_tile = k_tile + kTile * HS;
  float* q_tile = v_tile + kTile * HS;
  float* do_tile = q_tile + kTile * qs;
  LoadTile(k_tile, HS, base + (sh.NH + kvh) * HS, sh.R, j0, j_end, HS);
  LoadTile(v_tile, HS, base + (sh.NH + sh.NKV + kvh) * HS, sh.R, j0, j_end, HS);
  const float* my_k = k_tile + warp * kRowsPerWarp * HS;  // this warp's keys
  const float* my_v = v_tile + warp * kRowsPerWarp * HS;
  const int64_t key0 = j0 + warp * kRowsPerWarp;

  // Queries j0 .. q_end - 1 cover every key of the block: the last key j_end - 1 is seen up
  // to query j_end - 1 + window - 1.
  const int64_t q_end = window > 0 && j_end - 1 + window < sh.T ? j_end - 1 + window : sh.T;

  float dk[kRowsPerWarp][C], dv[kRowsPerWarp][C];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) dk[r][c] = dv[r][c] = 0.0f;

  for (int64_t h = kvh * sh.group; h < (kvh + 1) * sh.group; ++h) {
    const int64_t bh = b * sh.NH + h;
    for (int64_t q0 = j0; q0 < q_end; q0 += kTile) {
      __syncthreads();  // the previous query tile is no longer read
      LoadTile(q_tile, qs, base + h * HS, sh.R, q0, q_end, HS);
      LoadTile(do_tile, qs, d_out + b * sh.T * ldo + h * HS, ldo, q0, q_end, HS);
      __syncthreads();

      const int64_t i = q0 + lane;  // this lane's query
      const bool live = i < q_end;
      const float row_lse = live ? lse[bh * sh.T + i] : 0.0f;
      const float row_d = live ? d_sum[bh * sh.T + i] : 0.0f;
      float s[kRowsPerWarp], dp[kRowsPerWarp], p[kRowsPerWarp], ds[kRowsPerWarp];
      DotRows(s, my_k, q_tile + lane * qs, HS);
      DotRows(dp, my_v, do_tile + lane * qs, HS);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const bool seen = live && Sees(i, key0 + r, window);
        p[r] = seen ? expf(sh.scale * s[r] - row_lse) : 0.0f;
        ds[r] = seen ? p[r] * (dp[r] - row_d) : 0.0f;
      }
      const int n = static_cast<int>(q_end - q0 < kTile ? q_end - q0 : kTile);
      AccumulateRows(dv, p, do_tile, qs, n, HS);
      AccumulateRows(dk, ds, q_tile, qs, n, HS);
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t j = key0 + r;
    if (j >= sh.T) continue;
    float* row = d_qkv + (b * sh.T + j) * sh.R;
    StoreRow(row + (sh.NH + kvh) * HS, dk[r], sh.scale, HS);
    StoreRow(row + (sh.NH + sh.NKV + kvh) * HS, dv[r], 1.0f, HS);
  }
}

// ---- host side --------------------------------------------------------------------------

Shape MakeShape(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  TESSERA_CHECK_MSG(NKV >= 1 && NH % NKV == 0, "NH=%lld is not a multiple of NKV=%lld",
                    static_cast<long long>(NH), static_cast<long long>(NKV));
  TESSERA_CHECK_MSG(HS >= 1 && HS <= kMaxHS, "attention head size %lld is outside 1..%d",
                    static_cast<long long>(HS), kMaxHS);
  Shape sh;
  sh.B = B;
  sh.T = T;
  sh.NH = NH;
  sh.NKV = NKV;
  sh.HS = static_cast<int>(HS);
  sh.R = (NH + 2 * NKV) * HS;
  sh.group = NH / NKV;
  sh.scale = 1.0f / std::sqrt(static_cast<float>(HS));  // the CPU's expression, same bits
  return sh;
}

int64_t TilesOf(int64_t T) { return (T + kTile - 1) / kTile; }

// Calls f(std::integral_constant<int, C>) with C = ceil(HS / 32), the per-lane chunks.
template <typename F>
void WithChunks(int HS, F&& f) {
  switch ((HS + kWarp - 1) / kWarp) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: TESSERA_CHECK_MSG(false, "attention head size %d above %d", HS, kMaxHS);
  }
}
static_assert(kMaxChunks == 8, "WithChunks lists every chunk count");

// Launches kernel on `blocks` blocks of kBlock threads with `shared` bytes of dynamic shared
// memory, raising the kernel's limit first when it is past the default 48 KB.
template <typename... Params, typename... Args>
void Launch(void (*kernel)(Params...), int64_t blocks, size_t shared, cudaStream_t stream,
            Args... args) {
  TESSERA_CHECK_MSG(blocks >= 1 && blocks <= 0x7fffffffLL, "attention grid of %lld blocks",
                    static_cast<long long>(blocks));
  if (shared > kDefaultSharedBytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(shared)));
  }
  kernel<<<static_cast<unsigned>(blocks), kBlock, shared, stream>>>(args...);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t AttentionSavedFloats(int64_t B, int64_t NH, int64_t T) { return B * NH * T + 1; }

int64_t AttentionBackwardScratchFloats(int64_t B, int64_t NH, int64_t T) { return B * NH * T; }

void AttentionForward(cudaStream_t s, float* out, float* lse, const float* qkv, int64_t B,
                      int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t window) {
  if (B * T == 0 || NH == 0 || HS == 0) return;
  const Shape sh = MakeShape(B, T, NH, NKV, HS);
  const int64_t tiles = TilesOf(T);
  WithChunks(sh.HS, [&](auto chunks) {
    Launch(ForwardKernel<decltype(chunks)::value>, tiles * B * NH, ForwardSharedBytes(sh.HS), s,
           out, lse, qkv, sh, window, tiles);
  });
}

void AttentionBackward(cudaStream_t s, float* d_qkv, float* scratch, const float* d_out,
                       const float* qkv, const float* lse, int64_t B, int64_t T, int64_t NH,
                       int64_t NKV, int64_t HS) {
  if (B * T == 0 || NH == 0 || HS == 0) return;
  const Shape sh = MakeShape(B, T, NH, NKV, HS);
  const int64_t tiles = TilesOf(T);
  WithChunks(sh.HS, [&](auto chunks) {
    constexpr int C = decltype(chunks)::value;
    // Kernel 1 stores D in scratch; kernel 2, after it on the stream, reads it.
    Launch(QueryGradKernel<C>, tiles * B * NH, QueryGradSharedBytes(sh.HS), s, d_qkv, scratch,
           d_out, qkv, lse, sh, tiles);
    Launch(KeyGradKernel<C>, tiles * B * NKV, KeyGradSharedBytes(sh.HS), s, d_qkv,
           static_cast<const float*>(scratch), d_out, qkv, lse, sh);
  });
}

}  // namespace tessera::cuda
