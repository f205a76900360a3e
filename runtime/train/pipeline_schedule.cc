// runtime/train/pipeline_schedule.cc — builds the per-rank pass orders of GPipe, 1F1B and
// interleaved 1F1B, and simulates p ranks running them (see pipeline_schedule.h for the
// contract). Pure functions of their arguments; thread-safe.
#include "runtime/train/pipeline_schedule.h"

#include <algorithm>
#include <limits>

#include "runtime/core/check.h"

namespace tessera {
namespace {

using Kind = PipeOp::Kind;

PipeOp Forward(int micro, int chunk) { return {Kind::kForward, micro, chunk}; }
PipeOp Backward(int micro, int chunk) { return {Kind::kBackward, micro, chunk}; }

std::string OpName(const PipeOp& op) {
  return std::string(op.kind == Kind::kForward ? "F" : "B") + " micro " +
         std::to_string(op.micro) + " chunk " + std::to_string(op.chunk);
}

// 1F1B: the later a stage, the sooner its first backward can run, so stage s warms up with
// just enough forwards (p - s - 1) to keep the stages after it busy until the first gradient
// comes back; from then on each backward frees the activations one forward takes.
std::vector<PipeOp> Build1F1B(int p, int m, int stage) {
  const int warmup = std::min(p - stage - 1, m);
  std::vector<PipeOp> ops;
  ops.reserve(2 * static_cast<size_t>(m));
  for (int k = 0; k < warmup; ++k) ops.push_back(Forward(k, 0));
  for (int k = 0; k < m - warmup; ++k) {
    ops.push_back(Forward(warmup + k, 0));
    ops.push_back(Backward(k, 0));
  }
  for (int k = m - warmup; k < m; ++k) ops.push_back(Backward(k, 0));
  return ops;
}

// Interleaved (Megatron): the k-th forward of a rank (k in 0 .. m*v-1) walks the micros in
// groups of p, each group through chunk 0, 1, .., v-1 in turn, so a group's p micros leave
// the rank's chunk c exactly when the group's first micro comes back round the ring for
// chunk c + 1. Backwards walk the same groups with the chunks reversed.
PipeOp InterleavedOp(Kind kind, int p, int v, int k) {
  const int group = k / (p * v);
  const int within = k % (p * v);
  const int micro = group * p + within % p;
  const int chunk = within / p;
  return {kind, micro, kind == Kind::kForward ? chunk : v - 1 - chunk};
}

int InterleavedWarmup(int p, int m, int v, int stage) {
  const int total = m * v;
  // With a single group every forward of chunk c + 1 depends on a micro the rank itself just
  // sent round the ring, so Megatron runs all forwards first.
  if (m == p) return total;
  return std::min((p - stage - 1) * 2 + (v - 1) * p, total);
}

std::vector<PipeOp> BuildInterleaved(int p, int m, int v, int stage) {
  const int total = m * v;
  const int warmup = InterleavedWarmup(p, m, v, stage);
  std::vector<PipeOp> ops;
  ops.reserve(2 * static_cast<size_t>(total));
  for (int k = 0; k < warmup; ++k) ops.push_back(InterleavedOp(Kind::kForward, p, v, k));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(InterleavedOp(Kind::kForward, p, v, warmup + k));
    ops.push_back(InterleavedOp(Kind::kBackward, p, v, k));
  }
  for (int k = total - warmup; k < total; ++k) {
    ops.push_back(InterleavedOp(Kind::kBackward, p, v, k));
  }
  return ops;
}

// Each rank's list must hold every (micro, chunk) forward and backward exactly once, the
// backward after the forward. Returns "" or what is wrong.
std::string CheckLists(const std::vector<std::vector<PipeOp>>& lists, int p, int m, int v) {
  for (int r = 0; r < p; ++r) {
    std::vector<char> seen_f(static_cast<size_t>(m) * v, 0), seen_b(seen_f.size(), 0);
    const std::vector<PipeOp>& ops = lists[r];
    for (size_t i = 0; i < ops.size(); ++i) {
      const PipeOp& op = ops[i];
      const std::string where = "rank " + std::to_string(r) + " pass " + std::to_string(i) +
                                " (" + OpName(op) + ")";
      if (op.micro < 0 || op.micro >= m || op.chunk < 0 || op.chunk >= v) {
        return where + ": micro or chunk out of range (m=" + std::to_string(m) +
               ", v=" + std::to_string(v) + ")";
      }
      const size_t id = static_cast<size_t>(op.micro) * v + op.chunk;
      if (op.kind == Kind::kForward) {
        if (seen_f[id]) return where + ": forward repeated";
        seen_f[id] = 1;
      } else {
        if (seen_b[id]) return where + ": backward repeated";
        if (!seen_f[id]) return where + ": backward before its forward";
        seen_b[id] = 1;
      }
    }
    for (int k = 0; k < m; ++k) {
      for (int c = 0; c < v; ++c) {
        const size_t id = static_cast<size_t>(k) * v + c;
        if (!seen_f[id] || !seen_b[id]) {
          return "rank " + std::to_string(r) + ": " + (seen_f[id] ? "B" : "F") + " micro " +
                 std::to_string(k) + " chunk " + std::to_string(c) + " missing";
        }
      }
    }
  }
  return "";
}

}  // namespace

const char* PipelineScheduleName(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGpipe: return "gpipe";
    case PipelineSchedule::k1F1B: return "1f1b";
    case PipelineSchedule::kInterleaved: return "interleaved";
  }
  return "?";
}

Status CheckPipelineSchedule(PipelineSchedule s, int p, int m, int v) {
  const std::string name = PipelineScheduleName(s);
  const std::string ps = std::to_string(p), ms = std::to_string(m), vs = std::to_string(v);
  if (p < 1) return InvalidArgument("parallel.pp=" + ps + ": must be >= 1");
  if (m < 1) {
    return InvalidArgument("train.grad_accum_steps=" + ms +
                           " (the micro-batches per step): must be >= 1");
  }
  if (v < 1) return InvalidArgument("parallel.virtual_stages=" + vs + ": must be >= 1");
  if (s != PipelineSchedule::kInterleaved && v > 1) {
    return InvalidArgument("parallel.virtual_stages=" + vs +
                           " needs parallel.pipeline_schedule=interleaved (got " + name +
                           "): set parallel.virtual_stages=1 or use interleaved");
  }
  if (s == PipelineSchedule::kInterleaved && v < 2) {
    return InvalidArgument("parallel.pipeline_schedule=interleaved needs "
                           "parallel.virtual_stages >= 2 (got " + vs +
                           "): set parallel.virtual_stages=2 or more, or use 1f1b");
  }
  if (s != PipelineSchedule::kGpipe && m < p) {
    return InvalidArgument(
        "parallel.pipeline_schedule=" + name + " with parallel.pp=" + ps +
        " needs train.grad_accum_steps (the micro-batch count m) >= pp to fill the pipeline, "
        "got " + ms + ": use train.grad_accum_steps >= " + ps +
        (s == PipelineSchedule::kInterleaved ? " (a multiple of pp)" : "") +
        ", or parallel.pipeline_schedule=gpipe");
  }
  if (s == PipelineSchedule::kInterleaved && m % p != 0) {
    const int lower = m / p * p, upper = lower + p;
    return InvalidArgument(
        "parallel.pipeline_schedule=interleaved needs train.grad_accum_steps (the micro-batch "
        "count m=" + ms + ") to be a multiple of parallel.pp=" + ps + ": use " +
        std::to_string(lower) + " or " + std::to_string(upper) + ", or 1f1b");
  }
  return Status::Ok();
}

std::vector<PipeOp> BuildPipelineSchedule(PipelineSchedule s, int p, int m, int v, int stage) {
  TESSERA_CHECK(CheckPipelineSchedule(s, p, m, v).ok());
  TESSERA_CHECK(stage >= 0 && stage < p);
  switch (s) {
    case PipelineSchedule::kGpipe: {
      std::vector<PipeOp> ops;
      ops.reserve(2 * static_cast<size_t>(m));
      for (int k = 0; k < m; ++k) ops.push_back(Forward(k, 0));
      for (int k = 0; k < m; ++k) ops.push_back(Backward(k, 0));
      return ops;
    }
    case PipelineSchedule::k1F1B: return Build1F1B(p, m, stage);
    case PipelineSchedule::kInterleaved: return BuildInterleaved(p, m, v, stage);
  }
  TESSERA_CHECK_MSG(false, "unknown pipeline schedule %d", static_cast<int>(s));
  return {};
}

int MaxInFlight(PipelineSchedule s, int p, int m, int v, int stage) {
  int held = 0, most = 0;
  for (const PipeOp& op : BuildPipelineSchedule(s, p, m, v, stage)) {
    held += op.kind == Kind::kForward ? 1 : -1;
    most = std::max(most, held);
  }
  return most;
}

PipeSimulation SimulatePipelineLists(const std::vector<std::vector<PipeOp>>& lists, int p,
                                     int m, int v, double forward_time, double backward_time) {
  TESSERA_CHECK(p >= 1 && m >= 1 && v >= 1);
  TESSERA_CHECK(lists.size() == static_cast<size_t>(p));
  PipeSimulation sim;
  sim.busy_per_rank = static_cast<double>(m) * v * (forward_time + backward_time);
  sim.problem = CheckLists(lists, p, m, v);
  if (!sim.problem.empty()) return sim;

  // finish[kind][virtual stage * m + micro]: when that pass ended; < 0 while it has not run.
  const int num_virtual = p * v;
  std::vector<double> finish[2];
  for (auto& f : finish) f.assign(static_cast<size_t>(num_virtual) * m, -1.0);
  auto slot = [m](int vstage, int micro) { return static_cast<size_t>(vstage) * m + micro; };

  // The pass whose result `op` on rank r waits for: (kind index, virtual stage), or
  // virtual stage -1 when it needs nothing from another rank.
  auto dependency = [&](const PipeOp& op, int r) {
    const int vstage = op.chunk * p + r;
    if (op.kind == Kind::kForward) return std::pair<int, int>(0, vstage - 1);
    if (vstage == num_virtual - 1) return std::pair<int, int>(0, vstage);  // its own forward
    return std::pair<int, int>(1, vstage + 1);
  };

  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  double first_start = std::numeric_limits<double>::infinity(), last_finish = 0;
  // Times depend only on each rank's order and the dependencies, not on the order in which
  // ranks are visited here, so advancing each rank as far as it can, round after round, gives
  // the same result as a global event queue.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < lists[r].size()) {
        const PipeOp& op = lists[r][next[r]];
        const auto [dep_kind, dep_vstage] = dependency(op, r);
        double ready = 0;
        if (dep_vstage >= 0) {
          ready = finish[dep_kind][slot(dep_vstage, op.micro)];
          if (ready < 0) break;  // blocked on the receive
        }
        const double start = std::max(free_at[r], ready);
        const double end =
            start + (op.kind == Kind::kForward ? forward_time : backward_time);
        finish[op.kind == Kind::kForward ? 0 : 1][slot(op.chunk * p + r, op.micro)] = end;
        free_at[r] = end;
        first_start = std::min(first_start, start);
        last_finish = std::max(last_finish, end);
        ++next[r];
        progress = true;
      }
    }
  }

  for (int r = 0; r < p; ++r) {
    if (next[r] == lists[r].size()) continue;
    const PipeOp& op = lists[r][next[r]];
    const auto [dep_kind, dep_vstage] = dependency(op, r);
    if (!sim.problem.empty()) sim.problem += "; ";
    sim.problem += "rank " + std::to_string(r) + " waits forever at pass " +
                   std::to_string(next[r]) + " (" + OpName(op) + ") for " +
                   (dep_kind == 0 ? "F" : "B") + " micro " + std::to_string(op.micro) +
                   " chunk " + std::to_string(dep_vstage / p) + " on rank " +
                   std::to_string(dep_vstage % p);
    sim.deadlock = true;
  }
  if (sim.deadlock) return sim;
  sim.makespan = last_finish - first_start;
  sim.bubble_fraction = sim.makespan > 0 ? 1.0 - sim.busy_per_rank / sim.makespan : 0.0;
  return sim;
}

PipeSimulation SimulatePipeline(PipelineSchedule s, int p, int m, int v, double forward_time,
                                double backward_time) {
  const Status st = CheckPipelineSchedule(s, p, m, v);
  if (!st.ok()) {
    PipeSimulation sim;
    sim.problem = st.message();
    return sim;
  }
  std::vector<std::vector<PipeOp>> lists;
  lists.reserve(p);
  for (int r = 0; r < p; ++r) lists.push_back(BuildPipelineSchedule(s, p, m, v, r));
  return SimulatePipelineLists(lists, p, m, v, forward_time, backward_time);
}

double TheoreticalBubble(PipelineSchedule s, int p, int m, int v) {
  const double vm = s == PipelineSchedule::kInterleaved ? static_cast<double>(v) * m : m;
  return (p - 1) / (vm + p - 1);
}

}  // namespace tessera
