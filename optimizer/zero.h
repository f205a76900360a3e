// optimizer/zero.h — ZeRO partitions of the flat parameter/gradient buffers, and the AdamW
// that holds moments for one partition only.
//
// Owns: the partition arithmetic (pure) and ShardedAdamW. A flat buffer of num_params
// elements is cut into `ranks` partitions of the same padded size P (a multiple of `align`
// elements, ranks * P >= num_params); partition r is [r*P, (r+1)*P), of which only the part
// below num_params is real (the tail of the last partitions may be padding, or all padding
// when num_params is small). The trainer aligns P to kNormBlock so every partition starts on
// a block of the blocked gradient norm (grad_clip.h): per-block partials are then the same
// numbers one rank computes, and the global norm is bit-identical under ZeRO-2.
// ShardedAdamW keeps exp_avg/exp_avg_sq for the real elements of one partition (an AdamW over
// a shifted sub-range with the decay ranges clipped to it); AdamW is elementwise, so stepping
// every partition gives exactly the bits of one AdamW over the whole buffer.
// Thread-safety: Partitioning is an immutable value; ShardedAdamW like AdamW (one thread).
#pragma once

#include <cstdint>
#include <vector>

#include "optimizer/adamw.h"

namespace tessera {

class Partitioning {
 public:
  // ranks >= 1, align >= 1, num_params >= 0.
  Partitioning(int64_t num_params, int ranks, int64_t align);

  int64_t num_params() const { return num_params_; }
  int ranks() const { return ranks_; }
  // P: elements per partition including padding; a multiple of align.
  int64_t padded_size() const { return padded_size_; }
  int64_t padded_total() const { return padded_size_ * ranks_; }
  // Partition r's padded range [r*P, (r+1)*P).
  int64_t begin(int r) const { return r * padded_size_; }
  int64_t padded_end(int r) const { return (r + 1) * padded_size_; }
  // Its real part [real_begin, real_end): the padded range clipped to [0, num_params).
  int64_t real_begin(int r) const;
  int64_t real_end(int r) const;
  int64_t real_size(int r) const;

 private:
  int64_t num_params_;
  int ranks_;
  int64_t padded_size_;
};

// The ranges of `ranges` (flat offsets) that intersect [begin, end), clipped to it and
// shifted by -begin (offsets relative to the partition).
std::vector<ParamRange> ClipParamRanges(const std::vector<ParamRange>& ranges, int64_t begin,
                                        int64_t end);

class ShardedAdamW {
 public:
  // Moments for [begin, end) of a flat buffer whose parameters `ranges` describes; accounted
  // to `tracker` as kOptimizerState. Requires 0 <= begin <= end.
  ShardedAdamW(const AdamWConfig& config, int64_t begin, int64_t end,
               const std::vector<ParamRange>& ranges, MemoryTracker* tracker);

  // Updates params[begin, end) of the FULL flat buffer `params` from `shard_grads`, which
  // holds the gradients of this shard only (end - begin elements, shard-relative).
  // Chunked (optimizer/offload.h) when config.offload is kCpu; same bits either way.
  void Step(float* params, const float* shard_grads, float lr);

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  const AdamW& adamw() const { return adamw_; }
  AdamW& adamw() { return adamw_; }

 private:
  int64_t begin_, end_;
  AdamW adamw_;
};

}  // namespace tessera
