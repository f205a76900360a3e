// optimizer/zero.cc — ShardedAdamW: one packed AdamW stepping a rank's pieces (see zero.h).
#include "optimizer/zero.h"

#include <algorithm>
#include <cstring>

#include "optimizer/offload.h"
#include "runtime/core/check.h"

namespace tessera {
namespace {

size_t MasterBytes(int64_t packed_size) {
  const size_t bytes = static_cast<size_t>(packed_size) * sizeof(float);
  return (bytes + Arena::kAlignment - 1) / Arena::kAlignment * Arena::kAlignment;
}

}  // namespace

ShardedAdamW::ShardedAdamW(const AdamWConfig& config, const ShardLayout& layout, int rank,
                           const std::vector<ParamRange>& ranges, bool keep_master,
                           MemoryTracker* tracker)
    : ShardedAdamW(config, layout, rank, ranges, keep_master, tracker, AdamW::Moments::kOwn) {}

ShardedAdamW::ShardedAdamW(const AdamWConfig& config, const ShardLayout& layout, int rank,
                           const std::vector<ParamRange>& ranges, bool keep_master,
                           MemoryTracker* tracker, AdamW::Moments moments)
    : layout_(layout),
      rank_(rank),
      keep_master_(keep_master),
      adamw_(config, layout.packed_size(), PackParamRanges(ranges, layout, rank), tracker, moments),
      master_arena_(!keep_master || moments == AdamW::Moments::kElsewhere
                        ? Arena::Measuring(MemoryKind::kOptimizerState)
                    : moments == AdamW::Moments::kSized
                        ? Arena::Sizing(MemoryKind::kOptimizerState,
                                        MasterBytes(layout.packed_size()), tracker)
                        : Arena(MemoryKind::kOptimizerState, MasterBytes(layout.packed_size()),
                                tracker)) {
  TESSERA_CHECK(0 <= rank && rank < layout.ranks());
  // The arena is zero-filled, so padding starts (and stays) zero.
  if (keep_master_ && moments == AdamW::Moments::kOwn) {
    master_ = master_arena_.Allocate(DType::kF32, {layout_.packed_size()});
  }
}

std::unique_ptr<ShardedAdamW> ShardedAdamW::Sizing(const AdamWConfig& config,
                                                   const ShardLayout& layout, int rank,
                                                   const std::vector<ParamRange>& ranges,
                                                   bool keep_master, MemoryTracker* tracker,
                                                   const ShardedAdamWDisk* disk) {
  if (disk == nullptr) {
    return std::unique_ptr<ShardedAdamW>(new ShardedAdamW(config, layout, rank, ranges, keep_master,
                                                          tracker, AdamW::Moments::kSized));
  }
  std::unique_ptr<ShardedAdamW> a(new ShardedAdamW(config, layout, rank, ranges, keep_master,
                                                   tracker, AdamW::Moments::kElsewhere));
  const OffloadFileOptions o = DiskFileOptions(layout, keep_master, *disk);
  a->sized_.push_back(
      Arena::Sizing(MemoryKind::kOptimizerState, OffloadFile::ResidentBytes(o), tracker));
  a->sized_.push_back(Arena::Sizing(MemoryKind::kOffloaded,
                                    OffloadFile::FileBytes(o.streams, o.elems, o.chunk_elems),
                                    tracker));
  return a;
}

// The offload file of a rank's state: its streams, chunking and pool (CreateOnDisk, Sizing).
OffloadFileOptions ShardedAdamW::DiskFileOptions(const ShardLayout& layout, bool keep_master,
                                                 const ShardedAdamWDisk& disk) {
  OffloadFileOptions o;
  o.path = disk.path;
  o.run = disk.run;
  o.streams = keep_master ? 3 : 2;
  o.elems = layout.packed_size();
  o.depth = 4;
  // The pool holds depth chunk sets and the checkpoint reader's set; a chunk never exceeds
  // the (aligned) state, so a tiny model does not reserve the whole pool...
  const int64_t per_chunk = disk.pool_bytes / ((o.depth + 1) * o.streams * int64_t{4});
  // ... and a small state is still cut into about 2 x depth chunks, so the read-ahead and
  // write-back overlap the update whatever the size.
  // (At least one aligned chunk: a rank's expert part may be empty, e.g. on a pipeline stage
  // of dense blocks only, and its file is then one chunk of padding.)
  const int64_t whole = std::max<int64_t>(
      kOffloadAlignElems, (std::max<int64_t>(o.elems, 1) / (2 * o.depth) + kOffloadAlignElems - 1) /
                              kOffloadAlignElems * kOffloadAlignElems);
  o.chunk_elems = std::clamp<int64_t>(per_chunk / kOffloadAlignElems * kOffloadAlignElems,
                                      kOffloadAlignElems, whole);
  o.faults = disk.faults;
  o.host_ranks = disk.host_ranks;
  return o;
}

Result<std::unique_ptr<ShardedAdamW>> ShardedAdamW::CreateOnDisk(
    const AdamWConfig& config, const ShardLayout& layout, int rank,
    const std::vector<ParamRange>& ranges, bool keep_master, MemoryTracker* tracker,
    const ShardedAdamWDisk& disk) {
  std::unique_ptr<ShardedAdamW> a(new ShardedAdamW(config, layout, rank, ranges, keep_master,
                                                   tracker, AdamW::Moments::kElsewhere));
  OffloadFileOptions o = DiskFileOptions(layout, keep_master, disk);
  o.tracker = tracker;
  ASSIGN_OR_RETURN(a->disk_, OffloadFile::Create(o));
  return a;
}

float* ShardedAdamW::master(int u) {
  TESSERA_CHECK_MSG(keep_master_ && !disk_, "ShardedAdamW::master: no master weights in memory");
  TESSERA_CHECK(0 <= u && u < layout_.num_units());
  return master_.f32() + layout_.packed_offset(u);
}

void ShardedAdamW::LoadMaster(const float* full) {
  TESSERA_CHECK_MSG(keep_master_ && !disk_, "ShardedAdamW::LoadMaster: no master weights in memory");
  for (int u = 0; u < layout_.num_units(); ++u) {
    float* piece = master(u);
    const int64_t real = layout_.piece_real(u, rank_);
    if (real > 0) {
      std::memcpy(piece, full + layout_.piece_begin(u, rank_), real * sizeof(float));
    }
    std::fill(piece + real, piece + layout_.piece_size(u), 0.0f);
  }
}

const float* ShardedAdamW::resident(Stream s, int u) const {
  if (disk_) return nullptr;
  TESSERA_CHECK(s != kMaster || keep_master_);
  const float* base = s == kExpAvg ? adamw_.exp_avg().f32()
                      : s == kExpAvgSq ? adamw_.exp_avg_sq().f32()
                                       : master_.f32();
  return base + layout_.packed_offset(u);
}

Status ShardedAdamW::Read(Stream s, int u, int64_t offset, int64_t n, float* out) {
  TESSERA_CHECK(s != kMaster || keep_master_);
  TESSERA_CHECK(0 <= offset && offset + n <= layout_.piece_real(u, rank_));
  if (disk_) return disk_->Read(s, layout_.packed_offset(u) + offset, n, out);
  std::memcpy(out, resident(s, u) + offset, static_cast<size_t>(n) * sizeof(float));
  return Status::Ok();
}

Status ShardedAdamW::ForEachRange(OffloadFile::Pass pass, unsigned mask, const PackedFn& fn) {
  const int U = layout_.num_units();
  // The units' real packed elements inside [begin, end), whose streams start at element begin.
  auto visit = [&](int64_t begin, int64_t end, float* const* streams) {
    float* at[3] = {nullptr, nullptr, nullptr};
    for (int u = 0; u < U; ++u) {
      const int64_t po = layout_.packed_offset(u);
      if (po >= end) break;
      const int64_t x = std::max(begin, po), y = std::min(end, po + layout_.piece_real(u, rank_));
      if (x >= y) continue;
      for (int k = 0; k < 3; ++k) at[k] = streams[k] != nullptr ? streams[k] + (x - begin) : nullptr;
      fn(u, x, y, at);
    }
  };
  if (disk_) {
    return disk_->Run(pass, mask, [&](int64_t b, int64_t e, float* const* streams) {
      float* three[3] = {streams[0], streams[1], keep_master_ ? streams[2] : nullptr};
      visit(b, e, three);
    });
  }
  float* base[3] = {adamw_.exp_avg().f32(), adamw_.exp_avg_sq().f32(),
                    keep_master_ ? master_.f32() : nullptr};
  const int64_t S = layout_.packed_size();
  for (int k = 0; k < 3; ++k) {
    if (!(mask >> k & 1u)) base[k] = nullptr;
    if (base[k] != nullptr && pass == OffloadFile::Pass::kWrite) {
      std::fill(base[k], base[k] + S, 0.0f);  // padding reads as zero
    }
  }
  const bool chunked = adamw_.config().offload == OptimizerOffload::kCpu;
  const int64_t step = chunked ? kOffloadChunk : std::max<int64_t>(S, 1);
  for (int64_t b = 0; b < S; b += step) {
    float* at[3];
    for (int k = 0; k < 3; ++k) at[k] = base[k] != nullptr ? base[k] + b : nullptr;
    visit(b, std::min(S, b + step), at);
  }
  return Status::Ok();
}

Status ShardedAdamW::Load(Stream s, const PieceFill& fill) {
  TESSERA_CHECK(s != kMaster || keep_master_);
  return ForEachRange(OffloadFile::Pass::kWrite, 1u << s,
                      [&](int u, int64_t x, int64_t y, float* const* st) {
                        fill(u, x - layout_.packed_offset(u), y - x, st[s]);
                      });
}

Status ShardedAdamW::Step(std::span<float* const> pieces, const float* packed_grads, float lr,
                          float grad_scale, const PieceSink& on_master) {
  std::vector<const float*> grads(static_cast<size_t>(layout_.num_units()));
  for (int u = 0; u < layout_.num_units(); ++u) grads[u] = packed_grads + layout_.packed_offset(u);
  return Step(pieces, grads, lr, grad_scale, on_master);
}

Status ShardedAdamW::Step(std::span<float* const> pieces, std::span<const float* const> grads,
                          float lr, float grad_scale, const PieceSink& on_master) {
  TESSERA_CHECK_MSG(static_cast<int>(grads.size()) == layout_.num_units(),
                    "ShardedAdamW::Step: %zu gradient pieces for %d units", grads.size(),
                    layout_.num_units());
  if (keep_master_) {
    TESSERA_CHECK_MSG(pieces.empty(), "ShardedAdamW::Step: master weights are stepped, "
                                      "pieces must be empty");
  } else {
    TESSERA_CHECK_MSG(static_cast<int>(pieces.size()) == layout_.num_units(),
                      "ShardedAdamW::Step: %zu pieces for %d units", pieces.size(),
                      layout_.num_units());
  }
  const int64_t t = adamw_.step() + 1;
  const unsigned mask = keep_master_ ? 7u : 3u;
  RETURN_IF_ERROR(ForEachRange(
      OffloadFile::Pass::kUpdate, mask, [&](int u, int64_t x, int64_t y, float* const* st) {
        const int64_t off = x - layout_.packed_offset(u);
        float* params = keep_master_ ? st[kMaster] : pieces[u];
        TESSERA_CHECK_MSG(params != nullptr, "ShardedAdamW::Step: no values for unit %d", u);
        if (!keep_master_) params += off;
        adamw_.StepSliceWith(params, grads[u] + off, st[kExpAvg], st[kExpAvgSq], x, y, lr, t,
                             grad_scale);
        if (keep_master_ && on_master) on_master(u, off, y - x, st[kMaster]);
      }));
  adamw_.set_step(t);
  return Status::Ok();
}

}  // namespace tessera
