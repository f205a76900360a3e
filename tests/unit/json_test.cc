// runtime/core/json: parse, write, and refuse hostile input without crashing.
// links: tessera_core
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

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
  auto huge = ParseJson("[1e300, 99999999999999999999999]");
  ASSERT_TRUE(huge.ok());
  EXPECT_FALSE(huge->items()[0].is_integer());
  EXPECT_FALSE(huge->items()[1].is_integer());  // past int64: a double, never a wrapped int
}

// 1e999 used to read as infinity, which the writer writes as null: a manifest's "state" or
// "stall_seconds" changed value when rewritten (found by tests/fuzz/manifest_fuzz.cc).
TEST(Json, NumbersBeyondTheRangeOfADoubleAreRefusedWhereTheyStart) {
  for (const char* text : {"[1, 1e999]", "[1, -1e999]", "[1, 1e+400]"}) {
    auto r = ParseJson(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("JSON error at byte 4: number "), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("outside the range of a double"), std::string::npos);
  }
  // Tiny numbers underflow towards zero, which is still a value that can be written back.
  auto tiny = ParseJson("1e-400");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->as_double(), 0.0);
}

// Negative zero was written "-0", which reads back as the integer 0: the sign was lost and a
// control-protocol frame re-encoded differently (found by tests/fuzz/control_frame_fuzz.cc).
TEST(Json, NegativeZeroReadsBackAsNegativeZero) {
  JsonWriter w;
  w.BeginArray().Double(-0.0).Double(0.0).Double(-2.0).EndArray();
  EXPECT_EQ(w.str(), "[-0.0,0,-2]");
  auto r = ParseJson(w.str());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->items()[0].is_integer());
  EXPECT_TRUE(std::signbit(r->items()[0].as_double()));
  EXPECT_TRUE(r->items()[1].is_integer());
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

// {"k0":0,"k1":1,...} with `n` members, without the closing brace.
std::string ManyKeysOpen(int n) {
  std::string s = "{";
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ',';
    s += "\"k" + std::to_string(i) + "\":" + std::to_string(i);
  }
  return s;
}

double SecondsToParse(const std::string& text, Result<JsonValue>* out) {
  const auto t0 = std::chrono::steady_clock::now();
  *out = ParseJson(text);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Duplicate detection used to compare each key with every earlier one: 40k keys took ~4 s.
TEST(Json, ManyDistinctKeysParseInNearLinearTime) {
  constexpr int kKeys = 200000;
  const std::string text = ManyKeysOpen(kKeys) + "}";
  Result<JsonValue> r = DataLoss("unset");
  const double seconds = SecondsToParse(text, &r);
  std::printf("parsed %d distinct keys (%zu bytes) in %.3f s\n", kKeys, text.size(), seconds);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(seconds, 5.0);  // quadratic: minutes; near-linear: well under 0.5 s
  ASSERT_EQ(r->members().size(), static_cast<size_t>(kKeys));
  for (int i : {0, 1, 15, 16, 17, 99999, kKeys - 1}) {  // order kept, values attached
    EXPECT_EQ(r->members()[i].first, "k" + std::to_string(i));
    EXPECT_EQ(r->members()[i].second.as_int(), i);
  }
  EXPECT_EQ(r->Find("k123456")->as_int(), 123456);
}

TEST(Json, DuplicateAmongManyKeysIsNamedWithItsOffset) {
  const std::string prefix = ManyKeysOpen(200000) + ",";
  const std::string text = prefix + "\"k4242\":7}";
  Result<JsonValue> r = DataLoss("unset");
  const double seconds = SecondsToParse(text, &r);
  std::printf("found the duplicate among 200000 keys in %.3f s\n", seconds);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(seconds, 5.0);
  // The offset is the byte just past the repeated key, as for small objects.
  const std::string want = "JSON error at byte " + std::to_string(prefix.size() + 7) +
                           ": duplicate key \"k4242\"";
  EXPECT_EQ(r.status().message(), want);
}

// The switch from scanning to indexing happens past 16 members: a repeat is found on either
// side of it, against the first key, the last, and keys only equal after unescaping.
TEST(Json, DuplicatesAreFoundAtEverySizeAroundTheThreshold) {
  for (int n = 1; n <= 40; ++n) {
    for (int dup : {0, n / 2, n - 1}) {
      const std::string prefix = ManyKeysOpen(n) + ",";
      const std::string text = prefix + "\"k" + std::to_string(dup) + "\":0}";
      auto r = ParseJson(text);
      ASSERT_FALSE(r.ok()) << text;
      EXPECT_EQ(r.status().message(),
                "JSON error at byte " + std::to_string(prefix.size() + 3 + std::to_string(dup).size()) +
                    ": duplicate key \"k" + std::to_string(dup) + "\"")
          << "n=" << n << " dup=" << dup;
    }
    auto ok = ParseJson(ManyKeysOpen(n) + ",\"k" + std::to_string(n) + "\":0}");
    ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    EXPECT_EQ(ok->members().size(), static_cast<size_t>(n + 1));
    EXPECT_EQ(ok->members().back().first, "k" + std::to_string(n));
  }
  // "\u006b1" is "k1" once unescaped, in a small and in a large object.
  for (int n : {4, 30}) {
    auto r = ParseJson(ManyKeysOpen(n) + ",\"\\u006b1\":0}");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("duplicate key \"k1\""), std::string::npos);
  }
}

TEST(Json, SmallObjectsKeepOrderAndErrors) {
  auto r = ParseJson(R"({"z":1,"a":2,"m":{"b":1,"a":2},"":3})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->members().size(), 4u);
  EXPECT_EQ(r->members()[0].first, "z");
  EXPECT_EQ(r->members()[1].first, "a");
  EXPECT_EQ(r->members()[2].second.members()[0].first, "b");
  EXPECT_EQ(r->members()[3].first, "");
  // The same key in sibling objects is not a duplicate; in one object it is.
  EXPECT_TRUE(ParseJson(R"([{"a":1},{"a":2}])").ok());
  EXPECT_TRUE(ParseJson(R"({"a":{"a":{"a":1}}})").ok());
  auto dup = ParseJson(R"({"a":1,"b":{"a":2},"a":3})");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(), "JSON error at byte 22: duplicate key \"a\"");
}

}  // namespace
}  // namespace tessera
