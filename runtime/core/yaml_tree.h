// runtime/core/yaml_tree.h — a Tessera YAML file as a plain tree of values with positions: what
// every strict reader (runtime/core/yaml_reader.h) walks.
//
// Owns: turning text into a YamlNode tree (ParseYaml) and applying `--set key.path=value`
// overrides to one (ApplyYamlOverride). yaml-cpp stays inside the
// .cc: readers see only these structs, so no header outside runtime/core/*.cc names it.
// ParseYaml runs the pre-check of yaml_input.h first (one document, no tags, printable text,
// bounded nesting), then copies yaml-cpp's tree; aliases are copied too, under a node budget
// (kMaxYamlNodes), so a file of nested aliases cannot blow up memory.
// A node written by an override carries that override's text as its `origin`, which error
// messages name instead of a file position.
// Plain values; functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

// Nodes (maps, sequences, scalars, keys) a tree may hold after aliases are expanded: far more
// than any config or scenario, far less than a machine's memory.
inline constexpr int64_t kMaxYamlNodes = int64_t{1} << 20;

// A 0-based position in the text; line < 0 when unknown (a node an override made).
struct YamlMark {
  int line = -1;
  int column = -1;
  bool known() const { return line >= 0; }
};

struct YamlEntry;

struct YamlNode {
  enum class Kind : uint8_t { kNull, kScalar, kMap, kSequence };

  Kind kind = Kind::kNull;
  std::string scalar;          // kScalar: the text, quotes and escapes resolved
  bool quoted = false;         // kScalar written in quotes: a string, even "5" or 'true'
  YamlMark mark;               // where the node starts; a null map value: its key's position
  std::string origin;          // non-empty: written by this override ("--set a.b=c")
  std::vector<YamlEntry> entries;  // kMap, in file order (duplicates kept: readers refuse them)
  std::vector<YamlNode> items;     // kSequence

  bool IsNull() const { return kind == Kind::kNull; }
  bool IsScalar() const { return kind == Kind::kScalar; }
  bool IsMap() const { return kind == Kind::kMap; }
  bool IsSequence() const { return kind == Kind::kSequence; }
  // A scalar written without quotes: numbers and booleans must be written so.
  bool IsPlainScalar() const { return IsScalar() && !quoted; }
  // The first entry whose key is the scalar `key`, or nullptr.
  const YamlEntry* Find(std::string_view key) const;
  YamlEntry* Find(std::string_view key);
};

struct YamlEntry {
  YamlNode key;    // a scalar for every well-formed file; readers refuse the others
  YamlNode value;
};

// How a node reads in a "got ..." clause: "a map", "a sequence", "nothing (null)", "\"5\"",
// or "the quoted string \"5\"" (scalars longer than 60 bytes are cut with "...").
std::string DescribeYaml(const YamlNode& node);

// The tree of `text` (kNull for an empty document). InvalidArgument "FILE:LINE:COL: problem"
// (`file` names the text) for anything CheckYamlInput refuses, text yaml-cpp cannot parse
// ("malformed YAML: ...") and a tree over kMaxYamlNodes.
Result<YamlNode> ParseYaml(std::string_view text, const std::string& file);

// Applies one `--set` override "a.b.c=value" to `root` (a map): parses the value as YAML,
// creates the maps missing on the way and replaces what was there. Every node it writes — the
// value's subtree, the keys, the maps it creates — gets the origin "--set a.b.c=value".
// InvalidArgument starting with that origin for a spec without '=' or with a malformed key
// path, a value that is not acceptable YAML, or a path that runs into a non-map
// ("--set a.b.c=1: a.b: is \"x\", not a map, so it has no key \"c\"").
Status ApplyYamlOverride(YamlNode& root, const std::string& spec);

}  // namespace tessera
