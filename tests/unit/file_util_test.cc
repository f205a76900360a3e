// runtime/core/file_util: whole-file reads, the write-temp-then-rename commit, and the
// FileSystem seam (a fault-injecting file system proves failed writes/fsyncs lose nothing).
// links: tessera_core
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/file_util.h"
#include "tests/fault/faulty_file_system.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::FaultyFileSystem;

std::string TempDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("tessera_file_util_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}


TEST(FileUtil, RoundTripsBytesIncludingNulsAndReplaces) {
  const std::string path = TempDir("round_trip") + "/f.bin";
  std::string bytes("a\0b\xff\n", 5);
  for (int i = 0; i < 200000; ++i) bytes.push_back(static_cast<char>(i * 7));  // > one read chunk
  ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
  Result<std::string> back = ReadFileToString(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, bytes);
  ASSERT_TRUE(WriteFileAtomic(path, "short").ok());  // replaces, no stale tail
  EXPECT_EQ(*ReadFileToString(path), "short");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_EQ(*ReadFileToString(path), "");
}

TEST(FileUtil, StreamingWriterPatchesHeaderBeforeCommit) {
  const std::string path = TempDir("streaming") + "/f.bin";
  Result<std::unique_ptr<AtomicFileWriter>> w = AtomicFileWriter::Create(path);
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_TRUE((*w)->Append("????body", 8).ok());
  ASSERT_TRUE((*w)->WriteAt(0, "HEAD", 4).ok());
  EXPECT_EQ((*w)->bytes_appended(), 8u);
  EXPECT_FALSE(fs::exists(path));  // nothing visible before Commit
  EXPECT_EQ((*w)->WriteAt(6, "xyz", 3).code(), StatusCode::kInvalidArgument);  // past the end
  // The writer refuses work after a failure and has removed its .tmp.
  EXPECT_EQ((*w)->Commit().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  w = AtomicFileWriter::Create(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append("????body", 8).ok());
  ASSERT_TRUE((*w)->WriteAt(0, "HEAD", 4).ok());
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(Slurp(path), "HEADbody");
  EXPECT_EQ((*w)->Append("x", 1).code(), StatusCode::kFailedPrecondition);
}

TEST(FileUtil, WriterDestroyedBeforeCommitKeepsTheOldFile) {
  const std::string path = TempDir("abandon") + "/f.txt";
  ASSERT_TRUE(WriteFileAtomic(path, "old contents").ok());
  {
    Result<std::unique_ptr<AtomicFileWriter>> w = AtomicFileWriter::Create(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append("new", 3).ok());
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }
  EXPECT_EQ(Slurp(path), "old contents");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(FileUtil, MissingAndUnreadableFilesNameThePath) {
  const std::string dir = TempDir("missing");
  Result<std::string> r = ReadFileToString(dir + "/nope.txt");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(dir + "/nope.txt"), std::string::npos);
  r = ReadFileToString(dir);  // a directory is refused before any read
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), dir + ": is a directory, not a regular file");
  ASSERT_TRUE(WriteFileAtomic(dir + "/big.txt", std::string(100, 'x')).ok());
  EXPECT_EQ(ReadFileToString(dir + "/big.txt", 99).status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(ReadFileToString(dir + "/big.txt", 100).ok());
  // Creating inside a missing directory is an I/O error naming the .tmp.
  Status st = WriteFileAtomic(dir + "/no/such/dir/f.txt", "x");
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find(dir + "/no/such/dir/f.txt.tmp"), std::string::npos);
}

TEST(FileUtil, FailedWriteOrFsyncKeepsPreviousFileAndRemovesTmp) {
  const std::string path = TempDir("faults") + "/weights.bin";
  ASSERT_TRUE(WriteFileAtomic(path, "generation 1").ok());
  for (int n = 1; n <= 3; ++n) {
    SCOPED_TRACE("failing write " + std::to_string(n));
    FaultyFileSystem faulty;
    faulty.fail_write_at = n;
    Result<std::unique_ptr<AtomicFileWriter>> w = AtomicFileWriter::Create(path, faulty);
    ASSERT_TRUE(w.ok());
    Status st;
    for (int i = 0; i < 3 && st.ok(); ++i) st = (*w)->Append("chunk", 5);
    if (st.ok()) st = (*w)->Commit();
    EXPECT_EQ(st.code(), StatusCode::kIoError);
    EXPECT_NE(st.message().find(std::strerror(ENOSPC)), std::string::npos) << st.message();
    EXPECT_EQ(faulty.writes, n);  // nothing written after the failure
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_EQ(Slurp(path), "generation 1");
  }
  FaultyFileSystem faulty;
  faulty.fail_sync_at = 1;
  faulty.err = EIO;
  Status st = WriteFileAtomic(path, "generation 2", faulty);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("fsync"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(path + ".tmp"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(Slurp(path), "generation 1");
  // The same file system with the fault behind it commits normally.
  ASSERT_TRUE(WriteFileAtomic(path, "generation 3", faulty).ok());
  EXPECT_EQ(Slurp(path), "generation 3");
}

TEST(FileUtil, PreadAllReportsTruncationAndWriteAllWritesEverything) {
  const std::string path = TempDir("pread") + "/f.bin";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(WriteAll(fd, "0123456789", 10, path).ok());
  char buf[8] = {};
  ASSERT_TRUE(PreadAll(fd, buf, 4, 3, path).ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  Status st = PreadAll(fd, buf, 8, 6, path);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("byte 10"), std::string::npos) << st.message();
  ::close(fd);
  EXPECT_EQ(WriteAll(-1, "x", 1, path).code(), StatusCode::kIoError);
  EXPECT_EQ(ParentDir("a/b/c.txt"), "a/b");
  EXPECT_EQ(ParentDir("c.txt"), ".");
  EXPECT_EQ(ParentDir("/c.txt"), "/");
  EXPECT_TRUE(SyncDir(ParentDir(path)).ok());
  EXPECT_EQ(SyncDir(path + "/nope").code(), StatusCode::kIoError);
}


// Reading never hangs on a FIFO (nobody will ever write to it) and never reads a device
// without end: both are refused before the first byte, by the whole-file reader and by the
// open that positional readers use.
TEST(FileUtil, FifosAndDevicesAreRefusedWithoutBlocking) {
  const std::string dir = TempDir("fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  Result<std::string> r = ReadFileToString(fifo);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), fifo + ": is a FIFO, not a regular file");
  Result<int> fd = OpenRegularFileForRead(fifo);
  EXPECT_EQ(fd.status().message(), fifo + ": is a FIFO, not a regular file");
  EXPECT_EQ(DefaultFileSystem().OpenForRead(fifo).status().code(), StatusCode::kDataLoss);
  r = ReadFileToString("/dev/zero");  // would otherwise fill memory
  EXPECT_EQ(r.status().message(), "/dev/zero: is a character device, not a regular file");
}

TEST(FileUtil, AFileLargerThanTheBoundIsRefusedBeforeReading) {
  const std::string dir = TempDir("bound");
  ASSERT_TRUE(WriteFileAtomic(dir + "/big.txt", std::string(1000, 'x')).ok());
  Result<std::string> r = ReadFileToString(dir + "/big.txt", 10);
  EXPECT_EQ(r.status().message(), dir + "/big.txt: 1000 bytes, larger than the 10 bytes allowed");
}

TEST(FileUtil, KindDoesNotFollowSymlinks) {
  const std::string dir = TempDir("kind");
  ASSERT_TRUE(WriteFileAtomic(dir + "/f", "x").ok());
  ASSERT_EQ(::symlink((dir + "/f").c_str(), (dir + "/link").c_str()), 0);
  ASSERT_EQ(::mkfifo((dir + "/p").c_str(), 0600), 0);
  FileSystem& files = DefaultFileSystem();
  EXPECT_EQ(*files.Kind(dir + "/f"), FileKind::kRegular);
  EXPECT_EQ(*files.Kind(dir + "/link"), FileKind::kSymlink);
  EXPECT_EQ(*files.Kind(dir), FileKind::kDirectory);
  EXPECT_EQ(*files.Kind(dir + "/p"), FileKind::kOther);
  EXPECT_EQ(*files.Kind(dir + "/none"), FileKind::kMissing);
  EXPECT_EQ(*files.Kind(dir + "/f/below"), FileKind::kMissing);  // ENOTDIR
}

TEST(FileUtil, ReadInputFileSaysWhatItWasReading) {
  const std::string dir = TempDir("input");
  Result<std::string> r = ReadInputFile(dir + "/none.yaml", 100, "config");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), dir + "/none.yaml: cannot read config: file not found");
  r = ReadInputFile("/dev/zero", 100, "scenario");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);  // permanent: bad input, never retried
  EXPECT_EQ(r.status().message(),
            "/dev/zero: cannot read scenario: is a character device, not a regular file");
}

}  // namespace
}  // namespace tessera
