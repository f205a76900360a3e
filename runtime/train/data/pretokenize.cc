// runtime/train/data/pretokenize.cc — the three pre-tokenizer patterns as matchers
// (pretokenize.h): each Match* function is one alternative of the regex, returning the end of
// its match at `i` or 0 (no match; every real match is non-empty).
#include "runtime/train/data/pretokenize.h"

#include <cstdint>

#include "runtime/train/data/unicode_tables.h"

namespace tessera {
namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum Kind : uint8_t { kLetter, kNumber, kSpace, kOther };

// The text as code points: kind, and byte offset of each (offsets has one more entry: the end).
struct Decoded {
  std::vector<char32_t> cp;
  std::vector<Kind> kind;
  std::vector<size_t> offset;
  size_t size() const { return cp.size(); }
};

Decoded Decode(std::string_view s) {
  Decoded d;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const char32_t cp = DecodeUtf8(s, i, &len);
    d.cp.push_back(cp);
    d.kind.push_back(cp == kInvalidUtf8     ? kOther
                     : IsUnicodeLetter(cp)  ? kLetter
                     : IsUnicodeNumber(cp)  ? kNumber
                     : IsUnicodeWhitespace(cp) ? kSpace
                                               : kOther);
    d.offset.push_back(i);
    i += len;
  }
  d.offset.push_back(s.size());
  return d;
}

class Matcher {
 public:
  Matcher(const Decoded& d, PreTokenizerPattern p) : d_(d), p_(p) {}

  // The end (in code points) of the token starting at i.
  size_t Next(size_t i) const {
    if (size_t e = Contraction(i)) return e;
    if (p_ == PreTokenizerPattern::kGpt2) {
      if (size_t e = SpaceThenRun(i, kLetter)) return e;
      if (size_t e = SpaceThenRun(i, kNumber)) return e;
      if (size_t e = SpaceThenOthers(i, false)) return e;
    } else {
      if (size_t e = PrefixThenLetters(i)) return e;
      if (size_t e = Digits(i, p_ == PreTokenizerPattern::kLlama3 ? 3 : 1)) return e;
      if (size_t e = SpaceThenOthers(i, true)) return e;
      if (size_t e = SpacesThenNewlines(i)) return e;
    }
    if (size_t e = SpacesNotBeforeText(i)) return e;
    return Run(i, kSpace) > i ? Run(i, kSpace) : i + 1;  // \s+, or (never) one code point
  }

 private:
  bool Is(size_t i, Kind k) const { return i < d_.size() && d_.kind[i] == k; }
  bool IsChar(size_t i, char32_t c) const { return i < d_.size() && d_.cp[i] == c; }
  bool IsNewline(size_t i) const { return IsChar(i, '\r') || IsChar(i, '\n'); }
  // The end of the run of kind k from i.
  size_t Run(size_t i, Kind k) const {
    while (Is(i, k)) ++i;
    return i;
  }
  // 's 't 're 've 'm 'll 'd; case-insensitive for the Llama-3 / Qwen2 patterns.
  size_t Contraction(size_t i) const {
    if (!IsChar(i, '\'')) return 0;
    const bool fold = p_ != PreTokenizerPattern::kGpt2;
    auto at = [&](size_t k, char c) {
      if (k >= d_.size()) return false;
      const char32_t x = d_.cp[k];
      return x == static_cast<char32_t>(c) ||
             (fold && x == static_cast<char32_t>(c - 'a' + 'A'));
    };
    for (const char* suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
      size_t k = i + 1;
      const char* c = suffix;
      while (*c != '\0' && at(k, *c)) ++k, ++c;
      if (*c == '\0') return k;
    }
    return 0;
  }
  // " ?X+" with X one kind (GPT-2's letters and numbers).
  size_t SpaceThenRun(size_t i, Kind k) const {
    const size_t j = IsChar(i, ' ') ? i + 1 : i;
    const size_t e = Run(j, k);
    return e > j ? e : 0;
  }
  // " ?[^\s\p{L}\p{N}]+", then "[\r\n]*" for the Llama-3 / Qwen2 patterns.
  size_t SpaceThenOthers(size_t i, bool newlines) const {
    const size_t j = IsChar(i, ' ') ? i + 1 : i;
    size_t e = Run(j, kOther);
    if (e == j) return 0;
    if (newlines) {
      while (IsNewline(e)) ++e;
    }
    return e;
  }
  // "[^\r\n\p{L}\p{N}]?\p{L}+": the optional character is taken when letters follow it.
  size_t PrefixThenLetters(size_t i) const {
    const bool prefix = i < d_.size() && !IsNewline(i) && !Is(i, kLetter) && !Is(i, kNumber);
    if (prefix) {
      const size_t e = Run(i + 1, kLetter);
      if (e > i + 1) return e;
    }
    const size_t e = Run(i, kLetter);
    return e > i ? e : 0;
  }
  size_t Digits(size_t i, size_t most) const {
    size_t e = i;
    while (e - i < most && Is(e, kNumber)) ++e;
    return e > i ? e : 0;
  }
  // "\s*[\r\n]+": up to the last newline of the whitespace run.
  size_t SpacesThenNewlines(size_t i) const {
    const size_t run = Run(i, kSpace);
    for (size_t e = run; e > i; --e) {
      if (IsNewline(e - 1)) return e;
    }
    return 0;
  }
  // "\s+(?!\S)": the whitespace run, less its last character when text follows it.
  size_t SpacesNotBeforeText(size_t i) const {
    const size_t run = Run(i, kSpace);
    if (run == i) return 0;
    if (run == d_.size()) return run;
    return run - 1 > i ? run - 1 : 0;
  }

  const Decoded& d_;
  PreTokenizerPattern p_;
};

}  // namespace

char32_t DecodeUtf8(std::string_view s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    *len = 1;
    return kInvalidUtf8;  // an invalid byte: kind kOther
  }
  char32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) {
      *len = 1;
      return kInvalidUtf8;
    }
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {  // overlong, surrogate
    *len = 1;
    return kInvalidUtf8;
  }
  *len = n;
  return cp;
}

void AppendUtf8(char32_t c, std::string& s) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::optional<PreTokenizerPattern> RecognizePattern(std::string_view regex) {
  for (PreTokenizerPattern p :
       {PreTokenizerPattern::kGpt2, PreTokenizerPattern::kLlama3, PreTokenizerPattern::kQwen2}) {
    if (regex == PatternRegex(p)) return p;
  }
  return std::nullopt;
}

const char* PatternName(PreTokenizerPattern p) {
  return p == PreTokenizerPattern::kGpt2 ? "gpt2" : p == PreTokenizerPattern::kLlama3 ? "llama3" : "qwen2";
}

std::string_view PatternRegex(PreTokenizerPattern p) {
  return p == PreTokenizerPattern::kGpt2 ? kGpt2Regex
         : p == PreTokenizerPattern::kLlama3 ? kLlama3Regex
                                             : kQwen2Regex;
}

std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerPattern pattern) {
  const Decoded d = Decode(text);
  const Matcher m(d, pattern);
  std::vector<std::string_view> out;
  for (size_t i = 0; i < d.size();) {
    const size_t e = m.Next(i);
    out.push_back(text.substr(d.offset[i], d.offset[e] - d.offset[i]));
    i = e;
  }
  return out;
}

}  // namespace tessera
