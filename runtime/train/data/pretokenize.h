// runtime/train/data/pretokenize.h — the regex pre-tokenizers of byte-level BPE tokenizers,
// written as matchers (no regex engine): tokenizer.json names its pattern, and the three
// patterns released byte-level BPE models use are recognised by their exact text:
//   kGpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//            (GPT-2, RoBERTa, GPT-J/NeoX, ...: ByteLevel with use_regex)
//   kLlama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+          (Llama 3.x)
//   kQwen2   the same with \p{N} one digit at a time                   (Qwen2, Qwen2.5, Qwen3)
// Each alternative is tried in order at the current position, greedily, as the leftmost-first
// regex engines (Oniguruma in HF tokenizers, Python's regex) do; \s is Unicode White_Space.
// Text that is not valid UTF-8 is taken one byte at a time, such a byte being neither a
// letter, a number nor a space (HF tokenizers only accepts valid UTF-8).
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

enum class PreTokenizerPattern { kGpt2, kLlama3, kQwen2 };

// The pattern whose regex text is `regex`, or nullopt.
std::optional<PreTokenizerPattern> RecognizePattern(std::string_view regex);
const char* PatternName(PreTokenizerPattern p);  // "gpt2" "llama3" "qwen2"
// The regex text of each pattern (the one tokenizer.json writes).
std::string_view PatternRegex(PreTokenizerPattern p);

// The code point of the UTF-8 sequence at text[i] and its length in *len, or kInvalidUtf8
// with *len = 1 (a malformed, overlong or surrogate sequence, or a stray byte).
inline constexpr char32_t kInvalidUtf8 = 0xFFFFFFFF;
char32_t DecodeUtf8(std::string_view text, size_t i, size_t* len);
// Appends the UTF-8 bytes of code point `cp` (<= 0x10FFFF) to `out`.
void AppendUtf8(char32_t cp, std::string& out);

// `text` cut into pieces (views into it, in order, covering it exactly).
std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerPattern pattern);

}  // namespace tessera
