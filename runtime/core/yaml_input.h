// runtime/core/yaml_input.h — what every YAML file Tessera reads must be before it is read.
//
// Owns: the one pre-check shared by the config loader (runtime/train/config.cc) and the chaos
// scenario loader (runtime/chaos/scenario.cc), and the one spelling of an error's position
// (YamlWhere) both use; their "did you mean" is runtime/core/suggest.h. A Tessera YAML file is ONE plain document of
// maps, sequences and scalars: a second document (`---` after content, or content after
// `...`), an explicit tag (`!!python/object`, `!foo`, `!!str`), bytes that are not printable
// UTF-8 text (NUL and other control characters, malformed sequences) or nesting deeper than
// kMaxYamlDepth is refused with "FILE:LINE:COL: ..." (1-based) at the offending token, as
// is text yaml-cpp cannot parse. Anchors and aliases are allowed (yaml-cpp shares aliased
// nodes, so they cannot blow up memory). Without this check yaml-cpp would silently read the
// first document only and treat tags as decoration, so a file that means something else
// would load as if it were fine.
// yaml-cpp is used only inside the .cc (the one exception to this layer's std-only rule: a
// text format primitive, like json.h). Pure function; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace tessera {

// Maps and sequences nested deeper than this are refused (configs nest 3 levels).
inline constexpr int kMaxYamlDepth = 64;

// The first reason `text` is not acceptable (above), at 1-based line and column (0 when the
// position is unknown), or nullopt when it is acceptable.
struct YamlProblem {
  int line = 0, column = 0;
  std::string problem;  // e.g. "a second YAML document (...)"
};
std::optional<YamlProblem> FindYamlProblem(std::string_view text);

// kInvalidArgument "FILE:LINE:COL: <problem>" for FindYamlProblem's finding, else OK; `file`
// names the text in messages.
Status CheckYamlInput(std::string_view text, const std::string& file);

// Where a YAML error is, as every reader's message starts: "FILE:LINE:COL" (1-based) for
// yaml-cpp's 0-based mark (line, column), or just FILE when the mark is null (line < 0).
std::string YamlWhere(const std::string& file, int mark_line, int mark_column);

// The first byte a Tessera YAML file may not hold (a control character other than tab,
// newline and carriage return, DEL, or malformed UTF-8): its offset and its name for messages
// ("byte 0x7f"); nullopt when all of `text` is printable. Readers hold string values to the
// same rule: a double-quoted scalar's escapes ("\0", "\x7f") put such bytes in a value of a
// file that passed.
struct NonTextByte {
  size_t offset;
  std::string name;
};
std::optional<NonTextByte> FindNonTextByte(std::string_view text);

}  // namespace tessera
