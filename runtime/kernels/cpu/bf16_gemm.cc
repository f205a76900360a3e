// runtime/kernels/cpu/bf16_gemm.cc — bf16 GEMM and Linear on the two paths (bf16_gemm.h).
//
// fp32-compute path: the product is cut into blocks (PlanBlocks) only as far as needed to keep
// the fp32 panels within the scratch budget (SetBf16ScratchFloats); usually it is one block: both operands are widened to
// fp32 (one OpenMP region) and one multithreaded sgemm (ops.h's Gemm) runs at sgemm speed.
// Larger products go tile by tile of C, each tile summing its K-blocks in order (the first
// writes or accumulates, as asked); a bf16 C gets an fp32 tile, rounded into C once after its
// last K-block. Blocks depend only on the shape, and OpenBLAS never splits K across threads, so
// each element's summation order is fixed by the shape and thread count. Widening costs
// O(MK + KN) per block against O(MNK) flops. Few OpenMP regions per call, as every region is a
// barrier, and on a loaded machine each barrier waits for a descheduled thread.
// oneDNN path: one cached oneDNN matmul per call (onednn_matmul.h).
// Empty products (K == 0) always take the fp32-compute path, which handles them.
#include "runtime/kernels/cpu/bf16_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/dtype.h"
#include "runtime/kernels/cpu/onednn_matmul.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

// Scratch budget of the fp32-compute path per calling thread: 8 Mi floats (32 MiB) hold both
// widened operands of every Linear of GPT-2 124M at 1024 tokens in one block.
constexpr int64_t kDefaultScratchFloats = int64_t{8} << 20;
std::atomic<int64_t> g_scratch_floats{kDefaultScratchFloats};
// Blocks are not cut below this edge (3 such panels fit any budget of at least 12288 floats).
constexpr int64_t kMinBlock = 64;

// One product, whichever public function asked for it. Exactly one of c_f32 / c_bf16 is set.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  const uint16_t* A = nullptr;
  int64_t lda = 0;
  const uint16_t* B = nullptr;
  int64_t ldb = 0;
  const float* bias = nullptr;  // (N), added to every row of C
  bool accumulate = false;
  float* c_f32 = nullptr;
  uint16_t* c_bf16 = nullptr;
  int64_t ldc = 0;
};

// ---- fp32-compute path ----

struct Scratch {
  std::vector<float> a, b, c;
};

// Per calling thread: kernels on different threads (each its own libgomp pool) never share.
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

float* Reserve(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// A bf16 tile src(rows, cols) with row stride ld, to be widened into dst(rows, cols), contiguous.
struct Widening {
  const uint16_t* src = nullptr;
  int64_t ld = 0, rows = 0, cols = 0;
  float* dst = nullptr;
};

void WidenRow(const Widening& w, int64_t r) {
  const uint16_t* s = w.src + r * w.ld;
  float* d = w.dst + r * w.cols;
#pragma omp simd
  for (int64_t c = 0; c < w.cols; ++c) d[c] = Bf16ToF32(s[c]);
}

// Widens both operand panels in one OpenMP region (each exact, so any split gives the same
// bits). A panel with rows == 0 is skipped (already widened for an earlier block).
void WidenPanels(const Widening& a, const Widening& b) {
  const int64_t elems = a.rows * a.cols + b.rows * b.cols;
#pragma omp parallel if (elems >= vec::kMinParallelElems)
  {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < a.rows; ++r) WidenRow(a, r);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < b.rows; ++r) WidenRow(b, r);
  }
}

// dst(rows, cols) with row stride ld_dst = src (row stride ld_src) rounded to bf16.
void NarrowTile(const float* src, int64_t ld_src, int64_t rows, int64_t cols, uint16_t* dst,
                int64_t ld_dst) {
#pragma omp parallel for schedule(static) if (rows * cols >= vec::kMinParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld_src;
    uint16_t* d = dst + r * ld_dst;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) d[c] = F32ToBf16(s[c]);
  }
}

// Makes the fp32 tile (rows i0.., cols j0.., row stride ld) hold what the K-blocks add to:
// C's old value (when accumulating) plus the bias. Returns the beta of the first K-block.
float InitTile(const GemmCall& g, int64_t i0, int64_t j0, int64_t mb, int64_t nb, float* tile,
               int64_t ld) {
  const bool explicit_init = g.c_bf16 != nullptr || g.bias != nullptr || g.K == 0;
  if (!explicit_init) return g.accumulate ? 1.0f : 0.0f;  // sgemm's beta does it
#pragma omp parallel for schedule(static) if (mb * nb >= vec::kMinParallelElems)
  for (int64_t r = 0; r < mb; ++r) {
    float* t = tile + r * ld;
    const uint16_t* old16 = g.c_bf16 ? g.c_bf16 + (i0 + r) * g.ldc + j0 : nullptr;
    for (int64_t c = 0; c < nb; ++c) {
      const float old = !g.accumulate ? 0.0f : old16 ? Bf16ToF32(old16[c]) : t[c];
      // Writing: the bias itself, as LinearForward's memcpy (no 0 + b, which turns -0 into 0).
      t[c] = g.bias == nullptr ? old : g.accumulate ? old + g.bias[j0 + c] : g.bias[j0 + c];
    }
  }
  return 1.0f;
}

struct Blocks {
  int64_t mb, nb, kb;  // rows of C, columns of C, K per block
};

// The largest blocks whose fp32 panels (op(A) mb x kb, op(B) kb x nb, and the C tile for a
// bf16 C) fit the scratch budget: the whole product when it fits, else the largest edge halved
// until they do. A function of the shape (and the budget) alone.
Blocks PlanBlocks(const GemmCall& g) {
  Blocks b{g.M, g.N, std::max<int64_t>(g.K, 1)};
  const int64_t budget = g_scratch_floats.load(std::memory_order_relaxed);
  auto floats = [&] { return b.mb * b.kb + b.kb * b.nb + (g.c_bf16 ? b.mb * b.nb : 0); };
  while (floats() > budget) {
    int64_t* largest = &b.mb;
    if (b.nb > *largest) largest = &b.nb;
    if (b.kb > *largest) largest = &b.kb;
    if (*largest <= kMinBlock) break;
    *largest = (*largest + 1) / 2;
  }
  return b;
}

void RunFp32Compute(const GemmCall& g) {
  Scratch& s = ThreadScratch();
  const Blocks blk = PlanBlocks(g);
  float* a = Reserve(s.a, blk.mb * blk.kb);
  float* b = Reserve(s.b, blk.kb * blk.nb);
  float* c = g.c_bf16 ? Reserve(s.c, blk.mb * blk.nb) : nullptr;
  // Which blocks the panels hold now: a panel is widened again only when its block changes.
  int64_t a_at[2] = {-1, -1}, b_at[2] = {-1, -1};  // (i0, k0), (k0, j0)
  for (int64_t i0 = 0; i0 < g.M; i0 += blk.mb) {
    const int64_t mb = std::min(blk.mb, g.M - i0);
    for (int64_t j0 = 0; j0 < g.N; j0 += blk.nb) {
      const int64_t nb = std::min(blk.nb, g.N - j0);
      float* tile = g.c_bf16 ? c : g.c_f32 + i0 * g.ldc + j0;
      const int64_t ld_tile = g.c_bf16 ? nb : g.ldc;
      float beta = InitTile(g, i0, j0, mb, nb, tile, ld_tile);
      for (int64_t k0 = 0; k0 < g.K; k0 += blk.kb) {
        const int64_t kb = std::min(blk.kb, g.K - k0);
        // op(A)[i0 : i0+mb, k0 : k0+kb] and op(B)[k0 : k0+kb, j0 : j0+nb], each kept in its
        // storage orientation (so the sgemm keeps the caller's transposes).
        Widening wa, wb;
        if (a_at[0] != i0 || a_at[1] != k0) {
          wa = g.trans_a ? Widening{g.A + k0 * g.lda + i0, g.lda, kb, mb, a}
                         : Widening{g.A + i0 * g.lda + k0, g.lda, mb, kb, a};
          a_at[0] = i0;
          a_at[1] = k0;
        }
        if (b_at[0] != k0 || b_at[1] != j0) {
          wb = g.trans_b ? Widening{g.B + j0 * g.ldb + k0, g.ldb, nb, kb, b}
                         : Widening{g.B + k0 * g.ldb + j0, g.ldb, kb, nb, b};
          b_at[0] = k0;
          b_at[1] = j0;
        }
        WidenPanels(wa, wb);
        Gemm(g.trans_a, g.trans_b, mb, nb, kb, 1.0f, a, g.trans_a ? mb : kb, b,
             g.trans_b ? kb : nb, beta, tile, ld_tile);
        beta = 1.0f;
      }
      if (g.c_bf16) NarrowTile(tile, ld_tile, mb, nb, g.c_bf16 + i0 * g.ldc + j0, g.ldc);
    }
  }
}

// ---- oneDNN path ----

onednn::MatmulSpec SpecOf(const GemmCall& g) {
  onednn::MatmulSpec spec;
  spec.trans_a = g.trans_a;
  spec.trans_b = g.trans_b;
  spec.M = g.M;
  spec.N = g.N;
  spec.K = g.K;
  spec.lda = g.lda;
  spec.ldb = g.ldb;
  spec.ldc = g.ldc;
  spec.ab_dtype = DType::kBF16;
  spec.c_dtype = g.c_bf16 ? DType::kBF16 : DType::kF32;
  spec.has_bias = g.bias != nullptr;
  spec.accumulate = g.accumulate;
  return spec;
}

void RunOneDnn(const GemmCall& g) {
  void* c = g.c_bf16 ? static_cast<void*>(g.c_bf16) : static_cast<void*>(g.c_f32);
  const Status st = onednn::Matmul(SpecOf(g), g.A, g.B, g.bias, c);
  // The path is only active after ProbeOneDnnBf16 succeeded, so a refusal now is a bug (or
  // memory exhaustion), not a CPU that cannot do it.
  TESSERA_CHECK_MSG(st.ok(), "bf16 GEMM on the oneDNN path: %s", st.ToString().c_str());
}

// ---- path state ----

// -1: the automatic choice; otherwise a forced Bf16GemmPath.
std::atomic<int> g_forced_path{-1};

Bf16Isa ThisCpuIsa() {
  static const Bf16Isa isa = ChooseBf16Isa(DetectCpuFeatures());
  return isa;
}

const Bf16GemmChoice& AutoChoice() {
  static const Bf16GemmChoice choice = [] {
    // TESSERA_BF16_GEMM=fp32 keeps bf16 GEMMs on fp32 compute even where oneDNN would run
    // them: the numerics of a CPU without bf16 instructions, reproducible anywhere.
    const char* env = std::getenv("TESSERA_BF16_GEMM");
    if (env != nullptr && std::string_view(env) == "fp32") {
      return Bf16GemmChoice{Bf16GemmPath::kFp32Compute,
                            "bf16 GEMM: fp32 compute (TESSERA_BF16_GEMM=fp32)"};
    }
    const Bf16Isa isa = ThisCpuIsa();
    // No bf16 instructions: do not even start oneDNN (its probe is what would tell us a
    // reference implementation exists, and one would be far slower than sgemm).
    if (isa == Bf16Isa::kNone) return DecideBf16GemmPath(isa, FailedPrecondition("not probed"));
    return DecideBf16GemmPath(isa, ProbeOneDnnBf16());
  }();
  return choice;
}

Bf16GemmPath CurrentPath() {
  const int forced = g_forced_path.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Bf16GemmPath>(forced) : AutoChoice().path;
}

void Run(const GemmCall& g) {
  TESSERA_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0);
  TESSERA_CHECK((g.c_f32 == nullptr) != (g.c_bf16 == nullptr));
  if (g.M == 0 || g.N == 0) return;
  if (g.K > 0 && CurrentPath() == Bf16GemmPath::kOneDnn) RunOneDnn(g);
  else RunFp32Compute(g);
}

GemmCall Call(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
              int64_t lda, const uint16_t* B, int64_t ldb, bool accumulate, int64_t ldc) {
  GemmCall g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  g.accumulate = accumulate;
  g.ldc = ldc;
  return g;
}

}  // namespace

// ---- GEMM ----

void GemmBf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
              int64_t lda, const uint16_t* B, int64_t ldb, bool accumulate, float* C,
              int64_t ldc) {
  GemmCall g = Call(trans_a, trans_b, M, N, K, A, lda, B, ldb, accumulate, ldc);
  g.c_f32 = C;
  Run(g);
}

void GemmBf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
              int64_t lda, const uint16_t* B, int64_t ldb, bool accumulate, uint16_t* C,
              int64_t ldc) {
  GemmCall g = Call(trans_a, trans_b, M, N, K, A, lda, B, ldb, accumulate, ldc);
  g.c_bf16 = C;
  Run(g);
}

// ---- Linear ----

// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias
void LinearForwardBf16(float* out, const uint16_t* inp, const uint16_t* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC) {
  GemmCall g = Call(false, true, N, OC, C, inp, C, weight, C, false, OC);
  g.bias = bias;
  g.c_f32 = out;
  Run(g);
}

void LinearForwardBf16(uint16_t* out, const uint16_t* inp, const uint16_t* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC) {
  GemmCall g = Call(false, true, N, OC, C, inp, C, weight, C, false, OC);
  g.bias = bias;
  g.c_bf16 = out;
  Run(g);
}

namespace {

// The parameter half of backward, shared by both d_inp overloads.
void LinearBackwardParams(float* d_weight, float* d_bias, const uint16_t* d_out,
                          const uint16_t* inp, int64_t N, int64_t C, int64_t OC) {
  // d_weight(OC,C) += d_out^T(OC,N) @ inp(N,C)
  if (d_weight != nullptr) {
    GemmCall g = Call(true, false, OC, C, N, d_out, OC, inp, C, true, C);
    g.c_f32 = d_weight;
    Run(g);
  }
  if (d_bias != nullptr) vec::AddColumnSums(d_bias, d_out, N, OC, Bf16ToF32);
}

}  // namespace

void LinearBackwardBf16(uint16_t* d_inp, float* d_weight, float* d_bias, const uint16_t* d_out,
                        const uint16_t* inp, const uint16_t* weight, int64_t N, int64_t C,
                        int64_t OC) {
  // d_inp(N,C) = d_out(N,OC) @ weight(OC,C)   (written)
  if (d_inp != nullptr) GemmBf16(false, false, N, C, OC, d_out, OC, weight, C, false, d_inp, C);
  LinearBackwardParams(d_weight, d_bias, d_out, inp, N, C, OC);
}

void LinearBackwardBf16(float* d_inp, float* d_weight, float* d_bias, const uint16_t* d_out,
                        const uint16_t* inp, const uint16_t* weight, int64_t N, int64_t C,
                        int64_t OC) {
  if (d_inp != nullptr) GemmBf16(false, false, N, C, OC, d_out, OC, weight, C, false, d_inp, C);
  LinearBackwardParams(d_weight, d_bias, d_out, inp, N, C, OC);
}

// ---- The path ----

Bf16GemmChoice DecideBf16GemmPath(Bf16Isa isa, const Result<std::string>& onednn_impl) {
  if (isa == Bf16Isa::kNone)
    return {Bf16GemmPath::kFp32Compute, "bf16 GEMM: fp32 compute (no bf16 instructions)"};
  if (!onednn_impl.ok())
    return {Bf16GemmPath::kFp32Compute, std::string("bf16 GEMM: fp32 compute (oneDNN refused bf16 on this ") +
                                            Bf16IsaName(isa) + " CPU: " +
                                            onednn_impl.status().message() + ")"};
  return {Bf16GemmPath::kOneDnn,
          std::string("bf16 GEMM: oneDNN ") + Bf16IsaName(isa) + " (" + onednn_impl.value() + ")"};
}

const Result<std::string>& ProbeOneDnnBf16() {
  // A GPT-2 Linear forward, x(256,768) @ W(768,768)^T: the shape class the models run most.
  static const Result<std::string> probe = [] {
    onednn::MatmulSpec spec;
    spec.trans_b = true;
    spec.M = 256;
    spec.N = 768;
    spec.K = 768;
    spec.lda = 768;
    spec.ldb = 768;
    spec.ldc = 768;
    return onednn::ImplementationName(spec);
  }();
  return probe;
}

Bf16GemmChoice ActiveBf16GemmPath() {
  const int forced = g_forced_path.load();
  if (forced < 0) return AutoChoice();
  if (static_cast<Bf16GemmPath>(forced) == Bf16GemmPath::kFp32Compute)
    return {Bf16GemmPath::kFp32Compute, "bf16 GEMM: fp32 compute (forced)"};
  return {Bf16GemmPath::kOneDnn, std::string("bf16 GEMM: oneDNN ") + Bf16IsaName(ThisCpuIsa()) +
                                     " (" + ProbeOneDnnBf16().value() + ", forced)"};
}

Status SetBf16GemmPath(Bf16GemmPath path) {
  if (path == Bf16GemmPath::kOneDnn) {
    const auto& probe = ProbeOneDnnBf16();
    if (!probe.ok())
      return probe.status().WithPrefix(std::string("bf16 GEMM: cannot force the oneDNN path (") +
                                       onednn::VersionString() + ", CPU bf16 ISA " +
                                       Bf16IsaName(ThisCpuIsa()) + ")");
  }
  g_forced_path.store(static_cast<int>(path));
  return Status::Ok();
}

void ResetBf16GemmPath() { g_forced_path.store(-1); }

int64_t SetBf16ScratchFloats(int64_t floats) {
  TESSERA_CHECK_MSG(floats >= 3 * kMinBlock * kMinBlock, "SetBf16ScratchFloats(%lld): below %lld",
                    static_cast<long long>(floats), static_cast<long long>(3 * kMinBlock * kMinBlock));
  return g_scratch_floats.exchange(floats);
}

}  // namespace tessera::cpu
