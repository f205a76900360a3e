// tests/unit/checkpoint_commit_test.cc — the directory protocol of a checkpoint root: staging,
// commit, re-run of a committed step, abandon, delete, what CommittedSteps ignores, the sweep
// after a crash (stale .tmp of any step included), and the fault matrix: every write, fsync,
// rename and mkdir of a save+commit failed in turn (FaultyFileSystem) leaves the previous
// checkpoint committed and verified and the new one absent or complete — never a step
// directory without a valid manifest.
// links: tessera_checkpoint
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "runtime/core/file_util.h"
#include "tests/fault/faulty_file_system.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::FaultyFileSystem;
using testing::ScopedTempDir;

constexpr int64_t kNumel = 300;  // "param/w": f32 [300], ranks 0 and 1 hold halves

float Value(int64_t step, int version, int64_t i) {
  return static_cast<float>(step * 1000 + version * 100000) + static_cast<float>(i) * 0.25f;
}

// A full save of `step` (two ranks) through `fsys`: staging, shards, commit. `version` makes
// re-runs of one step distinguishable.
Status Save(const std::string& root, int64_t step, int version, FileSystem& fsys) {
  RETURN_IF_ERROR(PrepareStaging(root, step, fsys));
  const std::string staging = root + "/" + StagingDirName(step);
  std::vector<float> w(kNumel), m(kNumel);
  for (int64_t i = 0; i < kNumel; ++i) {
    w[i] = Value(step, version, i);
    m[i] = -Value(step, version, i);
  }
  Manifest man;
  man.step = step;
  man.tensors = {{"param/w", {kNumel}, DType::kF32}, {"exp_avg/w", {kNumel}, DType::kF32}};
  man.state = JsonValue::Object({{"version", JsonValue::Integer(version)}});
  for (int rank = 0; rank < 2; ++rank) {
    ASSIGN_OR_RETURN(auto writer, ShardWriter::Create(staging, rank, fsys));
    const int64_t lo = rank * kNumel / 2, hi = (rank + 1) * kNumel / 2;
    RETURN_IF_ERROR(writer->Append("param/w", lo, hi, DType::kF32, w.data() + lo));
    RETURN_IF_ERROR(writer->Append("exp_avg/w", lo, hi, DType::kF32, m.data() + lo));
    ASSIGN_OR_RETURN(ShardRecord rec, writer->Finish());
    man.shards.push_back(std::move(rec));
  }
  return CommitCheckpoint(root, man, fsys);
}

// The committed step_<step> opens, verifies, and holds the data of `version` (returned), or
// -1 with a test failure.
int CheckCommitted(const std::string& root, int64_t step) {
  auto reader = CheckpointReader::Open(root + "/" + StepDirName(step));
  if (!reader.ok()) {
    ADD_FAILURE() << "step " << step << ": " << reader.status().ToString();
    return -1;
  }
  Result<uint64_t> verified = (*reader)->VerifyAll();
  EXPECT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ((*reader)->manifest().step, step);
  const int version = static_cast<int>((*reader)->manifest().state.Find("version")->as_int());
  std::vector<float> w(kNumel);
  EXPECT_TRUE((*reader)->Read("param/w", 0, kNumel, w.data()).ok());
  for (int64_t i = 0; i < kNumel; ++i) {
    if (w[i] != Value(step, version, i)) {
      ADD_FAILURE() << "step " << step << " element " << i;
      return -1;
    }
  }
  return version;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int64_t> Steps(const std::string& root) {
  auto steps = CommittedSteps(root);
  EXPECT_TRUE(steps.ok()) << steps.status().ToString();
  return steps.ok() ? *steps : std::vector<int64_t>{};
}

TEST(CheckpointCommit, Names) {
  EXPECT_EQ(StepDirName(0), "step_00000000");
  EXPECT_EQ(StepDirName(100), "step_00000100");
  EXPECT_EQ(StepDirName(123456789), "step_123456789");
  EXPECT_EQ(StagingDirName(100), "step_00000100.tmp");
  EXPECT_EQ(ShardFileName(12), "shard_12.bin");
}

TEST(CheckpointCommit, SaveCommitRerunDelete) {
  ScopedTempDir tmp("ckpt_commit");
  const std::string root = tmp / "a/b/ckpt";  // parents created
  EXPECT_TRUE(Steps(root).empty());           // an absent root has none
  ASSERT_TRUE(Save(root, 1, 0, DefaultFileSystem()).ok());
  ASSERT_TRUE(Save(root, 2, 0, DefaultFileSystem()).ok());
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(CheckCommitted(root, 1), 0);
  EXPECT_EQ(CheckCommitted(root, 2), 0);
  EXPECT_EQ(Names(root), (std::vector<std::string>{"step_00000001", "step_00000002"}));
  EXPECT_EQ(Names(root + "/step_00000002"),
            (std::vector<std::string>{"manifest.json", "shard_0.bin", "shard_1.bin"}));

  // A re-run of step 2 replaces it, leaving nothing aside.
  ASSERT_TRUE(Save(root, 2, 1, DefaultFileSystem()).ok());
  EXPECT_EQ(CheckCommitted(root, 2), 1);
  EXPECT_EQ(Names(root), (std::vector<std::string>{"step_00000001", "step_00000002"}));

  ASSERT_TRUE(DeleteCheckpoint(root, 1).ok());
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{2}));
  EXPECT_EQ(Names(root), (std::vector<std::string>{"step_00000002"}));
  EXPECT_EQ(DeleteCheckpoint(root, 1).code(), StatusCode::kNotFound);

  ASSERT_TRUE(PrepareStaging(root, 3).ok());
  EXPECT_TRUE(fs::is_directory(root + "/step_00000003.tmp"));
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{2}));
  ASSERT_TRUE(AbandonStaging(root, 3).ok());
  EXPECT_FALSE(fs::exists(root + "/step_00000003.tmp"));
  EXPECT_TRUE(AbandonStaging(root, 3).ok());  // nothing to remove is fine
}

TEST(CheckpointCommit, PrepareStagingClearsStaleStaging) {
  ScopedTempDir tmp("ckpt_commit");
  const std::string root = tmp.str();
  ASSERT_TRUE(PrepareStaging(root, 4).ok());
  std::ofstream(root + "/step_00000004.tmp/shard_9.bin") << "stale";
  ASSERT_TRUE(PrepareStaging(root, 4).ok());
  EXPECT_TRUE(Names(root + "/step_00000004.tmp").empty());
}

TEST(CheckpointCommit, CommittedStepsIgnoresEverythingElse) {
  ScopedTempDir tmp("ckpt_commit");
  const std::string root = tmp.str();
  ASSERT_TRUE(Save(root, 7, 0, DefaultFileSystem()).ok());
  ASSERT_TRUE(Save(root, 123456789, 0, DefaultFileSystem()).ok());
  const std::string manifest = root + "/step_00000007/manifest.json";
  for (const char* name : {"step_00000001.tmp", "step_00000002.old", "step_00000003.deleting",
                           "step_4", "step_0000005", "step_00000006x", "step_", "steps_00000008",
                           "step_-0000009", "step_+0000010", "catalog"}) {
    fs::create_directories(root + "/" + name);
    fs::copy_file(manifest, root + "/" + name + "/manifest.json");
  }
  fs::create_directories(root + "/step_00000011");  // no manifest: not committed
  std::ofstream(root + "/step_00000012.json") << "{}";
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{123456789, 7}));
}

TEST(CheckpointCommit, CommitRefusesIncompleteCheckpoints) {
  ScopedTempDir tmp("ckpt_commit");
  const std::string root = tmp.str();
  ASSERT_TRUE(PrepareStaging(root, 5).ok());
  const std::string staging = root + "/" + StagingDirName(5);
  std::vector<float> w(kNumel, 1.0f);
  auto writer = ShardWriter::Create(staging, 0);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append("param/w", 0, kNumel / 2, DType::kF32, w.data()).ok());
  Result<ShardRecord> rec = (*writer)->Finish();
  ASSERT_TRUE(rec.ok());
  Manifest m;
  m.step = 5;
  m.tensors = {{"param/w", {kNumel}, DType::kF32}};
  m.shards = {*rec};

  // Half the tensor: a coverage gap.
  Status st = CommitCheckpoint(root, m);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("[150, 300) are in no segment"), std::string::npos) << st.ToString();
  // A shard the manifest lists but nobody wrote.
  ShardRecord ghost{1, "shard_1.bin", kNumel / 2 * 4, {{"param/w", kNumel / 2, kNumel, 0, 0}}};
  m.shards.push_back(ghost);
  st = CommitCheckpoint(root, m);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("shard_1.bin"), std::string::npos) << st.ToString();
  // A shard of the wrong size.
  std::ofstream(staging + "/shard_1.bin") << "short";
  st = CommitCheckpoint(root, m);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("shard_1.bin has 5 bytes"), std::string::npos) << st.ToString();

  EXPECT_TRUE(Steps(root).empty());
  EXPECT_FALSE(fs::exists(root + "/step_00000005"));
  EXPECT_FALSE(fs::exists(staging + "/manifest.json"));
}

TEST(CheckpointCommit, SweepRepairsCrashLeftovers) {
  ScopedTempDir tmp("ckpt_commit");
  const std::string root = tmp.str();
  ASSERT_TRUE(Save(root, 3, 0, DefaultFileSystem()).ok());
  ASSERT_TRUE(Save(root, 6, 0, DefaultFileSystem()).ok());
  // A crash between "step_3 -> step_3.old" and ".tmp -> step_3" of a re-run of step 3.
  fs::rename(root + "/step_00000003", root + "/step_00000003.old");
  // A crash inside a removal, a save of step 2 that died before its commit (a step the run may
  // never save again), and a crash after a re-run of step 6 committed.
  fs::create_directories(root + "/step_00000001.deleting/junk");
  fs::create_directories(root + "/step_00000002.tmp/junk");
  fs::copy(root + "/step_00000006", root + "/step_00000006.old");
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{6}));

  ASSERT_TRUE(PrepareStaging(root, 9).ok());
  EXPECT_EQ(Names(root), (std::vector<std::string>{"step_00000003", "step_00000006",
                                                   "step_00000009.tmp"}));
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{6, 3}));
  EXPECT_EQ(CheckCommitted(root, 3), 0);

  // Deleting a step also removes its leftover .old, which the sweep would otherwise restore.
  fs::copy(root + "/step_00000006", root + "/step_00000006.old");
  ASSERT_TRUE(DeleteCheckpoint(root, 6).ok());
  ASSERT_TRUE(PrepareStaging(root, 9).ok());
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{3}));
}

// How many operations of each kind a save+commit of step 2 performs on a root holding step 1
// (and, if `rerun`, an older step 2).
struct OpCounts {
  int writes, syncs, renames, mkdirs;
};

void SetUpRoot(const std::string& root, bool rerun) {
  ASSERT_TRUE(Save(root, 1, 0, DefaultFileSystem()).ok());
  if (rerun) {
    ASSERT_TRUE(Save(root, 2, 0, DefaultFileSystem()).ok());
  }
}

OpCounts CountOps(bool rerun) {
  ScopedTempDir tmp("ckpt_commit");
  SetUpRoot(tmp.str(), rerun);
  FaultyFileSystem counting;
  EXPECT_TRUE(Save(tmp.str(), 2, 1, counting).ok());
  return {counting.writes.load(), counting.syncs.load(), counting.renames.load(),
          counting.mkdirs.load()};
}

// After a failed (or succeeded) save of step 2 version 1: step 1 intact; step 2 absent, or
// complete as version 0 (re-run: the old one) or 1 (committed despite a late error); then a
// clean retry commits version 1 and leaves no debris.
void CheckAfterFault(const std::string& root, bool rerun, const Status& st, const std::string& what) {
  SCOPED_TRACE(what + ": " + st.ToString());
  const std::vector<int64_t> steps = Steps(root);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back(), 1);
  EXPECT_EQ(CheckCommitted(root, 1), 0);
  if (fs::exists(root + "/step_00000002")) {
    ASSERT_EQ(steps.front(), 2);  // a step directory is committed, never half
    const int version = CheckCommitted(root, 2);
    EXPECT_TRUE(version == 1 || (rerun && version == 0)) << version;
    if (st.ok()) {
      EXPECT_EQ(version, 1);
    }
  } else {
    EXPECT_FALSE(rerun) << "the committed step 2 disappeared";
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(steps, (std::vector<int64_t>{1}));
  }
  ASSERT_TRUE(Save(root, 2, 1, DefaultFileSystem()).ok());
  EXPECT_EQ(CheckCommitted(root, 2), 1);
  EXPECT_EQ(Names(root), (std::vector<std::string>{"step_00000001", "step_00000002"}));
}

void RunFaultMatrix(bool rerun) {
  const OpCounts n = CountOps(rerun);
  std::printf("save+commit of step 2%s: %d writes, %d fsyncs, %d renames, %d mkdirs\n",
              rerun ? " (re-run)" : "", n.writes, n.syncs, n.renames, n.mkdirs);
  ASSERT_GT(n.writes, 0);
  ASSERT_GT(n.syncs, 0);
  ASSERT_GT(n.renames, 0);
  ASSERT_GT(n.mkdirs, 0);
  struct Kind {
    const char* name;
    int count;
    int FaultyFileSystem::*field;
  };
  for (const Kind& kind : {Kind{"write", n.writes, &FaultyFileSystem::fail_write_at},
                           Kind{"fsync", n.syncs, &FaultyFileSystem::fail_sync_at},
                           Kind{"rename", n.renames, &FaultyFileSystem::fail_rename_at},
                           Kind{"mkdir", n.mkdirs, &FaultyFileSystem::fail_mkdir_at}}) {
    for (int i = 1; i <= kind.count; ++i) {
      ScopedTempDir tmp("ckpt_commit");
      SetUpRoot(tmp.str(), rerun);
      FaultyFileSystem faulty;
      faulty.*kind.field = i;
      faulty.err = (i % 2) ? ENOSPC : EIO;
      const Status st = Save(tmp.str(), 2, 1, faulty);
      // Without a step 2 to replace, every operation is on the commit path: each failure
      // must be reported.
      if (!rerun) {
        EXPECT_FALSE(st.ok()) << kind.name << " #" << i;
      }
      CheckAfterFault(tmp.str(), rerun, st,
                      std::string(kind.name) + " #" + std::to_string(i) + " of " +
                          std::to_string(kind.count) + (rerun ? " (re-run)" : ""));
    }
  }
}

TEST(CheckpointCommitFaults, EveryFailureLeavesThePreviousCheckpoint) { RunFaultMatrix(false); }

TEST(CheckpointCommitFaults, EveryFailureDuringAReRunKeepsAComplete) { RunFaultMatrix(true); }

}  // namespace
}  // namespace tessera
