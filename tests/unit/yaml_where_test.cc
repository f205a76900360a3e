// links: tessera_core
// tests/unit/yaml_where_test.cc — the one spelling of a YAML error's position
// (runtime/core/yaml_input.h YamlWhere), shared by the config and chaos scenario readers.
#include <gtest/gtest.h>

#include "runtime/core/yaml_input.h"

namespace tessera {
namespace {

TEST(YamlWhere, ZeroBasedMarkBecomesOneBasedLineAndColumn) {
  EXPECT_EQ(YamlWhere("configs/llama.yaml", 40, 2), "configs/llama.yaml:41:3");
  EXPECT_EQ(YamlWhere("f", 0, 0), "f:1:1");
}

TEST(YamlWhere, NullMarkNamesTheFileOnly) { EXPECT_EQ(YamlWhere("f.yaml", -1, -1), "f.yaml"); }

TEST(YamlWhere, PreCheckErrorsUseIt) {
  const Status s = CheckYamlInput("a: 1\n---\nb: 2\n", "s.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("s.yaml:2:1: ", 0), 0u) << s.message();
}

}  // namespace
}  // namespace tessera
