// optimizer/optimizer_config.h — AdamW and learning-rate schedule settings, as typed config.
// Filled and validated by runtime/train/config.cc from `optimizer:` and `schedule:`. Plain data.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

// Where the optimizer state lives and the AdamW step runs (optimizer.offload).
//  kNone  with the parameters (on this CPU-only build: host memory, one fused pass).
//  kCpu   in host memory, stepped by the host in fixed chunks (optimizer/offload.h) — the unit
//         that would overlap with device work once a GPU backend exists. On a CPU-only build
//         there is no device to offload from: the state is in host memory either way and the
//         results are bit-identical to kNone.
//  kNvme  on local disk: the rank's moments (and fp32 master weights) in a file under
//         optimizer.offload_dir, streamed through a pool of optimizer.offload_buffer_mb
//         (optimizer/offload_file.h); same bits as kNone.
enum class OptimizerOffload { kNone, kCpu, kNvme };

struct AdamWConfig {
  float lr = 1e-3f;            // optimizer.lr: peak learning rate, > 0
  float beta1 = 0.9f;          // optimizer.beta1: first-moment decay, [0, 1)
  float beta2 = 0.95f;         // optimizer.beta2: second-moment decay, [0, 1)
  float eps = 1e-8f;           // optimizer.eps: denominator guard, > 0
  float weight_decay = 0.1f;   // optimizer.weight_decay: decoupled decay per step (x lr), >= 0
  bool decay_norms = false;    // optimizer.decay_norms: apply weight decay to norm weights
  bool decay_biases = false;   // optimizer.decay_biases: apply weight decay to biases
  bool decay_embeddings = false;  // optimizer.decay_embeddings: ... to embedding tables
  float grad_clip = 1.0f;      // optimizer.grad_clip: max global L2 grad norm; 0 = off
  OptimizerOffload offload = OptimizerOffload::kNone;  // optimizer.offload: none | cpu | nvme
  std::string offload_dir;     // optimizer.offload_dir: nvme only, required there: an existing,
                               //   writable local directory outside checkpoint.dir; each rank
                               //   writes its own file(s) in it
  int64_t offload_buffer_mb = 64;  // optimizer.offload_buffer_mb: nvme: each rank's buffer
                                   //   pool (MiB), [1, 65536]: its resident optimizer memory
                                   //   (under expert parallelism halved between the dense
                                   //   and the expert state's files)
};

enum class LrDecay { kCosine, kLinear, kConstant };

struct LrScheduleConfig {
  int64_t warmup_steps = 0;    // schedule.warmup_steps: linear ramp 0 -> lr over these steps, >= 0
  LrDecay decay = LrDecay::kCosine;  // schedule.decay: cosine | linear | constant
  float min_lr_ratio = 0.1f;   // schedule.min_lr_ratio: floor as a fraction of lr, [0, 1]
  int64_t decay_steps = 0;     // schedule.decay_steps: step where the floor is reached;
                               //   0 = the run's total steps
};

const char* LrDecayName(LrDecay d);
const char* OptimizerOffloadName(OptimizerOffload o);  // "none" | "cpu" | "nvme"

}  // namespace tessera
