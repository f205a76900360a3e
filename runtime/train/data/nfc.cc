// runtime/train/data/nfc.cc — NFC (nfc.h), the algorithm of UAX #15 over unicode_tables.h.
#include "runtime/train/data/nfc.h"

#include <algorithm>
#include <vector>

#include "runtime/train/data/pretokenize.h"
#include "runtime/train/data/unicode_tables.h"

namespace tessera {
namespace {

// Hangul syllables are L V [T] jamo by arithmetic (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;
// A byte that is not UTF-8 rides along as a code point past Unicode: class 0, composes with
// nothing, written back as the byte.
constexpr char32_t kRawByte = 0x110000;

struct Mark {
  char32_t cp;
  int ccc;
};

void Decompose(char32_t c, std::vector<Mark>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back({kLBase + s / kNCount, 0});
    out.push_back({kVBase + (s % kNCount) / kTCount, 0});
    if (s % kTCount != 0) out.push_back({kTBase + s % kTCount, 0});
    return;
  }
  const std::span<const char32_t> d = CanonicalDecomposition(c);
  if (d.empty()) {
    out.push_back({c, c >= kRawByte ? 0 : CanonicalCombiningClass(c)});
    return;
  }
  for (char32_t x : d) out.push_back({x, CanonicalCombiningClass(x)});
}

// The composite of a starter and what follows it, or 0.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  return a >= kRawByte || b >= kRawByte ? 0 : ComposePair(a, b);
}

}  // namespace

std::string NfcNormalize(std::string_view text) {
  bool stable = true;
  for (size_t i = 0, len = 1; i < text.size() && stable; i += len) {
    const char32_t cp = DecodeUtf8(text, i, &len);
    stable = cp == kInvalidUtf8 || !MayChangeUnderNfc(cp);
  }
  if (stable) return std::string(text);
  // Canonical decomposition.
  std::vector<Mark> d;
  d.reserve(text.size());
  for (size_t i = 0, len = 1; i < text.size(); i += len) {
    const char32_t cp = DecodeUtf8(text, i, &len);
    Decompose(cp == kInvalidUtf8 ? kRawByte + static_cast<unsigned char>(text[i]) : cp, d);
  }
  // Canonical ordering: each run of combining marks sorted by class, stably.
  for (size_t i = 0; i < d.size();) {
    if (d[i].ccc == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && d[j].ccc != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [](const Mark& a, const Mark& b) { return a.ccc < b.ccc; });
    i = j;
  }
  // Canonical composition: a mark joins the last starter unless a mark of the same or a higher
  // class (or a starter) stands between them.
  std::vector<Mark> c;
  c.reserve(d.size());
  size_t starter = SIZE_MAX;
  for (const Mark& m : d) {
    if (starter != SIZE_MAX) {
      const bool adjacent = c.size() - 1 == starter;
      const bool blocked = !adjacent && (c.back().ccc == 0 || c.back().ccc >= m.ccc);
      if (!blocked) {
        if (const char32_t composite = Compose(c[starter].cp, m.cp); composite != 0) {
          c[starter].cp = composite;
          continue;
        }
      }
    }
    if (m.ccc == 0) starter = c.size();
    c.push_back(m);
  }
  std::string out;
  out.reserve(text.size());
  for (const Mark& m : c) {
    if (m.cp >= kRawByte) {
      out += static_cast<char>(m.cp - kRawByte);
    } else {
      AppendUtf8(m.cp, out);
    }
  }
  return out;
}

}  // namespace tessera
