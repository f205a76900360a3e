// links: tessera_train
// tests/e2e/trainer_link_test.cc — the trainer's side of supervision (runtime/train/run_link.h)
// in one process, with a fake RunLink: stop after a step saves and commits that step and a
// resume finishes bit-identical to an uninterrupted run; a checkpoint request saves without
// stopping; SetStep / SetPhase are reported; catalog writes go to the link's sink, not to a
// local catalog.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "runtime/train/trainer.h"
#include "tests/e2e/cli_util.h"
#include "tests/fault/faulty_file_system.h"

namespace tessera {
namespace {

using testing::ReadFile;
using testing::Repo;
using testing::TempDir;

// Records every catalog write it is given.
class FakeCatalog : public CatalogSink {
 public:
  Status Put(const CheckpointEntry& e) override {
    puts.push_back(e);
    return Status::Ok();
  }
  Status SetStatus(int64_t step, CheckpointStatus status, const std::string&) override {
    statuses.push_back({step, status});
    return Status::Ok();
  }
  Status AddEvent(const std::string& kind, const std::string&) override {
    events.push_back(kind);
    return Status::Ok();
  }
  Result<CheckpointEntry> Get(int64_t step) const override { return NotFound("fake"); }

  std::vector<CheckpointEntry> puts;
  std::vector<std::pair<int64_t, CheckpointStatus>> statuses;
  std::vector<std::string> events;
};

// Records steps and phases; requests a checkpoint / a stop once a given step is reported.
class FakeLink : public RunLink {
 public:
  void SetStep(int64_t steps_done) override {
    steps.push_back(steps_done);
    if (steps_done == checkpoint_at) checkpoint_pending = true;
    if (stop_at >= 0 && steps_done >= stop_at) stop = true;
  }
  void SetPhase(TrainPhase phase) override { phases.insert(phase); }
  bool TakeCheckpointRequest() override {
    const bool r = checkpoint_pending;
    checkpoint_pending = false;
    return r;
  }
  bool StopRequested() override { return stop; }
  CatalogSink* catalog() override { return &sink; }
  FileSystem* checkpoint_file_system() override { return &file_system; }

  int64_t checkpoint_at = -1, stop_at = -1;
  bool checkpoint_pending = false, stop = false;
  std::vector<int64_t> steps;
  std::set<TrainPhase> phases;
  FakeCatalog sink;
  testing::FaultyFileSystem file_system;  // fails nothing unless a test arms it
};

Config TinyConfig(const std::string& out_dir, const std::string& ckpt_dir, int64_t steps,
                  bool resume = false) {
  std::vector<std::string> o = {"train.steps=" + std::to_string(steps), "train.out_dir=" + out_dir,
                                "train.threads=1", "train.log_interval=100",
                                "train.eval_batches=2", "model.hidden_size=64",
                                "checkpoint.interval_steps=0", "checkpoint.at_end=false"};
  if (!ckpt_dir.empty()) o.push_back("checkpoint.dir=" + ckpt_dir);
  if (resume) o.push_back("resume=auto");
  auto c = LoadConfig(Repo("configs/tiny.yaml"), o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

Result<TrainSummary> Train(const Config& c, RunLink* link) {
  ASSIGN_OR_RETURN(auto trainer, Trainer::Create(c, /*world=*/nullptr, link));
  return trainer->Run(stdout);
}

std::vector<int64_t> Committed(const std::string& root) {
  auto steps = CommittedSteps(root);
  EXPECT_TRUE(steps.ok()) << steps.status().ToString();
  return steps.ok() ? *steps : std::vector<int64_t>{};
}

TEST(TrainerLink, StopSavesCommitsAndResumeEndsBitIdentical) {
  TempDir dir("trainer_link_stop");
  // Reference: 8 uninterrupted steps, standalone.
  auto ref = Train(TinyConfig(dir / "ref", "", 8), nullptr);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  EXPECT_FALSE(ref->stopped);

  const std::string root = dir / "ckpt";
  FakeLink link;
  link.stop_at = 3;
  auto stopped = Train(TinyConfig(dir / "run", root, 8), &link);
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_TRUE(stopped->stopped);
  EXPECT_EQ(stopped->steps, 3);
  EXPECT_EQ(Committed(root), std::vector<int64_t>({3}));
  EXPECT_FALSE(std::filesystem::exists(dir / "run/model.safetensors"));  // not a finished run
  // The coordinator's catalog writes went to the link: writing, then committed, for step 3.
  ASSERT_GE(link.sink.puts.size(), 2u);
  EXPECT_EQ(link.sink.puts.front().step, 3);
  EXPECT_EQ(link.sink.puts.front().status, CheckpointStatus::kWriting);
  EXPECT_EQ(link.sink.puts.back().step, 3);
  EXPECT_EQ(link.sink.puts.back().status, CheckpointStatus::kCommitted);
  EXPECT_FALSE(std::filesystem::exists(root + "/catalog")) << "a supervised run opened a catalog";

  FakeLink resumed_link;
  auto resumed = Train(TinyConfig(dir / "run", root, 8, /*resume=*/true), &resumed_link);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_FALSE(resumed->stopped);
  EXPECT_EQ(resumed->steps, 5);
  EXPECT_EQ(resumed_link.steps, std::vector<int64_t>({3, 4, 5, 6, 7, 8}));
  EXPECT_FALSE(std::filesystem::exists(root + "/catalog"));
  const std::string a = ReadFile(dir / "ref/model.safetensors");
  const std::string b = ReadFile(dir / "run/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "stop + resume changed the final weights";
}

// The run's final checkpoint (at_end) is its last word: when it cannot be committed, the run
// has not finished — Run returns the error (exit 1: a restart resumes and saves again) and the
// final weights are not exported as if all had gone well.
TEST(TrainerLink, AFinalCheckpointThatFailsFailsTheRun) {
  TempDir dir("trainer_link_final");
  const std::string root = dir / "ckpt";
  Config c = TinyConfig(dir / "run", root, 3);
  c.checkpoint.at_end = true;
  FakeLink link;
  link.file_system.fail_write_at = 1;  // the final save is the only one: its first write fails
  auto s = Train(c, &link);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kIoError) << s.status().ToString();
  EXPECT_NE(s.status().message().find("the final checkpoint (step 3) was not committed"),
            std::string::npos) << s.status().ToString();
  EXPECT_TRUE(Committed(root).empty());
  EXPECT_FALSE(std::filesystem::exists(dir / "run/model.safetensors"));
}

TEST(TrainerLink, CheckpointRequestSavesAndTheRunGoesOn) {
  TempDir dir("trainer_link_ckpt");
  const std::string root = dir / "ckpt";
  FakeLink link;
  link.checkpoint_at = 2;
  auto s = Train(TinyConfig(dir / "run", root, 4), &link);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->stopped);
  EXPECT_EQ(s->steps, 4);
  EXPECT_EQ(Committed(root), std::vector<int64_t>({2}));  // no periodic or final save configured
  EXPECT_TRUE(std::filesystem::exists(dir / "run/model.safetensors"));
  bool committed_put = false;
  for (const CheckpointEntry& e : link.sink.puts) {
    committed_put |= e.step == 2 && e.status == CheckpointStatus::kCommitted;
  }
  EXPECT_TRUE(committed_put);
  EXPECT_FALSE(std::filesystem::exists(root + "/catalog"));
}

TEST(TrainerLink, StepsAndPhasesAreReported) {
  TempDir dir("trainer_link_phases");
  FakeLink link;
  auto s = Train(TinyConfig(dir / "run", dir / "ckpt", 4), &link);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(link.steps, std::vector<int64_t>({0, 1, 2, 3, 4}));
  for (TrainPhase p : {TrainPhase::kForward, TrainPhase::kBackward, TrainPhase::kOptimizer,
                       TrainPhase::kCheckpoint, TrainPhase::kEval, TrainPhase::kIdle}) {
    EXPECT_TRUE(link.phases.count(p)) << "phase " << static_cast<int>(p) << " never reported";
  }
}

TEST(TrainerLink, StopWithoutCheckpointDirStopsWithoutSaving) {
  TempDir dir("trainer_link_nodir");
  FakeLink link;
  link.stop_at = 2;
  auto s = Train(TinyConfig(dir / "run", "", 6), &link);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->stopped);
  EXPECT_EQ(s->steps, 2);
  EXPECT_TRUE(link.sink.puts.empty());
}

}  // namespace
}  // namespace tessera
