// links: tessera_train
// tests/e2e/diverged_run_test.cc — a run that diverges (learning rate 10, the loss in the
// thousands) computes with subnormal floats flushed on the trainer thread and on every thread
// of the kernel pool, whatever mode the process started in: the trainer sets the pool up
// (runtime/kernels/cpu/threads.h), so no caller of the library can forget it. Its kernels'
// outputs on such values are counted in tests/kernels/diverged_values_test.cc. And `tessera
// bench diverged` shows the same thing from outside: subnormal gradients only in the diverged
// model computed under IEEE rules.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "runtime/core/float_mode.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/trainer.h"
#include "tests/e2e/cli_util.h"

namespace tessera {
namespace {

using testing::Repo;
using testing::TempDir;
using testing::Tessera;

TEST(DivergedRun, TrainerComputesWithSubnormalsFlushedOnEveryPoolThread) {
  // A process that never chose a mode (a library user, a test): IEEE everywhere.
  cpu::SetFlushSubnormals(false);
  SetFlushSubnormals(false);
  ASSERT_FALSE(FlushesSubnormals());

  TempDir dir("diverged");
  auto config = LoadConfig(Repo("configs/tiny.yaml"),
                           {"optimizer.lr=10", "train.steps=20", "train.threads=2",
                            "train.eval_interval=0", "train.eval_batches=1",
                            "train.out_dir=" + dir / "run"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  EXPECT_TRUE(FlushesSubnormals()) << "the trainer thread keeps subnormals";
  EXPECT_TRUE(cpu::PoolFlushesSubnormals()) << "a pool thread keeps subnormals";

  std::FILE* progress = std::tmpfile();
  ASSERT_NE(progress, nullptr);
  auto summary = (*trainer)->Run(progress);
  std::fclose(progress);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_GT(summary->final_loss, 100.0) << "the run did not diverge";
  EXPECT_TRUE(cpu::PoolFlushesSubnormals());
}

// The share of subnormal gradients the bench prints for one (weights, mode) row, or -1.
double SubnormalGradPercent(const std::string& output, const std::string& weights,
                            const std::string& mode) {
  std::smatch m;
  const std::regex row("\\n  " + weights + " +" + mode + "[^\\n]*? ([0-9.]+)%");
  return std::regex_search(output, m, row) ? std::stod(m[1]) : -1.0;
}

TEST(DivergedRun, BenchShowsSubnormalGradientsOnlyWhenTheyAreKept) {
  auto r = Tessera("bench diverged --steps 1 --threads 2 --diverge-steps 40");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(SubnormalGradPercent(r.output, "healthy", "flushed"), 0.0) << r.output;
  EXPECT_EQ(SubnormalGradPercent(r.output, "healthy", "IEEE"), 0.0) << r.output;
  EXPECT_EQ(SubnormalGradPercent(r.output, "diverged", "flushed"), 0.0) << r.output;
  EXPECT_GT(SubnormalGradPercent(r.output, "diverged", "IEEE"), 1.0) << r.output;
}

}  // namespace
}  // namespace tessera
