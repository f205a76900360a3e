// comm/mpi_communicator.cc — the MPI backend: MpiSession, AbortJob and MpiCommunicator.
//
// Each MpiCommunicator owns a duplicated MPI_Comm that only its progress thread touches. An op is
// a list of steps: MPI steps post non-blocking calls (MPI_I*), host steps compute (rank-order
// sums, avg division, a blocking MPI_Comm_split once the members are known to be alive). The
// thread starts ops in issue order, keeps several in flight (a Send and the matching Recv of a
// pipeline exchange must overlap), and holds back later ops while an op still has unposted MPI
// steps, so every rank posts collectives on the communicator in the same order.
// Thread-safety: the queue is guarded by q_mu_; MPI calls come from the progress thread (and
// MpiSession on the main thread), which MPI_THREAD_MULTIPLE allows.
#include "comm/mpi.h"

#include <mpi.h>
#include <sched.h>

#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "comm/op_state.h"
#include "comm/reduce.h"
#include "runtime/core/exit_codes.h"

namespace tessera {
namespace {

// User-defined ops for the 16-bit floats (MPI has no bf16/f16 type): each pairwise combine
// widens to fp32 and rounds back (CombineInPlace), created by MpiSession::Init.
MPI_Op g_bf16_sum = MPI_OP_NULL;
MPI_Op g_bf16_max = MPI_OP_NULL;
MPI_Op g_f16_sum = MPI_OP_NULL;
MPI_Op g_f16_max = MPI_OP_NULL;

void Bf16Sum(void* in, void* inout, int* len, MPI_Datatype*) {
  CombineInPlace(DType::kBF16, ReduceOp::kSum, inout, in, *len);
}
void Bf16Max(void* in, void* inout, int* len, MPI_Datatype*) {
  CombineInPlace(DType::kBF16, ReduceOp::kMax, inout, in, *len);
}
void F16Sum(void* in, void* inout, int* len, MPI_Datatype*) {
  CombineInPlace(DType::kF16, ReduceOp::kSum, inout, in, *len);
}
void F16Max(void* in, void* inout, int* len, MPI_Datatype*) {
  CombineInPlace(DType::kF16, ReduceOp::kMax, inout, in, *len);
}

MPI_Datatype MpiType(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI32: return MPI_INT32_T;
    default: return MPI_UINT16_T;  // bf16/f16: moved as 16-bit words, reduced via user ops
  }
}

MPI_Op MpiReduceOp(DType t, ReduceOp op) {
  if (t == DType::kBF16) return op == ReduceOp::kMax ? g_bf16_max : g_bf16_sum;
  if (t == DType::kF16) return op == ReduceOp::kMax ? g_f16_max : g_f16_sum;
  return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
}

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

char* At(void* p, int64_t elems, DType t) {
  return static_cast<char*>(p) + elems * static_cast<int64_t>(DTypeSize(t));
}

// MPI counts are ints; larger ops are split (AllReduce) or rejected.
bool FitsInt(int64_t n) { return n >= 0 && n <= INT_MAX; }

// The share of n elements owned by each of `size` ranks: the first n % size get one more.
void Partition(int64_t n, int size, std::vector<int>& counts, std::vector<int>& displs) {
  counts.resize(size);
  displs.resize(size);
  int64_t off = 0;
  for (int r = 0; r < size; ++r) {
    int64_t c = n / size + (r < n % size ? 1 : 0);
    counts[r] = static_cast<int>(c);
    displs[r] = static_cast<int>(off);
    off += c;
  }
}

struct MpiOp {
  struct Step {
    // Later ops may not start before this step has run: it posts MPI calls (which every rank
    // must post in the same order) or uses the communicator's shared scratch buffer.
    bool ordered;
    std::function<Status(MpiOp&)> run;  // may fill `requests`
  };
  std::shared_ptr<OpState> state;
  std::vector<Step> steps;
  size_t next = 0;
  std::vector<MPI_Request> requests;
  std::vector<MPI_Status> statuses;
  std::vector<int> counts_a, displs_a, counts_b, displs_b;

  bool finished = false;
  bool HoldsOrder() const {
    for (size_t i = next; i < steps.size(); ++i) {
      if (steps[i].ordered) return true;
    }
    return false;
  }
  // Runs steps until one posts requests or the op ends.
  void Advance() {
    while (requests.empty() && next < steps.size()) {
      Status st = steps[next++].run(*this);
      if (!st.ok()) {
        state->Complete(st.WithPrefix(state->Describe()));
        finished = true;
        return;
      }
    }
    if (requests.empty() && next == steps.size()) {
      state->Complete(Status::Ok());
      finished = true;
    }
  }
};

Status Check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  return Internal(std::string(call) + " failed: " + MpiErrorString(rc));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, CommOptions options)
      : Communicator(rank, size, std::move(options)), comm_(comm) {
    progress_ = std::thread([this] { ProgressLoop(); });
  }

  ~MpiCommunicator() override {
    if (outstanding_.load() > 0) {
      Abort(Status(StatusCode::kAborted, "communicator destroyed with operations in flight"));
    }
    {
      std::lock_guard<std::mutex> lock(q_mu_);
      stop_ = true;
    }
    q_cv_.notify_all();
    progress_.join();
    // After an abort a request may still reference comm_: leak it, the process is ending.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!abandoned_ && !finalized) MPI_Comm_free(&comm_);
  }

  Device device() const override { return Device::kCpu; }

 protected:
  void DoAllReduce(Tensor& buf, ReduceOp op, ReduceOrder order,
                   std::shared_ptr<OpState> s) override {
    auto m = NewMpiOp(std::move(s));
    const DType t = buf.dtype();
    void* data = buf.data();
    const int64_t n = buf.numel();
    if (order == ReduceOrder::kRankOrder && !FitsInt(n)) return TooLarge(std::move(m), n);
    if ((order == ReduceOrder::kRankOrder || Large(n, t)) && FitsInt(n)) {
      Partition(n, size(), m->counts_a, m->displs_a);
      AddScatterToOwners(*m, data, t);
      AddReduceOwnChunk(*m, data, At(data, m->displs_a[rank()], t), op, t);
      AddGatherFromOwners(*m, data, t);
    } else {
      m->steps.push_back({true, [this, data, n, t, op](MpiOp& o) {
        // Chunks of at most 2^30 elements keep counts in int; all are posted at once.
        const int64_t kChunk = int64_t{1} << 30;
        for (int64_t off = 0; off < n; off += kChunk) {
          int c = static_cast<int>(std::min(kChunk, n - off));
          RETURN_IF_ERROR(Check(MPI_Iallreduce(MPI_IN_PLACE, At(data, off, t), c, MpiType(t),
                                               MpiReduceOp(t, op), comm_, Req(o)),
                                "MPI_Iallreduce"));
        }
        return Status::Ok();
      }});
      if (op == ReduceOp::kAvg) AddDivide(*m, data, n, t);
    }
    Enqueue(std::move(m));
  }

  void DoReduceScatter(const Tensor& in, Tensor& out, ReduceOp op, ReduceOrder order,
                       std::shared_ptr<OpState> s) override {
    auto m = NewMpiOp(std::move(s));
    const DType t = in.dtype();
    const int64_t n = out.numel();
    if (!FitsInt(in.numel())) return TooLarge(std::move(m), in.numel());
    const void* src = in.data();
    void* dst = out.data();
    if (order == ReduceOrder::kRankOrder || Large(in.numel(), t)) {
      m->counts_a.assign(size(), static_cast<int>(n));
      for (int r = 0; r < size(); ++r) m->displs_a.push_back(static_cast<int>(r * n));
      AddScatterToOwners(*m, src, t);
      AddReduceOwnChunk(*m, src, dst, op, t);
    } else {
      m->steps.push_back({true, [this, src, dst, n, t, op](MpiOp& o) {
        return Check(MPI_Ireduce_scatter_block(src, dst, static_cast<int>(n), MpiType(t),
                                               MpiReduceOp(t, op), comm_, Req(o)),
                     "MPI_Ireduce_scatter_block");
      }});
      if (op == ReduceOp::kAvg) AddDivide(*m, dst, n, t);
    }
    Enqueue(std::move(m));
  }

  void DoAllGather(const Tensor& in, Tensor& out, std::shared_ptr<OpState> s) override {
    auto m = NewMpiOp(std::move(s));
    if (!FitsInt(out.numel())) return TooLarge(std::move(m), out.numel());
    const void* src = in.data();
    void* dst = out.data();
    const int n = static_cast<int>(in.numel());
    const DType t = in.dtype();
    if (Large(out.numel(), t)) {
      m->counts_a.assign(size(), n);
      for (int r = 0; r < size(); ++r) m->displs_a.push_back(r * n);
      m->steps.push_back({false, [src, dst, n, t, me = rank()](MpiOp&) {
        if (n) std::memcpy(At(dst, int64_t{me} * n, t), src, static_cast<size_t>(n) * DTypeSize(t));
        return Status::Ok();
      }});
      AddGatherFromOwners(*m, dst, t);
      return Enqueue(std::move(m));
    }
    const MPI_Datatype type = MpiType(t);
    m->steps.push_back({true, [this, src, dst, n, type](MpiOp& o) {
      return Check(MPI_Iallgather(src, n, type, dst, n, type, comm_, Req(o)), "MPI_Iallgather");
    }});
    Enqueue(std::move(m));
  }

  void DoAllToAll(const Tensor& in, Tensor& out, std::vector<int64_t> send_counts,
                  std::vector<int64_t> recv_counts, std::shared_ptr<OpState> s) override {
    auto m = NewMpiOp(std::move(s));
    if (!FitsInt(in.numel()) || !FitsInt(out.numel())) {
      return TooLarge(std::move(m), std::max(in.numel(), out.numel()));
    }
    for (int p = 0, so = 0, ro = 0; p < size(); ++p) {
      m->counts_a.push_back(static_cast<int>(send_counts[p]));
      m->displs_a.push_back(so);
      m->counts_b.push_back(static_cast<int>(recv_counts[p]));
      m->displs_b.push_back(ro);
      so += static_cast<int>(send_counts[p]);
      ro += static_cast<int>(recv_counts[p]);
    }
    const void* src = in.data();
    void* dst = out.data();
    const MPI_Datatype type = MpiType(in.dtype());
    m->steps.push_back({true, [this, src, dst, type](MpiOp& o) {
      return Check(MPI_Ialltoallv(src, o.counts_a.data(), o.displs_a.data(), type, dst,
                                  o.counts_b.data(), o.displs_b.data(), type, comm_, Req(o)),
                   "MPI_Ialltoallv");
    }});
    Enqueue(std::move(m));
  }

  void DoBroadcast(Tensor& buf, int root, std::shared_ptr<OpState> s) override {
    auto m = NewMpiOp(std::move(s));
    if (!FitsInt(buf.numel())) return TooLarge(std::move(m), buf.numel());
    void* data = buf.data();
    const int n = static_cast<int>(buf.numel());
    const MPI_Datatype type = MpiType(buf.dtype());
    m->steps.push_back({true, [this, data, n, type, root](MpiOp& o) {
      return Check(MPI_Ibcast(data, n, type, root, comm_, Req(o)), "MPI_Ibcast");
    }});
    Enqueue(std::move(m));
  }

  void DoSend(const Tensor& t, int peer, std::shared_ptr<OpState> s) override {
    auto m = NewMpiOp(std::move(s));
    if (!FitsInt(t.numel())) return TooLarge(std::move(m), t.numel());
    const void* data = t.data();
    const int n = static_cast<int>(t.numel());
    const MPI_Datatype type = MpiType(t.dtype());
    m->steps.push_back({true, [this, data, n, type, peer](MpiOp& o) {
      // One tag: MPI keeps messages between a pair in order, which is what matches the k-th
      // Send with the k-th Recv.
      return Check(MPI_Isend(data, n, type, peer, kP2pTag, comm_, Req(o)), "MPI_Isend");
    }});
    Enqueue(std::move(m));
  }

  void DoRecv(Tensor& t, int peer, std::shared_ptr<OpState> s) override {
    auto m = NewMpiOp(std::move(s));
    if (!FitsInt(t.numel())) return TooLarge(std::move(m), t.numel());
    void* data = t.data();
    const int n = static_cast<int>(t.numel());
    const MPI_Datatype type = MpiType(t.dtype());
    m->steps.push_back({true, [this, data, n, type, peer](MpiOp& o) {
      return Check(MPI_Irecv(data, n, type, peer, kP2pTag, comm_, Req(o)), "MPI_Irecv");
    }});
    m->steps.push_back({false, [n, type, peer](MpiOp& o) {
      int got = 0;
      MPI_Get_count(&o.statuses[0], type, &got);
      if (got != n) {
        return Internal("rank " + std::to_string(peer) + " sent " + std::to_string(got) +
                        " elements, expected " + std::to_string(n));
      }
      return Status::Ok();
    }});
    Enqueue(std::move(m));
  }

  void DoBarrier(std::shared_ptr<OpState> s) override {
    auto m = NewMpiOp(std::move(s));
    m->steps.push_back({true, [this](MpiOp& o) {
      return Check(MPI_Ibarrier(comm_, Req(o)), "MPI_Ibarrier");
    }});
    Enqueue(std::move(m));
  }

  Result<std::unique_ptr<Communicator>> DoSplit(int color, int key, std::vector<int> members,
                                                int new_rank, uint64_t,
                                                const CommOptions& options) override {
    // The all-gather in Communicator::Split just proved every member alive and agreed, so the
    // blocking MPI_Comm_split here cannot wait on a hung peer (only one that stops in between).
    auto new_comm = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    auto m = NewMpiOp(NewOp(CommOp::kSplit, NextCollectiveSeq()));
    auto state = m->state;
    // A host step: Split has no non-blocking MPI form, and it runs in issue order like the rest.
    m->steps.push_back({false, [this, color, key, new_comm](MpiOp&) {
      return Check(MPI_Comm_split(comm_, color, key, new_comm.get()), "MPI_Comm_split");
    }});
    Enqueue(std::move(m));
    Work work(state);
    RETURN_IF_ERROR(work.Wait());
    MPI_Comm_set_errhandler(*new_comm, MPI_ERRORS_RETURN);
    int got_rank = -1, got_size = 0;
    MPI_Comm_rank(*new_comm, &got_rank);
    MPI_Comm_size(*new_comm, &got_size);
    TESSERA_CHECK(got_rank == new_rank && got_size == static_cast<int>(members.size()));
    return std::unique_ptr<Communicator>(
        std::make_unique<MpiCommunicator>(*new_comm, got_rank, got_size, options));
  }

  void OnAbort(const Status&) override {
    {
      std::lock_guard<std::mutex> lock(q_mu_);
      stop_ = true;
      abandoned_ = true;
    }
    q_cv_.notify_all();
  }

 private:
  // Tags keep user Send/Recv apart from the point-to-point phases of collectives; within a tag,
  // MPI's pairwise ordering plus our in-order start matches the k-th message with the k-th.
  static constexpr int kP2pTag = 0x7e55;
  static constexpr int kScatterTag = 0x7e56;
  static constexpr int kGatherTag = 0x7e57;

  std::unique_ptr<MpiOp> NewMpiOp(std::shared_ptr<OpState> s) {
    auto m = std::make_unique<MpiOp>();
    m->state = std::move(s);
    return m;
  }
  static MPI_Request* Req(MpiOp& o) {
    o.requests.push_back(MPI_REQUEST_NULL);
    return &o.requests.back();
  }
  void TooLarge(std::unique_ptr<MpiOp> m, int64_t n) {
    m->state->Complete(InvalidArgument(m->state->Describe() + ": " + std::to_string(n) +
                                       " elements exceed the MPI backend's int count limit"));
  }
  void AddDivide(MpiOp& m, void* data, int64_t n, DType t) {
    const int divisor = size();
    m.steps.push_back({false, [data, n, t, divisor](MpiOp&) {
      DivideInPlace(t, data, n, divisor);
      return Status::Ok();
    }});
  }
  // Host buffers at or above this size (per rank) reduce through point-to-point messages
  // instead of Open MPI's non-blocking collectives (libnbc), which reach only 35-40 % of the
  // blocking MPI_Allreduce's bandwidth here; the direct exchange is bandwidth-optimal
  // (2(n-1)/n of the buffer per rank) and sums in rank order. Small buffers keep MPI's
  // latency-optimised algorithms.
  static constexpr int64_t kP2pMinBytes = 256 << 10;
  static bool Large(int64_t n, DType t) { return n * static_cast<int64_t>(DTypeSize(t)) >= kP2pMinBytes; }
  int ScratchSlot(int peer) const { return peer < rank() ? peer : peer - 1; }

  // Gather-to-owner, phase A: chunk p of `src` (counts_a/displs_a) goes to rank p; the chunks
  // of this rank from every peer land in scratch_ (one row per peer).
  void AddScatterToOwners(MpiOp& m, const void* src, DType t) {
    m.steps.push_back({true, [this, src, t](MpiOp& o) {
      const int me = rank(), mine = o.counts_a[me];
      const size_t row_bytes = static_cast<size_t>(mine) * DTypeSize(t);
      if (scratch_.size() < row_bytes * (size() - 1)) scratch_.resize(row_bytes * (size() - 1));
      for (int p = 0; p < size(); ++p) {
        if (p == me) continue;
        RETURN_IF_ERROR(Check(MPI_Irecv(scratch_.data() + ScratchSlot(p) * row_bytes, mine,
                                        MpiType(t), p, kScatterTag, comm_, Req(o)), "MPI_Irecv"));
        RETURN_IF_ERROR(Check(MPI_Isend(At(const_cast<void*>(src), o.displs_a[p], t), o.counts_a[p],
                                        MpiType(t), p, kScatterTag, comm_, Req(o)), "MPI_Isend"));
      }
      return Status::Ok();
    }});
  }
  // Phase B: dst = the rank-order reduction of every rank's copy of this rank's chunk (ours is
  // still in `src`).
  void AddReduceOwnChunk(MpiOp& m, const void* src, void* dst, ReduceOp op, DType t) {
    m.steps.push_back({true, [this, src, dst, op, t](MpiOp& o) {
      const int me = rank(), mine = o.counts_a[me];
      const size_t row_bytes = static_cast<size_t>(mine) * DTypeSize(t);
      std::vector<const void*> rows(static_cast<size_t>(size()));
      for (int q = 0; q < size(); ++q) {
        rows[q] = q == me ? At(const_cast<void*>(src), o.displs_a[me], t)
                          : static_cast<const void*>(scratch_.data() + ScratchSlot(q) * row_bytes);
      }
      ReduceRows(t, op, rows.data(), size(), dst, mine);
      return Status::Ok();
    }});
  }
  // Phase C: every rank's finished chunk (counts_a/displs_a of buf) goes to every other rank.
  void AddGatherFromOwners(MpiOp& m, void* buf, DType t) {
    m.steps.push_back({true, [this, buf, t](MpiOp& o) {
      const int me = rank();
      for (int p = 0; p < size(); ++p) {
        if (p == me) continue;
        RETURN_IF_ERROR(Check(MPI_Irecv(At(buf, o.displs_a[p], t), o.counts_a[p], MpiType(t), p,
                                        kGatherTag, comm_, Req(o)), "MPI_Irecv"));
        RETURN_IF_ERROR(Check(MPI_Isend(At(buf, o.displs_a[me], t), o.counts_a[me], MpiType(t), p,
                                        kGatherTag, comm_, Req(o)), "MPI_Isend"));
      }
      return Status::Ok();
    }});
  }

  void Enqueue(std::unique_ptr<MpiOp> m) {
    if (m->state->done()) return;
    outstanding_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(q_mu_);
      incoming_.push_back(std::move(m));
    }
    q_cv_.notify_one();
  }

  void ProgressLoop();

  MPI_Comm comm_;
  std::thread progress_;
  std::atomic<int64_t> outstanding_{0};
  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<std::unique_ptr<MpiOp>> incoming_;  // guarded by q_mu_
  std::vector<char> scratch_;                    // progress thread only; grows, reused
  bool stop_ = false;                            // guarded by q_mu_
  bool abandoned_ = false;                       // set under q_mu_; read after join
};

void MpiCommunicator::ProgressLoop() {
  std::deque<std::unique_ptr<MpiOp>> waiting;  // issued, not started
  std::vector<std::unique_ptr<MpiOp>> in_flight;
  int idle_polls = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(q_mu_);
      if (waiting.empty() && in_flight.empty()) {
        q_cv_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
      }
      if (stop_) return;  // aborted, or destroyed with nothing in flight
      while (!incoming_.empty()) {
        waiting.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
    }
    auto finish = [&](std::unique_ptr<MpiOp>& op) {
      op.reset();
      outstanding_.fetch_sub(1);
    };
    // Start ops in issue order; an op with ordered steps still to run blocks the ones behind it.
    auto blocked = [&] {
      for (auto& op : in_flight) {
        if (op && op->HoldsOrder()) return true;
      }
      return false;
    };
    bool progressed = false;
    while (!waiting.empty() && !blocked()) {
      std::unique_ptr<MpiOp> op = std::move(waiting.front());
      waiting.pop_front();
      op->Advance();
      progressed = true;
      if (op->finished) {
        finish(op);
      } else {
        in_flight.push_back(std::move(op));
      }
    }
    for (auto& op : in_flight) {
      int flag = 0;
      op->statuses.resize(op->requests.size());
      int rc = MPI_Testall(static_cast<int>(op->requests.size()), op->requests.data(), &flag,
                           op->statuses.data());
      if (rc != MPI_SUCCESS) {
        op->state->Complete(Check(rc, "MPI_Testall").WithPrefix(op->state->Describe()));
        finish(op);
        continue;
      }
      if (!flag) continue;
      progressed = true;
      op->requests.clear();
      op->Advance();
      if (op->finished) finish(op);
    }
    std::erase_if(in_flight, [](const std::unique_ptr<MpiOp>& op) { return !op; });
    if (progressed || in_flight.empty()) {
      idle_polls = 0;
    } else if (HasWaiters() || idle_polls < 64) {
      // Someone is blocked on us: poll as fast as the cores allow, but let other ranks sharing
      // the core run (Open MPI only progresses inside MPI calls).
      ++idle_polls;
      sched_yield();
    } else {
      // Background progress while the caller computes: cheap polls, up to 1 ms apart.
      int shift = std::min(idle_polls++ - 64, 5);
      std::this_thread::sleep_for(std::chrono::microseconds(32 << shift));
    }
  }
}

// The integer value of environment variable `name`, or `fallback` when it is unset, empty or
// not an integer in [0, 2^30).
int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n >= 0 && n < (1L << 30)) ? static_cast<int>(n) : fallback;
}

bool EnvSet(const char* name) { return std::getenv(name) != nullptr; }

}  // namespace

std::string MpiLibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown";
  std::string s(text, static_cast<size_t>(std::max(len, 0)));
  s = s.substr(0, s.find('\n'));                          // the first line names it
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

LauncherEnv ReadLauncherEnv() {
  LauncherEnv env;
  // srun --mpi=pmix sets PMIX_RANK and, for the size, only its own SLURM_STEP_NUM_TASKS.
  const bool srun_pmix = EnvSet("PMIX_RANK") && EnvSet("SLURM_STEP_NUM_TASKS");
  env.under_launcher = EnvSet("OMPI_COMM_WORLD_SIZE") || EnvSet("PMI_SIZE") || srun_pmix;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (EnvSet(var)) {
      env.rank = EnvInt(var, 0);
      break;
    }
  }
  const char* size_var = EnvSet("OMPI_COMM_WORLD_SIZE") ? "OMPI_COMM_WORLD_SIZE"
                         : EnvSet("PMI_SIZE") || !srun_pmix ? "PMI_SIZE"
                                                            : "SLURM_STEP_NUM_TASKS";
  env.size = EnvInt(size_var, 1);
  return env;
}

Result<std::unique_ptr<MpiSession>> MpiSession::Init(int* argc, char*** argv) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return FailedPrecondition("MPI was already finalised in this process");
  if (initialized) return FailedPrecondition("MPI is already initialised (one MpiSession per process)");
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
  if (!ReadLauncherEnv().under_launcher) {
    setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
  }
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return FailedPrecondition("MPI_Init_thread failed: " + MpiErrorString(rc));
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    return FailedPrecondition("the MPI library does not provide MPI_THREAD_MULTIPLE");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Op_create(&Bf16Sum, /*commute=*/1, &g_bf16_sum);
  MPI_Op_create(&Bf16Max, /*commute=*/1, &g_bf16_max);
  MPI_Op_create(&F16Sum, /*commute=*/1, &g_f16_sum);
  MPI_Op_create(&F16Max, /*commute=*/1, &g_f16_max);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<MpiSession>(new MpiSession(rank, size));
}

MpiSession::~MpiSession() {
  MPI_Op_free(&g_bf16_sum);
  MPI_Op_free(&g_bf16_max);
  MPI_Op_free(&g_f16_sum);
  MPI_Op_free(&g_f16_max);
  MPI_Finalize();
}

Result<std::unique_ptr<Communicator>> MpiSession::World(const CommOptions& options) const {
  if (options.timeout_s <= 0) return InvalidArgument("comm.timeout_s must be > 0");
  MPI_Comm comm = MPI_COMM_NULL;
  // Our own duplicate, so our collectives never interleave with other MPI users of the world.
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) return Internal("MPI_Comm_dup failed: " + MpiErrorString(rc));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(comm, world_rank_, world_size_, options));
}

void AbortJob(const Status& status) { AbortJob(status, ExitCodeFor(status)); }

void AbortJob(const Status& status, int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = 0;
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "tessera: rank %d: fatal: %s (exit code %d)\n", rank,
               status.ToString().c_str(), code);
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace tessera
