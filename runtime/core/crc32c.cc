// runtime/core/crc32c.cc — CRC-32C: slicing-by-8 tables, and the SSE4.2 instruction over three
// interleaved streams. Contract in crc32c.h.
//
// Why three streams: the crc32 instruction has a latency of 3 cycles but a throughput of one
// per cycle, so one dependent chain runs at a third of the possible speed. A block of 3 * L
// bytes is split into three runs of L bytes, each checksummed on its own chain (the 2nd and
// 3rd starting from 0), and the three results are joined with the linearity of CRC:
//   crc(A || B) = Shift_L(crc(A)) ^ crc_from_zero(B)
// on the raw register (before the final inversion), where Shift_L is "append L zero bytes",
// a linear map on 32 bits evaluated with four 256-entry tables (one per byte of the register).
// Everything little-endian (x86-64 only, like the rest of the project).
#include "runtime/core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tessera {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
    t[0][i] = c;
  }
  // t[k][i]: byte i followed by k zero bytes.
  for (int k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

inline uint64_t Load64(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// Raw register update (no inversions) over n bytes, slicing by 8.
uint32_t RawPortable(uint32_t c, const uint8_t* p, size_t n) {
  const auto& t = kTables;
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t w = Load64(p) ^ c;
    c = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
        t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^
        t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xffu];
  return c;
}

// Shift_L as four byte-indexed tables.
struct ShiftTables {
  std::array<std::array<uint32_t, 256>, 4> t{};

  explicit ShiftTables(size_t len_bytes) {
    // Shift_L is linear: its value on each of the 32 basis registers determines it. Appending
    // zero bytes to a register is exactly the raw update over zeros.
    static const uint8_t kZeros[1024] = {};
    uint32_t basis[32];
    for (int j = 0; j < 32; ++j) {
      uint32_t c = 1u << j;
      for (size_t left = len_bytes; left > 0;) {
        const size_t n = left < sizeof(kZeros) ? left : sizeof(kZeros);
        c = RawPortable(c, kZeros, n);
        left -= n;
      }
      basis[j] = c;
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if (b & (1u << j)) v ^= basis[8 * k + j];
        }
        t[k][b] = v;
      }
    }
  }

  uint32_t Apply(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
  }
};

// Stream lengths: a long block of 3 x 8 KiB stays in L1; short blocks pick up what is left
// of a segment cheaply. Below 3 x 256 bytes one chain is as fast as it gets.
constexpr size_t kLongBytes = 8192;
constexpr size_t kShortBytes = 256;

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint64_t ThreeStreams(uint64_t c0, const uint8_t*& p,
                                                         size_t& n, size_t len,
                                                         const ShiftTables& shift) {
  while (n >= 3 * len) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* const end = p + len;
    for (; p < end; p += 8) {
      c0 = _mm_crc32_u64(c0, Load64(p));
      c1 = _mm_crc32_u64(c1, Load64(p + len));
      c2 = _mm_crc32_u64(c2, Load64(p + 2 * len));
    }
    c0 = shift.Apply(static_cast<uint32_t>(c0)) ^ c1;
    c0 = shift.Apply(static_cast<uint32_t>(c0)) ^ c2;
    p += 2 * len;
    n -= 3 * len;
  }
  return c0;
}

__attribute__((target("sse4.2"))) uint32_t RawSse42(uint32_t crc, const uint8_t* p, size_t n) {
  static const ShiftTables* const long_shift = new ShiftTables(kLongBytes);
  static const ShiftTables* const short_shift = new ShiftTables(kShortBytes);
  uint64_t c = crc;
  // Aligned 8-byte loads are a little faster; at most 7 single bytes to get there.
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --n, ++p) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p);
  }
  c = ThreeStreams(c, p, n, kLongBytes, *long_shift);
  c = ThreeStreams(c, p, n, kShortBytes, *short_shift);
  for (; n >= 8; n -= 8, p += 8) c = _mm_crc32_u64(c, Load64(p));
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p);
  return static_cast<uint32_t>(c);
}
#endif

}  // namespace

bool Crc32cHardwareAvailable() {
#if defined(__x86_64__)
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
#else
  return false;
#endif
}

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  return ~RawPortable(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (Crc32cHardwareAvailable()) return ~RawSse42(~crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cPortable(data, n, crc);
}

}  // namespace tessera
