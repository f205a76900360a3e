// runtime/core/yaml_reader.cc — the strict reader (contract in yaml_reader.h).
#include "runtime/core/yaml_reader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "runtime/core/yaml_input.h"

namespace tessera {
namespace {

bool LooksLikeInteger(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

bool InRange(double v, const NumberRange& r) {
  const bool low = r.min_inclusive ? v < r.min : v <= r.min;
  const bool high = r.max_inclusive ? v > r.max : v >= r.max;
  return !low && !high;
}

// The value's number type: a plain scalar strtod reads whole, written as an ordinary number
// (strtod also takes "inf", "nan" and hex floats; a config value must be an ordinary number).
std::optional<double> ParseNumber(const YamlNode& node, bool* overflow) {
  if (!node.IsPlainScalar()) return std::nullopt;
  const std::string& text = node.scalar;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  const bool ordinary = text.find_first_of("iInNxX") == std::string::npos;
  if (text.empty() || *end != '\0' || !ordinary) return std::nullopt;
  *overflow = errno == ERANGE;  // beyond a double's range either way: 1e400 or 1e-400
  return v;
}

const YamlNode& NullNode() {
  static const YamlNode kNull;
  return kNull;
}

}  // namespace

std::string NumberRangeText(const NumberRange& r) {
  if (r.max == kYamlInf) return std::string(r.min_inclusive ? ">= " : "> ") + Num(r.min);
  return std::string("in ") + (r.min_inclusive ? "[" : "(") + Num(r.min) + ", " + Num(r.max) +
         (r.max_inclusive ? "]" : ")");
}

std::string FormatYamlFloat(float v) {
  char buf[64];
  // Whole numbers as "10000.0", others in the shortest %g form that reads back exactly; an
  // exponent always gets a mantissa dot ("1.0e-05") so YAML 1.1 readers (PyYAML) also see a
  // float rather than a string.
  if (std::fabs(v) < 1e9f && v == std::nearbyint(v)) {
    std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(v));
    return buf;
  }
  // Read back exactly as the loader reads it (strtod, then to float: two roundings, which can
  // differ from strtof's one in rare halfway cases).
  for (int precision = 1; precision <= 9; ++precision) {  // 9 digits always round-trip a float
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(v));
    if (static_cast<float>(std::strtod(buf, nullptr)) == v) break;
  }
  std::string text = buf;
  const size_t e = text.find('e');
  if (e != std::string::npos && text.find('.') == std::string::npos) text.insert(e, ".0");
  return text;
}

// ---- YamlContext --------------------------------------------------------------------------------

std::string YamlContext::Where(const YamlNode& node) const {
  if (!node.origin.empty()) return node.origin;
  return YamlWhere(file_, node.mark.line, node.mark.column);
}

Status YamlContext::At(const YamlNode& node, const std::string& dotted,
                       const std::string& problem) const {
  return InvalidArgument(Where(node) + ": " + dotted + ": " + problem);
}

Status YamlContext::Expected(const YamlNode& node, const std::string& dotted,
                             const std::string& what) const {
  return At(node, dotted, "expected " + what + ", got " + DescribeYaml(node));
}

void YamlContext::RecordPosition(const std::string& dotted, std::string where) {
  positions_[dotted] = std::move(where);
}

Status YamlContext::CrossFieldError(const std::vector<std::string>& keys,
                                    const std::string& problem) const {
  for (const std::string& k : keys) {
    auto it = positions_.find(k);
    if (it != positions_.end()) return InvalidArgument(it->second + ": " + k + ": " + problem);
  }
  return InvalidArgument(file_ + ": " + keys.front() + ": " + problem);
}

// ---- One value ----------------------------------------------------------------------------------

Result<int64_t> ReadYamlInt(const YamlContext& ctx, const YamlNode& node,
                            const std::string& dotted, int64_t min, int64_t max) {
  if (!node.IsPlainScalar() || !LooksLikeInteger(node.scalar)) {
    return ctx.Expected(node, dotted, "an integer");
  }
  errno = 0;
  const long long v = std::strtoll(node.scalar.c_str(), nullptr, 10);
  if (errno == ERANGE) return ctx.At(node, dotted, "integer out of range, got " + DescribeYaml(node));
  if (v < min) return ctx.At(node, dotted, "must be >= " + std::to_string(min) + ", got " + std::to_string(v));
  if (v > max) return ctx.At(node, dotted, "must be <= " + std::to_string(max) + ", got " + std::to_string(v));
  return static_cast<int64_t>(v);
}

Result<uint64_t> ReadYamlUint(const YamlContext& ctx, const YamlNode& node,
                              const std::string& dotted) {
  if (!node.IsPlainScalar() || !LooksLikeInteger(node.scalar) || node.scalar[0] == '-') {
    return ctx.Expected(node, dotted, "a non-negative integer");
  }
  errno = 0;
  const unsigned long long v = std::strtoull(node.scalar.c_str(), nullptr, 10);
  if (errno == ERANGE) return ctx.At(node, dotted, "integer out of range, got " + DescribeYaml(node));
  return static_cast<uint64_t>(v);
}

Result<double> ReadYamlNumber(const YamlContext& ctx, const YamlNode& node,
                              const std::string& dotted, const NumberRange& range) {
  bool overflow = false;
  const std::optional<double> v = ParseNumber(node, &overflow);
  if (!v) return ctx.Expected(node, dotted, "a number");
  if (overflow) return ctx.At(node, dotted, "number out of range, got " + DescribeYaml(node));
  if (!InRange(*v, range)) {
    return ctx.At(node, dotted, "must be " + NumberRangeText(range) + ", got " + node.scalar);
  }
  return *v;
}

Result<float> ReadYamlFloat(const YamlContext& ctx, const YamlNode& node,
                            const std::string& dotted, const NumberRange& range) {
  bool overflow = false;
  const std::optional<double> v = ParseNumber(node, &overflow);
  if (!v) return ctx.Expected(node, dotted, "a number");
  // Values are kept as 32-bit floats: the float must be finite (a double just above FLT_MAX
  // rounds to FLT_MAX, which is what the resolved config then writes back).
  const float f = static_cast<float>(*v);
  if (overflow || !std::isfinite(f)) {
    return ctx.At(node, dotted, "number out of range for a 32-bit float, got " + DescribeYaml(node));
  }
  const std::string& text = node.scalar;
  if (!InRange(*v, range)) {
    return ctx.At(node, dotted, "must be " + NumberRangeText(range) + ", got " + text);
  }
  // The range holds for the double; it must still hold for the float we keep (1e-46 > 0, but
  // as a float it is 0, and an Adam eps of 0 divides 0 by 0; 0.99999999999 < 1, but as a float
  // it is 1.0, and a beta of 1 never forgets).
  if (*v != 0 && (f == 0 || !std::isnormal(f))) {
    return ctx.At(node, dotted, "number too small for a 32-bit float, got " + text);
  }
  if (!InRange(f, range)) {
    return ctx.At(node, dotted, "must be " + NumberRangeText(range) + ", got " + text +
                                    ", which is " + FormatYamlFloat(f) +
                                    " as the 32-bit float training uses");
  }
  return f;
}

Result<bool> ReadYamlBool(const YamlContext& ctx, const YamlNode& node, const std::string& dotted) {
  if (node.IsPlainScalar()) {
    const std::string& t = node.scalar;
    if (t == "true" || t == "True" || t == "TRUE") return true;
    if (t == "false" || t == "False" || t == "FALSE") return false;
  }
  return ctx.Expected(node, dotted, "a boolean (true or false)");
}

Result<std::string> ReadYamlString(const YamlContext& ctx, const YamlNode& node,
                                   const std::string& dotted) {
  if (node.IsNull()) return std::string();
  if (!node.IsScalar()) return ctx.Expected(node, dotted, "a string");
  // Escapes in a quoted scalar can spell bytes the file itself may not hold (yaml_input.h): a
  // NUL would cut a path short where the OS reads it, and a DEL would be written raw into a
  // resolved config, which would then not load. Both are refused.
  if (const std::optional<NonTextByte> bad = FindNonTextByte(node.scalar)) {
    return ctx.At(node, dotted, bad->name + " at offset " + std::to_string(bad->offset) +
                                    " of the value is a control character or not UTF-8 (write "
                                    "printable text)");
  }
  return node.scalar;
}

Result<std::vector<const YamlNode*>> ReadYamlSequence(const YamlContext& ctx, const YamlNode& node,
                                                      const std::string& dotted,
                                                      const std::string& what) {
  std::vector<const YamlNode*> items;
  if (node.IsNull()) return items;
  if (!node.IsSequence()) return ctx.Expected(node, dotted, "a sequence of " + what);
  for (const YamlNode& item : node.items) items.push_back(&item);
  return items;
}

// ---- YamlMap ------------------------------------------------------------------------------------

Result<YamlMap> YamlMap::Make(YamlContext* ctx, const YamlNode* node, std::string prefix,
                              const YamlNode* blame) {
  YamlMap m(ctx, std::move(prefix));
  m.blame_ = blame;
  if (node == nullptr || node->IsNull()) return m;
  const std::string self = m.prefix_.empty() ? "(top)" : m.prefix_;
  if (!node->IsMap()) return ctx->Expected(*node, self, "a map");
  for (size_t i = 0; i < node->entries.size(); ++i) {
    const YamlNode& key = node->entries[i].key;
    if (!key.IsScalar()) return ctx->Expected(key, self, "keys that are plain words");
    for (size_t j = 0; j < i; ++j) {
      if (node->entries[j].key.scalar == key.scalar) {
        return ctx->At(key, m.Dotted(key.scalar), "duplicate key (each key may appear once)");
      }
    }
  }
  m.node_ = node;
  return m;
}

std::string YamlMap::Dotted(const std::string& key) const {
  return prefix_.empty() ? key : prefix_ + "." + key;
}

const YamlEntry* YamlMap::Find(const std::string& key) const {
  return node_ == nullptr ? nullptr : node_->Find(key);
}

const YamlNode* YamlMap::Get(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  const YamlEntry* e = Find(key);
  if (e == nullptr) return nullptr;
  ctx_->RecordPosition(Dotted(key), ctx_->Where(e->value));
  return &e->value;
}

Result<YamlMap> YamlMap::Child(const std::string& key) {
  const YamlNode* v = Get(key);
  const YamlEntry* e = Find(key);
  return Make(ctx_, v, Dotted(key), e != nullptr ? &e->key : (node_ ? node_ : blame_));
}

std::vector<std::string> YamlMap::PresentKeys() const {
  std::vector<std::string> keys;
  if (node_ != nullptr) {
    for (const YamlEntry& e : node_->entries) keys.push_back(e.key.scalar);
  }
  return keys;
}

Status YamlMap::ValueError(const std::string& key, const std::string& problem) const {
  const YamlEntry* e = Find(key);
  if (e != nullptr) return ctx_->At(e->value, Dotted(key), problem);
  return ctx_->At(node_ ? *node_ : blame_ ? *blame_ : NullNode(), Dotted(key), problem);
}

Status YamlMap::KeyError(const std::string& key, const std::string& problem) const {
  const YamlEntry* e = Find(key);
  if (e != nullptr) return ctx_->At(e->key, Dotted(key), problem);
  return ValueError(key, problem);
}

Status YamlMap::Require(const std::string& key) {
  if (Get(key) != nullptr) return Status::Ok();
  return ValueError(key, "required key is missing");
}

Status YamlMap::Int(const std::string& key, int64_t min, int64_t max, int64_t* out) {
  const YamlNode* v = Get(key);
  if (v == nullptr) return Status::Ok();
  ASSIGN_OR_RETURN(*out, ReadYamlInt(*ctx_, *v, Dotted(key), min, max));
  return Status::Ok();
}

Status YamlMap::Int(const std::string& key, int64_t min, int64_t max, int* out) {
  int64_t v = *out;
  RETURN_IF_ERROR(Int(key, min, std::min<int64_t>(max, std::numeric_limits<int>::max()), &v));
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status YamlMap::IntList(const std::string& key, int64_t min, int64_t max,
                        std::vector<int64_t>* out) {
  const YamlNode* v = Get(key);
  if (v == nullptr || v->IsNull()) return Status::Ok();
  const std::string what = "a list of integers, e.g. [2, 3, 3]";
  if (!v->IsSequence()) return ctx_->Expected(*v, Dotted(key), what);
  std::vector<int64_t> values;
  for (const YamlNode& item : v->items) {
    if (!item.IsPlainScalar() || !LooksLikeInteger(item.scalar)) {
      return ctx_->Expected(*v, Dotted(key), what);
    }
    // Range errors name the list (its position), and the item's value.
    YamlNode at = item;
    at.mark = v->mark;
    at.origin = v->origin;
    ASSIGN_OR_RETURN(const int64_t x, ReadYamlInt(*ctx_, at, Dotted(key), min, max));
    values.push_back(x);
  }
  *out = std::move(values);
  return Status::Ok();
}

Status YamlMap::Uint(const std::string& key, uint64_t* out) {
  const YamlNode* v = Get(key);
  if (v == nullptr) return Status::Ok();
  ASSIGN_OR_RETURN(*out, ReadYamlUint(*ctx_, *v, Dotted(key)));
  return Status::Ok();
}

Status YamlMap::Number(const std::string& key, const NumberRange& range, double* out) {
  const YamlNode* v = Get(key);
  if (v == nullptr) return Status::Ok();
  ASSIGN_OR_RETURN(*out, ReadYamlNumber(*ctx_, *v, Dotted(key), range));
  return Status::Ok();
}

Status YamlMap::Float(const std::string& key, const NumberRange& range, float* out) {
  const YamlNode* v = Get(key);
  if (v == nullptr) return Status::Ok();
  ASSIGN_OR_RETURN(*out, ReadYamlFloat(*ctx_, *v, Dotted(key), range));
  return Status::Ok();
}

Status YamlMap::Bool(const std::string& key, bool* out, bool* present) {
  if (present != nullptr) *present = false;
  const YamlNode* v = Get(key);
  if (v == nullptr) return Status::Ok();
  ASSIGN_OR_RETURN(*out, ReadYamlBool(*ctx_, *v, Dotted(key)));
  if (present != nullptr) *present = true;
  return Status::Ok();
}

Result<std::vector<const YamlNode*>> YamlMap::Sequence(const std::string& key,
                                                      const std::string& what) {
  const YamlNode* v = Get(key);
  if (v == nullptr) return std::vector<const YamlNode*>();
  return ReadYamlSequence(*ctx_, *v, Dotted(key), what);
}

Status YamlMap::String(const std::string& key, std::string* out) {
  const YamlNode* v = Get(key);
  if (v == nullptr) return Status::Ok();
  ASSIGN_OR_RETURN(*out, ReadYamlString(*ctx_, *v, Dotted(key)));
  return Status::Ok();
}

Status YamlMap::NonEmptyString(const std::string& key, std::string* out) {
  const YamlNode* v = Get(key);
  if (v == nullptr) return Status::Ok();
  ASSIGN_OR_RETURN(std::string s, ReadYamlString(*ctx_, *v, Dotted(key)));
  if (s.empty()) return ctx_->At(*v, Dotted(key), "must not be empty");
  *out = std::move(s);
  return Status::Ok();
}

Status YamlMap::Finish() const {
  if (node_ == nullptr) return Status::Ok();
  for (const YamlEntry& e : node_->entries) {
    if (std::find(known_.begin(), known_.end(), e.key.scalar) != known_.end()) continue;
    std::string problem = "unknown key" + DidYouMean(e.key.scalar, known_);
    if (problem == "unknown key") {
      std::string list;
      for (size_t i = 0; i < known_.size(); ++i) list += (i ? ", " : "") + known_[i];
      problem += " (valid keys" + (prefix_.empty() ? "" : " of " + prefix_) + ": " + list + ")";
    }
    return ctx_->At(e.key, Dotted(e.key.scalar), problem);
  }
  return Status::Ok();
}

}  // namespace tessera
