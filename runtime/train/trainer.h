// runtime/train/trainer.h — the single-rank training loop: data -> model -> clip -> AdamW,
// with progress lines, a metrics file, evaluation and an end-of-run summary.
//
// Owns the model, optimizer, data loaders and the run's output directory:
//   <out_dir>/metrics.jsonl     one JSON object per step
//   <out_dir>/config.yaml       the effective config (after --set overrides)
//   <out_dir>/env.json          the environment fingerprint (tessera env)
//   <out_dir>/model.safetensors final weights, Hugging Face names
// Determinism: same config and seed => bit-identical weights (fixed-order kernels,
// counter-based randomness, explicit data position). Single-threaded driver.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "models/transformer.h"
#include "optimizer/adamw.h"
#include "runtime/core/memory.h"
#include "runtime/train/config.h"
#include "runtime/train/data/data_loader.h"
#include "runtime/train/metrics.h"

namespace tessera {

class Trainer {
 public:
  // Builds everything the config asks for: model (random init or init_from), optimizer,
  // train (and, when available, validation) loaders. Errors: bad init_from weights, missing
  // or malformed data files — as Status, before any step runs.
  static Result<std::unique_ptr<Trainer>> Create(const Config& config);

  // Trains config.train.steps steps, writing progress to `out` and files to out_dir.
  Result<TrainSummary> Run(FILE* out);

  // Mean loss over `batches` validation micro-batches from the start of the held-out split.
  // kNotFound if the run has no held-out data.
  Result<double> Evaluate(int64_t batches);

  Transformer& model() { return *model_; }
  const MemoryTracker& memory() const { return memory_; }

 private:
  Trainer(const Config& config) : config_(config) {}
  std::vector<ParamRange> DecayRanges() const;

  Config config_;
  MemoryTracker memory_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<DataLoader> train_data_;
  std::unique_ptr<DataLoader> val_data_;  // may be null
  std::vector<int32_t> inputs_, targets_;  // (B*T) token ids of the current micro-batch
  double peak_flops_ = 0;                  // measured sgemm FLOP/s, the MFU denominator
};

// Mean loss (nats/token) of `model` over `batches` micro-batches read from the start of
// `data` (it is Reset first, so every evaluation sees the same tokens). Forward only.
double EvaluateLoss(Transformer& model, DataLoader& data, int64_t batches);

// Builds the model for `config` at micro-batch shape (micro_batch_size, seq_len) and loads
// init_from (or `weights_override` when non-empty) if given, else random init from the seed.
Result<std::unique_ptr<Transformer>> BuildModel(const Config& config, MemoryTracker* memory,
                                                const std::string& weights_override = "");

}  // namespace tessera
