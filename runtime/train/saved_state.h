// runtime/train/saved_state.h — the trainer's state saved with a checkpoint (the manifest's
// "state" object), its JSON form, and the two checks a resume applies to it.
//
// A manifest is untrusted input (checkpoint/manifest.h), and so is the state inside it, even
// under a valid metadata checksum (a buggy writer, a deliberate edit). Two questions, asked
// of every candidate checkpoint before it is loaded:
//   ParseSavedState — is it a state any run could have saved? Every field present and of its
//     type, in range, no counter that would overflow, the step equal to the manifest's own,
//     the fp16 loss scale a positive power of two, the MoE bias rows finite and of one length.
//     No: kDataLoss — the checkpoint is damaged
//     (the resume sets it aside and falls back; `tessera ckpt verify` reports it).
//   CheckStateFitsRun — can THIS run continue from it? Its step within train.steps, its data
//     position inside this run's data, its loss scale within this run's bounds, an MoE bias
//     row for every MoE block of this run's model. No:
//     kOutOfRange with the reason — the checkpoint is healthy but not for this run: the
//     resume skips it (leaves it in place) and falls back. A different train.seed is a config
//     error (kInvalidArgument): the data order would differ from the run being resumed.
// Plain values and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/json.h"
#include "runtime/core/status.h"
#include "runtime/train/config.h"

namespace tessera {

// Bounds that keep every counter far from overflow while allowing any real run.
inline constexpr int64_t kMaxSavedEpoch = int64_t{1} << 40;
inline constexpr int64_t kMaxSavedCount = int64_t{1} << 53;  // exact in a double
inline constexpr size_t kMaxSavedLossWindow = 1 << 16;

struct SavedLossScale {
  double scale = 1.0;        // a power of two
  int64_t good_steps = 0;    // consecutive finite steps since the last change
  int64_t skipped = 0;       // overflowing steps skipped so far
};

struct SavedTrainerState {
  int64_t step = 0;          // optimizer steps completed (== the manifest's step)
  uint64_t seed = 0;         // train.seed of the run that saved it
  int64_t data_epoch = 0;    // the train loader's position (data_loader.h DataPosition)
  int64_t data_index = 0;
  int64_t adamw_step = 0;    // AdamW's bias-correction counter (updates applied)
  int64_t nonfinite_streak = 0;  // consecutive non-finite steps skipped (on_nonfinite: skip)
  std::optional<SavedLossScale> loss_scale;  // fp16 runs only
  std::vector<double> loss_window;  // loss-spike detection: the recent step losses, oldest first
  // The MoE blocks' routing bias (model.moe's aux-loss-free balancing, or a DeepSeek file's):
  // one row of num_experts per MoE block, in layer order (empty for a dense model).
  std::vector<std::vector<float>> moe_bias;
  // finetune.lora: the base the adapters were trained on (LoraBaseIdentity, checkpointer.h);
  // empty otherwise. A resume must start from the same base.
  std::string lora_base;
};

JsonValue SavedStateJson(const SavedTrainerState& s);

// The structural check (file comment). `manifest_step`: the manifest's step; `where` names the
// manifest in messages ("DIR/manifest.json: state.data_index: ...").
Result<SavedTrainerState> ParseSavedState(const JsonValue& state, int64_t manifest_step,
                                          const std::string& where);

// The fit check (file comment). `num_windows`: windows per epoch of this run's train data.
Status CheckStateFitsRun(const SavedTrainerState& s, const Config& config, int64_t num_windows,
                         const std::string& where);

}  // namespace tessera
