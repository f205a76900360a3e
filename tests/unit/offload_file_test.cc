// optimizer/offload_file.h and ShardedAdamW on disk (optimizer.offload: nvme): passes read,
// write and update every chunk (a last partial one included) and Read returns any range; an
// on-disk ShardedAdamW steps to the bits of the in-memory one for 1..3 ranks, with master
// weights and in place, and its resident state is the pool; a byte changed by hand in the file
// is refused naming stream and chunk; an injected EIO ends the pass with kIoError and the file
// refuses further passes; a leftover file is replaced with a note; a second process's file,
// a missing directory and a disk too small are clear errors before anything is written.
// links: tessera_optimizer
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "optimizer/offload_file.h"
#include "optimizer/zero.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct Dir {
  Dir() {
    char tmpl[] = "/tmp/tessera-offload-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~Dir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

OffloadFileOptions Options(const std::string& path, int64_t elems, int streams = 3) {
  OffloadFileOptions o;
  o.path = path;
  o.run = "offload_file_test";
  o.streams = streams;
  o.elems = elems;
  o.chunk_elems = 2 * kOffloadAlignElems;
  o.depth = 3;
  return o;
}

float Value(int stream, int64_t i, int pass) {
  return static_cast<float>(stream * 1000003 + i * 7 + pass) * 0.5f;
}

// 5.5 chunks: the last one is partial.
constexpr int64_t kElems = 11 * kOffloadAlignElems + 123;

// (io_uring, O_DIRECT): every transfer path, the buffered one as a file system without
// O_DIRECT gets it.
class OffloadFilePaths : public ::testing::TestWithParam<std::tuple<bool, bool>> {};
INSTANTIATE_TEST_SUITE_P(IoUringOrSynchronousDirectOrBuffered, OffloadFilePaths,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST_P(OffloadFilePaths, PassesAndReadsSeeWhatWasWritten) {
  Dir dir;
  OffloadFileOptions o = Options(dir / "opt.bin", kElems);
  o.io_uring = std::get<0>(GetParam());
  o.direct = std::get<1>(GetParam());
  auto f = OffloadFile::Create(o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  OffloadFile& file = **f;
  if (!o.direct) {
    EXPECT_FALSE(file.direct());
    const std::vector<std::string>& notes = file.notes();
    EXPECT_EQ(std::count_if(notes.begin(), notes.end(),
                            [](const std::string& n) {
                              return n.find("buffered I/O with fdatasync after every pass") !=
                                     std::string::npos;
                            }),
              1);
  } else if (o.io_uring) {
    EXPECT_TRUE(file.notes().empty() || !file.direct());  // only the buffered note, if any
  }
  EXPECT_EQ(fs::file_size(dir / "opt.bin"), file.file_bytes());
  // Fresh: zeros.
  int64_t seen = 0;
  ASSERT_TRUE(file.Run(OffloadFile::Pass::kRead, 0, [&](int64_t b, int64_t e, float* const* s) {
    EXPECT_EQ(b, seen);
    for (int k = 0; k < 3; ++k) {
      for (int64_t i = 0; i < e - b; ++i) ASSERT_EQ(s[k][i], 0.0f);
    }
    seen = e;
  }).ok());
  EXPECT_EQ(seen, kElems);
  // Write stream 1 only, then update streams 0 and 2 from it.
  ASSERT_TRUE(file.Run(OffloadFile::Pass::kWrite, 1u << 1, [&](int64_t b, int64_t e, float* const* s) {
    EXPECT_EQ(s[0], nullptr);
    EXPECT_EQ(s[2], nullptr);
    for (int64_t i = b; i < e; ++i) s[1][i - b] = Value(1, i, 0);
  }).ok());
  ASSERT_TRUE(file.Run(OffloadFile::Pass::kUpdate, 0, [&](int64_t b, int64_t e, float* const* s) {
    for (int64_t i = b; i < e; ++i) {
      ASSERT_EQ(s[1][i - b], Value(1, i, 0));
      s[0][i - b] += Value(0, i, 1);
      s[2][i - b] = s[1][i - b] + 1.0f;
    }
  }).ok());
  // Read: ranges inside one chunk, across chunks, the tail; and out of order.
  for (auto [b, n] : {std::pair<int64_t, int64_t>{0, 5}, {2040, 3000}, {kElems - 200, 200},
                      {17, 1}, {0, kElems}}) {
    std::vector<float> out(static_cast<size_t>(n));
    for (int k = 0; k < 3; ++k) {
      ASSERT_TRUE(file.Read(k, b, n, out.data()).ok());
      for (int64_t i = 0; i < n; ++i) {
        const float want = k == 0 ? Value(0, b + i, 1) : k == 1 ? Value(1, b + i, 0)
                                                                : Value(1, b + i, 0) + 1.0f;
        ASSERT_EQ(out[i], want) << "stream " << k << " element " << b + i;
      }
    }
  }
  const OffloadIoStats st = file.stats();
  EXPECT_GT(st.bytes_written, 0u);
  EXPECT_GT(st.reader_bytes, 0u);
  EXPECT_FALSE(file.Read(0, kElems - 1, 2, nullptr).ok());  // outside the stream
}

TEST(OffloadFile, ByteChangedByHandIsRefusedNamingStreamAndChunk) {
  Dir dir;
  auto f = OffloadFile::Create(Options(dir / "opt.bin", kElems));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  // Stream 1, chunk 2: header block + (1 * 6 + 2) chunks of 8 KiB, a few bytes in.
  const off_t at = 4096 + (1 * 6 + 2) * 8192 + 100;
  {
    const int fd = ::open((dir / "opt.bin").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char junk = 0x5a;
    ASSERT_EQ(::pwrite(fd, &junk, 1, at), 1);
    ::close(fd);
  }
  std::vector<float> out(10);
  Status r = (*f)->Read(1, 2 * 2048, 10, out.data());
  EXPECT_EQ(r.code(), StatusCode::kIoError);
  EXPECT_NE(r.message().find("stream 1 chunk 2"), std::string::npos) << r.ToString();
  EXPECT_TRUE((*f)->Read(1, 0, 10, out.data()).ok());  // other chunks still verify
  Status p = (*f)->Run(OffloadFile::Pass::kUpdate, 0, [](int64_t, int64_t, float* const*) {});
  EXPECT_EQ(p.code(), StatusCode::kIoError);
  EXPECT_NE(p.message().find("reads back other bytes"), std::string::npos) << p.ToString();
  // Half-updated state: nothing more is done with it.
  EXPECT_EQ((*f)->Run(OffloadFile::Pass::kRead, 0, [](int64_t, int64_t, float* const*) {}).code(),
            StatusCode::kIoError);
}

// Fails the n-th write (1-based) with EIO; counts every call.
class FailNthWrite : public OffloadFaults {
 public:
  explicit FailNthWrite(int n) : n_(n) {}
  Status Before(const char* op, const char*, const std::string& path, int64_t chunk,
                int64_t) override {
    if (std::strcmp(op, "write") != 0 || ++writes_ != n_) return Status::Ok();
    return IoError(path + ": injected: write of chunk " + std::to_string(chunk) + ": " +
                   std::strerror(EIO));
  }
  int writes_ = 0;

 private:
  int n_;
};

TEST_P(OffloadFilePaths, InjectedIoErrorEndsThePassAndTheFile) {
  Dir dir;
  OffloadFileOptions o = Options(dir / "opt.bin", kElems, 2);
  o.io_uring = std::get<0>(GetParam());
  o.direct = std::get<1>(GetParam());
  FailNthWrite faults(12 + 5);  // Create's zero fill writes 12 chunks; then the 5th write
  o.faults = &faults;
  auto f = OffloadFile::Create(o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  int chunks = 0;
  Status s = (*f)->Run(OffloadFile::Pass::kUpdate, 0, [&](int64_t, int64_t, float* const*) { ++chunks; });
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s.ToString();
  EXPECT_LE(chunks, 4);
  EXPECT_EQ((*f)->Run(OffloadFile::Pass::kRead, 0, [](int64_t, int64_t, float* const*) {}).code(),
            StatusCode::kIoError);
}

TEST(OffloadFile, LeftoverFileIsReplacedWithANote) {
  Dir dir;
  {
    auto f = OffloadFile::Create(Options(dir / "opt.bin", kElems));
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Run(OffloadFile::Pass::kWrite, 0, [](int64_t b, int64_t e, float* const* s) {
      for (int k = 0; k < 3; ++k) std::fill(s[k], s[k] + (e - b), 7.0f);
    }).ok());
    // What a crash leaves: the file as it was while its process lived (a destructor removes it).
    fs::copy_file(dir / "opt.bin", dir / "crashed.bin");
  }
  EXPECT_FALSE(fs::exists(dir / "opt.bin"));
  fs::rename(dir / "crashed.bin", dir / "opt.bin");
  OffloadFileOptions o = Options(dir / "opt.bin", kElems);
  o.run = "the next incarnation";
  auto f = OffloadFile::Create(o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_FALSE((*f)->notes().empty());
  EXPECT_NE((*f)->notes()[0].find("state written by offload_file_test: not trusted, replaced"),
            std::string::npos)
      << (*f)->notes()[0];
  std::vector<float> out(100);
  ASSERT_TRUE((*f)->Read(2, 5000, 100, out.data()).ok());
  for (float v : out) ASSERT_EQ(v, 0.0f);
  // Bytes that are not an offload file at all.
  fs::remove(dir / "junk.bin");
  std::ofstream(dir / "junk.bin") << "hello";
  auto j = OffloadFile::Create(Options(dir / "junk.bin", 10));
  ASSERT_TRUE(j.ok());
  EXPECT_NE((*j)->notes()[0].find("bytes that are not an offload file"), std::string::npos);
}

TEST(OffloadFile, SharedMissingAndTooSmallAreClearErrors) {
  Dir dir;
  auto first = OffloadFile::Create(Options(dir / "opt.bin", kElems));
  ASSERT_TRUE(first.ok());
  auto second = OffloadFile::Create(Options(dir / "opt.bin", kElems));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(second.status().message().find("in use by another live process"), std::string::npos);

  auto missing = OffloadFile::Create(Options(dir / "nope/opt.bin", kElems));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("optimizer.offload_dir " + (dir / "nope") + ": does not exist"),
            std::string::npos) << missing.status().ToString();
  std::ofstream(dir / "file") << "x";
  auto not_dir = OffloadFile::Create(Options(dir / "file/opt.bin", kElems));
  ASSERT_FALSE(not_dir.ok());
  EXPECT_NE(not_dir.status().message().find("is not a directory"), std::string::npos);

  // 2^42 floats per stream: 48 TiB, more than any test disk.
  auto huge = OffloadFile::Create(Options(dir / "huge.bin", int64_t{1} << 42));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("needs 52776558137344 bytes"), std::string::npos)
      << huge.status().ToString();
  EXPECT_NE(huge.status().message().find("were available there"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "huge.bin"));  // nothing left behind
  EXPECT_TRUE(fs::exists(dir / "opt.bin"));     // the live process's file is untouched
  second = Status(StatusCode::kInternal, "gone");  // the refused object, destroyed
  EXPECT_TRUE(fs::exists(dir / "opt.bin"));        // did not remove the holder's file
  first = Status(StatusCode::kInternal, "gone");   // the holder, destroyed: scratch removed
  EXPECT_FALSE(fs::exists(dir / "opt.bin"));
}

// ---- ShardedAdamW on disk ------------------------------------------------------------------

std::vector<float> Ramp(int64_t n, float scale, float phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = scale * static_cast<float>(((i * 7919 + 13) % 201) - 100) / 100.0f + phase;
  }
  return v;
}

TEST(ShardedAdamWOnDisk, StepsToTheBitsOfTheStateInMemory) {
  Dir dir;
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  cfg.weight_decay = 0.1f;
  const std::vector<int64_t> bounds{0, 5000, 5003, 5003, 9100, 30000};
  const int64_t n = bounds.back();
  std::vector<ParamRange> ranges;
  for (int64_t off = 0, i = 0; off < n; off += 700, ++i) {
    ranges.push_back({off, std::min<int64_t>(700, n - off), i % 2 == 0, "p" + std::to_string(i)});
  }
  for (int ranks = 1; ranks <= 3; ++ranks) {
    for (bool master : {true, false}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, master " + std::to_string(master));
      const ShardLayout layout(bounds, ranks, ranks > 1 ? 64 : 1);
      for (int r = 0; r < ranks; ++r) {
        MemoryTracker tracker;
        ShardedAdamW mem(cfg, layout, r, ranges, master, nullptr);
        ShardedAdamWDisk disk;
        disk.path = dir / ("rank" + std::to_string(r) + ".bin");
        disk.pool_bytes = 96 << 10;  // far less than the state: many chunks
        auto on_disk = ShardedAdamW::CreateOnDisk(cfg, layout, r, ranges, master, &tracker, disk);
        ASSERT_TRUE(on_disk.ok()) << on_disk.status().ToString();
        ShardedAdamW& d = **on_disk;
        EXPECT_LE(tracker.reserved(MemoryKind::kOptimizerState), static_cast<size_t>(disk.pool_bytes));
        EXPECT_EQ(tracker.reserved(MemoryKind::kOffloaded), d.disk()->file_bytes());
        const std::vector<float> init = Ramp(n, 1.0f, 0.1f);
        // In place: each implementation its own copy of the flat values.
        std::vector<float> flat_mem = init, flat_disk = init;
        auto pieces = [&](std::vector<float>& flat) {
          std::vector<float*> p;
          if (master) return p;
          for (int u = 0; u < layout.num_units(); ++u) {
            p.push_back(layout.piece_real(u, r) > 0 ? flat.data() + layout.piece_begin(u, r) : nullptr);
          }
          return p;
        };
        auto fill = [&](int u, int64_t off, int64_t len, float* out) {
          std::copy_n(init.begin() + layout.piece_begin(u, r) + off, len, out);
        };
        if (master) {
          mem.LoadMaster(init.data());
          ASSERT_TRUE(d.Load(ShardedAdamW::kMaster, fill).ok());
        }
        std::vector<float> rounded(static_cast<size_t>(n), -1.0f);  // the on_master sink's
        for (int step = 0; step < 3; ++step) {
          const std::vector<float> g = Ramp(layout.packed_size(), 0.5f, 0.01f * step);
          const float lr = 1e-2f * (step + 1);
          ASSERT_TRUE(mem.Step(pieces(flat_mem), g.data(), lr, 0.5f).ok());
          ASSERT_TRUE(d.Step(pieces(flat_disk), g.data(), lr, 0.5f,
                             [&](int u, int64_t off, int64_t len, const float* v) {
                               std::copy_n(v, len, rounded.begin() + layout.piece_begin(u, r) + off);
                             }).ok());
        }
        EXPECT_EQ(d.adamw().step(), 3);
        EXPECT_EQ(std::memcmp(flat_mem.data(), flat_disk.data(), n * sizeof(float)), 0);
        for (int u = 0; u < layout.num_units(); ++u) {
          const int64_t real = layout.piece_real(u, r);
          std::vector<float> got(static_cast<size_t>(real));
          for (auto s : {ShardedAdamW::kExpAvg, ShardedAdamW::kExpAvgSq, ShardedAdamW::kMaster}) {
            if (s == ShardedAdamW::kMaster && !master) continue;
            ASSERT_TRUE(d.Read(s, u, 0, real, got.data()).ok());
            EXPECT_EQ(d.resident(s, u), nullptr);
            ASSERT_EQ(std::memcmp(got.data(), mem.resident(s, u), real * sizeof(float)), 0)
                << "stream " << s << " unit " << u;
            if (s == ShardedAdamW::kMaster && real > 0) {
              EXPECT_EQ(std::memcmp(got.data(), rounded.data() + layout.piece_begin(u, r),
                                    real * sizeof(float)), 0);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
