// runtime/kernels/cpu/onednn_matmul.cc — oneDNN matmul with a per-shape primitive cache
// (onednn_matmul.h). The only file that includes oneDNN.
#include "runtime/kernels/cpu/onednn_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/threads.h"

namespace tessera::cpu::onednn {
namespace {

using dnnl::memory;

// A run-away set of shapes (a benchmark sweep) must not grow the cache without bound; a
// model uses a few dozen shapes, so dropping everything at this size costs nothing there.
constexpr size_t kMaxCachedPrimitives = 512;

struct Primitive {
  dnnl::matmul matmul;
  memory::desc a, b, bias, c;
  std::string impl;
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mu;       // guards cache
  std::mutex exec_mu;  // one submission at a time: a oneDNN stream is not for concurrent use
  std::map<std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                      int, bool, bool, int>,
           std::shared_ptr<const Primitive>>
      cache;
};

Context& Ctx() {
  static Context* ctx = new Context();  // never destroyed: kernels may run during exit
  return *ctx;
}

memory::data_type ToDnnl(DType t) {
  TESSERA_CHECK_MSG(t == DType::kF32 || t == DType::kBF16, "oneDNN matmul: dtype %s",
                    std::string(DTypeName(t)).c_str());
  return t == DType::kF32 ? memory::data_type::f32 : memory::data_type::bf16;
}

// op(X)(rows, cols) of a matrix stored with row stride ld, transposed in memory or not.
memory::desc MatrixDesc(int64_t rows, int64_t cols, int64_t ld, bool trans, DType t) {
  const memory::dims strides = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, ToDnnl(t), strides);
}

std::string Describe(const MatmulSpec& s) {
  return "oneDNN matmul " + std::string(DTypeName(s.ab_dtype)) + "->" +
         std::string(DTypeName(s.c_dtype)) +
         (s.trans_a ? " A^T" : " A") + (s.trans_b ? " B^T" : " B") + " M=" +
         std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K);
}

Result<std::shared_ptr<const Primitive>> Create(const MatmulSpec& s, Context& ctx) {
  try {
    auto p = std::make_shared<Primitive>();
    p->a = MatrixDesc(s.M, s.K, s.lda, s.trans_a, s.ab_dtype);
    p->b = MatrixDesc(s.K, s.N, s.ldb, s.trans_b, s.ab_dtype);
    p->c = MatrixDesc(s.M, s.N, s.ldc, false, s.c_dtype);
    if (s.has_bias) p->bias = memory::desc({1, s.N}, memory::data_type::f32, memory::dims{s.N, 1});
    dnnl::primitive_attr attr;
    if (s.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const auto desc = s.has_bias ? dnnl::matmul::desc(p->a, p->b, p->bias, p->c)
                                 : dnnl::matmul::desc(p->a, p->b, p->c);
    const dnnl::matmul::primitive_desc pd(desc, attr, ctx.engine);
    p->impl = pd.impl_info_str();
    p->matmul = dnnl::matmul(pd);
    return std::shared_ptr<const Primitive>(std::move(p));
  } catch (const dnnl::error& e) {
    return FailedPrecondition(Describe(s) + ": oneDNN has no implementation on this CPU (" +
                              e.what() + ")");
  }
}

Result<std::shared_ptr<const Primitive>> Lookup(const MatmulSpec& s) {
  TESSERA_CHECK(s.M >= 1 && s.N >= 1 && s.K >= 1);
  Context& ctx = Ctx();
  const auto key = std::make_tuple(s.trans_a, s.trans_b, s.M, s.N, s.K, s.lda, s.ldb, s.ldc,
                                   static_cast<int>(s.ab_dtype), static_cast<int>(s.c_dtype),
                                   s.has_bias, s.accumulate, NumThreads());
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (auto it = ctx.cache.find(key); it != ctx.cache.end()) return it->second;
  auto created = Create(s, ctx);
  if (!created.ok()) return created.status();
  if (ctx.cache.size() >= kMaxCachedPrimitives) ctx.cache.clear();
  ctx.cache.emplace(key, created.value());
  return created;
}

}  // namespace

Status Matmul(const MatmulSpec& spec, const void* A, const void* B, const float* bias, void* C) {
  auto prim = Lookup(spec);
  if (!prim.ok()) return prim.status();
  const Primitive& p = *prim.value();
  Context& ctx = Ctx();
  try {
    // Memory objects wrap the caller's buffers (no copy); making them is cheap.
    memory a(p.a, ctx.engine, const_cast<void*>(A));
    memory b(p.b, ctx.engine, const_cast<void*>(B));
    memory c(p.c, ctx.engine, C);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (spec.has_bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, ctx.engine, const_cast<float*>(bias)));
    std::lock_guard<std::mutex> lock(ctx.exec_mu);
    p.matmul.execute(ctx.stream, args);
    ctx.stream.wait();
  } catch (const dnnl::error& e) {
    return Internal(Describe(spec) + ": execution failed (" + e.what() + ")");
  }
  return Status::Ok();
}

Result<std::string> ImplementationName(const MatmulSpec& spec) {
  auto prim = Lookup(spec);
  if (!prim.ok()) return prim.status();
  return prim.value()->impl;
}

std::string VersionString() {
  const dnnl_version_t* v = dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP"
                        : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                             : "other";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (cpu runtime: " + runtime + ")";
}

size_t CachedPrimitives() {
  Context& ctx = Ctx();
  std::lock_guard<std::mutex> lock(ctx.mu);
  return ctx.cache.size();
}

}  // namespace tessera::cpu::onednn
