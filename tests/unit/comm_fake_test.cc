// links: tessera_comm
// tests/unit/comm_fake_test.cc — every collective on the fake backend for 1..4 ranks (threads),
// sequence numbers, desync reports, and the failure paths: a hung or failed N-th op becomes a
// bounded, named error; Abort wakes waiters; the process-wide activity counters (comm/activity.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "comm/activity.h"
#include "comm/activity_internal.h"
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

// Exact f16 values (an 11-bit integer times a power of two, all normal) of magnitudes 2^-12..2^7
// whose sums round differently in different orders; four of them stay far below 65504.
uint16_t HalfValue(int r, int64_t i) {
  const int64_t k = (i * 7919 + r * 104729) % 2003 - 1001;
  return F32ToF16(std::ldexp(static_cast<float>(k == 0 ? 1 : k), r % 2 ? -3 : -12));
}

// The rank-order oracle for f16: a serial fp32 loop over the widened contributions, divided for
// avg, rounded to f16 once.
uint16_t HalfSerial(int n, int64_t i, int64_t offset, ReduceOp op) {
  float acc = F16ToF32(HalfValue(0, offset + i));
  for (int q = 1; q < n; ++q) {
    const float v = F16ToF32(HalfValue(q, offset + i));
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::kAvg) acc /= static_cast<float>(n);
  return F32ToF16(acc);
}

TEST_P(FakeRanks, F16AllReduceAndReduceScatterRoundOnceLikeASerialFp32Loop) {
  const int n = GetParam();
  for (ReduceOrder order : {ReduceOrder::kRankOrder, ReduceOrder::kBackend}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      RunRanks(n, [&](Communicator& c) {
        const int r = c.rank();
        const int64_t len = 3001;  // more than one 2048-element tile of ReduceRows
        std::vector<uint16_t> buf(len);
        for (int64_t i = 0; i < len; ++i) buf[i] = HalfValue(r, i);
        Tensor t(buf.data(), DType::kF16, {len});
        Status s = c.AllReduce(t, op, order)->Wait();
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (int64_t i = 0; i < len; ++i) {
          ASSERT_EQ(buf[i], HalfSerial(n, i, 0, op))
              << ReduceOpName(op) << " rank " << r << " element " << i;
        }
        const int64_t m = 7;
        std::vector<uint16_t> in(m * n), out(m);
        for (int64_t i = 0; i < m * n; ++i) in[i] = HalfValue(r, i);
        Tensor tin(in.data(), DType::kF16, {m * n}), tout(out.data(), DType::kF16, {m});
        s = c.ReduceScatter(tin, tout, op, order)->Wait();
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (int64_t i = 0; i < m; ++i) {
          ASSERT_EQ(out[i], HalfSerial(n, i, r * m, op))
              << ReduceOpName(op) << " reduce_scatter rank " << r;
        }
      });
    }
  }
}

// A host backend's ops complete on the host: no device event to wait on, and the only event it
// can be ordered after is the null one (what a CPU compute backend records).
TEST(FakeComm, HostWorkHasNoReadyEventAndWaitsOnlyForTheNullEvent) {
  auto hub = FakeHub::Create(1);
  CommOptions o;
  o.name = "host";
  std::unique_ptr<Communicator> c = hub->Connect(0, o);
  c->After(Event{});
  std::vector<float> x = {1.0f, 2.0f};
  Tensor t(x.data(), DType::kF32, {2});
  std::unique_ptr<Work> w = c->AllReduce(t, ReduceOp::kSum);
  EXPECT_TRUE(w->ready_event().is_null());
  EXPECT_TRUE(w->Wait().ok());
}

TEST(FakeCommDeathTest, HostCommunicatorRefusesADeviceEvent) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto hub = FakeHub::Create(1);
  CommOptions o;
  o.name = "host";
  std::unique_ptr<Communicator> c = hub->Connect(0, o);
  EXPECT_DEATH(c->After(Event{1}), "group 'host': a host communicator cannot wait on a device");
}

TEST(FakeComm, F16RankOrderRoundsOnceNotAfterEveryAdd) {
  // 2048 + 1 + 1: every intermediate rounded to f16 (ulp 2 at 2048, ties to even) stays 2048;
  // the fp32 accumulator reaches 2050, which f16 holds exactly.
  RunRanks(3, [](Communicator& c) {
    uint16_t x = F32ToF16(c.rank() == 0 ? 2048.0f : 1.0f);
    Tensor t(&x, DType::kF16, {1});
    ASSERT_TRUE(c.AllReduce(t, ReduceOp::kSum, ReduceOrder::kRankOrder)->Wait().ok());
    EXPECT_EQ(F16ToF32(x), 2050.0f);
  });
  uint16_t acc = F32ToF16(2048.0f);
  const uint16_t one = F32ToF16(1.0f);
  CombineInPlace(DType::kF16, ReduceOp::kSum, &acc, &one, 1);  // the MPI kBackend user op
  CombineInPlace(DType::kF16, ReduceOp::kSum, &acc, &one, 1);
  EXPECT_EQ(F16ToF32(acc), 2048.0f);
}

TEST(FakeComm, F16OverflowGoesToInfOnlyWhereTheRoundedResultDoes) {
  const float inf = std::numeric_limits<float>::infinity();
  // Per element: rank 0's value, rank 1's value.
  const std::vector<std::pair<float, float>> in = {
      {60000.0f, 60000.0f},    // sum 120000 -> +inf; avg 60000 stays finite (fp32 accumulator)
      {-60000.0f, -60000.0f},  // -inf / -60000
      {65504.0f, 16.0f},       // 65520 is halfway to 65536 and rounds (to even) to inf;
                               // avg 32760 is halfway too and rounds up to 32768
      {65504.0f, 15.0f},       // 65519 rounds down to 65504, the largest finite f16
      {inf, 1.0f},             // inf propagates through sum, avg and max
      {inf, -inf},             // inf + -inf = NaN; max is inf
  };
  struct Want { float sum, avg, max; };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Want> want = {
      {inf, 60000.0f, 60000.0f}, {-inf, -60000.0f, -60000.0f}, {inf, 32768.0f, 65504.0f},
      {65504.0f, 32752.0f, 65504.0f}, {inf, inf, inf}, {nan, nan, inf},
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    RunRanks(2, [&](Communicator& c) {
      std::vector<uint16_t> buf;
      for (auto& [a, b] : in) buf.push_back(F32ToF16(c.rank() == 0 ? a : b));
      Tensor t(buf.data(), DType::kF16, {static_cast<int64_t>(buf.size())});
      ASSERT_TRUE(c.AllReduce(t, op, ReduceOrder::kRankOrder)->Wait().ok());
      for (size_t i = 0; i < buf.size(); ++i) {
        const float w = op == ReduceOp::kSum   ? want[i].sum
                        : op == ReduceOp::kAvg ? want[i].avg
                                               : want[i].max;
        const float got = F16ToF32(buf[i]);
        if (std::isnan(w)) {
          EXPECT_TRUE(std::isnan(got)) << ReduceOpName(op) << " element " << i << " got " << got;
        } else {
          EXPECT_EQ(got, w) << ReduceOpName(op) << " element " << i;
        }
      }
    });
  }
  // The kBackend MPI path sums in f16 first, so its avg of the first element is inf: the
  // documented difference from kRankOrder.
  uint16_t a = F32ToF16(60000.0f);
  const uint16_t b = F32ToF16(60000.0f);
  CombineInPlace(DType::kF16, ReduceOp::kAvg, &a, &b, 1);
  DivideInPlace(DType::kF16, &a, 1, 2);
  EXPECT_EQ(F16ToF32(a), inf);
}

TEST_P(FakeRanks, F16DataMovement) {
  const int n = GetParam();
  RunRanks(n, [&](Communicator& c) {
    const int r = c.rank();
    std::vector<uint16_t> mine = {HalfValue(r, 0), HalfValue(r, 1)}, all(2 * n, 0);
    Tensor tm(mine.data(), DType::kF16, {2}), ta(all.data(), DType::kF16, {2 * n});
    ASSERT_TRUE(c.AllGather(tm, ta)->Wait().ok());
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(all[2 * q], HalfValue(q, 0));
      EXPECT_EQ(all[2 * q + 1], HalfValue(q, 1));
    }
    std::vector<uint16_t> b(3, r == n - 1 ? HalfValue(n - 1, 5) : 0);
    Tensor tb(b.data(), DType::kF16, {3});
    ASSERT_TRUE(c.Broadcast(tb, n - 1)->Wait().ok());
    for (uint16_t x : b) EXPECT_EQ(x, HalfValue(n - 1, 5));
    std::vector<int64_t> counts(n, 1);
    std::vector<uint16_t> send(n), recv(n, 0);
    for (int p = 0; p < n; ++p) send[p] = HalfValue(r, p);
    Tensor ts(send.data(), DType::kF16, {n}), tr(recv.data(), DType::kF16, {n});
    ASSERT_TRUE(c.AllToAll(ts, tr, counts, counts)->Wait().ok());
    for (int p = 0; p < n; ++p) EXPECT_EQ(recv[p], HalfValue(p, r));
    if (n > 1) {
      uint16_t out = HalfValue(r, 9), got = 0;
      Tensor to(&out, DType::kF16, {1}), ti(&got, DType::kF16, {1});
      auto send_w = c.Send(to, (r + 1) % n);
      auto recv_w = c.Recv(ti, (r + n - 1) % n);
      ASSERT_TRUE(send_w->Wait().ok());
      ASSERT_TRUE(recv_w->Wait().ok());
      EXPECT_EQ(got, HalfValue((r + n - 1) % n, 9));
    }
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

TEST(FakeComm, ActivityCountsLaunchedOpsBlockedWaitersAndWaitTime) {
  // The counters are process-wide: measure deltas (no other test runs concurrently).
  auto hub = FakeHub::Create(1);
  CommOptions o;
  o.name = "act";
  o.timeout_s = 30;
  auto c = hub->Connect(0, o, {FakeFault::Kind::kHang, 3});  // the 3rd op never completes
  const CommActivity before = SampleCommActivity();
  EXPECT_EQ(before.waiting, 0);
  float x = 1;
  Tensor t(&x, DType::kF32, {1});
  ASSERT_TRUE(c->AllReduce(t, ReduceOp::kSum)->Wait().ok());
  ASSERT_TRUE(c->Barrier()->Wait().ok());
  // A validation failure still counts: it consumed the sequence number peers would use.
  Tensor bad(&x, DType::kF32, {1});
  EXPECT_EQ(c->Send(bad, 0)->Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleCommActivity().ops_launched - before.ops_launched, 3);
  EXPECT_EQ(SampleCommActivity().waiting, 0);
  EXPECT_GE(SampleCommActivity().wait_ns, before.wait_ns);  // cumulative: never goes back

  auto hung = c->AllReduce(t, ReduceOp::kSum);  // op 3 of the fault plan: hangs
  EXPECT_EQ(SampleCommActivity().ops_launched - before.ops_launched, 4);
  Status result;
  int64_t waiter_stalled_ns = 0;  // late wakeups of the waiter, which the total leaves out
  std::thread waiter([&] {
    const int64_t stalled_before = comm_internal::StalledNsOfThisThread();
    result = hung->Wait();
    waiter_stalled_ns = comm_internal::StalledNsOfThisThread() - stalled_before;
  });
  bool seen_waiting = false;
  for (int i = 0; i < 2000 && !seen_waiting; ++i) {
    seen_waiting = SampleCommActivity().waiting == 1;
    if (!seen_waiting) std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_TRUE(seen_waiting) << "a thread blocked in Work::Wait was not counted";
  // A wait still blocked is not in the total yet; it is added, all of it, when the wait ends.
  const int64_t wait_ns_while_blocked = SampleCommActivity().wait_ns;
  const auto blocked_from = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(milliseconds(30));
  const auto blocked_at_least = std::chrono::steady_clock::now() - blocked_from;
  EXPECT_EQ(SampleCommActivity().wait_ns, wait_ns_while_blocked);
  c->Abort(Status(StatusCode::kTimeout, "test over"));
  waiter.join();
  EXPECT_EQ(result.code(), StatusCode::kAborted);
  EXPECT_EQ(SampleCommActivity().waiting, 0);
  const int64_t wait_ns_after = SampleCommActivity().wait_ns;
  // All of the blocked time, less what the waiter evidently did not run (on a loaded machine
  // it can wake > 10 ms late; activity.h leaves such stretches out).
  EXPECT_GE(wait_ns_after - wait_ns_while_blocked,
            std::chrono::duration_cast<std::chrono::nanoseconds>(blocked_at_least).count() -
                waiter_stalled_ns);
  EXPECT_LT(wait_ns_after - before.wait_ns, std::chrono::nanoseconds(std::chrono::seconds(10)).count());
  // Waiting on a finished op (with or without a timeout) leaves the count at 0 afterwards and
  // adds nothing to the wait total (it never blocked).
  EXPECT_EQ(hung->Wait(milliseconds(10)).code(), StatusCode::kAborted);
  EXPECT_EQ(SampleCommActivity().waiting, 0);
  EXPECT_EQ(SampleCommActivity().wait_ns, wait_ns_after);
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

TEST(Reduce, F16RowsMatchAccumulatorBitForBit) {
  // ReduceRows is the MPI rank-order path, RankOrderAccumulator the fake backend's: they must
  // agree for f16 as for f32, across tile boundaries and when dst aliases a row.
  const int64_t n = 5000;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    std::vector<std::vector<uint16_t>> rows(4, std::vector<uint16_t>(n));
    std::vector<const void*> ptrs;
    RankOrderAccumulator acc(DType::kF16, op, n);
    for (int r = 0; r < 4; ++r) {
      for (int64_t i = 0; i < n; ++i) rows[r][i] = HalfValue(r, i);
      ptrs.push_back(rows[r].data());
      acc.Add(rows[r].data());
    }
    std::vector<uint16_t> a(n), b(n);
    acc.Finish(a.data());
    ReduceRows(DType::kF16, op, ptrs.data(), 4, b.data(), n);
    EXPECT_EQ(a, b) << ReduceOpName(op);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], HalfSerial(4, i, 0, op)) << i;
    ReduceRows(DType::kF16, op, ptrs.data(), 4, rows[2].data(), n);
    EXPECT_EQ(a, rows[2]) << ReduceOpName(op);
  }
  uint16_t h[2] = {F32ToF16(3.0f), F32ToF16(-1.0f)};
  DivideInPlace(DType::kF16, h, 2, 2);
  EXPECT_EQ(F16ToF32(h[0]), 1.5f);
  EXPECT_EQ(F16ToF32(h[1]), -0.5f);
}

TEST(FakeComm, ReductionDtypeValidationAcceptsF16) {
  RunRanks(2, [](Communicator& c) {
    uint16_t x = F32ToF16(1.5f);
    Tensor t(&x, DType::kF16, {1});
    Status s = c.AllReduce(t, ReduceOp::kSum)->Wait();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(F16ToF32(x), 3.0f);
    // f16 in, bf16 out is still a mismatch, named in the error.
    std::vector<uint16_t> in(4), out(2);
    Tensor tin(in.data(), DType::kF16, {4}), tout(out.data(), DType::kBF16, {2});
    s = c.ReduceScatter(tin, tout, ReduceOp::kSum)->Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("equal dtypes"), std::string::npos) << s.message();
  });
}

}  // namespace
}  // namespace tessera
