// runtime/train/param_shards.cc — storage, per-unit collectives and the optimizer of the
// data-parallel parameter state (see param_shards.h for the contract).
#include "runtime/train/param_shards.h"


#include <algorithm>
#include <cstdio>
#include <cstring>

#include "optimizer/grad_clip.h"
#include "runtime/core/check.h"
#include "runtime/kernels/cpu_backend.h"

namespace tessera {

// Slots (SlotOf): 0 the embeddings, 1 the final unit, 2 and 3 alternate between blocks, 4 and
// 5 between MoE blocks' expert units (acquired beside their block's unit).
constexpr int kNumSlots = 6;

// One of the unit slots (SlotOf): the parameter values of the unit last loaded into it
// and the gradient buffer (with its pending reduce-scatter) of the unit last computed in it.
struct ParamShards::Slot {
  // Parameters (zero 3 or low precision; otherwise Acquire points into the fp32 buffer).
  Tensor values;    // fp32: what Acquire returns (zero 3 fp32: the all-gather output itself)
  Tensor gathered;  // zero 3 low: the all-gather output in the parameter type
  std::unique_ptr<Work> gather;
  int unit = -1;       // whose parameters values holds (or is being gathered)
  bool ready = false;  // values are complete
  bool in_use = false;
  // Gradients.
  Tensor grads;      // fp32: the unit's gradients (zero 2/3: padded to dp*P_u)
  Tensor wire;       // zero 2/3, low reduce: the reduce-scatter input in the reduce type
  Tensor piece;      // zero 2/3: reduce-scatter output when it cannot go straight to part_grads_
  Tensor piece_f32;  // zero 2/3, low reduce with accumulation: piece upcast before adding
  std::unique_ptr<Work> rs;
  int rs_unit = -1;
  int64_t rs_micro = 0;
  bool rs_direct = false;  // the output went straight into part_grads_
};

ParamShards::ParamShards(const ParamShardsOptions& options, ShardLayout layout, Communicator* dp,
                         MemoryTracker* tracker)
    : options_(options),
      layout_(std::move(layout)),
      dp_(dp),
      tracker_(tracker),
      backend_(options.backend != nullptr ? options.backend : &CpuReferenceBackend()) {}

ParamShards::~ParamShards() {
  // Outstanding operations write into our buffers: wait for them (bounded) before the arenas
  // go. After a failure the job is ending anyway and the communicator is aborted.
  for (auto& s : slots_) {
    if (s->gather) (void)s->gather->Wait();
    if (s->rs) (void)s->rs->Wait();
  }
}

Result<std::unique_ptr<ParamShards>> ParamShards::Create(const ParamShardsOptions& options,
                                                         const AdamWConfig& adamw,
                                                         std::vector<int64_t> bounds,
                                                         const std::vector<ParamRange>& ranges,
                                                         Communicator* dp,
                                                         MemoryTracker* tracker) {
  const int dp_size = dp != nullptr ? dp->size() : 1;
  // Partitioned only when there is someone to partition with; one rank keeps whole units
  // (align 1: packed coordinates are then the flat ones).
  const int lranks = options.zero >= 1 && dp_size > 1 ? dp_size : 1;
  ShardLayout layout(std::move(bounds), lranks, lranks > 1 ? kNormBlock : 1);
  std::unique_ptr<ParamShards> p(new ParamShards(options, std::move(layout), dp, tracker));
  RETURN_IF_ERROR(p->Init(adamw, ranges));
  return p;
}

Tensor ParamShards::Reserve(MemoryKind kind, DType dtype, int64_t n) {
  n = std::max<int64_t>(n, 1);
  arenas_.push_back(backend_->MakeArena(
      kind, static_cast<size_t>(n) * DTypeSize(dtype) + Arena::kAlignment, tracker_));
  Tensor t = arenas_.back().Allocate(dtype, {n});
  backend_->Zero(t.data(), t.nbytes());  // padding must read as zero
  return t;
}

// Init, in two steps: reserve the state buffers (parameters, gradients, optimizer, all-gather
// staging), reserve the unit slots. Whether they fit is the trainer's check before
// (memory_plan.h), which books this same construction dry.
Status ParamShards::Init(const AdamWConfig& adamw, const std::vector<ParamRange>& ranges) {
  const int U = layout_.num_units();
  // The final unit: the last one that does not hold experts (those follow it).
  final_unit_ = U - 1;
  while (final_unit_ > 0 && std::find(options_.expert_units.begin(), options_.expert_units.end(),
                                      final_unit_) != options_.expert_units.end()) {
    --final_unit_;
  }
  rank_ = dp_ != nullptr ? dp_->rank() : 0;
  ranks_ = dp_ != nullptr ? dp_->size() : 1;
  zero_ = layout_.ranks() > 1 ? options_.zero : 0;
  low_ = options_.param_dtype != DType::kF32;
  if (U < 3) return InvalidArgument("param shards: a model has at least 3 units, got " + std::to_string(U));
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  std::optional<ShardedAdamWDisk> disk = options_.disk;
  if (disk) disk->path += ".bin";
  if (options_.sizing) {
    optimizer_ = ShardedAdamW::Sizing(adamw, layout_, lrank, ranges, low_, tracker_,
                                      disk ? &*disk : nullptr);
  } else if (disk) {
    ASSIGN_OR_RETURN(optimizer_, ShardedAdamW::CreateOnDisk(adamw, layout_, lrank, ranges, low_,
                                                            tracker_, *disk));
  } else {
    optimizer_ = std::make_unique<ShardedAdamW>(adamw, layout_, lrank, ranges, low_, tracker_);
  }
  ReserveStateBuffers();
  ReserveSlots();
  grads_of_.assign(static_cast<size_t>(U), nullptr);
  return Status::Ok();
}

void ParamShards::ReserveStateBuffers() {
  const int64_t n = layout_.num_params(), S = layout_.packed_size();
  const DType pdt = options_.param_dtype, rdt = options_.reduce_dtype;
  if (zero_ == 3) {
    shard_ = Reserve(MemoryKind::kParameters, pdt, S);
  } else {
    full_ = Reserve(MemoryKind::kParameters, pdt, n);
  }
  if (zero_ <= 1) {
    main_grads_ = Reserve(MemoryKind::kGradients, DType::kF32, n);
    if (ranks_ > 1) {
      all_reduce_ = std::make_unique<BucketedAllReduce>(
          dp_, main_grads_.f32(), n, options_.bucket_elems, rdt, tracker_, backend_);
    }
  } else {
    part_grads_ = Reserve(MemoryKind::kGradients, DType::kF32, S);
  }
  if (zero_ == 1 || zero_ == 2) {
    int64_t max_piece = 0;
    for (int u = 0; u < layout_.num_units(); ++u) max_piece = std::max(max_piece, layout_.piece_size(u));
    // All-gather chunks: about one gradient bucket received per collective.
    ag_chunk_ = std::clamp<int64_t>(options_.bucket_elems / ranks_, 1, max_piece);
    ag_send_ = Reserve(MemoryKind::kUnitBuffers, pdt, ag_chunk_);
    ag_recv_ = Reserve(MemoryKind::kUnitBuffers, pdt, ranks_ * ag_chunk_);
  }
}

// Slot capacities, over the units that map to each slot: `padded` is a whole unit's padded
// pieces (ranks * P_u: what an all-gather or reduce-scatter of it spans), `unit` its real size,
// `piece` one piece.
void ParamShards::ReserveSlots() {
  const DType pdt = options_.param_dtype, rdt = options_.reduce_dtype;
  const bool param_slots = zero_ == 3 || low_;
  const bool grad_slots = zero_ >= 2 || options_.grad_accum_steps > 1;
  const bool accum = options_.grad_accum_steps > 1;
  for (int k = 0; k < kNumSlots; ++k) {
    int64_t padded = 0, unit = 0, piece = 0;
    for (int u = 0; u < layout_.num_units(); ++u) {
      if (SlotOf(u) != k) continue;
      padded = std::max(padded, ranks_ * layout_.piece_size(u));
      unit = std::max(unit, layout_.unit_size(u));
      piece = std::max(piece, layout_.piece_size(u));
    }
    auto slot = std::make_unique<Slot>();
    if (unit > 0 && param_slots) {
      const int64_t cap = zero_ == 3 ? padded : unit;  // gathered, or upcast from full_
      slot->values = Reserve(MemoryKind::kUnitBuffers, DType::kF32, cap);
      if (zero_ == 3 && low_) slot->gathered = Reserve(MemoryKind::kUnitBuffers, pdt, cap);
    }
    if (unit > 0 && grad_slots) {
      if (zero_ >= 2) {  // the reduce-scatter's input, padding included
        slot->grads = Reserve(MemoryKind::kUnitBuffers, DType::kF32, padded);
        if (rdt != DType::kF32) slot->wire = Reserve(MemoryKind::kUnitBuffers, rdt, padded);
        if (accum || rdt != DType::kF32) slot->piece = Reserve(MemoryKind::kUnitBuffers, rdt, piece);
        if (accum && rdt != DType::kF32) {
          slot->piece_f32 = Reserve(MemoryKind::kUnitBuffers, DType::kF32, piece);
        }
      } else {  // a later micro-batch's scratch, added into main_grads_
        slot->grads = Reserve(MemoryKind::kUnitBuffers, DType::kF32, unit);
      }
    }
    slots_.push_back(std::move(slot));
  }
}

// Embeddings (and a pipeline stage's copy of them) and the final unit have slots of their own
// (the tied LM head reads the embeddings while the final unit is in use, and their gradient
// buffer stays open through the blocks' backward); blocks alternate between two, so the next
// block is gathered into the slot the previous one left.
int ParamShards::SlotOf(int unit) const {
  if (unit == 0) return 0;
  for (int u : options_.embedding_units) {
    if (u == unit) return 0;
  }
  for (size_t i = 0; i < options_.expert_units.size(); ++i) {
    if (options_.expert_units[i] == unit) return 4 + static_cast<int>(i % 2);
  }
  if (unit == final_unit_) return 1;
  return 2 + (unit - 1) % 2;
}

void ParamShards::Fail(const Status& s) {
  if (!status_.ok()) return;
  status_ = s;
  if (dp_ != nullptr) dp_->Abort(s);  // every later wait returns at once
}

float* ParamShards::FullF32() const { return static_cast<float*>(full_.data()); }

char* ParamShards::Storage(int64_t flat_begin) const {
  return static_cast<char*>(full_.data()) + flat_begin * DTypeSize(options_.param_dtype);
}

char* ParamShards::ShardStorage(int unit) const {
  return static_cast<char*>(shard_.data()) +
         layout_.packed_offset(unit) * DTypeSize(options_.param_dtype);
}

std::vector<float*> ParamShards::GradPieces() {
  std::vector<float*> g(static_cast<size_t>(layout_.num_units()));
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  for (int u = 0; u < layout_.num_units(); ++u) {
    // zero 0/1: the piece's place in the full reduced buffer (zero 0: the whole unit).
    g[u] = zero_ <= 1 ? main_grads_.f32() + std::min(layout_.piece_begin(u, lrank), layout_.unit_end(u))
                      : part_grads_.f32() + layout_.packed_offset(u);
  }
  return g;
}

Status ParamShards::Load(const Fill& fill) {
  for (auto& s : slots_) s->ready = false, s->unit = -1;
  const int U = layout_.num_units();
  const DType pdt = options_.param_dtype;
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  if (zero_ < 3) {
    std::vector<float> tmp;
    for (int u = 0; u < U; ++u) {
      const int64_t b = layout_.unit_begin(u), e = layout_.unit_end(u);
      if (!low_) {
        fill(b, e, FullF32() + b);
        continue;
      }
      tmp.resize(static_cast<size_t>(e - b));
      fill(b, e, tmp.data());
      backend_->ConvertFromF32(pdt, tmp.data(), Storage(b), e - b);
    }
  }
  if (low_) {  // the fp32 master weights (wherever the optimizer keeps them); zero 3: rounded
    const size_t es = DTypeSize(pdt);
    Status st = optimizer_->Load(ShardedAdamW::kMaster, [&](int u, int64_t off, int64_t n, float* out) {
      const int64_t b = layout_.piece_begin(u, lrank) + off;
      fill(b, b + n, out);
      if (zero_ == 3) backend_->ConvertFromF32(pdt, out, ShardStorage(u) + off * es, n);
    });
    if (!st.ok()) Fail(st);
    return st;
  }
  if (zero_ < 3) return Status::Ok();
  // zero 3, fp32: the shard itself.
  for (int u = 0; u < U; ++u) {
    const int64_t P = layout_.piece_size(u), real = layout_.piece_real(u, lrank);
    const int64_t b = layout_.piece_begin(u, lrank);
    float* dst = reinterpret_cast<float*>(ShardStorage(u));
    std::memset(dst, 0, static_cast<size_t>(P) * sizeof(float));
    if (real > 0) fill(b, b + real, dst);
  }
  return Status::Ok();
}

// ---- the model's side (ParamStore) -------------------------------------------------------------

void ParamShards::StartGather(int unit) {
  Slot& s = *slots_[SlotOf(unit)];
  if (s.gather) {  // a prefetch nobody acquired: its buffer is about to be reused
    Status st = s.gather->Wait();
    s.gather.reset();
    if (!st.ok()) Fail(st);
  }
  const int64_t P = layout_.piece_size(unit);
  const DType pdt = options_.param_dtype;
  s.unit = unit;
  s.ready = false;
  Tensor in(ShardStorage(unit), pdt, {P});
  Tensor out = low_ ? Tensor(s.gathered.data(), pdt, {ranks_ * P})
                    : Tensor(s.values.data(), DType::kF32, {ranks_ * P});
  s.gather = dp_->AllGather(in, out);
}

const float* ParamShards::Acquire(int unit) {
  Slot& s = *slots_[SlotOf(unit)];
  TESSERA_CHECK_MSG(!s.in_use, "unit %d acquired while its slot is in use", unit);
  s.in_use = true;
  if (zero_ != 3 && !low_) return FullF32() + layout_.unit_begin(unit);
  if (s.unit != unit) {
    if (zero_ == 3) {
      StartGather(unit);
    } else {
      s.unit = unit;
      s.ready = false;
    }
  }
  if (!s.ready) {
    if (s.gather) {
      Status st = s.gather->Wait();
      s.gather.reset();
      if (!st.ok()) Fail(st);
    }
    // A gathered unit is its pieces in rank order, i.e. the unit's elements in order.
    const void* src = zero_ == 3 ? s.gathered.data() : Storage(layout_.unit_begin(unit));
    if (low_) backend_->ConvertToF32(options_.param_dtype, src, s.values.f32(), layout_.unit_size(unit));
    s.ready = true;
  }
  return s.values.f32();
}

void ParamShards::Release(int unit) { slots_[SlotOf(unit)]->in_use = false; }

void ParamShards::Prefetch(int unit) {
  if (zero_ != 3 || unit < 0 || unit >= layout_.num_units()) return;
  const Slot& s = *slots_[SlotOf(unit)];
  if (s.in_use || s.unit == unit) return;
  StartGather(unit);
}

float* ParamShards::Grads(int unit) {
  if (grads_of_[unit] != nullptr) return grads_of_[unit];
  Slot& s = *slots_[SlotOf(unit)];
  float* g = nullptr;
  int64_t len = layout_.unit_size(unit);
  if (zero_ <= 1) {
    // The first micro-batch is computed straight into the reduced buffer; later ones into a
    // scratch slot, added in GradsDone (the order one rank uses whatever the layout).
    g = micro_ == 0 ? main_grads_.f32() + layout_.unit_begin(unit) : s.grads.f32();
  } else {
    if (s.rs) CompleteReduceScatter(s);  // the slot's previous unit leaves
    g = s.grads.f32();
    len = ranks_ * layout_.piece_size(unit);  // the padding must be zero for the reduction
  }
  std::memset(g, 0, static_cast<size_t>(len) * sizeof(float));
  grads_of_[unit] = g;
  return g;
}

void ParamShards::GradsDone(int unit) {
  float* g = grads_of_[unit];
  TESSERA_CHECK_MSG(g != nullptr, "GradsDone(%d) without Grads", unit);
  const int64_t b = layout_.unit_begin(unit), e = layout_.unit_end(unit);
  // What a GPU would have stored: the micro-batch's gradients in the parameter type.
  if (low_) backend_->Round(options_.param_dtype, g, e - b);
  if (zero_ <= 1) {
    if (micro_ > 0) backend_->AddInPlace(main_grads_.f32() + b, g, e - b);
    if (all_reduce_ && micro_ == options_.grad_accum_steps - 1) all_reduce_->OnReady(b, e);
    return;
  }
  LaunchReduceScatter(unit, g);
}

void ParamShards::LaunchReduceScatter(int unit, float* grads) {
  Slot& s = *slots_[SlotOf(unit)];
  const int64_t P = layout_.piece_size(unit);
  const DType rdt = options_.reduce_dtype;
  Tensor in(grads, DType::kF32, {ranks_ * P});
  if (rdt != DType::kF32) {
    backend_->ConvertFromF32(rdt, grads, s.wire.data(), ranks_ * P);
    in = Tensor(s.wire.data(), rdt, {ranks_ * P});
  }
  s.rs_direct = rdt == DType::kF32 && micro_ == 0;
  Tensor out = s.rs_direct ? Tensor(part_grads_.f32() + layout_.packed_offset(unit), DType::kF32, {P})
                           : Tensor(s.piece.data(), rdt, {P});
  s.rs = dp_->ReduceScatter(in, out, ReduceOp::kSum, ReduceOrder::kRankOrder);
  s.rs_unit = unit;
  s.rs_micro = micro_;
}

void ParamShards::CompleteReduceScatter(Slot& s) {
  Status st = s.rs->Wait();
  s.rs.reset();
  if (!st.ok()) {
    Fail(st);
    return;
  }
  if (s.rs_direct) return;
  const int64_t P = layout_.piece_size(s.rs_unit);
  float* dst = part_grads_.f32() + layout_.packed_offset(s.rs_unit);
  const DType rdt = options_.reduce_dtype;
  if (rdt == DType::kF32) {
    backend_->AddInPlace(dst, s.piece.f32(), P);  // a later micro-batch
  } else if (s.rs_micro == 0) {
    backend_->ConvertToF32(rdt, s.piece.data(), dst, P);
  } else {
    backend_->ConvertToF32(rdt, s.piece.data(), s.piece_f32.f32(), P);
    backend_->AddInPlace(dst, s.piece_f32.f32(), P);
  }
}

// ---- the trainer's side --------------------------------------------------------------------------

void ParamShards::BeginStep() {
  if (all_reduce_) all_reduce_->Begin();
}

void ParamShards::BeginMicroBatch(int64_t micro) {
  micro_ = micro;
  std::fill(grads_of_.begin(), grads_of_.end(), nullptr);
}

Status ParamShards::FinishGradients() {
  if (zero_ <= 1) {
    if (all_reduce_ && status_.ok()) {
      if (Status st = all_reduce_->Finish(); !st.ok()) Fail(st);
    }
  } else {
    for (auto& s : slots_) {
      if (s->rs) CompleteReduceScatter(*s);
    }
  }
  return status_;
}

Result<double> ParamShards::GradSumOfSquares() {
  if (zero_ <= 1) return SegmentedSumOfSquares(layout_, main_grads_.f32());
  const std::vector<double> mine = PiecePartials(layout_, rank_, part_grads_.f32());
  auto all = AllGatherDoubles(dp_, mine);
  if (!all.ok()) {
    Fail(all.status());
    return all.status();
  }
  // Each block has one non-zero contributor; adding the zeros in rank order is exact.
  std::vector<double> total(mine.size(), 0.0);
  for (int r = 0; r < ranks_; ++r) {
    for (size_t b = 0; b < total.size(); ++b) total[b] += (*all)[r * mine.size() + b];
  }
  return SumPartials(total);
}

Result<double> ParamShards::GradSumOfSquaresExcluding(
    const std::vector<std::pair<int64_t, int64_t>>& exclude) {
  // Sum of squares of g[0, n) (flat elements [flat, flat + n)) minus the excluded ranges.
  auto masked = [&](int64_t flat, const float* g, int64_t n) {
    double sum = 0.0;
    int64_t i = 0;
    size_t k = 0;
    while (i < n) {
      while (k < exclude.size() && exclude[k].second <= flat + i) ++k;
      const int64_t stop = k < exclude.size() ? std::clamp(exclude[k].first - flat, i, n) : n;
      for (; i < stop; ++i) sum += static_cast<double>(g[i]) * g[i];
      if (k < exclude.size() && i < n) i = std::min(n, exclude[k].second - flat);
    }
    return sum;
  };
  if (zero_ <= 1) return masked(0, main_grads_.f32(), layout_.num_params());
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  const std::vector<float*> g = GradPieces();
  double mine = 0.0;
  for (int u = 0; u < layout_.num_units(); ++u) {
    mine += masked(layout_.piece_begin(u, lrank), g[u], layout_.piece_real(u, lrank));
  }
  auto all = AllGatherDoubles(dp_, {mine});
  if (!all.ok()) {
    Fail(all.status());
    return all.status();
  }
  double total = 0.0;
  for (double v : *all) total += v;
  return total;
}

std::span<float> ParamShards::ReducedGrads(int unit) {
  if (zero_ <= 1) {
    return {main_grads_.f32() + layout_.unit_begin(unit), static_cast<size_t>(layout_.unit_size(unit))};
  }
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  return {part_grads_.f32() + layout_.packed_offset(unit),
          static_cast<size_t>(layout_.piece_real(unit, lrank))};
}

void ParamShards::ScaleGradients(float factor) {
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  const std::vector<float*> g = GradPieces();
  for (int u = 0; u < layout_.num_units(); ++u) ScaleInPlace(g[u], layout_.piece_real(u, lrank), factor);
}

Status ParamShards::Step(float lr, float grad_scale) {
  RETURN_IF_ERROR(status_);
  const int U = layout_.num_units();
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  const DType pdt = options_.param_dtype;
  std::vector<float*> pieces;
  if (!low_) {
    for (int u = 0; u < U; ++u) {
      pieces.push_back(zero_ == 3 ? reinterpret_cast<float*>(ShardStorage(u))
                                  : FullF32() + std::min(layout_.piece_begin(u, lrank),
                                                         layout_.unit_end(u)));
    }
  }
  const std::vector<float*> grads = GradPieces();
  // Low precision: the new parameters are the master weights rounded, range by range as the
  // optimizer updates them (on disk: chunk by chunk, while they are in the pool).
  const size_t es = DTypeSize(pdt);
  ShardedAdamW::PieceSink round;
  if (low_) {
    round = [&](int u, int64_t off, int64_t n, const float* master) {
      char* dst = zero_ == 3 ? ShardStorage(u) + off * es : Storage(layout_.piece_begin(u, lrank) + off);
      backend_->ConvertFromF32(pdt, master, dst, n);
    };
  }
  if (Status st = optimizer_->Step(pieces, std::vector<const float*>(grads.begin(), grads.end()),
                                   lr, grad_scale, round);
      !st.ok()) {
    Fail(st);
    return st;
  }
  for (auto& s : slots_) s->ready = false, s->unit = -1;
  if (zero_ == 1 || zero_ == 2) return AllGatherUnits();
  return Status::Ok();
}

// Every rank's updated pieces of every unit, into the full buffer of every rank. The full
// buffer has no room for the padding of a unit's last piece, and a rank's own next piece must
// not be overwritten before it is sent, so pieces travel through a staging pair in chunks of
// ag_chunk_ elements per rank (chunk j of every rank's piece in one collective).
Status ParamShards::AllGatherUnits() {
  const DType pdt = options_.param_dtype;
  const size_t es = DTypeSize(pdt);
  char* send = static_cast<char*>(ag_send_.data());
  const char* recv = static_cast<const char*>(ag_recv_.data());
  for (int u = 0; u < layout_.num_units(); ++u) {
    const int64_t P = layout_.piece_size(u), n_u = layout_.unit_size(u);
    for (int64_t off = 0; off < P; off += ag_chunk_) {
      const int64_t len = std::min(ag_chunk_, P - off);
      // This rank's real elements of the chunk, zeros past the unit's end.
      const int64_t real = std::clamp<int64_t>(n_u - rank_ * P - off, 0, len);
      if (real > 0) std::memcpy(send, Storage(layout_.piece_begin(u, rank_) + off), real * es);
      std::memset(send + real * es, 0, (len - real) * es);
      Tensor in(send, pdt, {len});
      Tensor out(ag_recv_.data(), pdt, {ranks_ * len});
      if (Status st = dp_->AllGather(in, out)->Wait(); !st.ok()) {
        Fail(st);
        return st;
      }
      for (int r = 0; r < ranks_; ++r) {
        const int64_t keep = std::clamp<int64_t>(n_u - r * P - off, 0, len);
        if (keep > 0) std::memcpy(Storage(layout_.piece_begin(u, r) + off), recv + r * len * es, keep * es);
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<float>> ParamShards::GatherFull(int root) {
  RETURN_IF_ERROR(status_);
  const int64_t n = layout_.num_params();
  std::vector<float> full;
  if (rank_ == root) full.resize(static_cast<size_t>(n));
  const bool partitioned_master = layout_.ranks() > 1 && (zero_ == 3 || low_);
  if (!partitioned_master) {  // every rank holds all fp32 values
    if (rank_ != root) return full;
    if (!low_) {
      std::memcpy(full.data(), FullF32(), static_cast<size_t>(n) * sizeof(float));
    } else {
      for (int u = 0; u < layout_.num_units(); ++u) {  // one rank's layout: packed == flat
        RETURN_IF_ERROR(optimizer_->Read(ShardedAdamW::kMaster, u, 0, layout_.unit_size(u),
                                         full.data() + layout_.unit_begin(u)));
      }
    }
    return full;
  }
  int64_t max_piece = 0;
  for (int u = 0; u < layout_.num_units(); ++u) max_piece = std::max(max_piece, layout_.piece_size(u));
  std::vector<float> send(static_cast<size_t>(max_piece)), recv(static_cast<size_t>(ranks_ * max_piece));
  for (int u = 0; u < layout_.num_units(); ++u) {
    const int64_t P = layout_.piece_size(u), real = layout_.piece_real(u, rank_);
    std::fill(send.begin(), send.end(), 0.0f);
    if (real > 0 && low_) {
      if (Status st = optimizer_->Read(ShardedAdamW::kMaster, u, 0, real, send.data()); !st.ok()) {
        Fail(st);
        return st;
      }
    } else if (real > 0) {
      const float* src = zero_ == 3 ? reinterpret_cast<const float*>(ShardStorage(u))
                                    : FullF32() + layout_.piece_begin(u, rank_);
      std::memcpy(send.data(), src, static_cast<size_t>(real) * sizeof(float));
    }
    Tensor in(send.data(), DType::kF32, {P});
    Tensor out(recv.data(), DType::kF32, {ranks_ * P});
    if (Status st = dp_->AllGather(in, out)->Wait(); !st.ok()) {
      Fail(st);
      return st;
    }
    if (rank_ == root) {
      std::memcpy(full.data() + layout_.unit_begin(u), recv.data(),
                  static_cast<size_t>(layout_.unit_size(u)) * sizeof(float));
    }
  }
  return full;
}

// ---- checkpoints -------------------------------------------------------------------------------

std::vector<ParamShards::SaveSpan> ParamShards::SaveSpans() const {
  const int U = layout_.num_units();
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  // Replicated state is still written 1/dp per rank: the pieces of a dp-rank layout.
  std::vector<int64_t> bounds;
  for (int u = 0; u < U; ++u) bounds.push_back(layout_.unit_begin(u));
  bounds.push_back(layout_.num_params());
  const ShardLayout split = layout_.ranks() > 1 ? layout_ : ShardLayout(bounds, ranks_, 1);
  std::vector<SaveSpan> spans;
  for (int u = 0; u < U; ++u) {
    const int64_t real = split.piece_real(u, rank_);
    if (real == 0) continue;
    const int64_t f = split.piece_begin(u, rank_);
    // Where flat element f lives in this rank's piece of unit u (its own layout).
    const int64_t in_piece = f - layout_.piece_begin(u, lrank);
    auto at = [&](ShardedAdamW::Stream s) -> const float* {
      const float* p = optimizer_->resident(s, u);
      return p != nullptr ? p + in_piece : nullptr;
    };
    SaveSpan span;
    span.begin = f;
    span.end = f + real;
    if (options_.sizing) {  // a dry state holds nothing: the span's place only
      spans.push_back(std::move(span));
      continue;
    }
    span.values = low_ ? at(ShardedAdamW::kMaster)
                  : zero_ == 3 ? reinterpret_cast<const float*>(ShardStorage(u)) + in_piece
                               : static_cast<const float*>(full_.data()) + f;
    span.exp_avg = at(ShardedAdamW::kExpAvg);
    span.exp_avg_sq = at(ShardedAdamW::kExpAvgSq);
    if (optimizer_->disk() != nullptr) {  // what is not resident is read from the file
      ShardedAdamW* opt = optimizer_.get();
      span.read = [opt, u, in_piece](int kind, int64_t offset, int64_t n, float* out) {
        const auto s = kind == 0 ? ShardedAdamW::kMaster
                       : kind == 1 ? ShardedAdamW::kExpAvg : ShardedAdamW::kExpAvgSq;
        return opt->Read(s, u, in_piece + offset, n, out);
      };
    }
    spans.push_back(std::move(span));
  }
  return spans;
}

Status ParamShards::LoadMoments(const Fill& fill_m, const Fill& fill_v, int64_t adamw_step) {
  const int lrank = layout_.ranks() > 1 ? rank_ : 0;
  for (auto [s, fill] : {std::pair{ShardedAdamW::kExpAvg, &fill_m}, std::pair{ShardedAdamW::kExpAvgSq, &fill_v}}) {
    Status st = optimizer_->Load(s, [&](int u, int64_t off, int64_t n, float* out) {
      const int64_t b = layout_.piece_begin(u, lrank) + off;
      (*fill)(b, b + n, out);
    });
    if (!st.ok()) {
      Fail(st);
      return st;
    }
  }
  optimizer_->adamw().set_step(adamw_step);
  return Status::Ok();
}

std::vector<const OffloadFile*> ParamShards::OffloadFiles() const {
  if (optimizer_->disk() == nullptr) return {};
  return {optimizer_->disk()};
}

std::string ParamShards::Describe() const {
  char buf[256];
  const int64_t n = layout_.num_params();
  std::snprintf(buf, sizeof buf,
                "zero %d over %d rank(s): %d units, %.2fM of %.2fM parameters held per rank%s; "
                "parameters %s%s, gradients reduced in %s",
                zero_, ranks_, layout_.num_units(),
                (zero_ == 3 ? layout_.packed_size() : n) / 1e6, n / 1e6,
                zero_ == 3 ? " (packed, with padding)" : "",
                std::string(DTypeName(options_.param_dtype)).c_str(),
                low_ ? " (fp32 master weights in the optimizer)" : "",
                std::string(DTypeName(options_.reduce_dtype)).c_str());
  std::string out = buf;
  if (const OffloadFile* f = optimizer_->disk()) {
    std::snprintf(buf, sizeof buf, "; optimizer state on disk: %s (%s, %s, pool %s in %lld-element chunks)",
                  f->path().c_str(), FormatBytes(f->file_bytes()).c_str(),
                  f->direct() ? "O_DIRECT" : "buffered", FormatBytes(f->resident_bytes()).c_str(),
                  static_cast<long long>(f->chunk_elems()));
    out += buf;
  }
  return out;
}

}  // namespace tessera
