// runtime/train/data/bpe_tokenizer.cc — byte-level BPE (bpe_tokenizer.h).
#include "runtime/train/data/bpe_tokenizer.h"

#include <algorithm>
#include <climits>
#include <mutex>
#include <unordered_map>

#include "runtime/train/data/nfc.h"
#include "runtime/train/data/pretokenize.h"

namespace tessera {
namespace {

// How far a vocabulary's largest id may pass its number of tokens (holes in the id space).
constexpr int64_t kMaxIdGap = 1 << 16;

// GPT-2's byte alphabet: printable bytes stand for themselves, the others for U+0100 onwards.
std::vector<char32_t> ByteToChar() {
  std::vector<char32_t> map(256, 0);
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) map[b] = printable[b] ? static_cast<char32_t>(b) : next++;
  return map;
}

std::string Utf8(char32_t c) {
  std::string s;
  AppendUtf8(c, s);
  return s;
}

struct AddedToken {
  std::string content;
  int32_t id;
};

class BpeTokenizer final : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    size_t begin = 0;  // of the ordinary text before the next added token
    for (size_t i = 0; i < text.size();) {
      const AddedToken* t = AddedAt(text, i);
      if (t == nullptr) {
        ++i;
        continue;
      }
      RETURN_IF_ERROR(EncodeOrdinary(text.substr(begin, i - begin), ids));
      ids.push_back(t->id);
      i += t->content.size();
      begin = i;
    }
    RETURN_IF_ERROR(EncodeOrdinary(text.substr(begin), ids));
    return ids;
  }

  std::string Decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= token_of_.size()) continue;
      const std::string& t = token_of_[static_cast<size_t>(id)];
      if (added_ids_.count(id) != 0) {
        out += t;
        continue;
      }
      for (size_t i = 0; i < t.size();) {  // mapped chars back to bytes
        const unsigned char c = static_cast<unsigned char>(t[i]);
        const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : 3;
        char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : (c & 0x0F);
        for (size_t k = 1; k < n && i + k < t.size(); ++k) cp = (cp << 6) | (t[i + k] & 0x3F);
        auto it = char_to_byte_.find(cp);
        if (it != char_to_byte_.end()) out += static_cast<char>(it->second);
        i += n;
      }
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(token_of_.size()); }
  std::optional<int32_t> eos() const override { return eos_; }
  std::string Describe() const override {
    return "byte-level BPE (tokenizer.json, " + std::string(PatternName(pattern_)) +
           " pre-tokenizer, " + std::to_string(vocab_.size()) + " tokens, " +
           std::to_string(ranks_.size()) + " merges, " + std::to_string(added_.size()) +
           " added tokens" + (nfc_ ? ", NFC" : "") + ")";
  }

  Status Load(const JsonValue& j, const std::string& eos_token, const std::string& where);

 private:
  static std::string PairKey(const std::string& a, const std::string& b) { return a + '\x01' + b; }

  // The added token that starts at text[i] (the longest), or null.
  const AddedToken* AddedAt(std::string_view text, size_t i) const {
    for (const AddedToken& t : added_) {  // longest first
      if (text.compare(i, t.content.size(), t.content) == 0) return &t;
    }
    return nullptr;
  }

  // The text between added tokens: normalised (NFC, when the tokenizer asks for it: added
  // tokens are matched on the raw text first, as transformers' tokenizers do), pre-tokenized,
  // each piece mapped to the byte alphabet and merged.
  Status EncodeOrdinary(std::string_view raw, std::vector<int32_t>& ids) const {
    const std::string normalized = nfc_ ? NfcNormalize(raw) : std::string();
    const std::string_view text = nfc_ ? std::string_view(normalized) : raw;
    for (std::string_view piece : PreTokenize(text, pattern_)) {
      std::string mapped;
      for (unsigned char b : piece) mapped += byte_char_[b];
      RETURN_IF_ERROR(EncodeWord(mapped, ids));
    }
    return Status::Ok();
  }

  Status EncodeWord(const std::string& word, std::vector<int32_t>& ids) const {
    if (ignore_merges_) {
      if (auto it = vocab_.find(word); it != vocab_.end()) {
        ids.push_back(it->second);
        return Status::Ok();
      }
    }
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      if (auto it = cache_.find(word); it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return Status::Ok();
      }
    }
    // Symbols: one mapped character each (1 to 2 UTF-8 bytes).
    std::vector<std::string> sym;
    for (size_t i = 0; i < word.size();) {
      const size_t n = static_cast<unsigned char>(word[i]) < 0x80 ? 1 : 2;
      sym.push_back(word.substr(i, n));
      i += n;
    }
    while (sym.size() > 1) {
      int best = INT_MAX;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = ranks_.find(PairKey(sym[i], sym[i + 1]));
        if (it != ranks_.end()) best = std::min(best, it->second);
      }
      if (best == INT_MAX) break;
      std::vector<std::string> merged;  // every occurrence of the best pair, left to right
      for (size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size()) {
          auto it = ranks_.find(PairKey(sym[i], sym[i + 1]));
          if (it != ranks_.end() && it->second == best) {
            merged.push_back(sym[i] + sym[i + 1]);
            ++i;
            continue;
          }
        }
        merged.push_back(sym[i]);
      }
      sym.swap(merged);
    }
    std::vector<int32_t> out;
    for (const std::string& s : sym) {
      auto it = vocab_.find(s);
      if (it == vocab_.end()) {
        return DataLoss("the vocabulary lacks '" + s + "', a symbol its merges produce (a "
                        "damaged tokenizer.json)");
      }
      out.push_back(it->second);
    }
    ids.insert(ids.end(), out.begin(), out.end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() < (1u << 20)) cache_.emplace(word, std::move(out));
    return Status::Ok();
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int> ranks_;
  std::vector<std::string> token_of_;           // id -> token (mapped chars; added: raw text)
  std::vector<AddedToken> added_;               // longest first
  std::unordered_map<int32_t, bool> added_ids_;
  std::vector<std::string> byte_char_;          // byte -> its mapped char, UTF-8
  std::unordered_map<char32_t, unsigned char> char_to_byte_;
  PreTokenizerPattern pattern_ = PreTokenizerPattern::kGpt2;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  std::optional<int32_t> eos_;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

const JsonValue* Child(const JsonValue& j, const char* key) {
  const JsonValue* v = j.is_object() ? j.Find(key) : nullptr;
  return v != nullptr && !v->is_null() ? v : nullptr;
}

std::string Type(const JsonValue* j) {
  const JsonValue* t = j != nullptr ? Child(*j, "type") : nullptr;
  return t != nullptr && t->is_string() ? t->as_string() : "";
}

bool Flag(const JsonValue& j, const char* key) {
  const JsonValue* v = Child(j, key);
  return v != nullptr && v->is_bool() && v->as_bool();
}

// The pattern of the pre_tokenizer: ByteLevel(use_regex) or Sequence[Split(Regex), ByteLevel].
Result<PreTokenizerPattern> ReadPreTokenizer(const JsonValue* p, const std::string& where) {
  const std::string type = Type(p);
  if (type == "ByteLevel") {
    if (Flag(*p, "add_prefix_space")) {
      return InvalidArgument(where + ": pre_tokenizer ByteLevel with add_prefix_space=true: Tessera "
                             "reads byte-level tokenizers that leave the text as written (GPT-2, "
                             "Llama 3, Qwen2); refused rather than encoded without the prefix space");
    }
    const JsonValue* regex = Child(*p, "use_regex");
    if (regex != nullptr && regex->is_bool() && !regex->as_bool()) {
      return InvalidArgument(where + ": a ByteLevel pre_tokenizer without a regex split");
    }
    return PreTokenizerPattern::kGpt2;
  }
  const JsonValue* list = type == "Sequence" ? Child(*p, "pretokenizers") : nullptr;
  if (list != nullptr && list->is_array() && list->items().size() == 2 &&
      Type(&list->items()[0]) == "Split" && Type(&list->items()[1]) == "ByteLevel") {
    const JsonValue& split = list->items()[0];
    const JsonValue* pattern = Child(split, "pattern");
    const JsonValue* regex = pattern != nullptr ? Child(*pattern, "Regex") : nullptr;
    const JsonValue* behavior = Child(split, "behavior");
    if (regex == nullptr || !regex->is_string() || Flag(split, "invert") ||
        behavior == nullptr || !behavior->is_string() || behavior->as_string() != "Isolated") {
      return InvalidArgument(where + ": pre_tokenizer Split: only an Isolated, non-inverted "
                             "Regex split is implemented");
    }
    if (auto known = RecognizePattern(regex->as_string())) return *known;
    return InvalidArgument(where + ": pre_tokenizer regex " + JsonQuote(regex->as_string()) +
                           " is not one Tessera implements (GPT-2's, Llama 3's, Qwen2's)");
  }
  return InvalidArgument(where + ": pre_tokenizer '" + (type.empty() ? "none" : type) +
                         "' is not byte-level (Metaspace / SentencePiece-style tokenizers: use "
                         "their tokenizer.model)");
}

Status BpeTokenizer::Load(const JsonValue& j, const std::string& eos_token,
                          const std::string& where) {
  const JsonValue* model = Child(j, "model");
  if (Type(model) != "BPE") {
    return InvalidArgument(where + ": model.type '" + Type(model) + "': Tessera reads BPE tokenizers");
  }
  if (Flag(*model, "byte_fallback")) {
    return InvalidArgument(where + ": model.byte_fallback (SentencePiece-style BPE) is not "
                           "implemented: use the model's tokenizer.model");
  }
  if (const JsonValue* d = Child(*model, "dropout"); d != nullptr && d->is_number() && d->as_double() > 0) {
    return InvalidArgument(where + ": model.dropout is a training-time option Tessera does not apply");
  }
  const std::string norm = Type(Child(j, "normalizer"));
  if (!norm.empty() && norm != "NFC") {
    return InvalidArgument(where + ": normalizer '" + norm + "': Tessera's byte-level BPE takes "
                           "none, or NFC on text NFC leaves unchanged; refused rather than "
                           "encoding text the normalizer would change");
  }
  nfc_ = norm == "NFC";
  ASSIGN_OR_RETURN(pattern_, ReadPreTokenizer(Child(j, "pre_tokenizer"), where));
  ignore_merges_ = Flag(*model, "ignore_merges");
  const JsonValue* vocab = Child(*model, "vocab");
  const JsonValue* merges = Child(*model, "merges");
  if (vocab == nullptr || !vocab->is_object() || merges == nullptr || !merges->is_array()) {
    return DataLoss(where + ": model.vocab (an object) and model.merges (a list) are required");
  }
  int64_t size = 0;
  auto take_id = [&](const JsonValue& v, const std::string& token) -> Result<int32_t> {
    if (!v.is_integer() || v.as_int() < 0 || v.as_int() >= (int64_t{1} << 30)) {
      return DataLoss(where + ": the id of " + JsonQuote(token) + " is not a non-negative integer");
    }
    size = std::max(size, v.as_int() + 1);
    return static_cast<int32_t>(v.as_int());
  };
  for (const auto& [token, id] : vocab->members()) {
    ASSIGN_OR_RETURN(int32_t v, take_id(id, token));
    vocab_[token] = v;
  }
  int rank = 0;
  for (const JsonValue& m : merges->items()) {
    std::string a, b;
    if (m.is_string()) {
      const std::string& s = m.as_string();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) return DataLoss(where + ": merge " + JsonQuote(s) + " is not 'a b'");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.items().size() == 2 && m.items()[0].is_string() &&
               m.items()[1].is_string()) {
      a = m.items()[0].as_string();
      b = m.items()[1].as_string();
    } else {
      return DataLoss(where + ": merge " + std::to_string(rank) + " is neither 'a b' nor [a, b]");
    }
    ranks_.emplace(PairKey(a, b), rank++);
  }
  if (const JsonValue* added = Child(j, "added_tokens"); added != nullptr && added->is_array()) {
    for (const JsonValue& t : added->items()) {
      const JsonValue* content = Child(t, "content");
      const JsonValue* id = Child(t, "id");
      if (content == nullptr || !content->is_string() || id == nullptr || content->as_string().empty()) {
        return DataLoss(where + ": an added_tokens entry without content and id");
      }
      if (Flag(t, "lstrip") || Flag(t, "rstrip") || Flag(t, "single_word")) {
        return InvalidArgument(where + ": added token " + JsonQuote(content->as_string()) +
                               " with lstrip / rstrip / single_word: Tessera matches added tokens "
                               "exactly as written; refused rather than encoded without the "
                               "stripping");
      }
      ASSIGN_OR_RETURN(int32_t v, take_id(*id, content->as_string()));
      added_.push_back({content->as_string(), v});
      added_ids_[v] = true;
    }
  }
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& x, const AddedToken& y) {
    return x.content.size() > y.content.size();
  });
  // Ids index a table: a sparse id space (a hostile or damaged file giving one token id 10^9)
  // would allocate for every id up to it. Real vocabularies are dense.
  const int64_t entries = static_cast<int64_t>(vocab_.size() + added_.size());
  if (size > entries + kMaxIdGap) {
    return DataLoss(where + ": ids reach " + std::to_string(size - 1) + " for " +
                    std::to_string(entries) + " tokens (a vocabulary's ids are dense)");
  }
  // One id, one token: else decoding (and the shards' meaning) would depend on which won.
  token_of_.assign(static_cast<size_t>(size), std::string());
  std::vector<bool> taken(static_cast<size_t>(size), false);
  auto claim = [&](int32_t id, const std::string& token) -> Status {
    std::string& slot = token_of_[static_cast<size_t>(id)];
    if (taken[static_cast<size_t>(id)] && slot != token) {
      return DataLoss(where + ": id " + std::to_string(id) + " is both " + JsonQuote(slot) +
                      " and " + JsonQuote(token));
    }
    taken[static_cast<size_t>(id)] = true;
    slot = token;
    return Status::Ok();
  };
  for (const auto& [token, id] : vocab_) RETURN_IF_ERROR(claim(id, token));
  for (const AddedToken& t : added_) RETURN_IF_ERROR(claim(t.id, t.content));
  const std::vector<char32_t> map = ByteToChar();
  for (int b = 0; b < 256; ++b) {
    byte_char_.push_back(Utf8(map[b]));
    char_to_byte_[map[b]] = static_cast<unsigned char>(b);
    if (vocab_.count(byte_char_.back()) == 0) {
      return DataLoss(where + ": the vocabulary lacks the byte-level symbol of byte " +
                      std::to_string(b) + " (not a byte-level BPE vocabulary)");
    }
  }
  for (const std::string& name : {eos_token, std::string("<|endoftext|>")}) {
    if (name.empty() || eos_) continue;
    for (const AddedToken& t : added_) {
      if (t.content == name) eos_ = t.id;
    }
    if (auto it = vocab_.find(name); !eos_ && it != vocab_.end()) eos_ = it->second;
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(const JsonValue& json, const std::string& eos_token,
                                                    const std::string& where) {
  auto t = std::make_unique<BpeTokenizer>();
  RETURN_IF_ERROR(t->Load(json, eos_token, where));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace tessera
