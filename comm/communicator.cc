// comm/communicator.cc — Work, OpState and the backend-independent part of Communicator:
// argument validation, sequence numbers, Split's agreement step and Abort.
#include "comm/communicator.h"

#include <algorithm>
#include <cmath>

#include "comm/activity_internal.h"
#include "comm/op_state.h"

namespace tessera {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

const char* CommOpName(CommOp op) {
  switch (op) {
    case CommOp::kAllReduce: return "all_reduce";
    case CommOp::kReduceScatter: return "reduce_scatter";
    case CommOp::kAllGather: return "all_gather";
    case CommOp::kAllToAll: return "all_to_all";
    case CommOp::kBroadcast: return "broadcast";
    case CommOp::kSend: return "send";
    case CommOp::kRecv: return "recv";
    case CommOp::kBarrier: return "barrier";
    case CommOp::kSplit: return "split";
  }
  return "?";
}

std::chrono::milliseconds CommOptions::timeout() const {
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(timeout_s * 1000.0)));
}

void WaitKeepingFirstFailure(std::unique_ptr<Work> work, Communicator& comm, Status& first) {
  Status s = work->Wait();
  if (!s.ok() && first.ok()) {
    first = s;
    comm.Abort(s);
  }
}

// ---- OpState ----

OpState::OpState(std::string group, int rank, int size, CommOp op, uint64_t seq,
                 std::chrono::milliseconds default_timeout,
                 std::shared_ptr<std::atomic<int>> waiters)
    : group_(std::move(group)), rank_(rank), size_(size), op_(op), seq_(seq),
      default_timeout_(default_timeout), waiters_(std::move(waiters)) {}

OpState::~OpState() {
  if (release_event_ != nullptr) release_event_(ready_event_);
}

void OpState::SetReadyEvent(Event e, ReleaseEvent release) {
  TESSERA_CHECK_MSG(ready_event_.is_null() && !e.is_null() && release != nullptr,
                    "%s: the ready event is set once, with its release", Describe().c_str());
  ready_event_ = e;
  release_event_ = release;
}

bool OpState::Complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_.load(std::memory_order_relaxed)) return false;
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  return true;
}

Status OpState::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

std::string OpState::Describe() const {
  return "group '" + group_ + "' rank " + std::to_string(rank_) + "/" + std::to_string(size_) +
         " " + CommOpName(op_) + " #" + std::to_string(seq_);
}

Status OpState::WaitFor(std::chrono::milliseconds timeout) {
  auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_.load(std::memory_order_relaxed)) {
    if (waiters_) waiters_->fetch_add(1, std::memory_order_relaxed);
    // Waits in slices so that a thread which wakes far later than its slice asked (the process
    // was stopped: SIGSTOP, a frozen VM, or starved of a core) can tell comm/activity.h that this
    // stretch of the wait was not waiting for peers. The wakeups are cheap next to a collective.
    const auto deadline = start + timeout;
    bool finished = false;
    for (auto slice_start = start;;) {
      const auto slice_end = std::min(deadline, slice_start + comm_internal::kWaitSlice);
      finished = cv_.wait_until(lock, slice_end,
                                [&] { return done_.load(std::memory_order_relaxed); });
      const auto now = std::chrono::steady_clock::now();
      if (now - slice_end > comm_internal::kStallThreshold) comm_internal::CountStall(now - slice_end);
      if (finished || now >= deadline) break;
      slice_start = now;
    }
    if (waiters_) waiters_->fetch_sub(1, std::memory_order_relaxed);
    if (!finished) {
      return Status(StatusCode::kTimeout,
                    "comm timeout: " + Describe() + " did not complete within " +
                        std::to_string(timeout.count()) +
                        " ms (a peer is hung, dead or issued a different op)");
    }
  }
  return status_;
}

// ---- Work ----

Work::Work(std::shared_ptr<OpState> state) : state_(std::move(state)) {}
Work::~Work() = default;
bool Work::IsCompleted() const { return state_->done(); }
// Both overloads count the thread in comm/activity.h while the op is still pending, and add the
// time it stayed blocked, less the stretches it evidently was not running, to the wait total (a
// wait on a finished op returns at once and is not "blocked": it adds nothing).
Status Work::Wait(std::chrono::milliseconds timeout) {
  if (state_->done()) return state_->WaitFor(timeout);
  comm_internal::WaitingGuard waiting;
  return state_->WaitFor(timeout);
}
Status Work::Wait() { return Wait(state_->default_timeout()); }
uint64_t Work::sequence_number() const { return state_->seq(); }
CommOp Work::op() const { return state_->op(); }
Event Work::ready_event() const { return state_->ready_event(); }
std::string Work::Describe() const { return state_->Describe(); }

// ---- Communicator ----

Communicator::Communicator(int rank, int size, CommOptions options)
    : rank_(rank), size_(size), options_(std::move(options)), timeout_(options_.timeout()),
      waiters_(std::make_shared<std::atomic<int>>(0)),
      send_seq_(static_cast<size_t>(size), 0), recv_seq_(static_cast<size_t>(size), 0) {
  TESSERA_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_);
  TESSERA_CHECK_MSG(options_.timeout_s > 0, "comm.timeout_s must be > 0, got %g",
                    options_.timeout_s);
}

Communicator::~Communicator() = default;

uint64_t Communicator::NextCollectiveSeq() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_++;
}

std::shared_ptr<OpState> Communicator::NewOp(CommOp op, uint64_t seq) {
  auto state = std::make_shared<OpState>(options_.name, rank_, size_, op, seq, timeout_, waiters_);
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load(std::memory_order_relaxed)) {
    state->Complete(abort_status_);
    return state;
  }
  // Drop finished entries so the list stays as long as the number of ops in flight.
  std::erase_if(pending_, [](const std::weak_ptr<OpState>& w) {
    auto s = w.lock();
    return !s || s->done();
  });
  pending_.push_back(state);
  return state;
}

std::unique_ptr<Work> Communicator::Failed(CommOp op, uint64_t seq, const Status& status) {
  auto state = std::make_shared<OpState>(options_.name, rank_, size_, op, seq, timeout_, waiters_);
  state->Complete(status.WithPrefix(state->Describe()));
  return std::make_unique<Work>(std::move(state));
}

// Validation failures still consume the sequence number the peers will use for this op, so a
// caller bug on one rank shows up as a timeout naming the same number on the others.
// Every public operation passes through here once (Split through its all-gather, or directly
// for device backends), which is where comm/activity.h counts it.
std::unique_ptr<Work> Communicator::Launch(CommOp op, uint64_t seq, const Status& valid) {
  comm_internal::CountLaunch();
  if (!valid.ok()) return Failed(op, seq, valid);
  return nullptr;
}

Status Communicator::CheckTensor(const Tensor& t, const char* what) const {
  if (t.numel() > 0 && t.data() == nullptr) return InvalidArgument(std::string(what) + " has no memory");
  if (t.numel() > 0 && t.device() != device()) {
    return InvalidArgument(std::string(what) + " lives on the wrong device for this backend");
  }
  return Status::Ok();
}

Status Communicator::CheckReducible(const Tensor& t, ReduceOp op) const {
  switch (t.dtype()) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: return Status::Ok();
    case DType::kI32:
      if (op == ReduceOp::kAvg) return InvalidArgument("avg is not defined for i32");
      return Status::Ok();
    default:
      return InvalidArgument(std::string("cannot reduce dtype ") + std::string(DTypeName(t.dtype())));
  }
}

Status Communicator::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return InvalidArgument("peer " + std::to_string(peer) + " is not another rank of a group of " +
                           std::to_string(size_));
  }
  return Status::Ok();
}

std::unique_ptr<Work> Communicator::AllReduce(Tensor& buf, ReduceOp op, ReduceOrder order) {
  uint64_t seq = NextCollectiveSeq();
  Status valid = CheckTensor(buf, "buffer");
  if (valid.ok()) valid = CheckReducible(buf, op);
  if (auto w = Launch(CommOp::kAllReduce, seq, valid)) return w;
  auto state = NewOp(CommOp::kAllReduce, seq);
  if (!state->done()) DoAllReduce(buf, op, order, state);
  return std::make_unique<Work>(std::move(state));
}

std::unique_ptr<Work> Communicator::ReduceScatter(const Tensor& in, Tensor& out, ReduceOp op,
                                                  ReduceOrder order) {
  uint64_t seq = NextCollectiveSeq();
  Status valid = CheckTensor(in, "input");
  if (valid.ok()) valid = CheckTensor(out, "output");
  if (valid.ok()) valid = CheckReducible(in, op);
  if (valid.ok() && (in.dtype() != out.dtype() || in.numel() != out.numel() * size_)) {
    valid = InvalidArgument("reduce_scatter needs input numel = " + std::to_string(size_) +
                            " x output numel and equal dtypes, got " + std::to_string(in.numel()) +
                            " and " + std::to_string(out.numel()));
  }
  if (auto w = Launch(CommOp::kReduceScatter, seq, valid)) return w;
  auto state = NewOp(CommOp::kReduceScatter, seq);
  if (!state->done()) DoReduceScatter(in, out, op, order, state);
  return std::make_unique<Work>(std::move(state));
}

std::unique_ptr<Work> Communicator::AllGather(const Tensor& in, Tensor& out) {
  uint64_t seq = NextCollectiveSeq();
  Status valid = CheckTensor(in, "input");
  if (valid.ok()) valid = CheckTensor(out, "output");
  if (valid.ok() && (in.dtype() != out.dtype() || out.numel() != in.numel() * size_)) {
    valid = InvalidArgument("all_gather needs output numel = " + std::to_string(size_) +
                            " x input numel and equal dtypes, got " + std::to_string(in.numel()) +
                            " and " + std::to_string(out.numel()));
  }
  if (auto w = Launch(CommOp::kAllGather, seq, valid)) return w;
  auto state = NewOp(CommOp::kAllGather, seq);
  if (!state->done()) DoAllGather(in, out, state);
  return std::make_unique<Work>(std::move(state));
}

std::unique_ptr<Work> Communicator::AllToAll(const Tensor& in, Tensor& out,
                                             std::span<const int64_t> send_counts,
                                             std::span<const int64_t> recv_counts) {
  uint64_t seq = NextCollectiveSeq();
  Status valid = CheckTensor(in, "input");
  if (valid.ok()) valid = CheckTensor(out, "output");
  if (valid.ok() && in.dtype() != out.dtype()) valid = InvalidArgument("all_to_all dtypes differ");
  if (valid.ok() && (send_counts.size() != static_cast<size_t>(size_) ||
                     recv_counts.size() != static_cast<size_t>(size_))) {
    valid = InvalidArgument("all_to_all needs " + std::to_string(size_) +
                            " send and recv counts, got " + std::to_string(send_counts.size()) +
                            " and " + std::to_string(recv_counts.size()));
  }
  if (valid.ok()) {
    int64_t send_total = 0, recv_total = 0;
    bool negative = false;
    for (int p = 0; p < size_; ++p) {
      negative |= send_counts[p] < 0 || recv_counts[p] < 0;
      send_total += send_counts[p];
      recv_total += recv_counts[p];
    }
    if (negative || send_total != in.numel() || recv_total != out.numel()) {
      valid = InvalidArgument("all_to_all counts sum to " + std::to_string(send_total) + " sent / " +
                              std::to_string(recv_total) + " received but the tensors hold " +
                              std::to_string(in.numel()) + " / " + std::to_string(out.numel()));
    }
  }
  if (auto w = Launch(CommOp::kAllToAll, seq, valid)) return w;
  auto state = NewOp(CommOp::kAllToAll, seq);
  if (!state->done()) {
    DoAllToAll(in, out, std::vector<int64_t>(send_counts.begin(), send_counts.end()),
               std::vector<int64_t>(recv_counts.begin(), recv_counts.end()), state);
  }
  return std::make_unique<Work>(std::move(state));
}

std::unique_ptr<Work> Communicator::Broadcast(Tensor& buf, int root) {
  uint64_t seq = NextCollectiveSeq();
  Status valid = CheckTensor(buf, "buffer");
  if (valid.ok() && (root < 0 || root >= size_)) {
    valid = InvalidArgument("broadcast root " + std::to_string(root) + " outside group of " +
                            std::to_string(size_));
  }
  if (auto w = Launch(CommOp::kBroadcast, seq, valid)) return w;
  auto state = NewOp(CommOp::kBroadcast, seq);
  if (!state->done()) DoBroadcast(buf, root, state);
  return std::make_unique<Work>(std::move(state));
}

std::unique_ptr<Work> Communicator::Send(const Tensor& t, int peer) {
  Status valid = CheckPeer(peer);
  uint64_t seq = 0;
  if (valid.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    seq = send_seq_[peer]++;
  }
  if (valid.ok()) valid = CheckTensor(t, "tensor");
  if (auto w = Launch(CommOp::kSend, seq, valid)) return w;
  auto state = NewOp(CommOp::kSend, seq);
  if (!state->done()) DoSend(t, peer, state);
  return std::make_unique<Work>(std::move(state));
}

std::unique_ptr<Work> Communicator::Recv(Tensor& t, int peer) {
  Status valid = CheckPeer(peer);
  uint64_t seq = 0;
  if (valid.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    seq = recv_seq_[peer]++;
  }
  if (valid.ok()) valid = CheckTensor(t, "tensor");
  if (auto w = Launch(CommOp::kRecv, seq, valid)) return w;
  auto state = NewOp(CommOp::kRecv, seq);
  if (!state->done()) DoRecv(t, peer, state);
  return std::make_unique<Work>(std::move(state));
}

std::unique_ptr<Work> Communicator::Barrier() {
  uint64_t seq = NextCollectiveSeq();
  if (auto w = Launch(CommOp::kBarrier, seq, Status::Ok())) return w;
  auto state = NewOp(CommOp::kBarrier, seq);
  if (!state->done()) DoBarrier(state);
  return std::make_unique<Work>(std::move(state));
}

Result<std::unique_ptr<Communicator>> Communicator::Split(int color, int key,
                                                          const CommOptions& options) {
  if (options.timeout_s <= 0) {
    return InvalidArgument("comm.timeout_s must be > 0 for group '" + options.name + "'");
  }
  // Agree on membership with an all-gather of (color, key): it is bounded like every other op,
  // so a missing peer is a timeout here rather than a hang inside a backend's blocking split.
  if (device() != Device::kCpu) {
    // Device backends agree on membership themselves (ncclCommSplit).
    const uint64_t seq = NextCollectiveSeq();
    Launch(CommOp::kSplit, seq, Status::Ok());  // counts it; returns null for a valid op
    return DoSplit(color, key, {}, -1, seq, options);
  }
  std::vector<int32_t> mine = {color, key};
  std::vector<int32_t> all(static_cast<size_t>(2 * size_));
  Tensor in(mine.data(), DType::kI32, {2});
  Tensor out(all.data(), DType::kI32, {2 * size_});
  auto work = AllGather(in, out);
  const uint64_t split_seq = work->sequence_number();
  RETURN_IF_ERROR(work->Wait());
  std::vector<std::pair<int64_t, int>> keyed;  // (key, parent rank) of my color
  for (int r = 0; r < size_; ++r) {
    if (all[2 * r] == color) keyed.push_back({all[2 * r + 1], r});
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> members;
  int new_rank = -1;
  for (auto& [k, r] : keyed) {
    if (r == rank_) new_rank = static_cast<int>(members.size());
    members.push_back(r);
  }
  TESSERA_CHECK(new_rank >= 0);
  return DoSplit(color, key, std::move(members), new_rank, split_seq, options);
}

void Communicator::After(Event e) { DoAfter(e); }

void Communicator::DoAfter(Event e) {
  TESSERA_CHECK_MSG(e.is_null(), "group '%s': a host communicator cannot wait on a device event",
                    name().c_str());
}

void Communicator::Abort(const Status& reason) {
  std::vector<std::shared_ptr<OpState>> to_fail;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    abort_status_ = Status(StatusCode::kAborted,
                           "group '" + options_.name + "' aborted: " + reason.ToString());
    status = abort_status_;
    aborted_.store(true, std::memory_order_release);
    for (auto& w : pending_) {
      if (auto s = w.lock()) to_fail.push_back(std::move(s));
    }
    pending_.clear();
  }
  for (auto& s : to_fail) s->Complete(Status(StatusCode::kAborted, s->Describe() + ": " + status.message()));
  OnAbort(status);
}

}  // namespace tessera
