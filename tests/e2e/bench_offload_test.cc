// End to end: `tessera bench offload` on a tiny state (256 Ki parameters, one repeat, no
// training runs): the disk's bandwidth, the offloaded AdamW step's parameters/s with its share
// of the disk's bound, and the in-memory step are printed, the scratch directory (probe file,
// offload files) is gone afterwards, and bad flags are usage errors. No timing is asserted.
// links: tessera_train
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

TEST(BenchOffload, TinyRunPrintsEveryFigureAndCleansUp) {
  TempDir dir("bench_offload");
  const CommandResult r =
      Tessera("bench offload --params 262144 --repeats 1 --no-train --dir " + dir.str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"sequential write + fdatasync", "sequential read", "MB/s best",
                           "AdamW step, fp32 (m, v)", "AdamW step, bf16 + master",
                           "= 1 / (8 B / read + 8 B / write)", "of the best bound",
                           "target >= 80%", "waiting on the disk", "in memory", "resident state",
                           "summary"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << "missing \"" << line << "\" in:\n" << r.output;
  }
  EXPECT_EQ(r.output.find("training step"), std::string::npos) << r.output;  // --no-train
  // The bench's own subdirectory of --dir, with every file it wrote, is removed at the end.
  EXPECT_TRUE(std::filesystem::is_empty(dir.str())) << r.output;
}

TEST(BenchOffload, HelpAndBadFlags) {
  const CommandResult help = Tessera("bench offload --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--pool-mb"), std::string::npos) << help.output;
  EXPECT_NE(Tessera("bench --help").output.find("offload"), std::string::npos);
  EXPECT_EQ(Tessera("bench offload --bogus").exit_code, 2);
  EXPECT_EQ(Tessera("bench offload --params 0 --no-train").exit_code, 2);
  EXPECT_EQ(Tessera("bench offload --repeats 0 --no-train").exit_code, 2);
  TempDir dir("bench_offload_missing");
  EXPECT_EQ(Tessera("bench offload --no-train --dir " + dir.str() + "/no_such_dir").exit_code, 2);
}

}  // namespace
}  // namespace tessera::testing
