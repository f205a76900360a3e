// End to end: `tessera bench ckpt` on the tiny config's state (a few MB, one repeat, a 10 ms
// simulated step): every figure line is printed, the loaded state is bit-identical to the
// saved one, the scratch directory is gone afterwards, and bad flags are usage errors.
// links: tessera_train
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

TEST(BenchCkpt, TinyRunPrintsEveryFigureAndCleansUp) {
  TempDir dir("bench_ckpt");
  const CommandResult r = Tessera("bench ckpt --config " + Repo("configs/tiny.yaml") +
                                  " --repeats 1 --step-ms 10 --dir " + dir.str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"first saves", "write in 8 MiB chunks + fsync", "read back, cold",
                           "Save: copy, CRC, write, fsync, commit", "training stall",
                           "of the synchronous save; target <= 2%", "in WaitForStateCopy",
                           "of the disk's write bandwidth", "Open + VerifyAll, cold",
                           "Open + VerifyAll, from the page cache", "LoadCheckpointInto a fresh state",
                           "bit-identical to the saved one"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << "missing \"" << line << "\" in:\n" << r.output;
  }
  // The bench's own subdirectory of --dir is removed at the end.
  EXPECT_TRUE(std::filesystem::is_empty(dir.str())) << r.output;
}

TEST(BenchCkpt, HelpAndBadFlags) {
  const CommandResult help = Tessera("bench ckpt --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--step-ms"), std::string::npos) << help.output;
  EXPECT_NE(Tessera("bench --help").output.find("ckpt"), std::string::npos);
  EXPECT_EQ(Tessera("bench ckpt --repeats 0").exit_code, 2);
  EXPECT_EQ(Tessera("bench ckpt --bogus").exit_code, 2);
  EXPECT_EQ(Tessera("bench ckpt --config " + Repo("configs/no_such.yaml") + " --repeats 1").exit_code, 4);  // kExitBadInput
}

}  // namespace
}  // namespace tessera::testing
