// tests/multirank/comm_driver.cc — the MPI backend under the real mpirun (target
// comm_mpi_driver, run by CTest from tests/multirank/CMakeLists.txt).
//
//   comm_mpi_driver collectives      every collective on every rank checked against values each
//                                    rank can compute alone; exits 1 if any rank saw a mismatch
//   comm_mpi_driver hang             the last rank SIGSTOPs itself before an all-reduce; the
//                                    others must time out (2 s) naming group/op/seq and end the
//                                    job through AbortJob with kExitCommTimeout
//   comm_mpi_driver bench BYTES ITERS  all-reduce / reduce-scatter / raw MPI_Allreduce figures
// Contributions are chosen so that fp32 sums round (0.1-ish values of different magnitudes):
// the rank-order path must match a serial loop bit for bit, the backend path within 1e-6; f16
// contributions likewise (bit for bit against an fp32 loop rounded once; kBackend within the
// error of its per-add rounding), plus f16 overflow to inf.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "comm/bench.h"
#include "comm/device_mesh.h"
#include "comm/mpi.h"
#include "comm/process_groups.h"
#include "comm/reduce.h"

using namespace tessera;

namespace {

int g_failures = 0;
int g_rank = 0;

void Expect(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    std::fprintf(stderr, "rank %d: FAIL: %s\n", g_rank, what.c_str());
  }
}

void MustOk(const Status& s) {
  if (!s.ok()) AbortJob(s);
}

// Rank r's i-th contribution: exact floats (an integer below 2^24 times a power of two, so no
// FMA contraction can change them) of very different magnitudes, whose sums round differently
// in different orders.
float Value(int r, int64_t i) {
  const int64_t k = (i * 7919 + r * 104729) % 1000003;
  return std::ldexp(static_cast<float>(k), r % 2 ? 3 : -17);
}

// The serial rank-order reduction of Value(0..n-1, i) for element i (the oracle).
float Serial(int n, int64_t i, ReduceOp op) {
  float acc = Value(0, i);
  for (int r = 1; r < n; ++r) {
    float v = Value(r, i);
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  return op == ReduceOp::kAvg ? acc / static_cast<float>(n) : acc;
}

void CheckAllReduce(Communicator& c, int64_t n_elems) {
  const int n = c.size(), r = c.rank();
  for (ReduceOrder order : {ReduceOrder::kRankOrder, ReduceOrder::kBackend}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      std::vector<float> buf(static_cast<size_t>(n_elems));
      for (int64_t i = 0; i < n_elems; ++i) buf[i] = Value(r, i);
      Tensor t(buf.data(), DType::kF32, {n_elems});
      MustOk(c.AllReduce(t, op, order)->Wait());
      int64_t bad = 0;
      for (int64_t i = 0; i < n_elems; ++i) {
        float want = Serial(n, i, op);
        bool ok = order == ReduceOrder::kRankOrder || op == ReduceOp::kMax
                      ? std::memcmp(&buf[i], &want, 4) == 0
                      : std::fabs(buf[i] - want) <= 1e-6f * std::fabs(want) + 1e-6f;
        bad += !ok;
      }
      Expect(bad == 0, c.name() + " all_reduce " + ReduceOpName(op) +
                           (order == ReduceOrder::kRankOrder ? " rank_order" : " backend") + " n=" +
                           std::to_string(n_elems) + ": " + std::to_string(bad) + " wrong");
    }
  }
  // bf16: rank order accumulates in fp32 and rounds once.
  std::vector<uint16_t> h(static_cast<size_t>(n_elems));
  for (int64_t i = 0; i < n_elems; ++i) h[i] = F32ToBf16(Value(r, i));
  Tensor th(h.data(), DType::kBF16, {n_elems});
  MustOk(c.AllReduce(th, ReduceOp::kSum, ReduceOrder::kRankOrder)->Wait());
  int64_t bad = 0;
  for (int64_t i = 0; i < n_elems; ++i) {
    float acc = 0;
    for (int q = 0; q < n; ++q) acc += Bf16ToF32(F32ToBf16(Value(q, i)));
    bad += h[i] != F32ToBf16(acc);
  }
  Expect(bad == 0, c.name() + " bf16 all_reduce rank_order: " + std::to_string(bad) + " wrong");
  // i32 max through the backend path.
  int32_t v = 10 * r + 3;
  Tensor ti(&v, DType::kI32, {1});
  MustOk(c.AllReduce(ti, ReduceOp::kMax)->Wait());
  Expect(v == 10 * (n - 1) + 3, c.name() + " i32 max");
}

// Rank r's i-th f16 contribution: an exact f16 (11-bit integer times 2^-12 or 2^-3), so sums of
// up to a few ranks round differently in different orders but stay far below 65504.
uint16_t HalfValue(int r, int64_t i) {
  const int64_t k = (i * 7919 + r * 104729) % 2003 - 1001;
  return F32ToF16(std::ldexp(static_cast<float>(k == 0 ? 1 : k), r % 2 ? -3 : -12));
}

// Checks n f16 results against the rank-order oracle (element offset + i of every rank, widened,
// summed in fp32 in rank order, rounded once): bit for bit for kRankOrder and for max (exact in
// any order); for kBackend sums within the error of n - 1 roundings after pairwise adds plus the
// final one (Open MPI's order below 256 KiB per rank).
int64_t CountBadF16(int n, const uint16_t* got, int64_t len, int64_t offset, ReduceOp op,
                    ReduceOrder order) {
  int64_t bad = 0;
  for (int64_t i = 0; i < len; ++i) {
    float acc = F16ToF32(HalfValue(0, offset + i)), abs_sum = std::fabs(acc);
    for (int q = 1; q < n; ++q) {
      const float v = F16ToF32(HalfValue(q, offset + i));
      acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
      abs_sum += std::fabs(v);
    }
    if (op == ReduceOp::kAvg) acc /= static_cast<float>(n), abs_sum /= static_cast<float>(n);
    const uint16_t want = F32ToF16(acc);
    if (order == ReduceOrder::kRankOrder || op == ReduceOp::kMax) {
      bad += got[i] != want;
    } else {
      const float tol =
          static_cast<float>(n + 1) * std::ldexp(abs_sum, -11) + std::ldexp(1.0f, -24);
      bad += !(std::fabs(F16ToF32(got[i]) - acc) <= tol);
    }
  }
  return bad;
}

// f16 all-reduce and reduce-scatter, sum/avg/max, both orders, below and above the 256 KiB
// point-to-point threshold (so kBackend runs both Open MPI with our f16 user op and the
// gather-to-owner exchange), then the overflow behaviour the two orders document.
void CheckF16(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (ReduceOrder order : {ReduceOrder::kRankOrder, ReduceOrder::kBackend}) {
    const std::string order_name = order == ReduceOrder::kRankOrder ? " rank_order" : " backend";
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      for (int64_t len : {int64_t{1}, int64_t{1000}, int64_t{140001}}) {
        std::vector<uint16_t> buf(static_cast<size_t>(len));
        for (int64_t i = 0; i < len; ++i) buf[i] = HalfValue(r, i);
        Tensor t(buf.data(), DType::kF16, {len});
        MustOk(c.AllReduce(t, op, order)->Wait());
        const int64_t bad = CountBadF16(n, buf.data(), len, 0, op, order);
        Expect(bad == 0, c.name() + " f16 all_reduce " + ReduceOpName(op) + order_name + " n=" +
                             std::to_string(len) + ": " + std::to_string(bad) + " wrong");
      }
      for (int64_t m : {int64_t{5}, int64_t{70001}}) {
        std::vector<uint16_t> in(static_cast<size_t>(m * n)), out(static_cast<size_t>(m));
        for (int64_t i = 0; i < m * n; ++i) in[i] = HalfValue(r, i);
        Tensor ti(in.data(), DType::kF16, {m * n}), to(out.data(), DType::kF16, {m});
        MustOk(c.ReduceScatter(ti, to, op, order)->Wait());
        const int64_t bad = CountBadF16(n, out.data(), m, r * m, op, order);
        Expect(bad == 0, c.name() + " f16 reduce_scatter " + ReduceOpName(op) + order_name +
                             " m=" + std::to_string(m) + ": " + std::to_string(bad) + " wrong");
      }
    }
  }
  // 60000 from every rank: the sum overflows to inf in both orders; the avg is 60000 in rank
  // order (fp32 accumulator) but inf through Open MPI's f16 sum.
  if (n > 1) {
    for (ReduceOrder order : {ReduceOrder::kRankOrder, ReduceOrder::kBackend}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        uint16_t x = F32ToF16(60000.0f);
        Tensor t(&x, DType::kF16, {1});
        MustOk(c.AllReduce(t, op, order)->Wait());
        const bool finite = order == ReduceOrder::kRankOrder && op == ReduceOp::kAvg;
        const float want = finite ? 60000.0f : std::numeric_limits<float>::infinity();
        Expect(F16ToF32(x) == want, c.name() + " f16 overflow " + ReduceOpName(op) +
                                        (order == ReduceOrder::kRankOrder ? " rank_order" : " backend") +
                                        ": got " + std::to_string(F16ToF32(x)));
      }
    }
  }
}

void CheckOthers(Communicator& c) {
  const int n = c.size(), r = c.rank();
  // reduce-scatter, both orders.
  const int64_t m = 5;
  for (ReduceOrder order : {ReduceOrder::kRankOrder, ReduceOrder::kBackend}) {
    std::vector<float> in(static_cast<size_t>(m * n)), out(static_cast<size_t>(m));
    for (int64_t i = 0; i < m * n; ++i) in[i] = Value(r, i);
    Tensor ti(in.data(), DType::kF32, {m * n}), to(out.data(), DType::kF32, {m});
    MustOk(c.ReduceScatter(ti, to, ReduceOp::kSum, order)->Wait());
    for (int64_t i = 0; i < m; ++i) {
      float want = Serial(n, r * m + i, ReduceOp::kSum);
      bool ok = order == ReduceOrder::kRankOrder ? out[i] == want
                                                 : std::fabs(out[i] - want) <= 1e-6f * std::fabs(want);
      Expect(ok, c.name() + " reduce_scatter element " + std::to_string(i));
    }
  }
  // all-gather.
  std::vector<float> mine = {static_cast<float>(r), static_cast<float>(r) + 0.5f};
  std::vector<float> all(static_cast<size_t>(2 * n));
  Tensor tm(mine.data(), DType::kF32, {2}), ta(all.data(), DType::kF32, {2 * n});
  MustOk(c.AllGather(tm, ta)->Wait());
  for (int q = 0; q < n; ++q) Expect(all[2 * q] == q && all[2 * q + 1] == q + 0.5f, c.name() + " all_gather");
  // all-to-all with uneven counts: rank s sends (s + p) % 3 elements to p, valued 100 s + p.
  std::vector<int64_t> sc(n), rc(n);
  std::vector<int32_t> sbuf, rbuf;
  for (int p = 0; p < n; ++p) {
    sc[p] = (r + p) % 3;
    rc[p] = (p + r) % 3;
    for (int64_t k = 0; k < sc[p]; ++k) sbuf.push_back(100 * r + p);
  }
  int64_t total = 0;
  for (int p = 0; p < n; ++p) total += rc[p];
  rbuf.assign(static_cast<size_t>(total), -1);
  Tensor ts(sbuf.data(), DType::kI32, {static_cast<int64_t>(sbuf.size())});
  Tensor tr(rbuf.data(), DType::kI32, {total});
  MustOk(c.AllToAll(ts, tr, sc, rc)->Wait());
  for (int p = 0, off = 0; p < n; ++p) {
    for (int64_t k = 0; k < rc[p]; ++k, ++off) Expect(rbuf[off] == 100 * p + r, c.name() + " all_to_all");
  }
  // broadcast from every root.
  for (int root = 0; root < n; ++root) {
    std::vector<uint16_t> b(7, static_cast<uint16_t>(r == root ? 1000 + root : 0));
    Tensor tb(b.data(), DType::kBF16, {7});
    MustOk(c.Broadcast(tb, root)->Wait());
    for (uint16_t x : b) Expect(x == 1000 + root, c.name() + " broadcast from " + std::to_string(root));
  }
  // send/recv around the ring, both directions outstanding at once (a large message, so it
  // needs the receiver: the send cannot complete before the recv is posted).
  if (n > 1) {
    const int64_t big = 1 << 18;
    std::vector<float> out_buf(big, static_cast<float>(r)), in_buf(big, -1.f);
    Tensor to(out_buf.data(), DType::kF32, {big}), ti(in_buf.data(), DType::kF32, {big});
    auto send = c.Send(to, (r + 1) % n);
    auto recv = c.Recv(ti, (r + n - 1) % n);
    MustOk(send->Wait());
    MustOk(recv->Wait());
    Expect(in_buf[0] == (r + n - 1) % n && in_buf[big - 1] == (r + n - 1) % n, c.name() + " send/recv");
  }
  MustOk(c.Barrier()->Wait());
  // Sequence numbers agree: gather this op's own number from everyone.
  int32_t seq_probe[2] = {0, 0};
  std::vector<int32_t> seqs(static_cast<size_t>(n));
  Tensor tp(seq_probe, DType::kI32, {1}), tq(seqs.data(), DType::kI32, {n});
  auto w = c.AllGather(tp, tq);
  const uint64_t my_seq = w->sequence_number();
  MustOk(w->Wait());
  seq_probe[0] = static_cast<int32_t>(my_seq);
  auto w2 = c.AllGather(tp, tq);
  MustOk(w2->Wait());
  for (int q = 0; q < n; ++q) Expect(seqs[q] == static_cast<int32_t>(my_seq), c.name() + " sequence numbers");
}

int Collectives() {
  auto session = MpiSession::Init(nullptr, nullptr);
  if (!session.ok()) AbortJob(session.status());
  g_rank = (*session)->world_rank();
  {
    CommOptions opts;
    opts.timeout_s = 20;
    auto world = (*session)->World(opts);
    if (!world.ok()) AbortJob(world.status());
    Communicator& c = **world;
    for (int64_t n : {1, 3, 1000, 100003}) CheckAllReduce(c, n);
    CheckOthers(c);
    CheckF16(c);
    // Sub-groups: even and odd ranks, numbered in reverse order by key.
    CommOptions sub_opts = opts;
    sub_opts.name = "parity";
    auto sub = c.Split(c.rank() % 2, -c.rank(), sub_opts);
    if (!sub.ok()) AbortJob(sub.status());
    Expect((*sub)->size() == (c.size() + 1 - c.rank() % 2) / 2, "split size");
    CheckAllReduce(**sub, 1001);
    CheckOthers(**sub);
    CheckF16(**sub);
    // Mesh groups: tp-fastest layout on the world.
    ParallelLayout layout;
    layout.tp = c.size() % 2 == 0 ? 2 : 1;
    layout.dp = c.size() / layout.tp;
    auto mesh = DeviceMesh::Create(layout, c.size());
    if (!mesh.ok()) AbortJob(mesh.status());
    auto groups = ProcessGroups::Build(c, *mesh);
    if (!groups.ok()) AbortJob(groups.status());
    for (MeshGroup g : kAllMeshGroups) {
      Communicator& gc = groups->Get(g);
      Expect(gc.size() == mesh->GroupSize(g), std::string("mesh group size ") + MeshGroupName(g));
      int32_t me = c.rank();
      std::vector<int32_t> members(static_cast<size_t>(gc.size()));
      Tensor tme(&me, DType::kI32, {1}), tmem(members.data(), DType::kI32, {gc.size()});
      MustOk(gc.AllGather(tme, tmem)->Wait());
      Expect(members == mesh->GroupRanks(g, c.rank()), std::string("mesh group members ") + MeshGroupName(g));
    }
    // Agree on the verdict.
    int32_t failures = g_failures;
    Tensor tf(&failures, DType::kI32, {1});
    MustOk(c.AllReduce(tf, ReduceOp::kSum)->Wait());
    if (c.rank() == 0) {
      std::printf("comm_mpi_driver collectives: %d ranks, %d failures\n", c.size(), failures);
    }
    g_failures = failures;
  }
  session->reset();
  return g_failures == 0 ? 0 : 1;
}

int Hang() {
  auto session = MpiSession::Init(nullptr, nullptr);
  if (!session.ok()) AbortJob(session.status());
  CommOptions opts;
  opts.timeout_s = 2;
  auto world = (*session)->World(opts);
  if (!world.ok()) AbortJob(world.status());
  Communicator& c = **world;
  std::vector<float> buf(1024, 1.0f);
  Tensor t(buf.data(), DType::kF32, {1024});
  MustOk(c.AllReduce(t, ReduceOp::kSum)->Wait());  // #0 completes everywhere
  MustOk(c.Barrier()->Wait());                      // #1
  if (c.rank() == c.size() - 1) {
    std::fprintf(stderr, "rank %d: stopping myself (SIGSTOP) before all_reduce #2\n", c.rank());
    raise(SIGSTOP);
  }
  Status s = c.AllReduce(t, ReduceOp::kSum)->Wait();  // #2 never completes
  if (s.ok()) {
    std::fprintf(stderr, "rank %d: all_reduce #2 unexpectedly completed\n", c.rank());
    return 1;
  }
  AbortJob(s);
}

int Bench(int64_t bytes, int iters) {
  auto session = MpiSession::Init(nullptr, nullptr);
  if (!session.ok()) AbortJob(session.status());
  {
    auto world = (*session)->World(CommOptions{});
    if (!world.ok()) AbortJob(world.status());
    Communicator& c = **world;
    for (int rep = 0; rep < 2; ++rep) {
      auto raw = BenchRawMpiAllReduce(c, bytes, iters);
      auto ar = BenchAllReduce(c, bytes, iters);
      auto ro = BenchAllReduce(c, bytes, iters, ReduceOrder::kRankOrder);
      auto rs = BenchReduceScatter(c, bytes, iters);
      for (auto* r : {&raw, &ar, &ro, &rs}) {
        if (!r->ok()) AbortJob(r->status());
        if (c.rank() == 0) std::printf("%s\n", (*r)->ToString().c_str());
      }
    }
  }
  session->reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  if (mode == "collectives") return Collectives();
  if (mode == "hang") return Hang();
  if (mode == "bench") {
    int64_t bytes = argc > 2 ? std::stoll(argv[2]) : (int64_t{64} << 20);
    int iters = argc > 3 ? std::stoi(argv[3]) : 10;
    return Bench(bytes, iters);
  }
  std::fprintf(stderr, "usage: comm_mpi_driver collectives|hang|bench [BYTES ITERS]\n");
  return 2;
}
