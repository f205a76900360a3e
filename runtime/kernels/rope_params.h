// runtime/kernels/rope_params.h — the rotary embedding's frequencies as every backend's RoPE
// kernels take them (backend.h, cpu/ops.h): the base and a long-context scaling rule.
// Backend-neutral values; RopeInverseFrequencies computes them once, in double.
//
//   plain   inv_freq[i] = theta^(-2i/HS), i < HS/2
//   linear  inv_freq[i] / factor (positions stretched by `factor`)
//   llama3  Llama 3.1's rule (transformers' rope_type "llama3"): with L = original context,
//           wavelen = 2 pi / inv_freq; wavelengths shorter than L / high_freq_factor keep
//           their frequency, longer than L / low_freq_factor are divided by factor, and the
//           band between blends the two: s = (L / wavelen - low) / (high - low),
//           inv_freq * ((1 - s) / factor + s).
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;               // linear, llama3: > 0
  float low_freq_factor = 1.0f;      // llama3: > 0
  float high_freq_factor = 4.0f;     // llama3: > low_freq_factor
  int64_t original_max_position = 8192;  // llama3: the context the model was trained at, >= 1
};

struct RopeParams {
  float theta = 10000.0f;  // the base, > 0
  RopeScaling scaling;
};

// Plain RoPE with base `theta` (no scaling).
inline RopeParams PlainRope(float theta) {
  RopeParams p;
  p.theta = theta;
  return p;
}

// inv_freq[i] for i < HS/2 (HS even), each computed in double and rounded once to float.
std::vector<float> RopeInverseFrequencies(int64_t HS, const RopeParams& p);

const char* RopeScalingName(RopeScalingType t);  // "none" | "linear" | "llama3"

}  // namespace tessera
