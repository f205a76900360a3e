// runtime/core/random.h — counter-based randomness: the same (seed, stream, counter) gives the
// same numbers on every machine, thread count and resume point.
//
// Nothing in Tessera keeps hidden generator state that a checkpoint would have to capture:
// a random draw is a pure function of its keys (seed, what it is for, index). Rng is a small
// convenience that walks a counter; its state is (key, counter) and can be recreated at any
// position. Thread-safety: values; give each thread its own Rng or key.
#pragma once

#include <cmath>
#include <cstdint>

namespace tessera {

// SplitMix64 finaliser: a strong 64-bit mixing function (bijective).
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A key for an independent stream, derived from a seed and up to three stream ids.
inline uint64_t StreamKey(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return Mix64(Mix64(Mix64(Mix64(seed) ^ a) ^ b) ^ c);
}

class Rng {
 public:
  explicit Rng(uint64_t key, uint64_t counter = 0) : key_(key), counter_(counter) {}
  uint64_t NextU64() { return Mix64(key_ ^ Mix64(counter_++)); }
  // Uniform in [0, 1) with 24 random bits (exact in float).
  float NextFloat() { return static_cast<float>(NextU64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform in [0, 1) with 53 random bits.
  double NextDouble() { return static_cast<double>(NextU64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply; bias below 2^-64 * n).
  uint64_t NextBelow(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(NextU64()) * n) >> 64);
  }
  // Standard normal (Box-Muller; uses two draws per value for simplicity and reproducibility).
  double NextNormal() {
    double u1 = (static_cast<double>(NextU64() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = NextDouble();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t counter() const { return counter_; }

 private:
  uint64_t key_;
  uint64_t counter_;
};

}  // namespace tessera
