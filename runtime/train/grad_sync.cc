// runtime/train/grad_sync.cc — bucketed all-reduce, bounded waits, scalar gathers (see
// grad_sync.h for the contract).
#include "runtime/train/grad_sync.h"

#include <chrono>
#include <cstring>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu_backend.h"

namespace tessera {
namespace {

Tensor F32View(float* p, int64_t n) { return Tensor(p, DType::kF32, {n}); }

}  // namespace

Status WaitAll(std::vector<std::unique_ptr<Work>>& work) {
  Status first = Status::Ok();
  for (auto& w : work) {
    if (w == nullptr) continue;
    Status s = first.ok() ? w->Wait() : w->Wait(std::chrono::milliseconds(0));
    if (!s.ok() && first.ok()) first = s;
  }
  work.clear();
  return first;
}

// ---- BucketedAllReduce ------------------------------------------------------------------------

BucketedAllReduce::BucketedAllReduce(Communicator* comm, float* grads, int64_t n,
                                     int64_t bucket_elems, DType wire, MemoryTracker* tracker,
                                     Backend* backend)
    : comm_(comm),
      backend_(backend != nullptr ? backend : &CpuReferenceBackend()),
      grads_(grads),
      n_(n),
      bucket_(std::max<int64_t>(1, bucket_elems)),
      wire_(wire) {
  TESSERA_CHECK(comm_ != nullptr && n_ >= 0);
  if (wire_ != DType::kF32) {
    staging_arena_ = backend_->MakeArena(
        MemoryKind::kGradients, static_cast<size_t>(n) * DTypeSize(wire) + Arena::kAlignment,
        tracker);
    staging_ = staging_arena_.Allocate(wire_, {n});
  }
  const int64_t buckets = (n_ + bucket_ - 1) / bucket_;
  remaining_.resize(static_cast<size_t>(buckets));
  Begin();
}

void BucketedAllReduce::Begin() {
  for (size_t k = 0; k < remaining_.size(); ++k) {
    remaining_[k] = BucketEnd(static_cast<int64_t>(k)) - BucketBegin(static_cast<int64_t>(k));
  }
  work_.clear();
  work_.resize(remaining_.size());
  launched_early_ = 0;
}

void BucketedAllReduce::Launch(int64_t k) {
  if (work_[k] != nullptr) return;
  const int64_t b = BucketBegin(k), e = BucketEnd(k);
  if (wire_ == DType::kF32) {
    Tensor view = F32View(grads_ + b, e - b);
    work_[k] = comm_->AllReduce(view, ReduceOp::kSum, ReduceOrder::kRankOrder);
    return;
  }
  char* stage = static_cast<char*>(staging_.data()) + b * DTypeSize(wire_);
  backend_->ConvertFromF32(wire_, grads_ + b, stage, e - b);
  Tensor view(stage, wire_, {e - b});
  work_[k] = comm_->AllReduce(view, ReduceOp::kSum, ReduceOrder::kRankOrder);
}

void BucketedAllReduce::OnReady(int64_t begin, int64_t end) {
  TESSERA_CHECK(0 <= begin && begin <= end && end <= n_);
  if (end == begin) return;
  // Buckets are numbered from the end: element x is in bucket (n - 1 - x) / bucket_.
  const int64_t first = (n_ - end) / bucket_, last = (n_ - 1 - begin) / bucket_;
  for (int64_t k = first; k <= last; ++k) {
    const int64_t overlap = std::min(end, BucketEnd(k)) - std::max(begin, BucketBegin(k));
    remaining_[k] -= overlap;
    TESSERA_CHECK_MSG(remaining_[k] >= 0, "gradient range [%lld, %lld) reported twice",
                      static_cast<long long>(begin), static_cast<long long>(end));
    if (remaining_[k] == 0) {
      Launch(k);
      ++launched_early_;
    }
  }
}

Status BucketedAllReduce::Finish() {
  // Launch order must be the same on every rank: the hook's order is (same model, same code),
  // and the rest go in bucket order.
  for (int64_t k = 0; k < num_buckets(); ++k) Launch(k);
  RETURN_IF_ERROR(WaitAll(work_));
  if (wire_ != DType::kF32) backend_->ConvertToF32(wire_, staging_.data(), grads_, n_);
  return Status::Ok();
}

// ---- scalars ----------------------------------------------------------------------------------

Result<std::vector<double>> AllGatherDoubles(Communicator* comm, const std::vector<double>& mine) {
  static_assert(sizeof(double) == 2 * sizeof(int32_t));
  const int64_t m = static_cast<int64_t>(mine.size());
  std::vector<double> send(mine), all(static_cast<size_t>(m * comm->size()));
  if (m == 0) return all;
  Tensor in(send.data(), DType::kI32, {2 * m});
  Tensor out(all.data(), DType::kI32, {2 * m * comm->size()});
  RETURN_IF_ERROR(comm->AllGather(in, out)->Wait());
  return all;
}

}  // namespace tessera
