// links: tessera_train
// tests/e2e/integrity_test.cc — the real `tessera` binary against checkpoints damaged by hand,
// training that goes non-finite, signals from outside and outputs aimed at their own inputs.
// Each case is what a user or an unlucky disk does; each must end with the documented exit
// code and message and lose nothing that was committed:
//   - an edited or bit-flipped manifest, one that is a FIFO, a directory or a link, a file
//     named like a step, a state damaged behind a valid checksum, a state that does not fit
//     the run, init_from a root whose newest checkpoint is damaged: each falls back;
//   - a run that goes NaN stops with exit 10 and its last healthy checkpoint survives
//     retention; on_nonfinite: skip is bounded; the guard's state resumes exactly;
//   - SIGTERM saves at the next step and exits 7 (and the resume ends bit-identical to an
//     uninterrupted run), a second SIGTERM stops at once, SIGUSR1 checkpoints and goes on;
//   - command-line mistakes exit 2, an out_dir that is a file exits 4, exports refuse their
//     own inputs and checkpoint roots, tessera launch refuses a run without checkpoint.dir.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "checkpoint/manifest.h"
#include "runtime/core/exit_codes.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class Integrity : public ::testing::Test {
 protected:
  TempDir dir_{"integrity"};
  const std::string root_ = dir_ / "ckpt";

  // A short tiny-config run with a checkpoint every 4 steps (no sgemm measurement).
  std::string Args(const std::string& out, int64_t steps, const std::string& extra = "",
                   const std::string& root = "") const {
    return "train " + Repo("configs/tiny.yaml") + " --set train.steps=" + std::to_string(steps) +
           " --set train.out_dir=" + out + " --set checkpoint.dir=" + (root.empty() ? root_ : root) +
           " --set checkpoint.interval_steps=4 --set train.log_interval=1 --set train.eval_batches=1"
           " --set train.eval_interval=0 --set train.peak_gflops=1 --set train.threads=1 " + extra;
  }
  CommandResult Train(int64_t steps, const std::string& extra = "") {
    return Tessera(Args(dir_ / "run", steps, extra));
  }
  CommandResult Resume(int64_t steps, const std::string& extra = "") {
    return Train(steps, "--set resume=auto " + extra);
  }
  std::string Step(int64_t step) const {
    char name[32];
    std::snprintf(name, sizeof name, "/step_%08lld", static_cast<long long>(step));
    return root_ + name;
  }
  // Steps 4, 8 and 12 committed.
  void ThreeCheckpoints() {
    CommandResult r = Train(12);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_TRUE(fs::exists(Step(12) + "/manifest.json"));
  }
  // The weights of an uninterrupted `steps`-step run in another directory.
  std::string ReferenceWeights(int64_t steps, const std::string& extra = "") {
    const std::string out = dir_ / "reference";
    fs::remove_all(out);
    fs::remove_all(dir_ / "reference_ckpt");
    CommandResult r = Tessera(Args(out, steps, extra, dir_ / "reference_ckpt"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return ReadFile(out + "/model.safetensors");
  }
};

// ---- damaged checkpoint metadata -------------------------------------------------------------

TEST_F(Integrity, AnEditedManifestIsRefusedByVerifyAndResumeFallsBack) {
  ThreeCheckpoints();
  const std::string manifest = Step(12) + "/manifest.json";
  std::string text = ReadFile(manifest);
  const size_t at = text.find("\"data_index\":");
  ASSERT_NE(at, std::string::npos);
  text[at + 13] = text[at + 13] == '1' ? '2' : '1';  // one digit of the data position
  WriteFile(manifest, text);
  CommandResult v = Tessera("ckpt verify " + root_ + " --step 12");
  EXPECT_EQ(v.exit_code, kExitCorruptCheckpoint) << v.output;
  EXPECT_TRUE(Contains(v.output, "metadata checksum mismatch")) << v.output;

  CommandResult r = Resume(16);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "step_00000012 is unusable")) << r.output;
  EXPECT_TRUE(Contains(r.output, "metadata checksum mismatch")) << r.output;
  EXPECT_TRUE(Contains(r.output, "falling back to step 8")) << r.output;
  EXPECT_TRUE(Contains(r.output, "resumed at step 8 of 16")) << r.output;
  EXPECT_TRUE(fs::exists(Step(12) + ".corrupt"));
  // Falling back and retraining ends where an uninterrupted run ends, bit for bit.
  EXPECT_TRUE(ReadFile(dir_ / "run/model.safetensors") == ReferenceWeights(16)) << "weights differ";
}

// Sets `key` of the environment fingerprint in a committed manifest to `value`, resealed:
// what a checkpoint saved by another build or on another host holds.
void SetManifestEnvironment(const std::string& manifest, const std::string& key,
                            const std::string& value) {
  auto json = UnsealManifestJson(ReadFile(manifest), manifest);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  std::string text = *json;
  const std::string field = "\"" + key + "\":\"";
  const size_t at = text.find(field);
  ASSERT_NE(at, std::string::npos) << key;
  const size_t begin = at + field.size(), end = text.find('"', begin);
  text.replace(begin, end - begin, value);
  WriteFile(manifest, SealManifestJson(text));
}

// The environment a checkpoint was saved in is compared on resume: differences are printed;
// under --strict-env a checkpoint of other code is refused (exit 4, nothing set aside, no
// fallback), while one saved on another host loads.
TEST_F(Integrity, AnotherEnvironmentIsPrintedOnResumeAndRefusedUnderStrictEnv) {
  ThreeCheckpoints();
  for (int64_t step : {4, 8, 12}) {
    SetManifestEnvironment(Step(step) + "/manifest.json", "git_commit", "0000000000ab");
    SetManifestEnvironment(Step(step) + "/manifest.json", "hostname", "another-host");
  }
  CommandResult strict = Resume(16, "--strict-env");
  EXPECT_EQ(strict.exit_code, kExitBadInput) << strict.output;
  EXPECT_TRUE(Contains(strict.output, "train.strict_env: " + Step(12) + " was saved in another "
                                      "environment (git_commit: 0000000000ab -> ")) << strict.output;
  EXPECT_FALSE(Contains(strict.output, "hostname: another-host")) << strict.output;  // placement
  EXPECT_TRUE(fs::exists(Step(12) + "/manifest.json"));  // not damage: left as it was
  EXPECT_FALSE(fs::exists(Step(12) + ".corrupt"));

  CommandResult r = Resume(16);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "environment differs from " + Step(12) + "'s (the run that saved "
                                 "it): git_commit: 0000000000ab -> ")) << r.output;
  EXPECT_TRUE(Contains(r.output, "hostname: another-host -> ")) << r.output;
  EXPECT_TRUE(Contains(r.output, "resumed at step 12 of 16")) << r.output;

  // Saved on another host by the same build: strict loads it and says where it ran.
  SetManifestEnvironment(Step(16) + "/manifest.json", "hostname", "another-host");
  CommandResult moved = Resume(20, "--strict-env");
  ASSERT_EQ(moved.exit_code, 0) << moved.output;
  EXPECT_TRUE(Contains(moved.output, "(the run that saved it, where it ran only): hostname: "
                                     "another-host -> ")) << moved.output;
  EXPECT_TRUE(Contains(moved.output, "resumed at step 16 of 20")) << moved.output;
}

TEST_F(Integrity, ManifestsThatAreAFifoADirectoryOrALinkFallBackWithoutHanging) {
  ThreeCheckpoints();
  const std::string manifest = Step(12) + "/manifest.json";
  const std::string original = ReadFile(manifest);
  struct Variant {
    const char* name;
    std::function<void()> make;
  };
  const Variant variants[] = {
      {"a FIFO", [&] { ASSERT_EQ(::mkfifo(manifest.c_str(), 0600), 0); }},
      {"a directory", [&] { fs::create_directory(manifest); }},
      {"a symbolic link", [&] { fs::create_symlink(Step(8) + "/manifest.json", manifest); }},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    fs::remove_all(Step(12) + ".corrupt");
    fs::remove(manifest);
    v.make();
    CommandResult r = RunCommand("timeout 120 " + std::string(TESSERA_BINARY) + " " +
                                 Args(dir_ / "run", 12, "--set resume=auto"));
    ASSERT_EQ(r.exit_code, 0) << r.output;  // 124 would be the timeout: a hang
    EXPECT_TRUE(Contains(r.output, "step_00000012 is unusable")) << r.output;
    EXPECT_TRUE(Contains(r.output, "not a regular file")) << r.output;
    EXPECT_TRUE(Contains(r.output, "resumed at step 8 of 12")) << r.output;
    // Put step 12 back for the next variant.
    fs::remove_all(Step(12));
    fs::rename(Step(12) + ".corrupt", Step(12));
    fs::remove_all(manifest);
    WriteFile(manifest, original);
  }
}

TEST_F(Integrity, AFileNamedLikeAStepIsNotACheckpoint) {
  ThreeCheckpoints();
  WriteFile(root_ + "/step_00000099", "not a checkpoint");
  CommandResult r = Resume(14);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "not considered (unusable): step_00000099 (a regular file)"))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "resumed at step 12 of 14")) << r.output;
  EXPECT_TRUE(fs::is_regular_file(root_ + "/step_00000099"));  // left alone
  // Only a stray name and nothing committed: no fresh start over it.
  fs::remove_all(root_);
  fs::create_directories(root_);
  WriteFile(root_ + "/step_00000004", "x");
  r = Resume(4);
  EXPECT_EQ(r.exit_code, kExitCorruptCheckpoint) << r.output;
  EXPECT_TRUE(Contains(r.output, "no usable checkpoint")) << r.output;
}

// Behind a valid metadata checksum (a buggy writer, or an edit that also recomputed it), a
// state no run could have saved is damage (set aside); a healthy state that this run cannot
// continue from is skipped and left in place.
TEST_F(Integrity, DamagedStateIsSetAsideAndStateThatDoesNotFitIsSkipped) {
  ThreeCheckpoints();
  const std::string manifest = Step(12) + "/manifest.json";
  const std::string original = ReadFile(manifest);
  auto edit = [&](const std::string& from, const std::string& to) {
    Result<std::string> json = UnsealManifestJson(original, manifest);
    ASSERT_TRUE(json.ok()) << json.status().ToString();
    std::string text = *json;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    WriteFile(manifest, SealManifestJson(text));
  };
  edit("\"state\":{\"step\":12", "\"state\":{\"step\":13");
  CommandResult v = Tessera("ckpt verify " + root_ + " --step 12");
  EXPECT_EQ(v.exit_code, kExitCorruptCheckpoint) << v.output;
  EXPECT_TRUE(Contains(v.output, "state.step: 13 disagrees with the manifest's step 12")) << v.output;
  CommandResult r = Resume(12);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "state.step: 13 disagrees")) << r.output;
  EXPECT_TRUE(fs::exists(Step(12) + ".corrupt"));

  // Healthy, but saved beyond this run's train.steps: skipped, left in place.
  fs::remove_all(Step(12) + ".corrupt");
  ASSERT_EQ(Train(12, "--set resume=auto --set train.steps=12").exit_code, 0);
  ASSERT_TRUE(fs::exists(Step(12) + "/manifest.json"));
  r = Resume(10);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "beyond this run's train.steps=10")) << r.output;
  EXPECT_TRUE(Contains(r.output, "left in place")) << r.output;
  EXPECT_TRUE(Contains(r.output, "resumed at step 8 of 10")) << r.output;
  EXPECT_TRUE(fs::exists(Step(12) + "/manifest.json"));
  EXPECT_FALSE(fs::exists(Step(12) + ".corrupt"));
  // None fits: exit 5, saying why each was passed over.
  r = Resume(3);
  EXPECT_EQ(r.exit_code, kExitCorruptCheckpoint) << r.output;
  EXPECT_TRUE(Contains(r.output, "step 4: ")) << r.output;
}

TEST_F(Integrity, InitFromARootWhoseNewestIsDamagedFallsBackAndLeavesItAlone) {
  ThreeCheckpoints();
  // Flip one byte of the newest checkpoint's first shard.
  const std::string shard = Step(12) + "/shard_0.bin";
  std::string bytes = ReadFile(shard);
  bytes[100] = static_cast<char>(bytes[100] ^ 0x40);
  WriteFile(shard, bytes);
  const std::string out = dir_ / "finetune";
  CommandResult r = Tessera("train " + Repo("configs/tiny.yaml") + " --set train.steps=2 --set train.out_dir=" +
                            out + " --set init_from=" + root_ + " --set train.peak_gflops=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "step_00000012 is unusable")) << r.output;
  EXPECT_TRUE(Contains(r.output, "left in place (not this run's checkpoint root)")) << r.output;
  EXPECT_TRUE(Contains(r.output, "init_from: weights from " + Step(8))) << r.output;
  EXPECT_TRUE(fs::exists(Step(12) + "/manifest.json"));  // another run's root: untouched
  // Naming the damaged step itself: no fallback, exit 5.
  r = Tessera("train " + Repo("configs/tiny.yaml") + " --set train.steps=2 --set train.out_dir=" + out +
              " --set init_from=" + Step(12) + " --set train.peak_gflops=1");
  EXPECT_EQ(r.exit_code, kExitCorruptCheckpoint) << r.output;
}

// ---- non-finite training ---------------------------------------------------------------------

TEST_F(Integrity, NonFiniteTrainingStopsWithExit10AndKeepsTheLastHealthyCheckpoint) {
  // lr 1e9 makes step 1's update explode; step 2's loss is NaN. A checkpoint after every step
  // and keep_last 1: the healthy step-1 checkpoint is the only one, and must stay.
  CommandResult r = Train(20, "--set optimizer.lr=1e9 --set schedule.warmup_steps=0 "
                              "--set checkpoint.interval_steps=1 --set checkpoint.keep_last=1");
  EXPECT_EQ(r.exit_code, kExitNonFinite) << r.output;
  EXPECT_TRUE(Contains(r.output, "step 2: loss ")) << r.output;
  EXPECT_TRUE(Contains(r.output, "(train.on_nonfinite: stop): stopped before applying it")) << r.output;
  EXPECT_TRUE(Contains(r.output, "newest committed checkpoint: step 1")) << r.output;
  EXPECT_TRUE(fs::exists(Step(1) + "/manifest.json"));
  EXPECT_FALSE(fs::exists(Step(2)));
  EXPECT_EQ(Tessera("ckpt verify " + root_).exit_code, 0);
  EXPECT_FALSE(fs::exists(dir_ / "run/model.safetensors"));  // nothing exported
  EXPECT_TRUE(Contains(ReadFile(dir_ / "run/metrics.jsonl"), "\"nonfinite\":true"));
}

TEST_F(Integrity, SkippingNonFiniteStepsIsBounded) {
  CommandResult r = Train(20, "--set optimizer.lr=1e9 --set schedule.warmup_steps=0 "
                              "--set train.on_nonfinite=skip --set train.max_nonfinite_skips=3");
  EXPECT_EQ(r.exit_code, kExitNonFinite) << r.output;
  EXPECT_TRUE(Contains(r.output, "update skipped (1 in a row, at most 3)")) << r.output;
  EXPECT_TRUE(Contains(r.output, "update skipped (3 in a row, at most 3)")) << r.output;
  EXPECT_TRUE(Contains(r.output, "4 non-finite steps in a row, more than train.max_nonfinite_skips=3"))
      << r.output;
}

// Loss-spike detection with a window the run fills quickly and a threshold it crosses often:
// its skip decisions depend on the window, which the checkpoint saves, so a resumed run skips
// exactly the steps an uninterrupted one skips.
TEST_F(Integrity, SpikeDetectionStateResumesExactly) {
  // A large learning rate without warmup: the loss jumps around enough to cross z = 0.5.
  const std::string spikes = "--set train.spike_zscore=0.5 --set train.spike_window=3 "
                             "--set train.spike_action=skip --set optimizer.lr=0.03 "
                             "--set schedule.warmup_steps=0 --set schedule.decay=constant";
  ASSERT_EQ(Train(8, spikes).exit_code, 0);
  CommandResult r = Resume(16, spikes);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "standard deviations above the mean")) << r.output;
  EXPECT_TRUE(ReadFile(dir_ / "run/model.safetensors") == ReferenceWeights(16, spikes))
      << "weights differ";
}

// ---- preemption without a supervisor ---------------------------------------------------------

// Waits until the run has written metrics for at least `step` steps.
bool WaitForStep(const std::string& metrics, int64_t step, BackgroundRun& run) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const std::string needle = "{\"step\":" + std::to_string(step) + ",";
  while (std::chrono::steady_clock::now() < deadline && run.Running()) {
    if (Contains(ReadFile(metrics), needle)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST_F(Integrity, SigtermSavesAtTheNextStepExits7AndTheResumeIsBitIdentical) {
  BackgroundRun run(Args(dir_ / "run", 40, "--set checkpoint.interval_steps=0"), dir_ / "train.log");
  ASSERT_TRUE(WaitForStep(dir_ / "run/metrics.jsonl", 6, run)) << run.Output();
  ASSERT_TRUE(run.Signal(SIGTERM));
  EXPECT_EQ(run.Wait(std::chrono::seconds(120)), kExitStopped) << run.Output();
  const std::string out = run.Output();
  EXPECT_TRUE(Contains(out, "on SIGTERM (checkpoint step")) << out;
  EXPECT_TRUE(Contains(out, "committed)")) << out;
  CommandResult r = Resume(40, "--set checkpoint.interval_steps=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "resumed at step")) << r.output;
  EXPECT_TRUE(ReadFile(dir_ / "run/model.safetensors") ==
              ReferenceWeights(40, "--set checkpoint.interval_steps=0"))
      << "weights differ";
}

TEST_F(Integrity, ASecondSigtermStopsAtOnce) {
  // Steps of about a second: the second signal lands inside the step the first one arrived in
  // (after the first was handled: two pending SIGTERMs would merge), so the stop's save never
  // starts.
  BackgroundRun run(Args(dir_ / "run", 100000, "--set train.micro_batch_size=512"), dir_ / "train.log");
  ASSERT_TRUE(WaitForStep(dir_ / "run/metrics.jsonl", 1, run)) << run.Output();
  ASSERT_TRUE(run.Signal(SIGTERM));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(run.Signal(SIGTERM));
  EXPECT_EQ(run.Wait(std::chrono::seconds(60)), 128 + SIGTERM) << run.Output();
}

TEST_F(Integrity, Sigusr1CheckpointsNowAndTrainingGoesOn) {
  BackgroundRun run(Args(dir_ / "run", 60, "--set checkpoint.interval_steps=0 --set checkpoint.at_end=false"),
                    dir_ / "train.log");
  ASSERT_TRUE(WaitForStep(dir_ / "run/metrics.jsonl", 3, run)) << run.Output();
  ASSERT_TRUE(run.Signal(SIGUSR1));
  EXPECT_EQ(run.Wait(std::chrono::seconds(120)), 0) << run.Output();
  EXPECT_TRUE(Contains(run.Output(), "committed")) << run.Output();
  bool any = false;
  for (const auto& e : fs::directory_iterator(root_)) any |= e.path().filename().string().rfind("step_", 0) == 0;
  EXPECT_TRUE(any);
  EXPECT_TRUE(fs::exists(dir_ / "run/model.safetensors"));  // the run finished
}

// ---- exit codes and outputs ------------------------------------------------------------------

TEST_F(Integrity, CommandLineMistakesExit2) {
  EXPECT_EQ(Tessera("train").exit_code, kExitUsage);
  EXPECT_EQ(Tessera("train " + Repo("configs/tiny.yaml") + " " + Repo("configs/tiny.yaml")).exit_code,
            kExitUsage);
  EXPECT_EQ(Tessera("eval").exit_code, kExitUsage);
  EXPECT_EQ(Tessera("export --init-from x --out y").exit_code, kExitUsage);
}

TEST_F(Integrity, AnOutDirThatIsAFileIsBadInput) {
  WriteFile(dir_ / "taken", "a file");
  CommandResult r = Tessera("train " + Repo("configs/tiny.yaml") + " --set train.steps=1 --set train.out_dir=" +
                            (dir_ / "taken"));
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  EXPECT_TRUE(Contains(r.output, "train.out_dir")) << r.output;
  EXPECT_TRUE(Contains(r.output, "a file is in the way")) << r.output;
  r = Tessera("train " + Repo("configs/tiny.yaml") + " --set train.steps=1 --set train.out_dir=" +
              (dir_ / "taken/below"));
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
}

TEST_F(Integrity, ExportsRefuseTheirOwnInputsAndCheckpointRoots) {
  ThreeCheckpoints();
  const std::string weights = dir_ / "run/model.safetensors";
  const std::string before = ReadFile(weights);
  CommandResult r = Tessera("export " + Repo("configs/tiny.yaml") + " --init-from " + weights + " --out " + weights);
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  EXPECT_TRUE(Contains(r.output, "is one of this command's inputs")) << r.output;
  EXPECT_TRUE(ReadFile(weights) == before);
  r = Tessera("export " + Repo("configs/tiny.yaml") + " --init-from " + weights + " --out " + root_ + "/w.safetensors");
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  EXPECT_TRUE(Contains(r.output, "inside the checkpoint root")) << r.output;
  r = Tessera("ckpt export " + root_ + " --out " + Step(12) + "/w.safetensors");
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  r = Tessera("ckpt export " + root_ + " --out " + (dir_ / "w.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // A model directory where a file is, or a directory that holds something: bad input too.
  WriteFile(dir_ / "a_file", "x");
  r = Tessera("export " + Repo("configs/tiny.yaml") + " --init-from " + weights + " --out " + (dir_ / "a_file"));
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  EXPECT_TRUE(Contains(r.output, "exists and is not a directory")) << r.output;
  r = Tessera("ckpt export " + root_ + " --out " + (dir_ / "run"));
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  EXPECT_TRUE(Contains(r.output, "exists and is not empty")) << r.output;
  r = Tessera("data tokenize --input " + (dir_ / "run") + " --out " + (dir_ / "tokens"));
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  EXPECT_TRUE(Contains(r.output, "not a regular file")) << r.output;
  // A run's init_from that is the very file the run replaces at its start.
  r = Tessera("train " + Repo("configs/tiny.yaml") + " --set train.steps=1 --set train.out_dir=" +
              (dir_ / "run") + " --set init_from=" + weights);
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  EXPECT_TRUE(Contains(r.output, "is this run's own output")) << r.output;
  EXPECT_TRUE(ReadFile(weights) == before);
}

TEST_F(Integrity, LaunchWithoutACheckpointDirSaysItNeedsOne) {
  CommandResult r = Tessera("launch -n 1 " + Repo("configs/tiny.yaml") + " --set train.steps=1");
  EXPECT_EQ(r.exit_code, kExitBadConfig) << r.output;
  EXPECT_TRUE(Contains(r.output, "checkpoint.dir is not set, and tessera launch needs one")) << r.output;
}

}  // namespace
}  // namespace tessera::testing
