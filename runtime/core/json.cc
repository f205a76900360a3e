// runtime/core/json.cc — recursive-descent JSON parser with a depth bound, and the writer.
//
// Hostile input costs time linear in its size (up to a log factor): nesting is bounded, string
// escapes and numbers are scanned once, and duplicate keys are found through an ordered index
// once an object grows past a handful of members (a quadratic scan let a 430 KB manifest with
// 40k keys take seconds, and 2^20 keys hours). Find() stays a linear scan: callers look up a
// fixed set of names per object, so a big hostile object costs them one pass per name.
// Thread-safety: a Parser is local to one ParseJson call; nothing is shared.
#include "runtime/core/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace tessera {

const JsonValue* JsonValue::Find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

JsonValue JsonValue::Bool(bool b) { JsonValue v; v.type_ = Type::kBool; v.bool_ = b; return v; }
JsonValue JsonValue::Number(double d) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = d;  // int_ stays 0: as_int() is meaningful only when is_integer()
  return v;
}
JsonValue JsonValue::Integer(int64_t i) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.is_int_ = true;
  v.int_ = i;
  v.number_ = static_cast<double>(i);
  return v;
}
JsonValue JsonValue::String(std::string s) { JsonValue v; v.type_ = Type::kString; v.string_ = std::move(s); return v; }
JsonValue JsonValue::Array(std::vector<JsonValue> items) { JsonValue v; v.type_ = Type::kArray; v.array_ = std::move(items); return v; }
JsonValue JsonValue::Object(std::vector<std::pair<std::string, JsonValue>> members) {
  JsonValue v;
  v.type_ = Type::kObject;
  v.object_ = std::move(members);
  return v;
}

namespace {

constexpr int kMaxDepth = 64;

using Member = std::pair<std::string, JsonValue>;

// Detects a repeated key among the members of one object being parsed. Objects of up to
// kLinearScanMembers members (tensor records, shard entries: nearly every object Tessera reads)
// are checked by a scan that allocates nothing; past that the keys move into an ordered set of
// member indices. Indices, not string_views: `members` reallocates as it grows, and moving a
// std::string relocates the bytes of a short (inline) key. Ordered rather than hashed so that
// crafted colliding keys cannot degrade it: every insert and lookup is O(log n) comparisons.
// Lives in one ParseObject frame beside `members`, whose address the comparator keeps.
class DuplicateKeyIndex {
 public:
  static constexpr size_t kLinearScanMembers = 16;

  explicit DuplicateKeyIndex(const std::vector<Member>* members)
      : members_(members), sorted_(KeyLess{members}) {}
  DuplicateKeyIndex(const DuplicateKeyIndex&) = delete;
  DuplicateKeyIndex& operator=(const DuplicateKeyIndex&) = delete;

  // Whether `key` equals the key of a member already in `members`.
  bool Contains(std::string_view key) const {
    if (members_->size() <= kLinearScanMembers) {
      for (const Member& m : *members_) {
        if (m.first == key) return true;
      }
      return false;
    }
    return sorted_.find(key) != sorted_.end();
  }

  // Call after each append to `members` (whose last key Contains() has just cleared).
  void AddLast() {
    const size_t n = members_->size();
    if (n <= kLinearScanMembers) return;
    if (sorted_.empty()) {  // crossing the threshold: index everything so far
      for (size_t i = 0; i < n; ++i) sorted_.insert(i);
      return;
    }
    sorted_.insert(n - 1);
  }

 private:
  // Orders member indices by their keys; transparent so a bare key can be looked up.
  struct KeyLess {
    using is_transparent = void;
    const std::vector<Member>* members;
    std::string_view Key(size_t i) const { return (*members)[i].first; }
    static std::string_view Key(std::string_view k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const { return Key(a) < Key(b); }
  };

  const std::vector<Member>* members_;
  std::set<size_t, KeyLess> sorted_;
};

class Parser {
 public:
  Parser(std::string_view text, size_t max_values) : s_(text), max_values_(max_values) {}

  Result<JsonValue> ParseDocument() {
    SkipSpace();
    JsonValue v;
    RETURN_IF_ERROR(ParseValue(0, &v));
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected trailing characters");
    return v;
  }

 private:
  Status Error(const std::string& what) const {
    return DataLoss("JSON error at byte " + std::to_string(pos_) + ": " + what);
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool Consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) == lit) { pos_ += lit.size(); return true; }
    return false;
  }

  Status ParseValue(int depth, JsonValue* out) {
    if (depth > kMaxDepth) return Error("nesting deeper than 64");
    if (++values_ > max_values_) {
      return Error("more than " + std::to_string(max_values_) + " values");
    }
    if (pos_ >= s_.size()) return Error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return ParseObject(depth, out);
    if (c == '[') return ParseArray(depth, out);
    if (c == '"') {
      std::string str;
      RETURN_IF_ERROR(ParseString(&str));
      *out = JsonValue::String(std::move(str));
      return Status::Ok();
    }
    if (Consume("true")) { *out = JsonValue::Bool(true); return Status::Ok(); }
    if (Consume("false")) { *out = JsonValue::Bool(false); return Status::Ok(); }
    if (Consume("null")) { *out = JsonValue::Null(); return Status::Ok(); }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    return Error(std::string("unexpected character '") + c + "'");
  }

  Status ParseObject(int depth, JsonValue* out) {
    ++pos_;  // '{'
    std::vector<Member> members;
    DuplicateKeyIndex seen(&members);
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; *out = JsonValue::Object({}); return Status::Ok(); }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a string key");
      std::string key;
      RETURN_IF_ERROR(ParseString(&key));
      if (seen.Contains(key)) return Error("duplicate key \"" + key + "\"");
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      SkipSpace();
      JsonValue v;
      RETURN_IF_ERROR(ParseValue(depth + 1, &v));
      members.emplace_back(std::move(key), std::move(v));
      seen.AddLast();
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; break; }
      return Error("expected ',' or '}'");
    }
    *out = JsonValue::Object(std::move(members));
    return Status::Ok();
  }

  Status ParseArray(int depth, JsonValue* out) {
    ++pos_;  // '['
    std::vector<JsonValue> items;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; *out = JsonValue::Array({}); return Status::Ok(); }
    while (true) {
      SkipSpace();
      JsonValue v;
      RETURN_IF_ERROR(ParseValue(depth + 1, &v));
      items.push_back(std::move(v));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; break; }
      return Error("expected ',' or ']'");
    }
    *out = JsonValue::Array(std::move(items));
    return Status::Ok();
  }

  Status ParseHex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return Error("bad hex digit in \\u escape");
    }
    *out = v;
    return Status::Ok();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) { out->push_back(static_cast<char>(cp)); }
    else if (cp < 0x800) { out->push_back(static_cast<char>(0xc0 | (cp >> 6))); out->push_back(static_cast<char>(0x80 | (cp & 0x3f))); }
    else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') { out->push_back(c); continue; }
      if (pos_ >= s_.size()) return Error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          RETURN_IF_ERROR(ParseHex4(&cp));
          if (cp >= 0xd800 && cp < 0xdc00) {  // high surrogate: a low one must follow
            uint32_t lo = 0;
            if (!Consume("\\u")) return Error("lone high surrogate");
            RETURN_IF_ERROR(ParseHex4(&lo));
            if (lo < 0xdc00 || lo >= 0xe000) return Error("bad low surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            return Error("lone low surrogate");
          }
          AppendUtf8(cp, out);
          break;
        }
        default: return Error(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  Status ParseNumber(JsonValue* out) {
    size_t start = pos_;
    bool integral = true;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return Error("bad number");
    if (s_[pos_] == '0') ++pos_;
    else while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return Error("bad fraction");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return Error("bad exponent");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    std::string text(s_.substr(start, pos_ - start));
    if (integral) {
      errno = 0;
      long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno != ERANGE) { *out = JsonValue::Integer(v); return Status::Ok(); }
    }
    const double v = std::strtod(text.c_str(), nullptr);
    // 1e999 would read as infinity, which the writer can only write back as null: a number
    // that does not fit a double is refused rather than turned into another value.
    if (!std::isfinite(v)) {
      pos_ = start;
      return Error("number " + (text.size() > 40 ? text.substr(0, 40) + "..." : text) +
                   " is outside the range of a double");
    }
    *out = JsonValue::Number(v);
    return Status::Ok();
  }

  std::string_view s_;
  size_t max_values_;
  size_t values_ = 0;
  size_t pos_ = 0;
};

}  // namespace

Result<JsonValue> ParseJson(std::string_view text, size_t max_values) {
  return Parser(text, max_values).ParseDocument();
}

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  return out + "\"";
}

void JsonWriter::BeforeValue() {
  if (after_key_) { after_key_ = false; return; }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::BeginObject() { BeforeValue(); out_ += '{'; first_.push_back(true); return *this; }
JsonWriter& JsonWriter::EndObject() { out_ += '}'; first_.pop_back(); return *this; }
JsonWriter& JsonWriter::BeginArray() { BeforeValue(); out_ += '['; first_.push_back(true); return *this; }
JsonWriter& JsonWriter::EndArray() { out_ += ']'; first_.pop_back(); return *this; }
JsonWriter& JsonWriter::Key(std::string_view k) {
  BeforeValue();
  out_ += JsonQuote(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::String(std::string_view s) { BeforeValue(); out_ += JsonQuote(s); return *this; }
JsonWriter& JsonWriter::Int(int64_t v) { BeforeValue(); out_ += std::to_string(v); return *this; }
JsonWriter& JsonWriter::Double(double v) {
  BeforeValue();
  if (!std::isfinite(v)) { out_ += "null"; return *this; }
  // "-0" would read back as the integer 0: negative zero keeps its sign as a fraction.
  if (v == 0 && std::signbit(v)) { out_ += "-0.0"; return *this; }
  char buf[40];
  for (int prec = 6; prec <= 17; ++prec) {  // shortest that round-trips
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  out_ += buf;
  return *this;
}
JsonWriter& JsonWriter::Bool(bool b) { BeforeValue(); out_ += b ? "true" : "false"; return *this; }
JsonWriter& JsonWriter::Null() { BeforeValue(); out_ += "null"; return *this; }

JsonWriter& JsonWriter::Value(const JsonValue& v) {
  switch (v.type()) {
    case JsonValue::Type::kNull: return Null();
    case JsonValue::Type::kBool: return Bool(v.as_bool());
    case JsonValue::Type::kNumber: return v.is_integer() ? Int(v.as_int()) : Double(v.as_double());
    case JsonValue::Type::kString: return String(v.as_string());
    case JsonValue::Type::kArray:
      BeginArray();
      for (const auto& i : v.items()) Value(i);
      return EndArray();
    case JsonValue::Type::kObject:
      BeginObject();
      for (const auto& [k, m] : v.members()) { Key(k); Value(m); }
      return EndObject();
  }
  return *this;
}

}  // namespace tessera
