// runtime/train/pipeline_schedule.h — the order in which a pipeline stage runs the forward and
// backward passes of its micro-batches (GPipe, 1F1B, interleaved 1F1B), and a simulator that
// measures a schedule's bubble under given per-pass times.
//
// Terms: p stages (ranks along pp), m micro-batches per optimizer step, v model chunks per
// rank (interleaved only; otherwise 1). With v chunks the model's layers form p * v virtual
// stages; virtual stage s = chunk * p + stage lives on rank `stage` as its chunk `chunk`
// (Megatron's interleaving: rank 0 holds virtual stages 0, p, 2p, ...). A forward of micro k
// on virtual stage s needs the forward of k on s - 1; a backward of k on s needs the backward
// of k on s + 1 (the last virtual stage's backward needs only its own forward).
//   gpipe        all m forwards, then all m backwards, both in micro order 0 .. m-1.
//                Holds m micro-batches' activations.
//   1f1b         warm-up of min(p - stage - 1, m) forwards, then alternate one forward / one
//                backward, then the remaining backwards (PipeDream-Flush). Holds at most
//                p - stage micro-batches' activations.
//   interleaved  Megatron's interleaved 1F1B over v chunks; needs m % p == 0 and v >= 2.
// Every schedule runs each (micro, chunk) forward exactly once and its backward exactly once,
// after the forward, and is deadlock-free when every rank runs its list in order with
// blocking receives of each pass's input activation (forward) and activation gradient
// (backward); sends never block (buffered, or posted together with the matching receive as
// Megatron's send_forward_recv_backward does) — SimulatePipeline checks exactly that.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

enum class PipelineSchedule : uint8_t { kGpipe, k1F1B, kInterleaved };
const char* PipelineScheduleName(PipelineSchedule s);  // "gpipe" | "1f1b" | "interleaved"

struct PipeOp {
  enum class Kind : uint8_t { kForward, kBackward };
  Kind kind = Kind::kForward;
  int micro = 0;  // 0 .. m-1
  int chunk = 0;  // 0 .. v-1 (this rank's model chunk)
  bool operator==(const PipeOp&) const = default;
};

// InvalidArgument with the numbers and the fix when the combination cannot run:
// p < 1, m < 1, v < 1; v > 1 with a schedule other than interleaved; interleaved with v < 2
// or m % p != 0; 1f1b or interleaved with m < p (too few micro-batches to fill the pipeline:
// use train.grad_accum_steps >= pp, or gpipe).
Status CheckPipelineSchedule(PipelineSchedule s, int p, int m, int v);

// The ordered passes of rank `stage` (0 .. p-1). Requires CheckPipelineSchedule OK.
std::vector<PipeOp> BuildPipelineSchedule(PipelineSchedule s, int p, int m, int v, int stage);

// Most micro-batches whose activations one rank holds at once under the schedule (all chunks
// together), i.e. how many activation sets a stage must be able to keep.
int MaxInFlight(PipelineSchedule s, int p, int m, int v, int stage);

struct PipeSimulation {
  bool deadlock = false;     // some rank waits forever (a schedule bug)
  std::string problem;       // what is wrong, when deadlock or a dependency is violated
  double makespan = 0;       // time from the first pass to the last, all ranks
  double busy_per_rank = 0;  // m * v * (forward_time + backward_time)
  // 1 - busy_per_rank / makespan: the share of a rank's time spent idle in the bubble.
  double bubble_fraction = 0;
};

// Runs the p schedules against each other with passes of forward_time / backward_time per
// chunk (a chunk of an interleaved schedule takes 1/v of a stage's time: pass the per-chunk
// times) and zero communication cost, each rank executing its list in order and waiting for
// its inputs. Checks every dependency in the file comment.
PipeSimulation SimulatePipeline(PipelineSchedule s, int p, int m, int v, double forward_time,
                                double backward_time);

// The same simulation over explicit per-rank lists (lists[r] is rank r's order), so that a
// hand-written or altered schedule can be checked: reports in `problem` a pass that is
// missing, repeated, out of range, or a backward before its forward on that rank (without
// simulating), else simulates and reports deadlock naming the stuck ranks and passes.
// Requires p, m, v >= 1 and lists.size() == p.
PipeSimulation SimulatePipelineLists(const std::vector<std::vector<PipeOp>>& lists, int p,
                                     int m, int v, double forward_time, double backward_time);

// The textbook bubble fraction: (p - 1) / (m + p - 1); interleaved: (p - 1) / (v * m + p - 1).
double TheoreticalBubble(PipelineSchedule s, int p, int m, int v);

}  // namespace tessera
