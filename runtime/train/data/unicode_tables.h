// runtime/train/data/unicode_tables.h — the Unicode properties the byte-level BPE pre-tokenizers
// ask about: \p{L} (general category L*), \p{N} (N*) and \s (White_Space), and the data of NFC
// normalisation. All but White_Space are generated (unicode_tables.cc,
// tools/dev/gen_unicode_tables.py); White_Space is the short list of PropList.txt, written here.
// Thread-safety: pure functions.
#pragma once

#include <span>

namespace tessera {

bool IsUnicodeLetter(char32_t c);
bool IsUnicodeNumber(char32_t c);
// Whether a text holding `c` may differ from its NFC form (Unicode's quick check: combining
// marks, characters not NFC alone, composing jamo). A text with none of them is NFC.
bool MayChangeUnderNfc(char32_t c);
const char* UnicodeTablesVersion();  // "14.0.0"
// NFC's data (nfc.h runs the algorithm): the canonical combining class (0 for starters); the
// full canonical decomposition (empty when the code point is its own; Hangul syllables are not
// tabled); the primary composite of a pair (0 when none; Hangul not tabled).
int CanonicalCombiningClass(char32_t c);
std::span<const char32_t> CanonicalDecomposition(char32_t c);
char32_t ComposePair(char32_t first, char32_t second);

inline bool IsUnicodeWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace tessera
