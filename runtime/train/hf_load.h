// runtime/train/hf_load.h — init_from an HF checkpoint, sharded: each rank reads from the
// files only the elements its partition holds (tp slices, its pipeline chunks, its experts)
// and, under ZeRO-3, only its own shard of them (ParamState::Load asks for exactly what the
// rank stores), straight into its parameter state.
//
// Memory: no copy of the global model. F32 tensors are read into the destination; F16/BF16
// and GPT-2's transposed weights pass through buffers (a kHfReadBufferElems block and a
// 16-bit conversion chunk, hf_weights.h / safetensors.h) per reading thread. The peak
// resident growth during the load is measured (the kernel's high-water mark, reset at the
// start through /proc/self/clear_refs) and reported.
// Validation first: names, shapes and dtypes are checked against the model before any value is
// read (HfWeightSource::Open); a failed read or a non-finite value is retried once and then
// refused naming file and tensor, and the trainer refuses to start on every rank.
// Thread-safety: LoadHfShare owns `shards` for the call; it starts its own reading threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/hf_weights.h"
#include "models/partition.h"
#include "runtime/train/param_state.h"

namespace tessera {

// What one rank's load did.
struct HfLoadReport {
  int64_t elements = 0;         // parameter elements filled (a low-precision run fills its
                                //   weights and its fp32 master copy)
  int64_t share = 0;            // elements of the global model this rank holds (tp/pp/ep)
  int64_t model = 0;            // elements of the global model
  int64_t bytes_read = 0;       // from the files, retries included
  int64_t buffer_bytes = 0;     // the reading threads' buffers together (their bound)
  int64_t peak_rss_growth = -1; // bytes above the resident size at the start; -1: unmeasurable
  double seconds = 0;
  int files = 0;
  int threads = 0;
  std::vector<std::vector<float>> routing_bias;  // the file's MoE routing bias (may be empty)
};

// Fills `shards` from the HF checkpoint at `path` (a file, an index or a model directory) with
// the values of `partition`'s elements, on `threads` reading threads. `fault` is the test seam
// of HfWeightSource.
Result<HfLoadReport> LoadHfShare(const std::string& path, const ModelPartition& partition,
                                 ParamState& shards, int threads, HfReadFault fault = {});

// "read 12.0 MiB from 3 files in 0.21 s on 2 threads for this rank's 3,145,728 of the model's
// 12,582,912 parameters; peak memory +13.1 MiB (read buffers at most 8.0 MiB)".
std::string DescribeHfLoad(const HfLoadReport& r);

}  // namespace tessera
