// runtime/train/data/nfc.h — Unicode Normalization Form C (UAX #15), as the NFC normalizer of a
// Hugging Face tokenizer.json applies it before pre-tokenizing: canonical decomposition
// (tabled, Hangul syllables by arithmetic), canonical ordering of combining marks, then
// canonical composition of each starter with the marks and jamo it is not blocked from.
// Bytes that are not valid UTF-8 pass through unchanged (each acts as a starter that composes
// with nothing). Data: unicode_tables.h (Unicode 14, as Python's unicodedata of Debian 12).
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

// NFC(text). Returns the text itself (copied) when no code point of it may change (the quick
// check), which is the common case.
std::string NfcNormalize(std::string_view text);

}  // namespace tessera
