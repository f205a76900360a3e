// tests/unit/checkpointer_test.cc — Checkpointer (runtime/train/checkpointer.h) with injected
// faults, on a tiny GPT-2 whose ParamShards took real optimizer steps:
//   - save + commit + verified load restores parameters (fp32 values or fp32 master weights)
//     and both AdamW moments bit for bit, also across layouts (ZeRO 3 on 2 fake ranks loaded
//     into 1 rank, ZeRO 0);
//   - the fault matrix: every write, fsync, rename and mkdir of a save failed in turn leaves the
//     previous checkpoint committed and verified, no step directory without a valid manifest,
//     the save counted and recorded as failed, and training going on (OK statuses);
//   - max_failures, on_busy skip / wait (a FileSystem whose writes wait at a gate the test opens),
//   - resume falling back past corrupt, truncated and hostile checkpoints (two ranks deciding
//     together when only one sees the damage), retention after such a fallback, and load
//     errors that name the tensor and both shapes;
//   - an external catalog sink (a supervised coordinator) gets every catalog write and no
//     local catalog is opened.
// Every test runs in its own temporary root; the catalog is read (read-only) only after the
// Checkpointer that holds its writer lock is gone. Single-threaded except for the fake ranks
// and the checkpoint writer thread.
// links: tessera_train
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "comm/fake_communicator.h"
#include "models/param_layout.h"
#include "models/transformer.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/param_shards.h"
#include "tests/fault/faulty_file_system.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tiny_replica.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::FaultyFileSystem;
using testing::ScopedTempDir;

// hidden 16: every unit is smaller than one norm block (kNormBlock, 16384 elements), so ZeRO
// puts all of it on rank 0. Multi-rank tests use kShardedHidden, whose blocks (~28k elements)
// are split between two ranks, so both shards hold state.
constexpr int64_t kShardedHidden = 48;

using testing::Replica;

ModelConfig TinyModel(int layers = 2, int64_t hidden = 16) {
  return testing::TinyGpt2(layers, hidden, /*tied=*/true);
}

int64_t NumParams(const ModelConfig& c) { return UnitBounds(c).back(); }

void Tokens(int64_t k, std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
  testing::TinyTokens(k, in, tgt);
}

std::unique_ptr<Replica> Build(const ModelConfig& c, int zero, DType dtype, Communicator* comm,
                               uint64_t seed = testing::kTinySeed) {
  return testing::BuildReplica(c, zero, dtype, comm, /*accum=*/1, seed);
}

// One optimizer step on micro-batch `micro`, loss scaled by 1/ranks.
Status TrainStep(Replica& r, int64_t micro, int ranks = 1) {
  std::vector<int32_t> in, tgt;
  r.shards->BeginStep();
  r.shards->BeginMicroBatch(0);
  Tokens(micro, in, tgt);
  r.model->ForwardBackward(in.data(), tgt.data(), 1.0f / static_cast<float>(ranks));
  RETURN_IF_ERROR(r.shards->status());
  RETURN_IF_ERROR(r.shards->FinishGradients());
  ASSIGN_OR_RETURN(double sum_sq, r.shards->GradSumOfSquares());
  (void)sum_sq;
  return r.shards->Step(1e-2f);
}

// The saved state as full flat arrays, assembled from the SaveSpans of one or more ranks.
struct FlatState {
  std::vector<float> param, m, v;
  std::vector<int> covered;  // how many spans cover each element (must end up all 1)
  int64_t adamw_step = -1;

  explicit FlatState(int64_t n) : param(n), m(n), v(n), covered(n, 0) {}
  void Add(const ParamShards& s) {
    for (const ParamShards::SaveSpan& span : s.SaveSpans()) {
      const size_t len = static_cast<size_t>(span.end - span.begin);
      const float* src[3] = {span.values, span.exp_avg, span.exp_avg_sq};
      float* dst[3] = {param.data(), m.data(), v.data()};
      for (int k = 0; k < 3; ++k) {
        if (src[k] != nullptr) {
          std::memcpy(dst[k] + span.begin, src[k], len * sizeof(float));
        } else {  // on disk (optimizer.offload: nvme)
          ASSERT_TRUE(span.read);
          ASSERT_TRUE(span.read(k, 0, static_cast<int64_t>(len), dst[k] + span.begin).ok());
        }
      }
      for (int64_t i = span.begin; i < span.end; ++i) ++covered[i];
    }
    adamw_step = s.adamw_step();
  }
};

void ExpectSameBits(const FlatState& want, const FlatState& got, const std::string& what) {
  ASSERT_EQ(want.param.size(), got.param.size()) << what;
  for (size_t i = 0; i < want.covered.size(); ++i) {
    ASSERT_EQ(want.covered[i], 1) << what << ": element " << i << " saved by " << want.covered[i];
    ASSERT_EQ(got.covered[i], 1) << what << ": element " << i << " loaded by " << got.covered[i];
  }
  const size_t bytes = want.param.size() * sizeof(float);
  EXPECT_EQ(0, std::memcmp(want.param.data(), got.param.data(), bytes)) << what << ": parameters";
  EXPECT_EQ(0, std::memcmp(want.m.data(), got.m.data(), bytes)) << what << ": exp_avg";
  EXPECT_EQ(0, std::memcmp(want.v.data(), got.v.data(), bytes)) << what << ": exp_avg_sq";
  EXPECT_EQ(want.adamw_step, got.adamw_step) << what;
  // A state of zeros would make the comparison vacuous: the moments must have moved.
  EXPECT_TRUE(std::any_of(want.m.begin(), want.m.end(), [](float x) { return x != 0.0f; })) << what;
}

FlatState Snapshot(const ParamShards& s, int64_t n) {
  FlatState f(n);
  f.Add(s);
  return f;
}

Config MakeConfig(const std::string& root, const ModelConfig& model) {
  Config c;
  c.model = model;
  c.checkpoint.dir = root;
  c.checkpoint.interval_steps = 1;
  c.checkpoint.keep_last = 3;
  c.checkpoint.max_failures = 3;
  c.resolved_yaml = "model:\n  family: gpt2\n  num_layers: " + std::to_string(model.num_layers) + "\n";
  return c;
}

JsonValue State(int64_t step, const ParamShards& s) {
  return JsonValue::Object({{"step", JsonValue::Integer(step)},
                            {"adamw_step", JsonValue::Integer(s.adamw_step())}});
}

JsonValue Layout(int dp, int zero) {
  return JsonValue::Object({{"dp", JsonValue::Integer(dp)}, {"zero", JsonValue::Integer(zero)}});
}

std::unique_ptr<Checkpointer> MakeCheckpointer(const Config& c, FileSystem& fsys = DefaultFileSystem(),
                                               Communicator* dp = nullptr) {
  auto ck = Checkpointer::Create(c, dp, nullptr, fsys);
  EXPECT_TRUE(ck.ok()) << ck.status().ToString();
  return ck.ok() ? std::move(*ck) : nullptr;
}

// Save + blocking Poll; both statuses must be OK.
void SaveAndCommit(Checkpointer& ck, int64_t step, ParamShards& s, int dp = 1, int zero = 0) {
  Status st = ck.Save(step, s, State(step, s), Layout(dp, zero));
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = ck.Poll(/*block=*/true);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

std::string StepDir(const std::string& root, int64_t step) { return root + "/" + StepDirName(step); }

// Committed, opens and every segment verifies.
void ExpectVerified(const std::string& root, int64_t step) {
  auto reader = CheckpointReader::Open(StepDir(root, step));
  ASSERT_TRUE(reader.ok()) << "step " << step << ": " << reader.status().ToString();
  auto bytes = (*reader)->VerifyAll();
  ASSERT_TRUE(bytes.ok()) << "step " << step << ": " << bytes.status().ToString();
  EXPECT_GT(*bytes, 0u);
  EXPECT_EQ((*reader)->manifest().step, step);
}

std::unique_ptr<Catalog> ReadCatalog(const std::string& root) {
  auto cat = Catalog::Open(root, /*read_only=*/true);
  EXPECT_TRUE(cat.ok()) << cat.status().ToString();
  return cat.ok() ? std::move(*cat) : nullptr;
}

// The catalog status of `step`, or "none".
std::string CatalogStatus(const Catalog& cat, int64_t step) {
  auto e = cat.Get(step);
  if (!e.ok()) return e.status().code() == StatusCode::kNotFound ? "none" : e.status().ToString();
  return CheckpointStatusName(e->status);
}

std::vector<int64_t> Committed(const std::string& root) {
  auto steps = CommittedSteps(root);
  EXPECT_TRUE(steps.ok()) << steps.status().ToString();
  return steps.ok() ? *steps : std::vector<int64_t>{};
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// A POSIX-forwarding FileSystem whose writes can all fail (fail_writes) or wait at a gate the
// test opens (close_gate / open_gate). Writer-thread safe: flags are atomic, the gate a mutex.
// Every other operation is FaultyFileSystem's (forwarding to the POSIX one, no faults armed).
class ControlledFileSystem : public FaultyFileSystem {
 public:
  std::atomic<bool> fail_writes{false};
  std::atomic<int> blocked{0};  // writes waiting at the gate now

  void CloseGate() {
    std::lock_guard<std::mutex> lock(mu_);
    gate_open_ = false;
  }
  void OpenGate() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      gate_open_ = true;
    }
    cv_.notify_all();
  }
  // Spins until a write waits at the gate (the writer is mid-save).
  bool WaitUntilBlocked() {
    for (int i = 0; i < 5000 && blocked.load() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return blocked.load() > 0;
  }

  Status Write(int fd, const void* d, size_t n, const std::string& p) override {
    RETURN_IF_ERROR(BeforeWrite(p));
    return FaultyFileSystem::Write(fd, d, n, p);
  }
  Status WriteAt(int fd, const void* d, size_t n, uint64_t off, const std::string& p) override {
    RETURN_IF_ERROR(BeforeWrite(p));
    return FaultyFileSystem::WriteAt(fd, d, n, off, p);
  }

 private:
  Status BeforeWrite(const std::string& p) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!gate_open_) {
        ++blocked;
        cv_.wait(lock, [&] { return gate_open_; });
        --blocked;
      }
    }
    if (fail_writes.load()) return IoError(p + ": write failed: No space left on device");
    return Status::Ok();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool gate_open_ = true;
};

// Opens the gate when it goes out of scope (declared after the Checkpointer: runs first).
struct GateGuard {
  ControlledFileSystem& fs;
  ~GateGuard() { fs.OpenGate(); }
};

// ---- 1. save, commit, verified load -----------------------------------------------------------

void ExpectOneRankRoundTrip(DType dtype) {
  const ModelConfig mc = TinyModel();
  const int64_t n = NumParams(mc);
  ScopedTempDir tmp("ckpt_roundtrip");
  const std::string root = tmp / "ckpt";
  const Config cfg = MakeConfig(root, mc);
  auto r = Build(mc, 0, dtype, nullptr);
  ASSERT_NE(r, nullptr);
  for (int k = 0; k < 2; ++k) ASSERT_TRUE(TrainStep(*r, k).ok());
  const FlatState saved = Snapshot(*r->shards, n);
  {
    auto ck = MakeCheckpointer(cfg);
    ASSERT_NE(ck, nullptr);
    EXPECT_TRUE(ck->enabled());
    EXPECT_TRUE(ck->Due(2, 10));
    SaveAndCommit(*ck, 2, *r->shards);
    EXPECT_EQ(ck->stats().saves, 1);
    EXPECT_EQ(ck->stats().committed, 1);
    EXPECT_EQ(ck->stats().failed, 0);
    EXPECT_GE(ck->stats().last_bytes, static_cast<uint64_t>(3 * n * sizeof(float)));
  }
  EXPECT_EQ(Committed(root), std::vector<int64_t>{2});
  EXPECT_FALSE(fs::exists(root + "/" + StagingDirName(2)));
  ExpectVerified(root, 2);

  auto reader = CheckpointReader::Open(StepDir(root, 2));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const Manifest& m = (*reader)->manifest();
  EXPECT_EQ(m.tensors.size(), 3 * DeclareParameters(mc).size());
  EXPECT_EQ(m.shards.size(), 1u);
  EXPECT_EQ(m.state.Find("adamw_step")->as_int(), 2);
  EXPECT_EQ(m.config_yaml, cfg.resolved_yaml);

  auto fresh = Build(mc, 0, dtype, nullptr, /*seed=*/99);
  ASSERT_NE(fresh, nullptr);
  Status st = LoadCheckpointInto(**reader, mc, *fresh->shards, /*with_optimizer=*/true);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectSameBits(saved, Snapshot(*fresh->shards, n), std::string(DTypeName(dtype)));

  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(CatalogStatus(*cat, 2), "committed");
}

TEST(Checkpointer, SaveCommitsAndLoadRestoresFp32StateBitForBit) {
  cpu::SetNumThreads(1);
  ExpectOneRankRoundTrip(DType::kF32);
}

TEST(Checkpointer, SaveCommitsAndLoadRestoresBf16MasterWeightsBitForBit) {
  cpu::SetNumThreads(1);
  ExpectOneRankRoundTrip(DType::kBF16);
}

// The optimizer state on disk (optimizer.offload: nvme): the same training gives the state in
// memory's bits; an asynchronous save streams it from the file on the writer thread (under
// TSan in tools/test-tsan.sh, beside the training thread's next steps); loading the checkpoint
// into a fresh on-disk replica writes it straight into that replica's file.
void ExpectStateOnDiskRoundTrip(DType dtype) {
  const ModelConfig mc = TinyModel();
  const int64_t n = NumParams(mc);
  ScopedTempDir tmp("ckpt_on_disk");
  const std::string root = tmp / "ckpt";
  const Config cfg = MakeConfig(root, mc);
  auto disk = [&](const std::string& name) {
    ShardedAdamWDisk d;
    d.path = tmp / name;
    d.pool_bytes = 64 << 10;  // several chunks
    return d;
  };
  auto memory = Build(mc, 0, dtype, nullptr);
  auto on_disk = testing::BuildReplica(mc, 0, dtype, nullptr, 1, testing::kTinySeed, disk("a"));
  ASSERT_NE(memory, nullptr);
  ASSERT_NE(on_disk, nullptr);
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(TrainStep(*memory, k).ok());
    ASSERT_TRUE(TrainStep(*on_disk, k).ok());
  }
  const FlatState saved = Snapshot(*memory->shards, n);
  ExpectSameBits(saved, Snapshot(*on_disk->shards, n), "on disk vs in memory");
  {
    auto ck = MakeCheckpointer(cfg);
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Save(2, *on_disk->shards, State(2, *on_disk->shards), Layout(1, 0)).ok());
    ck->WaitForStateCopy();  // the streamed reads are done: the next step may change the file
    ASSERT_TRUE(TrainStep(*on_disk, 2).ok());
    ASSERT_TRUE(ck->Poll(/*block=*/true).ok());
    EXPECT_EQ(ck->stats().committed, 1);
  }
  ExpectVerified(root, 2);
  auto reader = CheckpointReader::Open(StepDir(root, 2));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto fresh = testing::BuildReplica(mc, 0, dtype, nullptr, 1, /*seed=*/99, disk("b"));
  ASSERT_NE(fresh, nullptr);
  Status st = LoadCheckpointInto(**reader, mc, *fresh->shards, /*with_optimizer=*/true);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectSameBits(saved, Snapshot(*fresh->shards, n), "loaded into a state on disk");
}

TEST(Checkpointer, StateOnDiskSavesAndLoadsBitForBitFp32) {
  cpu::SetNumThreads(1);
  ExpectStateOnDiskRoundTrip(DType::kF32);
}

TEST(Checkpointer, StateOnDiskSavesAndLoadsBitForBitBf16) {
  cpu::SetNumThreads(1);
  ExpectStateOnDiskRoundTrip(DType::kBF16);
}

// ZeRO 3 on two fake ranks saves two shards; one rank under ZeRO 0 loads them (resharding).
void ExpectTwoRanksLoadIntoOne(int zero, DType dtype) {
  const ModelConfig mc = TinyModel(2, kShardedHidden);
  const int64_t n = NumParams(mc);
  ScopedTempDir tmp("ckpt_reshard");
  const std::string root = tmp / "ckpt";
  const Config cfg = MakeConfig(root, mc);
  FlatState saved(n);
  std::mutex saved_mu;
  std::vector<Status> results(2, Status::Ok());
  std::vector<CheckpointStats> stats(2);
  auto hub = FakeHub::Create(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions co;
      co.name = "dp";
      co.timeout_s = 30;
      auto comm = hub->Connect(rank, co);
      auto r = Build(mc, zero, dtype, comm.get());
      if (r == nullptr) {
        results[rank] = Internal("build failed");
        return;
      }
      for (int k = 0; k < 2 && results[rank].ok(); ++k) results[rank] = TrainStep(*r, 2 * k + rank, 2);
      if (!results[rank].ok()) return;
      auto ck = Checkpointer::Create(cfg, comm.get(), nullptr);
      if (!ck.ok()) {
        results[rank] = ck.status();
        return;
      }
      results[rank] = (*ck)->Save(2, *r->shards, State(2, *r->shards), Layout(2, zero));
      if (results[rank].ok()) results[rank] = (*ck)->Poll(/*block=*/true);
      stats[rank] = (*ck)->stats();
      std::lock_guard<std::mutex> lock(saved_mu);
      saved.Add(*r->shards);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(results[0].ok()) << results[0].ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].ToString();
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(stats[rank].committed, 1) << rank;
  EXPECT_EQ(Committed(root), std::vector<int64_t>{2});
  ExpectVerified(root, 2);

  auto reader = CheckpointReader::Open(StepDir(root, 2));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_EQ((*reader)->manifest().shards.size(), 2u);
  for (const ShardRecord& sh : (*reader)->manifest().shards) {
    EXPECT_FALSE(sh.segments.empty()) << "rank " << sh.rank << " saved nothing: the test would not reshard";
  }
  auto one = Build(mc, 0, DType::kF32, nullptr, /*seed=*/99);
  ASSERT_NE(one, nullptr);
  Status st = LoadCheckpointInto(**reader, mc, *one->shards, /*with_optimizer=*/true);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectSameBits(saved, Snapshot(*one->shards, n),
                 "zero " + std::to_string(zero) + " x2 " + std::string(DTypeName(dtype)) + " -> zero 0 x1 f32");
}

TEST(Checkpointer, Zero3OnTwoRanksLoadsIntoOneRankZero0) {
  cpu::SetNumThreads(1);
  ExpectTwoRanksLoadIntoOne(3, DType::kF32);
  ExpectTwoRanksLoadIntoOne(3, DType::kBF16);
}

// Replicated state (ZeRO 0) is still written 1/dp per rank; the halves load into one rank.
TEST(Checkpointer, Zero0OnTwoRanksWritesHalvesThatLoadIntoOneRank) {
  cpu::SetNumThreads(1);
  ExpectTwoRanksLoadIntoOne(0, DType::kF32);
}

// ---- 2. the fault matrix ----------------------------------------------------------------------

enum class Fault { kWrite, kSync, kRename, kMkdir };

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kWrite: return "write";
    case Fault::kSync: return "fsync";
    case Fault::kRename: return "rename";
    case Fault::kMkdir: return "mkdir";
  }
  return "?";
}

// Counts from zero again and fails the n-th `kind` operation from now on (0: none).
void Arm(FaultyFileSystem& ffs, Fault kind, int n) {
  ffs.writes = 0;
  ffs.syncs = 0;
  ffs.renames = 0;
  ffs.mkdirs = 0;
  ffs.fail_write_at = kind == Fault::kWrite ? n : 0;
  ffs.fail_sync_at = kind == Fault::kSync ? n : 0;
  ffs.fail_rename_at = kind == Fault::kRename ? n : 0;
  ffs.fail_mkdir_at = kind == Fault::kMkdir ? n : 0;
}

int Count(const FaultyFileSystem& ffs, Fault kind) {
  switch (kind) {
    case Fault::kWrite: return ffs.writes.load();
    case Fault::kSync: return ffs.syncs.load();
    case Fault::kRename: return ffs.renames.load();
    case Fault::kMkdir: return ffs.mkdirs.load();
  }
  return 0;
}

// Step 1 commits cleanly, then the save of step 2 meets a failure of the n-th `kind` operation,
// for n = 1, 2, ... until a save runs through without reaching the n-th one. Returns how many
// faults were injected; `committed_anyway` (if given) counts failed saves whose step_2 is nevertheless
// committed (and verified) on disk: the root's fsync after the final rename.
int RunFaultMatrix(Fault kind, int* committed_anyway = nullptr) {
  const ModelConfig mc = TinyModel(/*layers=*/1);
  auto r = Build(mc, 0, DType::kF32, nullptr);
  EXPECT_NE(r, nullptr);
  if (r == nullptr) return 0;
  EXPECT_TRUE(TrainStep(*r, 0).ok());
  int injected = 0;
  for (int n = 1;; ++n) {
    if (n > 2000) {
      ADD_FAILURE() << FaultName(kind) << ": saves never stop reaching the fault";
      return injected;
    }
    const std::string where = std::string(FaultName(kind)) + " #" + std::to_string(n);
    ScopedTempDir tmp("ckpt_fault");
    const std::string root = tmp / "ckpt";
    const Config cfg = MakeConfig(root, mc);
    FaultyFileSystem ffs;
    bool hit = false, after_commit = false;
    {
      auto ck = MakeCheckpointer(cfg, ffs);
      if (ck == nullptr) return injected;
      SaveAndCommit(*ck, 1, *r->shards);
      if (ck->stats().committed != 1) {
        ADD_FAILURE() << where << ": the clean save of step 1 did not commit";
        return injected;
      }
      Arm(ffs, kind, n);
      Status st = ck->Save(2, *r->shards, State(2, *r->shards), Layout(1, 0));
      EXPECT_TRUE(st.ok()) << where << ": Save: " << st.ToString();
      st = ck->Poll(/*block=*/true);
      EXPECT_TRUE(st.ok()) << where << ": Poll: " << st.ToString();
      hit = Count(ffs, kind) >= n;
      Arm(ffs, kind, 0);  // the destructor and the checks below run fault-free
      EXPECT_EQ(ck->stats().saves, 2) << where;
      after_commit = hit && fs::exists(StepDir(root, 2) + "/manifest.json");
      if (after_commit) {
        // The fault came after the final rename (the root's fsync): step 2 is committed on
        // disk, which is the ground truth, so it counts as committed (with a warning event).
        EXPECT_EQ(ck->stats().failed, 0) << where;
        EXPECT_EQ(ck->stats().committed, 2) << where;
      } else if (hit) {
        EXPECT_EQ(ck->stats().failed, 1) << where;
        EXPECT_EQ(ck->stats().committed, 1) << where;
      } else {
        EXPECT_EQ(ck->stats().failed, 0) << where;
        EXPECT_EQ(ck->stats().committed, 2) << where;
      }
    }
    // Step 1 untouched and verified; step 2 absent or complete, never half there.
    const std::vector<int64_t> committed = Committed(root);
    EXPECT_NE(std::find(committed.begin(), committed.end(), 1), committed.end()) << where;
    ExpectVerified(root, 1);
    if (fs::exists(StepDir(root, 2))) {
      EXPECT_TRUE(fs::exists(StepDir(root, 2) + "/manifest.json")) << where << ": step_2 without a manifest";
      ExpectVerified(root, 2);
    }
    EXPECT_FALSE(fs::exists(root + "/" + StagingDirName(2))) << where << ": staging left behind";
    auto cat = ReadCatalog(root);
    if (cat != nullptr) {
      EXPECT_EQ(CatalogStatus(*cat, 1), "committed") << where;
      if (!hit || after_commit) {
        EXPECT_EQ(CatalogStatus(*cat, 2), "committed") << where;
      } else if (kind != Fault::kMkdir) {
        EXPECT_EQ(CatalogStatus(*cat, 2), "failed") << where;
      } else {
        // Every mkdir of a save is PrepareStaging's; that the catalog has no entry then is
        // FailedStagingIsRecordedAsFailedInTheCatalog's subject. The failure is an event here.
        auto events = cat->Events();
        EXPECT_TRUE(events.ok() && std::any_of(events->begin(), events->end(), [](const CatalogEvent& e) {
          return e.kind == "save_failed" && e.message.find("step 2") != std::string::npos;
        })) << where;
      }
    }
    if (::testing::Test::HasFatalFailure()) return injected;
    if (!hit) {
      ::testing::Test::RecordProperty(std::string(FaultName(kind)) + "_faults_injected", injected);
      return injected;
    }
    ++injected;
    if (committed_anyway != nullptr && fs::exists(StepDir(root, 2))) ++*committed_anyway;
  }
}

TEST(CheckpointerFaults, EveryFailedWriteOfASaveKeepsThePreviousCheckpoint) {
  cpu::SetNumThreads(1);
  EXPECT_GT(RunFaultMatrix(Fault::kWrite), 10);
}

TEST(CheckpointerFaults, EveryFailedFsyncOfASaveKeepsThePreviousCheckpoint) {
  cpu::SetNumThreads(1);
  int committed_anyway = 0;
  EXPECT_GT(RunFaultMatrix(Fault::kSync, &committed_anyway), 2);
  // Only the last fsync (the root's, after step_2.tmp -> step_2) fails a save that is already
  // in place: complete and verified on disk, so it counts as committed (checked in the matrix).
  EXPECT_EQ(committed_anyway, 1);
}

TEST(CheckpointerFaults, EveryFailedRenameOfASaveKeepsThePreviousCheckpoint) {
  cpu::SetNumThreads(1);
  EXPECT_GE(RunFaultMatrix(Fault::kRename), 2);  // the manifest's and the directory's
}

TEST(CheckpointerFaults, EveryFailedMkdirOfASaveKeepsThePreviousCheckpoint) {
  cpu::SetNumThreads(1);
  EXPECT_GE(RunFaultMatrix(Fault::kMkdir), 1);
}

// checkpointer.h: a failed save "records "failed"" in the catalog. A save whose staging
// directory cannot be prepared (rank 0's PrepareStaging: mkdir, or the crash sweep's renames
// and fsyncs) must too, like one whose shard write fails.
// Commits step 1, then fails the staging mkdir of a save of `second`; returns the catalog's
// status for `second` afterwards.
std::string CatalogStatusAfterAFailedSave(const std::string& name, int64_t second) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(1);
  auto r = Build(mc, 0, DType::kF32, nullptr);
  EXPECT_NE(r, nullptr);
  if (r == nullptr) return "";
  ScopedTempDir tmp(name);
  const std::string root = tmp / "ckpt";
  const Config cfg = MakeConfig(root, mc);
  FaultyFileSystem ffs;
  {
    auto ck = MakeCheckpointer(cfg, ffs);
    EXPECT_NE(ck, nullptr);
    if (ck == nullptr) return "";
    SaveAndCommit(*ck, 1, *r->shards);
    Arm(ffs, Fault::kMkdir, 1);  // <root>/step_<second>.tmp (the root exists: nothing else to make)
    SaveAndCommit(*ck, second, *r->shards);
    Arm(ffs, Fault::kMkdir, 0);
    EXPECT_EQ(ck->stats().failed, 1);
  }
  EXPECT_FALSE(fs::exists(root + "/" + StagingDirName(second)));
  ExpectVerified(root, 1);
  auto cat = ReadCatalog(root);
  EXPECT_NE(cat, nullptr);
  return cat == nullptr ? "" : CatalogStatus(*cat, second);
}

TEST(CheckpointerFaults, FailedStagingIsRecordedAsFailedInTheCatalog) {
  EXPECT_EQ(CatalogStatusAfterAFailedSave("ckpt_prepfail", 2), "failed")
      << "runtime/train/checkpointer.cc Save: a PrepareStaging failure records only an event";
}

// A restart that fell back re-runs steps it had saved before: a failed new save of such a step
// must not mark its earlier, still valid, committed checkpoint as failed in the catalog.
TEST(CheckpointerFaults, AFailedResaveKeepsTheEarlierCommittedRecord) {
  EXPECT_EQ(CatalogStatusAfterAFailedSave("ckpt_resave", 1), "committed");
}

// A shard write failing on rank 1 only: both ranks count the save as failed and go on, rank 0
// abandons the staging directory and records the failure.
TEST(CheckpointerFaults, AWriteFailingOnOneRankFailsTheSaveOnEveryRank) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(2, kShardedHidden);
  ScopedTempDir tmp("ckpt_rankfault");
  const std::string root = tmp / "ckpt";
  const Config cfg = MakeConfig(root, mc);
  auto hub = FakeHub::Create(2);
  std::vector<Status> results(2, Status::Ok());
  std::vector<CheckpointStats> stats(2);
  int rank1_writes = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions co;
      co.name = "dp";
      co.timeout_s = 30;
      auto comm = hub->Connect(rank, co);
      auto r = Build(mc, 3, DType::kF32, comm.get());
      if (r == nullptr) {
        results[rank] = Internal("build failed");
        return;
      }
      results[rank] = TrainStep(*r, rank, 2);
      if (!results[rank].ok()) return;
      FaultyFileSystem ffs;
      auto ck = Checkpointer::Create(cfg, comm.get(), nullptr, ffs);
      if (!ck.ok()) {
        results[rank] = ck.status();
        return;
      }
      auto run = [&]() -> Status {
        RETURN_IF_ERROR((*ck)->Save(1, *r->shards, State(1, *r->shards), Layout(2, 3)));
        RETURN_IF_ERROR((*ck)->Poll(true));
        if (rank == 1) {
          ffs.writes = 0;
          ffs.fail_write_at = 3;
        }
        RETURN_IF_ERROR((*ck)->Save(2, *r->shards, State(2, *r->shards), Layout(2, 3)));
        return (*ck)->Poll(true);
      };
      results[rank] = run();
      if (rank == 1) rank1_writes = ffs.writes.load();
      stats[rank] = (*ck)->stats();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(rank1_writes, 3) << "rank 1 never reached the failing write";
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << rank << ": " << results[rank].ToString();
    EXPECT_EQ(stats[rank].committed, 1) << rank;
    EXPECT_EQ(stats[rank].failed, 1) << rank;
  }
  EXPECT_EQ(Committed(root), std::vector<int64_t>{1});
  ExpectVerified(root, 1);
  EXPECT_FALSE(fs::exists(StepDir(root, 2)));
  EXPECT_FALSE(fs::exists(root + "/" + StagingDirName(2)));
  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(CatalogStatus(*cat, 2), "failed");
  auto e = cat->Get(2);
  ASSERT_TRUE(e.ok());
  EXPECT_NE(e->note.find("rank(s) 1"), std::string::npos) << e->note;
}

// ---- 3. max_failures --------------------------------------------------------------------------

TEST(Checkpointer, MaxFailuresConsecutiveFailedSavesStopTheRun) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(1);
  auto r = Build(mc, 0, DType::kF32, nullptr);
  ASSERT_NE(r, nullptr);
  for (bool async : {true, false}) {
    SCOPED_TRACE(async ? "async" : "sync");
    ScopedTempDir tmp("ckpt_maxfail");
    const std::string root = tmp / "ckpt";
    Config cfg = MakeConfig(root, mc);
    cfg.checkpoint.async = async;
    cfg.checkpoint.max_failures = 3;
    ControlledFileSystem cfs;
    auto ck = MakeCheckpointer(cfg, cfs);
    ASSERT_NE(ck, nullptr);
    // Save + Poll; with async: false the verdict comes from Save itself.
    auto save = [&](int64_t step) -> Status {
      RETURN_IF_ERROR(ck->Save(step, *r->shards, State(step, *r->shards), Layout(1, 0)));
      return ck->Poll(/*block=*/true);
    };
    cfs.fail_writes = true;
    ASSERT_TRUE(save(1).ok());
    ASSERT_TRUE(save(2).ok());
    EXPECT_EQ(ck->stats().failed, 2);
    cfs.fail_writes = false;
    ASSERT_TRUE(save(3).ok());  // resets the count
    EXPECT_EQ(ck->stats().committed, 1);
    cfs.fail_writes = true;
    ASSERT_TRUE(save(4).ok());
    ASSERT_TRUE(save(5).ok());
    Status st = save(6);
    EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
    EXPECT_NE(st.message().find("3 consecutive saves failed"), std::string::npos) << st.ToString();
    EXPECT_EQ(ck->stats().failed, 5);
    EXPECT_EQ(ck->stats().saves, 6);
    ck.reset();
    EXPECT_EQ(Committed(root), std::vector<int64_t>{3});
    ExpectVerified(root, 3);
  }
}

// A save that fails while preparing its directory (rank 0's mkdir) counts toward the same
// consecutive failures as failed writes.
TEST(Checkpointer, FailedStagingCountsTowardMaxFailures) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(1);
  auto r = Build(mc, 0, DType::kF32, nullptr);
  ASSERT_NE(r, nullptr);
  ScopedTempDir tmp("ckpt_maxfail_prep");
  const std::string root = tmp / "ckpt";
  Config cfg = MakeConfig(root, mc);
  cfg.checkpoint.max_failures = 2;
  FaultyFileSystem ffs;
  auto ck = MakeCheckpointer(cfg, ffs);
  ASSERT_NE(ck, nullptr);
  ffs.writes = 0;
  ffs.fail_write_at = 1;
  ASSERT_TRUE(ck->Save(1, *r->shards, State(1, *r->shards), Layout(1, 0)).ok());
  ASSERT_TRUE(ck->Poll(true).ok());
  EXPECT_EQ(ck->stats().failed, 1);
  ffs.mkdirs = 0;
  ffs.fail_mkdir_at = 1;
  Status st = ck->Save(2, *r->shards, State(2, *r->shards), Layout(1, 0));
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("2 consecutive saves failed"), std::string::npos) << st.ToString();
  EXPECT_EQ(ck->stats().failed, 2);
}

// ---- 4. on_busy -------------------------------------------------------------------------------

TEST(Checkpointer, OnBusySkipSkipsASaveWhileThePreviousIsStillWriting) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(1);
  auto r = Build(mc, 0, DType::kF32, nullptr);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(TrainStep(*r, 0).ok());
  ScopedTempDir tmp("ckpt_skip");
  const std::string root = tmp / "ckpt";
  Config cfg = MakeConfig(root, mc);
  cfg.checkpoint.on_busy = CheckpointOnBusy::kSkip;
  ControlledFileSystem cfs;
  {
    auto ck = MakeCheckpointer(cfg, cfs);
    ASSERT_NE(ck, nullptr);
    GateGuard guard{cfs};  // a failed assertion must not leave ~Checkpointer joining a blocked writer
    cfs.CloseGate();
    ASSERT_TRUE(ck->Save(1, *r->shards, State(1, *r->shards), Layout(1, 0)).ok());
    ASSERT_TRUE(cfs.WaitUntilBlocked()) << "the writer never reached its first write";
    ck->WaitForStateCopy();  // the copy is done before the first write: returns at once
    ASSERT_TRUE(ck->Poll(/*block=*/false).ok());  // not done: nothing completes
    EXPECT_EQ(ck->stats().committed, 0);
    ASSERT_TRUE(ck->Save(2, *r->shards, State(2, *r->shards), Layout(1, 0)).ok());
    EXPECT_EQ(ck->stats().skipped, 1);
    EXPECT_EQ(ck->stats().saves, 1);
    cfs.OpenGate();
    ASSERT_TRUE(ck->Poll(/*block=*/true).ok());
    EXPECT_EQ(ck->stats().committed, 1);
    EXPECT_EQ(ck->stats().failed, 0);
  }
  EXPECT_EQ(Committed(root), std::vector<int64_t>{1});
  ExpectVerified(root, 1);
  EXPECT_FALSE(fs::exists(root + "/" + StagingDirName(2)));
  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(CatalogStatus(*cat, 2), "none");
  auto events = cat->Events();
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  EXPECT_TRUE(std::any_of(events->begin(), events->end(),
                          [](const CatalogEvent& e) { return e.kind == "save_skipped"; }));
}

TEST(Checkpointer, OnBusyWaitCompletesThePreviousSaveThenSaves) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(1);
  auto r = Build(mc, 0, DType::kF32, nullptr);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(TrainStep(*r, 0).ok());
  ScopedTempDir tmp("ckpt_wait");
  const std::string root = tmp / "ckpt";
  Config cfg = MakeConfig(root, mc);
  cfg.checkpoint.on_busy = CheckpointOnBusy::kWait;
  ControlledFileSystem cfs;
  const FlatState step1 = Snapshot(*r->shards, NumParams(mc));
  {
    auto ck = MakeCheckpointer(cfg, cfs);
    ASSERT_NE(ck, nullptr);
    GateGuard guard{cfs};  // a failed assertion must not leave ~Checkpointer joining a blocked writer
    cfs.CloseGate();
    ASSERT_TRUE(ck->Save(1, *r->shards, State(1, *r->shards), Layout(1, 0)).ok());
    ASSERT_TRUE(cfs.WaitUntilBlocked());
    ck->WaitForStateCopy();
    ASSERT_TRUE(TrainStep(*r, 1).ok());  // changes the state after the copy: step 1 keeps its own
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      cfs.OpenGate();
    });
    const double stall_before = ck->stats().stall_seconds;
    Status st = ck->Save(2, *r->shards, State(2, *r->shards), Layout(1, 0));
    opener.join();
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(ck->stats().committed, 1);  // step 1, completed inside Save
    EXPECT_GE(ck->stats().stall_seconds - stall_before, 0.05);
    ASSERT_TRUE(ck->Poll(/*block=*/true).ok());
    EXPECT_EQ(ck->stats().committed, 2);
    EXPECT_EQ(ck->stats().skipped, 0);
    EXPECT_EQ(ck->stats().saves, 2);
  }
  EXPECT_EQ(Committed(root), (std::vector<int64_t>{2, 1}));
  ExpectVerified(root, 1);
  ExpectVerified(root, 2);
  // Step 1 holds the state of step 1, not what the step taken while it was writing made.
  auto reader = CheckpointReader::Open(StepDir(root, 1));
  ASSERT_TRUE(reader.ok());
  auto fresh = Build(mc, 0, DType::kF32, nullptr, 99);
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(LoadCheckpointInto(**reader, mc, *fresh->shards, true).ok());
  ExpectSameBits(step1, Snapshot(*fresh->shards, NumParams(mc)), "step 1 saved while step 2 ran");
}

// ---- 5. / 6. resume ---------------------------------------------------------------------------

// Three committed checkpoints (steps 1..3, one training step apart) under `root`; the state at
// each step in `states`.
void MakeThreeCheckpoints(const std::string& root, const ModelConfig& mc, std::vector<FlatState>* states) {
  const Config cfg = MakeConfig(root, mc);
  auto r = Build(mc, 0, DType::kF32, nullptr);
  ASSERT_NE(r, nullptr);
  auto ck = MakeCheckpointer(cfg);
  ASSERT_NE(ck, nullptr);
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(TrainStep(*r, step).ok());
    SaveAndCommit(*ck, step, *r->shards);
    states->push_back(Snapshot(*r->shards, NumParams(mc)));
  }
  ASSERT_EQ(Committed(root), (std::vector<int64_t>{3, 2, 1}));
}

std::string ShardPath(const std::string& root, int64_t step) {
  return StepDir(root, step) + "/" + ShardFileName(0);
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Resume under `root` into fresh shards; the result and what got loaded.
struct ResumeOutcome {
  Result<std::optional<LoadedCheckpoint>> result = std::optional<LoadedCheckpoint>();
  std::unique_ptr<FlatState> loaded;
};

ResumeOutcome ResumeFresh(const std::string& root, const ModelConfig& mc) {
  ResumeOutcome out;
  const Config cfg = MakeConfig(root, mc);
  auto r = Build(mc, 0, DType::kF32, nullptr, 99);
  auto ck = MakeCheckpointer(cfg);
  if (r == nullptr || ck == nullptr) {
    out.result = Internal("setup failed");
    return out;
  }
  out.result = ck->Resume(*r->shards);
  out.loaded = std::make_unique<FlatState>(Snapshot(*r->shards, NumParams(mc)));
  return out;
}

// A diverged update leaves NaN in the optimizer state: the writer refuses it on the pass that
// checksums it, the save is not committed, the run is told (kNonFinite: it stops), and the
// newest committed checkpoint stays the newest, so retention never deletes it for a poisoned
// one.
TEST(Checkpointer, NonFiniteStateIsNeverCommittedAndRetentionKeepsTheHealthyOne) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel();
  ScopedTempDir tmp("ckpt_nonfinite");
  const std::string root = tmp / "ckpt";
  Config cfg = MakeConfig(root, mc);
  cfg.checkpoint.keep_last = 1;
  auto r = Build(mc, 0, DType::kF32, nullptr);
  auto ck = MakeCheckpointer(cfg);
  ASSERT_NE(ck, nullptr);
  for (int64_t step = 1; step <= 2; ++step) {
    ASSERT_TRUE(TrainStep(*r, step).ok());
    SaveAndCommit(*ck, step, *r->shards);
  }
  ASSERT_EQ(Committed(root), (std::vector<int64_t>{2}));
  // Poison one second moment, as a diverged update would (the spans are the live state).
  const auto spans = r->shards->SaveSpans();
  ASSERT_FALSE(spans.empty());
  const_cast<float*>(spans.back().exp_avg_sq)[0] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(ck->Save(3, *r->shards, State(3, *r->shards), Layout(1, 0)).ok());
  Status st = ck->Poll(/*block=*/true);
  EXPECT_EQ(st.code(), StatusCode::kNonFinite) << st.ToString();
  EXPECT_NE(st.message().find("checkpoint of step 3 refused"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("is NaN or Inf"), std::string::npos) << st.ToString();
  EXPECT_EQ(Committed(root), (std::vector<int64_t>{2}));
  EXPECT_FALSE(fs::exists(root + "/" + StagingDirName(3)));
  ExpectVerified(root, 2);
  ck.reset();
  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(CatalogStatus(*cat, 2), "committed");
  EXPECT_EQ(CatalogStatus(*cat, 3), "failed");
}

TEST(CheckpointerResume, FallsBackPastCorruptAndTruncatedCheckpoints) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel();
  ScopedTempDir tmp("ckpt_resume");
  const std::string root = tmp / "ckpt";
  std::vector<FlatState> states;
  MakeThreeCheckpoints(root, mc, &states);
  ASSERT_EQ(states.size(), 3u);

  FlipByte(ShardPath(root, 3), 100);  // inside the first segment's data
  const std::string shard2 = ShardPath(root, 2);
  fs::resize_file(shard2, fs::file_size(shard2) - 8);

  ResumeOutcome o = ResumeFresh(root, mc);
  ASSERT_TRUE(o.result.ok()) << o.result.status().ToString();
  ASSERT_TRUE(o.result->has_value());
  const LoadedCheckpoint& lc = **o.result;
  EXPECT_EQ(lc.step, 1);
  EXPECT_EQ(lc.dir, StepDir(root, 1));
  ASSERT_NE(lc.state.Find("step"), nullptr);
  EXPECT_EQ(lc.state.Find("step")->as_int(), 1);
  ExpectSameBits(states[0], *o.loaded, "resumed step 1");

  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(CatalogStatus(*cat, 3), "corrupt");
  EXPECT_EQ(CatalogStatus(*cat, 2), "corrupt");
  EXPECT_EQ(CatalogStatus(*cat, 1), "committed");
  auto e3 = cat->Get(3);
  ASSERT_TRUE(e3.ok());
  EXPECT_NE(e3->note.find(ShardFileName(0)), std::string::npos) << e3->note;
  auto events = cat->Events();
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(std::count_if(events->begin(), events->end(),
                          [](const CatalogEvent& e) { return e.kind == "corrupt"; }),
            2);
}

TEST(CheckpointerResume, AllCorruptIsAnErrorAndNoneIsAFreshStart) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel();
  ScopedTempDir tmp("ckpt_resume_all");
  {
    ResumeOutcome none = ResumeFresh(tmp / "empty", mc);
    ASSERT_TRUE(none.result.ok()) << none.result.status().ToString();
    EXPECT_FALSE(none.result->has_value());
  }
  const std::string root = tmp / "ckpt";
  std::vector<FlatState> states;
  MakeThreeCheckpoints(root, mc, &states);
  FlipByte(ShardPath(root, 3), 0);
  FlipByte(ShardPath(root, 2), 200);
  fs::resize_file(ShardPath(root, 1), 10);
  ResumeOutcome o = ResumeFresh(root, mc);
  ASSERT_FALSE(o.result.ok());
  EXPECT_EQ(o.result.status().code(), StatusCode::kCorruptCheckpoint) << o.result.status().ToString();
  EXPECT_NE(o.result.status().message().find(
                "among 3 committed (step 3: damaged; step 2: damaged; step 1: damaged); the damaged "
                "ones were moved aside as step_<N>.corrupt"),
            std::string::npos)
      << o.result.status().ToString();
  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  for (int64_t step = 1; step <= 3; ++step) EXPECT_EQ(CatalogStatus(*cat, step), "corrupt") << step;
}

// The newest manifest replaced by hostile variants of itself: resume must reject it (no file
// outside the checkpoint opened, no absurd allocation, no crash) and load step 2.
TEST(CheckpointerResume, HostileManifestFallsBack) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel();
  ScopedTempDir tmp("ckpt_hostile");
  const std::string root = tmp / "ckpt";
  std::vector<FlatState> states;
  MakeThreeCheckpoints(root, mc, &states);
  const std::string manifest_path = StepDir(root, 3) + "/manifest.json";
  const std::string original = ReadText(manifest_path);
  auto parsed = ParseManifest(original, manifest_path);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_FALSE(parsed->shards.empty());
  ASSERT_FALSE(parsed->shards[0].segments.empty());

  // A fallback moves the damaged step aside (step_<N>.corrupt); put it back for the next case.
  auto restore_step3 = [&] {
    if (fs::exists(StepDir(root, 3) + ".corrupt")) {
      fs::remove_all(StepDir(root, 3));
      fs::rename(StepDir(root, 3) + ".corrupt", StepDir(root, 3));
    }
  };
  struct Variant {
    const char* name;
    std::function<void(Manifest&)> edit;
  };
  const std::vector<Variant> variants = {
      {"shard file ../../etc/passwd", [](Manifest& m) { m.shards[0].file = "../../etc/passwd"; }},
      {"shard file /etc/passwd", [](Manifest& m) { m.shards[0].file = "/etc/passwd"; }},
      {"shape over the element cap", [](Manifest& m) { m.tensors[0].shape = {int64_t{1} << 41}; }},
      {"shape whose product overflows",
       [](Manifest& m) { m.tensors[0].shape = {int64_t{1} << 62, 4}; }},
      {"huge shape under the cap (uncovered)",
       [](Manifest& m) { m.tensors[0].shape = {int64_t{1} << 20, int64_t{1} << 19}; }},
      {"huge shape, segment claims it all",
       [](Manifest& m) {
         m.tensors[0].shape = {int64_t{1} << 39};
         for (auto& s : m.shards[0].segments) {
           if (s.tensor == m.tensors[0].name) s.end = int64_t{1} << 39;
         }
       }},
      {"huge shard size", [](Manifest& m) { m.shards[0].bytes = uint64_t{1} << 50; }},
      {"segment past its shard", [](Manifest& m) { m.shards[0].segments.back().offset = uint64_t{1} << 45; }},
      {"negative adamw_step",
       [](Manifest& m) {
         m.state = JsonValue::Object({{"step", JsonValue::Integer(3)}, {"adamw_step", JsonValue::Integer(-1)}});
       }},
      {"no tensors", [](Manifest& m) { m.tensors.clear(); }},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    Manifest m = *parsed;
    v.edit(m);
    WriteText(manifest_path, SerializeManifest(m));
    ResumeOutcome o = ResumeFresh(root, mc);
    ASSERT_TRUE(o.result.ok()) << o.result.status().ToString();
    ASSERT_TRUE(o.result->has_value());
    EXPECT_EQ((*o.result)->step, 2);
    ExpectSameBits(states[1], *o.loaded, std::string("fallback for ") + v.name);
    EXPECT_TRUE(fs::exists(StepDir(root, 3) + ".corrupt")) << "set aside";
    restore_step3();
  }
  for (const char* text : {"", "{", "not json", "[1,2,3]", "{\"version\": 1}"}) {
    SCOPED_TRACE(std::string("manifest text: ") + text);
    WriteText(manifest_path, text);
    ResumeOutcome o = ResumeFresh(root, mc);
    ASSERT_TRUE(o.result.ok()) << o.result.status().ToString();
    ASSERT_TRUE(o.result->has_value());
    EXPECT_EQ((*o.result)->step, 2);
    restore_step3();
  }
  // The untouched original still resumes from step 3 (the variants were the only problem).
  WriteText(manifest_path, original);
  ResumeOutcome o = ResumeFresh(root, mc);
  ASSERT_TRUE(o.result.ok()) << o.result.status().ToString();
  ASSERT_TRUE(o.result->has_value());
  EXPECT_EQ((*o.result)->step, 3);
  ExpectSameBits(states[2], *o.loaded, "original step 3");
}

// Two ranks under ZeRO 3 read only their own pieces, so a flipped byte in shard_1 is seen by
// rank 1 alone; both must still fall back together, to the same checkpoint.
TEST(CheckpointerResume, RanksFallBackTogetherWhenOnlyOneSeesCorruption) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(2, kShardedHidden);
  const int64_t n = NumParams(mc);
  ScopedTempDir tmp("ckpt_resume2");
  const std::string root = tmp / "ckpt";
  const Config cfg = MakeConfig(root, mc);
  FlatState step1(n), loaded(n);
  std::mutex mu;
  std::vector<Status> results(2, Status::Ok());
  std::vector<int64_t> resumed_step(2, -1);
  // phase 0 saves steps 1 and 2; phase 1 resumes into fresh shards.
  for (int phase = 0; phase < 2; ++phase) {
    auto hub = FakeHub::Create(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        CommOptions co;
        co.name = "dp";
        co.timeout_s = 30;
        auto comm = hub->Connect(rank, co);
        auto r = Build(mc, 3, DType::kF32, comm.get(), phase == 0 ? 5 : 99);
        auto ck = Checkpointer::Create(cfg, comm.get(), nullptr);
        if (r == nullptr || !ck.ok()) {
          results[rank] = Internal("setup failed");
          return;
        }
        auto run = [&]() -> Status {
          if (phase == 0) {
            for (int64_t step = 1; step <= 2; ++step) {
              RETURN_IF_ERROR(TrainStep(*r, 2 * step + rank, 2));
              RETURN_IF_ERROR((*ck)->Save(step, *r->shards, State(step, *r->shards), Layout(2, 3)));
              RETURN_IF_ERROR((*ck)->Poll(true));
              if (step == 1) {
                std::lock_guard<std::mutex> lock(mu);
                step1.Add(*r->shards);
              }
            }
            return Status::Ok();
          }
          ASSIGN_OR_RETURN(std::optional<LoadedCheckpoint> got, (*ck)->Resume(*r->shards));
          if (!got) return Internal("nothing resumed");
          resumed_step[rank] = got->step;
          std::lock_guard<std::mutex> lock(mu);
          loaded.Add(*r->shards);
          return Status::Ok();
        };
        results[rank] = run();
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_TRUE(results[0].ok()) << "phase " << phase << ": " << results[0].ToString();
    ASSERT_TRUE(results[1].ok()) << "phase " << phase << ": " << results[1].ToString();
    if (phase == 0) {
      ASSERT_EQ(Committed(root), (std::vector<int64_t>{2, 1}));
      FlipByte(StepDir(root, 2) + "/" + ShardFileName(1), 0);
    }
  }
  EXPECT_EQ(resumed_step[0], 1);
  EXPECT_EQ(resumed_step[1], 1);
  ExpectSameBits(step1, loaded, "two ranks resumed at step 1");
  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(CatalogStatus(*cat, 2), "corrupt");
  auto e = cat->Get(2);
  ASSERT_TRUE(e.ok());
  EXPECT_NE(e->note.find("rank(s) 1"), std::string::npos) << e->note;
}

// Retention in the run that resumed past corrupt checkpoints: retention.h leaves corrupt
// checkpoints out of the policy ("not this policy's business"), so the save that follows the
// resume must survive it and a later resume must find it.
TEST(CheckpointerResume, RetentionAfterAFallbackKeepsTheNewCheckpoint) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel();
  ScopedTempDir tmp("ckpt_retention_fallback");
  const std::string root = tmp / "ckpt";
  std::vector<FlatState> states;
  MakeThreeCheckpoints(root, mc, &states);
  FlipByte(ShardPath(root, 3), 0);
  FlipByte(ShardPath(root, 2), 0);
  Config cfg = MakeConfig(root, mc);
  cfg.checkpoint.keep_last = 1;
  auto r = Build(mc, 0, DType::kF32, nullptr, 99);
  ASSERT_NE(r, nullptr);
  {
    auto ck = MakeCheckpointer(cfg);
    ASSERT_NE(ck, nullptr);
    auto got = ck->Resume(*r->shards);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value());
    ASSERT_EQ((*got)->step, 1);
    ASSERT_TRUE(TrainStep(*r, 2).ok());
    SaveAndCommit(*ck, 2, *r->shards);  // replaces the corrupt step_2
    EXPECT_EQ(ck->stats().committed, 1);
  }
  const std::vector<int64_t> committed = Committed(root);
  EXPECT_NE(std::find(committed.begin(), committed.end(), 2), committed.end())
      << "retention deleted the checkpoint it had just committed and kept step 3, which this "
         "run marked corrupt";
  ResumeOutcome o = ResumeFresh(root, mc);
  ASSERT_TRUE(o.result.ok()) << o.result.status().ToString();
  ASSERT_TRUE(o.result->has_value());
  EXPECT_EQ((*o.result)->step, 2);
}

TEST(Checkpointer, RetentionKeepsTheLastAndTheMilestones) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(1);
  ScopedTempDir tmp("ckpt_retention");
  const std::string root = tmp / "ckpt";
  Config cfg = MakeConfig(root, mc);
  cfg.checkpoint.keep_last = 2;
  cfg.checkpoint.keep_every = 2;
  auto r = Build(mc, 0, DType::kF32, nullptr);
  ASSERT_NE(r, nullptr);
  {
    auto ck = MakeCheckpointer(cfg);
    ASSERT_NE(ck, nullptr);
    for (int64_t step = 1; step <= 5; ++step) SaveAndCommit(*ck, step, *r->shards);
    EXPECT_EQ(ck->stats().committed, 5);
  }
  EXPECT_EQ(Committed(root), (std::vector<int64_t>{5, 4, 2}));
  for (int64_t step : {2, 4, 5}) ExpectVerified(root, step);
  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(CatalogStatus(*cat, 1), "deleted");
  EXPECT_EQ(CatalogStatus(*cat, 3), "deleted");
  EXPECT_EQ(CatalogStatus(*cat, 4), "committed");
}

TEST(Checkpointer, DueFollowsIntervalAndAtEnd) {
  ScopedTempDir tmp("ckpt_due");
  const ModelConfig mc = TinyModel(1);
  Config every2 = MakeConfig(tmp / "a", mc);
  every2.checkpoint.interval_steps = 2;
  Config end_only = MakeConfig(tmp / "b", mc);
  end_only.checkpoint.interval_steps = 0;
  Config every2_no_end = MakeConfig(tmp / "c", mc);
  every2_no_end.checkpoint.interval_steps = 2;
  every2_no_end.checkpoint.at_end = false;
  Config disabled = MakeConfig("", mc);
  {
    auto ck = MakeCheckpointer(every2);
    ASSERT_NE(ck, nullptr);
    EXPECT_FALSE(ck->Due(1, 5));
    EXPECT_TRUE(ck->Due(2, 5));
    EXPECT_FALSE(ck->Due(3, 5));
    EXPECT_TRUE(ck->Due(4, 5));
    EXPECT_TRUE(ck->Due(5, 5));
  }
  {
    auto ck = MakeCheckpointer(end_only);
    ASSERT_NE(ck, nullptr);
    EXPECT_FALSE(ck->Due(4, 5));
    EXPECT_TRUE(ck->Due(5, 5));
  }
  {
    auto ck = MakeCheckpointer(every2_no_end);
    ASSERT_NE(ck, nullptr);
    EXPECT_FALSE(ck->Due(5, 5));
    EXPECT_TRUE(ck->Due(4, 5));
  }
  {
    auto ck = MakeCheckpointer(disabled);
    ASSERT_NE(ck, nullptr);
    EXPECT_FALSE(ck->enabled());
    EXPECT_FALSE(ck->Due(5, 5));
  }
}

// ---- 7. a different model ---------------------------------------------------------------------

TEST(Checkpointer, LoadIntoADifferentModelNamesTheTensorAndBothShapes) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(2, 16);
  ScopedTempDir tmp("ckpt_mismatch");
  const std::string root = tmp / "ckpt";
  {
    const Config cfg = MakeConfig(root, mc);
    auto r = Build(mc, 0, DType::kF32, nullptr);
    ASSERT_NE(r, nullptr);
    ASSERT_TRUE(TrainStep(*r, 0).ok());
    auto ck = MakeCheckpointer(cfg);
    ASSERT_NE(ck, nullptr);
    SaveAndCommit(*ck, 1, *r->shards);
  }
  auto reader = CheckpointReader::Open(StepDir(root, 1));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();

  // Hidden size 32 instead of 16: the first parameter already differs.
  const ModelConfig wide = TinyModel(2, 32);
  const ParamDecl first = DeclareParameters(wide).front();
  const ParamDecl saved_first = DeclareParameters(mc).front();
  auto rw = Build(wide, 0, DType::kF32, nullptr);
  ASSERT_NE(rw, nullptr);
  Status st = LoadCheckpointInto(**reader, wide, *rw->shards, /*with_optimizer=*/false);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("param/" + first.name), std::string::npos) << st.ToString();
  auto shape_text = [](const Shape& s) {
    std::string t = "[";
    for (int i = 0; i < s.rank(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
  };
  EXPECT_NE(st.message().find(shape_text(saved_first.shape)), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(shape_text(first.shape)), std::string::npos) << st.ToString();

  // Fewer layers: the checkpoint has parameters this model lacks.
  const ModelConfig shallow = TinyModel(1, 16);
  auto rs = Build(shallow, 0, DType::kF32, nullptr);
  ASSERT_NE(rs, nullptr);
  st = LoadCheckpointInto(**reader, shallow, *rs->shards, /*with_optimizer=*/true);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("h.1."), std::string::npos) << st.ToString();

  // More layers: the model needs tensors the checkpoint lacks.
  const ModelConfig deep = TinyModel(3, 16);
  auto rd = Build(deep, 0, DType::kF32, nullptr);
  ASSERT_NE(rd, nullptr);
  st = LoadCheckpointInto(**reader, deep, *rd->shards, /*with_optimizer=*/true);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("h.2."), std::string::npos) << st.ToString();

  // Resume under the wide config does not load the mismatched checkpoint.
  ResumeOutcome o = ResumeFresh(root, wide);
  EXPECT_FALSE(o.result.ok());
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A damaged catalog does not stop training: the writer sets it aside and starts a new one;
// the committed checkpoints on disk are still found.
TEST(Checkpointer, ADamagedCatalogIsSetAsideAndRecreated) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel();
  ScopedTempDir tmp("ckpt_catalog");
  const std::string root = tmp / "ckpt";
  const Config cfg = MakeConfig(root, mc);
  auto r = Build(mc, 0, DType::kF32, nullptr);
  ASSERT_NE(r, nullptr);
  {
    auto ck = MakeCheckpointer(cfg);
    ASSERT_NE(ck, nullptr);
    SaveAndCommit(*ck, 1, *r->shards);
  }
  WriteText(root + "/catalog/CURRENT", "garbage");
  auto ck = MakeCheckpointer(cfg);
  ASSERT_NE(ck, nullptr);
  bool aside = false;
  for (const auto& e : fs::directory_iterator(root)) {
    aside |= e.path().filename().string().rfind("catalog.damaged-", 0) == 0;
  }
  EXPECT_TRUE(aside);
  SaveAndCommit(*ck, 2, *r->shards);
  EXPECT_EQ(Committed(root), (std::vector<int64_t>{2, 1}));
  ck.reset();
  auto cat = ReadCatalog(root);
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(CatalogStatus(*cat, 2), "committed");
}

// Records every catalog write, as a supervised coordinator's relaying sink would send them.
class RecordingCatalogSink : public CatalogSink {
 public:
  Status Put(const CheckpointEntry& e) override {
    puts.push_back(e);
    return Status::Ok();
  }
  Status SetStatus(int64_t step, CheckpointStatus status, const std::string& note) override {
    statuses.push_back(std::to_string(step) + " " + CheckpointStatusName(status) + " " + note);
    return Status::Ok();
  }
  Status AddEvent(const std::string& kind, const std::string& message) override {
    events.push_back({0, kind, message});
    return Status::Ok();
  }
  Result<CheckpointEntry> Get(int64_t step) const override {
    return NotFound("relaying sink: no entry for step " + std::to_string(step));
  }
  std::vector<CheckpointEntry> puts;
  std::vector<std::string> statuses;
  std::vector<CatalogEvent> events;
};

TEST(Checkpointer, AnExternalCatalogGetsEveryWriteAndNoLocalCatalogIsOpened) {
  cpu::SetNumThreads(1);
  const ModelConfig mc = TinyModel(1);
  ScopedTempDir tmp("ckpt_sink");
  const std::string root = tmp / "ckpt";
  Config cfg = MakeConfig(root, mc);
  cfg.checkpoint.keep_last = 1;
  auto r = Build(mc, 0, DType::kF32, nullptr);
  ASSERT_NE(r, nullptr);
  RecordingCatalogSink sink;
  {
    auto ck = Checkpointer::Create(cfg, nullptr, nullptr, DefaultFileSystem(), nullptr, &sink);
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    SaveAndCommit(**ck, 1, *r->shards);
    SaveAndCommit(**ck, 2, *r->shards);
    EXPECT_EQ((*ck)->stats().committed, 2);
  }
  EXPECT_FALSE(fs::exists(root + "/catalog")) << "the catalog's owner is elsewhere";
  EXPECT_EQ(Committed(root), (std::vector<int64_t>{2}));
  ExpectVerified(root, 2);
  // writing + committed for each save, in that order.
  ASSERT_EQ(sink.puts.size(), 4u);
  for (int k = 0; k < 2; ++k) {
    const CheckpointEntry& writing = sink.puts[2 * k];
    const CheckpointEntry& committed = sink.puts[2 * k + 1];
    EXPECT_EQ(writing.step, k + 1);
    EXPECT_EQ(writing.status, CheckpointStatus::kWriting);
    EXPECT_EQ(writing.dir, StepDirName(k + 1));
    EXPECT_EQ(committed.step, k + 1);
    EXPECT_EQ(committed.status, CheckpointStatus::kCommitted);
    EXPECT_GT(committed.bytes, 0u);
    EXPECT_GT(committed.commit_unix_s, 0);
    EXPECT_FALSE(committed.layout.empty());
  }
  int commits = 0;
  for (const CatalogEvent& e : sink.events) {
    if (e.kind != "commit") continue;
    EXPECT_NE(e.message.find("step " + std::to_string(++commits) + " committed"), std::string::npos)
        << e.message;
  }
  EXPECT_EQ(commits, 2);
  // Retention (keep_last 1) reports its deletion through the sink too.
  EXPECT_EQ(sink.statuses, (std::vector<std::string>{"1 deleted retention"}));
}

}  // namespace
}  // namespace tessera
