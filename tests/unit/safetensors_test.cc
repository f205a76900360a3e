// models/safetensors: writer/reader round trips, every malformed-header case as hand-made
// bytes, random corruption never crashing, and sharded index loading.
// links: tessera_models
#include "models/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tests/fault/faulty_file_system.h"

#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_ / name; }

  static void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  static std::string ReadBytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // 8-byte length + header + data, with an explicit (possibly lying) length field.
  static std::string Assemble(const std::string& header, const std::string& data,
                              uint64_t length_field) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(length_field >> (8 * i));
    return out + header + data;
  }
  static std::string Assemble(const std::string& header, const std::string& data) {
    return Assemble(header, data, header.size());
  }

  testing::ScopedTempDir dir_{"st"};
};


TEST_F(SafetensorsTest, RoundTripF32PreservesValuesOrderAndMetadata) {
  std::vector<float> b = {1.5f, -2.25f, 3.0e-8f, 1e30f, -0.0f, 7.0f};
  std::vector<float> a = {0.1f, 0.2f, 0.3f, 0.4f};
  std::vector<SafetensorsTensorOut> outs = {
      {"b", Shape{2, 3}, b.data()}, {"a", Shape{4}, a.data()}, {"z", Shape{0, 5}, nullptr}};
  const std::string path = Path("m.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, outs, {{"format", "pt"}, {"note", "x\"y"}}).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->header_bytes() % 8, 0u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->metadata().at("note"), "x\"y");
  ASSERT_EQ((*f)->tensors().size(), 3u);
  EXPECT_EQ((*f)->tensors()[0].name, "a");  // sorted by name
  EXPECT_EQ((*f)->tensors()[1].name, "b");
  EXPECT_EQ((*f)->tensors()[2].name, "z");
  const SafetensorsTensorInfo* tb = (*f)->Find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->shape, (Shape{2, 3}));
  EXPECT_EQ(tb->dtype, DType::kF32);
  std::vector<float> got(6);
  ASSERT_TRUE((*f)->ReadAsF32(*tb, got.data()).ok());
  EXPECT_EQ(std::memcmp(got.data(), b.data(), 24), 0);
  std::vector<float> got_a(4);
  ASSERT_TRUE((*f)->ReadRaw(*(*f)->Find("a"), got_a.data()).ok());
  EXPECT_EQ(got_a, a);
  EXPECT_EQ((*f)->Find("z")->numel(), 0);
  EXPECT_EQ((*f)->Find("missing"), nullptr);
}

TEST_F(SafetensorsTest, RoundTripF16AndBf16RoundToNearest) {
  std::vector<float> src = {0.1f, -1e-3f, 3.75f, 65504.0f, 1.0f / 3.0f, -7.123f, 1e-6f, 0.0f};
  for (DType dt : {DType::kF16, DType::kBF16}) {
    const std::string path = Path("h.safetensors");
    SafetensorsTensorOut t{"w", Shape{2, 4}, src.data(), DType::kF32, dt};
    ASSERT_TRUE(WriteSafetensors(path, {t}, {}).ok());
    auto f = SafetensorsFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_TRUE((*f)->metadata().empty());
    const SafetensorsTensorInfo* info = (*f)->Find("w");
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, dt);
    EXPECT_EQ(info->nbytes(), 16u);
    std::vector<float> got(8);
    ASSERT_TRUE((*f)->ReadAsF32(*info, got.data()).ok());
    for (size_t i = 0; i < src.size(); ++i) {
      float expect = dt == DType::kF16 ? F16ToF32(F32ToF16(src[i])) : Bf16ToF32(F32ToBf16(src[i]));
      EXPECT_EQ(got[i], expect) << i;
      float rel = dt == DType::kF16 ? 1e-3f : 8e-3f;
      if (std::abs(src[i]) > 1e-4f) {
        EXPECT_NEAR(got[i], src[i], rel * std::abs(src[i])) << i;
      }
    }
  }
}

TEST_F(SafetensorsTest, I32RoundTripAndF32ReadRefused) {
  std::vector<int32_t> ids = {1, -2, 2147483647};
  const std::string path = Path("i.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"ids", Shape{3}, ids.data(), DType::kI32, DType::kI32}}, {})
                  .ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<int32_t> got(3);
  ASSERT_TRUE((*f)->ReadRaw(*(*f)->Find("ids"), got.data()).ok());
  EXPECT_EQ(got, ids);
  std::vector<float> as_f(3);
  Status st = (*f)->ReadAsF32(*(*f)->Find("ids"), as_f.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not a float type"), std::string::npos) << st.message();
}

TEST_F(SafetensorsTest, WriterRejectsBadInputAndReplacesAtomically) {
  std::vector<float> x = {1, 2};
  const std::string path = Path("w.safetensors");
  Status dup = WriteSafetensors(path, {{"a", Shape{2}, x.data()}, {"a", Shape{2}, x.data()}}, {});
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("duplicate tensor name 'a'"), std::string::npos);
  Status conv = WriteSafetensors(
      path, {{"a", Shape{2}, x.data(), DType::kBF16, DType::kF32}}, {});
  EXPECT_NE(conv.message().find("cannot store bf16 data as F32"), std::string::npos)
      << conv.message();
  Status reserved = WriteSafetensors(path, {{"__metadata__", Shape{2}, x.data()}}, {});
  EXPECT_EQ(reserved.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(path));

  ASSERT_TRUE(WriteSafetensors(path, {{"a", Shape{2}, x.data()}}, {}).ok());
  std::vector<float> y = {3, 4, 5};
  ASSERT_TRUE(WriteSafetensors(path, {{"b", Shape{3}, y.data()}}, {}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Find("a"), nullptr);
  ASSERT_NE((*f)->Find("b"), nullptr);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  Status no_dir = WriteSafetensors(Path("nodir/x.safetensors"), {{"a", Shape{2}, x.data()}}, {});
  EXPECT_EQ(no_dir.code(), StatusCode::kIoError);
}

struct BadCase {
  const char* label;
  std::string bytes;
  StatusCode code;
  const char* phrase;
};

TEST_F(SafetensorsTest, FailedWriteOrFsyncKeepsThePreviousFile) {
  const std::string path = Path("w.safetensors");
  std::vector<float> v1 = {1, 2, 3, 4}, v2 = {5, 6, 7, 8};
  ASSERT_TRUE(WriteSafetensors(path, {{"w", Shape{4}, v1.data()}}, {}).ok());
  const std::string before = ReadBytes(path);
  // Writes: 1 = length prefix, 2 = header, 3 = tensor data.
  for (int n = 1; n <= 3; ++n) {
    SCOPED_TRACE("failing write " + std::to_string(n));
    testing::FaultyFileSystem faulty;
    faulty.fail_write_at = n;
    Status st = WriteSafetensors(path, {{"w", Shape{4}, v2.data()}}, {}, faulty);
    EXPECT_EQ(st.code(), StatusCode::kIoError);
    EXPECT_NE(st.message().find(path + ".tmp"), std::string::npos) << st.message();
    EXPECT_EQ(faulty.writes, n);
    EXPECT_EQ(ReadBytes(path), before);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  }
  testing::FaultyFileSystem faulty;
  faulty.fail_sync_at = 1;
  faulty.err = EIO;
  Status st = WriteSafetensors(path, {{"w", Shape{4}, v2.data()}}, {}, faulty);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("fsync"), std::string::npos) << st.message();
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(SafetensorsTest, MalformedFilesFailWithSpecificMessages) {
  const std::string f32x2 = std::string(8, '\x01');  // 8 bytes: two f32
  auto entry = [](const std::string& body) { return "{\"t\":" + body + "}"; };
  std::vector<BadCase> cases = {
      {"short", std::string("\x05\0\0", 3), StatusCode::kDataLoss, "shorter than the 8-byte"},
      {"len_past_end", Assemble("{}", "", 100), StatusCode::kDataLoss, "file truncated or corrupt"},
      {"len_absurd", Assemble("{}", "", 1ull << 40), StatusCode::kDataLoss, "absurd"},
      {"not_json", Assemble("{\"t\": [1,", ""), StatusCode::kDataLoss,
       "header is not valid JSON: JSON error at byte"},
      {"not_object", Assemble("[1, 2]", ""), StatusCode::kDataLoss, "header is not a JSON object"},
      {"entry_not_object", Assemble(entry("3"), ""), StatusCode::kDataLoss,
       "tensor 't': header entry is not a JSON object"},
      {"no_dtype", Assemble(entry(R"({"shape":[2],"data_offsets":[0,8]})"), f32x2),
       StatusCode::kDataLoss, "tensor 't': missing or non-string \"dtype\""},
      {"f64", Assemble(entry(R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})"), f32x2),
       StatusCode::kInvalidArgument, "tensor 't': unsupported dtype F64"},
      {"i64", Assemble(entry(R"({"dtype":"I64","shape":[1],"data_offsets":[0,8]})"), f32x2),
       StatusCode::kInvalidArgument, "unsupported dtype I64"},
      {"unknown_dtype", Assemble(entry(R"({"dtype":"f32x","shape":[2],"data_offsets":[0,8]})"),
                                 f32x2),
       StatusCode::kDataLoss, "unknown dtype \"f32x\""},
      {"shape_missing", Assemble(entry(R"({"dtype":"F32","data_offsets":[0,8]})"), f32x2),
       StatusCode::kDataLoss, "missing or non-array \"shape\""},
      {"shape_negative", Assemble(entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
                                  f32x2),
       StatusCode::kDataLoss, "shape must be an array of non-negative integers"},
      {"shape_float", Assemble(entry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
                               f32x2),
       StatusCode::kDataLoss, "shape must be an array of non-negative integers"},
      {"shape_rank7",
       Assemble(entry(R"({"dtype":"F32","shape":[1,1,1,1,1,1,2],"data_offsets":[0,8]})"), f32x2),
       StatusCode::kInvalidArgument, "rank 7"},
      {"shape_overflow",
       Assemble(entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
                f32x2),
       StatusCode::kDataLoss, "too large"},
      {"shape_overflow_with_zero",
       Assemble(entry(R"({"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]})"),
                ""),
       StatusCode::kDataLoss, "too large"},
      {"offsets_arity", Assemble(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[8]})"), f32x2),
       StatusCode::kDataLoss, "\"data_offsets\" must be [begin, end]"},
      {"offsets_reversed",
       Assemble(entry(R"({"dtype":"F32","shape":[0],"data_offsets":[8,4]})"), f32x2),
       StatusCode::kDataLoss, "begin 8 > end 4"},
      {"truncated", Assemble(entry(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), f32x2),
       StatusCode::kDataLoss, "beyond the data section (8 bytes): file truncated"},
      {"size_mismatch", Assemble(entry(R"({"dtype":"F16","shape":[2],"data_offsets":[0,8]})"),
                                 f32x2),
       StatusCode::kDataLoss, "byte size mismatch: data_offsets span 8 bytes but shape [2] of F16 "
                              "needs 4"},
      {"overlap",
       Assemble(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                f32x2),
       StatusCode::kDataLoss, "tensors 'a' [0, 8) and 'b' [4, 8) overlap"},
      {"metadata_not_object", Assemble(R"({"__metadata__":[1]})", ""), StatusCode::kDataLoss,
       "__metadata__ is not a JSON object"},
      {"metadata_not_strings", Assemble(R"({"__metadata__":{"format":"pt","n":3}})", ""),
       StatusCode::kDataLoss, "__metadata__ value for 'n' is not a string"},
  };
  for (const BadCase& c : cases) {
    const std::string path = Path(std::string(c.label) + ".safetensors");
    WriteBytes(path, c.bytes);
    auto r = SafetensorsFile::Open(path);
    ASSERT_FALSE(r.ok()) << c.label;
    EXPECT_EQ(r.status().code(), c.code) << c.label << ": " << r.status().message();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << c.label;
    EXPECT_NE(r.status().message().find(c.phrase), std::string::npos)
        << c.label << ": " << r.status().message();
  }
}

TEST_F(SafetensorsTest, MissingFileIsNotFoundAndEdgeLayoutsAreAccepted) {
  auto r = SafetensorsFile::Open(Path("nope.safetensors"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("nope.safetensors"), std::string::npos);

  // Zero-size tensors may share offsets; gaps and trailing bytes are harmless.
  WriteBytes(Path("edge.safetensors"),
             Assemble(R"({"e1":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                      R"("e2":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]},)"
                      R"("x":{"dtype":"F32","shape":[],"data_offsets":[8,12]}}   )",
                      std::string(16, '\0')));
  auto ok = SafetensorsFile::Open(Path("edge.safetensors"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->Find("x")->numel(), 1);  // a scalar
}

TEST_F(SafetensorsTest, HeaderChecksRunOnBytesInMemoryExactlyAsOpenRunsThem) {
  std::vector<float> a = {1, 2, 3}, b = {4, 5};
  const std::string path = Path("mem.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", Shape{3}, a.data()},
                                      {"b", Shape{2}, b.data(), DType::kF32, DType::kBF16}},
                               {{"format", "pt"}})
                  .ok());
  const std::string bytes = ReadBytes(path);
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  Result<uint64_t> n = ParseSafetensorsPrefix({u, 8}, bytes.size(), "mem");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, (*file)->header_bytes());
  Result<SafetensorsHeader> h = ParseSafetensorsHeader(
      std::string_view(bytes).substr(8, *n), bytes.size() - 8 - *n, "mem");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->metadata, (*file)->metadata());
  ASSERT_EQ(h->tensors.size(), (*file)->tensors().size());
  for (size_t i = 0; i < h->tensors.size(); ++i) {
    EXPECT_EQ(h->tensors[i].name, (*file)->tensors()[i].name);
    EXPECT_EQ(h->tensors[i].data_begin, (*file)->tensors()[i].data_begin);
    EXPECT_EQ(h->tensors[i].data_end, (*file)->tensors()[i].data_end);
  }
  // The data section is what the header is checked against: one byte short is truncation.
  Result<SafetensorsHeader> short_data = ParseSafetensorsHeader(
      std::string_view(bytes).substr(8, *n), bytes.size() - 8 - *n - 1, "mem");
  ASSERT_FALSE(short_data.ok());
  EXPECT_NE(short_data.status().message().find("mem: tensor 'b'"), std::string::npos)
      << short_data.status().message();
  // A prefix shorter than 8 bytes, or one whose length exceeds the file, names the file.
  Result<uint64_t> tiny = ParseSafetensorsPrefix({u, 5}, 5, "mem");
  EXPECT_EQ(tiny.status().code(), StatusCode::kDataLoss);
  Result<uint64_t> past = ParseSafetensorsPrefix({u, 8}, 8 + *n - 1, "mem");
  EXPECT_NE(past.status().message().find("mem: header length"), std::string::npos);
}

TEST_F(SafetensorsTest, IndexTextParsesToItsWeightMapAndRefusesPathsThatLeaveTheDirectory) {
  auto map = ParseSafetensorsIndex(
      R"({"metadata":{"total_size":8},"weight_map":{"a":"m-1.safetensors","b":"sub/m-2.safetensors"}})",
      "idx.json");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->size(), 2u);
  EXPECT_EQ(map->at("b"), "sub/m-2.safetensors");
  for (const char* bad : {R"({"weight_map":{"a":"../m.safetensors"}})",
                          R"({"weight_map":{"a":"/etc/m.safetensors"}})",
                          R"({"weight_map":{"a":3}})", R"({"metadata":3,"weight_map":{}})",
                          R"({"weight_map":[]})", "[1]", "{"}) {
    auto r = ParseSafetensorsIndex(bad, "idx.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_EQ(r.status().message().rfind("idx.json: ", 0), 0u) << r.status().message();
  }
}

TEST_F(SafetensorsTest, RandomCorruptionNeverCrashes) {
  std::vector<float> a(37), b(12);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * static_cast<float>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = -1.0f * static_cast<float>(i);
  const std::string good_path = Path("good.safetensors");
  ASSERT_TRUE(WriteSafetensors(good_path,
                               {{"alpha", Shape{37}, a.data()},
                                {"beta", Shape{3, 4}, b.data(), DType::kF32, DType::kBF16}},
                               {{"format", "pt"}})
                  .ok());
  const std::string good = ReadBytes(good_path);
  std::mt19937 rng(1234);
  int opened = 0, failed = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string bytes = good;
    if (iter % 4 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) {
        // Bias toward the prefix and header, where corruption changes structure.
        size_t limit = (rng() % 2) ? std::min<size_t>(bytes.size(), 8 + 160) : bytes.size();
        bytes[rng() % limit] ^= static_cast<char>(1 + rng() % 255);
      }
    }
    const std::string path = Path("fuzz.safetensors");
    WriteBytes(path, bytes);
    auto r = SafetensorsFile::Open(path);
    if (!r.ok()) {
      ++failed;
      EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
      continue;
    }
    ++opened;
    const uint64_t data_bytes = bytes.size() - 8 - (*r)->header_bytes();
    for (const SafetensorsTensorInfo& t : (*r)->tensors()) {
      EXPECT_LE(t.data_end, data_bytes);
      EXPECT_EQ(t.nbytes(), static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype));
      std::vector<float> out(static_cast<size_t>(t.numel()));
      Status st = (*r)->ReadAsF32(t, out.data());
      EXPECT_TRUE(st.ok() || t.dtype == DType::kI32) << st.ToString();
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(opened, 0);  // flips inside tensor data leave a valid file
}

class ShardedTest : public SafetensorsTest {
 protected:
  void WriteShards() {
    ASSERT_TRUE(WriteSafetensors(Path("model-00001-of-00002.safetensors"),
                                 {{"a", Shape{2}, a_.data()}, {"b", Shape{3}, b_.data()}}, {})
                    .ok());
    ASSERT_TRUE(
        WriteSafetensors(Path("model-00002-of-00002.safetensors"), {{"c", Shape{1}, c_.data()}}, {})
            .ok());
  }
  void WriteIndex(const std::string& weight_map) {
    WriteBytes(Path("model.safetensors.index.json"),
               R"({"metadata": {"total_size": 24}, "weight_map": )" + weight_map + "}");
  }
  std::vector<float> a_ = {1, 2}, b_ = {3, 4, 5}, c_ = {6};
};

TEST_F(ShardedTest, IndexPresentsOneLookupOverTwoFiles) {
  WriteShards();
  WriteIndex(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00002-of-00002.safetensors"})");
  auto ck = SafetensorsCheckpoint::OpenIndex(Path("model.safetensors.index.json"));
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ((*ck)->files().size(), 2u);
  EXPECT_EQ((*ck)->entries().size(), 3u);
  const SafetensorsCheckpoint::Entry* c = (*ck)->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->file->path().find("model-00002-of-00002"), std::string::npos);
  float v = 0;
  ASSERT_TRUE(c->file->ReadAsF32(*c->info, &v).ok());
  EXPECT_EQ(v, 6.0f);
  std::vector<float> got(3);
  const SafetensorsCheckpoint::Entry* b = (*ck)->Find("b");
  ASSERT_TRUE(b->file->ReadAsF32(*b->info, got.data()).ok());
  EXPECT_EQ(got, b_);
  EXPECT_EQ((*ck)->Find("d"), nullptr);
}

TEST_F(ShardedTest, MissingShardIsNotFoundNamingIt) {
  WriteShards();
  WriteIndex(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00003-of-00003.safetensors"})");
  auto ck = SafetensorsCheckpoint::OpenIndex(Path("model.safetensors.index.json"));
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ck.status().message().find("model-00003-of-00003.safetensors"), std::string::npos)
      << ck.status().message();
}

TEST_F(ShardedTest, ListedTensorAbsentFromItsShard) {
  WriteShards();
  WriteIndex(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors"})");
  auto ck = SafetensorsCheckpoint::OpenIndex(Path("model.safetensors.index.json"));
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ck.status().message().find("lists tensor 'd' in shard "
                                       "'model-00002-of-00002.safetensors', but that file does "
                                       "not contain it"),
            std::string::npos)
      << ck.status().message();
}

TEST_F(ShardedTest, DuplicateUnlistedAndUnsafeEntriesRejected) {
  WriteShards();
  ASSERT_TRUE(WriteSafetensors(Path("extra.safetensors"),
                               {{"a", Shape{2}, a_.data()}}, {}).ok());
  WriteIndex(R"({"a": "extra.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00002-of-00002.safetensors"})");
  auto dup = SafetensorsCheckpoint::OpenIndex(Path("model.safetensors.index.json"));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("tensor 'a' appears in both"), std::string::npos)
      << dup.status().message();

  WriteIndex(R"({"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})");
  auto unlisted = SafetensorsCheckpoint::OpenIndex(Path("model.safetensors.index.json"));
  ASSERT_FALSE(unlisted.ok());
  EXPECT_NE(unlisted.status().message().find("contains tensor 'b' that the weight_map does not "
                                             "list"),
            std::string::npos)
      << unlisted.status().message();

  WriteIndex(R"({"a": "../model-00001-of-00002.safetensors"})");
  auto unsafe = SafetensorsCheckpoint::OpenIndex(Path("model.safetensors.index.json"));
  ASSERT_FALSE(unsafe.ok());
  EXPECT_NE(unsafe.status().message().find("relative file name"), std::string::npos);

  WriteBytes(Path("model.safetensors.index.json"), R"({"metadata": {}})");
  auto no_map = SafetensorsCheckpoint::OpenIndex(Path("model.safetensors.index.json"));
  ASSERT_FALSE(no_map.ok());
  EXPECT_NE(no_map.status().message().find("missing or non-object \"weight_map\""),
            std::string::npos);

  auto missing = SafetensorsCheckpoint::OpenIndex(Path("absent.index.json"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Names in an index are plain relative names, but a name can be a symbolic link planted to
// lead out of the index's directory: the resolved path must stay inside it. The Hugging Face
// hub cache (snapshots/<rev>/NAME -> ../../blobs/<hash>) is the one layout allowed beyond it.
TEST_F(ShardedTest, ShardsThatResolveOutsideTheIndexDirectoryAreRefused) {
  WriteShards();
  fs::create_directories(Path("elsewhere"));
  fs::rename(Path("model-00002-of-00002.safetensors"), Path("elsewhere/c.safetensors"));
  fs::create_directories(Path("idx"));
  fs::rename(Path("model-00001-of-00002.safetensors"), Path("idx/model-00001-of-00002.safetensors"));
  fs::create_symlink(Path("elsewhere/c.safetensors"), Path("idx/model-00002-of-00002.safetensors"));
  WriteBytes(Path("idx/model.safetensors.index.json"),
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00002-of-00002.safetensors"}})");
  auto escaped = SafetensorsCheckpoint::OpenIndex(Path("idx/model.safetensors.index.json"));
  ASSERT_FALSE(escaped.ok());
  EXPECT_EQ(escaped.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(escaped.status().message().find("outside the index's directory"), std::string::npos)
      << escaped.status().message();
  // A link that stays inside is fine.
  fs::remove(Path("idx/model-00002-of-00002.safetensors"));
  fs::rename(Path("elsewhere/c.safetensors"), Path("idx/real-c.safetensors"));
  fs::create_symlink("real-c.safetensors", Path("idx/model-00002-of-00002.safetensors"));
  EXPECT_TRUE(SafetensorsCheckpoint::OpenIndex(Path("idx/model.safetensors.index.json")).ok());
  // The hub cache layout: repo/snapshots/<rev>/* -> repo/blobs/*.
  const std::string repo = Path("models--x"), snap = repo + "/snapshots/abc";
  fs::create_directories(snap);
  fs::create_directories(repo + "/blobs");
  fs::rename(Path("idx/model-00001-of-00002.safetensors"), repo + "/blobs/1111");
  fs::rename(Path("idx/real-c.safetensors"), repo + "/blobs/2222");
  fs::create_symlink("../../blobs/1111", snap + "/model-00001-of-00002.safetensors");
  fs::create_symlink("../../blobs/2222", snap + "/model-00002-of-00002.safetensors");
  fs::copy_file(Path("idx/model.safetensors.index.json"), snap + "/model.safetensors.index.json");
  auto hub = SafetensorsCheckpoint::OpenIndex(snap + "/model.safetensors.index.json");
  EXPECT_TRUE(hub.ok()) << hub.status().ToString();
}

}  // namespace
}  // namespace tessera
