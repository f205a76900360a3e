// runtime/train/checkpoint_interval.h — `checkpoint.interval: auto`: how often to save, from
// what a save costs and how often the job fails.
//
// Young's rule (1974; Daly 2006 gives it as the first-order optimum): with saves that cost C
// seconds of training each and failures every M seconds on average, saving every sqrt(2 C M)
// seconds minimises the expected time lost (to saves, plus to work redone after a failure).
// An asynchronous save costs training only its stall (the copy of the state and any wait),
// but the next save cannot start before the previous one is written, so the interval is never
// shorter than the write time W. In steps of S seconds: ceil(max(sqrt(2 C M), W) / S), at
// least 1.
//
// Owns: the rule (YoungDalySteps), its wording for the log, and the MTBF's source: the
// config's checkpoint.mtbf_s, else what `tessera launch` measured over this run's failures so
// far (CheckpointConfig::measured_mtbf_s, from the variable it hands each incarnation after a
// failure: rank_env.h kEnvMeasuredMtbf), else a day.
// The checkpointer measures C, W and S (the maximum over ranks, so every rank agrees) at each
// commit and schedules the next save; the first save comes after kFirstAutoSaveSteps steps.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

inline constexpr int64_t kFirstAutoSaveSteps = 10;   // a first save, to measure its cost
inline constexpr double kDefaultMtbfSeconds = 86400;  // nothing configured or measured: a day

struct AutoIntervalInputs {
  double cost_s = 0;   // training stall per save
  double write_s = 0;  // background write time per save
  double step_s = 0;   // seconds per optimizer step
  double mtbf_s = kDefaultMtbfSeconds;
};

// The interval in steps (>= 1).
int64_t YoungDalySteps(const AutoIntervalInputs& in);

// "every 37 steps: sqrt(2 x cost 12.0 ms x MTBF 86400 s) = 45.5 s (write 0.30 s), 1.23 s a step"
std::string DescribeAutoInterval(const AutoIntervalInputs& in, int64_t steps);

// The MTBF to use and where it came from ("configured", "measured by tessera launch over
// this run's failures", "default: none configured or measured yet").
struct Mtbf {
  double seconds = kDefaultMtbfSeconds;
  std::string source;
};
Mtbf ChooseMtbf(double configured_s, double measured_s);

// "86400 s", "1.6 s".
std::string FormatSeconds(double s);

}  // namespace tessera
