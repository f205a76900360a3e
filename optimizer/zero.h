// optimizer/zero.h — the AdamW of one data-parallel rank under ZeRO: moments (and, with mixed
// precision, fp32 master weights) for the rank's pieces of every unit only (shard_layout.h).
//
// Owns: the packed moments of the rank's pieces (an AdamW over packed_size() elements whose
// decay ranges are PackParamRanges of the model's) and, when asked, the packed fp32 master
// weights. Replicated training (ZeRO 0) is the layout with ranks = 1: one piece per unit holding
// the whole unit.
// Semantics: AdamW is elementwise, so stepping every rank's pieces gives exactly the bits of one
// AdamW over the whole flat buffer; padding elements (zero gradients, zero values) stay zero.
// Master weights: with `keep_master` the optimizer owns fp32 copies of its pieces (kOptimizerState
// — the "fp32 master weights in the optimizer partition" of mixed precision); the trainer
// initialises them with LoadMaster and, after each Step, rounds them into its low-precision
// parameters. Without it, Step updates fp32 pieces the caller points at (the model's own fp32
// parameters: nothing duplicated).
// On disk (optimizer.offload: nvme, CreateOnDisk): the moments and master weights are the
// streams of an OffloadFile (offload_file.h) over the packed coordinates; Step, Load and Read
// stream them chunk by chunk through its buffer pool, so the resident state is the pool. The
// bits are the in-memory ones (AdamW is elementwise); master(u), LoadMaster and adamw()'s
// moment tensors are then unavailable: use Load, Read and Step's master sink.
// Thread-safety: one driving thread; Step runs OpenMP loops. Read may run on another thread
// while no Step or Load runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optimizer/adamw.h"
#include "optimizer/offload_file.h"
#include "optimizer/shard_layout.h"

namespace tessera {

// Where an on-disk ShardedAdamW keeps its state (CreateOnDisk).
struct ShardedAdamWDisk {
  std::string path;              // the rank's offload file
  std::string run;               // for its header and messages
  int64_t pool_bytes = 64 << 20; // optimizer.offload_buffer_mb: the whole buffer pool
  OffloadFaults* faults = nullptr;
  int host_ranks = 1;            // ranks of this host offloading to the same directory
};

class ShardedAdamW {
 public:
  // The packed streams of the state: the moments and, with keep_master, the master weights.
  enum Stream { kExpAvg = 0, kExpAvgSq = 1, kMaster = 2 };
  // Writes elements [offset, offset + n) of unit u's piece (offsets within the piece; real
  // elements only) to out.
  using PieceFill = std::function<void(int unit, int64_t offset, int64_t n, float* out)>;
  // Receives elements [offset, offset + n) of unit u's piece.
  using PieceSink = std::function<void(int unit, int64_t offset, int64_t n, const float* values)>;

  // `ranges` are flat (model) ranges, validated by the caller. Moments (2 * packed_size floats)
  // and, with keep_master, the master weights (packed_size floats) accounted to `tracker` as
  // kOptimizerState.
  ShardedAdamW(const AdamWConfig& config, const ShardLayout& layout, int rank,
               const std::vector<ParamRange>& ranges, bool keep_master, MemoryTracker* tracker);

  // The same state on disk: kInvalidArgument for an offload_dir that is missing, unwritable,
  // too small or shared (offload_file.h); kIoError if the file cannot be written.
  static Result<std::unique_ptr<ShardedAdamW>> CreateOnDisk(
      const AdamWConfig& config, const ShardLayout& layout, int rank,
      const std::vector<ParamRange>& ranges, bool keep_master, MemoryTracker* tracker,
      const ShardedAdamWDisk& disk);
  // A dry one (runtime/train/memory_plan.h): books on `tracker` what the real one reserves
  // (in memory; or with `disk`, the file's buffer pool and the file itself as kOffloaded) and
  // holds none of it. Only for its accounting: never loaded, read or stepped.
  static std::unique_ptr<ShardedAdamW> Sizing(const AdamWConfig& config, const ShardLayout& layout,
                                              int rank, const std::vector<ParamRange>& ranges,
                                              bool keep_master, MemoryTracker* tracker,
                                              const ShardedAdamWDisk* disk);

  // Sets stream s (kMaster: keep_master only) of every piece from fill; padding zero.
  Status Load(Stream s, const PieceFill& fill);
  // Elements [offset, offset + n) of unit u's piece of stream s, into out (verified when on
  // disk).
  Status Read(Stream s, int unit, int64_t offset, int64_t n, float* out);
  // In memory: stream s of unit u's piece; on disk: null.
  const float* resident(Stream s, int unit) const;
  const OffloadFile* disk() const { return disk_.get(); }

  // In memory, keep_master only: master piece of unit u (packed, P_u elements; the real ones
  // first).
  float* master(int u);
  // keep_master only: master = the fp32 values of `full` (a full flat buffer) at this rank's
  // pieces, padding zero.
  void LoadMaster(const float* full);

  // One AdamW step t = step() + 1 with learning rate lr over every real element of the rank's
  // pieces. `grads[u]` points at the reduced gradients of unit u's piece (piece_real(u, rank)
  // elements; e.g. packed + packed_offset(u), or the piece's place in a full flat buffer).
  // keep_master: updates the master weights; `pieces` must be empty.
  // otherwise: pieces.size() == num_units and pieces[u] points at the fp32 values of unit u's
  // piece (piece_real(u, rank) elements, wherever they live; may be null when that is 0),
  // updated in place. Padding (of the values, grads, moments, master) is never read or written.
  // With optimizer.offload == cpu each piece is stepped in kOffloadChunk chunks
  // (optimizer/offload.h); on disk in the file's chunks; same bits. grad_scale as in
  // AdamW::Step: the gradients are read multiplied by it (the folded clipping coefficient),
  // never written. on_master (keep_master): called with every updated master range, in order
  // (the caller rounds them into its low-precision parameters). Fails only on disk (I/O).
  Status Step(std::span<float* const> pieces, std::span<const float* const> grads, float lr,
              float grad_scale = 1.0f, const PieceSink& on_master = {});
  // The same with every unit's gradients in one packed buffer (packed_size elements).
  Status Step(std::span<float* const> pieces, const float* packed_grads, float lr,
              float grad_scale = 1.0f, const PieceSink& on_master = {});

  const ShardLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  bool keeps_master() const { return keep_master_; }
  const AdamW& adamw() const { return adamw_; }
  AdamW& adamw() { return adamw_; }

 private:
  ShardedAdamW(const AdamWConfig& config, const ShardLayout& layout, int rank,
               const std::vector<ParamRange>& ranges, bool keep_master, MemoryTracker* tracker,
               AdamW::Moments moments);
  static OffloadFileOptions DiskFileOptions(const ShardLayout& layout, bool keep_master,
                                            const ShardedAdamWDisk& disk);
  // fn(u, x, y, streams) for every unit's real packed elements [x, y) inside [begin, end),
  // streams[s] pointing at element x of stream s (null: not in the pass).
  using PackedFn = std::function<void(int u, int64_t x, int64_t y, float* const* streams)>;
  // One pass over the packed state: in memory, [0, packed_size) in kOffloadChunk pieces
  // (whole, without offload cpu); on disk, the file's pass.
  Status ForEachRange(OffloadFile::Pass pass, unsigned mask, const PackedFn& fn);

  ShardLayout layout_;
  int rank_;
  bool keep_master_;
  AdamW adamw_;   // over the packed coordinates (its moments only in memory)
  Arena master_arena_;
  Tensor master_;  // (packed_size) when keep_master, in memory
  std::unique_ptr<OffloadFile> disk_;
  std::vector<Arena> sized_;  // Sizing with a disk: the file's pool and the file, booked
};

}  // namespace tessera
