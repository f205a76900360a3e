// comm/fake_communicator.cc — the in-process backend; see fake_communicator.h.
#include "comm/fake_communicator.h"

#include <cstring>

#include "comm/op_state.h"
#include "comm/reduce.h"

namespace tessera {
namespace {

const char* Bytes(const void* p, int64_t elems, DType t) {
  return static_cast<const char*>(p) + elems * static_cast<int64_t>(DTypeSize(t));
}
char* Bytes(void* p, int64_t elems, DType t) {
  return static_cast<char*>(p) + elems * static_cast<int64_t>(DTypeSize(t));
}

// "rank 0 all_reduce(sum, f32, in 8, out 8, root 0)": what a desync report shows per side.
std::string DescribePart(int rank, const FakeHub::Part& p) {
  return "rank " + std::to_string(rank) + " " + CommOpName(p.op) + "(" + ReduceOpName(p.reduce) +
         ", " + std::string(DTypeName(p.dtype)) + ", in " + std::to_string(p.in_n) + ", out " +
         std::to_string(p.out_n) + ", root " + std::to_string(p.root) + ")";
}

bool SameShape(const FakeHub::Part& a, const FakeHub::Part& b) {
  if (a.op != b.op || a.dtype != b.dtype) return false;
  switch (a.op) {
    case CommOp::kAllReduce:
    case CommOp::kReduceScatter:
      return a.reduce == b.reduce && a.in_n == b.in_n;
    case CommOp::kAllGather: return a.in_n == b.in_n;
    case CommOp::kBroadcast: return a.root == b.root && a.in_n == b.in_n;
    default: return true;
  }
}

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeHub> hub, int rank, CommOptions options, FakeFault fault)
      : Communicator(rank, hub->size(), std::move(options)), hub_(std::move(hub)), fault_(fault) {}

  Device device() const override { return Device::kCpu; }

 protected:
  void DoAllReduce(Tensor& buf, ReduceOp op, ReduceOrder, std::shared_ptr<OpState> s) override {
    FakeHub::Part p = MakePart(CommOp::kAllReduce, buf.dtype(), buf.data(), buf.numel(),
                               buf.data(), buf.numel());
    p.reduce = op;
    Collective(std::move(p), std::move(s));
  }
  void DoReduceScatter(const Tensor& in, Tensor& out, ReduceOp op, ReduceOrder,
                       std::shared_ptr<OpState> s) override {
    FakeHub::Part p = MakePart(CommOp::kReduceScatter, in.dtype(), in.data(), in.numel(),
                               out.data(), out.numel());
    p.reduce = op;
    Collective(std::move(p), std::move(s));
  }
  void DoAllGather(const Tensor& in, Tensor& out, std::shared_ptr<OpState> s) override {
    Collective(MakePart(CommOp::kAllGather, in.dtype(), in.data(), in.numel(), out.data(),
                        out.numel()),
               std::move(s));
  }
  void DoAllToAll(const Tensor& in, Tensor& out, std::vector<int64_t> send_counts,
                  std::vector<int64_t> recv_counts, std::shared_ptr<OpState> s) override {
    FakeHub::Part p = MakePart(CommOp::kAllToAll, in.dtype(), in.data(), in.numel(), out.data(),
                               out.numel());
    p.send_counts = std::move(send_counts);
    p.recv_counts = std::move(recv_counts);
    Collective(std::move(p), std::move(s));
  }
  void DoBroadcast(Tensor& buf, int root, std::shared_ptr<OpState> s) override {
    FakeHub::Part p = MakePart(CommOp::kBroadcast, buf.dtype(), buf.data(), buf.numel(),
                               buf.data(), buf.numel());
    p.root = root;
    Collective(std::move(p), std::move(s));
  }
  void DoSend(const Tensor& t, int peer, std::shared_ptr<OpState> s) override {
    if (Faulted(s)) return;
    uint64_t seq = s->seq();
    FakeHub::Part p = MakePart(CommOp::kSend, t.dtype(), t.data(), t.numel(), nullptr, 0);
    p.state = std::move(s);
    hub_->JoinPointToPoint(rank(), peer, seq, /*is_send=*/true, std::move(p));
  }
  void DoRecv(Tensor& t, int peer, std::shared_ptr<OpState> s) override {
    if (Faulted(s)) return;
    uint64_t seq = s->seq();
    FakeHub::Part p = MakePart(CommOp::kRecv, t.dtype(), nullptr, 0, t.data(), t.numel());
    p.state = std::move(s);
    hub_->JoinPointToPoint(peer, rank(), seq, /*is_send=*/false, std::move(p));
  }
  void DoBarrier(std::shared_ptr<OpState> s) override {
    Collective(MakePart(CommOp::kBarrier, DType::kF32, nullptr, 0, nullptr, 0), std::move(s));
  }
  Result<std::unique_ptr<Communicator>> DoSplit(int color, int, std::vector<int> members,
                                                int new_rank, uint64_t split_seq,
                                                const CommOptions& options) override {
    auto sub = hub_->SubHub(split_seq, color, static_cast<int>(members.size()));
    return sub->Connect(new_rank, options);
  }

 private:
  static FakeHub::Part MakePart(CommOp op, DType dtype, const void* in, int64_t in_n, void* out,
                                int64_t out_n) {
    FakeHub::Part p;
    p.op = op;
    p.dtype = dtype;
    p.in = in;
    p.in_n = in_n;
    p.out = out;
    p.out_n = out_n;
    return p;
  }
  // Applies the fault plan; true if this op must not join the hub.
  bool Faulted(const std::shared_ptr<OpState>& s) {
    ++issued_;
    if (fault_.kind == FakeFault::Kind::kNone || issued_ != fault_.op_index) return false;
    if (fault_.kind == FakeFault::Kind::kFail) {
      s->Complete(Internal(s->Describe() + ": injected failure (fake backend fault plan)"));
    }
    return true;  // kHang: stays pending
  }
  void Collective(FakeHub::Part p, std::shared_ptr<OpState> s) {
    if (Faulted(s)) return;
    uint64_t seq = s->seq();
    p.state = std::move(s);
    hub_->JoinCollective(rank(), seq, std::move(p));
  }

  std::shared_ptr<FakeHub> hub_;
  FakeFault fault_;
  int64_t issued_ = 0;
};

}  // namespace

std::shared_ptr<FakeHub> FakeHub::Create(int size) {
  TESSERA_CHECK(size >= 1);
  return std::shared_ptr<FakeHub>(new FakeHub(size));
}

std::unique_ptr<Communicator> FakeHub::Connect(int rank, CommOptions options, FakeFault fault) {
  return std::make_unique<FakeCommunicator>(shared_from_this(), rank, std::move(options), fault);
}

std::shared_ptr<FakeHub> FakeHub::SubHub(uint64_t seq, int color, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& hub = subhubs_[{seq, color}];
  if (!hub) hub = std::shared_ptr<FakeHub>(new FakeHub(size));
  TESSERA_CHECK(hub->size() == size);
  return hub;
}

void FakeHub::JoinCollective(int rank, uint64_t seq, Part part) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& parts = collectives_[seq];
  if (parts.empty()) parts.resize(static_cast<size_t>(size_));
  parts[rank] = std::move(part);
  for (const Part& p : parts) {
    if (!p.state) return;  // someone has not arrived yet
  }
  RunCollective(parts);
  collectives_.erase(seq);
}

void FakeHub::RunCollective(std::vector<Part>& parts) {
  const Part& p0 = parts[0];
  for (int r = 1; r < size_; ++r) {
    if (!SameShape(p0, parts[r])) {
      Status desync = Internal("desync at " + p0.state->Describe() + ": " + DescribePart(0, p0) +
                               " vs " + DescribePart(r, parts[r]));
      for (Part& p : parts) p.state->Complete(desync);
      return;
    }
  }
  const int n = size_;
  switch (p0.op) {
    case CommOp::kAllReduce: {
      RankOrderAccumulator acc(p0.dtype, p0.reduce, p0.in_n);
      for (const Part& p : parts) acc.Add(p.in);
      for (Part& p : parts) acc.Finish(p.out);
      break;
    }
    case CommOp::kReduceScatter: {
      const int64_t m = p0.out_n;
      for (int r = 0; r < n; ++r) {
        RankOrderAccumulator acc(p0.dtype, p0.reduce, m);
        for (const Part& p : parts) acc.Add(Bytes(p.in, r * m, p0.dtype));
        acc.Finish(parts[r].out);
      }
      break;
    }
    case CommOp::kAllGather: {
      const int64_t m = p0.in_n;
      const size_t bytes = static_cast<size_t>(m) * DTypeSize(p0.dtype);
      for (Part& dst : parts) {
        for (int q = 0; q < n; ++q) {
          if (bytes) std::memcpy(Bytes(dst.out, q * m, p0.dtype), parts[q].in, bytes);
        }
      }
      break;
    }
    case CommOp::kAllToAll: {
      for (int r = 0; r < n; ++r) {
        for (int q = 0; q < n; ++q) {
          if (parts[r].recv_counts[q] != parts[q].send_counts[r]) {
            Status bad = Internal("desync at " + p0.state->Describe() + ": rank " +
                                  std::to_string(q) + " sends " +
                                  std::to_string(parts[q].send_counts[r]) + " elements to rank " +
                                  std::to_string(r) + " which expects " +
                                  std::to_string(parts[r].recv_counts[q]));
            for (Part& p : parts) p.state->Complete(bad);
            return;
          }
        }
      }
      for (int r = 0; r < n; ++r) {
        int64_t out_off = 0;
        for (int q = 0; q < n; ++q) {
          int64_t in_off = 0;
          for (int k = 0; k < r; ++k) in_off += parts[q].send_counts[k];
          const int64_t c = parts[r].recv_counts[q];
          if (c) {
            std::memcpy(Bytes(parts[r].out, out_off, p0.dtype), Bytes(parts[q].in, in_off, p0.dtype),
                        static_cast<size_t>(c) * DTypeSize(p0.dtype));
          }
          out_off += c;
        }
      }
      break;
    }
    case CommOp::kBroadcast: {
      const Part& root = parts[p0.root];
      const size_t bytes = static_cast<size_t>(root.in_n) * DTypeSize(p0.dtype);
      for (int r = 0; r < n; ++r) {
        if (r != p0.root && bytes) std::memcpy(parts[r].out, root.in, bytes);
      }
      break;
    }
    default: break;  // barrier
  }
  for (Part& p : parts) p.state->Complete(Status::Ok());
}

void FakeHub::JoinPointToPoint(int src, int dst, uint64_t seq, bool is_send, Part part) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_tuple(src, dst, seq);
  auto& slot = p2p_[key];
  (is_send ? slot.first : slot.second) = std::move(part);
  if (!slot.first.state || !slot.second.state) return;
  Part& s = slot.first;
  Part& r = slot.second;
  if (s.dtype != r.dtype || s.in_n != r.out_n) {
    Status bad = Internal("desync at " + s.state->Describe() + ": rank " + std::to_string(src) +
                          " sends " + std::to_string(s.in_n) + " " + std::string(DTypeName(s.dtype)) +
                          " but rank " + std::to_string(dst) + " expects " + std::to_string(r.out_n) +
                          " " + std::string(DTypeName(r.dtype)));
    s.state->Complete(bad);
    r.state->Complete(bad);
  } else {
    if (s.in_n) std::memcpy(r.out, s.in, static_cast<size_t>(s.in_n) * DTypeSize(s.dtype));
    s.state->Complete(Status::Ok());
    r.state->Complete(Status::Ok());
  }
  p2p_.erase(key);
}

}  // namespace tessera
