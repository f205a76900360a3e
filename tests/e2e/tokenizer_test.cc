// tests/e2e/tokenizer_test.cc — `tessera data tokenize --tokenizer DIR` against independent
// implementations: byte-level BPE tokenizer.json files in the layout of GPT-2's, Llama 3's and
// Qwen2's (built by tests/e2e/reference/bpe_reference.py from a corpus) encoded by the
// reference (GPT-2's algorithm over Python's `regex` running the pattern as tokenizer.json
// writes it) on text full of Unicode letters, digits of several scripts, contractions in both
// cases, every kind of whitespace and special tokens; a SentencePiece model trained by
// spm_train, encoded by spm_encode. Also: the shards do not depend on the thread count, an NFC
// tokenizer encodes a decomposed text as the composed one (the reference normalizes with
// Python's unicodedata), a damaged tokenizer.json is refused naming the file, and the shards
// train.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "runtime/core/exit_codes.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool HaveReference() {
  return RunCommand("/usr/bin/python3 -c 'import regex, numpy'").exit_code == 0;
}

// Random text from a pool that exercises every branch of the three patterns.
std::string StressText(uint32_t seed, int pieces) {
  static const char* kPool[] = {
      "a", "b", "c", "X", "Y", "Z", " ", "'s", "'S", "'ll", "'LL", "'ve", "'d", "'t", "'re", "'M",
      "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "\u0661\u0662\u0663", "\uff11\uff12",
      "\u00b2", "\u00bd", "\u216b", ".", ",", ";", "!", "?", "-", "\u2014", "(", ")", "\"", "'",
      "/", "@", " ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2028",
      "\u00e9", "\u00fc", "\u00df", "\u0416", "\u6771", "\u4eac", "\ud55c", "\uae00",
      "\U0001F600", "\U0001F44D\U0001F3FD", "\u03b1", "\u03c9", "<|endoftext|>",
      // what NFC changes: combining marks (in either order), a singleton, an exclusion, jamo
      "e\u0301", "\u0301", "a\u0307\u0323", "a\u0323\u0307", "\u212b", "\u0958",
      "\u1100\u1161\u11a8", "\uac00\u11a8"};
  std::mt19937 gen(seed);
  std::uniform_int_distribution<size_t> pick(0, std::size(kPool) - 1);
  std::string s;
  for (int i = 0; i < pieces; ++i) s += kPool[pick(gen)];
  return s;
}

class Tokenize : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveReference()) GTEST_SKIP() << "python3-regex / python3-numpy are not installed";
    for (int i = 0; i < 3; ++i) {
      texts_.push_back(dir_ / ("text" + std::to_string(i) + ".txt"));
      WriteFile(texts_.back(), StressText(11 + i, 3000));
    }
    std::string corpus;
    for (const std::string& t : texts_) corpus += ReadFile(t);
    WriteFile(dir_ / "corpus.txt", corpus);
  }
  std::string Reference(const std::string& args) {
    CommandResult r = RunCommand("/usr/bin/python3 " + Repo("tests/e2e/reference/bpe_reference.py") +
                                 " " + args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }
  std::string Inputs() const {
    std::string s;
    for (const std::string& t : texts_) s += " " + t;
    return s;
  }
  CommandResult Run(const std::string& tokenizer, const std::string& out, int threads) {
    return Tessera("data tokenize --tokenizer " + tokenizer + " --input" + Inputs() + " --out " +
                   out + " --val-fraction 0 --threads " + std::to_string(threads));
  }
  TempDir dir_{"tokenize"};
  std::vector<std::string> texts_;
};

TEST_F(Tokenize, ByteLevelBpeEncodesAsTheReferenceForEveryPattern) {
  for (const char* pattern : {"gpt2", "llama3", "qwen2"}) {
    SCOPED_TRACE(pattern);
    const std::string tok = dir_ / pattern;
    // Qwen2's tokenizer normalizes to NFC, as the released one does.
    Reference("build --pattern " + std::string(pattern) + " --corpus " + (dir_ / "corpus.txt") +
              " --merges 400 --out " + tok + (std::string(pattern) == "qwen2" ? " --nfc" : ""));
    CommandResult one = Run(tok, dir_ / (std::string(pattern) + "_1"), 1);
    ASSERT_EQ(one.exit_code, 0) << one.output;
    EXPECT_TRUE(Contains(one.output, std::string(pattern) + " pre-tokenizer")) << one.output;
    EXPECT_TRUE(Contains(Reference("check --dir " + tok + " --shards " + (dir_ / (std::string(pattern) + "_1")) +
                                   Inputs()),
                         "tokens identical"));
    // Two threads: the same shard bytes.
    CommandResult two = Run(tok, dir_ / (std::string(pattern) + "_2"), 2);
    ASSERT_EQ(two.exit_code, 0) << two.output;
    EXPECT_EQ(ReadFile(dir_ / (std::string(pattern) + "_1/train_000000.bin")),
              ReadFile(dir_ / (std::string(pattern) + "_2/train_000000.bin")));
  }
}

TEST_F(Tokenize, TheShardsTrainAModelOfTheTokenizersVocabulary) {
  const std::string tok = dir_ / "llama3";
  Reference("build --pattern llama3 --corpus " + (dir_ / "corpus.txt") + " --merges 200 --out " + tok);
  CommandResult t = Tessera("data tokenize --tokenizer " + tok + " --input" + Inputs() + " --out " +
                            (dir_ / "shards") + " --val-fraction 0.1");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  CommandResult train = Tessera("train " + Repo("configs/llama-tiny.yaml") +
                                " --set model.vocab_size=512 --set data.source=shards"
                                " --set data.train=" + (dir_ / "shards/train_*.bin") +
                                " --set data.val=" + (dir_ / "shards/val_*.bin") +
                                " --set train.steps=3 --set train.out_dir=" + (dir_ / "run"));
  EXPECT_EQ(train.exit_code, 0) << train.output;
}

TEST_F(Tokenize, NfcNormalizesAndDamagedTokenizersAreRefusedNamingWhy) {
  const std::string tok = dir_ / "nfc";
  Reference("build --pattern qwen2 --nfc --corpus " + (dir_ / "corpus.txt") + " --merges 50 --out " + tok);
  WriteFile(dir_ / "composed.txt", "caf\u00e9 \u6771\u4eac");
  CommandResult ok = Tessera("data tokenize --tokenizer " + tok + " --input " + (dir_ / "composed.txt") +
                             " --out " + (dir_ / "nfc_ok") + " --val-fraction 0");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(Contains(ok.output, ", NFC)")) << ok.output;
  // e + combining acute: NFC composes it, so the shard is the composed text's.
  WriteFile(dir_ / "decomposed.txt", "cafe\u0301 \u6771\u4eac");
  CommandResult decomposed = Tessera("data tokenize --tokenizer " + tok + " --input " +
                                     (dir_ / "decomposed.txt") + " --out " + (dir_ / "nfc_composed") +
                                     " --val-fraction 0");
  ASSERT_EQ(decomposed.exit_code, 0) << decomposed.output;
  EXPECT_EQ(ReadFile(dir_ / "nfc_ok/train_000000.bin"), ReadFile(dir_ / "nfc_composed/train_000000.bin"));

  const std::string json = ReadFile(tok + "/tokenizer.json");
  WriteFile(tok + "/tokenizer.json", json.substr(0, json.size() / 2));  // cut short
  CommandResult cut = Tessera("data tokenize --tokenizer " + tok + " --input " + (dir_ / "composed.txt") +
                              " --out " + (dir_ / "cut"));
  EXPECT_EQ(cut.exit_code, kExitBadInput) << cut.output;
  EXPECT_TRUE(Contains(cut.output, tok + "/tokenizer.json: not JSON")) << cut.output;
  std::string metaspace = json;
  metaspace.replace(metaspace.find("\"Sequence\""), 10, "\"Metaspace\"");
  WriteFile(tok + "/tokenizer.json", metaspace);
  CommandResult other = Tessera("data tokenize --tokenizer " + tok + " --input " + (dir_ / "composed.txt") +
                                " --out " + (dir_ / "other"));
  EXPECT_NE(other.exit_code, 0);
  EXPECT_TRUE(Contains(other.output, "pre_tokenizer 'Metaspace' is not byte-level")) << other.output;
  CommandResult none = Tessera("data tokenize --tokenizer " + dir_.str() + " --input " +
                               (dir_ / "composed.txt") + " --out " + (dir_ / "none"));
  EXPECT_EQ(none.exit_code, kExitBadInput) << none.output;
  EXPECT_TRUE(Contains(none.output, "holds neither tokenizer.json")) << none.output;
}

TEST_F(Tokenize, SentencePieceEncodesAsSpmEncode) {
  if (RunCommand("command -v spm_train spm_encode").exit_code != 0) {
    GTEST_SKIP() << "sentencepiece (spm_train, spm_encode) is not installed";
  }
  // One line per document: spm_encode encodes line by line.
  WriteFile(dir_ / "lines.txt", "Hello world, na\u00efve caf\u00e9 12345\n\u6771\u4eac \u041f\u0440\u0438\u0432\u0435\u0442 'quoted' text\n");
  CommandResult trained = RunCommand("cd " + dir_.str() + " && spm_train --input=corpus.txt,lines.txt "
                                     "--model_prefix=spm --vocab_size=200 --model_type=bpe "
                                     "--character_coverage=1.0 > spm.log 2>&1");
  ASSERT_EQ(trained.exit_code, 0) << ReadFile(dir_ / "spm.log");
  fs::create_directories(dir_ / "spm");
  fs::copy_file(dir_ / "spm.model", dir_ / "spm/tokenizer.model");
  WriteFile(dir_ / "doc.txt", "Hello world, na\u00efve caf\u00e9 12345");
  CommandResult t = Tessera("data tokenize --tokenizer " + (dir_ / "spm") + " --input " + (dir_ / "doc.txt") +
                            " --out " + (dir_ / "sp_out") + " --val-fraction 0");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  CommandResult want = RunCommand("spm_encode --model=" + (dir_ / "spm.model") +
                                  " --output_format=id < " + (dir_ / "doc.txt"));
  ASSERT_EQ(want.exit_code, 0) << want.output;
  CommandResult got = RunCommand("/usr/bin/python3 -c \"import struct,numpy,sys; d=open(sys.argv[1],'rb').read(); "
                                 "w,c=struct.unpack('<IQ',d[12:24]); "
                                 "print(' '.join(map(str, numpy.frombuffer(d[32:32+c*w],dtype='<u2')[:-1])))\" " +
                                 (dir_ / "sp_out/train_000000.bin"));
  ASSERT_EQ(got.exit_code, 0) << got.output;
  EXPECT_EQ(got.output, want.output);  // and the eos after it (dropped above)
}

}  // namespace
}  // namespace tessera::testing
