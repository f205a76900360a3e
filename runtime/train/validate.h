// runtime/train/validate.h — `tessera validate`: one fixed input through a model, every
// layer's output recorded (Transformer::LayerOutputs) to a safetensors file, and compared,
// layer by layer, with the same file written by an independent implementation.
//
// The file: "input_ids" (I32, (B, T)) and one F32 tensor per layer output, (B, T, cols), named
// as LayerOutputs names them ("embeddings", "layers.{i}.attention", "layers.{i}.mlp",
// "final_norm", "logits"); metadata {"format": "pt", "producer": ...}. A reference writes the
// same names (tests/e2e/reference/hf_reference.py --layers) for the input_ids it reads here.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "models/transformer.h"
#include "runtime/core/status.h"

namespace tessera {

// B x T token ids in [0, vocab): a fixed function of `seed` (a 64-bit LCG), so two runs and
// two implementations see the same input.
std::vector<int32_t> FixedValidationInput(int64_t B, int64_t T, int64_t vocab, uint64_t seed);

// The input_ids of a layer file (its (B, T) shape into *B, *T). kDataLoss naming the file
// when it has none or they are not I32 (B, T) ids in [0, vocab).
Result<std::vector<int32_t>> ReadValidationInput(const std::string& path, int64_t vocab,
                                                 int64_t* B, int64_t* T);

Status WriteLayerFile(const std::string& path, const std::vector<int32_t>& input_ids, int64_t B,
                      int64_t T, const std::vector<Transformer::LayerOutput>& outputs,
                      const std::string& producer);

// One layer's comparison: rel = max |ours - theirs| / max |theirs| (the worst error measured
// against the layer's scale, so a layer of small values is not judged by absolute error).
struct LayerDiff {
  std::string name;
  bool compared = false;     // false: the reference has no such tensor (reported, not judged)
  double max_abs = 0, ref_max = 0, rel = 0;
  int64_t worst = 0;         // flat index of the worst element: row = worst / cols
  int64_t cols = 0;
  float ours = 0, theirs = 0;
  bool within = true;
};

// Compares `outputs` with the reference file at `path`, each layer against `tolerance`.
// kDataLoss naming the file and tensor for an unreadable file or a tensor of another shape;
// kInvalidArgument when no layer is in both.
Result<std::vector<LayerDiff>> CompareWithReference(
    const std::vector<Transformer::LayerOutput>& outputs, const std::string& path,
    double tolerance);

// The report: one line per layer, then the verdict ("all N layers within rel TOL" or
// "first divergence: NAME: max abs E (rel R) at batch b, position t, column c: tessera X vs
// reference Y"). T is the sequence length (rows are b * T + t).
std::string DescribeLayerDiffs(const std::vector<LayerDiff>& diffs, int64_t T, double tolerance);

}  // namespace tessera
