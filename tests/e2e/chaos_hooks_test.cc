// links: tessera_train tessera_tools_hooks
// tests/e2e/chaos_hooks_test.cc — the chaos hooks inside a rank (tools/chaos_hooks.h): strict
// plan parsing; io_error fails checkpoint staging writes with the errno only while armed and
// only on the ranks it targets; kill_in_checkpoint SIGKILLs a (forked) rank with its shard
// partially written, once across incarnations; and a trainer whose RunLink hands the
// checkpointer a ChaosFileSystem keeps training through failed saves with the earlier
// committed checkpoint intact.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/shard_file.h"
#include "runtime/train/trainer.h"
#include "tests/e2e/cli_util.h"
#include "tools/chaos_hooks.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::Repo;
using testing::TempDir;
using testing::WriteFile;

// Writes hooks.json into `dir` and returns its path.
std::string WritePlan(const TempDir& dir, const std::string& json) {
  const std::string path = dir / "hooks.json";
  WriteFile(path, json);
  return path;
}

void Arm(const TempDir& dir, const std::string& id) {
  fs::create_directories(dir / "armed");
  WriteFile(dir / ("armed/" + id), "");
}
void Disarm(const TempDir& dir, const std::string& id) { fs::remove(dir / ("armed/" + id)); }

ChaosPlan MustParse(const std::string& json, const std::string& path = "/p/hooks.json") {
  auto plan = ParseChaosPlan(json, path);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : ChaosPlan{};
}

// The error message for `json`, which must fail with kInvalidArgument.
std::string ParseError(const std::string& json) {
  auto plan = ParseChaosPlan(json, "/p/hooks.json");
  EXPECT_FALSE(plan.ok()) << json;
  if (plan.ok()) return "";
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << plan.status().ToString();
  return plan.status().message();
}

TEST(ChaosHooks, PlanParses) {
  const ChaosPlan p = MustParse(
      R"({"hooks":[{"id":"3","kind":"kill_in_checkpoint","rank":1},)"
      R"({"id":"5","kind":"io_error","rank":-1,"errno":"ENOSPC"},)"
      R"({"id":"io-7.b","kind":"io_error","rank":0,"errno":"EIO"}]})");
  EXPECT_EQ(p.path, "/p/hooks.json");
  EXPECT_EQ(p.dir, "/p");
  ASSERT_EQ(p.hooks.size(), 3u);
  EXPECT_EQ(p.hooks[0].id, "3");
  EXPECT_EQ(p.hooks[0].kind, ChaosHookKind::kKillInCheckpoint);
  EXPECT_EQ(p.hooks[0].rank, 1);
  EXPECT_EQ(p.hooks[1].kind, ChaosHookKind::kIoError);
  EXPECT_EQ(p.hooks[1].rank, -1);
  EXPECT_EQ(p.hooks[1].error_number, ENOSPC);
  EXPECT_EQ(p.hooks[2].id, "io-7.b");
  EXPECT_EQ(p.hooks[2].error_number, EIO);
  EXPECT_TRUE(MustParse(R"({"hooks":[]})").hooks.empty());
}

TEST(ChaosHooks, MalformedPlansNameFileAndField) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {"{\"hooks\":[", "not a chaos hook plan"},
      {"[]", "(top level): expected an object"},
      {"{}", "hooks: missing"},
      {R"({"hooks":[],"extra":1})", "extra: unknown key"},
      {R"({"hooks":{}})", "hooks: expected an array"},
      {R"({"hooks":[1]})", "hooks[0]: expected an object"},
      {R"({"hooks":[{"kind":"io_error","rank":0,"errno":"EIO"}]})", "hooks[0].id: missing"},
      {R"({"hooks":[{"id":"../x","kind":"io_error","rank":0,"errno":"EIO"}]})", "hooks[0].id:"},
      {R"({"hooks":[{"id":3,"kind":"io_error","rank":0,"errno":"EIO"}]})", "hooks[0].id:"},
      {R"({"hooks":[{"id":"1","kind":"kill","rank":0}]})", "hooks[0].kind: expected"},
      {R"({"hooks":[{"id":"1","kind":"io_error","errno":"EIO"}]})", "hooks[0].rank: missing"},
      {R"({"hooks":[{"id":"1","kind":"io_error","rank":-2,"errno":"EIO"}]})", "hooks[0].rank:"},
      {R"({"hooks":[{"id":"1","kind":"io_error","rank":1.5,"errno":"EIO"}]})", "hooks[0].rank:"},
      {R"({"hooks":[{"id":"1","kind":"kill_in_checkpoint","rank":-1}]})", "hooks[0].rank:"},
      {R"({"hooks":[{"id":"1","kind":"io_error","rank":0}]})", "hooks[0].errno: missing"},
      {R"({"hooks":[{"id":"1","kind":"io_error","rank":0,"errno":"EPERM"}]})",
       "hooks[0].errno: expected"},
      {R"({"hooks":[{"id":"1","kind":"kill_in_checkpoint","rank":0,"errno":"EIO"}]})",
       "hooks[0].errno: only the io_error kinds"},
      {R"({"hooks":[{"id":"1","kind":"kill_in_offload","rank":-1}]})", "hooks[0].rank:"},
      {R"({"hooks":[{"id":"1","kind":"offload_io_error","rank":0}]})",
       "hooks[0].errno: missing (offload_io_error needs"},
      {R"({"hooks":[{"id":"1","kind":"io_error","rank":0,"errno":"EIO","when":1}]})",
       "hooks[0].when: unknown key"},
      {R"({"hooks":[{"id":"1","kind":"io_error","rank":0,"errno":"EIO","at":"update_read"}]})",
       "hooks[0].at: only kill_in_offload and offload_io_error take at"},
      {R"({"hooks":[{"id":"1","kind":"kill_in_offload","rank":0,"at":"save"}]})",
       "hooks[0].at: expected \"update_write\", \"update_read\" or \"checkpoint_read\", got \"save\""},
      {R"({"hooks":[{"id":"1","kind":"io_error","rank":0,"errno":"EIO"},)"
       R"({"id":"1","kind":"kill_in_checkpoint","rank":0}]})",
       "hooks[1].id: \"1\" is used by an earlier hook"},
  };
  for (const Case& c : cases) {
    const std::string msg = ParseError(c.json);
    EXPECT_NE(msg.find("/p/hooks.json: "), std::string::npos) << c.json << " -> " << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << c.json << " -> " << msg;
  }
}

// The offload hooks act only on an optimizer step's writes past its first chunk, on the ranks
// they target, while armed, once across processes: offload_io_error fails that write with the
// errno; kill_in_offload SIGKILLs the (forked) rank there.
TEST(ChaosHooks, OffloadHooksFireOnceMidStep) {
  TempDir dir("chaos_hooks_offload");
  const ChaosPlan plan = MustParse(
      R"({"hooks":[{"id":"e","kind":"offload_io_error","rank":1,"errno":"ENOSPC"},)"
      R"({"id":"k","kind":"kill_in_offload","rank":0}]})",
      WritePlan(dir, "{}"));
  ChaosOffloadFaults rank1(plan, 1);
  EXPECT_TRUE(rank1.Before("write", "update", "/x/opt.bin", 3, 4).ok());  // not armed
  Arm(dir, "e");
  EXPECT_TRUE(rank1.Before("write", "update", "/x/opt.bin", 0, 1).ok());  // the first chunk
  EXPECT_TRUE(rank1.Before("write", "write", "/x/opt.bin", 3, 4).ok());   // a load, not a step
  EXPECT_TRUE(rank1.Before("read", "update", "/x/opt.bin", 3, 1).ok());
  EXPECT_TRUE(rank1.Before("read", "checkpoint", "/x/opt.bin", 3, 3).ok());
  ChaosOffloadFaults rank2(plan, 2);
  EXPECT_TRUE(rank2.Before("write", "update", "/x/opt.bin", 3, 4).ok());  // not targeted
  Status s = rank1.Before("write", "update", "/x/opt.bin", 3, 4);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.ToString();
  EXPECT_TRUE(fs::exists(dir / "fired/e"));
  EXPECT_TRUE(rank1.Before("write", "update", "/x/opt.bin", 4, 5).ok());  // once only

  Arm(dir, "k");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ChaosOffloadFaults rank0(plan, 0);
    (void)rank0.Before("write", "update", "/x/opt.bin", 0, 1);
    (void)rank0.Before("write", "update", "/x/opt.bin", 1, 2);
    _exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus));
  EXPECT_EQ(WTERMSIG(wstatus), SIGKILL);
  ChaosOffloadFaults again(plan, 0);  // the next incarnation: fired before
  EXPECT_TRUE(again.Before("write", "update", "/x/opt.bin", 1, 2).ok());
}

// `at` moves an offload hook to an optimizer step's reads or to a save's reads of the file.
TEST(ChaosHooks, OffloadHooksAtReads) {
  TempDir dir("chaos_hooks_offload_at");
  const ChaosPlan plan = MustParse(
      R"({"hooks":[{"id":"r","kind":"offload_io_error","rank":0,"errno":"EIO","at":"update_read"},)"
      R"({"id":"c","kind":"offload_io_error","rank":0,"errno":"ENOSPC","at":"checkpoint_read"}]})",
      WritePlan(dir, "{}"));
  ChaosOffloadFaults rank0(plan, 0);
  Arm(dir, "r");
  Arm(dir, "c");
  EXPECT_TRUE(rank0.Before("write", "update", "/x/opt.bin", 3, 4).ok());  // neither is at writes
  // A read-ahead issued before any chunk of the step was computed: not yet.
  EXPECT_TRUE(rank0.Before("read", "update", "/x/opt.bin", 2, 0).ok());
  Status s = rank0.Before("read", "update", "/x/opt.bin", 2, 1);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("read of chunk 2 failed: Input/output error (chaos hook r)"),
            std::string::npos) << s.ToString();
  s = rank0.Before("read", "checkpoint", "/x/opt.bin", 1, 1);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("(chaos hook c)"), std::string::npos) << s.ToString();
  EXPECT_TRUE(fs::exists(dir / "fired/r"));
  EXPECT_TRUE(fs::exists(dir / "fired/c"));
}

TEST(ChaosHooks, FromEnvironment) {
  TempDir dir("chaos_hooks_env");
  unsetenv("TESSERA_CHAOS_HOOKS");
  auto none = ChaosHooks::FromEnvironment(0);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, nullptr);

  setenv("TESSERA_CHAOS_HOOKS", "", 1);
  EXPECT_FALSE(ChaosHooks::FromEnvironment(0).ok());

  const std::string missing = dir / "nope.json";
  setenv("TESSERA_CHAOS_HOOKS", missing.c_str(), 1);
  auto gone = ChaosHooks::FromEnvironment(0);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find(missing), std::string::npos) << gone.status().ToString();

  const std::string bad = WritePlan(dir, R"({"hooks":[{"id":"1","kind":"io_error","rank":0}]})");
  setenv("TESSERA_CHAOS_HOOKS", bad.c_str(), 1);
  auto malformed = ChaosHooks::FromEnvironment(0);
  ASSERT_FALSE(malformed.ok());
  const std::string msg = malformed.status().ToString();
  EXPECT_NE(msg.find("TESSERA_CHAOS_HOOKS"), std::string::npos) << msg;
  EXPECT_NE(msg.find(bad + ": hooks[0].errno"), std::string::npos) << msg;

  const std::string good =
      WritePlan(dir, R"({"hooks":[{"id":"1","kind":"io_error","rank":0,"errno":"EIO"}]})");
  setenv("TESSERA_CHAOS_HOOKS", good.c_str(), 1);
  auto hooks = ChaosHooks::FromEnvironment(2);
  unsetenv("TESSERA_CHAOS_HOOKS");
  ASSERT_TRUE(hooks.ok()) << hooks.status().ToString();
  ASSERT_NE(*hooks, nullptr);
  EXPECT_EQ((*hooks)->plan().hooks.size(), 1u);
  EXPECT_EQ((*hooks)->file_system()->rank(), 2);
}

// Opens, writes and syncs `path` through `fs`; the first error.
Status WriteThrough(FileSystem& fs, const std::string& path, const std::string& bytes) {
  ASSIGN_OR_RETURN(const int fd, fs.OpenForWrite(path));
  Status st = fs.Write(fd, bytes.data(), bytes.size(), path);
  if (st.ok()) st = fs.Sync(fd, path);
  Status closed = fs.Close(fd, path);
  return st.ok() ? closed : st;
}

TEST(ChaosHooks, IoErrorFailsStagingWritesOnlyWhileArmed) {
  TempDir dir("chaos_hooks_io");
  const std::string plan = WritePlan(dir, R"({"hooks":[{"id":"5","kind":"io_error","rank":-1,"errno":"ENOSPC"}]})");
  auto hooks = ChaosHooks::FromPlanFile(plan, 1);
  ASSERT_TRUE(hooks.ok()) << hooks.status().ToString();
  FileSystem& cfs = *(*hooks)->file_system();
  const std::string root = dir / "ckpt";
  const std::string staging = root + "/" + StagingDirName(7);
  ASSERT_TRUE(MakeDirs(staging).ok());
  ASSERT_TRUE(MakeDirs(root + "/" + StepDirName(6)).ok());
  ASSERT_TRUE(MakeDirs(root + "/step_00000007.tmpx").ok());
  const std::string shard = staging + "/shard_1.bin";

  // Disarmed: everything passes.
  ASSERT_TRUE(WriteThrough(cfs, staging + "/early.bin", "abc").ok());
  ASSERT_TRUE(WriteThrough(cfs, shard, "abc").ok());
  ASSERT_TRUE(cfs.SyncDir(staging).ok());

  // Armed: staging writes, fsyncs, the manifest's and the commit's renames fail with ENOSPC.
  auto fd = cfs.OpenForWrite(shard);  // opened before arming: its writes fail too
  ASSERT_TRUE(fd.ok());
  Arm(dir, "5");
  Status w = cfs.Write(*fd, "xy", 2, shard);
  EXPECT_EQ(w.code(), StatusCode::kIoError);
  EXPECT_NE(w.message().find("No space left on device"), std::string::npos) << w.ToString();
  EXPECT_NE(w.message().find(shard), std::string::npos) << w.ToString();
  EXPECT_FALSE(cfs.WriteAt(*fd, "xy", 2, 0, shard).ok());
  EXPECT_FALSE(cfs.Sync(*fd, shard).ok());
  EXPECT_TRUE(cfs.Close(*fd, shard).ok());
  EXPECT_FALSE(cfs.OpenForWrite(staging + "/manifest.json.tmp").ok());
  EXPECT_FALSE(WriteFileAtomic(staging + "/manifest.json", "{}", cfs).ok());
  EXPECT_FALSE(cfs.SyncDir(staging).ok());
  EXPECT_FALSE(cfs.Rename(staging, root + "/" + StepDirName(7)).ok());
  EXPECT_TRUE(fs::exists(staging));
  EXPECT_TRUE(fs::exists(dir / "fired/5")) << "the runner sees the hook took effect";
  // Outside staging, and reads, are untouched.
  EXPECT_TRUE(WriteThrough(cfs, root + "/" + StepDirName(6) + "/other.bin", "ok").ok());
  EXPECT_TRUE(WriteThrough(cfs, root + "/step_00000007.tmpx/a.bin", "ok").ok());
  EXPECT_TRUE(cfs.SyncDir(root).ok());
  auto text = cfs.ReadFile(staging + "/early.bin", 100);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "abc");

  // Disarmed again: writes pass.
  Disarm(dir, "5");
  EXPECT_TRUE(WriteThrough(cfs, shard, "abcd").ok());
  EXPECT_TRUE(WriteFileAtomic(staging + "/manifest.json", "{}", cfs).ok());
  EXPECT_TRUE(cfs.Rename(staging, root + "/" + StepDirName(7)).ok());
}

TEST(ChaosHooks, IoErrorTargetsOnlyItsRank) {
  TempDir dir("chaos_hooks_rank");
  const std::string plan =
      WritePlan(dir, R"({"hooks":[{"id":"9","kind":"io_error","rank":1,"errno":"EIO"}]})");
  auto r0 = ChaosHooks::FromPlanFile(plan, 0);
  auto r1 = ChaosHooks::FromPlanFile(plan, 1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  const std::string staging = dir / "ckpt/step_00000003.tmp";
  ASSERT_TRUE(MakeDirs(staging).ok());
  Arm(dir, "9");
  EXPECT_TRUE(WriteThrough(*(*r0)->file_system(), staging + "/shard_0.bin", "zero").ok());
  EXPECT_FALSE(fs::exists(dir / "fired/9"));
  Status st = WriteThrough(*(*r1)->file_system(), staging + "/shard_1.bin", "one");
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("Input/output error"), std::string::npos) << st.ToString();
  EXPECT_TRUE(fs::exists(dir / "fired/9"));
}

// In a child process: rank `rank`'s ChaosFileSystem writes `first` then `second` into
// `shard`, arming hook `arm_id` between the two when not empty (as the runner would while the
// rank writes). Returns the wait status.
int RunChildWriter(const std::string& plan, int rank, const std::string& shard,
                   const std::string& first, const std::string& second, const TempDir* dir,
                   const std::string& arm_id) {
  const pid_t pid = fork();
  if (pid == 0) {
    auto hooks = ChaosHooks::FromPlanFile(plan, rank);
    if (!hooks.ok()) _exit(10);
    FileSystem& cfs = *(*hooks)->file_system();
    auto fd = cfs.OpenForWrite(shard);
    if (!fd.ok()) _exit(11);
    if (!cfs.Write(*fd, first.data(), first.size(), shard).ok()) _exit(12);
    if (!arm_id.empty()) Arm(*dir, arm_id);
    if (!second.empty() && !cfs.Write(*fd, second.data(), second.size(), shard).ok()) _exit(13);
    if (!cfs.Sync(*fd, shard).ok() || !cfs.Close(*fd, shard).ok()) _exit(14);
    _exit(0);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

bool KilledBySigkill(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

TEST(ChaosHooks, KillInCheckpointCutsTheShardOnce) {
  TempDir dir("chaos_hooks_kill");
  const std::string plan = WritePlan(
      dir, R"({"hooks":[{"id":"3","kind":"kill_in_checkpoint","rank":1},)"
           R"({"id":"4","kind":"kill_in_checkpoint","rank":1}]})");
  const std::string staging = dir / "ckpt/step_00000010.tmp";
  ASSERT_TRUE(MakeDirs(staging).ok());
  const std::string shard = staging + "/shard_1.bin";
  const std::string payload(1000, 'x');

  // Armed before the shard's first (and only) write: half of it lands, then SIGKILL.
  Arm(dir, "3");
  int status = RunChildWriter(plan, 1, shard, payload, "", nullptr, "");
  EXPECT_TRUE(KilledBySigkill(status)) << "wait status " << status;
  EXPECT_EQ(fs::file_size(shard), 500u) << "the shard is partially written";
  EXPECT_TRUE(fs::exists(dir / "fired/3"));

  // Another rank's shard, and this rank's shard outside a staging directory: no kill.
  EXPECT_EQ(RunChildWriter(plan, 1, staging + "/shard_0.bin", payload, "", nullptr, ""), 0);
  EXPECT_EQ(RunChildWriter(plan, 0, staging + "/shard_0.bin", payload, "", nullptr, ""), 0);
  ASSERT_TRUE(MakeDirs(dir / "ckpt/step_00000010").ok());
  EXPECT_EQ(RunChildWriter(plan, 1, dir / "ckpt/step_00000010/shard_1.bin", payload, "", nullptr, ""),
            0);

  // Still armed, but fired before (the next incarnation): the save completes.
  status = RunChildWriter(plan, 1, shard, payload, payload, nullptr, "");
  EXPECT_EQ(status, 0) << "a kill_in_checkpoint hook fired twice";
  EXPECT_EQ(fs::file_size(shard), 2000u);
  Disarm(dir, "3");

  // Armed after the first write (bytes already in the file): killed before the next write.
  status = RunChildWriter(plan, 1, shard, std::string(300, 'y'), payload, &dir, "4");
  EXPECT_TRUE(KilledBySigkill(status)) << "wait status " << status;
  EXPECT_EQ(fs::file_size(shard), 300u);
  const std::string marker = ReadFile(dir / "fired/4");
  EXPECT_NE(marker.find("rank 1"), std::string::npos) << marker;
  EXPECT_NE(marker.find("kill_in_checkpoint"), std::string::npos) << marker;
}

// A RunLink that only hands the checkpointer a file system, and arms / disarms an io_error
// hook at given step boundaries (as the chaos runner would from outside).
class ChaosLink : public RunLink {
 public:
  ChaosLink(ChaosHooks& hooks, const TempDir& dir) : hooks_(hooks), dir_(dir) {}
  void SetStep(int64_t steps_done) override {
    if (steps_done == arm_at) Arm(dir_, "5");
    if (steps_done == disarm_at) Disarm(dir_, "5");
  }
  void SetPhase(TrainPhase) override {}
  bool TakeCheckpointRequest() override { return false; }
  bool StopRequested() override { return false; }
  CatalogSink* catalog() override { return &sink; }
  FileSystem* checkpoint_file_system() override { return hooks_.file_system(); }

  class Sink : public CatalogSink {
   public:
    Status Put(const CheckpointEntry& e) override {
      puts.push_back(e);
      return Status::Ok();
    }
    Status SetStatus(int64_t, CheckpointStatus, const std::string&) override { return Status::Ok(); }
    Status AddEvent(const std::string&, const std::string&) override { return Status::Ok(); }
    Result<CheckpointEntry> Get(int64_t) const override { return NotFound("test sink"); }
    std::vector<CheckpointEntry> puts;
  } sink;
  int64_t arm_at = -1, disarm_at = -1;

 private:
  ChaosHooks& hooks_;
  const TempDir& dir_;
};

TEST(ChaosHooks, TrainerKeepsTrainingThroughFailedSaves) {
  TempDir dir("chaos_hooks_train");
  const std::string plan = WritePlan(
      dir, R"({"hooks":[{"id":"5","kind":"io_error","rank":-1,"errno":"ENOSPC"}]})");
  auto hooks = ChaosHooks::FromPlanFile(plan, 0);
  ASSERT_TRUE(hooks.ok()) << hooks.status().ToString();
  ChaosLink link(**hooks, dir);
  link.arm_at = 2;     // the saves of steps 2 and 3 run while armed
  link.disarm_at = 4;
  const std::string root = dir / "ckpt";
  auto config = LoadConfig(
      Repo("configs/tiny.yaml"),
      {"train.steps=5", "train.out_dir=" + (dir / "run"), "train.threads=1",
       "train.log_interval=100", "train.eval_batches=1", "model.hidden_size=64",
       "checkpoint.dir=" + root, "checkpoint.interval_steps=1", "checkpoint.async=false",
       "checkpoint.at_end=false", "checkpoint.keep_last=10", "checkpoint.max_failures=3"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto trainer = Trainer::Create(*config, /*world=*/nullptr, &link);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto summary = (*trainer)->Run(stdout);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->steps, 5);

  auto committed = CommittedSteps(root);
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_EQ(*committed, std::vector<int64_t>({5, 4, 1}));
  std::vector<int64_t> failed;
  for (const CheckpointEntry& e : link.sink.puts) {
    if (e.status != CheckpointStatus::kFailed) continue;
    failed.push_back(e.step);
    EXPECT_NE(e.note.find("No space left on device"), std::string::npos) << e.note;
  }
  EXPECT_EQ(failed, std::vector<int64_t>({2, 3}));
  EXPECT_FALSE(fs::exists(root + "/" + StagingDirName(2))) << "a failed save left its staging";
  EXPECT_FALSE(fs::exists(root + "/" + StagingDirName(3)));
  EXPECT_TRUE(fs::exists(dir / "fired/5"));

  // The checkpoint committed before the faults reads back, every segment verified.
  auto reader = CheckpointReader::Open(root + "/" + StepDirName(1));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto verified = (*reader)->VerifyAll();
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_GT(*verified, 0u);
}

}  // namespace
}  // namespace tessera
