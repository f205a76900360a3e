// links: tessera_train
// runtime/train/data/pretokenize and bpe_tokenizer: the three patterns' splits of short texts,
// worked out by hand from the regexes (tests/e2e/tokenizer_test.cc compares long random texts
// with Python's `regex`), and a hand-made tokenizer.json: merges applied lowest rank first,
// added tokens cut out first, ignore_merges, and Decode(Encode(text)) == text.
#include "runtime/train/data/pretokenize.h"

#include <gtest/gtest.h>

#include "runtime/core/json.h"
#include "runtime/train/data/bpe_tokenizer.h"

namespace tessera {
namespace {

std::vector<std::string> Split(std::string_view text, PreTokenizerPattern p) {
  std::vector<std::string> out;
  for (std::string_view v : PreTokenize(text, p)) out.emplace_back(v);
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenize, Gpt2) {
  const auto p = PreTokenizerPattern::kGpt2;
  EXPECT_EQ(Split("Hello world", p), (V{"Hello", " world"}));
  EXPECT_EQ(Split("I'll see it's 2024!!", p), (V{"I", "'ll", " see", " it", "'s", " 2024", "!!"}));
  EXPECT_EQ(Split("I'LL", p), (V{"I", "'", "LL"}));  // case-sensitive contractions
  EXPECT_EQ(Split("a   b", p), (V{"a", "  ", " b"}));  // \s+(?!\S) leaves one space to " b"
  EXPECT_EQ(Split("end  ", p), (V{"end", "  "}));
  EXPECT_EQ(Split("x\n\ny", p), (V{"x", "\n", "\n", "y"}));
  EXPECT_EQ(Split("caf\u00e9 \u6771\u4eac", p), (V{"caf\u00e9", " \u6771\u4eac"}));
}

TEST(PreTokenize, Llama3AndQwen2) {
  const auto l = PreTokenizerPattern::kLlama3, q = PreTokenizerPattern::kQwen2;
  EXPECT_EQ(Split("1234567", l), (V{"123", "456", "7"}));
  EXPECT_EQ(Split("1234", q), (V{"1", "2", "3", "4"}));
  EXPECT_EQ(Split("I'LL go", l), (V{"I", "'LL", " go"}));  // case-insensitive
  EXPECT_EQ(Split("(hello)", l), (V{"(hello", ")"}));       // [^\r\n\p{L}\p{N}]?\p{L}+
  EXPECT_EQ(Split("a.\n\nb", l), (V{"a", ".\n\n", "b"}));   // ?[^\s\p{L}\p{N}]+[\r\n]*
  EXPECT_EQ(Split("a  \n  b", l), (V{"a", "  \n", " ", " b"}));  // \s*[\r\n]+, then \s+(?!\S)
  EXPECT_EQ(Split("x\r\ny", q), (V{"x", "\r\n", "y"}));
  EXPECT_TRUE(RecognizePattern(PatternRegex(l)) == l);
  EXPECT_FALSE(RecognizePattern("\\w+").has_value());
}

// The 256 byte symbols of GPT-2's alphabet, written independently of the tokenizer's table.
std::string ByteSymbol(int b) {
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::unique_ptr<Tokenizer> Tiny(bool ignore_merges) {
  // Ids 0..255 bytes; 256 "he", 257 "ll", 258 "hell", 259 "\u0120w" ("Ġw": space + w), 260 <eot>.
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += JsonQuote(ByteSymbol(b)) + ":" + std::to_string(b) + ",";
  vocab += R"("he":256,"ll":257,"hell":258,"Ġw":259,"Ġwor":261,"Ġwo":262)";
  const std::string json = std::string(R"({"added_tokens":[{"id":260,"content":"<eot>","special":true}],)") +
                           R"("normalizer":null,"pre_tokenizer":{"type":"ByteLevel","use_regex":true},)" +
                           R"("model":{"type":"BPE","ignore_merges":)" + (ignore_merges ? "true" : "false") +
                           R"(,"vocab":{)" + vocab + R"(},"merges":["l l","h e","he ll","Ġ w","Ġw o"]}})";
  auto parsed = ParseJson(json);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto t = MakeBpeTokenizer(*parsed, "<eot>", "tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

TEST(BpeTokenizer, MergesLowestRankFirstAddedTokensFirstAndRoundTrips) {
  auto t = Tiny(false);
  // "hello": h e l l o -> (l l rank 0) h e ll o -> (h e) he ll o -> (he ll) hell o.
  EXPECT_EQ(*t->Encode("hello"), (std::vector<int32_t>{258, 'o'}));
  // " wor" is in the vocabulary but not reachable by merges: Ġw o r without ignore_merges.
  EXPECT_EQ(*t->Encode("x wor"), (std::vector<int32_t>{'x', 262, 'r'}));
  EXPECT_EQ(*t->Encode("a<eot>b"), (std::vector<int32_t>{'a', 260, 'b'}));
  EXPECT_EQ(t->eos(), 260);
  EXPECT_EQ(t->vocab_size(), 263);
  const std::string text = "hello<eot> w\u00f6rld\n\t\U0001F600 \xff";
  EXPECT_EQ(t->Decode(*t->Encode(text)), text);
  EXPECT_EQ(*Tiny(true)->Encode("x wor"), (std::vector<int32_t>{'x', 261}));  // whole
}

// One id for two tokens would make decoding (and what a shard's ids mean) depend on which one
// won; an id far past the vocabulary's size would allocate a table up to it. Both refused.
TEST(BpeTokenizer, SharedAndSparseIdsAreRefusedNamingThem) {
  auto load = [](const std::string& extra, const std::string& added) {
    std::string vocab;
    for (int b = 0; b < 256; ++b) vocab += JsonQuote(ByteSymbol(b)) + ":" + std::to_string(b) + ",";
    const std::string json = R"({"added_tokens":[)" + added + R"(],"pre_tokenizer":{"type":"ByteLevel","use_regex":true},)"
                             R"("model":{"type":"BPE","vocab":{)" + vocab + extra + R"(},"merges":["h e"]}})";
    auto parsed = ParseJson(json);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    return MakeBpeTokenizer(*parsed, "", "tokenizer.json");
  };
  auto shared = load(R"("he":104)", "");
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(shared.status().message().find("id 104 is both"), std::string::npos) << shared.status().ToString();
  auto added = load(R"("he":256)", R"({"id":256,"content":"<eot>"})");
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.status().message().find("id 256 is both"), std::string::npos) << added.status().ToString();
  auto sparse = load(R"("he":100000000)", "");
  ASSERT_FALSE(sparse.ok());
  EXPECT_NE(sparse.status().message().find("ids reach 100000000 for 257 tokens"), std::string::npos)
      << sparse.status().ToString();
  // An added token that is also in the vocabulary under the same id is one token.
  EXPECT_TRUE(load(R"("he":256,"<eot>":257)", R"({"id":257,"content":"<eot>"})").ok());
}

}  // namespace
}  // namespace tessera
