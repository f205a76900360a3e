// tests/unit/checkpoint_format_test.cc — the checkpoint format layer: CRC-32C (known vectors,
// hardware = portable = bitwise reference, incremental = one-shot, throughput), the manifest
// (round trip; hostile manifests rejected naming the entry; coverage gaps and overlaps), and
// shard files (segment size and alignment, verified partial reads, corruption, truncation and
// missing files detected, a failed write refusing further work).
// links: tessera_checkpoint
#include <gtest/gtest.h>

#include <limits>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/crc32c.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "runtime/core/file_util.h"
#include "tests/fault/faulty_file_system.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

using testing::FaultyFileSystem;
using testing::ScopedTempDir;

// Timing assertions hold for the optimised build only (Debug and sanitizer builds are 10-50x
// slower); elsewhere the timed tests still run, on less data, for their correctness checks.
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
constexpr bool kOptimizedBuild = true;
#else
constexpr bool kOptimizedBuild = false;
#endif

// ---------------------------------------------------------------------------------------------
// CRC-32C

// Bit at a time, straight from the definition: the oracle for both fast paths.
uint32_t BitwiseCrc32c(const void* data, size_t n, uint32_t crc = 0) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  EXPECT_EQ(Crc32c(nullptr, 0, 0x12345678u), 0x12345678u);  // extending by nothing
  // RFC 3720 (iSCSI) B.4 vectors.
  std::vector<uint8_t> buf(32, 0);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xff);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x46DD794Eu);
}

TEST(Crc32c, FastPathsMatchBitwiseReference) {
  // Lengths around every stream boundary (3 x 256, 3 x 8192) and misaligned starts.
  const std::vector<uint8_t> data = RandomBytes(3 * 8192 * 2 + 3 * 256 + 100, 1);
  for (size_t len : {0ul, 1ul, 7ul, 8ul, 9ul, 63ul, 767ul, 768ul, 769ul, 1000ul, 24575ul, 24576ul,
                     24577ul, 24576ul + 768ul + 5ul, 49152ul, 49152ul + 868ul}) {
    for (size_t start : {0ul, 1ul, 3ul, 7ul}) {
      if (start + len > data.size()) continue;
      const uint32_t want = BitwiseCrc32c(data.data() + start, len);
      EXPECT_EQ(Crc32c(data.data() + start, len), want) << "len " << len << " start " << start;
      EXPECT_EQ(Crc32cPortable(data.data() + start, len), want) << "len " << len;
    }
  }
  // Random lengths.
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const size_t start = rng() % 64, len = rng() % (data.size() - 64);
    EXPECT_EQ(Crc32c(data.data() + start, len), Crc32cPortable(data.data() + start, len));
  }
}

TEST(Crc32c, IncrementalEqualsOneShot) {
  const std::vector<uint8_t> data = RandomBytes(100000, 2);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {0ul, 1ul, 5ul, 4096ul, 24577ul, 50000ul, 99999ul, 100000ul}) {
    EXPECT_EQ(Crc32c(data.data() + split, data.size() - split, Crc32c(data.data(), split)), whole);
    EXPECT_EQ(Crc32cPortable(data.data() + split, data.size() - split,
                             Crc32cPortable(data.data(), split)),
              whole);
  }
  // Many small pieces.
  uint32_t c = 0;
  for (size_t pos = 0; pos < data.size(); pos += 37) {
    c = Crc32c(data.data() + pos, std::min<size_t>(37, data.size() - pos), c);
  }
  EXPECT_EQ(c, whole);
}

TEST(Crc32c, Throughput) {
  const size_t n = kOptimizedBuild ? size_t{64} << 20 : size_t{4} << 20;
  const std::vector<uint8_t> data = RandomBytes(n, 3);
  auto gbps = [&](uint32_t (*f)(const void*, size_t, uint32_t), int reps) {
    uint32_t sink = f(data.data(), n, 0);  // warm
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) sink ^= f(data.data(), n, sink);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(sink, 0x5a5a5a5au);  // keep the calls
    return static_cast<double>(n) * reps / s / 1e9;
  };
  const double hw = gbps(&Crc32c, 4);
  const double portable = gbps(&Crc32cPortable, 1);
  std::printf("crc32c: %.2f GB/s (%s), portable %.2f GB/s\n", hw,
              Crc32cHardwareAvailable() ? "sse4.2, 3 streams" : "no sse4.2", portable);
  ::testing::Test::RecordProperty("crc32c_gbps", std::to_string(hw));
  // Far faster than any disk in either case.
  if (kOptimizedBuild) {
    EXPECT_GT(portable, 0.2);
    if (Crc32cHardwareAvailable()) {
      EXPECT_GT(hw, 2.0);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Manifest

Manifest SampleManifest() {
  Manifest m;
  m.step = 1234;
  m.tensors = {{"param/wte.weight", {4, 3}, DType::kF32},
               {"exp_avg/wte.weight", {4, 3}, DType::kBF16},
               {"param/empty", {0, 5}, DType::kF16}};
  ShardRecord s0{0, "shard_0.bin", 1000, {}};
  s0.segments.push_back({"param/wte.weight", 0, 6, 0, 0xdeadbeefu});
  s0.segments.push_back({"exp_avg/wte.weight", 0, 12, 64, 7});
  ShardRecord s1{1, "shard_1.bin", 200, {}};
  s1.segments.push_back({"param/wte.weight", 6, 12, 0, 0xffffffffu});
  m.shards = {s0, s1};
  m.state = JsonValue::Object({{"step", JsonValue::Integer(1234)},
                               {"loss_scale", JsonValue::Number(65536.0)}});
  m.layout = JsonValue::Object({{"dp", JsonValue::Integer(2)}, {"zero", JsonValue::Integer(1)}});
  m.config_yaml = "model:\n  n_layer: 2\n  name: \"x\"\n";
  m.environment = JsonValue::Object({{"git", JsonValue::String("abc")}});
  m.stall_seconds = 0.25;
  m.write_seconds = 1.5;
  m.total_bytes = uint64_t{1} << 41;
  return m;
}

TEST(Manifest, RoundTrip) {
  const Manifest m = SampleManifest();
  const std::string text = SerializeManifest(m);
  Result<Manifest> back = ParseManifest(text, "step_1234/manifest.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, m.step);
  ASSERT_EQ(back->tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->tensors[i].name, m.tensors[i].name);
    EXPECT_EQ(back->tensors[i].shape, m.tensors[i].shape);
    EXPECT_EQ(back->tensors[i].dtype, m.tensors[i].dtype);
  }
  ASSERT_EQ(back->shards.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(back->shards[s].rank, m.shards[s].rank);
    EXPECT_EQ(back->shards[s].file, m.shards[s].file);
    EXPECT_EQ(back->shards[s].bytes, m.shards[s].bytes);
    ASSERT_EQ(back->shards[s].segments.size(), m.shards[s].segments.size());
    for (size_t k = 0; k < m.shards[s].segments.size(); ++k) {
      const SegmentRecord& a = back->shards[s].segments[k];
      const SegmentRecord& b = m.shards[s].segments[k];
      EXPECT_EQ(a.tensor, b.tensor);
      EXPECT_EQ(a.begin, b.begin);
      EXPECT_EQ(a.end, b.end);
      EXPECT_EQ(a.offset, b.offset);
      EXPECT_EQ(a.crc32c, b.crc32c);
    }
  }
  EXPECT_EQ(back->state.Find("step")->as_int(), 1234);
  EXPECT_EQ(back->state.Find("loss_scale")->as_double(), 65536.0);
  EXPECT_EQ(back->layout.Find("dp")->as_int(), 2);
  EXPECT_EQ(back->config_yaml, m.config_yaml);
  EXPECT_EQ(back->environment.Find("git")->as_string(), "abc");
  EXPECT_EQ(back->stall_seconds, 0.25);
  EXPECT_EQ(back->write_seconds, 1.5);
  EXPECT_EQ(back->total_bytes, m.total_bytes);
  EXPECT_EQ(SerializeManifest(*back), text);  // stable
  ASSERT_NE(back->FindTensor("exp_avg/wte.weight"), nullptr);
  EXPECT_EQ(back->FindTensor("exp_avg/wte.weight")->numel(), 12);
  EXPECT_EQ(back->FindTensor("nope"), nullptr);
}

// ParseManifest rejects the text with kDataLoss, naming the file and `needle`.
void ExpectRejected(const std::string& text, const std::string& needle) {
  Result<Manifest> r = ParseManifest(text, "ckpt/manifest.json");
  ASSERT_FALSE(r.ok()) << "accepted; expected an error about " << needle;
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find("ckpt/manifest.json"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "wanted \"" << needle << "\" in: " << r.status().ToString();
}

template <typename Edit>
void ExpectEditRejected(Edit edit, const std::string& needle) {
  Manifest m = SampleManifest();
  edit(m);
  ExpectRejected(SerializeManifest(m), needle);
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

// A hand edit of a sealed manifest that also recomputes its checksum, as a deliberate forger
// (or a buggy tool) would: what the validation behind the checksum must still catch.
std::string Edit(const std::string& sealed, const std::string& from, const std::string& to) {
  Result<std::string> json = UnsealManifestJson(sealed, "edit");
  EXPECT_TRUE(json.ok()) << json.status().ToString();
  return SealManifestJson(Replace(json.ok() ? *json : sealed, from, to));
}

TEST(Manifest, RejectsBadNamesAndPaths) {
  ExpectEditRejected([](Manifest& m) { m.tensors[0].name = ""; }, "tensors[0].name");
  ExpectEditRejected([](Manifest& m) { m.tensors[0].name = "has space"; }, "tensors[0].name");
  ExpectEditRejected([](Manifest& m) { m.tensors[0].name = "ctl\x01"; }, "tensors[0].name");
  ExpectEditRejected([](Manifest& m) { m.tensors[0].name = std::string(2000, 'a'); },
                     "tensors[0].name");
  ExpectEditRejected([](Manifest& m) { m.tensors[1].name = m.tensors[0].name; }, "listed twice");
  for (const char* bad : {"../x", "/abs", "shard_1.bin/..", "shard_1.bin/../../etc", "shard_.bin",
                          "shard_1.bin.tmp", "shard_a.bin", "x/shard_1.bin", "shard_1.bin\n",
                          "shard_12345678901.bin", ".", ""}) {
    SCOPED_TRACE(bad);
    ExpectEditRejected([&](Manifest& m) { m.shards[1].file = bad; }, "shards[1].file");
  }
  ExpectEditRejected([](Manifest& m) { m.shards[1].file = "shard_0.bin"; }, "listed twice");
  ExpectEditRejected([](Manifest& m) { m.shards[0].rank = -1; }, "shards[0].rank");
}

TEST(Manifest, RejectsBadShapesAndDtypes) {
  ExpectEditRejected([](Manifest& m) { m.tensors[2].shape = {-1, 5}; }, "tensors[2].shape");
  ExpectEditRejected([](Manifest& m) { m.tensors[2].shape = {int64_t{1} << 40, 2}; },
                     "tensors[2].shape");
  ExpectEditRejected([](Manifest& m) {
    m.tensors[2].shape = {int64_t{1} << 32, int64_t{1} << 32, int64_t{1} << 32};  // overflows
  }, "tensors[2].shape");
  ExpectEditRejected([](Manifest& m) { m.tensors[2].shape = std::vector<int64_t>(17, 1); },
                     "tensors[2].shape");
  const std::string text = SerializeManifest(SampleManifest());
  ExpectRejected(Edit(text, "\"dtype\":\"bf16\"", "\"dtype\":\"f64\""), "tensors[1].dtype");
  ExpectRejected(Edit(text, "\"dtype\":\"bf16\"", "\"dtype\":\"BF16\""), "tensors[1].dtype");
  ExpectRejected(Edit(text, "\"dtype\":\"bf16\"", "\"dtype\":7"), "tensors[1].dtype");
  ExpectRejected(Edit(text, "\"shape\":[4,3]", "\"shape\":[4,3.5]"), "tensors[0].shape");
  ExpectRejected(Edit(text, "\"shape\":[4,3]", "\"shape\":[4,99999999999999999999]"),
                 "tensors[0].shape");
}

TEST(Manifest, RejectsBadSegments) {
  ExpectEditRejected([](Manifest& m) { m.shards[1].segments[0].end = 13; }, "shards[1].segments[0]");
  ExpectEditRejected([](Manifest& m) { m.shards[1].segments[0].begin = -1; }, "shards[1].segments[0]");
  ExpectEditRejected([](Manifest& m) { m.shards[1].segments[0].begin = 12; }, "shards[1].segments[0]");
  ExpectEditRejected([](Manifest& m) { m.shards[1].segments[0].tensor = "ghost"; },
                     "shards[1].segments[0].tensor");
  // Bytes past the shard: 6 f32 = 24 bytes at offset 180 of 200.
  ExpectEditRejected([](Manifest& m) { m.shards[1].segments[0].offset = 180; },
                     "extend past the shard");
  ExpectEditRejected([](Manifest& m) { m.shards[1].segments[0].offset = uint64_t{1} << 62; },
                     "extend past the shard");
  // Two segments sharing bytes of shard_0.bin: [0, 24) and [16, 40).
  ExpectEditRejected([](Manifest& m) { m.shards[0].segments[1].offset = 16; }, "overlap in the file");
  // Two segments covering the same elements of a tensor (different shards).
  ExpectEditRejected([](Manifest& m) { m.shards[1].segments[0].begin = 5; }, "overlap");
  // A gap.
  ExpectEditRejected([](Manifest& m) { m.shards[1].segments[0].begin = 7; }, "[6, 7) are in no segment");
  const std::string text = SerializeManifest(SampleManifest());
  ExpectRejected(Edit(text, "\"crc32c\":7", "\"crc32c\":4294967296"), "crc32c");
  ExpectRejected(Edit(text, "\"crc32c\":7", "\"crc32c\":-7"), "crc32c");
  ExpectRejected(Edit(text, "\"offset\":64", "\"offset\":\"64\""), "offset");
}

TEST(Manifest, RejectsStructuralDamage) {
  const std::string text = SerializeManifest(SampleManifest());
  ExpectRejected(Edit(text, "\"version\":2", "\"version\":3"), "version 3");
  ExpectRejected(Edit(text, "\"version\":2,", ""), "version");
  ExpectRejected(Edit(text, "\"format\":\"tessera-checkpoint\"", "\"format\":\"other\""),
                 "format");
  ExpectRejected(Edit(text, "\"step\":1234", "\"step\":-3"), "step");
  ExpectRejected(Edit(text, "\"step\":1234", "\"step\":1234,\"extra\":1"), "unknown key");
  ExpectRejected(Edit(text, "\"rank\":1,", "\"rank\":1,\"x\":0,"), "shards[1]: unknown key");
  ExpectRejected(Edit(text, "\"layout\":{", "\"layout\":[{") + "", "");  // malformed JSON
  ExpectRejected(Edit(text, ",\"total_bytes\":2199023255552", ""), "total_bytes");
  ExpectRejected(Edit(text, "\"stall_seconds\":0.25", "\"stall_seconds\":-1"), "stall_seconds");
  ExpectRejected(Edit(text, "\"state\":{", "\"state\":[],\"x\":{"), "");
  ExpectRejected(text.substr(0, text.size() / 2), "truncated");
  ExpectRejected(SealManifestJson(text.substr(0, text.size() / 2) + "}"), "JSON");
  ExpectRejected("[]", "no metadata checksum");
  ExpectRejected(SealManifestJson("{\"a\":[1]}"), "not a Tessera checkpoint manifest");
  ExpectRejected("", "");
}

// Every field a resume uses is covered: flipping any single bit anywhere in the file — a
// digit of the step, a letter of a tensor name, a segment's offset or CRC, the trainer's
// state, the config — is refused, never loaded as a different checkpoint.
TEST(Manifest, EveryBitFlipAnywhereIsRefused) {
  const std::string text = SerializeManifest(SampleManifest());
  ASSERT_TRUE(ParseManifest(text, "m").ok());
  int refused = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = text;
      damaged[i] = static_cast<char>(damaged[i] ^ (1 << bit));
      Result<Manifest> r = ParseManifest(damaged, "m");
      EXPECT_FALSE(r.ok()) << "byte " << i << " bit " << bit << " loaded";
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
        ++refused;
      }
    }
  }
  EXPECT_EQ(refused, static_cast<int>(text.size()) * 8);
}

TEST(Manifest, AnEditThatKeepsTheJsonValidIsAChecksumMismatch) {
  const std::string text = SerializeManifest(SampleManifest());
  ExpectRejected(Replace(text, "\"step\":1234", "\"step\":1235"), "metadata checksum mismatch");
  ExpectRejected(Replace(text, "\"tensor\":\"exp_avg/wte.weight\"", "\"tensor\":\"param/wte.weight\""),
                 "metadata checksum mismatch");
  // The checksum is the last member: anything appended, or the member missing, is refused.
  ExpectRejected(text + " ", "no metadata checksum");
  EXPECT_TRUE(ParseManifest(text + "\n", "m").ok());  // an editor's final newline is harmless
  ExpectRejected(*UnsealManifestJson(text, "m"), "no metadata checksum");
}

TEST(Manifest, AVersionOneManifestSaysItIsOld) {
  std::string v1 = *UnsealManifestJson(SerializeManifest(SampleManifest()), "m");
  v1 = Replace(v1, "\"version\":2", "\"version\":1");
  ExpectRejected(v1, "manifest version 1 (written by an older Tessera, without a metadata "
                     "checksum); this build reads version 2");
}

TEST(Manifest, SegmentCrcSeedBindsNameAndRange) {
  const uint32_t a = SegmentCrcSeed("param/a", 0, 10);
  EXPECT_NE(a, SegmentCrcSeed("param/b", 0, 10));
  EXPECT_NE(a, SegmentCrcSeed("param/a", 10, 20));
  EXPECT_NE(a, SegmentCrcSeed("param/a", 0, 11));
  EXPECT_EQ(a, SegmentCrcSeed("param/a", 0, 10));
  // The separator keeps ("ab", range) apart from ("a", a range whose bytes start with 'b').
  EXPECT_NE(SegmentCrcSeed("ab", 0, 1), SegmentCrcSeed("a", 'b', 1));
}

TEST(Manifest, HugeInputsAreBounded) {
  // 2.2M values in one array: refused by the value limit (2^21) with a message, quickly.
  std::string text = "{\"format\":\"tessera-checkpoint\",\"version\":2,\"tensors\":[";
  for (int i = 0; i < 2'200'000; ++i) text += i ? ",0" : "0";
  text = SealManifestJson(text + "]}");
  const auto t0 = std::chrono::steady_clock::now();
  ExpectRejected(text, "values");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (kOptimizedBuild) {
    EXPECT_LT(seconds, 5.0);
  }
  // Over kMaxManifestBytes: refused before parsing.
  std::string big(kMaxManifestBytes + 1, ' ');
  ExpectRejected(big, "bytes");
}

TEST(Manifest, ValidateCoverageNamesGapsAndOverlaps) {
  Manifest m = SampleManifest();
  EXPECT_TRUE(ValidateCoverage(m, "w").ok());

  Manifest gap = m;
  gap.shards[1].segments.clear();
  Status st = ValidateCoverage(gap, "w");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("param/wte.weight"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("[6, 12) are in no segment"), std::string::npos) << st.ToString();

  Manifest overlap = m;
  overlap.shards[1].segments[0].begin = 4;
  st = ValidateCoverage(overlap, "w");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("shard_0.bin segment 0 [0, 6)"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("shard_1.bin segment 0 [4, 12)"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("overlap"), std::string::npos) << st.ToString();

  Manifest twice = m;  // the same segment in two shards
  twice.shards[1].segments.push_back(twice.shards[0].segments[1]);
  st = ValidateCoverage(twice, "w");
  EXPECT_NE(st.message().find("exp_avg/wte.weight"), std::string::npos) << st.ToString();

  Manifest unknown = m;
  unknown.shards[0].segments.push_back({"ghost", 0, 1, 512, 0});
  st = ValidateCoverage(unknown, "w");
  EXPECT_NE(st.message().find("ghost"), std::string::npos) << st.ToString();

  Manifest missing_tensor = m;
  missing_tensor.tensors.push_back({"param/uncovered", {2}, DType::kF32});
  st = ValidateCoverage(missing_tensor, "w");
  EXPECT_NE(st.message().find("param/uncovered\": elements [0, 2)"), std::string::npos)
      << st.ToString();
}

// ---------------------------------------------------------------------------------------------
// Shard files

struct Written {
  std::string dir;
  Manifest manifest;
  std::vector<float> big;        // "param/big": 1.5 x kMaxSegmentBytes of f32, split over 2 ranks
  std::vector<uint16_t> small;   // "exp_avg/small": bf16 [3, 7], all on rank 1
};

// Writes a two-rank checkpoint into `dir` (and its manifest.json) through `fs`.
Written WriteSample(const std::string& dir, FileSystem& fs = DefaultFileSystem()) {
  Written w;
  w.dir = dir;
  const int64_t big_numel = static_cast<int64_t>(kMaxSegmentBytes / 4 * 3 / 2) + 13;
  w.big.resize(big_numel);
  for (int64_t i = 0; i < big_numel; ++i) w.big[i] = static_cast<float>(i) * 0.5f - 7.0f;
  w.small.resize(21);
  for (int i = 0; i < 21; ++i) w.small[i] = static_cast<uint16_t>(0x3f80 + i);
  const int64_t split = 1000;  // rank 0 holds [0, split) of big, rank 1 the rest

  auto w0 = ShardWriter::Create(dir, 0, fs);
  auto w1 = ShardWriter::Create(dir, 1, fs);
  EXPECT_TRUE(w0.ok() && w1.ok());
  EXPECT_TRUE((*w0)->Append("param/big", 0, split, DType::kF32, w.big.data()).ok());
  EXPECT_TRUE((*w1)->Append("exp_avg/small", 0, 21, DType::kBF16, w.small.data()).ok());  // odd size
  EXPECT_TRUE((*w1)->Append("param/big", split, big_numel, DType::kF32, w.big.data() + split).ok());
  EXPECT_TRUE((*w1)->Append("param/nothing", 0, 0, DType::kF32, nullptr).ok());  // no segment
  Result<ShardRecord> r0 = (*w0)->Finish();
  Result<ShardRecord> r1 = (*w1)->Finish();
  EXPECT_TRUE(r0.ok() && r1.ok());
  w.manifest.step = 5;
  w.manifest.tensors = {{"param/big", {big_numel}, DType::kF32},
                        {"exp_avg/small", {3, 7}, DType::kBF16}};
  w.manifest.shards = {*r0, *r1};
  EXPECT_TRUE(WriteFileAtomic(dir + "/manifest.json", SerializeManifest(w.manifest), fs).ok());
  return w;
}

TEST(ShardFile, SegmentsAreBoundedAndAligned) {
  ScopedTempDir tmp("ckpt_format");
  const Written w = WriteSample(tmp.str());
  const ShardRecord& s1 = w.manifest.shards[1];
  EXPECT_EQ(s1.file, "shard_1.bin");
  EXPECT_EQ(s1.rank, 1);
  // small, then big cut into a full segment and the rest.
  ASSERT_EQ(s1.segments.size(), 3u);
  EXPECT_EQ(s1.segments[0].tensor, "exp_avg/small");
  EXPECT_EQ(s1.segments[1].end - s1.segments[1].begin, static_cast<int64_t>(kMaxSegmentBytes / 4));
  for (const ShardRecord& sh : w.manifest.shards) {
    for (const SegmentRecord& s : sh.segments) {
      EXPECT_EQ(s.offset % kSegmentAlign, 0u);
      EXPECT_LE(static_cast<uint64_t>(s.end - s.begin) * 4, kMaxSegmentBytes);
    }
    EXPECT_EQ(std::filesystem::file_size(w.dir + "/" + sh.file), sh.bytes);
  }
  EXPECT_EQ(s1.segments[1].offset, 64u);  // 42 bytes of small, then padding
  EXPECT_TRUE(ValidateCoverage(w.manifest, "w").ok());
}

TEST(ShardFile, ReadsBackVerified) {
  ScopedTempDir tmp("ckpt_format");
  const Written w = WriteSample(tmp.str());
  auto reader = CheckpointReader::Open(tmp.str());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const CheckpointReader& r = **reader;
  EXPECT_EQ(r.manifest().step, 5);
  EXPECT_EQ(r.dir(), tmp.str());

  std::vector<float> all(w.big.size());
  ASSERT_TRUE(r.Read("param/big", 0, static_cast<int64_t>(all.size()), all.data()).ok());
  EXPECT_EQ(all, w.big);
  std::vector<uint16_t> small(21);
  ASSERT_TRUE(r.Read("exp_avg/small", 0, 21, small.data()).ok());
  EXPECT_EQ(small, w.small);

  // Ranges inside one segment, across the rank split, across the segment cut.
  const int64_t cut = 1000 + static_cast<int64_t>(kMaxSegmentBytes / 4);
  for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 1}, {999, 1001}, {500, 5000}, {cut - 3, cut + 3}, {cut, cut + 1},
           {0, cut + 10}, {static_cast<int64_t>(w.big.size()) - 1,
                           static_cast<int64_t>(w.big.size())}, {17, 17}}) {
    std::vector<float> part(hi - lo, -1.0f);
    ASSERT_TRUE(r.Read("param/big", lo, hi, part.data()).ok()) << lo << ".." << hi;
    EXPECT_TRUE(std::equal(part.begin(), part.end(), w.big.begin() + lo)) << lo << ".." << hi;
  }
  std::vector<uint16_t> mid(5);
  ASSERT_TRUE(r.Read("exp_avg/small", 8, 13, mid.data()).ok());
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), w.small.begin() + 8));

  float x;
  EXPECT_EQ(r.Read("param/none", 0, 1, &x).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Read("param/big", -1, 1, &x).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Read("param/big", 5, 4, &x).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Read("exp_avg/small", 20, 22, &x).code(), StatusCode::kInvalidArgument);

  Result<uint64_t> verified = r.VerifyAll();
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ(*verified, w.big.size() * 4 + 21 * 2);
}

TEST(ShardFile, ConcurrentReads) {
  ScopedTempDir tmp("ckpt_format");
  const Written w = WriteSample(tmp.str());
  auto reader = CheckpointReader::Open(tmp.str());
  ASSERT_TRUE(reader.ok());
  const int64_t n = static_cast<int64_t>(w.big.size());
  std::vector<std::vector<float>> outs(4, std::vector<float>(n / 4));
  std::vector<Status> sts(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      sts[t] = (*reader)->Read("param/big", t * (n / 4), (t + 1) * (n / 4), outs[t].data());
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    ASSERT_TRUE(sts[t].ok()) << sts[t].ToString();
    EXPECT_TRUE(std::equal(outs[t].begin(), outs[t].end(), w.big.begin() + t * (n / 4)));
  }
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(ShardFile, CorruptionIsDetectedAndNamed) {
  ScopedTempDir tmp("ckpt_format");
  const Written w = WriteSample(tmp.str());
  // A byte inside big's second segment in shard 1 (the full 4 MiB one).
  const SegmentRecord& seg = w.manifest.shards[1].segments[1];
  FlipByte(tmp / "shard_1.bin", seg.offset + 12345);
  auto reader = CheckpointReader::Open(tmp.str());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();  // sizes are fine; bytes are not
  const CheckpointReader& r = **reader;

  // Any read touching the segment fails, even one element far from the flipped byte.
  float x;
  Status st = r.Read("param/big", seg.begin + 100000, seg.begin + 100001, &x);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("shard_1.bin"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("param/big"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("segment 1"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("CRC-32C mismatch"), std::string::npos) << st.ToString();

  // Other segments still read.
  std::vector<float> head(1000);
  EXPECT_TRUE(r.Read("param/big", 0, 1000, head.data()).ok());
  std::vector<uint16_t> small(21);
  EXPECT_TRUE(r.Read("exp_avg/small", 0, 21, small.data()).ok());

  Result<uint64_t> all = r.VerifyAll();
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(all.status().message().find("shard_1.bin"), std::string::npos);
}

TEST(ShardFile, TruncatedMissingAndAbsent) {
  {
    ScopedTempDir tmp("ckpt_format");
    WriteSample(tmp.str());
    std::filesystem::resize_file(tmp / "shard_1.bin",
                                 std::filesystem::file_size(tmp / "shard_1.bin") - 1);
    auto r = CheckpointReader::Open(tmp.str());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("shard_1.bin"), std::string::npos);
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
  }
  {
    ScopedTempDir tmp("ckpt_format");
    WriteSample(tmp.str());
    std::filesystem::remove(tmp / "shard_0.bin");
    auto r = CheckpointReader::Open(tmp.str());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("shard_0.bin"), std::string::npos);
    EXPECT_NE(r.status().message().find("missing"), std::string::npos) << r.status().ToString();
  }
  {
    ScopedTempDir tmp("ckpt_format");
    auto r = CheckpointReader::Open(tmp.str());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  }
  {
    ScopedTempDir tmp("ckpt_format");
    WriteSample(tmp.str());
    std::ofstream(tmp / "manifest.json") << "{\"format\":\"tessera-checkpoint\",\"version\":1}";
    auto r = CheckpointReader::Open(tmp.str());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("manifest.json"), std::string::npos);
  }
}

// Two segments of the same size swapped between tensors — in the file, or by swapping their
// offsets and CRCs in the manifest (resealed, so the metadata checksum holds) — each hold bytes
// that were checksummed once; the CRC bound to tensor and range still refuses them.
TEST(ShardFile, SegmentsSwappedBetweenTensorsFailVerification) {
  ScopedTempDir tmp("ckpt_format");
  std::vector<float> a(64), b(64);
  for (int i = 0; i < 64; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(-i);
  }
  auto w = ShardWriter::Create(tmp.str(), 0);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append("param/a", 0, 64, DType::kF32, a.data()).ok());
  ASSERT_TRUE((*w)->Append("param/b", 0, 64, DType::kF32, b.data()).ok());
  Result<ShardRecord> rec = (*w)->Finish();
  ASSERT_TRUE(rec.ok());
  Manifest m;
  m.step = 1;
  m.tensors = {{"param/a", {64}, DType::kF32}, {"param/b", {64}, DType::kF32}};
  m.shards = {*rec};
  std::swap(m.shards[0].segments[0].offset, m.shards[0].segments[1].offset);
  std::swap(m.shards[0].segments[0].crc32c, m.shards[0].segments[1].crc32c);
  ASSERT_TRUE(WriteFileAtomic(tmp.str() + "/manifest.json", SerializeManifest(m)).ok());
  auto r = CheckpointReader::Open(tmp.str());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<float> out(64);
  Status st = (*r)->Read("param/a", 0, 64, out.data());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("CRC-32C mismatch"), std::string::npos) << st.ToString();
  EXPECT_EQ((*r)->Read("param/b", 0, 64, out.data()).code(), StatusCode::kDataLoss);
  EXPECT_FALSE((*r)->VerifyAll().ok());
}

TEST(ShardFile, NonFiniteStateIsNeverWritten) {
  ScopedTempDir tmp("ckpt_format");
  std::vector<float> data(5000, 1.0f);
  data[4321] = std::numeric_limits<float>::quiet_NaN();
  auto w = ShardWriter::Create(tmp.str(), 0);
  ASSERT_TRUE(w.ok());
  Status st = (*w)->Append("exp_avg_sq/h.0.mlp.c_fc.weight", 100, 5100, DType::kF32, data.data());
  EXPECT_EQ(st.code(), StatusCode::kNonFinite);
  EXPECT_NE(st.message().find("element 4421 of \"exp_avg_sq/h.0.mlp.c_fc.weight\" is NaN or Inf"),
            std::string::npos) << st.ToString();
  EXPECT_EQ((*w)->Finish().status().code(), StatusCode::kFailedPrecondition);  // failed for good
  std::vector<uint16_t> bf16(10, 0x3f80);
  bf16[7] = 0x7f80;  // +inf
  auto w2 = ShardWriter::Create(tmp.str(), 1);
  EXPECT_EQ((*w2)->Append("param/x", 0, 10, DType::kBF16, bf16.data()).code(), StatusCode::kNonFinite);
  std::vector<uint16_t> f16(10, 0x3c00);
  f16[0] = 0xfc00;  // -inf
  auto w3 = ShardWriter::Create(tmp.str(), 2);
  EXPECT_EQ((*w3)->Append("param/x", 0, 10, DType::kF16, f16.data()).code(), StatusCode::kNonFinite);
}

TEST(ShardFile, FailedWriteRefusesFurtherWork) {
  ScopedTempDir tmp("ckpt_format");
  FaultyFileSystem fs;
  fs.fail_write_at = 2;
  auto w = ShardWriter::Create(tmp.str(), 3, fs);
  ASSERT_TRUE(w.ok());
  std::vector<float> data(100, 1.0f);
  ASSERT_TRUE((*w)->Append("a", 0, 3, DType::kF32, data.data()).ok());   // write 1
  Status st = (*w)->Append("b", 0, 100, DType::kF32, data.data());        // write 2 (padding) fails
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("shard_3.bin"), std::string::npos);
  EXPECT_EQ((*w)->Append("c", 0, 1, DType::kF32, data.data()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->Finish().status().code(), StatusCode::kFailedPrecondition);

  FaultyFileSystem sync_fs;
  sync_fs.fail_sync_at = 1;
  auto w2 = ShardWriter::Create(tmp.str(), 4, sync_fs);
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE((*w2)->Append("a", 0, 3, DType::kF32, data.data()).ok());
  EXPECT_EQ((*w2)->Finish().status().code(), StatusCode::kIoError);

  EXPECT_EQ((*w2)->Append("a", -1, 3, DType::kF32, data.data()).code(), StatusCode::kFailedPrecondition);
  auto w3 = ShardWriter::Create(tmp.str(), 5);
  ASSERT_TRUE(w3.ok());
  EXPECT_EQ((*w3)->Append("a", 3, 2, DType::kF32, data.data()).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*w3)->Finish().ok());
  EXPECT_EQ((*w3)->Finish().status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera
