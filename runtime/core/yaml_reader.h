// runtime/core/yaml_reader.h — the one strict reader of Tessera's YAML files: the training
// config (runtime/train/config.cc) and the chaos scenario (runtime/chaos/scenario.cc) both read
// their trees (yaml_tree.h) through it, so both refuse the same things in the same words.
//
// Owns: scalar conversion (integers, numbers, 32-bit floats, booleans, strings, enums), the
// bookkeeping of which keys a reader asked for (the rest are unknown keys, with the one "did
// you mean" of runtime/core/suggest.h), and the spelling of every error:
//   "WHERE: dotted.key: problem"
// WHERE is "FILE:LINE:COL" (1-based) of the value (of the key, for unknown and duplicate
// keys), the override that wrote it ("--set a.b=c"), or FILE when neither is known. Numbers
// and booleans must be written plain (a quoted "5" is a string); `inf`, `nan` and hex floats
// are not numbers here; strings must be printable text (yaml_input.h).
// Not thread-safe (a reader records into its context); use one per file being read.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/core/suggest.h"
#include "runtime/core/yaml_tree.h"

namespace tessera {

// The values a number may take: min < v (<= with min_inclusive), v < max (<= with
// max_inclusive); max = +inf for no upper bound.
struct NumberRange {
  double min;
  bool min_inclusive;
  double max;
  bool max_inclusive;
};
inline constexpr double kYamlInf = std::numeric_limits<double>::infinity();
inline constexpr NumberRange kPositive{0.0, false, kYamlInf, false};     // > 0
inline constexpr NumberRange kNonNegative{0.0, true, kYamlInf, false};   // >= 0
inline constexpr NumberRange kUnitOpen{0.0, true, 1.0, false};           // [0, 1)
inline constexpr NumberRange kUnitClosed{0.0, true, 1.0, true};          // [0, 1]
// "> 0", ">= 0", "in [0, 1)".
std::string NumberRangeText(const NumberRange& r);

// The shortest decimal text that reads back (as ReadYamlFloat reads it) as exactly `v`, as a
// YAML float: 0.003f -> "0.003", 10000 -> "10000.0", 1e-5f -> "1.0e-05" (an exponent always
// gets a mantissa dot, so YAML 1.1 readers such as PyYAML also see a float).
std::string FormatYamlFloat(float v);

// The file being read: names positions in errors, and remembers where each key that was read
// sits, so that an error about several keys (a cross-field check) can point at one of them.
class YamlContext {
 public:
  explicit YamlContext(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  // The node's override, else "FILE:LINE:COL", else FILE.
  std::string Where(const YamlNode& node) const;
  // "WHERE(node): dotted: problem".
  Status At(const YamlNode& node, const std::string& dotted, const std::string& problem) const;
  // At(node, dotted, "expected WHAT, got <DescribeYaml(node)>").
  Status Expected(const YamlNode& node, const std::string& dotted, const std::string& what) const;

  // Records where `dotted` was read (YamlMap does it for every key it looks up).
  void RecordPosition(const std::string& dotted, std::string where);
  // Where the file (or an override) set `dotted`; null when it did not.
  const std::string* PositionOf(const std::string& dotted) const {
    auto it = positions_.find(dotted);
    return it == positions_.end() ? nullptr : &it->second;
  }
  // An error about keys that depend on each other, at the first of `keys` (most specific
  // first) the file set; at the file itself, naming the first key, when it set none.
  Status CrossFieldError(const std::vector<std::string>& keys, const std::string& problem) const;

 private:
  std::string file_;
  std::map<std::string, std::string> positions_;
};

// ---- One value --------------------------------------------------------------------------------
// Each converts `node` (named `dotted` in errors) or says why it cannot.
Result<int64_t> ReadYamlInt(const YamlContext& ctx, const YamlNode& node,
                            const std::string& dotted, int64_t min, int64_t max);
Result<uint64_t> ReadYamlUint(const YamlContext& ctx, const YamlNode& node,
                              const std::string& dotted);
Result<double> ReadYamlNumber(const YamlContext& ctx, const YamlNode& node,
                              const std::string& dotted, const NumberRange& range);
// A number kept as a 32-bit float: finite as a float, not flushed to 0 or subnormal, and
// still in range after rounding (0.99999999999 is 1.0f, which [0, 1) refuses).
Result<float> ReadYamlFloat(const YamlContext& ctx, const YamlNode& node,
                            const std::string& dotted, const NumberRange& range);
// true/True/TRUE or false/False/FALSE, plain.
Result<bool> ReadYamlBool(const YamlContext& ctx, const YamlNode& node, const std::string& dotted);
// A scalar of printable text as written; null is "".
Result<std::string> ReadYamlString(const YamlContext& ctx, const YamlNode& node,
                                   const std::string& dotted);
// The items of a sequence; null is empty.
Result<std::vector<const YamlNode*>> ReadYamlSequence(const YamlContext& ctx, const YamlNode& node,
                                                      const std::string& dotted,
                                                      const std::string& what);
// One of `names` (their values), else "expected one of a | b, got "x" (did you mean "a"?)".
template <typename E>
Result<E> ReadYamlEnum(const YamlContext& ctx, const YamlNode& node, const std::string& dotted,
                       const std::vector<std::pair<std::string, E>>& names) {
  std::vector<std::string> allowed;
  for (const auto& [name, value] : names) {
    if (node.IsScalar() && node.scalar == name) return value;
    allowed.push_back(name);
  }
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) list += (i ? " | " : "") + allowed[i];
  return ctx.At(node, dotted,
                "expected one of " + list + ", got " + DescribeYaml(node) +
                    (node.IsScalar() ? DidYouMean(node.scalar, allowed) : ""));
}

// ---- One map ----------------------------------------------------------------------------------
// A map of the tree (a config section such as `model`, a scenario's `job` or one fault).
// Readers look keys up, which marks them known; Finish() then refuses every key nobody asked
// for. A missing or null map reads as empty (every key absent).
class YamlMap {
 public:
  // `node` may be null (absent); `prefix` is its dotted path ("" at the top); `blame` is where
  // an error about a missing required key points when the map itself is absent (its key).
  static Result<YamlMap> Make(YamlContext* ctx, const YamlNode* node, std::string prefix,
                              const YamlNode* blame = nullptr);

  const std::string& prefix() const { return prefix_; }
  std::string Dotted(const std::string& key) const;
  YamlContext& context() const { return *ctx_; }

  // Whether the map has `key` (does not mark it known).
  bool Has(const std::string& key) const { return Find(key) != nullptr; }
  // The value of `key`, marked known; nullptr when absent.
  const YamlNode* Get(const std::string& key);
  // The sub-map `key`, marked known (absent or null: empty).
  Result<YamlMap> Child(const std::string& key);
  // Keys in file order.
  std::vector<std::string> PresentKeys() const;

  // Errors at `key`'s value / at the key itself (at the map when the key is absent).
  Status ValueError(const std::string& key, const std::string& problem) const;
  Status KeyError(const std::string& key, const std::string& problem) const;

  // "dotted: required key is missing" unless present; marks the key known.
  Status Require(const std::string& key);

  // Typed reads: an absent key leaves *out as it is (the default); a present one must convert.
  Status Int(const std::string& key, int64_t min, int64_t max, int64_t* out);
  Status Int(const std::string& key, int64_t min, int64_t max, int* out);  // max clamped to int
  Status IntList(const std::string& key, int64_t min, int64_t max, std::vector<int64_t>* out);
  Status Uint(const std::string& key, uint64_t* out);
  Status Number(const std::string& key, const NumberRange& range, double* out);
  Status Float(const std::string& key, const NumberRange& range, float* out);
  // `present` (optional) says whether the key was given, for defaults that depend on others.
  Status Bool(const std::string& key, bool* out, bool* present = nullptr);
  // The items of the sequence `key` (absent or null: none); `what` names them in errors.
  Result<std::vector<const YamlNode*>> Sequence(const std::string& key, const std::string& what);
  Status String(const std::string& key, std::string* out);           // null: ""
  Status NonEmptyString(const std::string& key, std::string* out);   // null or "": an error
  template <typename E>
  Status Enum(const std::string& key, const std::vector<std::pair<std::string, E>>& names,
              E* out) {
    const YamlNode* v = Get(key);
    if (v == nullptr) return Status::Ok();
    ASSIGN_OR_RETURN(*out, ReadYamlEnum(*ctx_, *v, Dotted(key), names));
    return Status::Ok();
  }

  // The first key no reader asked for: "unknown key (did you mean "x"?)", or with the list of
  // valid keys when none is close. OK when every key was asked for.
  Status Finish() const;

 private:
  YamlMap(YamlContext* ctx, std::string prefix) : ctx_(ctx), prefix_(std::move(prefix)) {}
  const YamlEntry* Find(const std::string& key) const;

  YamlContext* ctx_;
  std::string prefix_;
  const YamlNode* node_ = nullptr;   // null when the map is absent
  const YamlNode* blame_ = nullptr;  // where errors about the absent map point
  std::vector<std::string> known_;   // in the order readers asked: listings and suggestions
};

}  // namespace tessera
