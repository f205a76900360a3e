// links: tessera_checkpoint
// tests/unit/checkpoint_file_names_test.cc — the names of a checkpoint root, spelled once
// (checkpoint/file_names.h): the format on disk they pin, and the parsers that recognise only
// their canonical spelling.
#include "checkpoint/file_names.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(CheckpointFileNames, SpellTheOnDiskFormat) {
  EXPECT_EQ(StepDirName(100), "step_00000100");
  EXPECT_EQ(StagingDirName(100), "step_00000100.tmp");
  EXPECT_EQ(CorruptDirName(7), "step_00000007.corrupt");
  EXPECT_EQ(ShardFileName(3), "shard_3.bin");
  EXPECT_EQ(kManifestFileName, "manifest.json");
  EXPECT_EQ(kCatalogDirName, "catalog");
}

TEST(CheckpointFileNames, ManifestPathJoinsWithOneSlash) {
  EXPECT_EQ(ManifestPath("ck/step_00000001"), "ck/step_00000001/manifest.json");
  EXPECT_EQ(ManifestPath("ck/step_00000001/"), "ck/step_00000001/manifest.json");
  EXPECT_EQ(ManifestPath(""), "manifest.json");
}

TEST(CheckpointFileNames, StepNamesParseOnlyInTheirCanonicalSpelling) {
  EXPECT_EQ(ParseStepDirName("step_00000042"), 42);
  EXPECT_EQ(ParseStepDirName("step_123456789"), 123456789);
  EXPECT_EQ(ParseStepDirName("step_42"), -1);
  EXPECT_EQ(ParseStepDirName("step_"), -1);
  EXPECT_EQ(ParseStepDirName("step_0000004x"), -1);
  EXPECT_EQ(ParseStepDirName("stepx00000042"), -1);
}

TEST(CheckpointFileNames, SuffixedNamesParseTheirStep) {
  EXPECT_EQ(ParseSuffixedStepDirName("step_00000042.corrupt", kCorruptSuffix), 42);
  EXPECT_EQ(ParseSuffixedStepDirName(StagingDirName(9), kStagingSuffix), 9);
  EXPECT_EQ(ParseSuffixedStepDirName("step_00000042.tmpx", kStagingSuffix), -1);
  EXPECT_EQ(ParseSuffixedStepDirName("step_42.tmp", kStagingSuffix), -1);
  EXPECT_EQ(ParseSuffixedStepDirName(".tmp", kStagingSuffix), -1);
  EXPECT_EQ(ParseSuffixedStepDirName("step_00000042", kCorruptSuffix), -1);
}

}  // namespace
}  // namespace tessera
