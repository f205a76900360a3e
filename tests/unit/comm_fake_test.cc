// links: tessera_comm
// tests/unit/comm_fake_test.cc — every collective on the fake backend for 1..4 ranks (threads),
// sequence numbers, desync reports, and the failure paths: a hung or failed N-th op becomes a
// bounded, named error; Abort wakes waiters.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "comm/fake_communicator.h"
#include "comm/reduce.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

// Runs fn(comm) on n threads, one fake rank each.
void RunRanks(int n, const std::function<void(Communicator&)>& fn,
              std::vector<FakeFault> faults = {}, double timeout_s = 10) {
  auto hub = FakeHub::Create(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    CommOptions o;
    o.name = "test";
    o.timeout_s = timeout_s;
    FakeFault f = r < static_cast<int>(faults.size()) ? faults[r] : FakeFault{};
    threads.emplace_back([&fn, c = hub->Connect(r, o, f)]() mutable { fn(*c); });
  }
  for (auto& t : threads) t.join();
}

float Value(int r, int64_t i) { return std::ldexp(static_cast<float>((i * 7919 + r * 104729) % 1000003), r % 2 ? 3 : -17); }

class FakeRanks : public ::testing::TestWithParam<int> {};

TEST_P(FakeRanks, AllReduceSumAvgMaxMatchSerialLoop) {
  const int n = GetParam();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    RunRanks(n, [&](Communicator& c) {
      const int64_t len = 1001;
      std::vector<float> buf(len);
      for (int64_t i = 0; i < len; ++i) buf[i] = Value(c.rank(), i);
      Tensor t(buf.data(), DType::kF32, {len});
      ASSERT_TRUE(c.AllReduce(t, op)->Wait().ok());
      for (int64_t i = 0; i < len; ++i) {
        float acc = Value(0, i);
        for (int q = 1; q < n; ++q) acc = op == ReduceOp::kMax ? std::max(acc, Value(q, i)) : acc + Value(q, i);
        if (op == ReduceOp::kAvg) acc /= static_cast<float>(n);
        ASSERT_EQ(buf[i], acc) << "rank " << c.rank() << " element " << i;
      }
    });
  }
}

TEST_P(FakeRanks, Bf16AndI32Reductions) {
  const int n = GetParam();
  RunRanks(n, [&](Communicator& c) {
    std::vector<uint16_t> h = {F32ToBf16(1.0f + c.rank()), F32ToBf16(-0.5f * c.rank())};
    Tensor th(h.data(), DType::kBF16, {2});
    ASSERT_TRUE(c.AllReduce(th, ReduceOp::kSum)->Wait().ok());
    // Rank order starting from rank 0's value (so -0.0 from a single rank stays -0.0).
    float s0 = 1.0f, s1 = -0.0f;
    for (int q = 1; q < n; ++q) s0 += 1.0f + q, s1 += -0.5f * q;
    EXPECT_EQ(h[0], F32ToBf16(s0));
    EXPECT_EQ(h[1], F32ToBf16(s1));
    int32_t v[2] = {c.rank() + 1, -c.rank()};
    Tensor ti(v, DType::kI32, {2});
    ASSERT_TRUE(c.AllReduce(ti, ReduceOp::kMax)->Wait().ok());
    EXPECT_EQ(v[0], n);
    EXPECT_EQ(v[1], 0);
    Status avg_i32 = c.AllReduce(ti, ReduceOp::kAvg)->Wait();
    EXPECT_EQ(avg_i32.code(), StatusCode::kInvalidArgument);
  });
}

TEST_P(FakeRanks, ReduceScatterAllGatherBroadcast) {
  const int n = GetParam();
  RunRanks(n, [&](Communicator& c) {
    const int r = c.rank();
    const int64_t m = 3;
    std::vector<float> in(m * n), out(m);
    for (int64_t i = 0; i < m * n; ++i) in[i] = static_cast<float>(i * 10 + r);
    Tensor tin(in.data(), DType::kF32, {m * n}), tout(out.data(), DType::kF32, {m});
    ASSERT_TRUE(c.ReduceScatter(tin, tout, ReduceOp::kSum, ReduceOrder::kRankOrder)->Wait().ok());
    for (int64_t i = 0; i < m; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>((r * m + i) * 10 + q);
      EXPECT_EQ(out[i], want);
    }
    std::vector<int32_t> mine = {r, 100 + r}, all(2 * n, -1);
    Tensor tm(mine.data(), DType::kI32, {2}), ta(all.data(), DType::kI32, {2 * n});
    ASSERT_TRUE(c.AllGather(tm, ta)->Wait().ok());
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(all[2 * q], q);
      EXPECT_EQ(all[2 * q + 1], 100 + q);
    }
    for (int root = 0; root < n; ++root) {
      std::vector<float> b(4, r == root ? 7.0f + root : 0.0f);
      Tensor tb(b.data(), DType::kF32, {4});
      ASSERT_TRUE(c.Broadcast(tb, root)->Wait().ok());
      for (float x : b) EXPECT_EQ(x, 7.0f + root);
    }
    ASSERT_TRUE(c.Barrier()->Wait().ok());
  });
}

TEST_P(FakeRanks, AllToAllUnevenCounts) {
  const int n = GetParam();
  RunRanks(n, [&](Communicator& c) {
    const int r = c.rank();
    // Rank s sends (s + 2p) % 3 elements to p, each valued 100 s + p.
    std::vector<int64_t> sc(n), rc(n);
    std::vector<float> send;
    int64_t recv_total = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = (r + 2 * p) % 3;
      rc[p] = (p + 2 * r) % 3;
      recv_total += rc[p];
      for (int64_t k = 0; k < sc[p]; ++k) send.push_back(100.0f * r + p);
    }
    std::vector<float> recv(recv_total, -1.0f);
    Tensor ts(send.data(), DType::kF32, {static_cast<int64_t>(send.size())});
    Tensor tr(recv.data(), DType::kF32, {recv_total});
    ASSERT_TRUE(c.AllToAll(ts, tr, sc, rc)->Wait().ok());
    int64_t off = 0;
    for (int p = 0; p < n; ++p) {
      for (int64_t k = 0; k < rc[p]; ++k) EXPECT_EQ(recv[off++], 100.0f * p + r);
    }
  });
}

TEST_P(FakeRanks, SendRecvRingAndSplit) {
  const int n = GetParam();
  RunRanks(n, [&](Communicator& c) {
    const int r = c.rank();
    if (n > 1) {
      std::vector<float> out(5, static_cast<float>(r)), in(5, -1.0f);
      Tensor to(out.data(), DType::kF32, {5}), ti(in.data(), DType::kF32, {5});
      auto send = c.Send(to, (r + 1) % n);
      auto recv = c.Recv(ti, (r + n - 1) % n);
      ASSERT_TRUE(send->Wait().ok());
      ASSERT_TRUE(recv->Wait().ok());
      EXPECT_EQ(in[4], static_cast<float>((r + n - 1) % n));
      EXPECT_EQ(send->sequence_number(), 0u);
    }
    // Even/odd groups, numbered in reverse rank order through the key.
    CommOptions o = c.options();
    o.name = "parity";
    auto sub = c.Split(r % 2, -r, o);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    Communicator& s = **sub;
    std::vector<int> members;
    for (int q = n - 1; q >= 0; --q) {
      if (q % 2 == r % 2) members.push_back(q);
    }
    ASSERT_EQ(s.size(), static_cast<int>(members.size()));
    EXPECT_EQ(members[s.rank()], r);
    int32_t v = r;
    Tensor tv(&v, DType::kI32, {1});
    ASSERT_TRUE(s.AllReduce(tv, ReduceOp::kSum)->Wait().ok());
    int32_t want = 0;
    for (int q : members) want += q;
    EXPECT_EQ(v, want);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, FakeRanks, ::testing::Values(1, 2, 3, 4));

TEST(FakeComm, SequenceNumbersCountCollectivesPerGroup) {
  RunRanks(3, [](Communicator& c) {
    float x = 1;
    Tensor t(&x, DType::kF32, {1});
    for (uint64_t k = 0; k < 4; ++k) {
      auto w = c.AllReduce(t, ReduceOp::kSum);
      EXPECT_EQ(w->sequence_number(), 2 * k);
      ASSERT_TRUE(w->Wait().ok());
      auto b = c.Barrier();
      EXPECT_EQ(b->sequence_number(), 2 * k + 1);
      ASSERT_TRUE(b->Wait().ok());
    }
  });
}

TEST(FakeComm, HungPeerBecomesNamedTimeoutWithinTheTimeout) {
  // Rank 1 hangs its 3rd op (all_reduce #2); the others' Wait() must fail after ~0.3 s with a
  // message naming group, op and sequence number.
  std::vector<FakeFault> faults(3);
  faults[1] = {FakeFault::Kind::kHang, 3};
  std::vector<Status> results(3);
  std::vector<double> waited_s(3);
  RunRanks(3, [&](Communicator& c) {
    float x = 1;
    Tensor t(&x, DType::kF32, {1});
    ASSERT_TRUE(c.AllReduce(t, ReduceOp::kSum)->Wait().ok());
    ASSERT_TRUE(c.AllReduce(t, ReduceOp::kSum)->Wait().ok());
    auto w = c.AllReduce(t, ReduceOp::kSum);
    auto t0 = std::chrono::steady_clock::now();
    results[c.rank()] = w->Wait();
    waited_s[c.rank()] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }, faults, /*timeout_s=*/0.3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kTimeout) << r;
    EXPECT_NE(results[r].message().find("comm timeout: group 'test' rank " + std::to_string(r) +
                                        "/3 all_reduce #2 did not complete within 300 ms"),
              std::string::npos)
        << results[r].message();
    EXPECT_GE(waited_s[r], 0.29);
    EXPECT_LT(waited_s[r], 2.0);
  }
}

TEST(FakeComm, FailedNthOpReturnsItsErrorAndPeersTimeOut) {
  std::vector<FakeFault> faults(2);
  faults[0] = {FakeFault::Kind::kFail, 2};
  std::vector<Status> results(2);
  RunRanks(2, [&](Communicator& c) {
    ASSERT_TRUE(c.Barrier()->Wait().ok());
    results[c.rank()] = c.Barrier()->Wait(milliseconds(200));
  }, faults);
  EXPECT_EQ(results[0].code(), StatusCode::kInternal);
  EXPECT_NE(results[0].message().find("barrier #1: injected failure"), std::string::npos)
      << results[0].message();
  EXPECT_EQ(results[1].code(), StatusCode::kTimeout);
  EXPECT_NE(results[1].message().find("barrier #1"), std::string::npos);
}

TEST(FakeComm, AbortWakesWaitersAndFailsLaterOps) {
  auto hub = FakeHub::Create(2);
  CommOptions o;
  o.name = "dp";
  o.timeout_s = 30;
  auto c0 = hub->Connect(0, o);  // rank 1 never joins
  float x = 1;
  Tensor t(&x, DType::kF32, {1});
  auto w = c0->AllReduce(t, ReduceOp::kSum);
  EXPECT_FALSE(w->IsCompleted());
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    c0->Abort(Status(StatusCode::kTimeout, "peer lost"));
  });
  auto t0 = std::chrono::steady_clock::now();
  Status s = w->Wait();  // the 30 s default: must return right after the abort
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  aborter.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_NE(s.message().find("group 'dp' rank 0/2 all_reduce #0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("peer lost"), std::string::npos);
  EXPECT_LT(waited, 5.0);
  EXPECT_TRUE(w->IsCompleted());
  EXPECT_TRUE(c0->aborted());
  Status later = c0->Barrier()->Wait();
  EXPECT_EQ(later.code(), StatusCode::kAborted);
  c0->Abort(Status(StatusCode::kInternal, "second"));  // idempotent: first reason stays
  EXPECT_EQ(c0->Barrier()->Wait().message().find("second"), std::string::npos);
}

TEST(FakeComm, DesyncIsReportedOnEveryRank) {
  std::vector<Status> results(2);
  RunRanks(2, [&](Communicator& c) {
    std::vector<float> buf(c.rank() == 0 ? 4 : 5, 1.0f);
    Tensor t(buf.data(), DType::kF32, {static_cast<int64_t>(buf.size())});
    results[c.rank()] = c.AllReduce(t, ReduceOp::kSum)->Wait();
  });
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("desync"), std::string::npos) << s.message();
  }
}

TEST(FakeComm, InvalidArgumentsFailLocallyAndNameTheNumbers) {
  RunRanks(2, [](Communicator& c) {
    std::vector<float> a(6), b(4);
    Tensor ta(a.data(), DType::kF32, {6}), tb(b.data(), DType::kF32, {4});
    Status s = c.ReduceScatter(ta, tb, ReduceOp::kSum)->Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("reduce_scatter #0"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("got 6 and 4"), std::string::npos) << s.message();
    EXPECT_EQ(c.Send(ta, c.rank())->Wait().code(), StatusCode::kInvalidArgument);
    Tensor dev(a.data(), DType::kF32, {6}, Device::kCuda);
    EXPECT_EQ(c.AllReduce(dev, ReduceOp::kSum)->Wait().code(), StatusCode::kInvalidArgument);
    // The failed ops consumed the numbers the peer used too: the groups stay in step.
    auto w = c.Barrier();
    EXPECT_EQ(w->sequence_number(), 2u);
    EXPECT_TRUE(w->Wait().ok());
  });
}

TEST(Reduce, RowsMatchAccumulatorBitForBit) {
  const int64_t n = 5000;
  std::vector<std::vector<float>> rows(3, std::vector<float>(n));
  std::vector<const void*> ptrs;
  RankOrderAccumulator acc(DType::kF32, ReduceOp::kAvg, n);
  for (int r = 0; r < 3; ++r) {
    for (int64_t i = 0; i < n; ++i) rows[r][i] = Value(r, i);
    ptrs.push_back(rows[r].data());
    acc.Add(rows[r].data());
  }
  std::vector<float> a(n), b(n);
  acc.Finish(a.data());
  ReduceRows(DType::kF32, ReduceOp::kAvg, ptrs.data(), 3, b.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0);
  // dst aliasing a row is allowed.
  ReduceRows(DType::kF32, ReduceOp::kAvg, ptrs.data(), 3, rows[1].data(), n);
  EXPECT_EQ(std::memcmp(a.data(), rows[1].data(), n * 4), 0);
}

}  // namespace
}  // namespace tessera
