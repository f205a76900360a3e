// tests/fault/power_loss_checkpoint_test.cc — power loss at every point of a checkpoint save +
// commit (PowerLossFileSystem, tests/fault/power_loss_file_system.h).
//
// The run: a Checkpointer (runtime/train/checkpointer.h) on a tiny GPT-2, one rank, makes four
// saves through the power-loss file system, one training step before each: step 1 into a root
// that does not exist yet (run/ckpt: two directories to create), step 2, step 3 (retention,
// keep_last 2, deletes step 1: rename to .deleting + removal) and step 3 again (a re-run after a
// fallback: the committed step_3 is renamed aside to .old while the new one takes its place).
// A reference run counts its mutating operations and catalog writes, N (261 today); then for
// EVERY crash point K = 1..N the run is repeated in a fresh directory, the process "dies" after
// operation K (every later operation fails, catalog writes included), and either the power fails
// (CheckpointCrashPoints.*/PowerLoss: everything not made durable by an fsync of the file and of
// its directory is thrown away) or not (.../ProcessKilled: kill -9, the disk keeps everything).
// Then, with the plain POSIX file system:
//   - every step_<N> directory has its manifest, and every committed checkpoint opens and
//     verifies fully (CheckpointReader::Open + VerifyAll) and holds, bit for bit, what one of
//     the saves of that step wrote (never a save that had not started);
//   - the catalog opens for writing without being set aside as damaged, every value reads, and
//     `tessera ckpt ls`'s merge of catalog and disk (RunLs in tools/cmd_ckpt.cc, applied here to
//     the same two inputs) flags nothing MISSING: no "committed" or "corrupt" record for a
//     directory that is not committed on disk, except the one documented recoverable state
//     (commit.h: a kill between the two renames of a re-run leaves it as step_<N>.old, which the
//     next sweep puts back). Documented the other way round: a directory committed on disk
//     whose record still says "writing" (the crash fell between the durable rename and the
//     record) or "deleted" (retention records first, then deletes);
//   - a fresh Checkpointer's Resume succeeds and loads the newest committed checkpoint, which is
//     the last save reported committed before the crash or the one in flight — never an older
//     one, nothing at all only if no save had been reported committed — with every tensor and
//     the AdamW step bit-identical to what that save held;
//   - a following save commits, and afterwards the root holds only the catalog and committed
//     step directories: leftover .tmp / .old / .deleting directories are swept.
// Three short tests pin the protocol fixes the crash points found: a root the run creates is
// created durably (by the Checkpointer, by PrepareStaging, by the catalog's writer), and resume
// takes a committed checkpoint a kill left as step_<N>.old.
// RocksDB's catalog does its own I/O, outside the FileSystem seam: its files under
// run/ckpt/catalog are a passthrough subtree, left by the power loss as they were (each write is
// a synced write, WriteOptions::sync; RocksDB's own crash safety is not what this test checks),
// unless run/ckpt itself does not survive. What can be checked about it is the ORDER of its
// records relative to the durable directory operations: each catalog write is a crash point of
// its own (PowerLossFileSystem::ExternalOperation), is refused once the process is dead, and a
// "committed" record is checked, when written, to name a checkpoint whose manifest is already
// durable.
// links: tessera_train tessera_power_loss_fs
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "models/param_layout.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/param_shards.h"
#include "tests/fault/power_loss_file_system.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tiny_replica.h"

namespace tessera {
namespace {

using testing::PowerLossFileSystem;
using testing::Replica;
using testing::ScopedTempDir;

constexpr const char* kRootRel = "run/ckpt";  // under the file system's root; created by save 1
constexpr const char* kCatalogRel = "run/ckpt/catalog";
constexpr int kSaves = 4;
constexpr int64_t kSaveSteps[kSaves] = {1, 2, 3, 3};

ModelConfig Model() { return testing::TinyGpt2(/*layers=*/1, /*hidden=*/16, /*tied=*/true); }

int64_t NumParams() { return UnitBounds(Model()).back(); }

// Parameters, both AdamW moments and the AdamW step of a one-rank ZeRO-0 replica.
struct Bits {
  std::vector<float> param, m, v;
  int64_t adamw_step = -1;

  bool operator==(const Bits& o) const {
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return adamw_step == o.adamw_step && same(param, o.param) && same(m, o.m) && same(v, o.v);
  }
};

Bits Snapshot(const ParamShards& s) {
  const size_t n = static_cast<size_t>(NumParams());
  Bits b;
  b.param.resize(n);
  b.m.resize(n);
  b.v.resize(n);
  for (const ParamShards::SaveSpan& span : s.SaveSpans()) {
    const size_t len = static_cast<size_t>(span.end - span.begin);
    std::memcpy(b.param.data() + span.begin, span.values, len * sizeof(float));
    std::memcpy(b.m.data() + span.begin, span.exp_avg, len * sizeof(float));
    std::memcpy(b.v.data() + span.begin, span.exp_avg_sq, len * sizeof(float));
  }
  b.adamw_step = s.adamw_step();
  return b;
}

Status TrainStep(Replica& r, int64_t micro) {
  std::vector<int32_t> in, tgt;
  r.shards->BeginStep();
  r.shards->BeginMicroBatch(0);
  testing::TinyTokens(micro, in, tgt);
  r.model->ForwardBackward(in.data(), tgt.data(), 1.0f);
  RETURN_IF_ERROR(r.shards->status());
  RETURN_IF_ERROR(r.shards->FinishGradients());
  ASSIGN_OR_RETURN(double sum_sq, r.shards->GradSumOfSquares());
  (void)sum_sq;
  return r.shards->Step(1e-2f);
}

Config MakeConfig(const std::string& root) {
  Config c;
  c.model = Model();
  c.checkpoint.dir = root;
  c.checkpoint.interval_steps = 1;
  c.checkpoint.keep_last = 2;
  c.checkpoint.max_failures = 1000;  // a dead process's failed saves must not end it early
  c.resolved_yaml = "model:\n  family: gpt2\n  num_layers: 1\n";
  return c;
}

JsonValue State(int64_t step, const ParamShards& s) {
  return JsonValue::Object({{"step", JsonValue::Integer(step)},
                            {"adamw_step", JsonValue::Integer(s.adamw_step())}});
}

JsonValue Layout() {
  return JsonValue::Object({{"dp", JsonValue::Integer(1)}, {"zero", JsonValue::Integer(0)}});
}

// The catalog as the crashing Checkpointer sees it: the real RocksDB catalog, behind writes that
// are crash points of the file system, refused once the process is dead, and checked for order:
// a "committed" record must name a checkpoint whose manifest is already durable.
class CrashingCatalog final : public CatalogSink {
 public:
  CrashingCatalog(Catalog& catalog, PowerLossFileSystem& fs, std::vector<std::string>& violations)
      : catalog_(catalog), fs_(fs), violations_(violations) {}

  Status Put(const CheckpointEntry& e) override {
    RETURN_IF_ERROR(fs_.ExternalOperation("catalog put step " + std::to_string(e.step) + " " +
                                          CheckpointStatusName(e.status)));
    if (e.status == CheckpointStatus::kCommitted) CheckDurable(e.step);
    return catalog_.Put(e);
  }
  Status SetStatus(int64_t step, CheckpointStatus status, const std::string& note) override {
    RETURN_IF_ERROR(fs_.ExternalOperation("catalog set step " + std::to_string(step) + " " +
                                          CheckpointStatusName(status)));
    if (status == CheckpointStatus::kCommitted) CheckDurable(step);
    return catalog_.SetStatus(step, status, note);
  }
  Status AddEvent(const std::string& kind, const std::string& message) override {
    RETURN_IF_ERROR(fs_.ExternalOperation("catalog event " + kind));
    return catalog_.AddEvent(kind, message);
  }
  Result<CheckpointEntry> Get(int64_t step) const override {
    if (fs_.crashed()) return IoError("catalog get: the process is dead");
    return catalog_.Get(step);
  }

 private:
  void CheckDurable(int64_t step) {
    const std::string manifest = std::string(kRootRel) + "/" + StepDirName(step) + "/manifest.json";
    const std::optional<std::string> text = fs_.DurableFile(manifest);
    auto parsed = text ? ParseManifest(*text, manifest) : Result<Manifest>(NotFound(manifest));
    if (!parsed.ok() || parsed->step != step) {
      violations_.push_back("step " + std::to_string(step) + " recorded committed after operation " +
                            std::to_string(fs_.mutating_ops()) + " but " + manifest +
                            " is not durable yet");
    }
  }

  Catalog& catalog_;
  PowerLossFileSystem& fs_;
  std::vector<std::string>& violations_;
};

// What one run of the four saves did until it died.
struct Trace {
  std::vector<Bits> saved;             // saved[j]: the state save j was asked to write
  std::vector<int64_t> committed_at;   // mutating operations done when save j's Poll returned
  std::vector<std::string> violations;
};

// The process that crashes: catalog, Checkpointer and the saves, all through `fs`, until the
// process is dead (then it stops: a dead process does nothing more).
void RunSaves(const std::string& root, PowerLossFileSystem& fs, Trace& run) {
  auto replica = testing::BuildReplica(Model(), /*zero=*/0, DType::kF32, nullptr);
  ASSERT_NE(replica, nullptr);
  auto opened = OpenCatalogForWriting(root, fs);
  if (!opened.ok()) {
    ASSERT_TRUE(fs.crashed()) << opened.status().ToString();
    return;
  }
  CrashingCatalog sink(*opened->catalog, fs, run.violations);
  auto ck = Checkpointer::Create(MakeConfig(root), nullptr, nullptr, fs, nullptr, &sink);
  if (!ck.ok()) {
    ASSERT_TRUE(fs.crashed()) << ck.status().ToString();
    return;
  }
  for (int j = 0; j < kSaves && !fs.crashed(); ++j) {
    ASSERT_TRUE(TrainStep(*replica, j).ok());
    run.saved.push_back(Snapshot(*replica->shards));
    const int64_t step = kSaveSteps[j];
    Status st = (*ck)->Save(step, *replica->shards, State(step, *replica->shards), Layout());
    if (st.ok()) st = (*ck)->Poll(/*block=*/true);
    if (fs.crashed()) break;
    ASSERT_TRUE(st.ok()) << "save " << j << ": " << st.ToString();
    ASSERT_EQ((*ck)->stats().committed, j + 1) << "save " << j << " did not commit";
    run.committed_at.push_back(fs.mutating_ops());
  }
}

// Saves that may be found after a crash after operation k: the last one reported committed
// (-1: none) and the one in flight (kSaves: none).
struct Allowed {
  int last_committed = -1, in_flight = 0;
  bool Has(int j) const { return j == last_committed || j == in_flight; }
  std::string Describe() const {
    return "save " + std::to_string(last_committed) + " (last reported committed) or save " +
           std::to_string(in_flight) + " (in flight)";
  }
};

Allowed AllowedAt(int64_t k, const Trace& reference) {
  Allowed a;
  for (int j = 0; j < kSaves; ++j) {
    if (reference.committed_at[j] <= k) a.last_committed = j;
  }
  a.in_flight = a.last_committed + 1;
  return a;
}

// The save (index) whose state checkpoint `dir` holds, loaded bit for bit into `into`; -1 with
// a test failure when it is none of the saves of its step.
int IdentifySave(const std::string& dir, int64_t step, const Trace& reference, Replica& into) {
  auto reader = CheckpointReader::Open(dir);
  if (!reader.ok()) {
    ADD_FAILURE() << dir << ": " << reader.status().ToString();
    return -1;
  }
  Result<uint64_t> verified = (*reader)->VerifyAll();
  if (!verified.ok()) {
    ADD_FAILURE() << dir << ": " << verified.status().ToString();
    return -1;
  }
  EXPECT_EQ((*reader)->manifest().step, step) << dir;
  Status st = LoadCheckpointInto(**reader, Model(), *into.shards, /*with_optimizer=*/true);
  if (!st.ok()) {
    ADD_FAILURE() << dir << ": " << st.ToString();
    return -1;
  }
  const Bits loaded = Snapshot(*into.shards);
  for (int j = 0; j < kSaves; ++j) {
    if (kSaveSteps[j] == step && reference.saved[j] == loaded) return j;
  }
  ADD_FAILURE() << dir << ": holds a state that no save of step " << step << " wrote";
  return -1;
}

enum class Kind { kCatalog, kCommittedDir, kLeftover, kOther };

Kind Classify(const std::string& name) {
  if (name == "catalog") return Kind::kCatalog;
  for (const char* suffix : {".tmp", ".old", ".deleting"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0 &&
        name.rfind("step_", 0) == 0) {
      return Kind::kLeftover;
    }
  }
  if (name.rfind("step_", 0) == 0) return Kind::kCommittedDir;  // must then be canonical, committed
  return Kind::kOther;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The disk after the crash: every step directory committed, every committed checkpoint (and
// every .old) complete, each holding what a save that had started wrote.
void CheckDisk(const std::string& root, const Trace& reference, const Allowed& allowed,
               Replica& scratch) {
  auto steps = CommittedSteps(root);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  for (const std::string& name : Names(root)) {
    switch (Classify(name)) {
      case Kind::kCatalog:
        break;
      case Kind::kLeftover:
        // An .old is what the sweep may put back as committed: it must be complete.
        if (name.size() > 4 && name.compare(name.size() - 4, 4, ".old") == 0) {
          auto reader = CheckpointReader::Open(root + "/" + name);
          EXPECT_TRUE(reader.ok() && (*reader)->VerifyAll().ok()) << name << " is not complete";
        }
        break;
      case Kind::kCommittedDir: {
        const bool committed = std::any_of(steps->begin(), steps->end(),
                                           [&](int64_t s) { return StepDirName(s) == name; });
        EXPECT_TRUE(committed) << name << " is a step directory without a manifest";
        break;
      }
      case Kind::kOther:
        ADD_FAILURE() << "unexpected " << name << " in the root";
    }
  }
  for (int64_t step : *steps) {
    const int j = IdentifySave(root + "/" + StepDirName(step), step, reference, scratch);
    EXPECT_TRUE(j < 0 || j <= allowed.in_flight)
        << StepDirName(step) << " holds save " << j << ", which had not started";
  }
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// The catalog after the crash: it opens for writing as it is (not set aside as damaged) and
// every value reads. Null with a test failure otherwise.
std::unique_ptr<Catalog> OpenCatalogAfterCrash(const std::string& root) {
  auto opened = OpenCatalogForWriting(root);
  if (!opened.ok()) {
    ADD_FAILURE() << "catalog: " << opened.status().ToString();
    return nullptr;
  }
  EXPECT_EQ(opened->recreated, "");
  return std::move(opened->catalog);
}

// What `tessera ckpt ls` shows (RunLs: the catalog's entries merged with CommittedSteps) flags
// nothing MISSING, and every committed directory's record is one of the documented states.
void CheckListing(const Catalog& catalog, const std::string& root) {
  auto entries = catalog.List();
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  auto listed = CommittedSteps(root);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  const std::vector<int64_t>& on_disk = *listed;
  auto is_on_disk = [&](int64_t s) { return std::find(on_disk.begin(), on_disk.end(), s) != on_disk.end(); };
  for (const CheckpointEntry& e : *entries) {
    if (e.status != CheckpointStatus::kCommitted && e.status != CheckpointStatus::kCorrupt) continue;
    // The one documented exception (commit.h): a crash between the two renames of a re-run's
    // commit leaves the committed directory as step_<N>.old, which the next sweep renames back.
    const std::string dir = root + "/" + StepDirName(e.step);
    const bool aside = !Exists(dir) && Exists(dir + ".old");
    EXPECT_TRUE(is_on_disk(e.step) || aside)
        << "MISSING: the catalog says " << CheckpointStatusName(e.status) << " but "
        << StepDirName(e.step) << " is not committed on disk";
  }
  for (int64_t s : on_disk) {
    auto it = std::find_if(entries->begin(), entries->end(), [&](const CheckpointEntry& e) { return e.step == s; });
    ASSERT_NE(it, entries->end()) << StepDirName(s) << " is committed on disk but not in the catalog";
    // Documented: "writing" when the crash fell between the durable rename and the record,
    // "deleted" when it fell inside retention's delete (the record goes first); never for the
    // newest, which retention never deletes.
    const bool newest = s == on_disk.front();
    const bool ok = it->status == CheckpointStatus::kCommitted || it->status == CheckpointStatus::kWriting ||
                    (!newest && it->status == CheckpointStatus::kDeleted);
    EXPECT_TRUE(ok) << StepDirName(s) << " is committed on disk, the catalog says "
                    << CheckpointStatusName(it->status) << (newest ? " (the newest)" : "");
  }
}

// Resume with a fresh Checkpointer on the plain file system (the catalog: the one just opened,
// as a standalone coordinator opens its own), then one more save. Returns the save loaded
// (-1: none).
int ResumeAndSaveAgain(const std::string& root, const Trace& reference, const Allowed& allowed,
                       Catalog& catalog) {
  auto replica = testing::BuildReplica(Model(), 0, DType::kF32, nullptr, /*accum=*/1, /*seed=*/99);
  if (replica == nullptr) return -1;
  auto ck = Checkpointer::Create(MakeConfig(root), nullptr, nullptr, DefaultFileSystem(), nullptr, &catalog);
  if (!ck.ok()) {
    ADD_FAILURE() << ck.status().ToString();
    return -1;
  }
  auto loaded = (*ck)->Resume(*replica->shards);
  if (!loaded.ok()) {
    ADD_FAILURE() << "resume: " << loaded.status().ToString();
    return -1;
  }
  auto on_disk = CommittedSteps(root);  // after the resume: it may repair the root first
  EXPECT_TRUE(on_disk.ok()) << on_disk.status().ToString();
  int j = -1;
  if (!loaded->has_value()) {
    EXPECT_TRUE(on_disk.ok() && on_disk->empty());
    EXPECT_EQ(allowed.last_committed, -1) << "save " << allowed.last_committed
                                          << " was reported committed and is lost";
  } else {
    const Bits got = Snapshot(*replica->shards);
    for (int k = 0; k < kSaves; ++k) {
      if (kSaveSteps[k] == (*loaded)->step && reference.saved[k] == got) j = k;
    }
    EXPECT_TRUE(j >= 0) << "resume loaded step " << (*loaded)->step << " with a state no save wrote";
    EXPECT_TRUE(on_disk.ok() && !on_disk->empty() && (*loaded)->step == on_disk->front())
        << "resume did not load the newest committed checkpoint";
    EXPECT_TRUE(allowed.Has(j)) << "resume loaded save " << j << ", expected " << allowed.Describe();
  }
  EXPECT_TRUE(TrainStep(*replica, 10).ok());
  const int64_t next = *loaded ? (*loaded)->step + 1 : 1;
  Status st = (*ck)->Save(next, *replica->shards, State(next, *replica->shards), Layout());
  if (st.ok()) st = (*ck)->Poll(/*block=*/true);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ((*ck)->stats().committed, 1) << "the save after the resume did not commit";
  ck->reset();
  for (const std::string& name : Names(root)) {
    EXPECT_TRUE(Classify(name) == Kind::kCatalog || Classify(name) == Kind::kCommittedDir)
        << name << " is left in the root after a save";
  }
  auto steps = CommittedSteps(root);
  EXPECT_TRUE(steps.ok() && !steps->empty() && steps->front() == next);
  auto e = catalog.Get(next);
  EXPECT_TRUE(e.ok() && e->status == CheckpointStatus::kCommitted) << StepDirName(next) << " not recorded";
  CheckListing(catalog, root);
  return j;
}

std::string Context(int64_t k, const std::vector<std::string>& ops) {
  std::string s = "crash after operation " + std::to_string(k) + " of " + std::to_string(ops.size());
  if (k >= 1 && static_cast<size_t>(k) <= ops.size()) s += " (" + ops[k - 1] + ")";
  if (static_cast<size_t>(k) < ops.size()) s += ", before " + ops[k];
  return s;
}

// ---- the root a run creates, and a re-run's commit cut in half ------------------------------

// Save + blocking Poll of `step` after one more training step; the state it saved.
Bits SaveAfterAStep(Checkpointer& ck, Replica& r, int64_t step) {
  EXPECT_TRUE(TrainStep(r, step).ok());
  const Bits saved = Snapshot(*r.shards);
  Status st = ck.Save(step, *r.shards, State(step, *r.shards), Layout());
  if (st.ok()) st = ck.Poll(/*block=*/true);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return saved;
}

// A standalone Checkpointer creates its root (run/ckpt: two new directories) itself. Without
// fsyncs of the parents, the power loss takes the root with the checkpoint committed in it.
TEST(PowerLossCheckpoint, ACheckpointCommittedInARootTheRunCreatedSurvives) {
  cpu::SetNumThreads(1);
  ScopedTempDir tmp("power_loss_root");
  const std::string root = tmp / kRootRel;
  auto fs = PowerLossFileSystem::Create(tmp.str(), {kCatalogRel});
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  auto replica = testing::BuildReplica(Model(), 0, DType::kF32, nullptr);
  ASSERT_NE(replica, nullptr);
  Bits saved;
  {
    auto ck = Checkpointer::Create(MakeConfig(root), nullptr, nullptr, **fs);  // its own catalog
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    saved = SaveAfterAStep(**ck, *replica, 1);
    ASSERT_EQ((*ck)->stats().committed, 1);
  }
  Status lost = (*fs)->SimulatePowerLoss();
  ASSERT_TRUE(lost.ok()) << lost.ToString();
  auto steps = CommittedSteps(root);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  ASSERT_EQ(*steps, std::vector<int64_t>{1}) << "the committed checkpoint did not survive";
  Trace reference;
  reference.saved = {saved};
  EXPECT_EQ(IdentifySave(root + "/" + StepDirName(1), 1, reference, *replica), 0);
}

// The other two places that may create a root first: a save's staging, and the catalog's writer
// (under `tessera launch`, the supervisor opens the catalog before any rank runs).
TEST(PowerLossCheckpoint, PrepareStagingAndTheCatalogWriterCreateTheRootDurably) {
  ScopedTempDir tmp("power_loss_root");
  auto fs = PowerLossFileSystem::Create(tmp.str(), {"b/ckpt/catalog"});
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  ASSERT_TRUE(PrepareStaging(tmp / "a/ckpt", 1, **fs).ok());
  {
    auto opened = OpenCatalogForWriting(tmp / "b/ckpt", **fs);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  }
  Status lost = (*fs)->SimulatePowerLoss();
  ASSERT_TRUE(lost.ok()) << lost.ToString();
  EXPECT_TRUE(std::filesystem::is_directory(tmp / "a/ckpt"));
  EXPECT_FALSE(Exists(tmp / "a/ckpt/step_00000001.tmp"));  // staging: never synced, never needed
  EXPECT_TRUE(std::filesystem::is_directory(tmp / "b/ckpt/catalog"));
}

// A kill between "step_2 -> step_2.old" and "step_2.tmp -> step_2" of a re-run of step 2 leaves
// the committed step 2 as step_2.old. Resume must take it (the coordinator sweeps first), not
// fall back to step 1 and leave the catalog's "committed" record pointing at nothing.
TEST(PowerLossCheckpoint, ResumeTakesTheCommittedCheckpointAKillLeftAsOld) {
  cpu::SetNumThreads(1);
  ScopedTempDir tmp("power_loss_old");
  const std::string root = tmp / "ckpt";
  auto replica = testing::BuildReplica(Model(), 0, DType::kF32, nullptr);
  ASSERT_NE(replica, nullptr);
  Bits saved;
  {
    auto ck = Checkpointer::Create(MakeConfig(root), nullptr, nullptr);
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    SaveAfterAStep(**ck, *replica, 1);
    saved = SaveAfterAStep(**ck, *replica, 2);
    ASSERT_EQ((*ck)->stats().committed, 2);
  }
  std::filesystem::rename(root + "/step_00000002", root + "/step_00000002.old");
  auto fresh = testing::BuildReplica(Model(), 0, DType::kF32, nullptr, 1, /*seed=*/99);
  ASSERT_NE(fresh, nullptr);
  auto ck = Checkpointer::Create(MakeConfig(root), nullptr, nullptr);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  auto loaded = (*ck)->Resume(*fresh->shards);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->step, 2);
  EXPECT_TRUE(Snapshot(*fresh->shards) == saved);
  EXPECT_EQ(Names(root), (std::vector<std::string>{"catalog", "step_00000001", "step_00000002"}));
}

// kPowerLoss: the power fails at the crash (only what was made durable is left). kProcessKilled:
// only the process dies (kill -9): the disk keeps everything it was told, durable or not.
enum class Crash { kPowerLoss, kProcessKilled };

void PrintTo(Crash c, std::ostream* os) { *os << (c == Crash::kPowerLoss ? "power loss" : "process killed"); }

class CheckpointCrashPoints : public ::testing::TestWithParam<Crash> {};

TEST_P(CheckpointCrashPoints, ResumeFindsOnlyCompleteCommittedCheckpointsAndAnIntactCatalog) {
  cpu::SetNumThreads(1);
  // The reference run: no crash; its operations number the crash points.
  Trace reference;
  std::vector<std::string> ops;
  {
    ScopedTempDir tmp("power_loss_ref");
    auto fs = PowerLossFileSystem::Create(tmp.str(), {kCatalogRel});
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    RunSaves(tmp / kRootRel, **fs, reference);
    ASSERT_EQ(reference.committed_at.size(), static_cast<size_t>(kSaves));
    for (const std::string& v : reference.violations) ADD_FAILURE() << v;
    ops = (*fs)->operations();
    for (std::string& op : ops) {  // "Rename <tmp>/run/ckpt/a -> ..." -> "Rename run/ckpt/a -> ..."
      for (size_t at; (at = op.find(tmp.str() + "/")) != std::string::npos;) op.erase(at, tmp.str().size() + 1);
    }
  }
  const int64_t n = static_cast<int64_t>(ops.size());
  ASSERT_GT(n, 100);  // four saves: directories, shard writes, fsyncs, renames, catalog writes

  int failing = 0;
  std::vector<int> loaded_count(kSaves + 1, 0);  // [j + 1]: crash points that resumed save j
  for (int64_t k = 1; k <= n && failing < 3; ++k) {
    SCOPED_TRACE(Context(k, ops));
    const ::testing::TestResult* result = ::testing::UnitTest::GetInstance()->current_test_info()->result();
    const int parts_before = result->total_part_count();
    ScopedTempDir tmp("power_loss");
    const std::string root = tmp / kRootRel;
    auto fs = PowerLossFileSystem::Create(tmp.str(), {kCatalogRel});
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    (*fs)->CrashAfter(k);
    Trace run;
    RunSaves(root, **fs, run);
    for (size_t j = 0; j < run.saved.size(); ++j) {
      ASSERT_TRUE(run.saved[j] == reference.saved[j]) << "the run is not deterministic";
    }
    for (const std::string& v : run.violations) ADD_FAILURE() << v;
    (*fs)->Crash();
    if (GetParam() == Crash::kPowerLoss) {
      Status lost = (*fs)->SimulatePowerLoss();
      ASSERT_TRUE(lost.ok()) << lost.ToString();
    }

    const Allowed allowed = AllowedAt(k, reference);
    auto scratch = testing::BuildReplica(Model(), 0, DType::kF32, nullptr, 1, /*seed=*/77);
    ASSERT_NE(scratch, nullptr);
    CheckDisk(root, reference, allowed, *scratch);
    std::unique_ptr<Catalog> catalog = OpenCatalogAfterCrash(root);
    ASSERT_NE(catalog, nullptr);
    CheckListing(*catalog, root);
    ++loaded_count[ResumeAndSaveAgain(root, reference, allowed, *catalog) + 1];
    if (result->total_part_count() > parts_before) ++failing;  // stop after 3 failing points
  }
  std::printf("%lld crash points; resumed from: nothing %d", static_cast<long long>(n), loaded_count[0]);
  for (int j = 0; j < kSaves; ++j) {
    std::printf(", save %d (step %lld) %d", j, static_cast<long long>(kSaveSteps[j]), loaded_count[j + 1]);
  }
  std::printf("\n");
}

INSTANTIATE_TEST_SUITE_P(, CheckpointCrashPoints,
                         ::testing::Values(Crash::kPowerLoss, Crash::kProcessKilled),
                         [](const ::testing::TestParamInfo<Crash>& p) {
                           return p.param == Crash::kPowerLoss ? "PowerLoss" : "ProcessKilled";
                         });

}  // namespace
}  // namespace tessera
