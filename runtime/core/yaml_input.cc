// runtime/core/yaml_input.cc — CheckYamlInput (contract in yaml_input.h).
//
// The check runs yaml-cpp's event parser over the text (no node tree is built): every event
// carries the mark of its token, so each refusal points at the token itself. An event handler
// cannot stop the parser, so the first problem is thrown as Refusal and caught here; yaml-cpp's
// own exceptions (malformed text, its DeepRecursion guard) are caught as well and never escape.
#include "runtime/core/yaml_input.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <utility>

namespace tessera {
namespace {

struct Refusal {
  YAML::Mark mark;
  std::string problem;
};

// Tags yaml-cpp reports for untagged nodes: "?" (plain scalars and collections) and "!"
// (quoted scalars: the non-specific tag). Anything else was written in the file.
bool ExplicitTag(const std::string& tag) { return !tag.empty() && tag != "?" && tag != "!"; }

class Checker final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) {
      throw Refusal{mark, "a second YAML document (a config file holds exactly one; remove "
                          "the '---' or '...' separator and what follows it)"};
    }
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                const std::string&) override {
    Tag(mark, tag);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Tag(mark, tag);
    Enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Tag(mark, tag);
    Enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  static void Tag(const YAML::Mark& mark, const std::string& tag) {
    if (ExplicitTag(tag)) {
      throw Refusal{mark, "YAML tag \"" + (tag.size() > 40 ? tag.substr(0, 40) + "..." : tag) +
                              "\" is not allowed (write plain values: numbers, words, true/false, "
                              "quoted strings)"};
    }
  }
  void Enter(const YAML::Mark& mark) {
    if (++depth_ > kMaxYamlDepth) {
      throw Refusal{mark, "maps and lists nested more than " + std::to_string(kMaxYamlDepth) +
                              " levels deep"};
    }
  }

  int documents_ = 0;
  int depth_ = 0;
};

YamlProblem At(const YAML::Mark& mark, std::string problem) {
  if (mark.is_null()) return {0, 0, std::move(problem)};
  return {mark.line + 1, mark.column + 1, std::move(problem)};
}

// 1-based line and column of byte `offset`.
YamlProblem AtOffset(std::string_view text, size_t offset, std::string problem) {
  int line = 1, column = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column, std::move(problem)};
}

// YAML text must be printable Unicode; yaml-cpp's reader stops at a NUL as if the text ended
// there and passes malformed bytes into strings, which the resolved config would then write
// back as something else.
size_t FirstNonText(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) return i;
      ++i;
      continue;
    }
    // Length and the smallest code point of a well-formed sequence (no overlong forms).
    const int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > text.size()) return i;
    uint32_t cp = c & (0x7f >> n);
    for (int k = 1; k < n; ++k) {
      const unsigned char t = static_cast<unsigned char>(text[i + k]);
      if ((t & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (t & 0x3f);
    }
    const uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

}  // namespace

std::optional<NonTextByte> FindNonTextByte(std::string_view text) {
  const size_t bad = FirstNonText(text);
  if (bad == std::string_view::npos) return std::nullopt;
  char name[16];
  std::snprintf(name, sizeof name, "byte 0x%02x", static_cast<unsigned char>(text[bad]));
  return NonTextByte{bad, name};
}

std::optional<YamlProblem> FindYamlProblem(std::string_view text) {
  if (const std::optional<NonTextByte> bad = FindNonTextByte(text)) {
    return AtOffset(text, bad->offset, bad->name + " is not printable UTF-8 text (a binary file?)");
  }
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    Checker checker;
    while (parser.HandleNextDocument(checker)) {
    }
  } catch (const Refusal& r) {
    return At(r.mark, r.problem);
  } catch (const YAML::Exception& e) {
    return At(e.mark, "malformed YAML: " + e.msg);
  } catch (const std::exception& e) {
    return YamlProblem{0, 0, std::string("malformed YAML: ") + e.what()};
  }
  return std::nullopt;
}

std::string YamlWhere(const std::string& file, int mark_line, int mark_column) {
  if (mark_line < 0) return file;
  return file + ":" + std::to_string(mark_line + 1) + ":" + std::to_string(mark_column + 1);
}

Status CheckYamlInput(std::string_view text, const std::string& file) {
  const std::optional<YamlProblem> p = FindYamlProblem(text);
  if (!p) return Status::Ok();
  // FindYamlProblem's positions are 1-based, 0 when unknown.
  return InvalidArgument(YamlWhere(file, p->line - 1, p->column - 1) + ": " + p->problem);
}

}  // namespace tessera
