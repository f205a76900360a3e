// links: tessera_core
// tests/unit/yaml_reader_test.cc — the one YAML tree and strict reader (runtime/core/
// yaml_tree.h, yaml_reader.h) that the config and the chaos scenario both read through: the
// positions it keeps, the overrides it applies, and every refusal's exact words.
#include <gtest/gtest.h>

#include <string>

#include "runtime/core/yaml_reader.h"
#include "runtime/core/yaml_tree.h"

namespace tessera {
namespace {

YamlNode Parse(const std::string& text) {
  Result<YamlNode> n = ParseYaml(text, "f.yaml");
  EXPECT_TRUE(n.ok()) << n.status().message();
  return n.ok() ? *n : YamlNode();
}

// The first error of reading `text`'s top map with `read`, or "" when it reads.
template <typename Fn>
std::string ReadError(const std::string& text, Fn read) {
  const YamlNode root = Parse(text);
  YamlContext ctx("f.yaml");
  Result<YamlMap> top = YamlMap::Make(&ctx, &root, "");
  if (!top.ok()) return top.status().message();
  Status s = read(*top);
  if (s.ok()) s = top->Finish();
  return s.ok() ? "" : s.message();
}

TEST(YamlTree, KeepsPositionsQuotesAndOrder) {
  const YamlNode root = Parse("b: 1\na:\n  x: \"5\"\n  y: [1, 2]\nc:\n");
  ASSERT_TRUE(root.IsMap());
  ASSERT_EQ(root.entries.size(), 3u);
  EXPECT_EQ(root.entries[0].key.scalar, "b");  // file order, not sorted
  const YamlNode& x = root.Find("a")->value.Find("x")->value;
  EXPECT_TRUE(x.IsScalar());
  EXPECT_TRUE(x.quoted);
  EXPECT_EQ(x.mark.line, 2);
  EXPECT_EQ(x.mark.column, 5);
  EXPECT_EQ(root.Find("a")->value.Find("y")->value.items.size(), 2u);
  // A null value points at its key (yaml-cpp would point at the next token).
  const YamlEntry* c = root.Find("c");
  EXPECT_TRUE(c->value.IsNull());
  EXPECT_EQ(c->value.mark.line, 4);
  EXPECT_EQ(c->value.mark.column, 0);
}

TEST(YamlTree, RefusesWhatThePreCheckRefusesWithItsPosition) {
  Result<YamlNode> two = ParseYaml("a: 1\n---\nb: 2\n", "f.yaml");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().message().rfind("f.yaml:2:1: a second YAML document", 0), 0u)
      << two.status().message();
  Result<YamlNode> bad = ParseYaml("a: [1, 2\n", "f.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("malformed YAML"), std::string::npos);
}

TEST(YamlTree, AnAliasBombIsRefusedNotExpanded) {
  // Each level doubles the one below: 2^30 scalars once expanded.
  std::string text = "a0: &a0 [x, x]\n";
  for (int i = 1; i <= 30; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" +
            std::to_string(i - 1) + ", *a" + std::to_string(i - 1) + "]\n";
  }
  Result<YamlNode> n = ParseYaml(text, "bomb.yaml");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("once aliases are expanded"), std::string::npos)
      << n.status().message();
  // A few aliases are fine.
  EXPECT_TRUE(ParseYaml("base: &b {lr: 1}\nother: *b\n", "f.yaml").ok());
}

TEST(YamlOverride, WritesCreatesAndMarksItsOrigin) {
  YamlNode root = Parse("train:\n  steps: 5\n");
  ASSERT_TRUE(ApplyYamlOverride(root, "train.steps=7").ok());
  ASSERT_TRUE(ApplyYamlOverride(root, "model.family=llama").ok());
  ASSERT_TRUE(ApplyYamlOverride(root, "data={source: shards}").ok());
  const YamlNode& steps = root.Find("train")->value.Find("steps")->value;
  EXPECT_EQ(steps.scalar, "7");
  EXPECT_EQ(steps.origin, "--set train.steps=7");
  EXPECT_EQ(root.Find("model")->value.origin, "--set model.family=llama");
  EXPECT_EQ(root.Find("data")->value.Find("source")->key.origin, "--set data={source: shards}");
  YamlContext ctx("f.yaml");
  EXPECT_EQ(ctx.Where(steps), "--set train.steps=7");
  EXPECT_EQ(ctx.Where(root.Find("train")->value), "f.yaml:2:3");
}

TEST(YamlOverride, MalformedSpecsSayWhy) {
  YamlNode root = Parse("model: {family: gpt2}\n");
  EXPECT_EQ(ApplyYamlOverride(root, "train.steps").message(),
            "--set train.steps: expected key.path=value (missing '=')");
  EXPECT_EQ(ApplyYamlOverride(root, "a..b=1").message().rfind(
                "--set a..b=1: malformed key path \"a..b\"", 0),
            0u);
  EXPECT_EQ(ApplyYamlOverride(root, "a=[1,").message().rfind("--set a=[1,: a: malformed value: ", 0),
            0u);
  EXPECT_EQ(ApplyYamlOverride(root, "a=!!str x").message().rfind("--set a=!!str x: a: YAML tag", 0),
            0u);
  EXPECT_EQ(ApplyYamlOverride(root, "model.family.x=1").message(),
            "--set model.family.x=1: model.family: is \"gpt2\", not a map, so it has no key \"x\"");
}

TEST(YamlMap, UnknownKeysSuggestOrList) {
  auto read = [](YamlMap& m) {
    int64_t steps = 0;
    return m.Int("steps", 1, 100, &steps);
  };
  EXPECT_EQ(ReadError("stpes: 3\n", read), "f.yaml:1:1: stpes: unknown key (did you mean \"steps\"?)");
  EXPECT_EQ(ReadError("banana: 3\n", read), "f.yaml:1:1: banana: unknown key (valid keys: steps)");
  EXPECT_EQ(ReadError("steps: 3\nsteps: 4\n", read),
            "f.yaml:2:1: steps: duplicate key (each key may appear once)");
  EXPECT_EQ(ReadError("[1, 2]\n", read), "f.yaml:1:1: (top): expected a map, got a sequence");
}

TEST(YamlMap, IntegersArePlainAndInRange) {
  auto read = [](YamlMap& m) {
    int64_t v = 0;
    return m.Int("n", 1, 10, &v);
  };
  EXPECT_EQ(ReadError("n: 5\n", read), "");
  EXPECT_EQ(ReadError("n: 0\n", read), "f.yaml:1:4: n: must be >= 1, got 0");
  EXPECT_EQ(ReadError("n: 11\n", read), "f.yaml:1:4: n: must be <= 10, got 11");
  EXPECT_EQ(ReadError("n: \"5\"\n", read),
            "f.yaml:1:4: n: expected an integer, got the quoted string \"5\"");
  EXPECT_EQ(ReadError("n: 5.0\n", read), "f.yaml:1:4: n: expected an integer, got \"5.0\"");
  EXPECT_EQ(ReadError("n: 99999999999999999999\n", read),
            "f.yaml:1:4: n: integer out of range, got \"99999999999999999999\"");
  EXPECT_EQ(ReadError("n:\n", read), "f.yaml:1:1: n: expected an integer, got nothing (null)");
}

TEST(YamlMap, FloatsStayInRangeAsThe32BitFloatKept) {
  auto read = [](YamlMap& m) {
    float v = 0;
    return m.Float("beta", kUnitOpen, &v);
  };
  EXPECT_EQ(ReadError("beta: 0.9\n", read), "");
  EXPECT_EQ(ReadError("beta: 1\n", read), "f.yaml:1:7: beta: must be in [0, 1), got 1");
  EXPECT_EQ(ReadError("beta: 0.99999999999\n", read),
            "f.yaml:1:7: beta: must be in [0, 1), got 0.99999999999, which is 1.0 as the 32-bit "
            "float training uses");
  EXPECT_EQ(ReadError("beta: 1e-46\n", read),
            "f.yaml:1:7: beta: number too small for a 32-bit float, got 1e-46");
  EXPECT_EQ(ReadError("beta: .nan\n", read), "f.yaml:1:7: beta: expected a number, got \".nan\"");
  EXPECT_EQ(ReadError("beta: 0x1p-2\n", read), "f.yaml:1:7: beta: expected a number, got \"0x1p-2\"");
}

TEST(YamlMap, BooleansStringsEnumsAndRequiredKeys) {
  EXPECT_EQ(ReadError("on: yes\n",
                      [](YamlMap& m) {
                        bool b = false;
                        return m.Bool("on", &b);
                      }),
            "f.yaml:1:5: on: expected a boolean (true or false), got \"yes\"");
  EXPECT_EQ(ReadError("dir: \"a\\0b\"\n",
                      [](YamlMap& m) {
                        std::string s;
                        return m.String("dir", &s);
                      }),
            "f.yaml:1:6: dir: byte 0x00 at offset 1 of the value is a control character or not "
            "UTF-8 (write printable text)");
  EXPECT_EQ(ReadError("dir: \"\"\n",
                      [](YamlMap& m) {
                        std::string s;
                        return m.NonEmptyString("dir", &s);
                      }),
            "f.yaml:1:6: dir: must not be empty");
  EXPECT_EQ(ReadError("mode: fats\n",
                      [](YamlMap& m) {
                        int v = 0;
                        return m.Enum<int>("mode", {{"fast", 1}, {"slow", 2}}, &v);
                      }),
            "f.yaml:1:7: mode: expected one of fast | slow, got \"fats\" (did you mean \"fast\"?)");
  EXPECT_EQ(ReadError("a: {x: 1}\n",
                      [](YamlMap& m) -> Status {
                        ASSIGN_OR_RETURN(YamlMap a, m.Child("a"));
                        RETURN_IF_ERROR(a.Require("x"));
                        RETURN_IF_ERROR(a.Require("y"));
                        return a.Finish();
                      }),
            "f.yaml:1:4: a.y: required key is missing");
}

TEST(YamlContext, CrossFieldErrorsPointAtAKeyTheFileSet) {
  const YamlNode root = Parse("a: 1\nb: 2\n");
  YamlContext ctx("f.yaml");
  Result<YamlMap> top = YamlMap::Make(&ctx, &root, "");
  ASSERT_TRUE(top.ok());
  int64_t a = 0, b = 0, c = 0;
  ASSERT_TRUE(top->Int("a", 0, 9, &a).ok());
  ASSERT_TRUE(top->Int("b", 0, 9, &b).ok());
  ASSERT_TRUE(top->Int("c", 0, 9, &c).ok());
  EXPECT_EQ(ctx.CrossFieldError({"c", "b", "a"}, "b exceeds a").message(),
            "f.yaml:2:4: b: b exceeds a");
  EXPECT_EQ(ctx.CrossFieldError({"c"}, "c is wrong").message(), "f.yaml: c: c is wrong");
}

}  // namespace
}  // namespace tessera
