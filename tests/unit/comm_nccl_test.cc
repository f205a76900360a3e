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

}  // namespace
}  // namespace tessera
