// runtime/core/yaml_tree.cc — ParseYaml and ApplyYamlOverride (contract in yaml_tree.h).
//
// yaml-cpp builds its own tree (YAML::Load), which is copied node by node into YamlNode; its
// exceptions are caught here and never escape. The copy counts nodes: yaml-cpp shares an
// aliased node, the copy does not, so the count is what bounds an alias bomb.
#include "runtime/core/yaml_tree.h"

#include <yaml-cpp/yaml.h>

#include <exception>
#include <sstream>
#include <utility>

#include "runtime/core/yaml_input.h"

namespace tessera {
namespace {

YamlMark MarkOf(const YAML::Mark& m) {
  if (m.is_null()) return {};
  return {m.line, m.column};
}

// Copies yaml-cpp's tree, failing once more than kMaxYamlNodes nodes were made.
class Copier {
 public:
  bool Copy(const YAML::Node& in, YamlNode* out) {
    if (++nodes_ > kMaxYamlNodes) return false;
    out->mark = MarkOf(in.Mark());
    switch (in.Type()) {
      case YAML::NodeType::Scalar:
        out->kind = YamlNode::Kind::kScalar;
        out->scalar = in.Scalar();
        out->quoted = in.Tag() == "!";  // yaml-cpp's non-specific tag of a quoted scalar
        return true;
      case YAML::NodeType::Sequence:
        out->kind = YamlNode::Kind::kSequence;
        out->items.resize(in.size());
        for (size_t i = 0; i < in.size(); ++i) {
          if (!Copy(in[i], &out->items[i])) return false;
        }
        return true;
      case YAML::NodeType::Map:
        out->kind = YamlNode::Kind::kMap;
        for (const auto& kv : in) {  // a temporary pair; copy the handles, never refer into it
          const YAML::Node key = kv.first;
          const YAML::Node value = kv.second;
          YamlEntry& e = out->entries.emplace_back();
          if (!Copy(key, &e.key) || !Copy(value, &e.value)) return false;
          // yaml-cpp marks a null value (`key:` alone) at the next token; the key is where a
          // reader should point.
          if (e.value.IsNull()) e.value.mark = e.key.mark;
        }
        return true;
      default:  // Null and Undefined
        out->kind = YamlNode::Kind::kNull;
        return true;
    }
  }

 private:
  int64_t nodes_ = 0;
};

// Where a problem in `text` is, and what it is; `where` unknown when yaml-cpp gave no mark.
struct LoadProblem {
  YamlMark where;
  std::string problem;
};

// The tree of `text`, or the first problem with it (the pre-check's, yaml-cpp's, the budget).
std::optional<LoadProblem> Load(std::string_view text, YamlNode* out) {
  if (std::optional<YamlProblem> p = FindYamlProblem(text)) {  // 1-based, 0 when unknown
    return LoadProblem{{p->line - 1, p->column - 1}, p->problem};
  }
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    if (!Copier().Copy(root, out)) {
      return LoadProblem{{}, "more than " + std::to_string(kMaxYamlNodes) +
                                 " values once aliases are expanded (anchors nested into "
                                 "each other?)"};
    }
  } catch (const YAML::Exception& e) {
    return LoadProblem{MarkOf(e.mark), "malformed YAML: " + e.msg};
  } catch (const std::exception& e) {
    return LoadProblem{{}, std::string("malformed YAML: ") + e.what()};
  }
  return std::nullopt;
}

void SetOrigin(YamlNode& node, const std::string& origin) {
  node.origin = origin;
  for (YamlEntry& e : node.entries) {
    SetOrigin(e.key, origin);
    SetOrigin(e.value, origin);
  }
  for (YamlNode& item : node.items) SetOrigin(item, origin);
}

YamlNode ScalarNode(std::string text, const std::string& origin) {
  YamlNode n;
  n.kind = YamlNode::Kind::kScalar;
  n.scalar = std::move(text);
  n.origin = origin;
  return n;
}

}  // namespace

const YamlEntry* YamlNode::Find(std::string_view key) const {
  for (const YamlEntry& e : entries) {
    if (e.key.IsScalar() && e.key.scalar == key) return &e;
  }
  return nullptr;
}

YamlEntry* YamlNode::Find(std::string_view key) {
  return const_cast<YamlEntry*>(static_cast<const YamlNode*>(this)->Find(key));
}

std::string DescribeYaml(const YamlNode& node) {
  switch (node.kind) {
    case YamlNode::Kind::kMap: return "a map";
    case YamlNode::Kind::kSequence: return "a sequence";
    case YamlNode::Kind::kNull: return "nothing (null)";
    case YamlNode::Kind::kScalar: break;
  }
  std::string s = node.scalar;
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return std::string(node.quoted ? "the quoted string " : "") + "\"" + s + "\"";
}

Result<YamlNode> ParseYaml(std::string_view text, const std::string& file) {
  YamlNode root;
  if (std::optional<LoadProblem> p = Load(text, &root)) {
    return InvalidArgument(YamlWhere(file, p->where.line, p->where.column) + ": " + p->problem);
  }
  return root;
}

Status ApplyYamlOverride(YamlNode& root, const std::string& spec) {
  const std::string origin = "--set " + spec;
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    return InvalidArgument(origin + ": expected key.path=value (missing '=')");
  }
  const std::string key = spec.substr(0, eq);
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  if (key.empty() || key.back() == '.') parts.push_back("");
  for (const std::string& p : parts) {
    if (p.empty() || p.find_first_of(" \t") != std::string::npos) {
      return InvalidArgument(origin + ": malformed key path \"" + key +
                             "\" (expected words joined by '.', e.g. train.steps=5)");
    }
  }
  YamlNode value;
  if (std::optional<LoadProblem> p = Load(std::string_view(spec).substr(eq + 1), &value)) {
    const bool malformed = p->problem.rfind("malformed YAML: ", 0) == 0;
    return InvalidArgument(origin + ": " + key + ": " +
                           (malformed ? "malformed value: " + p->problem.substr(16) : p->problem));
  }
  SetOrigin(value, origin);

  YamlNode* cur = &root;
  std::string dotted;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (cur->IsNull()) {  // a section the file left out (or wrote empty): the override makes it
      cur->kind = YamlNode::Kind::kMap;
      cur->origin = origin;
    } else if (!cur->IsMap()) {
      return InvalidArgument(origin + ": " + dotted + ": is " + DescribeYaml(*cur) +
                             ", not a map, so it has no key \"" + parts[i] + "\"");
    }
    dotted += (i ? "." : "") + parts[i];
    YamlEntry* e = cur->Find(parts[i]);
    if (e == nullptr) {
      e = &cur->entries.emplace_back();
      e->key = ScalarNode(parts[i], origin);
    } else {
      e->key.origin = origin;  // errors about the key now point at the override
    }
    if (i + 1 == parts.size()) {
      e->value = std::move(value);
    } else if (e->value.IsNull()) {
      e->value.origin = origin;
    }
    cur = &e->value;
  }
  return Status::Ok();
}

}  // namespace tessera
