// runtime/kernels/cpu/rope_params.cc — RopeInverseFrequencies (rope_params.h). Host code every
// backend calls before it rotates (a device backend uploads the table).
#include "runtime/kernels/rope_params.h"

#include <cmath>

namespace tessera {

std::vector<float> RopeInverseFrequencies(int64_t HS, const RopeParams& p) {
  const int64_t half = HS / 2;
  const RopeScaling& s = p.scaling;
  std::vector<float> out(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(p.theta), static_cast<double>(2 * i) / HS);
    if (s.type == RopeScalingType::kLinear) {
      f /= s.factor;
    } else if (s.type == RopeScalingType::kLlama3) {
      const double L = static_cast<double>(s.original_max_position);
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > L / s.low_freq_factor) {
        f /= s.factor;  // low frequencies: stretched
      } else if (wavelen >= L / s.high_freq_factor) {  // the band between: blended
        const double t = (L / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - t) * f / s.factor + t * f;
      }
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

const char* RopeScalingName(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone: return "none";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kLlama3: return "llama3";
  }
  return "?";
}

}  // namespace tessera
