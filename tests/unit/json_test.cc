// runtime/core/json: parse, write, and refuse hostile input without crashing.
// links: tessera_core
#include <gtest/gtest.h>

#include "runtime/core/json.h"

namespace tessera {
namespace {

TEST(Json, ParsesNestedDocument) {
  auto r = ParseJson(R"( {"a": [1, -2.5e1, true, null], "b": {"c": "x\"\u00e9\ud83d\ude00"},
                          "big": 9007199254740993} )");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JsonValue& v = *r;
  ASSERT_TRUE(v.is_object());
  const JsonValue* a = v.Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items().size(), 4u);
  EXPECT_TRUE(a->items()[0].is_integer());
  EXPECT_EQ(a->items()[0].as_int(), 1);
  EXPECT_DOUBLE_EQ(a->items()[1].as_double(), -25.0);
  EXPECT_TRUE(a->items()[2].as_bool());
  EXPECT_TRUE(a->items()[3].is_null());
  EXPECT_EQ(v.Find("b")->Find("c")->as_string(), "x\"\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.Find("big")->as_int(), 9007199254740993LL);  // exact past 2^53
  EXPECT_EQ(v.Find("missing"), nullptr);
}

TEST(Json, RejectsMalformedInputWithOffsets) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "{\"a\":1,\"a\":2}", "\"\\x\"", "01",
                          "1 2", "{\"a\":\"\x01\"}", "\"\\ud800\"", "nul", "-", "1.", "1e"}) {
    auto r = ParseJson(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("JSON error at byte"), std::string::npos);
    }
  }
}

TEST(Json, DepthIsBounded) {
  std::string deep(100000, '[');
  auto r = ParseJson(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nesting"), std::string::npos);
}

TEST(Json, ValueCountIsBoundedAndHugeNumbersAreNotIntegers) {
  auto many = ParseJson("[0,0,0,0,0]", 4);
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("more than 4 values"), std::string::npos);
  auto huge = ParseJson("[1e999, 99999999999999999999999]");
  ASSERT_TRUE(huge.ok());
  EXPECT_FALSE(huge->items()[0].is_integer());
  EXPECT_FALSE(huge->items()[1].is_integer());  // past int64: a double, never a wrapped int
}

TEST(Json, WriterRoundTrips) {
  JsonWriter w;
  w.BeginObject().Key("s").String("a\nb").Key("i").Int(-7).Key("d").Double(0.1)
      .Key("arr").BeginArray().Int(1).Bool(false).Null().EndArray().EndObject();
  EXPECT_EQ(w.str(), R"({"s":"a\nb","i":-7,"d":0.1,"arr":[1,false,null]})");
  auto r = ParseJson(w.str());
  ASSERT_TRUE(r.ok());
  JsonWriter w2;
  w2.Value(*r);
  EXPECT_EQ(w2.str(), w.str());
}

}  // namespace
}  // namespace tessera
