// runtime/train/data/unicode_tables.h — the Unicode properties the byte-level BPE pre-tokenizers
// ask about: \p{L} (general category L*), \p{N} (N*) and \s (White_Space). The L and N ranges
// are generated (unicode_tables.cc, tools/dev/gen_unicode_tables.py); White_Space is the short
// list of PropList.txt, written here.
// Thread-safety: pure functions.
#pragma once

namespace tessera {

bool IsUnicodeLetter(char32_t c);
bool IsUnicodeNumber(char32_t c);
// Whether a text holding `c` may differ from its NFC form (Unicode's quick check: combining
// marks, characters not NFC alone, composing jamo). A text with none of them is NFC.
bool MayChangeUnderNfc(char32_t c);
const char* UnicodeTablesVersion();  // "14.0.0"

inline bool IsUnicodeWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace tessera
