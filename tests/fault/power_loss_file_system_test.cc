// tests/fault/power_loss_file_system_test.cc — PowerLossFileSystem (power_loss_file_system.h)
// itself: after SimulatePowerLoss the real tree holds exactly what fsync of files and of
// directories made durable — unsynced bytes, entries, renames and removals are undone, synced
// ones survive, objects are followed by identity (not path), a crash point stops every later
// operation, and passthrough subtrees (RocksDB's) are left alone.
// links: tessera_power_loss_fs
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fault/power_loss_file_system.h"
#include "tests/testing/temp_dir.h"

namespace tessera::testing {
namespace {

namespace stdfs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class PowerLoss : public ::testing::Test {
 protected:
  // Files made here, before the file system exists, are durable.
  void Start() {
    auto made = PowerLossFileSystem::Create(dir_.str(), {"db"});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    fs_ = std::move(*made);
  }
  std::string P(const std::string& rel) const { return dir_ / rel; }

  // Creates `rel` with `bytes`; syncs the file when `sync`.
  void WriteThrough(const std::string& rel, const std::string& bytes, bool sync) {
    auto fd = fs_->OpenForWrite(P(rel));
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    ASSERT_TRUE(fs_->Write(*fd, bytes.data(), bytes.size(), P(rel)).ok());
    if (sync) {
      ASSERT_TRUE(fs_->Sync(*fd, P(rel)).ok());
    }
    ASSERT_TRUE(fs_->Close(*fd, P(rel)).ok());
  }
  void SyncDir(const std::string& rel) { ASSERT_TRUE(fs_->SyncDir(rel.empty() ? dir_.str() : P(rel)).ok()); }
  void PowerCut() {
    Status st = fs_->SimulatePowerLoss();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  bool Exists(const std::string& rel) const { return stdfs::exists(P(rel)); }

  ScopedTempDir dir_{"power_loss"};
  std::unique_ptr<PowerLossFileSystem> fs_;
};

TEST_F(PowerLoss, AFileAndItsEntryBothSyncedSurvive) {
  Start();
  WriteThrough("a", "hello", /*sync=*/true);
  SyncDir("");
  EXPECT_EQ(fs_->DurableFile("a"), "hello");
  PowerCut();
  EXPECT_EQ(Slurp(P("a")), "hello");
}

TEST_F(PowerLoss, UnsyncedFileContentVanishesEvenWhenItsEntrySurvives) {
  Start();
  WriteThrough("a", "hello", /*sync=*/false);
  SyncDir("");
  PowerCut();
  ASSERT_TRUE(Exists("a"));
  EXPECT_EQ(Slurp(P("a")), "");
}

TEST_F(PowerLoss, SyncedFileWhoseDirectoryEntryWasNeverSyncedVanishes) {
  Start();
  WriteThrough("a", "hello", /*sync=*/true);
  EXPECT_EQ(fs_->DurableFile("a"), std::nullopt);
  PowerCut();
  EXPECT_FALSE(Exists("a"));
}

TEST_F(PowerLoss, BytesAppendedAfterTheLastSyncAreLost) {
  Start();
  auto fd = fs_->OpenForWrite(P("a"));
  ASSERT_TRUE(fd.ok());
  ASSERT_TRUE(fs_->Write(*fd, "abc", 3, P("a")).ok());
  ASSERT_TRUE(fs_->Sync(*fd, P("a")).ok());
  ASSERT_TRUE(fs_->Write(*fd, "def", 3, P("a")).ok());
  ASSERT_TRUE(fs_->WriteAt(*fd, "X", 1, 0, P("a")).ok());
  ASSERT_TRUE(fs_->Close(*fd, P("a")).ok());
  SyncDir("");
  EXPECT_EQ(Slurp(P("a")), "Xbcdef");  // live
  PowerCut();
  EXPECT_EQ(Slurp(P("a")), "abc");
}

TEST_F(PowerLoss, AnUnsyncedTruncatingRewriteIsLostAndASyncedOneSurvives) {
  Put(P("a"), "old contents");
  Put(P("b"), "old contents");
  Start();
  WriteThrough("a", "new", /*sync=*/false);
  WriteThrough("b", "new", /*sync=*/true);
  PowerCut();
  EXPECT_EQ(Slurp(P("a")), "old contents");
  EXPECT_EQ(Slurp(P("b")), "new");  // same file, its entry was durable already
}

TEST_F(PowerLoss, ARenameWithoutSyncDirIsUndone) {
  Put(P("a"), "A");
  Put(P("b"), "B");
  Start();
  ASSERT_TRUE(fs_->Rename(P("a"), P("c")).ok());
  ASSERT_TRUE(fs_->Rename(P("b"), P("a")).ok());  // over an existing name
  PowerCut();
  EXPECT_EQ(Slurp(P("a")), "A");
  EXPECT_EQ(Slurp(P("b")), "B");
  EXPECT_FALSE(Exists("c"));
}

TEST_F(PowerLoss, ARenameFollowedBySyncDirSurvives) {
  Put(P("a"), "A");
  Start();
  ASSERT_TRUE(fs_->Rename(P("a"), P("c")).ok());
  SyncDir("");
  PowerCut();
  EXPECT_FALSE(Exists("a"));
  EXPECT_EQ(Slurp(P("c")), "A");
}

TEST_F(PowerLoss, ARemovalWithoutSyncDirIsUndoneWithTheDurableContent) {
  Put(P("a"), "durable");
  stdfs::create_directories(P("d/e"));
  Put(P("d/e/f"), "deep");
  Start();
  WriteThrough("a", "rewritten, unsynced", /*sync=*/false);
  ASSERT_TRUE(fs_->Remove(P("a")).ok());
  ASSERT_TRUE(fs_->RemoveTree(P("d")).ok());
  EXPECT_FALSE(Exists("a"));
  PowerCut();
  EXPECT_EQ(Slurp(P("a")), "durable");
  EXPECT_EQ(Slurp(P("d/e/f")), "deep");
}

TEST_F(PowerLoss, ARemovalFollowedBySyncDirSurvives) {
  Put(P("a"), "A");
  stdfs::create_directories(P("d"));
  Put(P("d/f"), "F");
  Start();
  ASSERT_TRUE(fs_->Remove(P("a")).ok());
  ASSERT_TRUE(fs_->RemoveTree(P("d")).ok());
  SyncDir("");
  PowerCut();
  EXPECT_FALSE(Exists("a"));
  EXPECT_FALSE(Exists("d"));
}

TEST_F(PowerLoss, ANewDirectoryExistsDurablyOnlyOnceItsParentIsSynced) {
  Start();
  ASSERT_TRUE(fs_->MakeDir(P("d")).ok());
  ASSERT_TRUE(fs_->MakeDir(P("d/e")).ok());
  WriteThrough("d/e/f", "F", /*sync=*/true);
  SyncDir("d/e");
  SyncDir("d");  // d's entries (e) are durable, d itself is not: its parent was never synced
  PowerCut();
  EXPECT_FALSE(Exists("d"));

  ASSERT_TRUE(fs_->MakeDir(P("d")).ok());
  ASSERT_TRUE(fs_->MakeDir(P("d/e")).ok());
  WriteThrough("d/e/f", "F", /*sync=*/true);
  SyncDir("d/e");
  SyncDir("");  // d is durable, but empty: its own entries were never synced
  PowerCut();
  EXPECT_TRUE(Exists("d"));
  EXPECT_FALSE(Exists("d/e"));
}

TEST_F(PowerLoss, ARenamedDirectoryCarriesItsSubtreeByIdentity) {
  Start();
  ASSERT_TRUE(fs_->MakeDir(P("a.tmp")).ok());
  WriteThrough("a.tmp/f", "F", /*sync=*/true);
  SyncDir("a.tmp");
  ASSERT_TRUE(fs_->Rename(P("a.tmp"), P("a")).ok());
  SyncDir("");
  PowerCut();
  EXPECT_FALSE(Exists("a.tmp"));
  EXPECT_EQ(Slurp(P("a/f")), "F");
}

// A path reused by a new file is a new file: its sync does not make the old entry point at it
// (a model keyed by path, or by a reused inode number, would say "new").
TEST_F(PowerLoss, AFileIsFollowedByIdentityNotByPath) {
  Put(P("x"), "old");
  Start();
  ASSERT_TRUE(fs_->Remove(P("x")).ok());
  WriteThrough("x", "new", /*sync=*/true);  // never SyncDir: the removal is not durable
  PowerCut();
  EXPECT_EQ(Slurp(P("x")), "old");
}

TEST_F(PowerLoss, EveryOperationAfterTheCrashPointFails) {
  Put(P("a"), "A");
  Start();
  fs_->CrashAfter(2);
  auto fd = fs_->OpenForWrite(P("b"));                // 1
  ASSERT_TRUE(fd.ok());
  EXPECT_TRUE(fs_->Write(*fd, "x", 1, P("b")).ok());  // 2
  EXPECT_FALSE(fs_->crashed());
  Status sync = fs_->Sync(*fd, P("b"));                // 3: the process is dead
  EXPECT_EQ(sync.code(), StatusCode::kIoError);
  EXPECT_NE(sync.message().find("simulated crash"), std::string::npos) << sync.ToString();
  EXPECT_TRUE(fs_->crashed());
  EXPECT_FALSE(fs_->ReadFile(P("a"), 100).ok());
  EXPECT_FALSE(fs_->ListDir(dir_.str()).ok());
  EXPECT_FALSE(fs_->OpenForRead(P("a")).ok());
  EXPECT_FALSE(fs_->Rename(P("a"), P("c")).ok());
  EXPECT_TRUE(Exists("a"));                           // the refused rename did nothing
  EXPECT_FALSE(fs_->Close(*fd, P("b")).ok());         // ... but the descriptor is released
  EXPECT_EQ(fs_->mutating_ops(), 2);
  PowerCut();
  EXPECT_FALSE(Exists("b"));
  // A reboot: the tree is all durable, the file system lives again and counts from zero.
  EXPECT_FALSE(fs_->crashed());
  EXPECT_EQ(fs_->mutating_ops(), 0);
  EXPECT_TRUE(fs_->ReadFile(P("a"), 100).ok());
  PowerCut();
  EXPECT_EQ(Slurp(P("a")), "A");
}

TEST_F(PowerLoss, PowerLossWithADescriptorOpenIsRefused) {
  Start();
  auto fd = fs_->OpenForWrite(P("a"));
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(fs_->SimulatePowerLoss().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs_->Close(*fd, P("a")).ok());
}

TEST_F(PowerLoss, APassthroughSubtreeStaysAndAnythingElseWrittenOutsideTheSeamGoes) {
  Start();
  stdfs::create_directories(P("db"));
  Put(P("db/LOG"), "written by RocksDB");
  Put(P("stray"), "written around the seam");
  PowerCut();
  EXPECT_EQ(Slurp(P("db/LOG")), "written by RocksDB");
  EXPECT_FALSE(Exists("stray"));
}

TEST_F(PowerLoss, APassthroughSubtreeGoesWithAParentThatIsNotDurable) {
  auto made = PowerLossFileSystem::Create(dir_.str(), {"ckpt/db"});
  ASSERT_TRUE(made.ok());
  fs_ = std::move(*made);
  ASSERT_TRUE(fs_->MakeDir(P("ckpt")).ok());
  stdfs::create_directories(P("ckpt/db"));
  Put(P("ckpt/db/LOG"), "x");
  WriteThrough("ckpt/f", "F", /*sync=*/true);
  SyncDir("ckpt");
  PowerCut();
  EXPECT_FALSE(Exists("ckpt"));

  ASSERT_TRUE(fs_->MakeDir(P("ckpt")).ok());
  SyncDir("");
  stdfs::create_directories(P("ckpt/db"));
  Put(P("ckpt/db/LOG"), "x");
  PowerCut();
  EXPECT_EQ(Slurp(P("ckpt/db/LOG")), "x");  // ckpt survives (empty but for the passthrough)
}

TEST_F(PowerLoss, PathsOutsideTheRootAreForwardedUntracked) {
  ScopedTempDir other("power_loss_other");
  Start();
  WriteThrough("../" + stdfs::path(other.str()).filename().string() + "/f", "F", false);
  PowerCut();
  EXPECT_EQ(Slurp(other / "f"), "F");
}

}  // namespace
}  // namespace tessera::testing
