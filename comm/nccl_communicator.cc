// comm/nccl_communicator.cc — the NCCL backend (device buffers), compiled when TESSERA_NCCL.
//
// Each NcclCommunicator owns an ncclComm_t and a CUDA stream on its device. Ops are enqueued on
// the stream at once (NCCL launches are asynchronous) and followed by a CUDA event; a poller
// thread completes each op's OpState when its event fires, or fails every pending op when
// ncclCommGetAsyncError reports an error. Abort calls ncclCommAbort, which also releases
// kernels stuck waiting for a dead peer.
// Bootstrap: rank 0 makes the unique id and broadcasts it over MPI (MPI_Ibcast polled against
// the timeout). ncclCommInitRank and ncclCommSplit are blocking: a peer that never arrives
// there blocks them (NCCL's non-blocking init would make every later call asynchronous too).
// Thread-safety: the pending list is guarded by mu_; NCCL calls for one communicator come from
// the issuing thread (and Abort from any thread, which NCCL allows).
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <sched.h>

#include <condition_variable>
#include <thread>

#include "comm/nccl.h"
#include "comm/op_state.h"
#ifdef TESSERA_NCCL_RANK_ORDER
#include "comm/nccl_reduce.h"
#endif

namespace tessera {
namespace {

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

Status NcclStatus(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return Status::Ok();
  return Internal(std::string(call) + " failed: " + ncclGetErrorString(r));
}
Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::Ok();
  return Internal(std::string(call) + " failed: " + cudaGetErrorString(e));
}

char* At(void* p, int64_t elems, DType t) {
  return static_cast<char*>(p) + elems * static_cast<int64_t>(DTypeSize(t));
}

// OpState's release of an op's event: destroying an event still pending is allowed (CUDA frees
// it once it completes).
void ReleaseCudaEvent(Event e) { cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e.handle)); }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, int rank, int size, CommOptions options)
      : Communicator(rank, size, std::move(options)), comm_(comm), device_(device) {
    cudaSetDevice(device_);
    TESSERA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess);
    TESSERA_CHECK(cudaMalloc(&barrier_word_, sizeof(float)) == cudaSuccess);
    poller_ = std::thread([this] { PollLoop(); });
  }

  ~NcclCommunicator() override {
    bool busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy = !pending_.empty();
    }
    // Unfinished ops at destruction: abort rather than wait on peers forever.
    if (busy) Abort(Status(StatusCode::kAborted, "communicator destroyed with operations in flight"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    poller_.join();
    cudaSetDevice(device_);
    if (!aborted()) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    pending_.clear();  // each op's event goes with its OpState (ReleaseCudaEvent)
    if (scratch_ != nullptr) cudaFreeAsync(scratch_, stream_);  // stream-ordered, as allocated
    cudaFree(barrier_word_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::kCuda; }

 protected:
  // The next ops wait on the device for a compute backend's event; the host goes on.
  void DoAfter(Event e) override {
    if (e.is_null()) return;
    cudaSetDevice(device_);
    TESSERA_CHECK(cudaStreamWaitEvent(stream_, reinterpret_cast<cudaEvent_t>(e.handle), 0) ==
                  cudaSuccess);
  }

  void DoAllReduce(Tensor& buf, ReduceOp op, ReduceOrder order,
                   std::shared_ptr<OpState> s) override {
    if (order == ReduceOrder::kRankOrder) return RankOrderAllReduce(buf, op, std::move(s));
    Issue(std::move(s), [&] {
      return NcclStatus(ncclAllReduce(buf.data(), buf.data(), buf.numel(), NcclType(buf.dtype()),
                                      NcclOp(op), comm_, stream_), "ncclAllReduce");
    });
  }
  void DoReduceScatter(const Tensor& in, Tensor& out, ReduceOp op, ReduceOrder order,
                       std::shared_ptr<OpState> s) override {
    if (order == ReduceOrder::kRankOrder) {
      return RankOrderReduceScatter(in, out, op, std::move(s));
    }
    Issue(std::move(s), [&] {
      return NcclStatus(ncclReduceScatter(in.data(), out.data(), out.numel(), NcclType(in.dtype()),
                                          NcclOp(op), comm_, stream_), "ncclReduceScatter");
    });
  }
  void DoAllGather(const Tensor& in, Tensor& out, std::shared_ptr<OpState> s) override {
    Issue(std::move(s), [&] {
      return NcclStatus(ncclAllGather(in.data(), out.data(), in.numel(), NcclType(in.dtype()),
                                      comm_, stream_), "ncclAllGather");
    });
  }
  void DoAllToAll(const Tensor& in, Tensor& out, std::vector<int64_t> send_counts,
                  std::vector<int64_t> recv_counts, std::shared_ptr<OpState> s) override {
    Issue(std::move(s), [&] {
      const DType t = in.dtype();
      RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
      int64_t so = 0, ro = 0;
      for (int p = 0; p < size(); ++p) {
        if (send_counts[p]) {
          ncclSend(At(in.data(), so, t), send_counts[p], NcclType(t), p, comm_, stream_);
        }
        if (recv_counts[p]) {
          ncclRecv(At(out.data(), ro, t), recv_counts[p], NcclType(t), p, comm_, stream_);
        }
        so += send_counts[p];
        ro += recv_counts[p];
      }
      return NcclStatus(ncclGroupEnd(), "ncclGroupEnd (all_to_all)");
    });
  }
  void DoBroadcast(Tensor& buf, int root, std::shared_ptr<OpState> s) override {
    Issue(std::move(s), [&] {
      return NcclStatus(ncclBroadcast(buf.data(), buf.data(), buf.numel(), NcclType(buf.dtype()),
                                      root, comm_, stream_), "ncclBroadcast");
    });
  }
  void DoSend(const Tensor& t, int peer, std::shared_ptr<OpState> s) override {
    Issue(std::move(s), [&] {
      return NcclStatus(ncclSend(t.data(), t.numel(), NcclType(t.dtype()), peer, comm_, stream_),
                        "ncclSend");
    });
  }
  void DoRecv(Tensor& t, int peer, std::shared_ptr<OpState> s) override {
    Issue(std::move(s), [&] {
      return NcclStatus(ncclRecv(t.data(), t.numel(), NcclType(t.dtype()), peer, comm_, stream_),
                        "ncclRecv");
    });
  }
  void DoBarrier(std::shared_ptr<OpState> s) override {
    Issue(std::move(s), [&] {
      return NcclStatus(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum,
                                      comm_, stream_), "ncclAllReduce (barrier)");
    });
  }
  Result<std::unique_ptr<Communicator>> DoSplit(int color, int key, std::vector<int>, int,
                                                uint64_t, const CommOptions& options) override {
    cudaSetDevice(device_);
    ncclComm_t sub = nullptr;
    RETURN_IF_ERROR(NcclStatus(ncclCommSplit(comm_, color, key, &sub, nullptr), "ncclCommSplit"));
    int rank = 0, size = 0;
    ncclCommUserRank(sub, &rank);
    ncclCommCount(sub, &size);
    return std::unique_ptr<Communicator>(
        std::make_unique<NcclCommunicator>(sub, device_, rank, size, options));
  }
  void OnAbort(const Status&) override {
    ncclCommAbort(comm_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }

 private:
  struct Pending {
    std::shared_ptr<OpState> state;
    cudaEvent_t event;
  };

#ifdef TESSERA_NCCL_RANK_ORDER
  // Rank order (bit-reproducible for a fixed layout, and equal to the MPI backend's bits): every
  // rank's contribution is gathered into scratch, then summed in rank order on the device
  // (nccl_reduce.h). Costs P times the volume of a ring all-reduce, so the trainer asks for it
  // where its reductions must not depend on NCCL's algorithm choice.
  void RankOrderAllReduce(Tensor& buf, ReduceOp op, std::shared_ptr<OpState> s) {
    Issue(std::move(s), [&] {
      const int64_t n = buf.numel();
      ASSIGN_OR_RETURN(void* rows, Scratch(size() * buf.nbytes()));
      RETURN_IF_ERROR(NcclStatus(ncclAllGather(buf.data(), rows, n, NcclType(buf.dtype()), comm_,
                                               stream_), "ncclAllGather (rank order)"));
      return CudaStatus(ReduceGatheredRows(stream_, buf.dtype(), RowOpOf(op), rows, size(), n,
                                           buf.data(), n), "rank-order reduction kernel");
    });
  }
  // Each rank receives every rank's copy of its own piece (grouped sends and receives), then
  // sums them in rank order.
  void RankOrderReduceScatter(const Tensor& in, Tensor& out, ReduceOp op,
                              std::shared_ptr<OpState> s) {
    Issue(std::move(s), [&] {
      const int64_t m = out.numel();
      const DType t = in.dtype();
      ASSIGN_OR_RETURN(void* rows, Scratch(size() * out.nbytes()));
      RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
      ncclResult_t first = ncclSuccess;  // the group is always closed, then its first error
      for (int p = 0; p < size(); ++p) {
        const ncclResult_t a = ncclSend(At(in.data(), p * m, t), m, NcclType(t), p, comm_, stream_);
        const ncclResult_t b = ncclRecv(At(rows, p * m, t), m, NcclType(t), p, comm_, stream_);
        if (first == ncclSuccess) first = a != ncclSuccess ? a : b;
      }
      const ncclResult_t end = ncclGroupEnd();
      RETURN_IF_ERROR(NcclStatus(first, "ncclSend/ncclRecv (rank-order reduce-scatter)"));
      RETURN_IF_ERROR(NcclStatus(end, "ncclGroupEnd (rank-order reduce-scatter)"));
      return CudaStatus(
          ReduceGatheredRows(stream_, t, RowOpOf(op), rows, size(), m, out.data(), m),
          "rank-order reduction kernel");
    });
  }
  static RowOp RowOpOf(ReduceOp op) {
    return op == ReduceOp::kMax ? RowOp::kMax : op == ReduceOp::kAvg ? RowOp::kAvg : RowOp::kSum;
  }
  // Stream-ordered scratch (no host wait, so a dead peer cannot hang a growth): the old buffer
  // is freed after the work already queued on it.
  Result<void*> Scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (scratch_ != nullptr) {
        RETURN_IF_ERROR(CudaStatus(cudaFreeAsync(scratch_, stream_), "cudaFreeAsync"));
      }
      scratch_ = nullptr;
      RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&scratch_, bytes, stream_), "cudaMallocAsync"));
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }
#else
  void RankOrderAllReduce(Tensor&, ReduceOp, std::shared_ptr<OpState> s) {
    RankOrderUnsupported(std::move(s));
  }
  void RankOrderReduceScatter(const Tensor&, Tensor&, ReduceOp, std::shared_ptr<OpState> s) {
    RankOrderUnsupported(std::move(s));
  }
  void RankOrderUnsupported(std::shared_ptr<OpState> s) {
    s->Complete(FailedPrecondition(s->Describe() + ": this NCCL build has no rank-order reduction "
                                   "(it needs the CUDA backend's compiler: TESSERA_CUDA=ON)"));
  }
#endif

  template <typename Launch>
  void Issue(std::shared_ptr<OpState> s, Launch launch) {
    cudaSetDevice(device_);
    Status st = launch();
    cudaEvent_t event = nullptr;
    if (st.ok()) st = CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    if (st.ok()) st = CudaStatus(cudaEventRecord(event, stream_), "cudaEventRecord");
    if (!st.ok()) {
      if (event) cudaEventDestroy(event);
      s->Complete(st.WithPrefix(s->Describe()));
      return;
    }
    // The Work exposes the event (ready_event) until it and the poller let go of the op.
    s->SetReadyEvent(Event{reinterpret_cast<uintptr_t>(event)}, &ReleaseCudaEvent);
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back({std::move(s), event});
    }
    cv_.notify_one();
  }

  void PollLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      for (auto it = pending_.begin(); it != pending_.end();) {
        cudaError_t e = cudaEventQuery(it->event);
        if (e == cudaErrorNotReady && async == ncclSuccess) {
          ++it;
          continue;
        }
        Status st = e == cudaSuccess ? Status::Ok()
                    : async != ncclSuccess ? NcclStatus(async, "NCCL")
                                           : CudaStatus(e, "CUDA");
        it->state->Complete(st.ok() ? st : st.WithPrefix(it->state->Describe()));
        it = pending_.erase(it);
      }
      if (pending_.empty()) continue;
      const bool eager = HasWaiters();
      lock.unlock();
      if (eager) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      lock.lock();
    }
  }

  ncclComm_t comm_;
  const int device_;
  cudaStream_t stream_ = nullptr;
  float* barrier_word_ = nullptr;
  void* scratch_ = nullptr;  // rank-order reductions' gathered rows (stream-ordered)
  size_t scratch_bytes_ = 0;
  std::thread poller_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> pending_;  // guarded by mu_
  bool stop_ = false;             // guarded by mu_
};

}  // namespace

bool NcclBackendBuilt() { return true; }

std::string NcclVersionString() {
  int nccl = 0, cuda = 0;
  std::string out = "NCCL ";
  out += ncclGetVersion(&nccl) == ncclSuccess
             ? std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
                   std::to_string(nccl % 100)
             : std::string("?");
  out += ", CUDA runtime ";
  out += cudaRuntimeGetVersion(&cuda) == cudaSuccess
             ? std::to_string(cuda / 1000) + "." + std::to_string(cuda % 1000 / 10)
             : std::string("?");
  return out;
}

Status NcclAvailable() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return FailedPrecondition(std::string("no usable GPU: ") + cudaGetErrorString(e));
  if (count == 0) return FailedPrecondition("no GPU found");
  return Status::Ok();
}

Result<std::unique_ptr<Communicator>> NcclWorld(const MpiSession& mpi, const CommOptions& options,
                                                int device) {
  RETURN_IF_ERROR(NcclAvailable());
  if (options.timeout_s <= 0) return InvalidArgument("comm.timeout_s must be > 0");
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  ncclUniqueId id;
  if (mpi.world_rank() == 0) RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  // The id travels over MPI, polled against the timeout so a missing rank 0 is an error.
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD, &req) != MPI_SUCCESS) {
    return Internal("MPI_Ibcast of the NCCL unique id failed");
  }
  const auto deadline = std::chrono::steady_clock::now() + options.timeout();
  int done = 0;
  while (true) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return Internal("MPI_Test on the NCCL unique id broadcast failed");
    }
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(StatusCode::kTimeout, "comm timeout: group '" + options.name +
                                              "' NCCL bootstrap: the unique id did not arrive "
                                              "from rank 0 within " +
                                              std::to_string(options.timeout().count()) + " ms");
    }
    sched_yield();
  }
  ncclComm_t comm = nullptr;
  RETURN_IF_ERROR(NcclStatus(ncclCommInitRank(&comm, mpi.world_size(), id, mpi.world_rank()),
                             "ncclCommInitRank"));
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
      comm, device, mpi.world_rank(), mpi.world_size(), options));
}

}  // namespace tessera
