// runtime/train/checkpoint_interval.cc — see checkpoint_interval.h.
#include "runtime/train/checkpoint_interval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessera {

int64_t YoungDalySteps(const AutoIntervalInputs& in) {
  const double period_s = std::max(std::sqrt(2.0 * std::max(0.0, in.cost_s) * in.mtbf_s),
                                   std::max(0.0, in.write_s));
  constexpr double kMaxSteps = 1e15;
  if (!(in.step_s > 0) || std::isnan(period_s)) return kFirstAutoSaveSteps;  // nothing measured
  const double steps = std::ceil(period_s / in.step_s);  // +inf for an infinite MTBF
  return steps >= kMaxSteps ? static_cast<int64_t>(kMaxSteps) : std::max<int64_t>(1, static_cast<int64_t>(steps));
}

std::string DescribeAutoInterval(const AutoIntervalInputs& in, int64_t steps) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "every %lld steps: sqrt(2 x cost %.1f ms x MTBF %s) = %.1f s (write %.2f s), "
                "%.3f s a step",
                static_cast<long long>(steps), 1e3 * in.cost_s, FormatSeconds(in.mtbf_s).c_str(),
                std::sqrt(2.0 * std::max(0.0, in.cost_s) * in.mtbf_s), in.write_s, in.step_s);
  return buf;
}

std::string FormatSeconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, s >= 100 ? "%.0f s" : "%.1f s", s);
  return buf;
}

Mtbf ChooseMtbf(double configured_s, double measured_s) {
  if (configured_s > 0) return {configured_s, "configured (checkpoint.mtbf_s)"};
  if (measured_s > 0 && std::isfinite(measured_s)) {
    return {measured_s, "measured by tessera launch over this run's failures"};
  }
  return {kDefaultMtbfSeconds, "default: none configured or measured yet"};
}

}  // namespace tessera
