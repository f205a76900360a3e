// links: tessera_comm
// tests/unit/comm_nccl_test.cc — the NCCL backend on one GPU (world size 1, bootstrapped through
// an MPI singleton). Skips itself where the backend is not built or no GPU is usable
// (cudaGetDeviceCount fails without a driver).
#include <gtest/gtest.h>

#include <vector>

#include "comm/nccl.h"

#ifdef TESSERA_HAVE_NCCL
#include <cuda_runtime.h>
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
    EXPECT_EQ(c.AllReduce(a, ReduceOp::kSum, ReduceOrder::kRankOrder)->Wait().code(),
              StatusCode::kFailedPrecondition);
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
#endif

}  // namespace
}  // namespace tessera
