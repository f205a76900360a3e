// links: tessera_comm
// tests/unit/comm_nccl_test.cc — the NCCL backend on one GPU (world size 1, bootstrapped through
// an MPI singleton). Skips itself where the backend is not built or no GPU is usable
// (cudaGetDeviceCount fails without a driver).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "comm/nccl.h"

#ifdef TESSERA_HAVE_NCCL
#include <cuda_runtime.h>

#include "comm/reduce.h"
#include "runtime/core/dtype.h"
#ifdef TESSERA_NCCL_RANK_ORDER
#include "comm/nccl_reduce.h"
#endif
#endif

namespace tessera {
namespace {

TEST(Nccl, AvailabilityIsAStatusNotACrash) {
  Status s = NcclAvailable();
  if (!NcclBackendBuilt()) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  }
  if (!s.ok()) {
    EXPECT_FALSE(s.message().empty());
  }
}

#ifdef TESSERA_HAVE_NCCL
TEST(Nccl, SingleRankCollectivesOnDeviceBuffers) {
  Status avail = NcclAvailable();
  if (!avail.ok()) GTEST_SKIP() << avail.ToString();
  auto mpi = MpiSession::Init(nullptr, nullptr);
  ASSERT_TRUE(mpi.ok()) << mpi.status().ToString();
  {
    CommOptions o;
    o.name = "nccl";
    o.timeout_s = 30;
    auto comm = NcclWorld(**mpi, o, /*device=*/0);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    Communicator& c = **comm;
    ASSERT_EQ(c.size(), 1);
    const int64_t n = 1 << 16;
    std::vector<float> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = 0.25f * static_cast<float>(i % 1000);
    float *d_a = nullptr, *d_b = nullptr;
    ASSERT_EQ(cudaMalloc(&d_a, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_b, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_a, host.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    Tensor a(d_a, DType::kF32, {n}, Device::kCuda), b(d_b, DType::kF32, {n}, Device::kCuda);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      ASSERT_TRUE(c.AllReduce(a, op)->Wait().ok());
    }
    ASSERT_TRUE(c.AllGather(a, b)->Wait().ok());
    ASSERT_TRUE(c.ReduceScatter(b, a, ReduceOp::kSum)->Wait().ok());
    ASSERT_TRUE(c.Broadcast(a, 0)->Wait().ok());
    ASSERT_TRUE(c.Barrier()->Wait().ok());
    std::vector<float> back(n);
    ASSERT_EQ(cudaMemcpy(back.data(), d_a, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back, host);
#ifdef TESSERA_NCCL_RANK_ORDER
    // One rank: the rank-ordered reductions are the identity.
    ASSERT_TRUE(c.AllReduce(a, ReduceOp::kSum, ReduceOrder::kRankOrder)->Wait().ok());
    ASSERT_TRUE(c.ReduceScatter(b, a, ReduceOp::kSum, ReduceOrder::kRankOrder)->Wait().ok());
    ASSERT_EQ(cudaMemcpy(back.data(), d_a, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back, host);
#else
    EXPECT_EQ(c.AllReduce(a, ReduceOp::kSum, ReduceOrder::kRankOrder)->Wait().code(),
              StatusCode::kFailedPrecondition);
#endif
    Tensor on_host(host.data(), DType::kF32, {n});
    EXPECT_EQ(c.AllReduce(on_host, ReduceOp::kSum)->Wait().code(), StatusCode::kInvalidArgument);
    CommOptions so = o;
    so.name = "nccl.sub";
    auto sub = c.Split(0, 0, so);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->Barrier()->Wait().ok());
    cudaFree(d_a);
    cudaFree(d_b);
  }
  mpi->reset();
}

// Overlap without the host: a compute stream writes the input and records an event, the
// communicator's ops are ordered After it, and the compute stream reads the op's output after
// waiting on Work::ready_event — no host synchronisation between the three.
TEST(Nccl, StreamsOrderComputeAndCommunicationThroughEvents) {
  Status avail = NcclAvailable();
  if (!avail.ok()) GTEST_SKIP() << avail.ToString();
  auto mpi = MpiSession::Init(nullptr, nullptr);
  ASSERT_TRUE(mpi.ok()) << mpi.status().ToString();
  {
    CommOptions o;
    o.name = "nccl";
    o.timeout_s = 30;
    auto comm = NcclWorld(**mpi, o, /*device=*/0);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    Communicator& c = **comm;
    const int64_t n = 1 << 22;  // large enough that a missing wait would be seen
    std::vector<float> host(n), back(n, -1.0f);
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 4093);
    float* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(d, 0, n * 4), cudaSuccess);
    cudaStream_t compute = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t written = nullptr;
    ASSERT_EQ(cudaEventCreateWithFlags(&written, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(d, host.data(), n * 4, cudaMemcpyHostToDevice, compute),
              cudaSuccess);
    ASSERT_EQ(cudaEventRecord(written, compute), cudaSuccess);
    c.After(Event{reinterpret_cast<uintptr_t>(written)});
    Tensor t(d, DType::kF32, {n}, Device::kCuda);
    std::unique_ptr<Work> w = c.AllReduce(t, ReduceOp::kMax);  // one rank: the identity
    ASSERT_FALSE(w->ready_event().is_null());
    ASSERT_EQ(cudaStreamWaitEvent(
                  compute, reinterpret_cast<cudaEvent_t>(w->ready_event().handle), 0),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(back.data(), d, n * 4, cudaMemcpyDeviceToHost, compute),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
    EXPECT_TRUE(w->Wait().ok());
    EXPECT_EQ(back, host);
    w.reset();  // releases the op's event
    cudaEventDestroy(written);
    cudaStreamDestroy(compute);
    cudaFree(d);
  }
  mpi->reset();
}
#endif

#ifdef TESSERA_NCCL_RANK_ORDER
// The device half of a rank-ordered reduction gives the bits of the host backends' (comm/
// reduce.h ReduceRows) on the same rows: every dtype and op, an odd length, five ranks' rows.
TEST(Nccl, RankOrderKernelGivesTheHostReductionsBits) {
  Status avail = NcclAvailable();
  if (!avail.ok()) GTEST_SKIP() << avail.ToString();
  constexpr int kRows = 5;
  constexpr int64_t n = 4099;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      if (t == DType::kI32 && op == ReduceOp::kAvg) continue;
      const size_t es = DTypeSize(t);
      std::vector<uint8_t> rows(kRows * n * es);
      for (int r = 0; r < kRows; ++r) {
        std::vector<float> f(n);
        for (int64_t i = 0; i < n; ++i) f[i] = std::sin(0.37f * i + r) * 300.0f * (r + 1);
        if (r == 3) f[17] = std::nanf("");  // a diverged rank's element: NaN must win a max
        for (int64_t i = 0; i < n; ++i) {
          uint8_t* dst = rows.data() + (r * n + i) * es;
          const int32_t i32 = static_cast<int32_t>(f[i]);
          const uint16_t half = t == DType::kBF16 ? F32ToBf16(f[i]) : F32ToF16(f[i]);
          std::memcpy(dst, t == DType::kF32 ? static_cast<const void*>(&f[i])
                           : t == DType::kI32 ? static_cast<const void*>(&i32)
                                              : static_cast<const void*>(&half), es);
        }
      }
      std::vector<const void*> ptrs;
      for (int r = 0; r < kRows; ++r) ptrs.push_back(rows.data() + r * n * es);
      std::vector<uint8_t> want(n * es), got(n * es);
      ReduceRows(t, op, ptrs.data(), kRows, want.data(), n);
      void *d_rows = nullptr, *d_out = nullptr;
      ASSERT_EQ(cudaMalloc(&d_rows, rows.size()), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_out, got.size()), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_rows, rows.data(), rows.size(), cudaMemcpyHostToDevice),
                cudaSuccess);
      const RowOp row_op = op == ReduceOp::kMax ? RowOp::kMax
                           : op == ReduceOp::kAvg ? RowOp::kAvg : RowOp::kSum;
      ASSERT_EQ(ReduceGatheredRows(nullptr, t, row_op, d_rows, kRows, n, d_out, n), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got.data(), d_out, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      // Equal bits, except that a NaN result need only be a NaN (x86 and CUDA make different
      // ones); i32 has no NaN (static_cast of NaN is the same on both sides here).
      auto value = [&](const std::vector<uint8_t>& v, int64_t i) {
        float x = 0;
        uint16_t h = 0;
        if (t == DType::kF32) std::memcpy(&x, &v[i * 4], 4);
        if (t == DType::kBF16 || t == DType::kF16) std::memcpy(&h, &v[i * 2], 2);
        if (t == DType::kBF16) x = Bf16ToF32(h);
        if (t == DType::kF16) x = F16ToF32(h);
        return x;
      };
      for (int64_t i = 0; i < n; ++i) {
        if (t != DType::kI32 && std::isnan(value(want, i))) {
          EXPECT_TRUE(std::isnan(value(got, i))) << i;
          continue;
        }
        ASSERT_EQ(std::memcmp(&got[i * es], &want[i * es], es), 0)
            << "dtype " << static_cast<int>(t) << " op " << static_cast<int>(op) << " at " << i;
      }
      cudaFree(d_rows);
      cudaFree(d_out);
    }
  }
}
#endif

}  // namespace
}  // namespace tessera
