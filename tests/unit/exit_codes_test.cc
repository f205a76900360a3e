// links: tessera_core
// tests/unit/exit_codes_test.cc — the one Status -> exit code table and its phases, and the
// words for final codes (runtime/core/exit_codes.h).
#include "runtime/core/exit_codes.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(ExitCodes, RunTableMapsEachStatusToWhatARestartCanDo) {
  EXPECT_EQ(ExitCodeFor(Status::Ok()), kExitOk);
  EXPECT_EQ(ExitCodeFor(InvalidArgument("x")), kExitBadConfig);
  EXPECT_EQ(ExitCodeFor(NotFound("x")), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(DataLoss("x")), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(Status(StatusCode::kTimeout, "x")), kExitCommTimeout);
  EXPECT_EQ(ExitCodeFor(CorruptCheckpoint("x")), kExitCorruptCheckpoint);
  EXPECT_EQ(ExitCodeFor(IoError("x")), kExitRestartable);
  EXPECT_EQ(ExitCodeFor(Internal("x")), kExitRestartable);
  EXPECT_EQ(ExitCodeFor(IoError("x"), ExitPhase::kRun), kExitRestartable);
}

TEST(ExitCodes, ConfigPhaseBlamesTheConfigForMissingOrInvalidValues) {
  EXPECT_EQ(ExitCodeFor(InvalidArgument("x"), ExitPhase::kConfig), kExitBadConfig);
  EXPECT_EQ(ExitCodeFor(NotFound("x"), ExitPhase::kConfig), kExitBadConfig);
  EXPECT_EQ(ExitCodeFor(DataLoss("x"), ExitPhase::kConfig), kExitBadInput);
}

TEST(ExitCodes, InputPhaseBlamesTheInputForAllButRestartableFailures) {
  EXPECT_EQ(ExitCodeFor(InvalidArgument("x"), ExitPhase::kInput), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(NotFound("x"), ExitPhase::kInput), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(Internal("x"), ExitPhase::kInput), kExitBadInput);
}

TEST(ExitCodes, TimeoutsIoErrorsAndCorruptCheckpointsKeepTheirCodeInEveryLoadingPhase) {
  for (ExitPhase phase : {ExitPhase::kConfig, ExitPhase::kInput}) {
    EXPECT_EQ(ExitCodeFor(Status(StatusCode::kTimeout, "x"), phase), kExitCommTimeout);
    EXPECT_EQ(ExitCodeFor(IoError("x"), phase), kExitRestartable);
    EXPECT_EQ(ExitCodeFor(CorruptCheckpoint("x"), phase), kExitCorruptCheckpoint);
  }
}

TEST(ExitCodes, DamagedCheckpointBytesMeanPickAnOlderOne) {
  EXPECT_EQ(ExitCodeFor(DataLoss("x"), ExitPhase::kCheckpointVerify), kExitCorruptCheckpoint);
  EXPECT_EQ(ExitCodeFor(DataLoss("x"), ExitPhase::kCheckpointExport), kExitCorruptCheckpoint);
  EXPECT_EQ(ExitCodeFor(NotFound("x"), ExitPhase::kCheckpointVerify), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(IoError("x"), ExitPhase::kCheckpointVerify), kExitRestartable);
  EXPECT_EQ(ExitCodeFor(IoError("x"), ExitPhase::kCheckpointExport), kExitBadInput);
}

TEST(ExitCodes, SupervisorFailuresAreBadConfigOrRestartable) {
  EXPECT_EQ(ExitCodeFor(InvalidArgument("x"), ExitPhase::kSupervise), kExitBadConfig);
  EXPECT_EQ(ExitCodeFor(NotFound("x"), ExitPhase::kSupervise), kExitRestartable);
  EXPECT_EQ(ExitCodeFor(IoError("x"), ExitPhase::kSupervise), kExitRestartable);
}

TEST(ExitCodes, OkIsOkInEveryPhase) {
  for (ExitPhase phase : {ExitPhase::kRun, ExitPhase::kConfig, ExitPhase::kInput, ExitPhase::kCheckpointVerify,
                          ExitPhase::kCheckpointExport, ExitPhase::kSupervise}) {
    EXPECT_EQ(ExitCodeFor(Status::Ok(), phase), kExitOk);
  }
}

TEST(ExitCodes, FinalCodesHaveAReasonAndAReportOutcome) {
  EXPECT_TRUE(IsFinalExitCode(kExitBadConfig));
  EXPECT_FALSE(IsFinalExitCode(kExitCommTimeout));
  EXPECT_STREQ(FinalExitReason(kExitCorruptCheckpoint), "no usable checkpoint");
  EXPECT_STREQ(FinalOutcome(kExitCorruptCheckpoint), "failed");
  EXPECT_STREQ(FinalOutcome(kExitNonFinite), "diverged");
  EXPECT_STREQ(FinalOutcome(kExitBadConfig), "bad_config");
  EXPECT_STREQ(FinalOutcome(kExitBadInput), "bad_config");
}

}  // namespace
}  // namespace tessera
